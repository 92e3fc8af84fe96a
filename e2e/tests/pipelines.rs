//! The pipelines operator, as a process: install, repair, upgrade with
//! pruning, external stores with Secret references, kept volumes, OpenShift.

use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, PersistentVolumeClaim};
use k8s_openapi::api::rbac::v1::RoleBinding;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams};
use kubeflow_e2e::component::{degraded, install, wait_condition, wait_gone};
use kubeflow_e2e::objects::{config_data, exists, wait_none_left};
use kubeflow_e2e::operator::OperatorProcess;
use kubeflow_e2e::{apply_yaml, wait_for};
use serde_json::json;

const OPERATOR: &str = "kubeflow-pipelines-operator";
const TIMEOUT: Duration = Duration::from_secs(90);

fn env_of(d: &Deployment, name: &str) -> Option<k8s_openapi::api::core::v1::EnvVar> {
    d.spec.as_ref()?.template.spec.as_ref()?.containers[0]
        .env
        .as_ref()?
        .iter()
        .find(|e| e.name == name)
        .cloned()
}

#[tokio::test]
async fn pipelines_installs_upgrades_uses_external_stores_and_keeps_volumes() {
    let (client, _g) = kubeflow_e2e::component::prepare(&["Pipelines"], &["pipelines"]).await;
    let yaml = "apiVersion: components.kubeflow.org/v1alpha1\nkind: Pipelines\nmetadata: {name: kubeflow}\nspec: {version: 2.5.0}\n";
    let (ns, _op, api, _) = install(&client, "kfp", OPERATOR, yaml, TIMEOUT).await;
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns.name);
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &ns.name);
    let argo = config_data(&client, &ns.name, "workflow-controller-configmap").await;
    let repo = argo.get("artifactRepository").cloned().unwrap_or_default();
    assert!(
        repo.contains(&format!("minio-service.{}:9000", ns.name)),
        "host names follow the namespace: {repo}"
    );

    // Upgrade: the new bundle's objects come, the old one's go; volumes stay,
    // even under volumePolicy Delete (about deleting the component, not
    // upgrading it): 2.15.0 replaces MinIO by SeaweedFS, and MinIO's volume
    // may hold every pipeline artifact.
    kubeflow_e2e::component::merge(
        &api,
        "kubeflow",
        json!({"spec": {"version": "2.15.0", "volumePolicy": "Delete"}}),
    )
    .await;
    let cr = wait_condition(&api, "kubeflow", "Ready", "True", TIMEOUT).await;
    assert_eq!(cr.data.pointer("/status/version"), Some(&json!("2.15.0")));
    let released = cr
        .data
        .pointer("/status/released")
        .cloned()
        .unwrap_or_default();
    assert_eq!(
        released
            .as_array()
            .map(|r| r.iter().map(|x| x["name"].clone()).collect::<Vec<_>>()),
        Some(vec![json!("minio-pvc")]),
        "{released}"
    );
    assert!(
        released[0]["message"]
            .as_str()
            .is_some_and(|m| m.contains("move what you need"))
    );
    let events = kubeflow_e2e::run_tool(
        "kubectl",
        &[
            "get",
            "events",
            "-n",
            &ns.name,
            "-o",
            "jsonpath={.items[*].note}",
        ],
    );
    let notes = String::from_utf8_lossy(&events.stdout);
    assert!(
        notes.contains("minio-pvc") || {
            let core = kubeflow_e2e::run_tool(
                "kubectl",
                &[
                    "get",
                    "events",
                    "-n",
                    &ns.name,
                    "-o",
                    "jsonpath={.items[*].message}",
                ],
            );
            String::from_utf8_lossy(&core.stdout).contains("minio-pvc")
        },
        "an Event names the kept volume"
    );
    kubeflow_e2e::component::merge(&api, "kubeflow", json!({"spec": {"volumePolicy": null}})).await;
    wait_condition(&api, "kubeflow", "Ready", "True", TIMEOUT).await;
    assert!(exists(&deployments, "seaweedfs").await);
    wait_gone(&deployments, "minio", TIMEOUT).await;
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), &ns.name);
    let minio_pvc = pvcs
        .get("minio-pvc")
        .await
        .expect("the old store's volume is kept");
    assert!(
        minio_pvc.owner_references().is_empty(),
        "kept volumes are not owned by the CR"
    );
    assert!(
        !minio_pvc
            .labels()
            .contains_key("applyset.kubernetes.io/part-of"),
        "and no longer managed"
    );

    // An external database whose Secret is missing: a condition naming it, nothing changed.
    let rv = deployments
        .get("mysql")
        .await
        .expect("bundled mysql")
        .resource_version();
    let external = json!({"spec": {"database": {"external": {"host": "db.example.internal", "port": 3307, "credentialsSecret": "kfp-db"}}}});
    kubeflow_e2e::component::merge(&api, "kubeflow", external).await;
    let (reason, message) = degraded(&api, TIMEOUT).await;
    assert_eq!(reason, "SecretMissing");
    assert!(
        message.contains(&format!("{}/kfp-db", ns.name)),
        "{message}"
    );
    assert_eq!(
        deployments
            .get("mysql")
            .await
            .expect("mysql")
            .resource_version(),
        rv,
        "nothing changed"
    );

    // With the Secret, the bundled database goes and the pods read the user's credentials.
    apply_yaml(&client, &ns.name, "apiVersion: v1\nkind: Secret\nmetadata: {name: kfp-db}\nstringData: {username: kfp, password: secret}\n").await;
    wait_condition(&api, "kubeflow", "Ready", "True", TIMEOUT).await;
    wait_gone(&deployments, "mysql", TIMEOUT).await;
    let server = deployments.get("ml-pipeline").await.expect("API server");
    let user = env_of(&server, "DBCONFIG_USER")
        .and_then(|e| e.value_from)
        .and_then(|v| v.secret_key_ref)
        .map(|r| r.name);
    assert_eq!(user.as_deref(), Some("kfp-db"));
    let cfg = cms
        .get("pipeline-install-config")
        .await
        .expect("config")
        .data
        .unwrap_or_default();
    assert_eq!(
        (
            cfg.get("dbHost").map(String::as_str),
            cfg.get("dbPort").map(String::as_str)
        ),
        (Some("db.example.internal"), Some("3307"))
    );

    // Deletion leaves the volumes and nothing else of the component.
    kubeflow_e2e::component::delete_and_wait(&api, "kubeflow", TIMEOUT).await;
    wait_none_left(&deployments, &ListParams::default(), TIMEOUT).await;
    let mut kept: Vec<String> = pvcs
        .list(&Default::default())
        .await
        .expect("list")
        .items
        .iter()
        .map(|p| p.name_any())
        .collect();
    kept.sort();
    assert_eq!(kept, vec!["minio-pvc", "mysql-pv-claim", "seaweedfs-pvc"]);
    ns.delete().await;
}

