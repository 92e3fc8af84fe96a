//! The generic component controller: what every micro-operator runs. A
//! component supplies its knowledge (render, preflight, retention, extra
//! status) through [`Component`]; this module does the rest:
//! dereference -> render -> preflight -> apply -> assess -> status.

//!
//! The module is split by step: `cli` (flags and subcommands), `controller`
//! (the process: watches, backoff, the finalizer), `reconcile` (dereference,
//! render, apply), `assess` (health), `removal` (released objects and the
//! finalizer's cleanup), `testing`
//! (helpers for the operators' own tests, behind the `testing` feature so
//! they never ship in an operator binary).

mod announce;
mod assess;
mod cli;
mod context;
mod controller;
mod held;
mod inputs;
mod last_read;
mod owners;
mod reconcile;
mod released_memory;
mod removal;
mod run_time;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
mod upgrade;

pub use cli::{Command, ENVIRONMENT_HELP, command, images_of, main, rules_of};
pub use controller::run;
pub use run_time::{RunTimeObject, RunTimeScope};
#[cfg(any(test, feature = "testing"))]
pub use testing::{
    assert_permitted, every_version, find, manifests_dir, permission_gaps, render_spec,
};

use std::path::PathBuf;
use std::sync::Arc;

use kube::Client;
use kube::api::{Api, DynamicObject};
use kube::core::GroupVersionKind;
use kubeflow_api::{ComponentResource, Platform, Reported};

use crate::base::bundle::{Bundle, BundleCache};
use crate::base::conditions::Reason;
use crate::framework::controller::Failure;
use crate::framework::runner::RunArgs;
use crate::render::Layout;
use crate::render::rbac::Permissions;

/// Finalizer every component CR carries while it has objects to clean up.
pub const FINALIZER: &str = "components.kubeflow.org/cleanup";

pub use crate::base::refusal::Refusal;

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

impl From<crate::render::secrets::ReadError> for DereferenceError {
    fn from(e: crate::render::secrets::ReadError) -> Self {
        match e {
            crate::render::secrets::ReadError::Refused(r) => DereferenceError::Refused(r),
            crate::render::secrets::ReadError::Api(e) => DereferenceError::Api("read a Secret", e),
        }
    }
}

impl From<DereferenceError> for Failure {
    fn from(e: DereferenceError) -> Self {
        match e {
            DereferenceError::Refused(r) => Failure::Refused(r),
            DereferenceError::Api(what, e) => Failure::api(what, e),
        }
    }
}

