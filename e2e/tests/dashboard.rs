//! The Dashboard operator, as a process, against the real control plane:
//! the dashboard, profiles and PodDefaults at v1.10.0 with the Kubeflow
//! roles, self-registration switched on, declared profiles kept as declared
//! and repaired, a profile someone else made left alone (and a declared
//! profile of its name refused), a malformed entry refused with nothing
//! written, a profile taken off the list released and another deleted on
//! request, the upgrade to v2.0.0 (nearly every object renamed) keeping the
//! profiles, and removal keeping the CRDs and the declared profiles.
//!
//! Contributors (a person, an IdP group) get their bindings once the
//! profile's namespace exists, are repaired there, and lose them when taken
//! off the list.
//!
//! The profile controller itself is not run (its module is not served by
//! the Go module proxy here): where a namespace is needed the test makes it
//! as the controller would (owned by the Profile, with its label).

use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, RoleBinding};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::ResourceExt;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, PostParams};
use kube::core::GroupVersionKind;
use kubeflow_e2e::component::{
    condition, delete_and_wait, install, install_bundle_crds, merge, wait_condition, wait_gone,
};
use kubeflow_e2e::objects::{exists, wait_all_deleting};
use kubeflow_e2e::{apply_yaml, wait_for};
use serde_json::json;

const OPERATOR: &str = "kubeflow-dashboard-operator";
const TIMEOUT: Duration = Duration::from_secs(90);

fn env_of(d: &Deployment, name: &str) -> Option<String> {
    d.spec
        .as_ref()?
        .template
        .spec
        .as_ref()?
        .containers
        .iter()
        .find_map(|c| {
            c.env
                .as_ref()?
                .iter()
                .find(|e| e.name == name)
                .and_then(|e| e.value.clone())
        })
}

