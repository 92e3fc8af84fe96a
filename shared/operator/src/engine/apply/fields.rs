//! Fields of a desired object the engine leaves to others, and the opt-out
//! annotation (never honoured on what guards privilege).

use kube::api::DynamicObject;
use serde_json::Value;

use crate::base::kinds::kind;
use crate::base::labels;

/// cert-manager's annotation asking it to inject a webhook's caBundle.
const CERT_MANAGER_INJECT: &str = "cert-manager.io/inject-ca-from";

/// Removes fields another controller owns, so the two never fight: the rules
/// of an aggregated ClusterRole (the aggregation controller fills them) and
/// caBundles cert-manager injects.
pub fn drop_foreign_fields(obj: &mut DynamicObject) {
    match kind(obj) {
        "ClusterRole" if obj.data.get("aggregationRule").is_some() => {
            if let Some(m) = obj.data.as_object_mut() {
                m.remove("rules");
            }
        }
        "MutatingWebhookConfiguration"
        | "ValidatingWebhookConfiguration"
        | "CustomResourceDefinition"
        | "APIService" => {
            let injected = obj
                .metadata
                .annotations
                .as_ref()
                .is_some_and(|a| a.contains_key(CERT_MANAGER_INJECT));
            if !injected {
                return;
            }
            if let Some(Value::Array(hooks)) = obj.data.get_mut("webhooks") {
                for h in hooks {
                    if let Some(Value::Object(cc)) = h.get_mut("clientConfig") {
                        cc.remove("caBundle");
                    }
                }
            }
            if let Some(Value::Object(cc)) = obj
                .data
                .pointer_mut("/spec/conversion/webhook/clientConfig")
            {
                cc.remove("caBundle");
            }
            if let Some(Value::Object(spec)) = obj.data.get_mut("spec")
                && kind_is_apiservice(spec)
            {
                spec.remove("caBundle");
            }
        }
        _ => {}
    }
}

fn kind_is_apiservice(spec: &serde_json::Map<String, Value>) -> bool {
    spec.contains_key("service") && spec.contains_key("groupPriorityMinimum")
}

/// Kinds whose change can widen someone's access: the opt-out annotation
/// never stops their repair (whoever can annotate a ClusterRole could
/// otherwise make it theirs to widen, and keep it that way).
const GUARDS_PRIVILEGE: &[&str] = &[
    "ClusterRole",
    "ClusterRoleBinding",
    "Role",
    "RoleBinding",
    "MutatingWebhookConfiguration",
    "ValidatingWebhookConfiguration",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
    "MutatingAdmissionPolicy",
    "MutatingAdmissionPolicyBinding",
    "CustomResourceDefinition",
    "APIService",
];

/// Whether a person opted the object out of drift repair
/// (`components.kubeflow.org/skip-reconcile: "true"`), and may.
pub(super) fn skip_reconcile(obj: &DynamicObject) -> bool {
    !GUARDS_PRIVILEGE.contains(&kind(obj))
        && obj
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(labels::SKIP_RECONCILE))
            .is_some_and(|v| v == "true")
}

/// Whether a label changes what an object means wherever it is: a
/// ClusterRole labelled `rbac.authorization.k8s.io/aggregate-to-view` hands
/// its rules (Secrets, pods/exec) to every holder of the built-in `view`,
/// one labelled `rbac.authorization.kubeflow.org/aggregate-to-kubeflow-edit`
/// to every holder of Kubeflow's `kubeflow-edit`.
fn changes_meaning(key: &str) -> bool {
    labels::is_aggregation_label(key)
}

/// Labels of the live object that change its meaning and that the desired
/// object does not set: someone else added them, and server-side apply
/// would leave them (they are another manager's), so they are removed.
pub(super) fn foreign_meaning_labels(desired: &DynamicObject, live: &DynamicObject) -> Vec<String> {
    let wanted = desired.metadata.labels.as_ref();
    live.metadata
        .labels
        .iter()
        .flatten()
        .map(|(k, _)| k)
        .filter(|k| changes_meaning(k))
        .filter(|k| !wanted.is_some_and(|w| w.contains_key(*k)))
        .cloned()
        .collect()
}

/// A volume someone grew is theirs: when the live claim requests more
/// storage than the desired one, the desired request becomes the live one,
/// so the grown size is neither drift nor a shrink the API server refuses
/// (which would leave the claim unrepaired). A smaller live request (one
/// that never reached ours) is still raised to ours.
pub(super) fn keep_grown_volume(desired: &mut DynamicObject, live: &Value) {
    const STORAGE: &str = "/spec/resources/requests/storage";
    if kind(desired) != "PersistentVolumeClaim" {
        return;
    }
    let (Some(live_text), Some(ours)) = (
        live.pointer(STORAGE).and_then(Value::as_str),
        desired.data.pointer_mut(STORAGE),
    ) else {
        return;
    };
    let size = |text: &str| crate::base::quantity::quantity(text);
    if let (Some(theirs), Some(mine)) = (size(live_text), ours.as_str().and_then(size))
        && theirs > mine
    {
        *ours = Value::String(live_text.to_string());
    }
}

