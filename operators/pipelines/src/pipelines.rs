//! What the operator knows of Kubeflow Pipelines: its two bundle files, the
//! stores it can use, which volumes hold data, its run-time cache webhook, and
//! its OpenShift needs.

use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use kubeflow_operator::api::components::pipelines::VolumePolicy;
use kubeflow_operator::api::{Pipelines, Platform};
use kubeflow_operator::async_trait::async_trait;
use kubeflow_operator::cleanup::delete_if_present;
use kubeflow_operator::component::{
    Component, DereferenceError, Reference, Refusal, RenderContext, Rendered,
};
use kubeflow_operator::kinds::kind;
use kubeflow_operator::kube::api::{Api, DynamicObject};
use kubeflow_operator::kube::{Client, ResourceExt};
use kubeflow_operator::rbac::{self, Permissions};
use kubeflow_operator::render::{self, Placement};
use kubeflow_operator::{openshift, transform};

use crate::stores;

/// The namespace the upstream bundle installs into.
const BUNDLE_NAMESPACE: &str = "kubeflow";
/// Workloads the common replicas/resources settings apply to: the API server and the UI.
const WORKLOADS: &[&str] = &["ml-pipeline", "ml-pipeline-ui"];
/// The Argo workflow controller's ConfigMap.
const WORKFLOW_CONFIG: &str = "workflow-controller-configmap";
/// The OpenShift SCC the pipelines ServiceAccounts are granted (the bundled images run as fixed users).
const SCC: &str = "anyuid";
/// The webhook configuration the cache deployer registers, `{}` its namespace.
const CACHE_WEBHOOK: &str = "cache-webhook-{}";

/// The Pipelines component.
pub struct PipelinesComponent;

#[async_trait]
impl Component for PipelinesComponent {
    type Resource = Pipelines;
    type Inputs = ();

    fn permissions(&self) -> Permissions {
        // The cache webhook the cache deployer registers at run time
        // (`cache-webhook-<namespace>`) is removed on deletion: `delete` on
        // exactly that name in each allowed namespace.
        Permissions::bundles(&["pipelines"])
            .openshift_scc(&[SCC])
            .with_per_namespace([rbac::named(
                "admissionregistration.k8s.io",
                "mutatingwebhookconfigurations",
                &[CACHE_WEBHOOK.replace("{}", "{namespace}")],
                &["delete"],
            )])
    }

    fn references(cr: &Pipelines) -> Vec<Reference> {
        let mut out = Vec::new();
        if let Some(db) = cr.spec.database.as_ref().and_then(|d| d.external.as_ref()) {
            out.push(Reference::Secret(db.credentials_secret.clone()));
        }
        if let Some(s) = cr
            .spec
            .object_store
            .as_ref()
            .and_then(|s| s.external.as_ref())
        {
            out.push(Reference::Secret(s.access_key.name.clone()));
            out.push(Reference::Secret(s.secret_key.name.clone()));
        }
        out
    }

    async fn dereference(&self, cr: &Pipelines, client: &Client) -> Result<(), DereferenceError> {
        let ns = cr.namespace().unwrap_or_default();
        if let Some(db) = cr.spec.database.as_ref().and_then(|d| d.external.as_ref()) {
            stores::require_secret(
                client,
                &ns,
                &db.credentials_secret,
                &["username", "password"],
            )
            .await?;
        }
        if let Some(s) = cr
            .spec
            .object_store
            .as_ref()
            .and_then(|s| s.external.as_ref())
        {
            stores::require_secret(
                client,
                &ns,
                &s.access_key.name,
                &[s.access_key.key.as_str()],
            )
            .await?;
            stores::require_secret(
                client,
                &ns,
                &s.secret_key.name,
                &[s.secret_key.key.as_str()],
            )
            .await?;
        }
        Ok(())
    }

    fn render(&self, cr: &Pipelines, ctx: &RenderContext<'_>, _: &()) -> Result<Rendered, Refusal> {
        let spec = &cr.spec;
        let bundle = ctx.bundle()?;
        let version = bundle.version.clone();
        let mut objects = bundle.objects();
        let placement = Placement {
            from_namespaces: &[BUNDLE_NAMESPACE],
            target: ctx.namespace,
            workloads: WORKLOADS,
        };
        render::apply_common(&mut objects, &spec.common, &placement, ctx.platform)?;
        transform::rewrite_service_hosts(&mut objects, BUNDLE_NAMESPACE, ctx.namespace);
        if let Some(db) = spec.database.as_ref().and_then(|d| d.external.as_ref()) {
            stores::use_external_database(&mut objects, db);
        }
        if let Some(store) = spec.object_store.as_ref().and_then(|s| s.external.as_ref()) {
            stores::use_external_object_store(&mut objects, store);
        }
        if ctx.platform == Platform::OpenShift {
            // Argo's emissary executor needs no privileged access to the container runtime.
            transform::set_config(
                &mut objects,
                WORKFLOW_CONFIG,
                &[("containerRuntimeExecutor", "emissary".to_string())],
            );
            let store_accounts: Vec<String> = objects
                .iter()
                .filter(|o| {
                    kind(o) == "ServiceAccount"
                        && (stores::bundled_database(o) || stores::bundled_object_store(o))
                })
                .filter_map(|o| o.metadata.name.clone())
                .collect();
            for sa in store_accounts {
                objects.push(openshift::scc_grant(ctx.namespace, &sa, SCC));
            }
        }
        Ok(Rendered { objects, version })
    }

    /// The bundled stores' volumes outlive the component unless the spec says otherwise.
    fn retain(&self, cr: &Pipelines, obj: &DynamicObject) -> bool {
        kind(obj) == "PersistentVolumeClaim"
            && cr.spec.volume_policy.unwrap_or_default() == VolumePolicy::Retain
    }

    /// The cache deployer registers `cache-webhook-<namespace>` at run time.
    async fn cleanup_run_time_objects(
        &self,
        cr: &Pipelines,
        client: &Client,
    ) -> Result<Vec<String>, kubeflow_operator::kube::Error> {
        let name = CACHE_WEBHOOK.replace("{}", &cr.namespace().unwrap_or_default());
        let api: Api<MutatingWebhookConfiguration> = Api::all(client.clone());
        Ok(if delete_if_present(&api, &name).await? {
            vec![format!("MutatingWebhookConfiguration {name}")]
        } else {
            Vec::new()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kubeflow_operator::component::{assert_permitted, every_version};

    #[test]
    fn its_role_covers_what_it_renders_for_every_version_and_platform() {
        assert_permitted(&PipelinesComponent, |dir| every_version(dir, "pipelines"));
    }

    #[test]
    fn the_cache_webhook_is_removed_by_its_name_in_each_allowed_namespace() {
        let dir = kubeflow_operator::component::manifests_dir();
        let rules =
            kubeflow_operator::component::rules_of(&PipelinesComponent, &dir).expect("rules");
        let webhooks = "mutatingwebhookconfigurations";
        let group = "admissionregistration.k8s.io";
        assert!(rbac::allows_named(
            &rules.cluster_per_namespace,
            group,
            webhooks,
            "delete",
            "cache-webhook-{namespace}"
        ));
        // No other webhook configuration may it delete.
        assert!(!rbac::allows(&rules.cluster, group, webhooks, "delete"));
        assert!(!rbac::allows(
            &rules.cluster_per_namespace,
            group,
            webhooks,
            "delete"
        ));
    }
}
