//! What is held or kept is said: a component set to `Removed` that others
//! still need makes the `Kubeflow` resource not Ready, naming both; a
//! managed object another controller's finalizer holds in deletion makes
//! its component not Ready, naming the object and the finalizer, until it
//! is released; a removal names every object it kept; and no aggregated
//! ClusterRole comes back after a removal (Kubernetes' role-aggregation
//! controller wrote deleted ones back).

use std::time::Duration;

use k8s_openapi::api::core::v1::{Namespace, Service};
use k8s_openapi::api::rbac::v1::ClusterRole;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use kubeflow_e2e::component::{
    ALL_COMPONENTS, ALL_KINDS, apply_resource, component_api, condition, delete_and_wait,
    install_training, merge, wait_condition, wait_gone, wait_not_ready,
};
use kubeflow_e2e::operator::OperatorProcess;
use kubeflow_e2e::{TestNamespace, apply_yaml, wait_for};
use serde_json::json;

const TIMEOUT: Duration = Duration::from_secs(90);
/// The finalizer the test holds a managed object with.
const HOLD: &str = "e2e.kubeflow.org/hold";

#[tokio::test]
async fn a_removed_dashboard_that_notebooks_need_is_named_and_not_ready() {
    let (client, _g) = kubeflow_e2e::component::prepare(&ALL_KINDS, &ALL_COMPONENTS).await;
    let ns = TestNamespace::new(&client, "needed").await;
    // The meta-operator alone: the children's own readiness does not
    // matter, only what the Kubeflow resource says of the removal.
    let _meta = OperatorProcess::start("kubeflow-meta-operator", &[]);
    let yaml = "apiVersion: platform.kubeflow.org/v1alpha1\nkind: Kubeflow\nmetadata: {name: kubeflow}\nspec:\n  version: \"26.03\"\n  components:\n    dashboard: {managementState: Managed}\n    notebooks: {managementState: Managed}\n";
    let (kfs, _) = apply_resource(&client, &ns.name, yaml).await;
    let dashboards = component_api(&client, &ns.name, "Dashboard");
    let notebooks = component_api(&client, &ns.name, "Notebooks");
    // Notebooks waits for the Dashboard to be Ready: the test reports it
    // Ready as its operator would (no operator runs here).
    let dashboard = wait_for("the Dashboard child", TIMEOUT, || async {
        dashboards.get_opt("kubeflow").await.ok()?
    })
    .await;
    let generation = dashboard.metadata.generation;
    dashboards
        .patch_status(
            "kubeflow",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {
                "observedGeneration": generation,
                "version": dashboard.data.pointer("/spec/version"),
                "conditions": [{"type": "Ready", "status": "True", "reason": "Ready",
                    "message": "reported by the test", "observedGeneration": generation,
                    "lastTransitionTime": "2026-01-01T00:00:00Z"}],
            }})),
        )
        .await
        .expect("report the Dashboard Ready");
    wait_for("the Notebooks child", TIMEOUT, || async {
        notebooks.get_opt("kubeflow").await.ok()?
    })
    .await;

    merge(
        &kfs,
        "kubeflow",
        json!({"spec": {"components": {"dashboard": {"managementState": "Removed"}}}}),
    )
    .await;
    let kf = wait_for(
        "the Kubeflow resource to name the kept Dashboard",
        TIMEOUT,
        || async {
            let kf = kfs.get("kubeflow").await.ok()?;
            let (status, reason, message, g) = condition(&kf, "Degraded")?;
            (status == "True" && reason == "RemovedComponentNeeded" && g == kf.metadata.generation)
                .then_some((kf, message))
        },
    )
    .await;
    let (kf, message) = kf;
    assert!(
        message.contains("dashboard") && message.contains("notebooks"),
        "{message}"
    );
    let (ready, reason, _, _) = condition(&kf, "Ready").expect("Ready");
    assert_eq!(
        (ready.as_str(), reason.as_str()),
        ("False", "RemovedComponentNeeded")
    );
    assert_eq!(
        kf.data.pointer("/status/phase").and_then(|p| p.as_str()),
        Some("Degraded")
    );
    assert!(
        dashboards.get_opt("kubeflow").await.expect("get").is_some(),
        "kept while Notebooks needs it"
    );

    // Notebooks Removed too: both go (Notebooks first), and nothing is
    // reported kept any more.
    merge(
        &kfs,
        "kubeflow",
        json!({"spec": {"components": {"notebooks": {"managementState": "Removed"}}}}),
    )
    .await;
    wait_gone(&notebooks, "kubeflow", TIMEOUT).await;
    wait_gone(&dashboards, "kubeflow", TIMEOUT).await;
    wait_for("the report to go", TIMEOUT, || async {
        let kf = kfs.get("kubeflow").await.ok()?;
        let (_, reason, _, g) = condition(&kf, "Ready")?;
        (reason != "RemovedComponentNeeded" && g == kf.metadata.generation).then_some(())
    })
    .await;
    delete_and_wait(&kfs, "kubeflow", TIMEOUT).await;
    ns.delete().await;
}

