//! The upgrade from the previous release with live user objects: Kubeflow
//! 26.03 -> 26.03.1 through the meta-operator, every component operator a
//! process. The user's TrainJob, PyTorchJob, InferenceService, Argo Workflow,
//! cert-manager Certificate, Notebook and volume keep their uids and no operator writes them; the two objects whose
//! immutable fields change (JobSet's controller Deployment: its selector;
//! KServe's `llmisvc-manager-rolebinding`: its `roleRef`) are recreated with
//! an Event saying why; the Istio move (1.28.0 images to 1.30.1) is flagged.

use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::rbac::v1::ClusterRoleBinding;
use kube::ResourceExt;
use kube::api::{Api, ApiResource, DynamicObject};
use kube::core::GroupVersionKind;
use kubeflow_e2e::component::{ALL_COMPONENTS, ALL_KINDS, component_api, condition, ready_at};
use kubeflow_e2e::operator::OperatorProcess;
use kubeflow_e2e::{TestNamespace, apply_yaml, wait_for};
use serde_json::{Value, json};

const TIMEOUT: Duration = Duration::from_secs(180);

/// The user's objects, as (group, version, kind, plural, YAML).
const USER_OBJECTS: [(&str, &str, &str, &str, &str); 9] = [
    (
        "trainer.kubeflow.org",
        "v1alpha1",
        "TrainJob",
        "trainjobs",
        "apiVersion: trainer.kubeflow.org/v1alpha1\nkind: TrainJob\nmetadata: {name: user-job}\nspec:\n  runtimeRef: {name: torch-distributed}\n",
    ),
    (
        "kubeflow.org",
        "v1",
        "PyTorchJob",
        "pytorchjobs",
        "apiVersion: kubeflow.org/v1\nkind: PyTorchJob\nmetadata: {name: user-pytorch}\nspec:\n  pytorchReplicaSpecs:\n    Master:\n      replicas: 1\n      template:\n        spec:\n          containers: [{name: pytorch, image: example.invalid/train:1}]\n",
    ),
    (
        "serving.kserve.io",
        "v1beta1",
        "InferenceService",
        "inferenceservices",
        "apiVersion: serving.kserve.io/v1beta1\nkind: InferenceService\nmetadata: {name: user-model}\nspec:\n  predictor:\n    model:\n      modelFormat: {name: sklearn}\n      storageUri: s3://models/user-model\n",
    ),
    (
        "argoproj.io",
        "v1alpha1",
        "Workflow",
        "workflows",
        "apiVersion: argoproj.io/v1alpha1\nkind: Workflow\nmetadata: {name: user-run}\nspec:\n  entrypoint: main\n  templates:\n  - name: main\n    container: {image: example.invalid/step:1}\n",
    ),
    (
        "cert-manager.io",
        "v1",
        "Certificate",
        "certificates",
        "apiVersion: cert-manager.io/v1\nkind: Certificate\nmetadata: {name: user-cert}\nspec:\n  secretName: user-cert\n  dnsNames: [user.example.com]\n  issuerRef: {name: kubeflow-self-signing-issuer, kind: ClusterIssuer}\n",
    ),
    (
        "kubeflow.org",
        "v1",
        "Notebook",
        "notebooks",
        "apiVersion: kubeflow.org/v1\nkind: Notebook\nmetadata: {name: user-notebook}\nspec:\n  template:\n    spec:\n      containers: [{name: user-notebook, image: example.invalid/lab:1}]\n",
    ),
    (
        "kubeflow.org",
        "v1beta1",
        "Experiment",
        "experiments",
        "apiVersion: kubeflow.org/v1beta1\nkind: Experiment\nmetadata: {name: user-tuning}\nspec:\n  objective: {type: maximize, objectiveMetricName: accuracy}\n  algorithm: {algorithmName: random}\n  parameters:\n    - {name: lr, parameterType: double, feasibleSpace: {min: \"0.01\", max: \"0.1\"}}\n",
    ),
    (
        "sparkoperator.k8s.io",
        "v1beta2",
        "SparkApplication",
        "sparkapplications",
        "apiVersion: sparkoperator.k8s.io/v1beta2\nkind: SparkApplication\nmetadata: {name: user-spark}\nspec:\n  type: Python\n  mode: cluster\n  image: example.invalid/spark:3.5\n  mainApplicationFile: local:///opt/app/main.py\n  sparkVersion: 3.5.5\n  driver: {cores: 1, memory: 512m, serviceAccount: default-editor}\n  executor: {instances: 1, cores: 1, memory: 512m}\n",
    ),
    (
        "",
        "v1",
        "PersistentVolumeClaim",
        "persistentvolumeclaims",
        "apiVersion: v1\nkind: PersistentVolumeClaim\nmetadata: {name: user-data}\nspec:\n  accessModes: [ReadWriteOnce]\n  resources: {requests: {storage: 1Gi}}\n",
    ),
];

