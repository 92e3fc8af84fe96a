//! The serving operator, as a process: self-signed certificates, the
//! deployment mode, runtimes, cert-manager as a missing prerequisite, upgrade.

use std::time::Duration;

use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use k8s_openapi::api::core::v1::Secret;
use kube::api::Api;
use kubeflow_e2e::component::{condition, degraded, install, ready_at, wait_condition};
use kubeflow_e2e::objects::{config_value, exists, secret_data};
use kubeflow_e2e::{apply_yaml, wait_for};
use serde_json::json;

const OPERATOR: &str = "kubeflow-serving-operator";
const TIMEOUT: Duration = Duration::from_secs(90);

#[tokio::test]
async fn serving_installs_with_its_own_certificate_follows_the_spec_and_upgrades() {
    let (client, _g) = kubeflow_e2e::component::prepare(&["Serving"], &["serving"]).await;
    let yaml = "apiVersion: components.kubeflow.org/v1alpha1\nkind: Serving\nmetadata: {name: kubeflow}\nspec:\n  version: v0.15.0\n  servingRuntimes: [kserve-sklearnserver, kserve-xgbserver]\n";
    let (ns, _op, api, _) = install(&client, "kserve", OPERATOR, yaml, TIMEOUT).await;

    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns.name);
    let cert = secrets
        .get("kserve-webhook-server-cert")
        .await
        .expect("generated certificate")
        .data
        .unwrap_or_default();
    let vwcs: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
    let vwc = vwcs
        .get("inferenceservice.serving.kserve.io")
        .await
        .expect("webhook");
    assert!(
        !vwc.metadata
            .annotations
            .unwrap_or_default()
            .contains_key("cert-manager.io/inject-ca-from")
    );
    for h in vwc.webhooks.unwrap_or_default() {
        assert_eq!(h.client_config.ca_bundle.as_ref(), cert.get("ca.crt"));
    }
    let deploy = config_value(&client, &ns.name, "inferenceservice-config", "deploy").await;
    assert!(deploy.contains("\"RawDeployment\""), "{deploy}");
    let runtimes =
        kubeflow_e2e::run_tool("kubectl", &["get", "clusterservingruntimes", "-o", "name"]);
    let mut names: Vec<String> = String::from_utf8_lossy(&runtimes.stdout)
        .lines()
        .map(str::to_string)
        .collect();
    names.sort();
    assert_eq!(
        names,
        vec![
            "clusterservingruntime.serving.kserve.io/kserve-sklearnserver",
            "clusterservingruntime.serving.kserve.io/kserve-xgbserver"
        ]
    );

    // cert-manager asked for but absent: a condition saying so, nothing
    // changed. (Earlier tests keep cert-manager's CRDs, as a removal does.)
    kubeflow_e2e::component::delete_crds_of(&client, "cert-manager.io").await;
    kubeflow_e2e::component::merge(
        &api,
        "kubeflow",
        json!({"spec": {"certificates": "cert-manager"}}),
    )
    .await;
    let (reason, message) = degraded(&api, TIMEOUT).await;
    assert_eq!(reason, "PrerequisiteMissing");
    assert!(message.contains("cert-manager"), "{message}");
    assert!(exists(&secrets, "kserve-webhook-server-cert").await);

    // Back to self-signed; Serverless mode needs Knative, refused until its
    // CRD exists (a stand-in here), then applied with an upgrade.
    kubeflow_e2e::component::merge(&api, "kubeflow", json!({"spec": {"certificates": "self-signed", "deploymentMode": "Serverless", "version": "v0.15.2"}})).await;
    let cr = wait_for("Serverless refused without Knative", TIMEOUT, || async {
        let cr = api.get("kubeflow").await.ok()?;
        let (s, reason, message, g) = condition(&cr, "Degraded")?;
        (s == "True"
            && reason == "PrerequisiteMissing"
            && g == cr.metadata.generation
            && message.contains("Knative"))
        .then_some(cr)
    })
    .await;
    assert_eq!(
        cr.data.pointer("/status/version"),
        Some(&json!("v0.15.0")),
        "nothing moved"
    );
    let knative = "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata: {name: services.serving.knative.dev}\nspec:\n  group: serving.knative.dev\n  scope: Namespaced\n  names: {kind: Service, plural: services, singular: service}\n  versions: [{name: v1, served: true, storage: true, schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}}]\n";
    apply_yaml(&client, &ns.name, knative).await;
    let cr = wait_condition(&api, "kubeflow", "Ready", "True", TIMEOUT).await;
    assert_eq!(cr.data.pointer("/status/version"), Some(&json!("v0.15.2")));
    let deploy = config_value(&client, &ns.name, "inferenceservice-config", "deploy").await;
    assert!(deploy.contains("\"Serverless\""), "{deploy}");

    // v0.16.0 adds the LLMInferenceService controller, with a webhook server
    // of its own: its own Secret (its Deployment mounts it), and its webhooks
    // and both llmisvc CRDs' conversion webhooks carry that Secret's CA, not
    // an empty caBundle.
    kubeflow_e2e::component::merge(&api, "kubeflow", json!({"spec": {"version": "v0.16.0"}})).await;
    let cr = ready_at(&api, "kubeflow", "v0.16.0", TIMEOUT).await;
    assert!(cr.data.pointer("/status/version").is_some());
    let llmisvc = secret_data(&client, &ns.name, "llmisvc-webhook-server-cert").await;
    let ca = llmisvc.get("ca.crt").expect("ca.crt");
    assert_ne!(Some(ca), cert.get("ca.crt"), "a CA of its own");
    let vwc = vwcs
        .get("llminferenceservice.serving.kserve.io")
        .await
        .expect("llmisvc webhook");
    let hooks = vwc.webhooks.unwrap_or_default();
    assert!(!hooks.is_empty());
    for h in hooks {
        assert_eq!(h.client_config.ca_bundle.as_ref(), Some(ca), "{}", h.name);
    }

    // v0.18.0 adds the local-model controller's webhook server, and
    // conversion webhooks on both llmisvc CRDs (v1alpha1 and v1alpha2).
    kubeflow_e2e::component::merge(&api, "kubeflow", json!({"spec": {"version": "v0.18.0"}})).await;
    ready_at(&api, "kubeflow", "v0.18.0", TIMEOUT).await;
    let localmodel = secret_data(&client, &ns.name, "localmodel-webhook-server-cert").await;
    let local_ca = localmodel.get("ca.crt").expect("ca.crt");
    let vwc = vwcs
        .get("localmodelcache.serving.kserve.io")
        .await
        .expect("local-model webhook");
    for h in vwc.webhooks.unwrap_or_default() {
        assert_eq!(
            h.client_config.ca_bundle.as_ref(),
            Some(local_ca),
            "{}",
            h.name
        );
    }
    let crds: Api<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition> =
        Api::all(client.clone());
    for name in [
        "llminferenceservices.serving.kserve.io",
        "llminferenceserviceconfigs.serving.kserve.io",
    ] {
        let crd = crds.get(name).await.expect("llmisvc CRD");
        let conversion = crd
            .spec
            .conversion
            .and_then(|c| c.webhook)
            .and_then(|w| w.client_config)
            .expect("a conversion webhook");
        assert_eq!(conversion.ca_bundle.as_ref(), Some(ca), "{name}");
    }

    kubeflow_e2e::component::delete_and_wait(&api, "kubeflow", TIMEOUT).await;
    crds.delete("services.serving.knative.dev", &Default::default())
        .await
        .expect("remove the Knative stand-in");
    assert!(
        vwcs.get_opt("inferenceservice.serving.kserve.io")
            .await
            .expect("get")
            .is_none()
    );
    let runtimes =
        kubeflow_e2e::run_tool("kubectl", &["get", "clusterservingruntimes", "-o", "name"]);
    assert!(
        String::from_utf8_lossy(&runtimes.stdout).trim().is_empty(),
        "cluster-scoped custom resources are removed"
    );
    ns.delete().await;
}
