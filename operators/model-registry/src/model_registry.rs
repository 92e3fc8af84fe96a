//! What the operator knows of the Model Registry (Kubeflow Hub from v0.3.9
//! on): its server, web app and catalog, its databases (bundled or
//! external), which volumes hold data, where upstream puts each part, and
//! what an upgrade across the database engine change leaves to a person.

use kubeflow_operator::api::{DatabaseEngine, ModelRegistry};
use kubeflow_operator::async_trait::async_trait;
use kubeflow_operator::component::{
    Component, DereferenceError, Draft, Reference, Refusal, RenderContext, require_crd,
};
use kubeflow_operator::conditions::Reason;
use kubeflow_operator::k8s_openapi::api::core::v1::PersistentVolumeClaim;
use kubeflow_operator::kinds::kind;
use kubeflow_operator::kube::Api;
use kubeflow_operator::kube::api::DynamicObject;
use kubeflow_operator::kube::{Client, ResourceExt};
use kubeflow_operator::labels;
use kubeflow_operator::render::{Layout, Target};
use kubeflow_operator::serde_json::json;
use kubeflow_operator::{secrets, transform};

use crate::database::{self, Passwords};

/// The namespaces upstream's bundles install into: the web app (v0.3.7)
/// and the catalog in `kubeflow`; the registry (v0.3.9) in the example
/// user's profile namespace. v0.3.7's registry carries none. Everything
/// goes to the resource's namespace, one registry for the platform.
const BUNDLE_NAMESPACES: [&str; 2] = ["kubeflow", "kubeflow-user-example-com"];
/// The workloads replicas, resources and scheduling apply to (the bundled
/// databases are one instance on one volume each, so they keep their own).
const WORKLOADS: [&str; 3] = [
    database::SERVER,
    "model-registry-ui",
    "model-catalog-server",
];
/// The registry API's policy, which v0.3.7 opens to every caller in the mesh.
const API_POLICY: &str = "model-registry-service";
/// The length of generated passwords, in random bytes (hex: twice as many
/// characters).
const PASSWORD_BYTES: usize = 24;

/// The Model Registry component.
pub struct ModelRegistryComponent;

/// What `dereference` reads for `render`.
#[derive(Default)]
pub struct Inputs {
    /// The bundled databases' passwords; none with an external registry
    /// database (the catalog's then too: read only when the bundle is).
    passwords: Option<Passwords>,
    /// The bundled MySQL's volume is the component's own: the registry's
    /// records are in MySQL, and stay there unless the spec says otherwise.
    mysql_in_use: bool,
}

#[async_trait]
impl Component for ModelRegistryComponent {
    type Resource = ModelRegistry;
    type Inputs = Inputs;

    const LAYOUT: Layout = Layout {
        from_namespaces: &BUNDLE_NAMESPACES,
        target: Target::ResourceNamespace,
        workloads: &WORKLOADS,
    };

    fn references(cr: &ModelRegistry) -> Vec<Reference> {
        external(cr)
            .map(|db| vec![Reference::Secret(db.credentials_secret.clone())])
            .unwrap_or_default()
    }

    async fn dereference(
        &self,
        cr: &ModelRegistry,
        client: &Client,
    ) -> Result<Inputs, DereferenceError> {
        // The server's and the web app's VirtualServices, DestinationRules
        // and AuthorizationPolicies.
        require_crd(
            client,
            "virtualservices.networking.istio.io",
            "the Model Registry's API and web app route through Istio; enable istio in the Kubeflow resource (or install Istio)",
        )
        .await?;
        let ns = cr.namespace().unwrap_or_default();
        if let Some(db) = external(cr) {
            secrets::require(
                client,
                &ns,
                &db.credentials_secret,
                &kubeflow_operator::database::CREDENTIAL_KEYS,
            )
            .await?;
        }
        let mysql_in_use = mysql_in_use(client, &ns, &cr.name_any()).await?;
        let kept = secrets::read(client, &ns, database::SECRET)
            .await
            .map_err(|e| DereferenceError::Api("read the Model Registry database's password", e))?
            .unwrap_or_default();
        let catalog = secrets::kept_or_generated(
            client,
            &ns,
            database::CATALOG_SECRET,
            database::POSTGRES_KEY,
            PASSWORD_BYTES,
        )
        .await?;
        Ok(Inputs {
            passwords: Some(Passwords {
                kept,
                new_registry: secrets::random_hex(PASSWORD_BYTES)?,
                catalog,
            }),
            mysql_in_use,
        })
    }

