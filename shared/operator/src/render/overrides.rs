//! A component resource's `spec.overrides`: patches of bundle objects that
//! no field makes, applied to the rendered objects after the component's own
//! settings, before digests are pinned and anything is applied. Server-side
//! apply then owns the patched fields like any other, so drift repair keeps
//! them. A bad override is refused with nothing written, naming its index.

use kube::api::DynamicObject;
use kubeflow_api::{JsonPatchOperation, Override};
use serde_json::Value;

use crate::base::conditions::Reason;
use crate::base::refusal::Refusal;

/// Fields an override may not touch, as JSON pointer prefixes: what makes
/// the object this object (and the operator's hold on it), and what decides
/// what an object permits. `*` matches one path segment.
const OWNED: &[&str] = &[
    "/apiVersion",
    "/kind",
    "/metadata/name",
    "/metadata/namespace",
    "/metadata/ownerReferences",
    "/metadata/managedFields",
];

/// Label and annotation key prefixes the operator owns or that change what
/// an object grants.
const OWNED_KEYS: &[&str] = &[
    "components.kubeflow.org/",
    "applyset.kubernetes.io/",
    "rbac.authorization.k8s.io/aggregate-to-",
];

/// Fields that decide what an object permits, per kind.
const PERMISSIONS: &[(&str, &[&str])] = &[
    ("ClusterRole", &["/rules", "/aggregationRule"]),
    ("Role", &["/rules"]),
    ("ClusterRoleBinding", &["/roleRef", "/subjects"]),
    ("RoleBinding", &["/roleRef", "/subjects"]),
    (
        "ValidatingWebhookConfiguration",
        &["/webhooks/*/clientConfig"],
    ),
    (
        "MutatingWebhookConfiguration",
        &["/webhooks/*/clientConfig"],
    ),
];

/// The most entries a ConfigMap of overrides may hold (the resource's own
/// list holds at most 64).
pub const CONFIG_MAP_MAX: usize = 256;

/// The overrides in a ConfigMap's `overrides` key: a YAML or JSON list.
pub fn parse(text: &str) -> Result<Vec<Override>, String> {
    let list: Vec<Override> = serde_saphyr::from_str(text).map_err(|e| {
        format!(
            "not a list of overrides: {}",
            crate::base::conditions::bounded(&e.to_string())
        )
    })?;
    if list.len() > CONFIG_MAP_MAX {
        return Err(format!(
            "{} overrides; at most {CONFIG_MAP_MAX}",
            list.len()
        ));
    }
    Ok(list)
}

/// Applies `overrides` to `objects` (the component at `version`); `field`
/// names where the list comes from in a refusal (`spec.overrides`, or the
/// ConfigMap of `spec.overridesConfigMap`). A malformed override, or one
/// that touches what the operator owns, is refused as `InvalidSpec`; one
/// that does not fit this version's bundle (no such object, or a patch that
/// does not apply) as `OverrideNotApplicable`, which an upgrade turns into
/// a blocked, planned upgrade instead of a refusal.
pub fn apply(
    objects: &mut [DynamicObject],
    overrides: &[Override],
    field: &str,
    version: &str,
) -> Result<(), Refusal> {
    for (i, o) in overrides.iter().enumerate() {
        let refusal = |reason, what: String| {
            Refusal::new(
                reason,
                format!("{field}[{i}] ({} {}): {what}", o.target.kind, o.target.name),
            )
        };
        let refuse = |what: String| refusal(Reason::InvalidSpec, what);
        let misfit = |what: String| refusal(Reason::OverrideNotApplicable, what);
        let has_merge = o.merge_patch.is_some();
        let has_json = !o.json_patch.is_empty();
        if has_merge == has_json {
            return Err(refuse("set exactly one of mergePatch and jsonPatch".into()));
        }
        let matches: Vec<usize> = objects
            .iter()
            .enumerate()
            .filter(|(_, obj)| targets(o, obj))
            .map(|(n, _)| n)
            .collect();
        let index = match matches.as_slice() {
            [one] => *one,
            [] => {
                return Err(misfit(format!(
                    "the component at {version} has no such object"
                )));
            }
            _ => {
                return Err(misfit(format!(
                    "the component at {version} has {} objects of that kind and name: set target.namespace",
                    matches.len()
                )));
            }
        };
        let touched = touched_paths(o);
        if let Some(path) = touched
            .iter()
            .find(|p| is_owned(&o.target.kind, p.as_str()))
        {
            return Err(refuse(format!(
                "it changes {path}, which the operator owns (names, namespace, owner references, its labels and annotations, aggregation labels, RBAC rules, role references, subjects, webhook client configurations)"
            )));
        }
        let object = &mut objects[index];
        let mut value = serde_json::to_value(&*object).map_err(|e| refuse(e.to_string()))?;
        if let Some(merge) = &o.merge_patch {
            json_patch::merge(&mut value, merge);
        } else {
            let ops: json_patch::Patch = serde_json::to_value(&o.json_patch)
                .and_then(serde_json::from_value)
                .map_err(|e| refuse(format!("not a JSON patch: {e}")))?;
            json_patch::patch(&mut value, &ops)
                .map_err(|e| misfit(format!("the patch does not apply at {version}: {e}")))?;
        }
        *object = serde_json::from_value(value)
            .map_err(|e| misfit(format!("the patched object is not an object: {e}")))?;
    }
    Ok(())
}

