//! Each upstream controller the tests run, started as its component
//! installed it in a namespace: its ServiceAccount (a token), the installed
//! Deployment's args, environment and mounted configuration read from the
//! live objects, and only what a process outside a pod needs changed
//! (listeners moved to loopback or into a network namespace of its own,
//! the files a kubelet would mount written into a run folder). The
//! component tests (`training.rs`, `katib.rs`, `kserve.rs`, `spark.rs`) and
//! the person's day of the installed demo start them from here, so a
//! program runs the same way wherever its component was installed.

use std::path::Path;

use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams};
use kube::core::GroupVersionKind;
use serde_json::{Value, json};

use crate::objects::{config_value, secret_text};
use crate::operator::free_port;
use crate::upstream::{self, Controller, PrivateFolder};

/// Where controller-runtime reads a webhook server's certificate, and where
/// the Training and Serving Deployments mount it.
const CERT_DIR: &str = "/tmp/k8s-webhook-server/serving-certs";

/// The run folder of `program` for the install in `ns`.
fn run_dir(ns: &str, program: &str) -> std::path::PathBuf {
    upstream::run_dir(&format!("{ns}-{program}"))
}

/// The Kubeflow Training Operator v1.9.2 (its v1 manager) as the Training
/// component installed it in `ns`: its certificate rotator on the
/// installed Secret and webhook configuration, its three listeners (which
/// the installed args leave on every interface) moved to loopback.
pub async fn training_operator(client: &kube::Client, ns: &str) -> Controller {
    let program = upstream::program("training-operator");
    let installed = upstream::installed(client, ns, "training-operator", "training-operator").await;
    assert_eq!(
        installed.secrets.get(CERT_DIR).map(String::as_str),
        Some("training-operator-webhook-cert"),
        "the webhook certificate's Secret is mounted where v1.9.2 reads it"
    );
    assert!(
        installed
            .env
            .contains(&("MY_POD_NAMESPACE".to_string(), ns.to_string())),
        "the rotator's namespace comes from the pod's: {:?}",
        installed.env
    );
    // The webhook server has no host flag in v1.9.2: only its port moves.
    let mut args = installed.args.clone();
    for flag in [
        "--metrics-bind-address",
        "--health-probe-bind-address",
        "--webhook-server-port",
    ] {
        assert!(
            !args.iter().any(|a| a.starts_with(flag)),
            "installed with {flag}: {args:?}"
        );
    }
    args.push(format!("--metrics-bind-address=127.0.0.1:{}", free_port()));
    args.push(format!(
        "--health-probe-bind-address=127.0.0.1:{}",
        free_port()
    ));
    args.push(format!("--webhook-server-port={}", free_port()));
    let dir = run_dir(ns, "training-operator");
    let kubeconfig = dir.join("kubeconfig");
    upstream::service_account_kubeconfig(ns, &installed.service_account, &kubeconfig);
    // Its rotator fills the Secret, but only a kubelet would copy it into
    // the folder; the rotator waits for a certificate file there, and the
    // webhook server (which nothing calls here) serves it.
    let certs = dir.join("cert");
    std::fs::create_dir_all(&certs).expect("folder");
    upstream::serving_certificate(&certs);
    let env = installed.env_with_kubeconfig(&kubeconfig);
    Controller::start_with(
        &program,
        &args,
        &env,
        &[PrivateFolder::tmp(
            &certs,
            CERT_DIR.trim_start_matches("/tmp/"),
        )],
        dir.join("training-operator.log"),
    )
}

/// Katib's configuration as installed in `ns` (`katib-config.yaml` of the
/// `katib-config` ConfigMap).
pub async fn katib_config(client: &kube::Client, ns: &str) -> Value {
    let text = config_value(client, ns, "katib-config", "katib-config.yaml").await;
    serde_saphyr::from_str(&text).expect("katib-config.yaml")
}

