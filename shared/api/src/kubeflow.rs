//! The `Kubeflow` kind: the one CR a user writes; the meta-operator turns it into component CRs.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::CustomResource;
use kube::core::object::HasSpec;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::common::{CommonSpec, Platform, SharedSettings};
use crate::components::ComponentSpec;

/// Whether the meta-operator installs a component.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum ManagementState {
    /// Install and keep the component.
    #[default]
    Managed,
    /// Remove the component (its CRDs are kept unless its spec says otherwise).
    Removed,
}

/// One component's entry in the `Kubeflow` CR.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ComponentEntry<S> {
    /// Managed (install it) or Removed (remove it).
    #[serde(default)]
    pub management_state: ManagementState,
    /// Fields passed through to the component's CR; fields not stated here are left to whoever sets them on that CR.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec: Option<S>,
}

/// [`KubeflowComponents`] from the registry's entries: one field per
/// component, named and described by its entry.
macro_rules! kubeflow_components {
    ($($module:ident $kind:ident $name:tt $field:tt $plural:tt [$($doc:tt)*] $component:tt)*) => {
        /// The components of a Kubeflow installation. A component left out is not installed.
        #[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
        pub struct KubeflowComponents {$(
            $(#[doc = $doc])*
            #[serde(rename = $field, default, skip_serializing_if = "Option::is_none")]
            pub $module: Option<ComponentEntry<<crate::components::$module::$kind as HasSpec>::Spec>>,
        )*}

        impl KubeflowComponents {
            /// The entry of the component of that name (the registry's),
            /// whatever its spec's type.
            pub fn entry(&self, name: &str) -> Option<&dyn StatedEntry> {
                match name {
                    $($name => Some(&self.$module),)*
                    _ => None,
                }
            }
        }
    };
}

crate::for_each_component!(kubeflow_components);

/// [`ChildSpec`] from the registry's entries: one variant per component.
macro_rules! child_spec {
    ($($module:ident $kind:ident $name:tt $field:tt $plural:tt [$($doc:tt)*] $component:tt)*) => {
        /// One component's spec, typed whichever the component: what the
        /// meta-operator makes that component's resource of.
        #[derive(Clone, Debug, PartialEq)]
        pub enum ChildSpec {$(
            $(#[doc = $doc])*
            $kind(<crate::components::$module::$kind as HasSpec>::Spec),
        )*}

        impl ChildSpec {
            /// The settings every component shares.
            pub fn common(&self) -> &CommonSpec {
                match self {
                    $(ChildSpec::$kind(s) => s.common(),)*
                }
            }

            /// The settings every component shares, to set.
            pub fn common_mut(&mut self) -> &mut CommonSpec {
                match self {
                    $(ChildSpec::$kind(s) => s.common_mut(),)*
                }
            }

            /// The spec as the component's resource holds it.
            pub fn to_value(&self) -> serde_json::Value {
                match self {
                    // A spec of plain data always serializes.
                    $(ChildSpec::$kind(s) => serde_json::to_value(s).unwrap_or_default(),)*
                }
            }
        }

        $(
            impl From<<crate::components::$module::$kind as HasSpec>::Spec> for ChildSpec {
                fn from(spec: <crate::components::$module::$kind as HasSpec>::Spec) -> Self {
                    ChildSpec::$kind(spec)
                }
            }
        )*
    };
}

crate::for_each_component!(child_spec);

/// A component's entry in the `Kubeflow` CR, stated or not, whatever its
/// spec's type: what the meta-operator makes the component's CR of.
pub trait StatedEntry {
    /// Whether it is stated and Managed.
    fn is_managed(&self) -> bool;
    /// The spec it states (the spec's defaults when it states none), after
    /// `fill` has set the shared settings.
    fn child_spec(&self, fill: &dyn Fn(&mut CommonSpec)) -> ChildSpec;
}

impl<S: ComponentSpec + Into<ChildSpec>> StatedEntry for Option<ComponentEntry<S>> {
    fn is_managed(&self) -> bool {
        self.as_ref()
            .is_some_and(|e| e.management_state == ManagementState::Managed)
    }

    fn child_spec(&self, fill: &dyn Fn(&mut CommonSpec)) -> ChildSpec {
        let mut spec = self
            .as_ref()
            .and_then(|e| e.spec.clone())
            .unwrap_or_default();
        fill(spec.common_mut());
        spec.into()
    }
}

/// A Kubeflow installation.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "platform.kubeflow.org",
    version = "v1alpha1",
    kind = "Kubeflow",
    plural = "kubeflows",
    namespaced,
    status = "KubeflowStatus",
    doc = "A Kubeflow installation: the release and the components to run. The kubeflow-meta-operator creates one component resource per entry (Istio, CertManager, Knative, Auth, Dashboard, Pipelines, Serving, Training, Trainer, Notebooks, Katib, ModelRegistry, Spark, DevicePlugins) at the release's versions and reports their readiness here.",
    shortname = "kf",
    category = "kubeflow-all",
    // The release reached, or the one being installed ("installing 26.03.1")
    // or upgraded to ("26.03 -> 26.03.1"), so the column is never empty while
    // the meta-operator works; the one asked for in -o wide.
    printcolumn(name = "Version", type_ = "string", json_path = ".status.release"),
    printcolumn(
        name = "Requested",
        type_ = "string",
        json_path = ".spec.version",
        priority = 1
    ),
    printcolumn(name = "Phase", type_ = "string", json_path = ".status.phase"),
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.readyComponents"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    ),
    // Which components are not Ready and why ("waiting for serving (...)").
    printcolumn(
        name = "Message",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].message"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct KubeflowSpec {
    /// Kubeflow release, one of those this operator knows (the schema's
    /// enum); picks each component's default version.
    #[schemars(schema_with = "release_schema")]
    pub version: String,
    /// The platform, image mirror and digests, and upgrade approval of
    /// every component (a component's entry may state its own, but for
    /// `approvedPlan`: the release's plan is approved here).
    #[serde(flatten)]
    pub shared: SharedSettings,
    /// The components to install and their settings.
    #[serde(default)]
    pub components: KubeflowComponents,
}

/// The Kubeflow releases the meta-operator knows, oldest first (its release
/// table holds each one's component versions). The CRD refuses any other
/// at `kubectl apply`.
pub const RELEASES: &[&str] = &["1.10.2", "1.11.0", "26.03", "26.03.1"];

fn release_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "description": "Kubeflow release, one of those this operator knows; picks each component's default version.",
        "type": "string",
        "enum": RELEASES,
    })
}

