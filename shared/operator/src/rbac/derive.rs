//! An operator's rules, derived from the objects its bundles hold.
//!
//! Granting a role takes either every permission the role holds (at the
//! scope of the grant) or the `escalate` (create/update the role) and `bind`
//! (bind it) verbs. `escalate` on a role lets its holder put any rule into it,
//! and `bind` lets it bind the role to itself: together they are
//! cluster-admin. So every role is held as it is (`grants` for ClusterRoles,
//! `namespaced_grants` for Roles, wildcards within one API group included:
//! Istio's read-all-of-Istio rules), which lets the operator create and
//! repair it without `escalate`. It still gets `bind` on the names its
//! bindings refer to: the engine dry-runs every object before it writes,
//! when a bundle's role may not exist yet, and without `bind` the API server
//! looks the role up to compare rules and answers NotFound. `bind` on a role
//! whose rules the operator holds and may not widen adds nothing to what it
//! holds. Only a ClusterRole with a rule on every resource of every group
//! would get `escalate` on its name (no bundle has one). A ClusterRole with an
//! `aggregationRule` needs `escalate` whatever it holds (the API server asks
//! cluster-admin rights of anyone else).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use k8s_openapi::api::rbac::v1::PolicyRule;
use kube::api::{ApiResource, DynamicObject};
use kube::core::GroupVersionKind;

use super::{
    BY_NAME, Creates, MANAGE, Permissions, RBAC_GROUP, READ, Rules, UNNAMED, claim_role, named,
    normalize, own_kind, rule,
};
use crate::bundle::{self, BundleError};
use crate::kinds::{self, kind};

/// The rules of a component operator: its bundles' (every version), its own
/// kind's, the engine's and its code's.
pub fn component_rules(
    manifests_dir: &Path,
    component: &str,
    own: (&str, &str),
    permissions: &Permissions,
) -> Result<Rules, BundleError> {
    let mut objects = Vec::new();
    for folder in &permissions.bundles {
        let dir = manifests_dir.join(folder);
        for version in bundle::available_versions(&dir) {
            objects.extend(bundle::load(manifests_dir, folder, &version)?.objects());
        }
    }
    if let Some(kinds) = &permissions.only_kinds {
        objects.retain(|o| kinds.iter().any(|k| k == kind(o)));
    }
    let mut rules = bundle_rules(&objects);
    // Every component operator writes ClusterRoles (its claim role at
    // least): what RBAC cannot limit of them is pinned by admission.
    rules.pins = Some(super::pins::pins(&objects));
    rules.cluster.extend(own_kind(own.0, own.1));
    // The engine claims a component's cluster scope by creating, reading,
    // taking over and finally deleting one empty ClusterRole.
    let claim = claim_role(component);
    rules.cluster.push(named(
        RBAC_GROUP,
        "clusterroles",
        std::slice::from_ref(&claim),
        &["delete", "get", "update"],
    ));
    rules
        .cluster
        .push(rule(RBAC_GROUP, &["clusterroles"], &["create"]));
    add_creates(&mut rules.creates, RBAC_GROUP, "clusterroles", [claim]);
    // CRDs are read to wait for Established, to check a dependency is
    // installed and to check for user data before cleanup.
    rules.cluster.push(rule(
        "apiextensions.k8s.io",
        &["customresourcedefinitions"],
        READ,
    ));
    // Pods are read to say why a workload is not available; the ConfigMaps
    // a CR names (`imageDigests`, `overridesConfigMap`) are read where the
    // CR is, and watched (metadata only) so an edit reconciles at once.
    rules.namespaced.push(rule("", &["pods"], &["get", "list"]));
    rules
        .namespaced
        .push(rule("", &["configmaps"], &["get", "list", "watch"]));
    // Events on the component CR: refusals, repairs, prunes, upgrades,
    // readiness, what a prune or a removal kept and why.
    rules
        .namespaced
        .push(rule("events.k8s.io", &["events"], &["create", "patch"]));
    rules.cluster.extend(permissions.extra.iter().cloned());
    rules
        .namespaced
        .extend(permissions.extra_namespaced.iter().cloned());
    rules.cluster = normalize(std::mem::take(&mut rules.cluster));
    rules.namespaced = normalize(std::mem::take(&mut rules.namespaced));
    Ok(rules)
}

/// Plurals of the kinds the objects' CRDs define, by (group, kind).
type Plurals = BTreeMap<(String, String), String>;

pub(super) fn crd_plurals(objects: &[DynamicObject]) -> Plurals {
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
pub(super) fn resource_of(o: &DynamicObject, plurals: &Plurals) -> Option<(String, String)> {
    let types = o.types.as_ref()?;
    let group = kinds::group_of(&types.api_version).to_string();
    let plural = plurals
        .get(&(group.clone(), types.kind.clone()))
        .cloned()
        .unwrap_or_else(|| {
            ApiResource::from_gvk(&GroupVersionKind::gvk(&group, "v1", &types.kind)).plural
        });
    Some((group, plural))
}

/// The rules a role object holds.
pub(super) fn role_rules(o: &DynamicObject) -> Vec<PolicyRule> {
    serde_json::from_value(o.data["rules"].clone()).unwrap_or_default()
}

/// Whether a role has a rule on every resource of every API group: holding
/// it would make the operator cluster-admin outright.
fn unbounded(rules: &[PolicyRule]) -> bool {
    let star = |xs: Option<&Vec<String>>| xs.is_some_and(|xs| xs.iter().any(|x| x == "*"));
    rules
        .iter()
        .any(|r| star(r.api_groups.as_ref()) && star(r.resources.as_ref()))
}

/// How the operator may create or update a role of the bundles.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Grant {
    /// It holds the role's rules.
    Held,
    /// The ClusterRole reaches every resource: `escalate` on its name.
    EscalateAndBind,
    /// The role aggregates others: `escalate` on its name.
    Escalate,
}