    fn prepare(&self, draft: &mut Draft<'_, Self>) -> Result<(), Refusal> {
        let (cr, ctx, inputs) = (draft.cr, draft.ctx, draft.inputs);
        let spec = &cr.spec;
        let objects = &mut draft.objects;
        // The placeholder key would overwrite the user's own on every pass.
        transform::remove(objects, |o| {
            kind(o) == "Secret" && o.metadata.name.as_deref() == Some(database::CATALOG_HF_SECRET)
        });
        if !spec.catalog.unwrap_or(true) {
            transform::remove(objects, |o| {
                o.metadata
                    .name
                    .as_deref()
                    .is_some_and(|n| n.starts_with(database::CATALOG_PREFIX))
            });
        }
        close_the_api(objects);
        if external(cr).is_none() {
            choose_engine(cr, ctx, inputs, objects)?;
        }
        Ok(())
    }

    fn customise(&self, draft: &mut Draft<'_, Self>) -> Result<(), Refusal> {
        let (cr, ctx, inputs) = (draft.cr, draft.ctx, draft.inputs);
        let objects = &mut draft.objects;
        for from in BUNDLE_NAMESPACES {
            transform::rewrite_service_hosts(objects, from, ctx.namespace);
            transform::rewrite_istio_hosts(objects, from, ctx.namespace);
        }
        if let Some(db) = external(cr) {
            // The schema's pattern, again for a resource stored before it
            // had one: the host goes into the server's connection string.
            kubeflow_operator::validate::host("spec.database.external.host", &db.host)
                .map_err(|m| Refusal::new(kubeflow_operator::conditions::Reason::InvalidSpec, m))?;
            database::use_external(objects, db);
        }
        match &inputs.passwords {
            Some(p) => database::set_passwords(objects, p),
            None => kubeflow_operator::database::drop_secrets(
                objects,
                &[database::SECRET, database::CATALOG_SECRET],
            ),
        }
        Ok(())
    }

    /// When the bundled registry database goes (an external one is used
    /// instead), its volume is released by every prune; the password that
    /// opens the data on it is released with it rather than deleted.
    fn release_on_prune(&self, _cr: &ModelRegistry, obj: &DynamicObject) -> Option<String> {
        (kind(obj) == "Secret" && database::bundled(obj)).then(|| {
            kubeflow_operator::database::released_credentials(
                "the Model Registry",
                "database",
                "its released volume",
            )
        })
    }

    /// The bundled databases' volumes, and the passwords that open them,
    /// outlive the component unless the spec says otherwise.
    fn retain(&self, cr: &ModelRegistry, obj: &DynamicObject) -> bool {
        kubeflow_operator::database::kept(cr.spec.volume_policy, database::holds_data(obj))
    }

    /// Moving from v0.3.7's bundled MySQL to PostgreSQL, when the spec asks
    /// for it, leaves the records in MySQL (by default MySQL is kept, and an
    /// external database stays where it is).
    fn upgrade_actions(&self, cr: Option<&ModelRegistry>, from: &str, to: &str) -> Vec<String> {
        let to_postgres = cr.is_some_and(|cr| {
            external(cr).is_none() && engine(cr) == Some(DatabaseEngine::PostgreSQL)
        });
        if to_postgres && from == database::MYSQL_RELEASE && to != from {
            vec![format!(
                "spec.database.engine PostgreSQL: the bundled database moves from MySQL to a new PostgreSQL: registered models, versions and artifacts in MySQL (volume metadata-mysql, released and kept; its password stays in Secret {} under {}) are not copied; register them again against {to} (or export them through the v0.3.7 API before the upgrade), then delete that volume; without spec.database.engine the registry keeps MySQL and its records",
                database::SECRET,
                database::MYSQL_KEY
            )]
        } else {
            Vec::new()
        }
    }

    /// An offline plan from a version that runs MySQL is the plan of an
    /// install whose records are there: MySQL is kept.
    fn planned_inputs(&self, installed: &[DynamicObject]) -> Inputs {
        Inputs {
            passwords: None,
            mysql_in_use: database::runs_mysql(installed),
        }
    }
}