/// Katib's controller v0.19.0 as the Katib component installed it in `ns`:
/// the installed katib-config with the controller's listeners on free
/// loopback ports instead of the pod's fixed ones, its webhook server's
/// certificate where it reads it (/tmp/cert).
pub async fn katib_controller(client: &kube::Client, ns: &str) -> Controller {
    let program = upstream::program("katib-controller");
    let dir = run_dir(ns, "katib-controller");
    let certs = dir.join("cert");
    std::fs::create_dir_all(&certs).expect("folder");
    let mut config = katib_config(client, ns).await;
    let controller = &mut config["init"]["controller"];
    controller["webhookPort"] = json!(free_port());
    controller["metricsAddr"] = json!(format!("127.0.0.1:{}", free_port()));
    controller["healthzAddr"] = json!(format!("127.0.0.1:{}", free_port()));
    let config_file = dir.join("katib-config.yaml");
    std::fs::write(
        &config_file,
        serde_saphyr::to_string(&config).expect("yaml"),
    )
    .expect("write config");
    let kubeconfig = dir.join("kubeconfig");
    upstream::service_account_kubeconfig(ns, "katib-controller", &kubeconfig);
    upstream::serving_certificate(&certs);
    Controller::start(
        &program,
        &[format!("--katib-config={}", config_file.display())],
        &[
            ("KUBECONFIG", kubeconfig.display().to_string()),
            ("KATIB_CORE_NAMESPACE", ns.to_string()),
        ],
        Some((&certs, "cert")),
        dir.join("katib-controller.log"),
    )
}

/// KServe's controller manager as the Serving component installed it in
/// `ns` (v0.16.0, Kubeflow 26.03's): its webhook certificate from the
/// Secret the operator made, in a network namespace of its own (its
/// webhook server listens on every interface at a port no flag moves).
pub async fn kserve_manager(client: &kube::Client, ns: &str) -> Controller {
    const MANAGER: &str = "kserve-controller-manager";
    let program = upstream::program(MANAGER);
    let installed = upstream::installed(client, ns, MANAGER, "manager").await;
    let secret = installed
        .secrets
        .get(CERT_DIR)
        .unwrap_or_else(|| panic!("the manager mounts its certificate at {CERT_DIR}"))
        .clone();
    let dir = run_dir(ns, MANAGER);
    let certs = dir.join("cert");
    std::fs::create_dir_all(&certs).expect("folder");
    for key in ["tls.crt", "tls.key"] {
        let text = secret_text(client, ns, &secret, key)
            .await
            .unwrap_or_else(|| panic!("Secret {secret} has no {key}"));
        std::fs::write(certs.join(key), text).expect("certificate file");
    }
    let kubeconfig = dir.join("kubeconfig");
    upstream::service_account_kubeconfig(ns, &installed.service_account, &kubeconfig);
    let env = installed.env_with_kubeconfig(&kubeconfig);
    let sa = dir.join("serviceaccount");
    Controller::start_isolated(
        &program,
        &installed.args,
        &env,
        &[
            PrivateFolder::tmp(&certs, CERT_DIR.trim_start_matches("/tmp/")),
            PrivateFolder::service_account_namespace(&sa, ns),
        ],
        dir.join(format!("{MANAGER}.log")),
    )
}

/// Kubeflow Trainer's controller manager as the Trainer component
/// installed it in `ns`, the build `program` (`trainer-controller-manager`
/// is 26.03.1's v2.2.0), with its installed configuration (leader election
/// and certificate management on, as installed).
pub async fn trainer_manager(client: &kube::Client, ns: &str, program: &str) -> Controller {
    let program = upstream::program(program);
    run_configured(
        client,
        ns,
        "kubeflow-trainer-controller-manager",
        &program,
        |c| {
            assert_eq!(c["certManagement"]["enable"], json!(true), "as installed");
            assert_eq!(
                c["leaderElection"]["leaderElect"],
                json!(true),
                "as installed"
            );
            // Only served with the TrainJobStatus feature (off), moved all the
            // same where the version has it: it would listen on every
            // interface.
            if c.get("statusServer").is_some() {
                c["statusServer"]["port"] = json!(free_port());
            }
        },
    )
    .await
}

