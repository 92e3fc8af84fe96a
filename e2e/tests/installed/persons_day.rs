//! A person's day on the install at 26.03, in the profile namespace the
//! example's Dashboard declares (`kubeflow-user-example-com`, owner
//! `user@example.com`), made as the profile controller makes it (the
//! labels of the installed `namespace-labels` configuration, the owner's
//! `namespaceAdmin` binding to `kubeflow-admin`, the `default-editor` and
//! `default-viewer` accounts): as that person (impersonated), a TrainJob, a
//! PyTorchJob, a SparkApplication, a Katib Experiment and an
//! InferenceService, each run
//! by its own upstream controller started as installed
//! (`kubeflow_e2e::upstream_runs`), none refused anything. The day ends
//! (the controllers stop) and the platform upgrades to 26.03.1
//! (`upgrade`): `after_upgrade` then finds each of the person's objects
//! with its uid, written by no operator.
//!
//! Not in this day: a pipeline run (Pipelines installs upstream's
//! single-namespace Argo, which runs no Workflow in a profile namespace:
//! docs/usage.md); the login itself is `login.rs`'s.

use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod, ServiceAccount};
use k8s_openapi::api::rbac::v1::RoleBinding;
use kube::ResourceExt;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::GroupVersionKind;
use kubeflow_e2e::component::{condition, profile_namespace, profiles, wait_gone};
use kubeflow_e2e::demo::{COMPONENTS, KUBEFLOW_NAMESPACE};
use kubeflow_e2e::objects::wait_exists;
use kubeflow_e2e::upstream::Controller;
use kubeflow_e2e::upstream_runs::{
    self, INFERENCE_SERVICE, KATIB_EXPERIMENT, PYTORCH_JOB, SPARK_APP, TRAIN_JOB, spark_pi,
};
use kubeflow_e2e::{apply_yaml, client_as};
use serde_json::{Value, json};

const PROFILE: &str = "kubeflow-user-example-com";
/// 26.03's Trainer and JobSet, as `e2e/upstream-controllers` names them.
const TRAINER_2603: &str = "trainer-controller-manager-v2.1.0";
const JOBSET_2603: &str = "jobset-controller-manager-v0.10.1";
/// The finalizer Trainer's controller puts on a runtime a TrainJob uses.
const IN_USE: &str = "trainer.kubeflow.org/resource-in-use";
const TIMEOUT: Duration = Duration::from_secs(150);

/// The person's objects: kind, group, version, plural and name.
const OBJECTS: [(&str, &str, &str, &str, &str); 5] = [
    (
        "TrainJob",
        "trainer.kubeflow.org",
        "v1alpha1",
        "trainjobs",
        "user-job",
    ),
    (
        "PyTorchJob",
        "kubeflow.org",
        "v1",
        "pytorchjobs",
        "user-job",
    ),
    (
        "SparkApplication",
        "sparkoperator.k8s.io",
        "v1beta2",
        "sparkapplications",
        SPARK_APP,
    ),
    (
        "Experiment",
        "kubeflow.org",
        "v1beta1",
        "experiments",
        "user-tuning",
    ),
    (
        "InferenceService",
        "serving.kserve.io",
        "v1beta1",
        "inferenceservices",
        "sklearn-iris",
    ),
];

fn api(
    client: &kube::Client,
    (kind, group, version, plural, _): (&str, &str, &str, &str, &str),
) -> Api<DynamicObject> {
    Api::namespaced_with(
        client.clone(),
        PROFILE,
        &ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural),
    )
}

/// What the day leaves for `after_upgrade`: each object's kind and uid.
pub struct Day {
    uids: Vec<(String, String)>,
}

