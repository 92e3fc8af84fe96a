//! What the operator knows of KServe: its webhook certificate (from
//! cert-manager or generated), the `inferenceservice-config` ConfigMap, and
//! its ClusterServingRuntimes.

use kubeflow_operator::api::components::serving::{CertificateSource, DeploymentMode};
use kubeflow_operator::api::{Platform, Serving};
use kubeflow_operator::async_trait::async_trait;
use kubeflow_operator::certs::{self, WebhookCert};
use kubeflow_operator::component::{
    Component, DereferenceError, Refusal, RenderContext, Rendered, require_crd,
};
use kubeflow_operator::conditions::Reason;
use kubeflow_operator::kinds::kind;
use kubeflow_operator::kube::api::DynamicObject;
use kubeflow_operator::kube::{Client, ResourceExt};
use kubeflow_operator::rbac::Permissions;
use kubeflow_operator::render::{self, Placement};
use kubeflow_operator::{openshift, transform};
use serde_json::{Value, json};

const BUNDLE_NAMESPACE: &str = "kubeflow";
const CONTROLLER: &str = "kserve-controller-manager";
const WEBHOOK_SERVICE: &str = "kserve-webhook-server-service";
/// The Secret the controller mounts its webhook certificate from (cert-manager's Certificate writes it).
const CERT_SECRET: &str = "kserve-webhook-server-cert";
const CONFIG: &str = "inferenceservice-config";
/// The OpenShift SCC the controller's ServiceAccount is granted.
const SCC: &str = "nonroot-v2";
const CERT_MANAGER_CRD: &str = "certificates.cert-manager.io";
/// Serverless mode runs InferenceServices as Knative Services.
const KNATIVE_CRD: &str = "services.serving.knative.dev";
const INJECT: &str = "cert-manager.io/inject-ca-from";

/// The Serving component.
pub struct ServingComponent;

fn source(cr: &Serving) -> CertificateSource {
    cr.spec.certificates.unwrap_or_default()
}

/// Rewrites a JSON document held in a ConfigMap key.
fn edit_json(
    objects: &mut [DynamicObject],
    key: &str,
    edit: impl Fn(&mut Value),
) -> Result<(), Refusal> {
    for cm in objects
        .iter_mut()
        .filter(|o| kind(o) == "ConfigMap" && o.metadata.name.as_deref() == Some(CONFIG))
    {
        let text = cm
            .data
            .pointer(&format!("/data/{key}"))
            .and_then(Value::as_str)
            .unwrap_or("{}");
        let mut doc: Value = serde_json::from_str(text).map_err(|e| {
            Refusal::new(
                Reason::BundleError,
                format!("{CONFIG} key {key} is not JSON: {e}"),
            )
        })?;
        edit(&mut doc);
        cm.data["data"][key] = json!(serde_json::to_string_pretty(&doc).unwrap_or_default());
    }
    Ok(())
}

#[async_trait]
impl Component for ServingComponent {
    type Resource = Serving;
    type Inputs = Option<WebhookCert>;

    fn permissions(&self) -> Permissions {
        Permissions::bundles(&["serving"]).openshift_scc(&[SCC])
    }

    async fn dereference(
        &self,
        cr: &Serving,
        client: &Client,
    ) -> Result<Option<WebhookCert>, DereferenceError> {
        let ns = cr.namespace().unwrap_or_default();
        if cr.spec.deployment_mode == Some(DeploymentMode::Serverless) {
            require_crd(
                client,
                KNATIVE_CRD,
                "spec.deploymentMode is Serverless but Knative Serving is not installed; enable knative in the Kubeflow resource (or install Knative Serving), or use RawDeployment",
            )
            .await?;
        }
        match source(cr) {
            CertificateSource::CertManager => {
                require_crd(
                    client,
                    CERT_MANAGER_CRD,
                    "spec.certificates is cert-manager but cert-manager is not installed; install it or use self-signed",
                )
                .await?;
                Ok(None)
            }
            CertificateSource::SelfSigned => {
                certs::load_or_generate(client, &ns, CERT_SECRET, WEBHOOK_SERVICE)
                    .await
                    .map(Some)
                    .map_err(|e| match e {
                        certs::CertError::Read(_, source) => {
                            DereferenceError::Api("read the webhook certificate", source)
                        }
                        other => Refusal::new(Reason::CertificateError, other.to_string()).into(),
                    })
            }
        }
    }

    fn render(
        &self,
        cr: &Serving,
        ctx: &RenderContext<'_>,
        cert: &Option<WebhookCert>,
    ) -> Result<Rendered, Refusal> {
        let spec = &cr.spec;
        let bundle = ctx.bundle()?;
        let version = bundle.version.clone();
        let mut objects = bundle.objects();
        let placement = Placement {
            from_namespaces: &[BUNDLE_NAMESPACE],
            target: ctx.namespace,
            workloads: &[CONTROLLER],
        };
        render::apply_common(&mut objects, &spec.common, &placement, ctx.platform)?;

        match cert {
            Some(cert) => use_generated_cert(&mut objects, cert, ctx.namespace)?,
            None => follow_cert_manager(&mut objects, ctx.namespace),
        }
        let mode = match spec.deployment_mode.unwrap_or_default() {
            DeploymentMode::RawDeployment => "RawDeployment",
            DeploymentMode::Serverless => "Serverless",
        };
        edit_json(&mut objects, "deploy", |d| {
            d["defaultDeploymentMode"] = json!(mode)
        })?;
        if let Some(gw) = &spec.ingress_gateway {
            edit_json(&mut objects, "ingress", |d| d["ingressGateway"] = json!(gw))?;
        }
        if let Some(wanted) = &spec.serving_runtimes {
            select_runtimes(&mut objects, wanted)?;
        }
        if ctx.platform == Platform::OpenShift {
            objects.push(openshift::scc_grant(ctx.namespace, CONTROLLER, SCC));
        }
        Ok(Rendered { objects, version })
    }
}

