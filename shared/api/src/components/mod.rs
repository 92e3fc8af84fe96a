//! The six component kinds, and what the generic operator machinery needs to know of each.

pub mod device_plugins;
pub mod istio;
pub mod pipelines;
pub mod serving;
pub mod trainer;
pub mod training;

use std::fmt::Debug;

use k8s_openapi::NamespaceResourceScope;
use kube::Resource;
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::common::CommonSpec;

/// A component custom resource: one per micro-operator.
pub trait ComponentResource:
    Resource<DynamicType = (), Scope = NamespaceResourceScope>
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
}

macro_rules! component {
    ($kind:ty, $name:literal) => {
        impl ComponentResource for $kind {
            const COMPONENT: &'static str = $name;
            fn common(&self) -> &CommonSpec {
                &self.spec.common
            }
        }
    };
}

component!(training::Training, "training");
component!(trainer::Trainer, "trainer");
component!(serving::Serving, "serving");
component!(pipelines::Pipelines, "pipelines");
component!(istio::Istio, "istio");
component!(device_plugins::DevicePlugins, "device-plugins");
