//! One reconcile of a component CR, its steps in order: read its inputs and
//! render (inputs.rs), gate an upgrade (upgrade.rs), the Pod Security
//! preflight, apply, tell what was repaired (announce.rs), assess health
//! (assess.rs), then the status. The cleanup its finalizer runs is
//! removal.rs.

use std::collections::BTreeMap;
use std::time::Duration;

use kube::api::{Api, ApiResource, DynamicObject};
use kube::{Resource, ResourceExt};
use kubeflow_api::{ComponentResource, ComponentStatus, CrdPolicy};

use super::announce::report_repairs;
use super::assess::assess;
use super::context::Context;
use super::inputs::{platform_of, render, render_with};
use super::removal::released;
use super::upgrade::{awaiting_message, upgrade_gate};
use super::{Component, Refusal, operator_name};
use crate::base::conditions::{self, Reason};
use crate::engine::apply::{ApplyOutcome, ApplyRequest};
use crate::engine::inventory::Inventory;
use crate::framework::controller::{Failure, StatusOf};

pub(super) fn current_status<K: ComponentResource>(cr: &K) -> ComponentStatus {
    cr.component_status().cloned().unwrap_or_default()
}

pub(super) fn inventory_of<K: ComponentResource>(cr: &K) -> Inventory {
    Inventory::for_parent(cr, K::COMPONENT, &operator_name::<K>())
}

/// The requeue while the component awaits another controller's object:
/// soon, but each pass reads every object of the component, and the wait
/// may be long (that controller not running).
const RECHECK_SOON: Duration = Duration::from_secs(10);

/// One reconcile of a component CR, as its steps: check where it installs,
/// dereference what it points at, render, apply, report what the apply
/// repaired, assess health, fill in the status. A refusal at any step ends
/// it with a condition a person can act on and nothing written; any other
/// failure, before or during the apply, with Ready false at this generation
/// (the skeleton writes both).
pub(super) async fn apply<C: Component>(
    cr: &C::Resource,
    ctx: &Context<C>,
    full: &mut StatusOf<Context<C>>,
) -> Result<Duration, Failure> {
    let old = current_status(cr);
    let platform = platform_of(cr, ctx).await?;
    full.as_mut().platform = Some(platform);
    // Referenced ConfigMaps gone since they were last read: applied as they
    // were, and said in Degraded.
    let mut missing = Vec::new();
    let (rendered, misfit) = render_or_fit(cr, ctx, platform, &old, &mut missing).await?;
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
        outcome.live.iter().map(crate::engine::apply::ObjectKey::of),
    );
    let ready = assess(cr, ctx, status, &version, &outcome).await;
    set_degraded(cr, ctx, status, &missing, &refused, blocked.as_deref());
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

/// The rendered objects, and why an override did not fit: an override
/// the version asked for has no place for, on the way from an installed
/// version, is not a refusal of the whole resource but an upgrade that
/// waits, planned without the overrides, while the installed version (with
/// them) keeps running and repaired.
async fn render_or_fit<C: Component>(
    cr: &C::Resource,
    ctx: &Context<C>,
    platform: kubeflow_api::Platform,
    old: &ComponentStatus,
    missing: &mut Vec<String>,
) -> Result<(super::Rendered, Option<String>), Failure> {
    match render(cr, ctx, platform, missing).await {
        Ok(r) => Ok((r, None)),
        Err(Failure::Refused(refusal))
            if refusal.reason == Reason::OverrideNotApplicable && old.version.is_some() =>
        {
            let r = render_with(cr, ctx, platform, &ctx.bundles, false, missing).await?;
            if old.version.as_deref() == Some(r.version.as_str()) {
                return Err(refusal.into());
            }
            Ok((r, Some(refusal.message)))
        }
        Err(e) => Err(e),
    }
}

/// What the status says beside health: referenced ConfigMaps applied as
/// last read (`missing`), objects outside the allowed namespaces
/// (`refused`), an upgrade blocked, or one awaiting approval.
fn set_degraded<C: Component>(
    cr: &C::Resource,
    ctx: &Context<C>,
    status: &mut ComponentStatus,
    missing: &[String],
    refused: &[crate::base::scope::Refused],
    blocked: Option<&str>,
) {
    let generation = cr.meta().generation;
    if !missing.is_empty() {
        conditions::set(
            &mut status.conditions,
            conditions::DEGRADED,
            true,
            Reason::PrerequisiteMissing,
            &missing.join("; "),
            generation,
        );
    }
    if !refused.is_empty() {
        conditions::set(
            &mut status.conditions,
            conditions::DEGRADED,
            true,
            Reason::NamespaceNotAllowed,
            &ctx.scope.refusal_of(refused),
            generation,
        );
    }
    if let Some(message) = blocked {
        conditions::set(
            &mut status.conditions,
            conditions::DEGRADED,
            true,
            Reason::UpgradeBlocked,
            message,
            generation,
        );
    } else if let Some(plan) = status.upgrade_plan.as_ref().filter(|p| p.awaiting_approval) {
        let message = awaiting_message(cr.common().shared.approved_plan.as_deref(), plan);
        conditions::set(
            &mut status.conditions,
            conditions::PROGRESSING,
            true,
            Reason::AwaitingApproval,
            &message,
            generation,
        );
    }
}

/// What other field managers own of the objects just applied (the watches'
/// view), for `status.foreignFields`: sorted, bounded.
fn foreign_fields<C: Component>(
    ctx: &Context<C>,
    outcome: &ApplyOutcome,
) -> Vec<kubeflow_api::ForeignFields> {
    let mut out = Vec::new();
    for o in &outcome.live {
        let key = crate::engine::apply::ObjectKey::of(o);
        let entries = ctx.engine.foreign_fields(&key);
        if !entries.is_empty() {
            out.extend(crate::render::foreign_fields::report(
                &key.to_string(),
                &entries,
            ));
        }
    }
    out.sort_by(|a, b| (&a.object, &a.manager).cmp(&(&b.object, &b.manager)));
    out.truncate(crate::render::foreign_fields::ENTRIES_MAX);
    out
}

/// Applies the rendered objects as the CR's inventory.
async fn apply_rendered<C: Component>(
    cr: &C::Resource,
    ctx: &Context<C>,
    objects: Vec<DynamicObject>,
    version: &str,
    refused: &[crate::base::scope::Refused],
) -> Result<ApplyOutcome, Failure> {
    let inv = inventory_of(cr);
    let parent_resource = ApiResource::erase::<C::Resource>(&());
    let empty = BTreeMap::new();
    // A refused object applied before (the allowed namespaces changed
    // since) is not pruned: the operator may no longer reach it.
    let retain = |o: &DynamicObject| {
        refused
            .iter()
            .any(|r| r.key == crate::base::kinds::ObjectKey::of(o))
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

/// Refuses, before anything is applied, when a namespace the workloads go
/// to enforces a Pod Security level that would refuse their pods.
async fn admitted_by_pod_security<C: Component>(
    ctx: &Context<C>,
    objects: &[DynamicObject],
) -> Result<(), Failure> {
    use crate::render::pod_security::{self, ENFORCE, Level};
    use k8s_openapi::api::core::v1::Namespace;
    let api: Api<Namespace> = Api::all(ctx.tools.client.clone());
    for (namespace, need) in pod_security::needed(objects) {
        if namespace.is_empty() || need.level == Level::Restricted {
            continue;
        }
        // From the API server's cache (resourceVersion 0): this runs in
        // every reconcile, and a read from etcd decoded the namespace each time.
        let labels = match api
            .get_metadata_opt_with(&namespace, &kube::api::GetParams::any())
            .await
        {
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
