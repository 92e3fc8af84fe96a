//! What moving a component from one bundle version to another will do,
//! computed from the two bundles alone, before anything is written: objects
//! created, changed (which fields), pruned, released (kept kinds), recreated
//! (a field the API server will not change, and which), held (such a field
//! on a kind never recreated: the upgrade would stop there), CRD versions
//! added or removed, images changed.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use kube::api::DynamicObject;
use serde_json::Value;

use crate::base::kinds::ObjectKey;

/// Fields the API server refuses to change in place, per kind (`Kind.group`),
/// as JSON pointers, with the name the plan gives the change.
const IMMUTABLE: &[(&str, &str, &str)] = &[
    ("Deployment.apps", "/spec/selector", "immutable selector"),
    ("DaemonSet.apps", "/spec/selector", "immutable selector"),
    ("ReplicaSet.apps", "/spec/selector", "immutable selector"),
    ("StatefulSet.apps", "/spec/selector", "immutable selector"),
    (
        "StatefulSet.apps",
        "/spec/volumeClaimTemplates",
        "immutable volumeClaimTemplates",
    ),
    (
        "StatefulSet.apps",
        "/spec/serviceName",
        "immutable serviceName",
    ),
    ("Job.batch", "/spec/template", "immutable template"),
    ("Job.batch", "/spec/selector", "immutable selector"),
    (
        "RoleBinding.rbac.authorization.k8s.io",
        "/roleRef",
        "immutable roleRef",
    ),
    (
        "ClusterRoleBinding.rbac.authorization.k8s.io",
        "/roleRef",
        "immutable roleRef",
    ),
    ("Service", "/spec/clusterIP", "immutable clusterIP"),
    (
        "PersistentVolumeClaim",
        "/spec/storageClassName",
        "immutable storageClassName",
    ),
    (
        "PersistentVolumeClaim",
        "/spec/accessModes",
        "immutable accessModes",
    ),
];

/// Kinds a prune keeps (it lets them go instead of deleting them).
const KEPT_ON_PRUNE: &[&str] = &[
    "CustomResourceDefinition.apiextensions.k8s.io",
    "PersistentVolumeClaim",
    "Namespace",
];

/// The plan of one component's move between two bundle versions.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Plan {
    /// Objects the new bundle adds.
    pub created: Vec<ObjectKey>,
    /// Objects in both whose content differs, with the fields that do.
    pub changed: BTreeMap<ObjectKey, Vec<String>>,
    /// Objects the new bundle lacks, deleted.
    pub pruned: Vec<ObjectKey>,
    /// Objects the new bundle lacks that are kept and let go (CRDs, claims,
    /// namespaces): a person decides when they go.
    pub released: Vec<ObjectKey>,
    /// Objects deleted and created anew, and why.
    pub recreated: BTreeMap<ObjectKey, &'static str>,
    /// Objects whose change the API server refuses and that are never
    /// recreated (they hold data): the upgrade stops at them.
    pub held: BTreeMap<ObjectKey, &'static str>,
    /// CRD versions added, as "name version".
    pub crd_versions_added: Vec<String>,
    /// CRD versions removed, as "name version" (refused while objects are
    /// stored at them).
    pub crd_versions_removed: Vec<String>,
    /// Images no longer run.
    pub images_removed: Vec<String>,
    /// Images newly run.
    pub images_added: Vec<String>,
    /// Overrides (`spec.overrides`) the new version's bundle has no target
    /// for, or that no longer apply to it: each stops the upgrade until it is
    /// fixed or removed (never dropped silently).
    pub overrides_not_applicable: Vec<String>,
    /// What the upgrade leaves to a person (data it does not carry over),
    /// in the component's words.
    pub actions: Vec<String>,
}

impl Plan {
    /// The plan of moving from the objects `old` to the objects `new`.
    pub fn compute(old: &[DynamicObject], new: &[DynamicObject]) -> Self {
        let index = |objects: &[DynamicObject]| -> BTreeMap<ObjectKey, Value> {
            objects
                .iter()
                .map(|o| {
                    (
                        ObjectKey::of(o),
                        serde_json::to_value(o).unwrap_or(Value::Null),
                    )
                })
                .collect()
        };
        let (before, after) = (index(old), index(new));
        let mut plan = Plan::default();
        for (key, value) in &after {
            let Some(was) = before.get(key) else {
                plan.created.push(key.clone());
                continue;
            };
            let fields = differing_fields(was, value);
            if fields.is_empty() {
                continue;
            }
            if let Some(why) = immutable_change(&key.group_kind, was, value) {
                if crate::base::kinds::may_recreate(&key.group_kind) {
                    plan.recreated.insert(key.clone(), why);
                } else {
                    plan.held.insert(key.clone(), why);
                }
            }
            if key.group_kind == "CustomResourceDefinition.apiextensions.k8s.io" {
                let (a, b) = (crd_versions(was), crd_versions(value));
                plan.crd_versions_added
                    .extend(b.difference(&a).map(|v| format!("{} {v}", key.name)));
                plan.crd_versions_removed
                    .extend(a.difference(&b).map(|v| format!("{} {v}", key.name)));
            }
            plan.changed.insert(key.clone(), fields);
        }
        for key in before.keys().filter(|k| !after.contains_key(*k)) {
            if KEPT_ON_PRUNE.contains(&key.group_kind.as_str()) {
                plan.released.push(key.clone());
            } else {
                plan.pruned.push(key.clone());
            }
        }
        let images = |objects: &[DynamicObject]| -> BTreeSet<String> {
            crate::render::images::find(objects)
                .into_iter()
                .map(|f| f.image)
                .collect()
        };
        let (a, b) = (images(old), images(new));
        plan.images_removed = a.difference(&b).cloned().collect();
        plan.images_added = b.difference(&a).cloned().collect();
        plan
    }

