//! The Spark operator's operator, as a process, against the real control
//! plane: the namespaces it serves and its batch scheduler reach both
//! programs' flags, the flags naming its namespace follow the resource,
//! every kind is repaired, bad input is refused with nothing written, and
//! removal takes what its programs made at run time (the webhook's
//! certificate, the leader Leases) and nothing else, keeping the CRDs and a
//! user's SparkApplication. And the Spark operator's own controller
//! (v2.5.0, with the Spark its image carries) run on what it installs.

use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret, Service};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::ResourceExt;
use kube::api::{Api, ApiResource, DynamicObject};
use kube::core::GroupVersionKind;
use kubeflow_e2e::component::{delete_and_wait, install, merge, wait_condition, wait_degraded};
use kubeflow_e2e::objects::{exists, first_args};
use kubeflow_e2e::upstream::{self, Controller, Quiet, UserObject};
use kubeflow_e2e::upstream_runs::{
    self, SPARK_APP, SPARK_DRIVER_ACCOUNT, SPARK_MAIN_CLASS, SPARK_MAIN_FILE, spark_pi,
};
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

/// The Spark operator's controller v2.5.0 (built from the Go module proxy)
/// as the Spark component installs it: its ServiceAccount, args and
/// environment read from the live Deployment, what its image adds
/// (`SPARK_HOME`, Spark 4.0.1's `spark-submit`, which it runs to make each
/// driver pod) and what the kubelet gives a pod (`KUBERNETES_SERVICE_*`, an
/// empty /tmp where the Deployment mounts one). Spark's SparkPi goes from
/// submitted to a driver pod owned by the application, which kwok runs to
/// Succeeded, to COMPLETED. Beside it the webhook, as installed, makes its
/// certificate's Secret and fills both webhook configurations' caBundles.
/// Neither (nor the `spark-submit` the controller runs) is refused
/// anything, and the Spark operator writes nothing meanwhile.
#[tokio::test]
async fn the_spark_operators_controller_runs_an_application_on_what_is_installed() {
    let (client, mut phases) = kubeflow_e2e::component::prepare(&["Spark"], &["spark"]).await;
    upstream::program("spark-operator");
    upstream::spark_home();
    phases.phase("upstream controller built");
    let yaml = "apiVersion: components.kubeflow.org/v1alpha1\nkind: Spark\nmetadata: {name: kubeflow}\nspec: {version: \"2.5.0\"}\n";
    let (ns, op, sparks, _) = install(&client, "spark-run", OPERATOR, yaml, TIMEOUT).await;
    phases.phase("Spark installed");

    apply_yaml(
        &client,
        &ns.name,
        &format!(
            "apiVersion: v1\nkind: ServiceAccount\nmetadata: {{name: {SPARK_DRIVER_ACCOUNT}}}\n"
        ),
    )
    .await;
    let before = op.settled_writes().await;
    let mut controller = upstream_runs::spark_controller(&client, &ns.name).await;
    let mut webhook = upstream_runs::spark_webhook(&client, &ns.name).await;
    phases.phase("controller and webhook started");
    webhook_certificate_in_place(&client, &ns.name, &mut webhook).await;
    phases.phase("the webhook's certificate in place");
    apply_yaml(&client, &ns.name, &spark_pi()).await;

    let ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("sparkoperator.k8s.io", "v1beta2", "SparkApplication"),
        "sparkapplications",
    );
    let apps: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns.name, &ar);
    let app = upstream_runs::spark_application_completed(
        &apps,
        SPARK_APP,
        Duration::from_secs(120),
        || controller.log_text(),
    )
    .await;
    phases.phase("the application COMPLETED");

    // Submitted once, by spark-submit, which named the driver pod and the
    // application's id.
    let status = &app.data["status"];
    assert_eq!(status["submissionAttempts"], 1, "{status}");
    let driver_name = format!("{SPARK_APP}-driver");
    assert_eq!(
        status["driverInfo"]["podName"],
        driver_name.as_str(),
        "{status}"
    );
    assert!(
        status["sparkApplicationId"]
            .as_str()
            .is_some_and(|id| id.starts_with("spark-")),
        "{status}"
    );
    // The driver pod spark-submit made: the application's own (controller
    // owner, from the template the controller wrote), its image, account
    // and main class, Succeeded by kwok.
    let driver = Api::<Pod>::namespaced(client.clone(), &ns.name)
        .get(&driver_name)
        .await
        .expect("the driver pod");
    let owner = driver
        .metadata
        .owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true))
        .expect("the driver's controller");
    assert_eq!(
        (owner.kind.as_str(), owner.name.as_str(), Some(&owner.uid)),
        ("SparkApplication", SPARK_APP, app.metadata.uid.as_ref())
    );
    let labels = driver.metadata.labels.clone().unwrap_or_default();
    for (key, value) in [
        ("spark-role", "driver"),
        ("sparkoperator.k8s.io/app-name", SPARK_APP),
        ("sparkoperator.k8s.io/launched-by-spark-operator", "true"),
    ] {
        assert_eq!(
            labels.get(key).map(String::as_str),
            Some(value),
            "{labels:?}"
        );
    }
    let spec = driver.spec.clone().expect("the driver's spec");
    assert_eq!(
        spec.service_account_name.as_deref(),
        Some(SPARK_DRIVER_ACCOUNT)
    );
    let container = spec
        .containers
        .iter()
        .find(|c| c.name == "spark-kubernetes-driver")
        .expect("the driver container");
    assert_eq!(
        container.image.as_deref(),
        Some("docker.io/library/spark:4.0.1")
    );
    let driver_args = container.args.clone().unwrap_or_default();
    assert!(
        driver_args.first().map(String::as_str) == Some("driver")
            && driver_args.iter().any(|a| a == SPARK_MAIN_CLASS)
            && driver_args.iter().any(|a| a == SPARK_MAIN_FILE),
        "{driver_args:?}"
    );
    assert_eq!(
        driver.status.and_then(|s| s.phase).as_deref(),
        Some("Succeeded")
    );
    // The properties spark-submit gave the driver, in a ConfigMap it made
    // (its volume named as Spark names it; another holds the executors'
    // pod template).
    let conf = spec
        .volumes
        .iter()
        .flatten()
        .find(|v| v.name == "spark-conf-volume-driver")
        .and_then(|v| v.config_map.as_ref())
        .map(|c| c.name.clone())
        .unwrap_or_else(|| panic!("no driver configuration volume: {:?}", spec.volumes));
    let data = Api::<ConfigMap>::namespaced(client.clone(), &ns.name)
        .get(&conf)
        .await
        .expect("the driver's ConfigMap")
        .data
        .unwrap_or_default();
    let properties = data.get("spark.properties").cloned().unwrap_or_default();
    assert!(
        properties.contains(&format!("spark.kubernetes.namespace={}", ns.name))
            && properties.contains(&format!("spark.kubernetes.driver.pod.name={driver_name}")),
        "{conf}: {data:?}"
    );
    // The Spark UI's Service, the controller's (--enable-ui-service=true).
    let ui = status["driverInfo"]["webUIServiceName"]
        .as_str()
        .unwrap_or_else(|| panic!("no UI Service: {status}"));
    assert!(
        Api::<Service>::namespaced(client.clone(), &ns.name)
            .get_opt(ui)
            .await
            .expect("get")
            .is_some(),
        "the UI Service {ui}"
    );
    assert!(controller.is_running(), "{}", controller.log_text());
    assert!(webhook.is_running(), "{}", webhook.log_text());
    let quiet = Quiet {
        operator: &op,
        writes: before,
        controllers: &[
            (&controller, "the Spark operator's controller"),
            (&webhook, "the Spark operator's webhook"),
        ],
    };
    quiet
        .assert("the Spark operator wrote nothing while its controller and webhook worked")
        .await;
    let app = UserObject {
        api: &apps,
        name: SPARK_APP,
        kind: "SparkApplication",
    };
    upstream::delete_object_then_component(&mut phases, app, &quiet, &sparks, "Spark").await;
    // The removal took the Secret the webhook made, as it takes what its
    // programs make at run time.
    assert!(
        Api::<Secret>::namespaced(client.clone(), &ns.name)
            .get_opt("spark-operator-webhook-certs")
            .await
            .expect("get")
            .is_none_or(|s| s.metadata.deletion_timestamp.is_some()),
        "the webhook's certificate goes with the component"
    );
    upstream_runs::stop_and_remove(webhook);
    upstream_runs::stop_and_remove(controller);
    ns.delete().await;
}

