//! The `Trainer` kind: Kubeflow Trainer v2 (`trainer.kubeflow.org`: TrainJob,
//! TrainingRuntime, ClusterTrainingRuntime) with the JobSet controller it runs on.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::common::{CommonSpec, ComponentStatus};

/// Settings of the Trainer controller that its configuration file exposes.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TrainerController {
    /// TrainJobs reconciled at once (upstream default 5).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 100))]
    pub train_job_concurrency: Option<i32>,
    /// Queries per second the controller may send to the API server (upstream default 50).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 10000))]
    pub qps: Option<i32>,
    /// Burst of API requests above `qps` (upstream default 100).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 20000))]
    pub burst: Option<i32>,
}

component_crd! {
    kind = "Trainer", plural = "trainers", shortname = "kftrainer", status = "TrainerStatus",
    doc = "Kubeflow Trainer v2 (TrainJob, with its JobSet controller and training runtimes), reconciled by the kubeflow-trainer-operator. Usually created by a Kubeflow resource; edit it to change this component alone.",
    version_doc = "Kubeflow Trainer version to deploy, e.g. \"v2.2.0\"; the meta-operator sets it from its release table.",
    images_doc = "Image overrides by Deployment (both controllers name their container \"manager\"): \"kubeflow-trainer-controller-manager\" or \"jobset-controller-manager\", e.g. {\"jobset-controller-manager\": \"registry.example/jobset/jobset:v0.11.0\"}.",
    schema = JsonSchema, columns = [printcolumn(name = "Version", type_ = "string", json_path = ".status.version"), printcolumn(name = "JobSet", type_ = "string", json_path = ".status.jobSetVersion"),],
    /// Desired state of Kubeflow Trainer v2.
    pub struct TrainerSpec {
        /// Version, images, scale and scheduling (of both controllers: Trainer's and JobSet's).
        #[serde(flatten)]
        pub common: CommonSpec,
        /// ClusterTrainingRuntimes to install, by name (e.g. "torch-distributed").
        /// Default: every runtime the bundle ships; an empty list installs none.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[schemars(length(max = 64))]
        pub runtimes: Option<Vec<RuntimeName>>,
        /// Settings of the Trainer controller.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub controller: Option<TrainerController>,
    }
}

/// The name of a ClusterTrainingRuntime (a DNS subdomain).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, JsonSchema)]
#[serde(transparent)]
pub struct RuntimeName(
    #[schemars(
        length(min = 1, max = 253),
        regex(pattern = r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")
    )]
    pub String,
);

/// Status of Trainer.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TrainerStatus {
    /// Conditions, versions and workloads.
    #[serde(flatten)]
    pub common: ComponentStatus,
    /// The JobSet version the JobSet controller runs (from its image tag).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_set_version: Option<String>,
    /// The ClusterTrainingRuntimes installed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub runtimes: Vec<String>,
}

crate::status::extended_status!(TrainerStatus);
