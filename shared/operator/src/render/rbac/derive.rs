//! An operator's rules, derived from the objects its bundles hold.
//!
//! Granting a role takes either every permission the role holds (at the
//! scope of the grant) or the `escalate` (create/update the role) and `bind`
//! (bind it) verbs. Holding the rules would make each operator as powerful
//! as the controllers it installs (Secrets and pods in every namespace, for
//! most): whoever got its token would be a cluster administrator. So the
//! operator holds none of them: it gets `escalate` on exactly the names of
//! the bundles' roles and `bind` on exactly the roles their bindings name,
//! and the chart's admission policy (see `pins`) admits a write of those
//! roles and bindings only with the bundles' own rules, `roleRef` and
//! subjects. `escalate` alone would let it put any rule into those roles;
//! with the pins it can write only what the bundles say.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use k8s_openapi::api::rbac::v1::PolicyRule;
use kube::api::{ApiResource, DynamicObject};
use kube::core::GroupVersionKind;

use super::{
    BY_NAME, Creates, MANAGE, Permissions, RBAC_GROUP, READ, Rules, UNNAMED, claim_role, named,
    normalize, own_kind, rule,
};
use crate::base::bundle::{self, BundleError};
use crate::base::kinds::{self, kind};

/// The rules of a component operator: its bundles' (every version), its own
/// kind's, the engine's and its code's.
pub fn component_rules(
    manifests_dir: &Path,
    component: &str,
    own: (&str, &str),
    permissions: &Permissions,
) -> Result<Rules, BundleError> {
    let objects = applied_objects(manifests_dir, permissions)?;
    let mut rules = bundle_rules(&objects);
    // The engine claims a component's cluster scope by creating, reading,
    // taking over and finally deleting one empty ClusterRole.
    let claim = claim_role(component);
    // Every component operator writes ClusterRoles (its claim role at
    // least): what RBAC cannot limit of its writes is pinned by admission.
    rules.pins = Some(super::pins::pins(
        &objects,
        &super::pins::Extra {
            claim_role: &claim,
            sccs: &permissions.sccs,
            workload_suffix: permissions.workload_suffix.as_deref(),
            component,
            labelled: &permissions.labelled,
            tenant_roles: &permissions.tenant_roles,
        },
    ));
    // The kinds written beyond the bundles, which the pins keep to the
    // component's own objects.
    for (group, resource) in &permissions.labelled {
        rules
            .cluster
            .push(rule(group, &[resource.as_str()], MANAGE));
        rules.labelled.push(Creates {
            group: group.clone(),
            resource: resource.clone(),
            names: Vec::new(),
        });
    }
    add_every_operators(&mut rules, own, claim);
    rules.cluster.extend(permissions.extra.iter().cloned());
    rules.cluster_per_namespace = permissions.extra_per_namespace.clone();
    // The target namespace's Pod Security label is read before an apply.
    rules.cluster_per_namespace.push(named(
        "",
        "namespaces",
        &["{namespace}".to_string()],
        &["get"],
    ));
    rules
        .namespaced
        .extend(permissions.extra_namespaced.iter().cloned());
    rules.cluster = normalize(std::mem::take(&mut rules.cluster));
    rules.namespaced = normalize(std::mem::take(&mut rules.namespaced));
    Ok(rules)
}

/// Every object of every version the operator may apply: its bundles'
/// (as it adjusts them), the objects it adds, the kinds it takes of others.
fn applied_objects(
    manifests_dir: &Path,
    permissions: &Permissions,
) -> Result<Vec<DynamicObject>, BundleError> {
    let mut objects = Vec::new();
    for folder in &permissions.bundles {
        let dir = manifests_dir.join(folder);
        for version in bundle::available_versions(&dir) {
            let mut version_objects = bundle::load(manifests_dir, folder, &version)?.objects();
            if let Some(adjust) = permissions.adjust {
                adjust(&mut version_objects);
            }
            objects.extend(version_objects);
        }
    }
    objects.extend(permissions.objects.iter().cloned());
    if let Some(kinds) = &permissions.only_kinds {
        objects.retain(|o| kinds.iter().any(|k| k == kind(o)));
    }
    for (folder, kinds) in &permissions.partial {
        let dir = manifests_dir.join(folder);
        for version in bundle::available_versions(&dir) {
            objects.extend(
                bundle::load(manifests_dir, folder, &version)?
                    .objects()
                    .into_iter()
                    .filter(|o| kinds.iter().any(|k| k == kind(o))),
            );
        }
    }
    Ok(objects)
}

/// What every component operator does beyond its bundles: its own kind,
/// the claim of its cluster scope (`claim`), CRDs read, Pods and the
/// ConfigMaps a resource names read, Events written.
fn add_every_operators(rules: &mut Rules, own: (&str, &str), claim: String) {
    rules.cluster.extend(own_kind(own.0, own.1));
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

/// The roles of the objects, as (resource, name), every version's.
pub(super) fn roles(objects: &[DynamicObject]) -> BTreeSet<(&'static str, String)> {
    objects
        .iter()
        .filter_map(|o| {
            let resource = match kind(o) {
                "ClusterRole" => "clusterroles",
                "Role" => "roles",
                _ => return None,
            };
            Some((resource, o.metadata.name.clone().unwrap_or_default()))
        })
        .collect()
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
/// the CRDs among them listed, `escalate` on their roles' names and `bind`
/// on the roles their bindings name (the contents pinned by admission).
pub fn bundle_rules(objects: &[DynamicObject]) -> Rules {
    let plurals = crd_plurals(objects);
    let cluster_custom = kinds::cluster_scoped_custom_kinds(objects);
    let mut rules = Rules::default();
    for ((group, _), plural) in &plurals {
        // Cleanup lists custom resources to tell whether a CRD holds user data.
        rules.cluster.push(rule(group, &[plural], &["list"]));
    }
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
        if let Some((resource, role)) = role_ref(o) {
            let bind = named(RBAC_GROUP, resource, &[role], &["bind"]);
            match resource {
                "roles" => rules.namespaced.push(bind),
                _ => rules.cluster.push(bind),
            }
        }
    }
    for (resource, name) in roles(objects) {
        let r = named(
            RBAC_GROUP,
            resource,
            std::slice::from_ref(&name),
            &["escalate"],
        );
        match resource {
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
    rules
}
