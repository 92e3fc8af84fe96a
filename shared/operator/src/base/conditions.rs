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

/// Declares the reasons once: each variant's name is how it appears in
/// conditions, Events and metrics.
macro_rules! reasons {
    ($($(#[$doc:meta])* $name:ident,)*) => {
        /// Why a condition is what it is: CamelCase, stable, so dashboards,
        /// alerts and the meta-operator can rely on them.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum Reason {
            $($(#[$doc])* $name,)*
        }

        impl Reason {
            /// The reason as it appears in conditions and metrics.
            pub const fn as_str(self) -> &'static str {
                match self {
                    $(Reason::$name => stringify!($name),)*
                }
            }
        }
    };
}

reasons! {
    /// Everything is ready.
    Ready,
    /// Applied; workloads are starting.
    WorkloadsNotReady,
    /// Nothing is wrong.
    AsExpected,
    /// The spec names a version with no bundle.
    UnknownVersion,
    /// The spec names no version.
    VersionRequired,
    /// The spec is invalid (malformed override, ...).
    InvalidSpec,
    /// A referenced Secret is missing.
    SecretMissing,
    /// Another instance holds a cluster-scoped object.
    OwnershipConflict,
    /// A bundle could not be read.
    BundleError,
    /// A prerequisite outside the project is missing.
    PrerequisiteMissing,
    /// A transient API failure; the operator retries.
    ApiError,
    /// The operator's RBAC does not allow a request it must make.
    PermissionDenied,
    /// An admission policy or webhook of the cluster refused a write the
    /// operator must make.
    AdmissionDenied,
    /// The component is being removed.
    Deleting,
    /// Waiting for another component.
    WaitingForDependency,
    /// A version change is refused.
    DowngradeRefused,
    /// An upgrade moves Istio more than one minor version in place.
    IstioMinorVersionSkip,
    /// The CR would install into a namespace the operator may not install into.
    NamespaceNotAllowed,
    /// The target namespace's Pod Security level would refuse the
    /// component's pods.
    PodSecurity,
    /// Some managed components are not ready.
    ComponentsNotReady,
    /// A webhook certificate could not be made or read.
    CertificateError,
    /// An image has no digest in the map the spec names.
    ImageDigestMissing,
    /// A component CR not created yet (in the `Kubeflow` status).
    NotCreated,
    /// A component has not reported on its current generation yet.
    Reconciling,
    /// A managed object's live state refuses the desired one, and it is of
    /// a kind never deleted to be recreated (it holds data or objects).
    LiveStateRefused,
    /// A change of version waits for its plan to be approved.
    AwaitingApproval,
    /// A change of version cannot go on until a person acts (the new
    /// version drops a CRD version that still stores objects, or an
    /// override does not apply to it).
    UpgradeBlocked,
    /// An override names an object the bundle does not hold at this
    /// version, or its patch does not apply to that object.
    OverrideNotApplicable,
    /// An object would hold a secret upstream's bundles publish (a demo
    /// password, key or hash), put there by an override or the component.
    KnownSecret,
    /// A component set to `Removed` is kept because Managed components
    /// still need it (in the `Kubeflow` status).
    RemovedComponentNeeded,
    /// A managed object is being deleted but another controller's
    /// finalizer holds it.
    DeletionHeld,
}

impl std::fmt::Display for Reason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl From<Reason> for String {
    fn from(r: Reason) -> String {
        r.as_str().to_string()
    }
}

impl PartialEq<str> for Reason {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

/// The longest condition message written, in bytes. The CRDs allow 32,768;
/// a message that echoes user input (a 100 KB value refused) would make the
/// status write fail and leave the old verdict standing, so it is cut well
/// below.
pub const MESSAGE_MAX: usize = 4096;

/// `message` cut to `MESSAGE_MAX` bytes on a character boundary, saying how
/// much was left out.
pub fn bounded(message: &str) -> String {
    truncate(message, MESSAGE_MAX)
}

/// `text` cut to `max` bytes (at least 128) on a character boundary,
/// saying how much was left out.
pub fn truncate(text: &str, max: usize) -> String {
    let message = text;
    if message.len() <= max {
        return message.to_string();
    }
    let mut end = max.max(128) - 64;
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    format!(
        "{}... ({} more bytes left out)",
        &message[..end],
        message.len() - end
    )
}

/// Sets a condition, keeping `lastTransitionTime` unless the status changes.
/// The message is bounded (see `MESSAGE_MAX`).
pub fn set(
    conditions: &mut Vec<Condition>,
    type_: &str,
    status: bool,
    reason: Reason,
    message: &str,
    generation: Option<i64>,
) {
    let status = if status { "True" } else { "False" }.to_string();
    let message = bounded(message);
    let message = message.as_str();
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

/// A list of objects for a note: the first few, and how many more.
pub fn listing(items: &[String]) -> String {
    const SHOWN: usize = 5;
    let mut out = items
        .iter()
        .take(SHOWN)
        .cloned()
        .collect::<Vec<_>>()
        .join(", ");
    if items.len() > SHOWN {
        out.push_str(&format!(" and {} more", items.len() - SHOWN));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_quoting_a_huge_value_is_cut_below_the_crd_bound() {
        let huge = format!(
            "spec.nodeSelector.zone: {} is not a label value",
            "é".repeat(60_000)
        );
        let mut conds = Vec::new();
        set(
            &mut conds,
            READY,
            false,
            Reason::InvalidSpec,
            &huge,
            Some(2),
        );
        let message = &conds[0].message;
        assert!(message.len() <= MESSAGE_MAX, "{}", message.len());
        assert!(message.starts_with("spec.nodeSelector.zone: "));
        assert!(
            message.ends_with("more bytes left out)"),
            "{}",
            &message[message.len() - 40..]
        );
        assert_eq!(bounded("short"), "short");
    }
}
