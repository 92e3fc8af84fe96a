//! The generic component controller: what every micro-operator runs. A
//! component supplies its knowledge (render, preflight, retention, extra
//! status) through [`Component`]; this module does the rest:
//! dereference -> render -> preflight -> apply -> assess -> status.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use kube::api::{Api, ApiResource, DynamicObject};
use kube::core::GroupVersionKind;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::finalizer::{Event as FinalizerEvent, finalizer};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use kube::{Client, Resource, ResourceExt};
use kubeflow_api::{ComponentResource, ComponentStatus, CrdPolicy, Platform, ReleasedObject};
use serde_json::Value;

use crate::apply::{ApplyError, ApplyOutcome, ApplyRequest, Engine};
use crate::bundle::{Bundle, BundleCache, BundleError};
use crate::cleanup;
use crate::conditions::{self, reason};
use crate::health;
use crate::inventory::{self, Inventory};
use crate::kinds::kind;
use crate::labels;
use crate::rbac::{self, Permissions};
use crate::runner::{self, RunArgs};
use crate::telemetry::Metrics;
use crate::telemetry::metrics::ComponentRef;

/// Finalizer every component CR carries while it has objects to clean up.
pub const FINALIZER: &str = "components.kubeflow.org/cleanup";

/// Input a person must fix: becomes a Degraded condition, applies nothing.
#[derive(Debug, Clone, PartialEq)]
pub struct Refusal {
    /// CamelCase reason (see [`conditions::reason`]).
    pub reason: &'static str,
    /// What is wrong and what to do.
    pub message: String,
}

impl Refusal {
    /// A refusal.
    pub fn new(reason: &'static str, message: impl Into<String>) -> Self {
        Refusal {
            reason,
            message: message.into(),
        }
    }
}

impl From<BundleError> for Refusal {
    fn from(e: BundleError) -> Self {
        let reason = match e {
            BundleError::UnknownVersion { .. } => reason::UNKNOWN_VERSION,
            _ => reason::BUNDLE_ERROR,
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
        Ok(None) => Err(Refusal::new(
            reason::PREREQUISITE_MISSING,
            format!("{why} (no {crd} CRD)"),
        )
        .into()),
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
}

impl ReconcileError {
    fn metric_reason(&self) -> &'static str {
        match self {
            ReconcileError::Apply(e) if e.is_permission_denied() => "PermissionDenied",
            ReconcileError::Apply(_) => "ApplyError",
            ReconcileError::Api(..) => "ApiError",
            ReconcileError::CleanupPending(_) => "CleanupPending",
        }
    }
}

struct Context<C: Component> {
    component: C,
    engine: Engine,
    recorder: Recorder,
    client: Client,
    bundles: BundleCache,
    manifests_dir: PathBuf,
    metrics: Metrics,
    name: String,
    detected_platform: Mutex<Option<Platform>>,
    failures: Mutex<HashMap<String, u32>>,
    /// Per CR: the last apply failure's message and how often in a row it came.
    last_failure: Mutex<HashMap<String, (String, u32)>>,
}

impl<C: Component> Context<C> {
    fn key(cr: &C::Resource) -> String {
        format!("{}/{}", cr.namespace().unwrap_or_default(), cr.name_any())
    }

    /// Counts this failure: how many times in a row the CR's apply failed with this message.
    fn repeats(&self, cr: &C::Resource, message: &str) -> u32 {
        let Ok(mut m) = self.last_failure.lock() else {
            return 1;
        };
        let entry = m.entry(Self::key(cr)).or_insert_with(|| (String::new(), 0));
        if entry.0 == message {
            entry.1 = entry.1.saturating_add(1);
        } else {
            *entry = (message.to_string(), 1);
        }
        entry.1
    }

    /// A success or a refusal ends a run of failures (and its backoff).
    fn forget_failures(&self, cr: &C::Resource) {
        if let Ok(mut f) = self.failures.lock() {
            f.remove(&Self::key(cr));
        }
        if let Ok(mut m) = self.last_failure.lock() {
            m.remove(&Self::key(cr));
        }
    }
}

/// The operator's name for a component: `kubeflow-<component>-operator`.
pub fn operator_name<K: ComponentResource>() -> String {
    format!("kubeflow-{}-operator", K::COMPONENT)
}

/// Command line of a component operator.
#[derive(clap::Parser, Debug)]
#[command(version, about = "A Kubeflow component operator")]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    args: ComponentArgs,
}

