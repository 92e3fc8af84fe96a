//! The Dashboard's tenant access (bindings and AuthorizationPolicies of
//! its own label in profile namespaces, Profiles owned by people) and the
//! kinds an operator writes beyond its bundles, held to its label.

use super::cel::{check, list, quote};
use super::{Check, Extra};

/// Whether `of` (object or oldObject) carries the component's label.
pub(super) fn ours(of: &str, component: &str) -> String {
    format!(
        "(has({of}.metadata.labels) && {key} in {of}.metadata.labels && {of}.metadata.labels[{key}] == {c})",
        key = quote(crate::base::labels::COMPONENT),
        c = quote(component)
    )
}

/// The label the profile controller gives each profile's namespace (from
/// its namespace-labels configuration, the same in both releases).
const PROFILE_NAMESPACE_LABEL: (&str, &str) = ("app.kubernetes.io/part-of", "kubeflow-profile");

/// Whether the request's namespace is a Kubeflow profile's.
pub(super) fn profile_namespace() -> String {
    let (k, v) = PROFILE_NAMESPACE_LABEL;
    format!(
        "(namespaceObject != null && has(namespaceObject.metadata.labels) && {k} in namespaceObject.metadata.labels && \
         namespaceObject.metadata.labels[{k}] == {v})",
        k = quote(k),
        v = quote(v)
    )
}

/// A RoleBinding the code writes in a profile namespace: its own label,
/// one of `roles`, and only people and groups, none Kubernetes' own (a
/// User named `system:serviceaccount:...` is a ServiceAccount, and
/// `system:serviceaccounts` or `system:authenticated` everyone of a kind).
pub(super) fn tenant_binding(extra: &Extra<'_>) -> String {
    if extra.tenant_roles.is_empty() {
        return String::new();
    }
    format!(
        " || ({} && {} && object.roleRef.kind == 'ClusterRole' && object.roleRef.name in {} && \
         has(object.subjects) && size(object.subjects) > 0 && \
         object.subjects.all(s, (s.kind == 'User' || s.kind == 'Group') && !s.name.startsWith('system:')))",
        ours("object", extra.component),
        profile_namespace(),
        list(extra.tenant_roles)
    )
}

/// What the code may delete of tenant access: its own, in profile namespaces.
pub(super) fn tenant_delete(extra: &Extra<'_>) -> String {
    format!(
        "{} && {}",
        ours("oldObject", extra.component),
        profile_namespace()
    )
}

/// The pins of tenant access besides the bindings': AuthorizationPolicies
/// only of the component's label, in profile namespaces, only ALLOW (a
/// DENY would lock the namespace's people out, a CUSTOM send its requests
/// to another authorizer); and a Profile only for a person (the profile
/// controller makes its owner the namespace's admin, so an owner named
/// after the operator's ServiceAccount would hand the operator that).
pub(super) fn tenant(extra: &Extra<'_>) -> Vec<Check> {
    if extra.tenant_roles.is_empty() {
        return Vec::new();
    }
    // In the allowed namespaces the bundles' own policies are written as
    // any namespaced kind there is (the Role grants them).
    let policy = format!(
        "request.namespace in variables.allowedNamespaces || ({} && {} && \
         (!has(object.spec) || ((!has(object.spec.action) || object.spec.action == 'ALLOW') && !has(object.spec.provider))))",
        ours("object", extra.component),
        profile_namespace()
    );
    vec![
        check(
            &["authorizationpolicies"],
            policy,
            "outside the allowed namespaces, the operator may write only AuthorizationPolicies of its own label, ALLOW ones, in Kubeflow profile namespaces",
        ),
        Check {
            expression: format!(
                "request.operation != 'DELETE' || request.resource.resource != 'authorizationpolicies' || \
                 request.namespace in variables.allowedNamespaces || ({})",
                tenant_delete(extra)
            ),
            message: "outside the allowed namespaces, the operator may delete only its own AuthorizationPolicies in Kubeflow profile namespaces".into(),
        },
        check(
            &["profiles"],
            "!has(object.spec) || !has(object.spec.owner) || \
             (object.spec.owner.kind == 'User' && !object.spec.owner.name.startsWith('system:'))"
                .to_string(),
            "the operator may make a Profile's owner only a person (kind User, no system: name)",
        ),
    ]
}

/// Objects of the kinds the code writes beyond the bundles: created only
/// with the component's label, changed or deleted only when they carry it.
pub(super) fn labelled(extra: &Extra<'_>) -> Option<Check> {
    if extra.labelled.is_empty() {
        return None;
    }
    let ours = |of: &str| ours(of, extra.component);
    let guard: Vec<String> = extra
        .labelled
        .iter()
        .map(|(_, r)| format!("request.resource.resource != {}", quote(r)))
        .collect();
    Some(Check {
        expression: format!(
            "({}) || \
             ((request.operation == 'DELETE' || request.operation == 'UPDATE' || {}) && \
             (request.operation == 'CREATE' || {}))",
            guard.join(" && "),
            ours("object"),
            ours("oldObject")
        ),
        message: format!(
            "the operator may create only objects labelled {}={} of the kinds it writes beyond its bundles, and change or delete only those already labelled so",
            crate::base::labels::COMPONENT,
            extra.component
        ),
    })
}
