//! A CR's status: the Ready/Progressing/Degraded verdicts every operator
//! gives, and writing it through the `/status` subresource only when it
//! changed (the zero-writes-at-rest promise).

use kube::api::{Api, Patch, PatchParams};
use kube::{Resource, ResourceExt};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

/// Writes `new` as the status of `cr` with a merge patch. Lists are replaced
/// whole, and fields of `old` that `new` lacks are removed explicitly (a
/// merge patch would otherwise keep them).
pub async fn patch<K>(api: &Api<K>, cr: &K, old: &Value, mut new: Value) -> Result<(), kube::Error>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug,
{
    if let (Value::Object(old_map), Value::Object(new_map)) = (old, &mut new) {
        for k in old_map.keys() {
            new_map.entry(k.clone()).or_insert(Value::Null);
        }
    }
    api.patch_status(
        &cr.name_any(),
        &PatchParams::default(),
        &Patch::Merge(json!({ "status": new })),
    )
    .await?;
    Ok(())
}

/// Writes `new` as the status of `cr` unless it says what `old` (the status
/// the CR has) says; conditions compare without their transition times, so
/// the clock alone never causes a write. Returns whether it wrote.
pub async fn write_if_changed<K>(
    api: &Api<K>,
    cr: &K,
    old: &Value,
    new: Value,
) -> Result<bool, kube::Error>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug,
{
    if !old.is_null() && same(old, &new) {
        return Ok(false);
    }
    patch(api, cr, old, new).await?;
    Ok(true)
}

/// Whether two statuses say the same, conditions compared without their
/// transition times.
pub fn same(old: &Value, new: &Value) -> bool {
    let conditions_of = |v: &Value| -> Vec<Condition> {
        v.get("conditions")
            .and_then(|c| serde_json::from_value(c.clone()).ok())
            .unwrap_or_default()
    };
    let without_conditions = |v: &Value| {
        let mut v = v.clone();
        if let Value::Object(m) = &mut v {
            m.remove("conditions");
        }
        v
    };
    conditions::same(&conditions_of(old), &conditions_of(new))
        && without_conditions(old) == without_conditions(new)
}

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;

use crate::conditions::{self, DEGRADED, PROGRESSING, READY, Reason};

/// How many identical failures in a row make a passing error `Degraded`:
/// one API error is weather, three of the same are a fault a person should see.
pub const REPEATS_BEFORE_DEGRADED: u32 = 3;

/// Ready, Progressing and Degraded of a CR at `generation`, set together.
pub struct Verdict<'a> {
    /// Ready's status.
    pub ready: bool,
    /// Progressing's status.
    pub progressing: bool,
    /// Degraded's status.
    pub degraded: bool,
    /// The reason all three carry (Degraded carries `AsExpected` when false).
    pub reason: Reason,
    /// The message of Ready and Progressing (and Degraded when true).
    pub message: &'a str,
}

impl Verdict<'_> {
    /// Writes the three conditions (a condition's transition time moves
    /// only when its status does).
    pub fn apply(&self, conds: &mut Vec<Condition>, generation: Option<i64>) {
        let progressing_message = if self.progressing { self.message } else { "" };
        conditions::set(
            conds,
            READY,
            self.ready,
            self.reason,
            self.message,
            generation,
        );
        conditions::set(
            conds,
            PROGRESSING,
            self.progressing,
            self.reason,
            progressing_message,
            generation,
        );
        if self.degraded {
            conditions::set(conds, DEGRADED, true, self.reason, self.message, generation);
        } else {
            conditions::set(conds, DEGRADED, false, Reason::AsExpected, "", generation);
        }
    }
}

/// Input a person must fix: not Ready, Degraded, not Progressing.
pub fn refused(reason: Reason, message: &str) -> Verdict<'_> {
    Verdict {
        ready: false,
        progressing: false,
        degraded: true,
        reason,
        message,
    }
}

/// An apply that failed: never Ready, whatever was true before. Still
/// progressing (it is retried), and Degraded once the same failure repeats.
pub fn failed(reason: Reason, message: &str, repeats: u32) -> Verdict<'_> {
    Verdict {
        ready: false,
        progressing: true,
        degraded: repeats >= REPEATS_BEFORE_DEGRADED,
        reason,
        message,
    }
}

/// Applied: Ready when every workload is, else progressing towards it.
pub fn applied(
    ready: bool,
    ready_reason: Reason,
    waiting_reason: Reason,
    message: &str,
) -> Verdict<'_> {
    Verdict {
        ready,
        progressing: !ready,
        degraded: false,
        reason: if ready { ready_reason } else { waiting_reason },
        message,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn get<'a>(c: &'a [Condition], t: &str) -> (&'a str, &'a str, &'a str) {
        let c = conditions::get(c, t).expect("condition");
        (c.status.as_str(), c.reason.as_str(), c.message.as_str())
    }

    #[test]
    fn a_failed_apply_is_never_ready_and_repeats_become_degraded() {
        let mut c = Vec::new();
        applied(true, Reason::Ready, Reason::WorkloadsNotReady, "12 objects")
            .apply(&mut c, Some(1));
        assert_eq!(get(&c, READY).0, "True");
        failed(Reason::ApiError, "500: quantities must match", 1).apply(&mut c, Some(2));
        assert_eq!(
            get(&c, READY),
            ("False", "ApiError", "500: quantities must match")
        );
        assert_eq!(
            get(&c, DEGRADED).0,
            "False",
            "one failure is not yet a fault"
        );
        assert_eq!(get(&c, PROGRESSING).0, "True");
        failed(Reason::ApiError, "500: quantities must match", 3).apply(&mut c, Some(2));
        assert_eq!(
            get(&c, DEGRADED),
            ("True", "ApiError", "500: quantities must match")
        );
        assert!(c.iter().all(|x| x.observed_generation == Some(2)));
    }

    #[test]
    fn a_status_that_changed_only_in_its_clock_is_the_same() {
        let at = |t: &str, status: &str| {
            json!({"version": "v1", "conditions": [{
                "type": "Ready", "status": status, "reason": "Ready", "message": "",
                "observedGeneration": 1, "lastTransitionTime": t,
            }]})
        };
        assert!(same(
            &at("2026-01-01T00:00:00Z", "True"),
            &at("2026-02-01T00:00:00Z", "True")
        ));
        assert!(!same(
            &at("2026-01-01T00:00:00Z", "True"),
            &at("2026-01-01T00:00:00Z", "False")
        ));
        let mut other = at("2026-01-01T00:00:00Z", "True");
        other["version"] = json!("v2");
        assert!(!same(&at("2026-01-01T00:00:00Z", "True"), &other));
    }

    #[test]
    fn refusals_and_success() {
        let mut c = Vec::new();
        refused(Reason::InvalidSpec, "bad image").apply(&mut c, Some(3));
        assert_eq!(get(&c, DEGRADED), ("True", "InvalidSpec", "bad image"));
        assert_eq!(get(&c, PROGRESSING), ("False", "InvalidSpec", ""));
        applied(
            false,
            Reason::Ready,
            Reason::WorkloadsNotReady,
            "waiting for x",
        )
        .apply(&mut c, Some(4));
        assert_eq!(
            get(&c, READY),
            ("False", "WorkloadsNotReady", "waiting for x")
        );
        assert_eq!(get(&c, DEGRADED), ("False", "AsExpected", ""));
        assert_eq!(
            get(&c, PROGRESSING),
            ("True", "WorkloadsNotReady", "waiting for x")
        );
    }
}
