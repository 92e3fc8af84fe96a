//! What the operator knows of Kubeflow's dashboard: its bundles (three
//! files at v1.10.0, one at v2.0.0 with nearly every object renamed), the
//! aggregated Kubeflow roles it takes from the platform glue of the same
//! release, where self-registration is switched, and what it needs of
//! Istio and cert-manager.
//!
//! Declared profiles are Profile objects (see `profiles`): the profile
//! controller makes each one's namespace, owner binding and Istio access.
//! A profile removed from the list is released with its namespace unless
//! `removedProfiles: Delete`; removing the Dashboard itself never deletes
//! one (the namespaces hold the users' notebooks, volumes and runs).

use std::collections::BTreeSet;

use kubeflow_operator::api::{
    ComponentResource, ContributorRole, Dashboard, DashboardStatus, DeclaredProfile,
    RemovedProfiles,
};
use kubeflow_operator::async_trait::async_trait;
use kubeflow_operator::component::{Component, DereferenceError, Draft, Refusal, require_crd};
use kubeflow_operator::conditions::Reason;
use kubeflow_operator::kinds::kind;
use kubeflow_operator::kube::api::{Api, ApiResource, DynamicObject, ListParams};
use kubeflow_operator::kube::core::GroupVersionKind;
use kubeflow_operator::kube::{Client, Resource};
use kubeflow_operator::rbac::Permissions;
use kubeflow_operator::render::{Layout, Target};
use kubeflow_operator::{labels, transform};
use serde_json::Value;

use crate::{profile_rights, profiles};

/// The namespace the upstream bundles install into; it moves to the CR's.
const BUNDLE_NAMESPACE: &str = "kubeflow";
/// The platform glue's folder, of which only the ClusterRoles are applied:
/// `kubeflow-admin`, `-edit`, `-view` and the roles aggregated into them.
const PLATFORM: &str = "platform";
/// The platform glue of the Kubeflow release each dashboard was released in.
const PLATFORM_BESIDE: &[(&str, &str)] = &[("v1.10.0", "26.03"), ("v2.0.0", "26.03.1")];
/// The workloads of both versions (replicas, resources and scheduling apply to all).
const WORKLOADS: [&str; 5] = [
    "centraldashboard",
    "dashboard",
    "profiles-deployment",
    "admission-webhook-deployment",
    "poddefaults-webhook-deployment",
];
/// The dashboard's switch for self-registration: an environment variable
/// (v1.10.0), a key of its parameters ConfigMap (v2.0.0, and v1.10.0's
/// unused `CD_` copy).
const REGISTRATION: [&str; 2] = ["REGISTRATION_FLOW", "CD_REGISTRATION_FLOW"];
/// The Profile CRD.
const PROFILE_CRD: &str = "profiles.kubeflow.org";
/// The roles a contributor may have.
const CONTRIBUTOR_ROLES: [ContributorRole; 2] = [ContributorRole::Edit, ContributorRole::View];

/// A declared profile, or a contributor's access to one.
fn is_tenancy(cr: &Dashboard, obj: &DynamicObject) -> bool {
    match kind(obj) {
        "Profile" => true,
        "RoleBinding" | "AuthorizationPolicy" => {
            obj.metadata.namespace.as_deref() != cr.meta().namespace.as_deref()
                && obj
                    .metadata
                    .name
                    .as_deref()
                    .is_some_and(profiles::is_access_name)
        }
        _ => false,
    }
}

/// The Dashboard component.
pub struct DashboardComponent;

/// What the Dashboard reads on the cluster besides its bundles.
#[derive(Default)]
pub struct Found {
    /// Existing profiles the operator did not make (their names).
    pub foreign: Vec<String>,
    /// Declared profiles with contributors whose namespace the profile
    /// controller has made (owned by the Profile).
    pub ready: BTreeSet<String>,
}

/// The platform version paired with a dashboard version.
fn platform_of(version: &str) -> Option<&'static str> {
    PLATFORM_BESIDE
        .iter()
        .find(|(d, _)| *d == version)
        .map(|(_, p)| *p)
}

