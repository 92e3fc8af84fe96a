//! API types of the Kubeflow meta-operator (`platform.kubeflow.org`) and its
//! component operators (`components.kubeflow.org`), and their CRDs.

// kube-derive's `printcolumn(...)` entries repeat keys such as `type_` by
// design; clippy reads them as duplicated attributes.
#![allow(clippy::duplicated_attributes)]

pub mod common;
pub mod components;
pub mod crds;
pub mod kubeflow;
pub mod registry;
pub mod status;

pub use common::*;
pub use components::{ComponentResource, ComponentSpec};
// Two `ExternalDatabase`s: the shared one (Katib's, the Model Registry's)
// is the root's; Pipelines' is `components::pipelines::ExternalDatabase`.
pub use common::ExternalDatabase;

/// Each component's API types at the crate root, from the registry's
/// entries.
macro_rules! reexport_components {
    ($($module:ident $kind:ident $name:tt $field:tt $plural:tt [$($doc:tt)*] $component:tt)*) => {
        $(pub use components::$module::*;)*
    };
}

crate::for_each_component!(reexport_components);

pub use kubeflow::{Kubeflow, KubeflowSpec, KubeflowStatus};
pub use status::{ObjectStatus, Reported};
