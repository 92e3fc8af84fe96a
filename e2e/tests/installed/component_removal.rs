//! One component removed through the `Kubeflow` resource: it goes alone,
//! the rest stays Ready.

use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use kube::api::Api;
use kubeflow_e2e::component::{component_api, condition, merge, wait_gone};
use kubeflow_e2e::demo::KUBEFLOW_NAMESPACE;
use kubeflow_e2e::objects::exists;
use kubeflow_e2e::wait::wait_for;
use serde_json::json;

const TIMEOUT: Duration = Duration::from_secs(120);

/// Serving set Removed on the Kubeflow resource: its child and workloads
/// gone, Pipelines' kept, the resource Ready with thirteen components.
pub async fn check(client: &kube::Client) {
    let client = client.clone();
    let kfs = component_api(&client, KUBEFLOW_NAMESPACE, "Kubeflow");
    // Removing one component through the Kubeflow CR removes it alone.
    merge(
        &kfs,
        "kubeflow",
        json!({"spec": {"components": {"serving": {"managementState": "Removed"}}}}),
    )
    .await;
    let servings = component_api(&client, KUBEFLOW_NAMESPACE, "Serving");
    wait_gone(&servings, "kubeflow", TIMEOUT).await;
    let workloads: Api<Deployment> = Api::namespaced(client.clone(), KUBEFLOW_NAMESPACE);
    wait_gone(&workloads, "kserve-controller-manager", TIMEOUT).await;
    wait_for("Kubeflow Ready with twelve components", TIMEOUT, || async {
        let kf = kfs.get("kubeflow").await.ok()?;
        (condition(&kf, "Ready")?.0 == "True" && kf.data["status"]["readyComponents"] == "13/13")
            .then_some(())
    })
    .await;
    assert!(exists(&workloads, "ml-pipeline").await, "pipelines stays");
}
