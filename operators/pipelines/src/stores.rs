//! The database and object store: bundled, or external with credentials from
//! Secrets the user names.

use kubeflow_operator::api::components::pipelines::{ExternalDatabase, ExternalObjectStore};
use kubeflow_operator::component::DereferenceError;
use kubeflow_operator::kinds::kind;
use kubeflow_operator::kube::Client;
use kubeflow_operator::kube::api::DynamicObject;
use kubeflow_operator::{secrets, transform};

/// The bundle's database credentials Secret, which pods reference.
pub const DB_SECRET: &str = "mysql-secret";
/// The bundle's object store credentials Secret.
pub const STORE_SECRET: &str = "mlpipeline-minio-artifact";
/// The ConfigMap holding database and bucket settings.
const INSTALL_CONFIG: &str = "pipeline-install-config";

/// Whether an object is part of the bundled database.
pub fn bundled_database(o: &DynamicObject) -> bool {
    let name = o.metadata.name.as_deref().unwrap_or("");
    (name == "mysql" || name == "mysql-pv-claim" || name == DB_SECRET) && kind(o) != "ConfigMap"
}

/// Whether an object is part of the bundled object store (MinIO up to 2.5, SeaweedFS since).
pub fn bundled_object_store(o: &DynamicObject) -> bool {
    let name = o.metadata.name.as_deref().unwrap_or("");
    (name.starts_with("minio") || name.starts_with("seaweedfs") || name == STORE_SECRET)
        && kind(o) != "ConfigMap"
}

/// Checks a Secret and keys exist; a missing one is named in the refusal.
pub async fn require_secret(
    client: &Client,
    ns: &str,
    name: &str,
    keys: &[&str],
) -> Result<(), DereferenceError> {
    secrets::require(client, ns, name, keys).await?;
    Ok(())
}

/// Points Pipelines at an external database.
pub fn use_external_database(objects: &mut Vec<DynamicObject>, db: &ExternalDatabase) {
    transform::remove(objects, bundled_database);
    let mut entries = vec![
        ("dbHost", db.host.clone()),
        ("dbPort", db.port.to_string()),
        ("mysqlHost", db.host.clone()),
        ("mysqlPort", db.port.to_string()),
    ];
    if let Some(name) = &db.database {
        entries.push(("pipelineDb", name.clone()));
    }
    transform::set_config(objects, INSTALL_CONFIG, &entries);
    for key in ["username", "password"] {
        transform::redirect_secret_key(objects, DB_SECRET, key, &db.credentials_secret, key);
    }
}

/// Points Pipelines at an external S3-compatible object store.
pub fn use_external_object_store(objects: &mut Vec<DynamicObject>, store: &ExternalObjectStore) {
    transform::remove(objects, bundled_object_store);
    let (host, port) = match store.endpoint.rsplit_once(':') {
        Some((h, p)) if p.chars().all(|c| c.is_ascii_digit()) => (h.to_string(), p.to_string()),
        _ => (
            store.endpoint.clone(),
            if store.secure { "443" } else { "80" }.to_string(),
        ),
    };
    transform::set_env_where_present(objects, "OBJECTSTORECONFIG_HOST", &host);
    transform::set_env_where_present(objects, "OBJECTSTORECONFIG_PORT", &port);
    transform::set_env_where_present(
        objects,
        "OBJECTSTORECONFIG_SECURE",
        if store.secure { "true" } else { "false" },
    );
    if let Some(region) = &store.region {
        transform::set_env_where_present(objects, "OBJECTSTORECONFIG_REGION", region);
    }
    transform::set_config(
        objects,
        INSTALL_CONFIG,
        &[("bucketName", store.bucket.clone())],
    );
    transform::redirect_secret_key(
        objects,
        STORE_SECRET,
        "accesskey",
        &store.access_key.name,
        &store.access_key.key,
    );
    transform::redirect_secret_key(
        objects,
        STORE_SECRET,
        "secretkey",
        &store.secret_key.name,
        &store.secret_key.key,
    );
}
