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

/// Pods of the rotation's Job are refused while this lives (kwok would
/// report one Complete at once, before the test has run its command), and
/// the policy goes when it is dropped.
struct HeldPods {
    name: String,
}

impl HeldPods {
    async fn hold(client: &kube::Client, ns: &str, app: &str) -> Self {
        let name = format!("hold-{app}-{ns}");
        let yaml = format!(
            "apiVersion: admissionregistration.k8s.io/v1\nkind: ValidatingAdmissionPolicy\nmetadata: {{name: {name}}}\nspec:\n  failurePolicy: Fail\n  matchConstraints:\n    resourceRules: [{{apiGroups: [\"\"], apiVersions: [v1], operations: [CREATE], resources: [pods]}}]\n  validations:\n  - expression: \"!has(object.metadata.labels) || !('app' in object.metadata.labels) || object.metadata.labels['app'] != '{app}'\"\n    message: held by the test until it has run the Job's command\n---\napiVersion: admissionregistration.k8s.io/v1\nkind: ValidatingAdmissionPolicyBinding\nmetadata: {{name: {name}}}\nspec:\n  policyName: {name}\n  validationActions: [Deny]\n  matchResources: {{namespaceSelector: {{matchLabels: {{kubernetes.io/metadata.name: {ns}}}}}}}\n"
        );
        apply_yaml(client, "", &yaml).await;
        // In force once a pod of that label is refused (a dry run).
        let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(client.clone(), ns);
        let probe: k8s_openapi::api::core::v1::Pod = serde_json::from_value(json!({
            "metadata": {"name": "held-probe", "labels": {"app": app}},
            "spec": {"containers": [{"name": "c", "image": "example.invalid/none"}]}}))
        .expect("pod");
        let dry = kube::api::PostParams {
            dry_run: true,
            ..Default::default()
        };
        wait_for("the pod hold in force", TIMEOUT, || async {
            pods.create(&dry, &probe).await.is_err().then_some(())
        })
        .await;
        HeldPods { name }
    }
}

impl Drop for HeldPods {
    fn drop(&mut self) {
        for kind in [
            "validatingadmissionpolicybinding",
            "validatingadmissionpolicy",
        ] {
            kubeflow_e2e::run_tool(
                "kubectl",
                &[
                    "delete",
                    kind,
                    &self.name,
                    "--ignore-not-found",
                    "--wait=false",
                ],
            );
        }
    }
}

/// The values of a Secret's keys.
async fn secret_values(
    client: &kube::Client,
    ns: &str,
    name: &str,
) -> std::collections::BTreeMap<String, String> {
    use k8s_openapi::api::core::v1::Secret;
    Api::<Secret>::namespaced(client.clone(), ns)
        .get(name)
        .await
        .unwrap_or_else(|e| panic!("Secret {name}: {e}"))
        .data
        .unwrap_or_default()
        .into_iter()
        .map(|(k, v)| (k, String::from_utf8(v.0).unwrap_or_default()))
        .collect()
}

