//! Least-privilege RBAC of an operator, derived from what it manages: the
//! objects in its bundles (every version in the manifests folder), the roles
//! it must be able to grant, its own kind, and what its code needs besides.
//! The chart's roles are generated from this (`<operator> rbac`), and the
//! controller watches only kinds these rules let it watch.
//!
//! Two sets, because Kubernetes scopes them differently (see `derive`):
//! - `cluster`: cluster-scoped kinds, with every verb that `resourceNames`
//!   can limit (get, patch, delete) limited to the names the bundles hold;
//! - `namespaced`: namespaced kinds, granted by a Role in each namespace the
//!   operator may install into, never cluster-wide;
//! - `pins`: what RBAC cannot limit of the roles, bindings, webhook
//!   configurations and workloads the operator writes, checked by the
//!   chart's admission policy. The operator holds `escalate`/`bind` on its
//!   bundles' roles instead of their rules, so its token is not as
//!   powerful as the controllers it installs; the pins admit only the
//!   bundles' contents.
//!
//! `create` cannot be limited by name in RBAC; `creates` lists the names per
//! cluster-scoped resource so the chart can limit creation with a
//! ValidatingAdmissionPolicy.

mod check;
mod derive;
pub mod pins;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use k8s_openapi::api::rbac::v1::PolicyRule;
use kube::api::DynamicObject;
use serde::{Deserialize, Serialize};

pub use check::{allows, allows_named, covers, missing};
pub use derive::{bundle_rules, component_rules};

/// Verbs the apply engine uses on a kind it manages: read, server-side apply
/// (a patch that may create), prune and cleanup.
pub const MANAGE: &[&str] = &["create", "delete", "get", "list", "patch", "watch"];
/// Verbs for reading and watching only.
pub const READ: &[&str] = &["get", "list", "watch"];
/// Verbs on cluster-scoped objects that `resourceNames` can limit.
pub const BY_NAME: &[&str] = &["delete", "get", "patch"];
/// Verbs on cluster-scoped kinds that `resourceNames` cannot limit: create
/// (the name is not known to RBAC yet) and list/watch (the engine lists by
/// label).
pub const UNNAMED: &[&str] = &["create", "list", "watch"];

pub(crate) const RBAC_GROUP: &str = "rbac.authorization.k8s.io";
/// Istio's security group, of the AuthorizationPolicies tenant access writes.
pub(crate) const TENANT_POLICY_GROUP: &str = "security.istio.io";

/// What an operator's permissions are made of.
#[derive(Debug, Clone, Default)]
pub struct Permissions {
    /// Bundle folders under the manifests folder whose versions it applies.
    pub bundles: Vec<String>,
    /// When set, only these kinds of the bundles are applied.
    pub only_kinds: Option<Vec<String>>,
    /// Bundle folders of which only some kinds are applied, with those
    /// kinds (the Dashboard takes only the ClusterRoles of the platform's
    /// glue).
    pub partial: Vec<(String, Vec<String>)>,
    /// Cluster-scoped kinds the code writes beyond the bundles, as (group,
    /// plural): granted cluster-wide, and pinned by admission to the
    /// objects carrying the component's label (see `pins`).
    pub labelled: Vec<(String, String)>,
    /// Objects the code adds to every version of its bundles (dex's
    /// storage CRDs): their rules and pins are derived as the bundles' are.
    pub objects: Vec<DynamicObject>,
    /// What the code changes in every version's bundle objects before it
    /// applies them (a role it narrows, a binding it points elsewhere), so
    /// the rules and pins follow what is applied, not what upstream ships.
    pub adjust: Option<fn(&mut Vec<DynamicObject>)>,
    /// Cluster-wide rules the code needs besides the bundles.
    pub extra: Vec<PolicyRule>,
    /// Rules the code needs besides the bundles, in the allowed namespaces only.
    pub extra_namespaced: Vec<PolicyRule>,
    /// Cluster-wide rules on objects named after an allowed namespace
    /// (`{namespace}` in their names; see `Rules::cluster_per_namespace`).
    pub extra_per_namespace: Vec<PolicyRule>,
    /// OpenShift SCCs granted to the bundles' ServiceAccounts.
    pub sccs: Vec<String>,
    /// The ClusterRoles the code binds people and groups to in Kubeflow
    /// profile namespaces (see `with_tenant_access`).
    pub tenant_roles: Vec<String>,
    /// When the code names the bundles' workloads (one per entry of its
    /// resource), the suffix those names end with (see `pins`).
    pub workload_suffix: Option<String>,
}

impl Permissions {
    /// Every kind of the named bundle folders.
    pub fn bundles(folders: &[&str]) -> Self {
        Permissions {
            bundles: folders.iter().map(|f| f.to_string()).collect(),
            ..Default::default()
        }
    }

    /// Adds a bundle folder of which only `kinds` are applied.
    pub fn with_kinds_of(mut self, folder: &str, kinds: &[&str]) -> Self {
        self.partial.push((
            folder.to_string(),
            kinds.iter().map(|k| k.to_string()).collect(),
        ));
        self
    }

