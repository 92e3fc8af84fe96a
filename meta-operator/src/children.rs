//! The component CRs a `Kubeflow` CR stands for, rendered without API access:
//! only the fields the `Kubeflow` CR states, plus the version from the release
//! table and the resolved platform.

use kube::ResourceExt;
use kube::api::{ApiResource, DynamicObject};
use kubeflow_api::kubeflow::{ChildSpec, ManagementState, StatedEntry};
use kubeflow_api::{CommonSpec, Kubeflow, Platform};
use serde_json::json;

use crate::component_kind::ComponentKind;
use crate::release::Release;

/// One component as the `Kubeflow` CR asks for it.
#[derive(Debug, Clone, PartialEq)]
pub struct Child {
    /// Which component.
    pub component: ComponentKind,
    /// Whether it is Managed (false: Removed, or not listed).
    pub managed: bool,
    /// The child CR's spec: stated fields, version, platform.
    pub spec: ChildSpec,
}

/// A component's child spec: the fields its entry states, and the shared
/// settings the `Kubeflow` CR fills in where the entry leaves them (the
/// release's version, the resolved platform, the mirror, the digest map,
/// the upgrade strategy). Approval is the `Kubeflow` CR's (see
/// approval.rs): an entry's own approvedPlan would bypass the release's
/// digest, so it is dropped.
fn stated(
    entry: &dyn StatedEntry,
    kf: &Kubeflow,
    version: Option<&str>,
    platform: Platform,
) -> (bool, ChildSpec) {
    let fill = |common: &mut CommonSpec| {
        // A version the Kubeflow CR pins for the component wins over the release table.
        if common.version.is_none() {
            common.version = version.map(str::to_string);
        }
        common.shared.platform = Some(platform);
        if common.shared.image_registry.is_none() {
            common
                .shared
                .image_registry
                .clone_from(&kf.spec.shared.image_registry);
        }
        if common.shared.image_digests.is_none() {
            common
                .shared
                .image_digests
                .clone_from(&kf.spec.shared.image_digests);
        }
        common.shared.approved_plan = None;
        if common.shared.upgrade_strategy.is_none() {
            common.shared.upgrade_strategy = kf.spec.shared.upgrade_strategy;
        }
    };
    (entry.is_managed(), entry.child_spec(&fill))
}

/// Every component's child, in [`ComponentKind::ORDER`].
pub fn desired(kf: &Kubeflow, release: &Release, platform: Platform) -> Vec<Child> {
    let c = &kf.spec.components;
    let login = c
        .auth
        .as_ref()
        .is_some_and(|e| e.management_state == ManagementState::Managed);
    ComponentKind::ORDER
        .iter()
        .filter_map(|&component| {
            let v = release.component(component);
            // Every registry entry is a field of the Kubeflow CR (both are
            // generated from the registry): none is left out.
            let (managed, mut spec) = stated(c.entry(component.name())?, kf, v, platform);
            // The login needs Istio's side (extension provider,
            // kubeflow-gateway) unless the Istio entry says otherwise.
            if let (ChildSpec::Istio(istio), true) = (&mut spec, login) {
                istio.oauth2_proxy.get_or_insert(true);
            }
            Some(Child {
                component,
                managed,
                spec,
            })
        })
        .collect()
}

/// The child CR object: same namespace and name as the `Kubeflow` CR.
pub fn object(kf: &Kubeflow, child: &Child) -> DynamicObject {
    let ar = child.component.api_resource();
    let mut obj =
        DynamicObject::new(&kf.name_any(), &ar).within(&kf.namespace().unwrap_or_default());
    obj.data = json!({ "spec": child.spec.to_value() });
    obj
}

/// Managed components the release does not include and whose entry pins no
/// version (Trainer before 1.11.0): refused, since nothing says what to install.
pub fn outside_release(children: &[Child], release: &Release) -> Vec<ComponentKind> {
    children
        .iter()
        .filter(|c| c.managed && expected_version(c).is_none())
        .filter(|c| {
            c.component != ComponentKind::DevicePlugins && release.component(c.component).is_none()
        })
        .map(|c| c.component)
        .collect()
}

/// The version a child is expected to report.
pub fn expected_version(child: &Child) -> Option<&str> {
    child.spec.common().version.as_deref()
}

/// The Kubeflow kind's resource, for the inventory.
pub fn kubeflow_resource() -> ApiResource {
    ApiResource::erase::<Kubeflow>(&())
}

