//! What the operator knows of Kubeflow Pipelines: its two bundle files, the
//! stores it can use, which volumes hold data, its run-time cache webhook, and
//! its OpenShift needs.

use kubeflow_operator::api::{ComponentResource, Pipelines, Platform};
use kubeflow_operator::async_trait::async_trait;
use kubeflow_operator::component::{
    Component, DereferenceError, Draft, Reference, Refusal, RunTimeObject, RunTimeScope,
};
use kubeflow_operator::kinds::kind;
use kubeflow_operator::kube::api::DynamicObject;
use kubeflow_operator::kube::{Client, ResourceExt};
use kubeflow_operator::rbac::Permissions;
use kubeflow_operator::render::{Layout, Target};
use kubeflow_operator::{openshift, transform};

use crate::credentials::{self, Credentials};
use crate::rotation::{self, Step};
use crate::stores;

/// The namespace the upstream bundle installs into.
const BUNDLE_NAMESPACE: &str = "kubeflow";
/// Workloads the common replicas/resources settings apply to: the API server and the UI.
const WORKLOADS: &[&str] = &["ml-pipeline", "ml-pipeline-ui"];
/// The Argo workflow controller's ConfigMap.
const WORKFLOW_CONFIG: &str = "workflow-controller-configmap";
/// The OpenShift SCC the pipelines ServiceAccounts are granted (the bundled images run as fixed users).
const SCC: &str = "anyuid";

/// The Pipelines component.
pub struct PipelinesComponent;

#[async_trait]
impl Component for PipelinesComponent {
    type Resource = Pipelines;
    type Inputs = Credentials;

    const LAYOUT: Layout = Layout {
        from_namespaces: &[BUNDLE_NAMESPACE],
        target: Target::ResourceNamespace,
        workloads: WORKLOADS,
    };

