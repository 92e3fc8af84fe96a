//! What the operator knows of KServe: its webhook certificate (from
//! cert-manager or generated), the `inferenceservice-config` ConfigMap, and
//! its ClusterServingRuntimes.

use kubeflow_operator::api::components::serving::{CertificateSource, DeploymentMode};
use kubeflow_operator::api::{ComponentResource, Platform, Serving};
use kubeflow_operator::async_trait::async_trait;
use kubeflow_operator::certs::{self, WebhookCert};
use kubeflow_operator::component::{Component, DereferenceError, Draft, Refusal, require_crd};
use kubeflow_operator::conditions::Reason;
use kubeflow_operator::kinds::kind;
use kubeflow_operator::kube::api::DynamicObject;
use kubeflow_operator::kube::{Client, ResourceExt};
use kubeflow_operator::rbac::Permissions;
use kubeflow_operator::render::{Layout, Target};
use kubeflow_operator::{openshift, transform};
use serde_json::{Value, json};

const BUNDLE_NAMESPACE: &str = "kubeflow";
const CONTROLLER: &str = "kserve-controller-manager";
const WEBHOOK_SERVICE: &str = "kserve-webhook-server-service";
/// The Secret the controller mounts its webhook certificate from (cert-manager's Certificate writes it).
const CERT_SECRET: &str = "kserve-webhook-server-cert";
/// KServe's webhook servers, each a Secret its Deployment mounts and the
/// Service its webhooks and conversion webhooks call: the controller's, and
/// from v0.18.0 the LLMInferenceService controller's and the local-model
/// controller's. Each gets its own certificate, for its own Service; a
/// version without a server's Service gets none of it. A unit test holds this
/// list to every Certificate of every bundle, so a new server is not missed.
const WEBHOOK_SERVERS: [(&str, &str); 3] = [
    (CERT_SECRET, WEBHOOK_SERVICE),
    (
        "llmisvc-webhook-server-cert",
        "llmisvc-webhook-server-service",
    ),
    (
        "localmodel-webhook-server-cert",
        "localmodel-webhook-server-service",
    ),
];
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
    /// Self-signed: each webhook server's Secret name and certificate;
    /// cert-manager: none.
    type Inputs = Option<Vec<(&'static str, WebhookCert)>>;

    const LAYOUT: Layout = Layout {
        from_namespaces: &[BUNDLE_NAMESPACE],
        target: Target::ResourceNamespace,
        workloads: &[CONTROLLER],
    };

    fn permissions(&self) -> Permissions {
        Permissions::bundles(&[Serving::COMPONENT]).openshift_scc(&[SCC])
    }

    async fn dereference(
        &self,
        cr: &Serving,
        client: &Client,
    ) -> Result<Option<Vec<(&'static str, WebhookCert)>>, DereferenceError> {
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
                let mut served = Vec::with_capacity(WEBHOOK_SERVERS.len());
                for (secret, service) in WEBHOOK_SERVERS {
                    let cert = certs::load_or_generate(client, &ns, secret, service)
                        .await
                        .map_err(|e| match e {
                            certs::CertError::Read(_, source) => {
                                DereferenceError::Api("read a webhook certificate", source)
                            }
                            other => {
                                Refusal::new(Reason::CertificateError, other.to_string()).into()
                            }
                        })?;
                    served.push((secret, cert));
                }
                Ok(Some(served))
            }
        }
    }

    fn customise(&self, draft: &mut Draft<'_, Self>) -> Result<(), Refusal> {
        let (cr, ctx, cert) = (draft.cr, draft.ctx, draft.inputs);
        let objects = &mut draft.objects;
        let spec = &cr.spec;

        match cert {
            Some(served) => use_generated_certs(objects, served, ctx.namespace)?,
            None => follow_cert_manager(objects, ctx.namespace),
        }
        let mode = match spec.deployment_mode.unwrap_or_default() {
            DeploymentMode::RawDeployment => "RawDeployment",
            DeploymentMode::Serverless => "Serverless",
        };
        edit_json(objects, "deploy", |d| {
            d["defaultDeploymentMode"] = json!(mode)
        })?;
        if let Some(gw) = &spec.ingress_gateway {
            edit_json(objects, "ingress", |d| d["ingressGateway"] = json!(gw))?;
        }
        if let Some(wanted) = &spec.serving_runtimes {
            select_runtimes(objects, wanted)?;
        }
        if ctx.platform == Platform::OpenShift {
            objects.push(openshift::scc_grant(ctx.namespace, CONTROLLER, SCC));
        }
        Ok(())
    }
}

