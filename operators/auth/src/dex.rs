//! What the operator knows of dex: the Secrets a person names (users as
//! bcrypt hashes, connectors), how they become dex's configuration, and why
//! that configuration is a Secret.
//!
//! Upstream's bundle keeps dex's configuration in a ConfigMap and one static
//! user with a well-known password in the Secret `dex-passwords`. Here the
//! configuration holds the users' hashes and the connectors' client secrets,
//! so it is the Secret `dex` (mounted where the ConfigMap was), and
//! `dex-passwords` is not installed at all: no password anyone knows in
//! advance is ever installed, and a user whose hash is that well-known one
//! is refused.

use std::collections::BTreeSet;

use kubeflow_operator::component::Refusal;
use kubeflow_operator::conditions::Reason;
use kubeflow_operator::kinds::kind;
use kubeflow_operator::known_secrets;
use kubeflow_operator::kube::api::DynamicObject;
use kubeflow_operator::{secrets, serde_saphyr};
use serde::Deserialize;
use serde_json::{Value, json};

/// Where dex runs: upstream's namespace, which the issuer below names.
pub const NAMESPACE: &str = "auth";
/// dex's issuer inside the cluster, which oauth2-proxy's configuration and
/// Istio's RequestAuthentication name.
pub const ISSUER: &str = "http://dex.auth.svc.cluster.local:5556/dex";
/// The key of the users Secret.
pub const USERS_KEY: &str = "users.yaml";
/// The key of the connectors Secret.
pub const CONNECTORS_KEY: &str = "connectors.yaml";
/// dex's configuration object: a ConfigMap in the bundle, a Secret here.
const CONFIG: &str = "dex";
/// The bundle's Secret with the well-known user's hash: never installed.
const BUNDLE_PASSWORDS: &str = "dex-passwords";
/// The OIDC client Secret both dex and oauth2-proxy read.
pub const CLIENT_SECRET: &str = "dex-oidc-client";
/// Upstream's name for the Kubeflow client (kept: dex's and oauth2-proxy's
/// configurations agree on it).
pub const CLIENT_ID: &str = "kubeflow-oidc-authservice";

/// One person who logs in with a password.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct User {
    /// The login and the `kubeflow-userid` the web apps see.
    pub email: String,
    /// bcrypt hash of the password.
    pub hash: String,
    /// Shown by dex; default: the email's local part.
    #[serde(default)]
    pub username: Option<String>,
}

/// The users a Secret lists, checked: refused naming the Secret and the
/// entry, never quoting a hash.
pub fn parse_users(secret: &str, text: &str) -> Result<Vec<User>, Refusal> {
    let at = format!("Secret {secret}, key {USERS_KEY}");
    let users: Vec<User> = serde_saphyr::from_str(text).map_err(|e| {
        invalid(format!(
            "{at} is not a YAML list of {{email, hash, username}}: {}",
            first_line(&e.to_string())
        ))
    })?;
    let mut seen = BTreeSet::new();
    for (i, u) in users.iter().enumerate() {
        if !kubeflow_operator::validate::is_email(&u.email) {
            return Err(invalid(format!(
                "{at}: entry {i} has email {:?}, which is not an email address",
                u.email
            )));
        }
        if !seen.insert(u.email.to_ascii_lowercase()) {
            return Err(invalid(format!("{at}: email {} is listed twice", u.email)));
        }
        if !is_bcrypt(&u.hash) {
            return Err(invalid(format!(
                "{at}: the hash of {} is not a bcrypt hash ($2a$, $2b$ or $2y$, 60 characters); make one with `htpasswd -nbBC 10 \"\" PASSWORD | cut -d: -f2`",
                u.email
            )));
        }
        if let Some(name) = &u.username
            && (name.is_empty() || name.len() > 256 || name.contains(['\n', '\r']))
        {
            return Err(invalid(format!(
                "{at}: the username of {} must be 1-256 characters on one line",
                u.email
            )));
        }
    }
    Ok(users)
}

/// Refuses a user whose hash is one a bundle publishes (upstream's demo
/// user's, whose password everyone knows): one the library knows or this
/// bundle's `published`, whatever its `$2?$` prefix (the same hash to
/// bcrypt).
pub fn refuse_published(secret: &str, users: &[User], published: &[String]) -> Result<(), Refusal> {
    let is_published = |hash: &str| {
        known_secrets::published_hash(hash).is_some()
            || published
                .iter()
                .any(|p| known_secrets::same_bcrypt(p, hash))
    };
    match users.iter().find(|u| is_published(&u.hash)) {
        Some(u) => Err(invalid(format!(
            "Secret {secret}, key {USERS_KEY}: the hash of {} is the one upstream's dex bundle publishes, for a password everyone knows; choose another password",
            u.email
        ))),
        None => Ok(()),
    }
}

