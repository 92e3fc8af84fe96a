//! A release upgrade's plan and its approval: each component operator
//! publishes its own plan in its CR's status (the meta-operator's image
//! carries no bundles); the `Kubeflow` status gathers them under one digest,
//! and `spec.approvedPlan` set to that digest approves each component's plan
//! by passing the component's own digest down.

use std::collections::BTreeMap;

use kube::api::DynamicObject;
use kubeflow_api::UpgradePlanStatus;
use kubeflow_api::kubeflow::{ComponentPlan, ReleasePlan};

use crate::children::{Child, expected_version};
use crate::component_kind::ComponentKind;
use crate::reported;

/// A child's published plan, from its live object.
fn child_plan(live: &DynamicObject) -> Option<UpgradePlanStatus> {
    reported::status(live)?.upgrade_plan
}

/// The plan of moving the release `from` -> `to`: every managed child's
/// plan towards the version asked of it, while the move is under way
/// (`from` differs from `to`) or a child waits for approval. None when no
/// child has published one. While a child that moves (it runs another
/// version than the one asked of it) has not published its plan yet, the
/// plan has no digest and names it in `computing`: approving part of a
/// release would leave a mix of versions that no release is.
pub fn release_plan(
    wanted: &[Child],
    live: &BTreeMap<ComponentKind, DynamicObject>,
    from: Option<&str>,
    to: &str,
) -> Option<ReleasePlan> {
    let upgrading = from.is_some_and(|f| f != to);
    let mut awaiting = false;
    let components: Vec<ComponentPlan> = wanted
        .iter()
        .filter(|c| c.managed)
        .filter_map(|child| {
            let plan = child_plan(live.get(&child.component)?)?;
            if expected_version(child) != Some(plan.to.as_str())
                || !(upgrading || plan.awaiting_approval)
            {
                return None;
            }
            awaiting |= plan.awaiting_approval;
            Some(ComponentPlan {
                name: child.component.to_string(),
                from: plan.from,
                to: plan.to,
                digest: plan.digest,
                summary: plan.summary,
            })
        })
        .collect();
    if components.is_empty() {
        return None;
    }
    let computing: Vec<String> = wanted
        .iter()
        .filter(|c| c.managed)
        .filter(|child| {
            let name = child.component.to_string();
            !components.iter().any(|p| p.name == name)
                && live.get(&child.component).is_some_and(|l| moves(child, l))
        })
        .map(|child| child.component.to_string())
        .collect();
    let from = from.unwrap_or_default();
    let text: String = components
        .iter()
        .map(|c| format!("{} {}\n", c.name, c.digest))
        .collect();
    let digest = if computing.is_empty() {
        kubeflow_operator::upgrade_plan::digest(from, to, &text)
    } else {
        String::new()
    };
    Some(ReleasePlan {
        from: from.to_string(),
        to: to.to_string(),
        digest,
        awaiting_approval: awaiting,
        computing,
        components,
    })
}

/// Whether a live child runs another version than the one asked of it
/// (an install that never reached a version is not a move).
fn moves(child: &Child, live: &DynamicObject) -> bool {
    let reached = reported::status(live).and_then(|s| s.version);
    reached.is_some() && reached.as_deref() != expected_version(child)
}

/// When `approved` is the release plan's digest, each child in the plan
/// gets its own plan's digest as `approvedPlan`. Returns whether it was.
pub fn approve(wanted: &mut [Child], plan: &ReleasePlan, approved: Option<&str>) -> bool {
    if !plan.computing.is_empty()
        || plan.digest.is_empty()
        || approved != Some(plan.digest.as_str())
    {
        return false;
    }
    for child in wanted.iter_mut() {
        let name = child.component.to_string();
        if let Some(p) = plan.components.iter().find(|p| p.name == name) {
            child.spec.common_mut().shared.approved_plan = Some(p.digest.clone());
        }
    }
    true
}

/// What the `Kubeflow` CR says while its upgrade waits for approval.
pub fn awaiting_message(plan: &ReleasePlan, approved: Option<&str>) -> String {
    let wrong = match approved {
        Some(a) if a != plan.digest => format!(
            "spec.approvedPlan {:?} is not this plan's digest (the plan changed, or the value is wrong); ",
            kubeflow_operator::conditions::truncate(a, 128)
        ),
        _ => String::new(),
    };
    let names: Vec<&str> = plan.components.iter().map(|c| c.name.as_str()).collect();
    if !plan.computing.is_empty() {
        return format!(
            "the upgrade from {} to {} waits for approval; the plans of {} are still being computed, and the digest to approve appears once every component that moves has published its plan (ready: {})",
            plan.from,
            plan.to,
            plan.computing.join(", "),
            names.join(", ")
        );
    }
    format!(
        "{wrong}the upgrade from {} to {} waits for approval: set spec.approvedPlan to {} (plans of {}: status.upgradePlan, in full in each component's status.upgradePlan)",
        plan.from,
        plan.to,
        plan.digest,
        names.join(", ")
    )
}

