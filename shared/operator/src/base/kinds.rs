//! What the library knows of kinds without asking the API: apply order and
//! which built-in kinds are cluster-scoped.

use std::fmt;

use kube::api::DynamicObject;

/// Built-in cluster-scoped kinds that appear in component bundles.
const CLUSTER_SCOPED: &[&str] = &[
    "Namespace",
    "CustomResourceDefinition",
    "ClusterRole",
    "ClusterRoleBinding",
    "MutatingWebhookConfiguration",
    "ValidatingWebhookConfiguration",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
    "MutatingAdmissionPolicy",
    "MutatingAdmissionPolicyBinding",
    "APIService",
    "PriorityClass",
    "StorageClass",
    "PersistentVolume",
    "RuntimeClass",
    "IngressClass",
    "CSIDriver",
];

/// The API groups Kubernetes itself serves; any other group comes from a
/// CRD or an aggregated API server.
const BUILTIN_GROUPS: &[&str] = &[
    "",
    "admissionregistration.k8s.io",
    "apiextensions.k8s.io",
    "apiregistration.k8s.io",
    "apps",
    "authentication.k8s.io",
    "authorization.k8s.io",
    "autoscaling",
    "batch",
    "certificates.k8s.io",
    "coordination.k8s.io",
    "discovery.k8s.io",
    "events.k8s.io",
    "flowcontrol.apiserver.k8s.io",
    "internal.apiserver.k8s.io",
    "networking.k8s.io",
    "node.k8s.io",
    "policy",
    "rbac.authorization.k8s.io",
    "resource.k8s.io",
    "scheduling.k8s.io",
    "storage.k8s.io",
    "storagemigration.k8s.io",
];

/// Whether a group's kinds are served only once another project installs
/// its CRDs (cert-manager's, say): neither Kubernetes' own groups nor
/// OpenShift's, which the platform serves (partly by aggregated API servers,
/// which no CRD announces) from the start.
pub fn is_served_by_crd(group: &str) -> bool {
    !BUILTIN_GROUPS.contains(&group) && !group.ends_with(".openshift.io")
}

/// The object's kind, or "" when it has none.
pub fn kind(obj: &DynamicObject) -> &str {
    obj.types.as_ref().map(|t| t.kind.as_str()).unwrap_or("")
}

/// The object's apiVersion, or "" when it has none.
pub fn api_version(obj: &DynamicObject) -> &str {
    obj.types
        .as_ref()
        .map(|t| t.api_version.as_str())
        .unwrap_or("")
}

/// The API group of an apiVersion ("" for the core group).
pub fn group_of(api_version: &str) -> &str {
    api_version.rsplit_once('/').map(|(g, _)| g).unwrap_or("")
}

/// Whether a built-in kind is cluster-scoped.
pub fn is_builtin_cluster_scoped(kind: &str) -> bool {
    CLUSTER_SCOPED.contains(&kind)
}

/// Whether a kind is cluster-scoped: built-in knowledge plus the CRDs of the
/// bundle itself (`custom_cluster_kinds`, as `Kind.group`).
pub fn is_cluster_scoped(obj: &DynamicObject, custom_cluster_kinds: &[String]) -> bool {
    let k = kind(obj);
    CLUSTER_SCOPED.contains(&k) || custom_cluster_kinds.iter().any(|gk| *gk == group_kind(obj))
}

/// `Kind.group` (or `Kind` for the core group), as ApplySet annotations write it.
pub fn group_kind(obj: &DynamicObject) -> String {
    group_kind_of(group_of(api_version(obj)), kind(obj))
}

/// `Kind.group`, or `Kind` for the core group.
pub fn group_kind_of(group: &str, kind: &str) -> String {
    if group.is_empty() {
        kind.to_string()
    } else {
        format!("{kind}.{group}")
    }
}

/// Cluster-scoped custom kinds the bundle's own CRDs define, as `Kind.group`.
pub fn cluster_scoped_custom_kinds(objects: &[DynamicObject]) -> Vec<String> {
    objects
        .iter()
        .filter(|o| kind(o) == "CustomResourceDefinition")
        .filter(|o| o.data.pointer("/spec/scope").and_then(|s| s.as_str()) == Some("Cluster"))
        .filter_map(|o| {
            let k = o.data.pointer("/spec/names/kind")?.as_str()?;
            let g = o.data.pointer("/spec/group")?.as_str()?;
            Some(format!("{k}.{g}"))
        })
        .collect()
}

/// Apply wave of a kind: lower first. Namespaces and CRDs come first (CRDs are
/// then waited for), webhook configurations last so they never block the
/// objects of their own component.
pub fn apply_wave(obj: &DynamicObject) -> u8 {
    match kind(obj) {
        "Namespace" => 0,
        "CustomResourceDefinition" => 1,
        "PriorityClass" | "StorageClass" | "RuntimeClass" => 2,
        "ServiceAccount" | "Secret" | "ConfigMap" => 3,
        "ClusterRole" | "Role" => 4,
        "ClusterRoleBinding" | "RoleBinding" => 5,
        "Service" | "PersistentVolumeClaim" => 6,
        "Deployment" | "StatefulSet" | "DaemonSet" | "Job" | "CronJob" => 7,
        "MutatingWebhookConfiguration" | "ValidatingWebhookConfiguration" | "APIService" => 9,
        _ => 8,
    }
}

