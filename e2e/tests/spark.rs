//! The Spark operator's operator, as a process, against the real control
//! plane: the namespaces it serves and its batch scheduler reach both
//! programs' flags, the flags naming its namespace follow the resource,
//! every kind is repaired, bad input is refused with nothing written, and
//! removal takes what its programs made at run time (the webhook's
//! certificate, the leader Leases) and nothing else, keeping the CRDs and a
//! user's SparkApplication.

use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::ResourceExt;
use kube::api::{Api, ApiResource, DynamicObject};
use kube::core::GroupVersionKind;
use kubeflow_e2e::component::{delete_and_wait, install, merge, wait_condition, wait_degraded};
use kubeflow_e2e::objects::{exists, first_args};
use kubeflow_e2e::{apply_yaml, wait_for};
use serde_json::json;

const OPERATOR: &str = "kubeflow-spark-operator";
const TIMEOUT: Duration = Duration::from_secs(90);
const USER_APP: &str = "apiVersion: sparkoperator.k8s.io/v1beta2\nkind: SparkApplication\nmetadata: {name: user-spark}\nspec:\n  type: Python\n  mode: cluster\n  image: example.invalid/spark:3.5\n  mainApplicationFile: local:///opt/app/main.py\n  sparkVersion: 3.5.5\n  driver: {cores: 1, memory: 512m, serviceAccount: default-editor}\n  executor: {instances: 1, cores: 1, memory: 512m}\n";

async fn args(client: &kube::Client, ns: &str, name: &str) -> Vec<String> {
    let deployments = Api::<Deployment>::namespaced(client.clone(), ns);
    first_args(deployments.get(name).await.expect("deployment"))
}

#[tokio::test]
async fn spark_serves_the_namespaces_named_repairs_refuses_and_removes_only_its_own() {
    let (client, _g) = kubeflow_e2e::component::prepare(&["Spark"], &["spark"]).await;
    let yaml = "apiVersion: components.kubeflow.org/v1alpha1\nkind: Spark\nmetadata: {name: kubeflow}\nspec:\n  version: \"2.5.0\"\n  jobNamespaces: [team-a, team-b]\n  batchScheduler: YuniKorn\n";
    let (ns, op, sparks, _) = install(&client, "spark", OPERATOR, yaml, TIMEOUT).await;

    let controller = args(&client, &ns.name, "spark-operator-controller").await;
    let webhook = args(&client, &ns.name, "spark-operator-webhook").await;
    for a in [&controller, &webhook] {
        assert!(
            a.contains(&"--namespaces=team-a,team-b".to_string()),
            "{a:?}"
        );
        assert!(
            a.contains(&format!("--leader-election-lock-namespace={}", ns.name)),
            "{a:?}"
        );
    }
    assert!(controller.contains(&"--default-batch-scheduler=yunikorn".to_string()));
    assert!(webhook.contains(&format!("--webhook-svc-namespace={}", ns.name)));

    wait_condition(&sparks, "kubeflow", "Ready", "True", TIMEOUT).await;
    // What the refusals below compare with (the promises at rest are the
    // conformance suite's: installed/conformance.rs).
    let before = op.settled_writes().await;

    // Volcano without its CRD, then a namespace listed twice: each refused
    // by name, nothing written.
    merge(
        &sparks,
        "kubeflow",
        json!({"spec": {"batchScheduler": "Volcano"}}),
    )
    .await;
    wait_degraded(&sparks, "PrerequisiteMissing", "Volcano", TIMEOUT).await;
    merge(
        &sparks,
        "kubeflow",
        json!({"spec": {"batchScheduler": null, "jobNamespaces": ["team-a", "team-a"]}}),
    )
    .await;
    wait_degraded(&sparks, "InvalidSpec", "spec.jobNamespaces[1]", TIMEOUT).await;
    assert_eq!(op.writes().await, before, "nothing written");
    assert_eq!(
        args(&client, &ns.name, "spark-operator-controller").await,
        controller
    );
    merge(
        &sparks,
        "kubeflow",
        json!({"spec": {"jobNamespaces": null}}),
    )
    .await;
    wait_for("every namespace served again", TIMEOUT, || async {
        args(&client, &ns.name, "spark-operator-controller")
            .await
            .contains(&"--namespaces=\"\"".to_string())
            .then_some(())
    })
    .await;
    wait_condition(&sparks, "kubeflow", "Ready", "True", TIMEOUT).await;

    // What the webhook and the controllers make at run time (made here as
    // they would), a Secret of someone else's, and a user's application.
    apply_yaml(
        &client,
        &ns.name,
        "apiVersion: v1\nkind: Secret\nmetadata: {name: spark-operator-webhook-certs}\ndata: {}\n",
    )
    .await;
    apply_yaml(
        &client,
        &ns.name,
        "apiVersion: v1\nkind: Secret\nmetadata: {name: someone-elses}\ndata: {}\n",
    )
    .await;
    for lease in [
        "spark-operator-controller-lock",
        "spark-operator-webhook-lock",
    ] {
        apply_yaml(
            &client,
            &ns.name,
            &format!("apiVersion: coordination.k8s.io/v1\nkind: Lease\nmetadata: {{name: {lease}}}\nspec: {{holderIdentity: spark}}\n"),
        )
        .await;
    }
    let ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("sparkoperator.k8s.io", "v1beta2", "SparkApplication"),
        "sparkapplications",
    );
    let apps: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns.name, &ar);
    apply_yaml(&client, &ns.name, USER_APP).await;
    let user_uid = apps.get("user-spark").await.expect("app").uid();

    delete_and_wait(&sparks, "kubeflow", TIMEOUT).await;
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns.name);
    assert!(
        secrets
            .get_opt("spark-operator-webhook-certs")
            .await
            .expect("get")
            .is_none_or(|s| s.metadata.deletion_timestamp.is_some()),
        "the webhook's certificate goes"
    );
    assert!(exists(&secrets, "someone-elses").await);
    let leases: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        &ns.name,
        &ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("coordination.k8s.io", "v1", "Lease"),
            "leases",
        ),
    );
    for lease in [
        "spark-operator-controller-lock",
        "spark-operator-webhook-lock",
    ] {
        assert!(
            leases.get_opt(lease).await.expect("get").is_none(),
            "{lease}"
        );
    }
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let kept = crds
        .get("sparkapplications.sparkoperator.k8s.io")
        .await
        .expect("kept");
    assert!(!kept.labels().contains_key("applyset.kubernetes.io/part-of"));
    assert_eq!(apps.get("user-spark").await.expect("kept").uid(), user_uid);
    drop(op);
    ns.delete().await;
}
