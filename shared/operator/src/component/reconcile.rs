//! One reconcile of a component CR: dereference, render, apply, assess,
//! then the status; and the cleanup its finalizer runs.

use super::*;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;

pub(super) fn current_status<K: ComponentResource>(cr: &K) -> ComponentStatus {
    cr.component_status().cloned().unwrap_or_default()
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

/// One reconcile of a component CR, as its steps: check where it installs,
/// dereference what it points at, render, apply, report what the apply
/// repaired, assess health, write the status. A refusal at any step ends it
/// with a condition a person can act on and nothing written.
pub(super) async fn apply<C: Component>(
    cr: &C::Resource,
    ctx: &Context<C>,
) -> Result<Action, ReconcileError> {
    let old = current_status(cr);
    let mut status = old.clone();
    status.observed_generation = cr.meta().generation;
    // A failure before the apply (platform detection, reading what the CR
    // points at) ends the reconcile with a verdict at this generation too:
    // the old Ready must not stand while nothing is reconciled.
    let platform = match platform_of(cr, ctx).await {
        Ok(p) => p,
        Err(e) => return failed_before_apply(cr, ctx, &old, status, e).await,
    };
    status.platform = Some(platform);
    let mut misfit = None;
    let rendered = match render(cr, ctx, platform).await {
        Ok(Ok(r)) => r,
        // An override the version asked for has no place for, on the way
        // from an installed version: not a refusal of the whole resource
        // but an upgrade that waits, planned without the overrides, while
        // the installed version (with them) keeps running and repaired.
        Ok(Err(refusal))
            if refusal.reason == Reason::OverrideNotApplicable && old.version.is_some() =>
        {
            match render_with(cr, ctx, platform, &ctx.bundles, false).await {
                Ok(Ok(r)) if old.version.as_deref() != Some(r.version.as_str()) => {
                    misfit = Some(refusal.message);
                    r
                }
                Ok(_) => return refuse(cr, ctx, status, refusal).await,
                Err(e) => return failed_before_apply(cr, ctx, &old, status, e).await,
            }
        }
        Ok(Err(refusal)) => return refuse(cr, ctx, status, refusal).await,
        Err(e) => return failed_before_apply(cr, ctx, &old, status, e).await,
    };
    let (rendered, blocked) =
        match upgrade_gate(cr, ctx, platform, &old, &mut status, rendered, misfit).await {
            Ok(Ok(r)) => r,
            Ok(Err(refusal)) => return refuse(cr, ctx, status, refusal).await,
            Err(e) => return failed_before_apply(cr, ctx, &old, status, e).await,
        };
    let version = rendered.version.clone();
    let outcome = match apply_rendered(cr, ctx, rendered.objects, &version).await {
        Applied::Done(o) => o,
        Applied::Refused(refusal) => return refuse(cr, ctx, status, refusal).await,
        Applied::Failed {
            error,
            reason,
            message,
            repeats,
        } => {
            // Rendered and tried: whatever was refused before is resolved.
            ctx.forget_refusal(cr);
            let failure = Failure {
                reason,
                message: &message,
                repeats,
            };
            return report_failure(cr, ctx, &old, status, failure, error.into()).await;
        }
    };
    ctx.forget_failures(cr);
    ctx.forget_refusal(cr);
    // Applied at this version: an older one's parsed bundle is not needed.
    ctx.bundles.keep_only(C::Resource::COMPONENT, &version);
    report_repairs(cr, ctx, &old, &version, &outcome).await;
    status.released = released(cr, ctx, &old.released, &outcome).await?;
    status.foreign_fields = foreign_fields(ctx, &outcome);
    ctx.owners.record(
        &cr.namespace().unwrap_or_default(),
        &cr.name_any(),
        outcome.live.iter().map(crate::apply::ObjectKey::of),
    );
    let ready = assess(cr, ctx, &mut status, &version, &outcome).await;
    if let Some(message) = &blocked {
        conditions::set(
            &mut status.conditions,
            conditions::DEGRADED,
            true,
            Reason::UpgradeBlocked,
            message,
            cr.meta().generation,
        );
    } else if let Some(plan) = status.upgrade_plan.as_ref().filter(|p| p.awaiting_approval) {
        let message = awaiting_message(cr.common().approved_plan.as_deref(), plan);
        conditions::set(
            &mut status.conditions,
            conditions::PROGRESSING,
            true,
            Reason::AwaitingApproval,
            &message,
            cr.meta().generation,
        );
    }
    announce_progress(cr, ctx, &old, &status).await;
    let extra = ctx
        .component
        .extra_status(cr, &outcome.live, &ctx.client)
        .await;
    write_status(cr, ctx, &status, extra).await?;
    record_gauges(cr, ctx, &status, ready);
    // Watches on the managed objects bring the next reconcile; the requeue
    // is a safety net, sooner while an object is held (what a person does
    // to resolve it may be nothing the watches see).
    Ok(Action::requeue(
        if ready && outcome.held.is_empty() && blocked.is_none() {
            Duration::from_secs(600)
        } else {
            Duration::from_secs(30)
        },
    ))
}

/// What other field managers own of the objects just applied (the watches'
/// view), for `status.foreignFields`: sorted, bounded.
fn foreign_fields<C: Component>(
    ctx: &Context<C>,
    outcome: &ApplyOutcome,
) -> Vec<kubeflow_api::ForeignFields> {
    let mut out = Vec::new();
    for o in &outcome.live {
        let key = crate::apply::ObjectKey::of(o);
        let entries = ctx.engine.foreign_fields(&key);
        if !entries.is_empty() {
            out.extend(crate::foreign_fields::report(&key.to_string(), &entries));
        }
    }
    out.sort_by(|a, b| (&a.object, &a.manager).cmp(&(&b.object, &b.manager)));
    out.truncate(crate::foreign_fields::ENTRIES_MAX);
    out
}

/// What an upgrade gate lets through: the objects to apply, and why the
/// upgrade is blocked when it is (the installed version is applied then).
type Gated = (Rendered, Option<String>);

/// A change of version, before anything of it is written: its plan (what
/// the installed version's objects become) goes into the status. The
/// installed version is what gets applied (and repaired) instead while
/// `upgradeStrategy: Manual` waits for `approvedPlan` to be the plan's
/// digest, or while the new version drops a CRD version that still stores
/// objects (blocked: they would be unreadable).
async fn upgrade_gate<C: Component>(
    cr: &C::Resource,
    ctx: &Context<C>,
    platform: Platform,
    old: &ComponentStatus,
    status: &mut ComponentStatus,
    rendered: Rendered,
    misfit: Option<String>,
) -> Result<Result<Gated, Refusal>, ReconcileError> {
    let Some(from) = old.version.as_deref().filter(|v| *v != rendered.version) else {
        return Ok(Ok((rendered, None)));
    };
    let installed_cr = match at_version(cr, from) {
        Ok(c) => c,
        Err(refusal) => return Ok(Err(refusal)),
    };
    let manual = cr.common().upgrade_strategy == Some(kubeflow_api::UpgradeStrategy::Manual);
    // The installed version's bundle in a cache of its own, dropped with
    // it: the operator's cache would otherwise hold both versions' parsed
    // bundles for the rest of its life after every upgrade.
    let once = BundleCache::default();
    let installed = match render_with(&installed_cr, ctx, platform, &once, true).await? {
        Ok(r) => r,
        // The installed version's bundle is gone (an operator that no longer
        // carries it): no plan can be made. Automatic goes on as before;
        // Manual cannot show what it would approve.
        Err(refusal) if manual => {
            return Ok(Err(Refusal::new(
                Reason::InvalidSpec,
                format!(
                    "upgradeStrategy Manual: no plan from {from} to {}: the installed version cannot be rendered ({})",
                    rendered.version, refusal.message
                ),
            )));
        }
        // Rendered without the overrides (one does not fit it): never
        // applied as such.
        Err(refusal) if misfit.is_some() => return Ok(Err(refusal)),
        Err(_) => return Ok(Ok((rendered, None))),
    };
    let mut plan = crate::upgrade_plan::Plan::compute(&installed.objects, &rendered.objects);
    plan.overrides_not_applicable.extend(misfit.clone());
    let mut published = crate::upgrade_plan::published(from, &rendered.version, &plan, false);
    published.awaiting_approval =
        manual && cr.common().approved_plan.as_deref() != Some(published.digest.as_str());
    let awaiting = published.awaiting_approval;
    let to = published.to.clone();
    status.upgrade_plan = Some(published);
    if let Some(problem) = misfit {
        let message = format!(
            "the upgrade from {from} to {to} waits: {problem}; fix or remove that override \
             (it is never dropped silently), then the upgrade goes on"
        );
        return Ok(Ok((installed, Some(message))));
    }
    let stored = still_stored(ctx, &plan.crd_versions_removed).await?;
    if !stored.is_empty() {
        let message = format!(
            "the upgrade from {from} to {to} removes CRD versions that still store objects: {}; \
             migrate those objects to a version the new CRD keeps and remove the old one from \
             the CRD's status.storedVersions, then the upgrade goes on",
            stored.join(", ")
        );
        return Ok(Ok((installed, Some(message))));
    }
    Ok(Ok((if awaiting { installed } else { rendered }, None)))
}

/// Of the CRD versions an upgrade removes ("<crd> <version>"), those the
/// live CRD still lists in `status.storedVersions`.
async fn still_stored<C: Component>(
    ctx: &Context<C>,
    removed: &[String],
) -> Result<Vec<String>, ReconcileError> {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    let crds: Api<CustomResourceDefinition> = Api::all(ctx.client.clone());
    let mut stored = Vec::new();
    for entry in removed {
        let Some((name, version)) = entry.split_once(' ') else {
            continue;
        };
        let live = crds
            .get_opt(name)
            .await
            .map_err(|e| ReconcileError::Api("read a CRD the upgrade changes", e))?;
        if live
            .and_then(|c| c.status)
            .and_then(|s| s.stored_versions)
            .is_some_and(|v| v.iter().any(|s| s == version))
        {
            stored.push(entry.clone());
        }
    }
    Ok(stored)
}

/// The CR as it would be at another version (every other field the same).
fn at_version<K: ComponentResource>(cr: &K, version: &str) -> Result<K, Refusal> {
    let mut value =
        serde_json::to_value(cr).map_err(|e| Refusal::new(Reason::InvalidSpec, e.to_string()))?;
    if let Some(spec) = value.get_mut("spec").and_then(Value::as_object_mut) {
        spec.insert("version".into(), Value::String(version.to_string()));
    }
    serde_json::from_value(value).map_err(|e| Refusal::new(Reason::InvalidSpec, e.to_string()))
}

/// What the Progressing condition says while a plan waits for approval.
fn awaiting_message(approved: Option<&str>, plan: &kubeflow_api::UpgradePlanStatus) -> String {
    let wrong = match approved {
        Some(a) => format!(
            "spec.approvedPlan {:?} is not this plan's digest (the plan changed, or the value is wrong); ",
            crate::conditions::truncate(a, 128)
        ),
        None => String::new(),
    };
    format!(
        "{wrong}the upgrade from {} to {} waits for approval: set spec.approvedPlan to {} (the plan: status.upgradePlan; {})",
        plan.from, plan.to, plan.digest, plan.summary
    )
}

/// Ends a reconcile that failed before the apply: Ready false at this
/// generation with the error, Degraded once the same error repeats; the
/// error goes back to the controller for its backoff.
async fn failed_before_apply<C: Component>(
    cr: &C::Resource,
    ctx: &Context<C>,
    old: &ComponentStatus,
    status: ComponentStatus,
    error: ReconcileError,
) -> Result<Action, ReconcileError> {
    let message = error.to_string();
    let repeats = ctx.repeats(cr, &message);
    let failure = Failure {
        reason: Reason::ApiError,
        message: &message,
        repeats,
    };
    report_failure(cr, ctx, old, status, failure, error).await
}

/// A passing failure as the status tells it.
struct Failure<'a> {
    reason: conditions::Reason,
    message: &'a str,
    repeats: u32,
}

