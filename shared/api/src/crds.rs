//! CRD generation: the YAML in `crds/` is made from these types.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceDefinition, JSON, JSONSchemaProps,
};
use kube::CustomResourceExt;

use crate::{
    Auth, CertManager, Dashboard, DevicePlugins, Istio, Katib, Knative, Kubeflow, ModelRegistry,
    Notebooks, Pipelines, Serving, Spark, Trainer, Training,
};

/// Every CRD of the project, with the file name it is kept under in `crds/`.
pub fn all() -> Vec<(&'static str, CustomResourceDefinition)> {
    let component = |crd, kind: &str| {
        let (version, images) = KIND_EXAMPLES
            .iter()
            .find(|(k, _, _)| *k == kind)
            .map(|(_, v, i)| (*v, *i))
            .unwrap_or_default();
        with_descriptions(
            with_defaults(crd, COMPONENT_DEFAULTS),
            &[("version", version), ("images", images)],
        )
    };
    vec![
        (
            "platform.kubeflow.org_kubeflows.yaml",
            with_defaults(Kubeflow::crd(), &[("platform", "auto")]),
        ),
        (
            "components.kubeflow.org_istios.yaml",
            component(Istio::crd(), "Istio"),
        ),
        (
            "components.kubeflow.org_knatives.yaml",
            component(Knative::crd(), "Knative"),
        ),
        (
            "components.kubeflow.org_pipelines.yaml",
            component(Pipelines::crd(), "Pipelines"),
        ),
        (
            "components.kubeflow.org_servings.yaml",
            component(Serving::crd(), "Serving"),
        ),
        (
            "components.kubeflow.org_trainings.yaml",
            component(Training::crd(), "Training"),
        ),
        (
            "components.kubeflow.org_trainers.yaml",
            component(Trainer::crd(), "Trainer"),
        ),
        (
            "components.kubeflow.org_certmanagers.yaml",
            component(CertManager::crd(), "CertManager"),
        ),
        (
            "components.kubeflow.org_auths.yaml",
            component(Auth::crd(), "Auth"),
        ),
        (
            "components.kubeflow.org_dashboards.yaml",
            component(Dashboard::crd(), "Dashboard"),
        ),
        (
            "components.kubeflow.org_notebooks.yaml",
            component(Notebooks::crd(), "Notebooks"),
        ),
        (
            "components.kubeflow.org_katibs.yaml",
            component(Katib::crd(), "Katib"),
        ),
        (
            "components.kubeflow.org_modelregistries.yaml",
            component(ModelRegistry::crd(), "ModelRegistry"),
        ),
        (
            "components.kubeflow.org_sparks.yaml",
            component(Spark::crd(), "Spark"),
        ),
        (
            "components.kubeflow.org_deviceplugins.yaml",
            component(DevicePlugins::crd(), "DevicePlugins"),
        ),
    ]
}

