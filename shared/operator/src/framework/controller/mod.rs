//! One controller skeleton for every operator, the meta-operator's and each
//! component's: a [`Reconciler`] says what a reconcile and a cleanup do;
//! this module owns the rest, the same for all of them:
//!
//! - the finalizer around each reconcile;
//! - a tracing span naming the CR on every log line of a reconcile;
//! - the reconcile timer and counters;
//! - one classification of what went wrong ([`Failure`]): refused (a
//!   condition, an Event once, wait for a change), waiting (requeued soon,
//!   not an error) or transient (counted, backed off, Degraded once it
//!   repeats);
//! - per-CR memory keyed by object reference, cleared when the CR is gone;
//! - the typed status, compared without clock noise and written by
//!   server-side apply to `/status` only when it changed.

mod failure;
#[cfg(test)]
mod tests;

pub use failure::{Cause, Failure, REFUSED_REQUEUE, WAITING_REQUEUE};

use std::fmt::Debug;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::core::v1::ObjectReference;
use kube::api::Api;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::{Recorder, Reporter};
use kube::runtime::finalizer::{Error as FinalizerError, Event as FinalizerEvent, finalizer};
use kube::runtime::reflector::ObjectRef;
use kube::{Client, Resource, ResourceExt};
use kubeflow_api::{ObjectStatus, Reported};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::base::conditions::{self, READY, Reason};
use crate::base::retry::Memory;
use crate::report::events::{self, Notice};
use crate::report::telemetry::Metrics;
use crate::report::telemetry::metrics::ComponentRef;

/// What every reconciler uses to talk to the cluster and report.
#[derive(Clone)]
pub struct Tools {
    /// API client.
    pub client: Client,
    /// Publishes Events as the operator (and its pod).
    pub recorder: Recorder,
    /// The process's metrics.
    pub metrics: Metrics,
    /// The operator's name: field manager, metrics label, Event reporter.
    pub name: String,
}

impl Tools {
    /// The tools of operator `name`.
    pub fn new(client: Client, metrics: Metrics, name: &str) -> Self {
        let recorder = Recorder::new(
            client.clone(),
            Reporter {
                controller: name.to_string(),
                instance: std::env::var("POD_NAME").ok(),
            },
        );
        Tools {
            client,
            recorder,
            metrics,
            name: name.to_string(),
        }
    }

    /// One Event on `on`, about `about` when it concerns one object.
    pub async fn tell(
        &self,
        on: &ObjectReference,
        notice: Notice,
        about: Option<ObjectReference>,
        note: String,
    ) {
        events::publish(&self.recorder, on, notice, about, note).await;
    }
}

/// A CR kind's typed status.
pub type StatusOf<R> = <<R as Reconciler>::Resource as Reported>::Status;

/// What one controller does; [`run`] does the rest.
#[async_trait::async_trait]
pub trait Reconciler: Send + Sync + 'static {
    /// The CR kind.
    type Resource: Resource<DynamicType = (), Scope = NamespaceResourceScope>
        + Reported
        + Clone
        + Debug
        + Serialize
        + DeserializeOwned
        + Send
        + Sync
        + 'static;

    /// The finalizer the CR carries while the reconciler has something to
    /// clean up.
    const FINALIZER: &'static str;

    /// Client, Event recorder, metrics and name.
    fn tools(&self) -> &Tools;

    /// Brings the cluster to the CR's spec and fills in `status` (it starts
    /// as the CR's, at the current generation); returns when to look again
    /// with nothing changed.
    async fn apply(
        &self,
        cr: &Self::Resource,
        status: &mut StatusOf<Self>,
    ) -> Result<Duration, Failure>;

    /// Removes what the CR installed; `Err(Failure::Waiting)` while
    /// something still has to go (the status then says what).
    async fn cleanup(
        &self,
        cr: &Self::Resource,
        status: &mut StatusOf<Self>,
    ) -> Result<(), Failure>;

    /// Events for what the status says moved (an upgrade begun, readiness
    /// reached), after an apply went through.
    async fn announce(&self, _cr: &Self::Resource, _old: &StatusOf<Self>, _new: &StatusOf<Self>) {}

    /// Gauges of the reconciler's own beside Ready and the version.
    fn record(&self, _cr: &Self::Resource, _status: &StatusOf<Self>) {}

    /// The CR is gone: drop whatever the reconciler keeps of it.
    fn forget(&self, _cr: &ObjectRef<Self::Resource>) {}

    /// Whether Events may be written in the CR's namespace.
    fn may_publish(&self, _cr: &Self::Resource) -> bool {
        true
    }

    /// Whether the CR is refused before anything is written and nothing was
    /// ever applied for it: it then carries no finalizer, so deleting it
    /// (or its namespace) never waits for a cleanup with nothing to clean.
    fn holds_nothing(&self, _cr: &Self::Resource) -> bool {
        false
    }
}

