//! The `Kubeflow` CR's status after an apply, computed without API access
//! from what was asked, what waits, and the children as the apply left them:
//! one summary per managed component, the count, the version reached, the
//! upgrade in progress and its risk, the conditions and the phase.

use std::collections::BTreeMap;

use kube::api::DynamicObject;
use kubeflow_api::kubeflow::{ComponentSummary, KubeflowStatus, Phase, ReleasePlan, UpgradeStatus};
use kubeflow_operator::conditions::{self, Reason};
use kubeflow_operator::status::Verdict;

use crate::children::Child;
use crate::component_kind::ComponentKind;
use crate::{release, summary};

/// The condition type saying an upgrade in progress is risky.
pub const UPGRADE_RISK: &str = "UpgradeRisk";

/// Reasons a child gives when a person must act on its spec.
const CHILD_REFUSALS: &[Reason] = &[
    Reason::OwnershipConflict,
    Reason::UnknownVersion,
    Reason::InvalidSpec,
];

/// What the apply step saw.
pub struct Observed<'a> {
    /// The children the `Kubeflow` CR asks for (managed or not).
    pub wanted: &'a [Child],
    /// Managed children not written yet, and what they wait for.
    pub waiting: &'a BTreeMap<ComponentKind, String>,
    /// The child CRs as the apply left them.
    pub live: &'a [DynamicObject],
}

/// Updates `status` for the CR at `generation` asking for Kubeflow
/// `version`; `installed` is the version reached before. Returns whether
/// every managed component is ready.
pub fn after_apply(
    status: &mut KubeflowStatus,
    version: &str,
    installed: Option<&str>,
    generation: Option<i64>,
    seen: &Observed<'_>,
) -> bool {
    let summaries = summaries(seen);
    let total = summaries.len();
    let ready_count = summaries.iter().filter(|s| s.ready).count();
    let all_ready = ready_count == total;
    status.ready_components = Some(format!("{ready_count}/{total}"));
    if all_ready {
        status.version = Some(version.to_string());
        status.upgrade = None;
        status.release = Some(version.to_string());
    } else if let Some(from) = installed.filter(|v| *v != version) {
        status.upgrade = Some(UpgradeStatus {
            from: from.to_string(),
            to: version.to_string(),
        });
        status.release = Some(format!("{from} -> {version}"));
    } else if installed == Some(version) {
        // Installed once, not Ready now (a component repaired or added):
        // still that release.
        status.release = Some(version.to_string());
    } else {
        status.release = Some(format!("installing {version}"));
    }
    set_upgrade_risk(status, generation);
    if all_ready {
        let msg = format!("{total} components ready at Kubeflow {version}");
        Verdict {
            ready: true,
            progressing: false,
            degraded: false,
            reason: Reason::Ready,
            message: &msg,
        }
        .apply(&mut status.conditions, generation);
        status.phase = Some(Phase::Ready);
    } else {
        not_ready(status, &summaries, !seen.waiting.is_empty(), generation);
    }
    // A Removed component kept for its dependents is never a silent Ready.
    let kept = crate::needed::kept(seen.wanted, seen.live);
    crate::needed::report(status, &kept, generation);
    status.components = summaries;
    all_ready && kept.is_empty()
}

/// The release plan into the status while an upgrade is under way; while
/// it waits for approval, the phase and the Ready message say so and name
/// the digest to approve.
pub fn with_release_plan(
    status: &mut KubeflowStatus,
    plan: Option<ReleasePlan>,
    approved: Option<&str>,
    generation: Option<i64>,
) {
    let Some(plan) = plan else {
        status.upgrade_plan = None;
        return;
    };
    if plan.awaiting_approval {
        let message = crate::approval::awaiting_message(&plan, approved);
        for type_ in [conditions::READY, conditions::PROGRESSING] {
            let (value, r) = if type_ == conditions::READY {
                (false, Reason::AwaitingApproval)
            } else {
                (true, Reason::AwaitingApproval)
            };
            conditions::set(
                &mut status.conditions,
                type_,
                value,
                r,
                &message,
                generation,
            );
        }
        if status.phase != Some(Phase::Degraded) {
            status.phase = Some(Phase::AwaitingApproval);
        }
    }
    status.upgrade_plan = Some(plan);
}

/// Conditions and phase while some managed component is not ready: still
/// progressing; Degraded when a child refuses its spec (a person must act).
fn not_ready(
    status: &mut KubeflowStatus,
    summaries: &[ComponentSummary],
    waiting: bool,
    generation: Option<i64>,
) {
    let pending: Vec<String> = summaries
        .iter()
        .filter(|s| !s.ready)
        .map(|s| {
            let why = s.message.clone().or(s.reason.clone()).unwrap_or_default();
            format!("{} ({why})", s.name)
        })
        .collect();
    let refused = summaries.iter().any(|s| {
        s.reason
            .as_deref()
            .is_some_and(|r| CHILD_REFUSALS.iter().any(|c| c.as_str() == r))
    });
    let r = if waiting && !refused {
        Reason::WaitingForDependency
    } else {
        Reason::ComponentsNotReady
    };
    let msg = format!("waiting for {}", pending.join("; "));
    Verdict {
        ready: false,
        progressing: true,
        degraded: refused,
        reason: r,
        message: &msg,
    }
    .apply(&mut status.conditions, generation);
    status.phase = Some(match (refused, status.upgrade.is_some()) {
        (true, _) => Phase::Degraded,
        (false, true) => Phase::Upgrading,
        (false, false) => Phase::Installing,
    });
}

