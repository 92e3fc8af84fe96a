//! The render layer: what the objects are, before anything is sent to the
//! cluster. Transforms, validation, images, overrides, certificates,
//! OpenShift, Pod Security levels, RBAC derivation, upgrade plans. It uses
//! the base layer only; nearly all of it is pure functions over objects.

pub mod certs;
mod common;
pub mod database;
pub mod foreign_fields;
pub mod images;
#[cfg(test)]
mod images_in_bundles;
pub mod known_secrets;
pub mod openshift;
pub mod overrides;
pub mod pod_security;
pub mod rbac;
pub mod secrets;
pub mod transform;
pub mod upgrade_plan;
pub mod validate;

// The steps every component shares are the layer's own entry point:
// operators call `render::apply_common` with a `render::Placement`.
pub use common::{Layout, Placement, Target, apply_common, required_version};
