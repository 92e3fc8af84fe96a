//! The planned rotation of upstream's demo credentials that an install an
//! older operator made still runs (an empty database root password,
//! `minio` / `minio123`). It is part of an upgrade: the new version's
//! render carries it, so it is in the upgrade plan and runs when the plan
//! is applied (approved under `upgradeStrategy: Manual`), never on its own.
//!
//! The order keeps every component able to open its data at every step:
//!
//! 1. the new values are generated and kept in a Secret of their own
//!    (`STAGING`), so a restarted operator carries on with the same ones;
//! 2. a Job tells the database: with the old root password it sets the new
//!    one (a Job that finds the new one already set succeeds at once, so a
//!    retry never locks anything out);
//! 3. once the Job is Complete, the bundle's Secrets get the new values and
//!    every workload that reads them restarts (their pod templates carry a
//!    digest of the Secrets); the object store's workload starts with the
//!    new keys and, at every start, forgets any key it was given before
//!    (`forget_old_store_keys`);
//! 4. the Job is then no longer rendered and goes; the staging Secret is
//!    marked as written, and goes at the next pass (until then it is kept
//!    even if Pipelines is removed: the database may take only its
//!    password).
//!
//! Once started, a rotation finishes whatever the version: the staging
//! Secret on the cluster is what says one is under way.

use std::collections::BTreeMap;

use kubeflow_operator::component::DereferenceError;
use kubeflow_operator::conditions::Reason;
use kubeflow_operator::k8s_openapi::api::batch::v1::Job;
use kubeflow_operator::kinds::kind;
use kubeflow_operator::kube::api::{Api, DynamicObject};
use kubeflow_operator::kube::{Client, ResourceExt};
use kubeflow_operator::refusal::Refusal;
use kubeflow_operator::secrets;
use kubeflow_operator::serde_json::{self, Value, json};

use crate::stores::{DB_SECRET, STORE_SECRET};

/// The staging Secret's and the Job's name.
pub const STAGING: &str = "ml-pipeline-credentials-rotation";
/// The staging Secret's annotation saying whether the bundle's Secrets
/// hold its values yet: until they do, the database may take only the
/// staged password, so the Secret is kept if Pipelines is removed.
const STATE: &str = "pipelines.kubeflow.org/rotation";
/// `STATE` once the bundle's Secrets hold the values: the next pass prunes
/// the staging Secret.
const DONE: &str = "written";
/// The bundled database's workload and Service.
const DATABASE: &str = "mysql";
/// The database's port (the bundle's Service).
const DATABASE_PORT: &str = "3306";
/// The bundled object store's workload (SeaweedFS, from Pipelines 2.15.0).
const STORE: &str = "seaweedfs";
/// Where SeaweedFS's start hook gives the admin identity the Secret's keys
/// (inside an `if` at 2.16, the hook's last line at 2.15).
const STORE_CONFIGURE: &str = "echo \"s3.configure -user kubeflow-admin -access_key";
/// Removes the admin identity (every key it holds) just before that, in
/// the same list, so that it is configured only if the removal worked and
/// the hook fails (and is retried) if not: the Secret's keys are then the
/// only ones it takes, and an old key stops working at the first start
/// after a rotation.
const STORE_FORGET: &str = "echo \"s3.configure -user kubeflow-admin -delete -apply\" | /usr/bin/weed shell 2>&1 && echo \"s3.configure -user kubeflow-admin -access_key";

/// The new values' keys in the staging Secret, each with the bundle
/// Secret and key it ends up in and its length in hex digits.
const STAGED: [(&str, &str, &str, usize); 3] = [
    ("password", DB_SECRET, "password", 48),
    ("accesskey", STORE_SECRET, "accesskey", 20),
    ("secretkey", STORE_SECRET, "secretkey", 40),
];

/// The Job's script: succeeds when the database already takes the new
/// password (a retry after it was set), else sets it with the old one. The
/// values are hex (checked before they are staged), so quoting them in SQL
/// is safe.
const SCRIPT: &str = r#"set -u
q() { mysql --protocol=TCP -h "$DB_HOST" -P "$DB_PORT" -u root "--password=$1" -e "$2"; }
if q "$NEW_PASSWORD" "SELECT 1" >/dev/null 2>&1; then
  echo "the database already takes the new root password"
  exit 0
