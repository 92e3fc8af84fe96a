//! Least-privilege RBAC of an operator, derived from what it manages: the
//! kinds in its bundles (every version in the manifests folder), the roles it
//! must be able to grant, its own kind, and what its code reads besides.
//! The chart's ClusterRoles are generated from this (`<operator> rbac`), and
//! the controller watches only kinds these rules let it watch.
//!
//! Granting a role needs either every permission the role holds or the
//! `escalate`/`bind` verbs. Holding every permission of Istio's or KServe's
//! roles would mean wildcards, so the operator gets `escalate` and `bind`
//! restricted by `resourceNames` to exactly the roles its bundles name.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use k8s_openapi::api::rbac::v1::PolicyRule;
use kube::api::{ApiResource, DynamicObject};
use kube::core::GroupVersionKind;

use crate::bundle::{self, BundleError};
use crate::kinds::kind;

/// Verbs the apply engine uses on a kind it manages: read, server-side apply
/// (a patch that may create), prune and cleanup.
pub const MANAGE: &[&str] = &["create", "delete", "get", "list", "patch", "watch"];
/// Verbs for reading and watching only.
pub const READ: &[&str] = &["get", "list", "watch"];

/// What an operator's permissions are made of.
#[derive(Debug, Clone, Default)]
pub struct Permissions {
    /// Bundle folders under the manifests folder whose versions it applies.
    pub bundles: Vec<String>,
    /// When set, only these kinds of the bundles are applied.
    pub only_kinds: Option<Vec<String>>,
    /// What the operator's code needs besides its bundles.
    pub extra: Vec<PolicyRule>,
}

impl Permissions {
    /// Every kind of the named bundle folders.
    pub fn bundles(folders: &[&str]) -> Self {
        Permissions {
            bundles: folders.iter().map(|f| f.to_string()).collect(),
            ..Default::default()
        }
    }

    /// Adds rules the code needs besides the bundles.
    pub fn with(mut self, rules: impl IntoIterator<Item = PolicyRule>) -> Self {
        self.extra.extend(rules);
        self
    }
}

/// A rule on `resources` of `group`.
pub fn rule(group: &str, resources: &[&str], verbs: &[&str]) -> PolicyRule {
    PolicyRule {
        api_groups: Some(vec![group.to_string()]),
        resources: Some(resources.iter().map(|r| r.to_string()).collect()),
        verbs: verbs.iter().map(|v| v.to_string()).collect(),
        ..Default::default()
    }
}

/// A rule on the named objects of one resource.
pub fn named(group: &str, resource: &str, names: &[String], verbs: &[&str]) -> PolicyRule {
    PolicyRule {
        resource_names: Some(names.to_vec()),
        ..rule(group, &[resource], verbs)
    }
}

/// Rules on the operator's own kind: watch it, patch it (finalizer, ApplySet
/// annotations), write its status, and set owner references that block its
/// deletion (the `finalizers` subresource, enforced on OpenShift).
pub fn own_kind(group: &str, plural: &str) -> Vec<PolicyRule> {
    vec![
        rule(
            group,
            &[plural],
            &["get", "list", "patch", "update", "watch"],
        ),
        rule(
            group,
            &[&format!("{plural}/status")],
            &["get", "patch", "update"],
        ),
        rule(group, &[&format!("{plural}/finalizers")], &["update"]),
    ]
}

/// Rules to bind the OpenShift SCC ClusterRoles `system:openshift:scc:<scc>`.
pub fn openshift_scc(sccs: &[&str]) -> Vec<PolicyRule> {
    let names: Vec<String> = sccs
        .iter()
        .map(|s| format!("system:openshift:scc:{s}"))
        .collect();
    vec![
        rule(RBAC_GROUP, &["rolebindings"], MANAGE),
        named(RBAC_GROUP, "clusterroles", &names, &["bind"]),
    ]
}

const RBAC_GROUP: &str = "rbac.authorization.k8s.io";

/// The name of the ClusterRole the apply engine claims a component's cluster scope with.
pub fn claim_role(component: &str) -> String {
    format!("kubeflow-{component}-cluster-claim")
}

