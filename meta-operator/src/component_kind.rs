//! The component kinds the `Kubeflow` CR stands for, as a type the
//! meta-operator can match on: their names, order, dependencies and API
//! resources come from the component registry (`kubeflow_api::registry`).

use std::fmt;

use kube::api::ApiResource;
use kube::core::GroupVersionKind;
use kubeflow_api::registry;
use kubeflow_api::{API_VERSION, COMPONENTS_GROUP};

/// [`ComponentKind`] from the registry's entries, in its order.
macro_rules! component_kind {
    ($($module:ident $kind:ident $name:tt $field:tt $plural:tt [$($doc:tt)*] $component:tt)*) => {
        /// A component of Kubeflow, each with its own CR kind and operator.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub enum ComponentKind {$(
            $(#[doc = $doc])*
            $kind,
        )*}

        impl ComponentKind {
            /// Every component, in creation order; removal runs the other
            /// way (see [`ComponentKind::removal_wave`]).
            pub const ORDER: [ComponentKind; registry::COMPONENTS.len()] =
                [$(ComponentKind::$kind),*];
        }
    };
}

kubeflow_api::for_each_component!(component_kind);

impl ComponentKind {
    /// Its entry in the component registry: ORDER follows the registry's
    /// order one to one (a unit test holds this).
    pub fn entry(self) -> &'static registry::Component {
        let at = Self::ORDER
            .iter()
            .position(|k| *k == self)
            .unwrap_or_default();
        &registry::COMPONENTS[at]
    }

    /// The component's name, as in its operator's and CR's names.
    pub fn name(self) -> &'static str {
        self.entry().name
    }

    /// The kind of that name.
    pub fn from_name(name: &str) -> Option<ComponentKind> {
        Self::ORDER.into_iter().find(|k| k.name() == name)
    }

    /// Components this one waits for (when they are Managed), from the
    /// registry.
    pub fn depends_on(self) -> Vec<ComponentKind> {
        self.entry()
            .depends_on
            .iter()
            .filter_map(|d| Self::from_name(d))
            .collect()
    }

    /// When it is removed: what nothing depends on first (wave 0), each
    /// component one wave after the last of its dependents.
    pub fn removal_wave(self) -> u8 {
        Self::ORDER
            .iter()
            .filter(|c| c.depends_on().contains(&self))
            .map(|c| c.removal_wave() + 1)
            .max()
            .unwrap_or(0)
    }

    /// The last removal wave.
    pub fn last_wave() -> u8 {
        Self::ORDER
            .iter()
            .map(|c| c.removal_wave())
            .max()
            .unwrap_or(0)
    }

    /// The API resource of the component's CR, from its registry entry
    /// (which a test of `kubeflow_api` holds to the types).
    pub fn api_resource(self) -> ApiResource {
        let entry = self.entry();
        ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk(COMPONENTS_GROUP, API_VERSION, entry.kind),
            entry.plural,
        )
    }
}

impl fmt::Display for ComponentKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dependencies_come_first_and_go_last() {
        for c in ComponentKind::ORDER {
            let at = |k: ComponentKind| ComponentKind::ORDER.iter().position(|x| *x == k);
            for d in c.depends_on() {
                assert!(at(d) < at(c), "{d} is created before {c}");
                assert!(
                    d.removal_wave() > c.removal_wave(),
                    "{d} is removed after {c}"
                );
            }
        }
        assert_eq!(ComponentKind::Istio.removal_wave(), 3);
        assert_eq!(ComponentKind::CertManager.removal_wave(), 3);
        assert_eq!(ComponentKind::Auth.removal_wave(), 2);
        assert_eq!(ComponentKind::Dashboard.removal_wave(), 1);
        assert_eq!(ComponentKind::Serving.removal_wave(), 0);
        assert_eq!(ComponentKind::last_wave(), 3);
    }

    #[test]
    fn the_uninstall_cleanup_deletes_every_components_crd() {
        let page = std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/uninstall.md"),
        )
        .expect("docs/uninstall.md");
        let command = page
            .split("kubectl delete crd kubeflows.platform.kubeflow.org")
            .nth(1)
            .and_then(|rest| rest.split("\n\n").next())
            .expect("the cleanup command deleting the chart's CRDs");
        for c in ComponentKind::ORDER {
            let r = c.api_resource();
            let crd = format!("{}.{}", r.plural, r.group);
            assert!(command.contains(&crd), "docs/uninstall.md omits {crd}");
        }
    }

    #[test]
    fn the_order_is_the_registrys() {
        assert_eq!(ComponentKind::ORDER.len(), registry::COMPONENTS.len());
        for (k, c) in ComponentKind::ORDER.iter().zip(registry::COMPONENTS) {
            assert_eq!(format!("{k:?}"), c.kind);
        }
    }

    #[test]
    fn each_kind_has_its_own_resource_and_name() {
        let plurals: std::collections::BTreeSet<String> = ComponentKind::ORDER
            .iter()
            .map(|c| c.api_resource().plural)
            .collect();
        assert_eq!(plurals.len(), registry::COMPONENTS.len());
        assert_eq!(ComponentKind::DevicePlugins.to_string(), "device-plugins");
        assert_eq!(
            ComponentKind::DevicePlugins.api_resource().kind,
            "DevicePlugins"
        );
    }
}
