//! One reconcile of a component CR: dereference, render, apply, assess,
//! then the status; and the cleanup its finalizer runs.

use std::collections::BTreeMap;
use std::time::Duration;

use kube::api::{Api, ApiResource, DynamicObject};
use kube::{Resource, ResourceExt};
use kubeflow_api::{ComponentResource, ComponentStatus, CrdPolicy, Platform};
use serde_json::Value;

use super::assess::assess;
use super::controller::Context;
use super::removal::released;
use super::{Component, Refusal, RenderContext, Rendered, operator_name};
use crate::apply::{ApplyOutcome, ApplyRequest};
use crate::bundle::BundleCache;
use crate::conditions::{self, Reason};
use crate::controller::{Failure, StatusOf};
use crate::events::{self, Notice};
use crate::inventory::Inventory;

pub(super) fn current_status<K: ComponentResource>(cr: &K) -> ComponentStatus {
    cr.component_status().cloned().unwrap_or_default()
}

pub(super) fn inventory_of<K: ComponentResource>(cr: &K) -> Inventory {
    Inventory::for_parent(cr, K::COMPONENT, &operator_name::<K>())
}

pub(super) async fn platform_of<C: Component>(
    cr: &C::Resource,
    ctx: &Context<C>,
) -> Result<Platform, Failure> {
    match cr.common().platform {
        Some(p @ (Platform::Kubernetes | Platform::OpenShift)) => Ok(p),
        _ => {
            if let Some(p) = ctx.detected_platform.lock().ok().and_then(|g| *g) {
                return Ok(p);
            }
            let p = crate::platform::detect(&ctx.tools.client)
                .await
                .map_err(|e| Failure::api("detect the platform", e))?;
            if let Ok(mut g) = ctx.detected_platform.lock() {
                *g = Some(p);
            }
            Ok(p)
        }
    }
}

/// One reconcile of a component CR, as its steps: check where it installs,
/// dereference what it points at, render, apply, report what the apply
/// repaired, assess health, fill in the status. A refusal at any step ends
/// it with a condition a person can act on and nothing written; any other
/// failure, before or during the apply, with Ready false at this generation
/// (the skeleton writes both).
/// The requeue while the component awaits another controller's object:
/// soon, but each pass reads every object of the component, and the wait
/// may be long (that controller not running).
const RECHECK_SOON: Duration = Duration::from_secs(10);

