//! The namespaces an operator may install into: the chart's
//! `allowedNamespaces`, where the chart grants its Roles. Anything a CR would
//! put elsewhere is refused before it is written, so a component CR in a
//! tenant's namespace never gives that tenant a controller with cluster-wide
//! rights. Without the setting (an operator run by hand, as an admin) every
//! namespace is allowed.
//!
//! Tenant access is part of the scope: the writes a component may make in
//! tenant namespaces (the Dashboard's contributor RoleBindings to the
//! Kubeflow roles and their AuthorizationPolicies, in profile namespaces
//! made at run time) are allowed wherever they go. RBAC grants them
//! cluster-wide and the chart's admission pins hold them to profile
//! namespaces, people and the Kubeflow roles (see `rbac::pins`).
//!
//! A refusal is of one object: the rest of the component is applied and
//! repaired all the same, and the status names what was refused.

use std::collections::BTreeSet;

use kube::api::DynamicObject;

use crate::base::kinds::{self, ObjectKey, kind};

/// `Kind.group` of a contributor's RoleBinding.
const TENANT_BINDING: &str = "RoleBinding.rbac.authorization.k8s.io";
/// `Kind.group` of a contributor's AuthorizationPolicy.
const TENANT_POLICY: &str = "AuthorizationPolicy.security.istio.io";

/// Where an operator may install.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NamespaceScope {
    only: Option<BTreeSet<String>>,
    /// The ClusterRoles the component binds people to in tenant namespaces
    /// (empty: it writes nothing there).
    tenant_roles: BTreeSet<String>,
}

/// An object the scope refuses, and the namespace that makes it so.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refused {
    /// The object.
    pub key: ObjectKey,
    /// The namespace outside the scope it would be in (or create).
    pub namespace: String,
}

impl NamespaceScope {
    /// Every namespace.
    pub fn all() -> Self {
        NamespaceScope::default()
    }

    /// Only the listed namespaces; an empty list means every namespace.
    pub fn only(namespaces: &[String]) -> Self {
        let set: BTreeSet<String> = namespaces
            .iter()
            .map(|n| n.trim().to_string())
            .filter(|n| !n.is_empty())
            .collect();
        NamespaceScope {
            only: (!set.is_empty()).then_some(set),
            ..Default::default()
        }
    }

    /// Adds tenant access: bindings to `roles` and their policies, in any
    /// namespace (the component's `Permissions::tenant_roles`).
    pub fn with_tenant_access(mut self, roles: &[String]) -> Self {
        self.tenant_roles.extend(roles.iter().cloned());
        self
    }

    /// The allowed namespaces, or None when every namespace is.
    pub fn namespaces(&self) -> Option<&BTreeSet<String>> {
        self.only.as_ref()
    }

    /// Whether the operator may install into `namespace`.
    pub fn allows(&self, namespace: &str) -> bool {
        self.only.as_ref().is_none_or(|s| s.contains(namespace))
    }

    /// Whether members of `group_kind` are looked for in every namespace
    /// (tenant access is written outside the allowed namespaces, and a
    /// contributor taken off must be found there to be removed).
    pub fn lists_everywhere(&self, group_kind: &str) -> bool {
        !self.tenant_roles.is_empty() && [TENANT_BINDING, TENANT_POLICY].contains(&group_kind)
    }

    /// Whether `obj` is tenant access: a RoleBinding to one of the tenant
    /// roles, or an AuthorizationPolicy, of a component that has the right.
    pub fn is_tenant_access(&self, obj: &DynamicObject) -> bool {
        if self.tenant_roles.is_empty() {
            return false;
        }
        match kinds::group_kind(obj).as_str() {
            TENANT_BINDING => {
                let role = &obj.data["roleRef"];
                role["kind"] == "ClusterRole"
                    && role["name"]
                        .as_str()
                        .is_some_and(|n| self.tenant_roles.contains(n))
            }
            TENANT_POLICY => true,
            _ => false,
        }
    }

    /// The objects outside the scope (Namespace objects count as the
    /// namespace they create; tenant access is inside), in their order.
    pub fn refused(&self, objects: &[DynamicObject]) -> Vec<Refused> {
        let cluster_custom = kinds::cluster_scoped_custom_kinds(objects);
        objects
            .iter()
            .filter(|o| !self.is_tenant_access(o))
            .filter_map(|o| {
                let ns = if kind(o) == "Namespace" {
                    o.metadata.name.clone()
                } else if kinds::is_cluster_scoped(o, &cluster_custom) {
                    None
                } else {
                    o.metadata.namespace.clone()
                };
                ns.filter(|n| !self.allows(n)).map(|namespace| Refused {
                    key: ObjectKey::of(o),
                    namespace,
                })
            })
            .collect()
    }

    /// The namespaces outside the scope that the objects would be put in,
    /// sorted.
    pub fn outside(&self, objects: &[DynamicObject]) -> Vec<String> {
        let set: BTreeSet<String> = self
            .refused(objects)
            .into_iter()
            .map(|r| r.namespace)
            .collect();
        set.into_iter().collect()
    }

