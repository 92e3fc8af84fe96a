//! Conditions per the Kubernetes API conventions: positive types, CamelCase
//! reasons, `observedGeneration`, and a `lastTransitionTime` that moves only
//! when the status flips.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

/// Condition type: the component does what it is for.
pub const READY: &str = "Ready";
/// Condition type: the operator is moving the component towards its spec.
pub const PROGRESSING: &str = "Progressing";
/// Condition type: the spec cannot be brought about without a person acting.
pub const DEGRADED: &str = "Degraded";

/// Reasons, as constants so dashboards and alerts can rely on them.
pub mod reason {
    /// Everything is ready.
    pub const READY: &str = "Ready";
    /// Applied; workloads are starting.
    pub const WORKLOADS_NOT_READY: &str = "WorkloadsNotReady";
    /// Nothing is wrong.
    pub const AS_EXPECTED: &str = "AsExpected";
    /// The spec names a version with no bundle.
    pub const UNKNOWN_VERSION: &str = "UnknownVersion";
    /// The spec names no version.
    pub const VERSION_REQUIRED: &str = "VersionRequired";
    /// The spec is invalid (malformed override, ...).
    pub const INVALID_SPEC: &str = "InvalidSpec";
    /// A referenced Secret is missing.
    pub const SECRET_MISSING: &str = "SecretMissing";
    /// Another instance holds a cluster-scoped object.
    pub const OWNERSHIP_CONFLICT: &str = "OwnershipConflict";
    /// A bundle could not be read.
    pub const BUNDLE_ERROR: &str = "BundleError";
    /// A prerequisite outside the project is missing.
    pub const PREREQUISITE_MISSING: &str = "PrerequisiteMissing";
    /// A transient API failure; the operator retries.
    pub const API_ERROR: &str = "ApiError";
    /// The operator's RBAC does not allow a request it must make.
    pub const PERMISSION_DENIED: &str = "PermissionDenied";
    /// The component is being removed.
    pub const DELETING: &str = "Deleting";
    /// Waiting for another component.
    pub const WAITING_FOR_DEPENDENCY: &str = "WaitingForDependency";
    /// A version change is refused.
    pub const DOWNGRADE_REFUSED: &str = "DowngradeRefused";
    /// An upgrade moves Istio more than one minor version in place.
    pub const ISTIO_MINOR_SKIP: &str = "IstioMinorVersionSkip";
    /// The CR would install into a namespace the operator may not install into.
    pub const NAMESPACE_NOT_ALLOWED: &str = "NamespaceNotAllowed";
    /// Some managed components are not ready.
    pub const COMPONENTS_NOT_READY: &str = "ComponentsNotReady";
}

/// Sets a condition, keeping `lastTransitionTime` unless the status changes.
pub fn set(
    conditions: &mut Vec<Condition>,
    type_: &str,
    status: bool,
    reason: &str,
    message: &str,
    generation: Option<i64>,
) {
    let status = if status { "True" } else { "False" }.to_string();
    let now = Time(jiff::Timestamp::now());
    match conditions.iter_mut().find(|c| c.type_ == type_) {
        Some(c) => {
            if c.status != status {
                c.last_transition_time = now;
            }
            c.status = status;
            c.reason = reason.to_string();
            c.message = message.to_string();
            c.observed_generation = generation;
        }
        None => conditions.push(Condition {
            type_: type_.to_string(),
            status,
            reason: reason.to_string(),
            message: message.to_string(),
            observed_generation: generation,
            last_transition_time: now,
        }),
    }
}

/// Finds a condition.
pub fn get<'a>(conditions: &'a [Condition], type_: &str) -> Option<&'a Condition> {
    conditions.iter().find(|c| c.type_ == type_)
}

/// Whether two condition lists say the same, ignoring `lastTransitionTime`
/// (so a status write is skipped when nothing but the clock changed).
pub fn same(a: &[Condition], b: &[Condition]) -> bool {
    a.len() == b.len()
        && a.iter().all(|x| {
            b.iter().any(|y| {
                x.type_ == y.type_
                    && x.status == y.status
                    && x.reason == y.reason
                    && x.message == y.message
                    && x.observed_generation == y.observed_generation
            })
        })
}