/// A reconciler with what the skeleton remembers of each CR.
pub struct Skeleton<R: Reconciler> {
    reconciler: R,
    memory: Memory<ObjectRef<R::Resource>>,
    /// The CRs whose series the metrics export, to drop those of CRs that
    /// are gone (see `sweep_gone`).
    exported: std::sync::Mutex<std::collections::HashSet<ObjectRef<R::Resource>>>,
    /// The status this process last wrote of each CR. The watch cache may
    /// not have it yet when the next pass starts (a loaded API server is
    /// slow to tell): compared with a stale status, a step already told
    /// (an upgrade begun) would be told again.
    written: std::sync::Mutex<std::collections::HashMap<ObjectRef<R::Resource>, StatusOf<R>>>,
}

impl<R: Reconciler> Skeleton<R> {
    /// The skeleton around `reconciler`.
    pub fn new(reconciler: R) -> Self {
        Skeleton {
            reconciler,
            memory: Memory::default(),
            exported: Default::default(),
            written: Default::default(),
        }
    }

    /// The reconciler.
    pub fn reconciler(&self) -> &R {
        &self.reconciler
    }

    /// How many CRs something is remembered of (for tests: it must fall
    /// back to zero when they are deleted).
    pub fn remembered(&self) -> usize {
        self.memory.len()
    }

    fn tools(&self) -> &Tools {
        self.reconciler.tools()
    }

