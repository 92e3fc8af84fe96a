//! Components set to `Removed` that are kept because Managed components
//! still need them: the plan keeps such a child (removal runs in reverse
//! order), and the status must say so, or a `Removed` that does nothing
//! would read as a Ready install.

use kube::api::DynamicObject;
use kubeflow_api::KubeflowStatus;
use kubeflow_api::kubeflow::Phase;
use kubeflow_operator::conditions::{self, Reason};

use crate::children::Child;
use crate::component_kind::ComponentKind;

/// A `Removed` component still installed, and the Managed ones that need it.
#[derive(Debug, PartialEq, Eq)]
pub struct Kept {
    /// The component set to `Removed`.
    pub component: ComponentKind,
    /// The Managed components that depend on it.
    pub needed_by: Vec<ComponentKind>,
}

/// The `Removed` children whose CR is still live while a Managed child
/// depends on them. A dependent that is itself `Removed` is only removal
/// under way (reverse order), not a need.
pub fn kept(wanted: &[Child], live: &[DynamicObject]) -> Vec<Kept> {
    let is_live = |c: ComponentKind| {
        let kind = c.api_resource().kind;
        live.iter().any(|o| {
            o.types.as_ref().is_some_and(|t| t.kind == kind)
                && o.metadata.deletion_timestamp.is_none()
        })
    };
    wanted
        .iter()
        .filter(|c| !c.managed && is_live(c.component))
        .filter_map(|removed| {
            let needed_by: Vec<ComponentKind> = wanted
                .iter()
                .filter(|w| w.managed && w.component.depends_on().contains(&removed.component))
                .map(|w| w.component)
                .collect();
            (!needed_by.is_empty()).then_some(Kept {
                component: removed.component,
                needed_by,
            })
        })
        .collect()
}

/// The message naming each kept component and its dependents.
pub fn message(kept: &[Kept]) -> String {
    let parts: Vec<String> = kept
        .iter()
        .map(|k| {
            let by: Vec<String> = k.needed_by.iter().map(ToString::to_string).collect();
            format!(
                "{} is Removed but kept: {} (Managed) need{} it",
                k.component,
                by.join(", "),
                if by.len() == 1 { "s" } else { "" }
            )
        })
        .collect();
    format!(
        "{}; set those Removed too, or set it Managed again",
        parts.join("; ")
    )
}

/// Not Ready and Degraded while a `Removed` component is kept: the spec
/// asks for what cannot be done, and a person must choose.
pub fn report(status: &mut KubeflowStatus, kept: &[Kept], generation: Option<i64>) {
    if kept.is_empty() {
        return;
    }
    let msg = message(kept);
    for (type_, value) in [(conditions::READY, false), (conditions::DEGRADED, true)] {
        conditions::set(
            &mut status.conditions,
            type_,
            value,
            Reason::RemovedComponentNeeded,
            &msg,
            generation,
        );
    }
    status.phase = Some(Phase::Degraded);
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn child(component: ComponentKind, managed: bool) -> Child {
        crate::children::test_child(component, managed, None)
    }

    fn live(c: ComponentKind) -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "components.kubeflow.org/v1alpha1",
            "kind": c.api_resource().kind,
            "metadata": {"name": "kubeflow"},
        }))
        .expect("object")
    }

    #[test]
    fn a_removed_dashboard_that_notebooks_needs_is_named_with_them() {
        let wanted = [
            child(ComponentKind::Dashboard, false),
            child(ComponentKind::Notebooks, true),
            child(ComponentKind::Katib, true),
            child(ComponentKind::ModelRegistry, false),
        ];
        let on = [
            live(ComponentKind::Dashboard),
            live(ComponentKind::Notebooks),
            live(ComponentKind::Katib),
            live(ComponentKind::ModelRegistry),
        ];
        let k = kept(&wanted, &on);
        assert_eq!(
            k,
            [Kept {
                component: ComponentKind::Dashboard,
                needed_by: vec![ComponentKind::Notebooks, ComponentKind::Katib],
            }]
        );
        let msg = message(&k);
        assert!(msg.contains("dashboard is Removed but kept: notebooks, katib"));

        let mut status = KubeflowStatus::default();
        conditions::set(
            &mut status.conditions,
            conditions::READY,
            true,
            Reason::Ready,
            "all ready",
            Some(1),
        );
        report(&mut status, &k, Some(1));
        let ready = conditions::get(&status.conditions, conditions::READY).expect("Ready");
        assert_eq!(ready.status, "False");
        assert_eq!(ready.reason, "RemovedComponentNeeded");
        let degraded = conditions::get(&status.conditions, conditions::DEGRADED).expect("Degraded");
        assert_eq!(degraded.status, "True");
        assert_eq!(status.phase, Some(Phase::Degraded));
    }

    #[test]
    fn removal_under_way_or_gone_is_no_need() {
        // Both Removed: the dependents go first, nothing to report.
        let wanted = [
            child(ComponentKind::Dashboard, false),
            child(ComponentKind::Notebooks, false),
        ];
        let on = [
            live(ComponentKind::Dashboard),
            live(ComponentKind::Notebooks),
        ];
        assert!(kept(&wanted, &on).is_empty());
        // Removed and already gone: nothing kept.
        let wanted = [
            child(ComponentKind::Dashboard, false),
            child(ComponentKind::Notebooks, true),
        ];
        assert!(kept(&wanted, &[live(ComponentKind::Notebooks)]).is_empty());
    }
}
