//! Katib's records database: the bundled MySQL, whose root password is
//! generated once and kept (never the release's demo value), or an external
//! MySQL or PostgreSQL server with credentials from a Secret the user names.

use kubeflow_operator::api::{DatabaseEngine, ExternalDatabase};
use kubeflow_operator::component::DereferenceError;
use kubeflow_operator::kinds::kind;
use kubeflow_operator::kube::Client;
use kubeflow_operator::kube::api::DynamicObject;
use kubeflow_operator::serde_json::json;
use kubeflow_operator::{database, secrets, transform};

/// The bundle's root password Secret, which the database and its manager read.
pub const SECRET: &str = "katib-mysql-secrets";
/// Its key.
pub const PASSWORD_KEY: &str = "MYSQL_ROOT_PASSWORD";
/// The bundled database's Deployment, Service and volume claim.
const BUNDLED: &str = "katib-mysql";
/// Its volume claim, named for what a release of its password says.
pub const VOLUME: &str = BUNDLED;
/// The database manager, the one workload that connects to the database.
pub const MANAGER: &str = "katib-db-manager";
/// The database name when the spec gives none (the bundled one's).
const DEFAULT_DATABASE: &str = "katib";

/// Whether an object is part of the bundled database (its generated
/// password included).
pub fn bundled(o: &DynamicObject) -> bool {
    let name = o.metadata.name.as_deref().unwrap_or("");
    (name == BUNDLED && matches!(kind(o), "Deployment" | "Service" | "PersistentVolumeClaim"))
        || (name == SECRET && kind(o) == "Secret")
}

/// The root password kept in the bundled database's Secret, or a new one
/// when there is none yet (the first install). 24 random bytes, as hex.
pub async fn kept_or_new_password(client: &Client, ns: &str) -> Result<String, DereferenceError> {
    Ok(secrets::kept_or_generated(client, ns, SECRET, PASSWORD_KEY, 24).await?)
}

/// The bundled database with `password` as its root password: the demo
/// value the release ships is never written.
pub fn set_password(objects: &mut [DynamicObject], password: &str) {
    database::write_secret(objects, SECRET, [(PASSWORD_KEY, password)]);
    // The database and its manager read the password at start only.
    for workload in [BUNDLED, MANAGER] {
        transform::roll_on_change(objects, workload, &[("Secret", SECRET)]);
    }
}

/// Points the database manager at an external server: the bundled database
/// goes, and the manager gets the engine, address, database name and the
/// Secret's credentials.
pub fn use_external(objects: &mut Vec<DynamicObject>, db: &ExternalDatabase) {
    transform::remove(objects, bundled);
    let (engine, prefix) = match db.engine {
        DatabaseEngine::MySQL => ("mysql", "KATIB_MYSQL_DB"),
        DatabaseEngine::PostgreSQL => ("postgres", "KATIB_POSTGRESQL_DB"),
    };
    let port = db.port.unwrap_or(database::default_port(db.engine));
    let mut env = vec![
        json!({"name": "DB_NAME", "value": engine}),
        json!({"name": format!("{prefix}_HOST"), "value": db.host}),
        json!({"name": format!("{prefix}_PORT"), "value": port.to_string()}),
        json!({"name": format!("{prefix}_DATABASE"),
               "value": db.database.as_deref().unwrap_or(DEFAULT_DATABASE)}),
    ];
    env.extend(database::credentials_env(&db.credentials_secret));
    transform::set_env(objects, MANAGER, &env);
}
