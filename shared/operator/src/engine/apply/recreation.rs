//! Which objects may be deleted and created anew when their live state
//! refuses the desired one, and what is said about those that may not.
//!
//! Recreating is a repair only where the object is nothing but what the
//! bundle renders: a workload whose selector or template the API server
//! will not change, a binding whose `roleRef` it will not change, a Service
//! whose `clusterIP` or port names clash with someone's edit. Everything else
//! is kept as it is and reported: a PersistentVolumeClaim holds a volume, a
//! Namespace holds every object in it, a CRD holds every custom resource of
//! its kind, a Secret holds generated keys, a custom resource is someone's
//! desired state (a child CR's deletion uninstalls its component). The list
//! is an allow-list, so a kind nobody thought about is kept, never deleted.

use std::fmt;

use kube::api::DynamicObject;
use serde_json::Value;

use super::ObjectKey;
use crate::base::kinds;

/// Kinds kept because of what they hold, with what that is (for the message).
const HOLDS: &[(&str, &str)] = &[
    ("PersistentVolumeClaim", "its volume's data"),
    ("PersistentVolume", "a volume's data"),
    ("Namespace", "every object in it"),
    (
        "CustomResourceDefinition.apiextensions.k8s.io",
        "every custom resource of its kind",
    ),
    ("Secret", "keys and credentials that may not be made again"),
];

/// What to do with an object whose live state refuses the desired one.
#[derive(Debug, PartialEq, Eq)]
pub enum OnRefusal {
    /// Delete it and create it from the desired state.
    Recreate,
    /// Leave it as it is and report it; the reason it is kept.
    Keep(&'static str),
}

pub use crate::base::kinds::may_recreate;

/// The decision for `desired` (whose live copy is `live`); `retained`: the
/// component keeps the object beyond its own life (a kept volume or CRD).
pub fn on_refusal(desired: &DynamicObject, live: &DynamicObject, retained: bool) -> OnRefusal {
    let group_kind = kinds::group_kind(desired);
    if let Some((_, what)) = HOLDS.iter().find(|(gk, _)| *gk == group_kind) {
        return OnRefusal::Keep(what);
    }
    if retained {
        return OnRefusal::Keep("what the component keeps beyond its own life");
    }
    if !may_recreate(&group_kind) {
        return OnRefusal::Keep(
            "state of its own (only workloads, bindings and Services are recreated)",
        );
    }
    // A StatefulSet told to delete its claims with it would take its volumes.
    if group_kind == "StatefulSet.apps"
        && live
            .data
            .pointer("/spec/persistentVolumeClaimRetentionPolicy/whenDeleted")
            .and_then(Value::as_str)
            == Some("Delete")
    {
        return OnRefusal::Keep("volumes its retention policy deletes with it");
    }
    // A load balancer's address is what clients and DNS names point at; a
    // new Service gets a new one.
    if group_kind == "Service"
        && live
            .data
            .pointer("/status/loadBalancer/ingress")
            .and_then(Value::as_array)
            .is_some_and(|i| !i.is_empty())
    {
        return OnRefusal::Keep("the load balancer address clients use");
    }
    OnRefusal::Recreate
}

/// The longest part of the API server's message quoted in a status: it may
/// echo user input, and a condition's message is bounded.
const MESSAGE_LIMIT: usize = 600;

/// An object left as it is although its live state refuses the desired one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Held {
    /// The object.
    pub object: ObjectKey,
    /// What the API server said (a bounded prefix).
    pub refusal: String,
    /// What it holds, which a recreate would lose.
    pub holds: &'static str,
}

impl Held {
    /// An object held with the server's `message`.
    pub fn new(object: ObjectKey, message: &str, holds: &'static str) -> Self {
        Held {
            object,
            refusal: bounded(message),
            holds,
        }
    }
}

impl fmt::Display for Held {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} cannot take the desired state ({}); it holds {}, so it is never deleted to be recreated. Change it by hand so that the change is accepted, or delete it yourself if what it holds may go (it is then created anew)",
            self.object, self.refusal, self.holds
        )
    }
}

/// The Degraded message for held objects, if any: the first three in full,
/// then up to twenty more by name (a condition's message is bounded).
pub fn summary(held: &[Held]) -> Option<String> {
    const IN_FULL: usize = 3;
    const NAMED: usize = 20;
    if held.is_empty() {
        return None;
    }
    let mut message = held
        .iter()
        .take(IN_FULL)
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ");
    if held.len() > IN_FULL {
        let rest: Vec<String> = held
            .iter()
            .skip(IN_FULL)
            .take(NAMED)
            .map(|h| h.object.to_string())
            .collect();
        message.push_str(&format!("; also held: {}", rest.join(", ")));
        if held.len() > IN_FULL + NAMED {
            message.push_str(&format!(" and {} more", held.len() - IN_FULL - NAMED));
        }
    }
    Some(message)
}

