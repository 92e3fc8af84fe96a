//! What the operator knows of Kubeflow Trainer v2: its bundle (Trainer's
//! controller and the JobSet controller it runs TrainJobs on), the
//! ClusterTrainingRuntimes it ships, and the controller's configuration file.
//!
//! Both controllers manage their own webhook certificates (Trainer's
//! `certManagement.enable`, JobSet's `internalCertManagement.enable`): they
//! fill the Secrets and the caBundles themselves, so the operator ships the
//! Secrets without data and never writes either.

use std::collections::BTreeMap;

use kubeflow_operator::api::components::trainer::TrainerController;
use kubeflow_operator::api::{ComponentResource, Platform, Trainer, TrainerStatus};
use kubeflow_operator::async_trait::async_trait;
use kubeflow_operator::certs;
use kubeflow_operator::component::{Component, Refusal, RenderContext, Rendered};
use kubeflow_operator::conditions::Reason;
use kubeflow_operator::kinds::kind;
use kubeflow_operator::kube::api::DynamicObject;
use kubeflow_operator::kube::{Client, ResourceExt};
use kubeflow_operator::rbac::Permissions;
use kubeflow_operator::render::{self, Layout, Target};
use kubeflow_operator::{openshift, transform};
use serde_json::{Map, Value, json};

/// The namespace the upstream bundle installs into.
const BUNDLE_NAMESPACE: &str = "kubeflow-system";
/// Trainer's controller Deployment (and ServiceAccount).
const TRAINER: &str = "kubeflow-trainer-controller-manager";
/// JobSet's controller Deployment (and ServiceAccount).
const JOBSET: &str = "jobset-controller-manager";
/// The ConfigMap holding Trainer's controller configuration file.
const CONFIG: &str = "kubeflow-trainer-config";
const CONFIG_KEY: &str = "controller_manager_config.yaml";
/// The Secrets the controllers fill with their own certificates.
const SELF_MANAGED_SECRETS: [&str; 2] = [
    "kubeflow-trainer-webhook-cert",
    "jobset-webhook-server-cert",
];
const RUNTIME_KIND: &str = "ClusterTrainingRuntime";
/// The container both Deployments name their controller.
const CONTAINER: &str = "manager";
/// cert-manager's injection annotation, which the JobSet CRD carries with an
/// unresolved kustomize variable; no cert-manager Certificate backs it.
const CERT_MANAGER_INJECT: &str = "cert-manager.io/inject-ca-from";
/// The OpenShift SCC both controllers' ServiceAccounts are granted: their
/// images run as their own non-root user.
const SCC: &str = "nonroot-v2";

/// The Trainer component.
pub struct TrainerComponent;

/// Names of the ClusterTrainingRuntimes among `objects`.
fn runtime_names(objects: &[DynamicObject]) -> Vec<String> {
    objects
        .iter()
        .filter(|o| kind(o) == RUNTIME_KIND)
        .filter_map(|o| o.metadata.name.clone())
        .collect()
}

/// Keeps only the chosen runtimes; a name the bundle lacks is refused.
fn select_runtimes(objects: &mut Vec<DynamicObject>, chosen: &[String]) -> Result<(), Refusal> {
    let available = runtime_names(objects);
    let unknown: Vec<&str> = chosen
        .iter()
        .filter(|c| !available.contains(c))
        .map(String::as_str)
        .collect();
    if !unknown.is_empty() {
        return Err(Refusal::new(
            Reason::InvalidSpec,
            format!(
                "spec.runtimes names ClusterTrainingRuntimes this version does not ship: {}; available: {}",
                unknown.join(", "),
                available.join(", ")
            ),
        ));
    }
    transform::remove(objects, |o| {
        kind(o) == RUNTIME_KIND
            && o.metadata
                .name
                .as_ref()
                .is_some_and(|n| !chosen.contains(n))
    });
    Ok(())
}

