//! What other field managers own of the managed objects: hand edits and
//! other controllers, reported in a component's `status.foreignFields` so a
//! platform team sees what drifts from the bundle (and can turn a hand edit
//! into an override). The live index keeps, of each managed object's
//! `managedFields`, only these entries (`keep_foreign`): a few hundred bytes
//! where an object was edited, nothing elsewhere.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry;
use kubeflow_api::ForeignFields;
use serde_json::Value;

/// Managers whose fields are Kubernetes' own bookkeeping (a Deployment's
/// revision annotation, a claim's binding): never a drift worth reporting.
const KUBERNETES: &[&str] = &[
    "kube-controller-manager",
    "kube-scheduler",
    "kube-apiserver",
];

/// At most this many paths per entry, and entries per status.
const FIELDS_MAX: usize = 16;
pub const ENTRIES_MAX: usize = 64;

/// The entries of `managedFields` worth keeping: not `own` (the operator),
/// not a status write, not Kubernetes' bookkeeping.
pub fn keep_foreign(
    entries: Vec<ManagedFieldsEntry>,
    own: &str,
) -> Option<Vec<ManagedFieldsEntry>> {
    let kept: Vec<ManagedFieldsEntry> = entries
        .into_iter()
        .filter(|e| {
            let manager = e.manager.as_deref().unwrap_or_default();
            let subresource = e.subresource.as_deref();
            manager != own
                && subresource != Some("status")
                // An autoscaler writes replicas through scale as the
                // controller manager: that one is reported.
                && (!KUBERNETES.contains(&manager) || subresource == Some("scale"))
        })
        .collect();
    (!kept.is_empty()).then_some(kept)
}

/// The report of one object's kept entries (`object` as the plan names it).
pub fn report(object: &str, entries: &[ManagedFieldsEntry]) -> Vec<ForeignFields> {
    entries
        .iter()
        .filter_map(|e| {
            let mut fields = Vec::new();
            if let Some(f) = &e.fields_v1 {
                paths(&f.0, String::new(), &mut fields);
            }
            if fields.is_empty() {
                return None;
            }
            let manager = e.manager.clone().unwrap_or_default();
            let controller = known(&manager, e.subresource.as_deref(), &fields);
            let total = fields.len();
            if total > FIELDS_MAX {
                fields.truncate(FIELDS_MAX);
                fields.push(format!("... and {} more", total - FIELDS_MAX));
            }
            Some(ForeignFields {
                object: object.to_string(),
                manager,
                fields,
                controller,
            })
        })
        .collect()
}

/// Why a known controller owns these fields, when it is one.
fn known(manager: &str, subresource: Option<&str>, fields: &[String]) -> Option<String> {
    if subresource == Some("scale") {
        return Some("an autoscaler (replicas, through the scale subresource)".into());
    }
    if fields.iter().all(|f| f.ends_with(".caBundle")) {
        return Some("a CA injector (the webhook or API service caBundle)".into());
    }
    if manager.starts_with("kubeflow-") && manager.contains("-operator") {
        return Some("another operator of this project".into());
    }
    None
}

/// The leaf paths of a `fieldsV1` set: `f:<field>` is a field, `k:<json>` a
/// list item by its keys, `v:<json>` a set item by value, `i:<n>` by index;
/// `.` marks the item itself.
fn paths(set: &Value, prefix: String, out: &mut Vec<String>) {
    let Some(map) = set.as_object() else {
        return;
    };
    let mut leaf = true;
    for (key, child) in map {
        if key == "." {
            continue;
        }
        leaf = false;
        let step = if let Some(field) = key.strip_prefix("f:") {
            if prefix.is_empty() {
                field.to_string()
            } else {
                format!("{prefix}.{field}")
            }
        } else if let Some(keys) = key.strip_prefix("k:") {
            format!("{prefix}[{}]", item_keys(keys))
        } else if let Some(value) = key.strip_prefix("v:") {
            format!("{prefix}[={value}]")
        } else if let Some(index) = key.strip_prefix("i:") {
            format!("{prefix}[{index}]")
        } else {
            format!("{prefix}.{key}")
        };
        paths(child, step, out);
    }
    if leaf && !prefix.is_empty() {
        out.push(prefix);
    }
}

