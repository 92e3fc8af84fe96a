//! The `Serving` kind: KServe.

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::common::{CommonSpec, ComponentStatus};

/// How KServe deploys inference services.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum DeploymentMode {
    /// Plain Deployments and Services (no Knative).
    #[default]
    RawDeployment,
    /// Knative Serving.
    Serverless,
}

/// Where the KServe webhook certificate comes from.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum CertificateSource {
    /// The operator generates a self-signed CA and serving certificate.
    #[default]
    SelfSigned,
    /// cert-manager issues it from the bundle's Issuer and Certificate.
    CertManager,
}

/// Desired state of KServe.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "components.kubeflow.org",
    version = "v1alpha1",
    kind = "Serving",
    plural = "servings",
    namespaced,
    status = "ComponentStatus",
    shortname = "kfserving",
    category = "kubeflow-all",
    printcolumn(name = "Version", type_ = "string", json_path = ".status.version"),
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].status"
    ),
    printcolumn(
        name = "Reason",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].reason"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct ServingSpec {
    /// Version, images, scale and scheduling.
    #[serde(flatten)]
    pub common: CommonSpec,
    /// Deployment mode written into the inferenceservice-config ConfigMap.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deployment_mode: Option<DeploymentMode>,
    /// Ingress gateway inference services use, as namespace/name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ingress_gateway: Option<String>,
    /// Source of the webhook certificate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub certificates: Option<CertificateSource>,
    /// ClusterServingRuntimes to install by name. Default: all of the bundle's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub serving_runtimes: Option<Vec<String>>,
}