/// Refuses (PrerequisiteMissing) unless the CRD `crd` is installed: a
/// setting that needs another project (cert-manager, Knative, Volcano) is
/// checked before anything is applied. `why` names the setting and what to do.
pub async fn require_crd(client: &Client, crd: &str, why: &str) -> Result<(), DereferenceError> {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    // Its metadata from the API server's cache (resourceVersion 0): this
    // runs in every reconcile, and reading the whole CRD (KServe's are
    // 780 KB) from etcd cost the server a decode and an encode each time.
    match crds
        .get_metadata_opt_with(crd, &kube::api::GetParams::any())
        .await
    {
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
    /// The component's bundle folder (its kind's `COMPONENT`).
    pub component: &'a str,
    /// The CR's shared settings (its `spec.version` among them).
    pub common: &'a kubeflow_api::CommonSpec,
}

impl<'a> RenderContext<'a> {
    /// What rendering `cr` may use.
    pub fn of<K: ComponentResource>(
        cr: &'a K,
        manifests_dir: &'a std::path::Path,
        bundles: &'a BundleCache,
        platform: Platform,
    ) -> Self {
        RenderContext {
            manifests_dir,
            bundles,
            namespace: cr.meta().namespace.as_deref().unwrap_or_default(),
            platform,
            component: K::COMPONENT,
            common: cr.common(),
        }
    }

    /// The bundle of the version the CR asks for: refused when it names
    /// none (listing those available) or one with no bundle.
    pub fn bundle(&self) -> Result<Arc<Bundle>, Refusal> {
        let version =
            crate::render::required_version(self.common, self.component, self.manifests_dir)?;
        self.bundle_at(self.component, &version)
    }

    /// Loads `<folder>/<version>`: for a component made of several bundles
    /// (the device plugins, one per plugin type).
    pub fn bundle_at(&self, folder: &str, version: &str) -> Result<Arc<Bundle>, Refusal> {
        Ok(self.bundles.get(self.manifests_dir, folder, version)?)
    }
}

/// A render under way, what [`Component::prepare`] and
/// [`Component::customise`] work on: the resource, what rendering may use,
/// the dereferenced inputs, and the objects so far.
pub struct Draft<'a, C: Component + ?Sized> {
    /// The resource rendered.
    pub cr: &'a C::Resource,
    /// What rendering may use (the resource's namespace, the platform).
    pub ctx: &'a RenderContext<'a>,
    /// What `dereference` read.
    pub inputs: &'a C::Inputs,
    /// The objects: the bundle's, as edited so far.
    pub objects: Vec<DynamicObject>,
    /// The bundle's version.
    pub version: String,
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

    /// Where the component's bundle objects go and which workloads the
    /// shared settings scale and schedule.
    const LAYOUT: Layout;

    /// Renders the objects for a CR: pure, no API access. By default the
    /// bundle of `spec.version`, edited by [`prepare`](Self::prepare),
    /// placed by [`LAYOUT`](Self::LAYOUT) with the shared settings applied,
    /// then given the component's own settings by
    /// [`customise`](Self::customise). A component made of several bundles,
    /// or whose shared settings apply otherwise, renders itself.
    fn render(
        &self,
        cr: &Self::Resource,
        ctx: &RenderContext<'_>,
        inputs: &Self::Inputs,
    ) -> Result<Rendered, Refusal> {
        let bundle = ctx.bundle()?;
        let mut draft = Draft {
            cr,
            ctx,
            inputs,
            objects: bundle.objects(),
            version: bundle.version.clone(),
        };
        self.prepare(&mut draft)?;
        crate::render::apply_common(
            &mut draft.objects,
            ctx.common,
            &Self::LAYOUT.placement(ctx.namespace),
            ctx.platform,
        )?;
        self.customise(&mut draft)?;
        Ok(Rendered {
            objects: draft.objects,
            version: draft.version,
        })
    }

    /// The component's edits of its bundle before the shared settings:
    /// checks of its own spec, objects it leaves out or adds (which the
    /// shared settings then move and mirror like the rest), configuration
    /// holding images the mirror must see.
    fn prepare(&self, _draft: &mut Draft<'_, Self>) -> Result<(), Refusal> {
        Ok(())
    }

    /// The component's own settings, after the shared ones.
    fn customise(&self, _draft: &mut Draft<'_, Self>) -> Result<(), Refusal> {
        Ok(())
    }

    /// Objects kept on removal and pruning (never owned by the CR either).
    fn retain(&self, _cr: &Self::Resource, _obj: &DynamicObject) -> bool {
        false
    }

    /// Objects a prune releases instead of deleting when the CR no longer
    /// renders them (they stay, nobody's, listed in `status.released`),
    /// with what the release says.
    fn release_on_prune(&self, _cr: &Self::Resource, _obj: &DynamicObject) -> Option<String> {
        None
    }

    /// The component's own status fields (beside the shared ones the
    /// framework fills in), from what was applied.
    async fn report(
        &self,
        _cr: &Self::Resource,
        _live: &[DynamicObject],
        _client: &Client,
        _status: &mut <Self::Resource as Reported>::Status,
    ) {
    }

    /// Whether what `report` found is awaited from someone else (another
    /// controller making an object the component then builds on), so the
    /// next pass comes within seconds rather than at the long safety-net
    /// requeue: the watches see only the component's own objects.
    fn recheck_soon(&self, _status: &<Self::Resource as Reported>::Status) -> bool {
        false
    }

    /// What moving from version `from` to `to` leaves to a person (data the
    /// upgrade does not carry over), listed in the upgrade plan before
    /// anything is written. `cr` is the resource being upgraded; None for a
    /// plan made from the bundles alone (`plan --from --to`).
    fn upgrade_actions(&self, _cr: Option<&Self::Resource>, _from: &str, _to: &str) -> Vec<String> {
        Vec::new()
    }

    /// For a plan made from the bundles alone (`plan --from --to`): what
    /// `dereference` would read on an install that runs `installed` (the
    /// render of the version upgraded from), so the offline plan is the one
    /// such an install publishes. Default: what a render without the
    /// cluster gets.
    fn planned_inputs(&self, _installed: &[DynamicObject]) -> Self::Inputs {
        Self::Inputs::default()
    }

    /// What the component's programs make at run time (not from its
    /// bundle): the operator may delete exactly these, and does when the
    /// component is removed.
    const RUN_TIME_OBJECTS: &'static [RunTimeObject] = &[];

    /// The Secrets and ConfigMaps the CR's own settings name (beyond the
    /// shared `imageDigests` and `overridesConfigMap`), in its namespace:
    /// creating, editing or deleting one reconciles the CR at once.
    fn references(_cr: &Self::Resource) -> Vec<Reference> {
        Vec::new()
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

    /// What the operator's RBAC is made of beyond deleting its
    /// [`RUN_TIME_OBJECTS`](Self::RUN_TIME_OBJECTS): by default every kind
    /// of the bundle folder named after the component.
    fn permissions(&self) -> Permissions {
        Permissions::bundles(&[Self::Resource::COMPONENT])
    }
}

/// Everything the operator's RBAC is made of: the component's permissions
/// and `delete` on its run-time objects.
pub fn permissions_of<C: Component>(component: &C) -> Permissions {
    run_time::with_run_time_objects(component.permissions(), C::RUN_TIME_OBJECTS)
}

/// An object a CR's spec names, in the CR's namespace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reference {
    /// A ConfigMap, by name.
    ConfigMap(String),
    /// A Secret, by name.
    Secret(String),
}

/// Every object `cr` names: the shared settings' ConfigMaps and the
/// component's own references.
pub fn references_of<C: Component>(cr: &C::Resource) -> Vec<Reference> {
    let common = cr.common();
    let mut out: Vec<Reference> = [&common.shared.image_digests, &common.overrides_config_map]
        .into_iter()
        .flatten()
        .map(|name| Reference::ConfigMap(name.clone()))
        .collect();
    out.extend(C::references(cr));
    out
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

/// The operator's name for a component: `kubeflow-<component>-operator`.
pub fn operator_name<K: ComponentResource>() -> String {
    format!("kubeflow-{}-operator", K::COMPONENT)
}
