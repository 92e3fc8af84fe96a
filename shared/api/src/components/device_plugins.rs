//! The `DevicePlugins` kind: GPU device plugins as DaemonSets.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Toleration;
use kube::KubeSchema;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::common::{CommonSpec, ComponentStatus};

/// The device plugin's vendor and device.
#[derive(
    Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, JsonSchema,
)]
pub enum PluginType {
    /// The NVIDIA GPU device plugin (`nvidia.com/gpu`).
    #[serde(rename = "nvidia-gpu")]
    NvidiaGpu,
    /// The Intel GPU device plugin (`gpu.intel.com/i915`, `gpu.intel.com/xe`).
    #[serde(rename = "intel-gpu")]
    IntelGpu,
}

impl PluginType {
    /// The name used in bundle folders and the API.
    pub fn as_str(self) -> &'static str {
        match self {
            PluginType::NvidiaGpu => "nvidia-gpu",
            PluginType::IntelGpu => "intel-gpu",
        }
    }

    /// The vendor's node-feature label, the default node selector.
    pub fn default_node_selector(self) -> BTreeMap<String, String> {
        let key = match self {
            PluginType::NvidiaGpu => "feature.node.kubernetes.io/pci-10de.present",
            PluginType::IntelGpu => "intel.feature.node.kubernetes.io/gpu",
        };
        BTreeMap::from([(key.to_string(), "true".to_string())])
    }
}

/// One device plugin DaemonSet.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("!has(self.sharedDevNum) || self.type == 'intel-gpu'").message("sharedDevNum applies to intel-gpu plugins only"))]
pub struct DevicePlugin {
    /// Unique name of this entry; the DaemonSet is named after it.
    #[schemars(
        length(min = 1, max = 40),
        regex(pattern = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
    )]
    pub name: String,
    /// Which plugin: nvidia-gpu or intel-gpu.
    #[serde(rename = "type")]
    pub plugin_type: PluginType,
    /// Plugin version, e.g. "v0.20.0" (NVIDIA) or "v0.36.0" (Intel).
    #[schemars(length(min = 1, max = 64))]
    pub version: String,
    /// Image override of the plugin container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(max = 512),
        regex(
            pattern = r"^(?:(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])(?:\.(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9]))*(?::[0-9]+)?/)?[a-z0-9]+(?:(?:[._]|__|[-]+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:[._]|__|[-]+)[a-z0-9]+)*)*(?::[a-zA-Z0-9_][a-zA-Z0-9_.-]{0,127})?(?:@[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9A-Fa-f]{32,})?$"
        )
    )]
    pub image: Option<String>,
    /// Nodes to run on. Default: the vendor's node-feature label.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_selector: Option<BTreeMap<String, String>>,
    /// Tolerations of the plugin pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tolerations: Option<Vec<Toleration>>,
    /// Extra arguments of the plugin container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 32), extend("items" = {"type": "string", "maxLength": 1024}))]
    pub args: Option<Vec<String>>,
    /// Intel only: how many containers may share one GPU (`-shared-dev-num`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 1000))]
    pub shared_dev_num: Option<i32>,
}

component_crd! {
    kind = "DevicePlugins", plural = "deviceplugins", shortname = "kfdp", status = "DevicePluginsStatus",
    doc = "GPU device plugins (NVIDIA, Intel) as DaemonSets on the nodes each plugin selects, reconciled by the kubeflow-device-plugins-operator. Ready when every plugin's DaemonSet runs on its nodes.",
    version_doc = "Unused: each entry of plugins names its own version.",
    images_doc = "Unused: each entry of plugins names its own image.",
    schema = KubeSchema, columns = [printcolumn(name = "Plugins", type_ = "integer", json_path = ".status.pluginCount"),],
    /// Desired state of the GPU device plugins.
    pub struct DevicePluginsSpec {
        /// Shared settings; `version` is unused here (each plugin has its own).
        #[serde(flatten)]
        pub common: CommonSpec,
        /// The plugins to run, one DaemonSet each.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        #[schemars(length(max = 32), extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
        pub plugins: Vec<DevicePlugin>,
    }
}

/// Status of one plugin's DaemonSet.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PluginStatus {
    /// Name of the plugin entry.
    pub name: String,
    /// Plugin type.
    #[serde(rename = "type")]
    pub plugin_type: String,
    /// Deployed version.
    pub version: String,
    /// Nodes that should run the plugin.
    pub desired: i32,
    /// Nodes where the plugin pod is ready.
    pub ready: i32,
    /// Nodes where the plugin pod is available.
    pub available: i32,
    /// Names of the nodes with a ready plugin pod.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub nodes: Vec<String>,
}

/// Status of the device plugins.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DevicePluginsStatus {
    /// Conditions, versions and workloads.
    #[serde(flatten)]
    pub common: ComponentStatus,
    /// Number of plugin entries deployed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plugin_count: Option<i32>,
    /// Per-plugin placement and readiness.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub plugins: Vec<PluginStatus>,
}

crate::status::extended_status!(DevicePluginsStatus);
