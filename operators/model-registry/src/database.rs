//! The registry's records database and the catalog's: the bundled ones,
//! whose passwords are generated once and kept (never the release's demo
//! values), or an external MySQL or PostgreSQL server for the registry with
//! credentials from a Secret the user names.
//!
//! The bundled engine changes with the release (MySQL at v0.3.7,
//! PostgreSQL from v0.3.9 on), each on its own volume. An install whose
//! records are in MySQL keeps running MySQL after the upgrade (v0.3.7's
//! database objects, and the server opening them), so no registered model is
//! left behind; moving to PostgreSQL is asked for by name, and then the old
//! volume is released, with the password that opens it kept in the Secret
//! beside the new one.

use std::collections::BTreeMap;

use kubeflow_operator::api::{DatabaseEngine, ExternalDatabase};
use kubeflow_operator::kinds::kind;
use kubeflow_operator::kube::api::DynamicObject;
use kubeflow_operator::serde_json::{Value, json};
use kubeflow_operator::{database, secrets, transform};

/// The registry database's credentials, which the database and the server read.
pub const SECRET: &str = "model-registry-db-secrets";
/// The bundled database's Deployment and Service.
pub const BUNDLED: &str = "model-registry-db";
/// The registry server, the one workload that connects to the database.
pub const SERVER: &str = "model-registry-deployment";
/// The catalog database's credentials.
pub const CATALOG_SECRET: &str = "model-catalog-postgres";
/// The placeholder Hugging Face key the release ships: the user's to
/// create (the catalog reads it as optional), never overwritten.
pub const CATALOG_HF_SECRET: &str = "model-catalog-hf-api-key";
/// Every catalog object's name starts with this.
pub const CATALOG_PREFIX: &str = "model-catalog";
/// The catalog's database workload.
const CATALOG_DB: &str = "model-catalog-postgres";
/// The catalog's server.
const CATALOG_SERVER: &str = "model-catalog-server";
/// PostgreSQL's password key (the registry's from v0.3.9 on, the catalog's).
pub const POSTGRES_KEY: &str = "POSTGRES_PASSWORD";
/// MySQL's root password key (the registry's at v0.3.7).
pub const MYSQL_KEY: &str = "MYSQL_ROOT_PASSWORD";
/// Each engine's keys in the registry Secret: what its database needs to
/// be opened (password and user), kept whole while its volume is kept.
const ENGINE_KEYS: [(&str, &[&str]); 2] = [
    (MYSQL_KEY, &[MYSQL_KEY, "MYSQL_USER_NAME"]),
    (POSTGRES_KEY, &[POSTGRES_KEY, "POSTGRES_USER"]),
];
/// The last release that bundles MySQL: its database objects are the ones
/// an install keeping MySQL runs at later versions.
pub const MYSQL_RELEASE: &str = "v0.3.7";
/// The bundled MySQL's volume: while it is the component's own, the
/// registry's records are in it.
pub const MYSQL_VOLUME: &str = "metadata-mysql";
/// The bundled database's connection parameters (engine-specific keys).
const PARAMETERS: &str = "model-registry-db-parameters";
/// The server's arguments that choose and open the database.
const TYPE_ARG: &str = "--embedmd-database-type=";
const DSN_ARG: &str = "--embedmd-database-dsn=";
/// The annotation that lets the server reach the database around the mesh.
const EXCLUDE_PORTS: &str = "traffic.sidecar.istio.io/excludeOutboundPorts";

/// The volume claims of the bundled databases, any release's.
const VOLUMES: [&str; 3] = [
    "metadata-mysql",
    "metadata-postgres",
    "model-catalog-postgres",
];

/// Whether an object is part of the registry's bundled database (its
/// volume and generated password included).
pub fn bundled(o: &DynamicObject) -> bool {
    let name = o.metadata.name.as_deref().unwrap_or("");
    (name == BUNDLED && matches!(kind(o), "Deployment" | "Service"))
        || (name == SECRET && kind(o) == "Secret")
        || (kind(o) == "PersistentVolumeClaim" && name.starts_with("metadata-"))
}

/// Whether an object holds data or opens it: a bundled database's volume
/// or the generated password of one.
pub fn holds_data(o: &DynamicObject) -> bool {
    let name = o.metadata.name.as_deref().unwrap_or("");
    match kind(o) {
        "PersistentVolumeClaim" => VOLUMES.contains(&name),
        "Secret" => name == SECRET || name == CATALOG_SECRET,
        _ => false,
    }
}

