//! Removals inside values a field manager owns whole. Server-side apply
//! records an atomic list or map as the field alone (`f:profiles: {}`), so
//! `diff::unwanted` cannot see a field of an entry the desired state no
//! longer has, and `diff::difference` compares only what the desired state
//! sets: a contributor taken off a profile stayed in the child resource.
//!
//! For the project's own kinds (the component resources the meta-operator
//! writes) a field inside such a value that the desired state lacks is a
//! removal to carry out: their schemas default nothing inside a list or an
//! atomic map (a test checks the CRDs), so the field was set by an earlier
//! apply or by hand. Other kinds keep the lenient comparison: the API server
//! defaults fields inside some of their atomic lists (a webhook rule's
//! `scope`, a NetworkPolicy port's `protocol`), which would otherwise read
//! as a change on every pass.

use serde_json::{Map, Value};

/// API groups of the project's own kinds.
pub const OWN_GROUPS: &[&str] = &["components.kubeflow.org", "platform.kubeflow.org"];

/// Whether the object is of one of the project's own kinds.
pub fn applies_to(desired: &Value) -> bool {
    desired
        .get("apiVersion")
        .and_then(Value::as_str)
        .and_then(|v| v.split_once('/'))
        .is_some_and(|(group, _)| OWN_GROUPS.contains(&group))
}

/// How a field manager owns a value.
#[derive(Clone, Copy)]
enum Owned<'a> {
    /// Field by field: these are the owned entries at this point.
    Granular(&'a Map<String, Value>),
    /// As a whole (inside an atomic list or map).
    Whole,
}

/// The first path inside a value `fields` (the manager's `fieldsV1`) owns
/// whole where `live` holds a field or an entry `desired` does not.
pub fn extra(desired: &Value, live: &Value, fields: &Value) -> Option<String> {
    let Value::Object(f) = fields else {
        return None;
    };
    walk(desired, live, Owned::Granular(f), String::new())
}

/// How the field under `entry` (an `f:` or `k:` key) is owned, when it is.
fn owned_at<'a>(f: &'a Map<String, Value>, entry: &str, desired: &Value) -> Option<Owned<'a>> {
    let Some(Value::Object(sub)) = f.get(entry) else {
        return None;
    };
    // An owned composite with nothing recorded inside: owned whole.
    let composite = matches!(desired, Value::Object(_) | Value::Array(_));
    Some(if sub.is_empty() && composite {
        Owned::Whole
    } else {
        Owned::Granular(sub)
    })
}

fn walk(desired: &Value, live: &Value, owned: Owned<'_>, path: String) -> Option<String> {
    match (desired, live, owned) {
        (Value::Object(d), Value::Object(l), Owned::Whole) => {
            if let Some(k) = l.keys().find(|k| !l[*k].is_null() && !d.contains_key(*k)) {
                return Some(format!("{path}.{k}"));
            }
            d.iter()
                .find_map(|(k, dv)| walk(dv, l.get(k)?, Owned::Whole, format!("{path}.{k}")))
        }
        (Value::Object(d), Value::Object(l), Owned::Granular(f)) => d.iter().find_map(|(k, dv)| {
            let owned = owned_at(f, &format!("f:{k}"), dv)?;
            walk(dv, l.get(k)?, owned, format!("{path}.{k}"))
        }),
        (Value::Array(d), Value::Array(l), Owned::Whole) => {
            if d.len() != l.len() {
                return Some(path);
            }
            d.iter()
                .zip(l)
                .enumerate()
                .find_map(|(i, (a, b))| walk(a, b, Owned::Whole, format!("{path}[{i}]")))
        }
        // A list merged by key: each desired entry against the live one of
        // its key (another manager's entries are theirs).
        (Value::Array(d), Value::Array(l), Owned::Granular(f)) => {
            f.keys().filter(|k| k.starts_with("k:")).find_map(|entry| {
                let key: Map<String, Value> = serde_json::from_str(&entry[2..]).ok()?;
                let matches = |item: &&Value| {
                    key.iter()
                        .all(|(k, v)| item.get(k).is_none_or(|x| x.is_null() || x == v))
                };
                let dv = d.iter().find(matches)?;
                let lv = l.iter().find(matches)?;
                let owned = owned_at(f, entry, dv)?;
                walk(dv, lv, owned, format!("{path}[{}]", &entry[2..]))
            })
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_field_gone_from_an_entry_of_an_atomic_list_is_found() {
        let fields = json!({"f:spec": {"f:profiles": {}, "f:version": {}}});
        let desired = json!({"apiVersion": "components.kubeflow.org/v1alpha1",
            "spec": {"version": "v1", "profiles": [{"name": "team-a"}]}});
        let live = json!({"apiVersion": "components.kubeflow.org/v1alpha1",
            "spec": {"version": "v1", "profiles": [{"name": "team-a",
                "contributors": [{"user": "a@example.com", "role": "edit"}]}]}});
        assert!(applies_to(&desired));
        assert_eq!(
            extra(&desired, &live, &fields).as_deref(),
            Some(".spec.profiles[0].contributors")
        );
        assert_eq!(extra(&desired, &desired, &fields), None);
        // Inside a nested atomic list too.
        let fewer = json!({"spec": {"profiles": [{"name": "team-a",
            "contributors": [{"user": "a@example.com"}]}]}});
        assert_eq!(
            extra(&fewer, &live, &fields).as_deref(),
            Some(".spec.profiles[0].contributors[0].role")
        );
    }

    #[test]
    fn keyed_lists_and_other_kinds() {
        let fields = json!({"f:spec": {"f:plugins": {"k:{\"name\":\"a\"}": {
            "f:name": {}, "f:args": {}}}}});
        let desired = json!({"spec": {"plugins": [{"name": "a", "args": ["x"]}]}});
        let live = json!({"spec": {"plugins": [
            {"name": "a", "args": ["x", "y"]}, {"name": "b", "extra": 1}]}});
        assert_eq!(
            extra(&desired, &live, &fields).as_deref(),
            Some(".spec.plugins[{\"name\":\"a\"}].args")
        );
        // Another manager's field beside ours in a granular map is theirs.
        let fields = json!({"f:spec": {"f:images": {"f:a": {}}}});
        let desired = json!({"spec": {"images": {"a": "x"}}});
        let live = json!({"spec": {"images": {"a": "x", "b": "y"}}});
        assert_eq!(extra(&desired, &live, &fields), None);
        assert!(!applies_to(
            &json!({"apiVersion": "admissionregistration.k8s.io/v1"})
        ));
    }
}