/// Whether the bundled MySQL's volume is this resource's own (a volume an
/// earlier upgrade released, or someone else's, is not).
async fn mysql_in_use(client: &Client, ns: &str, owner: &str) -> Result<bool, DereferenceError> {
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), ns);
    let pvc = pvcs
        .get_opt(database::MYSQL_VOLUME)
        .await
        .map_err(|e| DereferenceError::Api("read the Model Registry's MySQL volume", e))?;
    Ok(pvc.is_some_and(|p| {
        let labels = p.metadata.labels.unwrap_or_default();
        labels.contains_key(labels::APPLYSET_PART_OF)
            && labels.get(labels::OWNER_NAME).map(String::as_str) == Some(owner)
    }))
}

/// The bundled database's engine: the spec's, else MySQL where the records
/// are in MySQL, else the release's own.
fn choose_engine(
    cr: &ModelRegistry,
    ctx: &RenderContext<'_>,
    inputs: &Inputs,
    objects: &mut Vec<DynamicObject>,
) -> Result<(), Refusal> {
    let mysql = match engine(cr) {
        Some(DatabaseEngine::MySQL) => true,
        Some(DatabaseEngine::PostgreSQL) => {
            if database::runs_mysql(objects) {
                return Err(Refusal::new(
                    Reason::InvalidSpec,
                    format!(
                        "spec.database.engine PostgreSQL: version {} bundles only MySQL; PostgreSQL is bundled from v0.3.9 on",
                        ctx.common
                            .version
                            .as_deref()
                            .unwrap_or(database::MYSQL_RELEASE)
                    ),
                ));
            }
            false
        }
        None => inputs.mysql_in_use,
    };
    if mysql && !database::runs_mysql(objects) {
        let release = ctx.bundle_at(ctx.component, database::MYSQL_RELEASE)?;
        database::keep_mysql(objects, &release.objects())
            .map_err(|m| Refusal::new(Reason::BundleError, m))?;
    }
    Ok(())
}

/// The engine the spec asks the bundled database to run, if any.
fn engine(cr: &ModelRegistry) -> Option<DatabaseEngine> {
    cr.spec.database.as_ref().and_then(|d| d.engine)
}

/// v0.3.7 lets every workload in the mesh call the registry API; v0.3.9
/// lets in the ingress gateway (behind the login) and in-cluster callers
/// that bring a token and no forged user header. Both get v0.3.9's rules.
fn close_the_api(objects: &mut [DynamicObject]) {
    for p in objects.iter_mut().filter(|o| {
        kind(o) == "AuthorizationPolicy" && o.metadata.name.as_deref() == Some(API_POLICY)
    }) {
        p.data["spec"]["rules"] = json!([
            {"from": [{"source": {"principals": [
                "cluster.local/ns/istio-system/sa/istio-ingressgateway-service-account"]}}]},
            {"when": [
                {"key": "request.headers[authorization]", "values": ["*"]},
                {"key": "request.headers[kubeflow-userid]", "notValues": ["*"]}]}
        ]);
    }
}

/// The external registry database, when the spec names one.
fn external(cr: &ModelRegistry) -> Option<&kubeflow_operator::api::ExternalDatabase> {
    cr.spec.database.as_ref().and_then(|d| d.external.as_ref())
}

#[cfg(test)]
mod tests {
    use super::*;
    use kubeflow_operator::component::{
        Rendered, assert_permitted, every_version, find, render_spec,
    };
    use kubeflow_operator::serde_json::{Value, json};
    use std::collections::BTreeMap;

    #[test]
    fn its_role_covers_what_it_renders_for_every_version_and_platform() {
        assert_permitted(&ModelRegistryComponent, |dir| {
            every_version(dir, "model-registry")
        });
    }

    fn passwords(kept: &[(&str, &str)]) -> Inputs {
        Inputs {
            passwords: Some(Passwords {
                kept: kept
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
                new_registry: "new-registry".into(),
                catalog: "catalog-pw".into(),
            }),
            mysql_in_use: false,
        }
    }

    fn secret(r: &Rendered, name: &str) -> BTreeMap<String, String> {
        secrets::decoded(&find(r, "Secret", name).expect("secret").data["data"])
    }