/// Writes a failed reconcile's verdict (Ready false at this generation,
/// Degraded once it repeats), its Event when news, and the gauges; hands the
/// error back to the controller for its backoff.
async fn report_failure<C: Component>(
    cr: &C::Resource,
    ctx: &Context<C>,
    old: &ComponentStatus,
    mut status: ComponentStatus,
    failure: Failure<'_>,
    error: ReconcileError,
) -> Result<Action, ReconcileError> {
    crate::status::failed(failure.reason, failure.message, failure.repeats)
        .apply(&mut status.conditions, cr.meta().generation);
    announce_failure(cr, ctx, &old.conditions, &status.conditions, failure.reason).await;
    write_status(cr, ctx, &status, serde_json::Map::new()).await?;
    record_gauges(cr, ctx, &status, false);
    Err(error)
}

/// Where the CR installs, what it points at, and its objects: the
/// rendered objects, or why they cannot be (outer error: a passing failure).
async fn render<C: Component>(
    cr: &C::Resource,
    ctx: &Context<C>,
    platform: Platform,
) -> Result<Result<Rendered, Refusal>, ReconcileError> {
    render_with(cr, ctx, platform, &ctx.bundles, true).await
}

/// [`render`] with another bundle cache, and with or without the overrides
/// (without: to plan an upgrade an override does not fit).
async fn render_with<C: Component>(
    cr: &C::Resource,
    ctx: &Context<C>,
    platform: Platform,
    bundles: &BundleCache,
    with_overrides: bool,
) -> Result<Result<Rendered, Refusal>, ReconcileError> {
    let ns = cr.namespace().unwrap_or_default();
    // Outside the allowed namespaces nothing is read or written: a CR in a
    // tenant's namespace must not get a controller with cluster-wide rights.
    if !ctx.scope.allows(&ns) {
        return Ok(Err(Refusal::new(
            Reason::NamespaceNotAllowed,
            ctx.scope.refusal(std::slice::from_ref(&ns)),
        )));
    }
    let inputs = match ctx.component.dereference(cr, &ctx.client).await {
        Ok(i) => i,
        Err(DereferenceError::Refused(refusal)) => return Ok(Err(refusal)),
        Err(DereferenceError::Api(verb, e)) => return Err(ReconcileError::Api(verb, e)),
    };
    let render_ctx = RenderContext {
        manifests_dir: &ctx.manifests_dir,
        bundles,
        namespace: &ns,
        platform,
    };
    let mut rendered = match ctx.component.render(cr, &render_ctx, &inputs) {
        Ok(r) => r,
        Err(refusal) => return Ok(Err(refusal)),
    };
    // The user's patches, after the component's own settings and before the
    // digests are pinned (an image an override sets is pinned too): the
    // resource's own, then its ConfigMap's.
    if with_overrides {
        if let Err(refusal) = crate::overrides::apply(
            &mut rendered.objects,
            &cr.common().overrides,
            "spec.overrides",
            &rendered.version,
        ) {
            return Ok(Err(refusal));
        }
        if let Some(name) = &cr.common().overrides_config_map {
            let listed = match overrides_from_config_map(ctx, &ns, name).await? {
                Ok(l) => l,
                Err(refusal) => return Ok(Err(refusal)),
            };
            if let Err(refusal) = crate::overrides::apply(
                &mut rendered.objects,
                &listed,
                &format!("spec.overridesConfigMap {ns}/{name}: overrides"),
                &rendered.version,
            ) {
                return Ok(Err(refusal));
            }
        }
    }
    if let Some(name) = &cr.common().image_digests
        && let Err(refusal) = pin_digests(ctx, &ns, name, &mut rendered.objects).await?
    {
        return Ok(Err(refusal));
    }
    let outside = ctx.scope.outside(&rendered.objects);
    if !outside.is_empty() {
        return Ok(Err(Refusal::new(
            Reason::NamespaceNotAllowed,
            ctx.scope.refusal(&outside),
        )));
    }
    Ok(Ok(rendered))
}