/// Each component kind's own wording of the shared `version` and `images`
/// fields (the shared Rust type cannot give one kind's examples to all).
const KIND_EXAMPLES: &[(&str, &str, &str)] = &[
    (
        "Istio",
        "Istio version to deploy, e.g. \"1.30.1\" (no \"v\"); the meta-operator sets it from its release table.",
        "Image overrides by container name, e.g. {\"discovery\": \"registry.example/istio/pilot:1.30.1\"} (istiod's container); \"istio-proxy\" names the gateway's.",
    ),
    (
        "Pipelines",
        "Kubeflow Pipelines version to deploy, e.g. \"2.16.1\" (no \"v\"); the meta-operator sets it from its release table.",
        "Image overrides by container name, e.g. {\"ml-pipeline-api-server\": \"registry.example/kfp/api-server:2.16.1\"}.",
    ),
    (
        "Serving",
        "KServe version to deploy, e.g. \"v0.18.0\"; the meta-operator sets it from its release table.",
        "Image overrides by container name, e.g. {\"manager\": \"registry.example/kserve/kserve-controller:v0.18.0\"} (KServe's controllers all name their container \"manager\": one override sets them all).",
    ),
    (
        "Training",
        "training-operator version to deploy, e.g. \"v1.9.2\"; the meta-operator sets it from its release table.",
        "Image overrides by container name, e.g. {\"training-operator\": \"registry.example/kubeflow/training-operator:v1.9.2\"}.",
    ),
    (
        "Trainer",
        "Kubeflow Trainer version to deploy, e.g. \"v2.2.0\"; the meta-operator sets it from its release table.",
        "Image overrides by Deployment (both controllers name their container \"manager\"): \"kubeflow-trainer-controller-manager\" or \"jobset-controller-manager\", e.g. {\"jobset-controller-manager\": \"registry.example/jobset/jobset:v0.11.0\"}.",
    ),
    (
        "CertManager",
        "cert-manager version to deploy, e.g. \"v1.20.2\"; the meta-operator sets it from its release table. Unused when a cert-manager the project did not install is used (mode Auto or External).",
        "Image overrides by container name, e.g. {\"cert-manager-controller\": \"registry.example/jetstack/cert-manager-controller:v1.20.2\"}; the others are \"cert-manager-cainjector\" and \"cert-manager-webhook\".",
    ),
    (
        "Auth",
        "oauth2-proxy version to deploy, e.g. \"v7.15.2\"; the meta-operator sets it from its release table. dex's is spec.dex.version.",
        "Image overrides by container name, e.g. {\"oauth2-proxy\": \"registry.example/oauth2-proxy/oauth2-proxy:v7.15.2\", \"dex\": \"registry.example/dexidp/dex:v2.45.1\"}.",
    ),
    (
        "Dashboard",
        "Central dashboard version to deploy, e.g. \"v2.0.0\"; the meta-operator sets it from its release table.",
        "Image overrides by container name, e.g. {\"dashboard\": \"registry.example/kubeflow/dashboard/dashboard:v2.0.0\"}; v1.10.0 names its containers centraldashboard, admission-webhook, kfam and manager.",
    ),
    (
        "Notebooks",
        "Kubeflow Notebooks version to deploy, e.g. \"v1.11.0\"; the meta-operator sets it from its release table.",
        "Image overrides by container name, e.g. {\"jupyter-web-app\": \"registry.example/kubeflow/notebooks/jupyter-web-app:v1.11.0\"}; the controllers name theirs \"manager\" (one override sets them all). The images the spawner offers are spec.spawner.images.",
    ),
    (
        "Katib",
        "Katib version to deploy, e.g. \"v0.19.0\"; the meta-operator sets it from its release table.",
        "Image overrides by container name, e.g. {\"katib-controller\": \"registry.example/kubeflow/katib/katib-controller:v0.19.0\"}; the others are \"katib-db-manager\", \"katib-ui\" and \"katib-mysql\". The suggestion and metrics-collector images in katib-config move with imageRegistry.",
    ),
    (
        "ModelRegistry",
        "Model Registry version to deploy, e.g. \"v0.3.9\"; the meta-operator sets it from its release table.",
        "Image overrides by container name, e.g. {\"rest-container\": \"registry.example/kubeflow/hub/server:v0.3.9\"}; the others are \"model-registry-ui\", \"catalog\", \"db-container\" and \"postgres\".",
    ),
    (
        "Knative",
        "Knative version to deploy, e.g. \"v1.22.0\"; the meta-operator sets it from its release table.",
        "Image overrides by container name, e.g. {\"controller\": \"registry.example/knative/serving/controller:v1.22.0\"}; the others are \"webhook\", \"activator\", \"autoscaler\" and net-istio's. The queue-proxy image in config-deployment moves with imageRegistry.",
    ),
    (
        "Spark",
        "Spark operator version to deploy, e.g. \"2.5.0\" (no \"v\"); the meta-operator sets it from its release table.",
        "Image overrides by container name, e.g. {\"spark-operator-controller\": \"registry.example/kubeflow/spark-operator/controller:2.5.0\"}; the webhook's is \"spark-operator-webhook\".",
    ),
    (
        "DevicePlugins",
        "Unused: each entry of plugins names its own version.",
        "Unused: each entry of plugins names its own image.",
    ),
];

/// Defaults the operators apply in code when a component CR leaves these
/// fields out, written into the schema so that the API server fills them
/// and `kubectl get -o yaml` shows them.
const COMPONENT_DEFAULTS: &[(&str, &str)] = &[("platform", "auto"), ("crdPolicy", "Retain")];