    #[test]
    fn every_part_goes_to_the_resources_namespace_with_its_routes() {
        for version in ["v0.3.7", "v0.3.9"] {
            let r = render_spec(
                &ModelRegistryComponent,
                json!({"version": version}),
                &passwords(&[]),
            )
            .expect("render");
            for o in &r.objects {
                if let Some(ns) = &o.metadata.namespace {
                    assert_eq!(ns, "kubeflow", "{version} {}", o.name_any());
                }
            }
            let text = serde_json::to_string(&r.objects).expect("json");
            assert!(
                !text.contains("kubeflow-user-example-com"),
                "{version}: nothing names the example profile"
            );
            let dr = find(&r, "DestinationRule", "model-registry-service").expect("rule");
            assert_eq!(
                dr.data["spec"]["host"],
                "model-registry-service.kubeflow.svc.cluster.local"
            );
            // The placeholder key would overwrite the user's own.
            assert!(find(&r, "Secret", database::CATALOG_HF_SECRET).is_none());
            // The API is not open to every workload in the mesh.
            let policy = find(&r, "AuthorizationPolicy", API_POLICY).expect("policy");
            assert_ne!(policy.data["spec"]["rules"], json!([{}]), "{version}");
        }
    }

    #[test]
    fn the_bundled_databases_get_generated_passwords_never_the_demo_ones() {
        let r = render_spec(
            &ModelRegistryComponent,
            json!({"version": "v0.3.7"}),
            &passwords(&[]),
        )
        .expect("render");
        assert_eq!(
            secret(&r, database::SECRET)[database::MYSQL_KEY],
            "new-registry"
        );
        assert_eq!(
            secret(&r, database::CATALOG_SECRET)[database::POSTGRES_KEY],
            "catalog-pw"
        );
        let text = serde_json::to_string(&r.objects).expect("json");
        // "test", base64: the registry's demo password ("postgres", the
        // catalog's, is also its user name, checked above).
        assert!(!text.contains("\"dGVzdA==\""));
        // Kept over new.
        let r = render_spec(
            &ModelRegistryComponent,
            json!({"version": "v0.3.7"}),
            &passwords(&[(database::MYSQL_KEY, "kept")]),
        )
        .expect("render");
        assert_eq!(secret(&r, database::SECRET)[database::MYSQL_KEY], "kept");
    }

    #[test]
    fn moving_to_postgresql_keeps_mysqls_password_and_releases_its_volume() {
        let old = render_spec(
            &ModelRegistryComponent,
            json!({"version": "v0.3.7"}),
            &passwords(&[(database::MYSQL_KEY, "mysql-pw")]),
        )
        .expect("render");
        let to_postgres = json!({"version": "v0.3.9", "database": {"engine": "PostgreSQL"}});
        let mut inputs = passwords(&[
            (database::MYSQL_KEY, "mysql-pw"),
            ("MYSQL_USER_NAME", "root"),
        ]);
        // Asked for by name, the move happens though MySQL holds the records.
        inputs.mysql_in_use = true;
        let new =
            render_spec(&ModelRegistryComponent, to_postgres.clone(), &inputs).expect("render");
        assert!(!database::runs_mysql(&new.objects));
        let new = render_spec(
            &ModelRegistryComponent,
            to_postgres,
            &passwords(&[
                (database::MYSQL_KEY, "mysql-pw"),
                ("MYSQL_USER_NAME", "root"),
            ]),
        )
        .expect("render");
        let s = secret(&new, database::SECRET);
        assert_eq!(
            s.get("MYSQL_USER_NAME").map(String::as_str),
            Some("root"),
            "every key the kept MySQL needs stays"
        );
        assert_eq!(s[database::POSTGRES_KEY], "new-registry");
        assert_eq!(
            s[database::MYSQL_KEY],
            "mysql-pw",
            "opens the released volume"
        );
        let plan = kubeflow_operator::upgrade_plan::Plan::compute(&old.objects, &new.objects);
        let released: Vec<String> = plan.released.iter().map(ToString::to_string).collect();
        assert!(
            released.iter().any(|k| k.contains("metadata-mysql")),
            "{released:?}"
        );
        assert!(
            plan.pruned
                .iter()
                .all(|k| k.kind() != "PersistentVolumeClaim")
        );
        let cr = |spec: Value| -> ModelRegistry {
            serde_json::from_value(json!({
                "apiVersion": "components.kubeflow.org/v1alpha1", "kind": "ModelRegistry",
                "metadata": {"name": "m", "namespace": "kubeflow"}, "spec": spec}))
            .expect("cr")
        };
        let moving = cr(json!({"version": "v0.3.9", "database": {"engine": "PostgreSQL"}}));
        let actions = ModelRegistryComponent.upgrade_actions(Some(&moving), "v0.3.7", "v0.3.9");
        assert!(actions[0].contains("metadata-mysql"), "{actions:?}");
        assert!(
            ModelRegistryComponent
                .upgrade_actions(Some(&cr(json!({"version": "v0.3.9"}))), "v0.3.7", "v0.3.9")
                .is_empty(),
            "by default MySQL is kept: nothing for a person to do"
        );
        assert!(
            ModelRegistryComponent
                .upgrade_actions(None, "v0.3.7", "v0.3.9")
                .is_empty()
        );
        assert!(
            ModelRegistryComponent
                .upgrade_actions(None, "v0.3.9", "v0.3.9")
                .is_empty()
        );
        let external: ModelRegistry = serde_json::from_value(json!({
            "apiVersion": "components.kubeflow.org/v1alpha1", "kind": "ModelRegistry",
            "metadata": {"name": "m", "namespace": "kubeflow"},
            "spec": {"version": "v0.3.7", "database": {"external": {
                "host": "db.example", "credentialsSecret": "db"}}}}))
        .expect("cr");
        assert!(
            ModelRegistryComponent
                .upgrade_actions(Some(&external), "v0.3.7", "v0.3.9")
                .is_empty(),
            "an external database moves nothing"
        );
    }

