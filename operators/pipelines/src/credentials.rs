//! The bundled database's root password and the bundled object store's
//! keys: generated on the first install and kept in the bundle's own
//! Secrets (`mysql-secret`, `mlpipeline-minio-artifact`), which every
//! consumer already reads, never upstream's demo values (an empty root
//! password, `minio` / `minio123`).
//!
//! An install an older operator made holds the demo values, and MySQL's
//! and the object store's data were initialised with them: writing new
//! ones would lock every component out of its data. Such a Secret is kept
//! as it is and no longer written (a prune releases it, with a Warning
//! Event and an entry in `status.released` saying how to rotate); the next
//! upgrade rotates them (`rotation`), or a person does, and the Secret is
//! managed again.

use std::collections::BTreeMap;

use kubeflow_operator::component::DereferenceError;
use kubeflow_operator::kinds::kind;
use kubeflow_operator::kube::Client;
use kubeflow_operator::kube::api::DynamicObject;
use kubeflow_operator::serde_json::json;
use kubeflow_operator::{database, known_secrets, secrets, transform};

use crate::stores::{DB_SECRET, STORE_SECRET};

/// The database Secret's keys.
const DB_USER: &str = "username";
const DB_PASSWORD: &str = "password";
/// The object store Secret's keys.
const ACCESS_KEY: &str = "accesskey";
const SECRET_KEY: &str = "secretkey";
/// Random bytes of the root password (hex: 48 characters).
const PASSWORD_BYTES: usize = 24;
/// Random bytes of the access key: 20 hex characters, the most MinIO (the
/// store up to 2.5) takes for an access key.
const ACCESS_KEY_BYTES: usize = 10;
/// Random bytes of the secret key: 40 hex characters (160 bits), the most
/// MinIO takes for a secret key.
const SECRET_KEY_BYTES: usize = 20;
/// The bundled database's workload, which reads its root password from the
/// Secret when it initialises an empty volume.
const DATABASE: &str = "mysql";

/// What the two Secrets hold: kept from an earlier pass, or new.
#[derive(Default, Clone)]
pub struct Credentials {
    /// `mysql-secret`'s data; None with an external database.
    pub database: Option<BTreeMap<String, String>>,
    /// `mlpipeline-minio-artifact`'s data; None with an external store.
    pub store: Option<BTreeMap<String, String>>,
    /// Where a rotation of demo values stands.
    pub rotation: crate::rotation::Rotation,
}

impl Credentials {
    /// Whether the database Secret holds a demo or empty password.
    pub fn demo_database(&self) -> bool {
        self.database
            .as_ref()
            .is_some_and(|d| holds_known_data(DB_SECRET, d))
    }

    /// Whether the object store Secret holds demo keys.
    pub fn demo_store(&self) -> bool {
        self.store
            .as_ref()
            .is_some_and(|d| holds_known_data(STORE_SECRET, d))
    }
}

/// Whether a Secret's data holds a value upstream publishes or an empty
/// password.
fn holds_known_data(name: &str, data: &BTreeMap<String, String>) -> bool {
    let secret = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name},
        "data": secrets::data(data.iter().map(|(k, v)| (k.as_str(), v.as_str())))});
    kubeflow_operator::serde_json::from_value::<DynamicObject>(secret)
        .is_ok_and(|o| holds_known(&o))
}

/// The Secret's values as they are when it exists (an empty or demo value
/// included: the data was initialised with it), the keys it lacks
/// generated; all of them new when it does not (the first install).
async fn kept_or_new(
    client: &Client,
    ns: &str,
    name: &str,
    keys: &[(&str, Option<&str>, usize)],
) -> Result<BTreeMap<String, String>, DereferenceError> {
    let mut data = secrets::read(client, ns, name)
        .await
        .map_err(|e| DereferenceError::Api("read a Pipelines credentials Secret", e))?
        .unwrap_or_default();
    for (key, fixed, bytes) in keys {
        if !data.contains_key(*key) {
            let value = match fixed {
                Some(v) => (*v).to_string(),
                None => secrets::random_hex(*bytes)?,
            };
            data.insert((*key).to_string(), value);
        }
    }
    Ok(data)
}

/// The database's credentials (the user stays upstream's `root`).
pub async fn database(
    client: &Client,
    ns: &str,
) -> Result<BTreeMap<String, String>, DereferenceError> {
    kept_or_new(
        client,
        ns,
        DB_SECRET,
        &[
            (DB_USER, Some("root"), 0),
            (DB_PASSWORD, None, PASSWORD_BYTES),
        ],
    )
    .await
}

/// The object store's keys.
pub async fn store(
    client: &Client,
    ns: &str,
) -> Result<BTreeMap<String, String>, DereferenceError> {
    kept_or_new(
        client,
        ns,
        STORE_SECRET,
        &[
            (ACCESS_KEY, None, ACCESS_KEY_BYTES),
            (SECRET_KEY, None, SECRET_KEY_BYTES),
        ],
    )
    .await
}

/// Writes the credentials into the bundle's Secrets, and has MySQL take its
/// root password from its Secret (upstream's starts it with none). A Secret
/// whose values are upstream's (kept from an install an older operator
/// made) is left out: it stays as it is on the cluster, released. Without
/// credentials (a render without the cluster) both Secrets are left out.
pub fn set(objects: &mut Vec<DynamicObject>, c: &Credentials) {
    for (name, data) in [(DB_SECRET, &c.database), (STORE_SECRET, &c.store)] {
        if let Some(d) = data {
            database::write_secret(
                objects,
                name,
                d.iter().map(|(k, v)| (k.as_str(), v.as_str())),
            );
        }
        transform::remove(objects, |o| {
            kind(o) == "Secret"
                && o.metadata.name.as_deref() == Some(name)
                && (data.is_none() || holds_known(o))
        });
    }
    transform::set_env(
        objects,
        DATABASE,
        &[
            json!({"name": "MYSQL_ROOT_PASSWORD", "valueFrom": {"secretKeyRef":
            {"name": DB_SECRET, "key": DB_PASSWORD}}}),
        ],
    );
}

/// Whether a Secret holds a value upstream publishes or an empty password.
pub fn holds_known(o: &DynamicObject) -> bool {
    let one = std::slice::from_ref(o);
    !known_secrets::find(one).is_empty() || !known_secrets::find_empty_passwords(one).is_empty()
}

/// Whether an object is one of the two credentials Secrets.
pub fn is_credentials_secret(o: &DynamicObject) -> bool {
    kind(o) == "Secret" && matches!(o.metadata.name.as_deref(), Some(DB_SECRET | STORE_SECRET))
}

/// Whether an object is a Secret that may hold what opens the data: the
/// two credentials Secrets, or a rotation's new values not yet written
/// into them (the database may already take them).
pub fn opens_data(o: &DynamicObject) -> bool {
    is_credentials_secret(o) || crate::rotation::holds_only_copy(o)
}

/// What a release of a credentials Secret says: why it is kept, and how
/// to rotate. `external`: the spec moved to an external database or store.
pub fn release_message(name: &str, external: bool) -> String {
    let (what, volume) = if name == DB_SECRET {
        ("database's root password", "mysql-pv-claim")
    } else {
        ("object store's keys", "the object store's volume")
    };
    if external {
        let store = if name == DB_SECRET {
            "database"
        } else {
            "object store"
        };
        database::released_credentials("Pipelines", store, volume)
    } else {
        format!(
            "holds upstream's demo {what} (a value anyone can look up), kept from an install an older operator made because the data was initialised with it; the operator no longer writes it: rotate it as docs/security.md (Pipelines' credentials) says, and it is managed again"
        )
    }
}