    /// Splits `objects` into those to apply and those refused.
    pub fn split(&self, objects: Vec<DynamicObject>) -> (Vec<DynamicObject>, Vec<Refused>) {
        let refused = self.refused(&objects);
        let keys: BTreeSet<&ObjectKey> = refused.iter().map(|r| &r.key).collect();
        let kept = objects
            .into_iter()
            .filter(|o| !keys.contains(&ObjectKey::of(o)))
            .collect();
        (kept, refused)
    }

    fn allowed_list(&self) -> String {
        self.only
            .as_ref()
            .map(|s| s.iter().cloned().collect::<Vec<_>>().join(", "))
            .unwrap_or_default()
    }

    /// What a person reads when a CR would install outside the scope.
    pub fn refusal(&self, namespaces: &[String]) -> String {
        format!(
            "namespace {} is not one this operator may install into ({}); nothing was \
             applied. A cluster admin who wants it there adds it to the chart value \
             `allowedNamespaces` (the chart then grants the operator a Role in it)",
            namespaces.join(", "),
            self.allowed_list()
        )
    }

    /// What a person reads when some objects of a CR are refused and the
    /// rest applied: each refused object and the namespace that refuses it.
    pub fn refusal_of(&self, refused: &[Refused]) -> String {
        let names: Vec<String> = refused
            .iter()
            .map(|r| format!("{} (namespace {})", r.key, r.namespace))
            .collect();
        format!(
            "not applied, outside the namespaces this operator may install into ({}): {}; \
             everything else is applied and repaired. A cluster admin who wants them \
             there adds the namespace to the chart value `allowedNamespaces`",
            self.allowed_list(),
            crate::base::conditions::listing(&names)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obj(yaml: &str) -> DynamicObject {
        serde_saphyr::from_str(yaml).expect("object")
    }

    #[test]
    fn objects_outside_the_allowed_namespaces_are_named() {
        let scope = NamespaceScope::only(&["kubeflow".into(), "istio-system".into()]);
        let objects = vec![
            obj(
                "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: a, namespace: kubeflow}\n",
            ),
            obj("apiVersion: v1\nkind: Secret\nmetadata: {name: b, namespace: team-a}\n"),
            obj("apiVersion: v1\nkind: Namespace\nmetadata: {name: kube-system}\n"),
            obj(
                "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata: {name: c}\n",
            ),
        ];
        assert_eq!(scope.outside(&objects), ["kube-system", "team-a"]);
        assert!(
            scope
                .refusal(&["team-a".into()])
                .contains("allowedNamespaces")
        );
        assert!(NamespaceScope::only(&[]).outside(&objects).is_empty());
        assert!(NamespaceScope::all().allows("anything"));
        assert_eq!(NamespaceScope::only(&[" ".into()]), NamespaceScope::all());
    }

    fn binding(ns: &str, role: &str) -> DynamicObject {
        obj(&format!(
            "apiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\nmetadata: {{name: user-a, namespace: {ns}}}\nroleRef: {{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: {role}}}\n"
        ))
    }

    #[test]
    fn tenant_access_is_inside_the_scope_and_nothing_else_is() {
        let allowed = ["kubeflow".to_string()];
        let roles = ["kubeflow-edit".to_string(), "kubeflow-view".to_string()];
        let scope = NamespaceScope::only(&allowed).with_tenant_access(&roles);
        let policy = obj(
            "apiVersion: security.istio.io/v1beta1\nkind: AuthorizationPolicy\nmetadata: {name: user-a, namespace: team-a}\nspec: {}\n",
        );
        let deployment = obj(
            "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: a, namespace: kubeflow}\n",
        );
        let objects = vec![
            deployment.clone(),
            binding("team-a", "kubeflow-edit"),
            policy.clone(),
            // A binding to another role is no tenant access.
            binding("team-b", "cluster-admin"),
        ];
        let refused = scope.refused(&objects);
        assert_eq!(refused.len(), 1, "{refused:?}");
        assert_eq!(refused[0].namespace, "team-b");
        assert_eq!(refused[0].key.to_string(), "RoleBinding team-b/user-a");
        let (kept, refused) = scope.split(objects.clone());
        assert_eq!(kept.len(), 3);
        let message = scope.refusal_of(&refused);
        assert!(message.contains("RoleBinding team-b/user-a"), "{message}");
        assert!(message.contains("everything else is applied"), "{message}");
        assert!(scope.lists_everywhere("RoleBinding.rbac.authorization.k8s.io"));
        assert!(!scope.lists_everywhere("Deployment.apps"));
        // Without the right, the same objects are refused as before.
        let plain = NamespaceScope::only(&allowed);
        assert_eq!(plain.outside(&objects), ["team-a", "team-b"]);
        assert!(!plain.lists_everywhere("RoleBinding.rbac.authorization.k8s.io"));
    }
}
