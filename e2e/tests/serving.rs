//! The serving operator, as a process: self-signed certificates, the
//! deployment mode, runtimes, cert-manager as a missing prerequisite, upgrade.

use std::time::Duration;

use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::Api;
use kubeflow_e2e::component::{component_api, condition, wait_condition};
use kubeflow_e2e::operator::OperatorProcess;
use kubeflow_e2e::{TestNamespace, apply_yaml, wait_for};
use serde_json::json;

const TIMEOUT: Duration = Duration::from_secs(90);

#[tokio::test]
async fn serving_installs_with_its_own_certificate_follows_the_spec_and_upgrades() {
    let (client, _g) = kubeflow_e2e::component::prepare(&["Serving"], &["serving"]).await;
    let ns = TestNamespace::new(&client, "kserve").await;
    let _op = OperatorProcess::start("kubeflow-serving-operator", &[]);
    apply_yaml(
        &client,
        &ns.name,
        "apiVersion: components.kubeflow.org/v1alpha1\nkind: Serving\nmetadata: {name: kubeflow}\nspec:\n  version: v0.15.0\n  servingRuntimes: [kserve-sklearnserver, kserve-xgbserver]\n",
    )
    .await;
    let api = component_api(&client, &ns.name, "Serving");
    wait_condition(&api, "kubeflow", "Ready", "True", TIMEOUT).await;

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
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &ns.name);
    let deploy = cms
        .get("inferenceservice-config")
        .await
        .expect("config")
        .data
        .unwrap_or_default()
        .remove("deploy")
        .unwrap_or_default();
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
    let cr = wait_condition(&api, "kubeflow", "Degraded", "True", TIMEOUT).await;
    let (_, reason, message, _) = condition(&cr, "Degraded").expect("Degraded");
    assert_eq!(reason, "PrerequisiteMissing");
    assert!(message.contains("cert-manager"), "{message}");
    assert!(
        secrets
            .get_opt("kserve-webhook-server-cert")
            .await
            .expect("get")
            .is_some()
    );

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
    let deploy = cms
        .get("inferenceservice-config")
        .await
        .expect("config")
        .data
        .unwrap_or_default()
        .remove("deploy")
        .unwrap_or_default();
    assert!(deploy.contains("\"Serverless\""), "{deploy}");

    kubeflow_e2e::component::delete_and_wait(&api, "kubeflow", TIMEOUT).await;
    let crds: Api<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition> =
        Api::all(client.clone());
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