    fn gauge_ref<'a>(&'a self, kind: &'a str, cr: &'a R::Resource) -> ComponentRef<'a> {
        ComponentRef {
            controller: &self.tools().name,
            kind,
            namespace: cr.meta().namespace.as_deref().unwrap_or_default(),
            name: cr.meta().name.as_deref().unwrap_or_default(),
        }
    }

    fn count(&self, result: &str) {
        self.tools()
            .metrics
            .reconcile_total
            .with_label_values(&[&self.tools().name, result])
            .inc();
    }

    /// One reconcile under the finalizer.
    pub async fn reconcile(&self, cr: Arc<R::Resource>) -> Result<Action, Failure> {
        let started = Instant::now();
        let ns = cr.namespace().unwrap_or_default();
        let api: Api<R::Resource> = Api::namespaced(self.tools().client.clone(), &ns);
        // Every line logged during the reconcile names the CR (several CRs
        // of one kind can be reconciled at once).
        let span = tracing::info_span!(
            "reconcile",
            kind = %R::Resource::kind(&()),
            object = %format!("{ns}/{}", cr.name_any())
        );
        if self.reconciler.holds_nothing(&cr) {
            let result =
                tracing::Instrument::instrument(self.without_finalizer(&api, cr), span).await;
            self.timed(started);
            return result;
        }
        let reported = cr.clone();
        let result = tracing::Instrument::instrument(
            async {
                let failure = match finalizer(&api, R::FINALIZER, cr, |event| async {
                    match event {
                        FinalizerEvent::Apply(cr) => self.apply(&cr).await,
                        FinalizerEvent::Cleanup(cr) => self.cleanup(&cr).await,
                    }
                })
                .await
                {
                    Ok(action) => return Ok(action),
                    Err(FinalizerError::ApplyFailed(e) | FinalizerError::CleanupFailed(e)) => {
                        return Err(e);
                    }
                    Err(FinalizerError::AddFinalizer(e) | FinalizerError::RemoveFinalizer(e)) => {
                        Failure::api("update the finalizer", e)
                    }
                    Err(other) => Failure::transient(
                        Reason::ApiError,
                        format!("the finalizer cannot run: {other}"),
                    ),
                };
                self.count("error");
                // Said in the status as any failure is: a CR whose first
                // write (the finalizer) fails under a loaded API server
                // would otherwise show nothing at all.
                if let Failure::Transient {
                    reason, message, ..
                } = &failure
                {
                    let key = ObjectRef::from_obj(reported.as_ref());
                    let old = reported.reported().cloned().unwrap_or_default();
                    let mut status = old.clone();
                    *status.observed_generation_mut() = reported.meta().generation;
                    self.fail(&reported, &key, &old, status, *reason, message)
                        .await;
                }
                Err(failure)
            },
            span,
        )
        .await;
        self.tools()
            .metrics
            .reconcile_time_seconds
            .with_label_values(&[&self.tools().name])
            .observe(started.elapsed().as_secs_f64());
        result
    }

    fn timed(&self, started: Instant) {
        self.tools()
            .metrics
            .reconcile_time_seconds
            .with_label_values(&[&self.tools().name])
            .observe(started.elapsed().as_secs_f64());
    }

    /// A reconcile of a CR that holds nothing (see
    /// [`Reconciler::holds_nothing`]): its finalizer, left by an earlier
    /// run, is taken off; deleted, it goes at once; otherwise the apply
    /// runs (and refuses it) without adding one.
    async fn without_finalizer(
        &self,
        api: &Api<R::Resource>,
        cr: Arc<R::Resource>,
    ) -> Result<Action, Failure> {
        if let Some(i) = cr.finalizers().iter().position(|f| f == R::FINALIZER) {
            // The test guards against removing another entry should the
            // list have changed since this copy was read.
            let patch: json_patch::Patch = serde_json::from_value(serde_json::json!([
                {"op": "test", "path": format!("/metadata/finalizers/{i}"), "value": R::FINALIZER},
                {"op": "remove", "path": format!("/metadata/finalizers/{i}")},
            ]))
            .map_err(|e| Failure::Transient {
                reason: Reason::ApiError,
                message: format!("failed to build the finalizer's removal: {e}"),
                source: Some(Arc::new(e)),
            })?;
            api.patch::<R::Resource>(
                &cr.name_any(),
                &kube::api::PatchParams::default(),
                &kube::api::Patch::Json(patch),
            )
            .await
            .map_err(|e| {
                Failure::api("take off the finalizer of a resource that holds nothing", e)
            })?;
            tracing::info!("nothing was applied: took the cleanup finalizer off");
        }
        if cr.meta().deletion_timestamp.is_some() {
            self.forget_gone(&ObjectRef::from_obj(cr.as_ref()));
            return Ok(Action::await_change());
        }
        self.apply(&cr).await
    }

    async fn apply(&self, cr: &R::Resource) -> Result<Action, Failure> {
        let key = ObjectRef::from_obj(cr);
        let old = cr.reported().cloned().unwrap_or_default();
        let mut status = old.clone();
        *status.observed_generation_mut() = cr.meta().generation;
        // The first passing failure in the status while the pass goes on
        // (see `apply::early`); the pass's end, after it, writes what the
        // pass concluded. A refusal waits for the end: nothing was written.
        let (tx, mut failures) = tokio::sync::mpsc::unbounded_channel();
        let listener: crate::engine::apply::early::OnFailure = Arc::new(move |e| {
            if let Failure::Transient {
                reason, message, ..
            } = Failure::from(e)
            {
                let _ = tx.send((reason, message));
            }
        });
        let pass = crate::engine::apply::early::listening(
            listener,
            self.reconciler.apply(cr, &mut status),
        );
        let told = async {
            if let Some((reason, message)) = failures.recv().await {
                self.tell_early(cr, &key, &old, reason, &message).await;
            }
        };
        let (outcome, ()) = tokio::join!(pass, told);
        match outcome {
            Ok(requeue) => {
                self.memory.reset(&key);
                self.memory.forget_refusal(&key);
                let before = self.last_written(&key).unwrap_or(old);
                self.write(cr, &status).await?;
                self.reconciler.announce(cr, &before, &status).await;
                self.gauges(cr, &status);
                self.count("success");
                Ok(Action::requeue(requeue))
            }
            Err(Failure::Refused(refusal)) => {
                self.refuse(cr, &key, &old, status, &refusal).await?;
                self.count("refused");
                Ok(Action::requeue(REFUSED_REQUEUE))
            }
            Err(Failure::Waiting(what)) => {
                tracing::info!(waiting_for = %what, "waiting");
                self.write(cr, &status).await?;
                self.gauges(cr, &status);
                self.count("waiting");
                Ok(Action::requeue(WAITING_REQUEUE))
            }
            Err(failure @ Failure::Transient { .. }) => {
                if let Failure::Transient {
                    reason, message, ..
                } = &failure
                {
                    self.fail(cr, &key, &old, status, *reason, message).await;
                }
                self.count("error");
                Err(failure)
            }
        }
    }

    async fn cleanup(&self, cr: &R::Resource) -> Result<Action, Failure> {
        let key = ObjectRef::from_obj(cr);
        let mut status = cr.reported().cloned().unwrap_or_default();
        match self.reconciler.cleanup(cr, &mut status).await {
            Ok(()) => {
                // Removed: nothing of the CR is remembered any more.
                self.forget_gone(&key);
                self.count("success");
                Ok(Action::await_change())
            }
            Err(Failure::Waiting(what)) => {
                // The status says what the removal waits for (a person may
                // have to remove someone else's finalizer).
                tracing::info!(waiting_for = %what, "cleanup in progress");
                conditions::set(
                    status.conditions_mut(),
                    READY,
                    false,
                    Reason::Deleting,
                    &format!("waiting for {what}"),
                    cr.meta().generation,
                );
                self.write(cr, &status).await?;
                self.count("waiting");
                // An error to the finalizer helper, which would otherwise
                // take the finalizer off; `error_policy` requeues it soon,
                // uncounted.
                Err(Failure::Waiting(what))
            }
            Err(e) => {
                self.count("error");
                Err(e)
            }
        }
    }

    /// A refusal: Degraded at this generation, an Event when it is news,
    /// the backoff ended (a person must act; retrying changes nothing).
    async fn refuse(
        &self,
        cr: &R::Resource,
        key: &ObjectRef<R::Resource>,
        old: &StatusOf<R>,
        mut status: StatusOf<R>,
        refusal: &crate::base::refusal::Refusal,
    ) -> Result<(), Failure> {
        tracing::warn!(reason = %refusal.reason, message = %refusal.message, "refused");
        self.tools()
            .metrics
            .reconcile_errors_total
            .with_label_values(&[&self.tools().name, refusal.reason.as_str()])
            .inc();
        crate::report::status::refused(refusal.reason, &refusal.message)
            .apply(status.conditions_mut(), cr.meta().generation);
        // Told once per new refusal: the CR's status alone cannot say so (a
        // reconcile that runs before the watch brings back the status just
        // written sees the old condition).
        if self.reconciler.may_publish(cr)
            && events::condition_changed(old.conditions(), status.conditions(), READY)
            && self.memory.refusal_is_news(key, &refusal.to_string())
        {
            let on = cr.object_ref(&());
            let notice = Notice::Refused(refusal.reason);
            self.tools()
                .tell(&on, notice, None, refusal.message.clone())
                .await;
        }
        self.memory.reset(key);
        self.write(cr, &status).await?;
        self.gauges(cr, &status);
        Ok(())
    }

    /// A failure the pass reported while it goes on (see `apply::early`): the
    /// status says it at once, as [`Self::fail`] would say this one failure
    /// more in a row, though the pass has not counted it yet. No Event: the
    /// pass's end tells what is news.
    async fn tell_early(
        &self,
        cr: &R::Resource,
        key: &ObjectRef<R::Resource>,
        old: &StatusOf<R>,
        reason: Reason,
        message: &str,
    ) {
        tracing::warn!(%reason, error = %message, "failed; the rest of the pass goes on");
        let in_a_row = self.memory.failures(key).saturating_add(1);
        let mut status = old.clone();
        *status.observed_generation_mut() = cr.meta().generation;
        crate::report::status::failed(reason, message, in_a_row)
            .apply(status.conditions_mut(), cr.meta().generation);
        if let Err(e) = self.write(cr, &status).await {
            tracing::warn!(error = %e, "could not write the failure into the status");
        }
    }

    /// A transient failure: Ready false and Progressing (with the reason
    /// and the message: the verb, the object, the error) at this
    /// generation, Degraded from the third failure in a row (a missing
    /// permission at once: a person must grant it), an Event when either is
    /// news. The status write is best effort: the failure goes back to the
    /// controller for its backoff.
    async fn fail(
        &self,
        cr: &R::Resource,
        key: &ObjectRef<R::Resource>,
        old: &StatusOf<R>,
        mut status: StatusOf<R>,
        reason: Reason,
        message: &str,
    ) {
        // A person must act on a missing permission or a policy that refuses
        // the write: Degraded at once.
        let needs_a_person = matches!(reason, Reason::PermissionDenied | Reason::AdmissionDenied);
        // Failures in a row, whatever each says: under a failing API server
        // each try may fail on another object, and that is no less a fault.
        // (`error_policy` counts this one after the status is written.)
        let in_a_row = self.memory.failures(key).saturating_add(1);
        let repeats = if needs_a_person {
            crate::report::status::REPEATS_BEFORE_DEGRADED
        } else {
            self.memory.repeats(key, message).max(in_a_row)
        };
        // Tried again and failed otherwise: an earlier refusal is over.
        self.memory.forget_refusal(key);
        crate::report::status::failed(reason, message, repeats)
            .apply(status.conditions_mut(), cr.meta().generation);
        let permission = needs_a_person
            && events::condition_changed(old.conditions(), status.conditions(), READY);
        if self.reconciler.may_publish(cr)
            && (permission
                || events::became_true(old.conditions(), status.conditions(), conditions::DEGRADED))
        {
            let on = cr.object_ref(&());
            let note = message.to_string();
            self.tools()
                .tell(&on, Notice::Failed(reason), None, note)
                .await;
        }
        if let Err(e) = self.write(cr, &status).await {
            tracing::warn!(error = %e, "could not write the failure into the status");
        }
        self.gauges(cr, &status);
    }

    /// Writes the status when it says something new.
    async fn write(&self, cr: &R::Resource, status: &StatusOf<R>) -> Result<(), Failure> {
        let api: Api<R::Resource> = Api::namespaced(
            self.tools().client.clone(),
            &cr.namespace().unwrap_or_default(),
        );
        crate::report::status::write_if_changed(&api, cr, status, &self.tools().name)
            .await
            .map_err(|e| Failure::api("write the status", e))?;
        if let Ok(mut w) = self.written.lock() {
            w.insert(ObjectRef::from_obj(cr), status.clone());
        }
        Ok(())
    }

    /// The status this process last wrote of the CR, if any (see `written`).
    fn last_written(&self, key: &ObjectRef<R::Resource>) -> Option<StatusOf<R>> {
        self.written.lock().ok()?.get(key).cloned()
    }

    fn gauges(&self, cr: &R::Resource, status: &StatusOf<R>) {
        if let Ok(mut e) = self.exported.lock() {
            e.insert(ObjectRef::from_obj(cr));
        }
        let ready = conditions::get(status.conditions(), READY).is_some_and(|c| c.status == "True");
        let kind = R::Resource::kind(&());
        self.tools().metrics.record_component(
            &self.gauge_ref(&kind, cr),
            ready,
            status.version(),
            status.conditions(),
        );
        self.reconciler.record(cr, status);
    }

    /// Drops what is remembered and exported of the CRs the controller's
    /// cache no longer holds. A CR that carried no finalizer (refused with
    /// nothing applied, so its deletion is not held up) is gone before any
    /// reconcile sees its deletion: the controller does not reconcile
    /// deletions. Without this its readiness series would stay at 0 and
    /// keep the not-ready alert firing for a resource that no longer
    /// exists. `exists` answers from the cache.
    pub fn sweep_gone(&self, exists: impl Fn(&ObjectRef<R::Resource>) -> bool) {
        let gone: Vec<ObjectRef<R::Resource>> = match self.exported.lock() {
            Ok(e) => e.iter().filter(|k| !exists(k)).cloned().collect(),
            Err(_) => return,
        };
        for key in gone {
            self.forget_gone(&key);
        }
    }

    /// Forgets a CR that is gone (or whose removal is done): its memory,
    /// the reconciler's, its series.
    fn forget_gone(&self, key: &ObjectRef<R::Resource>) {
        if let Ok(mut e) = self.exported.lock() {
            e.remove(key);
        }
        if let Ok(mut w) = self.written.lock() {
            w.remove(key);
        }
        self.memory.forget(key);
        self.reconciler.forget(key);
        let kind = R::Resource::kind(&());
        self.tools().metrics.forget_component(&ComponentRef {
            controller: &self.tools().name,
            kind: &kind,
            namespace: key.namespace.as_deref().unwrap_or_default(),
            name: &key.name,
        });
    }

    /// Counts a failure for the backoff: the delay before the next try. A
    /// removal's wait comes here too (it must not end the finalizer), and is
    /// requeued soon, neither counted nor backed off.
    pub fn error_policy(&self, cr: &R::Resource, failure: &Failure) -> Action {
        if let Failure::Waiting(_) = failure {
            return Action::requeue(WAITING_REQUEUE);
        }
        self.tools()
            .metrics
            .reconcile_errors_total
            .with_label_values(&[&self.tools().name, failure.metric_reason()])
            .inc();
        let n = self.memory.record(&ObjectRef::from_obj(cr));
        tracing::warn!(
            kind = %R::Resource::kind(&()),
            object = %format!("{}/{}", cr.namespace().unwrap_or_default(), cr.name_any()),
            error = %failure,
            // The whole chain of the error behind it: the message above
            // is cut to the status' bound.
            cause = failure.cause(),
            attempt = n,
            "reconcile failed; retrying"
        );
        Action::requeue(crate::base::retry::jittered(n))
    }
}

