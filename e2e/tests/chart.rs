//! The Helm chart and the images, checked without a cluster: lint, rendering,
//! RBAC without wildcards and in step with the operators, the values schema,
//! monitoring objects, and the images' pinned bundle list. No cluster needed.

use kube::api::DynamicObject;
use kubeflow_e2e::demo::COMPONENTS;
use kubeflow_e2e::{repo_root, run_tool};

use kubeflow_e2e::chart::{dir as chart, names as kinds, template};

#[test]
fn the_chart_lints_strictly_and_renders_one_set_per_operator() {
    let chart = chart();
    for extra in [
        &[][..],
        &[
            "--set",
            "monitoring.serviceMonitor.enabled=true",
            "--set",
            "monitoring.prometheusRule.enabled=true",
        ][..],
    ] {
        let mut args = vec!["lint", "--strict", &chart, "--kube-version", "1.36.3"];
        args.extend_from_slice(extra);
        let out = run_tool("helm", &args);
        assert!(
            out.status.success(),
            "helm lint: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let all = template(&[]).expect("renders");
    for kind in ["ServiceAccount", "Lease", "Deployment", "Service"] {
        assert_eq!(kinds(&all, kind).len(), COMPONENTS.len(), "{kind}");
    }
    // Per operator: its ClusterRole, a Role in each allowed namespace (the
    // meta-operator needs none) and its leader-election Role.
    for &c in COMPONENTS.iter() {
        let name = format!("kf-{c}-operator");
        assert!(kinds(&all, "ClusterRole").contains(&name), "{name}");
        let roles = all
            .iter()
            .filter(|o| o.types.as_ref().is_some_and(|t| t.kind == "Role"))
            .filter(|o| o.metadata.name.as_deref() == Some(&name))
            .filter_map(|o| o.metadata.namespace.clone())
            .collect::<Vec<_>>();
        let expected: Vec<String> = if c == "meta" {
            vec![]
        } else {
            kubeflow_e2e::component::chart_namespaces()
                .iter()
                .map(|n| n.to_string())
                .collect()
        };
        assert_eq!(roles, expected, "{name}'s Roles");
    }
    assert_eq!(
        kinds(&all, "Namespace"),
        kubeflow_e2e::component::chart_namespaces()
    );
    // A mirror for the operators' own images.
    let mirrored = template(&["--set", "image.registry=registry.local:5000"]).expect("renders");
    for d in mirrored
        .iter()
        .filter(|o| o.types.as_ref().is_some_and(|t| t.kind == "Deployment"))
    {
        let image = d.data["spec"]["template"]["spec"]["containers"][0]["image"]
            .as_str()
            .unwrap_or("");
        assert!(
            image.starts_with("registry.local:5000/kubeflow/kubeflow-"),
            "{image}"
        );
    }
    let elsewhere = template(&["--set", "allowedNamespaces={team-a}"]).expect("renders");
    assert!(
        elsewhere
            .iter()
            .filter(|o| o.types.as_ref().is_some_and(|t| t.kind == "Role"))
            .all(|o| matches!(
                o.metadata.namespace.as_deref(),
                Some("team-a" | "kubeflow-system")
            )),
        "Roles follow allowedNamespaces"
    );
    // An operator turned off leaves no trace in the output.
    let without = template(&["--set", "operators.istio.enabled=false"]).expect("renders");
    assert_eq!(kinds(&without, "Deployment").len(), COMPONENTS.len() - 1);
    assert!(
        without
            .iter()
            .filter(|o| o.types.as_ref().is_some_and(|t| t.kind != "Namespace"))
            .all(|o| !o.metadata.name.as_deref().unwrap_or("").contains("istio")),
        "istio objects rendered while turned off"
    );
    // The chart refuses clusters older than the API types.
    let old = run_tool(
        "helm",
        &["template", "kf", &chart, "--kube-version", "1.32.0"],
    );
    assert!(!old.status.success());
    assert!(String::from_utf8_lossy(&old.stderr).contains("kubeVersion"));
}

#[test]
fn chart_roles_name_every_verb_resource_and_group() {
    let all = template(&["--set", "monitoring.serviceMonitor.enabled=true"]).expect("renders");
    let mut rules = 0;
    // No role of the chart holds a bundle's rules (Istio's read-all-of-a-group
    // wildcards among them): the operators escalate and bind their bundles'
    // roles by name, pinned by admission.
    for role in all.iter().filter(|o| {
        o.types
            .as_ref()
            .is_some_and(|t| t.kind == "ClusterRole" || t.kind == "Role")
    }) {
        let name = role.metadata.name.clone().unwrap_or_default();
        for rule in role.data["rules"].as_array().expect("rules") {
            rules += 1;
            assert!(rule.get("nonResourceURLs").is_none(), "{name}: {rule}");
            for field in ["apiGroups", "resources", "verbs", "resourceNames"] {
                for v in rule[field].as_array().into_iter().flatten() {
                    let v = v.as_str().unwrap_or("");
                    assert!(
                        !v.contains('*'),
                        "{name} grants a wildcard in {field}: {rule}"
                    );
                }
            }
            assert!(
                rule["verbs"].as_array().is_some_and(|v| !v.is_empty()),
                "{name}: {rule}"
            );
        }
    }
    assert!(rules > 50, "only {rules} rules rendered");
    // Escalation is bounded: `escalate` and `bind` only on named roles.
    for role in kinds(&all, "ClusterRole") {
        let obj = all
            .iter()
            .find(|o| o.metadata.name.as_deref() == Some(&role))
            .expect("role");
        for rule in obj.data["rules"].as_array().into_iter().flatten() {
            let verbs = rule["verbs"].as_array().cloned().unwrap_or_default();
            if verbs.iter().any(|v| v == "escalate" || v == "bind") {
                assert!(rule["resourceNames"].is_array(), "{role}: unbounded {rule}");
            }
        }
    }
}

/// Cluster-scoped kinds whose change widens someone's access or intercepts requests.
const GUARDED: &[&str] = &[
    "clusterroles",
    "clusterrolebindings",
    "customresourcedefinitions",
    "mutatingwebhookconfigurations",
    "validatingwebhookconfigurations",
    "namespaces",
    "priorityclasses",
];

#[test]
fn the_operators_own_rules_reach_no_further_than_their_names() {
    let all = template(&[]).expect("renders");
    for role in all
        .iter()
        .filter(|o| o.types.as_ref().is_some_and(|t| t.kind == "ClusterRole"))
    {
        let name = role.metadata.name.clone().unwrap_or_default();
        for rule in role.data["rules"].as_array().into_iter().flatten() {
            let list = |f: &str| -> Vec<String> {
                rule[f]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|v| v.as_str().map(str::to_string))
                    .collect()
            };
            let (groups, resources, verbs) = (list("apiGroups"), list("resources"), list("verbs"));
            let named = rule["resourceNames"].is_array();
            let writes = verbs.iter().any(|v| {
                matches!(
                    v.as_str(),
                    "update" | "patch" | "delete" | "deletecollection"
                )
            });
            // No unnamed change of RBAC, CRDs, webhooks, namespaces.
            if writes && resources.iter().any(|r| GUARDED.contains(&r.as_str())) {
                assert!(named, "{name}: unnamed write on a guarded kind: {rule}");
            }
            // No `escalate` but on named roles; `bind` only on named roles.
            if verbs.iter().any(|v| v == "escalate" || v == "bind") {
                assert!(named, "{name}: unbounded {rule}");
            }
            // Cluster-wide writes only on cluster-scoped kinds and the project's own CRs.
            let cluster_scoped = |r: &str| {
                GUARDED.contains(&r.split('/').next().unwrap_or(r))
                    || matches!(
                        r,
                        "clusterservingruntimes"
                            | "clusterissuers"
                            // Kubeflow's Profiles (the Dashboard's declared
                            // ones, held to its label by admission).
                            | "profiles"
                            | "clusterstoragecontainers"
                            | "clustertrainingruntimes"
                    )
            };
            let own = groups
                .iter()
                .all(|g| g == "components.kubeflow.org" || g == "platform.kubeflow.org");
            // Events about the CRs, wherever they are, are the one
            // namespaced kind written cluster-wide (by the meta-operator,
            // whose Kubeflow CRs may be in any namespace).
            let events = groups.iter().all(|g| g == "events.k8s.io");
            // The Dashboard's declared contributors: bindings and Istio
            // policies in profile namespaces, made at run time, so granted
            // cluster-wide and held by its pins (checked below; tried as
            // its token in installed/reach.rs).
            let tenant = name.ends_with("-dashboard-operator")
                && resources
                    .iter()
                    .all(|r| r == "rolebindings" || r == "authorizationpolicies");
            if (writes || verbs.iter().any(|v| v == "create"))
                && !own
                && !events
                && !tenant
                && !resources.iter().all(|r| cluster_scoped(r))
            {
                panic!("{name}: cluster-wide write on a namespaced kind: {rule}");
            }
        }
    }
    // Every create of a cluster-scoped object is limited to the bundles'
    // names by an admission policy matching the operators (one policy for
    // all: each validation names its operator).
    let policy = |name: &str| {
        all.iter()
            .find(|o| {
                o.types
                    .as_ref()
                    .is_some_and(|t| t.kind == "ValidatingAdmissionPolicy")
                    && o.metadata.name.as_deref() == Some(name)
            })
            .unwrap_or_else(|| panic!("no admission policy {name}"))
    };
    let creates = policy("kf-operators-creates");
    let pins = policy("kf-operators-pins");
    let matched = |p: &kube::api::DynamicObject| {
        p.data["spec"]["matchConditions"][0]["expression"]
            .as_str()
            .unwrap_or("")
            .to_string()
    };
    let guarded = |p: &kube::api::DynamicObject, c: &str| {
        p.data["spec"]["validations"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|v| {
                v["expression"].as_str().is_some_and(|e| {
                    e.starts_with(&format!("variables.operator != 'kf-{c}-operator' || "))
                })
            })
            .count()
    };
    let resources: Vec<&str> = pins.data["spec"]["matchConstraints"]["resourceRules"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|r| r["resources"][0].as_str())
        .collect();
    for c in COMPONENTS.iter().filter(|c| **c != "meta") {
        let account = format!("'system:serviceaccount:kubeflow-system:kf-{c}-operator'");
        assert!(
            matched(creates).contains(&account),
            "{c}: {}",
            matched(creates)
        );
        assert!(guarded(creates, c) > 0, "{c}: no create of its own limited");
        // And every write of a role, binding, webhook configuration or
        // workload is pinned to the bundles' contents by another.
        assert!(matched(pins).contains(&account), "{c}: {}", matched(pins));
        assert!(guarded(pins, c) >= 10, "{c}: {} pins", guarded(pins, c));
    }
    for r in [
        "clusterroles",
        "roles",
        "clusterrolebindings",
        "rolebindings",
        "mutatingwebhookconfigurations",
        "validatingwebhookconfigurations",
        "deployments",
        "statefulsets",
        "daemonsets",
        "customresourcedefinitions",
        // The Dashboard's tenant policies.
        "authorizationpolicies",
    ] {
        assert!(resources.contains(&r), "the pins do not cover {r}");
    }
    // Their allowed namespaces are the chart's.
    assert_eq!(
        pins.data["spec"]["variables"][1],
        serde_json::json!({"name": "allowedNamespaces", "expression": format!("[{}]", kubeflow_e2e::component::chart_namespaces().iter().map(|n| format!("'{n}'")).collect::<Vec<_>>().join(", "))})
    );
    // Only operators' accounts are matched, and each validation of the
    // pins names its operator.
    let validations = pins.data["spec"]["validations"]
        .as_array()
        .map_or(0, Vec::len);
    let named: usize = COMPONENTS.iter().map(|c| guarded(pins, c)).sum();
    assert_eq!(validations, named, "a pin for no operator");
}

#[test]
fn chart_rbac_is_what_each_operator_says_it_needs() {
    let manifests = kubeflow_e2e::manifests_dir();
    for &c in COMPONENTS.iter() {
        let bin = kubeflow_e2e::operator::binary(&format!("kubeflow-{c}-operator"));
        let mut cmd = std::process::Command::new(bin);
        cmd.arg("rbac");
        if c != "meta" {
            cmd.arg("--manifests-dir").arg(&manifests);
        }
        let out = cmd.output().expect("run the operator");
        assert!(
            out.status.success(),
            "{c} rbac: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let file = repo_root().join(format!("charts/kubeflow/files/rbac/{c}.yaml"));
        assert_eq!(
            std::fs::read_to_string(&file).unwrap_or_default(),
            String::from_utf8_lossy(&out.stdout),
            "{} is stale: run charts/generate",
            file.display()
        );
    }
}

#[test]
fn bad_values_are_refused_with_the_field_named() {
    for (set, says) in [
        (
            "operators.trainng.enabled=false",
            "additional properties 'trainng' not allowed",
        ),
        ("metrics.port=80", "/metrics/port"),
        (
            "monitoring.serviceMonitor.enabled=maybe",
            "/monitoring/serviceMonitor/enabled",
        ),
        ("replicas=2,leaderElection=false", "/replicas"),
        (
            "operators.serving.replicas=0",
            "/operators/serving/replicas",
        ),
        ("logFormat=xml", "/logFormat"),
        ("image.registry=https://registry.local", "/image/registry"),
        ("resources.limits.memory=lots", "/resources/limits/memory"),
    ] {
        let err = template(&["--set", set]).expect_err(set);
        assert!(err.contains(says), "{set}: {err}");
    }
}

#[test]
fn monitoring_objects_follow_what_the_cluster_serves() {
    let plain = template(&[]).expect("renders");
    assert!(kinds(&plain, "ServiceMonitor").is_empty());
    assert!(kinds(&plain, "PrometheusRule").is_empty());
    let served = [
        "--api-versions",
        "monitoring.coreos.com/v1/ServiceMonitor",
        "--api-versions",
        "monitoring.coreos.com/v1/PrometheusRule",
    ];
    let auto = template(&served).expect("renders");
    assert_eq!(kinds(&auto, "ServiceMonitor").len(), 1);
    assert_eq!(kinds(&auto, "PrometheusRule").len(), 1);
    let mut off = served.to_vec();
    off.extend(["--set", "monitoring.serviceMonitor.enabled=false"]);
    assert!(kinds(&template(&off).expect("renders"), "ServiceMonitor").is_empty());
    // Dashboards: one ConfigMap each, with the Grafana sidecar's label.
    let dashboards: Vec<&DynamicObject> = plain
        .iter()
        .filter(|o| o.types.as_ref().is_some_and(|t| t.kind == "ConfigMap"))
        .collect();
    assert_eq!(dashboards.len(), 2);
    for d in dashboards {
        assert_eq!(
            d.metadata
                .labels
                .as_ref()
                .and_then(|l| l.get("grafana_dashboard"))
                .map(String::as_str),
            Some("1")
        );
        for json in d.data["data"].as_object().expect("data").values() {
            let parsed: serde_json::Value =
                serde_json::from_str(json.as_str().unwrap_or("")).expect("dashboard JSON");
            assert!(parsed["panels"].as_array().is_some_and(|p| !p.is_empty()));
        }
    }
}

#[test]
fn operator_pods_meet_restricted_pod_security() {
    for d in template(&[])
        .expect("renders")
        .iter()
        .filter(|o| o.types.as_ref().is_some_and(|t| t.kind == "Deployment"))
    {
        let pod = &d.data["spec"]["template"]["spec"];
        let name = d.metadata.name.clone().unwrap_or_default();
        assert_eq!(pod["securityContext"]["runAsNonRoot"], true, "{name}");
        assert_eq!(
            pod["securityContext"]["seccompProfile"]["type"], "RuntimeDefault",
            "{name}"
        );
        let c = &pod["containers"][0];
        assert_eq!(
            c["securityContext"]["allowPrivilegeEscalation"], false,
            "{name}"
        );
        assert_eq!(
            c["securityContext"]["readOnlyRootFilesystem"], true,
            "{name}"
        );
        assert_eq!(
            c["securityContext"]["capabilities"]["drop"],
            serde_json::json!(["ALL"]),
            "{name}"
        );
        assert_eq!(c["livenessProbe"]["httpGet"]["path"], "/healthz", "{name}");
        assert_eq!(c["readinessProbe"]["httpGet"]["path"], "/readyz", "{name}");
        assert!(c["resources"]["limits"]["memory"].is_string(), "{name}");
        assert!(c["resources"]["requests"]["cpu"].is_string(), "{name}");
    }
}

/// The top folders of the bundles the operator images carry: the component
/// registry's.
fn image_folders() -> Vec<&'static str> {
    kubeflow_api::registry::COMPONENTS
        .iter()
        .flat_map(|c| c.image_folders())
        .filter_map(|f| f.split('/').next())
        .collect()
}

#[test]
fn the_images_bundle_list_pins_exactly_the_bundles_the_tests_use() {
    let lock =
        std::fs::read_to_string(repo_root().join("images/bundles.lock")).expect("bundles.lock");
    let manifests = kubeflow_e2e::manifests_dir();
    let mut listed = Vec::new();
    for line in lock
        .lines()
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
    {
        let fields: Vec<&str> = line.split('\t').collect();
        assert_eq!(fields.len(), 4, "path, sha256, how, source: {line}");
        let (path, sum, how, source) = (fields[0], fields[1], fields[2], fields[3]);
        assert!(matches!(how, "kustomize" | "url"), "{line}");
        // Pinned to a tag (vX.Y.Z, or a date release such as 26.03) or a
        // commit, never a branch.
        let tag_ref = source.split_once("?ref=").is_some_and(|(_, r)| {
            r.starts_with('v')
                || r.split('.')
                    .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
                || (r.len() == 40 && r.bytes().all(|b| b.is_ascii_hexdigit()))
        });
        assert!(
            tag_ref || source.contains("/v0.") || source.contains("/v1."),
            "unpinned source: {line}"
        );
        let file = manifests.join(path);
        let out = std::process::Command::new("sha256sum")
            .arg(&file)
            .output()
            .expect("sha256sum");
        let actual = String::from_utf8_lossy(&out.stdout);
        assert_eq!(
            actual.split_whitespace().next(),
            Some(sum),
            "{path}: checksum differs from {}",
            file.display()
        );
        listed.push(path.to_string());
    }
    let carried_folders = image_folders();
    let mut present = Vec::new();
    let mut dirs = vec![manifests.clone()];
    while let Some(dir) = dirs.pop() {
        for e in std::fs::read_dir(&dir)
            .expect("manifests")
            .filter_map(Result::ok)
        {
            let p = e.path();
            // The components the operator images carry; the folder also
            // holds bundles of components no operator installs yet.
            let carried = p.strip_prefix(&manifests).is_ok_and(|rel| {
                rel.components().next().is_some_and(|c| {
                    carried_folders.contains(&c.as_os_str().to_string_lossy().as_ref())
                })
            });
            if p.is_dir() && carried {
                dirs.push(p);
            } else if p.extension().is_some_and(|x| x == "yaml") && carried {
                present.push(
                    p.strip_prefix(&manifests)
                        .expect("prefix")
                        .display()
                        .to_string(),
                );
            }
        }
    }
    listed.sort();
    present.sort();
    assert_eq!(
        listed, present,
        "bundles.lock lists exactly the bundle files"
    );
}

#[test]
fn every_alert_waits_before_firing_and_links_a_runbook_in_the_repository() {
    let objects = template(&["--set", "monitoring.prometheusRule.enabled=true"]).expect("renders");
    let rule = kubeflow_e2e::chart::of_kind(&objects, "PrometheusRule")
        .next()
        .expect("a PrometheusRule");
    let base = "https://github.com/kubeflow/meta-operator/blob/main/docs/runbooks/";
    let mut alerts = 0;
    for group in rule.data["spec"]["groups"].as_array().expect("groups") {
        for r in group["rules"].as_array().expect("rules") {
            let alert = r["alert"].as_str().expect("alert name");
            alerts += 1;
            assert!(r["for"].is_string(), "{alert} has no `for`");
            let url = r["annotations"]["runbook_url"].as_str().unwrap_or("");
            let page = url
                .strip_prefix(base)
                .unwrap_or_else(|| panic!("{alert}: runbook_url {url:?}"));
            assert_eq!(page, format!("{alert}.md"));
            let text = std::fs::read_to_string(repo_root().join("docs/runbooks").join(page))
                .unwrap_or_else(|e| panic!("{alert}: no runbook page: {e}"));
            for section in ["## What it means", "## How to look", "## How to fix"] {
                assert!(text.contains(section), "{page} lacks {section:?}");
            }
        }
    }
    assert!(alerts >= 5 + COMPONENTS.len(), "{alerts} alerts");
    // A base of one's own (a wiki) moves every link.
    let moved = template(&[
        "--set",
        "monitoring.prometheusRule.enabled=true",
        "--set",
        "monitoring.runbookBaseUrl=https://wiki.example.com/runbooks/",
    ])
    .expect("renders");
    let text = serde_json::to_string(&moved).unwrap_or_default();
    assert!(!text.contains(base));
    assert!(text.contains("https://wiki.example.com/runbooks/KubeflowOperatorNoLeader.md"));
}
