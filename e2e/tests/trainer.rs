//! The Trainer (v2) operator, running as a process, against the real control plane.

use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::api::rbac::v1::ClusterRoleBinding;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::ResourceExt;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject};
use kube::core::GroupVersionKind;
use kubeflow_e2e::component::{degraded, install, wait_condition, wait_gone};
use kubeflow_e2e::rotator;
use kubeflow_e2e::{apply_yaml, wait_for};
use serde_json::{Value, json};

const OPERATOR: &str = "kubeflow-trainer-operator";
const READY_TIMEOUT: Duration = Duration::from_secs(90);
const TRAINER: &str = "kubeflow-trainer-controller-manager";
const JOBSET: &str = "jobset-controller-manager";
const WEBHOOKS: [(&str, &str); 3] = [
    (
        "ValidatingWebhookConfiguration",
        "validator.trainer.kubeflow.org",
    ),
    (
        "ValidatingWebhookConfiguration",
        "jobset-validating-webhook-configuration",
    ),
    (
        "MutatingWebhookConfiguration",
        "jobset-mutating-webhook-configuration",
    ),
];

fn runtimes(client: &kube::Client) -> Api<DynamicObject> {
    let ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("trainer.kubeflow.org", "v1alpha1", "ClusterTrainingRuntime"),
        "clustertrainingruntimes",
    );
    Api::all_with(client.clone(), &ar)
}

fn names(list: Vec<DynamicObject>) -> Vec<String> {
    let mut n: Vec<String> = list.iter().map(|o| o.name_any()).collect();
    n.sort();
    n
}