/// The operator's own certificate: no cert-manager objects or injection
/// annotations; the TLS Secret and the webhooks' caBundle come from `cert`.
fn use_generated_cert(
    objects: &mut Vec<DynamicObject>,
    cert: &WebhookCert,
    namespace: &str,
) -> Result<(), Refusal> {
    transform::remove(objects, |o| matches!(kind(o), "Issuer" | "Certificate"));
    for o in objects.iter_mut() {
        if let Some(a) = o.metadata.annotations.as_mut() {
            a.remove(INJECT);
        }
    }
    let mut secret: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
        "metadata": {"name": CERT_SECRET, "namespace": namespace},
    }))
    .map_err(|e| Refusal::new(Reason::BundleError, e.to_string()))?;
    secret.data["data"] = json!({});
    objects.push(secret);
    certs::fill_secret(objects, CERT_SECRET, cert);
    certs::set_ca_bundle(objects, WEBHOOK_SERVICE, cert);
    Ok(())
}

/// cert-manager's objects follow the namespace, so must the names it
/// injects and signs.
fn follow_cert_manager(objects: &mut [DynamicObject], namespace: &str) {
    let from = format!("{BUNDLE_NAMESPACE}/");
    let to = format!("{namespace}/");
    for o in objects.iter_mut() {
        if let Some(v) = o
            .metadata
            .annotations
            .as_mut()
            .and_then(|a| a.get_mut(INJECT))
        {
            *v = v.replacen(&from, &to, 1);
        }
        if kind(o) == "Certificate" {
            let dns = certs::service_dns(WEBHOOK_SERVICE, namespace);
            o.data["spec"]["commonName"] = json!(dns);
            o.data["spec"]["dnsNames"] = json!([dns]);
        }
    }
}

/// Keeps only the wanted ClusterServingRuntimes; an unknown name is refused
/// with the list of those this version has.
fn select_runtimes(objects: &mut Vec<DynamicObject>, wanted: &[String]) -> Result<(), Refusal> {
    let available: Vec<String> = objects
        .iter()
        .filter(|o| kind(o) == "ClusterServingRuntime")
        .filter_map(|o| o.metadata.name.clone())
        .collect();
    let unknown: Vec<&String> = wanted.iter().filter(|w| !available.contains(w)).collect();
    if !unknown.is_empty() {
        return Err(Refusal::new(
            Reason::InvalidSpec,
            format!(
                "unknown servingRuntimes {unknown:?}; this version has {}",
                available.join(", ")
            ),
        ));
    }
    transform::remove(objects, |o| {
        kind(o) == "ClusterServingRuntime"
            && !o.metadata.name.as_ref().is_some_and(|n| wanted.contains(n))
    });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use kubeflow_operator::component::{assert_permitted, every_version};

    #[test]
    fn its_role_covers_what_it_renders_for_every_version_and_platform() {
        assert_permitted(&ServingComponent, |dir| {
            let mut s = every_version(dir, "serving");
            // The other certificate source and deployment mode render other objects.
            for v in every_version(dir, "serving") {
                let mut spec = v.clone();
                spec["certificates"] = "cert-manager".into();
                spec["deploymentMode"] = "Serverless".into();
                s.push(spec);
            }
            s
        });
    }

    #[test]
    fn deployment_mode_gateway_and_runtimes_reach_the_objects() {
        use kubeflow_operator::component::{find, render_spec};
        let spec = serde_json::json!({
            "version": "v0.16.0", "deploymentMode": "RawDeployment", "certificates": "cert-manager",
            "ingressGateway": "kubeflow/kubeflow-gateway", "servingRuntimes": ["kserve-sklearnserver"],
        });
        let r = render_spec(&ServingComponent, spec, &None).expect("render");
        let config = find(&r, "ConfigMap", "inferenceservice-config").expect("config");
        let deploy = config.data["data"]["deploy"].as_str().unwrap_or("");
        assert!(deploy.contains("RawDeployment"), "{deploy}");
        let ingress = config.data["data"]["ingress"].as_str().unwrap_or("");
        assert!(ingress.contains("kubeflow/kubeflow-gateway"), "{ingress}");
        let runtimes: Vec<&str> = r
            .objects
            .iter()
            .filter(|o| kind(o) == "ClusterServingRuntime")
            .filter_map(|o| o.metadata.name.as_deref())
            .collect();
        assert_eq!(runtimes, ["kserve-sklearnserver"]);
        let unknown = serde_json::json!({"version": "v0.16.0", "certificates": "cert-manager", "servingRuntimes": ["nope"]});
        let refused = render_spec(&ServingComponent, unknown, &None)
            .err()
            .expect("refused");
        assert!(
            refused.message.contains("kserve-sklearnserver"),
            "{}",
            refused.message
        );
    }
}