    /// Whether the move changes nothing.
    pub fn is_empty(&self) -> bool {
        *self == Plan::default()
    }

    /// The plan's first line: how many objects each kind of change touches.
    pub fn summary(&self) -> String {
        let text = self.to_string();
        let mut lines = text.lines();
        let mut out = lines.next().unwrap_or_default().to_string();
        if !self.actions.is_empty() {
            out.push_str(&format!("; {} thing(s) to do by hand", self.actions.len()));
        }
        if !self.overrides_not_applicable.is_empty() {
            out.push_str(&format!(
                "; {} override(s) do not apply",
                self.overrides_not_applicable.len()
            ));
        }
        out
    }
}

/// How much of a plan the status holds: a status stays far below the API
/// server's object size limit, and the plan is printed whole by
/// `plan --from --to`.
pub const DETAILS_MAX: usize = 16 * 1024;

/// The digest that approves a plan: of the two versions and the plan's
/// text, so a plan that changes (another operator build, another spec)
/// needs a new approval. 16 hex digits: short enough to type, far too many
/// to hit by chance.
pub fn digest(from: &str, to: &str, plan_text: &str) -> String {
    let mut ctx = ring::digest::Context::new(&ring::digest::SHA256);
    for part in [from, "\n", to, "\n", plan_text] {
        ctx.update(part.as_bytes());
    }
    ctx.finish()
        .as_ref()
        .iter()
        .take(8)
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The plan as a component's status publishes it.
pub fn published(
    from: &str,
    to: &str,
    plan: &Plan,
    awaiting_approval: bool,
) -> kubeflow_api::UpgradePlanStatus {
    let text = plan.to_string();
    kubeflow_api::UpgradePlanStatus {
        from: from.to_string(),
        to: to.to_string(),
        digest: digest(from, to, &text),
        summary: plan.summary(),
        details: crate::base::conditions::truncate(&text, DETAILS_MAX),
        awaiting_approval,
    }
}

/// The first immutable field that differs between two versions of an
/// object, named as the plan says it.
pub fn immutable_change(group_kind: &str, old: &Value, new: &Value) -> Option<&'static str> {
    IMMUTABLE
        .iter()
        .filter(|(gk, _, _)| *gk == group_kind)
        .find(|(_, pointer, _)| {
            let (a, b) = (old.pointer(pointer), new.pointer(pointer));
            // A field only one side sets is defaulted by the server.
            a.is_some() && b.is_some() && a != b
        })
        .map(|(_, _, why)| *why)
}

