//! Whether rules allow what applying objects takes: the check behind the
//! operators' permission tests, evaluated the way the API server's RBAC
//! authorizer and its escalation check do. A wildcard matches only a
//! wildcard: the rules held are the bundles' own, copied as they are.

use std::collections::BTreeSet;

use k8s_openapi::api::rbac::v1::PolicyRule;
use kube::api::DynamicObject;

use super::derive::{crd_plurals, resource_of, role_ref, role_rules};
use super::{BY_NAME, MANAGE, RBAC_GROUP, Rules, UNNAMED};
use crate::base::kinds::{self, kind};

/// What applying `objects` (in allowed namespaces) needs that `rules` do not
/// grant at the scope they are granted, one line each.
pub fn missing(rules: &Rules, objects: &[DynamicObject]) -> Vec<String> {
    let plurals = crd_plurals(objects);
    let cluster_custom = kinds::cluster_scoped_custom_kinds(objects);
    // Namespaced requests are allowed by the Role and by cluster-wide rules.
    let mut in_namespace = rules.namespaced.clone();
    in_namespace.extend(rules.cluster.iter().cloned());
    let cluster_wide = rules.cluster.clone();
    let mut out = BTreeSet::new();
    for o in objects {
        let Some((group, plural)) = resource_of(o, &plurals) else {
            continue;
        };
        let name = o.metadata.name.clone().unwrap_or_default();
        if kinds::is_cluster_scoped(o, &cluster_custom) {
            for verb in UNNAMED {
                if !allows(&rules.cluster, &group, &plural, verb) {
                    out.insert(format!("{verb} {plural}.{group}"));
                }
            }
            for verb in BY_NAME {
                if !allows_named(&rules.cluster, &group, &plural, verb, &name) {
                    out.insert(format!("{verb} {plural}.{group}/{name}"));
                }
            }
            let created = rules
                .creates
                .iter()
                .any(|c| c.group == group && c.resource == plural && c.names.contains(&name))
                || rules
                    .labelled
                    .iter()
                    .any(|c| c.group == group && c.resource == plural);
            if !created {
                out.insert(format!("create {plural}.{group}/{name} (admission policy)"));
            }
        } else {
            for verb in MANAGE {
                if !allows(&in_namespace, &group, &plural, verb) {
                    out.insert(format!("{verb} {plural}.{group} in its namespace"));
                }
            }
        }
        let scope = if kinds::is_cluster_scoped(o, &cluster_custom) {
            &cluster_wide
        } else {
            &in_namespace
        };
        out.extend(grant_gap(o, scope, objects));
    }
    out.into_iter().collect()
}

/// What granting a role object or binding one takes that `scope` (the rules
/// at the object's scope) lacks: `escalate` or the role's rules to create a
/// role, `bind` or the role's rules to bind one.
fn grant_gap(o: &DynamicObject, scope: &[PolicyRule], objects: &[DynamicObject]) -> Option<String> {
    let name = o.metadata.name.clone().unwrap_or_default();
    let aggregated =
        |r: &DynamicObject| r.data.get("aggregationRule").is_some_and(|a| !a.is_null());
    match kind(o) {
        "ClusterRole" | "Role" => {
            let resource = if kind(o) == "Role" {
                "roles"
            } else {
                "clusterroles"
            };
            let escalate = allows_named(scope, RBAC_GROUP, resource, "escalate", &name);
            let held = !aggregated(o) && role_rules(o).iter().all(|r| covers(scope, r));
            (!escalate && !held).then(|| format!("escalate {resource}/{name} (or hold its rules)"))
        }
        "ClusterRoleBinding" | "RoleBinding" => {
            let (resource, role) = role_ref(o)?;
            let bind = allows_named(scope, RBAC_GROUP, resource, "bind", &role);
            // A binding to a role of the objects is allowed by holding that role's rules.
            let held = objects.iter().any(|r| {
                r.metadata.name.as_deref() == Some(role.as_str())
                    && (kind(r) == "Role") == (resource == "roles")
                    && matches!(kind(r), "Role" | "ClusterRole")
                    && !aggregated(r)
                    && role_rules(r).iter().all(|x| covers(scope, x))
            });
            (!bind && !held).then(|| format!("bind {resource}/{role}"))
        }
        _ => None,
    }
}

