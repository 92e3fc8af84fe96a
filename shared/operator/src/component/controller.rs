//! The running process: the controller over the CR kind and every managed
//! kind, its shared state, the finalizer around each reconcile, and retries.

use super::*;

pub(super) struct Context<C: Component> {
    pub(super) component: C,
    pub(super) engine: Engine,
    pub(super) recorder: Recorder,
    pub(super) client: Client,
    pub(super) bundles: BundleCache,
    pub(super) manifests_dir: PathBuf,
    /// Where CRs may install (the chart's `allowedNamespaces`).
    pub(super) scope: NamespaceScope,
    pub(super) metrics: Metrics,
    pub(super) name: String,
    pub(super) detected_platform: Mutex<Option<Platform>>,
    /// Per CR: failures in a row, the last failure, the refusal last told;
    /// forgotten when the CR is gone.
    pub(super) memory: crate::retry::Memory,
    /// Which CR applied each managed object (see `owners`).
    pub(super) owners: super::owners::Owners,
}

impl<C: Component> Context<C> {
    fn key(cr: &C::Resource) -> String {
        format!("{}/{}", cr.namespace().unwrap_or_default(), cr.name_any())
    }

    /// Counts this failure: how many times in a row the CR's apply failed with this message.
    pub(super) fn repeats(&self, cr: &C::Resource, message: &str) -> u32 {
        self.memory.repeats(&Self::key(cr), message)
    }

    /// Whether this refusal is news: not the one last told for the CR. The
    /// CR's status alone cannot say so: a reconcile that runs before the
    /// watch brings back the status just written sees the old condition.
    pub(super) fn refusal_is_news(&self, cr: &C::Resource, refusal: &str) -> bool {
        self.memory.refusal_is_news(&Self::key(cr), refusal)
    }

    /// An apply went through: the next refusal is news again.
    pub(super) fn forget_refusal(&self, cr: &C::Resource) {
        self.memory.forget_refusal(&Self::key(cr));
    }

    /// A success or a refusal ends a run of failures (and its backoff).
    pub(super) fn forget_failures(&self, cr: &C::Resource) {
        self.memory.reset(&Self::key(cr));
    }
}

