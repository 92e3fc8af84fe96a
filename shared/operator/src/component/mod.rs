//! The generic component controller: what every micro-operator runs. A
//! component supplies its knowledge (render, preflight, retention, extra
//! status) through [`Component`]; this module does the rest:
//! dereference -> render -> preflight -> apply -> assess -> status.

//!
//! The module is split by step: `cli` (flags and subcommands), `controller`
//! (the process: watches, backoff, the finalizer), `reconcile` (dereference,
//! render, apply), `assess` (health), `removal` (released objects and the
//! finalizer's cleanup), `report` (status and metrics), `testing`
//! (helpers for the operators' own tests, behind the `testing` feature so
//! they never ship in an operator binary).

mod assess;
mod cli;
mod controller;
mod owners;
mod reconcile;
mod removal;
mod report;
#[cfg(any(test, feature = "testing"))]
pub mod testing;

pub use cli::{Command, ENVIRONMENT_HELP, command, images_of, main, rules_of};
pub use controller::run;
#[cfg(any(test, feature = "testing"))]
pub use testing::{
    assert_permitted, every_version, find, manifests_dir, permission_gaps, render_spec,
};

use assess::assess;
use controller::Context;
use reconcile::{apply, inventory_of};
use removal::{cleanup_component, released};
use report::{record_gauges, refuse, write_status};

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use kube::api::{Api, ApiResource, DynamicObject};
use kube::core::GroupVersionKind;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::{Recorder, Reporter};
use kube::runtime::finalizer::{Event as FinalizerEvent, finalizer};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use kube::{Client, Resource, ResourceExt};
use kubeflow_api::{ComponentResource, ComponentStatus, CrdPolicy, Platform, ReleasedObject};
use serde_json::Value;

use crate::apply::{ApplyError, ApplyOutcome, ApplyRequest, Engine};
use crate::bundle::{Bundle, BundleCache, BundleError};
use crate::cleanup;
use crate::conditions::{self, Reason};
use crate::events;
use crate::health;
use crate::inventory::{self, Inventory};
use crate::kinds::kind;
use crate::labels;
use crate::rbac::{self, Permissions};
use crate::runner::{self, RunArgs};
use crate::scope::NamespaceScope;
use crate::telemetry::Metrics;
use crate::telemetry::metrics::ComponentRef;

/// Finalizer every component CR carries while it has objects to clean up.
pub const FINALIZER: &str = "components.kubeflow.org/cleanup";

/// Input a person must fix: becomes a Degraded condition, applies nothing.
#[derive(Debug, Clone, PartialEq)]
pub struct Refusal {
    /// Why (see [`conditions::Reason`]).
    pub reason: conditions::Reason,
    /// What is wrong and what to do.
    pub message: String,
}

impl Refusal {
    /// A refusal; its message bounded (it may quote user input, and it is
    /// logged and written into the status).
    pub fn new(reason: conditions::Reason, message: impl Into<String>) -> Self {
        Refusal {
            reason,
            message: conditions::bounded(&message.into()),
        }
    }
}

impl From<BundleError> for Refusal {
    fn from(e: BundleError) -> Self {
        let reason = match e {
            BundleError::UnknownVersion { .. } => Reason::UnknownVersion,
            _ => Reason::BundleError,
        };
        Refusal::new(reason, e.to_string())
    }
}

/// Why `dereference` could not produce its inputs.
#[derive(Debug, thiserror::Error)]
pub enum DereferenceError {
    /// The spec references something missing: a person must act.
    #[error("{}", .0.message)]
    Refused(Refusal),
    /// A request failed; retried with backoff.
    #[error("failed to {0}: {1}")]
    Api(&'static str, #[source] kube::Error),
}

impl From<Refusal> for DereferenceError {
    fn from(r: Refusal) -> Self {
        DereferenceError::Refused(r)
    }
}

/// Refuses (PrerequisiteMissing) unless the CRD `crd` is installed: a
/// setting that needs another project (cert-manager, Knative, Volcano) is
/// checked before anything is applied. `why` names the setting and what to do.
pub async fn require_crd(client: &Client, crd: &str, why: &str) -> Result<(), DereferenceError> {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    match crds.get_opt(crd).await {
        Ok(Some(_)) => Ok(()),
        Ok(None) => {
            Err(Refusal::new(Reason::PrerequisiteMissing, format!("{why} (no {crd} CRD)")).into())
        }
        Err(e) => Err(DereferenceError::Api("look for a prerequisite CRD", e)),
    }
}

/// What a component's render step may use.
pub struct RenderContext<'a> {
    /// Where bundles live.
    pub manifests_dir: &'a std::path::Path,
    /// Parsed-bundle cache.
    pub bundles: &'a BundleCache,
    /// Namespace of the component CR.
    pub namespace: &'a str,
    /// Resolved platform.
    pub platform: Platform,
}

