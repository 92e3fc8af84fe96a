//! The `Istio` kind: the Istio control plane Kubeflow needs.

use k8s_openapi::api::core::v1::ResourceRequirements;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::common::{CommonSpec, ComponentStatus};

/// Scale and resources of one Istio workload.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct IstioWorkload {
    /// Replicas of the workload.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 100))]
    pub replicas: Option<i32>,
    /// Resource requests and limits of its main container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourceRequirements>,
}

/// The ingress gateway.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct IngressGateway {
    /// Whether to install the ingress gateway (default true).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    /// Scale and resources of the gateway.
    #[serde(default, flatten)]
    pub workload: IstioWorkload,
}

component_crd! {
    kind = "Istio", plural = "istios", shortname = "kfistio", status = "ComponentStatus",
    doc = "The Istio control plane (CNI, istiod, ingress gateway) that Kubeflow's Serving and Pipelines use, reconciled by the kubeflow-istio-operator. Usually created by a Kubeflow resource; edit it to change this component alone.",
    version_doc = "Istio version to deploy, e.g. \"1.30.1\" (no \"v\"); the meta-operator sets it from its release table.",
    images_doc = "Image overrides by container name, e.g. {\"discovery\": \"registry.example/istio/pilot:1.30.1\"} (istiod's container); \"istio-proxy\" names the gateway's.",
    schema = JsonSchema, columns = [printcolumn(name = "Version", type_ = "string", json_path = ".status.version"),],
    /// Desired state of the Istio control plane.
    pub struct IstioSpec {
        /// Version, images, scale and scheduling.
        #[serde(flatten)]
        pub common: CommonSpec,
        /// istiod's scale and resources.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub istiod: Option<IstioWorkload>,
        /// The ingress gateway.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub ingress_gateway: Option<IngressGateway>,
        /// Mesh config entries merged into the `mesh` key of the `istio` ConfigMap
        /// (at most 64 top-level fields and 16 KiB written out).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[schemars(extend("x-kubernetes-preserve-unknown-fields" = true, "maxProperties" = 64))]
        pub mesh_config: Option<serde_json::Map<String, serde_json::Value>>,
        /// Route the web apps through the login (the Auth component): adds
        /// the `oauth2-proxy` extension provider to the mesh config, makes
        /// istiod refresh token signing keys every minute (the identity
        /// provider may start after it), and installs the `kubeflow-gateway`
        /// Gateway in this resource's namespace, which every web app's
        /// route names. The meta-operator sets it when Auth is Managed.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub oauth2_proxy: Option<bool>,
    }
}