/// The CRD with `default`s on top-level `spec` fields. Only there: the same
/// Rust types are embedded in the `Kubeflow` kind's component entries, where
/// a default would turn "not stated" into a value passed to every child.
fn with_defaults(
    crd: CustomResourceDefinition,
    defaults: &[(&str, &str)],
) -> CustomResourceDefinition {
    each_spec_field(crd, defaults, |prop, value| {
        prop.default = Some(JSON(serde_json::Value::String(value.into())));
    })
}

/// The CRD with these top-level `spec` fields described anew (an empty text
/// keeps the type's own description).
fn with_descriptions(
    crd: CustomResourceDefinition,
    descriptions: &[(&str, &str)],
) -> CustomResourceDefinition {
    each_spec_field(crd, descriptions, |prop, text| {
        if !text.is_empty() {
            prop.description = Some(text.to_string());
        }
    })
}

/// Calls `change` on each named top-level `spec` field of every version's
/// schema, with the value given for it.
fn each_spec_field(
    mut crd: CustomResourceDefinition,
    fields: &[(&str, &str)],
    change: impl Fn(&mut JSONSchemaProps, &str),
) -> CustomResourceDefinition {
    for version in &mut crd.spec.versions {
        let Some(spec) = version
            .schema
            .as_mut()
            .and_then(|s| s.open_api_v3_schema.as_mut())
            .and_then(|s| s.properties.as_mut())
            .and_then(|p| p.get_mut("spec"))
            .and_then(|s| s.properties.as_mut())
        else {
            continue;
        };
        for (field, value) in fields {
            if let Some(prop) = spec.get_mut(*field) {
                change(prop, value);
            }
        }
    }
    crd
}

/// A CRD as the YAML document kept in `crds/`.
pub fn to_yaml(crd: &CustomResourceDefinition) -> Result<String, serde_saphyr::ser::Error> {
    let mut out = String::from(
        "# Generated from the Rust types by `cargo run -p kubeflow-api --bin crdgen`; do not edit.\n",
    );
    out.push_str(&serde_saphyr::to_string(crd)?);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    fn schema(file: &str) -> Value {
        let (_, crd) = super::all()
            .into_iter()
            .find(|(f, _)| *f == file)
            .unwrap_or_else(|| panic!("no {file}"));
        let v = serde_json::to_value(crd).expect("crd");
        v["spec"]["versions"][0]["schema"]["openAPIV3Schema"].clone()
    }

    #[test]
    fn defaults_sit_on_each_kinds_own_spec_and_not_in_the_kubeflow_entries() {
        let training = schema("components.kubeflow.org_trainings.yaml");
        assert_eq!(
            training["properties"]["spec"]["properties"]["platform"]["default"],
            "auto"
        );
        assert_eq!(
            training["properties"]["spec"]["properties"]["crdPolicy"]["default"],
            "Retain"
        );
        let kf = schema("platform.kubeflow.org_kubeflows.yaml");
        assert_eq!(
            kf["properties"]["spec"]["properties"]["platform"]["default"],
            "auto"
        );
        let entry = &kf["properties"]["spec"]["properties"]["components"]["properties"]["training"]
            ["properties"]["spec"]["properties"];
        assert!(entry["platform"].is_object(), "{entry}");
        assert!(entry["platform"].get("default").is_none(), "{entry}");
        assert!(entry["crdPolicy"].get("default").is_none(), "{entry}");
    }

    #[test]
    fn every_kind_describes_itself_and_keys_its_conditions_by_type() {
        for (file, _) in super::all() {
            let s = schema(file);
            let about = s["description"].as_str().unwrap_or("");
            assert!(
                about.len() > 60 && !about.contains("Auto-generated"),
                "{file}: {about}"
            );
            let conditions = &s["properties"]["status"]["properties"]["conditions"];
            assert_eq!(conditions["x-kubernetes-list-type"], "map", "{file}");
            assert_eq!(conditions["x-kubernetes-list-map-keys"], json!(["type"]));
            assert_eq!(
                conditions["items"]["properties"]["status"]["enum"],
                json!(["True", "False", "Unknown"])
            );
            assert_eq!(
                conditions["items"]["properties"]["reason"]["maxLength"],
                1024
            );
        }
    }

    #[test]
    fn the_kubeflow_version_is_one_of_the_known_releases() {
        let kf = schema("platform.kubeflow.org_kubeflows.yaml");
        assert_eq!(
            kf["properties"]["spec"]["properties"]["version"]["enum"],
            json!(crate::kubeflow::RELEASES)
        );
    }
}
