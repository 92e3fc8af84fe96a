//! The `Knative` kind: Knative Serving with its Istio networking layer (what
//! KServe's Serverless mode runs on), and Knative Eventing when asked.

use schemars::JsonSchema;

use crate::common::{CommonSpec, ComponentStatus};

component_crd! {
    kind = "Knative", plural = "knatives", shortname = "kfknative", status = "ComponentStatus",
    doc = "Knative Serving (with net-istio and the cluster-local gateway) and, when asked, Knative Eventing, reconciled by the kubeflow-knative-operator, in knative-serving and knative-eventing. Needs Istio's CRDs. Usually created by a Kubeflow resource; edit it to change this component alone.",
    version_doc = "Knative version to deploy, e.g. \"v1.22.0\"; the meta-operator sets it from its release table.",
    images_doc = "Image overrides by container name, e.g. {\"controller\": \"registry.example/knative/serving/controller:v1.22.0\"}; the others are \"webhook\", \"activator\", \"autoscaler\" and net-istio's. The queue-proxy image in config-deployment moves with imageRegistry.",
    schema = JsonSchema, columns = [printcolumn(name = "Version", type_ = "string", json_path = ".status.version"),],
    /// Desired state of Knative.
    pub struct KnativeSpec {
        /// Version, images, scale and scheduling (of Serving's controller, webhook, activator and autoscaler).
        #[serde(flatten)]
        pub common: CommonSpec,
        /// Whether Knative Eventing is installed too (brokers, triggers,
        /// sources). Default: false, as upstream's example leaves it out.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub eventing: Option<bool>,
        /// The domain Knative Services' URLs are made under
        /// (`<service>.<namespace>.<domain>`): a DNS name, each label at most
        /// 63 characters. Default: the release's (example.com).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[schemars(
            length(min = 1, max = 253),
            regex(pattern = r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?(\.[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?)*$")
        )]
        pub domain: Option<String>,
        /// The networking layer Knative Services are exposed through.
        /// Default: Istio (net-istio, which is installed); another class
        /// needs that ingress installed by you.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[schemars(
            length(min = 1, max = 253),
            regex(pattern = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
        )]
        pub ingress_class: Option<String>,
    }
}
