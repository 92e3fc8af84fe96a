//! An air-gapped install: the `Kubeflow` CR at 26.03 with one mirror
//! registry set, every operator running; Kubeflow becomes Ready and no
//! object the project created (nor any pod its workloads run) names an image
//! outside the mirror. A registry that is not one is refused by name.

use std::time::Duration;

use kube::api::DynamicObject;
use kubeflow_e2e::component::{
    ALL_COMPONENTS, ALL_KINDS, component_api, condition, delete_and_wait, merge, wait_condition,
};
use kubeflow_e2e::demo::{COMPONENTS, tool_ok};
use kubeflow_e2e::operator::OperatorProcess;
use kubeflow_e2e::{TestNamespace, apply_yaml, wait_for};
use kubeflow_operator::images;
use serde_json::{Value, json};

const TIMEOUT: Duration = Duration::from_secs(180);
const MIRROR: &str = "registry.local:5000";

/// Every object of every listable kind matching `selector` (or in `namespace`).
fn objects(args: &[&str]) -> Vec<DynamicObject> {
    let kinds = tool_ok("kubectl", &["api-resources", "--verbs=list", "-o", "name"]);
    let kinds: Vec<&str> = kinds.lines().filter(|k| !k.starts_with("events")).collect();
    let joined = kinds.join(",");
    let mut all = vec!["get", joined.as_str(), "-o", "json"];
    all.extend_from_slice(args);
    let list: Value = serde_json::from_str(&tool_ok("kubectl", &all)).expect("list");
    list["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|o| serde_json::from_value(o.clone()).ok())
        .collect()
}

fn tool_ok_or_none(args: &[&str]) -> Option<String> {
    let out = kubeflow_e2e::run_tool("kubectl", args);
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).to_string())
}

/// The first container image of a Deployment.
fn deployment_image(namespace: &str, name: &str) -> String {
    tool_ok(
        "kubectl",
        &[
            "-n",
            namespace,
            "get",
            "deployment",
            name,
            "-o",
            "jsonpath={.spec.template.spec.containers[0].image}",
        ],
    )
}