#[tokio::test]
async fn trainer_installs_with_jobset_leaves_certificates_to_its_controllers_and_cleans_up() {
    let (client, _g) = kubeflow_e2e::component::prepare(&["Trainer"], &["trainer"]).await;
    let yaml = "apiVersion: components.kubeflow.org/v1alpha1\nkind: Trainer\nmetadata: {name: kubeflow}\nspec:\n  version: v2.1.0\n  runtimes: [torch-distributed, deepspeed-distributed]\n  controller: {trainJobConcurrency: 8}\n";
    let (ns, op, trainers, cr) = install(&client, "trainer", OPERATOR, yaml, READY_TIMEOUT).await;
    let status = |p: &str| cr.data.pointer(p).cloned();
    assert_eq!(status("/status/version"), Some(json!("v2.1.0")));
    assert_eq!(
        status("/status/jobSetVersion"),
        Some(json!("v0.10.1")),
        "which JobSet runs"
    );
    assert_eq!(
        status("/status/runtimes"),
        Some(json!(["deepspeed-distributed", "torch-distributed"]))
    );

    // Both controllers run in the CR's namespace, bound there.
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns.name);
    for d in [TRAINER, JOBSET] {
        deployments
            .get(d)
            .await
            .unwrap_or_else(|e| panic!("{d}: {e}"));
    }
    let binding: ClusterRoleBinding = Api::all(client.clone())
        .get(TRAINER)
        .await
        .expect("binding");
    assert_eq!(
        binding.subjects.unwrap_or_default()[0].namespace.as_deref(),
        Some(ns.name.as_str())
    );
    let config: k8s_openapi::api::core::v1::ConfigMap = Api::namespaced(client.clone(), &ns.name)
        .get("kubeflow-trainer-config")
        .await
        .expect("config");
    let text = config
        .data
        .unwrap_or_default()
        .remove("controller_manager_config.yaml")
        .unwrap_or_default();
    assert!(text.contains("TrainJob.trainer.kubeflow.org: 8"), "{text}");
    let installed = names(
        runtimes(&client)
            .list(&Default::default())
            .await
            .expect("runtimes")
            .items,
    );
    assert_eq!(
        installed,
        vec!["deepspeed-distributed", "torch-distributed"]
    );

    // A user's TrainJob, to prove nothing here ever takes user data with it.
    let trainjobs_ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("trainer.kubeflow.org", "v1alpha1", "TrainJob"),
        "trainjobs",
    );
    let trainjobs: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), &ns.name, &trainjobs_ar);
    apply_yaml(&client, &ns.name, "apiVersion: trainer.kubeflow.org/v1alpha1\nkind: TrainJob\nmetadata: {name: user-job}\nspec:\n  runtimeRef: {name: torch-distributed}\n").await;

    // The controllers fill their certificates and caBundles themselves; the
    // operator writes none of it and counts none of it as drift.
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns.name);
    for s in [
        "kubeflow-trainer-webhook-cert",
        "jobset-webhook-server-cert",
    ] {
        let live = secrets.get(s).await.expect("secret");
        assert!(
            live.data.unwrap_or_default().is_empty(),
            "{s} is shipped empty"
        );
        rotator::fill_secret(&client, &ns.name, s).await;
    }
    for (kind, name) in WEBHOOKS {
        rotator::inject_webhooks(&client, kind, name).await;
    }
    rotator::inject_crd(&client, "jobsets.jobset.x-k8s.io").await;
    rotator::assert_quiet(&op, &trainers, "kubeflow", Duration::from_secs(4)).await;
    let filled = secrets
        .get("kubeflow-trainer-webhook-cert")
        .await
        .expect("secret");
    assert!(
        filled.data.unwrap_or_default().contains_key("tls.crt"),
        "the rotator's data stays"
    );
    let jobset_crd: CustomResourceDefinition = Api::all(client.clone())
        .get("jobsets.jobset.x-k8s.io")
        .await
        .expect("crd");
    let ca = jobset_crd
        .spec
        .conversion
        .and_then(|c| c.webhook)
        .and_then(|w| w.client_config)
        .and_then(|c| c.ca_bundle);
    assert!(
        ca.is_some_and(|b| !b.0.is_empty()),
        "the injected caBundle stays"
    );

    // Repair: a deleted controller comes back.
    let old = deployments.get(JOBSET).await.expect("jobset").uid();
    deployments
        .delete(JOBSET, &DeleteParams::background())
        .await
        .expect("delete");
    wait_for(
        "the JobSet controller to be recreated",
        Duration::from_secs(10),
        || async {
            let d = deployments.get_opt(JOBSET).await.ok()??;
            (d.uid() != old && d.metadata.deletion_timestamp.is_none()).then_some(())
        },
    )
    .await;

    // Bad input: refused with a message naming what is available; nothing changes.
    let rv = deployments
        .get(TRAINER)
        .await
        .expect("get")
        .resource_version();
    kubeflow_e2e::component::merge(
        &trainers,
        "kubeflow",
        json!({"spec": {"runtimes": ["torch-distributed", "no-such-runtime"], "replicas": 3}}),
    )
    .await;
    let (reason, message) = degraded(&trainers, READY_TIMEOUT).await;
    assert_eq!(reason, "InvalidSpec");
    assert!(
        message.contains("no-such-runtime") && message.contains("mlx-distributed"),
        "{message}"
    );
    assert_eq!(
        deployments
            .get(TRAINER)
            .await
            .expect("get")
            .resource_version(),
        rv,
        "nothing changed"
    );

    // Narrowing the runtimes removes the dropped one.
    kubeflow_e2e::component::merge(
        &trainers,
        "kubeflow",
        json!({"spec": {"runtimes": ["torch-distributed"], "replicas": null}}),
    )
    .await;
    wait_condition(&trainers, "kubeflow", "Ready", "True", READY_TIMEOUT).await;
    wait_for(
        "deepspeed runtime pruned",
        Duration::from_secs(10),
        || async {
            let installed = names(
                runtimes(&client)
                    .list(&Default::default())
                    .await
                    .ok()?
                    .items,
            );
            (installed == vec!["torch-distributed"]).then_some(())
        },
    )
    .await;

    // Deletion removes the controllers, keeps the CRDs and the user's TrainJob.
    trainers
        .delete("kubeflow", &DeleteParams::default())
        .await
        .expect("delete");
    wait_gone(&trainers, "kubeflow", Duration::from_secs(60)).await;
    for d in [TRAINER, JOBSET] {
        assert!(
            deployments.get_opt(d).await.expect("get").is_none(),
            "{d} is removed"
        );
    }
    assert!(
        runtimes(&client)
            .list(&Default::default())
            .await
            .expect("list")
            .items
            .is_empty(),
        "the runtimes the component installed are removed"
    );
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    for crd in ["trainjobs.trainer.kubeflow.org", "jobsets.jobset.x-k8s.io"] {
        assert!(
            crds.get_opt(crd).await.expect("get").is_some(),
            "{crd} is kept"
        );
    }
    let job = trainjobs
        .get("user-job")
        .await
        .expect("the user's TrainJob survives");
    assert_eq!(
        job.data.pointer("/spec/runtimeRef/name"),
        Some(&Value::from("torch-distributed"))
    );
    drop(op);
    ns.delete().await;
}
