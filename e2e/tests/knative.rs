//! The Knative operator, as a process, against the real control plane:
//! Serving with net-istio in `knative-serving` and the cluster-local
//! gateway in `istio-system`, Eventing in `knative-eventing` when asked and
//! gone when not, the domain and the Kubeflow gateway in Knative's
//! configuration, every kind repaired, nothing written at rest. Then
//! Knative Serving's own controller (v1.22.0, built from the Go module
//! proxy) runs as a process with the installed ServiceAccount and
//! configuration and turns a Knative Service into its Revision and the
//! Revision's Deployment, with the queue-proxy image the configuration
//! names; and the Serving operator accepts KServe's Serverless mode.

use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject};
use kube::core::GroupVersionKind;
use kubeflow_e2e::component::{delete_and_wait, install, start_ready, wait_condition, wait_gone};
use kubeflow_e2e::objects::wait_exists;
use kubeflow_e2e::operator::free_port;
use kubeflow_e2e::upstream::{self, Controller};
use kubeflow_e2e::{apply_yaml, wait_for};
use serde_json::json;

const OPERATOR: &str = "kubeflow-knative-operator";
const TIMEOUT: Duration = Duration::from_secs(120);
const SERVING: &str = "knative-serving";
const EVENTING: &str = "knative-eventing";
/// A digest, so that Knative's controller resolves no tag (it would ask the
/// registry, off this machine).
const APP_IMAGE: &str =
    "example.invalid/app@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

async fn config(client: &kube::Client, name: &str) -> std::collections::BTreeMap<String, String> {
    Api::<ConfigMap>::namespaced(client.clone(), SERVING)
        .get(name)
        .await
        .expect("config map")
        .data
        .unwrap_or_default()
}

async fn exists(client: &kube::Client, ns: &str, name: &str) -> bool {
    Api::<Deployment>::namespaced(client.clone(), ns)
        .get_opt(name)
        .await
        .expect("get")
        .is_some_and(|d| d.metadata.deletion_timestamp.is_none())
}

