//! The Jupyter web app's form for a new notebook: `spec.spawner` merged into
//! its `spawner_ui_config.yaml` (the `spawnerFormDefaults` the app reads),
//! each setting checked first so that a bad one is refused by name.

use kubeflow_operator::api::{Spawner, SpawnerGpu};
use kubeflow_operator::component::Refusal;
use kubeflow_operator::conditions::Reason;
use kubeflow_operator::serde_json::{Value, json};
use kubeflow_operator::{quantity, transform, validate};

fn invalid(message: String) -> Refusal {
    Refusal::new(Reason::InvalidSpec, message)
}

/// The bundle's configuration with `spawner` merged in.
pub fn merged(config: &str, spawner: &Spawner) -> Result<String, Refusal> {
    let base: Value = kubeflow_operator::serde_saphyr::from_str(config)
        .map_err(|e| invalid(format!("the bundle's spawner_ui_config.yaml: {e}")))?;
    let defaults = &base["spawnerFormDefaults"];
    let mut form = serde_json::Map::new();

    if spawner.images.is_some() || spawner.default_image.is_some() {
        form.insert("image".into(), image(defaults, spawner)?);
    }
    for (field, value, key) in [
        ("spec.spawner.cpu", &spawner.cpu, "cpu"),
        ("spec.spawner.memory", &spawner.memory, "memory"),
    ] {
        if let Some(v) = value {
            if quantity::quantity(v).is_none_or(|q| q <= 0) {
                return Err(invalid(format!(
                    "{field} {v:?} is not a positive quantity (e.g. \"500m\", \"2Gi\")"
                )));
            }
            form.insert(key.into(), json!({"value": v}));
        }
    }
    if let Some(gpu) = &spawner.gpu {
        form.insert("gpus".into(), gpus(defaults, gpu)?);
    }
    if let Some(class) = &spawner.storage_class {
        form.insert(
            "workspaceVolume".into(),
            json!({"value": {"newPvc": {"spec": {"storageClassName": class}}}}),
        );
    }
    transform::merge_yaml(config, &json!({ "spawnerFormDefaults": form })).map_err(invalid)
}

/// The offered Jupyter images and the default one.
fn image(defaults: &Value, spawner: &Spawner) -> Result<Value, Refusal> {
    let offered: Vec<String> = match &spawner.images {
        Some(images) => {
            for (i, img) in images.iter().enumerate() {
                validate::image(&format!("spec.spawner.images[{i}]"), img).map_err(invalid)?;
            }
            images.clone()
        }
        None => defaults["image"]["options"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|v| v.as_str().map(str::to_string))
            .collect(),
    };
    let current = defaults["image"]["value"].as_str().unwrap_or_default();
    let default = match &spawner.default_image {
        Some(d) if offered.contains(d) => d.clone(),
        Some(d) => {
            return Err(invalid(format!(
                "spec.spawner.defaultImage {d:?} is not among the images offered: {}",
                offered.join(", ")
            )));
        }
        // The release's default while it is still offered, else the first.
        None if offered.iter().any(|o| o == current) => current.to_string(),
        None => offered.first().cloned().unwrap_or_default(),
    };
    Ok(json!({"value": default, "options": offered}))
}

/// The default GPU count and vendor, the vendor one the form offers.
fn gpus(defaults: &Value, gpu: &SpawnerGpu) -> Result<Value, Refusal> {
    let vendors: Vec<&str> = defaults["gpus"]["value"]["vendors"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|v| v["limitsKey"].as_str())
        .collect();
    let vendor = match &gpu.vendor {
        Some(v) if vendors.contains(&v.as_str()) => v.clone(),
        Some(v) => {
            return Err(invalid(format!(
                "spec.spawner.gpu.vendor {v:?} is not one the form offers: {}",
                vendors.join(", ")
            )));
        }
        None if gpu.count > 0 => {
            return Err(invalid(format!(
                "spec.spawner.gpu.vendor is required with a count above 0: one of {}",
                vendors.join(", ")
            )));
        }
        None => String::new(),
    };
    let num = if gpu.count == 0 {
        "none".to_string()
    } else {
        gpu.count.to_string()
    };
    Ok(json!({"value": {"num": num, "vendor": vendor}}))
}