/// What an operator binary can do besides running.
#[derive(clap::Subcommand, Debug)]
pub enum Command {
    /// Print the ClusterRole rules the operator needs (the chart's RBAC is generated from them).
    Rbac,
}

/// The whole `main` of a component operator: parse flags, run until SIGTERM.
pub async fn main<C: Component>(component: C) -> anyhow::Result<()> {
    let cli = <Cli as clap::Parser>::parse();
    match cli.command {
        Some(Command::Rbac) => {
            let rules = rules_of(&component, &cli.args.manifests_dir)?;
            print!("{}", rbac::to_yaml(&rules)?);
            Ok(())
        }
        None => run(component, cli.args).await,
    }
}

/// The cluster rules a component operator needs.
pub fn rules_of<C: Component>(
    component: &C,
    manifests_dir: &std::path::Path,
) -> Result<Vec<k8s_openapi::api::rbac::v1::PolicyRule>, BundleError> {
    rbac::component_rules(
        manifests_dir,
        C::Resource::COMPONENT,
        (
            kubeflow_api::COMPONENTS_GROUP,
            &<C::Resource as Resource>::plural(&()),
        ),
        &component.permissions(),
    )
}

/// Runs a component operator until SIGTERM (or loss of leadership).
pub async fn run<C: Component>(component: C, args: ComponentArgs) -> anyhow::Result<()> {
    let name = operator_name::<C::Resource>();
    let rt = runner::start(&name, &args.run).await?;
    let watched = watchable(&component, &args.manifests_dir);
    let ctx = Arc::new(Context {
        engine: Engine::new(rt.client.clone(), &name),
        recorder: Recorder::new(
            rt.client.clone(),
            Reporter {
                controller: name.clone(),
                instance: std::env::var("POD_NAME").ok(),
            },
        ),
        client: rt.client.clone(),
        component,
        bundles: BundleCache::default(),
        manifests_dir: args.manifests_dir,
        metrics: rt.metrics.clone(),
        name: name.clone(),
        detected_platform: Mutex::new(None),
        failures: Mutex::new(HashMap::new()),
        last_failure: Mutex::new(HashMap::new()),
    });
    let api: Api<C::Resource> = Api::all(rt.client.clone());
    let mut controller = Controller::new(api, watcher::Config::default().any_semantic())
        .trigger_backoff(crate::watches::trigger_backoff());
    let selector = format!("{}={}", labels::COMPONENT, C::Resource::COMPONENT);
    tracing::info!(kinds = watched.len(), "watching every kind of the bundles");
    for ar in watched {
        let stream = crate::watches::isolated(
            Api::<DynamicObject>::all_with(rt.client.clone(), &ar),
            watcher::Config::default().labels(&selector).any_semantic(),
            format!("{}/{}", ar.api_version, ar.plural),
        );
        controller = controller.watches_stream_with(stream, owner_of::<C::Resource>, ar);
    }
    runner::mark_ready_when_listable(Api::<C::Resource>::all(rt.client.clone()), rt.probe.clone());
    tracing::info!(operator = %name, "starting controller");
    controller
        .graceful_shutdown_on(rt.shutdown())
        .run(reconcile::<C>, error_policy::<C>, ctx)
        .for_each(|_| futures::future::ready(()))
        .await;
    rt.release().await;
    Ok(())
}

/// What rendering the component for each of `specs` (the CR's `spec`), on
/// plain Kubernetes and on OpenShift, would need beyond the operator's own
/// RBAC: empty when its chart role is enough. For the operators' tests.
pub fn permission_gaps<C: Component>(
    component: &C,
    manifests_dir: &std::path::Path,
    specs: &[Value],
) -> Vec<String> {
    let rules = match rules_of(component, manifests_dir) {
        Ok(r) => r,
        Err(e) => return vec![e.to_string()],
    };
    let bundles = BundleCache::default();
    let mut out = Vec::new();
    for spec in specs {
        let cr = serde_json::json!({
            "apiVersion": C::Resource::api_version(&()),
            "kind": C::Resource::kind(&()),
            "metadata": {"name": "kubeflow", "namespace": "kubeflow"},
            "spec": spec,
        });
        let cr: C::Resource = match serde_json::from_value(cr) {
            Ok(c) => c,
            Err(e) => {
                out.push(format!("{spec}: {e}"));
                continue;
            }
        };
        for platform in [Platform::Kubernetes, Platform::OpenShift] {
            let ctx = RenderContext {
                manifests_dir,
                bundles: &bundles,
                namespace: "kubeflow",
                platform,
            };
            match component.render(&cr, &ctx, &C::Inputs::default()) {
                Ok(r) => out.extend(
                    rbac::missing(&rules, &r.objects)
                        .into_iter()
                        .map(|m| format!("{spec} on {platform:?}: {m}")),
                ),
                Err(e) => out.push(format!("{spec} on {platform:?}: {}", e.message)),
            }
        }
    }
    out
}