/// An install an older operator made runs upstream's demo credentials (an
/// empty root password, `minio` / `minio123`) and its database holds data
/// opened with them. The upgrade 26.03 -> 26.03.1 under `Manual` plans
/// their rotation, does nothing before approval, then tells the database
/// first (the Job's own command, run here against a real MySQL-compatible
/// server standing for the bundle's), writes the Secrets and restarts
/// every reader: the data opens with the new password only.
#[tokio::test]
async fn pipelines_rotates_an_older_installs_demo_credentials_through_the_approved_plan() {
    use k8s_openapi::api::batch::v1::Job;
    use k8s_openapi::api::core::v1::Secret;
    const ROTATION: &str = "ml-pipeline-credentials-rotation";
    let (client, _g) = kubeflow_e2e::component::prepare(&["Pipelines"], &["pipelines"]).await;
    let yaml = "apiVersion: components.kubeflow.org/v1alpha1\nkind: Pipelines\nmetadata: {name: kubeflow}\nspec: {version: 2.16.0, upgradeStrategy: Manual}\n";
    let (ns, op, api, _) = install(&client, "kfp-rot", OPERATOR, yaml, TIMEOUT).await;
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns.name);
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns.name);
    let jobs: Api<Job> = Api::namespaced(client.clone(), &ns.name);

    // What an older operator left: the demo values in both Secrets, and a
    // database initialised with them holding the pipelines' records.
    drop(op);
    let demo = [
        ("mysql-secret", json!({"username": "root", "password": ""})),
        (
            "mlpipeline-minio-artifact",
            json!({"accesskey": "minio", "secretkey": "minio123"}),
        ),
    ];
    for (name, data) in &demo {
        let patch = json!({"data": null, "stringData": data});
        secrets
            .patch(
                name,
                &kube::api::PatchParams::default(),
                &kube::api::Patch::Merge(&patch),
            )
            .await
            .unwrap_or_else(|e| panic!("{name}: {e}"));
    }
    let db = kubeflow_e2e::local_database::LocalDatabase::start("kfp-rotation");
    db.query(
        "",
        "CREATE DATABASE mlpipeline; \
         CREATE TABLE mlpipeline.pipelines (uuid VARCHAR(64) PRIMARY KEY, name TEXT); \
         INSERT INTO mlpipeline.pipelines VALUES ('p-1', 'a user''s pipeline')",
    )
    .expect("the records");
    let _op = OperatorProcess::start(OPERATOR, &[]);
    let cr = wait_for("the demo Secrets released", TIMEOUT, || async {
        let cr = api.get("kubeflow").await.ok()?;
        let released = cr.data.pointer("/status/released")?.to_string();
        (released.contains("mysql-secret") && released.contains("mlpipeline-minio-artifact"))
            .then_some(cr)
    })
    .await;
    assert_eq!(cr.data.pointer("/status/version"), Some(&json!("2.16.0")));

    // The upgrade's plan names the rotation; nothing of it before approval.
    let before = deployments.get("ml-pipeline").await.expect("API server");
    kubeflow_e2e::component::merge(&api, "kubeflow", json!({"spec": {"version": "2.16.1"}})).await;
    let plan = wait_for("the plan awaiting approval", TIMEOUT, || async {
        let cr = api.get("kubeflow").await.ok()?;
        let plan = cr.data.pointer("/status/upgradePlan")?.clone();
        (plan["awaitingApproval"] == json!(true) && plan["to"] == json!("2.16.1")).then_some(plan)
    })
    .await;
    let details = plan["details"].as_str().unwrap_or_default();
    let created: Vec<&str> = details
        .lines()
        .filter(|l| l.contains("created: ") && l.ends_with(&format!("{}/{ROTATION}", ns.name)))
        .collect();
    assert!(
        created.len() == 2
            && created.iter().any(|l| l.contains("Job"))
            && created.iter().any(|l| l.contains("Secret")),
        "the plan names the Job and the staging Secret: {details}"
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(jobs.get_opt(ROTATION).await.expect("read").is_none());
    assert_eq!(
        secret_values(&client, &ns.name, "mysql-secret").await["password"],
        ""
    );

    // Approved: the Job comes; its pods are held until its command ran.
    let hold = HeldPods::hold(&client, &ns.name, ROTATION).await;
    let digest = plan["digest"].as_str().expect("digest").to_string();
    kubeflow_e2e::component::merge(&api, "kubeflow", json!({"spec": {"approvedPlan": digest}}))
        .await;
    let job = wait_for("the rotation's Job", TIMEOUT, || async {
        jobs.get_opt(ROTATION).await.ok().flatten()
    })
    .await;
    let staged = secret_values(&client, &ns.name, ROTATION).await;
    assert_eq!(
        secret_values(&client, &ns.name, "mysql-secret").await["password"],
        "",
        "the Secret keeps the old password until the database is told"
    );
    assert_eq!(
        db.query("", "SELECT 1").map(|o| o.trim().to_string()),
        Ok("1".into())
    );

    // The Job's container as the kubelet would run it: its command, its
    // variables from the live Secrets; the database's Service is this
    // server on loopback.
    let pod = job
        .spec
        .and_then(|s| s.template.spec)
        .expect("pod template");
    let c = &pod.containers[0];
    let command = c.command.clone().expect("command");
    let mut env: Vec<(String, String)> = Vec::new();
    for e in c.env.clone().unwrap_or_default() {
        let value = match (e.value, e.value_from.and_then(|f| f.secret_key_ref)) {
            (Some(v), None) => v,
            (None, Some(r)) => secret_values(&client, &ns.name, &r.name).await[&r.key].clone(),
            other => panic!("{}: {other:?}", e.name),
        };
        env.push((e.name, value));
    }
    let host = env
        .iter()
        .find(|(k, _)| k == "DB_HOST")
        .map(|(_, v)| v.clone());
    assert_eq!(host, Some(format!("mysql.{}.svc", ns.name)));
    let run = || {
        std::process::Command::new(&command[0])
            .args(&command[1..])
            .envs(env.iter().cloned())
            .env("DB_HOST", "127.0.0.1")
            .env("DB_PORT", db.port.to_string())
            .output()
            .expect("the Job's command")
    };
    let out = run();
    let said = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "{said} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(said.contains("root password is rotated"), "{said}");
    // A retried pod finds it done and succeeds without a change.
    let again = run();
    assert!(
        again.status.success()
            && String::from_utf8_lossy(&again.stdout).contains("already takes the new"),
        "{again:?}"
    );
    drop(hold);

    // The Job completes; then the Secrets get the new values, every reader
    // restarts, and the Job and the staging Secret go.
    let db_secret = wait_for(
        "the database Secret rotated",
        Duration::from_secs(150),
        || async {
            let s = secret_values(&client, &ns.name, "mysql-secret").await;
            (!s["password"].is_empty()).then_some(s)
        },
    )
    .await;
    assert_eq!(db_secret["password"], staged["password"]);
    let store = secret_values(&client, &ns.name, "mlpipeline-minio-artifact").await;
    assert_eq!(
        (store["accesskey"].as_str(), store["secretkey"].as_str()),
        (staged["accesskey"].as_str(), staged["secretkey"].as_str())
    );
    // Six readers restart on a loaded machine (CI run 56: not Ready in 90 s
    // there, 17-21 s alone and beside another cluster's tests).
    kubeflow_e2e::component::wait_version_ready(
        &api,
        "kubeflow",
        "2.16.1",
        Duration::from_secs(150),
    )
    .await;
    wait_gone(&jobs, ROTATION, TIMEOUT).await;
    wait_gone(&secrets, ROTATION, TIMEOUT).await;
    let digest_of = |d: &Deployment| {
        d.spec
            .as_ref()
            .and_then(|s| s.template.metadata.as_ref())
            .and_then(|m| m.annotations.as_ref())
            .and_then(|a| a.get("components.kubeflow.org/config-digest").cloned())
    };
    let after = deployments.get("ml-pipeline").await.expect("API server");
    assert!(digest_of(&after).is_some());
    assert_ne!(
        digest_of(&before),
        digest_of(&after),
        "the API server restarts"
    );

    // The records open with the new password only.
    assert_eq!(
        db.query(
            &db_secret["password"],
            "SELECT name FROM mlpipeline.pipelines WHERE uuid = 'p-1'"
        )
        .map(|o| o.trim().to_string()),
        Ok("a user's pipeline".to_string())
    );
    let refused = db.query("", "SELECT 1");
    assert!(
        refused.as_ref().is_err_and(|e| e.contains("Access denied")),
        "{refused:?}"
    );
    kubeflow_e2e::component::delete_and_wait(&api, "kubeflow", TIMEOUT).await;
    ns.delete().await;
}
