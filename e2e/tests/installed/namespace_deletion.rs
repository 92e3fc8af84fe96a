//! Deleting the namespace that holds the `Kubeflow` resource, with Kubeflow
//! installed and the operators running as the chart's ServiceAccounts: the
//! namespace controller removes the operators' Roles there before the
//! resources' finalizers run, and the cleanup must still finish (the
//! cluster-scoped objects go by the operators' cluster rights; what was in
//! the namespace goes with it). Only the kept CRDs remain. The last flow
//! on the shared install (see main.rs): it ends it.

use std::time::Duration;

use k8s_openapi::api::core::v1::Namespace;
use kube::api::Api;
use kubeflow_e2e::component::wait_gone;
use kubeflow_e2e::demo::{Demo, KUBEFLOW_NAMESPACE, OPERATOR_NAMESPACE, RELEASE, tool_ok};

/// How long the namespace may take to go: every component's cleanup, with
/// the API server of a loaded CI machine answering some requests 504 (CI:
/// Serving's cleanup finished 246 s after the deletion, the last of
/// fourteen). A bound on waiting, not a measure of speed.
const TIMEOUT: Duration = Duration::from_secs(420);

/// Deleting the namespace finishes and leaves only kept CRDs (and the
/// declared profile); the install ends here.
pub async fn check(client: &kube::Client, demo: Demo) {
    let client = client.clone();

    let started = std::time::Instant::now();
    let at = || format!("{:.0} s", started.elapsed().as_secs_f64());
    let roles_before = kubeflow_e2e::demo::managed_cluster_roles(&client).await;
    let namespaces: Api<Namespace> = Api::all(client.clone());
    namespaces
        .delete(KUBEFLOW_NAMESPACE, &Default::default())
        .await
        .expect("delete the namespace");
    // Polled here rather than by `wait_for`: a namespace still there at the
    // end says why in its conditions (content or finalizers remaining), and
    // that is what a failure must show.
    let deadline = std::time::Instant::now() + TIMEOUT;
    loop {
        match namespaces.get_opt(KUBEFLOW_NAMESPACE).await {
            Ok(None) => break,
            Ok(Some(ns)) if std::time::Instant::now() > deadline => {
                let conditions = ns
                    .status
                    .and_then(|s| s.conditions)
                    .unwrap_or_default()
                    .into_iter()
                    .filter(|c| c.status == "True")
                    .map(|c| format!("{}: {}", c.type_, c.message.unwrap_or_default()))
                    .collect::<Vec<_>>();
                panic!("the namespace is not gone after {TIMEOUT:?}: {conditions:#?}");
            }
            _ => tokio::time::sleep(Duration::from_millis(500)).await,
        }
    }
    kubeflow_e2e::print_time(&format!(
        "namespace deletion: the namespace gone at {}",
        at()
    ));
    let refused = demo.forbidden();

    // Nothing the operators managed is left but CRDs: no cluster role,
    // binding, webhook configuration or claim, and nothing in istio-system.
    let left = objects_labelled("components.kubeflow.org/component");
    // Kept on purpose, released: CRDs (users' objects) and the demo's
    // declared profile (its namespace holds the user's data).
    let (kept, left): (Vec<String>, Vec<String>) = left.into_iter().partition(|o| {
        o.starts_with("customresourcedefinition") || o.starts_with("profile.kubeflow.org/")
    });
    assert_eq!(left, Vec::<String>::new(), "left after the namespace went");
    assert!(
        kept.contains(&"profile.kubeflow.org/kubeflow-user-example-com".to_string()),
        "the declared profile is kept: {kept:?}"
    );
    let roles = tool_ok("kubectl", &["get", "clusterroles", "-o", "name"]);
    assert!(!roles.contains("-cluster-claim"), "a claim is left");
    kubeflow_e2e::demo::assert_cluster_roles_gone(&client, &roles_before).await;
    // The only refusals were in the namespace being deleted.
    // Written plainly by our logs, escaped inside the API status kube's
    // watcher prints with Debug.
    let inside = format!("in the namespace \"{KUBEFLOW_NAMESPACE}\"");
    let inside_escaped = format!("in the namespace \\\"{KUBEFLOW_NAMESPACE}\\\"");
    assert!(
        refused
            .iter()
            .all(|r| r.contains(&inside) || r.contains(&inside_escaped)),
        "refused outside the deleted namespace:\n{}",
        refused.join("\n")
    );

    // The test made the profile: it goes.
    tool_ok(
        "kubectl",
        &[
            "delete",
            "profile.kubeflow.org/kubeflow-user-example-com",
            "--wait=true",
        ],
    );
    kubeflow_e2e::print_time(&format!(
        "namespace deletion: checked and the profile deleted at {}",
        at()
    ));
    drop(demo);
    tool_ok(
        "helm",
        &["uninstall", RELEASE, "-n", OPERATOR_NAMESPACE, "--wait"],
    );
    kubeflow_e2e::print_time(&format!(
        "namespace deletion: the chart uninstalled at {}",
        at()
    ));
    // Retained CRDs keep which component they came from, but no inventory
    // holds them.
    assert_eq!(
        objects_labelled("applyset.kubernetes.io/part-of"),
        Vec::<String>::new()
    );
    // What the chart leaves: the allowed namespaces (they hold data), which
    // this test removes itself.
    let mut kept_by_chart: Vec<String> = kubeflow_e2e::component::all_own_namespaces()
        .map(|n| format!("namespace/{n}"))
        .collect();
    kept_by_chart.sort();
    assert_eq!(
        objects_labelled(&format!(
            "app.kubernetes.io/instance={RELEASE},app.kubernetes.io/managed-by=Helm"
        )),
        kept_by_chart
    );
    // All asked at once, then waited for: the namespace controller empties
    // them side by side (one after another, this took most of a minute).
    for own in kubeflow_e2e::component::all_own_namespaces() {
        let _ = namespaces.delete(own, &Default::default()).await;
    }
    futures::future::join_all(
        kubeflow_e2e::component::all_own_namespaces()
            .map(|own| wait_gone(&namespaces, own, TIMEOUT)),
    )
    .await;
    kubeflow_e2e::print_time(&format!(
        "namespace deletion: the chart's namespaces gone at {}",
        at()
    ));
    // Only CRDs remain: the project's own (Helm never deletes CRDs) and the
    // bundles' (kept by default, released from the project's labels).
    let crds = tool_ok("kubectl", &["get", "crds", "-o", "name"]);
    for crd in [
        "kubeflows.platform.kubeflow.org",
        "trainings.components.kubeflow.org",
        "pytorchjobs.kubeflow.org",
        "trainers.components.kubeflow.org",
        "trainjobs.trainer.kubeflow.org",
        "inferenceservices.serving.kserve.io",
    ] {
        assert!(crds.contains(crd), "{crd} was not retained");
    }
}

/// Every object of every listable kind carrying `selector`, as `kind/name`
/// lines (Events, which copy labels of nothing, left out).
fn objects_labelled(selector: &str) -> Vec<String> {
    let kinds = tool_ok("kubectl", &["api-resources", "--verbs=list", "-o", "name"]);
    let kinds: Vec<&str> = kinds.lines().filter(|k| !k.starts_with("events")).collect();
    tool_ok(
        "kubectl",
        &["get", &kinds.join(","), "-A", "-l", selector, "-o", "name"],
    )
    .lines()
    .map(str::to_string)
    .collect()
}
