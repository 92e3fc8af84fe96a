//! A CR's status: the Ready/Progressing/Degraded verdicts every operator
//! gives, and writing it through the `/status` subresource only when it
//! changed (the zero-writes-at-rest promise).

use kube::api::{Api, Patch, PatchParams};
use kube::{Resource, ResourceExt};
use kubeflow_api::{ObjectStatus, Reported};
use serde::de::DeserializeOwned;
use serde_json::json;

/// Writes `new` as the status of `cr` unless it says what the CR's status
/// says (conditions compared without their transition times, so the clock
/// alone never causes a write): a server-side apply to `/status` as
/// `manager`, so a field the operator no longer sets goes with it. Returns
/// whether it wrote.
pub async fn write_if_changed<K>(
    api: &Api<K>,
    cr: &K,
    new: &K::Status,
    manager: &str,
) -> Result<bool, kube::Error>
where
    K: Resource<DynamicType = ()> + Reported + Clone + DeserializeOwned + std::fmt::Debug,
{
    if cr.reported().is_some_and(|old| same(old, new)) {
        return Ok(false);
    }
    let body = json!({
        "apiVersion": K::api_version(&()),
        "kind": K::kind(&()),
        "metadata": { "name": cr.name_any() },
        "status": new,
    });
    api.patch_status(
        &cr.name_any(),
        &PatchParams::apply(manager).force(),
        &Patch::Apply(body),
    )
    .await?;
    Ok(true)
}

/// Whether two statuses say the same, conditions compared without their
/// transition times.
pub fn same<S: ObjectStatus>(old: &S, new: &S) -> bool {
    let (mut a, mut b) = (old.clone(), new.clone());
    let (ca, cb) = (
        std::mem::take(a.conditions_mut()),
        std::mem::take(b.conditions_mut()),
    );
    conditions::same(&ca, &cb) && a == b
}

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;

use crate::base::conditions::{self, DEGRADED, PROGRESSING, READY, Reason};

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
/// progressing (it is retried), and Degraded once `repeats` (failures in a
/// row) reaches [`REPEATS_BEFORE_DEGRADED`].
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
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
        let at = |t: i64, status: &str| kubeflow_api::ComponentStatus {
            version: Some("v1".into()),
            conditions: vec![Condition {
                type_: "Ready".into(),
                status: status.into(),
                reason: "Ready".into(),
                message: String::new(),
                observed_generation: Some(1),
                last_transition_time: Time(jiff::Timestamp::from_second(t).expect("time")),
            }],
            ..Default::default()
        };
        assert!(same(&at(1, "True"), &at(9, "True")));
        assert!(!same(&at(1, "True"), &at(1, "False")));
        let mut other = at(1, "True");
        other.version = Some("v2".into());
        assert!(!same(&at(1, "True"), &other));
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
