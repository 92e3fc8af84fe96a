//! What the operator knows of Kubeflow Notebooks: its controllers and web
//! apps, where culling and the spawner form are configured, and what it
//! needs from Istio and cert-manager.
//!
//! The notebook controller reads its culling settings from environment
//! variables (from its ConfigMap) at start, so they are written on its
//! Deployment too: a change rolls it. The Jupyter web app reads its form's
//! configuration file from its ConfigMap; the images that file offers are
//! moved by `imageRegistry` with every other image.

use kubeflow_operator::api::{Culling, Notebooks};
use kubeflow_operator::async_trait::async_trait;
use kubeflow_operator::component::{Component, DereferenceError, Draft, Refusal, require_crd};
use kubeflow_operator::kinds::kind;
use kubeflow_operator::kube::Client;
use kubeflow_operator::kube::api::DynamicObject;
use kubeflow_operator::render::{Layout, Target};
use kubeflow_operator::serde_json::{Value, json};
use kubeflow_operator::transform;

use crate::spawner;

/// The namespace the upstream bundle installs into.
const BUNDLE_NAMESPACE: &str = "kubeflow";
/// The controllers and web apps (replicas, resources and scheduling apply to all).
const WORKLOADS: [&str; 6] = [
    "notebook-controller-deployment",
    "jupyter-web-app-deployment",
    "volumes-web-app-deployment",
    "tensorboard-controller-deployment",
    "tensorboards-web-app-deployment",
    "pvcviewer-controller-manager",
];
/// The notebook controller, which culls.
const CONTROLLER: &str = "notebook-controller-deployment";
/// Its ConfigMap's name, before kustomize's content hash.
const CONTROLLER_CONFIG: &str = "notebook-controller-config-";
/// The Jupyter web app's ConfigMap, before the hash, and its file.
const SPAWNER_CONFIG: &str = "jupyter-web-app-config-";
const SPAWNER_FILE: &str = "spawner_ui_config.yaml";

/// The Notebooks component.
pub struct NotebooksComponent;

#[async_trait]
impl Component for NotebooksComponent {
    type Resource = Notebooks;
    type Inputs = ();

    const LAYOUT: Layout = Layout {
        from_namespaces: &[BUNDLE_NAMESPACE],
        target: Target::ResourceNamespace,
        workloads: &WORKLOADS,
    };

    async fn dereference(&self, _cr: &Notebooks, client: &Client) -> Result<(), DereferenceError> {
        // The web apps' VirtualServices and AuthorizationPolicies, and the
        // PVC viewer's Issuer and Certificate, are kinds of these two.
        require_crd(
            client,
            "virtualservices.networking.istio.io",
            "Notebooks' web apps route through Istio; enable istio in the Kubeflow resource (or install Istio)",
        )
        .await?;
        require_crd(
            client,
            "certificates.cert-manager.io",
            "Notebooks' PVC viewer gets its webhook certificate from cert-manager; enable certManager in the Kubeflow resource (or install cert-manager)",
        )
        .await
    }

    fn prepare(&self, draft: &mut Draft<'_, Self>) -> Result<(), Refusal> {
        let cr = draft.cr;
        let spec = &cr.spec;
        let objects = &mut draft.objects;
        if let Some(culling) = &spec.culling {
            cull(objects, culling);
        }
        // Before the common settings: the images the form offers move with
        // the mirror like the rest.
        if let Some(s) = &spec.spawner {
            for cm in transform::config_maps(objects, SPAWNER_CONFIG) {
                let text = cm.data["data"][SPAWNER_FILE].as_str().unwrap_or_default();
                cm.data["data"][SPAWNER_FILE] = Value::String(spawner::merged(text, s)?);
            }
        }
        Ok(())
    }
}

