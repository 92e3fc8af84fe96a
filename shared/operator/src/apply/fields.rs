//! Fields of a desired object the engine leaves to others, and the opt-out
//! annotation (never honoured on what guards privilege).

use kube::api::DynamicObject;
use serde_json::Value;

use crate::kinds::kind;
use crate::labels;

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

pub(super) fn to_value(obj: &DynamicObject) -> Value {
    serde_json::to_value(obj).unwrap_or(Value::Null)
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
