//! The `Pipelines` kind: Kubeflow Pipelines.

use kube::KubeSchema;
use serde::{Deserialize, Serialize};

pub use crate::common::VolumePolicy;
use crate::common::{CommonSpec, ComponentStatus, SecretKeyRef};

/// An external MySQL-compatible database.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct ExternalDatabase {
    /// Host name of the database server.
    #[schemars(length(min = 1, max = 253))]
    pub host: String,
    /// Port of the database server.
    #[serde(default = "default_mysql_port")]
    #[schemars(range(min = 1, max = 65535))]
    pub port: i32,
    /// Database name prefix Pipelines uses.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub database: Option<String>,
    /// Name of a Secret with keys `username` and `password`.
    #[schemars(length(min = 1, max = 253))]
    pub credentials_secret: String,
}

fn default_mysql_port() -> i32 {
    3306
}

/// The database Pipelines stores its metadata in.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct Database {
    /// Use this external database instead of the bundled MySQL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub external: Option<ExternalDatabase>,
}

/// An external S3-compatible object store.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct ExternalObjectStore {
    /// Endpoint host (and port) of the object store.
    #[schemars(length(min = 1, max = 253))]
    pub endpoint: String,
    /// Bucket for pipeline artifacts.
    #[schemars(length(min = 3, max = 63))]
    pub bucket: String,
    /// Region of the bucket.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub region: Option<String>,
    /// Whether to use TLS.
    #[serde(default = "default_true")]
    pub secure: bool,
    /// Access key id in a Secret.
    pub access_key: SecretKeyRef,
    /// Secret access key in a Secret.
    pub secret_key: SecretKeyRef,
}

fn default_true() -> bool {
    true
}

/// The object store Pipelines keeps artifacts in.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct ObjectStore {
    /// Use this external object store instead of the bundled one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub external: Option<ExternalObjectStore>,
}

component_crd! {
    kind = "Pipelines", plural = "pipelines", shortname = "kfpipelines", status = "ComponentStatus",
    doc = "Kubeflow Pipelines (API server, UI, workflow controller, metadata store, database and object store), reconciled by the kubeflow-pipelines-operator. Usually created by a Kubeflow resource; edit it to change this component alone.",
    version_doc = "Kubeflow Pipelines version to deploy, e.g. \"2.16.1\" (no \"v\"); the meta-operator sets it from its release table.",
    images_doc = "Image overrides by container name, e.g. {\"ml-pipeline-api-server\": \"registry.example/kfp/api-server:2.16.1\"}.",
    schema = KubeSchema, columns = [printcolumn(name = "Version", type_ = "string", json_path = ".status.version"),],
    /// Desired state of Kubeflow Pipelines.
    pub struct PipelinesSpec {
        /// Version, images, scale and scheduling.
        #[serde(flatten)]
        pub common: CommonSpec,
        /// Metadata database: bundled MySQL unless `external` is set.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub database: Option<Database>,
        /// Artifact store: bundled unless `external` is set.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub object_store: Option<ObjectStore>,
        /// Whether the bundled stores' PersistentVolumeClaims are kept (Retain, default) on removal.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub volume_policy: Option<VolumePolicy>,
    }
}