/// The cluster rules of a component operator.
pub fn component_rules(
    manifests_dir: &Path,
    component: &str,
    own: (&str, &str),
    permissions: &Permissions,
) -> Result<Vec<PolicyRule>, BundleError> {
    let mut objects = Vec::new();
    for folder in &permissions.bundles {
        let dir = manifests_dir.join(folder);
        for version in bundle::available_versions(&dir) {
            objects.extend(bundle::load(manifests_dir, folder, &version)?.objects);
        }
    }
    if let Some(kinds) = &permissions.only_kinds {
        objects.retain(|o| kinds.iter().any(|k| k == kind(o)));
    }
    let mut rules = bundle_rules(&objects);
    rules.extend(own_kind(own.0, own.1));
    // The engine claims a component's cluster scope by creating, reading,
    // taking over and finally deleting one empty ClusterRole.
    rules.push(named(
        RBAC_GROUP,
        "clusterroles",
        &[claim_role(component)],
        &["delete", "get", "update"],
    ));
    rules.push(rule(RBAC_GROUP, &["clusterroles"], &["create"]));
    // CRDs are read to wait for Established and to check for user data before cleanup.
    rules.push(rule(
        "apiextensions.k8s.io",
        &["customresourcedefinitions"],
        READ,
    ));
    // Pods are read to say why a workload is not available.
    rules.push(rule("", &["pods"], &["get", "list"]));
    // Events on the component CR: what a prune kept and why.
    rules.push(rule("events.k8s.io", &["events"], &["create", "patch"]));
    rules.extend(permissions.extra.iter().cloned());
    Ok(normalize(rules))
}

/// The (apiVersion, kind) pairs the permissions' bundles hold (every version),
/// read from the files' top-level lines: what an operator needs at start to
/// choose its watches, without parsing megabytes of YAML it would then keep.
pub fn bundle_types(manifests_dir: &Path, permissions: &Permissions) -> BTreeSet<(String, String)> {
    let mut types = BTreeSet::new();
    for folder in &permissions.bundles {
        types.extend(bundle::type_lines(&manifests_dir.join(folder)));
    }
    if let Some(only) = &permissions.only_kinds {
        types.retain(|(_, k)| only.contains(k));
    }
    types
}

/// Plurals of the kinds the objects' CRDs define, by (group, kind).
type Plurals = BTreeMap<(String, String), String>;

fn crd_plurals(objects: &[DynamicObject]) -> Plurals {
    objects
        .iter()
        .filter(|o| kind(o) == "CustomResourceDefinition")
        .filter_map(|o| {
            let spec = &o.data["spec"];
            Some((
                (
                    spec["group"].as_str()?.to_string(),
                    spec["names"]["kind"].as_str()?.to_string(),
                ),
                spec["names"]["plural"].as_str()?.to_string(),
            ))
        })
        .collect()
}

/// An object's API group and resource (plural).
fn resource_of(o: &DynamicObject, plurals: &Plurals) -> Option<(String, String)> {
    let types = o.types.as_ref()?;
    let group = types
        .api_version
        .rsplit_once('/')
        .map_or("", |(g, _)| g)
        .to_string();
    let plural = plurals
        .get(&(group.clone(), types.kind.clone()))
        .cloned()
        .unwrap_or_else(|| {
            ApiResource::from_gvk(&GroupVersionKind::gvk(&group, "v1", &types.kind)).plural
        });
    Some((group, plural))
}

/// The role an object needs `escalate` (creating a role) or `bind` (binding
/// one) on: (verb, resource, role name).
fn grants(o: &DynamicObject) -> Option<(&'static str, &'static str, String)> {
    let name = o.metadata.name.clone().unwrap_or_default();
    match kind(o) {
        "ClusterRole" => Some(("escalate", "clusterroles", name)),
        "Role" => Some(("escalate", "roles", name)),
        "ClusterRoleBinding" | "RoleBinding" => {
            let role_ref = &o.data["roleRef"];
            let resource = if role_ref["kind"].as_str() == Some("Role") {
                "roles"
            } else {
                "clusterroles"
            };
            Some(("bind", resource, role_ref["name"].as_str()?.to_string()))
        }
        _ => None,
    }
}

