//! Roles and bindings: only the bundles' names, rules, selectors,
//! aggregation labels, role references and subjects.

use super::bundled::Bundled;
use super::cel::{check, empty, list, quote};
use super::tenant::tenant_binding;
use super::{Check, Extra, RULE_KEY};

/// The checks of ClusterRoles, Roles, ClusterRoleBindings and RoleBindings.
pub(super) fn checks(b: &Bundled, extra: &Extra<'_>) -> Vec<Check> {
    let mut out = role_checks(b);
    out.extend(binding_checks(extra));
    out
}

/// What a ClusterRole's aggregationRule may select: the bundles' selectors,
/// each on its own role.
fn allowed_selector(b: &Bundled) -> String {
    let selector_clauses: Vec<String> = b
        .selectors
        .iter()
        .map(|(name, m)| {
            let pairs: Vec<String> = m
                .iter()
                .map(|(k, v)| format!("{}: {}", quote(k), quote(v)))
                .collect();
            format!(
                "(object.metadata.name == {} && s.matchLabels == {{{}}})",
                quote(name),
                pairs.join(", ")
            )
        })
        .collect();
    if selector_clauses.is_empty() {
        "false".to_string()
    } else {
        selector_clauses.join(" || ")
    }
}

/// The rules of the role being written are among those its bundles give
/// it (`var`: the variable holding them by role name).
fn rules_in(var: &str) -> String {
    format!(
        "{} || object.rules.all(r, ({RULE_KEY}) in variables.{var}[object.metadata.name])",
        empty("object.rules")
    )
}

/// The checks of ClusterRoles and Roles.
fn role_checks(b: &Bundled) -> Vec<Check> {
    let allowed_selector = allowed_selector(b);
    vec![
        check(
            &["clusterroles"],
            format!(
                "object.metadata.name in variables.clusterRoleRules && (has(object.aggregationRule) || {})",
                rules_in("clusterRoleRules")
            ),
            "the operator may write only its bundles' ClusterRoles, each with the rules the bundles give it",
        ),
        check(
            &["clusterroles"],
            format!(
                "!has(object.aggregationRule) || !has(object.aggregationRule.clusterRoleSelectors) || \
             object.aggregationRule.clusterRoleSelectors.all(s, \
             (!has(s.matchExpressions) || size(s.matchExpressions) == 0) && has(s.matchLabels) && \
             ({allowed_selector}))"
            ),
            "the operator may give a ClusterRole only the aggregationRule its bundles give it",
        ),
        check(
            &["clusterroles"],
            format!(
                "!has(object.metadata.labels) || type(object.metadata.labels) == null_type || \
             object.metadata.labels.all(k, !k.contains('aggregate-to-') || \
             (object.metadata.name + ' ' + k + '=' + object.metadata.labels[k]) in {})",
                list(&b.aggregation_labels)
            ),
            "the operator may set only the aggregation labels its bundles set",
        ),
        check(
            &["clusterroles"],
            format!(
                "!has(object.aggregationRule) || (oldObject == null ? {new} : \
             ({new} ? {old} : (has(oldObject.rules) && type(oldObject.rules) != null_type && object.rules == oldObject.rules)))",
                new = empty("object.rules"),
                old = empty("oldObject.rules"),
            ),
            "the operator may not write the rules of an aggregated ClusterRole (the aggregation controller does)",
        ),
        check(
            &["roles"],
            format!(
                "object.metadata.name in variables.roleRules && ({})",
                rules_in("roleRules")
            ),
            "the operator may write only its bundles' Roles, each with the rules the bundles give it",
        ),
    ]
}

/// The checks of ClusterRoleBindings and RoleBindings.
fn binding_checks(extra: &Extra<'_>) -> Vec<Check> {
    let subjects_in = |var: &str| {
        format!(
            "{} || object.subjects.all(s, (s.kind + '/' + s.name) in variables.{var}[object.metadata.name] && \
             (s.kind != 'ServiceAccount' || (has(s.namespace) && s.namespace in variables.allowedNamespaces)))",
            empty("object.subjects")
        )
    };
    vec![
        check(
            &["clusterrolebindings"],
            format!(
                "object.metadata.name in variables.clusterBindingRoles && \
             (object.roleRef.kind + '/' + object.roleRef.name) in variables.clusterBindingRoles[object.metadata.name] && ({})",
                subjects_in("clusterBindingSubjects")
            ),
            "the operator may write only its bundles' ClusterRoleBindings, with their roleRef and subjects (ServiceAccounts in the allowed namespaces)",
        ),
        check(
            &["rolebindings"],
            format!(
                "(object.metadata.name in variables.bindingRoles && \
             (object.roleRef.kind + '/' + object.roleRef.name) in variables.bindingRoles[object.metadata.name] && ({})) || \
             (object.roleRef.kind == 'ClusterRole' && object.roleRef.name.startsWith('system:openshift:scc:') && \
             object.roleRef.name.substring(21) in variables.sccs && has(object.subjects) && size(object.subjects) == 1 && \
             object.subjects[0].kind == 'ServiceAccount' && object.subjects[0].name in variables.serviceAccounts && \
             has(object.subjects[0].namespace) && object.subjects[0].namespace == object.metadata.namespace && \
             object.metadata.name == object.subjects[0].name + '-scc-' + object.roleRef.name.substring(21)){}",
                subjects_in("bindingSubjects"),
                tenant_binding(extra)
            ),
            if extra.tenant_roles.is_empty() {
                "the operator may write only its bundles' RoleBindings, with their roleRef and subjects (ServiceAccounts in the allowed namespaces), and SCC grants to its bundles' ServiceAccounts"
            } else {
                "the operator may write only its bundles' RoleBindings, with their roleRef and subjects (ServiceAccounts in the allowed namespaces), SCC grants to its bundles' ServiceAccounts, and RoleBindings of its own label binding people and groups (no ServiceAccount, no system: name) to the Kubeflow roles in profile namespaces"
            },
        ),
    ]
}