/// The ConfigMap `name` a spec `field` names, in the CR's namespace:
/// refused when the name is not one or the map does not exist.
async fn config_map<C: Component>(
    ctx: &Context<C>,
    namespace: &str,
    name: &str,
    field: &str,
) -> Result<Result<k8s_openapi::api::core::v1::ConfigMap, Refusal>, ReconcileError> {
    if !crate::validate::is_dns_subdomain(name) {
        return Ok(Err(Refusal::new(
            Reason::InvalidSpec,
            format!(
                "{field}: {:?} is not a ConfigMap name (lowercase letters, digits, '-' and '.', at most 253)",
                crate::conditions::bounded(name)
            ),
        )));
    }
    let cms: Api<k8s_openapi::api::core::v1::ConfigMap> =
        Api::namespaced(ctx.client.clone(), namespace);
    match cms
        .get_opt(name)
        .await
        .map_err(|e| ReconcileError::Api("read a ConfigMap the spec names", e))?
    {
        Some(cm) => Ok(Ok(cm)),
        None => Ok(Err(Refusal::new(
            Reason::PrerequisiteMissing,
            format!("{field}: ConfigMap {namespace}/{name} does not exist"),
        ))),
    }
}

/// The overrides ConfigMap `name` holds (key `overrides`): refused when the
/// map is missing or the key is absent or malformed.
async fn overrides_from_config_map<C: Component>(
    ctx: &Context<C>,
    namespace: &str,
    name: &str,
) -> Result<Result<Vec<kubeflow_api::Override>, Refusal>, ReconcileError> {
    let field = "spec.overridesConfigMap";
    let cm = match config_map(ctx, namespace, name, field).await? {
        Ok(cm) => cm,
        Err(refusal) => return Ok(Err(refusal)),
    };
    let Some(text) = cm.data.as_ref().and_then(|d| d.get("overrides")) else {
        return Ok(Err(Refusal::new(
            Reason::InvalidSpec,
            format!("{field}: ConfigMap {namespace}/{name} has no key overrides"),
        )));
    };
    Ok(crate::overrides::parse(text).map_err(|e| {
        Refusal::new(
            Reason::InvalidSpec,
            format!("{field}: ConfigMap {namespace}/{name} key overrides: {e}"),
        )
    }))
}

