//! The profile controller's rights: what it and KFAM (same ServiceAccount,
//! same pod) do to the API, instead of upstream's `cluster-admin`.
//!
//! Upstream binds `profiles-controller-service-account` to `cluster-admin`
//! by the ClusterRoleBinding `profiles-cluster-rolebinding`. That account
//! lives in the shared namespace, so whoever may run a pod there as it, or
//! steal its token, is a cluster administrator. The rules below are what
//! the two programs use at v1.10.0 and v2.0.0 (their API calls are the
//! same; v2.0.0 adds leader election, which the bundle's own namespaced
//! Role covers), read from their source and checked by running them as
//! that account on what this operator installs (docs/security.md):
//!
//! - a Profile's namespace made, relabelled, owned by the Profile (the
//!   garbage collector deletes it with the Profile, not the controller);
//! - in it, the ServiceAccounts `default-editor` and `default-viewer`
//!   (annotated by the AWS IAM plugin), the owner's and their RoleBindings,
//!   the owner's AuthorizationPolicy and the quota `kf-resource-quota`,
//!   all watched by the controller's cache cluster-wide;
//! - KFAM's contributors: RoleBindings and AuthorizationPolicies made and
//!   deleted, RoleBindings watched everywhere, Profiles made, read and
//!   deleted through its API;
//! - `bind` on the three Kubeflow roles those bindings name, so neither
//!   needs the roles' own rules;
//! - `profiles/finalizers`, because the owner references it sets block
//!   the Profile's deletion, which the API server lets only a writer of
//!   the owner's finalizers do.

use kubeflow_operator::kinds::kind;
use kubeflow_operator::kube::api::{ApiResource, DynamicObject};
use kubeflow_operator::kube::core::GroupVersionKind;
use serde_json::{Value, json};

/// Upstream's binding of the profile controller's ServiceAccount.
pub const BINDING: &str = "profiles-cluster-rolebinding";
/// The role upstream binds it to.
const UPSTREAM_ROLE: &str = "cluster-admin";
/// The ClusterRole this component binds it to instead.
pub const ROLE: &str = "kubeflow-profiles-controller";

/// One rule: API group, resources, verbs, names (none: every object).
type Rule = (
    &'static str,
    &'static [&'static str],
    &'static [&'static str],
    &'static [&'static str],
);

/// The rules of `ROLE`.
pub const RULES: &[Rule] = &[
    (
        "",
        &["namespaces", "serviceaccounts"],
        &["create", "get", "list", "update", "watch"],
        &[],
    ),
    (
        "",
        &["resourcequotas"],
        &["create", "delete", "get", "list", "update", "watch"],
        &[],
    ),
    (
        "rbac.authorization.k8s.io",
        &["rolebindings"],
        &["create", "delete", "get", "list", "update", "watch"],
        &[],
    ),
    (
        "rbac.authorization.k8s.io",
        &["clusterroles"],
        &["bind"],
        &["kubeflow-admin", "kubeflow-edit", "kubeflow-view"],
    ),
    (
        "security.istio.io",
        &["authorizationpolicies"],
        &["create", "delete", "get", "list", "update", "watch"],
        &[],
    ),
    (
        "kubeflow.org",
        &["profiles"],
        &["create", "delete", "get", "list", "update", "watch"],
        &[],
    ),
    ("kubeflow.org", &["profiles/finalizers"], &["update"], &[]),
];

/// The rules as a ClusterRole's `rules`.
fn rules() -> Value {
    Value::Array(
        RULES
            .iter()
            .map(|(group, resources, verbs, names)| {
                let mut rule =
                    json!({"apiGroups": [group], "resources": resources, "verbs": verbs});
                if !names.is_empty() {
                    rule["resourceNames"] = json!(names);
                }
                rule
            })
            .collect(),
    )
}

/// Points upstream's binding at `ROLE` and adds `ROLE`, labelled as the
/// binding is. Nothing changes in a bundle without that binding to
/// `cluster-admin` (a future version that ships its own narrow role).
pub fn narrow(objects: &mut Vec<DynamicObject>) {
    let Some(binding) = objects.iter_mut().find(|o| {
        kind(o) == "ClusterRoleBinding"
            && o.metadata.name.as_deref() == Some(BINDING)
            && o.data["roleRef"]["name"] == UPSTREAM_ROLE
    }) else {
        return;
    };
    binding.data["roleRef"]["name"] = Value::String(ROLE.to_string());
    let labels = binding.metadata.labels.clone();
    let ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("rbac.authorization.k8s.io", "v1", "ClusterRole"),
        "clusterroles",
    );
    let mut role = DynamicObject::new(ROLE, &ar).data(json!({"rules": rules()}));
    role.metadata.labels = labels;
    objects.push(role);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dashboard::{DashboardComponent, Found};
    use kubeflow_operator::component::{find, render_spec};

    /// The rendered role, rule by rule, is exactly what the controller and
    /// KFAM were seen to use: a rule added here widens the account, so it
    /// must be added to this list (and to docs/security.md) on purpose.
    #[test]
    fn the_profile_controller_holds_exactly_the_rights_it_uses() {
        let expected = json!([
            {"apiGroups": [""], "resources": ["namespaces", "serviceaccounts"], "verbs": ["create", "get", "list", "update", "watch"]},
            {"apiGroups": [""], "resources": ["resourcequotas"], "verbs": ["create", "delete", "get", "list", "update", "watch"]},
            {"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["rolebindings"], "verbs": ["create", "delete", "get", "list", "update", "watch"]},
            {"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["clusterroles"], "verbs": ["bind"], "resourceNames": ["kubeflow-admin", "kubeflow-edit", "kubeflow-view"]},
            {"apiGroups": ["security.istio.io"], "resources": ["authorizationpolicies"], "verbs": ["create", "delete", "get", "list", "update", "watch"]},
            {"apiGroups": ["kubeflow.org"], "resources": ["profiles"], "verbs": ["create", "delete", "get", "list", "update", "watch"]},
            {"apiGroups": ["kubeflow.org"], "resources": ["profiles/finalizers"], "verbs": ["update"]},
        ]);
        for version in ["v1.10.0", "v2.0.0"] {
            let r = render_spec(
                &DashboardComponent,
                json!({"version": version}),
                &Found::default(),
            )
            .expect("render");
            let role = find(&r, "ClusterRole", ROLE).expect("the role");
            assert_eq!(role.data["rules"], expected, "{version}");
            let binding = find(&r, "ClusterRoleBinding", BINDING).expect("the binding");
            assert_eq!(
                binding.data["roleRef"],
                json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": ROLE}),
                "{version}"
            );
            assert_eq!(
                role.metadata.labels, binding.metadata.labels,
                "{version}: labelled as the binding"
            );
            // Nothing of the component binds cluster-admin any more.
            assert!(
                r.objects
                    .iter()
                    .all(|o| o.data["roleRef"]["name"] != UPSTREAM_ROLE),
                "{version}"
            );
        }
        // And the operator no longer needs to grant cluster-admin.
        let rules = kubeflow_operator::component::rules_of(
            &DashboardComponent,
            &kubeflow_operator::component::manifests_dir(),
        )
        .expect("rules");
        assert!(
            !kubeflow_operator::rbac::allows_named(
                &rules.cluster,
                "rbac.authorization.k8s.io",
                "clusterroles",
                "bind",
                UPSTREAM_ROLE
            ),
            "the operator may still bind cluster-admin"
        );
    }
}