/// Image overrides name a Deployment, since both controllers' containers are
/// called `manager`: `{"jobset-controller-manager": "mirror/jobset:v0.10.1"}`.
fn set_images(
    objects: &mut [DynamicObject],
    images: &BTreeMap<String, String>,
) -> Result<(), Refusal> {
    let unknown: Vec<&str> = images
        .keys()
        .filter(|k| ![TRAINER, JOBSET].contains(&k.as_str()))
        .map(String::as_str)
        .collect();
    if !unknown.is_empty() {
        return Err(Refusal::new(
            Reason::InvalidSpec,
            format!(
                "spec.images names workloads this component does not have: {}; Trainer's images are set by Deployment: {TRAINER}, {JOBSET}",
                unknown.join(", ")
            ),
        ));
    }
    for (deployment, image) in images {
        let per_container = BTreeMap::from([(CONTAINER.to_string(), image.clone())]);
        for obj in objects
            .iter_mut()
            .filter(|o| kind(o) == "Deployment" && o.metadata.name.as_deref() == Some(deployment))
        {
            transform::set_images(std::slice::from_mut(obj), &per_container);
        }
    }
    Ok(())
}

/// The configuration-file fields `controller` sets.
fn controller_overrides(c: &TrainerController) -> Value {
    let mut out = Map::new();
    if let Some(n) = c.train_job_concurrency {
        out.insert(
            "controller".into(),
            json!({"groupKindConcurrency": {"TrainJob.trainer.kubeflow.org": n}}),
        );
    }
    let mut client = Map::new();
    if let Some(q) = c.qps {
        client.insert("qps".into(), json!(q));
    }
    if let Some(b) = c.burst {
        client.insert("burst".into(), json!(b));
    }
    if !client.is_empty() {
        out.insert("clientConnection".into(), Value::Object(client));
    }
    Value::Object(out)
}

fn configure_controller(
    objects: &mut [DynamicObject],
    controller: &TrainerController,
) -> Result<(), Refusal> {
    let overrides = controller_overrides(controller);
    if overrides.as_object().is_none_or(Map::is_empty) {
        return Ok(());
    }
    let cm = objects
        .iter_mut()
        .find(|o| kind(o) == "ConfigMap" && o.metadata.name.as_deref() == Some(CONFIG))
        .ok_or_else(|| {
            Refusal::new(
                Reason::BundleError,
                format!("the trainer bundle has no {CONFIG} ConfigMap for spec.controller"),
            )
        })?;
    let base = cm
        .data
        .pointer(&format!("/data/{CONFIG_KEY}"))
        .and_then(Value::as_str)
        .unwrap_or("");
    let merged = transform::merge_yaml(base, &overrides)
        .map_err(|m| Refusal::new(Reason::BundleError, m))?;
    cm.data["data"][CONFIG_KEY] = json!(merged);
    Ok(())
}

/// Leaves what the controllers manage themselves to them: the certificate
/// Secrets' data, and the JobSet CRD's dangling cert-manager annotation.
fn leave_certificates_to_the_controllers(objects: &mut [DynamicObject]) {
    for crd in objects
        .iter_mut()
        .filter(|o| kind(o) == "CustomResourceDefinition")
    {
        if let Some(a) = crd.metadata.annotations.as_mut()
            && a.get(CERT_MANAGER_INJECT).is_some_and(|v| v.contains("$("))
        {
            a.remove(CERT_MANAGER_INJECT);
        }
    }
    certs::leave_to_controller(objects, &SELF_MANAGED_SECRETS);
}

/// The version in an image reference's tag (`registry/jobset:v0.10.1` -> `v0.10.1`).
fn image_tag(image: &str) -> Option<&str> {
    let without_digest = image.split('@').next().unwrap_or(image);
    let last = without_digest.rsplit('/').next().unwrap_or(without_digest);
    last.split_once(':').map(|(_, tag)| tag)
}

#[async_trait]
impl Component for TrainerComponent {
    type Resource = Trainer;
    type Inputs = ();

    const LAYOUT: Layout = Layout {
        from_namespaces: &[BUNDLE_NAMESPACE],
        target: Target::ResourceNamespace,
        workloads: &[TRAINER, JOBSET],
    };

    fn permissions(&self) -> Permissions {
        Permissions::bundles(&[Trainer::COMPONENT]).openshift_scc(&[SCC])
    }

