//! The reconcile library every Kubeflow operator is built on: bundles,
//! transforms, the apply/prune engine, health, conditions, cleanup, the
//! generic component controller, the process runner and telemetry.

pub mod apply;

pub mod allocator;
pub use allocator::Allocator;
pub mod bundle;
pub mod certs;
pub mod cleanup;
pub mod component;
pub mod conditions;
pub mod controller;
pub mod discovery;
pub mod errors;
pub mod events;
pub mod foreign_fields;
pub mod health;
pub mod images;
#[cfg(test)]
mod images_in_bundles;
pub mod inventory;
pub mod kinds;
pub mod known_secrets;
pub mod labels;
mod layers;
pub mod live_index;
pub mod openshift;
pub mod overrides;
pub mod platform;
pub mod pod_security;
pub mod quantity;
pub mod rbac;
pub mod refusal;
pub mod render;
pub mod retry;
pub mod runner;
pub mod scope;
pub mod secrets;
pub mod status;
pub mod telemetry;
pub mod transform;
pub mod upgrade_plan;
pub mod validate;
pub mod watches;

// Operators use these through the library so they never pin their own versions.
pub use {
    anyhow, async_trait, clap, k8s_openapi, kube, kubeflow_api as api, serde_json, serde_saphyr,
    tokio, tracing,
};
