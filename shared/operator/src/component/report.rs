//! What a reconcile reports: the status (written only when it changed) and
//! the component's gauges.

use super::*;

pub(super) fn record_gauges<C: Component>(
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

pub(super) async fn refuse<C: Component>(
    cr: &C::Resource,
    ctx: &Context<C>,
    mut status: ComponentStatus,
    refusal: Refusal,
) -> Result<Action, ReconcileError> {
    let generation = cr.meta().generation;
    tracing::warn!(reason = %refusal.reason, message = %refusal.message, "refused");
    ctx.metrics
        .reconcile_errors_total
        .with_label_values(&[&ctx.name, refusal.reason.as_str()])
        .inc();
    let before = status.conditions.clone();
    crate::status::refused(refusal.reason, &refusal.message)
        .apply(&mut status.conditions, generation);
    // Told once per new refusal; the retries of the same one stay quiet.
    // Not in a namespace the operator may not write to (its Roles stop at
    // the allowed namespaces): there the status alone says it.
    let writable = ctx.scope.allows(&cr.namespace().unwrap_or_default());
    if writable
        && crate::events::condition_changed(&before, &status.conditions, "Ready")
        && ctx.refusal_is_news(cr, &format!("{}: {}", refusal.reason, refusal.message))
    {
        crate::events::publish(
            &ctx.recorder,
            &cr.object_ref(&()),
            true,
            refusal.reason.as_str(),
            "Reconcile",
            refusal.message.clone(),
        )
        .await;
    }
    ctx.forget_failures(cr);
    write_status(cr, ctx, &status, serde_json::Map::new()).await?;
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

pub(super) async fn write_status<C: Component>(
    cr: &C::Resource,
    ctx: &Context<C>,
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
    let api: Api<C::Resource> =
        Api::namespaced(ctx.client.clone(), &cr.namespace().unwrap_or_default());
    crate::status::write_if_changed(&api, cr, &old_json, new_json)
        .await
        .map_err(|e| ReconcileError::Api("write status", e))?;
    Ok(())
}
