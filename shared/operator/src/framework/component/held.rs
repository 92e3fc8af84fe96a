//! Managed objects being deleted that a finalizer holds: the object is
//! still there, so nothing recreates it, yet it is on its way out. Until
//! the finalizer's controller lets go, the component is not Ready (a held
//! ConfigMap or Service read as Ready the whole time before), and the
//! status names the object and what holds it.

use kube::api::DynamicObject;

use crate::base::kinds::kind;

/// One line per managed object in deletion that finalizers hold, naming
/// the object and the finalizers.
pub fn held_in_deletion(live: &[DynamicObject]) -> Vec<String> {
    live.iter()
        .filter(|o| o.metadata.deletion_timestamp.is_some())
        .map(|o| {
            let name = match o.metadata.namespace.as_deref() {
                Some(ns) => format!("{ns}/{}", o.metadata.name.as_deref().unwrap_or("")),
                None => o.metadata.name.clone().unwrap_or_default(),
            };
            let finalizers = o.metadata.finalizers.clone().unwrap_or_default();
            if finalizers.is_empty() {
                format!("{} {name} is being deleted", kind(o))
            } else {
                format!(
                    "{} {name} is being deleted, held by finalizer {}",
                    kind(o),
                    finalizers.join(", ")
                )
            }
        })
        .collect()
}

/// The Ready message while objects are held: what holds them, and that
/// they come back once released.
pub fn message(held: &[String]) -> String {
    format!(
        "{}; it is recreated once its finalizer is removed",
        held.join("; ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn cm(name: &str, deleting: bool, finalizers: &[&str]) -> DynamicObject {
        let mut meta = json!({"name": name, "namespace": "kubeflow", "finalizers": finalizers});
        if deleting {
            meta["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
        }
        serde_json::from_value(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta}))
            .expect("object")
    }

    #[test]
    fn a_deleted_object_a_finalizer_holds_is_named_with_the_finalizer() {
        let live = [
            cm("kept", false, &["example.com/protect"]),
            cm("held", true, &["example.com/hold"]),
        ];
        let held = held_in_deletion(&live);
        assert_eq!(
            held,
            ["ConfigMap kubeflow/held is being deleted, held by finalizer example.com/hold"]
        );
        assert!(message(&held).contains("recreated once its finalizer is removed"));
        assert!(held_in_deletion(&live[..1]).is_empty());
    }
}