/// The culling settings, in the controller's ConfigMap and as plain values
/// of its environment (so that a change rolls the controller).
fn cull(objects: &mut [DynamicObject], culling: &Culling) {
    let settings: Vec<(&str, String)> = [
        ("ENABLE_CULLING", culling.enabled.map(|e| e.to_string())),
        (
            "CULL_IDLE_TIME",
            culling.idle_minutes.map(|m| m.to_string()),
        ),
        (
            "IDLENESS_CHECK_PERIOD",
            culling.check_period_minutes.map(|m| m.to_string()),
        ),
    ]
    .into_iter()
    .filter_map(|(k, v)| Some((k, v?)))
    .collect();
    for cm in transform::config_maps(objects, CONTROLLER_CONFIG) {
        for (k, v) in &settings {
            cm.data["data"][*k] = Value::String(v.clone());
        }
    }
    for d in objects
        .iter_mut()
        .filter(|o| kind(o) == "Deployment" && o.metadata.name.as_deref() == Some(CONTROLLER))
    {
        let Some(pod) = transform::pod_spec_mut(d) else {
            continue;
        };
        for container in pod["containers"].as_array_mut().into_iter().flatten() {
            for env in container["env"].as_array_mut().into_iter().flatten() {
                if let Some((_, v)) = settings.iter().find(|(k, _)| env["name"] == *k) {
                    *env = json!({"name": env["name"], "value": v});
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kubeflow_operator::component::{
        Rendered, assert_permitted, every_version, find, render_spec,
    };

    #[test]
    fn its_role_covers_what_it_renders_for_every_version_and_platform() {
        assert_permitted(&NotebooksComponent, |dir| every_version(dir, "notebooks"));
    }

    fn config_map<'a>(r: &'a Rendered, prefix: &str) -> &'a DynamicObject {
        r.objects
            .iter()
            .find(|o| {
                kind(o) == "ConfigMap"
                    && o.metadata
                        .name
                        .as_deref()
                        .is_some_and(|n| n.starts_with(prefix))
            })
            .expect("config map")
    }

    #[test]
    fn culling_reaches_the_config_map_and_the_controllers_environment() {
        for version in ["v1.10.0", "v1.11.0"] {
            let r = render_spec(
                &NotebooksComponent,
                json!({"version": version, "culling": {"enabled": true, "idleMinutes": 60}}),
                &(),
            )
            .expect("render");
            let data = &config_map(&r, CONTROLLER_CONFIG).data["data"];
            assert_eq!(data["ENABLE_CULLING"], "true", "{version}");
            assert_eq!(data["CULL_IDLE_TIME"], "60");
            assert_eq!(data["IDLENESS_CHECK_PERIOD"], "1", "unset: the release's");
            let d = find(&r, "Deployment", CONTROLLER).expect("controller");
            let env = d.data["spec"]["template"]["spec"]["containers"][0]["env"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            let of = |name: &str| env.iter().find(|e| e["name"] == name).cloned();
            assert_eq!(
                of("ENABLE_CULLING"),
                Some(json!({"name": "ENABLE_CULLING", "value": "true"}))
            );
            assert_eq!(
                of("CULL_IDLE_TIME"),
                Some(json!({"name": "CULL_IDLE_TIME", "value": "60"}))
            );
            assert!(
                of("IDLENESS_CHECK_PERIOD").is_some_and(|e| e.get("valueFrom").is_some()),
                "unset: still from the ConfigMap"
            );
        }
    }

    #[test]
    fn the_spawners_images_move_with_the_mirror() {
        let r = render_spec(
            &NotebooksComponent,
            json!({"version": "v1.11.0", "imageRegistry": "mirror.example:5000",
                   "spawner": {"images": ["quay.io/team/lab:2"], "storageClass": "fast"}}),
            &(),
        )
        .expect("render");
        let text = config_map(&r, SPAWNER_CONFIG).data["data"][SPAWNER_FILE]
            .as_str()
            .unwrap_or_default()
            .to_string();
        assert!(text.contains("mirror.example:5000/team/lab:2"), "{text}");
        assert!(
            !text.contains("ghcr.io/"),
            "every offered image moved: {text}"
        );
        assert!(text.contains("storageClassName: fast"), "{text}");
        let refused = render_spec(
            &NotebooksComponent,
            json!({"version": "v1.11.0", "spawner": {"cpu": "-1"}}),
            &(),
        )
        .err()
        .expect("refused");
        assert!(
            refused.message.contains("spec.spawner.cpu"),
            "{}",
            refused.message
        );
    }
}