/// Pins the rendered images by the digests of ConfigMap `name` (key
/// `digests`): refused, with nothing changed, when the map is missing,
/// malformed or lacks an image.
async fn pin_digests<C: Component>(
    ctx: &Context<C>,
    namespace: &str,
    name: &str,
    objects: &mut [DynamicObject],
) -> Result<Result<(), Refusal>, ReconcileError> {
    let field = "spec.imageDigests";
    let cm = match config_map(ctx, namespace, name, field).await? {
        Ok(cm) => cm,
        Err(refusal) => return Ok(Err(refusal)),
    };
    let text = cm
        .data
        .as_ref()
        .and_then(|d| d.get("digests"))
        .cloned()
        .unwrap_or_default();
    let digests = match crate::images::parse_digests(&text) {
        Ok(d) => d,
        Err(e) => {
            return Ok(Err(Refusal::new(
                Reason::InvalidSpec,
                format!("{field}: ConfigMap {namespace}/{name} key digests, {e}"),
            )));
        }
    };
    Ok(crate::images::pin(objects, &digests).map_err(|missing| {
        Refusal::new(
            Reason::ImageDigestMissing,
            format!(
                "{field}: ConfigMap {namespace}/{name} has no digest for {}",
                missing.join(", ")
            ),
        )
    }))
}

