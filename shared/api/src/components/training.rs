//! The `Training` kind: the Kubeflow training-operator.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::common::{CommonSpec, ComponentStatus};

/// A distributed training job kind the training-operator can run.
#[derive(
    Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, JsonSchema,
)]
pub enum JobKind {
    /// TensorFlow jobs.
    TFJob,
    /// PyTorch jobs.
    PyTorchJob,
    /// MPI jobs.
    MPIJob,
    /// XGBoost jobs.
    XGBoostJob,
    /// PaddlePaddle jobs.
    PaddleJob,
    /// JAX jobs.
    JAXJob,
}

impl JobKind {
    /// Every job kind, in the training-operator's order.
    pub const ALL: [JobKind; 6] = [
        JobKind::TFJob,
        JobKind::PyTorchJob,
        JobKind::MPIJob,
        JobKind::XGBoostJob,
        JobKind::PaddleJob,
        JobKind::JAXJob,
    ];

    /// The kind's name as the API and the controller's `--enable-scheme` know it.
    pub fn as_str(self) -> &'static str {
        match self {
            JobKind::TFJob => "TFJob",
            JobKind::PyTorchJob => "PyTorchJob",
            JobKind::MPIJob => "MPIJob",
            JobKind::XGBoostJob => "XGBoostJob",
            JobKind::PaddleJob => "PaddleJob",
            JobKind::JAXJob => "JAXJob",
        }
    }
}

/// Gang scheduler the training-operator hands job pods to.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum GangScheduler {
    /// Volcano.
    Volcano,
    /// The scheduler-plugins coscheduling plugin.
    SchedulerPlugins,
}

component_crd! {
    kind = "Training", plural = "trainings", shortname = "kftraining", status = "ComponentStatus",
    doc = "The Kubeflow training-operator (Trainer v1: PyTorchJob, TFJob and the other job kinds), reconciled by the kubeflow-training-operator. Usually created by a Kubeflow resource; edit it to change this component alone.",
    version_doc = "training-operator version to deploy, e.g. \"v1.9.2\"; the meta-operator sets it from its release table.",
    images_doc = "Image overrides by container name, e.g. {\"training-operator\": \"registry.example/kubeflow/training-operator:v1.9.2\"}.",
    schema = JsonSchema, columns = [printcolumn(name = "Version", type_ = "string", json_path = ".status.version"),],
    /// Desired state of the Kubeflow training-operator.
    pub struct TrainingSpec {
        /// Version, images, scale and scheduling.
        #[serde(flatten)]
        pub common: CommonSpec,
        /// Job kinds to enable; only their CRDs are installed. Default: all.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[schemars(length(min = 1))]
        pub job_kinds: Option<Vec<JobKind>>,
        /// Gang scheduler to use; none when unset.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub gang_scheduler: Option<GangScheduler>,
    }
}