/// For the operators' unit tests: panics, listing the gaps, when rendering
/// any of the specs `specs` makes (from the bundles folder beside the
/// repository, or `MANIFESTS_DIR`) needs more than the operator's own RBAC.
pub fn assert_permitted<C: Component>(
    component: &C,
    specs: impl FnOnce(&std::path::Path) -> Vec<Value>,
) {
    let dir = std::env::var_os("MANIFESTS_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/manifests")
        });
    let specs = specs(&dir);
    assert!(!specs.is_empty(), "no bundles in {}", dir.display());
    let gaps = permission_gaps(component, &dir, &specs);
    assert!(gaps.is_empty(), "the operator's role lacks: {gaps:#?}");
}

/// `{"version": v}` for every version of a bundle folder.
pub fn every_version(manifests_dir: &std::path::Path, folder: &str) -> Vec<Value> {
    crate::bundle::available_versions(&manifests_dir.join(folder))
        .into_iter()
        .map(|v| serde_json::json!({ "version": v }))
        .collect()
}

/// What the operator watches: every kind of its bundles (their roles grant
/// `watch` on each), and the component's extra kinds its RBAC lets it watch
/// (a watch the chart's role does not grant would fail forever).
fn watchable<C: Component>(component: &C, manifests_dir: &std::path::Path) -> Vec<ApiResource> {
    let permissions = component.permissions();
    let mut out = crate::watches::bundle_kinds(manifests_dir, &permissions);
    for gvk in component.watched_kinds() {
        let ar = ApiResource::from_gvk(&gvk);
        let covered = out.iter().any(|a| a.group == ar.group && a.kind == ar.kind);
        if !covered && rbac::allows(&permissions.extra, &ar.group, &ar.plural, "watch") {
            out.push(ar);
        }
    }
    out
}

/// Maps a managed object back to its component CR, from its owner labels.
fn owner_of<K: ComponentResource>(obj: DynamicObject) -> Option<ObjectRef<K>> {
    let l = obj.metadata.labels.as_ref()?;
    Some(ObjectRef::new(l.get(labels::OWNER_NAME)?).within(l.get(labels::OWNER_NAMESPACE)?))
}

fn error_policy<C: Component>(
    cr: Arc<C::Resource>,
    err: &ReconcileError,
    ctx: Arc<Context<C>>,
) -> Action {
    ctx.metrics
        .reconcile_errors_total
        .with_label_values(&[&ctx.name, err.metric_reason()])
        .inc();
    let key = format!("{}/{}", cr.namespace().unwrap_or_default(), cr.name_any());
    let n = ctx
        .failures
        .lock()
        .map(|mut f| {
            let n = f.entry(key).or_insert(0);
            *n = n.saturating_add(1);
            *n
        })
        .unwrap_or(1);
    if matches!(err, ReconcileError::CleanupPending(_)) {
        tracing::info!(error = %err, "cleanup in progress");
        return Action::requeue(Duration::from_millis(500));
    }
    tracing::warn!(error = %err, attempt = n, "reconcile failed; retrying");
    // From 1 s, doubling, capped at 5 minutes (reached at the 10th failure).
    Action::requeue(
        Duration::from_secs(1u64 << n.min(10).saturating_sub(1)).min(Duration::from_secs(300)),
    )
}

