//! The write decision: whether an object must be applied, decided from what
//! the operator's field manager owns (the live object's `managedFields`) and
//! what the live object holds, never from a write.
//!
//! An object is written when
//! - the field manager owns a field the desired state no longer has (so a
//!   field removed from a CR leaves the object: server-side apply removes
//!   owned fields an apply omits), or
//! - a field the desired state sets is missing or holds another value,
//!   compared the way the API server stores it: quantities by value
//!   (`2048Mi` is `2Gi`), an empty string or `false` like an absent field
//!   (Go's `omitempty`: a CRD's `preserveUnknownFields: false` is never
//!   stored), list entries by the keys the server merges them by.
//!
//! List keys come from `managedFields` itself (`k:{"name":"x"}` entries), so
//! no schema is needed: a list we own and the server merges by key is
//! compared by key, and another manager's extra entries in it are theirs.

use base64::Engine as _;
use kube::api::DynamicObject;
use serde_json::{Map, Value};

use crate::base::kinds::kind;
use crate::base::quantity::quantity;

/// Why an object must be written, as a path into it, e.g.
/// `unwanted .spec.template.spec.tolerations` or `differs .spec.replicas`.
pub type Why = String;

/// Keys whose values are maps of free-form strings: an empty string there is
/// a value the server keeps, not an omitted field.
const STRING_MAPS: &[&str] = &[
    "data",
    "stringData",
    "binaryData",
    "labels",
    "annotations",
    "nodeSelector",
    "matchLabels",
    "selector",
];

/// Keys whose values are maps of resource quantities.
const QUANTITY_MAPS: &[&str] = &["limits", "requests", "capacity", "hard", "allocatable"];

/// Rewrites a desired object into the form the API server stores, where the
/// two differ in a way no comparison can see: a Secret's `stringData` is
/// write-only (the server merges it into `data` and never returns it), so it
/// is applied as `data`.
pub fn as_stored(obj: &mut DynamicObject) {
    if kind(obj) != "Secret" {
        return;
    }
    let Some(Value::Object(plain)) = obj
        .data
        .as_object_mut()
        .and_then(|m| m.remove("stringData"))
    else {
        return;
    };
    let data = obj.data["data"]
        .as_object_mut()
        .map(std::mem::take)
        .unwrap_or_default();
    let mut data = data;
    for (k, v) in plain {
        let text = v.as_str().unwrap_or_default();
        // stringData wins over data for the same key, as on the server.
        data.insert(
            k,
            Value::String(base64::engine::general_purpose::STANDARD.encode(text)),
        );
    }
    obj.data["data"] = Value::Object(data);
}

/// The fields `manager` owns by server-side apply, as the `fieldsV1` tree.
pub fn owned_fields<'a>(live: &'a Value, manager: &str) -> Option<&'a Value> {
    live.pointer("/metadata/managedFields")?
        .as_array()?
        .iter()
        .find(|e| {
            e.get("manager").and_then(Value::as_str) == Some(manager)
                && e.get("operation").and_then(Value::as_str) == Some("Apply")
                && e.get("subresource")
                    .and_then(Value::as_str)
                    .is_none_or(str::is_empty)
        })?
        .get("fieldsV1")
}

/// Whether `live` must be written to reach `desired`, and why.
pub fn write_reason(desired: &Value, live: &Value, manager: &str) -> Option<Why> {
    let owned = owned_fields(live, manager);
    if let Some(fields) = owned
        && let Some(path) = unwanted(fields, desired, String::new())
    {
        return Some(format!("unwanted {path}"));
    }
    if let Some(p) = difference(desired, live, owned, "", String::new()) {
        return Some(format!("differs {p}"));
    }
    // A field gone from inside a value we own whole (an atomic list's entry).
    owned
        .filter(|_| super::atomic::applies_to(desired))
        .and_then(|fields| super::atomic::extra(desired, live, fields))
        .map(|p| format!("unwanted {p}"))
}