#[tokio::test]
async fn the_dashboard_keeps_declared_profiles_leaves_others_alone_refuses_releases_upgrades_and_removes()
 {
    let (client, _g) = kubeflow_e2e::component::prepare(&["Dashboard"], &["dashboard"]).await;
    install_bundle_crds(&client, "istio/1.30.1/crds.yaml").await;
    install_bundle_crds(&client, "cert-manager/v1.20.2/cert-manager.yaml").await;
    let all_profiles = kubeflow_e2e::component::profiles(&client);
    // An earlier run's profiles (kept, as declared profiles are).
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    if crds
        .get_opt("profiles.kubeflow.org")
        .await
        .expect("get")
        .is_some()
    {
        for leftover in ["team-a", "team-b", "team-c", "users-own"] {
            let _ = all_profiles
                .delete(leftover, &DeleteParams::default())
                .await;
            wait_gone(&all_profiles, leftover, TIMEOUT).await;
        }
    }
    // An earlier run's profile namespace (made by the test below).
    let leftover: Api<Namespace> = Api::all(client.clone());
    let _ = leftover.delete("team-a", &DeleteParams::default()).await;
    wait_gone(&leftover, "team-a", TIMEOUT).await;
    let yaml = "apiVersion: components.kubeflow.org/v1alpha1\nkind: Dashboard\nmetadata: {name: kubeflow}\nspec:\n  version: v1.10.0\n  selfRegistration: true\n  profiles:\n    - {name: team-a, owner: jane@example.com, resourceQuota: {cpu: \"8\", requests.nvidia.com/gpu: \"2\"}}\n    - {name: team-b, owner: joe@example.com}\n";
    let (ns, op, dashboards, cr) = install(&client, "dashboard", OPERATOR, yaml, TIMEOUT).await;
    assert_eq!(cr.data.pointer("/status/profileCount"), Some(&json!(2)));

    // The profiles as declared, the Kubeflow roles, self-registration on.
    let a = all_profiles.get("team-a").await.expect("team-a");
    assert_eq!(
        a.data["spec"]["owner"],
        json!({"kind": "User", "name": "jane@example.com"})
    );
    assert_eq!(
        a.data["spec"]["resourceQuotaSpec"]["hard"]["requests.nvidia.com/gpu"],
        "2"
    );
    let roles: Api<ClusterRole> = Api::all(client.clone());
    for role in ["kubeflow-admin", "kubeflow-edit", "kubeflow-view"] {
        assert!(roles.get_opt(role).await.expect("get").is_some(), "{role}");
    }
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns.name);
    let dashboard = deployments
        .get("centraldashboard")
        .await
        .expect("dashboard");
    assert_eq!(
        env_of(&dashboard, "REGISTRATION_FLOW").as_deref(),
        Some("true")
    );

    wait_condition(&dashboards, "kubeflow", "Ready", "True", TIMEOUT).await;
    // The profile controller is bound to the rights it uses, not
    // cluster-admin; the binding an install made before left (to
    // cluster-admin) is replaced, its roleRef being immutable.
    let bindings: Api<ClusterRoleBinding> = Api::all(client.clone());
    let role_of = || async {
        bindings
            .get_opt("profiles-cluster-rolebinding")
            .await
            .expect("get")
            .map(|b| b.role_ref.name)
    };
    assert_eq!(
        role_of().await.as_deref(),
        Some("kubeflow-profiles-controller")
    );
    let _ = bindings
        .delete("profiles-cluster-rolebinding", &DeleteParams::default())
        .await;
    apply_yaml(
        &client,
        &ns.name,
        &format!("apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\nmetadata: {{name: profiles-cluster-rolebinding}}\nroleRef: {{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: cluster-admin}}\nsubjects: [{{kind: ServiceAccount, name: profiles-controller-service-account, namespace: {}}}]\n", ns.name),
    )
    .await;
    wait_for(
        "the binding to the profile controller's role",
        TIMEOUT,
        || async {
            (role_of().await.as_deref() == Some("kubeflow-profiles-controller")).then_some(())
        },
    )
    .await;
    wait_condition(&dashboards, "kubeflow", "Ready", "True", TIMEOUT).await;
    // What the refusals below compare with (the promises at rest are the
    // conformance suite's: installed/conformance.rs).
    let before = op.settled_writes().await;
    let a_uid = all_profiles.get("team-a").await.expect("team-a").uid();

    // A profile someone made themselves: left alone, and never taken over.
    apply_yaml(
        &client,
        &ns.name,
        "apiVersion: kubeflow.org/v1\nkind: Profile\nmetadata: {name: users-own}\nspec: {owner: {kind: User, name: ann@example.com}}\n",
    )
    .await;
    let own_version = all_profiles
        .get("users-own")
        .await
        .expect("users-own")
        .resource_version();
    tokio::time::sleep(Duration::from_secs(2)).await;
    merge(
        &dashboards,
        "kubeflow",
        json!({"spec": {"profiles": [
            {"name": "team-a", "owner": "jane@example.com", "resourceQuota": {"cpu": "8", "requests.nvidia.com/gpu": "2"}},
            {"name": "team-b", "owner": "joe@example.com"},
            {"name": "users-own", "owner": "mallory@example.com"}]}}),
    )
    .await;
    let refused = wait_condition(&dashboards, "kubeflow", "Degraded", "True", TIMEOUT).await;
    let (_, reason, message, _) = condition(&refused, "Degraded").expect("Degraded");
    assert_eq!(reason, "OwnershipConflict", "{message}");
    assert!(message.contains("users-own"), "{message}");
    assert_eq!(op.writes().await, before, "nothing written");
    assert_eq!(
        all_profiles
            .get("users-own")
            .await
            .expect("kept")
            .resource_version(),
        own_version
    );
    // A name that is not a DNS label: refused by its place.
    merge(
        &dashboards,
        "kubeflow",
        json!({"spec": {"profiles": [
            {"name": "team-a", "owner": "jane@example.com"},
            {"name": "Team_C", "owner": "joe@example.com"}]}}),
    )
    .await;
    wait_for("the malformed name refused", TIMEOUT, || async {
        let cr = dashboards.get("kubeflow").await.ok()?;
        let (_, reason, message, _) = condition(&cr, "Degraded")?;
        (reason == "InvalidSpec" && message.contains("spec.profiles[1].name")).then_some(())
    })
    .await;
    assert_eq!(op.writes().await, before, "nothing written");

    // Contributors: nothing until the profile's namespace exists, then
    // KFAM's bindings (and a person's AuthorizationPolicy). The profile
    // controller is not run here, so the test makes the namespace as it
    // would: owned by the Profile, with its profile label.
    merge(
        &dashboards,
        "kubeflow",
        json!({"spec": {"profiles": [
            {"name": "team-a", "owner": "jane@example.com", "resourceQuota": {"cpu": "8", "requests.nvidia.com/gpu": "2"},
             "contributors": [{"user": "Joe@example.com", "role": "edit"}, {"group": "ml-researchers", "role": "view"}]},
            {"name": "team-b", "owner": "joe@example.com"}]}}),
    )
    .await;
    wait_for(
        "team-a's contributors awaiting its namespace",
        TIMEOUT,
        || async {
            let cr = dashboards.get("kubeflow").await.ok()?;
            (cr.data.pointer("/status/contributorsPending") == Some(&json!(["team-a"]))
                && condition(&cr, "Ready")?.0 == "True")
                .then_some(())
        },
    )
    .await;
    let namespaces: Api<Namespace> = Api::all(client.clone());
    namespaces
        .create(
            &PostParams::default(),
            &kubeflow_e2e::component::profile_namespace("team-a", &a_uid.clone().expect("uid")),
        )
        .await
        .expect("team-a's namespace");
    let bindings: Api<RoleBinding> = Api::namespaced(client.clone(), "team-a");
    let user = "user-joe-example-com-clusterrole-edit";
    let group = "group-ml-researchers-clusterrole-view";
    let joe = wait_for("the contributors' bindings", TIMEOUT, || async {
        let joe = bindings.get_opt(user).await.ok()??;
        bindings.get_opt(group).await.ok()??;
        Some(joe)
    })
    .await;
    assert_eq!(joe.role_ref.name, "kubeflow-edit");
    let subjects = joe.subjects.clone().unwrap_or_default();
    assert_eq!(
        (subjects[0].kind.as_str(), subjects[0].name.as_str()),
        ("User", "Joe@example.com")
    );
    assert_eq!(
        joe.annotations().get("role").map(String::as_str),
        Some("edit")
    );
    let policies = Api::<DynamicObject>::namespaced_with(
        client.clone(),
        "team-a",
        &ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("security.istio.io", "v1beta1", "AuthorizationPolicy"),
            "authorizationpolicies",
        ),
    );
    // The bindings and the policies are separate writes of one pass.
    let policy = wait_for("joe's policy", TIMEOUT, || async {
        policies.get_opt(user).await.ok()?
    })
    .await;
    assert_eq!(
        policy.data["spec"]["rules"][0]["when"][0]["values"],
        json!(["Joe@example.com"])
    );
    assert!(policies.get_opt(group).await.expect("get").is_none());
    wait_for("nothing pending", TIMEOUT, || async {
        let cr = dashboards.get("kubeflow").await.ok()?;
        cr.data
            .pointer("/status/contributorsPending")
            .is_none()
            .then_some(())
    })
    .await;
    // A binding outside the allowed namespaces is watched and repaired too.
    bindings
        .delete(user, &DeleteParams::default())
        .await
        .expect("delete");
    wait_for("joe's binding repaired", TIMEOUT, || async {
        let again = bindings.get_opt(user).await.ok()??;
        (again.uid() != joe.uid()).then_some(())
    })
    .await;

    // team-b taken off the list: released, not deleted; team-a's
    // contributors taken off with it lose their access.
    merge(
        &dashboards,
        "kubeflow",
        json!({"spec": {"profiles": [
            {"name": "team-a", "owner": "jane@example.com", "resourceQuota": {"cpu": "8", "requests.nvidia.com/gpu": "2"}}]}}),
    )
    .await;
    wait_for("team-b released", TIMEOUT, || async {
        let cr = dashboards.get("kubeflow").await.ok()?;
        let released = cr.data.pointer("/status/released")?.to_string();
        (released.contains("team-b") && condition(&cr, "Ready")?.0 == "True").then_some(())
    })
    .await;
    wait_gone(&bindings, user, TIMEOUT).await;
    wait_gone(&bindings, group, TIMEOUT).await;
    wait_gone(&policies, user, TIMEOUT).await;
    let b = all_profiles.get("team-b").await.expect("team-b stays");
    assert!(b.metadata.deletion_timestamp.is_none());
    assert!(!b.labels().contains_key("applyset.kubernetes.io/part-of"));

    // The upgrade to v2.0.0: the renamed dashboard; the profile kept.
    merge(
        &dashboards,
        "kubeflow",
        json!({"spec": {"version": "v2.0.0"}}),
    )
    .await;
    kubeflow_e2e::component::wait_version_ready(&dashboards, "kubeflow", "v2.0.0", TIMEOUT).await;
    assert!(exists(&deployments, "dashboard").await);
    wait_gone(&deployments, "centraldashboard", TIMEOUT).await;
    assert_eq!(all_profiles.get("team-a").await.expect("kept").uid(), a_uid);

    // Deleted on request: removedProfiles Delete, team-a off the list.
    merge(
        &dashboards,
        "kubeflow",
        json!({"spec": {"removedProfiles": "Delete", "profiles": [{"name": "team-c", "owner": "joe@example.com"}]}}),
    )
    .await;
    wait_gone(&all_profiles, "team-a", TIMEOUT).await;
    wait_for("team-c", TIMEOUT, || async {
        all_profiles.get_opt("team-c").await.ok()?.map(|_| ())
    })
    .await;

    // Removal: the workloads go; the CRDs and the declared profile stay.
    delete_and_wait(&dashboards, "kubeflow", TIMEOUT).await;
    wait_all_deleting(&deployments, "dashboard", TIMEOUT).await;
    assert!(
        crds.get_opt("profiles.kubeflow.org")
            .await
            .expect("get")
            .is_some()
    );
    let c = all_profiles
        .get("team-c")
        .await
        .expect("a declared profile outlives the Dashboard");
    assert!(c.metadata.deletion_timestamp.is_none());
    for name in ["team-b", "team-c", "users-own"] {
        let _ = all_profiles.delete(name, &DeleteParams::default()).await;
    }
    drop(op);
    ns.delete().await;
}