fn user_api(
    client: &kube::Client,
    ns: &str,
    o: &(&str, &str, &str, &str, &str),
) -> Api<DynamicObject> {
    let ar = ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(o.0, o.1, o.2), o.3);
    Api::namespaced_with(client.clone(), ns, &ar)
}

fn name_of(yaml: &str) -> &str {
    yaml.split("metadata: {name: ")
        .nth(1)
        .and_then(|r| r.split('}').next())
        .unwrap_or("")
}

/// The operators that run in this test, by component.
const OPERATORS: [&str; 14] = [
    "meta",
    "istio",
    "cert-manager",
    "knative",
    "auth",
    "dashboard",
    "notebooks",
    "katib",
    "model-registry",
    "spark",
    "training",
    "trainer",
    "pipelines",
    "serving",
];

/// (kind, uid, who wrote it) of every user object. Who wrote it, not its
/// resourceVersion: the cluster's own controllers write some of them (the
/// volume binder annotates a claim).
async fn user_state(client: &kube::Client, ns: &str) -> Vec<(String, Option<String>, Vec<String>)> {
    let mut out = Vec::new();
    for o in &USER_OBJECTS {
        let obj = user_api(client, ns, o)
            .get(name_of(o.4))
            .await
            .unwrap_or_else(|e| panic!("{} {}: {e}", o.2, name_of(o.4)));
        let mut writers: Vec<String> = obj
            .metadata
            .managed_fields
            .iter()
            .flatten()
            .filter_map(|m| m.manager.clone())
            .collect();
        writers.sort();
        writers.dedup();
        out.push((o.2.to_string(), obj.uid(), writers));
    }
    out
}