pub(super) async fn apply<C: Component>(
    cr: &C::Resource,
    ctx: &Context<C>,
    full: &mut StatusOf<Context<C>>,
) -> Result<Duration, Failure> {
    let old = current_status(cr);
    let platform = platform_of(cr, ctx).await?;
    full.as_mut().platform = Some(platform);
    let mut misfit = None;
    // Referenced ConfigMaps gone since they were last read: applied as they
    // were, and said in Degraded.
    let mut missing = Vec::new();
    let rendered = match render(cr, ctx, platform, &mut missing).await {
        Ok(r) => r,
        // An override the version asked for has no place for, on the way
        // from an installed version: not a refusal of the whole resource
        // but an upgrade that waits, planned without the overrides, while
        // the installed version (with them) keeps running and repaired.
        Err(Failure::Refused(refusal))
            if refusal.reason == Reason::OverrideNotApplicable && old.version.is_some() =>
        {
            let r = render_with(cr, ctx, platform, &ctx.bundles, false, &mut missing).await?;
            if old.version.as_deref() == Some(r.version.as_str()) {
                return Err(refusal.into());
            }
            misfit = Some(refusal.message);
            r
        }
        Err(e) => return Err(e),
    };
    let (rendered, blocked) =
        upgrade_gate(cr, ctx, platform, &old, full.as_mut(), rendered, misfit).await?;
    let version = rendered.version.clone();
    // A refusal is of one object (outside the allowed namespaces, and no
    // tenant access): the rest is applied and repaired all the same.
    let (objects, refused) = ctx.scope.split(rendered.objects);
    admitted_by_pod_security(ctx, &objects).await?;
    let outcome = apply_rendered(cr, ctx, objects, &version, &refused).await?;
    // Applied at this version: an older one's parsed bundle is not needed.
    ctx.bundles.keep_only(C::Resource::COMPONENT, &version);
    report_repairs(cr, ctx, &old, &version, &outcome).await;
    let status = full.as_mut();
    status.released = released(cr, ctx, &old.released, &outcome).await?;
    status.foreign_fields = foreign_fields(ctx, &outcome);
    ctx.owners.record(
        &cr.namespace().unwrap_or_default(),
        &cr.name_any(),
        outcome.live.iter().map(crate::apply::ObjectKey::of),
    );
    let ready = assess(cr, ctx, status, &version, &outcome).await;
    if !missing.is_empty() {
        conditions::set(
            &mut status.conditions,
            conditions::DEGRADED,
            true,
            Reason::PrerequisiteMissing,
            &missing.join("; "),
            cr.meta().generation,
        );
    }
    if !refused.is_empty() {
        conditions::set(
            &mut status.conditions,
            conditions::DEGRADED,
            true,
            Reason::NamespaceNotAllowed,
            &ctx.scope.refusal_of(&refused),
            cr.meta().generation,
        );
    }
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
    ctx.component
        .report(cr, &outcome.live, &ctx.tools.client, full)
        .await;
    // Watches on the managed objects bring the next reconcile; the requeue
    // is a safety net, sooner while an object is held (what a person does
    // to resolve it may be nothing the watches see).
    Ok(if ctx.component.recheck_soon(full) {
        RECHECK_SOON
    } else if ready && outcome.held.is_empty() && blocked.is_none() {
        Duration::from_secs(600)
    } else {
        Duration::from_secs(30)
    })
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
) -> Result<Gated, Failure> {
    let Some(from) = old.version.as_deref().filter(|v| *v != rendered.version) else {
        return Ok((rendered, None));
    };
    let installed_cr = at_version(cr, from)?;
    let manual = cr.common().upgrade_strategy == Some(kubeflow_api::UpgradeStrategy::Manual);
    // The installed version's bundle in a cache of its own, dropped with
    // it: the operator's cache would otherwise hold both versions' parsed
    // bundles for the rest of its life after every upgrade.
    let once = BundleCache::default();
    let installed = match render_with(&installed_cr, ctx, platform, &once, true, &mut Vec::new())
        .await
    {
        Ok(r) => r,
        // The installed version's bundle is gone (an operator that no longer
        // carries it): no plan can be made. Automatic goes on as before;
        // Manual cannot show what it would approve.
        Err(Failure::Refused(refusal)) if manual => {
            return Err(Refusal::new(
                Reason::InvalidSpec,
                format!(
                    "upgradeStrategy Manual: no plan from {from} to {}: the installed version cannot be rendered ({})",
                    rendered.version, refusal.message
                ),
            )
            .into());
        }
        // Rendered without the overrides (one does not fit it): never
        // applied as such.
        Err(Failure::Refused(refusal)) if misfit.is_some() => return Err(refusal.into()),
        Err(Failure::Refused(_)) => return Ok((rendered, None)),
        Err(e) => return Err(e),
    };
    let mut plan = crate::upgrade_plan::Plan::compute(&installed.objects, &rendered.objects);
    plan.overrides_not_applicable.extend(misfit.clone());
    plan.actions = ctx
        .component
        .upgrade_actions(Some(cr), from, &rendered.version);
    let mut published = crate::upgrade_plan::published(from, &rendered.version, &plan, false);
    published.awaiting_approval =
        manual && cr.common().approved_plan.as_deref() != Some(published.digest.as_str());
    // An approved upgrade that has begun keeps going: its first pass
    // writes objects (a generated key kept, a Secret's demo value dropped)
    // that the next render of either version reads, so the recomputed
    // digest moves away from the approved one; gating on it again would
    // put the installed version back over a half-applied new one.
    if published.awaiting_approval
        && let Some(begun) = old.upgrade_plan.as_ref().filter(|p| {
            !p.awaiting_approval
                && p.from == from
                && p.to == rendered.version
                && cr.common().approved_plan.as_deref() == Some(p.digest.as_str())
        })
    {
        published = begun.clone();
    }
    let awaiting = published.awaiting_approval;
    let to = published.to.clone();
    status.upgrade_plan = Some(published);
    if let Some(problem) = misfit {
        let message = format!(
            "the upgrade from {from} to {to} waits: {problem}; fix or remove that override \
             (it is never dropped silently), then the upgrade goes on"
        );
        return Ok((installed, Some(message)));
    }
    let stored = still_stored(ctx, &plan.crd_versions_removed).await?;
    if !stored.is_empty() {
        let message = format!(
            "the upgrade from {from} to {to} removes CRD versions that still store objects: {}; \
             migrate those objects to a version the new CRD keeps and remove the old one from \
             the CRD's status.storedVersions, then the upgrade goes on",
            stored.join(", ")
        );
        return Ok((installed, Some(message)));
    }
    Ok((if awaiting { installed } else { rendered }, None))
}

