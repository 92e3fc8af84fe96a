//! Spec and status pieces every component kind shares.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{ResourceRequirements, Toleration};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The API group of the component kinds.
pub const COMPONENTS_GROUP: &str = "components.kubeflow.org";
/// The API group of the `Kubeflow` kind.
pub const PLATFORM_GROUP: &str = "platform.kubeflow.org";
/// The one version all kinds are served at.
pub const API_VERSION: &str = "v1alpha1";

/// The grammar of an OCI image reference (distribution's `reference`
/// package: `[domain[:port]/]path[:tag][@digest]`), as the CRDs check it
/// and the operators check it again.
pub const IMAGE_PATTERN: &str = r"^(?:(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])(?:\.(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9]))*(?::[0-9]+)?/)?[a-z0-9]+(?:(?:[._]|__|[-]+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:[._]|__|[-]+)[a-z0-9]+)*)*(?::[a-zA-Z0-9_][a-zA-Z0-9_.-]{0,127})?(?:@[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9A-Fa-f]{32,})?$";
/// The longest image reference accepted.
pub const IMAGE_MAX_LENGTH: usize = 512;

/// The cluster flavour a component renders for.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum Platform {
    /// Detect by API discovery: `route.openshift.io` and `security.openshift.io` mean OpenShift.
    #[default]
    #[serde(rename = "auto")]
    Auto,
    /// Plain Kubernetes.
    #[serde(rename = "kubernetes")]
    Kubernetes,
    /// OpenShift: no pinned UIDs, SecurityContextConstraints granted to ServiceAccounts.
    #[serde(rename = "openshift")]
    OpenShift,
}

/// What happens to the component's CustomResourceDefinitions when the component is removed.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum CrdPolicy {
    /// Keep the CRDs, and with them every user object of their kinds (the default).
    #[default]
    Retain,
    /// Delete the CRDs, but only once no custom resource of them remains.
    Delete,
}

/// How a change of version is applied.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum UpgradeStrategy {
    /// Apply the new version at once (its plan is still published in the status).
    #[default]
    Automatic,
    /// Publish the plan and keep the installed version (repaired as usual)
    /// until `approvedPlan` names the plan's digest.
    Manual,
}

/// Settings a `Kubeflow` resource states for every component and each
/// component kind states for itself (one declaration for both, flattened
/// into each spec). The meta-operator passes a `Kubeflow` resource's to
/// each component's resource, except where the component's entry states
/// its own; `approvedPlan` is always the `Kubeflow` resource's there.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SharedSettings {
    /// Platform to render for: auto (detect by API discovery), kubernetes
    /// or openshift.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub platform: Option<Platform>,
    /// A mirror registry every image moves to (host[:port][/path], no
    /// scheme), wherever the image is named: containers, runtime CRs,
    /// environment, arguments, ConfigMaps. The repository path, tag and
    /// digest are kept; Docker Hub's one-segment names gain `library/`. A
    /// component's `images` overrides win.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub image_registry: Option<String>,
    /// Pin every image by digest: the name of a ConfigMap in the resource's
    /// namespace whose key `digests` holds one `<image> <sha256:digest>` (or
    /// `<image>@sha256:digest`) per line, for the images as they are after
    /// `imageRegistry`. An image missing from it is refused; nothing is applied.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub image_digests: Option<String>,
    /// Automatic (default) or Manual: under Manual a change of `version`
    /// waits, with its plan in `status.upgradePlan`, until `approvedPlan` is
    /// that plan's digest.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upgrade_strategy: Option<UpgradeStrategy>,
    /// The digest of the upgrade plan approved (`status.upgradePlan.digest`);
    /// a plan that changes needs a new approval.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 64))]
    pub approved_plan: Option<String>,
}

