//! Declared contributors as the chart runs the Dashboard operator (its
//! ServiceAccount, `ALLOWED_NAMESPACES`, the admission pins): given on the
//! `Kubeflow` resource, they reach the Dashboard, which stays Ready and
//! keeps repairing the rest of itself while it binds them in a profile
//! namespace outside the allowed ones; one taken off the `Kubeflow`
//! resource is gone from the child and loses its access. (A contributor once
//! turned the whole Dashboard to `NamespaceNotAllowed` under the chart, and
//! a removal inside the profiles list never reached the child.) Leaves the
//! install's profiles as it found them.

use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::api::rbac::v1::RoleBinding;
use kube::ResourceExt;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, PostParams};
use kube::core::GroupVersionKind;
use kubeflow_e2e::component::{component_api, condition, merge, profile_namespace, wait_gone};
use kubeflow_e2e::demo::KUBEFLOW_NAMESPACE;
use kubeflow_e2e::objects::exists;
use kubeflow_e2e::wait::wait_for;
use serde_json::{Value, json};

const TIMEOUT: Duration = Duration::from_secs(180);
/// The profile this flow declares; its namespace is outside the operators'
/// allowed namespaces, as every profile namespace is.
const TEAM: &str = "team-contributors";
/// The binding and policy names the Dashboard gives a person and a group.
const USER_BINDING: &str = "user-joe-example-com-clusterrole-edit";
const GROUP_BINDING: &str = "group-ml-researchers-clusterrole-view";

fn gvk_api(
    client: &kube::Client,
    ns: Option<&str>,
    gvk: GroupVersionKind,
    plural: &str,
) -> Api<DynamicObject> {
    let resource = ApiResource::from_gvk_with_plural(&gvk, plural);
    match ns {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &resource),
        None => Api::all_with(client.clone(), &resource),
    }
}

/// The Kubeflow resource's Dashboard profiles, with `team` after the
/// install's own (read back, so what the example declares stays).
fn profiles_with(existing: &[Value], team: Option<Value>) -> Value {
    let mut list: Vec<Value> = existing
        .iter()
        .filter(|p| p["name"] != TEAM)
        .cloned()
        .collect();
    list.extend(team);
    json!({"spec": {"components": {"dashboard": {"spec": {"profiles": list}}}}})
}

/// Whether the Dashboard resource is Ready at its current generation.
fn ready(cr: &DynamicObject) -> bool {
    condition(cr, "Ready").is_some_and(|(s, _, _, g)| s == "True" && g == cr.metadata.generation)
}