/// Rules to manage exactly the given objects' kinds, list the custom
/// resources of the CRDs among them, and grant the roles they name.
pub fn bundle_rules(objects: &[DynamicObject]) -> Vec<PolicyRule> {
    let plurals = crd_plurals(objects);
    let mut rules = Vec::new();
    for ((group, _), plural) in &plurals {
        // Cleanup lists custom resources to tell whether a CRD holds user data.
        rules.push(rule(group, &[plural], &["list"]));
    }
    let mut escalate: BTreeMap<&str, BTreeSet<String>> = BTreeMap::new();
    let mut bind: BTreeMap<&str, BTreeSet<String>> = BTreeMap::new();
    for o in objects {
        let Some((group, plural)) = resource_of(o, &plurals) else {
            continue;
        };
        rules.push(rule(&group, &[&plural], MANAGE));
        match grants(o) {
            Some(("escalate", resource, name)) => {
                escalate.entry(resource).or_default().insert(name);
            }
            Some((_, resource, name)) => {
                bind.entry(resource).or_default().insert(name);
            }
            None => {}
        }
    }
    for (resource, names) in escalate {
        let names: Vec<String> = names.into_iter().collect();
        rules.push(named(RBAC_GROUP, resource, &names, &["escalate"]));
    }
    for (resource, names) in bind {
        let names: Vec<String> = names.into_iter().collect();
        rules.push(named(RBAC_GROUP, resource, &names, &["bind"]));
    }
    rules
}

/// Merges rules: one rule per API group and verb set (per resource name set
/// for named rules), resources sorted, so the output is stable and short.
pub fn normalize(rules: Vec<PolicyRule>) -> Vec<PolicyRule> {
    // (group, resource, names) -> verbs
    let mut verbs: BTreeMap<(String, String, Vec<String>), BTreeSet<String>> = BTreeMap::new();
    for r in rules {
        let mut names = r.resource_names.clone().unwrap_or_default();
        names.sort();
        names.dedup();
        for g in r.api_groups.clone().unwrap_or_default() {
            for res in r.resources.clone().unwrap_or_default() {
                verbs
                    .entry((g.clone(), res, names.clone()))
                    .or_default()
                    .extend(r.verbs.iter().cloned());
            }
        }
    }
    // (group, verbs, names) -> resources
    let mut merged: BTreeMap<(String, Vec<String>, Vec<String>), BTreeSet<String>> =
        BTreeMap::new();
    for ((g, res, names), vs) in verbs {
        merged
            .entry((g, vs.into_iter().collect(), names))
            .or_default()
            .insert(res);
    }
    merged
        .into_iter()
        .map(|((g, verbs, names), resources)| PolicyRule {
            api_groups: Some(vec![g]),
            resources: Some(resources.into_iter().collect()),
            resource_names: (!names.is_empty()).then_some(names),
            verbs,
            non_resource_urls: None,
        })
        .collect()
}

/// What applying `objects` needs that `rules` do not grant, one line each.
pub fn missing(rules: &[PolicyRule], objects: &[DynamicObject]) -> Vec<String> {
    let plurals = crd_plurals(objects);
    let mut out = BTreeSet::new();
    for o in objects {
        let Some((group, plural)) = resource_of(o, &plurals) else {
            continue;
        };
        for verb in MANAGE {
            if !allows(rules, &group, &plural, verb) {
                out.insert(format!("{verb} {plural}.{group}"));
            }
        }
        if let Some((verb, resource, name)) = grants(o)
            && !allows_named(rules, RBAC_GROUP, resource, verb, &name)
        {
            out.insert(format!("{verb} {resource}/{name}"));
        }
    }
    out.into_iter().collect()
}

/// Whether the rules allow `verb` on the named object.
pub fn allows_named(
    rules: &[PolicyRule],
    group: &str,
    resource: &str,
    verb: &str,
    name: &str,
) -> bool {
    rules.iter().any(|r| {
        r.resource_names
            .as_ref()
            .is_none_or(|ns| ns.iter().any(|n| n == name))
            && grants_verb(r, group, resource, verb)
    })
}

/// Whether the rules allow `verb` on every object of `resource` in `group`.
pub fn allows(rules: &[PolicyRule], group: &str, resource: &str, verb: &str) -> bool {
    rules
        .iter()
        .any(|r| r.resource_names.is_none() && grants_verb(r, group, resource, verb))
}

/// Whether one rule names the group, resource and verb (whatever its names).
fn grants_verb(r: &PolicyRule, group: &str, resource: &str, verb: &str) -> bool {
    r.api_groups
        .as_ref()
        .is_some_and(|g| g.iter().any(|x| x == group))
        && r.resources
            .as_ref()
            .is_some_and(|rs| rs.iter().any(|x| x == resource))
        && r.verbs.iter().any(|v| v == verb)
}

