//! The `CertManager` kind: cert-manager and the Kubeflow issuer.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::common::{CommonSpec, ComponentStatus};

/// Whether the operator installs cert-manager or uses one already running.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum CertManagerMode {
    /// Install cert-manager unless one the project did not install already
    /// serves the cluster; then use that one and install only the issuer.
    #[default]
    Auto,
    /// Install cert-manager; refused when another one serves the cluster
    /// (two cert-managers would both act on every Certificate).
    Install,
    /// Never install cert-manager: use the one serving the cluster, and
    /// refuse when there is none.
    External,
}

component_crd! {
    kind = "CertManager", plural = "certmanagers", shortname = "kfcm", status = "CertManagerStatus",
    doc = "cert-manager (controller, cainjector, webhook) and the kubeflow-self-signing-issuer ClusterIssuer, reconciled by the kubeflow-cert-manager-operator; or, where a cert-manager the project did not install serves the cluster, only the issuer. Usually created by a Kubeflow resource; edit it to change this component alone.",
    version_doc = "cert-manager version to deploy, e.g. \"v1.20.2\"; the meta-operator sets it from its release table. Unused when a cert-manager the project did not install is used (mode Auto or External).",
    images_doc = "Image overrides by container name, e.g. {\"cert-manager-controller\": \"registry.example/jetstack/cert-manager-controller:v1.20.2\"}; the others are \"cert-manager-cainjector\" and \"cert-manager-webhook\".",
    schema = JsonSchema, columns = [printcolumn(name = "Version", type_ = "string", json_path = ".status.version"), printcolumn(name = "Found", type_ = "string", json_path = ".status.found.version"),],
    /// Desired state of cert-manager.
    pub struct CertManagerSpec {
        /// Version, images, scale and scheduling (of cert-manager's three
        /// Deployments: controller, cainjector, webhook).
        #[serde(flatten)]
        pub common: CommonSpec,
        /// Install cert-manager, use one already running, or decide by what
        /// is found. Default: Auto.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub mode: Option<CertManagerMode>,
    }
}

/// A cert-manager the project did not install, found serving the cluster.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FoundCertManager {
    /// Its version, from the `app.kubernetes.io/version` label of its
    /// `certificates.cert-manager.io` CRD; "unknown" when unlabelled.
    pub version: String,
    /// Who manages it, from the CRD's `app.kubernetes.io/managed-by` label
    /// (e.g. "Helm"), when labelled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub managed_by: Option<String>,
}

/// Status of cert-manager.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CertManagerStatus {
    /// Conditions, versions and workloads.
    #[serde(flatten)]
    pub common: ComponentStatus,
    /// The cert-manager in use when it is not the one this operator
    /// installs (only the issuer is installed then).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub found: Option<FoundCertManager>,
}

crate::status::extended_status!(CertManagerStatus);