/// What the apply step came to.
enum Applied {
    Done(ApplyOutcome),
    /// The input's fault: a person must act.
    Refused(Refusal),
    /// A passing failure, with what to show while it is retried: the
    /// reason, the message, and how often in a row it came.
    Failed {
        error: ApplyError,
        reason: conditions::Reason,
        message: String,
        repeats: u32,
    },
}

async fn apply_rendered<C: Component>(
    cr: &C::Resource,
    ctx: &Context<C>,
    objects: Vec<DynamicObject>,
    version: &str,
) -> Applied {
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
        objects,
        version,
        retain: &retain,
        delete_crds: cr.common().crd_policy == Some(CrdPolicy::Delete),
    };
    match ctx.engine.apply(request).await {
        Ok(o) => Applied::Done(o),
        Err(e) if e.is_refusal() => {
            let r = if matches!(e, ApplyError::Conflict { .. }) {
                Reason::OwnershipConflict
            } else {
                Reason::InvalidSpec
            };
            Applied::Refused(Refusal::new(r, e.to_string()))
        }
        Err(e) => {
            // Never green while the apply fails: Ready false at this
            // generation with the API's message; Degraded once the same
            // failure repeats (a missing permission at once: a person must
            // grant it). The retries go on, so a fix takes effect by itself.
            let (r, message, repeats) = if e.is_permission_denied() {
                let message = format!("the operator's RBAC does not allow this: {e}");
                (
                    Reason::PermissionDenied,
                    message,
                    crate::status::REPEATS_BEFORE_DEGRADED,
                )
            } else {
                let message = e.to_string();
                let repeats = ctx.repeats(cr, &message);
                (Reason::ApiError, message, repeats)
            };
            Applied::Failed {
                error: e,
                reason: r,
                message,
                repeats,
            }
        }
    }
}