fi
q "$OLD_PASSWORD" "ALTER USER IF EXISTS 'root'@'%' IDENTIFIED BY '$NEW_PASSWORD'; ALTER USER IF EXISTS 'root'@'localhost' IDENTIFIED BY '$NEW_PASSWORD'"
echo "the database's root password is rotated"
"#;

/// Where a rotation stands, as read from the cluster.
#[derive(Default, Clone, Debug)]
pub struct Rotation {
    /// The staging Secret's values when it exists: a rotation under way.
    pub staged: Option<BTreeMap<String, String>>,
    /// Values generated for a rotation that has not started (used only if
    /// this pass starts it).
    pub fresh: BTreeMap<String, String>,
    /// Whether the Job has told the database (it is Complete).
    pub database_told: bool,
}

/// What the render does about the demo credentials.
#[derive(Debug, PartialEq)]
pub enum Step<'a> {
    /// Nothing: no demo value, or no upgrade to carry a rotation.
    None,
    /// The staging Secret, and the Job while the database holds a demo
    /// password, are rendered; the bundle's Secrets stay as they are.
    Stage(&'a BTreeMap<String, String>),
    /// The bundle's Secrets get the staged values.
    Apply(&'a BTreeMap<String, String>),
}

/// Reads where a rotation stands. `demo_database`: the database Secret
/// holds a demo or empty password, so the database must be told.
pub async fn read(
    client: &Client,
    ns: &str,
    demo_database: bool,
) -> Result<Rotation, DereferenceError> {
    let staged = secrets::read(client, ns, STAGING)
        .await
        .map_err(|e| DereferenceError::Api("read the credentials rotation's Secret", e))?;
    if let Some(s) = &staged {
        check_staged(ns, s)?;
    }
    let jobs: Api<Job> = Api::namespaced(client.clone(), ns);
    let job = jobs
        .get_opt(STAGING)
        .await
        .map_err(|e| DereferenceError::Api("read the credentials rotation's Job", e))?;
    let complete = job
        .and_then(|j| j.status)
        .and_then(|s| s.conditions)
        .unwrap_or_default()
        .iter()
        .any(|c| c.type_ == "Complete" && c.status == "True");
    let mut fresh = BTreeMap::new();
    for (key, _, _, digits) in STAGED {
        fresh.insert(key.to_string(), secrets::random_hex(digits / 2)?);
    }
    Ok(Rotation {
        staged,
        fresh,
        database_told: complete || !demo_database,
    })
}

/// A staging Secret whose values are not what the operator generates
/// (someone edited it) is refused: they would be written into SQL.
pub(crate) fn check_staged(ns: &str, staged: &BTreeMap<String, String>) -> Result<(), Refusal> {
    for (key, _, _, digits) in STAGED {
        let ok = staged
            .get(key)
            .is_some_and(|v| v.len() == digits && v.bytes().all(|b| b.is_ascii_hexdigit()));
        if !ok {
            return Err(Refusal::new(
                Reason::InvalidSpec,
                format!(
                    "Secret {ns}/{STAGING} key {key} is not {digits} hex digits: the rotation of the demo credentials cannot go on; delete that Secret and the Job {STAGING} if the database was not told yet (the Job's log says), or put back the value the Job set"
                ),
            ));
        }
    }
    Ok(())
}

/// What this render does. `demo`: a bundle Secret still holds a demo or
/// empty value. `upgrading`: the render is of a version other than the
/// installed one (so it is applied only as the upgrade's plan says).
pub fn step(rotation: &Rotation, demo: bool, upgrading: bool) -> Step<'_> {
    match (&rotation.staged, demo) {
        (_, false) => Step::None,
        (Some(staged), true) if rotation.database_told => Step::Apply(staged),
        (Some(staged), true) => Step::Stage(staged),
        (None, true) if upgrading => Step::Stage(&rotation.fresh),
        (None, true) => Step::None,
    }
}

