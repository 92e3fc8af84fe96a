//! The Trainer (v2) operator, running as a process, against the real
//! control plane; and Trainer's and JobSet's own controllers run on what it
//! installs.

use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Pod, Secret};
use k8s_openapi::api::rbac::v1::ClusterRoleBinding;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::ResourceExt;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, ListParams};
use kube::core::GroupVersionKind;
use kubeflow_e2e::component::{degraded, install, wait_condition, wait_condition_where, wait_gone};
use kubeflow_e2e::rotator;
use kubeflow_e2e::upstream::{self, Quiet, UserObject};
use kubeflow_e2e::upstream_runs::{self, TRAIN_JOB};
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

/// The finalizer Trainer's controller puts on a runtime a TrainJob uses.
const IN_USE: &str = "trainer.kubeflow.org/resource-in-use";

fn dynamic(
    client: &kube::Client,
    ns: &str,
    gvk: (&str, &str, &str),
    plural: &str,
) -> Api<DynamicObject> {
    let ar = ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(gvk.0, gvk.1, gvk.2), plural);
    Api::namespaced_with(client.clone(), ns, &ar)
}

/// Takes Trainer's in-use finalizer off the torch-distributed runtime when
/// the test fails before the Trainer's removal: held with no controller
/// running, it would keep the next run's sweep waiting for ever. A passing
/// test forgets it (the controller took the finalizer off).
struct ReleaseRuntime;

impl Drop for ReleaseRuntime {
    fn drop(&mut self) {
        let _ = kubeflow_e2e::run_tool(
            "kubectl",
            &[
                "patch",
                "clustertrainingruntime",
                "torch-distributed",
                "--type=json",
                "-p",
                r#"[{"op":"remove","path":"/metadata/finalizers"}]"#,
            ],
        );
    }
}

