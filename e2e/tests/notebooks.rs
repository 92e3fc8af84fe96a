//! The Notebooks operator, as a process, against the real control plane:
//! culling and the spawner's settings reach the controller and the Jupyter
//! web app, every kind is repaired, a bad setting is refused with nothing
//! written, 26.03's v1.10.0 upgrades to 26.03.1's v1.11.0 with a user's
//! Notebook kept, and removal keeps the CRDs and the user's Notebook.

use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::ResourceExt;
use kube::api::{Api, ApiResource, DynamicObject, ListParams};
use kube::core::GroupVersionKind;
use kubeflow_e2e::apply_yaml;
use kubeflow_e2e::component::{degraded, delete_and_wait, install, merge, wait_condition};
use kubeflow_e2e::objects::wait_all_deleting;
use serde_json::{Value, json};

const OPERATOR: &str = "kubeflow-notebooks-operator";
const TIMEOUT: Duration = Duration::from_secs(90);
const LAB: &str = "registry.example/team/lab:2";

/// The ConfigMap of the namespace whose name starts with `prefix`.
async fn config_map(client: &kube::Client, ns: &str, prefix: &str) -> ConfigMap {
    Api::<ConfigMap>::namespaced(client.clone(), ns)
        .list(&ListParams::default())
        .await
        .expect("list")
        .items
        .into_iter()
        .find(|c| c.name_any().starts_with(prefix))
        .unwrap_or_else(|| panic!("no ConfigMap {prefix}*"))
}

fn env_value(d: &Deployment, name: &str) -> Option<String> {
    d.spec.as_ref()?.template.spec.as_ref()?.containers[0]
        .env
        .as_ref()?
        .iter()
        .find(|e| e.name == name)?
        .value
        .clone()
}

