//! The `Dashboard` kind: Kubeflow's central dashboard, the profile
//! controller with KFAM (Kubeflow's tenancy), the PodDefaults admission
//! webhook and the aggregated `kubeflow-admin`, `kubeflow-edit` and
//! `kubeflow-view` roles; and the profiles a platform team declares.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::common::{CommonSpec, ComponentStatus};

/// A profile the operator keeps as declared: its namespace, owner and
/// quota (the profile controller makes the namespace and the owner's
/// access from it).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DeclaredProfile {
    /// The profile's name, which its namespace takes (a DNS label).
    #[schemars(length(min = 1, max = 63))]
    pub name: String,
    /// The owner's email: administers the namespace (`kubeflow-admin`).
    /// Never a name Kubernetes keeps for itself (`system:...`).
    #[schemars(
        length(min = 3, max = 254),
        regex(pattern = r"^[^@\s]+@[^@\s]+\.[^@\s]+$"),
        extend("x-kubernetes-validations" = [{"rule": "!self.startsWith('system:')", "message": "a name Kubernetes keeps for itself (system:...) is no person's email"}])
    )]
    pub owner: String,
    /// The namespace's resource quota (`hard` limits, e.g. {"cpu": "32",
    /// "requests.nvidia.com/gpu": "4"}); none when not set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_quota: Option<BTreeMap<String, Quantity>>,
    /// People and IdP groups who work in the profile's namespace besides
    /// its owner, each with a role.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 200))]
    pub contributors: Option<Vec<Contributor>>,
}

/// Someone who works in a declared profile's namespace: one person (by the
/// email they log in with) or everyone in one of the identity provider's
/// groups (the login token's `groups` claim). Exactly one of `user` and
/// `group`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Contributor {
    /// A person's email (the login's `kubeflow-userid`). Never a name
    /// Kubernetes keeps for itself (`system:...`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(min = 3, max = 254),
        regex(pattern = r"^[^@\s]+@[^@\s]+\.[^@\s]+$"),
        extend("x-kubernetes-validations" = [{"rule": "!self.startsWith('system:')", "message": "a name Kubernetes keeps for itself (system:...) is no person's email"}])
    )]
    pub user: Option<String>,
    /// A group of the identity provider, as the login token's `groups`
    /// claim names it. Never one of Kubernetes' own (`system:...`: all
    /// ServiceAccounts, anonymous or all signed-in requests).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(min = 1, max = 253),
        extend("x-kubernetes-validations" = [{"rule": "!self.startsWith('system:')", "message": "Kubernetes' own groups (system:...) are no group of the identity provider"}])
    )]
    pub group: Option<String>,
    /// What they may do there.
    pub role: ContributorRole,
}

/// A contributor's rights in a profile's namespace: Kubeflow's aggregated
/// roles.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum ContributorRole {
    /// `kubeflow-edit`: create and change notebooks, runs, models, volumes.
    #[serde(rename = "edit")]
    Edit,
    /// `kubeflow-view`: read them.
    #[serde(rename = "view")]
    View,
}

impl ContributorRole {
    /// The role as KFAM names it (`edit`, `view`).
    pub fn as_str(self) -> &'static str {
        match self {
            ContributorRole::Edit => "edit",
            ContributorRole::View => "view",
        }
    }
}

/// What becomes of a profile removed from `spec.profiles`.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum RemovedProfiles {
    /// Released: the Profile, its namespace and everything in it stay, no
    /// longer kept by the operator (listed in `status.released`).
    #[default]
    Release,
    /// Deleted: the Profile goes, and the profile controller deletes its
    /// namespace with every notebook, volume and run in it.
    Delete,
}

component_crd! {
    kind = "Dashboard", plural = "dashboards", shortname = "kfdash", status = "DashboardStatus",
    doc = "Kubeflow's central dashboard, profile controller with KFAM, PodDefaults webhook and aggregated kubeflow-admin/edit/view roles, and the profiles a platform team declares, reconciled by the kubeflow-dashboard-operator. Profiles that users create themselves are left alone. Usually created by a Kubeflow resource; edit it to change this component alone.",
    version_doc = "Central dashboard version to deploy, e.g. \"v2.0.0\"; the meta-operator sets it from its release table.",
    images_doc = "Image overrides by container name, e.g. {\"dashboard\": \"registry.example/kubeflow/dashboard/dashboard:v2.0.0\"}; v1.10.0 names its containers centraldashboard, admission-webhook, kfam and manager.",
    schema = JsonSchema, columns = [printcolumn(name = "Version", type_ = "string", json_path = ".status.version"), printcolumn(name = "Profiles", type_ = "integer", json_path = ".status.profileCount"),],
    /// Desired state of the dashboard and the declared profiles.
    pub struct DashboardSpec {
        /// Version, images, scale and scheduling (of the dashboard, the
        /// profile controller and the PodDefaults webhook).
        #[serde(flatten)]
        pub common: CommonSpec,
        /// Whether a person who logs in without a profile is offered to
        /// create their own (the dashboard's registration flow). Default:
        /// false, as upstream ships it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub self_registration: Option<bool>,
        /// Profiles kept as declared.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[schemars(length(max = 1000))]
        pub profiles: Option<Vec<DeclaredProfile>>,
        /// What becomes of a profile removed from `profiles`: Release (the
        /// default: it stays, with its namespace and data) or Delete.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub removed_profiles: Option<RemovedProfiles>,
    }
}

/// Status of the dashboard.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DashboardStatus {
    /// Conditions, versions and workloads.
    #[serde(flatten)]
    pub common: ComponentStatus,
    /// How many profiles are declared (those released since are listed in
    /// `released`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profile_count: Option<i32>,
    /// Declared profiles with contributors whose namespace the profile
    /// controller has not made yet: their contributors get access once it
    /// exists.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub contributors_pending: Option<Vec<String>>,
}

crate::status::extended_status!(DashboardStatus);
