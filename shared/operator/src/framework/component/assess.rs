//! How the component is doing after an apply: each workload's readiness,
//! and for one that is not available, what its pods say.

use kube::api::{Api, ApiResource, DynamicObject};
use kube::core::GroupVersionKind;
use kube::{Client, Resource};
use kubeflow_api::ComponentStatus;
use serde_json::Value;

use super::Component;
use super::context::Context;
use crate::base::conditions::Reason;
use crate::base::kinds::kind;
use crate::engine::apply::ApplyOutcome;
use crate::engine::health;

/// The health of what was applied, into the status: version, objects,
/// workloads and the Ready/Progressing/Degraded verdict. Returns readiness.
pub(super) async fn assess<C: Component>(
    cr: &C::Resource,
    ctx: &Context<C>,
    status: &mut ComponentStatus,
    version: &str,
    outcome: &ApplyOutcome,
) -> bool {
    let mut health = health::assess(&outcome.live);
    add_pod_problems(&ctx.tools.client, &outcome.live, &mut health).await;
    // An object another controller's finalizer holds in deletion is
    // present but going: not Ready until it is released and recreated.
    let held = super::held::held_in_deletion(&outcome.live);
    let ready = health.ready() && held.is_empty();
    status.version = Some(version.to_string());
    status.managed_objects = Some(outcome.live.len() as i64);
    status.workloads = health.workloads.clone();
    let (waiting_reason, message) = if ready {
        (
            Reason::WorkloadsNotReady,
            format!("{} objects applied and ready", outcome.live.len()),
        )
    } else if !held.is_empty() {
        (Reason::DeletionHeld, super::held::message(&held))
    } else {
        (
            Reason::WorkloadsNotReady,
            format!("waiting for {}", health.waiting.join(", ")),
        )
    };
    crate::report::status::applied(ready, Reason::Ready, waiting_reason, &message)
        .apply(&mut status.conditions, cr.meta().generation);
    // Objects kept as they are although they refuse the desired state: the
    // rest works (Ready says how), but a person must act.
    if let Some(message) = crate::engine::apply::held_summary(&outcome.held) {
        crate::base::conditions::set(
            &mut status.conditions,
            crate::base::conditions::DEGRADED,
            true,
            Reason::LiveStateRefused,
            &message,
            cr.meta().generation,
        );
    }
    ready
}

/// For workloads not available whose own conditions say nothing, what their
/// pods say (an image that cannot be pulled, a crash loop). Best effort: a
/// failed read leaves the health as it was.
pub(super) async fn add_pod_problems(
    client: &Client,
    live: &[DynamicObject],
    health: &mut health::Health,
) {
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