/// The first owned field (a path) that `desired` no longer has.
pub fn unwanted(fields: &Value, desired: &Value, path: String) -> Option<String> {
    let Value::Object(children) = fields else {
        return None;
    };
    for (key, sub) in children {
        if key == "." {
            continue;
        }
        if let Some(name) = key.strip_prefix("f:") {
            let here = format!("{path}.{name}");
            match desired.get(name).filter(|v| !v.is_null()) {
                None => return Some(here),
                Some(d) => {
                    if let Some(p) = unwanted(sub, d, here) {
                        return Some(p);
                    }
                }
            }
        } else if let Some(k) = key.strip_prefix("k:") {
            let here = format!("{path}[{k}]");
            let Ok(Value::Object(wanted_key)) = serde_json::from_str::<Value>(k) else {
                continue;
            };
            match desired
                .as_array()
                .and_then(|items| items.iter().find(|i| matches_key(i, &wanted_key)))
            {
                None => return Some(here),
                Some(item) => {
                    if let Some(p) = unwanted(sub, item, here) {
                        return Some(p);
                    }
                }
            }
        } else if let Some(v) = key.strip_prefix("v:") {
            let Ok(value) = serde_json::from_str::<Value>(v) else {
                continue;
            };
            if !desired
                .as_array()
                .is_some_and(|items| items.iter().any(|i| same_scalar(i, &value)))
            {
                return Some(format!("{path}[{v}]"));
            }
        } else if let Some(i) = key.strip_prefix("i:") {
            let Ok(i) = i.parse::<usize>() else { continue };
            match desired.as_array().and_then(|items| items.get(i)) {
                None => return Some(format!("{path}[{i}]")),
                Some(item) => {
                    if let Some(p) = unwanted(sub, item, format!("{path}[{i}]")) {
                        return Some(p);
                    }
                }
            }
        }
    }
    None
}

/// Whether a list entry has the key an owned `k:` entry names. A key field
/// the entry leaves out matches (the server defaults it, e.g. a port's
/// `protocol`).
fn matches_key(item: &Value, key: &Map<String, Value>) -> bool {
    key.iter().all(|(k, v)| match item.get(k) {
        None | Some(Value::Null) => true,
        Some(x) => same_scalar(x, v),
    })
}

fn same_scalar(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
        _ => a == b,
    }
}

/// The first path where `live` does not hold what `desired` sets. `fields`
/// is what the field manager owns at this point (for list keys); `parent`
/// the key this value sits under.
pub fn difference(
    desired: &Value,
    live: &Value,
    fields: Option<&Value>,
    parent: &str,
    path: String,
) -> Option<String> {
    match (desired, live) {
        (Value::Object(d), Value::Object(l)) => {
            let string_map = STRING_MAPS.contains(&parent);
            for (k, v) in d {
                let sub = fields.and_then(|f| f.get(format!("f:{k}")));
                let here = format!("{path}.{k}");
                match l.get(k) {
                    Some(lv) if !lv.is_null() => {
                        if let Some(p) = difference(v, lv, sub, k, here) {
                            return Some(p);
                        }
                    }
                    _ if is_empty(v, string_map) => {}
                    _ => return Some(here),
                }
            }
            None
        }
        (Value::Array(d), Value::Array(l)) => list_difference(d, l, fields, path),
        _ if QUANTITY_MAPS.contains(&parent) || is_quantity_path(&path) => {
            (!same_quantity(desired, live)).then_some(path)
        }
        (Value::Number(a), Value::Number(b)) => (a.as_f64() != b.as_f64()).then_some(path),
        (d, l) => (d != l).then_some(path),
    }
}

/// A quantity under a quantity map: `.resources.limits.memory`, `.hard.cpu`.
fn is_quantity_path(path: &str) -> bool {
    let mut parts = path.rsplit('.');
    parts.next();
    parts.next().is_some_and(|p| QUANTITY_MAPS.contains(&p))
}