/// Whether override `o` patches `obj`.
fn targets(o: &Override, obj: &DynamicObject) -> bool {
    obj.types.as_ref().map(|t| t.kind.as_str()) == Some(o.target.kind.as_str())
        && obj.metadata.name.as_deref() == Some(o.target.name.as_str())
        && o.target
            .namespace
            .as_ref()
            .is_none_or(|ns| obj.metadata.namespace.as_ref() == Some(ns))
}

/// The overrides that patch `obj`, named as [`apply`] names them in a
/// refusal (`spec.overrides[2] (Secret name)`); `lists`: each list with
/// the field it comes from.
pub fn targeting(obj: &DynamicObject, lists: &[(&str, &[Override])]) -> Vec<String> {
    let mut out = Vec::new();
    for (field, list) in lists {
        for (i, o) in list.iter().enumerate() {
            if targets(o, obj) {
                out.push(format!(
                    "{field}[{i}] ({} {})",
                    o.target.kind, o.target.name
                ));
            }
        }
    }
    out
}

/// The paths an override writes: a JSON patch's `path` (and `from` of a
/// move), a merge patch's leaves (a non-object value replaces everything
/// under its key).
fn touched_paths(o: &Override) -> Vec<String> {
    let mut out = Vec::new();
    if let Some(merge) = &o.merge_patch {
        leaves(merge, String::new(), &mut out);
    }
    for JsonPatchOperation { path, from, op, .. } in &o.json_patch {
        out.push(path.clone());
        if *op == kubeflow_api::JsonPatchOp::Move
            && let Some(f) = from
        {
            out.push(f.clone());
        }
    }
    out
}

fn leaves(v: &Value, path: String, out: &mut Vec<String>) {
    match v {
        Value::Object(m) if !m.is_empty() => {
            for (k, child) in m {
                let key = k.replace('~', "~0").replace('/', "~1");
                leaves(child, format!("{path}/{key}"), out);
            }
        }
        _ => out.push(path),
    }
}