/// The registry's password key in a bundle: which engine it runs.
pub fn engine_key(objects: &[DynamicObject]) -> &'static str {
    let postgres = objects.iter().any(|o| {
        kind(o) == "Secret"
            && o.metadata.name.as_deref() == Some(SECRET)
            && o.data["data"].get(POSTGRES_KEY).is_some()
    });
    if postgres { POSTGRES_KEY } else { MYSQL_KEY }
}

/// The passwords the bundled databases get, from what is kept.
#[derive(Default)]
pub struct Passwords {
    /// The registry Secret's current values (what an earlier pass wrote).
    pub kept: BTreeMap<String, String>,
    /// A new password, used for the registry's engine when none is kept.
    pub new_registry: String,
    /// The catalog's password (kept, or new on the first install).
    pub catalog: String,
}

/// Writes the registry's and the catalog's Secrets with the generated
/// passwords (the demo values the release ships are never written). The
/// other engine's password, when one is kept, stays: it opens the data on
/// the volume an upgrade released.
pub fn set_passwords(objects: &mut [DynamicObject], p: &Passwords) {
    let key = engine_key(objects);
    let registry = p
        .kept
        .get(key)
        .filter(|v| !v.is_empty())
        .unwrap_or(&p.new_registry)
        .clone();
    let release_data = |name: &str| {
        objects
            .iter()
            .find(|o| kind(o) == "Secret" && o.metadata.name.as_deref() == Some(name))
            .map(|o| secrets::decoded(&o.data["data"]))
            .unwrap_or_default()
    };
    let mut data = release_data(SECRET);
    data.insert(key.to_string(), registry);
    // The other engine's credentials, whole (its user too: a v0.3.7 MySQL
    // is opened as MYSQL_USER_NAME), where a volume an upgrade released
    // still holds its data. The render's own values win for keys both
    // engines' Secrets share.
    for (_, keys) in ENGINE_KEYS.iter().filter(|(k, _)| *k != key) {
        for other in keys.iter().copied() {
            if let Some(v) = p.kept.get(other).filter(|v| !v.is_empty()) {
                data.entry(other.to_string()).or_insert_with(|| v.clone());
            }
        }
    }
    let mut catalog = release_data(CATALOG_SECRET);
    catalog.insert(POSTGRES_KEY.to_string(), p.catalog.clone());
    for (name, data) in [(SECRET, data), (CATALOG_SECRET, catalog)] {
        database::write_secret(
            objects,
            name,
            data.iter().map(|(k, v)| (k.as_str(), v.as_str())),
        );
    }
    // The databases and their clients read the passwords at start only.
    for workload in [BUNDLED, SERVER] {
        transform::roll_on_change(objects, workload, &[("Secret", SECRET)]);
    }
    for workload in [CATALOG_DB, CATALOG_SERVER] {
        transform::roll_on_change(objects, workload, &[("Secret", CATALOG_SECRET)]);
    }
}

/// Whether an object is the bundled database's own or its parameters: what
/// an engine change swaps.
fn database_part(o: &DynamicObject) -> bool {
    bundled(o) || (kind(o) == "ConfigMap" && o.metadata.name.as_deref() == Some(PARAMETERS))
}

/// Whether a render runs the bundled MySQL.
pub fn runs_mysql(objects: &[DynamicObject]) -> bool {
    objects.iter().any(|o| {
        kind(o) == "PersistentVolumeClaim" && o.metadata.name.as_deref() == Some(MYSQL_VOLUME)
    })
}