/// The profile's namespace as the profile controller makes it: owned by
/// the Profile, labelled as the installed `namespace-labels` configuration
/// says, the owner an admin of it, the two accounts a notebook or a job
/// runs as.
async fn make_profile_namespace(client: &kube::Client) -> String {
    let profile = profiles(client)
        .get(PROFILE)
        .await
        .expect("the declared Profile");
    let owner = profile.data["spec"]["owner"]["name"]
        .as_str()
        .expect("the Profile's owner")
        .to_string();
    let configs: Api<ConfigMap> = Api::namespaced(client.clone(), KUBEFLOW_NAMESPACE);
    let labels_text = configs
        .list(&Default::default())
        .await
        .expect("ConfigMaps")
        .items
        .into_iter()
        .find_map(|c| c.data?.get("namespace-labels.yaml").cloned())
        .expect("the profile controller's namespace-labels configuration");
    let labels: std::collections::BTreeMap<String, String> =
        serde_saphyr::from_str(&labels_text).expect("namespace-labels.yaml");
    let mut namespace = profile_namespace(PROFILE, &profile.uid().expect("uid"));
    // An empty value means "remove this label" to the profile controller.
    namespace
        .labels_mut()
        .extend(labels.into_iter().filter(|(_, v)| !v.is_empty()));
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &namespace)
        .await
        .expect("the profile's namespace");
    let binding = |name: &str, role: &str, subject: Value| -> RoleBinding {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": PROFILE},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
            "subjects": [subject],
        }))
        .expect("binding")
    };
    let bindings: Api<RoleBinding> = Api::namespaced(client.clone(), PROFILE);
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), PROFILE);
    let pp = PostParams::default();
    bindings
        .create(
            &pp,
            &binding(
                "namespaceAdmin",
                "kubeflow-admin",
                json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": owner}),
            ),
        )
        .await
        .expect("namespaceAdmin");
    for (account, role) in [
        ("default-editor", "kubeflow-edit"),
        ("default-viewer", "kubeflow-view"),
    ] {
        accounts
            .create(
                &pp,
                &serde_json::from_value(json!({"metadata": {"name": account}})).expect("account"),
            )
            .await
            .expect("account");
        bindings
            .create(
                &pp,
                &binding(
                    account,
                    role,
                    json!({"kind": "ServiceAccount", "name": account, "namespace": PROFILE}),
                ),
            )
            .await
            .expect("account binding");
    }
    owner
}

/// The day, at 26.03: the namespace, the person's five objects made as the
/// person, each run by its controller to where it should be.
pub async fn check(client: &kube::Client) -> Day {
    let owner = make_profile_namespace(client).await;
    let person = client_as(&owner).await.expect("a client as the owner");

    let controllers: Vec<(Controller, &str)> = vec![
        (
            upstream_runs::trainer_manager(client, KUBEFLOW_NAMESPACE, TRAINER_2603).await,
            "Trainer's controller manager",
        ),
        (
            upstream_runs::jobset_manager(client, KUBEFLOW_NAMESPACE, JOBSET_2603).await,
            "JobSet's controller manager",
        ),
        (
            upstream_runs::training_operator(client, KUBEFLOW_NAMESPACE).await,
            "the training-operator",
        ),
        (
            upstream_runs::spark_controller(client, KUBEFLOW_NAMESPACE).await,
            "the Spark operator's controller",
        ),
        (
            upstream_runs::katib_controller(client, KUBEFLOW_NAMESPACE).await,
            "Katib's controller",
        ),
        (
            upstream_runs::kserve_manager(client, KUBEFLOW_NAMESPACE).await,
            "KServe's controller manager",
        ),
    ];
    // Made as the person: what the profile's `kubeflow-admin` binding
    // (aggregating each component's roles) must allow.
    for text in [
        TRAIN_JOB.to_string(),
        PYTORCH_JOB.to_string(),
        spark_pi(),
        KATIB_EXPERIMENT.to_string(),
        INFERENCE_SERVICE.to_string(),
    ] {
        apply_yaml(&person, PROFILE, &text).await;
    }

    let logs = || {
        controllers
            .iter()
            .map(|(c, what)| format!("== {what}\n{}", c.log_text()))
            .collect::<Vec<_>>()
            .join("\n")
    };
    // The TrainJob Complete: Trainer made its JobSet, given here what
    // JobSet's defaulting webhook would add (the test cluster calls no
    // webhooks), JobSet its Job, kwok completed the pods.
    upstream_runs::default_jobset_as_its_webhook(client, PROFILE, "user-job", TIMEOUT).await;
    condition_true(client, OBJECTS[0], "Complete", &logs).await;
    // The PyTorchJob Succeeded (kwok completes its pods).
    condition_true(client, OBJECTS[1], "Succeeded", &logs).await;
    // The SparkApplication COMPLETED: spark-submit made its driver pod as
    // the person's application, kwok ran it.
    upstream_runs::spark_application_completed(&api(client, OBJECTS[2]), SPARK_APP, TIMEOUT, &logs)
        .await;
    let driver = Api::<Pod>::namespaced(client.clone(), PROFILE)
        .get(&format!("{SPARK_APP}-driver"))
        .await
        .expect("the driver pod");
    assert_eq!(
        driver.spec.and_then(|s| s.service_account_name).as_deref(),
        Some("default-editor"),
        "the driver runs as the profile's editor account"
    );
    // The Experiment's Suggestion and its suggestion service, in the
    // profile's namespace.
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), PROFILE);
    wait_exists(&deployments, "user-tuning-random", TIMEOUT).await;
    // The InferenceService Ready in raw deployment mode.
    condition_true(client, OBJECTS[4], "Ready", &logs).await;

    let mut uids = Vec::new();
    for entry in OBJECTS {
        let object = api(client, entry)
            .get(entry.4)
            .await
            .expect("the person's object");
        uids.push((entry.0.to_string(), object.uid().expect("uid")));
    }
    // The day ends: each program was refused nothing, and stops.
    for (controller, what) in controllers {
        controller.assert_nothing_forbidden(what);
        upstream_runs::stop_and_remove(controller);
    }
    Day { uids }
}

