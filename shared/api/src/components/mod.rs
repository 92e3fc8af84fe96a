//! The component kinds (one per entry of the component registry), and what
//! the generic operator machinery needs to know of each.

/// The CRD attributes every component kind shares: group, version, scope,
/// the `kubeflow-all` category and the Ready/Reason/Age columns (and, with
/// `-o wide`, Degraded's reason and Ready's message). Each kind
/// names itself, its description (`kubectl explain`'s first line), its own
/// wording of the shared `version` and `images` fields, its status type,
/// its schema derive and its leading columns. The spec must flatten a
/// `common: CommonSpec`.
macro_rules! component_crd {
    (
        kind = $kind:tt, plural = $plural:tt, shortname = $short:tt, status = $status:tt,
        doc = $doc:tt, version_doc = $version_doc:literal, images_doc = $images_doc:literal,
        schema = $schema:ident, columns = [$($column:tt)*],
        $(#[$meta:meta])*
        pub struct $name:ident { $($body:tt)* }
    ) => {
        $(#[$meta])*
        #[derive(kube::CustomResource, serde::Serialize, serde::Deserialize, Clone, Debug, Default, PartialEq, $schema)]
        #[kube(
            group = "components.kubeflow.org",
            version = "v1alpha1",
            kind = $kind,
            plural = $plural,
            namespaced,
            status = $status,
            doc = $doc,
            shortname = $short,
            category = "kubeflow-all",
            $($column)*
            printcolumn(
                name = "Ready",
                type_ = "string",
                json_path = ".status.conditions[?(@.type==\"Ready\")].status"
            ),
            printcolumn(
                name = "Reason",
                type_ = "string",
                json_path = ".status.conditions[?(@.type==\"Ready\")].reason"
            ),
            printcolumn(
                name = "Age",
                type_ = "date",
                json_path = ".metadata.creationTimestamp"
            ),
            // -o wide: why it is Degraded, and what Ready says.
            printcolumn(
                name = "Degraded",
                type_ = "string",
                json_path = ".status.conditions[?(@.type==\"Degraded\")].reason",
                priority = 1
            ),
            printcolumn(
                name = "Message",
                type_ = "string",
                json_path = ".status.conditions[?(@.type==\"Ready\")].message",
                priority = 1
            )
        )]
        #[serde(rename_all = "camelCase")]
        pub struct $name { $($body)* }

        impl $crate::components::ComponentSpec for $name {
            const VERSION_DOC: &'static str = $version_doc;
            const IMAGES_DOC: &'static str = $images_doc;
            fn common(&self) -> &$crate::common::CommonSpec {
                &self.common
            }
            fn common_mut(&mut self) -> &mut $crate::common::CommonSpec {
                &mut self.common
            }
        }
    };
}

pub mod auth;
pub mod cert_manager;
pub mod dashboard;
pub mod device_plugins;
pub mod istio;
pub mod katib;
pub mod knative;
pub mod model_registry;
pub mod notebooks;
pub mod pipelines;
pub mod serving;
pub mod spark;
pub mod trainer;
pub mod training;

use std::fmt::Debug;

use k8s_openapi::NamespaceResourceScope;
use kube::Resource;
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::common::{CommonSpec, ComponentStatus};
use crate::status::Reported;

/// A component custom resource: one per micro-operator.
pub trait ComponentResource:
    Resource<DynamicType = (), Scope = NamespaceResourceScope>
    + Reported<Status: AsRef<ComponentStatus> + AsMut<ComponentStatus>>
    + Clone
    + Debug
    + Serialize
    + DeserializeOwned
    + Send
    + Sync
    + 'static
{
    /// The component's name in bundle folders, labels and metrics, e.g. "training".
    const COMPONENT: &'static str;

    /// The settings every component shares.
    fn common(&self) -> &CommonSpec;

    /// The settings every component shares, to set.
    fn common_mut(&mut self) -> &mut CommonSpec;

    /// The status every component shares, if the CR has one.
    fn component_status(&self) -> Option<&ComponentStatus> {
        self.reported().map(AsRef::as_ref)
    }
}

/// A component's spec: its own settings beside the shared ones.
pub trait ComponentSpec: Serialize + Default + Clone {
    /// Its CRD's description of the shared `version` field, with examples
    /// of its own (the shared Rust type cannot give one kind's to all).
    const VERSION_DOC: &'static str;
    /// Its CRD's description of the shared `images` field.
    const IMAGES_DOC: &'static str;

    /// The settings every component shares.
    fn common(&self) -> &CommonSpec;

    /// The settings every component shares, to set (the `Kubeflow` CR
    /// fills in the version, platform, mirror and upgrade strategy).
    fn common_mut(&mut self) -> &mut CommonSpec;
}

/// Each registry entry's kind as a [`ComponentResource`], named as the
/// registry names it.
macro_rules! component_resources {
    ($($module:ident $kind:ident $name:tt $field:tt $plural:tt [$($doc:tt)*] $component:tt)*) => {$(
        impl ComponentResource for $module::$kind {
            const COMPONENT: &'static str = $name;
            fn common(&self) -> &CommonSpec {
                &self.spec.common
            }
            fn common_mut(&mut self) -> &mut CommonSpec {
                &mut self.spec.common
            }
        }
    )*};
}

crate::for_each_component!(component_resources);
