//! A field removed from a component's entry in the `Kubeflow` resource is
//! gone from its child after one reconcile: the child's spec no longer has
//! it, and the write decision writes (server-side apply then drops what the
//! meta-operator owned and no longer sends). Checked over every component
//! spec type, for every field at every depth of a spec filled from the CRD
//! schema, inside lists and maps included; and a filled spec applied once
//! is not written again.

use kube::ResourceExt;
use kubeflow_api::{Kubeflow, Platform};
use kubeflow_operator::engine::apply::diff::write_reason;
use serde_json::{Map, Value, json};

use crate::children;
use crate::reconcile::NAME;

/// A value for every field the schema has (one entry per list and map).
fn filled(schema: &Value, seed: &str) -> Value {
    if let Some(first) = schema
        .get("enum")
        .and_then(Value::as_array)
        .and_then(|e| e.first())
    {
        return first.clone();
    }
    if schema.get("x-kubernetes-int-or-string") == Some(&json!(true)) {
        return json!("1");
    }
    match schema.get("type").and_then(Value::as_str) {
        Some("object") => {
            let mut m = Map::new();
            if let Some(props) = schema.get("properties").and_then(Value::as_object) {
                for (k, s) in props {
                    m.insert(k.clone(), filled(s, k));
                }
            } else if let Some(values) =
                schema.get("additionalProperties").filter(|a| a.is_object())
            {
                m.insert(format!("{seed}-key"), filled(values, seed));
            } else {
                m.insert("free".into(), json!("form"));
            }
            Value::Object(m)
        }
        Some("array") => json!([filled(&schema["items"], seed)]),
        Some("string") => json!(format!("{seed}1")),
        Some("integer") | Some("number") => json!(1),
        Some("boolean") => json!(true),
        _ => json!({"free": "form"}),
    }
}

/// The schema of field `key` of an object of `schema`.
fn field_schema<'a>(schema: &'a Value, key: &str) -> &'a Value {
    schema
        .get("properties")
        .and_then(|p| p.get(key))
        .or_else(|| schema.get("additionalProperties").filter(|a| a.is_object()))
        .unwrap_or(&Value::Null)
}

/// `fieldsV1` as server-side apply records an apply of `value` (lists by
/// their list type: keyed, set, or atomic as a whole).
fn fields_of(value: &Value, schema: &Value) -> Value {
    match value {
        Value::Object(m) if schema.get("x-kubernetes-map-type") != Some(&json!("atomic")) => {
            Value::Object(
                m.iter()
                    .map(|(k, v)| (format!("f:{k}"), fields_of(v, field_schema(schema, k))))
                    .collect(),
            )
        }
        Value::Array(items) => {
            let item_schema = &schema["items"];
            match schema.get("x-kubernetes-list-type").and_then(Value::as_str) {
                Some("map") => {
                    let keys: Vec<String> = schema["x-kubernetes-list-map-keys"]
                        .as_array()
                        .map(|k| {
                            k.iter()
                                .filter_map(|k| k.as_str().map(String::from))
                                .collect()
                        })
                        .unwrap_or_default();
                    Value::Object(
                        items
                            .iter()
                            .map(|item| {
                                let key: Map<String, Value> = keys
                                    .iter()
                                    .filter_map(|k| Some((k.clone(), item.get(k)?.clone())))
                                    .collect();
                                let mut f = fields_of(item, item_schema);
                                f["."] = json!({});
                                (format!("k:{}", Value::Object(key)), f)
                            })
                            .collect(),
                    )
                }
                Some("set") => Value::Object(
                    items
                        .iter()
                        .map(|item| (format!("v:{item}"), json!({})))
                        .collect(),
                ),
                _ => json!({}),
            }
        }
        _ => json!({}),
    }
}

/// Every path to a field of `value`, at every depth (list entries by index).
fn paths(value: &Value, here: &mut Vec<Step>, out: &mut Vec<Vec<Step>>) {
    match value {
        Value::Object(m) => {
            for (k, v) in m {
                here.push(Step::Key(k.clone()));
                out.push(here.clone());
                paths(v, here, out);
                here.pop();
            }
        }
        Value::Array(items) => {
            for (i, v) in items.iter().enumerate() {
                here.push(Step::Index(i));
                paths(v, here, out);
                here.pop();
            }
        }
        _ => {}
    }
}

#[derive(Clone, Debug)]
enum Step {
    Key(String),
    Index(usize),
}

/// The schema of the field at `path`.
fn schema_at<'a>(schema: &'a Value, path: &[Step]) -> &'a Value {
    path.iter().fold(schema, |s, step| match step {
        Step::Key(k) => field_schema(s, k),
        Step::Index(_) => &s["items"],
    })
}

/// Whether the schema requires the field at `path` (the API server
/// refuses a parent without it, so it is never removed alone).
fn required(schema: &Value, path: &[Step]) -> bool {
    let Some((Step::Key(last), parent)) = path.split_last() else {
        return false;
    };
    schema_at(schema, parent)
        .get("required")
        .and_then(Value::as_array)
        .is_some_and(|r| r.iter().any(|k| k == last.as_str()))
}

fn get<'a>(value: &'a Value, path: &[Step]) -> Option<&'a Value> {
    path.iter().try_fold(value, |v, s| match s {
        Step::Key(k) => v.get(k),
        Step::Index(i) => v.get(i),
    })
}

/// `value` without the field at `path` (its last step is a key).
fn without(value: &Value, path: &[Step]) -> Value {
    let mut out = value.clone();
    if let Some((Step::Key(last), parent)) = path.split_last() {
        let mut at = &mut out;
        for s in parent {
            at = match s {
                Step::Key(k) => &mut at[k.as_str()],
                Step::Index(i) => &mut at[*i],
            };
        }
        if let Some(m) = at.as_object_mut() {
            m.remove(last);
        }
    }
    out
}