fn list_difference(
    d: &[Value],
    l: &[Value],
    fields: Option<&Value>,
    path: String,
) -> Option<String> {
    let keyed = fields.and_then(|f| f.as_object()).and_then(|m| {
        m.keys().find_map(|k| {
            let k = k.strip_prefix("k:")?;
            match serde_json::from_str::<Value>(k).ok()? {
                Value::Object(o) => Some(o.keys().cloned().collect::<Vec<_>>()),
                _ => None,
            }
        })
    });
    let set = fields
        .and_then(|f| f.as_object())
        .is_some_and(|m| m.keys().any(|k| k.starts_with("v:")));
    if let Some(key_names) = keyed {
        // Merged by key: each desired entry must be in the live list; entries
        // other managers added are theirs.
        for item in d {
            let key: Map<String, Value> = key_names
                .iter()
                .filter_map(|k| Some((k.clone(), item.get(k)?.clone())))
                .collect();
            let label = serde_json::to_string(&key).unwrap_or_default();
            let here = format!("{path}[{label}]");
            let Some(live_item) = l.iter().find(|x| matches_key(x, &key)) else {
                return Some(here);
            };
            let sub = fields.and_then(|f| f.get(format!("k:{label}")));
            if let Some(p) = difference(item, live_item, sub, "", here) {
                return Some(p);
            }
        }
        return None;
    }
    if set {
        return d
            .iter()
            .find(|v| !l.iter().any(|x| same_scalar(x, v)))
            .map(|v| format!("{path}[{v}]"));
    }
    // Atomic (or not ours yet): the whole list, in order.
    if d.len() != l.len() {
        return Some(path);
    }
    d.iter()
        .zip(l)
        .enumerate()
        .find_map(|(i, (a, b))| difference(a, b, None, "", format!("{path}[{i}]")))
}

/// Whether a desired value the live object lacks is one the server drops:
/// empty maps and lists, null, and (outside string maps) the empty string.
fn is_empty(v: &Value, in_string_map: bool) -> bool {
    match v {
        Value::Object(m) => m.values().all(|x| is_empty(x, false)),
        Value::Array(a) => a.is_empty(),
        Value::Null => true,
        Value::String(s) => s.is_empty() && !in_string_map,
        // A `*bool` the server keeps even when false: one it does not
        // return was an `omitempty` bool.
        Value::Bool(b) => !b,
        _ => false,
    }
}