/// Whether a child's status (`reported`) says it waits for approval of the
/// plan towards the version asked of it.
pub fn child_awaits(child: &Child, reported: &kubeflow_api::ComponentStatus) -> bool {
    reported
        .upgrade_plan
        .as_ref()
        .is_some_and(|p| p.awaiting_approval && expected_version(child) == Some(p.to.as_str()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn approved(child: &Child) -> Option<&str> {
        child.spec.common().shared.approved_plan.as_deref()
    }

    fn child(component: ComponentKind, version: &str) -> Child {
        crate::children::test_child(component, true, Some(version))
    }

    fn live(from: &str, to: &str, digest: &str, awaiting: bool) -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "components.kubeflow.org/v1alpha1", "kind": "Serving",
            "metadata": {"name": "kf"},
            "status": {"version": from, "upgradePlan": {"from": from, "to": to,
                "digest": digest, "summary": "1 created", "details": "", "awaitingApproval": awaiting}}
        }))
        .expect("object")
    }

    #[test]
    fn one_digest_for_every_components_plan_and_approval_passes_each_down() {
        let mut wanted = vec![
            child(ComponentKind::Serving, "v0.18.0"),
            child(ComponentKind::Trainer, "v2.2.0"),
        ];
        let mut live_children = BTreeMap::new();
        live_children.insert(
            ComponentKind::Serving,
            live("v0.17.0", "v0.18.0", "aaaa", true),
        );
        live_children.insert(
            ComponentKind::Trainer,
            live("v2.1.0", "v2.2.0", "bbbb", true),
        );
        let plan = release_plan(&wanted, &live_children, Some("26.03"), "26.03.1").expect("a plan");
        assert!(plan.awaiting_approval);
        assert_eq!(plan.components.len(), 2);
        assert_eq!(plan.digest.len(), 16);
        // A wrong digest approves nothing and says so.
        assert!(!approve(&mut wanted, &plan, Some("0123")));
        assert!(wanted.iter().all(|c| approved(c).is_none()));
        assert!(
            awaiting_message(&plan, Some("0123")).contains("spec.approvedPlan \"0123\" is not")
        );
        assert!(approve(&mut wanted, &plan, Some(&plan.digest)));
        assert_eq!(approved(&wanted[0]), Some("aaaa"));
        assert_eq!(approved(&wanted[1]), Some("bbbb"));

        // Another plan of one component is another release digest.
        live_children.insert(
            ComponentKind::Trainer,
            live("v2.1.0", "v2.2.0", "cccc", true),
        );
        let changed =
            release_plan(&wanted, &live_children, Some("26.03"), "26.03.1").expect("a plan");
        assert_ne!(changed.digest, plan.digest);
    }

    #[test]
    fn no_digest_until_every_moving_component_has_published_its_plan() {
        let mut wanted = vec![
            child(ComponentKind::Serving, "v0.18.0"),
            child(ComponentKind::Trainer, "v2.2.0"),
            child(ComponentKind::Training, "v1.9.2"),
        ];
        let mut live_children = BTreeMap::new();
        live_children.insert(
            ComponentKind::Trainer,
            live("v2.1.0", "v2.2.0", "bbbb", true),
        );
        // Serving moves (v0.16.0 -> v0.18.0) and has no plan yet; Training
        // stays at v1.9.2 and needs none.
        let mut serving = live("v0.16.0", "v0.16.0", "old", false);
        serving.data["status"]
            .as_object_mut()
            .expect("status")
            .remove("upgradePlan");
        live_children.insert(ComponentKind::Serving, serving);
        let mut training = live("v1.9.2", "v1.9.2", "x", false);
        training.data["status"]
            .as_object_mut()
            .expect("status")
            .remove("upgradePlan");
        live_children.insert(ComponentKind::Training, training);
        let partial =
            release_plan(&wanted, &live_children, Some("26.03"), "26.03.1").expect("a plan");
        assert_eq!(partial.computing, vec!["serving".to_string()]);
        assert_eq!(partial.digest, "");
        // Nothing is approved, whatever the value.
        assert!(!approve(&mut wanted, &partial, Some("")));
        assert!(wanted.iter().all(|c| approved(c).is_none()));
        assert!(
            awaiting_message(&partial, None).contains("plans of serving are still being computed")
        );

        live_children.insert(
            ComponentKind::Serving,
            live("v0.16.0", "v0.18.0", "aaaa", true),
        );
        let whole =
            release_plan(&wanted, &live_children, Some("26.03"), "26.03.1").expect("a plan");
        assert!(whole.computing.is_empty());
        assert_eq!(whole.digest.len(), 16);
        assert!(approve(&mut wanted, &whole, Some(&whole.digest)));
        assert_eq!(approved(&wanted[0]), Some("aaaa"));
        assert_eq!(approved(&wanted[1]), Some("bbbb"));
    }

    #[test]
    fn no_plan_outside_an_upgrade_or_for_another_version() {
        let wanted = vec![child(ComponentKind::Serving, "v0.18.0")];
        let mut live_children = BTreeMap::new();
        live_children.insert(
            ComponentKind::Serving,
            live("v0.17.0", "v0.18.0", "aaaa", false),
        );
        assert!(release_plan(&wanted, &live_children, Some("26.03.1"), "26.03.1").is_none());
        live_children.insert(
            ComponentKind::Serving,
            live("v0.16.0", "v0.17.0", "aaaa", true),
        );
        assert!(release_plan(&wanted, &live_children, Some("26.03"), "26.03.1").is_none());
    }
}
