//! Declared Profiles are watched as the cluster-scoped kind they are, also
//! where the operator installs only into allowed namespaces (as the chart
//! runs it): a watch of them per namespace never saw one, so an owner edit
//! or a deletion waited for the 10-minute resync.

use std::time::{Duration, Instant};

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::ResourceExt;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject};
use kube::core::GroupVersionKind;
use kubeflow_e2e::component::{
    chart_namespaces, component_api, install_bundle_crds, merge, wait_condition, wait_gone,
};
use kubeflow_e2e::operator::OperatorProcess;
use kubeflow_e2e::{TestNamespace, apply_yaml, wait_for};
use serde_json::json;

const TIMEOUT: Duration = Duration::from_secs(120);
const PROFILE: &str = "team-watched";
const OWNER: &str = "jane@example.com";

fn profiles(client: &kube::Client) -> Api<DynamicObject> {
    Api::all_with(
        client.clone(),
        &ApiResource::from_gvk(&GroupVersionKind::gvk("kubeflow.org", "v1", "Profile")),
    )
}

#[tokio::test]
async fn declared_profiles_are_repaired_within_a_second_with_allowed_namespaces() {
    let (client, _g) = kubeflow_e2e::component::prepare(&["Dashboard"], &["dashboard"]).await;
    install_bundle_crds(&client, "istio/1.30.1/crds.yaml").await;
    install_bundle_crds(&client, "cert-manager/v1.20.2/cert-manager.yaml").await;
    let all_profiles = profiles(&client);
    // An earlier run's profile (kept on removal, as declared profiles are).
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    if crds
        .get_opt("profiles.kubeflow.org")
        .await
        .expect("get")
        .is_some()
    {
        let _ = all_profiles.delete(PROFILE, &DeleteParams::default()).await;
        wait_gone(&all_profiles, PROFILE, TIMEOUT).await;
    }
    let ns = TestNamespace::new(&client, "profiles").await;
    let allowed = std::iter::once(ns.name.as_str())
        .chain(chart_namespaces())
        .collect::<Vec<_>>()
        .join(",");
    let _op = OperatorProcess::start_with_env(
        "kubeflow-dashboard-operator",
        &[],
        &[("ALLOWED_NAMESPACES", &allowed)],
    );
    let dashboards = component_api(&client, &ns.name, "Dashboard");
    apply_yaml(
        &client,
        &ns.name,
        &format!(
            "apiVersion: components.kubeflow.org/v1alpha1\nkind: Dashboard\nmetadata: {{name: kubeflow}}\nspec:\n  version: v1.10.0\n  profiles:\n    - {{name: {PROFILE}, owner: {OWNER}}}\n"
        ),
    )
    .await;
    wait_condition(&dashboards, "kubeflow", "Ready", "True", TIMEOUT).await;

    // An owner edited by hand is put back within a second.
    merge(
        &all_profiles,
        PROFILE,
        json!({"spec": {"owner": {"kind": "User", "name": "mallory@example.com"}}}),
    )
    .await;
    let start = Instant::now();
    wait_for("the owner put back", Duration::from_secs(30), || async {
        let p = all_profiles.get(PROFILE).await.ok()?;
        (p.data.pointer("/spec/owner/name") == Some(&json!(OWNER))).then_some(())
    })
    .await;
    let took = start.elapsed();
    assert!(took < Duration::from_secs(1), "the owner took {took:?}");

    // A deleted declared profile is back within a second.
    let uid = all_profiles.get(PROFILE).await.expect("profile").uid();
    all_profiles
        .delete(PROFILE, &DeleteParams::background())
        .await
        .expect("delete");
    let start = Instant::now();
    wait_for("the profile recreated", Duration::from_secs(30), || async {
        let p = all_profiles.get_opt(PROFILE).await.ok()??;
        (p.uid() != uid && p.metadata.deletion_timestamp.is_none()).then_some(())
    })
    .await;
    let took = start.elapsed();
    assert!(took < Duration::from_secs(1), "the profile took {took:?}");

    kubeflow_e2e::component::delete_and_wait(&dashboards, "kubeflow", TIMEOUT).await;
    let _ = all_profiles.delete(PROFILE, &DeleteParams::default()).await;
    ns.delete().await;
}