    /// An install whose records are in MySQL keeps them there at v0.3.9:
    /// v0.3.7's database on the same volume, opened with the kept password,
    /// and the v0.3.9 server pointed at it; the plan releases and prunes
    /// nothing of the database.
    #[test]
    fn an_install_on_mysql_keeps_its_records_across_the_upgrade() {
        let old = render_spec(
            &ModelRegistryComponent,
            json!({"version": "v0.3.7"}),
            &passwords(&[(database::MYSQL_KEY, "mysql-pw")]),
        )
        .expect("render");
        let mut inputs = passwords(&[
            (database::MYSQL_KEY, "mysql-pw"),
            ("MYSQL_USER_NAME", "root"),
        ]);
        inputs.mysql_in_use = true;
        let new = render_spec(
            &ModelRegistryComponent,
            json!({"version": "v0.3.9"}),
            &inputs,
        )
        .expect("render");
        assert!(find(&new, "PersistentVolumeClaim", "metadata-mysql").is_some());
        assert!(find(&new, "PersistentVolumeClaim", "metadata-postgres").is_none());
        let db = find(&new, "Deployment", database::BUNDLED).expect("database");
        let image = db.data["spec"]["template"]["spec"]["containers"][0]["image"]
            .as_str()
            .unwrap_or("");
        assert!(image.starts_with("mysql:"), "{image}");
        let s = secret(&new, database::SECRET);
        assert_eq!(
            s[database::MYSQL_KEY],
            "mysql-pw",
            "the kept password opens it"
        );
        assert!(!s.contains_key(database::POSTGRES_KEY), "{s:?}");
        let server = find(&new, "Deployment", database::SERVER).expect("server");
        let container = &server.data["spec"]["template"]["spec"]["containers"][0];
        let args: Vec<&str> = container["args"]
            .as_array()
            .expect("args")
            .iter()
            .filter_map(Value::as_str)
            .collect();
        assert!(args.contains(&"--embedmd-database-type=mysql"), "{args:?}");
        let dsn: Vec<&&str> = args
            .iter()
            .filter(|a| a.starts_with("--embedmd-database-dsn="))
            .collect();
        assert_eq!(dsn.len(), 1, "{args:?}");
        assert!(dsn[0].contains("@tcp(model-registry-db"), "{dsn:?}");
        assert!(
            container["image"]
                .as_str()
                .unwrap_or("")
                .ends_with(":v0.3.9"),
            "the new server"
        );
        assert_eq!(
            server.data["spec"]["template"]["metadata"]["annotations"]["traffic.sidecar.istio.io/excludeOutboundPorts"],
            json!("3306")
        );
        // Placed like every other object, and no empty password comes back
        // with v0.3.7's parameters.
        for o in &new.objects {
            if let Some(ns) = o.metadata.namespace.as_deref() {
                assert_eq!(ns, "kubeflow", "{:?}", o.metadata.name);
            }
        }
        let text = serde_json::to_string(&new.objects).unwrap_or_default();
        assert!(!text.contains("ALLOW_EMPTY_PASSWORD"));
        let plan = kubeflow_operator::upgrade_plan::Plan::compute(&old.objects, &new.objects);
        assert!(plan.released.is_empty(), "{:?}", plan.released);
        assert!(
            plan.pruned
                .iter()
                .all(|k| !k.to_string().contains(database::BUNDLED)),
            "{:?}",
            plan.pruned
        );
        // The offline plan is that install's: MySQL kept.
        assert!(
            ModelRegistryComponent
                .planned_inputs(&old.objects)
                .mysql_in_use
        );
    }