impl RenderContext<'_> {
    /// Loads `<component>/<version>`.
    pub fn bundle(&self, component: &str, version: &str) -> Result<Arc<Bundle>, Refusal> {
        Ok(self.bundles.get(self.manifests_dir, component, version)?)
    }
}

/// A component's rendered state.
pub struct Rendered {
    /// Objects to apply.
    pub objects: Vec<DynamicObject>,
    /// Version to report (and label objects with).
    pub version: String,
}

/// A component's knowledge. Everything else is generic.
#[async_trait::async_trait]
pub trait Component: Send + Sync + 'static {
    /// The component CR kind.
    type Resource: ComponentResource;
    /// What `dereference` reads from the cluster for `render`.
    type Inputs: Default + Send + Sync;

    /// Reads what the spec references on the cluster (Secrets, certificates,
    /// prerequisites). A missing reference is a refusal: nothing is applied.
    async fn dereference(
        &self,
        _cr: &Self::Resource,
        _client: &Client,
    ) -> Result<Self::Inputs, DereferenceError> {
        Ok(Self::Inputs::default())
    }

    /// Renders the objects for a CR: pure, no API access.
    fn render(
        &self,
        cr: &Self::Resource,
        ctx: &RenderContext<'_>,
        inputs: &Self::Inputs,
    ) -> Result<Rendered, Refusal>;

    /// Objects kept on removal and pruning (never owned by the CR either).
    fn retain(&self, _cr: &Self::Resource, _obj: &DynamicObject) -> bool {
        false
    }

    /// Component-specific status fields, merged into `.status`.
    async fn extra_status(
        &self,
        _cr: &Self::Resource,
        _live: &[DynamicObject],
        _client: &Client,
    ) -> serde_json::Map<String, Value> {
        serde_json::Map::new()
    }

    /// Removes objects the component created at run time (not from its
    /// bundle), before the inventory is cleaned up. Returns what it deleted.
    async fn cleanup_run_time_objects(
        &self,
        _cr: &Self::Resource,
        _client: &Client,
    ) -> Result<Vec<String>, kube::Error> {
        Ok(Vec::new())
    }

    /// Kinds the component renders beyond its bundles' (the bundles' are
    /// all watched): by default the RoleBindings of OpenShift SCC grants.
    /// Only those the operator's RBAC lets it watch are watched.
    fn watched_kinds(&self) -> Vec<GroupVersionKind> {
        vec![GroupVersionKind::gvk(
            "rbac.authorization.k8s.io",
            "v1",
            "RoleBinding",
        )]
    }

    /// What the operator's RBAC is made of: by default every kind of the
    /// bundle folder named after the component.
    fn permissions(&self) -> Permissions {
        Permissions::bundles(&[Self::Resource::COMPONENT])
    }
}

/// Flags of a component operator.
#[derive(clap::Args, Clone, Debug)]
pub struct ComponentArgs {
    /// Folder of bundles: `<dir>/<component>/<version>/*.yaml`.
    #[arg(
        long,
        env = "MANIFESTS_DIR",
        default_value = "/manifests",
        global = true
    )]
    pub manifests_dir: PathBuf,
    /// The namespaces CRs may install into, comma-separated (the chart's
    /// `allowedNamespaces`, where it grants the operator's Role); empty: any.
    #[arg(long, env = "ALLOWED_NAMESPACES", value_delimiter = ',', global = true)]
    pub allowed_namespaces: Vec<String>,
    /// Process flags.
    #[command(flatten)]
    pub run: RunArgs,
}

/// Errors the controller retries with backoff.
#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    /// Applying or cleaning up failed for a passing reason.
    #[error(transparent)]
    Apply(#[from] ApplyError),
    /// An API call failed.
    #[error("failed to {0}: {1}")]
    Api(&'static str, #[source] kube::Error),
    /// Cleanup is waiting for objects to go.
    #[error("waiting for {0} to be deleted")]
    CleanupPending(String),
    /// The finalizer could not run: the CR has no name, or the finalizer
    /// name is invalid (a defect, retried with backoff and counted).
    #[error("the finalizer cannot run: {0}")]
    Finalizer(String),
}

impl ReconcileError {
    fn metric_reason(&self) -> &'static str {
        match self {
            ReconcileError::Apply(e) if e.is_permission_denied() => "PermissionDenied",
            ReconcileError::Apply(_) => "ApplyError",
            ReconcileError::Api(..) => "ApiError",
            ReconcileError::CleanupPending(_) => "CleanupPending",
            ReconcileError::Finalizer(_) => "FinalizerError",
        }
    }
}

/// The operator's name for a component: `kubeflow-<component>-operator`.
pub fn operator_name<K: ComponentResource>() -> String {
    format!("kubeflow-{}-operator", K::COMPONENT)
}