/// The bundle Secrets' data once the staged values replace the demo ones
/// (`current`: the Secret's data as it is).
pub fn rotated(
    secret: &str,
    current: &BTreeMap<String, String>,
    staged: &BTreeMap<String, String>,
) -> BTreeMap<String, String> {
    let mut out = current.clone();
    for (from, to_secret, to_key, _) in STAGED {
        if to_secret == secret
            && let Some(v) = staged.get(from)
        {
            out.insert(to_key.to_string(), v.clone());
        }
    }
    out
}

/// The staging Secret marked as written (the bundle's Secrets hold its
/// values in the same pass): it goes at the next one.
pub fn written(
    objects: &mut Vec<DynamicObject>,
    ns: &str,
    staged: &BTreeMap<String, String>,
) -> Result<(), Refusal> {
    objects.push(object(staging_secret(ns, staged, DONE))?);
    Ok(())
}

/// Whether an object is the staging Secret while the database may take
/// only its password (not yet written into the bundle's Secrets).
pub fn holds_only_copy(o: &DynamicObject) -> bool {
    kind(o) == "Secret"
        && o.metadata.name.as_deref() == Some(STAGING)
        && o.metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(STATE))
            .is_none_or(|s| s != DONE)
}

/// The staging Secret, and the Job when the database must be told.
pub fn stage(
    objects: &mut Vec<DynamicObject>,
    ns: &str,
    staged: &BTreeMap<String, String>,
    tell_database: bool,
) -> Result<(), Refusal> {
    objects.push(object(staging_secret(ns, staged, "staged"))?);
    if tell_database {
        let image = database_image(objects).ok_or_else(|| {
            Refusal::new(
                Reason::InvalidSpec,
                "the demo credentials' rotation needs the bundled database's image, and the rendered objects hold no mysql Deployment",
            )
        })?;
        objects.push(object(job(ns, &image))?);
    }
    Ok(())
}

/// The staging Secret: the new values, kept until the bundle's Secrets
/// hold them.
fn staging_secret(ns: &str, staged: &BTreeMap<String, String>, state: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": STAGING, "namespace": ns, "labels": labels(),
            "annotations": {STATE: state}},
        "type": "Opaque",
        "data": secrets::data(staged.iter().map(|(k, v)| (k.as_str(), v.as_str()))),
    })
}

fn labels() -> Value {
    json!({"app": STAGING, "application-crd-id": "kubeflow-pipelines"})
}

fn object(v: Value) -> Result<DynamicObject, Refusal> {
    serde_json::from_value(v).map_err(|e| {
        Refusal::new(
            Reason::InvalidSpec,
            format!("the credentials rotation's object: {e}"),
        )
    })
}

/// The database workload's image, as the render left it (mirror and digest
/// settings applied): the Job runs its client.
fn database_image(objects: &[DynamicObject]) -> Option<String> {
    objects
        .iter()
        .find(|o| kind(o) == "Deployment" && o.name_any() == DATABASE)
        .and_then(|o| {
            o.data
                .pointer("/spec/template/spec/containers/0/image")
                .and_then(Value::as_str)
                .map(str::to_string)
        })
}

/// The Job that tells the database its new root password. It runs as the
/// database's own ServiceAccount with no token, as the image's `mysql`
/// user, and holds no value itself (both passwords come from Secrets).
fn job(ns: &str, image: &str) -> Value {
    let secret_env = |name: &str, secret: &str, key: &str| json!({"name": name, "valueFrom": {"secretKeyRef": {"name": secret, "key": key}}});
    json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": STAGING, "namespace": ns, "labels": labels()},
        "spec": {
            "backoffLimit": 6,
            "template": {
                "metadata": {"labels": labels()},
                "spec": {
                    "restartPolicy": "Never",
                    "serviceAccountName": DATABASE,
                    "automountServiceAccountToken": false,
                    "securityContext": {"runAsNonRoot": true, "runAsUser": 999, "runAsGroup": 999,
                        "seccompProfile": {"type": "RuntimeDefault"}},
                    "containers": [{
                        "name": "rotate",
                        "image": image,
                        "command": ["sh", "-c", SCRIPT],
                        "env": [
                            {"name": "DB_HOST", "value": format!("{DATABASE}.{ns}.svc")},
                            {"name": "DB_PORT", "value": DATABASE_PORT},
                            secret_env("OLD_PASSWORD", DB_SECRET, "password"),
                            secret_env("NEW_PASSWORD", STAGING, "password"),
                        ],
                        "resources": {"requests": {"cpu": "10m", "memory": "32Mi"},
                            "limits": {"memory": "128Mi"}},
                        "securityContext": {"allowPrivilegeEscalation": false,
                            "readOnlyRootFilesystem": true,
                            "capabilities": {"drop": ["ALL"]}},
                    }],
                },
            },
        },
    })
}

