//! Objects whose meaning is their whole content: for these, a field another
//! field manager added that the bundle does not set is drift, and removed.
//! Server-side apply alone leaves another manager's fields in place, which
//! is right for an annotation or an autoscaler's replicas, and wrong where
//! an added field widens what the object permits: a webhook entry that
//! sends every Secret to an outside URL, a rule added to a role, a subject
//! added to a binding, a peer added to a NetworkPolicy, a sidecar or a host
//! volume added to a controller's pod template.
//!
//! The kinds and the parts of them enforced whole:
//! - Roles, ClusterRoles and their bindings: `rules`, `aggregationRule`,
//!   `roleRef`, `subjects` (an aggregated role's `rules` are the
//!   aggregation controller's, a Kubernetes manager, and left out);
//! - webhook configurations and admission policies: `webhooks`, `spec`,
//!   except a `caBundle` (a CA injector's);
//! - Istio's AuthorizationPolicy, PeerAuthentication and
//!   RequestAuthentication, NetworkPolicies: `spec`;
//! - cert-manager's Issuers and ClusterIssuers: `spec` (an issuer whose
//!   `selfSigned` someone turned into a `ca` of their own signs every
//!   webhook certificate issued afterwards);
//! - PriorityClasses: `value`, `globalDefault`, `preemptionPolicy`;
//! - Deployments, StatefulSets, DaemonSets: the pod template's containers,
//!   init containers, volumes, ServiceAccount and host namespaces.
//!
//! Everything else keeps "other managers' fields stay theirs"
//! (`status.foreignFields` lists them).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry;
use serde::Deserialize;
use serde_json::{Map, Value};

use crate::render::foreign_fields::keep_foreign;

/// The enforced parts of each kind (group-less kind name), as paths of
/// field names from the object's root.
const WHOLE: &[(&str, &[&[&str]])] = &[
    ("Role", &[&["rules"]]),
    ("ClusterRole", &[&["rules"], &["aggregationRule"]]),
    ("RoleBinding", &[&["roleRef"], &["subjects"]]),
    ("ClusterRoleBinding", &[&["roleRef"], &["subjects"]]),
    ("ValidatingWebhookConfiguration", &[&["webhooks"]]),
    ("MutatingWebhookConfiguration", &[&["webhooks"]]),
    ("ValidatingAdmissionPolicy", &[&["spec"]]),
    ("ValidatingAdmissionPolicyBinding", &[&["spec"]]),
    ("AuthorizationPolicy", &[&["spec"]]),
    ("PeerAuthentication", &[&["spec"]]),
    ("RequestAuthentication", &[&["spec"]]),
    ("NetworkPolicy", &[&["spec"]]),
    ("Issuer", &[&["spec"]]),
    ("ClusterIssuer", &[&["spec"]]),
    (
        "PriorityClass",
        &[&["value"], &["globalDefault"], &["preemptionPolicy"]],
    ),
    ("Deployment", POD_TEMPLATE),
    ("StatefulSet", POD_TEMPLATE),
    ("DaemonSet", POD_TEMPLATE),
];

const POD_TEMPLATE: &[&[&str]] = &[
    &["spec", "template", "spec", "containers"],
    &["spec", "template", "spec", "initContainers"],
    &["spec", "template", "spec", "volumes"],
    &["spec", "template", "spec", "serviceAccountName"],
    &["spec", "template", "spec", "serviceAccount"],
    &["spec", "template", "spec", "hostNetwork"],
    &["spec", "template", "spec", "hostPID"],
    &["spec", "template", "spec", "hostIPC"],
];

