//! The Istio operator, as a process: install into istio-system, repair,
//! upgrade 1.26.1 -> 1.28.0, and full removal from istio-system.

use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams};
use kubeflow_e2e::component::{delete_and_wait, install, wait_condition};
use kubeflow_e2e::objects::first_image;
use kubeflow_e2e::wait_for;
use serde_json::{Value, json};

const TIMEOUT: Duration = Duration::from_secs(90);

#[tokio::test]
async fn istio_installs_repairs_upgrades_and_is_removed_from_istio_system() {
    let (client, _g) = kubeflow_e2e::component::prepare(&["Istio"], &["istio"]).await;
    let yaml = "apiVersion: components.kubeflow.org/v1alpha1\nkind: Istio\nmetadata: {name: kubeflow}\nspec:\n  version: \"1.26.1\"\n  istiod: {replicas: 2}\n  meshConfig: {accessLogFile: \"\"}\n";
    let (ns, _op, istios, cr) =
        install(&client, "istio", "kubeflow-istio-operator", yaml, TIMEOUT).await;
    let workloads: Vec<String> = cr
        .data
        .pointer("/status/workloads")
        .and_then(Value::as_array)
        .map(|ws| {
            ws.iter()
                .filter_map(|w| w["name"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default();
    assert!(
        workloads.contains(&"istiod".to_string())
            && workloads.contains(&"istio-ingressgateway".to_string()),
        "{workloads:?}"
    );

    let deployments: Api<Deployment> = Api::namespaced(client.clone(), "istio-system");
    let istiod = deployments
        .get("istiod")
        .await
        .expect("istiod in istio-system");
    assert_eq!(istiod.spec.and_then(|s| s.replicas), Some(2));
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "istio-system");
    let mesh = cms
        .get("istio")
        .await
        .expect("mesh config")
        .data
        .and_then(|d| d.get("mesh").cloned())
        .unwrap_or_default();
    assert!(
        mesh.contains("accessLogFile: ''") || mesh.contains("accessLogFile: \"\""),
        "{mesh}"
    );

    // Deleting istiod brings it back within a second.
    let old = deployments.get("istiod").await.expect("istiod").uid();
    deployments
        .delete("istiod", &DeleteParams::background())
        .await
        .expect("delete istiod");
    let start = Instant::now();
    wait_for(
        "istiod to be recreated",
        Duration::from_secs(10),
        || async {
            let d = deployments.get_opt("istiod").await.ok()??;
            (d.uid() != old).then_some(())
        },
    )
    .await;
    assert!(
        start.elapsed() < Duration::from_secs(1),
        "istiod took {:?}",
        start.elapsed()
    );
    wait_condition(&istios, "kubeflow", "Ready", "True", TIMEOUT).await;

    wait_condition(&istios, "kubeflow", "Ready", "True", TIMEOUT).await;

    // Upgrade: the 1.28.0 bundle applies, the version follows.
    kubeflow_e2e::component::merge(&istios, "kubeflow", json!({"spec": {"version": "1.28.0"}}))
        .await;
    let cr = wait_condition(&istios, "kubeflow", "Ready", "True", TIMEOUT).await;
    assert_eq!(cr.data.pointer("/status/version"), Some(&json!("1.28.0")));
    let image = first_image(deployments.get("istiod").await.expect("istiod"));
    assert!(image.ends_with("1.28.0"), "{image}");

    // Deletion removes everything it made from istio-system; the namespace
    // it created is released, not deleted (whatever else lives there stays).
    delete_and_wait(&istios, "kubeflow", TIMEOUT).await;
    wait_for("istiod to go", TIMEOUT, || async {
        deployments
            .get_opt("istiod")
            .await
            .ok()?
            .is_none_or(|d| d.metadata.deletion_timestamp.is_some())
            .then_some(())
    })
    .await;
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let kept = namespaces
        .get("istio-system")
        .await
        .expect("istio-system is kept");
    assert!(kept.metadata.deletion_timestamp.is_none());
    assert!(
        !kept.labels().contains_key("applyset.kubernetes.io/part-of"),
        "released: no inventory holds it"
    );
    // Waited for: a test after this one that needs the namespace (Auth's)
    // would otherwise meet it terminating (CI: login.rs after istio.rs).
    let _ = namespaces
        .delete("istio-system", &DeleteParams::default())
        .await;
    kubeflow_e2e::component::wait_gone(&namespaces, "istio-system", TIMEOUT).await;
    ns.delete().await;
}