/// Settings every component shares: its version and how its controller workloads run.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CommonSpec {
    /// Component version to deploy (a version the operator carries bundles
    /// for); the meta-operator sets it from its release table.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 64))]
    pub version: Option<String>,
    /// Image overrides: a full image reference per container name (each
    /// kind's description names its keys).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(extend(
        "maxProperties" = 32,
        "additionalProperties" = {
            "type": "string",
            "maxLength": 512,
            "pattern": "^(?:(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])(?:\\.(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9]))*(?::[0-9]+)?/)?[a-z0-9]+(?:(?:[._]|__|[-]+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:[._]|__|[-]+)[a-z0-9]+)*)*(?::[a-zA-Z0-9_][a-zA-Z0-9_.-]{0,127})?(?:@[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9A-Fa-f]{32,})?$"
        }
    ))]
    pub images: BTreeMap<String, String>,
    /// Replicas of the component's controller workloads.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 100))]
    pub replicas: Option<i32>,
    /// Resource requests and limits of the component's controller containers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourceRequirements>,
    /// Node selector of the component's workloads.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_selector: Option<BTreeMap<String, String>>,
    /// Tolerations of the component's workloads.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tolerations: Option<Vec<Toleration>>,
    /// The platform, image mirror and digests, and upgrade approval: the
    /// settings a `Kubeflow` resource states for every component.
    #[serde(flatten)]
    pub shared: SharedSettings,
    /// Whether the component's CRDs are kept (Retain, default) or deleted on removal.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub crd_policy: Option<CrdPolicy>,
    /// Changes to objects of the component's bundle that no field of this
    /// resource makes, applied after the operator's own settings on every
    /// reconcile and every version (an upgrade to a version whose bundle
    /// lacks a target, or to which a patch no longer applies, waits with
    /// the override named in its plan). Fields the operator must own are
    /// refused: name, namespace, kind, owner references, the operator's
    /// labels and annotations, aggregation labels, RBAC rules, role
    /// references and subjects, webhook client configurations.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64))]
    pub overrides: Vec<Override>,
    /// More overrides, kept in a ConfigMap in this resource's namespace (for
    /// lists too long for the resource, or kept by another team): its key
    /// `overrides` holds a YAML (or JSON) list of entries like those of
    /// `overrides`, applied after them, with the same checks. A missing
    /// ConfigMap or a key that does not parse is refused and nothing is
    /// applied. The operator reads it on every reconcile: a change shows at
    /// the next one (at most 10 minutes at rest; any change to this resource
    /// brings one at once).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub overrides_config_map: Option<String>,
}

/// One change to one object of the bundle.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Override {
    /// The object, as the bundle names it.
    pub target: OverrideTarget,
    /// A JSON merge patch (RFC 7386): objects merge key by key, anything
    /// else (lists included) replaces, null removes. For maps such as a
    /// ConfigMap's data or an object's annotations.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
    pub merge_patch: Option<serde_json::Value>,
    /// A JSON patch (RFC 6902): operations at JSON pointers, for changes
    /// inside lists, e.g. `{op: add, path: /spec/template/spec/containers/0/env/-, value: {name: X, value: "1"}}`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64))]
    pub json_patch: Vec<JsonPatchOperation>,
}

/// The object an override changes.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct OverrideTarget {
    /// Its kind, e.g. Deployment or ConfigMap.
    #[schemars(length(min = 1, max = 63))]
    pub kind: String,
    /// Its name.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
    /// Its namespace as the component installs it, when two objects share kind and name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 63))]
    pub namespace: Option<String>,
}

/// One JSON patch operation (RFC 6902).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct JsonPatchOperation {
    /// add, remove, replace, move, copy or test.
    pub op: JsonPatchOp,
    /// The JSON pointer operated on.
    #[schemars(length(max = 1024))]
    pub path: String,
    /// The value (add, replace, test).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
    pub value: Option<serde_json::Value>,
    /// The pointer moved or copied from (move, copy).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 1024))]
    pub from: Option<String>,
}

/// A JSON patch operation's name.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum JsonPatchOp {
    /// Add a value (at `-`: the end of a list).
    #[default]
    Add,
    /// Remove the value.
    Remove,
    /// Replace the value.
    Replace,
    /// Move the value at `from`.
    Move,
    /// Copy the value at `from`.
    Copy,
    /// Fail unless the value is `value`.
    Test,
}