/// Names of the profiles that exist and that this operator did not make.
async fn foreign_profiles(client: &Client) -> Result<Vec<String>, DereferenceError> {
    use kubeflow_operator::k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let present = crds
        .get_metadata_opt(PROFILE_CRD)
        .await
        .map_err(|e| DereferenceError::Api("look for the Profile CRD", e))?;
    if present.is_none() {
        return Ok(Vec::new());
    }
    let ar = ApiResource::from_gvk_with_plural(&profiles::kind(), "profiles");
    let all: Api<DynamicObject> = Api::all_with(client.clone(), &ar);
    let list = all
        .list_metadata(&ListParams::default())
        .await
        .map_err(|e| DereferenceError::Api("list profiles", e))?;
    let ours = kubeflow_operator::component::operator_name::<Dashboard>();
    Ok(list
        .items
        .into_iter()
        .filter(|p| {
            let l = p.metadata.labels.as_ref();
            let label = |k: &str| l.and_then(|l| l.get(k)).map(String::as_str);
            label(labels::COMPONENT) != Some(Dashboard::COMPONENT)
                && label(labels::MANAGED_BY) != Some(ours.as_str())
        })
        .filter_map(|p| p.metadata.name)
        .collect())
}

/// The declared profiles with contributors whose namespace exists and is
/// the profile's (the profile controller owns it by the Profile; one of
/// the same name that is not the profile's gets no one's access).
async fn ready_namespaces(
    client: &Client,
    profiles: &[DeclaredProfile],
) -> Result<BTreeSet<String>, DereferenceError> {
    use kubeflow_operator::k8s_openapi::api::core::v1::Namespace;
    let api: Api<Namespace> = Api::all(client.clone());
    let mut out = BTreeSet::new();
    for p in profiles
        .iter()
        .filter(|p| p.contributors.as_ref().is_some_and(|c| !c.is_empty()))
    {
        let ns = api
            .get_metadata_opt(&p.name)
            .await
            .map_err(|e| DereferenceError::Api("read a profile's namespace", e))?;
        let owned = ns.is_some_and(|ns| {
            ns.metadata.owner_references.iter().flatten().any(|r| {
                r.kind == "Profile"
                    && r.name == p.name
                    && r.api_version.starts_with("kubeflow.org/")
            })
        });
        if owned {
            out.insert(p.name.clone());
        }
    }
    Ok(out)
}

/// Self-registration on or off, wherever the version reads it.
fn registration(objects: &mut [DynamicObject], on: bool) {
    let value = on.to_string();
    for key in REGISTRATION {
        transform::set_env_where_present(objects, key, &value);
    }
    for cm in objects.iter_mut().filter(|o| kind(o) == "ConfigMap") {
        for key in REGISTRATION {
            if cm.data["data"].get(key).is_some() {
                cm.data["data"][key] = Value::String(value.clone());
            }
        }
    }
}

#[async_trait]
impl Component for DashboardComponent {
    type Resource = Dashboard;
    type Inputs = Found;

    const LAYOUT: Layout = Layout {
        from_namespaces: &[BUNDLE_NAMESPACE],
        target: Target::ResourceNamespace,
        workloads: &WORKLOADS,
    };

    fn permissions(&self) -> Permissions {
        Permissions::bundles(&[Dashboard::COMPONENT])
            .with_adjusted(profile_rights::narrow)
            .with_kinds_of(PLATFORM, &["ClusterRole"])
            .with_labelled("kubeflow.org", "profiles")
            .with_tenant_access(&CONTRIBUTOR_ROLES.map(profiles::role_name))
    }

    fn watched_kinds(&self) -> Vec<GroupVersionKind> {
        vec![
            GroupVersionKind::gvk("rbac.authorization.k8s.io", "v1", "RoleBinding"),
            GroupVersionKind::gvk("security.istio.io", "v1beta1", "AuthorizationPolicy"),
            profiles::kind(),
        ]
    }

    async fn dereference(
        &self,
        cr: &Dashboard,
        client: &Client,
    ) -> Result<Found, DereferenceError> {
        require_crd(
            client,
            "virtualservices.networking.istio.io",
            "the dashboard and KFAM route through Istio; enable istio in the Kubeflow resource (or install Istio)",
        )
        .await?;
        require_crd(
            client,
            "certificates.cert-manager.io",
            "the PodDefaults webhook gets its certificate from cert-manager; enable certManager in the Kubeflow resource (or install cert-manager)",
        )
        .await?;
        let declared = cr.spec.profiles.as_deref().unwrap_or_default();
        if declared.is_empty() {
            return Ok(Found::default());
        }
        Ok(Found {
            foreign: foreign_profiles(client).await?,
            ready: ready_namespaces(client, declared).await?,
        })
    }