    /// Images go by Deployment: the shared step would match both programs'
    /// `manager` containers, so the shared settings apply without them.
    fn render(&self, cr: &Trainer, ctx: &RenderContext<'_>, _: &()) -> Result<Rendered, Refusal> {
        let spec = &cr.spec;
        let bundle = ctx.bundle()?;
        let version = bundle.version.clone();
        let mut objects = bundle.objects();
        // Images go by Deployment (below); the shared step would match both `manager` containers.
        let mut common = spec.common.clone();
        let images = std::mem::take(&mut common.images);
        render::apply_common(
            &mut objects,
            &common,
            &Self::LAYOUT.placement(ctx.namespace),
            ctx.platform,
        )?;
        set_images(&mut objects, &images)?;
        if let Some(chosen) = &spec.runtimes {
            let chosen: Vec<String> = chosen.iter().map(|r| r.0.clone()).collect();
            select_runtimes(&mut objects, &chosen)?;
        }
        if let Some(controller) = &spec.controller {
            configure_controller(&mut objects, controller)?;
        }
        leave_certificates_to_the_controllers(&mut objects);
        if ctx.platform == Platform::OpenShift {
            for sa in [TRAINER, JOBSET] {
                objects.push(openshift::scc_grant(ctx.namespace, sa, SCC));
            }
        }
        Ok(Rendered { objects, version })
    }

    async fn report(
        &self,
        _cr: &Trainer,
        live: &[DynamicObject],
        _client: &Client,
        status: &mut TrainerStatus,
    ) {
        let jobset_image = live
            .iter()
            .find(|o| kind(o) == "Deployment" && o.name_any() == JOBSET)
            .and_then(|d| d.data.pointer("/spec/template/spec/containers/0/image"))
            .and_then(Value::as_str);
        // A digest-only override has no tag: then the image says which JobSet runs.
        status.job_set_version =
            jobset_image.map(|image| image_tag(image).unwrap_or(image).to_string());
        let mut runtimes = runtime_names(live);
        runtimes.sort();
        status.runtimes = runtimes;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kubeflow_operator::api::common::Platform;
    use kubeflow_operator::bundle::BundleCache;
    use kubeflow_operator::component::{assert_permitted, every_version};
    use std::path::PathBuf;

    fn manifests() -> PathBuf {
        std::env::var_os("MANIFESTS_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| {
                PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/manifests")
            })
    }

    fn render_spec(spec: Value, platform: Platform) -> Result<Vec<DynamicObject>, Refusal> {
        let cr: Trainer = serde_json::from_value(json!({
            "apiVersion": "components.kubeflow.org/v1alpha1", "kind": "Trainer",
            "metadata": {"name": "kubeflow", "namespace": "ml"}, "spec": spec,
        }))
        .expect("a Trainer");
        let dir = manifests();
        let bundles = BundleCache::default();
        let ctx = RenderContext::of(&cr, &dir, &bundles, platform);
        TrainerComponent.render(&cr, &ctx, &()).map(|r| r.objects)
    }

