//! The operators' reach, tried as an attacker would, against the chart
//! installed by the demo with the operators running as its ServiceAccounts:
//! what each token may do (`kubectl auth can-i`), the self-escalation
//! sequence, and a component CR in a namespace the chart does not allow.

use std::time::Duration;

use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::api::rbac::v1::ClusterRoleBinding;
use kube::api::{Api, ListParams};
use kubeflow_e2e::component::{
    ALL_COMPONENTS, ALL_KINDS, component_api, condition, delete_and_wait, prepare,
};
use kubeflow_e2e::demo::{
    COMPONENTS, Demo, KUBEFLOW_NAMESPACE, OPERATOR_NAMESPACE, RELEASE, clear_leftovers, tool_ok,
};
use kubeflow_e2e::wait::wait_for;
use kubeflow_e2e::{apply_yaml, repo_root, run_tool};
use kubeflow_operator::rbac::{self, Rules};

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

/// The writes of another party's webhook configuration (indices into
/// DANGEROUS), and the operators docs/security.md says may make one: their
/// controllers' roles hold them, so the operators must too.
const WEBHOOK_WRITES: &[usize] = &[14, 15, 16, 17];
const MAY_WRITE_OTHERS_WEBHOOKS: &[&str] =
    &["training", "trainer", "serving", "pipelines", "istio"];

/// What no operator may do, whatever the controllers it installs may.
const NEVER: &[usize] = &[7, 8, 9, 10, 12, 13];

/// Whether the upstream controllers' rules, which the operator holds to
/// grant them (`grants`), allow the action: the only way an operator may.
fn grants_allow(rules: &Rules, (verb, group, resource, name, _): Action) -> bool {
    if name.is_empty() {
        rbac::allows(&rules.grants, group, resource, verb)
    } else {
        rbac::allows_named(&rules.grants, group, resource, verb, name)
    }
}

fn can_i(kubeconfig: &str, (verb, group, resource, name, ns): Action) -> bool {
    let what = match (group, name) {
        ("", "") => resource.to_string(),
        ("", n) => format!("{resource}/{n}"),
        (g, "") => format!("{resource}.{g}"),
        (g, n) => format!("{resource}.{g}/{n}"),
    };
    let mut args = vec!["--kubeconfig", kubeconfig, "auth", "can-i", verb, &what];
    if !ns.is_empty() {
        args.extend(["-n", ns]);
    }
    let out = run_tool("kubectl", &args);
    String::from_utf8_lossy(&out.stdout).trim() == "yes"
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

#[tokio::test]
async fn no_operator_token_reaches_beyond_its_bundles_or_its_namespaces() {
    let (client, _g) = prepare(&ALL_KINDS, &ALL_COMPONENTS).await;
    clear_leftovers(&client).await;
    let (demo, _) = Demo::up("reach", 16600);
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let _ = namespaces
        .create(
            &Default::default(),
            &serde_json::from_value(serde_json::json!({"metadata": {"name": "team-a"}}))
                .expect("namespace"),
        )
        .await;

    // 1. What each token may do: nothing dangerous but what the upstream
    // controllers it installs may do, and never the NEVER list.
    let mut table = Vec::new();
    for c in COMPONENTS {
        let kubeconfig = demo.kubeconfig(c).display().to_string();
        let text = std::fs::read_to_string(
            repo_root().join(format!("charts/kubeflow/files/rbac/{c}.yaml")),
        )
        .expect("rules");
        let rules: Rules = serde_saphyr::from_str(&text).expect("rules parse");
        for (i, action) in DANGEROUS.iter().enumerate() {
            let may = can_i(&kubeconfig, *action);
            let inherited = grants_allow(&rules, *action);
            table.push(format!(
                "{c}: {action:?} -> {may} (controllers' rules: {inherited})"
            ));
            assert_eq!(
                may, inherited,
                "{c} {action:?}: allowed {may}, but the controllers' own rules say {inherited}"
            );
            if NEVER.contains(&i) {
                assert!(!may, "{c} may {action:?}");
            }
        }
    }
    println!("{}", table.join("\n"));
    // docs/security.md names who may write another party's webhook
    // configuration; nobody else may.
    for c in COMPONENTS {
        let kubeconfig = demo.kubeconfig(c).display().to_string();
        let may = WEBHOOK_WRITES
            .iter()
            .any(|i| can_i(&kubeconfig, DANGEROUS[*i]));
        assert_eq!(
            may,
            MAY_WRITE_OTHERS_WEBHOOKS.contains(&c),
            "{c}: docs/security.md says otherwise about other parties' webhook configurations"
        );
    }

    // 2. Self-escalation: widen one's own bundle role, bind cluster-admin,
    // create a role of one's own. Each refused by the API server.
    let training = demo.kubeconfig("training").display().to_string();
    let widen = r#"[{"op":"add","path":"/rules/-","value":{"apiGroups":["*"],"resources":["*"],"verbs":["*"]}}]"#;
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
        assert!(err.contains("forbidden"), "{c}: {err}");
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
    let mut tried = 0;
    for c in COMPONENTS {
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
            let aggregated = tool_ok(
                "kubectl",
                &[
                    "get",
                    "clusterrole",
                    &role,
                    "-o",
                    "jsonpath={.aggregationRule}",
                ],
            );
            if aggregated.trim().is_empty() {
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
    assert!(
        tried >= 3,
        "the aggregated roles of Training, Trainer and Serving were tried ({tried})"
    );
    assert_eq!(rule_count("view"), view_before, "view gained rules");
    for c in COMPONENTS {
        let kubeconfig = demo.kubeconfig(c).display().to_string();
        assert!(
            !can_i(&kubeconfig, ("*", "", "*", "", "")),
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
    apply_yaml(
        &client,
        "team-a",
        "apiVersion: components.kubeflow.org/v1alpha1\nkind: Training\nmetadata: {name: kubeflow}\nspec: {version: v1.9.2}\n",
    )
    .await;
    let trainings = component_api(&client, "team-a", "Training");
    let message = wait_for(
        "NamespaceNotAllowed on the tenant's CR",
        TIMEOUT,
        || async {
            let cr = trainings.get("kubeflow").await.ok()?;
            let (status, reason, message, _) = condition(&cr, "Ready")?;
            (status == "False" && reason == "NamespaceNotAllowed").then_some(message)
        },
    )
    .await;
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

    // Leave nothing: the Kubeflow CR, the release, the namespaces.
    let kfs = component_api(&client, KUBEFLOW_NAMESPACE, "Kubeflow");
    delete_and_wait(&kfs, "kubeflow", TIMEOUT).await;
    drop(demo);
    tool_ok(
        "helm",
        &["uninstall", RELEASE, "-n", OPERATOR_NAMESPACE, "--wait"],
    );
    for ns in ["team-a", "istio-system", KUBEFLOW_NAMESPACE] {
        let _ = namespaces.delete(ns, &Default::default()).await;
        kubeflow_e2e::component::wait_gone(&namespaces, ns, TIMEOUT).await;
    }
}