/// The operator's own certificates: no cert-manager objects or injection
/// annotations; each webhook server whose Service this version has gets its
/// TLS Secret, and the webhooks and conversion webhooks calling that Service
/// its CA.
fn use_generated_certs(
    objects: &mut Vec<DynamicObject>,
    served: &[(&str, WebhookCert)],
    namespace: &str,
) -> Result<(), Refusal> {
    transform::remove(objects, |o| matches!(kind(o), "Issuer" | "Certificate"));
    for o in objects.iter_mut() {
        if let Some(a) = o.metadata.annotations.as_mut() {
            a.remove(INJECT);
        }
    }
    for (secret_name, cert) in served {
        let Some((_, service)) = WEBHOOK_SERVERS.iter().find(|(s, _)| s == secret_name) else {
            continue;
        };
        let has_service = objects
            .iter()
            .any(|o| kind(o) == "Service" && o.metadata.name.as_deref() == Some(service));
        if !has_service {
            continue;
        }
        let mut secret: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
            "metadata": {"name": secret_name, "namespace": namespace},
        }))
        .map_err(|e| Refusal::new(Reason::BundleError, e.to_string()))?;
        secret.data["data"] = json!({});
        objects.push(secret);
        certs::fill_secret(objects, secret_name, cert);
        certs::set_ca_bundle(objects, service, cert);
    }
    Ok(())
}