/// Kubeflow Trainer's controller manager (v2.2.0) and JobSet's (v0.11.0),
/// built from the Go module proxy, run as processes on what the Trainer
/// operator installed for Kubeflow 26.03.1: each as its installed
/// ServiceAccount, with its installed args and configuration (leader
/// election and certificate management on, as installed). A user's
/// TrainJob becomes a JobSet, a Job and two pods that kwok runs to
/// Succeeded, and the TrainJob reaches Complete; neither program is
/// refused anything, and the Trainer operator writes nothing meanwhile
/// (the rotators' certificates and caBundles are theirs).
#[tokio::test]
async fn trainers_controllers_run_a_trainjob_to_complete_on_what_is_installed() {
    let (client, mut phases) = kubeflow_e2e::component::prepare(&["Trainer"], &["trainer"]).await;
    upstream::program("trainer-controller-manager");
    upstream::program("jobset-controller-manager");
    phases.phase("upstream controllers built");
    let yaml = "apiVersion: components.kubeflow.org/v1alpha1\nkind: Trainer\nmetadata: {name: kubeflow}\nspec:\n  version: v2.2.0\n  runtimes: [torch-distributed]\n";
    let (ns, op, trainers, cr) =
        install(&client, "trainer-ctl", OPERATOR, yaml, READY_TIMEOUT).await;
    assert_eq!(
        cr.data.pointer("/status/jobSetVersion"),
        Some(&json!("v0.11.0"))
    );
    phases.phase("Trainer installed");
    let release = ReleaseRuntime;

    let before = op.settled_writes().await;
    let mut trainer =
        upstream_runs::trainer_manager(&client, &ns.name, "trainer-controller-manager").await;
    let mut jobset =
        upstream_runs::jobset_manager(&client, &ns.name, "jobset-controller-manager").await;
    apply_yaml(&client, &ns.name, TRAIN_JOB).await;
    phases.phase("controllers started");

    let timeout = Duration::from_secs(60);
    let jobsets =
        upstream_runs::default_jobset_as_its_webhook(&client, &ns.name, "user-job", timeout).await;
    let trainjobs = dynamic(
        &client,
        &ns.name,
        ("trainer.kubeflow.org", "v1alpha1", "TrainJob"),
        "trainjobs",
    );
    let done = wait_condition_where(
        &trainjobs,
        "user-job",
        "Complete",
        "the TrainJob Complete",
        timeout,
        |s, _, _| s == "True",
    )
    .await;
    phases.phase("the TrainJob Complete");
    let by_jobset = ListParams::default().labels("jobset.sigs.k8s.io/jobset-name=user-job");
    let jobs = Api::<Job>::namespaced(client.clone(), &ns.name)
        .list(&by_jobset)
        .await
        .expect("jobs")
        .items;
    assert_eq!(jobs.len(), 1, "one replicated job, one Job");
    let job_status = jobs[0].status.clone().unwrap_or_default();
    assert_eq!(job_status.succeeded, Some(2), "{job_status:?}");
    let pods = Api::<Pod>::namespaced(client.clone(), &ns.name)
        .list(&by_jobset)
        .await
        .expect("pods")
        .items;
    let phases_of: Vec<Option<String>> = pods
        .iter()
        .map(|p| p.status.as_ref().and_then(|s| s.phase.clone()))
        .collect();
    assert_eq!(phases_of, vec![Some("Succeeded".to_string()); 2]);
    let set = jobsets.get("user-job").await.expect("jobset");
    assert_eq!(
        kubeflow_e2e::component::condition(&set, "Completed").map(|c| c.0),
        Some("True".to_string()),
        "the TrainJob Complete ({done}) on a Completed JobSet: {:?}",
        set.data.get("status")
    );

    // Trainer's runtime controller marks the runtime in use.
    let runtime = runtimes(&client)
        .get("torch-distributed")
        .await
        .expect("runtime");
    assert!(
        runtime.finalizers().iter().any(|f| f == IN_USE),
        "{:?}",
        runtime.finalizers()
    );

    // Both rotators worked in the install's namespace (the pod's
    // namespace file): each filled its Secret, which the operator ships
    // empty and leaves to them.
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns.name);
    for s in [
        "kubeflow-trainer-webhook-cert",
        "jobset-webhook-server-cert",
    ] {
        let data = secrets
            .get(s)
            .await
            .expect("secret")
            .data
            .unwrap_or_default();
        assert!(
            data.contains_key("ca.crt") && data.contains_key("tls.crt"),
            "{s}: {:?}",
            data.keys()
        );
    }
    assert!(trainer.is_running(), "{}", trainer.log_text());
    assert!(jobset.is_running(), "{}", jobset.log_text());
    let quiet = Quiet {
        operator: &op,
        writes: before,
        controllers: &[
            (&trainer, "Trainer's controller manager"),
            (&jobset, "JobSet's controller manager"),
        ],
    };
    quiet
        .assert(
            "the Trainer operator wrote nothing while Trainer's and JobSet's controllers worked",
        )
        .await;
    phases.phase("checks");

    // The TrainJob goes while the controllers run (their garbage: the
    // JobSet, Job and pods go with it). Then the Trainer goes while its
    // controller runs: the removal deletes the runtimes first and waits,
    // and Trainer's controller, still allowed what it was installed with,
    // takes its in-use finalizer off the runtime no TrainJob names any
    // more; only then do the controller's RBAC, ServiceAccount and
    // Deployment go.
    let trainjob = UserObject {
        api: &trainjobs,
        name: "user-job",
        kind: "TrainJob",
    };
    upstream::delete_object_then_component(&mut phases, trainjob, &quiet, &trainers, "Trainer")
        .await;
    assert!(
        runtimes(&client)
            .get_opt("torch-distributed")
            .await
            .expect("runtime")
            .is_none(),
        "the runtime went with the Trainer"
    );
    // Nothing holds the runtime any more: the guard has nothing to do.
    std::mem::forget(release);
    let run_dirs: Vec<std::path::PathBuf> = [&trainer, &jobset]
        .iter()
        .filter_map(|c| c.log_path().parent().map(std::path::Path::to_path_buf))
        .collect();
    drop(trainer);
    drop(jobset);
    drop(op);
    ns.delete().await;
    for dir in run_dirs {
        let _ = std::fs::remove_dir_all(dir);
    }
}