const WEBHOOK: &str = "spark-operator-webhook";

/// The webhook made its certificate's Secret (which the operator does not
/// ship) and put its CA in every entry of both webhook configurations the
/// operator installed; the certificate names the installed Service.
async fn webhook_certificate_in_place(client: &kube::Client, ns: &str, webhook: &mut Controller) {
    use k8s_openapi::api::admissionregistration::v1::{
        MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
    };
    let secrets: Api<Secret> = Api::namespaced(client.clone(), ns);
    let mutating: Api<MutatingWebhookConfiguration> = Api::all(client.clone());
    let validating: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
    let timeout = Duration::from_secs(60);
    let ca = wait_for("the webhook's certificate Secret", timeout, || async {
        let data = secrets
            .get_opt("spark-operator-webhook-certs")
            .await
            .ok()??
            .data?;
        // Its own CA (no --enable-cert-manager): v2.5.0's key names.
        data.get("ca-cert.pem").map(|b| b.0.clone())
    })
    .await;
    let injected = wait_for("the webhooks' caBundles", timeout, || async {
        let m = mutating.get(WEBHOOK).await.ok()?.webhooks?;
        let v = validating.get(WEBHOOK).await.ok()?.webhooks?;
        let bundles: Vec<Option<Vec<u8>>> = m
            .iter()
            .map(|w| w.client_config.ca_bundle.as_ref().map(|b| b.0.clone()))
            .chain(
                v.iter()
                    .map(|w| w.client_config.ca_bundle.as_ref().map(|b| b.0.clone())),
            )
            .collect();
        bundles
            .iter()
            .all(|b| b.as_ref() == Some(&ca))
            .then_some(bundles.len())
    })
    .await;
    assert_eq!(injected, 7, "four mutating and three validating entries");
    assert!(webhook.is_running(), "{}", webhook.log_text());
}