    fn prepare(&self, draft: &mut Draft<'_, Self>) -> Result<(), Refusal> {
        let (cr, ctx, found) = (draft.cr, draft.ctx, draft.inputs);
        let spec = &cr.spec;
        let objects = &mut draft.objects;
        let declared = spec.profiles.clone().unwrap_or_default();
        profiles::check(&declared, ctx.namespace)?;
        profiles::refuse_taken(&declared, &found.foreign)?;
        let Some(platform) = platform_of(&draft.version) else {
            return Err(Refusal::new(
                Reason::UnknownVersion,
                format!(
                    "dashboard {} has no Kubeflow roles paired with it (known: {})",
                    draft.version,
                    PLATFORM_BESIDE
                        .iter()
                        .map(|(d, _)| *d)
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            ));
        };
        objects.extend(
            ctx.bundle_at(PLATFORM, platform)?
                .objects()
                .into_iter()
                .filter(|o| kind(o) == "ClusterRole"),
        );
        profile_rights::narrow(objects);
        registration(objects, spec.self_registration.unwrap_or(false));
        Ok(())
    }

    fn customise(&self, draft: &mut Draft<'_, Self>) -> Result<(), Refusal> {
        let (cr, ctx, found) = (draft.cr, draft.ctx, draft.inputs);
        let declared = cr.spec.profiles.clone().unwrap_or_default();
        let objects = &mut draft.objects;
        objects.extend(profiles::objects(&declared));
        objects.extend(profiles::access_objects(
            &declared,
            &found.ready,
            ctx.namespace,
        ));
        Ok(())
    }

    /// Declared profiles are kept when the Dashboard goes, with their
    /// contributors' access: each holds a namespace with the users' data,
    /// and the people working there.
    fn retain(&self, cr: &Dashboard, obj: &DynamicObject) -> bool {
        is_tenancy(cr, obj) && cr.meta().deletion_timestamp.is_some()
    }

    /// A profile taken off the list is released with its contributors'
    /// access, unless `removedProfiles: Delete`; a contributor taken off a
    /// profile still listed loses their access.
    fn release_on_prune(&self, cr: &Dashboard, obj: &DynamicObject) -> Option<String> {
        if cr.spec.removed_profiles.unwrap_or_default() != RemovedProfiles::Release {
            return None;
        }
        if kind(obj) == "Profile" {
            return Some("no longer in spec.profiles; kept with its namespace and everything in it (removedProfiles: Release), and released: delete the Profile to delete them".to_string());
        }
        let namespace = obj.metadata.namespace.as_deref().unwrap_or_default();
        let still_declared = cr
            .spec
            .profiles
            .iter()
            .flatten()
            .any(|p| p.name == namespace);
        (is_tenancy(cr, obj) && !still_declared).then(|| {
            format!("a contributor's access to profile {namespace:?}, released with the profile (removedProfiles: Release)")
        })
    }

    async fn report(
        &self,
        cr: &Dashboard,
        live: &[DynamicObject],
        _client: &Client,
        status: &mut DashboardStatus,
    ) {
        let declared = cr.spec.profiles.as_deref().unwrap_or_default();
        status.profile_count = Some(i32::try_from(declared.len()).unwrap_or(i32::MAX));
        // A profile whose contributors have no binding yet: its namespace
        // is not there (the profile controller has not made it).
        let pending: Vec<String> = declared
            .iter()
            .filter(|p| p.contributors.as_ref().is_some_and(|c| !c.is_empty()))
            .filter(|p| {
                !live.iter().any(|o| {
                    kind(o) == "RoleBinding" && o.metadata.namespace.as_deref() == Some(&p.name)
                })
            })
            .map(|p| p.name.clone())
            .collect();
        status.contributors_pending = (!pending.is_empty()).then_some(pending);
    }

    /// Soon again while a declared profile's namespace is awaited, so its
    /// contributors get access within 10 s of the profile controller
    /// making it (nothing of ours is watched there yet).
    fn recheck_soon(&self, status: &DashboardStatus) -> bool {
        status.contributors_pending.is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kubeflow_operator::component::{assert_permitted, every_version, find, render_spec};
    use serde_json::json;

    #[test]
    fn its_role_covers_what_it_renders_for_every_version_and_platform() {
        assert_permitted(&DashboardComponent, |dir| {
            let mut specs = every_version(dir, "dashboard");
            let with_profiles: Vec<Value> = specs
                .iter()
                .map(|s| json!({"version": s["version"], "profiles": [{"name": "team-a", "owner": "jane@example.com", "resourceQuota": {"cpu": "8"}}]}))
                .collect();
            specs.extend(with_profiles);
            specs
        });
    }

    #[test]
    fn the_kubeflow_roles_come_with_either_version_and_self_registration_is_a_switch() {
        for version in ["v1.10.0", "v2.0.0"] {
            let r = render_spec(
                &DashboardComponent,
                json!({"version": version, "selfRegistration": true}),
                &Found::default(),
            )
            .expect("render");
            for role in ["kubeflow-admin", "kubeflow-edit", "kubeflow-view"] {
                assert!(find(&r, "ClusterRole", role).is_some(), "{version}: {role}");
            }
            assert!(
                r.objects
                    .iter()
                    .all(|o| kind(o) != "Gateway" && kind(o) != "Profile"),
                "{version}"
            );
            let text = serde_json::to_string(&r.objects).expect("json");
            assert!(
                !text.contains("\"REGISTRATION_FLOW\":\"false\""),
                "{version}"
            );
            assert!(
                text.contains("\"REGISTRATION_FLOW\":\"true\"")
                    || text.contains("{\"name\":\"REGISTRATION_FLOW\",\"value\":\"true\"}"),
                "{version}"
            );
        }
    }

    #[test]
    fn declared_profiles_become_profiles_and_a_taken_name_is_refused() {
        let spec = json!({"version": "v2.0.0", "profiles": [
            {"name": "team-a", "owner": "jane@example.com", "resourceQuota": {"cpu": "8", "requests.nvidia.com/gpu": "2"}},
            {"name": "team-b", "owner": "joe@example.com"}]});
        let r = render_spec(&DashboardComponent, spec.clone(), &Found::default()).expect("render");
        let a = find(&r, "Profile", "team-a").expect("team-a");
        assert_eq!(
            a.data["spec"]["owner"],
            json!({"kind": "User", "name": "jane@example.com"})
        );
        assert_eq!(
            a.data["spec"]["resourceQuotaSpec"]["hard"]["requests.nvidia.com/gpu"],
            "2"
        );
        assert!(find(&r, "Profile", "team-b").is_some());
        let foreign = Found {
            foreign: vec!["team-b".to_string()],
            ..Found::default()
        };
        let taken = render_spec(&DashboardComponent, spec, &foreign)
            .err()
            .expect("refused");
        assert_eq!(taken.reason, Reason::OwnershipConflict);
    }

    fn with_contributors() -> Value {
        json!({"version": "v2.0.0", "profiles": [
            {"name": "team-a", "owner": "jane@example.com", "contributors": [
                {"user": "Joe.Bloggs@example.com", "role": "edit"},
                {"group": "ml-researchers", "role": "view"}]},
            {"name": "team-b", "owner": "joe@example.com", "contributors": [
                {"user": "jane@example.com", "role": "view"}]}]})
    }

    #[test]
    fn contributors_get_kfams_bindings_once_the_namespace_is_the_profiles() {
        let ready = Found {
            ready: ["team-a".to_string()].into(),
            ..Found::default()
        };
        let r = render_spec(&DashboardComponent, with_contributors(), &ready).expect("render");
        let user = "user-joe-bloggs-example-com-clusterrole-edit";
        let rb = r
            .objects
            .iter()
            .find(|o| kind(o) == "RoleBinding" && o.metadata.name.as_deref() == Some(user))
            .expect("the user's binding");
        assert_eq!(rb.metadata.namespace.as_deref(), Some("team-a"));
        assert_eq!(rb.data["roleRef"]["name"], "kubeflow-edit");
        assert_eq!(
            rb.data["subjects"],
            json!([{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "Joe.Bloggs@example.com"}])
        );
        let annotations = rb.metadata.annotations.clone().expect("annotations");
        assert_eq!(annotations["user"], "Joe.Bloggs@example.com");
        assert_eq!(annotations["role"], "edit");
        let ap = find(&r, "AuthorizationPolicy", user).expect("the user's policy");
        assert_eq!(
            ap.data["spec"]["rules"][0]["when"],
            json!([{"key": "request.headers[kubeflow-userid]", "values": ["Joe.Bloggs@example.com"]}])
        );
        let group = "group-ml-researchers-clusterrole-view";
        let gb = find(&r, "RoleBinding", group).expect("the group's binding");
        assert_eq!(gb.data["subjects"][0]["kind"], "Group");
        assert_eq!(gb.data["roleRef"]["name"], "kubeflow-view");
        assert!(find(&r, "AuthorizationPolicy", group).is_none());
        // team-b's namespace is not there yet: nothing in it.
        assert!(
            r.objects
                .iter()
                .all(|o| o.metadata.namespace.as_deref() != Some("team-b"))
        );
        // And the operator's role covers what it writes there.
        let rules = kubeflow_operator::component::rules_of(
            &DashboardComponent,
            &kubeflow_operator::component::manifests_dir(),
        )
        .expect("rules");
        let gaps = kubeflow_operator::rbac::missing(&rules, &r.objects);
        assert!(gaps.is_empty(), "{gaps:#?}");
        assert!(
            rules
                .pins
                .as_ref()
                .expect("pins")
                .resources
                .iter()
                .any(|m| m.resource == "authorizationpolicies" && m.delete)
        );
    }

    #[test]
    fn contributors_are_refused_by_their_place() {
        for (contributors, expected) in [
            (
                json!([{"user": "joe", "role": "edit"}]),
                "contributors[0].user",
            ),
            (
                json!([{"user": "jane@example.com", "role": "edit"}]),
                "the profile's owner",
            ),
            (
                json!([{"group": "system:serviceaccounts", "role": "view"}]),
                "contributors[0].group",
            ),
            (json!([{"role": "view"}]), "exactly one of user and group"),
            (
                json!([{"user": "joe@example.com", "group": "g", "role": "view"}]),
                "exactly one of user and group",
            ),
            (
                json!([{"user": "joe@example.com", "role": "view"}, {"user": "Joe@example.com", "role": "edit"}]),
                "contributors[1] is contributors[0] again",
            ),
            (
                json!([{"group": "---", "role": "view"}]),
                "no letter or digit",
            ),
        ] {
            let spec = json!({"version": "v2.0.0", "profiles": [
                {"name": "team-a", "owner": "jane@example.com", "contributors": contributors}]});
            let r = render_spec(&DashboardComponent, spec, &Found::default())
                .err()
                .expect(expected);
            assert_eq!(r.reason, Reason::InvalidSpec);
            assert!(r.message.contains(expected), "{expected}: {}", r.message);
        }
    }

    #[test]
    fn kubernetes_identities_are_no_people_and_the_profile_list_is_bounded() {
        let refused = |spec: serde_json::Value| {
            render_spec(&DashboardComponent, spec, &Found::default())
                .err()
                .expect("refused")
        };
        for (owner, contributors, field) in [
            (
                "system:serviceaccount:kubeflow:default",
                json!([]),
                "spec.profiles[0].owner",
            ),
            (
                "system:anonymous@example.com",
                json!([]),
                "spec.profiles[0].owner",
            ),
            (
                "jane@example.com",
                json!([{"user": "system:serviceaccount:team-a:default-editor", "role": "edit"}]),
                "spec.profiles[0].contributors[0].user",
            ),
            (
                "jane@example.com",
                json!([{"group": "system:unauthenticated", "role": "view"}]),
                "spec.profiles[0].contributors[0].group",
            ),
            (
                "jane@example.com",
                json!([{"group": "system:anonymous", "role": "view"}]),
                "spec.profiles[0].contributors[0].group",
            ),
        ] {
            let r = refused(json!({"version": "v2.0.0", "profiles": [
                {"name": "team-a", "owner": owner, "contributors": contributors}]}));
            assert_eq!(r.reason, Reason::InvalidSpec);
            assert!(
                r.message.starts_with(field) && r.message.contains("keeps for itself"),
                "{field}: {}",
                r.message
            );
        }
        let many = |n: usize| -> Vec<serde_json::Value> {
            (0..n)
                .map(|i| json!({"name": format!("team-{i}"), "owner": "jane@example.com"}))
                .collect()
        };
        let r = refused(json!({"version": "v2.0.0", "profiles": many(1001)}));
        assert!(
            r.message
                .starts_with("spec.profiles: 1001 profiles declared; at most 1000"),
            "{}",
            r.message
        );
        render_spec(
            &DashboardComponent,
            json!({"version": "v2.0.0", "profiles": many(1000)}),
            &Found::default(),
        )
        .expect("1000 profiles render");
    }

    #[test]
    fn a_released_profile_keeps_its_contributors_and_a_removed_contributor_goes() {
        let cr: Dashboard = serde_json::from_value(json!({
            "apiVersion": "components.kubeflow.org/v1alpha1", "kind": "Dashboard",
            "metadata": {"name": "kubeflow", "namespace": "kubeflow"},
            "spec": {"version": "v2.0.0", "profiles": [{"name": "team-a", "owner": "jane@example.com"}]}}))
        .expect("cr");
        let binding = |ns: &str| -> DynamicObject {
            serde_json::from_value(json!({
                "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                "metadata": {"name": "user-joe-example-com-clusterrole-edit", "namespace": ns}}))
            .expect("binding")
        };
        assert!(
            DashboardComponent
                .release_on_prune(&cr, &binding("team-gone"))
                .is_some()
        );
        assert!(
            DashboardComponent
                .release_on_prune(&cr, &binding("team-a"))
                .is_none()
        );
        let bundles: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": {"name": "dashboard", "namespace": "kubeflow"}}))
        .expect("binding");
        assert!(DashboardComponent.release_on_prune(&cr, &bundles).is_none());
    }
}
