//! The render steps every component shares: retarget the namespace, then
//! apply the common spec (images, replicas, resources, scheduling) and the
//! platform's changes.

use kube::api::DynamicObject;
use kubeflow_api::{CommonSpec, Platform};

use crate::base::conditions::Reason;
use crate::base::refusal::Refusal;
use crate::render::{openshift, transform, validate};

/// Where a component's objects go and which workloads the common spec targets.
pub struct Placement<'a> {
    /// Namespaces the bundle puts its objects in that move to `target` (empty: all).
    pub from_namespaces: &'a [&'a str],
    /// The namespace objects move to.
    pub target: &'a str,
    /// The component's controller workloads (replicas, resources, scheduling apply to them).
    pub workloads: &'a [&'a str],
}

/// Where a component's bundle objects go, declared once by the component
/// (`Component::LAYOUT`): the framework turns it into a [`Placement`] for
/// the resource being rendered.
#[derive(Clone, Copy, Debug)]
pub struct Layout {
    /// Namespaces the bundle puts its objects in that move (empty: all).
    pub from_namespaces: &'static [&'static str],
    /// Where they move.
    pub target: Target,
    /// The component's controller workloads (replicas, resources,
    /// scheduling apply to them).
    pub workloads: &'static [&'static str],
}

/// The namespace a component's objects move to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target {
    /// The component resource's own namespace.
    ResourceNamespace,
    /// A namespace of the component's own, whatever the resource's
    /// (Knative's and cert-manager's programs look for theirs by name).
    Fixed(&'static str),
}

impl Layout {
    /// The placement of a resource in `namespace`.
    pub fn placement<'a>(&self, namespace: &'a str) -> Placement<'a> {
        Placement {
            from_namespaces: self.from_namespaces,
            target: match self.target {
                Target::ResourceNamespace => namespace,
                Target::Fixed(ns) => ns,
            },
            workloads: self.workloads,
        }
    }
}

/// Applies the common spec to bundle objects. An image override naming no
/// container is refused, so a typo never passes silently.
pub fn apply_common(
    objects: &mut Vec<DynamicObject>,
    common: &CommonSpec,
    placement: &Placement<'_>,
    platform: Platform,
) -> Result<(), Refusal> {
    for (container, image) in &common.images {
        validate::image(&format!("spec.images.{container}"), image)
            .map_err(|m| Refusal::new(Reason::InvalidSpec, m))?;
    }
    if let Some(r) = &common.resources {
        validate::resources("spec.resources", r)
            .map_err(|m| Refusal::new(Reason::InvalidSpec, m))?;
    }
    transform::set_namespace(objects, placement.target, placement.from_namespaces);
    transform::drop_categories(objects, project_kind_names());
    // Every bundled database gets a generated password: none may start
    // without one (see docs/security.md).
    transform::drop_allow_empty_password(objects);
    // The mirror first: per-container overrides win over it.
    if let Some(registry) = &common.shared.image_registry {
        crate::render::images::check_registry("spec.imageRegistry", registry)
            .map_err(|m| Refusal::new(Reason::InvalidSpec, m))?;
        crate::render::images::move_to(objects, registry);
        crate::render::images::check_moved("spec.imageRegistry", registry, objects)
            .map_err(|m| Refusal::new(Reason::InvalidSpec, m))?;
    }
    let unmatched = transform::set_images(objects, &common.images);
    if !unmatched.is_empty() {
        return Err(Refusal::new(
            Reason::InvalidSpec,
            format!(
                "spec.images names containers this component does not have: {}",
                unmatched.join(", ")
            ),
        ));
    }
    if let Some(r) = common.replicas {
        transform::set_replicas(objects, placement.workloads, r);
    }
    if let Some(res) = &common.resources {
        transform::set_resources(objects, placement.workloads, &[], res);
    }
    if common.node_selector.is_some() || common.tolerations.is_some() {
        transform::set_scheduling(
            objects,
            placement.workloads,
            common.node_selector.as_ref(),
            common.tolerations.as_ref(),
        );
    }
    if platform == Platform::OpenShift {
        openshift::unpin_ids(objects);
    }
    Ok(())
}

/// Every name `kubectl get` takes for one of the project's kinds (plural,
/// singular, short names). A bundle's CRD that lists one of them as a
/// category would shadow it: kubectl expands a category before it looks for
/// a kind, so `kubectl get kubeflow` listed Katib's Experiments and
/// `kubectl get serving` Knative's Services.
fn project_kind_names() -> &'static std::collections::BTreeSet<String> {
    static NAMES: std::sync::OnceLock<std::collections::BTreeSet<String>> =
        std::sync::OnceLock::new();
    NAMES.get_or_init(|| {
        kubeflow_api::crds::all()
            .into_iter()
            .flat_map(|(_, crd)| {
                let n = crd.spec.names;
                std::iter::once(n.plural)
                    .chain(n.singular)
                    .chain(n.short_names.unwrap_or_default())
            })
            .collect()
    })
}

/// The version a component CR asks for, or a refusal saying how to set it.
pub fn required_version(
    common: &CommonSpec,
    component: &str,
    bundles: &std::path::Path,
) -> Result<String, Refusal> {
    common
        .version
        .clone()
        .filter(|v| !v.is_empty())
        .ok_or_else(|| {
            Refusal::new(
                Reason::VersionRequired,
                format!(
                    "spec.version is required; available {component} versions: {}",
                    crate::base::bundle::available_versions(&bundles.join(component)).join(", ")
                ),
            )
        })
}