/// One summary per managed child, in creation order.
fn summaries(seen: &Observed<'_>) -> Vec<ComponentSummary> {
    seen.wanted
        .iter()
        .filter(|c| c.managed)
        .map(|child| {
            let kind = child.component.api_resource().kind;
            let live = seen
                .live
                .iter()
                .find(|o| o.types.as_ref().is_some_and(|t| t.kind == kind));
            let mut s = summary::summarize(child, live);
            if let Some(w) = seen.waiting.get(&child.component) {
                s.reason = Some(Reason::WaitingForDependency.into());
                s.message = Some(w.clone());
            }
            s
        })
        .collect()
}

/// `UpgradeRisk` while an upgrade in progress is one Istio does not support in place.
fn set_upgrade_risk(status: &mut KubeflowStatus, generation: Option<i64>) {
    let risk = status
        .upgrade
        .as_ref()
        .and_then(|u| Some((release::find(&u.from)?, release::find(&u.to)?)))
        .and_then(|(from, to)| release::upgrade_risk(from, to));
    match risk {
        Some(message) => conditions::set(
            &mut status.conditions,
            UPGRADE_RISK,
            true,
            Reason::IstioMinorVersionSkip,
            &message,
            generation,
        ),
        None => status.conditions.retain(|c| c.type_ != UPGRADE_RISK),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn child(component: ComponentKind) -> Child {
        crate::children::test_child(component, true, Some("v1"))
    }

    fn live(kind: &str, ready: &str, reason: &str) -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "components.kubeflow.org/v1alpha1", "kind": kind,
            "metadata": {"name": "kubeflow", "generation": 1},
            "status": {"observedGeneration": 1, "version": "v1", "conditions": [{
                "type": "Ready", "status": ready, "reason": reason, "message": "m",
                "observedGeneration": 1, "lastTransitionTime": "2026-01-01T00:00:00Z",
            }]},
        }))
        .expect("object")
    }

    fn condition<'a>(s: &'a KubeflowStatus, t: &str) -> (&'a str, &'a str) {
        let c = conditions::get(&s.conditions, t).expect("condition");
        (c.status.as_str(), c.reason.as_str())
    }

    #[test]
    fn every_child_ready_makes_the_release_reached() {
        let wanted = [child(ComponentKind::Istio), child(ComponentKind::Training)];
        let both = [
            live("Istio", "True", "Ready"),
            live("Training", "True", "Ready"),
        ];
        let mut s = KubeflowStatus::default();
        let seen = Observed {
            wanted: &wanted,
            waiting: &BTreeMap::new(),
            live: &both,
        };
        assert!(after_apply(&mut s, "26.03", Some("1.11.0"), Some(2), &seen));
        assert_eq!(s.version.as_deref(), Some("26.03"));
        assert_eq!(s.release.as_deref(), Some("26.03"));
        assert_eq!(s.ready_components.as_deref(), Some("2/2"));
        assert_eq!(s.phase, Some(Phase::Ready));
        assert_eq!(condition(&s, "Ready"), ("True", "Ready"));
        assert!(s.upgrade.is_none());
    }

    #[test]
    fn an_upgrade_under_way_is_upgrading_and_a_refusing_child_degrades() {
        let wanted = [child(ComponentKind::Istio), child(ComponentKind::Serving)];
        let waiting = BTreeMap::from([(ComponentKind::Serving, "serving waits for istio".into())]);
        let starting = [live("Istio", "False", "WorkloadsNotReady")];
        let mut s = KubeflowStatus::default();
        let seen = Observed {
            wanted: &wanted,
            waiting: &waiting,
            live: &starting,
        };
        assert!(!after_apply(
            &mut s,
            "26.03",
            Some("1.11.0"),
            Some(2),
            &seen
        ));
        assert_eq!(s.phase, Some(Phase::Upgrading));
        assert_eq!(s.release.as_deref(), Some("1.11.0 -> 26.03"));
        assert_eq!(s.upgrade.as_ref().map(|u| u.from.as_str()), Some("1.11.0"));
        assert_eq!(condition(&s, "Ready"), ("False", "WaitingForDependency"));
        assert_eq!(condition(&s, "Degraded").0, "False");
        assert_eq!(
            s.version, None,
            "the version reached stays until every child is ready"
        );

        let refusing = [live("Istio", "False", "InvalidSpec")];
        let seen = Observed {
            wanted: &wanted,
            waiting: &waiting,
            live: &refusing,
        };
        after_apply(&mut s, "26.03", Some("1.11.0"), Some(3), &seen);
        assert_eq!(s.phase, Some(Phase::Degraded));

        // A first install names the release it is installing.
        let mut fresh = KubeflowStatus::default();
        after_apply(&mut fresh, "26.03", None, Some(1), &seen);
        assert_eq!(fresh.release.as_deref(), Some("installing 26.03"));
        assert_eq!(condition(&s, "Degraded"), ("True", "ComponentsNotReady"));
    }
}
