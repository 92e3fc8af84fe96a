//! The inventory of what a component CR manages, after kubectl's ApplySet
//! convention: the CR is the parent, with an id label and the group-kinds of
//! its members in an annotation; every member carries the part-of label.

use std::collections::BTreeMap;

use base64::Engine;
use kube::Resource;
use kube::api::DynamicObject;

use crate::base::labels;

/// The keys of the labels every member carries (see `member_labels`): their
/// values are the engine's own, never the bundle's or an override's.
pub const MEMBER_LABEL_KEYS: [&str; 8] = [
    labels::APPLYSET_PART_OF,
    labels::MANAGED_BY,
    labels::PART_OF,
    labels::COMPONENT,
    labels::INSTANCE,
    labels::OWNER_NAMESPACE,
    labels::OWNER_NAME,
    labels::VERSION,
];

/// Identity of an inventory: its parent CR and the operator that manages it.
#[derive(Clone, Debug)]
pub struct Inventory {
    /// The ApplySet id, `applyset-<hash>-v1`.
    pub id: String,
    /// Component name ("training").
    pub component: String,
    /// Parent CR's kind.
    pub parent_kind: String,
    /// Parent CR's namespace.
    pub parent_namespace: String,
    /// Parent CR's name.
    pub parent_name: String,
    /// The operator's field manager and managed-by value.
    pub manager: String,
}

impl Inventory {
    /// The inventory of a component CR.
    pub fn for_parent<K: Resource<DynamicType = ()>>(
        parent: &K,
        component: &str,
        manager: &str,
    ) -> Self {
        let name = parent.meta().name.clone().unwrap_or_default();
        let namespace = parent.meta().namespace.clone().unwrap_or_default();
        let kind = K::kind(&()).to_string();
        let group = K::group(&()).to_string();
        Inventory {
            id: applyset_id(&name, &namespace, &kind, &group),
            component: component.to_string(),
            parent_kind: kind,
            parent_namespace: namespace,
            parent_name: name,
            manager: manager.to_string(),
        }
    }

    /// Labels every member carries.
    pub fn member_labels(&self, version: &str) -> BTreeMap<String, String> {
        let mut l = BTreeMap::from([
            (labels::APPLYSET_PART_OF.to_string(), self.id.clone()),
            (labels::MANAGED_BY.to_string(), self.manager.clone()),
            (
                labels::PART_OF.to_string(),
                labels::PART_OF_VALUE.to_string(),
            ),
            (labels::COMPONENT.to_string(), self.component.clone()),
            (labels::INSTANCE.to_string(), self.parent_name.clone()),
            (
                labels::OWNER_NAMESPACE.to_string(),
                self.parent_namespace.clone(),
            ),
            (labels::OWNER_NAME.to_string(), self.parent_name.clone()),
        ]);
        if !version.is_empty() && is_label_value(version) {
            l.insert(labels::VERSION.to_string(), version.to_string());
        }
        l
    }

    /// Label selector of the members.
    pub fn selector(&self) -> String {
        format!("{}={}", labels::APPLYSET_PART_OF, self.id)
    }

    /// "Kind namespace/name" of the parent, for messages.
    pub fn parent_ref(&self) -> String {
        format!(
            "{} {}/{}",
            self.parent_kind, self.parent_namespace, self.parent_name
        )
    }
}

/// The holder of a live object, from its labels: who manages it, if anyone.
pub fn holder(obj: &DynamicObject) -> Option<(String, String, String)> {
    let l = obj.metadata.labels.as_ref()?;
    Some((
        l.get(labels::APPLYSET_PART_OF)?.clone(),
        l.get(labels::OWNER_NAMESPACE).cloned().unwrap_or_default(),
        l.get(labels::OWNER_NAME).cloned().unwrap_or_default(),
    ))
}

/// Whether labels that name an owner (`owner-namespace`, `owner-name`) are
/// not those of any parent the project has: the id is no `Kubeflow`'s and
/// no component resource's of that name and namespace. The project's
/// operators always write the three together, so such a set was edited by
/// hand (a member's labels changed to make it read as someone else's) and
/// claims nothing. An id without owner labels (kubectl's own ApplySets,
/// another tool's) is not judged here: it may be a real holder.
pub fn forged_holder(id: &str, namespace: &str, name: &str) -> bool {
    if name.is_empty() {
        return false;
    }
    let platform = std::iter::once(("Kubeflow", kubeflow_api::PLATFORM_GROUP));
    let components = kubeflow_api::registry::COMPONENTS
        .iter()
        .map(|c| (c.kind, kubeflow_api::COMPONENTS_GROUP));
    !platform
        .chain(components)
        .any(|(kind, group)| applyset_id(name, namespace, kind, group) == id)
}

/// kubectl's ApplySet id: base64url(sha256("<name>.<namespace>.<kind>.<group>")) without padding.
pub fn applyset_id(name: &str, namespace: &str, kind: &str, group: &str) -> String {
    let digest = ring::digest::digest(
        &ring::digest::SHA256,
        format!("{name}.{namespace}.{kind}.{group}").as_bytes(),
    );
    format!(
        "applyset-{}-v1",
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(digest.as_ref())
    )
}

fn is_label_value(v: &str) -> bool {
    v.len() <= 63
        && v.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

/// Parses the contains-group-kinds annotation.
pub fn parse_group_kinds(annotation: Option<&String>) -> Vec<String> {
    annotation
        .map(|a| {
            a.split(',')
                .filter(|s| !s.is_empty())
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_holder_is_forged_only_when_its_owner_labels_fit_no_parent_of_ours() {
        let real = applyset_id(
            "kubeflow",
            "team",
            "Dashboard",
            kubeflow_api::COMPONENTS_GROUP,
        );
        assert!(!forged_holder(&real, "team", "kubeflow"));
        let platform = applyset_id("kubeflow", "team", "Kubeflow", kubeflow_api::PLATFORM_GROUP);
        assert!(!forged_holder(&platform, "team", "kubeflow"));
        // Every label given another value, or the id moved to another name.
        assert!(forged_holder("mallory", "mallory", "mallory"));
        assert!(forged_holder(&real, "team", "other"));
        // No owner name: kubectl's ApplySets and other tools' are not judged.
        assert!(!forged_holder("applyset-x-v1", "", ""));
    }

    #[test]
    fn the_applyset_id_is_kubectls() {
        // kubectl 1.36 wrote this id on Secret `my-set` in namespace
        // `applyset-ka` for `KUBECTL_APPLYSET=true kubectl apply -n applyset-ka
        // --prune --applyset=secret/my-set` (core group: empty).
        assert_eq!(
            applyset_id("my-set", "applyset-ka", "Secret", ""),
            "applyset-M6c-m6vTgL5491rdkQCQJnxPP9vW4hB9kBA3j1RtXVg-v1"
        );
        assert_ne!(
            applyset_id("my-set", "applyset-kb", "Secret", ""),
            applyset_id("my-set", "applyset-ka", "Secret", "")
        );
    }

    #[test]
    fn group_kinds_parse_from_the_annotation() {
        let a = "Deployment.apps,,ConfigMap".to_string();
        assert_eq!(
            parse_group_kinds(Some(&a)),
            ["Deployment.apps", "ConfigMap"]
        );
        assert!(parse_group_kinds(None).is_empty());
    }
}