async fn reconcile<C: Component>(
    cr: Arc<C::Resource>,
    ctx: Arc<Context<C>>,
) -> Result<Action, ReconcileError> {
    let started = Instant::now();
    let ns = cr.namespace().unwrap_or_default();
    let api: Api<C::Resource> = Api::namespaced(ctx.client.clone(), &ns);
    let result = finalizer(&api, FINALIZER, cr, |event| async {
        match event {
            FinalizerEvent::Apply(cr) => apply::<C>(&cr, &ctx).await,
            FinalizerEvent::Cleanup(cr) => cleanup_component::<C>(&cr, &ctx).await,
        }
    })
    .await;
    ctx.metrics
        .reconcile_time_seconds
        .with_label_values(&[&ctx.name])
        .observe(started.elapsed().as_secs_f64());
    match result {
        Ok(action) => {
            ctx.metrics
                .reconcile_total
                .with_label_values(&[&ctx.name, "success"])
                .inc();
            Ok(action)
        }
        Err(
            kube::runtime::finalizer::Error::ApplyFailed(e)
            | kube::runtime::finalizer::Error::CleanupFailed(e),
        ) => {
            ctx.metrics
                .reconcile_total
                .with_label_values(&[&ctx.name, "error"])
                .inc();
            Err(e)
        }
        Err(
            kube::runtime::finalizer::Error::AddFinalizer(e)
            | kube::runtime::finalizer::Error::RemoveFinalizer(e),
        ) => {
            ctx.metrics
                .reconcile_total
                .with_label_values(&[&ctx.name, "error"])
                .inc();
            Err(ReconcileError::Api("update the finalizer", e))
        }
        Err(e) => {
            ctx.metrics
                .reconcile_total
                .with_label_values(&[&ctx.name, "error"])
                .inc();
            Err(ReconcileError::CleanupPending(e.to_string()))
        }
    }
}

fn current_status<K: ComponentResource>(cr: &K) -> ComponentStatus {
    serde_json::to_value(cr)
        .ok()
        .and_then(|v| v.get("status").cloned())
        .and_then(|s| serde_json::from_value(s).ok())
        .unwrap_or_default()
}

fn inventory_of<K: ComponentResource>(cr: &K) -> Inventory {
    Inventory::for_parent(cr, K::COMPONENT, &operator_name::<K>())
}

async fn platform_of<C: Component>(
    cr: &C::Resource,
    ctx: &Context<C>,
) -> Result<Platform, ReconcileError> {
    match cr.common().platform {
        Some(p @ (Platform::Kubernetes | Platform::OpenShift)) => Ok(p),
        _ => {
            if let Some(p) = ctx.detected_platform.lock().ok().and_then(|g| *g) {
                return Ok(p);
            }
            let p = crate::platform::detect(&ctx.client)
                .await
                .map_err(|e| ReconcileError::Api("detect the platform", e))?;
            if let Ok(mut g) = ctx.detected_platform.lock() {
                *g = Some(p);
            }
            Ok(p)
        }
    }
}