/// Lifecycle phase of a Kubeflow installation.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum Phase {
    /// Components are being installed.
    Installing,
    /// Components are moving to a new release.
    Upgrading,
    /// A new release's plan waits for `spec.approvedPlan` (upgradeStrategy Manual).
    AwaitingApproval,
    /// Every managed component is Ready.
    Ready,
    /// The spec cannot be applied, or a component failed.
    Degraded,
    /// The installation is being removed.
    Deleting,
}

/// One component as the `Kubeflow` status summarizes it.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ComponentSummary {
    /// Component name, e.g. "pipelines".
    pub name: String,
    /// Version the component CR asks for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// Whether the component is Ready at the current generation.
    pub ready: bool,
    /// Why it is not ready, as a CamelCase reason.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// A human-readable explanation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// An upgrade in progress.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct UpgradeStatus {
    /// Release being left.
    pub from: String,
    /// Release being installed.
    pub to: String,
}

/// A release upgrade's plan: every component's, and one digest for them all.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReleasePlan {
    /// Release installed.
    pub from: String,
    /// Release asked for.
    pub to: String,
    /// The digest `spec.approvedPlan` takes to approve every component's
    /// plan; empty while `computing` names a component, so that what is
    /// approved is always the whole release.
    pub digest: String,
    /// Whether the upgrade waits for `spec.approvedPlan`.
    pub awaiting_approval: bool,
    /// Components that move in this upgrade but have not published their
    /// plan yet.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub computing: Vec<String>,
    /// Each component's plan in brief (the whole plan is in the component
    /// CR's `status.upgradePlan`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub components: Vec<ComponentPlan>,
}

/// One component's part of a release plan.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ComponentPlan {
    /// Component name, e.g. "serving".
    pub name: String,
    /// Version installed.
    pub from: String,
    /// Version asked for.
    pub to: String,
    /// The component plan's digest.
    pub digest: String,
    /// Its counts: created, changed, pruned, released, recreated, held.
    pub summary: String,
}

/// Observed state of a Kubeflow installation.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KubeflowStatus {
    /// The generation of the spec this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Installing, Upgrading, Ready, Degraded or Deleting.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<Phase>,
    /// Ready, Progressing and Degraded, per the Kubernetes API conventions.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "crate::common::conditions_schema")]
    pub conditions: Vec<Condition>,
    /// The release every component has reached (set once all are Ready at it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// What the VERSION column shows: the release reached; while installing,
    /// "installing <release>"; while upgrading, "<from> -> <to>".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub release: Option<String>,
    /// The platform resolved from spec.platform.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub platform: Option<Platform>,
    /// Ready managed components out of all managed, e.g. "4/5".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready_components: Option<String>,
    /// Per-component summary.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub components: Vec<ComponentSummary>,
    /// The upgrade in progress, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upgrade: Option<UpgradeStatus>,
    /// The plan of the upgrade in progress (or waiting for approval).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upgrade_plan: Option<ReleasePlan>,
}
