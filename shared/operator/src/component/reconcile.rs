//! One reconcile of a component CR: dereference, render, apply, assess,
//! then the status; and the cleanup its finalizer runs.

use super::*;

pub(super) fn current_status<K: ComponentResource>(cr: &K) -> ComponentStatus {
    serde_json::to_value(cr)
        .ok()
        .and_then(|v| v.get("status").cloned())
        .and_then(|s| serde_json::from_value(s).ok())
        .unwrap_or_default()
}

pub(super) fn inventory_of<K: ComponentResource>(cr: &K) -> Inventory {
    Inventory::for_parent(cr, K::COMPONENT, &operator_name::<K>())
}

pub(super) async fn platform_of<C: Component>(
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

pub(super) async fn apply<C: Component>(
    cr: &C::Resource,
    ctx: &Context<C>,
) -> Result<Action, ReconcileError> {
    let generation = cr.meta().generation;
    let ns = cr.namespace().unwrap_or_default();
    let old = current_status(cr);
    let mut status = old.clone();
    status.observed_generation = generation;
    let platform = platform_of(cr, ctx).await?;
    status.platform = Some(platform);
    // Outside the allowed namespaces nothing is read or written: a CR in a
    // tenant's namespace must not get a controller with cluster-wide rights.
    if !ctx.scope.allows(&ns) {
        let refusal = Refusal::new(
            reason::NAMESPACE_NOT_ALLOWED,
            ctx.scope.refusal(std::slice::from_ref(&ns)),
        );
        return refuse(cr, ctx, old, status, refusal).await;
    }

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
    let outside = ctx.scope.outside(&rendered.objects);
    if !outside.is_empty() {
        let refusal = Refusal::new(reason::NAMESPACE_NOT_ALLOWED, ctx.scope.refusal(&outside));
        return refuse(cr, ctx, old, status, refusal).await;
    }

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
            ctx.metrics
                .drift_repairs_total
                .with_label_values(&[&ctx.name, what.kind()])
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

/// The status list of released objects: the earlier entries whose objects
/// still exist and are not managed again, and those this apply released
/// (each announced by an Event).
pub(super) async fn released<C: Component>(
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

pub(super) async fn cleanup_component<C: Component>(
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
