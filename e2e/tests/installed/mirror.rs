//! An air-gapped install: the shared install (see main.rs) moved to one
//! mirror registry; Kubeflow is Ready again and no object the project
//! created (nor any pod its workloads run) names an image outside the
//! mirror. A registry that is not one is refused by name; a digest map that
//! lacks images is refused naming them, and is watched.

use std::time::Duration;

use kube::api::DynamicObject;
use kubeflow_e2e::component::{component_api, merge, ready_at, wait_degraded, wait_not_ready};
use kubeflow_e2e::demo::{KUBEFLOW_NAMESPACE, tool_ok};
use kubeflow_e2e::{apply_yaml, wait_for};
use kubeflow_operator::images;
use serde_json::{Value, json};

const TIMEOUT: Duration = Duration::from_secs(180);
pub const MIRROR: &str = "registry.local:5000";

/// Every object of each of `kinds` (kubectl's names) carrying a component
/// label, anywhere.
fn labelled_objects(kinds: &str) -> Vec<DynamicObject> {
    let list: Value = serde_json::from_str(&tool_ok(
        "kubectl",
        &[
            "get",
            kinds,
            "-A",
            "-l",
            "components.kubeflow.org/component",
            "-o",
            "json",
        ],
    ))
    .expect("list");
    list["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|o| serde_json::from_value(o.clone()).ok())
        .collect()
}

/// Every pod in `namespaces`, as the image scan reads objects: one list
/// (this scan is polled, and listing every kind in each namespace for its
/// pods was thousands of requests a pass).
async fn pods_in(client: &kube::Client, namespaces: &[String]) -> Vec<DynamicObject> {
    let pods: kube::Api<k8s_openapi::api::core::v1::Pod> = kube::Api::all(client.clone());
    let list = pods.list(&Default::default()).await.expect("list pods");
    list.items
        .into_iter()
        .filter(|p| {
            p.metadata
                .namespace
                .as_ref()
                .is_some_and(|n| namespaces.contains(n))
        })
        .filter_map(|p| {
            let mut v = serde_json::to_value(&p).ok()?;
            v["apiVersion"] = json!("v1");
            v["kind"] = json!("Pod");
            serde_json::from_value(v).ok()
        })
        .collect()
}

fn tool_ok_or_none(args: &[&str]) -> Option<String> {
    let out = kubeflow_e2e::run_tool("kubectl", args);
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).to_string())
}

/// The first container image of a Deployment (a client call: it is polled).
async fn deployment_image(client: &kube::Client, namespace: &str, name: &str) -> String {
    let deployments: kube::Api<k8s_openapi::api::apps::v1::Deployment> =
        kube::Api::namespaced(client.clone(), namespace);
    kubeflow_e2e::objects::first_image(
        deployments
            .get(name)
            .await
            .unwrap_or_else(|e| panic!("deployment {namespace}/{name}: {e}")),
    )
}