/// The connectors a Secret holds, checked for what dex needs of each entry
/// (`type`, `id`, `name`; ids unique). Their settings are dex's to judge.
pub fn parse_connectors(secret: &str, text: &str) -> Result<Vec<Value>, Refusal> {
    let at = format!("Secret {secret}, key {CONNECTORS_KEY}");
    let list: Vec<Value> = serde_saphyr::from_str(text).map_err(|e| {
        invalid(format!(
            "{at} is not a YAML list of dex connectors: {}",
            first_line(&e.to_string())
        ))
    })?;
    let mut ids = BTreeSet::new();
    for (i, c) in list.iter().enumerate() {
        for field in ["type", "id", "name"] {
            if c.get(field)
                .and_then(Value::as_str)
                .is_none_or(str::is_empty)
            {
                return Err(invalid(format!("{at}: entry {i} has no {field}")));
            }
        }
        let id = c["id"].as_str().unwrap_or_default();
        if !ids.insert(id.to_string()) {
            return Err(invalid(format!(
                "{at}: connector id {id:?} is listed twice"
            )));
        }
    }
    Ok(list)
}

/// The hashes the bundles' `dex-passwords` Secret publishes.
pub fn published_hashes(objects: &[DynamicObject]) -> Vec<String> {
    objects
        .iter()
        .filter(|o| kind(o) == "Secret" && o.metadata.name.as_deref() == Some(BUNDLE_PASSWORDS))
        .flat_map(|o| {
            let plain = o.data["stringData"]
                .as_object()
                .cloned()
                .unwrap_or_default();
            plain
                .into_values()
                .filter_map(|v| v.as_str().map(str::to_string))
        })
        .collect()
}

/// A stable dex user ID from the email (dex needs one per user).
fn user_id(email: &str) -> String {
    let digest = secrets::sha256_hex(email.to_ascii_lowercase().as_bytes());
    digest[..16].to_string()
}

/// What dex is configured with.
pub struct Identities<'a> {
    /// People with a password.
    pub users: &'a [User],
    /// Connectors to other identity providers.
    pub connectors: &'a [Value],
    /// The secret of the Kubeflow client (shared with oauth2-proxy).
    pub client_secret: &'a str,
}

/// Turns the bundle's dex objects into this installation's: the
/// configuration (users, connectors, info-level logs) in the Secret `dex`,
/// the client Secret with the generated secret, no `dex-passwords`.
pub fn configure(objects: &mut Vec<DynamicObject>, ids: &Identities<'_>) -> Result<(), Refusal> {
    objects
        .retain(|o| !(kind(o) == "Secret" && o.metadata.name.as_deref() == Some(BUNDLE_PASSWORDS)));
    let Some(config) = objects
        .iter_mut()
        .find(|o| kind(o) == "ConfigMap" && o.metadata.name.as_deref() == Some(CONFIG))
    else {
        return Err(Refusal::new(
            Reason::BundleError,
            "the dex bundle has no dex ConfigMap",
        ));
    };
    let text = config.data["data"]["config.yaml"].as_str().unwrap_or("");
    let mut doc: Value = serde_saphyr::from_str(text).map_err(|e| {
        Refusal::new(
            Reason::BundleError,
            format!("the dex bundle's config.yaml does not parse: {e}"),
        )
    })?;
    let passwords: Vec<Value> = ids
        .users
        .iter()
        .map(|u| {
            let username = u
                .username
                .clone()
                .unwrap_or_else(|| u.email.split('@').next().unwrap_or_default().to_string());
            json!({"email": u.email, "hash": u.hash, "username": username, "userID": user_id(&u.email)})
        })
        .collect();
    doc["enablePasswordDB"] = json!(!passwords.is_empty());
    doc["staticPasswords"] = Value::Array(passwords);
    if ids.connectors.is_empty() {
        if let Some(m) = doc.as_object_mut() {
            m.remove("connectors");
        }
    } else {
        doc["connectors"] = Value::Array(ids.connectors.to_vec());
    }
    // Debug logs of a login server carry more of each request than anyone
    // should keep.
    doc["logger"]["level"] = json!("info");
    let written = serde_saphyr::to_string(&doc).map_err(|e| {
        Refusal::new(
            Reason::BundleError,
            format!("failed to write dex's configuration: {e}"),
        )
    })?;
    config.types = Some(kubeflow_operator::kube::api::TypeMeta {
        api_version: "v1".into(),
        kind: "Secret".into(),
    });
    config.data = json!({
        "type": "Opaque",
        "data": secrets::data([("config.yaml", written.as_str())]),
    });
    for o in objects.iter_mut() {
        if kind(o) == "Secret" && o.metadata.name.as_deref() == Some(CLIENT_SECRET) {
            o.data["data"] = secrets::data([
                ("OIDC_CLIENT_ID", CLIENT_ID),
                ("OIDC_CLIENT_SECRET", ids.client_secret),
            ]);
        }
        if kind(o) == "Deployment" && o.metadata.name.as_deref() == Some("dex") {
            mount_config_secret(o);
        }
    }
    // dex reads its configuration and the client's secret when it starts.
    kubeflow_operator::transform::roll_on_change(
        objects,
        "dex",
        &[("Secret", CONFIG), ("Secret", CLIENT_SECRET)],
    );
    Ok(())
}

