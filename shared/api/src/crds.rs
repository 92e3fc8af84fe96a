//! CRD generation: the YAML in `crds/` is made from these types.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceDefinition, JSON, JSONSchemaProps,
};
use kube::CustomResourceExt;
use kube::core::object::HasSpec;

use crate::Kubeflow;
use crate::components::{ComponentResource, ComponentSpec};

/// Every CRD of the project, with the file name it is kept under in `crds/`:
/// the `Kubeflow` kind's, then each component's in the registry's order.
pub fn all() -> Vec<(&'static str, CustomResourceDefinition)> {
    let mut all = vec![(
        "platform.kubeflow.org_kubeflows.yaml",
        with_defaults(Kubeflow::crd(), &[("platform", "auto")]),
    )];
    all.extend(component_crds());
    all
}

/// A component kind's CRD: the shared defaults, and its own wording of the
/// shared `version` and `images` fields.
fn component<K>() -> CustomResourceDefinition
where
    K: ComponentResource + CustomResourceExt + HasSpec<Spec: ComponentSpec>,
{
    with_descriptions(
        with_defaults(K::crd(), COMPONENT_DEFAULTS),
        &[
            ("version", K::Spec::VERSION_DOC),
            ("images", K::Spec::IMAGES_DOC),
        ],
    )
}

/// [`component_crds`] from the registry's entries.
macro_rules! component_crds {
    ($($module:ident $kind:ident $name:tt $field:tt $plural:tt [$($doc:tt)*] $component:tt)*) => {
        /// Each component kind's CRD, in the registry's order.
        fn component_crds() -> Vec<(&'static str, CustomResourceDefinition)> {
            vec![$((
                concat!("components.kubeflow.org_", $plural, ".yaml"),
                component::<crate::components::$module::$kind>(),
            )),*]
        }
    };
}

crate::for_each_component!(component_crds);

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