/// The shared install moved to the mirror: every image from it, and the
/// refusals of a registry that is not one and of a digest map that lacks
/// images. Leaves the mirror set (the flows after it look at no image).
pub async fn check(client: &kube::Client) {
    let ns = KUBEFLOW_NAMESPACE;
    let kfs = component_api(client, ns, "Kubeflow");
    merge(&kfs, "kubeflow", json!({"spec": {"imageRegistry": MIRROR}})).await;
    ready_at(&kfs, "kubeflow", "26.03.1", TIMEOUT).await;

    // What the project created, anywhere, and every pod in its namespaces,
    // once the rollouts are done (a pod of an old ReplicaSet may still be
    // going).
    let namespaces: Vec<String> = std::iter::once(ns.to_string())
        .chain(kubeflow_e2e::component::all_own_namespaces().map(String::from))
        .collect();
    let kinds = tool_ok("kubectl", &["api-resources", "--verbs=list", "-o", "name"]);
    let kinds: Vec<&str> = kinds.lines().filter(|k| !k.starts_with("events")).collect();
    let kinds = kinds.join(",");
    let scan = || async {
        let mut scanned = labelled_objects(&kinds);
        scanned.extend(pods_in(client, &namespaces).await);
        images::find(&scanned)
    };
    let found = wait_for("every image from the mirror", TIMEOUT, || async {
        let found = scan().await;
        found
            .iter()
            .all(|f| f.image.starts_with(MIRROR))
            .then_some(found)
    })
    .await;
    let listed = images::distinct(&found);
    assert!(listed.len() > 30, "only {} images found", listed.len());

    // A registry that is not one: refused by name, nothing changed.
    let trainings = component_api(client, ns, "Training");
    merge(
        &kfs,
        "kubeflow",
        json!({"spec": {"components": {"training": {"spec": {"imageRegistry": "https://registry.local"}}}}}),
    )
    .await;
    let message = wait_not_ready(&trainings, "InvalidSpec", TIMEOUT).await;
    assert!(message.contains("spec.imageRegistry"), "{message}");
    let image = deployment_image(client, ns, "training-operator").await;
    assert!(image.starts_with(MIRROR), "unchanged: {image}");

    // Digests from a map that lacks some images: refused, naming them; nothing changes.
    let digest = format!("sha256:{}", "0".repeat(64));
    apply_yaml(
        client,
        ns,
        &format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: digests}}\ndata:\n  digests: |\n    {image} {digest}\n"
        ),
    )
    .await;
    merge(
        &kfs,
        "kubeflow",
        json!({"spec": {"imageDigests": "digests", "components": {"training": {"spec": null}}}}),
    )
    .await;
    let trainers = component_api(client, ns, "Trainer");
    let message = wait_not_ready(&trainers, "ImageDigestMissing", TIMEOUT).await;
    assert!(
        message.contains("spec.imageDigests") && message.contains(MIRROR),
        "{message}"
    );
    // Training's one image is in the map: pinned.
    let pinned = wait_for("training's image pinned by digest", TIMEOUT, || async {
        let image = deployment_image(client, ns, "training-operator").await;
        image.ends_with(&digest).then_some(image)
    })
    .await;
    assert!(pinned.starts_with(MIRROR), "{pinned}");
    let unpinned = deployment_image(client, ns, "kubeflow-trainer-controller-manager").await;
    assert!(
        !unpinned.contains('@'),
        "the refused component changed: {unpinned}"
    );

    // The map is watched: a new digest takes effect at once (well within
    // the 30 s safety requeue, and nothing else touches the resource).
    let digest2 = format!("sha256:{}", "1".repeat(64));
    let unpinned_image = pinned.split('@').next().unwrap_or_default().to_string();
    apply_yaml(
        client,
        ns,
        &format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: digests}}\ndata:\n  digests: |\n    {unpinned_image} {digest2}\n"
        ),
    )
    .await;
    wait_for(
        "the new digest applied",
        Duration::from_secs(10),
        || async {
            deployment_image(client, ns, "training-operator")
                .await
                .ends_with(&digest2)
                .then_some(())
        },
    )
    .await;
    // Deleted, the map stops nothing but what depends on it: the digests it
    // last held stay applied, Degraded says the map is missing, and a
    // deleted object of the component is still put back.
    tool_ok_or_none(&["-n", ns, "delete", "configmap", "digests"]);
    let message = wait_degraded(&trainings, "PrerequisiteMissing", "", TIMEOUT).await;
    assert!(message.contains("last held"), "{message}");
    tool_ok_or_none(&["-n", ns, "delete", "serviceaccount", "training-operator"]);
    wait_for("the ServiceAccount put back", TIMEOUT, || async {
        tool_ok_or_none(&["-n", ns, "get", "serviceaccount", "training-operator"])
    })
    .await;
    assert!(
        deployment_image(client, ns, "training-operator")
            .await
            .ends_with(&digest2),
        "the digest last read stays"
    );

    // The map goes from the resource; the mirror stays.
    merge(&kfs, "kubeflow", json!({"spec": {"imageDigests": null}})).await;
}