/// The spec schema of the CRD of `kind`.
fn spec_schema(crds: &[Value], kind: &str) -> Value {
    crds.iter()
        .find(|c| c["spec"]["names"]["kind"] == kind)
        .map(|c| {
            c["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"].clone()
        })
        .unwrap_or_else(|| panic!("no CRD of {kind}"))
}

/// The Kubeflow entry name of a component (`certManager`).
fn entry_name(component: crate::component_kind::ComponentKind) -> String {
    let mut out = String::new();
    let mut upper = false;
    for c in component.name().chars() {
        if c == '-' {
            upper = true;
        } else if upper {
            out.extend(c.to_uppercase());
            upper = false;
        } else {
            out.push(c);
        }
    }
    out
}

/// Fields the `Kubeflow` resource decides itself (see `children::stated`):
/// removed from the entry, they take the resource's value, not none; an
/// entry's `approvedPlan` never reaches the child (approval is the
/// resource's).
const FILLED_IN: &[&str] = &[
    "approvedPlan",
    "version",
    "platform",
    "imageRegistry",
    "imageDigests",
    "upgradeStrategy",
    "oauth2Proxy",
];

fn kubeflow(entry: &str, spec: &Value) -> Option<Kubeflow> {
    serde_json::from_value(json!({
        "apiVersion": "platform.kubeflow.org/v1alpha1", "kind": "Kubeflow",
        "metadata": {"name": "kf", "namespace": "kubeflow"},
        "spec": {"version": "26.03.1", "components": {
            entry: {"managementState": "Managed", "spec": spec}}},
    }))
    .ok()
}

/// The child resource of `component` as the meta-operator applies it.
fn child(kf: &Kubeflow, component: crate::component_kind::ComponentKind) -> Value {
    let release = crate::release::find(&kf.spec.version).expect("release");
    let c = children::desired(kf, release, Platform::Kubernetes)
        .into_iter()
        .find(|c| c.component == component)
        .expect("child");
    let ar = component.api_resource();
    json!({"apiVersion": ar.api_version, "kind": ar.kind,
        "metadata": {"name": kf.name_any(), "namespace": "kubeflow"}, "spec": c.spec.to_value()})
}

#[test]
fn a_field_removed_in_the_parent_is_gone_from_the_child_after_one_reconcile() {
    let crds: Vec<Value> = kubeflow_api::crds::all()
        .into_iter()
        .map(|(_, crd)| serde_json::to_value(crd).expect("crd"))
        .collect();
    let mut checked = 0;
    for component in crate::component_kind::ComponentKind::ORDER {
        let kind = component.api_resource().kind;
        let schema = spec_schema(&crds, &kind);
        let entry = entry_name(component);
        let full = filled(&schema, "spec");
        let kf = kubeflow(&entry, &full)
            .unwrap_or_else(|| panic!("{entry}: a filled spec does not deserialize: {full}"));
        let applied = child(&kf, component);
        let mut live = applied.clone();
        live["metadata"]["managedFields"] = json!([{
            "manager": NAME, "operation": "Apply",
            "fieldsV1": {"f:spec": fields_of(&applied["spec"], &schema)},
        }]);
        // Applied once, nothing to write: no write at rest.
        assert_eq!(write_reason(&applied, &live, NAME), None, "{kind}");
        let mut all = Vec::new();
        paths(&full, &mut Vec::new(), &mut all);
        for path in all {
            let top_level_filled =
                matches!(&path[..], [Step::Key(k)] if FILLED_IN.contains(&k.as_str()));
            if top_level_filled || required(&schema, &path) {
                continue;
            }
            let parent = without(&full, &path);
            // A required field: the API server refuses its removal.
            let Some(kf) = kubeflow(&entry, &parent) else {
                continue;
            };
            let desired = child(&kf, component);
            // Gone, or the schema's default (which means the same).
            let left = get(&desired["spec"], &path);
            assert!(
                left.is_none() || left == schema_at(&schema, &path).get("default"),
                "{kind}: {path:?} removed in the parent is still in the child: {left:?}"
            );
            // (A default equal to the value it had changes nothing.)
            assert!(
                desired == applied || write_reason(&desired, &live, NAME).is_some(),
                "{kind}: {path:?} removed in the parent: the child is not written"
            );
            checked += 1;
        }
    }
    assert!(checked > 200, "only {checked} removals checked");
}

/// Nothing the project's own CRDs default sits inside a list or an atomic
/// map: the write decision counts every field there that the desired state
/// lacks as a removal (see `apply::atomic`), so a default there would be
/// written on every pass.
#[test]
fn no_default_inside_a_list_of_the_projects_kinds() {
    fn walk(schema: &Value, inside: bool, at: &str, out: &mut Vec<String>) {
        let Value::Object(m) = schema else { return };
        if inside && m.contains_key("default") {
            out.push(at.to_string());
        }
        let atomic_map = m.get("x-kubernetes-map-type") == Some(&json!("atomic"));
        for (k, v) in m {
            let into_list = k == "items";
            walk(
                v,
                inside || into_list || atomic_map,
                &format!("{at}.{k}"),
                out,
            );
        }
    }
    let mut found = Vec::new();
    for (file, crd) in kubeflow_api::crds::all() {
        let v = serde_json::to_value(crd).expect("crd");
        walk(&v["spec"]["versions"], false, file, &mut found);
    }
    assert!(found.is_empty(), "defaults inside lists: {found:?}");
}
