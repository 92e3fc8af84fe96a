//! Helpers for the operators' own tests: whether the chart's generated role
//! covers what a render needs, for every bundle version and platform.

use kube::Resource;
use kube::api::DynamicObject;
use kubeflow_api::Platform;
use serde_json::Value;

use std::path::PathBuf;

use super::{Component, Refusal, RenderContext, Rendered, rules_of};
use crate::base::bundle::BundleCache;
use crate::render::rbac;

/// What rendering the component for each of `specs` (the CR's `spec`), on
/// plain Kubernetes and on OpenShift, would need beyond the operator's own
/// RBAC: empty when its chart role is enough. For the operators' tests.
pub fn permission_gaps<C: Component>(
    component: &C,
    manifests_dir: &std::path::Path,
    specs: &[Value],
) -> Vec<String> {
    let rules = match rules_of(component, manifests_dir) {
        Ok(r) => r,
        Err(e) => return vec![e.to_string()],
    };
    let bundles = BundleCache::default();
    let mut out = Vec::new();
    for spec in specs {
        let cr = serde_json::json!({
            "apiVersion": C::Resource::api_version(&()),
            "kind": C::Resource::kind(&()),
            "metadata": {"name": "kubeflow", "namespace": "kubeflow"},
            "spec": spec,
        });
        let cr: C::Resource = match serde_json::from_value(cr) {
            Ok(c) => c,
            Err(e) => {
                out.push(format!("{spec}: {e}"));
                continue;
            }
        };
        for platform in [Platform::Kubernetes, Platform::OpenShift] {
            let ctx = RenderContext::of(&cr, manifests_dir, &bundles, platform);
            match component.render(&cr, &ctx, &C::Inputs::default()) {
                Ok(r) => out.extend(
                    rbac::missing(&rules, &r.objects)
                        .into_iter()
                        .map(|m| format!("{spec} on {platform:?}: {m}")),
                ),
                Err(e) => out.push(format!("{spec} on {platform:?}: {}", e.message)),
            }
        }
    }
    out
}

/// For the operators' unit tests: panics, listing the gaps, when rendering
/// any of the specs `specs` makes (from the bundles folder beside the
/// repository, or `MANIFESTS_DIR`) needs more than the operator's own RBAC.
pub fn assert_permitted<C: Component>(
    component: &C,
    specs: impl FnOnce(&std::path::Path) -> Vec<Value>,
) {
    let dir = manifests_dir();
    let specs = specs(&dir);
    assert!(!specs.is_empty(), "no bundles in {}", dir.display());
    let gaps = permission_gaps(component, &dir, &specs);
    assert!(gaps.is_empty(), "the operator's role lacks: {gaps:#?}");
    // The same renders, every version and platform of every operator: no
    // secret upstream publishes and no empty password (the one check over
    // all components' rendered objects; docs/security.md).
    let known = known_credentials(component, &dir, &specs);
    assert!(
        known.is_empty(),
        "the render holds a known credential: {known:#?}"
    );
}

/// Every secret upstream's bundles publish and every empty password
/// (`known_secrets::find`, `known_secrets::find_empty_passwords`) in what
/// the component renders for each of `specs`, on plain Kubernetes and on
/// OpenShift, without a cluster (so with no kept or generated secret: a
/// component leaves such a Secret out rather than write the demo one).
pub fn known_credentials<C: Component>(
    component: &C,
    manifests_dir: &std::path::Path,
    specs: &[Value],
) -> Vec<String> {
    let bundles = BundleCache::default();
    let mut out = Vec::new();
    for spec in specs {
        let Ok(cr) = serde_json::from_value::<C::Resource>(serde_json::json!({
            "apiVersion": C::Resource::api_version(&()),
            "kind": C::Resource::kind(&()),
            "metadata": {"name": "kubeflow", "namespace": "kubeflow"},
            "spec": spec,
        })) else {
            continue;
        };
        for platform in [Platform::Kubernetes, Platform::OpenShift] {
            let ctx = RenderContext::of(&cr, manifests_dir, &bundles, platform);
            if let Ok(r) = component.render(&cr, &ctx, &C::Inputs::default()) {
                out.extend(
                    crate::render::known_secrets::find(&r.objects)
                        .into_iter()
                        .chain(crate::render::known_secrets::find_empty_passwords(
                            &r.objects,
                        ))
                        .map(|f| format!("{spec} on {platform:?}: {f}")),
                );
            }
        }
    }
    out
}

/// `{"version": v}` for every version of a bundle folder.
pub fn every_version(manifests_dir: &std::path::Path, folder: &str) -> Vec<Value> {
    crate::base::bundle::available_versions(&manifests_dir.join(folder))
        .into_iter()
        .map(|v| serde_json::json!({ "version": v }))
        .collect()
}

/// The bundles folder the operators' tests read (`MANIFESTS_DIR`, or the one
/// beside the repository).
pub fn manifests_dir() -> PathBuf {
    std::env::var_os("MANIFESTS_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/manifests")
        })
}

/// Renders the component for a CR named `kubeflow` in namespace `kubeflow`
/// with `spec`, on plain Kubernetes, without a cluster: for the operators'
/// tests of what each spec field does.
pub fn render_spec<C: Component>(
    component: &C,
    spec: Value,
    inputs: &C::Inputs,
) -> Result<Rendered, Refusal> {
    let cr: C::Resource = serde_json::from_value(serde_json::json!({
        "apiVersion": C::Resource::api_version(&()),
        "kind": C::Resource::kind(&()),
        "metadata": {"name": "kubeflow", "namespace": "kubeflow"},
        "spec": spec,
    }))
    .map_err(|e| Refusal::new(crate::base::conditions::Reason::InvalidSpec, e.to_string()))?;
    let dir = manifests_dir();
    let bundles = BundleCache::default();
    let ctx = RenderContext::of(&cr, &dir, &bundles, Platform::Kubernetes);
    component.render(&cr, &ctx, inputs)
}

/// The rendered object of `kind` named `name`.
pub fn find<'a>(rendered: &'a Rendered, kind: &str, name: &str) -> Option<&'a DynamicObject> {
    rendered
        .objects
        .iter()
        .find(|o| crate::base::kinds::kind(o) == kind && o.metadata.name.as_deref() == Some(name))
}