#[tokio::test]
async fn the_upgrade_to_26_03_1_keeps_the_users_objects_and_recreates_what_must_be() {
    let (client, _g) = kubeflow_e2e::component::prepare(&ALL_KINDS, &ALL_COMPONENTS).await;
    kubeflow_e2e::demo::clear_leftovers(&client).await;
    let ns = TestNamespace::new(&client, "upgrade").await;
    let _ops: Vec<OperatorProcess> = OPERATORS
        .iter()
        .map(|c| OperatorProcess::start(&format!("kubeflow-{c}-operator"), &[]))
        .collect();
    let user = kubeflow_e2e::login::TestUser::random("user@example.com");
    kubeflow_e2e::login::create_users_secret(&client, &ns.name, &[user]).await;
    let comps = format!(
        "    istio: {{managementState: Managed}}\n    certManager: {{managementState: Managed}}\n    {}\n    dashboard: {{managementState: Managed, spec: {{profiles: [{{name: team-a, owner: user@example.com}}]}}}}\n    notebooks: {{managementState: Managed}}\n    katib: {{managementState: Managed}}\n    modelRegistry: {{managementState: Managed}}\n    spark: {{managementState: Managed}}\n    knative: {{managementState: Managed}}\n    training: {{managementState: Managed}}\n    trainer: {{managementState: Managed, spec: {{runtimes: [torch-distributed]}}}}\n    pipelines: {{managementState: Managed}}\n    serving: {{managementState: Managed}}\n    devicePlugins: {{managementState: Removed}}\n",
        kubeflow_e2e::login::AUTH_ENTRY
    );
    apply_yaml(
        &client,
        &ns.name,
        &format!("apiVersion: platform.kubeflow.org/v1alpha1\nkind: Kubeflow\nmetadata: {{name: kubeflow}}\nspec:\n  version: \"26.03\"\n  components:\n{comps}"),
    )
    .await;
    let kfs = component_api(&client, &ns.name, "Kubeflow");
    ready_at(&kfs, "kubeflow", "26.03", TIMEOUT).await;
    for o in &USER_OBJECTS {
        apply_yaml(&client, &ns.name, o.4).await;
    }
    let before = user_state(&client, &ns.name).await;
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns.name);
    let jobset_uid = deployments
        .get("jobset-controller-manager")
        .await
        .expect("JobSet's controller")
        .uid();
    let bindings: Api<ClusterRoleBinding> = Api::all(client.clone());
    let binding_uid = bindings
        .get("llmisvc-manager-rolebinding")
        .await
        .expect("KServe's binding")
        .uid();

    kubeflow_e2e::component::merge(&kfs, "kubeflow", json!({"spec": {"version": "26.03.1"}})).await;
    ready_at(&kfs, "kubeflow", "26.03.1", TIMEOUT).await;
    let events: Api<k8s_openapi::api::events::v1::Event> =
        Api::namespaced(client.clone(), &ns.name);
    let notes_of = |reason: &'static str| {
        let events = events.clone();
        async move {
            events
                .list(&Default::default())
                .await
                .map(|l| {
                    l.items
                        .into_iter()
                        .filter(|e| e.reason.as_deref() == Some(reason))
                        .filter_map(|e| e.note)
                        .collect::<Vec<_>>()
                })
                .unwrap_or_default()
        }
    };
    let started = notes_of("UpgradeStarted").await;
    assert!(
        started
            .iter()
            .any(|n| n.contains("to 26.03.1") && n.contains("1.28.0 -> 1.30.1")),
        "the start names the Istio images' two-minor move: {started:?}"
    );

    // Every child at its 26.03.1 version.
    for (kind, version) in [
        ("Trainer", "v2.2.0"),
        ("Pipelines", "2.16.1"),
        ("Serving", "v0.18.0"),
        ("Istio", "1.30.1"),
        ("CertManager", "v1.20.2"),
        ("Notebooks", "v1.11.0"),
        ("Katib", "v0.19.0"),
        ("ModelRegistry", "v0.3.9"),
        ("Spark", "2.5.0"),
        ("Knative", "v1.22.0"),
        ("Auth", "v7.15.2"),
        ("Dashboard", "v2.0.0"),
    ] {
        let child = component_api(&client, &ns.name, kind)
            .get("kubeflow")
            .await
            .expect("child");
        assert_eq!(
            child.data.pointer("/status/version"),
            Some(&Value::from(version)),
            "{kind}"
        );
        // Nothing held back (a CRD or claim refusing the new state would be).
        assert_eq!(
            condition(&child, "Degraded").map(|c| c.0).as_deref(),
            Some("False"),
            "{kind}: {:?}",
            condition(&child, "Degraded")
        );
    }

    // The user's objects: the same objects, never written by an operator.
    let after = user_state(&client, &ns.name).await;
    for ((kind, uid, writers), (_, uid_before, _)) in after.iter().zip(&before) {
        assert_eq!(uid, uid_before, "{kind} kept");
        let ours: Vec<&String> = writers
            .iter()
            .filter(|w| {
                OPERATORS
                    .iter()
                    .any(|o| **w == format!("kubeflow-{o}-operator"))
            })
            .collect();
        assert!(ours.is_empty(), "{kind} written by {ours:?}");
    }

    // The Model Registry moved from MySQL to PostgreSQL: MySQL's volume is
    // released, not deleted, listed in the status, and the password that
    // opens it stays beside the new one.
    let claims: Api<k8s_openapi::api::core::v1::PersistentVolumeClaim> =
        Api::namespaced(client.clone(), &ns.name);
    let mysql = claims
        .get("metadata-mysql")
        .await
        .expect("MySQL's volume is kept");
    assert!(
        !mysql
            .labels()
            .contains_key("applyset.kubernetes.io/part-of"),
        "released: no inventory holds it"
    );
    claims
        .get("metadata-postgres")
        .await
        .expect("PostgreSQL's volume");
    let registry = component_api(&client, &ns.name, "ModelRegistry")
        .get("kubeflow")
        .await
        .expect("the ModelRegistry");
    assert!(
        registry.data["status"]["released"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|r| r["name"] == "metadata-mysql"),
        "{}",
        registry.data["status"]
    );
    let secrets: Api<k8s_openapi::api::core::v1::Secret> =
        Api::namespaced(client.clone(), &ns.name);
    let keys: Vec<String> = secrets
        .get("model-registry-db-secrets")
        .await
        .expect("the registry's password")
        .data
        .unwrap_or_default()
        .into_keys()
        .collect();
    for key in ["MYSQL_ROOT_PASSWORD", "POSTGRES_PASSWORD"] {
        assert!(keys.iter().any(|k| k == key), "{key} in {keys:?}");
    }

    // What the API server will not change in place was recreated, and said so.
    let jobset = deployments
        .get("jobset-controller-manager")
        .await
        .expect("JobSet's controller");
    assert_ne!(jobset.uid(), jobset_uid, "recreated for its new selector");
    assert_eq!(
        jobset
            .spec
            .and_then(|s| s.selector.match_labels)
            .map(|l| l.len()),
        Some(4)
    );
    let binding = bindings
        .get("llmisvc-manager-rolebinding")
        .await
        .expect("KServe's binding");
    assert_ne!(binding.uid(), binding_uid, "recreated for its new roleRef");
    assert_eq!(binding.role_ref.name, "kserve-llmisvc-manager-role");
    let notes = wait_for("the ObjectRecreated Events", TIMEOUT, || async {
        let notes = notes_of("ObjectRecreated").await;
        (notes
            .iter()
            .any(|n| n.contains("jobset-controller-manager"))
            && notes
                .iter()
                .any(|n| n.contains("llmisvc-manager-rolebinding")))
        .then_some(notes)
    })
    .await;
    assert!(
        notes
            .iter()
            .all(|n| n.contains("could not take the desired state (")),
        "each names the API server's refusal: {notes:?}"
    );

    kubeflow_e2e::component::delete_and_wait(&kfs, "kubeflow", TIMEOUT).await;
    // The released volume is the person's to delete.
    let _ = claims.delete("metadata-mysql", &Default::default()).await;
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    let _ = namespaces.delete("istio-system", &Default::default()).await;
    ns.delete().await;
}
