//! The check the demo test relies on ("no request refused by RBAC"), shown to
//! catch what it should: the training operator running as a ServiceAccount
//! whose role is the chart's minus one permission (Deployments) changes
//! nothing, says so in its CR's status, its log and its error metric.

use std::time::Duration;

use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use kube::api::{Api, DeleteParams, PostParams};
use kubeflow_e2e::component::{component_api, condition, delete_and_wait, prepare};
use kubeflow_e2e::demo::tool_ok;
use kubeflow_e2e::operator::{OperatorProcess, metric_sum};
use kubeflow_e2e::wait::wait_for;
use kubeflow_e2e::{TestNamespace, apply_yaml, repo_root};
use serde_json::{Value, json};

const TIMEOUT: Duration = Duration::from_secs(60);

/// A kubeconfig for the test cluster that authenticates with `token`.
fn token_kubeconfig(token: &str, path: &std::path::Path) {
    let field = |p: &str| {
        tool_ok(
            "kubectl",
            &[
                "config",
                "view",
                "--raw",
                "--minify",
                "--flatten",
                "-o",
                &format!("jsonpath={p}"),
            ],
        )
    };
    let config = json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "e2e", "cluster": {
            "server": field("{.clusters[0].cluster.server}"),
            "certificate-authority-data": field("{.clusters[0].cluster.certificate-authority-data}"),
        }}],
        "users": [{"name": "probe", "user": {"token": token.trim()}}],
        "contexts": [{"name": "probe", "context": {"cluster": "e2e", "user": "probe"}}],
        "current-context": "probe",
    });
    std::fs::write(path, config.to_string()).expect("kubeconfig");
}

#[tokio::test]
async fn an_operator_missing_a_permission_changes_nothing_and_says_so() {
    let (client, _g) = prepare(&["Training"], &["training"]).await;
    let ns = TestNamespace::new(&client, "rbac").await;

    // The chart's training rules (every scope, bound cluster-wide: this
    // operator runs without allowed namespaces) without Deployments.
    let text =
        std::fs::read_to_string(repo_root().join("charts/kubeflow/files/rbac/training.yaml"))
            .expect("chart rules");
    let scoped: Value = serde_saphyr::from_str(&text).expect("rules");
    let mut rules: Vec<Value> = ["cluster", "namespaced", "clusterPerNamespace"]
        .iter()
        .flat_map(|k| scoped[k].as_array().cloned().unwrap_or_default())
        .collect();
    // Rules on objects named after an allowed namespace: this test's.
    for r in rules.iter_mut() {
        if let Some(names) = r["resourceNames"].as_array_mut() {
            for n in names {
                *n = n
                    .as_str()
                    .unwrap_or_default()
                    .replace("{namespace}", &ns.name)
                    .into();
            }
        }
    }
    let mut removed = false;
    for r in rules.iter_mut() {
        if let Some(resources) = r["resources"].as_array_mut() {
            let before = resources.len();
            resources.retain(|x| x != "deployments");
            removed |= resources.len() != before;
        }
    }
    rules.retain(|r| r["resources"].as_array().is_some_and(|a| !a.is_empty()));
    assert!(removed, "the chart's training role grants Deployments");

    let name = format!("kubeflow-e2e-probe-{}", std::process::id());
    let role: ClusterRole =
        serde_json::from_value(json!({"metadata": {"name": name}, "rules": rules})).expect("role");
    let binding: ClusterRoleBinding = serde_json::from_value(json!({
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
        "subjects": [{"kind": "ServiceAccount", "name": "probe", "namespace": ns.name}],
    }))
    .expect("binding");
    let sa: ServiceAccount =
        serde_json::from_value(json!({"metadata": {"name": "probe"}})).expect("sa");
    let roles: Api<ClusterRole> = Api::all(client.clone());
    let bindings: Api<ClusterRoleBinding> = Api::all(client.clone());
    let pp = PostParams::default();
    roles.create(&pp, &role).await.expect("create role");
    bindings
        .create(&pp, &binding)
        .await
        .expect("create binding");
    Api::<ServiceAccount>::namespaced(client.clone(), &ns.name)
        .create(&pp, &sa)
        .await
        .expect("create sa");
    let token = tool_ok("kubectl", &["-n", &ns.name, "create", "token", "probe"]);
    let kubeconfig = kubeflow_e2e::operator::target_dir()
        .join("e2e-logs")
        .join(format!("probe-kubeconfig-{}", std::process::id()));
    token_kubeconfig(&token, &kubeconfig);

    let op = OperatorProcess::start_with_env(
        "kubeflow-training-operator",
        &[],
        &[("KUBECONFIG", &kubeconfig.display().to_string())],
    );
    apply_yaml(&client, &ns.name, kubeflow_e2e::component::TRAINING_CR).await;
    let trainings = component_api(&client, &ns.name, "Training");
    let (status, message) = wait_for("the refusal in the Training status", TIMEOUT, || async {
        let cr = trainings.get("kubeflow").await.ok()?;
        let (status, reason, message, _) = condition(&cr, "Degraded")?;
        (reason == "PermissionDenied").then_some((status, message))
    })
    .await;
    assert_eq!(status, "True");
    let user = format!("system:serviceaccount:{}:probe", ns.name);
    assert!(
        message.contains(&user) && message.contains("deployments"),
        "the message names who and what: {message}"
    );
    let log = std::fs::read_to_string(&op.log).unwrap_or_default();
    assert!(
        log.contains("is forbidden: User"),
        "the log shows the refusal"
    );
    wait_for("PermissionDenied in the error metric", TIMEOUT, || async {
        let errors = metric_sum(
            &op.metrics().await,
            "controller_runtime_reconcile_errors_total",
            &["reason=\"PermissionDenied\""],
        );
        (errors >= 1.0).then_some(())
    })
    .await;
    // Nothing was applied: the engine reads everything before it writes.
    let sas: Api<ServiceAccount> = Api::namespaced(client.clone(), &ns.name);
    assert!(
        sas.get_opt("training-operator")
            .await
            .expect("get")
            .is_none(),
        "an object was applied despite the refusal"
    );

    // An operator with the chart's full role cleans up.
    op.stop();
    let admin = OperatorProcess::start("kubeflow-training-operator", &[]);
    delete_and_wait(&trainings, "kubeflow", TIMEOUT).await;
    admin.stop();
    let _ = bindings.delete(&name, &DeleteParams::default()).await;
    let _ = roles.delete(&name, &DeleteParams::default()).await;
    let _ = std::fs::remove_file(&kubeconfig);
    ns.delete().await;
}
