//! Label and annotation keys the project writes on what it manages.

/// `app.kubernetes.io/managed-by` on every managed object: the operator's name.
pub const MANAGED_BY: &str = "app.kubernetes.io/managed-by";
/// `app.kubernetes.io/part-of` on every managed object.
pub const PART_OF: &str = "app.kubernetes.io/part-of";
/// Value of `app.kubernetes.io/part-of`.
pub const PART_OF_VALUE: &str = "kubeflow";
/// `app.kubernetes.io/instance`: the component CR's name.
pub const INSTANCE: &str = "app.kubernetes.io/instance";
/// `app.kubernetes.io/version`: the component version rendered.
pub const VERSION: &str = "app.kubernetes.io/version";

/// Which component an object belongs to; watches select on it.
pub const COMPONENT: &str = "components.kubeflow.org/component";
/// Namespace of the component CR that manages the object (label values cannot hold `/`).
pub const OWNER_NAMESPACE: &str = "components.kubeflow.org/owner-namespace";
/// Name of the component CR that manages the object.
pub const OWNER_NAME: &str = "components.kubeflow.org/owner-name";

/// ApplySet membership label (kubectl's ApplySet convention).
pub const APPLYSET_PART_OF: &str = "applyset.kubernetes.io/part-of";
/// ApplySet id label on the parent (the component CR).
pub const APPLYSET_ID: &str = "applyset.kubernetes.io/id";
/// Group-kinds the ApplySet has members of, on the parent.
pub const APPLYSET_GROUP_KINDS: &str = "applyset.kubernetes.io/contains-group-kinds";
/// Tooling that manages the ApplySet, on the parent.
pub const APPLYSET_TOOLING: &str = "applyset.kubernetes.io/tooling";

/// An object carrying this annotation with value "true" is left alone by drift repair.
pub const SKIP_RECONCILE: &str = "components.kubeflow.org/skip-reconcile";
/// On a `Kubeflow` CR: allow a version downgrade when "true".
pub const ALLOW_DOWNGRADE: &str = "platform.kubeflow.org/allow-downgrade";

/// Whether a label key aggregates a role into another (Kubernetes' own
/// `rbac.authorization.k8s.io/aggregate-to-view` and Kubeflow's
/// `rbac.authorization.kubeflow.org/aggregate-to-kubeflow-edit` alike).
pub fn is_aggregation_label(key: &str) -> bool {
    key.contains("aggregate-to-")
}
