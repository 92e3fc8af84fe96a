//! What every status of this API has in common, so one controller skeleton
//! can compare, refuse and fail any of them without knowing the kind.

use std::fmt::Debug;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use serde::Serialize;
use serde::de::DeserializeOwned;

use kube::core::object::HasStatus;

use crate::common::ComponentStatus;
use crate::kubeflow::KubeflowStatus;

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

/// Every kind whose status is one of this API's: its `#[kube(status)]`
/// says which, so no kind registers itself.
impl<K> Reported for K
where
    K: HasStatus<Status: ObjectStatus>,
{
    type Status = <K as HasStatus>::Status;
    fn reported(&self) -> Option<&Self::Status> {
        self.status()
    }
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
/// (flattened into one object on the wire, as `common`); its type's file
/// says `crate::status::extended_status!(TheStatus);`.
macro_rules! extended_status {
    ($status:ty) => {
        impl AsRef<$crate::common::ComponentStatus> for $status {
            fn as_ref(&self) -> &$crate::common::ComponentStatus {
                &self.common
            }
        }
        impl AsMut<$crate::common::ComponentStatus> for $status {
            fn as_mut(&mut self) -> &mut $crate::common::ComponentStatus {
                &mut self.common
            }
        }
        impl $crate::status::ObjectStatus for $status {
            fn conditions(&self) -> &[k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition] {
                &self.common.conditions
            }
            fn conditions_mut(
                &mut self,
            ) -> &mut Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition> {
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

pub(crate) use extended_status;

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