    /// Adds objects the code installs with every version of its bundles.
    pub fn with_objects(mut self, objects: impl IntoIterator<Item = DynamicObject>) -> Self {
        self.objects.extend(objects);
        self
    }

    /// Sets what the code changes in its bundles' objects (see `adjust`).
    pub fn with_adjusted(mut self, adjust: fn(&mut Vec<DynamicObject>)) -> Self {
        self.adjust = Some(adjust);
        self
    }

    /// Adds a cluster-scoped kind the code writes, only ever its own objects.
    pub fn with_labelled(mut self, group: &str, resource: &str) -> Self {
        self.labelled
            .push((group.to_string(), resource.to_string()));
        self
    }

    /// Adds cluster-wide rules the code needs besides the bundles.
    pub fn with(mut self, rules: impl IntoIterator<Item = PolicyRule>) -> Self {
        self.extra.extend(rules);
        self
    }

    /// Adds rules the code needs in the namespaces it installs into.
    pub fn with_namespaced(mut self, rules: impl IntoIterator<Item = PolicyRule>) -> Self {
        self.extra_namespaced.extend(rules);
        self
    }

    /// Adds cluster-wide rules on objects whose names hold an allowed
    /// namespace, written `{namespace}`.
    pub fn with_per_namespace(mut self, rules: impl IntoIterator<Item = PolicyRule>) -> Self {
        self.extra_per_namespace.extend(rules);
        self
    }

    /// Adds what giving people and groups access to Kubeflow profile
    /// namespaces takes (the Dashboard's declared contributors): RoleBindings
    /// to `roles` and Istio AuthorizationPolicies in any namespace, `bind`
    /// on exactly those roles, and reading a namespace to see whether it is
    /// a profile's. RBAC cannot limit these to profile namespaces, so the
    /// pins do: only in namespaces labelled as a profile's, only objects of
    /// the component's label, bindings only to `roles` and only of people
    /// and groups (never a ServiceAccount or a `system:` name), policies
    /// only ALLOW.
    pub fn with_tenant_access(mut self, roles: &[&str]) -> Self {
        self.tenant_roles
            .extend(roles.iter().map(|r| r.to_string()));
        let names: Vec<String> = roles.iter().map(|r| r.to_string()).collect();
        self.with([
            rule(RBAC_GROUP, &["rolebindings"], MANAGE),
            rule(TENANT_POLICY_GROUP, &["authorizationpolicies"], MANAGE),
            named(RBAC_GROUP, "clusterroles", &names, &["bind"]),
            rule("", &["namespaces"], &["get"]),
        ])
    }

    /// Adds what granting the OpenShift SCC ClusterRoles
    /// `system:openshift:scc:<scc>` to the bundle's ServiceAccounts takes:
    /// RoleBindings in its namespaces and `bind` on exactly those roles.
    pub fn openshift_scc(mut self, sccs: &[&str]) -> Self {
        self.sccs.extend(sccs.iter().map(|s| s.to_string()));
        let names: Vec<String> = sccs
            .iter()
            .map(|s| format!("system:openshift:scc:{s}"))
            .collect();
        self.with_namespaced([rule(RBAC_GROUP, &["rolebindings"], MANAGE)])
            .with([named(RBAC_GROUP, "clusterroles", &names, &["bind"])])
    }
}

/// An operator's RBAC, by the scope it is granted at.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Rules {
    /// Bound cluster-wide: cluster-scoped kinds (named where RBAC allows),
    /// the operator's own kinds, reads.
    pub cluster: Vec<PolicyRule>,
    /// Bound by a Role in each allowed namespace.
    pub namespaced: Vec<PolicyRule>,
    /// Bound cluster-wide, once per allowed namespace with `{namespace}` in
    /// the resource names replaced by it (objects a controller names after
    /// its namespace at run time).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cluster_per_namespace: Vec<PolicyRule>,
    /// The names each cluster-scoped resource may be created with.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub creates: Vec<Creates>,
    /// Cluster-scoped resources created under any name, each object
    /// carrying the component's label (the pins hold them to it).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub labelled: Vec<Creates>,
    /// What the chart's admission policy pins of the ClusterRoles the
    /// operator writes (see `pins`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pins: Option<pins::Pins>,
}

/// The names objects of one cluster-scoped resource may be created with.
#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Creates {
    /// API group ("" for core).
    pub group: String,
    /// Plural resource name.
    pub resource: String,
    /// Object names.
    pub names: Vec<String>,
}

impl Rules {
    /// Every rule, whatever its scope: what an operator run without
    /// namespace limits (for example by the tests, as an admin) could need.
    pub fn all(&self) -> Vec<PolicyRule> {
        let mut out = self.cluster.clone();
        out.extend(self.namespaced.iter().cloned());
        out
    }

