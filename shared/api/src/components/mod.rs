//! The component kinds (one per entry of the component registry), and what
//! the generic operator machinery needs to know of each.

/// The CRD attributes every component kind shares: group, version, scope,
/// the `kubeflow-all` category and the Ready/Reason/Age columns (and, with
/// `-o wide`, Degraded's reason and Ready's message). Each kind
/// names itself, its description (`kubectl explain`'s first line), its
/// status type, its schema derive and its leading columns.
macro_rules! component_crd {
    (
        kind = $kind:tt, plural = $plural:tt, shortname = $short:tt, status = $status:tt,
        doc = $doc:tt, schema = $schema:ident, columns = [$($column:tt)*],
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

    /// The status every component shares, if the CR has one.
    fn component_status(&self) -> Option<&ComponentStatus> {
        self.reported().map(AsRef::as_ref)
    }
}

/// A component's spec: its own settings beside the shared ones.
pub trait ComponentSpec: Serialize + Default + Clone {
    /// The settings every component shares, to set (the `Kubeflow` CR
    /// fills in the version, platform, mirror and upgrade strategy).
    fn common_mut(&mut self) -> &mut CommonSpec;
}

macro_rules! component {
    ($kind:ty, $spec:ty, $name:literal) => {
        impl ComponentResource for $kind {
            const COMPONENT: &'static str = $name;
            fn common(&self) -> &CommonSpec {
                &self.spec.common
            }
        }
        impl ComponentSpec for $spec {
            fn common_mut(&mut self) -> &mut CommonSpec {
                &mut self.common
            }
        }
    };
}

component!(training::Training, training::TrainingSpec, "training");
component!(trainer::Trainer, trainer::TrainerSpec, "trainer");
component!(serving::Serving, serving::ServingSpec, "serving");
component!(pipelines::Pipelines, pipelines::PipelinesSpec, "pipelines");
component!(istio::Istio, istio::IstioSpec, "istio");
component!(notebooks::Notebooks, notebooks::NotebooksSpec, "notebooks");
component!(katib::Katib, katib::KatibSpec, "katib");
component!(spark::Spark, spark::SparkSpec, "spark");
component!(knative::Knative, knative::KnativeSpec, "knative");
component!(
    model_registry::ModelRegistry,
    model_registry::ModelRegistrySpec,
    "model-registry"
);
component!(auth::Auth, auth::AuthSpec, "auth");
component!(dashboard::Dashboard, dashboard::DashboardSpec, "dashboard");
component!(
    cert_manager::CertManager,
    cert_manager::CertManagerSpec,
    "cert-manager"
);
component!(
    device_plugins::DevicePlugins,
    device_plugins::DevicePluginsSpec,
    "device-plugins"
);