/// JSON pointers of the fields of `live` (read whole, `managedFields`
/// included) that another manager than `own` added in an enforced part and
/// that `desired` does not set, outermost first within a list's items in
/// descending order, so the removals apply in the order given.
pub fn removals(live: &Value, desired: &Value, own: &str) -> Vec<String> {
    let kind = live.get("kind").and_then(Value::as_str).unwrap_or_default();
    let Some((_, parts)) = WHOLE.iter().find(|(k, _)| *k == kind) else {
        return Vec::new();
    };
    let entries = live
        .pointer("/metadata/managedFields")
        // Read in place: a Value deserializes by reference, no copy.
        .and_then(|m| Vec::<ManagedFieldsEntry>::deserialize(m).ok())
        .unwrap_or_default();
    let Some(foreign) = keep_foreign(entries, own) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for entry in foreign {
        let Some(set) = entry.fields_v1.as_ref().map(|f| &f.0) else {
            continue;
        };
        for part in *parts {
            // An aggregated role's rules are whoever aggregates them.
            if kind == "ClusterRole" && *part == ["rules"] && live.get("aggregationRule").is_some()
            {
                continue;
            }
            // Walk the entry's field set down the part's path.
            let mut node = Some(set);
            for name in *part {
                node = node.and_then(|n| n.get(format!("f:{name}")));
            }
            let Some(node) = node else { continue };
            let pointer: String = part.iter().map(|p| format!("/{}", escape(p))).collect();
            let (Some(l), d) = (live.pointer(&pointer), desired.pointer(&pointer)) else {
                continue;
            };
            match d {
                // The bundle does not set the part at all: all of it goes.
                None => out.push(pointer),
                Some(d) => walk(node, l, d, &pointer, &mut out),
            }
        }
    }
    out.sort_by_key(|p| std::cmp::Reverse(order(p)));
    out.dedup();
    // A removal inside one already removed is moot (and would fail).
    let all = out.clone();
    out.retain(|p| {
        !all.iter()
            .any(|q| q != p && p.starts_with(q.as_str()) && p[q.len()..].starts_with('/'))
    });
    out
}

/// Compares pointers with numeric segments as numbers, so a list's higher
/// items come first when sorted descending.
fn order(pointer: &str) -> Vec<(u8, u64, String)> {
    pointer
        .split('/')
        .map(|s| match s.parse::<u64>() {
            Ok(n) => (1, n, String::new()),
            Err(_) => (0, 0, s.to_string()),
        })
        .collect()
}

/// Fields under `set` (a `fieldsV1` node) present in `live` and absent
/// from `desired`, as pointers under `at`.
fn walk(set: &Value, live: &Value, desired: &Value, at: &str, out: &mut Vec<String>) {
    let Some(map) = set.as_object() else {
        return;
    };
    for (key, child) in map {
        if key == "." {
            continue;
        }
        if let Some(field) = key.strip_prefix("f:") {
            // A CA injector's field, wherever it is.
            if field == "caBundle" {
                continue;
            }
            let (Some(l), d) = (live.get(field), desired.get(field)) else {
                continue;
            };
            let here = format!("{at}/{}", escape(field));
            match d {
                None => out.push(here),
                Some(d) => walk(child, l, d, &here, out),
            }
        } else if let Some(keys) = key.strip_prefix("k:") {
            let Ok(keys) = serde_json::from_str::<Map<String, Value>>(keys) else {
                continue;
            };
            let (Some(items), desired_items) = (live.as_array(), desired.as_array()) else {
                continue;
            };
            let matches = |item: &Value| keys.iter().all(|(k, v)| item.get(k) == Some(v));
            let Some(index) = items.iter().position(matches) else {
                continue;
            };
            let here = format!("{at}/{index}");
            match desired_items.and_then(|d| d.iter().find(|i| matches(i))) {
                None => out.push(here),
                Some(d) => walk(child, &items[index], d, &here, out),
            }
        } else if let Some(value) = key.strip_prefix("v:") {
            let Ok(value) = serde_json::from_str::<Value>(value) else {
                continue;
            };
            let Some(items) = live.as_array() else {
                continue;
            };
            let wanted = desired.as_array().is_some_and(|d| d.contains(&value));
            if let Some(index) = items.iter().position(|i| *i == value)
                && !wanted
            {
                out.push(format!("{at}/{index}"));
            }
        }
        // `i:<n>` (an atomic list's item by index): the whole list is one
        // field of the manager that last wrote it, handled above.
    }
}

