//! The users' objects an upgrade must leave alone: one of each kind a
//! Kubeflow user makes (jobs of both training stacks, a model server, a
//! pipeline run, a certificate, a notebook, an experiment, a Spark
//! application, a volume), and who wrote each.

use kube::ResourceExt;
use kube::api::{Api, ApiResource, DynamicObject};
use kube::core::GroupVersionKind;

/// The user's objects, as (group, version, kind, plural, YAML).
pub const USER_OBJECTS: [(&str, &str, &str, &str, &str); 9] = [
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

/// Creates every user object in `ns`.
pub async fn create(client: &kube::Client, ns: &str) {
    for o in &USER_OBJECTS {
        crate::apply_yaml(client, ns, o.4).await;
    }
}

/// (kind, uid, who wrote it) of every user object. Who wrote it, not its
/// resourceVersion: the cluster's own controllers write some of them (the
/// volume binder annotates a claim).
pub async fn state(client: &kube::Client, ns: &str) -> Vec<(String, Option<String>, Vec<String>)> {
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