/// A child for unit tests: the component's default spec at `version`, as
/// an entry that states nothing yields it.
#[cfg(test)]
pub fn test_child(component: ComponentKind, managed: bool, version: Option<&str>) -> Child {
    let components = kubeflow_api::kubeflow::KubeflowComponents::default();
    let Some(entry) = components.entry(component.name()) else {
        panic!("{component} is not a field of the Kubeflow resource");
    };
    let spec = entry.child_spec(&|common| common.version = version.map(str::to_string));
    Child {
        component,
        managed,
        spec,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::release;

    fn kf(json_text: &str) -> Kubeflow {
        serde_json::from_str(json_text).expect("Kubeflow")
    }

    #[test]
    fn with_auth_on_istio_routes_through_the_login_unless_its_entry_says_otherwise() {
        let text = |istio: &str| {
            format!(
                r#"{{"apiVersion":"platform.kubeflow.org/v1alpha1","kind":"Kubeflow","metadata":{{"name":"kf","namespace":"ns"}},
                "spec":{{"version":"26.03.1","components":{{"istio":{istio},"auth":{{"managementState":"Managed"}}}}}}}}"#
            )
        };
        let r = release::find("26.03.1").expect("release");
        let istio = |k: &Kubeflow| {
            desired(k, r, Platform::Kubernetes)
                .into_iter()
                .find(|c| c.component == ComponentKind::Istio)
                .expect("istio")
        };
        let oauth2_proxy = |c: &Child| match &c.spec {
            ChildSpec::Istio(s) => s.oauth2_proxy,
            other => panic!("not Istio's: {other:?}"),
        };
        let on = istio(&kf(&text(r#"{"managementState":"Managed"}"#)));
        assert_eq!(oauth2_proxy(&on), Some(true));
        let stated_off = istio(&kf(&text(
            r#"{"managementState":"Managed","spec":{"oauth2Proxy":false}}"#,
        )));
        assert_eq!(oauth2_proxy(&stated_off), Some(false));
        let auth = desired(
            &kf(&text(r#"{"managementState":"Managed"}"#)),
            r,
            Platform::Kubernetes,
        )
        .into_iter()
        .find(|c| c.component == ComponentKind::Auth)
        .expect("auth");
        assert_eq!(expected_version(&auth), Some("v7.15.2"));
    }

    #[test]
    fn only_stated_fields_pass_through_with_the_release_version() {
        let k = kf(
            r#"{"apiVersion":"platform.kubeflow.org/v1alpha1","kind":"Kubeflow","metadata":{"name":"kf","namespace":"ns"},
            "spec":{"version":"1.11.0","components":{
              "training":{"managementState":"Managed","spec":{"jobKinds":["TFJob"]}},
              "pipelines":{"managementState":"Managed","spec":{"version":"2.5.0"}},
              "serving":{"managementState":"Removed"}}}}"#,
        );
        let r = release::find("1.11.0").expect("release");
        let children = desired(&k, r, Platform::Kubernetes);
        let get = |n: &str| {
            children
                .iter()
                .find(|c| c.component.name() == n)
                .expect("child")
        };
        let training = get("training");
        assert!(training.managed);
        assert_eq!(
            training.spec.to_value(),
            json!({"jobKinds": ["TFJob"], "version": "v1.9.2", "platform": "kubernetes"})
        );
        assert_eq!(
            expected_version(get("pipelines")),
            Some("2.5.0"),
            "a pinned version wins"
        );
        assert!(!get("serving").managed);
        assert!(
            !get("istio").managed,
            "a component not listed is not installed"
        );
        assert_eq!(expected_version(get("trainer")), Some("v2.1.0"));
        assert!(outside_release(&children, r).is_empty());
        let obj = object(&k, training);
        assert_eq!(obj.metadata.name.as_deref(), Some("kf"));
        assert_eq!(obj.metadata.namespace.as_deref(), Some("ns"));
        assert_eq!(obj.types.map(|t| t.kind), Some("Training".to_string()));
    }

    #[test]
    fn trainer_before_1_11_needs_a_pinned_version() {
        let text = |pin: &str| {
            format!(
                r#"{{"apiVersion":"platform.kubeflow.org/v1alpha1","kind":"Kubeflow","metadata":{{"name":"kf","namespace":"ns"}},
                "spec":{{"version":"1.10.2","components":{{"trainer":{{"managementState":"Managed"{pin}}}}}}}}}"#
            )
        };
        let r = release::find("1.10.2").expect("release");
        let unpinned = desired(&kf(&text("")), r, Platform::Kubernetes);
        assert_eq!(outside_release(&unpinned, r), vec![ComponentKind::Trainer]);
        let pinned = desired(
            &kf(&text(r#","spec":{"version":"v2.1.0"}"#)),
            r,
            Platform::Kubernetes,
        );
        assert!(outside_release(&pinned, r).is_empty());
    }
}
