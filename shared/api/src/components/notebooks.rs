//! The `Notebooks` kind: Kubeflow Notebooks (notebook controller, Jupyter,
//! volumes and TensorBoards web apps, TensorBoard controller, PVC viewer).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::common::{CommonSpec, ComponentStatus};

/// Stopping notebooks whose kernels have been idle (the notebook
/// controller's culling).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Culling {
    /// Whether idle notebooks are stopped (scaled to zero; their volumes
    /// stay). Default: the release's (off).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    /// Minutes without kernel activity before a notebook is stopped.
    /// Default: the release's (1440, a day).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 525600))]
    pub idle_minutes: Option<i32>,
    /// Minutes between two checks of every notebook's idleness. Default:
    /// the release's (1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 1440))]
    pub check_period_minutes: Option<i32>,
}

/// The GPUs a new notebook asks for by default.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SpawnerGpu {
    /// How many; 0 asks for none.
    #[schemars(range(min = 0, max = 16))]
    pub count: i32,
    /// The resource name of the vendor's GPUs, one the spawner offers
    /// (e.g. "nvidia.com/gpu", "amd.com/gpu").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub vendor: Option<String>,
}

/// What the Jupyter web app's form for a new notebook offers and fills in.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Spawner {
    /// The Jupyter images offered, replacing the release's list. Moved to
    /// `imageRegistry` like every other image.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 64), extend("items" = {"type": "string", "maxLength": 512}))]
    pub images: Option<Vec<String>>,
    /// The image selected by default: one of `images` (or of the release's
    /// list when `images` is unset).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 512))]
    pub default_image: Option<String>,
    /// Default CPU request of a new notebook (a quantity, e.g. "500m").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 32))]
    pub cpu: Option<String>,
    /// Default memory request of a new notebook (a quantity, e.g. "2Gi").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 32))]
    pub memory: Option<String>,
    /// Default GPUs of a new notebook.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu: Option<SpawnerGpu>,
    /// Storage class of new workspace volumes; unset: the cluster's default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(min = 1, max = 253),
        regex(pattern = r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")
    )]
    pub storage_class: Option<String>,
}

component_crd! {
    kind = "Notebooks", plural = "notebooks", shortname = "kfnb", status = "ComponentStatus",
    doc = "Kubeflow Notebooks (notebook controller, Jupyter and volumes web apps, TensorBoards, PVC viewer), reconciled by the kubeflow-notebooks-operator. Needs Istio's and cert-manager's CRDs. Usually created by a Kubeflow resource; edit it to change this component alone.",
    version_doc = "Kubeflow Notebooks version to deploy, e.g. \"v1.11.0\"; the meta-operator sets it from its release table.",
    images_doc = "Image overrides by container name, e.g. {\"jupyter-web-app\": \"registry.example/kubeflow/notebooks/jupyter-web-app:v1.11.0\"}; the controllers name theirs \"manager\" (one override sets them all). The images the spawner offers are spec.spawner.images.",
    schema = JsonSchema, columns = [printcolumn(name = "Version", type_ = "string", json_path = ".status.version"),],
    /// Desired state of Kubeflow Notebooks.
    pub struct NotebooksSpec {
        /// Version, images, scale and scheduling (of the six controllers and web apps).
        #[serde(flatten)]
        pub common: CommonSpec,
        /// Stopping idle notebooks.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub culling: Option<Culling>,
        /// What the form for a new notebook offers and fills in.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub spawner: Option<Spawner>,
    }
}