    /// MySQL by name runs at v0.3.9 on a new install; PostgreSQL by name at
    /// v0.3.7, which bundles none, is refused naming the field.
    #[test]
    fn the_engine_by_name() {
        let r = render_spec(
            &ModelRegistryComponent,
            json!({"version": "v0.3.9", "database": {"engine": "MySQL"}}),
            &passwords(&[]),
        )
        .expect("render");
        assert!(database::runs_mysql(&r.objects));
        assert!(secret(&r, database::SECRET)[database::MYSQL_KEY] == "new-registry");
        let refused = render_spec(
            &ModelRegistryComponent,
            json!({"version": "v0.3.7", "database": {"engine": "PostgreSQL"}}),
            &passwords(&[]),
        )
        .err()
        .expect("refused");
        assert!(
            refused.message.contains("spec.database.engine"),
            "{}",
            refused.message
        );
    }

    #[test]
    fn an_external_database_replaces_the_bundled_one() {
        for (engine, version, prefix) in [
            (
                "PostgreSQL",
                "v0.3.9",
                "postgresql://$(DB_USER):$(DB_PASSWORD)@pg.example:5432/metadb",
            ),
            (
                "MySQL",
                "v0.3.7",
                "$(DB_USER):$(DB_PASSWORD)@tcp(pg.example:3306)/metadb",
            ),
        ] {
            let spec = json!({"version": version, "database": {"external": {
                "engine": engine, "host": "pg.example", "credentialsSecret": "registry-db"}}});
            let r = render_spec(&ModelRegistryComponent, spec, &passwords(&[])).expect("render");
            assert!(
                !r.objects.iter().any(database::bundled),
                "no bundled database"
            );
            let server = find(&r, "Deployment", database::SERVER).expect("server");
            let c = &server.data["spec"]["template"]["spec"]["containers"][0];
            let args: Vec<&str> = c["args"]
                .as_array()
                .expect("args")
                .iter()
                .filter_map(Value::as_str)
                .collect();
            let dsn = args
                .iter()
                .find_map(|a| a.strip_prefix("--embedmd-database-dsn="))
                .expect("dsn");
            assert!(dsn.starts_with(prefix), "{dsn}");
            assert_eq!(
                args.iter()
                    .filter(|a| a.starts_with("--embedmd-database-dsn="))
                    .count(),
                1
            );
            assert_eq!(
                c["env"][1]["valueFrom"]["secretKeyRef"],
                json!({"name": "registry-db", "key": "password"})
            );
            let text = serde_json::to_string(&c).expect("json");
            assert!(!text.contains(database::SECRET), "{text}");
        }
    }

    #[test]
    fn the_catalog_can_be_left_out() {
        let r = render_spec(
            &ModelRegistryComponent,
            json!({"version": "v0.3.9", "catalog": false}),
            &passwords(&[]),
        )
        .expect("render");
        assert!(
            !r.objects
                .iter()
                .any(|o| o.name_any().starts_with(database::CATALOG_PREFIX))
        );
        assert!(find(&r, "Deployment", database::SERVER).is_some());
    }

    #[test]
    fn the_volumes_and_their_passwords_are_kept_unless_the_spec_says_delete() {
        let r = render_spec(
            &ModelRegistryComponent,
            json!({"version": "v0.3.9"}),
            &passwords(&[]),
        )
        .expect("render");
        let cr = |policy: Value| -> ModelRegistry {
            serde_json::from_value(json!({"apiVersion": "components.kubeflow.org/v1alpha1",
                "kind": "ModelRegistry", "metadata": {"name": "m", "namespace": "kubeflow"},
                "spec": {"version": "v0.3.9", "volumePolicy": policy}}))
            .expect("cr")
        };
        let mut kept: Vec<String> = r
            .objects
            .iter()
            .filter(|o| ModelRegistryComponent.retain(&cr(json!("Retain")), o))
            .map(|o| format!("{}/{}", kind(o), o.name_any()))
            .collect();
        kept.sort();
        assert_eq!(
            kept,
            [
                "PersistentVolumeClaim/metadata-postgres",
                "PersistentVolumeClaim/model-catalog-postgres",
                "Secret/model-catalog-postgres",
                "Secret/model-registry-db-secrets",
            ]
        );
        assert!(
            !r.objects
                .iter()
                .any(|o| ModelRegistryComponent.retain(&cr(json!("Delete")), o))
        );
    }
}