#[tokio::test]
async fn with_a_mirror_set_kubeflow_is_ready_and_every_image_comes_from_it() {
    let (client, _g) = kubeflow_e2e::component::prepare(&ALL_KINDS, &ALL_COMPONENTS).await;
    let ns = TestNamespace::new(&client, "mirror").await;
    let user = kubeflow_e2e::login::TestUser::random("user@example.com");
    kubeflow_e2e::login::create_users_secret(&client, &ns.name, &[user]).await;
    let _operators: Vec<OperatorProcess> = COMPONENTS
        .iter()
        .map(|c| OperatorProcess::start(&format!("kubeflow-{c}-operator"), &[]))
        .collect();
    let managed = "{managementState: Managed}";
    let auth = kubeflow_e2e::login::AUTH_ENTRY;
    apply_yaml(
        &client,
        &ns.name,
        &format!(
            "apiVersion: platform.kubeflow.org/v1alpha1\nkind: Kubeflow\nmetadata: {{name: kubeflow}}\nspec:\n  version: \"26.03\"\n  imageRegistry: {MIRROR}\n  components:\n    istio: {managed}\n    certManager: {managed}\n    {auth}\n    dashboard: {managed}\n    notebooks: {managed}\n    katib: {{managementState: Managed, spec: {{volumePolicy: Delete}}}}\n    modelRegistry: {{managementState: Managed, spec: {{volumePolicy: Delete}}}}\n    spark: {managed}\n    knative: {{managementState: Managed, spec: {{eventing: true}}}}\n    training: {managed}\n    trainer: {managed}\n    pipelines: {{managementState: Managed, spec: {{volumePolicy: Delete}}}}\n    serving: {managed}\n"
        ),
    )
    .await;
    let kfs = component_api(&client, &ns.name, "Kubeflow");
    wait_condition(&kfs, "kubeflow", "Ready", "True", TIMEOUT).await;

    // What the project created, anywhere, and every pod in its namespaces.
    let mut scanned = objects(&["-A", "-l", "components.kubeflow.org/component"]);
    let namespaces: Vec<String> = std::iter::once(ns.name.clone())
        .chain(kubeflow_e2e::component::all_own_namespaces().map(String::from))
        .collect();
    for namespace in namespaces.iter().map(String::as_str) {
        scanned.extend(
            objects(&["-n", namespace])
                .into_iter()
                .filter(|o| o.types.as_ref().is_some_and(|t| t.kind == "Pod")),
        );
    }
    let found = images::find(&scanned);
    let listed = images::distinct(&found);
    assert!(listed.len() > 30, "only {} images found", listed.len());
    let outside: Vec<&images::Found> = found
        .iter()
        .filter(|f| !f.image.starts_with(MIRROR))
        .collect();
    assert!(
        outside.is_empty(),
        "images outside the mirror: {outside:#?}"
    );

    // A registry that is not one: refused by name, nothing changed.
    let trainings = component_api(&client, &ns.name, "Training");
    merge(
        &kfs,
        "kubeflow",
        json!({"spec": {"components": {"training": {"spec": {"imageRegistry": "https://registry.local"}}}}}),
    )
    .await;
    let message = wait_for("the refusal of a URL as a registry", TIMEOUT, || async {
        let cr = trainings.get("kubeflow").await.ok()?;
        let (status, reason, message, _) = condition(&cr, "Ready")?;
        (status == "False" && reason == "InvalidSpec").then_some(message)
    })
    .await;
    assert!(message.contains("spec.imageRegistry"), "{message}");
    let image = deployment_image(&ns.name, "training-operator");
    assert!(image.starts_with(MIRROR), "unchanged: {image}");

    // Digests from a map that lacks some images: refused, naming them; nothing changes.
    let digest = format!("sha256:{}", "0".repeat(64));
    apply_yaml(
        &client,
        &ns.name,
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
    let trainers = component_api(&client, &ns.name, "Trainer");
    let message = wait_for(
        "the refusal of images without a digest",
        TIMEOUT,
        || async {
            let cr = trainers.get("kubeflow").await.ok()?;
            let (status, reason, message, _) = condition(&cr, "Ready")?;
            (status == "False" && reason == "ImageDigestMissing").then_some(message)
        },
    )
    .await;
    assert!(
        message.contains("spec.imageDigests") && message.contains(MIRROR),
        "{message}"
    );
    // Training's one image is in the map: pinned.
    let pinned = wait_for("training's image pinned by digest", TIMEOUT, || async {
        let image = deployment_image(&ns.name, "training-operator");
        image.ends_with(&digest).then_some(image)
    })
    .await;
    assert!(pinned.starts_with(MIRROR), "{pinned}");
    let unpinned = deployment_image(&ns.name, "kubeflow-trainer-controller-manager");
    assert!(
        !unpinned.contains('@'),
        "the refused component changed: {unpinned}"
    );

    // The map is watched: a new digest takes effect at once (well within
    // the 30 s safety requeue, and nothing else touches the resource).
    let digest2 = format!("sha256:{}", "1".repeat(64));
    let unpinned_image = pinned.split('@').next().unwrap_or_default().to_string();
    apply_yaml(
        &client,
        &ns.name,
        &format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: digests}}\ndata:\n  digests: |\n    {unpinned_image} {digest2}\n"
        ),
    )
    .await;
    wait_for(
        "the new digest applied",
        Duration::from_secs(10),
        || async {
            deployment_image(&ns.name, "training-operator")
                .ends_with(&digest2)
                .then_some(())
        },
    )
    .await;
    // Deleted, the map stops nothing but what depends on it: the digests it
    // last held stay applied, Degraded says the map is missing, and a
    // deleted object of the component is still put back.
    tool_ok_or_none(&["-n", &ns.name, "delete", "configmap", "digests"]);
    let message = wait_for("Degraded for the missing map", TIMEOUT, || async {
        let cr = trainings.get("kubeflow").await.ok()?;
        let (status, reason, message, _) = condition(&cr, "Degraded")?;
        (status == "True" && reason == "PrerequisiteMissing").then_some(message)
    })
    .await;
    assert!(message.contains("last held"), "{message}");
    tool_ok_or_none(&[
        "-n",
        &ns.name,
        "delete",
        "serviceaccount",
        "training-operator",
    ]);
    wait_for("the ServiceAccount put back", TIMEOUT, || async {
        tool_ok_or_none(&["-n", &ns.name, "get", "serviceaccount", "training-operator"])
    })
    .await;
    assert!(
        deployment_image(&ns.name, "training-operator").ends_with(&digest2),
        "the digest last read stays"
    );

    delete_and_wait(&kfs, "kubeflow", TIMEOUT).await;
    // The components' own namespaces are released, not deleted, with the
    // components: this test made them, so it removes them.
    for own in kubeflow_e2e::component::all_own_namespaces() {
        let _ = tool_ok_or_none(&["delete", "namespace", own, "--wait=true"]);
    }
    ns.delete().await;
}