/// Runs the registry on the bundled MySQL of `mysql_release` (the render's
/// objects of [`MYSQL_RELEASE`], before placement): its database Deployment,
/// Service, volume, parameters and Secret replace this release's, and the
/// server opens MySQL as that release's server did. Nothing changes where
/// the release bundles MySQL itself.
pub fn keep_mysql(
    objects: &mut Vec<DynamicObject>,
    mysql_release: &[DynamicObject],
) -> Result<(), String> {
    if runs_mysql(objects) {
        return Ok(());
    }
    let old_server = mysql_release
        .iter()
        .find(|o| kind(o) == "Deployment" && o.metadata.name.as_deref() == Some(SERVER))
        .ok_or_else(|| format!("{MYSQL_RELEASE} has no Deployment {SERVER}"))?;
    let old_args: Vec<String> = old_server
        .data
        .pointer("/spec/template/spec/containers/0/args")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|a| a.as_str().map(str::to_string))
        .collect();
    let dsn = old_args
        .iter()
        .find(|a| a.starts_with(DSN_ARG))
        .ok_or_else(|| format!("{MYSQL_RELEASE}'s {SERVER} has no {DSN_ARG}"))?
        .clone();
    let ports = old_server
        .data
        .pointer("/spec/template/metadata/annotations")
        .and_then(|a| a.get(EXCLUDE_PORTS))
        .cloned();
    transform::remove(objects, database_part);
    objects.extend(mysql_release.iter().filter(|o| database_part(o)).cloned());
    for d in objects
        .iter_mut()
        .filter(|o| kind(o) == "Deployment" && o.metadata.name.as_deref() == Some(SERVER))
    {
        if let Some(p) = &ports
            && let Some(m) = d
                .data
                .pointer_mut("/spec/template/metadata/annotations")
                .and_then(Value::as_object_mut)
        {
            m.insert(EXCLUDE_PORTS.into(), p.clone());
        }
        let Some(pod) = transform::pod_spec_mut(d) else {
            continue;
        };
        for c in pod["containers"].as_array_mut().into_iter().flatten() {
            let Some(args) = c.get_mut("args").and_then(Value::as_array_mut) else {
                continue;
            };
            if !args
                .iter()
                .any(|a| a.as_str().is_some_and(|a| a.starts_with(DSN_ARG)))
            {
                continue;
            }
            args.retain(|a| {
                a.as_str()
                    .is_none_or(|a| !a.starts_with(TYPE_ARG) && !a.starts_with(DSN_ARG))
            });
            args.push(json!(format!("{TYPE_ARG}mysql")));
            args.push(json!(dsn));
        }
    }
    Ok(())
}

/// Points the registry server at an external server: the bundled database
/// goes, and the server gets the engine and a connection string built from
/// the address, database name and the Secret's credentials.
pub fn use_external(objects: &mut Vec<DynamicObject>, db: &ExternalDatabase) {
    transform::remove(objects, bundled);
    let engine = match db.engine {
        DatabaseEngine::MySQL => "mysql",
        DatabaseEngine::PostgreSQL => "postgres",
    };
    let (host, port) = (
        db.host.as_str(),
        db.port.unwrap_or(database::default_port(db.engine)),
    );
    let name = db.database.as_deref().unwrap_or("metadb");
    // The credentials come in as variables the argument list refers to, so
    // they never appear in the Deployment.
    let dsn = match db.engine {
        DatabaseEngine::MySQL => {
            format!("$(DB_USER):$(DB_PASSWORD)@tcp({host}:{port})/{name}?charset=utf8mb4")
        }
        DatabaseEngine::PostgreSQL => {
            format!("postgresql://$(DB_USER):$(DB_PASSWORD)@{host}:{port}/{name}")
        }
    };
    for d in objects
        .iter_mut()
        .filter(|o| kind(o) == "Deployment" && o.metadata.name.as_deref() == Some(SERVER))
    {
        // The bundled database's port is no longer the one the sidecar skips.
        if let Some(m) = d
            .data
            .pointer_mut("/spec/template/metadata/annotations")
            .and_then(Value::as_object_mut)
        {
            m.insert(EXCLUDE_PORTS.into(), Value::String(port.to_string()));
        }
        let Some(pod) = transform::pod_spec_mut(d) else {
            continue;
        };
        for c in pod["containers"].as_array_mut().into_iter().flatten() {
            // The bundled database's Secret is gone; its variables with it.
            if let Some(from) = c.get_mut("envFrom").and_then(Value::as_array_mut) {
                from.retain(|f| {
                    f.pointer("/secretRef/name").and_then(Value::as_str) != Some(SECRET)
                });
            }
            let args: Vec<Value> = c["args"]
                .as_array()
                .cloned()
                .unwrap_or_default()
                .into_iter()
                .filter(|a| {
                    a.as_str()
                        .is_none_or(|a| !a.starts_with(TYPE_ARG) && !a.starts_with(DSN_ARG))
                })
                .chain([
                    json!(format!("{TYPE_ARG}{engine}")),
                    json!(format!("{DSN_ARG}{dsn}")),
                ])
                .collect();
            c["args"] = Value::Array(args);
        }
    }
    transform::set_env(
        objects,
        SERVER,
        &database::credentials_env(&db.credentials_secret),
    );
}
