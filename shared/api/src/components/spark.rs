//! The `Spark` kind: the Spark operator (SparkApplication,
//! ScheduledSparkApplication, SparkConnect), its controller and webhook.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::common::{CommonSpec, ComponentStatus};

/// A batch scheduler the Spark operator hands Spark applications' pods to.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum BatchScheduler {
    /// Volcano (its `podgroups.scheduling.volcano.sh` CRD must exist).
    Volcano,
    /// Apache YuniKorn (installed by you; nothing here checks for it).
    YuniKorn,
}

component_crd! {
    kind = "Spark", plural = "sparks", shortname = "kfspark", status = "ComponentStatus",
    doc = "The Spark operator (SparkApplication, ScheduledSparkApplication, SparkConnect), reconciled by the kubeflow-spark-operator. Usually created by a Kubeflow resource; edit it to change this component alone.",
    version_doc = "Spark operator version to deploy, e.g. \"2.5.0\" (no \"v\"); the meta-operator sets it from its release table.",
    images_doc = "Image overrides by container name, e.g. {\"spark-operator-controller\": \"registry.example/kubeflow/spark-operator/controller:2.5.0\"}; the webhook's is \"spark-operator-webhook\".",
    schema = JsonSchema, columns = [printcolumn(name = "Version", type_ = "string", json_path = ".status.version"),],
    /// Desired state of the Spark operator.
    pub struct SparkSpec {
        /// Version, images, scale and scheduling (of its controller and webhook).
        #[serde(flatten)]
        pub common: CommonSpec,
        /// The namespaces whose Spark applications the operator runs (e.g.
        /// the profiles' namespaces). Unset: every namespace.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[schemars(
            length(min = 1, max = 64),
            extend("items" = {"type": "string", "maxLength": 63,
                "pattern": "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"})
        )]
        pub job_namespaces: Option<Vec<String>>,
        /// The batch scheduler Spark applications' pods go to unless they
        /// name another. Unset: the default Kubernetes scheduler.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub batch_scheduler: Option<BatchScheduler>,
    }
}