/// Of the CRD versions an upgrade removes ("<crd> <version>"), those the
/// live CRD still lists in `status.storedVersions`.
async fn still_stored<C: Component>(
    ctx: &Context<C>,
    removed: &[String],
) -> Result<Vec<String>, Failure> {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    let crds: Api<CustomResourceDefinition> = Api::all(ctx.tools.client.clone());
    let mut stored = Vec::new();
    for entry in removed {
        let Some((name, version)) = entry.split_once(' ') else {
            continue;
        };
        let live = crds
            .get_opt(name)
            .await
            .map_err(|e| Failure::api("read a CRD the upgrade changes", e))?;
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

/// Where the CR installs, what it points at, and its objects: the
/// rendered objects, or why they cannot be.
async fn render<C: Component>(
    cr: &C::Resource,
    ctx: &Context<C>,
    platform: Platform,
    missing: &mut Vec<String>,
) -> Result<Rendered, Failure> {
    render_with(cr, ctx, platform, &ctx.bundles, true, missing).await
}

/// [`render`] with another bundle cache, and with or without the overrides
/// (without: to plan an upgrade an override does not fit).
async fn render_with<C: Component>(
    cr: &C::Resource,
    ctx: &Context<C>,
    platform: Platform,
    bundles: &BundleCache,
    with_overrides: bool,
    missing: &mut Vec<String>,
) -> Result<Rendered, Failure> {
    let ns = cr.namespace().unwrap_or_default();
    // Outside the allowed namespaces nothing is read or written: a CR in a
    // tenant's namespace must not get a controller with cluster-wide rights.
    if !ctx.scope.allows(&ns) {
        return Err(Refusal::new(
            Reason::NamespaceNotAllowed,
            ctx.scope.refusal(std::slice::from_ref(&ns)),
        )
        .into());
    }
    let inputs = ctx.component.dereference(cr, &ctx.tools.client).await?;
    let render_ctx = RenderContext::of(cr, &ctx.manifests_dir, bundles, platform);
    let mut rendered = ctx.component.render(cr, &render_ctx, &inputs)?;
    // The user's patches, after the component's own settings and before the
    // digests are pinned (an image an override sets is pinned too): the
    // resource's own, then its ConfigMap's.
    // The ConfigMap's overrides and the field that names them, kept for
    // the known-secret check, which names the override that put one back.
    let mut from_config_map: Option<(String, Vec<kubeflow_api::Override>)> = None;
    if with_overrides {
        crate::overrides::apply(
            &mut rendered.objects,
            &cr.common().overrides,
            "spec.overrides",
            &rendered.version,
        )?;
        if let Some(name) = &cr.common().overrides_config_map {
            let key = (
                ns.as_str(),
                cr.meta().name.as_deref().unwrap_or_default(),
                name.as_str(),
            );
            let listed = or_last_read(
                overrides_from_config_map(ctx, &ns, name).await,
                |l| ctx.last_read.keep_overrides(key, l),
                || ctx.last_read.overrides(key),
                "overrides",
                missing,
            )?;
            let field = format!("spec.overridesConfigMap {ns}/{name}: overrides");
            crate::overrides::apply(&mut rendered.objects, &listed, &field, &rendered.version)?;
            from_config_map = Some((field, listed));
        }
    }
    // Over the final objects, after every override: an override may put
    // back a secret the component's own settings replaced (a demo user,
    // the demo cookie secret, a demo database password).
    let mut lists: Vec<(&str, &[kubeflow_api::Override])> = Vec::new();
    if with_overrides {
        lists.push(("spec.overrides", cr.common().overrides.as_slice()));
    }
    if let Some((field, listed)) = &from_config_map {
        lists.push((field.as_str(), listed.as_slice()));
    }
    crate::known_secrets::refuse(&rendered.objects, &lists)?;
    if let Some(name) = &cr.common().image_digests {
        let key = (
            ns.as_str(),
            cr.meta().name.as_deref().unwrap_or_default(),
            name.as_str(),
        );
        let digests = or_last_read(
            read_digests(ctx, &ns, name).await,
            |d| ctx.last_read.keep_digests(key, d),
            || ctx.last_read.digests(key),
            "digests",
            missing,
        )?;
        pin_digests(&ns, name, &digests, &mut rendered.objects)?;
    }
    Ok(rendered)
}

/// The ConfigMap `name` a spec `field` names, in the CR's namespace:
/// refused when the name is not one or the map does not exist.
async fn config_map<C: Component>(
    ctx: &Context<C>,
    namespace: &str,
    name: &str,
    field: &str,
) -> Result<k8s_openapi::api::core::v1::ConfigMap, Failure> {
    if !crate::validate::is_dns_subdomain(name) {
        return Err(Refusal::new(
            Reason::InvalidSpec,
            format!(
                "{field}: {:?} is not a ConfigMap name (lowercase letters, digits, '-' and '.', at most 253)",
                crate::conditions::truncate(name, 256)
            ),
        )
        .into());
    }
    let cms: Api<k8s_openapi::api::core::v1::ConfigMap> =
        Api::namespaced(ctx.tools.client.clone(), namespace);
    match cms
        .get_opt(name)
        .await
        .map_err(|e| Failure::api("read a ConfigMap the spec names", e))?
    {
        Some(cm) => Ok(cm),
        None => Err(Refusal::new(
            Reason::PrerequisiteMissing,
            format!("{field}: ConfigMap {namespace}/{name} does not exist"),
        )
        .into()),
    }
}

/// What a referenced ConfigMap holds, as `read` it now (kept by `keep`);
/// or, when the map has gone missing since, what it last held (`last`),
/// the gap noted in `missing` for `Degraded`. Missing and never read:
/// refused as `read` refused it.
fn or_last_read<T>(
    read: Result<T, Failure>,
    keep: impl FnOnce(&T),
    last: impl FnOnce() -> Option<T>,
    what: &str,
    missing: &mut Vec<String>,
) -> Result<T, Failure> {
    match read {
        Ok(v) => {
            keep(&v);
            Ok(v)
        }
        Err(Failure::Refused(r)) if r.reason == Reason::PrerequisiteMissing => {
            let kept = last().ok_or(Failure::Refused(r.clone()))?;
            missing.push(format!(
                "{}; the {what} it last held are applied until it is back",
                r.message
            ));
            Ok(kept)
        }
        Err(e) => Err(e),
    }
}

/// The overrides ConfigMap `name` holds (key `overrides`): refused when the
/// map is missing or the key is absent or malformed.
async fn overrides_from_config_map<C: Component>(
    ctx: &Context<C>,
    namespace: &str,
    name: &str,
) -> Result<Vec<kubeflow_api::Override>, Failure> {
    let field = "spec.overridesConfigMap";
    let cm = config_map(ctx, namespace, name, field).await?;
    let Some(text) = cm.data.as_ref().and_then(|d| d.get("overrides")) else {
        return Err(Refusal::new(
            Reason::InvalidSpec,
            format!("{field}: ConfigMap {namespace}/{name} has no key overrides"),
        )
        .into());
    };
    crate::overrides::parse(text).map_err(|e| {
        Refusal::new(
            Reason::InvalidSpec,
            format!("{field}: ConfigMap {namespace}/{name} key overrides: {e}"),
        )
        .into()
    })
}

/// The digests of ConfigMap `name` (key `digests`): refused when the map
/// is missing or malformed.
async fn read_digests<C: Component>(
    ctx: &Context<C>,
    namespace: &str,
    name: &str,
) -> Result<std::collections::BTreeMap<String, String>, Failure> {
    let field = "spec.imageDigests";
    let cm = config_map(ctx, namespace, name, field).await?;
    let text = cm
        .data
        .as_ref()
        .and_then(|d| d.get("digests"))
        .cloned()
        .unwrap_or_default();
    crate::images::parse_digests(&text).map_err(|e| {
        Refusal::new(
            Reason::InvalidSpec,
            format!("{field}: ConfigMap {namespace}/{name} key digests, {e}"),
        )
        .into()
    })
}

/// Pins the rendered images by `digests` (of ConfigMap `name`): refused,
/// with nothing changed, when an image lacks one.
fn pin_digests(
    namespace: &str,
    name: &str,
    digests: &std::collections::BTreeMap<String, String>,
    objects: &mut [DynamicObject],
) -> Result<(), Failure> {
    crate::images::pin(objects, digests).map_err(|missing| {
        Refusal::new(
            Reason::ImageDigestMissing,
            format!(
                "spec.imageDigests: ConfigMap {namespace}/{name} has no digest for {}",
                missing.join(", ")
            ),
        )
        .into()
    })
}

/// Applies the rendered objects as the CR's inventory.
async fn apply_rendered<C: Component>(
    cr: &C::Resource,
    ctx: &Context<C>,
    objects: Vec<DynamicObject>,
    version: &str,
    refused: &[crate::scope::Refused],
) -> Result<ApplyOutcome, Failure> {
    let inv = inventory_of(cr);
    let parent_resource = ApiResource::erase::<C::Resource>(&());
    let empty = BTreeMap::new();
    // A refused object applied before (the allowed namespaces changed
    // since) is not pruned: the operator may no longer reach it.
    let retain = |o: &DynamicObject| {
        refused
            .iter()
            .any(|r| r.key == crate::kinds::ObjectKey::of(o))
            || ctx.component.retain(cr, o)
    };
    let release = |o: &DynamicObject| ctx.component.release_on_prune(cr, o);
    let request = ApplyRequest {
        inventory: &inv,
        parent_resource: &parent_resource,
        parent_annotations: cr.meta().annotations.as_ref().unwrap_or(&empty),
        parent_labels: cr.meta().labels.as_ref().unwrap_or(&empty),
        owner: cr.controller_owner_ref(&()),
        objects,
        version,
        retain: &retain,
        release_on_prune: Some(&release),
        delete_crds: cr.common().crd_policy == Some(CrdPolicy::Delete),
    };
    Ok(ctx.engine.apply(request).await?)
}

/// What the apply repaired: a missing or changed object at a generation
/// already reconciled is drift (counted and logged, and an Event about each
/// object); a recreated object gets an Event.
async fn report_repairs<C: Component>(
    cr: &C::Resource,
    ctx: &Context<C>,
    old: &ComponentStatus,
    version: &str,
    outcome: &ApplyOutcome,
) {
    let on = cr.object_ref(&());
    let about = |what: &crate::apply::ObjectKey| {
        outcome
            .live
            .iter()
            .find(|o| crate::apply::ObjectKey::of(o) == *what)
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

/// Refuses, before anything is applied, when a namespace the workloads go
/// to enforces a Pod Security level that would refuse their pods.
async fn admitted_by_pod_security<C: Component>(
    ctx: &Context<C>,
    objects: &[DynamicObject],
) -> Result<(), Failure> {
    use crate::pod_security::{self, ENFORCE, Level};
    use k8s_openapi::api::core::v1::Namespace;
    let api: Api<Namespace> = Api::all(ctx.tools.client.clone());
    for (namespace, need) in pod_security::needed(objects) {
        if namespace.is_empty() || need.level == Level::Restricted {
            continue;
        }
        let labels = match api.get_metadata_opt(&namespace).await {
            Ok(Some(m)) => m.metadata.labels.unwrap_or_default(),
            // Not made yet (by the bundle itself): nothing enforced there.
            Ok(None) => continue,
            Err(e) => return Err(Failure::api(&format!("read namespace {namespace}"), e)),
        };
        if let Some(message) =
            pod_security::refusal(&namespace, labels.get(ENFORCE).map(String::as_str), &need)
        {
            return Err(Refusal::new(Reason::PodSecurity, message).into());
        }
    }
    Ok(())
}