/// Runs a component operator until SIGTERM (or loss of leadership).
pub async fn run<C: Component>(component: C, args: ComponentArgs) -> anyhow::Result<()> {
    let name = operator_name::<C::Resource>();
    let rt = runner::start(&name, &args.run).await?;
    let watched = watchable(&component, &args.manifests_dir);
    let scope = NamespaceScope::only(&args.allowed_namespaces);
    match scope.namespaces() {
        Some(n) => tracing::info!(namespaces = ?n, "installing only into the allowed namespaces"),
        None => tracing::warn!("no allowed namespaces set: CRs may install into any namespace"),
    }
    // Metadata watches of every managed kind: their events bring a
    // reconcile, their stores tell the engine what changed.
    let mut index = crate::live_index::LiveIndexBuilder::default().keeping_foreign_fields(&name);
    let owners = super::owners::Owners::default();
    let mut streams = Vec::new();
    for w in managed_watches(watched, &scope) {
        let config = watcher::Config::default()
            .labels(&selector::<C>())
            .any_semantic();
        let stream = index.watch(
            &rt.client,
            &w.resource,
            w.namespace.as_deref(),
            w.crd.as_deref(),
            config,
            w.what,
        );
        streams.push((stream, w.resource));
    }
    let ctx = Arc::new(Context {
        engine: Engine::new(rt.client.clone(), &name)
            .within(scope.clone())
            .with_index(index.build()),
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
        scope: scope.clone(),
        metrics: rt.metrics.clone(),
        name: name.clone(),
        detected_platform: Mutex::new(None),
        memory: crate::retry::Memory::default(),
        owners: owners.clone(),
    });
    let api: Api<C::Resource> = Api::all(rt.client.clone());
    let mut controller = Controller::new(api, watcher::Config::default().any_semantic())
        .trigger_backoff(crate::watches::trigger_backoff());
    tracing::info!(
        watches = streams.len(),
        "watching every kind of the bundles"
    );
    for (stream, resource) in streams {
        let group_kind = crate::kinds::group_kind_of(&resource.group, &resource.kind);
        let owners = owners.clone();
        controller = controller.watches_stream_with(
            stream,
            move |obj| owners_of::<C::Resource>(&owners, &group_kind, obj),
            resource,
        );
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

/// The label selector of the objects this operator manages.
fn selector<C: Component>() -> String {
    format!("{}={}", labels::COMPONENT, C::Resource::COMPONENT)
}

/// One managed watch: a name for the logs, the kind, and the
/// namespace it covers (None: all, or cluster-scoped).
struct ManagedWatch {
    crd: Option<String>,
    what: String,
    resource: ApiResource,
    namespace: Option<String>,
}

/// One watch per managed kind, namespaced kinds once per allowed namespace
/// (the operator's Roles grant nothing cluster-wide).
fn managed_watches(
    watched: Vec<crate::watches::Watched>,
    scope: &NamespaceScope,
) -> Vec<ManagedWatch> {
    let mut out = Vec::new();
    for kind in watched {
        let name = format!("{}/{}", kind.resource.api_version, kind.resource.plural);
        match (kind.namespaced, scope.namespaces()) {
            (true, Some(namespaces)) => {
                for ns in namespaces {
                    out.push(ManagedWatch {
                        what: format!("{name} in {ns}"),
                        resource: kind.resource.clone(),
                        namespace: Some(ns.clone()),
                        crd: kind.crd.clone(),
                    });
                }
            }
            _ => out.push(ManagedWatch {
                what: name,
                resource: kind.resource.clone(),
                namespace: None,
                crd: kind.crd.clone(),
            }),
        }
    }
    out
}

/// What the operator watches: every kind of its bundles (their roles grant
/// `watch` on each), and the component's extra kinds its RBAC lets it watch
/// (a watch the chart's role does not grant would fail forever).
pub(super) fn watchable<C: Component>(
    component: &C,
    manifests_dir: &std::path::Path,
) -> Vec<crate::watches::Watched> {
    let permissions = component.permissions();
    let mut out = crate::watches::bundle_kinds(manifests_dir, &permissions);
    for gvk in component.watched_kinds() {
        let ar = ApiResource::from_gvk(&gvk);
        let covered = out
            .iter()
            .any(|a| a.resource.group == ar.group && a.resource.kind == ar.kind);
        let grants = |rules: &[k8s_openapi::api::rbac::v1::PolicyRule]| {
            rbac::allows(rules, &ar.group, &ar.plural, "watch")
        };
        if !covered && (grants(&permissions.extra) || grants(&permissions.extra_namespaced)) {
            out.push(crate::watches::Watched {
                crd: None,
                namespaced: !crate::kinds::is_builtin_cluster_scoped(&ar.kind),
                resource: ar,
            });
        }
    }
    out
}

/// Maps a managed object back to its component CR, from its owner labels.
pub(super) fn owner_of<K: ComponentResource>(
    obj: &crate::live_index::MetaObject,
) -> Option<ObjectRef<K>> {
    let l = obj.metadata.labels.as_ref()?;
    Some(ObjectRef::new(l.get(labels::OWNER_NAME)?).within(l.get(labels::OWNER_NAMESPACE)?))
}

/// The CRs a watched object's event concerns: the one its owner labels name
/// and, when it differs, the one that applied it (its labels were edited).
fn owners_of<K: ComponentResource>(
    owners: &super::owners::Owners,
    group_kind: &str,
    obj: crate::live_index::MetaObject,
) -> Vec<ObjectRef<K>> {
    let mut out: Vec<ObjectRef<K>> = owner_of::<K>(&obj).into_iter().collect();
    let key = crate::apply::ObjectKey {
        group_kind: group_kind.to_string(),
        namespace: obj.metadata.namespace.clone().unwrap_or_default(),
        name: obj.metadata.name.clone().unwrap_or_default(),
    };
    if let Some((ns, name)) = owners.of(&key) {
        let applied = ObjectRef::new(&name).within(&ns);
        if !out.contains(&applied) {
            out.push(applied);
        }
    }
    out
}

pub(super) fn error_policy<C: Component>(
    cr: Arc<C::Resource>,
    err: &ReconcileError,
    ctx: Arc<Context<C>>,
) -> Action {
    ctx.metrics
        .reconcile_errors_total
        .with_label_values(&[&ctx.name, err.metric_reason()])
        .inc();
    let object = Context::<C>::key(&cr);
    let kind = C::Resource::kind(&());
    if matches!(err, ReconcileError::CleanupPending(_)) {
        tracing::info!(%kind, %object, error = %err, "cleanup in progress");
        return Action::requeue(Duration::from_millis(500));
    }
    let n = ctx.memory.record(&object);
    tracing::warn!(%kind, %object, error = %err, attempt = n, "reconcile failed; retrying");
    Action::requeue(crate::retry::delay(n))
}

pub(super) async fn reconcile<C: Component>(
    cr: Arc<C::Resource>,
    ctx: Arc<Context<C>>,
) -> Result<Action, ReconcileError> {
    let started = Instant::now();
    let ns = cr.namespace().unwrap_or_default();
    let api: Api<C::Resource> = Api::namespaced(ctx.client.clone(), &ns);
    // Every line logged during the reconcile names the CR (several CRs of
    // one kind can be reconciled at once).
    let span = tracing::info_span!(
        "reconcile",
        kind = %C::Resource::kind(&()),
        object = %Context::<C>::key(&cr)
    );
    let result = tracing::Instrument::instrument(
        finalizer(&api, FINALIZER, cr, |event| async {
            match event {
                FinalizerEvent::Apply(cr) => apply::<C>(&cr, &ctx).await,
                FinalizerEvent::Cleanup(cr) => {
                    let done = cleanup_component::<C>(&cr, &ctx).await;
                    // Removed: nothing of the CR is remembered any more.
                    if done.is_ok() {
                        ctx.memory.forget(&Context::<C>::key(&cr));
                        ctx.owners
                            .forget(&cr.namespace().unwrap_or_default(), &cr.name_any());
                    }
                    done
                }
            }
        }),
        span,
    )
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
        Err(
            e @ (kube::runtime::finalizer::Error::UnnamedObject
            | kube::runtime::finalizer::Error::InvalidFinalizer),
        ) => {
            ctx.metrics
                .reconcile_total
                .with_label_values(&[&ctx.name, "error"])
                .inc();
            Err(ReconcileError::Finalizer(e.to_string()))
        }
    }
}