fn same_quantity(a: &Value, b: &Value) -> bool {
    let text = |v: &Value| match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    };
    match (
        text(a).and_then(|s| quantity(&s)),
        text(b).and_then(|s| quantity(&s)),
    ) {
        (Some(x), Some(y)) => x == y,
        _ => a == b,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const ME: &str = "kubeflow-test-operator";

    fn live(body: Value, fields: Value) -> Value {
        let mut l = body;
        l["metadata"]["managedFields"] = json!([
            {"manager": "kube-controller-manager", "operation": "Update", "fieldsV1": {"f:status": {}}},
            {"manager": ME, "operation": "Apply", "fieldsV1": fields},
        ]);
        l
    }

    #[test]
    fn secrets_are_applied_as_the_server_stores_them() {
        let mut s: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"},
            "data": {"a": "eA=="}, "stringData": {"user": "kubeflow", "a": "y"},
        }))
        .expect("secret");
        as_stored(&mut s);
        assert_eq!(s.data.get("stringData"), None);
        assert_eq!(s.data["data"], json!({"a": "eQ==", "user": "a3ViZWZsb3c="}));
    }

    #[test]
    fn a_false_the_server_omits_is_no_difference() {
        let desired = json!({"spec": {"preserveUnknownFields": false, "scope": "Namespaced"}});
        let live = json!({"spec": {"scope": "Namespaced"}});
        assert_eq!(difference(&desired, &live, None, "", String::new()), None);
        let desired = json!({"spec": {"suspend": true}});
        assert_eq!(
            difference(&desired, &live, None, "", String::new()).as_deref(),
            Some(".spec.suspend")
        );
    }

    #[test]
    fn quantities_compare_by_value() {
        for (a, b) in [
            ("2048Mi", "2Gi"),
            ("2000m", "2"),
            ("0.5", "500m"),
            ("1e3", "1k"),
            ("1024", "1Ki"),
            ("100m", "0.1"),
        ] {
            assert_eq!(quantity(a), quantity(b), "{a} = {b}");
            assert!(quantity(a).is_some(), "{a}");
        }
        assert_ne!(quantity("1Gi"), quantity("1G"));
        assert_eq!(quantity("lots"), None);
        assert_eq!(quantity(""), None);
    }

    #[test]
    fn what_the_server_normalizes_is_no_difference() {
        let desired = json!({"spec": {"containers": [{"name": "c", "env": [{"name": "E", "value": ""}],
            "resources": {"limits": {"memory": "2048Mi", "cpu": "2000m"}}}]}});
        let stored = json!({"spec": {"containers": [{"name": "c", "env": [{"name": "E"}],
            "resources": {"limits": {"memory": "2Gi", "cpu": "2"}}}]}});
        assert_eq!(difference(&desired, &stored, None, "", String::new()), None);
        let edited = json!({"spec": {"containers": [{"name": "c", "env": [{"name": "E"}],
            "resources": {"limits": {"memory": "1Gi", "cpu": "2"}}}]}});
        assert_eq!(
            difference(&desired, &edited, None, "", String::new()).as_deref(),
            Some(".spec.containers[0].resources.limits.memory")
        );
        // An empty value in a string map is a value.
        let cm = json!({"data": {"k": ""}});
        assert!(difference(&cm, &json!({"data": {}}), None, "", String::new()).is_some());
    }

    #[test]
    fn a_field_we_own_and_no_longer_want_forces_a_write() {
        let fields =
            json!({"f:spec": {"f:replicas": {}, "f:template": {"f:spec": {"f:tolerations": {}}}}});
        let body =
            json!({"spec": {"replicas": 2, "template": {"spec": {"tolerations": [{"key": "a"}]}}}});
        let l = live(body, fields);
        let desired = json!({"spec": {"replicas": 2, "template": {"spec": {}}}});
        assert_eq!(
            write_reason(&desired, &l, ME).as_deref(),
            Some("unwanted .spec.template.spec.tolerations")
        );
        // Another manager's ownership of the same field does not count.
        assert!(write_reason(&desired, &l, "someone-else").is_none());
    }

    #[test]
    fn keyed_lists_compare_by_key_and_other_managers_entries_are_theirs() {
        let fields = json!({"f:spec": {"f:containers": {
            "k:{\"name\":\"app\"}": {".": {}, "f:name": {}, "f:image": {},
                "f:ports": {"k:{\"containerPort\":8080,\"protocol\":\"TCP\"}": {".": {}, "f:containerPort": {}}}}}}});
        let body = json!({"spec": {"containers": [
            {"name": "sidecar", "image": "proxy:1"},
            {"name": "app", "image": "app:1", "ports": [{"containerPort": 8080, "protocol": "TCP"}]},
        ]}});
        let l = live(body, fields);
        let desired = json!({"spec": {"containers": [{"name": "app", "image": "app:1", "ports": [{"containerPort": 8080}]}]}});
        assert_eq!(
            write_reason(&desired, &l, ME),
            None,
            "the sidecar is not ours"
        );
        let moved = json!({"spec": {"containers": [{"name": "app", "image": "app:1", "ports": [{"containerPort": 9090}]}]}});
        assert!(
            write_reason(&moved, &l, ME).is_some_and(|r| r.starts_with("unwanted")),
            "we own port 8080 and no longer want it"
        );
        let gone = json!({"spec": {"containers": []}});
        assert!(write_reason(&gone, &l, ME).is_some());
    }

    #[test]
    fn a_missing_or_changed_field_is_a_difference() {
        let fields = json!({"f:spec": {"f:replicas": {}}});
        let l = live(json!({"spec": {"replicas": 3}}), fields);
        assert_eq!(
            write_reason(&json!({"spec": {"replicas": 2}}), &l, ME).as_deref(),
            Some("differs .spec.replicas")
        );
        assert_eq!(
            write_reason(&json!({"spec": {"replicas": 3, "paused": true}}), &l, ME).as_deref(),
            Some("differs .spec.paused")
        );
        assert_eq!(
            write_reason(&json!({"spec": {"replicas": 3.0}}), &l, ME),
            None
        );
    }
}