/// What the apply repaired: a missing or changed object at a generation
/// already reconciled is drift (counted and logged); a recreated object gets
/// an Event.
async fn report_repairs<C: Component>(
    cr: &C::Resource,
    ctx: &Context<C>,
    old: &ComponentStatus,
    version: &str,
    outcome: &ApplyOutcome,
) {
    let on = cr.object_ref(&());
    if old.observed_generation == cr.meta().generation && old.version.as_deref() == Some(version) {
        let mut repaired = Vec::new();
        for what in outcome.created.iter().chain(&outcome.drifted) {
            ctx.metrics
                .drift_repairs_total
                .with_label_values(&[&ctx.name, what.kind()])
                .inc();
            let why = outcome.why.get(what).map_or("missing", String::as_str);
            tracing::info!(object = %what, why, "repaired drift");
            repaired.push(format!("{what} ({why})"));
        }
        if !repaired.is_empty() {
            let note = format!("put back: {}", events::listing(&repaired));
            events::publish(&ctx.recorder, &on, false, "DriftRepaired", "Apply", note).await;
        }
    }
    if !outcome.pruned.is_empty() {
        let pruned: Vec<String> = outcome.pruned.iter().map(ToString::to_string).collect();
        let note = format!(
            "deleted what the desired state no longer has: {}",
            events::listing(&pruned)
        );
        events::publish(&ctx.recorder, &on, false, "Pruned", "Prune", note).await;
    }
    for what in &outcome.recreated {
        // The why names the API server's refusal: what made it necessary.
        let why = outcome.why.get(what).map_or("recreated", String::as_str);
        let note = format!("{what}: {why}");
        events::publish(&ctx.recorder, &on, true, "ObjectRecreated", "Apply", note).await;
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
}

/// Events for a failed apply, when the verdict is news: a missing
/// permission at once (a person must grant it), a passing API failure once
/// it has repeated enough to mark the CR Degraded.
async fn announce_failure<C: Component>(
    cr: &C::Resource,
    ctx: &Context<C>,
    before: &[Condition],
    after: &[Condition],
    reason: conditions::Reason,
) {
    let permission = reason == Reason::PermissionDenied
        && events::condition_changed(before, after, conditions::READY);
    if permission || events::became_true(before, after, conditions::DEGRADED) {
        let note = conditions::get(after, conditions::READY)
            .map(|c| c.message.clone())
            .unwrap_or_default();
        let on = cr.object_ref(&());
        events::publish(&ctx.recorder, &on, true, reason.as_str(), "Apply", note).await;
    }
}

/// Events for an apply that went through: an upgrade begun (the applied
/// version differs from the one reported before), and readiness reached
/// (an install, an upgrade or a recovery finished).
async fn announce_progress<C: Component>(
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
        events::publish(&ctx.recorder, &on, false, "Upgrading", "Upgrade", note).await;
    }
    // An object held as it is: told once, when it makes the CR Degraded.
    if events::became_true(&old.conditions, &new.conditions, conditions::DEGRADED)
        && let Some(degraded) = conditions::get(&new.conditions, conditions::DEGRADED)
        && degraded.reason == Reason::LiveStateRefused.as_str()
    {
        let note = degraded.message.clone();
        events::publish(&ctx.recorder, &on, true, "LiveStateRefused", "Apply", note).await;
    }
    if events::became_true(&old.conditions, &new.conditions, conditions::READY) {
        let note = format!(
            "{version} is ready ({} objects)",
            new.managed_objects.unwrap_or(0)
        );
        events::publish(&ctx.recorder, &on, false, "Ready", "Reconcile", note).await;
    }
}