/// What a change of version does, published before it is applied.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct UpgradePlanStatus {
    /// The version installed when the plan was made.
    pub from: String,
    /// The version asked for.
    pub to: String,
    /// The plan's digest, the value `approvedPlan` takes to approve it.
    pub digest: String,
    /// One line of counts: created, changed, pruned, released, recreated, held.
    pub summary: String,
    /// The whole plan, one line per object (cut at 16 KiB).
    pub details: String,
    /// Whether the change waits for `approvedPlan` (upgradeStrategy Manual).
    pub awaiting_approval: bool,
}

/// Readiness of one workload the component manages.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WorkloadStatus {
    /// Kind of the workload: Deployment, StatefulSet or DaemonSet.
    pub kind: String,
    /// Namespace of the workload.
    pub namespace: String,
    /// Name of the workload.
    pub name: String,
    /// Replicas (or scheduled pods) wanted.
    pub desired: i32,
    /// Replicas (or pods) ready.
    pub ready: i32,
    /// Whether the workload counts as available.
    pub available: bool,
    /// Why it is not available, when the workload or its pods say
    /// (ReplicaFailure, ProgressDeadlineExceeded, ImagePullBackOff, CrashLoopBackOff, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub problem: Option<String>,
}

/// An object a prune kept and let go of (a volume a new version no longer
/// uses, a CRD whose custom resources remain): it is no longer managed.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReleasedObject {
    /// `Kind.group` of the object, e.g. "PersistentVolumeClaim".
    pub kind: String,
    /// Its namespace (empty for cluster-scoped objects).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    /// Its name.
    pub name: String,
    /// Why it was kept and what to do.
    pub message: String,
}

/// Status every component kind reports.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ComponentStatus {
    /// The generation of the spec this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Ready, Progressing and Degraded, per the Kubernetes API conventions.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "conditions_schema")]
    pub conditions: Vec<Condition>,
    /// The component version deployed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// The platform the component was rendered for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub platform: Option<Platform>,
    /// Number of objects the component manages.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub managed_objects: Option<i64>,
    /// Readiness of each workload.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub workloads: Vec<WorkloadStatus>,
    /// Objects a prune kept and released; an entry goes when its object is deleted.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub released: Vec<ReleasedObject>,
    /// The plan of the latest change of version: the one waiting for
    /// approval, or the one last applied.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upgrade_plan: Option<UpgradePlanStatus>,
    /// Fields of the managed objects that another field manager owns: a
    /// hand edit (`kubectl edit`, `patch`, `annotate`, a console) or another
    /// controller. The operator keeps them (it repairs only its own fields);
    /// turn a hand edit into an override to keep it across upgrades.
    /// Kubernetes' own bookkeeping (kube-controller-manager, the scheduler)
    /// and status writes are left out.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64))]
    pub foreign_fields: Vec<ForeignFields>,
}

/// Fields of one managed object that one other field manager owns.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ForeignFields {
    /// The object: `<Kind> [<namespace>/]<name>`.
    pub object: String,
    /// The field manager (`kubectl-edit`, `kubectl-patch`, a controller's name).
    pub manager: String,
    /// The fields it owns, as paths (`metadata.annotations.example.com/team`,
    /// `spec.template.spec.containers[name=manager].env[name=FOO]`); at most
    /// 16, then a count of the rest.
    pub fields: Vec<String>,
    /// Set when the fields are a known controller's, and why it owns them
    /// (a CA injector's `caBundle`, an autoscaler's replicas); unset: a hand
    /// edit or a manager the operator does not know.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub controller: Option<String>,
}

