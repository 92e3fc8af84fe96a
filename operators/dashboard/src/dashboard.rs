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

use kubeflow_operator::api::{ComponentResource, Dashboard, DashboardStatus, RemovedProfiles};
use kubeflow_operator::async_trait::async_trait;
use kubeflow_operator::component::{
    Component, DereferenceError, Refusal, RenderContext, Rendered, require_crd,
};
use kubeflow_operator::conditions::Reason;
use kubeflow_operator::kinds::kind;
use kubeflow_operator::kube::api::{Api, ApiResource, DynamicObject, ListParams};
use kubeflow_operator::kube::core::GroupVersionKind;
use kubeflow_operator::kube::{Client, Resource};
use kubeflow_operator::rbac::Permissions;
use kubeflow_operator::render::{self, Placement};
use kubeflow_operator::{labels, transform};
use serde_json::Value;

use crate::profiles;

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

/// The Dashboard component.
pub struct DashboardComponent;

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
    /// Existing profiles the operator did not make.
    type Inputs = Vec<String>;

    fn permissions(&self) -> Permissions {
        Permissions::bundles(&[Dashboard::COMPONENT])
            .with_kinds_of(PLATFORM, &["ClusterRole"])
            .with_labelled("kubeflow.org", "profiles")
    }

    fn watched_kinds(&self) -> Vec<GroupVersionKind> {
        vec![
            GroupVersionKind::gvk("rbac.authorization.k8s.io", "v1", "RoleBinding"),
            profiles::kind(),
        ]
    }

    async fn dereference(
        &self,
        cr: &Dashboard,
        client: &Client,
    ) -> Result<Vec<String>, DereferenceError> {
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
        if cr.spec.profiles.as_ref().is_none_or(Vec::is_empty) {
            return Ok(Vec::new());
        }
        foreign_profiles(client).await
    }

    fn render(
        &self,
        cr: &Dashboard,
        ctx: &RenderContext<'_>,
        foreign: &Vec<String>,
    ) -> Result<Rendered, Refusal> {
        let spec = &cr.spec;
        let declared = spec.profiles.clone().unwrap_or_default();
        profiles::check(&declared, ctx.namespace)?;
        profiles::refuse_taken(&declared, foreign)?;
        let bundle = ctx.bundle()?;
        let version = bundle.version.clone();
        let mut objects = bundle.objects();
        let Some(platform) = platform_of(&version) else {
            return Err(Refusal::new(
                Reason::UnknownVersion,
                format!(
                    "dashboard {version} has no Kubeflow roles paired with it (known: {})",
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
        registration(&mut objects, spec.self_registration.unwrap_or(false));
        let placement = Placement {
            from_namespaces: &[BUNDLE_NAMESPACE],
            target: ctx.namespace,
            workloads: &WORKLOADS,
        };
        render::apply_common(&mut objects, &spec.common, &placement, ctx.platform)?;
        objects.extend(profiles::objects(&declared));
        Ok(Rendered { objects, version })
    }

    /// Declared profiles are kept when the Dashboard goes: each holds a
    /// namespace with the users' data.
    fn retain(&self, cr: &Dashboard, obj: &DynamicObject) -> bool {
        kind(obj) == "Profile" && cr.meta().deletion_timestamp.is_some()
    }

    /// A profile taken off the list is released, unless `removedProfiles:
    /// Delete`.
    fn release_on_prune(&self, cr: &Dashboard, obj: &DynamicObject) -> Option<String> {
        (kind(obj) == "Profile"
            && cr.spec.removed_profiles.unwrap_or_default() == RemovedProfiles::Release)
            .then(|| {
                "no longer in spec.profiles; kept with its namespace and everything in it (removedProfiles: Release), and released: delete the Profile to delete them".to_string()
            })
    }

    async fn report(
        &self,
        cr: &Dashboard,
        _live: &[DynamicObject],
        _client: &Client,
        status: &mut DashboardStatus,
    ) {
        let count = cr.spec.profiles.as_ref().map_or(0, Vec::len);
        status.profile_count = Some(i32::try_from(count).unwrap_or(i32::MAX));
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
                &Vec::new(),
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
        let r = render_spec(&DashboardComponent, spec.clone(), &Vec::new()).expect("render");
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
        let taken = render_spec(&DashboardComponent, spec, &vec!["team-b".to_string()])
            .err()
            .expect("refused");
        assert_eq!(taken.reason, Reason::OwnershipConflict);
    }
}