async fn apply<C: Component>(cr: &C::Resource, ctx: &Context<C>) -> Result<Action, ReconcileError> {
    let generation = cr.meta().generation;
    let ns = cr.namespace().unwrap_or_default();
    let old = current_status(cr);
    let mut status = old.clone();
    status.observed_generation = generation;
    let platform = platform_of(cr, ctx).await?;
    status.platform = Some(platform);

    let inputs = match ctx.component.dereference(cr, &ctx.client).await {
        Ok(i) => i,
        Err(DereferenceError::Refused(refusal)) => {
            return refuse(cr, ctx, old, status, refusal).await;
        }
        Err(DereferenceError::Api(verb, e)) => return Err(ReconcileError::Api(verb, e)),
    };
    let render_ctx = RenderContext {
        manifests_dir: &ctx.manifests_dir,
        bundles: &ctx.bundles,
        namespace: &ns,
        platform,
    };
    let rendered = match ctx.component.render(cr, &render_ctx, &inputs) {
        Ok(r) => r,
        Err(refusal) => return refuse(cr, ctx, old, status, refusal).await,
    };

    let inv = inventory_of(cr);
    let parent_resource = ApiResource::erase::<C::Resource>(&());
    let empty = BTreeMap::new();
    let retain = |o: &DynamicObject| ctx.component.retain(cr, o);
    let request = ApplyRequest {
        inventory: &inv,
        parent_resource: &parent_resource,
        parent_annotations: cr.meta().annotations.as_ref().unwrap_or(&empty),
        parent_labels: cr.meta().labels.as_ref().unwrap_or(&empty),
        owner: cr.controller_owner_ref(&()),
        objects: rendered.objects,
        version: &rendered.version,
        retain: &retain,
        delete_crds: cr.common().crd_policy == Some(CrdPolicy::Delete),
    };
    let outcome = match ctx.engine.apply(request).await {
        Ok(o) => o,
        Err(e) if e.is_refusal() => {
            let r = if matches!(e, ApplyError::Conflict { .. }) {
                reason::OWNERSHIP_CONFLICT
            } else {
                reason::INVALID_SPEC
            };
            return refuse(cr, ctx, old, status, Refusal::new(r, e.to_string())).await;
        }
        Err(e) => {
            // Never green while the apply fails: Ready false at this
            // generation with the API's message; Degraded once the same
            // failure repeats (a missing permission at once: a person must
            // grant it). The retries go on, so a fix takes effect by itself.
            let (r, message) = if e.is_permission_denied() {
                (
                    reason::PERMISSION_DENIED,
                    format!("the operator's RBAC does not allow this: {e}"),
                )
            } else {
                (reason::API_ERROR, e.to_string())
            };
            let repeats = if e.is_permission_denied() {
                crate::status::REPEATS_BEFORE_DEGRADED
            } else {
                ctx.repeats(cr, &message)
            };
            crate::status::failed(r, &message, repeats).apply(&mut status.conditions, generation);
            write_status(cr, ctx, &old, &status, serde_json::Map::new()).await?;
            record_gauges(cr, ctx, &status, false);
            return Err(e.into());
        }
    };
    ctx.forget_failures(cr);

    // A missing or changed object at a generation already reconciled is drift.
    if old.observed_generation == generation
        && old.version.as_deref() == Some(rendered.version.as_str())
    {
        for what in outcome.created.iter().chain(&outcome.drifted) {
            let k = what.split_whitespace().next().unwrap_or("");
            ctx.metrics
                .drift_repairs_total
                .with_label_values(&[&ctx.name, k])
                .inc();
            let why = outcome.why.get(what).map_or("missing", String::as_str);
            tracing::info!(object = %what, why, "repaired drift");
        }
    }
    for what in &outcome.recreated {
        let event = Event {
            type_: EventType::Warning,
            reason: "ObjectRecreated".into(),
            note: Some(format!(
                "{what}: its live state (changed by someone else) could not take the desired state, so it was deleted and created anew"
            )),
            action: "Apply".into(),
            secondary: None,
        };
        if let Err(e) = ctx.recorder.publish(&event, &cr.object_ref(&())).await {
            tracing::warn!(error = %e, "failed to publish an Event");
        }
    }
    if !outcome.written.is_empty() {
        ctx.metrics
            .apply_writes_total
            .with_label_values(&[&ctx.name])
            .inc_by(outcome.written.len() as u64);
        tracing::info!(
            written = outcome.written.len(),
            pruned = outcome.pruned.len(),
            "applied"
        );
    }

    status.released = released(cr, ctx, &old.released, &outcome).await?;

    let mut health = health::assess(&outcome.live);
    add_pod_problems(&ctx.client, &outcome.live, &mut health).await;
    let ready = health.ready();
    status.version = Some(rendered.version.clone());
    status.managed_objects = Some(outcome.live.len() as i64);
    status.workloads = health.workloads.clone();
    let message = if ready {
        format!("{} objects applied and ready", outcome.live.len())
    } else {
        format!("waiting for {}", health.waiting.join(", "))
    };
    crate::status::applied(ready, reason::READY, reason::WORKLOADS_NOT_READY, &message)
        .apply(&mut status.conditions, generation);
    let extra = ctx
        .component
        .extra_status(cr, &outcome.live, &ctx.client)
        .await;
    write_status(cr, ctx, &old, &status, extra).await?;
    record_gauges(cr, ctx, &status, ready);
    // Watches on the managed objects bring the next reconcile; the requeue is a safety net.
    Ok(Action::requeue(if ready {
        Duration::from_secs(600)
    } else {
        Duration::from_secs(30)
    }))
}

