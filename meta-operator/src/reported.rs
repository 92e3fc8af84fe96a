//! What a child CR reports, read as the typed status every component kind
//! shares (`ComponentStatus`, which each kind's own status flattens), not
//! field by field through JSON: the meta-operator watches children as
//! dynamic objects (only their owner references and status matter to it),
//! and this is the one place their status becomes a type again.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::api::DynamicObject;
use kubeflow_api::ComponentStatus;
use serde::Deserialize;

/// The child's status; None when it has none yet, or one this operator
/// cannot read (a status it did not write: the child's operator reports
/// again on its next reconcile).
pub fn status(child: &DynamicObject) -> Option<ComponentStatus> {
    ComponentStatus::deserialize(child.data.get("status")?).ok()
}

/// A condition of a status, by type.
pub fn condition<'a>(status: &'a ComponentStatus, type_: &str) -> Option<&'a Condition> {
    status.conditions.iter().find(|c| c.type_ == type_)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn object(status: serde_json::Value) -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "components.kubeflow.org/v1alpha1", "kind": "Trainer",
            "metadata": {"name": "kf"}, "status": status,
        }))
        .expect("object")
    }

    #[test]
    fn a_kinds_own_fields_beside_the_shared_ones_are_read_past() {
        let read = status(&object(json!({
            "version": "v2.2.0", "observedGeneration": 3,
            "runtimes": ["torch-distributed"],
            "conditions": [{"type": "Ready", "status": "True", "reason": "Ready", "message": "",
                "lastTransitionTime": "2026-01-01T00:00:00Z", "observedGeneration": 3}],
        })))
        .expect("a status");
        assert_eq!(read.version.as_deref(), Some("v2.2.0"));
        assert_eq!(read.observed_generation, Some(3));
        let ready = condition(&read, "Ready").expect("Ready");
        assert_eq!(
            (ready.status.as_str(), ready.observed_generation),
            ("True", Some(3))
        );
        assert!(condition(&read, "Degraded").is_none());
    }

    #[test]
    fn no_status_or_a_malformed_one_is_none() {
        let mut none = object(json!({}));
        none.data.as_object_mut().expect("object").remove("status");
        assert!(status(&none).is_none());
        assert!(status(&object(json!({"conditions": "not a list"}))).is_none());
    }
}