/// Pipelines at the default release (26.03.1: 2.16.1) installs with
/// generated credentials, never upstream's demo ones, every consumer reads
/// them from the two Secrets, and they survive the operator's restart.
#[tokio::test]
async fn pipelines_installs_with_generated_credentials_every_consumer_reads() {
    use k8s_openapi::api::core::v1::Secret;
    let (client, _g) = kubeflow_e2e::component::prepare(&["Pipelines"], &["pipelines"]).await;
    let yaml = "apiVersion: components.kubeflow.org/v1alpha1\nkind: Pipelines\nmetadata: {name: kubeflow}\nspec: {version: 2.16.1}\n";
    let (ns, op, api, _) = install(&client, "kfp-cred", OPERATOR, yaml, TIMEOUT).await;
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns.name);
    let values = |s: &Secret| -> std::collections::BTreeMap<String, String> {
        s.data
            .clone()
            .unwrap_or_default()
            .into_iter()
            .map(|(k, v)| (k, String::from_utf8(v.0).unwrap_or_default()))
            .collect()
    };
    let db = values(&secrets.get("mysql-secret").await.expect("mysql-secret"));
    let store = values(
        &secrets
            .get("mlpipeline-minio-artifact")
            .await
            .expect("mlpipeline-minio-artifact"),
    );
    let hex = |v: &str, len: usize| v.len() == len && v.bytes().all(|b| b.is_ascii_hexdigit());
    assert_eq!(db.get("username").map(String::as_str), Some("root"));
    assert!(hex(&db["password"], 48), "a generated root password");
    assert!(hex(&store["accesskey"], 20) && store["accesskey"] != "minio");
    assert!(hex(&store["secretkey"], 40) && store["secretkey"] != "minio123");

    // Every consumer reads them from the Secrets; no database may start
    // without a password.
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns.name);
    let reads = |d: &Deployment, secret: &str, var: Option<&str>| -> bool {
        let Some(pod) = d.spec.as_ref().and_then(|s| s.template.spec.as_ref()) else {
            return false;
        };
        pod.containers.iter().any(|c| {
            let by_key = c.env.iter().flatten().any(|e| {
                var.is_none_or(|v| e.name == v)
                    && e.value_from
                        .as_ref()
                        .and_then(|f| f.secret_key_ref.as_ref())
                        .is_some_and(|r| r.name == secret)
            });
            let whole = var.is_none()
                && c.env_from
                    .iter()
                    .flatten()
                    .any(|f| f.secret_ref.as_ref().is_some_and(|r| r.name == secret));
            by_key || whole
        })
    };
    for (workload, secret, var) in [
        ("mysql", "mysql-secret", Some("MYSQL_ROOT_PASSWORD")),
        ("ml-pipeline", "mysql-secret", Some("DBCONFIG_PASSWORD")),
        ("cache-server", "mysql-secret", Some("DBCONFIG_PASSWORD")),
        (
            "metadata-grpc-deployment",
            "mysql-secret",
            Some("DBCONFIG_PASSWORD"),
        ),
        (
            "ml-pipeline",
            "mlpipeline-minio-artifact",
            Some("OBJECTSTORECONFIG_SECRETACCESSKEY"),
        ),
        (
            "ml-pipeline-ui",
            "mlpipeline-minio-artifact",
            Some("MINIO_SECRET_KEY"),
        ),
        ("seaweedfs", "mlpipeline-minio-artifact", None),
    ] {
        let d = deployments.get(workload).await.expect(workload);
        assert!(reads(&d, secret, var), "{workload} reads {secret} {var:?}");
    }
    for d in deployments
        .list(&Default::default())
        .await
        .expect("list")
        .items
    {
        let text = serde_json::to_string(&d.spec).unwrap_or_default();
        assert!(!text.contains("ALLOW_EMPTY_PASSWORD"), "{}", d.name_any());
        for v in db.values().chain(store.values()).filter(|v| v.len() > 8) {
            assert!(
                !text.contains(v.as_str()),
                "{} holds a credential",
                d.name_any()
            );
        }
    }
    let argo = config_data(&client, &ns.name, "workflow-controller-configmap").await;
    let repo = argo.get("artifactRepository").cloned().unwrap_or_default();
    assert_eq!(
        repo.matches("mlpipeline-minio-artifact").count(),
        2,
        "{repo}"
    );
    assert!(!repo.contains("minio123"), "{repo}");

    // Kept, never regenerated: a new operator process reads them back.
    drop(op);
    let _op = OperatorProcess::start(OPERATOR, &[]);
    kubeflow_e2e::component::merge(
        &api,
        "kubeflow",
        json!({"spec": {"volumePolicy": "Delete"}}),
    )
    .await;
    kubeflow_e2e::component::wait_version_ready(&api, "kubeflow", "2.16.1", TIMEOUT).await;
    let again = values(&secrets.get("mysql-secret").await.expect("mysql-secret"));
    assert_eq!(again, db, "the root password is kept");
    let again = values(
        &secrets
            .get("mlpipeline-minio-artifact")
            .await
            .expect("mlpipeline-minio-artifact"),
    );
    assert_eq!(again, store, "the object store's keys are kept");
    kubeflow_e2e::component::delete_and_wait(&api, "kubeflow", TIMEOUT).await;
    ns.delete().await;
}

