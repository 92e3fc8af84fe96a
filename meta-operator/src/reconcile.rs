//! The `Kubeflow` controller: check the release, render the children in
//! dependency order, apply them through the shared engine (so removed
//! components are pruned and steady state writes nothing), summarize.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use kube::api::{Api, DynamicObject};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::{Recorder, Reporter};
use kube::runtime::finalizer::{Event as FinalizerEvent, finalizer};
use kube::runtime::watcher;
use kube::{Client, Resource, ResourceExt};
use kubeflow_api::kubeflow::Phase;
use kubeflow_api::{
    DevicePlugins, Istio, Kubeflow, KubeflowStatus, Pipelines, Serving, Trainer, Training,
};
use kubeflow_operator::apply::{ApplyError, ApplyRequest, Engine};
use kubeflow_operator::conditions::{self, READY, Reason};
use kubeflow_operator::inventory::Inventory;
use kubeflow_operator::retry::{self, Memory};
use kubeflow_operator::runner::{self, RunArgs};
use kubeflow_operator::telemetry::Metrics;
use kubeflow_operator::telemetry::metrics::ComponentRef;
use kubeflow_operator::{events, labels, platform, watches};

use crate::approval;
use serde_json::Value;

use crate::children;
use crate::component_kind::ComponentKind;
use crate::plan;
use crate::release;

/// The operator's name and field manager.
pub const NAME: &str = "kubeflow-meta-operator";
/// Finalizer on `Kubeflow` CRs: children go first, in reverse order.
pub const FINALIZER: &str = "platform.kubeflow.org/cleanup";

struct Context {
    client: Client,
    engine: Engine,
    recorder: Recorder,
    metrics: Metrics,
    memory: Memory,
}

