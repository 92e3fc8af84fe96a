//! The `Serving` kind: KServe.

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

component_crd! {
    kind = "Serving", plural = "servings", shortname = "kfserving", status = "ComponentStatus",
    doc = "KServe, Kubeflow's model serving (controller, webhooks, serving runtimes), reconciled by the kubeflow-serving-operator. Usually created by a Kubeflow resource; edit it to change this component alone.",
    version_doc = "KServe version to deploy, e.g. \"v0.18.0\"; the meta-operator sets it from its release table.",
    images_doc = "Image overrides by container name, e.g. {\"manager\": \"registry.example/kserve/kserve-controller:v0.18.0\"} (KServe's controllers all name their container \"manager\": one override sets them all).",
    schema = JsonSchema, columns = [printcolumn(name = "Version", type_ = "string", json_path = ".status.version"),],
    /// Desired state of KServe.
    pub struct ServingSpec {
        /// Version, images, scale and scheduling.
        #[serde(flatten)]
        pub common: CommonSpec,
        /// Deployment mode written into the inferenceservice-config ConfigMap.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub deployment_mode: Option<DeploymentMode>,
        /// Ingress gateway inference services use, as namespace/name.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[schemars(
            length(min = 3, max = 317),
            regex(pattern = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?/[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")
        )]
        pub ingress_gateway: Option<String>,
        /// Source of the webhook certificate.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub certificates: Option<CertificateSource>,
        /// ClusterServingRuntimes to install by name. Default: all of the bundle's.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub serving_runtimes: Option<Vec<String>>,
    }
}
