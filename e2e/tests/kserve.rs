//! KServe's own controller manager (v0.16.0, Kubeflow 26.03's), built from
//! the Go module proxy, runs on what the Serving operator installs: a
//! user's InferenceService in raw deployment mode becomes Ready.

use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Service;
use kube::api::{Api, ApiResource, DynamicObject};
use kube::core::GroupVersionKind;
use kubeflow_e2e::component::{condition, install};
use kubeflow_e2e::objects::wait_exists;
use kubeflow_e2e::upstream::{self, Quiet, UserObject};
use kubeflow_e2e::upstream_runs::{self, INFERENCE_SERVICE};
use kubeflow_e2e::{apply_yaml, wait_for};

const OPERATOR: &str = "kubeflow-serving-operator";
const TIMEOUT: Duration = Duration::from_secs(90);
const MANAGER: &str = "kserve-controller-manager";

/// Takes KServe's finalizer off the user's InferenceService when the test
/// fails before deleting it: with no controller left to finalize it, it
/// would hold its namespace (and KServe's CRDs) for ever. A passing test
/// has deleted it with the controller running.
struct ReleaseInferenceService(String);

impl Drop for ReleaseInferenceService {
    fn drop(&mut self) {
        let _ = kubeflow_e2e::run_tool(
            "kubectl",
            &[
                "-n",
                &self.0,
                "patch",
                "inferenceservice",
                "sklearn-iris",
                "--type=json",
                "-p",
                r#"[{"op":"remove","path":"/metadata/finalizers"}]"#,
            ],
        );
    }
}

/// KServe's controller manager as installed for Kubeflow 26.03 (Serving
/// v0.16.0): its ServiceAccount, args and environment, its webhook
/// certificate from the Secret the operator made. It listens on every
/// interface at a port no flag moves (the webhook server's), so it runs
/// in a network namespace of its own. A user's InferenceService gets its
/// predictor Deployment and Service and becomes Ready (kwok runs the
/// pods); the manager is refused nothing, and the Serving operator writes
/// nothing while it works.
#[tokio::test]
async fn kserves_controller_serves_an_inference_service_on_what_is_installed() {
    let (client, mut phases) = kubeflow_e2e::component::prepare(&["Serving"], &["serving"]).await;
    upstream::program(MANAGER);
    phases.phase("upstream controller built");
    let yaml = "apiVersion: components.kubeflow.org/v1alpha1\nkind: Serving\nmetadata: {name: kubeflow}\nspec:\n  version: v0.16.0\n  servingRuntimes: [kserve-sklearnserver]\n";
    let (ns, op, servings, _) = install(&client, "kserve-ctl", OPERATOR, yaml, TIMEOUT).await;
    phases.phase("Serving installed");

    let before = op.settled_writes().await;
    let mut manager = upstream_runs::kserve_manager(&client, &ns.name).await;
    let _release = ReleaseInferenceService(ns.name.clone());
    apply_yaml(&client, &ns.name, INFERENCE_SERVICE).await;
    phases.phase("controller started");

    let isvcs: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        &ns.name,
        &ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("serving.kserve.io", "v1beta1", "InferenceService"),
            "inferenceservices",
        ),
    );
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns.name);
    let services: Api<Service> = Api::namespaced(client.clone(), &ns.name);
    wait_exists(
        &deployments,
        "sklearn-iris-predictor",
        Duration::from_secs(60),
    )
    .await;
    wait_exists(&services, "sklearn-iris-predictor", Duration::from_secs(60)).await;
    let isvc = wait_for(
        "the InferenceService Ready",
        Duration::from_secs(90),
        || async {
            let isvc = isvcs.get("sklearn-iris").await.ok()?;
            let (status, ..) = condition(&isvc, "Ready")?;
            (status == "True").then_some(isvc)
        },
    )
    .await;
    phases.phase("InferenceService Ready");
    let predictor = deployments
        .get("sklearn-iris-predictor")
        .await
        .expect("predictor");
    let image = predictor
        .spec
        .and_then(|s| s.template.spec)
        .map(|p| p.containers[0].image.clone().unwrap_or_default())
        .unwrap_or_default();
    assert!(
        image.contains("sklearnserver"),
        "the runtime the Serving operator installed serves it: {image}"
    );
    assert!(
        isvc.data.pointer("/status/url").is_some(),
        "{:?}",
        isvc.data.get("status")
    );
    assert!(manager.is_running(), "{}", manager.log_text());
    let quiet = Quiet {
        operator: &op,
        writes: before,
        controllers: &[(&manager, "KServe's controller manager")],
    };
    quiet
        .assert("the Serving operator wrote nothing while KServe's controller worked")
        .await;
    // The InferenceService goes while the manager runs (it holds KServe's
    // finalizer), then the Serving component.
    let isvc = UserObject {
        api: &isvcs,
        name: "sklearn-iris",
        kind: "InferenceService",
    };
    upstream::delete_object_then_component(&mut phases, isvc, &quiet, &servings, "Serving").await;
    assert!(manager.is_running(), "{}", manager.log_text());
    upstream_runs::stop_and_remove(manager);
    ns.delete().await;
}
