//! CRD generation: the YAML in `crds/` is made from these types.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;

use crate::{DevicePlugins, Istio, Kubeflow, Pipelines, Serving, Trainer, Training};

/// Every CRD of the project, with the file name it is kept under in `crds/`.
pub fn all() -> Vec<(&'static str, CustomResourceDefinition)> {
    vec![
        ("platform.kubeflow.org_kubeflows.yaml", Kubeflow::crd()),
        ("components.kubeflow.org_istios.yaml", Istio::crd()),
        ("components.kubeflow.org_pipelines.yaml", Pipelines::crd()),
        ("components.kubeflow.org_servings.yaml", Serving::crd()),
        ("components.kubeflow.org_trainings.yaml", Training::crd()),
        ("components.kubeflow.org_trainers.yaml", Trainer::crd()),
        (
            "components.kubeflow.org_deviceplugins.yaml",
            DevicePlugins::crd(),
        ),
    ]
}

/// A CRD as the YAML document kept in `crds/`.
pub fn to_yaml(crd: &CustomResourceDefinition) -> Result<String, serde_saphyr::ser::Error> {
    let mut out = String::from(
        "# Generated from the Rust types by `cargo run -p kubeflow-api --bin crdgen`; do not edit.\n",
    );
    out.push_str(&serde_saphyr::to_string(crd)?);
    Ok(out)
}