    /// The rules as YAML, for the chart.
    pub fn to_yaml(&self) -> Result<String, serde_saphyr::ser::Error> {
        let mut out = String::from(
            "# Generated by `charts/generate` from the operator's bundles and code; do not edit.\n",
        );
        out.push_str(&serde_saphyr::to_string(self)?);
        if !out.ends_with('\n') {
            out.push('\n');
        }
        Ok(out)
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

/// The name of the ClusterRole the apply engine claims a component's cluster scope with.
pub fn claim_role(component: &str) -> String {
    format!("kubeflow-{component}-cluster-claim")
}

/// The (apiVersion, kind) pairs the permissions' bundles hold (every version),
/// read from the files' top-level lines: what an operator needs at start to
/// choose its watches, without parsing megabytes of YAML it would then keep.
pub fn bundle_types(manifests_dir: &Path, permissions: &Permissions) -> BTreeSet<(String, String)> {
    let mut types = BTreeSet::new();
    for folder in &permissions.bundles {
        types.extend(crate::base::bundle::type_lines(&manifests_dir.join(folder)));
    }
    if let Some(only) = &permissions.only_kinds {
        types.retain(|(_, k)| only.contains(k));
    }
    for (folder, kinds) in &permissions.partial {
        types.extend(
            crate::base::bundle::type_lines(&manifests_dir.join(folder))
                .into_iter()
                .filter(|(_, k)| kinds.contains(k)),
        );
    }
    // The objects the code adds are applied too, so watched like the rest
    // (a Job's completion then brings a reconcile at once).
    types.extend(permissions.objects.iter().filter_map(|o| {
        let t = o.types.as_ref()?;
        Some((t.api_version.clone(), t.kind.clone()))
    }));
    types
}

/// Merges resource rules: one rule per API group and verb set (per resource
/// name set for named rules), resources sorted, so the output is stable and
/// short. Non-resource rules are kept as they are, once each.
pub fn normalize(rules: Vec<PolicyRule>) -> Vec<PolicyRule> {
    // (group, resource, names) -> verbs
    let mut verbs: BTreeMap<(String, String, Vec<String>), BTreeSet<String>> = BTreeMap::new();
    let mut non_resource: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for r in rules {
        for url in r.non_resource_urls.iter().flatten() {
            non_resource
                .entry(url.clone())
                .or_default()
                .extend(r.verbs.iter().cloned());
        }
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
    let mut out: Vec<PolicyRule> = merged
        .into_iter()
        .map(|((g, verbs, names), resources)| PolicyRule {
            api_groups: Some(vec![g]),
            resources: Some(resources.into_iter().collect()),
            resource_names: (!names.is_empty()).then_some(names),
            verbs,
            non_resource_urls: None,
        })
        .collect();
    out.extend(non_resource.into_iter().map(|(url, verbs)| PolicyRule {
        non_resource_urls: Some(vec![url]),
        verbs: verbs.into_iter().collect(),
        ..Default::default()
    }));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn normalize_merges_resources_and_keeps_non_resource_rules() {
        let rules = normalize(vec![
            rule("apps", &["deployments"], &["get"]),
            rule("apps", &["deployments"], &["list"]),
            rule("apps", &["daemonsets"], &["get", "list"]),
            PolicyRule {
                non_resource_urls: Some(vec!["/metrics".into()]),
                verbs: vec!["get".into()],
                ..Default::default()
            },
        ]);
        assert_eq!(rules.len(), 2, "{rules:?}");
        assert_eq!(
            rules[0].resources.as_deref(),
            Some(&["daemonsets".to_string(), "deployments".to_string()][..])
        );
        assert_eq!(
            rules[1].non_resource_urls.as_deref(),
            Some(&["/metrics".to_string()][..])
        );
    }

    #[test]
    fn rules_survive_their_yaml() {
        let rules = Rules {
            cluster: vec![rule("", &["namespaces"], &["list"])],
            namespaced: vec![rule("", &["secrets"], MANAGE)],
            cluster_per_namespace: vec![named(
                "admissionregistration.k8s.io",
                "mutatingwebhookconfigurations",
                &["cache-webhook-{namespace}".into()],
                &["delete"],
            )],
            creates: vec![Creates {
                group: String::new(),
                resource: "namespaces".into(),
                names: vec!["istio-system".into()],
            }],
            labelled: vec![Creates {
                group: "kubeflow.org".into(),
                resource: "profiles".into(),
                names: Vec::new(),
            }],
            pins: Some(pins::Pins {
                resources: vec![pins::Matched {
                    group: "rbac.authorization.k8s.io".into(),
                    resource: "roles".into(),
                    delete: true,
                }],
                variables: vec![pins::Variable {
                    name: "roleRules".into(),
                    expression: "{'a': ['|pods|get||']}".into(),
                }],
                validations: vec![pins::Check {
                    expression: "object.metadata.name in variables.roleRules".into(),
                    message: "only the bundles' roles".into(),
                }],
            }),
        };
        let text = rules.to_yaml().expect("yaml");
        let back: Rules = serde_saphyr::from_str(&text).expect("parse");
        assert_eq!(back, rules);
    }
}