/// For workloads not available whose own conditions say nothing, what their
/// pods say (an image that cannot be pulled, a crash loop). Best effort: a
/// failed read leaves the health as it was.
async fn add_pod_problems(client: &Client, live: &[DynamicObject], health: &mut health::Health) {
    for w in health
        .workloads
        .iter_mut()
        .filter(|w| !w.available && w.problem.is_none())
    {
        let Some(selector) = live
            .iter()
            .find(|o| kind(o) == w.kind && o.metadata.name.as_deref() == Some(w.name.as_str()))
            .and_then(|o| o.data.pointer("/spec/selector/matchLabels"))
            .and_then(Value::as_object)
        else {
            continue;
        };
        let labels: Vec<String> = selector
            .iter()
            .filter_map(|(k, v)| Some(format!("{k}={}", v.as_str()?)))
            .collect();
        let pods: Api<DynamicObject> = Api::namespaced_with(
            client.clone(),
            &w.namespace,
            &ApiResource::from_gvk(&GroupVersionKind::gvk("", "v1", "Pod")),
        );
        let Ok(list) = pods
            .list(&kube::api::ListParams::default().labels(&labels.join(",")))
            .await
        else {
            continue;
        };
        let values: Vec<Value> = list
            .items
            .iter()
            .filter_map(|p| serde_json::to_value(p).ok())
            .collect();
        if let Some(problem) = health::pod_problem(&values) {
            let prefix = format!("{} {} (", w.kind, w.name);
            for line in health.waiting.iter_mut().filter(|l| l.starts_with(&prefix)) {
                *line = format!(
                    "{} {} ({}/{} ready; {problem})",
                    w.kind, w.name, w.ready, w.desired
                );
            }
            w.problem = Some(problem);
        }
    }
}

/// The status list of released objects: the earlier entries whose objects
/// still exist and are not managed again, and those this apply released
/// (each announced by an Event).
async fn released<C: Component>(
    cr: &C::Resource,
    ctx: &Context<C>,
    earlier: &[ReleasedObject],
    outcome: &ApplyOutcome,
) -> Result<Vec<ReleasedObject>, ReconcileError> {
    let managed: BTreeSet<(String, String, String)> = outcome
        .live
        .iter()
        .map(|o| {
            (
                crate::kinds::group_kind(o),
                o.metadata.namespace.clone().unwrap_or_default(),
                o.metadata.name.clone().unwrap_or_default(),
            )
        })
        .collect();
    let mut out = Vec::new();
    for r in earlier {
        let key = (r.kind.clone(), r.namespace.clone(), r.name.clone());
        if !managed.contains(&key) && ctx.engine.exists(&r.kind, &r.namespace, &r.name).await? {
            out.push(r.clone());
        }
    }
    for r in &outcome.released {
        tracing::warn!(kind = %r.group_kind, namespace = %r.namespace, name = %r.name, message = %r.message, "kept and released an object the new state no longer has");
        let event = Event {
            type_: EventType::Warning,
            reason: "ObjectReleased".into(),
            note: Some(format!(
                "{} {}/{}: {}",
                r.group_kind, r.namespace, r.name, r.message
            )),
            action: "Prune".into(),
            secondary: None,
        };
        if let Err(e) = ctx.recorder.publish(&event, &cr.object_ref(&())).await {
            tracing::warn!(error = %e, "failed to publish an Event");
        }
        out.retain(|o: &ReleasedObject| {
            !(o.kind == r.group_kind && o.namespace == r.namespace && o.name == r.name)
        });
        out.push(ReleasedObject {
            kind: r.group_kind.clone(),
            namespace: r.namespace.clone(),
            name: r.name.clone(),
            message: r.message.clone(),
        });
    }
    Ok(out)
}

fn record_gauges<C: Component>(
    cr: &C::Resource,
    ctx: &Context<C>,
    status: &ComponentStatus,
    ready: bool,
) {
    let ns = cr.namespace().unwrap_or_default();
    let name = cr.name_any();
    let kind = C::Resource::kind(&());
    ctx.metrics.record_component(
        &ComponentRef {
            controller: &ctx.name,
            kind: &kind,
            namespace: &ns,
            name: &name,
        },
        ready,
        status.version.as_deref(),
        &status.conditions,
    );
    ctx.metrics
        .managed_objects
        .with_label_values(&[&ctx.name, &ns, &name])
        .set(status.managed_objects.unwrap_or(0));
}

