//! The namespaces an operator may install into: the chart's
//! `allowedNamespaces`, where the chart grants its Roles. Anything a CR would
//! put elsewhere is refused before anything is written, so a component CR in
//! a tenant's namespace never gives that tenant a controller with cluster-wide
//! rights. Without the setting (an operator run by hand, as an admin) every
//! namespace is allowed.

use std::collections::BTreeSet;

use kube::api::DynamicObject;

use crate::kinds::{self, kind};

/// Where an operator may install.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NamespaceScope {
    only: Option<BTreeSet<String>>,
}

impl NamespaceScope {
    /// Every namespace.
    pub fn all() -> Self {
        NamespaceScope { only: None }
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
        }
    }

    /// The allowed namespaces, or None when every namespace is.
    pub fn namespaces(&self) -> Option<&BTreeSet<String>> {
        self.only.as_ref()
    }

    /// Whether the operator may install into `namespace`.
    pub fn allows(&self, namespace: &str) -> bool {
        self.only.as_ref().is_none_or(|s| s.contains(namespace))
    }

    /// The namespaces outside the scope that the objects would be put in
    /// (Namespace objects count as the namespace they create), sorted.
    pub fn outside(&self, objects: &[DynamicObject]) -> Vec<String> {
        let cluster_custom = kinds::cluster_scoped_custom_kinds(objects);
        let mut out = BTreeSet::new();
        for o in objects {
            let ns = if kind(o) == "Namespace" {
                o.metadata.name.clone()
            } else if kinds::is_cluster_scoped(o, &cluster_custom) {
                None
            } else {
                o.metadata.namespace.clone()
            };
            if let Some(ns) = ns.filter(|n| !self.allows(n)) {
                out.insert(ns);
            }
        }
        out.into_iter().collect()
    }

    /// What a person reads when a CR would install outside the scope.
    pub fn refusal(&self, namespaces: &[String]) -> String {
        let allowed = self
            .only
            .as_ref()
            .map(|s| s.iter().cloned().collect::<Vec<_>>().join(", "))
            .unwrap_or_default();
        format!(
            "namespace {} is not one this operator may install into ({allowed}); nothing was \
             applied. A cluster admin who wants it there adds it to the chart value \
             `allowedNamespaces` (the chart then grants the operator a Role in it)",
            namespaces.join(", ")
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
}