/// Per role (resource, name), over every version: how it is granted.
pub(super) fn grants_by_role(objects: &[DynamicObject]) -> BTreeMap<(&'static str, String), Grant> {
    let mut out: BTreeMap<(&'static str, String), Grant> = BTreeMap::new();
    for o in objects {
        let resource = match kind(o) {
            "ClusterRole" => "clusterroles",
            "Role" => "roles",
            _ => continue,
        };
        let grant = if resource == "clusterroles" && unbounded(&role_rules(o)) {
            Grant::EscalateAndBind
        } else if o.data.get("aggregationRule").is_some_and(|a| !a.is_null()) {
            Grant::Escalate
        } else {
            Grant::Held
        };
        let name = o.metadata.name.clone().unwrap_or_default();
        let slot = out.entry((resource, name)).or_insert(grant);
        // The least held version decides (a wildcard in any version needs the verbs).
        if *slot == Grant::Held || grant == Grant::EscalateAndBind {
            *slot = grant;
        }
    }
    out
}

/// The role a binding refers to, as (resource, name).
pub(super) fn role_ref(o: &DynamicObject) -> Option<(&'static str, String)> {
    if !matches!(kind(o), "ClusterRoleBinding" | "RoleBinding") {
        return None;
    }
    let r = &o.data["roleRef"];
    let resource = if r["kind"].as_str() == Some("Role") {
        "roles"
    } else {
        "clusterroles"
    };
    Some((resource, r["name"].as_str()?.to_string()))
}

fn add_creates(
    creates: &mut Vec<Creates>,
    group: &str,
    resource: &str,
    names: impl IntoIterator<Item = String>,
) {
    let at = match creates
        .iter()
        .position(|c| c.group == group && c.resource == resource)
    {
        Some(i) => i,
        None => {
            creates.push(Creates {
                group: group.into(),
                resource: resource.into(),
                names: vec![],
            });
            creates.len() - 1
        }
    };
    let entry = &mut creates[at];
    let mut all: BTreeSet<String> = entry.names.drain(..).collect();
    all.extend(names);
    entry.names = all.into_iter().collect();
    creates.sort();
}

/// Rules to manage exactly the given objects: namespaced kinds (for the
/// allowed namespaces), cluster-scoped kinds by name, the custom resources of
/// the CRDs among them listed, and their roles granted.
pub fn bundle_rules(objects: &[DynamicObject]) -> Rules {
    let plurals = crd_plurals(objects);
    let cluster_custom = kinds::cluster_scoped_custom_kinds(objects);
    let mut rules = Rules::default();
    for ((group, _), plural) in &plurals {
        // Cleanup lists custom resources to tell whether a CRD holds user data.
        rules.cluster.push(rule(group, &[plural], &["list"]));
    }
    let grants = grants_by_role(objects);
    let mut by_name: BTreeMap<(String, String), BTreeSet<String>> = BTreeMap::new();
    for o in objects {
        let Some((group, plural)) = resource_of(o, &plurals) else {
            continue;
        };
        let name = o.metadata.name.clone().unwrap_or_default();
        if kinds::is_cluster_scoped(o, &cluster_custom) {
            rules.cluster.push(rule(&group, &[&plural], UNNAMED));
            by_name
                .entry((group, plural))
                .or_default()
                .insert(name.clone());
        } else {
            rules.namespaced.push(rule(&group, &[&plural], MANAGE));
        }
        match kind(o) {
            "ClusterRole" if grants.get(&("clusterroles", name.clone())) == Some(&Grant::Held) => {
                rules.grants.extend(role_rules(o));
            }
            "Role" if grants.get(&("roles", name.clone())) == Some(&Grant::Held) => {
                rules.namespaced_grants.extend(role_rules(o));
            }
            _ => {}
        }
        if let Some((resource, role)) = role_ref(o) {
            let bind = named(RBAC_GROUP, resource, &[role], &["bind"]);
            match resource {
                "roles" => rules.namespaced.push(bind),
                _ => rules.cluster.push(bind),
            }
        }
    }
    for ((resource, name), grant) in &grants {
        let verbs: &[&str] = match grant {
            Grant::Held => continue,
            Grant::Escalate | Grant::EscalateAndBind => &["escalate"],
        };
        let r = named(RBAC_GROUP, resource, std::slice::from_ref(name), verbs);
        match *resource {
            "roles" => rules.namespaced.push(r),
            _ => rules.cluster.push(r),
        }
    }
    for ((group, plural), names) in by_name {
        let names: Vec<String> = names.into_iter().collect();
        rules.cluster.push(named(&group, &plural, &names, BY_NAME));
        add_creates(&mut rules.creates, &group, &plural, names);
    }
    rules.cluster = normalize(rules.cluster);
    rules.namespaced = normalize(rules.namespaced);
    rules.grants = normalize(rules.grants);
    rules.namespaced_grants = normalize(rules.namespaced_grants);
    rules
}