/// Waits until the person's object of `OBJECTS` entry `entry` has
/// condition `kind` True, printing the controllers' logs on a timeout.
async fn condition_true(
    client: &kube::Client,
    entry: (&str, &str, &str, &str, &str),
    kind: &str,
    logs: &dyn Fn() -> String,
) {
    let (api, name) = (api(client, entry), entry.4);
    let deadline = tokio::time::Instant::now() + TIMEOUT;
    loop {
        if let Ok(object) = api.get(name).await
            && condition(&object, kind).is_some_and(|(status, ..)| status == "True")
        {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out after {TIMEOUT:?} waiting for {name} {kind}\n{}",
            logs()
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// After the upgrade to 26.03.1: the person's objects are the same ones
/// (uids), written by no operator. Then they go with the namespace
/// (their controllers no longer run, so their finalizers are taken off,
/// as a platform team would before removing a namespace).
pub async fn after_upgrade(client: &kube::Client, day: Day) {
    for (entry, (kind, uid)) in OBJECTS.iter().zip(&day.uids) {
        let object = api(client, *entry)
            .get(entry.4)
            .await
            .unwrap_or_else(|e| panic!("the person's {kind} after the upgrade: {e}"));
        assert_eq!(object.uid().as_ref(), Some(uid), "{kind} kept");
        let writers: Vec<String> = object
            .managed_fields()
            .iter()
            .filter_map(|m| m.manager.clone())
            .filter(|w| {
                COMPONENTS
                    .iter()
                    .any(|c| *w == format!("kubeflow-{c}-operator"))
            })
            .collect();
        assert!(writers.is_empty(), "{kind} written by {writers:?}");
    }
    // Katib's Suggestion, made for the Experiment, may hold its
    // controller's finalizer too.
    let suggestion = (
        "Suggestion",
        "kubeflow.org",
        "v1beta1",
        "suggestions",
        "user-tuning",
    );
    for entry in OBJECTS.into_iter().chain([suggestion]) {
        let objects = api(client, entry);
        let _ = objects
            .patch(
                entry.4,
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"finalizers": null}})),
            )
            .await;
        let _ = objects.delete(entry.4, &DeleteParams::background()).await;
    }
    // Trainer's controller (stopped) marked the runtime the TrainJob used;
    // the TrainJob gone, that mark is the controller's to take off.
    let runtimes: Api<DynamicObject> = Api::all_with(
        client.clone(),
        &ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("trainer.kubeflow.org", "v1alpha1", "ClusterTrainingRuntime"),
            "clustertrainingruntimes",
        ),
    );
    if let Ok(runtime) = runtimes.get("torch-distributed").await {
        let kept: Vec<String> = runtime
            .finalizers()
            .iter()
            .filter(|f| *f != IN_USE)
            .cloned()
            .collect();
        runtimes
            .patch(
                "torch-distributed",
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"finalizers": kept}})),
            )
            .await
            .expect("the runtime's in-use mark off");
    }
    let namespaces: Api<Namespace> = Api::all(client.clone());
    namespaces
        .delete(PROFILE, &DeleteParams::background())
        .await
        .expect("delete the profile's namespace");
    wait_gone(&namespaces, PROFILE, TIMEOUT).await;
}