/// Delete wave on cleanup: custom resources of the bundle's own CRDs
/// (`own_custom`) first, while the controllers that hold finalizers on them
/// still run with their rights; then the webhooks and Services that serve
/// them, workloads before their RBAC, CRDs and Namespaces last.
pub fn delete_wave(obj: &DynamicObject, own_custom: bool) -> u8 {
    if own_custom {
        return 0;
    }
    match kind(obj) {
        "MutatingWebhookConfiguration" | "ValidatingWebhookConfiguration" | "APIService" => 1,
        "Deployment" | "StatefulSet" | "DaemonSet" | "Job" | "CronJob" => 2,
        "CustomResourceDefinition" => 5,
        "Namespace" => 6,
        _ => 3,
    }
}

/// One object's identity: `Kind.group`, namespace ("" when cluster-scoped)
/// and name. Shown as "Kind namespace/name" or "Kind name".
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ObjectKey {
    /// `Kind.group` (`Kind` for the core group).
    pub group_kind: String,
    /// Namespace, "" for cluster-scoped objects.
    pub namespace: String,
    /// Name.
    pub name: String,
}

impl ObjectKey {
    /// The key of an object.
    pub fn of(obj: &DynamicObject) -> Self {
        ObjectKey {
            group_kind: group_kind(obj),
            namespace: obj.metadata.namespace.clone().unwrap_or_default(),
            name: obj.metadata.name.clone().unwrap_or_default(),
        }
    }

    /// The kind, without its group.
    pub fn kind(&self) -> &str {
        self.group_kind.split('.').next().unwrap_or("")
    }
}

impl fmt::Display for ObjectKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.namespace.is_empty() {
            write!(f, "{} {}", self.kind(), self.name)
        } else {
            write!(f, "{} {}/{}", self.kind(), self.namespace, self.name)
        }
    }
}

/// "Kind namespace/name" or "Kind name".
pub fn describe(obj: &DynamicObject) -> String {
    let name = obj.metadata.name.as_deref().unwrap_or("");
    match &obj.metadata.namespace {
        Some(ns) => format!("{} {ns}/{name}", kind(obj)),
        None => format!("{} {name}", kind(obj)),
    }
}

/// Kinds (`Kind.group`) whose objects hold nothing but what is rendered.
const RECREATABLE: &[&str] = &[
    "Deployment.apps",
    "DaemonSet.apps",
    "StatefulSet.apps",
    "ReplicaSet.apps",
    "Job.batch",
    "Service",
    "RoleBinding.rbac.authorization.k8s.io",
    "ClusterRoleBinding.rbac.authorization.k8s.io",
];

/// Whether objects of a kind (`Kind.group`) may be recreated at all when
/// their live state refuses the desired one (an object may still be kept
/// for what its live state holds: see the apply engine's `recreation`).
pub fn may_recreate(group_kind: &str) -> bool {
    RECREATABLE.contains(&group_kind)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obj(api_version: &str, kind: &str) -> DynamicObject {
        serde_json::from_value(serde_json::json!({
            "apiVersion": api_version, "kind": kind, "metadata": {"name": "x"},
        }))
        .expect("object")
    }

    #[test]
    fn only_groups_of_other_projects_wait_for_a_crd() {
        assert!(is_served_by_crd("cert-manager.io"));
        assert!(is_served_by_crd("gateway.networking.k8s.io"));
        assert!(!is_served_by_crd(""));
        assert!(!is_served_by_crd("apps"));
        assert!(!is_served_by_crd("networking.k8s.io"));
        assert!(!is_served_by_crd("route.openshift.io"));
    }

    #[test]
    fn waves_put_what_others_need_first_and_take_it_last() {
        let order = [
            ("v1", "Namespace"),
            ("apiextensions.k8s.io/v1", "CustomResourceDefinition"),
            ("scheduling.k8s.io/v1", "PriorityClass"),
            ("v1", "ServiceAccount"),
            ("rbac.authorization.k8s.io/v1", "ClusterRole"),
            ("rbac.authorization.k8s.io/v1", "RoleBinding"),
            ("v1", "Service"),
            ("apps/v1", "Deployment"),
            ("networking.istio.io/v1", "Gateway"),
            (
                "admissionregistration.k8s.io/v1",
                "ValidatingWebhookConfiguration",
            ),
        ];
        let waves: Vec<u8> = order.iter().map(|(a, k)| apply_wave(&obj(a, k))).collect();
        let mut sorted = waves.clone();
        sorted.sort();
        assert_eq!(waves, sorted, "apply waves follow dependencies: {waves:?}");
        // Cleanup: custom resources, then webhooks, workloads, the rest, CRDs, Namespaces.
        let delete = |a: &str, k: &str| delete_wave(&obj(a, k), k == "Gateway");
        let deletes = [
            delete("networking.istio.io/v1", "Gateway"),
            delete(
                "admissionregistration.k8s.io/v1",
                "MutatingWebhookConfiguration",
            ),
            delete("apps/v1", "Deployment"),
            delete("v1", "Service"),
            delete("apiextensions.k8s.io/v1", "CustomResourceDefinition"),
            delete("v1", "Namespace"),
        ];
        assert!(deletes.windows(2).all(|w| w[0] < w[1]), "{deletes:?}");
    }

    #[test]
    fn scope_comes_from_built_in_knowledge_and_the_bundles_crds() {
        assert!(is_cluster_scoped(
            &obj("rbac.authorization.k8s.io/v1", "ClusterRole"),
            &[]
        ));
        assert!(!is_cluster_scoped(&obj("apps/v1", "Deployment"), &[]));
        let custom = vec!["ClusterServingRuntime.serving.kserve.io".to_string()];
        assert!(is_cluster_scoped(
            &obj("serving.kserve.io/v1alpha1", "ClusterServingRuntime"),
            &custom
        ));
        assert_eq!(group_kind(&obj("v1", "Secret")), "Secret");
        assert_eq!(group_kind(&obj("apps/v1", "Deployment")), "Deployment.apps");
    }
}
