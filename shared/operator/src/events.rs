//! Kubernetes Events for what a person looks for in `kubectl describe`:
//! refusals, missing permissions, repairs, prunes, upgrades, readiness
//! reached, objects kept on removal. Published only when something changed
//! (a condition moved, an object was written), so a steady state writes
//! none: the zero-writes-at-rest figure holds with Events.

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::runtime::events::{Event, EventType, Recorder};

use crate::conditions;

/// The longest note the events API keeps (events.k8s.io/v1 refuses more
/// than 1 kB); a longer one is cut at a character boundary.
const NOTE_MAX: usize = 1000;

/// One Event about `on`; a failure to publish is logged, never an error of
/// the reconcile (an Event is a courtesy, the status is the record).
pub async fn publish(
    recorder: &Recorder,
    on: &ObjectReference,
    warning: bool,
    reason: &str,
    action: &str,
    note: String,
) {
    let event = Event {
        type_: if warning {
            EventType::Warning
        } else {
            EventType::Normal
        },
        reason: reason.into(),
        note: Some(cut(note)),
        action: action.into(),
        secondary: None,
    };
    if let Err(e) = recorder.publish(&event, on).await {
        tracing::warn!(error = %e, reason, "failed to publish an Event");
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