#[tokio::test]
async fn a_managed_object_held_in_deletion_makes_its_component_not_ready_until_released() {
    let (client, _g) = kubeflow_e2e::component::prepare(&["Training"], &["training"]).await;
    let (ns, _op, trainings, _) = install_training(&client, "held", TIMEOUT).await;

    // Someone else's finalizer on a managed Service, then a delete: the
    // Service stays, on its way out.
    let services: Api<Service> = Api::namespaced(client.clone(), &ns.name);
    let name = "training-operator";
    let uid = services.get(name).await.expect("service").uid();
    services
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": [HOLD]}})),
        )
        .await
        .expect("add the finalizer");
    services
        .delete(name, &DeleteParams::default())
        .await
        .expect("delete");
    let message = wait_not_ready(&trainings, "DeletionHeld", TIMEOUT).await;
    assert!(
        message.contains(&format!("Service {}/{name}", ns.name)) && message.contains(HOLD),
        "{message}"
    );
    // Still held a while later: never Ready meanwhile.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let cr = trainings.get("kubeflow").await.expect("cr");
    assert_eq!(
        condition(&cr, "Ready").map(|c| c.0),
        Some("False".to_string())
    );

    // Released: the Service goes, is recreated, and the component is Ready.
    services
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": null}})),
        )
        .await
        .expect("remove the finalizer");
    wait_for("the Service recreated", TIMEOUT, || async {
        let s = services.get_opt(name).await.ok()??;
        (s.uid() != uid && s.metadata.deletion_timestamp.is_none()).then_some(())
    })
    .await;
    wait_condition(&trainings, "kubeflow", "Ready", "True", TIMEOUT).await;
    kubeflow_e2e::component::delete_and_wait(&trainings, "kubeflow", TIMEOUT).await;
    ns.delete().await;
}

/// The names of the aggregated ClusterRoles (those with an
/// `aggregationRule`) labelled as the component's.
async fn aggregated_roles(client: &kube::Client, component: &str) -> Vec<String> {
    Api::<ClusterRole>::all(client.clone())
        .list(
            &ListParams::default()
                .labels(&format!("components.kubeflow.org/component={component}")),
        )
        .await
        .expect("list ClusterRoles")
        .items
        .into_iter()
        .filter(|r| r.aggregation_rule.is_some())
        .map(|r| r.name_any())
        .collect()
}

/// Asserts, for a while after a removal (the aggregation controller acts
/// within milliseconds, a stale queue within a second or two), that none of
/// `names` exists and no ClusterRole carries the component's label.
async fn assert_no_role_comes_back(client: &kube::Client, component: &str, names: &[String]) {
    let roles: Api<ClusterRole> = Api::all(client.clone());
    for _ in 0..10 {
        for n in names {
            let back = roles.get_opt(n).await.expect("get");
            assert!(
                back.is_none(),
                "ClusterRole {n} is there after the removal: {:?}",
                back.map(|r| (r.labels().clone(), r.managed_fields().len()))
            );
        }
        let labelled = roles
            .list_metadata(&ListParams::default().labels(&format!(
                "applyset.kubernetes.io/part-of,components.kubeflow.org/component={component}"
            )))
            .await
            .expect("list");
        assert!(
            labelled.items.is_empty(),
            "{:?}",
            labelled
                .items
                .iter()
                .map(|r| r.name_any())
                .collect::<Vec<_>>()
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Installs Knative (Serving and Eventing) from a Knative resource in `ns`
/// and waits until it is Ready; returns its aggregated ClusterRoles.
async fn install_knative(client: &kube::Client, ns: &str) -> Vec<String> {
    let knatives = component_api(client, ns, "Knative");
    apply_yaml(
        client,
        ns,
        "apiVersion: components.kubeflow.org/v1alpha1\nkind: Knative\nmetadata: {name: kubeflow}\nspec:\n  version: v1.22.0\n  eventing: true\n",
    )
    .await;
    wait_condition(
        &knatives,
        "kubeflow",
        "Ready",
        "True",
        Duration::from_secs(180),
    )
    .await;
    let names = aggregated_roles(client, "knative").await;
    assert!(!names.is_empty(), "Knative's bundle aggregates roles");
    names
}

#[tokio::test]
async fn removal_leaves_no_aggregated_cluster_role_behind() {
    let (client, _g) = kubeflow_e2e::component::prepare(&["Knative"], &["knative"]).await;
    kubeflow_e2e::component::install_bundle_crds(&client, "istio/1.30.1/crds.yaml").await;
    apply_yaml(
        &client,
        "default",
        "apiVersion: v1\nkind: Namespace\nmetadata: {name: istio-system}\n",
    )
    .await;
    let _op = OperatorProcess::start("kubeflow-knative-operator", &[]);

    // The resource deleted (an uninstall).
    let ns = TestNamespace::new(&client, "aggregated").await;
    let names = install_knative(&client, &ns.name).await;
    let knatives = component_api(&client, &ns.name, "Knative");
    knatives
        .delete("kubeflow", &DeleteParams::default())
        .await
        .expect("delete");
    wait_gone(&knatives, "kubeflow", Duration::from_secs(180)).await;
    assert_no_role_comes_back(&client, "knative", &names).await;
    ns.delete().await;

    // The namespace holding the resource deleted.
    let ns = TestNamespace::new(&client, "aggregated").await;
    let names = install_knative(&client, &ns.name).await;
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let ns_name = ns.name.clone();
    ns.delete().await;
    wait_gone(&namespaces, &ns_name, Duration::from_secs(180)).await;
    assert_no_role_comes_back(&client, "knative", &names).await;
}