/// The served version names of a CRD.
fn crd_versions(crd: &Value) -> BTreeSet<String> {
    crd.pointer("/spec/versions")
        .and_then(Value::as_array)
        .map(|vs| {
            vs.iter()
                .filter_map(|v| v.get("name").and_then(Value::as_str).map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// How deep the changed fields are named (`.spec.template.spec`).
const FIELD_DEPTH: usize = 4;

/// The paths, to `FIELD_DEPTH`, at which two objects differ (labels and
/// annotations by key).
fn differing_fields(old: &Value, new: &Value) -> Vec<String> {
    let mut out = Vec::new();
    walk(old, new, String::new(), 0, &mut out);
    out
}

fn walk(old: &Value, new: &Value, path: String, depth: usize, out: &mut Vec<String>) {
    if old == new {
        return;
    }
    match (old, new) {
        (Value::Object(a), Value::Object(b)) if depth < FIELD_DEPTH => {
            let keys: BTreeSet<&String> = a.keys().chain(b.keys()).collect();
            for k in keys {
                let (x, y) = (
                    a.get(k).unwrap_or(&Value::Null),
                    b.get(k).unwrap_or(&Value::Null),
                );
                walk(x, y, format!("{path}.{k}"), depth + 1, out);
            }
        }
        _ => out.push(path),
    }
}

impl fmt::Display for Plan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let keys = |v: &[ObjectKey]| v.iter().map(ToString::to_string).collect::<Vec<_>>();
        writeln!(
            f,
            "{} created, {} changed, {} pruned, {} released, {} recreated, {} held",
            self.created.len(),
            self.changed.len(),
            self.pruned.len(),
            self.released.len(),
            self.recreated.len(),
            self.held.len()
        )?;
        for o in &self.overrides_not_applicable {
            writeln!(
                f,
                "  override does not apply: {o} (the upgrade waits until it is fixed or removed)"
            )?;
        }
        for a in &self.actions {
            writeln!(f, "  to do by hand: {a}")?;
        }
        for (key, why) in &self.held {
            writeln!(
                f,
                "  held: {key} ({why}; holds data, never recreated: the upgrade stops here until a person acts)"
            )?;
        }
        for (key, why) in &self.recreated {
            writeln!(f, "  recreated: {key} ({why})")?;
        }
        for key in keys(&self.created) {
            writeln!(f, "  created: {key}")?;
        }
        for key in keys(&self.pruned) {
            writeln!(f, "  pruned: {key}")?;
        }
        for key in keys(&self.released) {
            writeln!(f, "  released (kept): {key}")?;
        }
        for v in &self.crd_versions_added {
            writeln!(f, "  CRD version added: {v}")?;
        }
        for v in &self.crd_versions_removed {
            writeln!(
                f,
                "  CRD version removed: {v} (refused while objects are stored at it)"
            )?;
        }
        for i in &self.images_removed {
            writeln!(f, "  image no longer run: {i}")?;
        }
        for i in &self.images_added {
            writeln!(f, "  image newly run: {i}")?;
        }
        for (key, fields) in &self.changed {
            writeln!(f, "  changed: {key} ({})", fields.join(", "))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(v: Value) -> DynamicObject {
        serde_json::from_value(v).expect("object")
    }

    fn deployment(selector: Value, image: &str) -> DynamicObject {
        obj(json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "ctl", "namespace": "ns"},
            "spec": {"selector": {"matchLabels": selector},
                     "template": {"spec": {"containers": [{"name": "c", "image": image}]}}},
        }))
    }

    fn binding(role: &str) -> DynamicObject {
        obj(json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": {"name": "b"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
        }))
    }

    #[test]
    fn a_changed_selector_and_role_ref_are_recreations_and_named() {
        let old = vec![
            deployment(json!({"a": "1"}), "r/x:1"),
            binding("old-role"),
            obj(
                json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "gone", "namespace": "ns"}}),
            ),
            obj(
                json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
                "metadata": {"name": "xs.g"}, "spec": {"versions": [{"name": "v1"}, {"name": "v1beta1"}]}}),
            ),
            obj(
                json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
                "metadata": {"name": "old.g"}, "spec": {"versions": [{"name": "v1"}]}}),
            ),
        ];
        let new = vec![
            deployment(json!({"a": "1", "b": "2"}), "r/x:2"),
            binding("new-role"),
            obj(
                json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "new", "namespace": "ns"}}),
            ),
            obj(
                json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
                "metadata": {"name": "xs.g"}, "spec": {"versions": [{"name": "v1"}, {"name": "v2"}]}}),
            ),
        ];
        let plan = Plan::compute(&old, &new);
        let text = plan.to_string();
        assert!(
            text.contains("recreated: Deployment ns/ctl (immutable selector)"),
            "{text}"
        );
        assert!(
            text.contains("recreated: ClusterRoleBinding b (immutable roleRef)"),
            "{text}"
        );
        assert!(text.contains("created: ConfigMap ns/new"), "{text}");
        assert!(text.contains("pruned: ConfigMap ns/gone"), "{text}");
        assert!(
            text.contains("released (kept): CustomResourceDefinition old.g"),
            "{text}"
        );
        assert_eq!(plan.crd_versions_added, vec!["xs.g v2"]);
        assert_eq!(plan.crd_versions_removed, vec!["xs.g v1beta1"]);
        assert_eq!(plan.images_added, vec!["r/x:2"]);
        assert_eq!(plan.images_removed, vec!["r/x:1"]);
        assert!(
            plan.changed[&ObjectKey::of(&new[0])]
                .contains(&".spec.selector.matchLabels.b".to_string()),
            "{:?}",
            plan.changed
        );
        assert!(plan.held.is_empty());
    }

    #[test]
    fn a_claim_whose_class_changes_is_held_and_the_same_bundle_plans_nothing() {
        let claim = |class: &str| {
            obj(json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                "metadata": {"name": "data", "namespace": "ns"},
                "spec": {"storageClassName": class}}))
        };
        let plan = Plan::compute(&[claim("a")], &[claim("b")]);
        assert_eq!(
            plan.held.values().collect::<Vec<_>>(),
            vec![&"immutable storageClassName"]
        );
        assert!(plan.recreated.is_empty());
        assert!(Plan::compute(&[claim("a")], &[claim("a")]).is_empty());
    }
}