/// The rules as YAML, for the chart.
pub fn to_yaml(rules: &[PolicyRule]) -> Result<String, serde_saphyr::ser::Error> {
    let mut out = String::from(
        "# Generated by `charts/generate` from the operator's bundles and code; do not edit.\n",
    );
    out.push_str(&serde_saphyr::to_string(&rules)?);
    if !out.ends_with('\n') {
        out.push('\n');
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obj(yaml: &str) -> DynamicObject {
        serde_saphyr::from_str(yaml).expect("object")
    }

    #[test]
    fn bundle_kinds_are_read_from_top_level_kind_lines() {
        let root = std::env::temp_dir().join(format!("rbac-kinds-{}", std::process::id()));
        let dir = root.join("demo/v1");
        std::fs::create_dir_all(&dir).expect("dir");
        std::fs::write(
            dir.join("a.yaml"),
            "apiVersion: apps/v1\nkind: Deployment\n---\napiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\nroleRef: {kind: ClusterRole}\nsubjects:\n- kind: ServiceAccount\n",
        )
        .expect("write");
        let all = bundle_types(&root, &Permissions::bundles(&["demo"]));
        assert_eq!(
            all.into_iter().map(|(_, k)| k).collect::<Vec<_>>(),
            ["Deployment", "RoleBinding"]
        );
        let only = Permissions {
            only_kinds: Some(vec!["Deployment".into()]),
            ..Permissions::bundles(&["demo"])
        };
        assert_eq!(bundle_types(&root, &only).len(), 1);
        let _ = std::fs::remove_dir_all(&root);
    }

    #[test]
    fn bundle_kinds_roles_and_crds_become_rules() {
        let objects = vec![
            obj("apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: d}\n"),
            obj("apiVersion: policy/v1\nkind: PodDisruptionBudget\nmetadata: {name: p}\n"),
            obj(
                "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata: {name: r}\n",
            ),
            obj(
                "apiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\nmetadata: {name: b}\nroleRef: {kind: ClusterRole, name: r}\n",
            ),
            obj(
                "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata: {name: gateways.networking.istio.io}\nspec: {group: networking.istio.io, names: {kind: Gateway, plural: gateways}}\n",
            ),
            obj("apiVersion: networking.istio.io/v1\nkind: Gateway\nmetadata: {name: g}\n"),
        ];
        let rules = normalize(bundle_rules(&objects));
        assert!(allows(&rules, "apps", "deployments", "patch"));
        assert!(allows(&rules, "policy", "poddisruptionbudgets", "delete"));
        assert!(allows(&rules, "networking.istio.io", "gateways", "list"));
        assert!(!allows(&rules, "apps", "daemonsets", "get"));
        // The one role is both created (escalate) and bound (bind), by name only.
        let grant = rules
            .iter()
            .find(|r| r.verbs.iter().any(|v| v == "escalate"))
            .expect("escalate rule");
        assert_eq!(grant.verbs, ["bind", "escalate"]);
        assert_eq!(
            grant.resource_names.as_deref(),
            Some(&["r".to_string()][..])
        );
        assert_eq!(
            grant.resources.as_deref(),
            Some(&["clusterroles".to_string()][..])
        );
        assert_eq!(missing(&rules, &objects), Vec::<String>::new());
        let more = vec![
            obj("apiVersion: apps/v1\nkind: DaemonSet\nmetadata: {name: ds}\n"),
            obj(
                "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\nmetadata: {name: b}\nroleRef: {kind: ClusterRole, name: cluster-admin}\n",
            ),
        ];
        let gaps = missing(&rules, &more);
        assert!(
            gaps.contains(&"create daemonsets.apps".to_string()),
            "{gaps:?}"
        );
        assert!(
            gaps.contains(&"bind clusterroles/cluster-admin".to_string()),
            "{gaps:?}"
        );
        for r in &rules {
            for field in [r.api_groups.as_ref(), r.resources.as_ref()]
                .into_iter()
                .flatten()
            {
                assert!(!field.iter().any(|x| x == "*"), "wildcard in {r:?}");
            }
            assert!(!r.verbs.iter().any(|v| v == "*"), "wildcard in {r:?}");
        }
    }
}
