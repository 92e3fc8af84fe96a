//! The reconcile library every Kubeflow operator is built on, in five
//! layers, each a folder that uses only the ones before it (`layers.rs`
//! checks): `base` (kinds, labels, conditions, bundles), `render` (what the
//! objects are), `engine` (what is on the cluster: apply, prune, cleanup,
//! health), `report` (status, Events, telemetry) and `framework` (the
//! controller skeleton, the component framework, the process runner).

pub mod base;
pub mod engine;
pub mod framework;
pub mod render;
pub mod report;

mod layers;

// What an operator uses keeps its short path (`kubeflow_operator::component`,
// `kubeflow_operator::transform`): the layer is where a module lives, not a
// word every operator must repeat. The engine is left out on purpose: a
// component operator reaches it only through the framework, and the
// meta-operator, which drives it itself, names it `engine::`.
pub use base::allocator::Allocator;
pub use base::{
    allocator, bundle, conditions, errors, kinds, labels, platform, quantity, refusal, retry, scope,
};
pub use framework::{component, controller, runner};
pub use render::{
    certs, database, foreign_fields, images, known_secrets, openshift, overrides, pod_security,
    rbac, secrets, transform, upgrade_plan, validate,
};
pub use report::{events, status, telemetry};

// Operators use these through the library so they never pin their own versions.
pub use {
    anyhow, async_trait, clap, k8s_openapi, kube, kubeflow_api as api, serde_json, serde_saphyr,
    tokio, tracing,
};