    fn find<'a>(objects: &'a [DynamicObject], k: &str, name: &str) -> &'a DynamicObject {
        objects
            .iter()
            .find(|o| kind(o) == k && o.metadata.name.as_deref() == Some(name))
            .unwrap_or_else(|| panic!("{k} {name}"))
    }

    #[test]
    fn its_role_covers_what_it_renders_for_every_version_and_platform() {
        assert_permitted(&TrainerComponent, |dir| every_version(dir, "trainer"));
    }

    #[test]
    fn everything_moves_into_the_cr_namespace_and_every_runtime_is_installed_by_default() {
        let objects =
            render_spec(json!({"version": "v2.1.0"}), Platform::Kubernetes).expect("render");
        // Cluster-scoped objects keep kustomize's stray namespace until the
        // engine drops it; every namespaced one moves.
        let cluster = kubeflow_operator::kinds::cluster_scoped_custom_kinds(&objects);
        for o in objects
            .iter()
            .filter(|o| !kubeflow_operator::kinds::is_cluster_scoped(o, &cluster))
        {
            assert_eq!(
                o.metadata.namespace.as_deref(),
                Some("ml"),
                "{}",
                o.name_any()
            );
        }
        assert_eq!(runtime_names(&objects).len(), 6);
        let binding = find(&objects, "ClusterRoleBinding", TRAINER);
        assert_eq!(
            binding.data.pointer("/subjects/0/namespace"),
            Some(&json!("ml"))
        );
        let hooks = find(
            &objects,
            "ValidatingWebhookConfiguration",
            "validator.trainer.kubeflow.org",
        );
        assert_eq!(
            hooks
                .data
                .pointer("/webhooks/0/clientConfig/service/namespace"),
            Some(&json!("ml"))
        );
    }

    #[test]
    fn the_controllers_own_their_certificates() {
        let objects =
            render_spec(json!({"version": "v2.1.0"}), Platform::Kubernetes).expect("render");
        for name in SELF_MANAGED_SECRETS {
            let s = find(&objects, "Secret", name);
            assert!(
                s.data.get("data").is_none(),
                "{name} is shipped without data"
            );
        }
        for o in objects
            .iter()
            .filter(|o| kind(o).ends_with("WebhookConfiguration"))
        {
            let hooks = o.data["webhooks"].as_array().expect("webhooks");
            assert!(
                hooks
                    .iter()
                    .all(|h| h.pointer("/clientConfig/caBundle").is_none())
            );
        }
        let jobsets = find(
            &objects,
            "CustomResourceDefinition",
            "jobsets.jobset.x-k8s.io",
        );
        assert!(jobsets.annotations().get(CERT_MANAGER_INJECT).is_none());
    }

    #[test]
    fn runtimes_are_chosen_by_name_and_unknown_names_are_refused() {
        let objects = render_spec(
            json!({"version": "v2.1.0", "runtimes": ["torch-distributed"]}),
            Platform::Kubernetes,
        )
        .expect("render");
        assert_eq!(runtime_names(&objects), vec!["torch-distributed"]);
        let none = render_spec(
            json!({"version": "v2.1.0", "runtimes": []}),
            Platform::Kubernetes,
        )
        .expect("render");
        assert!(runtime_names(&none).is_empty());
        let err = render_spec(
            json!({"version": "v2.1.0", "runtimes": ["torch-distributed", "no-such-runtime"]}),
            Platform::Kubernetes,
        )
        .expect_err("refused");
        assert_eq!(err.reason, Reason::InvalidSpec);
        assert!(
            err.message.contains("no-such-runtime") && err.message.contains("mlx-distributed"),
            "{}",
            err.message
        );
    }

    #[test]
    fn images_go_by_deployment_and_controller_settings_reach_the_config_file() {
        let objects = render_spec(
            json!({"version": "v2.1.0",
                   "images": {JOBSET: "mirror.example/jobset:v0.10.1"},
                   "controller": {"trainJobConcurrency": 9, "qps": 20, "burst": 40}}),
            Platform::Kubernetes,
        )
        .expect("render");
        let image = |d: &str| {
            find(&objects, "Deployment", d)
                .data
                .pointer("/spec/template/spec/containers/0/image")
                .and_then(Value::as_str)
                .map(str::to_string)
        };
        assert_eq!(
            image(JOBSET).as_deref(),
            Some("mirror.example/jobset:v0.10.1")
        );
        assert_eq!(
            image(TRAINER).as_deref(),
            Some("ghcr.io/kubeflow/trainer/trainer-controller-manager:v2.1.0"),
            "the other controller keeps its image"
        );
        let text = find(&objects, "ConfigMap", CONFIG).data["data"][CONFIG_KEY]
            .as_str()
            .expect("config")
            .to_string();
        assert!(text.contains("TrainJob.trainer.kubeflow.org: 9"), "{text}");
        assert!(
            text.contains("qps: 20") && text.contains("burst: 40"),
            "{text}"
        );
        assert!(
            text.contains("webhookSecretName: kubeflow-trainer-webhook-cert"),
            "the rest is kept: {text}"
        );

        let err = render_spec(
            json!({"version": "v2.1.0", "images": {"manager": "x:1"}}),
            Platform::Kubernetes,
        )
        .expect_err("refused");
        assert!(
            err.message.contains(JOBSET) && err.message.contains("manager"),
            "{}",
            err.message
        );
    }

    #[test]
    fn openshift_grants_both_service_accounts_the_scc() {
        let objects =
            render_spec(json!({"version": "v2.1.0"}), Platform::OpenShift).expect("render");
        let grants: Vec<&DynamicObject> = objects
            .iter()
            .filter(|o| {
                o.data
                    .pointer("/roleRef/name")
                    .and_then(Value::as_str)
                    .is_some_and(|n| n.contains(SCC))
            })
            .collect();
        assert_eq!(grants.len(), 2, "one grant per controller");
    }

    #[test]
    fn image_tags() {
        assert_eq!(
            image_tag("registry.k8s.io/jobset/jobset:v0.10.1"),
            Some("v0.10.1")
        );
        assert_eq!(image_tag("localhost:5000/jobset:v1@sha256:ab"), Some("v1"));
        assert_eq!(image_tag("localhost:5000/jobset@sha256:ab"), None);
    }
}