/// Has the object store forget, at every start, any key it was given
/// before: upstream's start hook adds the Secret's keys to its admin
/// identity, which keeps every earlier key (so `minio` / `minio123` would
/// still open the store after a rotation). Returns whether the hook was
/// found (every bundle with SeaweedFS has it: a test checks).
pub fn forget_old_store_keys(objects: &mut [DynamicObject]) -> bool {
    let mut found = false;
    for o in objects
        .iter_mut()
        .filter(|o| kind(o) == "Deployment" && o.name_any() == STORE)
    {
        let Some(containers) = o
            .data
            .pointer_mut("/spec/template/spec/containers")
            .and_then(Value::as_array_mut)
        else {
            continue;
        };
        for c in containers {
            let Some(Value::Array(command)) = c.pointer_mut("/lifecycle/postStart/exec/command")
            else {
                continue;
            };
            for part in command.iter_mut() {
                if let Some(text) = part.as_str().filter(|t| t.contains(STORE_CONFIGURE)) {
                    *part = Value::String(text.replacen(STORE_CONFIGURE, STORE_FORGET, 1));
                    found = true;
                }
            }
        }
    }
    found
}

/// The workloads that read the bundle's credentials Secrets (a variable
/// from a key, a whole Secret as variables, or a Secret volume): they
/// restart when the Secrets' content changes (after a rotation, by the
/// operator or a person).
pub fn readers(objects: &[DynamicObject]) -> Vec<String> {
    let named = |v: Option<&Value>| {
        v.and_then(Value::as_str)
            .is_some_and(|n| n == DB_SECRET || n == STORE_SECRET)
    };
    objects
        .iter()
        .filter(|o| matches!(kind(o), "Deployment" | "StatefulSet"))
        .filter(|o| {
            let pod = &o.data["spec"]["template"]["spec"];
            let containers = ["initContainers", "containers"]
                .iter()
                .flat_map(|k| pod[*k].as_array().into_iter().flatten());
            let mut by_env = false;
            for c in containers {
                by_env |= c["env"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .any(|e| named(e.pointer("/valueFrom/secretKeyRef/name")))
                    || c["envFrom"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .any(|e| named(e.pointer("/secretRef/name")));
            }
            by_env
                || pod["volumes"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .any(|v| named(v.pointer("/secret/secretName")))
        })
        .map(|o| o.name_any())
        .collect()
}

/// Adds to a version's bundle objects the rotation's Job and Secret as
/// that version would render them (the Job with the version's database
/// image): the operator's RBAC and admission pins are derived from what it
/// may apply, so the Job may run only that image, as that ServiceAccount.
pub fn add_for_permissions(objects: &mut Vec<DynamicObject>) {
    let staged: BTreeMap<String, String> = STAGED
        .iter()
        .map(|(k, _, _, digits)| (k.to_string(), "0".repeat(*digits)))
        .collect();
    let ns = objects
        .iter()
        .find_map(|o| o.metadata.namespace.clone())
        .unwrap_or_default();
    // Without the bundled database (none of the bundles) there is no Job.
    let _ = stage(objects, &ns, &staged, true);
}

/// The rotation's Job as an object the operator adds (so Jobs are watched:
/// its completion brings the next step at once). The image is the one the
/// newest bundles' database runs; `add_for_permissions` gives each
/// version's own.
pub fn watched() -> Vec<DynamicObject> {
    serde_json::from_value(job("kubeflow", "mysql"))
        .into_iter()
        .collect()
}