/// Errors retried with backoff.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An API request failed.
    #[error("failed to {0}: {1}")]
    Api(&'static str, #[source] kube::Error),
    /// Applying children failed.
    #[error(transparent)]
    Apply(#[from] ApplyError),
    /// Children are still being removed.
    #[error("waiting for {0} to be removed")]
    Removing(String),
}

/// Runs the meta-operator until SIGTERM.
pub async fn run(args: RunArgs) -> anyhow::Result<()> {
    let rt = runner::start(NAME, &args).await?;
    let ctx = Arc::new(Context {
        client: rt.client.clone(),
        engine: Engine::new(rt.client.clone(), NAME),
        recorder: Recorder::new(
            rt.client.clone(),
            Reporter {
                controller: NAME.into(),
                instance: std::env::var("POD_NAME").ok(),
            },
        ),
        metrics: rt.metrics.clone(),
        memory: Memory::default(),
    });
    let c = &rt.client;
    let cfg = || watcher::Config::default().any_semantic();
    // Each child kind's watch backs off on its own (see `watches`).
    let controller = Controller::new(Api::<Kubeflow>::all(c.clone()), cfg())
        .trigger_backoff(watches::trigger_backoff())
        .owns_stream(watches::isolated(
            Api::<Istio>::all(c.clone()),
            cfg(),
            "istios".into(),
        ))
        .owns_stream(watches::isolated(
            Api::<Training>::all(c.clone()),
            cfg(),
            "trainings".into(),
        ))
        .owns_stream(watches::isolated(
            Api::<Trainer>::all(c.clone()),
            cfg(),
            "trainers".into(),
        ))
        .owns_stream(watches::isolated(
            Api::<DevicePlugins>::all(c.clone()),
            cfg(),
            "deviceplugins".into(),
        ))
        .owns_stream(watches::isolated(
            Api::<Pipelines>::all(c.clone()),
            cfg(),
            "pipelines".into(),
        ))
        .owns_stream(watches::isolated(
            Api::<Serving>::all(c.clone()),
            cfg(),
            "servings".into(),
        ));
    runner::mark_ready_when_listable(Api::<Kubeflow>::all(c.clone()), rt.probe.clone());
    controller
        .graceful_shutdown_on(rt.shutdown())
        .run(reconcile, error_policy, ctx)
        .for_each(|_| futures::future::ready(()))
        .await;
    rt.release().await;
    Ok(())
}

fn key(kf: &Kubeflow) -> String {
    format!("{}/{}", kf.namespace().unwrap_or_default(), kf.name_any())
}

fn error_policy(kf: Arc<Kubeflow>, err: &Error, ctx: Arc<Context>) -> Action {
    let reason = match err {
        Error::Api(..) => "ApiError",
        Error::Apply(_) => "ApplyError",
        Error::Removing(_) => "Removing",
    };
    if matches!(err, Error::Removing(_)) {
        return Action::requeue(Duration::from_millis(500));
    }
    ctx.metrics
        .reconcile_errors_total
        .with_label_values(&[NAME, reason])
        .inc();
    let object = key(&kf);
    let n = ctx.memory.record(&object);
    tracing::warn!(kind = "Kubeflow", %object, error = %err, attempt = n, "reconcile failed; retrying");
    Action::requeue(retry::delay(n))
}

async fn reconcile(kf: Arc<Kubeflow>, ctx: Arc<Context>) -> Result<Action, Error> {
    let started = Instant::now();
    let kf_key = key(&kf);
    let api: Api<Kubeflow> =
        Api::namespaced(ctx.client.clone(), &kf.namespace().unwrap_or_default());
    // Every line logged during the reconcile names the CR.
    let span = tracing::info_span!("reconcile", kind = "Kubeflow", object = %kf_key);
    let result = tracing::Instrument::instrument(
        finalizer(&api, FINALIZER, kf, |event| async {
            match event {
                FinalizerEvent::Apply(kf) => apply(&kf, &ctx).await,
                FinalizerEvent::Cleanup(kf) => cleanup(&kf, &ctx).await,
            }
        }),
        span,
    )
    .await;
    ctx.metrics
        .reconcile_time_seconds
        .with_label_values(&[NAME])
        .observe(started.elapsed().as_secs_f64());
    let outcome = if result.is_ok() { "success" } else { "error" };
    if result.is_ok() {
        ctx.memory.reset(&kf_key);
    }
    ctx.metrics
        .reconcile_total
        .with_label_values(&[NAME, outcome])
        .inc();
    result.map_err(|e| match e {
        kube::runtime::finalizer::Error::ApplyFailed(e)
        | kube::runtime::finalizer::Error::CleanupFailed(e) => e,
        kube::runtime::finalizer::Error::AddFinalizer(e)
        | kube::runtime::finalizer::Error::RemoveFinalizer(e) => {
            Error::Api("update the finalizer", e)
        }
        other => Error::Removing(other.to_string()),
    })
}

/// Reads the live child CRs, all at once (one at a time, six round trips
/// stood in every reconcile the children's status changes cause).
async fn live_children(
    ctx: &Context,
    kf: &Kubeflow,
) -> Result<BTreeMap<ComponentKind, DynamicObject>, Error> {
    let ns = kf.namespace().unwrap_or_default();
    let name = kf.name_any();
    let reads = ComponentKind::ORDER.into_iter().map(|component| {
        let api: Api<DynamicObject> =
            Api::namespaced_with(ctx.client.clone(), &ns, &component.api_resource());
        let name = name.clone();
        async move {
            match api.get_opt(&name).await {
                Ok(found) => Ok(found.map(|o| (component, o))),
                // The component's CRD not being installed reads as "no child".
                Err(kube::Error::Api(e)) if e.code == 404 => Ok(None),
                Err(e) => Err(Error::Api("read a component CR", e)),
            }
        }
    });
    Ok(futures::future::try_join_all(reads)
        .await?
        .into_iter()
        .flatten()
        .collect())
}

/// One reconcile of a `Kubeflow` CR, as its steps: which release and
/// children it asks for (refused when they cannot be had), which children
/// to write now (`plan`), the apply, then the status (`status`).
async fn apply(kf: &Kubeflow, ctx: &Context) -> Result<Action, Error> {
    let generation = kf.meta().generation;
    let old = kf.status.clone().unwrap_or_default();
    let mut status = old.clone();
    status.observed_generation = generation;
    let resolved = platform::resolve(&ctx.client, kf.spec.platform)
        .await
        .map_err(|e| Error::Api("detect the platform", e))?;
    status.platform = Some(resolved);
    let mut wanted = match wanted_children(kf, &old, resolved) {
        Ok(w) => w,
        Err((r, message)) => return refuse(kf, ctx, status, r, &message).await,
    };
    let live = live_children(ctx, kf).await?;
    // The components' plans towards this release, approved as one.
    let release_plan =
        approval::release_plan(&wanted, &live, old.version.as_deref(), &kf.spec.version);
    if let Some(p) = &release_plan {
        approval::approve(&mut wanted, p, kf.spec.approved_plan.as_deref());
    }
    let plan = plan::plan(&wanted, &live);
    let outcome = match apply_children(kf, ctx, &plan).await {
        Ok(o) => o,
        Err(e) if e.is_refusal() => {
            let r = if matches!(e, ApplyError::Conflict { .. }) {
                Reason::OwnershipConflict
            } else {
                Reason::InvalidSpec
            };
            return refuse(kf, ctx, status, r, &e.to_string()).await;
        }
        Err(e) => return Err(e.into()),
    };
    let seen = crate::status::Observed {
        wanted: &wanted,
        waiting: &plan.waiting,
        live: &outcome.live,
    };
    let all_ready = crate::status::after_apply(
        &mut status,
        &kf.spec.version,
        old.version.as_deref(),
        generation,
        &seen,
    );
    crate::status::with_release_plan(
        &mut status,
        release_plan,
        kf.spec.approved_plan.as_deref(),
        generation,
    );
    // A child CR whose live state refuses ours is never deleted to be
    // recreated (that would uninstall its component): a person must act.
    if let Some(message) = kubeflow_operator::apply::held_summary(&outcome.held) {
        conditions::set(
            &mut status.conditions,
            conditions::DEGRADED,
            true,
            Reason::LiveStateRefused,
            &message,
            generation,
        );
    }
    write_status(kf, ctx, &old, &status).await?;
    announce(kf, ctx, &old, &status).await;
    ctx.metrics.record_component(
        &ComponentRef {
            controller: NAME,
            kind: "Kubeflow",
            namespace: &kf.namespace().unwrap_or_default(),
            name: &kf.name_any(),
        },
        all_ready,
        status.version.as_deref(),
        &status.conditions,
    );
    Ok(Action::requeue(if all_ready {
        Duration::from_secs(600)
    } else {
        Duration::from_secs(30)
    }))
}

/// The children the CR asks for at its release: refused (reason, message)
/// for an unknown release, a downgrade, or a component the release lacks
/// and whose version is not pinned.
fn wanted_children(
    kf: &Kubeflow,
    old: &KubeflowStatus,
    platform: kubeflow_api::Platform,
) -> Result<Vec<children::Child>, (conditions::Reason, String)> {
    let allow_downgrade = kf
        .annotations()
        .get(labels::ALLOW_DOWNGRADE)
        .is_some_and(|v| v == "true");
    let release = release::check_change(old.version.as_deref(), &kf.spec.version, allow_downgrade)
        .map_err(|refused| {
            let r = match refused {
                release::ChangeRefused::Unknown(..) => Reason::UnknownVersion,
                _ => Reason::DowngradeRefused,
            };
            (r, refused.to_string())
        })?;
    let wanted = children::desired(kf, release, platform);
    let outside = children::outside_release(&wanted, release);
    if !outside.is_empty() {
        let names: Vec<String> = outside.iter().map(ToString::to_string).collect();
        return Err((
            Reason::InvalidSpec,
            format!(
                "{} is not part of Kubeflow {}; pin its version in spec.components.<name>.spec.version, or use a release that includes it",
                names.join(", "),
                release.kubeflow
            ),
        ));
    }
    Ok(wanted)
}

/// Applies the children the plan writes, as the `Kubeflow` CR's inventory.
async fn apply_children(
    kf: &Kubeflow,
    ctx: &Context,
    plan: &plan::Plan<'_>,
) -> Result<kubeflow_operator::apply::ApplyOutcome, ApplyError> {
    let inv = Inventory::for_parent(kf, "kubeflow", NAME);
    let empty = BTreeMap::new();
    let resource = children::kubeflow_resource();
    let never = |_: &DynamicObject| false;
    let outcome = ctx
        .engine
        .apply(ApplyRequest {
            inventory: &inv,
            parent_resource: &resource,
            parent_annotations: kf.meta().annotations.as_ref().unwrap_or(&empty),
            parent_labels: kf.meta().labels.as_ref().unwrap_or(&empty),
            owner: kf.controller_owner_ref(&()),
            objects: plan
                .render
                .iter()
                .map(|c| children::object(kf, c))
                .collect(),
            version: &kf.spec.version,
            retain: &never,
            delete_crds: false,
        })
        .await?;
    if !outcome.written.is_empty() {
        ctx.metrics
            .apply_writes_total
            .with_label_values(&[NAME])
            .inc_by(outcome.written.len() as u64);
    }
    if !outcome.pruned.is_empty() {
        let removed: Vec<String> = outcome.pruned.iter().map(ToString::to_string).collect();
        let note = format!(
            "removed (managementState Removed, or left out): {}",
            events::listing(&removed)
        );
        events::publish(
            &ctx.recorder,
            &kf.object_ref(&()),
            false,
            "ComponentRemoved",
            "Prune",
            note,
        )
        .await;
    }
    Ok(outcome)
}

async fn refuse(
    kf: &Kubeflow,
    ctx: &Context,
    mut status: KubeflowStatus,
    r: conditions::Reason,
    message: &str,
) -> Result<Action, Error> {
    let generation = kf.meta().generation;
    tracing::warn!(reason = %r, message, "refused");
    ctx.metrics
        .reconcile_errors_total
        .with_label_values(&[NAME, r.as_str()])
        .inc();
    let old = kf.status.clone().unwrap_or_default();
    kubeflow_operator::status::refused(r, message).apply(&mut status.conditions, generation);
    status.phase = Some(Phase::Degraded);
    if events::condition_changed(&old.conditions, &status.conditions, READY) {
        let on = kf.object_ref(&());
        events::publish(
            &ctx.recorder,
            &on,
            true,
            r.as_str(),
            "Reconcile",
            message.into(),
        )
        .await;
    }
    write_status(kf, ctx, &old, &status).await?;
    Ok(Action::await_change())
}

async fn write_status(
    kf: &Kubeflow,
    ctx: &Context,
    old: &KubeflowStatus,
    new: &KubeflowStatus,
) -> Result<(), Error> {
    let api: Api<Kubeflow> =
        Api::namespaced(ctx.client.clone(), &kf.namespace().unwrap_or_default());
    let old_json = match &kf.status {
        Some(_) => serde_json::to_value(old).unwrap_or(Value::Null),
        None => Value::Null,
    };
    kubeflow_operator::status::write_if_changed(
        &api,
        kf,
        &old_json,
        serde_json::to_value(new).unwrap_or(Value::Null),
    )
    .await
    .map_err(|e| Error::Api("write status", e))?;
    Ok(())
}

/// Events for a release change begun or finished and for readiness
/// reached; only when the status moved, so a steady state publishes none.
async fn announce(kf: &Kubeflow, ctx: &Context, old: &KubeflowStatus, new: &KubeflowStatus) {
    let on = kf.object_ref(&());
    match (&old.upgrade, &new.upgrade) {
        (None, Some(u)) => {
            let mut note = format!(
                "upgrading from Kubeflow {} to {}, one component at a time",
                u.from, u.to
            );
            // The risk is told with the start: the condition goes when the
            // upgrade ends.
            if let (Some(from), Some(to)) = (release::find(&u.from), release::find(&u.to))
                && let Some(risk) = release::upgrade_risk(from, to)
            {
                note.push_str("; risk: ");
                note.push_str(&risk);
            }
            events::publish(&ctx.recorder, &on, false, "UpgradeStarted", "Upgrade", note).await;
        }
        (Some(u), None) if new.version.as_deref() == Some(u.to.as_str()) => {
            let note = format!(
                "every component reached Kubeflow {} (from {})",
                u.to, u.from
            );
            events::publish(&ctx.recorder, &on, false, "Upgraded", "Upgrade", note).await;
        }
        _ => {}
    }
    // A plan waiting for approval, told once per plan (a new digest is news).
    if let Some(plan) = new.upgrade_plan.as_ref().filter(|p| p.awaiting_approval)
        && old
            .upgrade_plan
            .as_ref()
            .map(|p| (&p.digest, p.awaiting_approval))
            != Some((&plan.digest, true))
    {
        let note = approval::awaiting_message(plan, None);
        events::publish(
            &ctx.recorder,
            &on,
            false,
            "UpgradeAwaitingApproval",
            "Upgrade",
            note,
        )
        .await;
    }
    if events::became_true(&old.conditions, &new.conditions, READY) {
        let note = format!(
            "Kubeflow {}: {} components ready",
            new.version.as_deref().unwrap_or(&kf.spec.version),
            new.ready_components.as_deref().unwrap_or("all")
        );
        events::publish(&ctx.recorder, &on, false, "Ready", "Reconcile", note).await;
    }
}

/// Deletes children in reverse order, each wave once the previous one is gone.
async fn cleanup(kf: &Kubeflow, ctx: &Context) -> Result<Action, Error> {
    let live = live_children(ctx, kf).await?;
    if live.is_empty() {
        ctx.metrics.forget_component(&ComponentRef {
            controller: NAME,
            kind: "Kubeflow",
            namespace: &kf.namespace().unwrap_or_default(),
            name: &kf.name_any(),
        });
        return Ok(Action::await_change());
    }
    let ns = kf.namespace().unwrap_or_default();
    for wave in 0..=1 {
        let present: Vec<ComponentKind> = ComponentKind::ORDER
            .iter()
            .copied()
            .filter(|c| c.removal_wave() == wave && live.contains_key(c))
            .collect();
        if present.is_empty() {
            continue;
        }
        for c in &present {
            if live
                .get(c)
                .is_some_and(|o| o.metadata.deletion_timestamp.is_none())
            {
                let api: Api<DynamicObject> =
                    Api::namespaced_with(ctx.client.clone(), &ns, &c.api_resource());
                match api.delete(&kf.name_any(), &Default::default()).await {
                    Ok(_) => {}
                    Err(kube::Error::Api(e)) if e.code == 404 => {}
                    Err(e) => return Err(Error::Api("delete a component CR", e)),
                }
            }
        }
        let names: Vec<String> = present.iter().map(ToString::to_string).collect();
        let message = format!("removing {}", names.join(", "));
        let mut status = kf.status.clone().unwrap_or_default();
        status.phase = Some(Phase::Deleting);
        conditions::set(
            &mut status.conditions,
            READY,
            false,
            Reason::Deleting,
            &message,
            kf.meta().generation,
        );
        write_status(kf, ctx, &kf.status.clone().unwrap_or_default(), &status).await?;
        return Err(Error::Removing(names.join(", ")));
    }
    Ok(Action::await_change())
}