/// Whether `held` grants everything `wanted` grants.
pub fn covers(held: &[PolicyRule], wanted: &PolicyRule) -> bool {
    if let Some(urls) = &wanted.non_resource_urls {
        return urls.iter().all(|url| {
            wanted.verbs.iter().all(|verb| {
                held.iter().any(|h| {
                    h.non_resource_urls
                        .as_ref()
                        .is_some_and(|us| us.contains(url))
                        && h.verbs.contains(verb)
                })
            })
        });
    }
    let groups = wanted.api_groups.clone().unwrap_or_default();
    let resources = wanted.resources.clone().unwrap_or_default();
    groups.iter().all(|g| {
        resources.iter().all(|res| {
            wanted
                .verbs
                .iter()
                .all(|verb| match &wanted.resource_names {
                    Some(names) if !names.is_empty() => {
                        names.iter().all(|n| allows_named(held, g, res, verb, n))
                    }
                    _ => allows(held, g, res, verb),
                })
        })
    })
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
            .is_none_or(|ns| ns.is_empty() || ns.iter().any(|n| n == name))
            && grants_verb(r, group, resource, verb)
    })
}

/// Whether the rules allow `verb` on every object of `resource` in `group`.
pub fn allows(rules: &[PolicyRule], group: &str, resource: &str, verb: &str) -> bool {
    rules.iter().any(|r| {
        r.resource_names.as_ref().is_none_or(Vec::is_empty) && grants_verb(r, group, resource, verb)
    })
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

#[cfg(test)]
mod tests {
    use super::super::{bundle_rules, rule};
    use super::*;

    fn obj(yaml: &str) -> DynamicObject {
        serde_saphyr::from_str(yaml).expect("object")
    }

    fn wildcard_free(rules: &[PolicyRule]) {
        for r in rules {
            for field in [r.api_groups.as_ref(), r.resources.as_ref()]
                .into_iter()
                .flatten()
            {
                assert!(!field.iter().any(|x| x == "*"), "wildcard in {r:?}");
            }
            assert!(!r.verbs.iter().any(|v| v == "*"), "wildcard in {r:?}");
        }
    }

    #[test]
    fn namespaced_kinds_go_to_the_role_and_cluster_kinds_are_named() {
        let objects = vec![
            obj(
                "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: d, namespace: kubeflow}\n",
            ),
            obj("apiVersion: v1\nkind: Secret\nmetadata: {name: s, namespace: kubeflow}\n"),
            obj(
                "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata: {name: gateways.networking.istio.io}\nspec: {group: networking.istio.io, scope: Namespaced, names: {kind: Gateway, plural: gateways}}\n",
            ),
            obj(
                "apiVersion: networking.istio.io/v1\nkind: Gateway\nmetadata: {name: g, namespace: istio-system}\n",
            ),
        ];
        let rules = bundle_rules(&objects);
        assert!(allows(&rules.namespaced, "apps", "deployments", "patch"));
        assert!(allows(&rules.namespaced, "", "secrets", "get"));
        assert!(!allows(&rules.cluster, "", "secrets", "get"));
        assert!(!allows(&rules.cluster, "apps", "deployments", "create"));
        assert!(allows(
            &rules.namespaced,
            "networking.istio.io",
            "gateways",
            "watch"
        ));
        let crds = "customresourcedefinitions";
        assert!(allows(
            &rules.cluster,
            "apiextensions.k8s.io",
            crds,
            "create"
        ));
        assert!(!allows(
            &rules.cluster,
            "apiextensions.k8s.io",
            crds,
            "delete"
        ));
        assert!(allows_named(
            &rules.cluster,
            "apiextensions.k8s.io",
            crds,
            "delete",
            "gateways.networking.istio.io"
        ));
        assert!(!allows_named(
            &rules.cluster,
            "apiextensions.k8s.io",
            crds,
            "patch",
            "someone-elses.example.com"
        ));
        assert_eq!(rules.creates.len(), 1);
        assert_eq!(rules.creates[0].names, ["gateways.networking.istio.io"]);
        assert_eq!(missing(&rules, &objects), Vec::<String>::new());
    }

    #[test]
    fn roles_are_escalated_and_bound_by_name_never_held() {
        let objects = vec![
            obj(
                "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata: {name: controller}\nrules:\n- apiGroups: ['']\n  resources: [secrets]\n  verbs: [get, list]\n",
            ),
            obj(
                "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\nmetadata: {name: controller}\nroleRef: {kind: ClusterRole, name: controller}\n",
            ),
            obj(
                "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata: {name: everything}\nrules:\n- apiGroups: ['*']\n  resources: ['*']\n  verbs: [get]\n",
            ),
            obj(
                "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata: {name: aggregate}\naggregationRule:\n  clusterRoleSelectors: [{matchLabels: {a: 'true'}}]\nrules: []\n",
            ),
            obj(
                "apiVersion: rbac.authorization.k8s.io/v1\nkind: Role\nmetadata: {name: leader, namespace: kubeflow}\nrules:\n- apiGroups: [coordination.k8s.io]\n  resources: [leases]\n  verbs: [get, update]\n",
            ),
            obj(
                "apiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\nmetadata: {name: b, namespace: kubeflow}\nroleRef: {kind: ClusterRole, name: view}\n",
            ),
        ];
        let rules = bundle_rules(&objects);
        // The operator holds none of the roles' rules: not the Secrets the
        // controller reads, nor the Leases of the Role.
        assert!(!allows(&rules.all(), "", "secrets", "get"));
        assert!(!allows(
            &rules.all(),
            "coordination.k8s.io",
            "leases",
            "update"
        ));
        let verbs_on = |set: &[PolicyRule], name: &str| -> Vec<String> {
            set.iter()
                .filter(|r| {
                    r.resource_names
                        .as_ref()
                        .is_some_and(|n| n.iter().any(|x| x == name))
                        && r.verbs.iter().any(|v| v == "escalate" || v == "bind")
                })
                .flat_map(|r| r.verbs.clone())
                .filter(|v| v == "escalate" || v == "bind")
                .collect()
        };
        assert_eq!(verbs_on(&rules.cluster, "controller"), ["bind", "escalate"]);
        assert_eq!(verbs_on(&rules.cluster, "everything"), ["escalate"]);
        assert_eq!(verbs_on(&rules.cluster, "aggregate"), ["escalate"]);
        // A Role's `escalate` is granted where it lives, never cluster-wide.
        assert_eq!(verbs_on(&rules.namespaced, "leader"), ["escalate"]);
        assert!(verbs_on(&rules.cluster, "leader").is_empty());
        // A binding to a role outside the bundle needs `bind` on exactly that role.
        assert_eq!(verbs_on(&rules.cluster, "view"), ["bind"]);
        wildcard_free(&rules.cluster);
        wildcard_free(&rules.namespaced);
        assert_eq!(missing(&rules, &objects), Vec::<String>::new());

        // Without `escalate` on it, the role is a gap.
        let without = Rules {
            cluster: rules
                .cluster
                .iter()
                .filter(|r| !r.verbs.iter().any(|v| v == "escalate"))
                .cloned()
                .collect(),
            ..rules.clone()
        };
        let gaps = missing(&without, &objects);
        assert!(
            gaps.contains(&"escalate clusterroles/controller (or hold its rules)".to_string()),
            "{gaps:?}"
        );
        let more = vec![obj(
            "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\nmetadata: {name: b}\nroleRef: {kind: ClusterRole, name: cluster-admin}\n",
        )];
        let gaps = missing(&rules, &more);
        assert!(
            gaps.contains(&"bind clusterroles/cluster-admin".to_string()),
            "{gaps:?}"
        );
        assert!(
            gaps.contains(&"patch clusterrolebindings.rbac.authorization.k8s.io/b".to_string()),
            "{gaps:?}"
        );
    }

    #[test]
    fn covers_checks_every_group_resource_verb_and_name() {
        let held = vec![
            rule("", &["pods", "services"], &["get", "list"]),
            super::super::named("", "configmaps", &["a".into()], &["get"]),
        ];
        assert!(covers(&held, &rule("", &["pods"], &["get"])));
        assert!(!covers(&held, &rule("", &["pods"], &["delete"])));
        assert!(!covers(&held, &rule("", &["configmaps"], &["get"])));
        assert!(covers(
            &held,
            &super::super::named("", "configmaps", &["a".into()], &["get"])
        ));
        assert!(!covers(
            &held,
            &super::super::named("", "configmaps", &["b".into()], &["get"])
        ));
    }
}