/// Whether writing at `path` would change a field the operator owns: the
/// field itself, something under it, or a parent that holds it.
fn is_owned(kind: &str, path: &str) -> bool {
    let segments: Vec<&str> = path.split('/').skip(1).collect();
    let fixed = OWNED.iter().copied().chain(
        PERMISSIONS
            .iter()
            .filter(|(k, _)| *k == kind)
            .flat_map(|(_, paths)| paths.iter().copied()),
    );
    for owned in fixed {
        let o: Vec<&str> = owned.split('/').skip(1).collect();
        let common = o.len().min(segments.len());
        let same = o[..common]
            .iter()
            .zip(&segments[..common])
            .all(|(a, b)| *a == "*" || a == b);
        if same {
            return true;
        }
    }
    // Labels and annotations: the maps themselves (a replacement) or an
    // owned key.
    if let ["metadata", "labels" | "annotations", rest @ ..] = segments.as_slice() {
        return match rest.first() {
            None => true,
            Some(key) => {
                let key = key.replace("~1", "/").replace("~0", "~");
                OWNED_KEYS.iter().any(|p| key.starts_with(p))
            }
        };
    }
    segments.is_empty() || segments == ["metadata"]
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn objects() -> Vec<DynamicObject> {
        [
            json!({"apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": "ctl", "namespace": "kubeflow", "labels": {"app": "x"}},
                "spec": {"template": {"spec": {"containers": [{"name": "manager", "image": "r/x:1", "env": [{"name": "A", "value": "1"}]}]}}}}),
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "config", "namespace": "kubeflow"},
                "data": {"deploy": "{\"defaultDeploymentMode\": \"RawDeployment\"}", "other": "x"}}),
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                "metadata": {"name": "role"}, "rules": []}),
        ]
        .into_iter()
        .map(|v| serde_json::from_value(v).expect("object"))
        .collect()
    }

    fn ovr(v: Value) -> Override {
        serde_json::from_value(v).expect("override")
    }

    #[test]
    fn a_json_patch_adds_inside_a_list_and_a_merge_patch_changes_a_key() {
        let mut objs = objects();
        apply(
            &mut objs,
            &[
                ovr(json!({"target": {"kind": "Deployment", "name": "ctl"},
                    "jsonPatch": [{"op": "add", "path": "/spec/template/spec/containers/0/env/-",
                                   "value": {"name": "B", "value": "2"}}]})),
                ovr(json!({"target": {"kind": "ConfigMap", "name": "config", "namespace": "kubeflow"},
                    "mergePatch": {"data": {"deploy": "{}"}, "metadata": {"annotations": {"team": "ml"}}}})),
            ],
            "spec.overrides",
            "v1",
        )
        .expect("applied");
        assert_eq!(
            objs[0].data["spec"]["template"]["spec"]["containers"][0]["env"],
            json!([{"name": "A", "value": "1"}, {"name": "B", "value": "2"}])
        );
        assert_eq!(objs[1].data["data"], json!({"deploy": "{}", "other": "x"}));
        assert_eq!(
            objs[1]
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get("team")),
            Some(&"ml".to_string())
        );
    }

    #[test]
    fn bad_overrides_are_refused_naming_the_index_and_change_nothing() {
        // (override, what the message says, whether it is a misfit with
        // this version's bundle rather than a malformed override)
        let cases = [
            (
                json!({"target": {"kind": "Deployment", "name": "gone"}, "mergePatch": {"spec": {}}}),
                "no such object",
                true,
            ),
            (
                json!({"target": {"kind": "Deployment", "name": "ctl"}}),
                "exactly one of mergePatch and jsonPatch",
                false,
            ),
            (
                json!({"target": {"kind": "Deployment", "name": "ctl"},
                    "jsonPatch": [{"op": "remove", "path": "/spec/nothing/here"}]}),
                "does not apply at v1",
                true,
            ),
            (
                json!({"target": {"kind": "Deployment", "name": "ctl"},
                    "mergePatch": {"metadata": {"namespace": "kube-system"}}}),
                "/metadata/namespace",
                false,
            ),
            (
                json!({"target": {"kind": "Deployment", "name": "ctl"},
                    "mergePatch": {"metadata": {"labels": {"components.kubeflow.org/owner-name": "x"}}}}),
                "components.kubeflow.org~1owner-name",
                false,
            ),
            (
                json!({"target": {"kind": "Deployment", "name": "ctl"},
                    "jsonPatch": [{"op": "replace", "path": "/metadata", "value": {}}]}),
                "/metadata",
                false,
            ),
            (
                json!({"target": {"kind": "ClusterRole", "name": "role"},
                    "jsonPatch": [{"op": "add", "path": "/rules/-", "value": {"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}}]}),
                "/rules/-",
                false,
            ),
            (
                json!({"target": {"kind": "ClusterRole", "name": "role"},
                    "mergePatch": {"metadata": {"labels": {"rbac.authorization.k8s.io/aggregate-to-view": "true"}}}}),
                "aggregate-to-view",
                false,
            ),
        ];
        for (o, says, misfit) in cases {
            let mut objs = objects();
            let before = objs.clone();
            let err =
                apply(&mut objs, &[ovr(o.clone())], "spec.overrides", "v1").expect_err("refused");
            let want = if misfit {
                Reason::OverrideNotApplicable
            } else {
                Reason::InvalidSpec
            };
            assert_eq!(err.reason, want, "{o}");
            assert!(
                err.message.starts_with("spec.overrides[0] ("),
                "{}",
                err.message
            );
            assert!(err.message.contains(says), "{o}: {}", err.message);
            assert_eq!(objs, before, "{o}: an object changed");
        }
    }

    #[test]
    fn a_config_maps_list_parses_and_a_malformed_one_is_named() {
        let list =
            parse("- target: {kind: Deployment, name: ctl}\n  mergePatch: {spec: {replicas: 2}}\n")
                .expect("parsed");
        assert_eq!(list.len(), 1);
        assert_eq!(list[0].target.name, "ctl");
        let err = parse("target: {kind: Deployment}").expect_err("a map, not a list");
        assert!(err.starts_with("not a list of overrides"), "{err}");
        let err = parse("- {target: {kind: Deployment, name: ctl}, mergePatch: {}, bogus: 1}\n");
        // Unknown fields are ignored like the API server prunes them; what
        // matters is that a list of the right shape parses.
        assert!(err.is_ok(), "{err:?}");
    }

    #[test]
    fn webhook_client_configs_are_owned_other_webhook_fields_are_not() {
        assert!(is_owned(
            "ValidatingWebhookConfiguration",
            "/webhooks/0/clientConfig/url"
        ));
        assert!(is_owned("ValidatingWebhookConfiguration", "/webhooks"));
        assert!(!is_owned(
            "ValidatingWebhookConfiguration",
            "/webhooks/0/timeoutSeconds"
        ));
        assert!(!is_owned("Deployment", "/spec/replicas"));
        assert!(!is_owned("Deployment", "/metadata/annotations/team"));
        assert!(is_owned("Deployment", "/metadata/labels"));
    }
}