#[tokio::test]
async fn notebooks_follow_culling_and_spawner_settings_repair_refuse_upgrade_and_keep_users_notebooks()
 {
    let (client, _g) = kubeflow_e2e::component::prepare(&["Notebooks"], &["notebooks"]).await;
    kubeflow_e2e::component::install_bundle_crds(&client, "istio/1.30.1/crds.yaml").await;
    kubeflow_e2e::component::install_bundle_crds(&client, "cert-manager/v1.20.2/cert-manager.yaml")
        .await;
    let yaml = &format!(
        "apiVersion: components.kubeflow.org/v1alpha1\nkind: Notebooks\nmetadata: {{name: kubeflow}}\nspec:\n  version: v1.10.0\n  culling: {{enabled: true, idleMinutes: 60}}\n  spawner:\n    images: [\"{LAB}\"]\n    cpu: \"1\"\n    storageClass: fast-ssd\n"
    );
    let (ns, op, nbs, _) = install(&client, "notebooks", OPERATOR, yaml, TIMEOUT).await;

    // Culling: in the controller's ConfigMap and its environment.
    let controller = Api::<Deployment>::namespaced(client.clone(), &ns.name)
        .get("notebook-controller-deployment")
        .await
        .expect("controller");
    assert_eq!(
        env_value(&controller, "ENABLE_CULLING").as_deref(),
        Some("true")
    );
    assert_eq!(
        env_value(&controller, "CULL_IDLE_TIME").as_deref(),
        Some("60")
    );
    let data = config_map(&client, &ns.name, "notebook-controller-config-")
        .await
        .data
        .unwrap_or_default();
    assert_eq!(data.get("ENABLE_CULLING").map(String::as_str), Some("true"));
    // The spawner: the images offered, the default CPU, the storage class.
    let spawner_text = |cm: &ConfigMap| {
        cm.data
            .as_ref()
            .and_then(|d| d.get("spawner_ui_config.yaml").cloned())
            .unwrap_or_default()
    };
    let form: Value = serde_saphyr::from_str(&spawner_text(
        &config_map(&client, &ns.name, "jupyter-web-app-config-").await,
    ))
    .expect("spawner yaml");
    let defaults = &form["spawnerFormDefaults"];
    assert_eq!(defaults["image"], json!({"value": LAB, "options": [LAB]}));
    assert_eq!(defaults["cpu"]["value"], "1");
    assert_eq!(
        defaults["workspaceVolume"]["value"]["newPvc"]["spec"]["storageClassName"],
        "fast-ssd"
    );

    wait_condition(&nbs, "kubeflow", "Ready", "True", TIMEOUT).await;
    // What the refusals below compare with (the promises at rest are the
    // conformance suite's: installed/conformance.rs).
    let before = op.settled_writes().await;

    // A default image that is not offered: refused by name, nothing written.
    let spawner_before = config_map(&client, &ns.name, "jupyter-web-app-config-").await;
    merge(
        &nbs,
        "kubeflow",
        json!({"spec": {"spawner": {"defaultImage": "elsewhere.example/lab:9"}}}),
    )
    .await;
    let (reason, message) = degraded(&nbs, TIMEOUT).await;
    assert_eq!(reason, "InvalidSpec", "{message}");
    assert!(message.contains("spec.spawner.defaultImage"), "{message}");
    assert_eq!(op.writes().await, before, "nothing written");
    let spawner_after = config_map(&client, &ns.name, "jupyter-web-app-config-").await;
    assert_eq!(
        spawner_after.metadata.resource_version,
        spawner_before.metadata.resource_version
    );
    merge(
        &nbs,
        "kubeflow",
        json!({"spec": {"spawner": {"defaultImage": null}}}),
    )
    .await;
    wait_condition(&nbs, "kubeflow", "Ready", "True", TIMEOUT).await;

    // A user's Notebook survives the upgrade to v1.11.0 (26.03.1).
    let ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("kubeflow.org", "v1", "Notebook"),
        "notebooks",
    );
    let users: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns.name, &ar);
    apply_yaml(&client, &ns.name, "apiVersion: kubeflow.org/v1\nkind: Notebook\nmetadata: {name: user-notebook}\nspec:\n  template:\n    spec:\n      containers: [{name: user-notebook, image: example.invalid/lab:1}]\n").await;
    let user_uid = users.get("user-notebook").await.expect("notebook").uid();
    merge(&nbs, "kubeflow", json!({"spec": {"version": "v1.11.0"}})).await;
    kubeflow_e2e::component::wait_version_ready(&nbs, "kubeflow", "v1.11.0", TIMEOUT).await;
    let jwa = Api::<Deployment>::namespaced(client.clone(), &ns.name)
        .get("jupyter-web-app-deployment")
        .await
        .expect("jupyter web app");
    let image = jwa
        .spec
        .and_then(|s| s.template.spec)
        .and_then(|p| p.containers[0].image.clone())
        .unwrap_or_default();
    assert!(
        image.ends_with("/notebooks/jupyter-web-app:v1.11.0"),
        "{image}"
    );
    let form: Value = serde_saphyr::from_str(&spawner_text(
        &config_map(&client, &ns.name, "jupyter-web-app-config-f5cb").await,
    ))
    .expect("spawner yaml");
    assert_eq!(
        form["spawnerFormDefaults"]["image"]["value"], LAB,
        "the settings follow the new version's ConfigMap"
    );
    assert_eq!(
        users.get("user-notebook").await.expect("kept").uid(),
        user_uid
    );

    // Removal: the controllers go; the CRDs and the user's Notebook stay.
    delete_and_wait(&nbs, "kubeflow", TIMEOUT).await;
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns.name);
    wait_all_deleting(&deployments, "notebooks", TIMEOUT).await;
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let kept = crds.get("notebooks.kubeflow.org").await.expect("kept");
    assert!(!kept.labels().contains_key("applyset.kubernetes.io/part-of"));
    assert_eq!(
        users.get("user-notebook").await.expect("kept").uid(),
        user_uid
    );
    drop(op);
    ns.delete().await;
}