/// The schema of a `conditions` list, as the API conventions ask: a map
/// keyed by `type` (so server-side apply merges one condition, never the
/// list), `status` one of True, False or Unknown, `reason` CamelCase and
/// bounded, as `metav1.Condition`'s own validation has them.
pub fn conditions_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "description": "Ready, Progressing and Degraded, per the Kubernetes API conventions.",
        "type": "array",
        "x-kubernetes-list-type": "map",
        "x-kubernetes-list-map-keys": ["type"],
        "maxItems": 16,
        "items": {
            "type": "object",
            "required": ["type", "status", "lastTransitionTime", "reason", "message"],
            "properties": {
                "type": {
                    "description": "Ready, Progressing or Degraded.",
                    "type": "string",
                    "maxLength": 316,
                    "pattern": "^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$"
                },
                "status": {
                    "description": "True, False or Unknown.",
                    "type": "string",
                    "enum": ["True", "False", "Unknown"]
                },
                "reason": {
                    "description": "Why, in one CamelCase word (WorkloadsNotReady, PermissionDenied, ...).",
                    "type": "string",
                    "minLength": 1,
                    "maxLength": 1024,
                    "pattern": "^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$"
                },
                "message": {
                    "description": "What a person needs to know, and what to do.",
                    "type": "string",
                    "maxLength": 32768
                },
                "lastTransitionTime": {
                    "description": "When the status last changed.",
                    "type": "string",
                    "format": "date-time"
                },
                "observedGeneration": {
                    "description": "The generation of the spec the condition was set from.",
                    "type": "integer",
                    "format": "int64",
                    "minimum": 0
                }
            }
        }
    })
}

/// What happens to a component's bundled database and object store volumes
/// (and the generated credentials that open them) on removal.
#[derive(
    Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, schemars::JsonSchema,
)]
pub enum VolumePolicy {
    /// Keep the PersistentVolumeClaims (the default: no data loss).
    #[default]
    Retain,
    /// Delete them with the component.
    Delete,
}

/// The database engines a component's external database may run.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum DatabaseEngine {
    /// MySQL 8 (or a compatible server).
    #[default]
    MySQL,
    /// PostgreSQL.
    PostgreSQL,
}

/// An external database a component keeps its records in instead of its
/// bundled one.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ExternalDatabase {
    /// Which engine the server runs.
    #[serde(default)]
    pub engine: DatabaseEngine,
    /// Host name or IP address of the database server (the port goes in
    /// `port`).
    #[schemars(
        length(min = 1, max = 253),
        regex(
            pattern = r"^([A-Za-z0-9]([-A-Za-z0-9]{0,61}[A-Za-z0-9])?(\.[A-Za-z0-9]([-A-Za-z0-9]{0,61}[A-Za-z0-9])?)*|[0-9A-Fa-f:.]+)$"
        )
    )]
    pub host: String,
    /// Port of the database server. Default: 3306 for MySQL, 5432 for
    /// PostgreSQL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 65535))]
    pub port: Option<i32>,
    /// Database name. Default: the bundled database's (Katib: "katib",
    /// Model Registry: "metadb").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 64), regex(pattern = r"^[A-Za-z0-9_$-]+$"))]
    pub database: Option<String>,
    /// Name of a Secret in the component's namespace with keys `username`
    /// and `password`.
    #[schemars(length(min = 1, max = 253))]
    pub credentials_secret: String,
}

/// A reference to a key of a Secret in the component's namespace.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SecretKeyRef {
    /// Name of the Secret.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
    /// Key in the Secret.
    #[schemars(length(min = 1, max = 253))]
    pub key: String,
}

#[cfg(test)]
mod tests {
    use kube::CustomResourceExt;

    #[test]
    fn the_crds_check_images_with_the_shared_grammar() {
        let crd = serde_json::to_string(&crate::Training::crd()).expect("crd");
        let pattern = serde_json::to_string(super::IMAGE_PATTERN).expect("json");
        assert!(
            crd.contains(pattern.trim_matches('"')),
            "the images map uses IMAGE_PATTERN"
        );
        let dp = serde_json::to_string(&crate::DevicePlugins::crd()).expect("crd");
        assert!(
            dp.contains(pattern.trim_matches('"')),
            "a plugin image uses IMAGE_PATTERN"
        );
    }
}