/// JobSet's controller manager as the Trainer component installed it in
/// `ns`, the build `program` (`jobset-controller-manager` is v0.11.0).
pub async fn jobset_manager(client: &kube::Client, ns: &str, program: &str) -> Controller {
    let program = upstream::program(program);
    run_configured(client, ns, "jobset-controller-manager", &program, |c| {
        assert_eq!(
            c["internalCertManagement"]["enable"],
            json!(true),
            "as installed"
        );
    })
    .await
}

/// One installed controller Deployment run as a process: its container's
/// args and mounted configuration as installed (as `edit` leaves it, then
/// with its listeners moved to free loopback ports), its ServiceAccount's
/// token, a
/// loopback serving certificate where its Secret is mounted (the
/// certificate rotator fills the Secret, but only a kubelet would copy it
/// into the folder), and the pod's namespace file.
async fn run_configured(
    client: &kube::Client,
    ns: &str,
    deployment: &str,
    program: &std::path::Path,
    edit: impl Fn(&mut Value),
) -> Controller {
    let installed = upstream::installed(client, ns, deployment, "manager").await;
    assert!(
        installed.secrets.contains_key(CERT_DIR),
        "{deployment} mounts its webhook certificate at {CERT_DIR}: {:?}",
        installed.secrets
    );
    let dir = upstream::run_dir(&format!("{ns}-{deployment}"));
    let args = installed.args_with_files(&dir, |_, text| {
        let mut config: Value = serde_saphyr::from_str(text).expect("configuration YAML");
        edit(&mut config);
        move_listeners(&mut config);
        serde_saphyr::to_string(&config).expect("yaml")
    });
    let kubeconfig = dir.join("kubeconfig");
    upstream::service_account_kubeconfig(ns, &installed.service_account, &kubeconfig);
    let certs = dir.join("cert");
    std::fs::create_dir_all(&certs).expect("folder");
    upstream::serving_certificate(&certs);
    let sa = dir.join("serviceaccount");
    let env = installed.env_with_kubeconfig(&kubeconfig);
    Controller::start_with(
        program,
        &args,
        &env,
        &[
            PrivateFolder::tmp(&certs, CERT_DIR.trim_start_matches("/tmp/")),
            PrivateFolder::service_account_namespace(&sa, ns),
        ],
        dir.join(format!("{deployment}.log")),
    )
}

/// Waits for the JobSet that Trainer makes for TrainJob `name` in `ns`,
/// then adds what JobSet's mutating webhook would (the test cluster calls
/// no admission webhooks; the fields being absent). Without it JobSet's
/// controller panics on the absent spec.network (a nil pointer in
/// dnsHostnamesEnabled, seen here) and could make no valid Job (a pod
/// restartPolicy is required). The fields are JobSet's own defaults, not
/// Trainer's: Trainer's later applies keep them (replicatedJobs is a map
/// list by name, and these fields are not in Trainer's apply). Returns the
/// namespace's JobSets.
pub async fn default_jobset_as_its_webhook(
    client: &kube::Client,
    ns: &str,
    name: &str,
    timeout: std::time::Duration,
) -> Api<DynamicObject> {
    let jobsets: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        ns,
        &ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("jobset.x-k8s.io", "v1alpha2", "JobSet"),
            "jobsets",
        ),
    );
    let made = crate::objects::wait_exists(&jobsets, name, timeout).await;
    jobsets
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(jobset_webhook_defaults(&made)),
        )
        .await
        .expect("the JobSet webhook's defaults");
    jobsets
}

/// Waits until SparkApplication `name` is COMPLETED and returns it; fails
/// at once on a failed state, and on a timeout, each with its status and
/// `logs` (the controllers' logs).
pub async fn spark_application_completed(
    apps: &Api<DynamicObject>,
    name: &str,
    timeout: std::time::Duration,
    logs: impl Fn() -> String,
) -> DynamicObject {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let app = apps.get(name).await.expect("the application");
        let state = app
            .data
            .pointer("/status/applicationState/state")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        assert!(
            !matches!(state.as_str(), "FAILED" | "SUBMISSION_FAILED" | "FAILING"),
            "the application failed: {:?}\n{}",
            app.data.get("status"),
            logs()
        );
        if state == "COMPLETED" {
            return app;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the application did not complete in {timeout:?}: {:?}\n{}",
            app.data.get("status"),
            logs()
        );
        tokio::time::sleep(std::time::Duration::from_millis(250)).await;
    }
}