#[tokio::test]
async fn knative_serves_on_istio_with_eventing_on_request_and_its_controller_makes_revisions() {
    let (client, _g) =
        kubeflow_e2e::component::prepare(&["Knative", "Serving"], &["knative", "serving"]).await;
    kubeflow_e2e::component::install_bundle_crds(&client, "istio/1.30.1/crds.yaml").await;
    // The cluster-local gateway goes beside Istio's ingress gateway; the
    // chart makes istio-system, Istio is not installed here. An earlier
    // test's istio-system may still be terminating: applied then, the
    // namespace vanished a moment later and the operator met NotFound for
    // the rest of the test (seen in CI under load).
    let namespaces: Api<Namespace> = Api::all(client.clone());
    wait_for(
        "an earlier istio-system to be gone",
        Duration::from_secs(180),
        || async {
            match namespaces.get_opt("istio-system").await.ok()? {
                Some(n) if n.metadata.deletion_timestamp.is_some() => None,
                _ => Some(()),
            }
        },
    )
    .await;
    apply_yaml(
        &client,
        "default",
        "apiVersion: v1\nkind: Namespace\nmetadata: {name: istio-system}\n",
    )
    .await;
    let yaml = "apiVersion: components.kubeflow.org/v1alpha1\nkind: Knative\nmetadata: {name: kubeflow}\nspec:\n  version: v1.22.0\n  eventing: true\n  domain: models.example.org\n  imageRegistry: mirror.example:5000\n  crdPolicy: Delete\n";
    let (ns, op, knatives, _) = install(&client, "knative", OPERATOR, yaml, TIMEOUT).await;

    // Where everything went: Serving and Eventing in their own namespaces,
    // the cluster-local gateway beside Istio's.
    assert!(exists(&client, SERVING, "controller").await);
    assert!(exists(&client, SERVING, "net-istio-controller").await);
    assert!(exists(&client, EVENTING, "eventing-controller").await);
    assert!(exists(&client, "istio-system", "cluster-local-gateway").await);
    let domain = config(&client, "config-domain").await;
    assert_eq!(
        domain.get("models.example.org").map(String::as_str),
        Some("")
    );
    assert!(!domain.contains_key("example.com"), "{domain:?}");
    let istio = config(&client, "config-istio").await;
    assert!(
        istio.contains_key(&format!("gateway.{}.kubeflow-gateway", ns.name)),
        "the Kubeflow gateway of the resource's namespace: {istio:?}"
    );
    let queue = config(&client, "config-deployment")
        .await
        .get("queue-sidecar-image")
        .cloned()
        .unwrap_or_default();
    assert!(queue.starts_with("mirror.example:5000/"), "{queue}");

    wait_condition(&knatives, "kubeflow", "Ready", "True", TIMEOUT).await;

    // Eventing off: its workloads go, its namespace stays (never deleted).
    kubeflow_e2e::component::merge(&knatives, "kubeflow", json!({"spec": {"eventing": false}}))
        .await;
    wait_for("Eventing to go", TIMEOUT, || async {
        (!exists(&client, EVENTING, "eventing-controller").await).then_some(())
    })
    .await;
    wait_condition(&knatives, "kubeflow", "Ready", "True", TIMEOUT).await;
    assert!(
        Api::<Namespace>::all(client.clone())
            .get_opt(EVENTING)
            .await
            .expect("get")
            .is_some(),
        "the namespace is kept"
    );

    // Knative Serving's own controller, with the installed ServiceAccount's
    // token and configuration: a Knative Service becomes a Revision and the
    // Revision's Deployment, its queue-proxy from the mirror.
    let program = upstream::program("knative-serving-controller");
    let dir = upstream::run_dir(&ns.name);
    std::fs::create_dir_all(&dir).expect("folder");
    let kubeconfig = dir.join("kubeconfig");
    upstream::service_account_kubeconfig(SERVING, "controller", &kubeconfig);
    let before = op.settled_writes().await;
    let mut ctl = Controller::start(
        &program,
        &[format!("--kubeconfig={}", kubeconfig.display())],
        &[
            ("SYSTEM_NAMESPACE", SERVING.to_string()),
            ("POD_NAME", "controller-e2e".to_string()),
            ("CONFIG_LOGGING_NAME", "config-logging".to_string()),
            (
                "CONFIG_OBSERVABILITY_NAME",
                "config-observability".to_string(),
            ),
            ("PROFILING_PORT", free_port().to_string()),
            ("METRICS_PROMETHEUS_PORT", free_port().to_string()),
        ],
        None,
        dir.join("knative-serving-controller.log"),
    );
    apply_yaml(
        &client,
        &ns.name,
        &format!("apiVersion: serving.knative.dev/v1\nkind: Service\nmetadata: {{name: hello}}\nspec:\n  template:\n    spec:\n      containers: [{{image: \"{APP_IMAGE}\"}}]\n"),
    )
    .await;
    let revisions: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        &ns.name,
        &ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("serving.knative.dev", "v1", "Revision"),
            "revisions",
        ),
    );
    wait_exists(&revisions, "hello-00001", TIMEOUT).await;
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns.name);
    let revision = wait_exists(&deployments, "hello-00001-deployment", TIMEOUT).await;
    let containers = revision
        .spec
        .and_then(|s| s.template.spec)
        .map(|p| p.containers)
        .unwrap_or_default();
    let image_of = |name: &str| {
        containers
            .iter()
            .find(|c| c.name == name)
            .and_then(|c| c.image.clone())
            .unwrap_or_default()
    };
    assert_eq!(image_of("user-container"), APP_IMAGE);
    assert_eq!(image_of("queue-proxy"), queue, "the configured queue-proxy");
    assert!(ctl.is_running(), "{}", ctl.log_text());
    assert_eq!(
        op.writes().await,
        before,
        "the Knative operator wrote nothing while Knative's controller worked"
    );
    // The Service goes while the controller still runs: it clears the
    // finalizers it set on what it made.
    let services: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        &ns.name,
        &ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("serving.knative.dev", "v1", "Service"),
            "services",
        ),
    );
    services
        .delete("hello", &DeleteParams::foreground())
        .await
        .expect("delete the Service");
    wait_gone(&services, "hello", TIMEOUT).await;
    wait_gone(&revisions, "hello-00001", TIMEOUT).await;
    // The Route and Configuration too: each holds the controller's
    // finalizer, and one left when the controller stops holds its CRD's
    // deletion below, and every later test's sweep (CI: meta.rs waited
    // 180 s for routes.serving.knative.dev in each of its five tests).
    for (kind, plural) in [("Route", "routes"), ("Configuration", "configurations")] {
        let api: Api<DynamicObject> = Api::namespaced_with(
            client.clone(),
            &ns.name,
            &ApiResource::from_gvk_with_plural(
                &GroupVersionKind::gvk("serving.knative.dev", "v1", kind),
                plural,
            ),
        );
        kubeflow_e2e::objects::wait_none_left(&api, &Default::default(), TIMEOUT).await;
    }
    drop(ctl);

    // KServe's Serverless mode is accepted now that Knative is there.
    let yaml = "apiVersion: components.kubeflow.org/v1alpha1\nkind: Serving\nmetadata: {name: kubeflow}\nspec:\n  version: v0.18.0\n  deploymentMode: Serverless\n";
    let serving_op = "kubeflow-serving-operator";
    let (serving, servings, _) = start_ready(&client, &ns.name, serving_op, yaml, TIMEOUT).await;
    kubeflow_e2e::component::delete_and_wait(&servings, "kubeflow", TIMEOUT).await;
    drop(serving);

    // Removal with crdPolicy: Delete takes Knative's CRDs once none of
    // their objects is left; the namespaces stay.
    delete_and_wait(&knatives, "kubeflow", TIMEOUT).await;
    assert!(!exists(&client, SERVING, "controller").await);
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    wait_for("Knative's CRDs to go", TIMEOUT, || async {
        crds.get_opt("services.serving.knative.dev")
            .await
            .ok()?
            .is_none()
            .then_some(())
    })
    .await;
    assert!(
        Api::<Namespace>::all(client.clone())
            .get_opt(SERVING)
            .await
            .expect("get")
            .is_some()
    );
    drop(op);
    ns.delete().await;
    let _ = std::fs::remove_dir_all(&dir);
}
