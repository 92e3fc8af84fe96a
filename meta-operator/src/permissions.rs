//! The meta-operator's RBAC: its own kind and the six component kinds it
//! writes. It never touches a component's objects itself.

use kubeflow_operator::api::{
    DevicePlugins, Istio, Kubeflow, Pipelines, Serving, Trainer, Training,
};
use kubeflow_operator::k8s_openapi::api::rbac::v1::PolicyRule;
use kubeflow_operator::kube::Resource;
use kubeflow_operator::rbac::{self, MANAGE};

/// The ClusterRole rules of the meta-operator.
pub fn rules() -> Vec<PolicyRule> {
    let children = [
        Istio::plural(&()).to_string(),
        Pipelines::plural(&()).to_string(),
        Serving::plural(&()).to_string(),
        Training::plural(&()).to_string(),
        Trainer::plural(&()).to_string(),
        DevicePlugins::plural(&()).to_string(),
    ];
    let children: Vec<&str> = children.iter().map(String::as_str).collect();
    let mut rules = rbac::own_kind(&Kubeflow::group(&()), &Kubeflow::plural(&()));
    rules.push(rbac::rule(&Istio::group(&()), &children, MANAGE));
    rbac::normalize(rules)
}