/// A merge patch adding what JobSet's defaulting webhook (v0.11.0) adds
/// to `js` where absent: success policy All, startup AnyOrder, DNS
/// hostnames and not-ready addresses published, Indexed Jobs whose pods
/// restart OnFailure. (A merge patch replaces a list whole: the
/// replicated jobs go back as they are, with those two fields added.)
fn jobset_webhook_defaults(js: &kube::api::DynamicObject) -> Value {
    let spec = js.data.get("spec").cloned().unwrap_or_default();
    let mut patch = serde_json::Map::new();
    for (field, value) in [
        ("successPolicy", json!({"operator": "All"})),
        ("startupPolicy", json!({"startupPolicyOrder": "AnyOrder"})),
        (
            "network",
            json!({"enableDNSHostnames": true, "publishNotReadyAddresses": true}),
        ),
    ] {
        if spec.get(field).is_none() {
            patch.insert(field.to_string(), value);
        }
    }
    let mut jobs = spec["replicatedJobs"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    for job in &mut jobs {
        let job_spec = &mut job["template"]["spec"];
        if job_spec.get("completionMode").is_none() {
            job_spec["completionMode"] = json!("Indexed");
        }
        if job_spec["template"]["spec"].get("restartPolicy").is_none() {
            job_spec["template"]["spec"]["restartPolicy"] = json!("OnFailure");
        }
    }
    patch.insert("replicatedJobs".to_string(), Value::Array(jobs));
    json!({"spec": patch})
}

fn loopback() -> String {
    format!("127.0.0.1:{}", free_port())
}

/// Moves the listeners both programs' controller-runtime configuration
/// names (health, metrics, webhook) to free loopback ports: as installed
/// they are the pod's fixed ports on every interface.
fn move_listeners(config: &mut Value) {
    config["health"]["healthProbeBindAddress"] = json!(loopback());
    config["metrics"]["bindAddress"] = json!(loopback());
    config["webhook"]["host"] = json!("127.0.0.1");
    config["webhook"]["port"] = json!(free_port());
}

/// The Spark operator's controller v2.5.0 as the Spark component installed
/// it in `ns`, with what its image adds (`SPARK_HOME`: Spark 4.0.1, whose
/// `spark-submit` it runs to make each driver pod) and what the kubelet
/// gives a pod (`KUBERNETES_SERVICE_HOST`/`_PORT`, an empty /tmp where the
/// Deployment mounts its emptyDir). Its metrics and health listeners
/// (every interface: :8080 as installed, :8081 by default) move to free
/// loopback ports.
pub async fn spark_controller(client: &kube::Client, ns: &str) -> Controller {
    const CONTROLLER: &str = "spark-operator-controller";
    let program = upstream::program("spark-operator");
    let spark_home = upstream::spark_home();
    let installed = upstream::installed(client, ns, CONTROLLER, CONTROLLER).await;
    assert_eq!(installed.service_account, CONTROLLER);
    let metrics = "--metrics-bind-address=";
    assert!(
        installed
            .args
            .iter()
            .any(|a| a == "--metrics-bind-address=:8080")
            && !installed
                .args
                .iter()
                .any(|a| a.starts_with("--health-probe-bind-address")),
        "{:?}",
        installed.args
    );
    let mut args: Vec<String> = installed
        .args
        .iter()
        .map(|a| {
            if a.starts_with(metrics) {
                format!("{metrics}127.0.0.1:{}", free_port())
            } else {
                a.clone()
            }
        })
        .collect();
    args.push(format!(
        "--health-probe-bind-address=127.0.0.1:{}",
        free_port()
    ));
    let dir = run_dir(ns, CONTROLLER);
    let kubeconfig = dir.join("kubeconfig");
    upstream::service_account_kubeconfig(ns, &installed.service_account, &kubeconfig);
    let api = upstream::api_server_address();
    let (host, port) = api.rsplit_once(':').expect("host:port");
    let mut env = installed.env_with_kubeconfig(&kubeconfig);
    env.push(("SPARK_HOME", spark_home.display().to_string()));
    env.push(("KUBERNETES_SERVICE_HOST", host.to_string()));
    env.push(("KUBERNETES_SERVICE_PORT", port.to_string()));
    // The controller writes each submission's pod templates under /tmp.
    assert_eq!(installed.empty_dirs, ["/tmp"]);
    let tmp = dir.join("tmp");
    std::fs::create_dir_all(&tmp).expect("folder");
    Controller::start_with(
        &program,
        &args,
        &env,
        &[PrivateFolder::tmp(&tmp, "spark")],
        dir.join(format!("{CONTROLLER}.log")),
    )
}

/// The Spark operator's webhook (the same program, `webhook start`) as the
/// Spark component installed it in `ns`, in a network namespace of its own
/// (its webhook server takes every interface at --webhook-port, which has
/// no host flag). Where the Deployment mounts an emptyDir for the
/// certificate files it writes, it gets a folder of the run
/// (`--webhook-cert-dir`, the one argument added). Nothing calls it (the
/// test cluster's admission webhooks are off): what it does is its
/// certificate's Secret and the caBundles.
pub async fn spark_webhook(client: &kube::Client, ns: &str) -> Controller {
    const WEBHOOK: &str = "spark-operator-webhook";
    let program = upstream::program("spark-operator");
    let installed = upstream::installed(client, ns, WEBHOOK, WEBHOOK).await;
    assert_eq!(installed.service_account, WEBHOOK);
    assert_eq!(
        installed.empty_dirs,
        ["/etc/k8s-webhook-server/serving-certs"]
    );
    for flag in [
        format!("--webhook-secret-namespace={ns}"),
        format!("--webhook-svc-namespace={ns}"),
        "--webhook-secret-name=spark-operator-webhook-certs".to_string(),
    ] {
        assert!(installed.args.contains(&flag), "{:?}", installed.args);
    }
    let dir = run_dir(ns, WEBHOOK);
    let certs = dir.join("webhook-certs");
    std::fs::create_dir_all(&certs).expect("folder");
    let mut args = installed.args.clone();
    args.push(format!("--webhook-cert-dir={}", certs.display()));
    let kubeconfig = dir.join("kubeconfig");
    upstream::service_account_kubeconfig(ns, &installed.service_account, &kubeconfig);
    let env = installed.env_with_kubeconfig(&kubeconfig);
    Controller::start_isolated(
        &program,
        &args,
        &env,
        &[],
        dir.join(format!("{WEBHOOK}.log")),
    )
}

/// Stops a controller started here, then removes its run folder (its log
/// among its files): for a test that passed, which needs them no more.
pub fn stop_and_remove(controller: Controller) {
    let dir = controller.log_path().parent().map(Path::to_path_buf);
    drop(controller);
    if let Some(dir) = dir {
        let _ = std::fs::remove_dir_all(dir);
    }
}

// What users submit, as they write them: the programs above run them in
// the component tests and in the person's day.

/// A user's Experiment: random search over one parameter, trials as Jobs,
/// written with the defaults Katib's mutating webhook would add (the test
/// cluster runs no admission webhooks).
pub const KATIB_EXPERIMENT: &str = r#"apiVersion: kubeflow.org/v1beta1
kind: Experiment
metadata: {name: user-tuning}
spec:
  objective:
    type: maximize
    goal: 0.99
    objectiveMetricName: accuracy
    metricStrategies: [{name: accuracy, value: max}]
  algorithm: {algorithmName: random}
  parallelTrialCount: 2
  maxTrialCount: 4
  maxFailedTrialCount: 2
  resumePolicy: Never
  metricsCollectorSpec: {collector: {kind: StdOut}}
  parameters:
    - name: lr
      parameterType: double
      feasibleSpace: {min: "0.01", max: "0.1", distribution: uniform}
  trialTemplate:
    primaryContainerName: training-container
    successCondition: 'status.conditions.#(type=="Complete")#|#(status=="True")#'
    failureCondition: 'status.conditions.#(type=="Failed")#|#(status=="True")#'
    trialParameters:
      - {name: learningRate, reference: lr}
    trialSpec:
      apiVersion: batch/v1
      kind: Job
      spec:
        template:
          spec:
            restartPolicy: Never
            containers:
              - name: training-container
                image: example.invalid/train:1
                command: [python3, train.py, "--lr=${trialParameters.learningRate}"]
"#;

/// A user's PyTorchJob: one master and one worker, written as a user would.
/// The controller's admission webhook only validates (v1.9.2 has no
/// defaulting webhook: the controller applies the defaults itself), so no
/// field is added here for the test cluster's lack of webhooks.
pub const PYTORCH_JOB: &str = "apiVersion: kubeflow.org/v1\nkind: PyTorchJob\nmetadata: {name: user-job}\nspec:\n  pytorchReplicaSpecs:\n    Master:\n      replicas: 1\n      restartPolicy: OnFailure\n      template:\n        spec:\n          containers:\n          - name: pytorch\n            image: docker.io/pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime\n            command: [python, -c, \"print('trained')\"]\n    Worker:\n      replicas: 1\n      restartPolicy: OnFailure\n      template:\n        spec:\n          containers:\n          - name: pytorch\n            image: docker.io/pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime\n            command: [python, -c, \"print('trained')\"]\n";

/// A user's scikit-learn model served in raw deployment mode. The test
/// cluster calls no admission webhooks, so KServe's defaulter does not run:
/// the spec is what a user writes, and the controller picks the runtime.
pub const INFERENCE_SERVICE: &str = "apiVersion: serving.kserve.io/v1beta1\nkind: InferenceService\nmetadata:\n  name: sklearn-iris\n  annotations: {serving.kserve.io/deploymentMode: RawDeployment}\nspec:\n  predictor:\n    model:\n      modelFormat: {name: sklearn}\n      storageUri: gs://kfserving-examples/models/sklearn/1.0/model\n";

pub const SPARK_APP: &str = "spark-pi";
/// The driver's ServiceAccount, as a profile namespace has it.
pub const SPARK_DRIVER_ACCOUNT: &str = "default-editor";
pub const SPARK_MAIN_CLASS: &str = "org.apache.spark.examples.SparkPi";
pub const SPARK_MAIN_FILE: &str = "local:///opt/spark/examples/jars/spark-examples.jar";

/// Spark's own example, as a user writes it, with what the Spark
/// operator's defaulting webhook (v2.5.0) would add written out (type,
/// mode, restart policy, cores, memory, instances): the test cluster calls
/// no admission webhooks.
pub fn spark_pi() -> String {
    format!(
        "apiVersion: sparkoperator.k8s.io/v1beta2\nkind: SparkApplication\nmetadata: {{name: {SPARK_APP}}}\nspec:\n  type: Scala\n  mode: cluster\n  image: docker.io/library/spark:4.0.1\n  mainClass: {SPARK_MAIN_CLASS}\n  mainApplicationFile: {SPARK_MAIN_FILE}\n  arguments: [\"100\"]\n  sparkVersion: 4.0.1\n  restartPolicy: {{type: Never}}\n  driver: {{cores: 1, memory: 512m, serviceAccount: {SPARK_DRIVER_ACCOUNT}}}\n  executor: {{instances: 1, cores: 1, memory: 512m}}\n"
    )
}

/// A user's TrainJob on the torch-distributed runtime the bundle installs,
/// on two nodes (so its Job runs two pods). The controllers' admission
/// webhooks are not called here (the test cluster runs none), so it is
/// written as a user would and the CRDs' defaults fill the rest.
pub const TRAIN_JOB: &str = "apiVersion: trainer.kubeflow.org/v1alpha1\nkind: TrainJob\nmetadata: {name: user-job}\nspec:\n  runtimeRef: {name: torch-distributed}\n  trainer: {numNodes: 2}\n";
