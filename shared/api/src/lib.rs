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
pub use components::{
    ComponentResource, ComponentSpec,
    auth::{Auth, AuthSpec, AuthStatus, Dex, ExternalOidc},
    cert_manager::{
        CertManager, CertManagerMode, CertManagerSpec, CertManagerStatus, FoundCertManager,
    },
    dashboard::{
        Contributor, ContributorRole, Dashboard, DashboardSpec, DashboardStatus, DeclaredProfile,
        RemovedProfiles,
    },
    device_plugins::{
        DevicePlugin, DevicePlugins, DevicePluginsSpec, DevicePluginsStatus, PluginStatus,
        PluginType,
    },
    istio::{Istio, IstioSpec},
    katib::{Katib, KatibDatabase, KatibSpec},
    knative::{Knative, KnativeSpec},
    model_registry::{ModelRegistry, ModelRegistryDatabase, ModelRegistrySpec},
    notebooks::{Culling, Notebooks, NotebooksSpec, Spawner, SpawnerGpu},
    pipelines::{Pipelines, PipelinesSpec},
    serving::{Serving, ServingSpec},
    spark::{BatchScheduler, Spark, SparkSpec},
    trainer::{Trainer, TrainerSpec, TrainerStatus},
    training::{JobKind, Training, TrainingSpec},
};
pub use kubeflow::{Kubeflow, KubeflowSpec, KubeflowStatus};
pub use status::{ObjectStatus, Reported};
