//! What every status of this API has in common, so one controller skeleton
//! can compare, refuse and fail any of them without knowing the kind.

use std::fmt::Debug;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::common::ComponentStatus;
use crate::components::{
    auth, cert_manager, dashboard, device_plugins, istio, katib, knative, model_registry,
    notebooks, pipelines, serving, spark, trainer, training,
};
use crate::kubeflow::{Kubeflow, KubeflowStatus};

/// A status with conditions at an observed generation.
pub trait ObjectStatus:
    Serialize + DeserializeOwned + Clone + Default + PartialEq + Debug + Send + Sync + 'static
{
    /// Ready, Progressing and Degraded.
    fn conditions(&self) -> &[Condition];
    /// The conditions, to set a verdict.
    fn conditions_mut(&mut self) -> &mut Vec<Condition>;
    /// The generation the status describes.
    fn observed_generation_mut(&mut self) -> &mut Option<i64>;
    /// The version installed (a component's, or the Kubeflow release).
    fn version(&self) -> Option<&str>;
}

/// A resource of this API with its typed status.
pub trait Reported {
    /// The kind's status type.
    type Status: ObjectStatus;
    /// The status, if the resource has one yet.
    fn reported(&self) -> Option<&Self::Status>;
}

impl ObjectStatus for ComponentStatus {
    fn conditions(&self) -> &[Condition] {
        &self.conditions
    }
    fn conditions_mut(&mut self) -> &mut Vec<Condition> {
        &mut self.conditions
    }
    fn observed_generation_mut(&mut self) -> &mut Option<i64> {
        &mut self.observed_generation
    }
    fn version(&self) -> Option<&str> {
        self.version.as_deref()
    }
}

impl ObjectStatus for KubeflowStatus {
    fn conditions(&self) -> &[Condition] {
        &self.conditions
    }
    fn conditions_mut(&mut self) -> &mut Vec<Condition> {
        &mut self.conditions
    }
    fn observed_generation_mut(&mut self) -> &mut Option<i64> {
        &mut self.observed_generation
    }
    fn version(&self) -> Option<&str> {
        self.version.as_deref()
    }
}

/// A component status with fields of its own beside the shared ones
/// (flattened into one object on the wire).
macro_rules! extended_status {
    ($status:ty) => {
        impl AsRef<ComponentStatus> for $status {
            fn as_ref(&self) -> &ComponentStatus {
                &self.common
            }
        }
        impl AsMut<ComponentStatus> for $status {
            fn as_mut(&mut self) -> &mut ComponentStatus {
                &mut self.common
            }
        }
        impl ObjectStatus for $status {
            fn conditions(&self) -> &[Condition] {
                &self.common.conditions
            }
            fn conditions_mut(&mut self) -> &mut Vec<Condition> {
                &mut self.common.conditions
            }
            fn observed_generation_mut(&mut self) -> &mut Option<i64> {
                &mut self.common.observed_generation
            }
            fn version(&self) -> Option<&str> {
                self.common.version.as_deref()
            }
        }
    };
}

extended_status!(trainer::TrainerStatus);
extended_status!(device_plugins::DevicePluginsStatus);
extended_status!(cert_manager::CertManagerStatus);
extended_status!(auth::AuthStatus);
extended_status!(dashboard::DashboardStatus);

impl AsRef<ComponentStatus> for ComponentStatus {
    fn as_ref(&self) -> &ComponentStatus {
        self
    }
}

impl AsMut<ComponentStatus> for ComponentStatus {
    fn as_mut(&mut self) -> &mut ComponentStatus {
        self
    }
}

macro_rules! reported {
    ($kind:ty, $status:ty) => {
        impl Reported for $kind {
            type Status = $status;
            fn reported(&self) -> Option<&$status> {
                self.status.as_ref()
            }
        }
    };
}

reported!(Kubeflow, KubeflowStatus);
reported!(training::Training, ComponentStatus);
reported!(trainer::Trainer, trainer::TrainerStatus);
reported!(serving::Serving, ComponentStatus);
reported!(pipelines::Pipelines, ComponentStatus);
reported!(istio::Istio, ComponentStatus);
reported!(notebooks::Notebooks, ComponentStatus);
reported!(katib::Katib, ComponentStatus);
reported!(spark::Spark, ComponentStatus);
reported!(knative::Knative, ComponentStatus);
reported!(model_registry::ModelRegistry, ComponentStatus);
reported!(cert_manager::CertManager, cert_manager::CertManagerStatus);
reported!(auth::Auth, auth::AuthStatus);
reported!(dashboard::Dashboard, dashboard::DashboardStatus);
reported!(
    device_plugins::DevicePlugins,
    device_plugins::DevicePluginsStatus
);
