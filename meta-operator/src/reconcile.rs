//! The `Kubeflow` controller: check the release, render the children in
//! dependency order, apply them through the shared engine (so removed
//! components are pruned and steady state writes nothing), summarize.

use std::collections::BTreeMap;
use std::time::Duration;

use futures::FutureExt;
use kube::api::{Api, DynamicObject};
use kube::runtime::controller::Controller;
use kube::runtime::reflector::{ObjectRef, Store, store::Writer};
use kube::runtime::watcher;
use kube::{Resource, ResourceExt};
use kubeflow_api::kubeflow::Phase;
use kubeflow_api::{Kubeflow, KubeflowStatus};
use kubeflow_operator::conditions::{self, Reason};
use kubeflow_operator::controller::{Failure, Reconciler, Tools};
use kubeflow_operator::engine::apply::{ApplyRequest, Engine};
use kubeflow_operator::engine::inventory::Inventory;
use kubeflow_operator::engine::watches;
use kubeflow_operator::events::{self, Notice};
use kubeflow_operator::refusal::Refusal;
use kubeflow_operator::runner::{self, RunArgs};
use kubeflow_operator::{labels, platform};

use crate::approval;
use crate::children;
use crate::component_kind::ComponentKind;
use crate::plan;
use crate::release;
use crate::reported;

/// The operator's name and field manager.
pub const NAME: &str = "kubeflow-meta-operator";
/// Finalizer on `Kubeflow` CRs: children go first, in reverse order.
pub const FINALIZER: &str = "platform.kubeflow.org/cleanup";

/// What the meta-operator knows beyond the skeleton: the engine that
/// applies the child CRs.
struct Meta {
    engine: Engine,
    tools: Tools,
    /// The child CRs as the watches last saw them, per component.
    children: BTreeMap<ComponentKind, Store<DynamicObject>>,
}

#[kubeflow_operator::async_trait::async_trait]
impl Reconciler for Meta {
    type Resource = Kubeflow;
    const FINALIZER: &'static str = FINALIZER;

    fn tools(&self) -> &Tools {
        &self.tools
    }

    async fn apply(&self, kf: &Kubeflow, status: &mut KubeflowStatus) -> Result<Duration, Failure> {
        apply(kf, self, status).await
    }

    async fn cleanup(&self, kf: &Kubeflow, status: &mut KubeflowStatus) -> Result<(), Failure> {
        cleanup(kf, self, status).await
    }

    async fn announce(&self, kf: &Kubeflow, old: &KubeflowStatus, new: &KubeflowStatus) {
        announce(kf, self, old, new).await;
    }
}

/// Runs the meta-operator until SIGTERM.
pub async fn run(args: RunArgs) -> anyhow::Result<()> {
    let rt = runner::start(NAME, &args).await?;
    let c = &rt.client;
    let cfg = || watcher::Config::default().any_semantic();
    // Each child kind's watch backs off on its own (see `watches`): one per
    // component of the registry, read as dynamic objects, kept in a store
    // the reconciles read the children from.
    let mut controller = Controller::new(Api::<Kubeflow>::all(c.clone()), cfg())
        .trigger_backoff(watches::trigger_backoff());
    let mut children = BTreeMap::new();
    for component in ComponentKind::ORDER {
        let resource = component.api_resource();
        let writer = Writer::new(resource.clone());
        children.insert(component, writer.as_reader());
        let stream = watches::isolated_into(
            Api::<DynamicObject>::all_with(c.clone(), &resource),
            cfg(),
            resource.plural.clone(),
            writer,
        );
        controller = controller.owns_stream_with(stream, resource);
    }
    let meta = Meta {
        engine: Engine::new(rt.client.clone(), NAME),
        tools: Tools::new(rt.client.clone(), rt.metrics.clone(), NAME),
        children,
    };
    kubeflow_operator::controller::run(meta, controller, rt).await;
    Ok(())
}

/// A refusal of the CR: its phase says Degraded with the condition.
fn refused(status: &mut KubeflowStatus, refusal: Refusal) -> Failure {
    status.phase = Some(Phase::Degraded);
    Failure::Refused(refusal)
}

