//! The upgrade gate: a change of version planned before anything of it is
//! written, held for approval (`upgradeStrategy: Manual`) or while the new
//! version would strand stored objects.

use kube::api::Api;
use kubeflow_api::{ComponentResource, ComponentStatus, Platform};

use super::context::Context;
use super::inputs::render_with;
use super::{Component, Refusal, Rendered};
use crate::base::bundle::BundleCache;
use crate::base::conditions::Reason;
use crate::framework::controller::Failure;

/// What an upgrade gate lets through: the objects to apply, and why the
/// upgrade is blocked when it is (the installed version is applied then).
pub(super) type Gated = (Rendered, Option<String>);

/// A change of version, before anything of it is written: its plan (what
/// the installed version's objects become) goes into the status. The
/// installed version is what gets applied (and repaired) instead while
/// `upgradeStrategy: Manual` waits for `approvedPlan` to be the plan's
/// digest, or while the new version drops a CRD version that still stores
/// objects (blocked: they would be unreadable).
pub(super) async fn upgrade_gate<C: Component>(
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
    let installed_cr = at_version(cr, from);
    let manual = cr.common().shared.upgrade_strategy == Some(kubeflow_api::UpgradeStrategy::Manual);
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
    let (plan, published) = plan_of(cr, ctx, old, from, (&installed, &rendered), &misfit);
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

/// The upgrade's plan from `from` (the installed and the new render), and
/// what the status publishes of it: awaiting approval under Manual until
/// `approvedPlan` is its digest.
fn plan_of<C: Component>(
    cr: &C::Resource,
    ctx: &Context<C>,
    old: &ComponentStatus,
    from: &str,
    (installed, rendered): (&Rendered, &Rendered),
    misfit: &Option<String>,
) -> (
    crate::render::upgrade_plan::Plan,
    kubeflow_api::UpgradePlanStatus,
) {
    let manual = cr.common().shared.upgrade_strategy == Some(kubeflow_api::UpgradeStrategy::Manual);
    let approved = cr.common().shared.approved_plan.as_deref();
    let mut plan =
        crate::render::upgrade_plan::Plan::compute(&installed.objects, &rendered.objects);
    plan.overrides_not_applicable.extend(misfit.clone());
    plan.actions = ctx
        .component
        .upgrade_actions(Some(cr), from, &rendered.version);
    let mut published =
        crate::render::upgrade_plan::published(from, &rendered.version, &plan, false);
    published.awaiting_approval = manual && approved != Some(published.digest.as_str());
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
                && approved == Some(p.digest.as_str())
        })
    {
        published = begun.clone();
    }
    (plan, published)
}

/// Of the CRD versions an upgrade removes ("<crd> <version>"), those the
/// live CRD still lists in `status.storedVersions`.
pub(super) async fn still_stored<C: Component>(
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
pub(super) fn at_version<K: ComponentResource>(cr: &K, version: &str) -> K {
    let mut at = cr.clone();
    at.common_mut().version = Some(version.to_string());
    at
}

/// What the Progressing condition says while a plan waits for approval.
pub(super) fn awaiting_message(
    approved: Option<&str>,
    plan: &kubeflow_api::UpgradePlanStatus,
) -> String {
    let wrong = match approved {
        Some(a) => format!(
            "spec.approvedPlan {:?} is not this plan's digest (the plan changed, or the value is wrong); ",
            crate::base::conditions::truncate(a, 128)
        ),
        None => String::new(),
    };
    format!(
        "{wrong}the upgrade from {} to {} waits for approval: set spec.approvedPlan to {} (the plan: status.upgradePlan; {})",
        plan.from, plan.to, plan.digest, plan.summary
    )
}

#[cfg(test)]
mod tests {
    use kubeflow_api::{Training, TrainingSpec, UpgradePlanStatus};

    use super::*;

    fn plan() -> UpgradePlanStatus {
        UpgradePlanStatus {
            from: "v1.8.1".into(),
            to: "v1.9.2".into(),
            digest: "sha256:abc".into(),
            summary: "3 changed, 1 added".into(),
            ..Default::default()
        }
    }

    #[test]
    fn the_wait_for_approval_says_what_to_set() {
        assert_eq!(
            awaiting_message(None, &plan()),
            "the upgrade from v1.8.1 to v1.9.2 waits for approval: set spec.approvedPlan to sha256:abc (the plan: status.upgradePlan; 3 changed, 1 added)"
        );
        let wrong = awaiting_message(Some("sha256:old"), &plan());
        assert!(
            wrong.starts_with("spec.approvedPlan \"sha256:old\" is not this plan's digest"),
            "{wrong}"
        );
        assert!(wrong.ends_with(
            "set spec.approvedPlan to sha256:abc (the plan: status.upgradePlan; 3 changed, 1 added)"
        ));
    }

    #[test]
    fn the_installed_version_changes_the_version_alone() {
        let mut spec = TrainingSpec::default();
        spec.common.version = Some("v1.9.2".into());
        spec.common.shared.image_registry = Some("mirror.example.com".into());
        let cr = Training::new("kubeflow", spec);
        let installed = at_version(&cr, "v1.8.1");
        assert_eq!(installed.spec.common.version.as_deref(), Some("v1.8.1"));
        let mut back = installed.clone();
        back.spec.common.version = Some("v1.9.2".into());
        assert_eq!(
            serde_json::to_value(&back).expect("json"),
            serde_json::to_value(&cr).expect("json"),
            "every other field the same"
        );
    }
}
