//! A component's records database, bundled or external, as Katib, the Model
//! Registry and Pipelines each carry one: the bundled one's password is
//! generated once and kept in its Secret (never the release's demo value),
//! an external one's user and password come from a Secret the user names,
//! and the bundled one's volume, with the password that opens it, is kept
//! or released as the spec's `volumePolicy` says.

use kube::api::DynamicObject;
use kubeflow_api::{DatabaseEngine, VolumePolicy};
use serde_json::{Value, json};

use crate::base::kinds::kind;
use crate::render::{secrets, transform};

/// The keys of the Secret an external database's credentials are in.
pub const CREDENTIAL_KEYS: [&str; 2] = ["username", "password"];

/// The port an engine listens on when the spec names none.
pub fn default_port(engine: DatabaseEngine) -> i32 {
    match engine {
        DatabaseEngine::MySQL => 3306,
        DatabaseEngine::PostgreSQL => 5432,
    }
}

/// `DB_USER` and `DB_PASSWORD` from the user's credentials Secret `secret`:
/// a program gets them as variables, so they never appear in its
/// Deployment.
pub fn credentials_env(secret: &str) -> [Value; 2] {
    let [user, password] = CREDENTIAL_KEYS;
    [
        json!({"name": "DB_USER", "valueFrom": {"secretKeyRef": {"name": secret, "key": user}}}),
        json!({"name": "DB_PASSWORD", "valueFrom": {"secretKeyRef": {"name": secret, "key": password}}}),
    ]
}

/// Makes `data` the whole content of the bundle's Secret `name`: the
/// release's values, and any `stringData`, are gone.
pub fn write_secret<'a>(
    objects: &mut [DynamicObject],
    name: &str,
    data: impl IntoIterator<Item = (&'a str, &'a str)>,
) {
    let data = secrets::data(data);
    for o in objects
        .iter_mut()
        .filter(|o| kind(o) == "Secret" && o.metadata.name.as_deref() == Some(name))
    {
        if let Some(m) = o.data.as_object_mut() {
            m.remove("stringData");
        }
        o.data["data"] = data.clone();
    }
}

/// Leaves the bundle's Secrets `names` out: a render without the cluster
/// (the image list, RBAC, offline plans) has no kept password to write, and
/// the release's demo one is dropped rather than written.
pub fn drop_secrets(objects: &mut Vec<DynamicObject>, names: &[&str]) {
    transform::remove(objects, |o| {
        kind(o) == "Secret"
            && o.metadata
                .name
                .as_deref()
                .is_some_and(|n| names.contains(&n))
    });
}

/// Whether an object outlives the component: it holds a bundled
/// database's data or opens it (`holds_data`: its volume, its password
/// Secret), and the spec's volume policy keeps those (the default).
pub fn kept(policy: Option<VolumePolicy>, holds_data: bool) -> bool {
    holds_data && policy.unwrap_or_default() == VolumePolicy::Retain
}

/// What a prune says of a bundled store's credentials Secret (`store`:
/// "database", "object store") when the component moved to an external
/// one: the data on the released `volume` still needs it.
pub fn released_credentials(component: &str, store: &str, volume: &str) -> String {
    format!(
        "{component} no longer uses its bundled {store}; this Secret opens the data kept on {volume}: delete it with that volume"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secret(name: &str, body: Value) -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": name},
        }))
        .map(|mut o: DynamicObject| {
            o.data = body;
            o
        })
        .expect("secret")
    }

    #[test]
    fn a_written_secret_holds_only_the_given_values() {
        let mut objects = vec![
            secret(
                "db",
                json!({"stringData": {"password": "demo"}, "data": {"user": "cm9vdA=="}}),
            ),
            secret("other", json!({"data": {"k": "dg=="}})),
        ];
        write_secret(&mut objects, "db", [("password", "generated")]);
        assert!(objects[0].data.get("stringData").is_none());
        assert_eq!(
            secrets::decoded(&objects[0].data["data"]),
            [("password".to_string(), "generated".to_string())].into()
        );
        assert_eq!(objects[1].data["data"]["k"], "dg==");
    }

    #[test]
    fn dropped_secrets_are_only_those_named() {
        let mut objects = vec![secret("a", json!({})), secret("b", json!({}))];
        drop_secrets(&mut objects, &["a"]);
        assert_eq!(objects.len(), 1);
        assert_eq!(objects[0].metadata.name.as_deref(), Some("b"));
    }

    #[test]
    fn data_is_kept_unless_the_policy_deletes_it() {
        assert!(kept(None, true));
        assert!(kept(Some(VolumePolicy::Retain), true));
        assert!(!kept(Some(VolumePolicy::Delete), true));
        assert!(!kept(None, false));
    }

    #[test]
    fn credentials_come_from_the_named_secret() {
        let [user, password] = credentials_env("mine");
        assert_eq!(user["valueFrom"]["secretKeyRef"]["name"], "mine");
        assert_eq!(user["valueFrom"]["secretKeyRef"]["key"], "username");
        assert_eq!(password["name"], "DB_PASSWORD");
        assert_eq!(password["valueFrom"]["secretKeyRef"]["key"], "password");
    }
}