/// Calls `f` with the object as one JSON value, as it serializes, without
/// copying its body: the body is moved into the value and back. (A copy of
/// a KServe CRD's schema is megabytes of tree, with 16 reads in flight.)
pub(super) fn with_value<R>(obj: &mut DynamicObject, f: impl FnOnce(&Value) -> R) -> R {
    const OUTER: [&str; 3] = ["apiVersion", "kind", "metadata"];
    let (mut map, was_object) = match std::mem::take(&mut obj.data) {
        Value::Object(map) => (map, true),
        _ => (serde_json::Map::new(), false),
    };
    if let Some(types) = &obj.types {
        map.insert(
            "apiVersion".into(),
            Value::String(types.api_version.clone()),
        );
        map.insert("kind".into(), Value::String(types.kind.clone()));
    }
    map.insert(
        "metadata".into(),
        serde_json::to_value(&obj.metadata).unwrap_or(Value::Null),
    );
    let value = Value::Object(map);
    let out = f(&value);
    let Value::Object(mut map) = value else {
        return out;
    };
    for key in OUTER {
        map.remove(key);
    }
    obj.data = if was_object || !map.is_empty() {
        Value::Object(map)
    } else {
        Value::Null
    };
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn annotated(kind: &str) -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "v1", "kind": kind,
            "metadata": {"name": "x", "annotations": {labels::SKIP_RECONCILE: "true"}},
        }))
        .expect("object")
    }

    #[test]
    fn an_object_seen_as_one_value_is_left_as_it_was() {
        let mut o = annotated("Deployment");
        o.data["spec"] = json!({"replicas": 3});
        let before = serde_json::to_value(&o).expect("serializes");
        let seen = with_value(&mut o, Value::clone);
        assert_eq!(seen, before);
        assert_eq!(serde_json::to_value(&o).expect("serializes"), before);
    }

    fn claim(storage: &str) -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {"name": "mysql-pv-claim"},
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": storage}}},
        }))
        .expect("claim")
    }

    fn request(o: &DynamicObject) -> &str {
        o.data
            .pointer("/spec/resources/requests/storage")
            .and_then(Value::as_str)
            .unwrap_or("")
    }

    #[test]
    fn a_grown_volume_keeps_its_size_and_a_smaller_one_gets_ours() {
        let live = |s: &str| serde_json::to_value(claim(s)).expect("value");
        let mut desired = claim("20Gi");
        keep_grown_volume(&mut desired, &live("50Gi"));
        assert_eq!(request(&desired), "50Gi");
        let mut desired = claim("20Gi");
        keep_grown_volume(&mut desired, &live("20480Mi"));
        assert_eq!(
            request(&desired),
            "20Gi",
            "the same size, written otherwise"
        );
        let mut desired = claim("20Gi");
        keep_grown_volume(&mut desired, &live("10Gi"));
        assert_eq!(request(&desired), "20Gi");
        let mut desired = claim("20Gi");
        keep_grown_volume(&mut desired, &json!({"spec": {}}));
        assert_eq!(request(&desired), "20Gi");
        // Only claims: another kind's requests are ours to set.
        let mut pod: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "q"},
            "spec": {"resources": {"requests": {"storage": "1Gi"}}},
        }))
        .expect("object");
        keep_grown_volume(&mut pod, &live("50Gi"));
        assert_eq!(request(&pod), "1Gi");
    }

    #[test]
    fn an_aggregation_label_someone_added_is_foreign_and_ours_is_not() {
        let role = |labels: Value| -> DynamicObject {
            serde_json::from_value(json!({
                "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                "metadata": {"name": "training-operator", "labels": labels},
            }))
            .expect("role")
        };
        let desired =
            role(json!({"app": "x", "rbac.authorization.k8s.io/aggregate-to-edit": "true"}));
        let live = role(json!({
            "app": "x", "team": "ml",
            "rbac.authorization.k8s.io/aggregate-to-edit": "true",
            "rbac.authorization.k8s.io/aggregate-to-view": "true",
        }));
        assert_eq!(
            foreign_meaning_labels(&desired, &live),
            vec!["rbac.authorization.k8s.io/aggregate-to-view".to_string()],
            "another label (team) stays theirs; our own aggregation label is ours"
        );
        assert!(foreign_meaning_labels(&desired, &desired).is_empty());
    }

    #[test]
    fn the_opt_out_never_covers_what_guards_privilege() {
        assert!(skip_reconcile(&annotated("ConfigMap")));
        assert!(skip_reconcile(&annotated("Deployment")));
        for k in [
            "ClusterRole",
            "RoleBinding",
            "ValidatingWebhookConfiguration",
            "CustomResourceDefinition",
        ] {
            assert!(
                !skip_reconcile(&annotated(k)),
                "{k} is repaired whatever it says"
            );
        }
    }
}