/// How often the series of deleted CRs are looked for (an in-memory pass
/// over the CRs with series, against the controller's cache).
const GONE_SWEEP: Duration = Duration::from_secs(5);

/// Runs `controller` (its watches set up by the caller) with the skeleton
/// around `reconciler` until SIGTERM or loss of leadership, then gives the
/// Lease up.
pub async fn run<R: Reconciler>(
    reconciler: R,
    controller: Controller<R::Resource>,
    rt: crate::framework::runner::Runtime,
) {
    let skeleton = Arc::new(Skeleton::new(reconciler));
    crate::framework::runner::mark_ready_when_listable(
        Api::<R::Resource>::all(rt.client.clone()),
        rt.probe.clone(),
    );
    tracing::info!(operator = %rt.name, "starting controller");
    let cache = controller.store();
    let sweeper = skeleton.clone();
    let sweep = tokio::spawn(async move {
        let mut every = tokio::time::interval(GONE_SWEEP);
        loop {
            every.tick().await;
            sweeper.sweep_gone(|key| cache.get(key).is_some());
        }
    });
    controller
        .graceful_shutdown_on(rt.shutdown())
        .run(
            |cr, s: Arc<Skeleton<R>>| async move { s.reconcile(cr).await },
            |cr, failure, s| s.error_policy(&cr, failure),
            skeleton,
        )
        .for_each(|_| futures::future::ready(()))
        .await;
    sweep.abort();
    rt.release().await;
}
