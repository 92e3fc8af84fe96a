//! The meta-operator's RBAC: its own kind and every component kind it
//! writes, and Events about them. It never touches a component's objects itself.

use kubeflow_operator::api::registry::COMPONENTS;
use kubeflow_operator::api::{COMPONENTS_GROUP, Kubeflow};
use kubeflow_operator::kube::Resource;
use kubeflow_operator::rbac::{self, MANAGE, Rules};

/// The rules of the meta-operator: cluster-wide on its own kinds, nothing else.
pub fn rules() -> Rules {
    // Every component kind of the registry.
    let children: Vec<&str> = COMPONENTS.iter().map(|c| c.plural).collect();
    let mut rules = rbac::own_kind(&Kubeflow::group(&()), &Kubeflow::plural(&()));
    rules.push(rbac::rule(COMPONENTS_GROUP, &children, MANAGE));
    // Events on Kubeflow CRs (refusals, upgrades, readiness), wherever they are.
    rules.push(rbac::rule(
        "events.k8s.io",
        &["events"],
        &["create", "patch"],
    ));
    Rules {
        cluster: rbac::normalize(rules),
        ..Default::default()
    }
}