/// cert-manager's objects follow the namespace, so must the names it
/// injects and signs: each Certificate keeps its own Service's name (KServe
/// v0.18.0 has three), in the namespace it is installed in.
fn follow_cert_manager(objects: &mut [DynamicObject], namespace: &str) {
    let from = format!("{BUNDLE_NAMESPACE}/");
    let to = format!("{namespace}/");
    let bundle_suffix = format!(".{BUNDLE_NAMESPACE}.svc");
    let moved = |name: &str| match name.strip_suffix(&bundle_suffix) {
        Some(service) => certs::service_dns(service, namespace),
        None => name.to_string(),
    };
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
            let spec = &mut o.data["spec"];
            if let Some(cn) = spec.get("commonName").and_then(Value::as_str) {
                spec["commonName"] = json!(moved(cn));
            }
            if let Some(Value::Array(names)) = spec.get_mut("dnsNames") {
                for n in names.iter_mut() {
                    if let Some(name) = n.as_str() {
                        *n = json!(moved(name));
                    }
                }
            }
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

    /// Every Certificate of every KServe version is one of the webhook
    /// servers the operator generates certificates for: a version adding a
    /// server fails here, not on a real node with a pod waiting for a volume.
    #[test]
    fn every_certificate_of_every_version_is_a_known_webhook_server() {
        use kubeflow_operator::component::{manifests_dir, render_spec};
        let dir = manifests_dir();
        let versions = every_version(&dir, "serving");
        assert!(versions.len() >= 4, "{versions:?}");
        let mut seen = std::collections::BTreeSet::new();
        for mut spec in versions {
            spec["certificates"] = "cert-manager".into();
            let r = render_spec(&ServingComponent, spec.clone(), &None).expect("render");
            for c in r.objects.iter().filter(|o| kind(o) == "Certificate") {
                let secret = c.data["spec"]["secretName"].as_str().unwrap_or("");
                let dns = c.data["spec"]["commonName"].as_str().unwrap_or("");
                let service = dns.strip_suffix(".kubeflow.svc").unwrap_or(dns);
                assert!(
                    WEBHOOK_SERVERS.contains(&(secret, service)),
                    "{spec}: Certificate {:?} ({secret}, {service}) is no known webhook server",
                    c.metadata.name
                );
                seen.insert(secret.to_string());
            }
        }
        assert_eq!(seen.len(), WEBHOOK_SERVERS.len(), "{seen:?}");
    }

    fn generated(namespace: &str) -> Vec<(&'static str, WebhookCert)> {
        WEBHOOK_SERVERS
            .iter()
            .map(|(secret, service)| {
                (
                    *secret,
                    certs::generate(service, namespace).expect("generate"),
                )
            })
            .collect()
    }

    /// Self-signed at v0.18.0: each of the three webhook servers gets its
    /// own Secret, and every webhook and conversion webhook the CA of the
    /// server it calls (none is left with an empty caBundle).
    #[test]
    fn self_signed_gives_every_webhook_server_its_own_certificate() {
        use kubeflow_operator::component::{find, render_spec};
        let served = generated("kubeflow");
        let spec = serde_json::json!({"version": "v0.18.0", "certificates": "self-signed"});
        let r = render_spec(&ServingComponent, spec, &Some(served.clone())).expect("render");
        let ca_of = |service: &str| {
            let (secret, _) = WEBHOOK_SERVERS
                .iter()
                .find(|(_, s)| *s == service)
                .unwrap_or_else(|| panic!("{service} is no webhook server"));
            let (_, cert) = served.iter().find(|(s, _)| s == secret).expect("served");
            certs::b64(&cert.ca_pem)
        };
        for (secret, service) in WEBHOOK_SERVERS {
            let s = find(&r, "Secret", secret).unwrap_or_else(|| panic!("no Secret {secret}"));
            assert_eq!(s.data["data"]["ca.crt"], json!(ca_of(service)), "{secret}");
            assert!(
                s.data["data"]["tls.key"]
                    .as_str()
                    .is_some_and(|k| !k.is_empty())
            );
        }
        let mut checked = 0;
        for o in &r.objects {
            let hooks: Vec<&Value> = match kind(o) {
                "MutatingWebhookConfiguration" | "ValidatingWebhookConfiguration" => {
                    o.data["webhooks"]
                        .as_array()
                        .map(|h| h.iter().map(|h| &h["clientConfig"]).collect())
                        .unwrap_or_default()
                }
                "CustomResourceDefinition" => o
                    .data
                    .pointer("/spec/conversion/webhook/clientConfig")
                    .into_iter()
                    .collect(),
                _ => continue,
            };
            for config in hooks {
                let service = config["service"]["name"].as_str().unwrap_or("");
                assert_eq!(
                    config["caBundle"],
                    json!(ca_of(service)),
                    "{:?} calling {service}",
                    o.metadata.name
                );
                checked += 1;
            }
        }
        // 9 webhook entries and the two llmisvc CRDs' conversion webhooks.
        assert!(checked >= 11, "only {checked} webhook client configs");
        assert!(find(&r, "Certificate", "llmisvc-serving-cert").is_none());

        // v0.15.2 has one webhook server: the others' Secrets are not made.
        let spec = serde_json::json!({"version": "v0.15.2", "certificates": "self-signed"});
        let r = render_spec(&ServingComponent, spec, &Some(served.clone())).expect("render");
        assert!(find(&r, "Secret", CERT_SECRET).is_some());
        assert!(find(&r, "Secret", "llmisvc-webhook-server-cert").is_none());
        assert!(find(&r, "Secret", "localmodel-webhook-server-cert").is_none());
    }

    /// cert-manager in another namespace: each Certificate names its own
    /// Service there, and each injection its own Certificate.
    #[test]
    fn cert_manager_certificates_name_their_own_services_where_installed() {
        use kubeflow_operator::component::render_spec;
        let spec = serde_json::json!({"version": "v0.18.0", "certificates": "cert-manager"});
        let mut objects = render_spec(&ServingComponent, spec, &None)
            .expect("render")
            .objects;
        follow_cert_manager(&mut objects, "models");
        let mut names = Vec::new();
        for c in objects.iter().filter(|o| kind(o) == "Certificate") {
            let secret = c.data["spec"]["secretName"].as_str().unwrap_or("");
            let (_, service) = WEBHOOK_SERVERS
                .iter()
                .find(|(s, _)| *s == secret)
                .expect("known server");
            let dns = format!("{service}.models.svc");
            assert_eq!(c.data["spec"]["commonName"], json!(dns));
            assert_eq!(c.data["spec"]["dnsNames"], json!([dns]));
            names.push(service.to_string());
        }
        assert_eq!(names.len(), 3, "{names:?}");
        let injected: Vec<&str> = objects
            .iter()
            .filter_map(|o| o.metadata.annotations.as_ref()?.get(INJECT))
            .map(String::as_str)
            .collect();
        assert!(
            injected.contains(&"models/llmisvc-serving-cert"),
            "{injected:?}"
        );
        assert!(
            injected.iter().all(|i| i.starts_with("models/")),
            "{injected:?}"
        );
    }
}