/// A JSON pointer segment: `~` and `/` escaped.
fn escape(s: &str) -> String {
    s.replace('~', "~0").replace('/', "~1")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const OWN: &str = "kubeflow-training-operator";

    fn webhook(name: &str, url: Option<&str>) -> Value {
        let mut cc =
            json!({"service": {"name": "svc", "namespace": "kubeflow"}, "caBundle": "Q0E="});
        if let Some(u) = url {
            cc = json!({"url": u});
        }
        json!({"name": name, "clientConfig": cc, "rules": [{"operations": ["CREATE"]}]})
    }

    #[test]
    fn a_webhook_entry_someone_added_is_removed_a_ca_bundle_is_not() {
        let desired = json!({"kind": "ValidatingWebhookConfiguration",
            "webhooks": [webhook("a.kubeflow.org", None)]});
        let live = json!({"kind": "ValidatingWebhookConfiguration",
            "metadata": {"managedFields": [
                {"manager": OWN, "operation": "Apply", "fieldsV1": {"f:webhooks": {"k:{\"name\":\"a.kubeflow.org\"}": {".": {}, "f:name": {}}}}},
                {"manager": "cainjector", "operation": "Update", "fieldsV1": {"f:webhooks": {"k:{\"name\":\"a.kubeflow.org\"}": {"f:clientConfig": {"f:caBundle": {}}}}}},
                {"manager": "kubectl-edit", "operation": "Update", "fieldsV1": {"f:webhooks": {"k:{\"name\":\"steal.example.com\"}": {".": {}, "f:name": {}, "f:clientConfig": {"f:url": {}}}}}}
            ]},
            "webhooks": [webhook("a.kubeflow.org", None), webhook("steal.example.com", Some("https://example.com"))]});
        assert_eq!(
            removals(&live, &desired, OWN),
            vec!["/webhooks/1".to_string()]
        );
    }

    #[test]
    fn an_added_container_and_host_volume_go_an_added_env_value_under_ours_too() {
        let desired = json!({"kind": "Deployment", "spec": {"template": {"spec": {
            "containers": [{"name": "manager", "image": "x"}]}}}});
        let live = json!({"kind": "Deployment",
            "metadata": {"managedFields": [
                {"manager": "kubectl-patch", "operation": "Update", "fieldsV1": {"f:spec": {"f:template": {"f:spec": {
                    "f:containers": {"k:{\"name\":\"miner\"}": {".": {}, "f:name": {}},
                                     "k:{\"name\":\"manager\"}": {"f:env": {}}},
                    "f:volumes": {".": {}, "k:{\"name\":\"host\"}": {".": {}}}}}}}}
            ]},
            "spec": {"template": {"spec": {
                "containers": [{"name": "manager", "image": "x", "env": [{"name": "A"}]}, {"name": "miner", "image": "y"}],
                "volumes": [{"name": "host", "hostPath": {"path": "/"}}]}}}});
        assert_eq!(
            removals(&live, &desired, OWN),
            vec![
                "/spec/template/spec/volumes".to_string(),
                "/spec/template/spec/containers/1".to_string(),
                "/spec/template/spec/containers/0/env".to_string(),
            ]
        );
    }

    #[test]
    fn other_kinds_and_other_parts_keep_other_managers_fields() {
        let fields =
            json!({"f:spec": {"f:replicas": {}}, "f:metadata": {"f:annotations": {"f:team": {}}}});
        let live = json!({"kind": "Deployment",
            "metadata": {"annotations": {"team": "ml"}, "managedFields": [{"manager": "kubectl-edit", "operation": "Update", "fieldsV1": fields}]},
            "spec": {"replicas": 3}});
        assert!(removals(&live, &json!({"kind": "Deployment"}), OWN).is_empty());
        let cm = json!({"kind": "ConfigMap", "metadata": {"managedFields": [{"manager": "kubectl-edit", "fieldsV1": {"f:data": {"f:x": {}}}}]}, "data": {"x": "1"}});
        assert!(removals(&cm, &json!({"kind": "ConfigMap"}), OWN).is_empty());
    }

    #[test]
    fn a_subject_added_to_a_binding_and_rules_to_a_role_go() {
        let desired = json!({"kind": "ClusterRoleBinding", "subjects": [{"kind": "ServiceAccount", "name": "ctl", "namespace": "kubeflow"}]});
        let live = json!({"kind": "ClusterRoleBinding",
            "metadata": {"managedFields": [{"manager": "kubectl-edit", "operation": "Update", "fieldsV1": {"f:subjects": {}}}]},
            "subjects": [{"kind": "ServiceAccount", "name": "ctl", "namespace": "kubeflow"}, {"kind": "User", "name": "mallory"}]});
        // `subjects` is an atomic list: its last writer owns all of it, and
        // server-side apply puts ours back; the walk has nothing to remove
        // below it, and the bundle sets the list, so it is not removed whole.
        assert!(removals(&live, &desired, OWN).is_empty());
        let role = json!({"kind": "ClusterRole",
            "metadata": {"managedFields": [{"manager": "kubectl-edit", "operation": "Update", "fieldsV1": {"f:aggregationRule": {}}}]},
            "aggregationRule": {"clusterRoleSelectors": [{"matchLabels": {"kubernetes.io/bootstrapping": "rbac-defaults"}}]}});
        assert_eq!(
            removals(&role, &json!({"kind": "ClusterRole", "rules": []}), OWN),
            vec!["/aggregationRule".to_string()]
        );
        // An aggregated role's rules, which the manifests leave out, are
        // the aggregator's, whatever its manager is called.
        let aggregated = json!({"kind": "ClusterRole",
            "metadata": {"managedFields": [{"manager": "some-aggregator", "operation": "Apply", "fieldsV1": {"f:rules": {}}}]},
            "aggregationRule": {"clusterRoleSelectors": [{"matchLabels": {"x": "true"}}]},
            "rules": [{"verbs": ["get"]}]});
        let wanted = json!({"kind": "ClusterRole", "aggregationRule": {"clusterRoleSelectors": [{"matchLabels": {"x": "true"}}]}});
        assert!(removals(&aggregated, &wanted, OWN).is_empty());
    }

    #[test]
    fn an_issuer_turned_into_someone_elses_ca_is_turned_back() {
        let desired = json!({"kind": "ClusterIssuer", "spec": {"selfSigned": {}}});
        let live = json!({"kind": "ClusterIssuer",
            "metadata": {"managedFields": [
                {"manager": OWN, "operation": "Apply", "fieldsV1": {"f:spec": {"f:selfSigned": {}}}},
                {"manager": "kubectl-patch", "operation": "Update", "fieldsV1": {"f:spec": {"f:ca": {".": {}, "f:secretName": {}}}}}
            ]},
            "spec": {"selfSigned": {}, "ca": {"secretName": "mallory-ca"}}});
        assert_eq!(removals(&live, &desired, OWN), vec!["/spec/ca".to_string()]);
        let issuer = json!({"kind": "Issuer",
            "metadata": {"managedFields": [
                {"manager": "kubectl-patch", "operation": "Update", "fieldsV1": {"f:spec": {"f:ca": {".": {}, "f:secretName": {}}}}}
            ]},
            "spec": {"ca": {"secretName": "mallory-ca"}}});
        assert_eq!(
            removals(
                &issuer,
                &json!({"kind": "Issuer", "spec": {"selfSigned": {}}}),
                OWN
            ),
            vec!["/spec/ca".to_string()]
        );
    }
}
