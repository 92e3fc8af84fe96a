//! The `ModelRegistry` kind: Kubeflow's model registry (named Kubeflow Hub
//! from 26.03.1 on): its server, database, web app and model catalog.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::common::{CommonSpec, ComponentStatus, DatabaseEngine, ExternalDatabase, VolumePolicy};

/// Where the registry keeps its records.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ModelRegistryDatabase {
    /// Use this external database instead of the bundled one (MySQL at
    /// v0.3.7, PostgreSQL from v0.3.9 on; its password is generated and
    /// kept in a Secret).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub external: Option<ExternalDatabase>,
    /// The bundled database's engine. Unset: the engine the registry's
    /// records are in; an install made at v0.3.7 keeps its MySQL (and its
    /// volume `metadata-mysql`) across the upgrade, a new install runs the
    /// release's own (PostgreSQL from v0.3.9 on). `PostgreSQL` moves an
    /// existing install to a new, empty PostgreSQL and releases MySQL's
    /// volume with its data; `MySQL` runs v0.3.7's MySQL at any version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub engine: Option<DatabaseEngine>,
}

component_crd! {
    kind = "ModelRegistry", plural = "modelregistries", shortname = "kfmodelregistry", status = "ComponentStatus",
    doc = "Model Registry (Kubeflow Hub from v0.3.9: registry server, database, web app, model catalog), reconciled by the kubeflow-model-registry-operator. Needs Istio's CRDs. Usually created by a Kubeflow resource; edit it to change this component alone.",
    version_doc = "Model Registry version to deploy, e.g. \"v0.3.9\"; the meta-operator sets it from its release table.",
    images_doc = "Image overrides by container name, e.g. {\"rest-container\": \"registry.example/kubeflow/hub/server:v0.3.9\"}; the others are \"model-registry-ui\", \"catalog\", \"db-container\" and \"postgres\".",
    schema = JsonSchema, columns = [printcolumn(name = "Version", type_ = "string", json_path = ".status.version"),],
    /// Desired state of the Model Registry.
    pub struct ModelRegistrySpec {
        /// Version, images, scale and scheduling (of the registry server, its web app and the catalog server).
        #[serde(flatten)]
        pub common: CommonSpec,
        /// Records database: the bundled one unless `external` is set.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub database: Option<ModelRegistryDatabase>,
        /// Whether the bundled databases' volumes (the registry's and the
        /// catalog's) and the generated passwords that open them are kept
        /// (Retain, default) or deleted on removal.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub volume_policy: Option<VolumePolicy>,
        /// Whether the model catalog (a browsable list of published models,
        /// with its own PostgreSQL) is installed. Default: true. Its
        /// Hugging Face key, when one is wanted, is the user's Secret
        /// `model-catalog-hf-api-key` (key `HF_API_KEY`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub catalog: Option<bool>,
    }
}