/// The Deployment reads its configuration from the Secret `dex` and no
/// longer from `dex-passwords`.
fn mount_config_secret(deployment: &mut DynamicObject) {
    let pod = &mut deployment.data["spec"]["template"]["spec"];
    for v in pod["volumes"].as_array_mut().into_iter().flatten() {
        if let Some(cm) = v.get("configMap").cloned()
            && cm.get("name").and_then(Value::as_str) == Some(CONFIG)
        {
            let mut secret = json!({"secretName": CONFIG});
            if let Some(items) = cm.get("items") {
                secret["items"] = items.clone();
            }
            if let Some(m) = v.as_object_mut() {
                m.remove("configMap");
                m.insert("secret".into(), secret);
            }
        }
    }
    for c in pod["containers"].as_array_mut().into_iter().flatten() {
        if let Some(from) = c.get_mut("envFrom").and_then(Value::as_array_mut) {
            from.retain(|f| {
                f.pointer("/secretRef/name").and_then(Value::as_str) != Some(BUNDLE_PASSWORDS)
            });
        }
    }
}

fn invalid(message: String) -> Refusal {
    Refusal::new(Reason::InvalidSpec, message)
}

fn first_line(s: &str) -> &str {
    s.lines().next().unwrap_or(s)
}

/// `$2a$`, `$2b$` or `$2y$`, a two-digit cost, 53 characters of bcrypt's
/// base64.
fn is_bcrypt(s: &str) -> bool {
    let b = s.as_bytes();
    s.len() == 60
        && s.starts_with("$2")
        && matches!(b[2], b'a' | b'b' | b'y')
        && b[3] == b'$'
        && b[4].is_ascii_digit()
        && b[5].is_ascii_digit()
        && b[6] == b'$'
        && b[7..]
            .iter()
            .all(|c| c.is_ascii_alphanumeric() || *c == b'.' || *c == b'/')
}

#[cfg(test)]
mod tests {
    use super::*;

    const HASH: &str = "$2b$10$abcdefghijklmnopqrstuvABCDEFGHIJKLMNOPQRSTUVWXYZ01234";

    #[test]
    fn users_are_checked_entry_by_entry_and_the_message_never_quotes_a_hash() {
        let ok = format!("- email: a@example.com\n  hash: \"{HASH}\"\n");
        let users = parse_users("kubeflow/users", &ok).expect("ok");
        assert_eq!(users.len(), 1);
        for (text, expected) in [
            (
                format!("- email: nobody\n  hash: \"{HASH}\"\n"),
                "not an email address",
            ),
            (
                format!(
                    "- email: a@example.com\n  hash: \"{HASH}\"\n- email: A@example.com\n  hash: \"{HASH}\"\n"
                ),
                "listed twice",
            ),
            (
                "- email: a@example.com\n  hash: secret\n".to_string(),
                "not a bcrypt hash",
            ),
            (
                "- email: a@example.com\n  password: secret\n".to_string(),
                "not a YAML list",
            ),
        ] {
            let r = parse_users("kubeflow/users", &text).expect_err(&text);
            assert_eq!(r.reason, Reason::InvalidSpec);
            assert!(r.message.contains(expected), "{}", r.message);
            assert!(r.message.contains("Secret kubeflow/users"), "{}", r.message);
            assert!(!r.message.contains("secret\""), "{}", r.message);
            assert!(!r.message.contains(HASH), "{}", r.message);
        }
        let known =
            refuse_published("kubeflow/users", &users, &[HASH.to_string()]).expect_err("known");
        assert!(
            known.message.contains("everyone knows"),
            "{}",
            known.message
        );
        // The same hash with another prefix is the same hash to bcrypt.
        for prefix in ["$2a$", "$2y$"] {
            let text = format!(
                "- email: a@example.com\n  hash: \"{}\"\n",
                HASH.replacen("$2b$", prefix, 1)
            );
            let users = parse_users("kubeflow/users", &text).expect("ok");
            refuse_published("kubeflow/users", &users, &[HASH.to_string()]).expect_err(prefix);
        }
    }

    #[test]
    fn connectors_need_type_id_and_name_and_unique_ids() {
        let ok = "- type: github\n  id: github\n  name: GitHub\n  config: {clientID: x}\n";
        assert_eq!(parse_connectors("ns/c", ok).expect("ok").len(), 1);
        let twice = format!("{ok}{ok}");
        assert!(
            parse_connectors("ns/c", &twice)
                .expect_err("twice")
                .message
                .contains("twice")
        );
        let unnamed = "- type: ldap\n  id: ldap\n";
        assert!(
            parse_connectors("ns/c", unnamed)
                .expect_err("name")
                .message
                .contains("no name")
        );
    }

    #[test]
    fn hashes() {
        assert!(is_bcrypt(HASH));
        assert!(!is_bcrypt(&HASH.replace("$2b$", "$2x$")));
        assert!(!is_bcrypt(&HASH[..59]));
    }
}
