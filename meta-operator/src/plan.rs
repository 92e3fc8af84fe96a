//! Which children to write, decided without API access from what the
//! `Kubeflow` CR asks for and which children exist and are ready.

use std::collections::{BTreeMap, BTreeSet};

use kube::api::DynamicObject;

use crate::children::Child;
use crate::component_kind::ComponentKind;
use crate::summary;

/// The children to write, and why the others wait.
#[derive(Debug, Default)]
pub struct Plan<'a> {
    /// Children to apply, in creation order.
    pub render: Vec<&'a Child>,
    /// Managed children not written yet: what they wait for.
    pub waiting: BTreeMap<ComponentKind, String>,
}

/// A managed child is written once the Managed components it depends on are
/// Ready (or when it exists already: it is never taken back). A removed
/// child is kept while a child that depends on it still exists: removal runs
/// in reverse order.
pub fn plan<'a>(wanted: &'a [Child], live: &BTreeMap<ComponentKind, DynamicObject>) -> Plan<'a> {
    let ready_now = |c: ComponentKind| {
        wanted
            .iter()
            .find(|w| w.component == c)
            .is_some_and(|ch| summary::summarize(ch, live.get(&c)).ready)
    };
    let managed: BTreeSet<ComponentKind> = wanted
        .iter()
        .filter(|c| c.managed)
        .map(|c| c.component)
        .collect();
    let mut out = Plan::default();
    for child in wanted {
        let c = child.component;
        if child.managed {
            let blockers: Vec<String> = c
                .depends_on()
                .iter()
                .filter(|d| managed.contains(d) && !ready_now(**d))
                .map(ToString::to_string)
                .collect();
            if blockers.is_empty() || live.contains_key(&c) {
                out.render.push(child);
            } else {
                out.waiting.insert(
                    c,
                    format!("{c} waits for {} to be Ready", blockers.join(", ")),
                );
            }
        } else if live.contains_key(&c)
            && ComponentKind::ORDER
                .iter()
                .any(|d| d.depends_on().contains(&c) && live.contains_key(d))
        {
            out.render.push(child);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn child(component: ComponentKind, managed: bool) -> Child {
        crate::children::test_child(component, managed, Some("v1"))
    }

    fn live(ready: bool) -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "components.kubeflow.org/v1alpha1", "kind": "Istio",
            "metadata": {"name": "kubeflow", "generation": 1},
            "status": {"observedGeneration": 1, "version": "v1", "conditions": [{
                "type": "Ready", "status": if ready { "True" } else { "False" },
                "reason": "x", "message": "", "observedGeneration": 1,
                "lastTransitionTime": "2026-01-01T00:00:00Z",
            }]},
        }))
        .expect("object")
    }

    fn names(p: &Plan<'_>) -> Vec<ComponentKind> {
        p.render.iter().map(|c| c.component).collect()
    }

    #[test]
    fn a_child_waits_for_what_it_depends_on_to_be_ready() {
        let wanted = vec![
            child(ComponentKind::Istio, true),
            child(ComponentKind::Serving, true),
        ];
        let p = plan(&wanted, &BTreeMap::new());
        assert_eq!(names(&p), [ComponentKind::Istio]);
        assert_eq!(
            p.waiting.get(&ComponentKind::Serving).map(String::as_str),
            Some("serving waits for istio to be Ready")
        );
        let istio_ready = BTreeMap::from([(ComponentKind::Istio, live(true))]);
        let p = plan(&wanted, &istio_ready);
        assert_eq!(names(&p), [ComponentKind::Istio, ComponentKind::Serving]);
        assert!(p.waiting.is_empty());
    }

    #[test]
    fn an_existing_child_is_never_taken_back_and_a_dependency_goes_last() {
        let wanted = vec![
            child(ComponentKind::Istio, false),
            child(ComponentKind::Serving, true),
        ];
        // Istio removed while Serving still exists: kept for now.
        let both = BTreeMap::from([
            (ComponentKind::Istio, live(false)),
            (ComponentKind::Serving, live(true)),
        ]);
        assert_eq!(
            names(&plan(&wanted, &both)),
            [ComponentKind::Istio, ComponentKind::Serving]
        );
        let wanted = vec![
            child(ComponentKind::Istio, false),
            child(ComponentKind::Serving, false),
        ];
        let istio_only = BTreeMap::from([(ComponentKind::Istio, live(true))]);
        assert!(plan(&wanted, &istio_only).render.is_empty());
        // A managed Istio not ready does not hold back an unmanaged one's dependents.
        let wanted = vec![child(ComponentKind::Pipelines, true)];
        assert_eq!(
            names(&plan(&wanted, &BTreeMap::new())),
            [ComponentKind::Pipelines]
        );
    }
}