/// The live child CRs: from the children's watches, or, for a kind whose
/// watch has not listed yet (its CRD not served, the operator just
/// started), from the API server, so a child is never taken for missing
/// only because its watch is late. A store may lag a write by the time its
/// event takes to arrive; that event brings the next reconcile.
async fn live_children(
    ctx: &Meta,
    kf: &Kubeflow,
) -> Result<BTreeMap<ComponentKind, DynamicObject>, Failure> {
    let ns = kf.namespace().unwrap_or_default();
    let name = kf.name_any();
    let reads = ComponentKind::ORDER.into_iter().map(|component| {
        let resource = component.api_resource();
        let store = ctx.children.get(&component);
        let name = name.clone();
        let ns = ns.clone();
        async move {
            if let Some(store) =
                store.filter(|s| matches!(s.wait_until_ready().now_or_never(), Some(Ok(()))))
            {
                let key = ObjectRef::new_with(&name, resource).within(&ns);
                return Ok(store.get(&key).map(|o| (component, (*o).clone())));
            }
            let api: Api<DynamicObject> =
                Api::namespaced_with(ctx.tools.client.clone(), &ns, &resource);
            match api.get_opt(&name).await {
                Ok(found) => Ok(found.map(|o| (component, o))),
                // The component's CRD not being installed reads as "no child".
                Err(kube::Error::Api(e)) if e.code == 404 => Ok(None),
                Err(e) => Err(Failure::api("read a component CR", e)),
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
async fn apply(
    kf: &Kubeflow,
    ctx: &Meta,
    status: &mut KubeflowStatus,
) -> Result<Duration, Failure> {
    let generation = kf.meta().generation;
    let old = kf.status.clone().unwrap_or_default();
    let resolved = platform::resolve(&ctx.tools.client, kf.spec.shared.platform)
        .await
        .map_err(|e| Failure::api("detect the platform", e))?;
    status.platform = Some(resolved);
    let mut wanted = match wanted_children(kf, &old, resolved) {
        Ok(w) => w,
        Err((r, message)) => return Err(refused(status, Refusal::new(r, message))),
    };
    let live = live_children(ctx, kf).await?;
    // The components' plans towards this release, approved as one.
    let release_plan =
        approval::release_plan(&wanted, &live, old.version.as_deref(), &kf.spec.version);
    if let Some(p) = &release_plan {
        approval::approve(&mut wanted, p, kf.spec.shared.approved_plan.as_deref());
    }
    let plan = plan::plan(&wanted, &live);
    let outcome = match apply_children(kf, ctx, &plan).await {
        Ok(o) => o,
        Err(Failure::Refused(r)) => return Err(refused(status, r)),
        Err(e) => return Err(e),
    };
    let seen = crate::status::Observed {
        wanted: &wanted,
        waiting: &plan.waiting,
        live: &outcome.live,
    };
    let all_ready = crate::status::after_apply(
        status,
        &kf.spec.version,
        old.version.as_deref(),
        generation,
        &seen,
    );
    crate::status::with_release_plan(
        status,
        release_plan,
        kf.spec.shared.approved_plan.as_deref(),
        generation,
    );
    // A child CR whose live state refuses ours is never deleted to be
    // recreated (that would uninstall its component): a person must act.
    if let Some(message) = kubeflow_operator::engine::apply::held_summary(&outcome.held) {
        conditions::set(
            &mut status.conditions,
            conditions::DEGRADED,
            true,
            Reason::LiveStateRefused,
            &message,
            generation,
        );
    }
    Ok(if all_ready {
        Duration::from_secs(600)
    } else {
        Duration::from_secs(30)
    })
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
    ctx: &Meta,
    plan: &plan::Plan<'_>,
) -> Result<kubeflow_operator::engine::apply::ApplyOutcome, Failure> {
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
            release_on_prune: None,
            delete_crds: false,
        })
        .await?;
    if !outcome.written.is_empty() {
        ctx.tools
            .metrics
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
        let on = kf.object_ref(&());
        ctx.tools
            .tell(&on, Notice::ComponentRemoved, None, note)
            .await;
    }
    Ok(outcome)
}

/// Events for a release change begun or finished and for readiness
/// reached; only when the status moved, so a steady state publishes none.
async fn announce(kf: &Kubeflow, ctx: &Meta, old: &KubeflowStatus, new: &KubeflowStatus) {
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
            ctx.tools
                .tell(&on, Notice::UpgradeStarted, None, note)
                .await;
        }
        (Some(u), None) if new.version.as_deref() == Some(u.to.as_str()) => {
            let note = format!(
                "every component reached Kubeflow {} (from {})",
                u.to, u.from
            );
            ctx.tools.tell(&on, Notice::Upgraded, None, note).await;
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
        ctx.tools
            .tell(&on, Notice::UpgradeAwaitingApproval, None, note)
            .await;
    }
    if events::became_true(&old.conditions, &new.conditions, conditions::READY) {
        let note = format!(
            "Kubeflow {}: {} components ready",
            new.version.as_deref().unwrap_or(&kf.spec.version),
            new.ready_components.as_deref().unwrap_or("all")
        );
        ctx.tools.tell(&on, Notice::Ready, None, note).await;
    }
}

/// Deletes children in reverse order, each wave once the previous one is
/// gone; waits (the status says for what) while one is still there.
async fn cleanup(kf: &Kubeflow, ctx: &Meta, status: &mut KubeflowStatus) -> Result<(), Failure> {
    let live = live_children(ctx, kf).await?;
    if live.is_empty() {
        return Ok(());
    }
    let ns = kf.namespace().unwrap_or_default();
    for wave in 0..=ComponentKind::last_wave() {
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
                    Api::namespaced_with(ctx.tools.client.clone(), &ns, &c.api_resource());
                match api.delete(&kf.name_any(), &Default::default()).await {
                    Ok(_) => {}
                    Err(kube::Error::Api(e)) if e.code == 404 => {}
                    Err(e) => return Err(Failure::api("delete a component CR", e)),
                }
            }
        }
        // Each child's own removal says what it waits for: passed on.
        let names: Vec<String> = present
            .iter()
            .map(|c| match live.get(c).and_then(removal_wait) {
                Some(wait) => format!("{c} ({wait})"),
                None => c.to_string(),
            })
            .collect();
        status.phase = Some(Phase::Deleting);
        return Err(Failure::Waiting(format!(
            "{} to be removed",
            names.join(", ")
        )));
    }
    Ok(())
}

/// What a child CR's own removal waits for, from its Ready condition.
fn removal_wait(child: &DynamicObject) -> Option<String> {
    let status = reported::status(child)?;
    let ready = reported::condition(&status, conditions::READY)?;
    (ready.reason == Reason::Deleting.as_str()).then(|| ready.message.clone())
}