#[cfg(test)]
mod tests {
    use super::*;

    const CONFIG: &str = "spawnerFormDefaults:\n  image:\n    value: ghcr.io/kubeflow/jupyter-scipy:v1\n    options:\n    - ghcr.io/kubeflow/jupyter-scipy:v1\n    - ghcr.io/kubeflow/jupyter-pytorch:v1\n  cpu:\n    value: '0.5'\n    limitFactor: '1.2'\n  gpus:\n    value:\n      num: none\n      vendor: ''\n      vendors:\n      - limitsKey: nvidia.com/gpu\n        uiName: NVIDIA\n  workspaceVolume:\n    value:\n      mount: /home/jovyan\n";

    fn form(spawner: Spawner) -> Value {
        let text = merged(CONFIG, &spawner).expect("merged");
        let doc: Value = kubeflow_operator::serde_saphyr::from_str(&text).expect("yaml");
        doc["spawnerFormDefaults"].clone()
    }

    #[test]
    fn settings_land_in_the_form_defaults_and_keep_the_rest() {
        let f = form(Spawner {
            images: Some(vec!["registry.example/team/lab:2".into()]),
            cpu: Some("2".into()),
            memory: Some("4Gi".into()),
            gpu: Some(SpawnerGpu {
                count: 1,
                vendor: Some("nvidia.com/gpu".into()),
            }),
            storage_class: Some("fast-ssd".into()),
            ..Default::default()
        });
        assert_eq!(
            f["image"],
            json!({"value": "registry.example/team/lab:2", "options": ["registry.example/team/lab:2"]})
        );
        assert_eq!(f["cpu"], json!({"value": "2", "limitFactor": "1.2"}));
        assert_eq!(f["memory"]["value"], "4Gi");
        assert_eq!(f["gpus"]["value"]["num"], "1");
        assert_eq!(f["gpus"]["value"]["vendors"][0]["uiName"], "NVIDIA");
        assert_eq!(
            f["workspaceVolume"]["value"],
            json!({"mount": "/home/jovyan", "newPvc": {"spec": {"storageClassName": "fast-ssd"}}})
        );
        // Only a default: the release's list stays.
        let f = form(Spawner {
            default_image: Some("ghcr.io/kubeflow/jupyter-pytorch:v1".into()),
            ..Default::default()
        });
        assert_eq!(f["image"]["options"].as_array().map(Vec::len), Some(2));
        assert_eq!(f["image"]["value"], "ghcr.io/kubeflow/jupyter-pytorch:v1");
    }

    #[test]
    fn a_bad_setting_is_refused_by_its_field() {
        let refused = |s: Spawner, field: &str| {
            let r = merged(CONFIG, &s).expect_err("refused");
            assert_eq!(r.reason, Reason::InvalidSpec);
            assert!(r.message.contains(field), "{field}: {}", r.message);
        };
        refused(
            Spawner {
                default_image: Some("elsewhere/lab:1".into()),
                ..Default::default()
            },
            "spec.spawner.defaultImage",
        );
        refused(
            Spawner {
                images: Some(vec!["Not An Image".into()]),
                ..Default::default()
            },
            "spec.spawner.images[0]",
        );
        refused(
            Spawner {
                memory: Some("lots".into()),
                ..Default::default()
            },
            "spec.spawner.memory",
        );
        refused(
            Spawner {
                gpu: Some(SpawnerGpu {
                    count: 1,
                    vendor: Some("example.com/tpu".into()),
                }),
                ..Default::default()
            },
            "spec.spawner.gpu.vendor",
        );
        refused(
            Spawner {
                gpu: Some(SpawnerGpu {
                    count: 2,
                    vendor: None,
                }),
                ..Default::default()
            },
            "spec.spawner.gpu.vendor",
        );
    }
}