/// `message` cut at `MESSAGE_LIMIT` bytes (on a character boundary).
pub fn bounded(message: &str) -> String {
    if message.len() <= MESSAGE_LIMIT {
        return message.to_string();
    }
    let mut end = MESSAGE_LIMIT;
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &message[..end])
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(api_version: &str, kind: &str, extra: Value) -> DynamicObject {
        let mut v = json!({"apiVersion": api_version, "kind": kind, "metadata": {"name": "x", "namespace": "ns"}});
        if let (Some(m), Value::Object(e)) = (v.as_object_mut(), extra) {
            m.extend(e);
        }
        serde_json::from_value(v).expect("object")
    }

    fn decide(api_version: &str, kind: &str) -> OnRefusal {
        let o = obj(api_version, kind, json!({}));
        on_refusal(&o, &o, false)
    }

    #[test]
    fn workloads_bindings_and_services_are_recreated() {
        for (api_version, kind) in [
            ("apps/v1", "Deployment"),
            ("apps/v1", "DaemonSet"),
            ("apps/v1", "StatefulSet"),
            ("apps/v1", "ReplicaSet"),
            ("batch/v1", "Job"),
            ("v1", "Service"),
            ("rbac.authorization.k8s.io/v1", "RoleBinding"),
            ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"),
        ] {
            assert_eq!(decide(api_version, kind), OnRefusal::Recreate, "{kind}");
        }
    }

    #[test]
    fn what_holds_data_or_objects_is_never_recreated() {
        for (api_version, kind, holds) in [
            ("v1", "PersistentVolumeClaim", "data"),
            ("v1", "PersistentVolume", "data"),
            ("v1", "Namespace", "every object"),
            (
                "apiextensions.k8s.io/v1",
                "CustomResourceDefinition",
                "custom resource",
            ),
            ("v1", "Secret", "credentials"),
        ] {
            match decide(api_version, kind) {
                OnRefusal::Keep(why) => assert!(why.contains(holds), "{kind}: {why}"),
                OnRefusal::Recreate => panic!("{kind} would be recreated"),
            }
        }
    }

    #[test]
    fn every_other_kind_is_kept_by_default() {
        // Kinds the bundles render that no immutable field makes us recreate,
        // and custom resources (a child CR, a Gateway, a Certificate).
        for (api_version, kind) in [
            ("v1", "ConfigMap"),
            ("v1", "ServiceAccount"),
            ("rbac.authorization.k8s.io/v1", "ClusterRole"),
            ("rbac.authorization.k8s.io/v1", "Role"),
            (
                "admissionregistration.k8s.io/v1",
                "ValidatingWebhookConfiguration",
            ),
            (
                "admissionregistration.k8s.io/v1",
                "MutatingWebhookConfiguration",
            ),
            ("networking.k8s.io/v1", "NetworkPolicy"),
            ("scheduling.k8s.io/v1", "PriorityClass"),
            ("policy/v1", "PodDisruptionBudget"),
            ("batch/v1", "CronJob"),
            ("storage.k8s.io/v1", "StorageClass"),
            ("components.kubeflow.org/v1alpha1", "Pipelines"),
            ("networking.istio.io/v1", "Gateway"),
            ("cert-manager.io/v1", "Certificate"),
        ] {
            assert!(
                matches!(decide(api_version, kind), OnRefusal::Keep(_)),
                "{kind}"
            );
        }
    }

    #[test]
    fn a_retained_object_is_kept_whatever_its_kind() {
        let o = obj("apps/v1", "Deployment", json!({}));
        assert!(matches!(on_refusal(&o, &o, true), OnRefusal::Keep(_)));
    }

    #[test]
    fn a_statefulset_deleting_its_claims_and_a_load_balancer_with_an_address_are_kept() {
        let desired = obj("apps/v1", "StatefulSet", json!({}));
        let live = obj(
            "apps/v1",
            "StatefulSet",
            json!({"spec": {"persistentVolumeClaimRetentionPolicy": {"whenDeleted": "Delete"}}}),
        );
        assert!(matches!(
            on_refusal(&desired, &live, false),
            OnRefusal::Keep(_)
        ));
        let retaining = obj(
            "apps/v1",
            "StatefulSet",
            json!({"spec": {"persistentVolumeClaimRetentionPolicy": {"whenDeleted": "Retain"}}}),
        );
        assert_eq!(on_refusal(&desired, &retaining, false), OnRefusal::Recreate);
        let svc = obj("v1", "Service", json!({}));
        let balanced = obj(
            "v1",
            "Service",
            json!({"status": {"loadBalancer": {"ingress": [{"ip": "192.0.2.7"}]}}}),
        );
        assert!(matches!(
            on_refusal(&svc, &balanced, false),
            OnRefusal::Keep(_)
        ));
        let pending = obj("v1", "Service", json!({"status": {"loadBalancer": {}}}));
        assert_eq!(on_refusal(&svc, &pending, false), OnRefusal::Recreate);
    }

    #[test]
    fn the_message_names_the_object_and_what_to_do_and_stays_short() {
        let key = ObjectKey {
            group_kind: "PersistentVolumeClaim".into(),
            namespace: "kubeflow".into(),
            name: "mysql-pv-claim".into(),
        };
        let held = Held::new(key, &"x".repeat(100_000), "its volume's data");
        let text = held.to_string();
        assert!(text.starts_with("PersistentVolumeClaim kubeflow/mysql-pv-claim cannot take"));
        assert!(text.contains("delete it yourself"));
        assert!(text.len() < 1000, "{}", text.len());
        assert_eq!(bounded("é".repeat(400).as_str()).len(), 603);
    }

    #[test]
    fn the_summary_names_every_held_object_within_bounds() {
        assert_eq!(summary(&[]), None);
        let held: Vec<Held> = (0..40)
            .map(|i| {
                let key = ObjectKey {
                    group_kind: "Namespace".into(),
                    namespace: String::new(),
                    name: format!("ns-{i}"),
                };
                Held::new(key, &"y".repeat(5000), "every object in it")
            })
            .collect();
        let text = summary(&held).expect("a summary");
        assert!(text.contains("Namespace ns-0 cannot take"));
        assert!(text.contains("also held: Namespace ns-3, "));
        assert!(text.ends_with("and 17 more"), "{text}");
        assert!(text.len() < 4000, "{}", text.len());
    }
}