pub async fn check(client: &kube::Client) {
    let ns = KUBEFLOW_NAMESPACE;
    let kfs = component_api(client, ns, "Kubeflow");
    let dashboards = component_api(client, ns, "Dashboard");
    let kf = kfs.get("kubeflow").await.expect("the Kubeflow resource");
    let existing: Vec<Value> = kf
        .data
        .pointer("/spec/components/dashboard/spec/profiles")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let team = |contributors: Value| json!({"name": TEAM, "owner": "jane@example.com", "contributors": contributors});
    let joe = json!({"user": "Joe@example.com", "role": "edit"});
    let group = json!({"group": "ml-researchers", "role": "view"});

    merge(
        &kfs,
        "kubeflow",
        profiles_with(&existing, Some(team(json!([joe, group])))),
    )
    .await;
    // The profile controller makes the namespace of a declared Profile; the
    // flow makes it as that controller would (owned by the Profile).
    let profiles = kubeflow_e2e::component::profiles(client);
    let profile = wait_for("the declared Profile", TIMEOUT, || async {
        profiles.get_opt(TEAM).await.ok()?
    })
    .await;
    let namespaces: Api<Namespace> = Api::all(client.clone());
    namespaces
        .create(
            &PostParams::default(),
            &profile_namespace(TEAM, &profile.uid().expect("uid")),
        )
        .await
        .expect("the profile's namespace");

    // KFAM's objects for both contributors, the Dashboard Ready at its
    // generation with nothing pending, the Kubeflow resource Ready.
    let bindings: Api<RoleBinding> = Api::namespaced(client.clone(), TEAM);
    let policies = gvk_api(
        client,
        Some(TEAM),
        GroupVersionKind::gvk("security.istio.io", "v1beta1", "AuthorizationPolicy"),
        "authorizationpolicies",
    );
    let joe_binding = wait_for("the contributors' bindings and policy", TIMEOUT, || async {
        let b = bindings.get_opt(USER_BINDING).await.ok()??;
        bindings.get_opt(GROUP_BINDING).await.ok()??;
        policies.get_opt(USER_BINDING).await.ok()??;
        Some(b)
    })
    .await;
    assert_eq!(joe_binding.role_ref.name, "kubeflow-edit");
    wait_for(
        "the Dashboard Ready with nothing pending",
        TIMEOUT,
        || async {
            let cr = dashboards.get("kubeflow").await.ok()?;
            (ready(&cr) && cr.data.pointer("/status/contributorsPending").is_none()).then_some(())
        },
    )
    .await;
    let cr = dashboards.get("kubeflow").await.expect("the Dashboard");
    let (_, reason, message, _) = condition(&cr, "Degraded").unwrap_or_default();
    assert_ne!(reason, "NamespaceNotAllowed", "{message}");
    wait_for("the Kubeflow resource Ready", TIMEOUT, || async {
        let kf = kfs.get("kubeflow").await.ok()?;
        ready(&kf).then_some(())
    })
    .await;

    // The rest of the Dashboard is still repaired: its web app's Deployment
    // deleted comes back.
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), ns);
    let web = deployments.get("dashboard").await.expect("the dashboard");
    deployments
        .delete("dashboard", &DeleteParams::default())
        .await
        .expect("delete the dashboard");
    wait_for("the dashboard repaired", TIMEOUT, || async {
        let again = deployments.get_opt("dashboard").await.ok()??;
        (again.uid() != web.uid()).then_some(())
    })
    .await;

    // Joe taken off on the Kubeflow resource: gone from the child, his
    // binding and policy removed; the group keeps its access.
    merge(
        &kfs,
        "kubeflow",
        profiles_with(&existing, Some(team(json!([group])))),
    )
    .await;
    wait_for("joe gone from the Dashboard's spec", TIMEOUT, || async {
        let cr = dashboards.get("kubeflow").await.ok()?;
        let listed = cr
            .data
            .pointer("/spec/profiles")?
            .as_array()?
            .iter()
            .find(|p| p["name"] == TEAM)?
            .get("contributors")?
            .clone();
        (listed == json!([group])).then_some(())
    })
    .await;
    wait_gone(&bindings, USER_BINDING, TIMEOUT).await;
    wait_gone(&policies, USER_BINDING, TIMEOUT).await;
    assert!(
        exists(&bindings, GROUP_BINDING).await,
        "the group keeps its access"
    );

    // As found: the profile off the list (released), then deleted with its
    // namespace.
    merge(&kfs, "kubeflow", profiles_with(&existing, None)).await;
    wait_for("the profile released", TIMEOUT, || async {
        let p = profiles.get_opt(TEAM).await.ok()??;
        (!p.labels().contains_key("applyset.kubernetes.io/part-of")).then_some(())
    })
    .await;
    profiles
        .delete(TEAM, &DeleteParams::background())
        .await
        .expect("delete the released profile");
    let _ = namespaces.delete(TEAM, &DeleteParams::background()).await;
    wait_gone(&profiles, TEAM, TIMEOUT).await;
    wait_for("the Kubeflow resource Ready", TIMEOUT, || async {
        let kf = kfs.get("kubeflow").await.ok()?;
        ready(&kf).then_some(())
    })
    .await;
}
