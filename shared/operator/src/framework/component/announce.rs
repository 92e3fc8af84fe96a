//! What a reconcile tells people: the repairs an apply made (drift counted,
//! logged and announced per object), an upgrade begun, readiness reached.

use kube::Resource;
use kubeflow_api::ComponentStatus;

use super::Component;
use super::context::Context;
use crate::base::conditions::{self, Reason};
use crate::engine::apply::ApplyOutcome;
use crate::report::events::{self, Notice};

/// What the apply repaired: a missing or changed object at a generation
/// already reconciled is drift (counted and logged, and an Event about each
/// object); a recreated object gets an Event.
pub(super) async fn report_repairs<C: Component>(
    cr: &C::Resource,
    ctx: &Context<C>,
    old: &ComponentStatus,
    version: &str,
    outcome: &ApplyOutcome,
) {
    let on = cr.object_ref(&());
    let about = |what: &crate::engine::apply::ObjectKey| {
        outcome
            .live
            .iter()
            .find(|o| crate::engine::apply::ObjectKey::of(o) == *what)
            .map(events::reference)
    };
    if old.observed_generation == cr.meta().generation && old.version.as_deref() == Some(version) {
        let repaired: Vec<_> = outcome.created.iter().chain(&outcome.drifted).collect();
        for what in &repaired {
            ctx.tools
                .metrics
                .drift_repairs_total
                .with_label_values(&[&ctx.tools.name, what.kind()])
                .inc();
            let why = outcome.why.get(*what).map_or("missing", String::as_str);
            tracing::info!(object = %what, why, "repaired drift");
        }
        // One Event per object (the API merges Events of one reason about
        // one object: a single Event would count every repair under the
        // first object's note); a mass repair names the rest in one more.
        for what in repaired.iter().take(events::OBJECTS_TOLD) {
            let why = outcome.why.get(*what).map_or("missing", String::as_str);
            let note = format!("put back {what} ({why})");
            ctx.tools
                .tell(&on, Notice::DriftRepaired, about(what), note)
                .await;
        }
        if repaired.len() > events::OBJECTS_TOLD {
            let rest: Vec<String> = repaired[events::OBJECTS_TOLD..]
                .iter()
                .map(ToString::to_string)
                .collect();
            let note = format!("also put back: {}", events::listing(&rest));
            ctx.tools.tell(&on, Notice::DriftRepaired, None, note).await;
        }
    }
    if !outcome.pruned.is_empty() {
        let pruned: Vec<String> = outcome.pruned.iter().map(ToString::to_string).collect();
        let note = format!(
            "deleted what the desired state no longer has: {}",
            events::listing(&pruned)
        );
        ctx.tools.tell(&on, Notice::Pruned, None, note).await;
    }
    for what in &outcome.recreated {
        // The why names the API server's refusal: what made it necessary.
        let why = outcome.why.get(what).map_or("recreated", String::as_str);
        let note = format!("{what}: {why}");
        ctx.tools
            .tell(&on, Notice::ObjectRecreated, about(what), note)
            .await;
    }
    if !outcome.written.is_empty() {
        ctx.tools
            .metrics
            .apply_writes_total
            .with_label_values(&[&ctx.tools.name])
            .inc_by(outcome.written.len() as u64);
        tracing::info!(
            written = outcome.written.len(),
            pruned = outcome.pruned.len(),
            "applied"
        );
    }
}

/// Events for an apply that went through: an upgrade begun (the applied
/// version differs from the one reported before), and readiness reached
/// (an install, an upgrade or a recovery finished).
pub(super) async fn announce_progress<C: Component>(
    cr: &C::Resource,
    ctx: &Context<C>,
    old: &ComponentStatus,
    new: &ComponentStatus,
) {
    let on = cr.object_ref(&());
    let version = new.version.as_deref().unwrap_or("");
    if let Some(from) = old.version.as_deref()
        && from != version
    {
        let note = format!("moving from {from} to {version}");
        ctx.tools.tell(&on, Notice::Upgrading, None, note).await;
    }
    // An object held as it is: told once, when it makes the CR Degraded.
    if events::became_true(&old.conditions, &new.conditions, conditions::DEGRADED)
        && let Some(degraded) = conditions::get(&new.conditions, conditions::DEGRADED)
        && degraded.reason == Reason::LiveStateRefused.as_str()
    {
        let note = degraded.message.clone();
        ctx.tools
            .tell(&on, Notice::LiveStateRefused, None, note)
            .await;
    }
    if events::became_true(&old.conditions, &new.conditions, conditions::READY) {
        let note = format!(
            "{version} is ready ({} objects)",
            new.managed_objects.unwrap_or(0)
        );
        ctx.tools.tell(&on, Notice::Ready, None, note).await;
    }
}