    /// The webhook configuration the cache deployer registers at run time,
    /// named after its namespace.
    const RUN_TIME_OBJECTS: &'static [RunTimeObject] = &[RunTimeObject {
        group: "admissionregistration.k8s.io",
        version: "v1",
        kind: "MutatingWebhookConfiguration",
        plural: "mutatingwebhookconfigurations",
        name: "cache-webhook-{namespace}",
        scope: RunTimeScope::Cluster,
    }];

    fn permissions(&self) -> Permissions {
        Permissions::bundles(&[Pipelines::COMPONENT])
            .openshift_scc(&[SCC])
            .with_adjusted(rotation::add_for_permissions)
            .with_objects(rotation::watched())
    }

    fn references(cr: &Pipelines) -> Vec<Reference> {
        let mut out = Vec::new();
        if let Some(db) = cr.spec.database.as_ref().and_then(|d| d.external.as_ref()) {
            out.push(Reference::Secret(db.credentials_secret.clone()));
        }
        if let Some(s) = cr
            .spec
            .object_store
            .as_ref()
            .and_then(|s| s.external.as_ref())
        {
            out.push(Reference::Secret(s.access_key.name.clone()));
            out.push(Reference::Secret(s.secret_key.name.clone()));
        }
        out
    }

    async fn dereference(
        &self,
        cr: &Pipelines,
        client: &Client,
    ) -> Result<Credentials, DereferenceError> {
        let ns = cr.namespace().unwrap_or_default();
        let mut found = Credentials::default();
        if let Some(db) = cr.spec.database.as_ref().and_then(|d| d.external.as_ref()) {
            stores::require_secret(
                client,
                &ns,
                &db.credentials_secret,
                &kubeflow_operator::database::CREDENTIAL_KEYS,
            )
            .await?;
        } else {
            found.database = Some(credentials::database(client, &ns).await?);
        }
        if let Some(s) = cr
            .spec
            .object_store
            .as_ref()
            .and_then(|s| s.external.as_ref())
        {
            stores::require_secret(
                client,
                &ns,
                &s.access_key.name,
                &[s.access_key.key.as_str()],
            )
            .await?;
            stores::require_secret(
                client,
                &ns,
                &s.secret_key.name,
                &[s.secret_key.key.as_str()],
            )
            .await?;
        } else {
            found.store = Some(credentials::store(client, &ns).await?);
        }
        if found.demo_database() || found.demo_store() {
            found.rotation = rotation::read(client, &ns, found.demo_database()).await?;
        }
        Ok(found)
    }

    fn customise(&self, draft: &mut Draft<'_, Self>) -> Result<(), Refusal> {
        let (cr, ctx, inputs) = (draft.cr, draft.ctx, draft.inputs);
        let spec = &cr.spec;
        let objects = &mut draft.objects;
        transform::rewrite_service_hosts(objects, BUNDLE_NAMESPACE, ctx.namespace);
        if let Some(db) = spec.database.as_ref().and_then(|d| d.external.as_ref()) {
            stores::use_external_database(objects, db);
        }
        if let Some(store) = spec.object_store.as_ref().and_then(|s| s.external.as_ref()) {
            stores::use_external_object_store(objects, store);
        }
        // What is left of the bundled database and store gets the kept or
        // generated credentials, never upstream's demo ones; demo ones an
        // older operator installed are rotated by an upgrade.
        let installed = cr.component_status().and_then(|s| s.version.as_deref());
        let upgrading = installed.is_some_and(|v| v != draft.version);
        let (demo_db, demo_store) = (inputs.demo_database(), inputs.demo_store());
        match rotation::step(&inputs.rotation, demo_db || demo_store, upgrading) {
            Step::Apply(staged) => {
                let new = |secret: &str, data: &Option<_>, demo: bool| {
                    data.as_ref().map(|d| {
                        if demo {
                            rotation::rotated(secret, d, staged)
                        } else {
                            d.clone()
                        }
                    })
                };
                let rotated = Credentials {
                    database: new(stores::DB_SECRET, &inputs.database, demo_db),
                    store: new(stores::STORE_SECRET, &inputs.store, demo_store),
                    rotation: Default::default(),
                };
                credentials::set(objects, &rotated);
                rotation::written(objects, ctx.namespace, staged)?;
            }
            Step::Stage(staged) => {
                credentials::set(objects, inputs);
                rotation::stage(objects, ctx.namespace, staged, demo_db)?;
            }
            Step::None => credentials::set(objects, inputs),
        }
        rotation::forget_old_store_keys(objects);
        for workload in rotation::readers(objects) {
            transform::roll_on_change(
                objects,
                &workload,
                &[
                    ("Secret", stores::DB_SECRET),
                    ("Secret", stores::STORE_SECRET),
                ],
            );
        }
        if ctx.platform == Platform::OpenShift {
            // Argo's emissary executor needs no privileged access to the container runtime.
            transform::set_config(
                objects,
                WORKFLOW_CONFIG,
                &[("containerRuntimeExecutor", "emissary".to_string())],
            );
            let store_accounts: Vec<String> = objects
                .iter()
                .filter(|o| {
                    kind(o) == "ServiceAccount"
                        && (stores::bundled_database(o) || stores::bundled_object_store(o))
                })
                .filter_map(|o| o.metadata.name.clone())
                .collect();
            for sa in store_accounts {
                objects.push(openshift::scc_grant(ctx.namespace, &sa, SCC));
            }
        }
        Ok(())
    }

    /// The bundled stores' volumes, and the credentials that open their
    /// data, outlive the component unless the spec says otherwise (a new
    /// install over a kept volume must not generate new ones).
    fn retain(&self, cr: &Pipelines, obj: &DynamicObject) -> bool {
        kubeflow_operator::database::kept(
            cr.spec.volume_policy,
            kind(obj) == "PersistentVolumeClaim" || credentials::opens_data(obj),
        )
    }

    /// A credentials Secret no longer written is kept with what it holds:
    /// the data on the volumes was initialised with it (upstream's demo
    /// values, from an install an older operator made), or the spec moved
    /// to an external database or store and the kept volume still needs it.
    fn release_on_prune(&self, cr: &Pipelines, obj: &DynamicObject) -> Option<String> {
        if !credentials::is_credentials_secret(obj) {
            return None;
        }
        let name = obj.metadata.name.as_deref().unwrap_or_default();
        let external = if name == stores::DB_SECRET {
            cr.spec
                .database
                .as_ref()
                .and_then(|d| d.external.as_ref())
                .is_some()
        } else {
            cr.spec
                .object_store
                .as_ref()
                .and_then(|s| s.external.as_ref())
                .is_some()
        };
        Some(credentials::release_message(name, external))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kubeflow_operator::component::{
        Rendered, assert_permitted, every_version, find, render_spec,
    };
    use kubeflow_operator::known_secrets;
    use kubeflow_operator::rbac;
    use kubeflow_operator::secrets;
    use serde_json::{Value, json};
    use std::collections::{BTreeMap, BTreeSet};

    fn map(entries: &[(&str, &str)]) -> BTreeMap<String, String> {
        entries
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    /// What `dereference` gives on a cluster with neither Secret yet.
    fn fresh() -> Credentials {
        let hex = |n| secrets::random_hex(n).expect("random");
        Credentials {
            database: Some(map(&[("username", "root"), ("password", &hex(24))])),
            store: Some(map(&[("accesskey", &hex(10)), ("secretkey", &hex(20))])),
            ..Default::default()
        }
    }

    /// What an install an older operator made holds.
    fn demo() -> Credentials {
        Credentials {
            database: Some(map(&[("username", "root"), ("password", "")])),
            store: Some(map(&[("accesskey", "minio"), ("secretkey", "minio123")])),
            ..Default::default()
        }
    }

    fn versions() -> Vec<String> {
        kubeflow_operator::bundle::available_versions(
            &kubeflow_operator::component::manifests_dir().join("pipelines"),
        )
    }

    /// The workloads whose containers read Secret `name`: by a key
    /// reference or as a whole (`envFrom`).
    fn readers(r: &Rendered, name: &str) -> BTreeSet<String> {
        r.objects
            .iter()
            .filter(|o| kind(o) == "Deployment")
            .filter(|o| {
                let pod = &o.data["spec"]["template"]["spec"];
                pod["containers"].as_array().into_iter().flatten().any(|c| {
                    let by_key = c["env"].as_array().into_iter().flatten().any(|e| {
                        e.pointer("/valueFrom/secretKeyRef/name")
                            .and_then(Value::as_str)
                            == Some(name)
                    });
                    let whole = c["envFrom"].as_array().into_iter().flatten().any(|e| {
                        e.pointer("/secretRef/name").and_then(Value::as_str) == Some(name)
                    });
                    by_key || whole
                })
            })
            .map(|o| o.name_any())
            .collect()
    }

    #[test]
    fn a_fresh_install_gets_generated_credentials_that_every_consumer_reads() {
        let versions = versions();
        assert_eq!(versions.len(), 4, "{versions:?}");
        for version in versions {
            let inputs = fresh();
            let r = render_spec(&PipelinesComponent, json!({"version": version}), &inputs)
                .expect("render");
            for (name, data) in [
                (stores::DB_SECRET, &inputs.database),
                (stores::STORE_SECRET, &inputs.store),
            ] {
                let s = find(&r, "Secret", name).expect("secret");
                assert!(s.data.get("stringData").is_none(), "{version} {name}");
                assert_eq!(
                    Some(&secrets::decoded(&s.data["data"])),
                    data.as_ref(),
                    "{version} {name}"
                );
            }
            assert!(known_secrets::find(&r.objects).is_empty(), "{version}");
            assert!(
                known_secrets::find_empty_passwords(&r.objects).is_empty(),
                "{version}"
            );
            // The generated values are in the Secrets only (base64 there):
            // every consumer refers to them.
            let text = serde_json::to_string(&r.objects).expect("json");
            for v in inputs
                .database
                .iter()
                .chain(&inputs.store)
                .flat_map(|d| d.values())
                .filter(|v| v.len() > 8)
            {
                assert!(
                    !text.contains(v.as_str()),
                    "{version}: a literal credential"
                );
            }
            let store = if version == "2.5.0" {
                "minio"
            } else {
                "seaweedfs"
            };
            let db_readers = readers(&r, stores::DB_SECRET);
            for w in [
                "mysql",
                "ml-pipeline",
                "cache-server",
                "metadata-grpc-deployment",
            ] {
                assert!(db_readers.contains(w), "{version}: {w} in {db_readers:?}");
            }
            let store_readers = readers(&r, stores::STORE_SECRET);
            for w in [store, "ml-pipeline", "ml-pipeline-ui"] {
                assert!(
                    store_readers.contains(w),
                    "{version}: {w} in {store_readers:?}"
                );
            }
            // MySQL takes its root password from the Secret.
            let mysql = find(&r, "Deployment", "mysql").expect("mysql");
            let env = mysql.data["spec"]["template"]["spec"]["containers"][0]["env"].clone();
            let root = env
                .as_array()
                .into_iter()
                .flatten()
                .find(|e| e["name"] == "MYSQL_ROOT_PASSWORD")
                .cloned()
                .unwrap_or_default();
            assert_eq!(
                root["valueFrom"]["secretKeyRef"],
                json!({"name": stores::DB_SECRET, "key": "password"}),
                "{version}"
            );
            // Argo's artifact repository reads the store's keys from the
            // Secret by name, and holds none itself.
            let wf = find(&r, "ConfigMap", WORKFLOW_CONFIG).expect("workflow config");
            let repo = wf.data["data"]["artifactRepository"]
                .as_str()
                .unwrap_or_default();
            assert_eq!(repo.matches(stores::STORE_SECRET).count(), 2, "{version}");
        }
    }

    #[test]
    fn an_install_that_ran_the_demo_values_keeps_them_unwritten_and_released() {
        for version in versions() {
            let r = render_spec(&PipelinesComponent, json!({"version": version}), &demo())
                .expect("render");
            assert!(find(&r, "Secret", stores::DB_SECRET).is_none(), "{version}");
            assert!(
                find(&r, "Secret", stores::STORE_SECRET).is_none(),
                "{version}"
            );
            // The consumers still read the live Secrets.
            assert!(readers(&r, stores::DB_SECRET).contains("ml-pipeline"));
            assert!(readers(&r, stores::STORE_SECRET).contains("ml-pipeline"));
            assert!(known_secrets::find_empty_passwords(&r.objects).is_empty());
        }
        let cr: Pipelines = serde_json::from_value(json!({
            "apiVersion": "components.kubeflow.org/v1alpha1", "kind": "Pipelines",
            "metadata": {"name": "p", "namespace": "kubeflow"},
            "spec": {"version": "2.16.1"}}))
        .expect("cr");
        let secret: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": stores::DB_SECRET, "namespace": "kubeflow"}}))
        .expect("secret");
        let message = PipelinesComponent
            .release_on_prune(&cr, &secret)
            .expect("released");
        assert!(message.contains("docs/security.md"), "{message}");
        // Only the two Secrets are released.
        let other: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "other", "namespace": "kubeflow"}}))
        .expect("secret");
        assert!(PipelinesComponent.release_on_prune(&cr, &other).is_none());
    }

    #[test]
    fn rotated_credentials_are_managed_again_as_they_are() {
        let mut inputs = demo();
        inputs.database = Some(map(&[("username", "root"), ("password", "rotated-0123")]));
        let r = render_spec(&PipelinesComponent, json!({"version": "2.16.1"}), &inputs)
            .expect("render");
        let s = find(&r, "Secret", stores::DB_SECRET).expect("managed again");
        assert_eq!(
            secrets::decoded(&s.data["data"])["password"],
            "rotated-0123"
        );
        assert!(
            find(&r, "Secret", stores::STORE_SECRET).is_none(),
            "still the demo keys"
        );
    }

    /// Renders `version` for an install whose status says `installed`.
    fn render_over(version: &str, installed: &str, inputs: &Credentials) -> Rendered {
        let cr: Pipelines = serde_json::from_value(json!({
            "apiVersion": "components.kubeflow.org/v1alpha1", "kind": "Pipelines",
            "metadata": {"name": "kubeflow", "namespace": "kubeflow"},
            "spec": {"version": version}, "status": {"version": installed}}))
        .expect("cr");
        let dir = kubeflow_operator::component::manifests_dir();
        let bundles = kubeflow_operator::bundle::BundleCache::default();
        let ctx = kubeflow_operator::component::RenderContext::of(
            &cr,
            &dir,
            &bundles,
            Platform::Kubernetes,
        );
        PipelinesComponent
            .render(&cr, &ctx, inputs)
            .expect("render")
    }

    fn digest_of(r: &Rendered, workload: &str) -> Value {
        find(r, "Deployment", workload).expect("workload").data["spec"]["template"]["metadata"]
            ["annotations"][transform::CONFIG_DIGEST]
            .clone()
    }

    /// A demo install being upgraded: what its first pass reads.
    fn demo_upgrading() -> Credentials {
        let mut c = demo();
        c.rotation.fresh = map(&[
            ("password", &"a".repeat(48)),
            ("accesskey", &"b".repeat(20)),
            ("secretkey", &"c".repeat(40)),
        ]);
        c
    }

    #[test]
    fn an_upgrade_of_a_demo_install_stages_new_values_and_tells_the_database_first() {
        let inputs = demo_upgrading();
        // Not upgrading: nothing is rotated (the Secrets stay released).
        let same = render_over("2.16.1", "2.16.1", &inputs);
        assert!(find(&same, "Job", rotation::STAGING).is_none());
        assert!(find(&same, "Secret", rotation::STAGING).is_none());
        // The new version's render (applied only as the plan says).
        let r = render_over("2.16.1", "2.16.0", &inputs);
        let staged = find(&r, "Secret", rotation::STAGING).expect("staging Secret");
        assert_eq!(
            secrets::decoded(&staged.data["data"]),
            inputs.rotation.fresh
        );
        assert!(find(&r, "Secret", stores::DB_SECRET).is_none(), "not yet");
        assert!(
            find(&r, "Secret", stores::STORE_SECRET).is_none(),
            "not yet"
        );
        let job = find(&r, "Job", rotation::STAGING).expect("job");
        let pod = &job.data["spec"]["template"]["spec"];
        let mysql = find(&r, "Deployment", "mysql").expect("mysql");
        assert_eq!(
            pod["containers"][0]["image"],
            mysql.data["spec"]["template"]["spec"]["containers"][0]["image"],
            "the database's own client"
        );
        assert_eq!(pod["automountServiceAccountToken"], false);
        assert_eq!(pod["serviceAccountName"], "mysql");
        let env = pod["containers"][0]["env"].to_string();
        assert!(
            env.contains("\"DB_HOST\",\"value\":\"mysql.kubeflow.svc\""),
            "{env}"
        );
        for (var, secret) in [
            ("OLD_PASSWORD", stores::DB_SECRET),
            ("NEW_PASSWORD", rotation::STAGING),
        ] {
            let e = pod["containers"][0]["env"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|e| e["name"] == var)
                .expect("variable");
            assert_eq!(e["valueFrom"]["secretKeyRef"]["name"], secret);
        }
        assert!(
            !serde_json::to_string(job.data.as_object().expect("job"))
                .expect("json")
                .contains(&"a".repeat(48)),
            "no value in the Job"
        );
        // The staging Secret is kept with the volumes (the database may
        // already take its password).
        let cr = |policy: Value| -> Pipelines {
            serde_json::from_value(json!({"apiVersion": "components.kubeflow.org/v1alpha1",
                "kind": "Pipelines", "metadata": {"name": "p", "namespace": "kubeflow"},
                "spec": {"version": "2.16.1", "volumePolicy": policy}}))
            .expect("cr")
        };
        assert!(PipelinesComponent.retain(&cr(json!("Retain")), staged));
        // Once staged, the rotation goes on at any version (the installed
        // one's render too) until the Job is Complete.
        let mut going = inputs.clone();
        going.rotation.staged = Some(inputs.rotation.fresh.clone());
        let installed = render_over("2.16.0", "2.16.0", &going);
        assert!(find(&installed, "Job", rotation::STAGING).is_some());
        // Only the store held demo keys: no Job, the keys staged alone.
        let mut store_only = demo_upgrading();
        store_only.database = fresh().database;
        store_only.rotation.database_told = true;
        let r = render_over("2.16.1", "2.16.0", &store_only);
        assert!(find(&r, "Job", rotation::STAGING).is_none());
        assert!(find(&r, "Secret", rotation::STAGING).is_some());
    }

    #[test]
    fn once_the_database_is_told_the_secrets_get_the_new_values_and_every_reader_restarts() {
        let before = render_over("2.16.1", "2.16.0", &demo_upgrading());
        let mut told = demo_upgrading();
        told.rotation.staged = Some(told.rotation.fresh.clone());
        told.rotation.database_told = true;
        let r = render_over("2.16.1", "2.16.1", &told);
        let db = find(&r, "Secret", stores::DB_SECRET).expect("written again");
        assert_eq!(
            secrets::decoded(&db.data["data"]),
            map(&[("username", "root"), ("password", &"a".repeat(48))])
        );
        let store = find(&r, "Secret", stores::STORE_SECRET).expect("written again");
        assert_eq!(
            secrets::decoded(&store.data["data"]),
            map(&[
                ("accesskey", &"b".repeat(20)),
                ("secretkey", &"c".repeat(40))
            ])
        );
        assert!(find(&r, "Job", rotation::STAGING).is_none());
        // The staging Secret, marked as written: no longer kept.
        let staging = find(&r, "Secret", rotation::STAGING).expect("staging");
        let policy: Pipelines = serde_json::from_value(json!({
            "apiVersion": "components.kubeflow.org/v1alpha1", "kind": "Pipelines",
            "metadata": {"name": "p", "namespace": "kubeflow"},
            "spec": {"version": "2.16.1", "volumePolicy": "Retain"}}))
        .expect("cr");
        assert!(!PipelinesComponent.retain(&policy, staging));
        assert!(known_secrets::find(&r.objects).is_empty());
        let readers = rotation::readers(&r.objects);
        for w in [
            "mysql",
            "seaweedfs",
            "ml-pipeline",
            "ml-pipeline-ui",
            "cache-server",
            "metadata-grpc-deployment",
        ] {
            assert!(readers.contains(&w.to_string()), "{w} in {readers:?}");
            let (old, new) = (digest_of(&before, w), digest_of(&r, w));
            assert!(new.is_string() && old != new, "{w} restarts: {old} {new}");
        }
        // Later passes (no demo value left) render the same Secrets.
        let mut after = told.clone();
        after.database = Some(secrets::decoded(&db.data["data"]));
        after.store = Some(secrets::decoded(&store.data["data"]));
        let again = render_over("2.16.1", "2.16.1", &after);
        assert_eq!(
            digest_of(&again, "ml-pipeline"),
            digest_of(&r, "ml-pipeline")
        );
        assert!(find(&again, "Job", rotation::STAGING).is_none());
    }

    #[test]
    fn the_object_store_forgets_earlier_keys_at_every_start() {
        for version in versions().into_iter().filter(|v| v != "2.5.0") {
            let r = render_spec(&PipelinesComponent, json!({"version": version}), &fresh())
                .expect("render");
            let store = find(&r, "Deployment", "seaweedfs").expect("seaweedfs");
            let hook = store.data["spec"]["template"]["spec"]["containers"][0]["lifecycle"]
                ["postStart"]["exec"]["command"]
                .to_string();
            let forget = hook
                .find("s3.configure -user kubeflow-admin -delete -apply")
                .unwrap_or_else(|| panic!("{version}: no deletion in {hook}"));
            let configure = hook
                .find("s3.configure -user kubeflow-admin -access_key")
                .expect("configure");
            assert!(forget < configure, "{version}");
        }
    }

    #[test]
    fn a_staging_secret_someone_edited_is_refused() {
        let mut c = demo_upgrading();
        c.rotation.staged = Some(map(&[
            ("password", "x'; DROP USER root; --"),
            ("accesskey", &"b".repeat(20)),
            ("secretkey", &"c".repeat(40)),
        ]));
        assert!(
            rotation::check_staged("kubeflow", c.rotation.staged.as_ref().expect("s")).is_err()
        );
        assert!(rotation::check_staged("kubeflow", &c.rotation.fresh).is_ok());
    }

    #[test]
    fn the_credentials_are_kept_with_the_volumes_unless_the_spec_says_delete() {
        let r = render_spec(&PipelinesComponent, json!({"version": "2.16.1"}), &fresh())
            .expect("render");
        let cr = |policy: Value| -> Pipelines {
            serde_json::from_value(json!({"apiVersion": "components.kubeflow.org/v1alpha1",
                "kind": "Pipelines", "metadata": {"name": "p", "namespace": "kubeflow"},
                "spec": {"version": "2.16.1", "volumePolicy": policy}}))
            .expect("cr")
        };
        let mut kept: Vec<String> = r
            .objects
            .iter()
            .filter(|o| PipelinesComponent.retain(&cr(json!("Retain")), o))
            .map(|o| format!("{}/{}", kind(o), o.name_any()))
            .collect();
        kept.sort();
        assert_eq!(
            kept,
            [
                "PersistentVolumeClaim/mysql-pv-claim",
                "PersistentVolumeClaim/seaweedfs-pvc",
                "Secret/mlpipeline-minio-artifact",
                "Secret/mysql-secret",
            ]
        );
        assert!(
            !r.objects
                .iter()
                .any(|o| PipelinesComponent.retain(&cr(json!("Delete")), o))
        );
    }

    #[test]
    fn its_role_covers_what_it_renders_for_every_version_and_platform() {
        assert_permitted(&PipelinesComponent, |dir| every_version(dir, "pipelines"));
    }

    #[test]
    fn the_cache_webhook_is_removed_by_its_name_in_each_allowed_namespace() {
        let dir = kubeflow_operator::component::manifests_dir();
        let rules =
            kubeflow_operator::component::rules_of(&PipelinesComponent, &dir).expect("rules");
        let webhooks = "mutatingwebhookconfigurations";
        let group = "admissionregistration.k8s.io";
        assert!(rbac::allows_named(
            &rules.cluster_per_namespace,
            group,
            webhooks,
            "delete",
            "cache-webhook-{namespace}"
        ));
        // No other webhook configuration may it delete.
        assert!(!rbac::allows(&rules.cluster, group, webhooks, "delete"));
        assert!(!rbac::allows(
            &rules.cluster_per_namespace,
            group,
            webhooks,
            "delete"
        ));
    }
}
