//! The meta-operator's RBAC: its own kind and every component kind it
//! writes, and Events about them. It never touches a component's objects itself.

use kubeflow_operator::api::{
    Auth, CertManager, Dashboard, DevicePlugins, Istio, Katib, Knative, Kubeflow, ModelRegistry,
    Notebooks, Pipelines, Serving, Spark, Trainer, Training,
};
use kubeflow_operator::kube::Resource;
use kubeflow_operator::rbac::{self, MANAGE, Rules};

/// The rules of the meta-operator: cluster-wide on its own kinds, nothing else.
pub fn rules() -> Rules {
    let children = [
        Istio::plural(&()).to_string(),
        Pipelines::plural(&()).to_string(),
        Serving::plural(&()).to_string(),
        Training::plural(&()).to_string(),
        Trainer::plural(&()).to_string(),
        DevicePlugins::plural(&()).to_string(),
        CertManager::plural(&()).to_string(),
        Notebooks::plural(&()).to_string(),
        Auth::plural(&()).to_string(),
        Dashboard::plural(&()).to_string(),
        Katib::plural(&()).to_string(),
        ModelRegistry::plural(&()).to_string(),
        Spark::plural(&()).to_string(),
        Knative::plural(&()).to_string(),
    ];
    let children: Vec<&str> = children.iter().map(String::as_str).collect();
    let mut rules = rbac::own_kind(&Kubeflow::group(&()), &Kubeflow::plural(&()));
    rules.push(rbac::rule(&Istio::group(&()), &children, MANAGE));
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