/// OpenShift is detected by its API groups; the test registers their CRDs, then removes them.
#[tokio::test]
async fn pipelines_on_openshift_unpins_ids_grants_sccs_and_uses_emissary() {
    let (client, _g) = kubeflow_e2e::component::prepare(&["Pipelines"], &["pipelines"]).await;
    let openshift = "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata: {name: securitycontextconstraints.security.openshift.io}\nspec:\n  group: security.openshift.io\n  scope: Cluster\n  names: {kind: SecurityContextConstraints, plural: securitycontextconstraints, singular: securitycontextconstraints}\n  versions: [{name: v1, served: true, storage: true, schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}}]\n---\napiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata: {name: routes.route.openshift.io}\nspec:\n  group: route.openshift.io\n  scope: Namespaced\n  names: {kind: Route, plural: routes, singular: route}\n  versions: [{name: v1, served: true, storage: true, schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}}]\n";
    apply_yaml(&client, "default", openshift).await;
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    wait_for("the OpenShift groups to be served", TIMEOUT, || async {
        let groups = client.list_api_groups().await.ok()?;
        (groups
            .groups
            .iter()
            .filter(|g| g.name.ends_with(".openshift.io"))
            .count()
            == 2)
            .then_some(())
    })
    .await;
    let yaml = "apiVersion: components.kubeflow.org/v1alpha1\nkind: Pipelines\nmetadata: {name: kubeflow}\nspec: {version: 2.15.0, platform: auto}\n";
    let (ns, op, api, cr) = install(&client, "kfp-ocp", OPERATOR, yaml, TIMEOUT).await;
    assert_eq!(
        cr.data.pointer("/status/platform"),
        Some(&json!("openshift"))
    );

    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns.name);
    for d in deployments
        .list(&Default::default())
        .await
        .expect("list")
        .items
    {
        let text = serde_json::to_string(&d.spec).unwrap_or_default();
        assert!(
            !text.contains("\"runAsUser\"") && !text.contains("\"fsGroup\""),
            "{} pins an id",
            d.name_any()
        );
    }
    let argo = config_data(&client, &ns.name, "workflow-controller-configmap").await;
    assert_eq!(
        argo.get("containerRuntimeExecutor").map(String::as_str),
        Some("emissary")
    );
    let bindings: Api<RoleBinding> = Api::namespaced(client.clone(), &ns.name);
    let grant = bindings
        .get("mysql-scc-anyuid")
        .await
        .expect("the SCC grant");
    assert_eq!(grant.role_ref.name, "system:openshift:scc:anyuid");

    kubeflow_e2e::component::delete_and_wait(&api, "kubeflow", TIMEOUT).await;
    drop(op);
    for name in [
        "securitycontextconstraints.security.openshift.io",
        "routes.route.openshift.io",
    ] {
        crds.delete(name, &DeleteParams::default())
            .await
            .expect("remove the OpenShift CRDs");
    }
    ns.delete().await;
}
