//! Reading a child CR's state for the `Kubeflow` status: ready only when its
//! Ready condition is True for its current generation and it reports the
//! expected version (no false green).

use kube::api::DynamicObject;
use kubeflow_api::kubeflow::ComponentSummary;
use kubeflow_operator::conditions::Reason;

use crate::children::{Child, expected_version};
use crate::reported::{condition, status};

/// Summarizes one managed child from its live object (None: not created yet).
/// (Long on purpose: one case after another, each a reason a person reads.)
pub fn summarize(child: &Child, live: Option<&DynamicObject>) -> ComponentSummary {
    let name = child.component.to_string();
    let version = expected_version(child).map(str::to_string);
    let Some(obj) = live else {
        return ComponentSummary {
            name,
            version,
            ready: false,
            reason: Some(Reason::NotCreated.into()),
            message: None,
        };
    };
    let generation = obj.metadata.generation;
    let reported = status(obj).unwrap_or_default();
    let ready_cond = condition(&reported, "Ready");
    let deployed = reported.version.as_deref();
    let (ready, reason, message) = if reported.observed_generation != generation
        || ready_cond.and_then(|c| c.observed_generation) != generation
    {
        (
            false,
            Some(Reason::Reconciling.into()),
            Some(format!(
                "{name} has not yet reported on generation {}",
                generation.unwrap_or(0)
            )),
        )
    } else if let Some(c) = ready_cond.filter(|c| c.status != "True") {
        (false, Some(c.reason.clone()), Some(c.message.clone()))
    } else if ready_cond.is_none() {
        (false, None, None)
    } else if crate::approval::child_awaits(child, &reported) {
        let progressing = condition(&reported, "Progressing").map(|c| c.message.clone());
        (false, Some(Reason::AwaitingApproval.into()), progressing)
    } else if version.is_some() && deployed != version.as_deref() {
        (
            false,
            Some("VersionMismatch".to_string()),
            Some(format!(
                "{name} reports version {}",
                deployed.unwrap_or("none")
            )),
        )
    } else {
        (true, None, None)
    };
    ComponentSummary {
        name,
        version,
        ready,
        reason,
        message,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn child() -> Child {
        crate::children::test_child(
            crate::component_kind::ComponentKind::Training,
            true,
            Some("v1.9.2"),
        )
    }

    fn live(generation: i64, observed: i64, ready: &str, version: &str) -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "components.kubeflow.org/v1alpha1", "kind": "Training",
            "metadata": {"name": "kf", "generation": generation},
            "status": {"observedGeneration": observed, "version": version,
                "conditions": [{"type": "Ready", "status": ready, "reason": "WorkloadsNotReady", "message": "m", "observedGeneration": observed, "lastTransitionTime": "2026-01-01T00:00:00Z"}]}
        }))
        .expect("object")
    }

    #[test]
    fn ready_needs_the_current_generation_and_version() {
        assert!(summarize(&child(), Some(&live(2, 2, "True", "v1.9.2"))).ready);
        let lagging = summarize(&child(), Some(&live(3, 2, "True", "v1.9.2")));
        assert!(
            !lagging.ready,
            "a child whose observedGeneration lags is not ready"
        );
        assert_eq!(lagging.reason.as_deref(), Some("Reconciling"));
        assert!(!summarize(&child(), Some(&live(2, 2, "True", "v1.9.1"))).ready);
        let not_ready = summarize(&child(), Some(&live(2, 2, "False", "v1.9.2")));
        assert_eq!(not_ready.reason.as_deref(), Some("WorkloadsNotReady"));
        assert!(!summarize(&child(), None).ready);
    }
}