/// `{"name":"FOO"}` -> `name=FOO`.
fn item_keys(json: &str) -> String {
    match serde_json::from_str::<serde_json::Map<String, Value>>(json) {
        Ok(map) => map
            .iter()
            .map(|(k, v)| {
                format!(
                    "{k}={}",
                    v.as_str()
                        .map(str::to_string)
                        .unwrap_or_else(|| v.to_string())
                )
            })
            .collect::<Vec<_>>()
            .join(","),
        Err(_) => json.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::FieldsV1;
    use serde_json::json;

    fn entry(manager: &str, subresource: Option<&str>, fields: Value) -> ManagedFieldsEntry {
        ManagedFieldsEntry {
            manager: Some(manager.into()),
            operation: Some("Update".into()),
            subresource: subresource.map(str::to_string),
            fields_v1: Some(FieldsV1(fields)),
            ..Default::default()
        }
    }

    #[test]
    fn only_other_managers_main_resource_writes_are_kept() {
        let kept = keep_foreign(
            vec![
                entry("kubeflow-serving-operator", None, json!({"f:spec": {}})),
                entry("kube-controller-manager", None, json!({"f:metadata": {}})),
                entry("kubectl-edit", Some("status"), json!({"f:status": {}})),
                entry("kubectl-edit", None, json!({"f:metadata": {}})),
                entry(
                    "kube-controller-manager",
                    Some("scale"),
                    json!({"f:spec": {}}),
                ),
            ],
            "kubeflow-serving-operator",
        )
        .expect("kept");
        let managers: Vec<_> = kept
            .iter()
            .map(|e| e.manager.as_deref().unwrap_or_default())
            .collect();
        assert_eq!(managers, ["kubectl-edit", "kube-controller-manager"]);
        assert!(keep_foreign(vec![entry("me", None, json!({}))], "me").is_none());
    }

    #[test]
    fn a_hand_edit_is_named_by_its_paths_and_known_controllers_as_such() {
        let edit = entry(
            "kubectl-edit",
            None,
            json!({"f:metadata": {"f:annotations": {"f:example.com/team": {}}},
                   "f:spec": {"f:template": {"f:spec": {"f:containers": {
                       "k:{\"name\":\"manager\"}": {".": {}, "f:env": {"k:{\"name\":\"FOO\"}": {".": {}, "f:value": {}}}}}}}}}),
        );
        let edits = report("Deployment.apps kubeflow/ctl", &[edit]);
        assert_eq!(edits.len(), 1);
        assert_eq!(edits[0].controller, None);
        assert_eq!(
            edits[0].fields,
            vec![
                "metadata.annotations.example.com/team".to_string(),
                "spec.template.spec.containers[name=manager].env[name=FOO].value".to_string(),
            ]
        );
        let injector = entry(
            "cainjector",
            None,
            json!({"f:webhooks": {"k:{\"name\":\"a.example.com\"}": {"f:clientConfig": {"f:caBundle": {}}}}}),
        );
        let hpa = entry(
            "kube-controller-manager",
            Some("scale"),
            json!({"f:spec": {"f:replicas": {}}}),
        );
        let r = report("x", &[injector, hpa]);
        assert!(
            r[0].controller
                .as_deref()
                .is_some_and(|c| c.contains("caBundle"))
        );
        assert!(
            r[1].controller
                .as_deref()
                .is_some_and(|c| c.contains("autoscaler"))
        );
    }

    #[test]
    fn long_field_lists_are_cut_with_a_count() {
        let mut annotations = serde_json::Map::new();
        for i in 0..20 {
            annotations.insert(format!("f:a{i:02}"), json!({}));
        }
        let r = report(
            "x",
            &[entry(
                "kubectl-annotate",
                None,
                json!({"f:metadata": {"f:annotations": annotations}}),
            )],
        );
        assert_eq!(r[0].fields.len(), FIELDS_MAX + 1);
        assert_eq!(
            r[0].fields.last().map(String::as_str),
            Some("... and 4 more")
        );
    }
}