async fn refuse<C: Component>(
    cr: &C::Resource,
    ctx: &Context<C>,
    old: ComponentStatus,
    mut status: ComponentStatus,
    refusal: Refusal,
) -> Result<Action, ReconcileError> {
    let generation = cr.meta().generation;
    tracing::warn!(reason = refusal.reason, message = %refusal.message, "refused");
    ctx.metrics
        .reconcile_errors_total
        .with_label_values(&[&ctx.name, refusal.reason])
        .inc();
    crate::status::refused(refusal.reason, &refusal.message)
        .apply(&mut status.conditions, generation);
    ctx.forget_failures(cr);
    write_status(cr, ctx, &old, &status, serde_json::Map::new()).await?;
    ctx.metrics.record_component(
        &ComponentRef {
            controller: &ctx.name,
            kind: &C::Resource::kind(&()),
            namespace: &cr.namespace().unwrap_or_default(),
            name: &cr.name_any(),
        },
        false,
        None,
        &status.conditions,
    );
    // A missing Secret or prerequisite may appear without a spec change.
    Ok(Action::requeue(Duration::from_secs(30)))
}

async fn write_status<C: Component>(
    cr: &C::Resource,
    ctx: &Context<C>,
    old: &ComponentStatus,
    new: &ComponentStatus,
    extra: serde_json::Map<String, Value>,
) -> Result<(), ReconcileError> {
    let old_json = serde_json::to_value(cr)
        .ok()
        .and_then(|v| v.get("status").cloned())
        .unwrap_or(Value::Null);
    let mut new_json = serde_json::to_value(new).unwrap_or(Value::Null);
    if let Value::Object(m) = &mut new_json {
        m.extend(extra);
    }
    let same_conditions = conditions::same(&old.conditions, &new.conditions);
    let mut old_cmp = old_json.clone();
    let mut new_cmp = new_json.clone();
    if let (Value::Object(a), Value::Object(b)) = (&mut old_cmp, &mut new_cmp) {
        a.remove("conditions");
        b.remove("conditions");
    }
    if same_conditions && old_cmp == new_cmp {
        return Ok(());
    }
    let api: Api<C::Resource> =
        Api::namespaced(ctx.client.clone(), &cr.namespace().unwrap_or_default());
    crate::status::patch(&api, cr, &old_json, new_json)
        .await
        .map_err(|e| ReconcileError::Api("write status", e))?;
    Ok(())
}

async fn cleanup_component<C: Component>(
    cr: &C::Resource,
    ctx: &Context<C>,
) -> Result<Action, ReconcileError> {
    let extra = ctx
        .component
        .cleanup_run_time_objects(cr, &ctx.client)
        .await
        .map_err(|e| ReconcileError::Api("delete objects made at run time", e))?;
    if !extra.is_empty() {
        tracing::info!(deleted = ?extra, "removed objects the component made at run time");
    }
    let inv = inventory_of(cr);
    let group_kinds: BTreeSet<String> = inventory::parse_group_kinds(
        cr.meta()
            .annotations
            .as_ref()
            .and_then(|a| a.get(labels::APPLYSET_GROUP_KINDS)),
    )
    .into_iter()
    .collect();
    let delete_crds = cr.common().crd_policy == Some(CrdPolicy::Delete);
    let retain =
        |o: &DynamicObject| kind(o) != "CustomResourceDefinition" && ctx.component.retain(cr, o);
    let outcome = cleanup::cleanup(&ctx.engine, &inv, &group_kinds, &retain, delete_crds).await?;
    if !outcome.deleted.is_empty() {
        tracing::info!(deleted = outcome.deleted.len(), "cleanup deleted objects");
    }
    if !outcome.done() {
        return Err(ReconcileError::CleanupPending(outcome.remaining.join(", ")));
    }
    if !outcome.retained.is_empty() {
        tracing::info!(retained = ?outcome.retained, "cleanup kept objects on purpose");
    }
    let (ns, name) = (cr.namespace().unwrap_or_default(), cr.name_any());
    ctx.metrics.forget_component(&ComponentRef {
        controller: &ctx.name,
        kind: &C::Resource::kind(&()),
        namespace: &ns,
        name: &name,
    });
    let _ = ctx
        .metrics
        .managed_objects
        .remove_label_values(&[&ctx.name, &ns, &name]);
    Ok(Action::await_change())
}
