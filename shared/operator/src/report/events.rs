//! Kubernetes Events for what a person looks for in `kubectl describe`:
//! refusals, missing permissions, repairs, prunes, upgrades, readiness
//! reached, objects kept on removal. Published only when something changed
//! (a condition moved, an object was written), so a steady state writes
//! none: the zero-writes-at-rest figure holds with Events.

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::runtime::events::{Event, EventType, Recorder};

use crate::base::conditions::{self, Reason};

/// The longest note the events API keeps (events.k8s.io/v1 refuses more
/// than 1 kB); a longer one is cut at a character boundary.
const NOTE_MAX: usize = 1000;

/// What an Event tells, declared once with its severity and the action
/// that led to it: `(variant, reason, action, warning)`.
macro_rules! notices {
    ($($(#[$doc:meta])* $name:ident => $action:literal, $warning:literal;)*) => {
        /// What an Event tells.
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        pub enum Notice {
            /// The spec was refused: a person must act (the condition's reason).
            Refused(Reason),
            /// An apply failed in a way a person should see: a missing
            /// permission, or the same failure repeated until Degraded.
            Failed(Reason),
            $($(#[$doc])* $name,)*
        }

        impl Notice {
            /// The Event's reason.
            pub const fn reason(self) -> &'static str {
                match self {
                    Notice::Refused(r) | Notice::Failed(r) => r.as_str(),
                    $(Notice::$name => stringify!($name),)*
                }
            }

            /// What the operator was doing.
            pub const fn action(self) -> &'static str {
                match self {
                    Notice::Refused(_) => "Reconcile",
                    Notice::Failed(_) => "Apply",
                    $(Notice::$name => $action,)*
                }
            }

            /// Whether a person should look (a Warning Event).
            pub const fn warning(self) -> bool {
                match self {
                    Notice::Refused(_) | Notice::Failed(_) => true,
                    $(Notice::$name => $warning,)*
                }
            }
        }
    };
}

notices! {
    /// A managed object someone changed or deleted was put back.
    DriftRepaired => "Apply", false;
    /// Objects the desired state no longer has were deleted.
    Pruned => "Prune", false;
    /// An object the API server would not update in place was recreated.
    ObjectRecreated => "Apply", true;
    /// An object the new state no longer has was kept with its data.
    ObjectReleased => "Prune", true;
    /// Objects kept on removal (CRDs, volumes).
    Retained => "Cleanup", false;
    /// A component moves to another version.
    Upgrading => "Upgrade", false;
    /// A managed object that holds data refuses the desired state.
    LiveStateRefused => "Apply", true;
    /// Ready was reached.
    Ready => "Reconcile", false;
    /// A component's CR was removed from a Kubeflow.
    ComponentRemoved => "Prune", false;
    /// A Kubeflow release upgrade began.
    UpgradeStarted => "Upgrade", false;
    /// A Kubeflow release upgrade finished.
    Upgraded => "Upgrade", false;
    /// An upgrade plan waits for approval.
    UpgradeAwaitingApproval => "Upgrade", false;
}

/// One Event about `on` (and, when it concerns one managed object, `about`
/// it: Events are merged by reason and object, so a repair of another
/// object is its own Event and not a count on the first one's); a failure
/// to publish is logged, never an error of the reconcile (an Event is a
/// courtesy, the status is the record).
pub async fn publish(
    recorder: &Recorder,
    on: &ObjectReference,
    notice: Notice,
    about: Option<ObjectReference>,
    note: String,
) {
    let event = Event {
        type_: if notice.warning() {
            EventType::Warning
        } else {
            EventType::Normal
        },
        reason: notice.reason().into(),
        note: Some(cut(note)),
        action: notice.action().into(),
        secondary: about,
    };
    if let Err(e) = recorder.publish(&event, on).await {
        tracing::warn!(error = %e, reason = notice.reason(), "failed to publish an Event");
    }
}

/// A reference to a managed object, for an Event's `related`.
pub fn reference(obj: &kube::api::DynamicObject) -> ObjectReference {
    ObjectReference {
        api_version: obj.types.as_ref().map(|t| t.api_version.clone()),
        kind: obj.types.as_ref().map(|t| t.kind.clone()),
        name: obj.metadata.name.clone(),
        namespace: obj.metadata.namespace.clone(),
        uid: obj.metadata.uid.clone(),
        ..Default::default()
    }
}

fn cut(mut note: String) -> String {
    if note.len() > NOTE_MAX {
        let mut end = NOTE_MAX - 3;
        while !note.is_char_boundary(end) {
            end -= 1;
        }
        note.truncate(end);
        note.push_str("...");
    }
    note
}

/// Whether condition `type_` says something new: another status, reason or
/// message than before (the time alone is no news).
pub fn condition_changed(before: &[Condition], after: &[Condition], type_: &str) -> bool {
    let key =
        |c: Option<&Condition>| c.map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()));
    key(conditions::get(before, type_)) != key(conditions::get(after, type_))
}

/// Whether condition `type_` turned True.
pub fn became_true(before: &[Condition], after: &[Condition], type_: &str) -> bool {
    let is_true = |c: &[Condition]| conditions::get(c, type_).is_some_and(|c| c.status == "True");
    !is_true(before) && is_true(after)
}

/// How many objects of one reconcile get an Event each (a repair of more
/// names the rest in one Event).
pub const OBJECTS_TOLD: usize = 5;

// A list in a message: defined beside the conditions, whose messages use
// it too.
pub use crate::base::conditions::listing;

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    fn cond(status: &str, reason: &str, message: &str, at: i64) -> Condition {
        Condition {
            type_: "Ready".into(),
            status: status.into(),
            reason: reason.into(),
            message: message.into(),
            observed_generation: Some(1),
            last_transition_time: Time(jiff::Timestamp::from_second(at).expect("time")),
        }
    }

    #[test]
    fn only_news_is_news() {
        let a = [cond("False", "InvalidSpec", "bad cpu", 1)];
        // The same verdict at another time: nothing to tell.
        assert!(!condition_changed(
            &a,
            &[cond("False", "InvalidSpec", "bad cpu", 9)],
            "Ready"
        ));
        assert!(condition_changed(
            &a,
            &[cond("False", "InvalidSpec", "bad memory", 9)],
            "Ready"
        ));
        assert!(condition_changed(&[], &a, "Ready"));
        assert!(became_true(&a, &[cond("True", "Ready", "ok", 9)], "Ready"));
        assert!(!became_true(
            &[cond("True", "Ready", "ok", 1)],
            &[cond("True", "Ready", "ok", 9)],
            "Ready"
        ));
    }

    #[test]
    fn notes_fit_the_api() {
        let long = "é".repeat(800);
        let n = cut(long);
        assert!(n.len() <= NOTE_MAX && n.ends_with("..."), "{}", n.len());
        let items: Vec<String> = (0..8).map(|i| format!("o{i}")).collect();
        assert_eq!(listing(&items), "o0, o1, o2, o3, o4 and 3 more");
        assert_eq!(listing(&items[..2]), "o0, o1");
    }
}
