//! Secrets everyone knows: the demo passwords, keys and hashes upstream's
//! bundles publish. No object an operator applies may hold one, whatever
//! put it there (the bundle, the component's own settings, an override), so
//! [`refuse`] runs over the final rendered objects, after the overrides,
//! just before anything is written. [`find`] is the same check for tests
//! over every bundle's rendered objects.
//!
//! Values are matched by their form, so that a short password does not
//! match every string that happens to equal it and a hash is not missed
//! for a changed prefix: see [`Form`].

use kube::api::DynamicObject;
use kubeflow_api::Override;
use serde_json::Value;

use crate::base::conditions::Reason;
use crate::base::refusal::Refusal;

/// How a known value is recognised.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Form {
    /// A short password (`test`): the whole value of a credential's Secret
    /// key or environment variable (a name with `password`, `secret`,
    /// `key`, `token`, ...). Anywhere else the same word is just a word.
    Password,
    /// A long random-looking secret (a cookie or client secret): anywhere
    /// in the object, a Secret's `data` decoded first.
    Token,
    /// A bcrypt hash: its cost, salt and digest anywhere (a Secret's `data`
    /// decoded first), whatever its `$2a$`, `$2b$`, `$2x$` or `$2y$`
    /// prefix: they are one hash of one password to every bcrypt library.
    Bcrypt,
}

/// A secret a bundle publishes.
#[derive(Debug, Clone, Copy)]
pub struct KnownSecret {
    /// The value as published (a bcrypt hash with its prefix).
    pub value: &'static str,
    /// What it is, for a refusal (which never quotes the value).
    pub what: &'static str,
    /// How it is recognised.
    pub form: Form,
}

/// Every secret the bundles publish. A bundle that adds one adds it here;
/// the operators' tests over their bundles read each bundle's published
/// secrets and fail when one is missing from this list.
pub const KNOWN: &[KnownSecret] = &[
    KnownSecret {
        value: "$2y$12$4K/VkmDd1q1Orb3xAt82zu8gk7Ad6ReFR4LCP9UeYE90NLiN9Df72",
        what: "the password hash of dex's demo user (upstream's `dex-passwords`), whose password everyone knows",
        form: Form::Bcrypt,
    },
    KnownSecret {
        value: "7d16fee92f8d11b8940b081b3f8b8acb",
        what: "oauth2-proxy's demo cookie secret",
        form: Form::Token,
    },
    KnownSecret {
        value: "pUBnBOY80SnXgjibTYM9ZWNzY2xreNGQok",
        what: "the demo OIDC client secret of dex and oauth2-proxy",
        form: Form::Token,
    },
    KnownSecret {
        value: "test",
        what: "the demo MySQL root password of Katib's and the Model Registry's databases",
        form: Form::Password,
    },
    KnownSecret {
        value: "postgres",
        what: "the demo PostgreSQL password of the Model Registry's catalog",
        form: Form::Password,
    },
    KnownSecret {
        value: "minio123",
        what: "the demo secret key of Pipelines' object store (upstream's `mlpipeline-minio-artifact`)",
        form: Form::Password,
    },
    KnownSecret {
        value: "minio",
        what: "the demo access key of Pipelines' object store (upstream's `mlpipeline-minio-artifact`)",
        form: Form::Password,
    },
];

/// Empty passwords and `*ALLOW_EMPTY_PASSWORD` settings in `objects`: a
/// Secret key or a literal environment variable whose name says password
/// with an empty value, and any variable or ConfigMap key that lets a
/// database start without one. What a render must never hold beside the
/// published values [`find`] looks for (a database with no password is as
/// open as one with a published password).
pub fn find_empty_passwords(objects: &[DynamicObject]) -> Vec<Found> {
    const EMPTY: &str = "an empty password";
    const ALLOW: &str = "a setting that lets a database start with no password";
    let is_password = |n: &str| {
        let n = n.to_ascii_lowercase();
        n.contains("password") || n.contains("passwd")
    };
    let mut out = Vec::new();
    for o in objects {
        let object = object_name(o);
        let kind = o.types.as_ref().map_or("", |t| t.kind.as_str());
        let mut hit = |field: String, what: &'static str| {
            out.push(Found {
                object: object.clone(),
                field,
                what,
            })
        };
        if kind == "Secret" {
            let plain = o.data["stringData"]
                .as_object()
                .into_iter()
                .flatten()
                .map(|(k, v)| (format!("stringData.{k}"), k.clone(), v.as_str() == Some("")));
            let data = o.data["data"]
                .as_object()
                .into_iter()
                .flatten()
                .map(|(k, v)| (format!("data.{k}"), k.clone(), v.as_str() == Some("")));
            for (field, key, empty) in plain.chain(data) {
                if empty && is_password(&key) {
                    hit(field, EMPTY);
                }
            }
        }
        if kind == "ConfigMap" {
            for (k, _) in o.data["data"].as_object().into_iter().flatten() {
                if crate::render::transform::allows_empty_password(k) {
                    hit(format!("data.{k}"), ALLOW);
                }
            }
        }
        let mut strings = Vec::new();
        walk(&o.data, String::new(), false, &mut strings);
        for (field, text, _) in strings {
            // `...env[NAME].value`: a literal variable.
            let Some(name) = field
                .strip_suffix("].value")
                .and_then(|f| f.rsplit_once("env[").map(|(_, n)| n))
            else {
                continue;
            };
            if crate::render::transform::allows_empty_password(name) {
                hit(field, ALLOW);
            } else if text.is_empty() && is_password(name) {
                hit(field, EMPTY);
            }
        }
    }
    out
}

/// A known secret in an object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Found {
    /// `Kind namespace/name` (or `Kind name`).
    pub object: String,
    /// Where in the object, e.g. `data.MYSQL_ROOT_PASSWORD` or
    /// `spec.template.spec.containers[0].env[MYSQL_ROOT_PASSWORD]`.
    pub field: String,
    /// What the secret is ([`KnownSecret::what`]).
    pub what: &'static str,
}

impl std::fmt::Display for Found {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {} holds {}", self.object, self.field, self.what)
    }
}

/// The known secrets in `objects`, object by object.
pub fn find(objects: &[DynamicObject]) -> Vec<Found> {
    find_with(objects, KNOWN)
}

/// [`find`] with another list (a test's).
pub fn find_with(objects: &[DynamicObject], known: &[KnownSecret]) -> Vec<Found> {
    objects.iter().flat_map(|o| find_in(o, known)).collect()
}

/// The known secrets in one object.
fn find_in(object: &DynamicObject, known: &[KnownSecret]) -> Vec<Found> {
    let name = object_name(object);
    let mut out = Vec::new();
    let mut hit = |field: String, what: &'static str| {
        let f = Found {
            object: name.clone(),
            field,
            what,
        };
        if !out.contains(&f) {
            out.push(f);
        }
    };
    let is_secret = object.types.as_ref().map(|t| t.kind.as_str()) == Some("Secret");
    // A Secret's values as text: `data` decoded, `stringData` as written.
    if is_secret {
        let decoded = crate::render::secrets::decoded(&object.data["data"]);
        let plain = object.data["stringData"]
            .as_object()
            .into_iter()
            .flatten()
            .filter_map(|(k, v)| Some((format!("stringData.{k}"), k, v.as_str()?.to_string())));
        let data = decoded
            .iter()
            .map(|(k, v)| (format!("data.{k}"), k, v.clone()));
        for (field, key, text) in data.chain(plain) {
            for k in known {
                if matches(k, &text, is_credential_name(key)) {
                    hit(field.clone(), k.what);
                }
            }
        }
    }
    // Every string of the object (a Secret's `data` is base64, seen above),
    // an environment variable's value as a credential when its name is one.
    let mut strings = Vec::new();
    walk(&object.data, String::new(), false, &mut strings);
    for (field, text, credential) in strings {
        if is_secret && (field.starts_with("data.") || field.starts_with("stringData.")) {
            continue;
        }
        for k in known {
            if matches(k, &text, credential) {
                hit(field.clone(), k.what);
            }
        }
    }
    out
}

/// Whether `text` holds `k`; `credential`: whether it is the whole value
/// of a credential, where a password counts.
fn matches(k: &KnownSecret, text: &str, credential: bool) -> bool {
    match k.form {
        Form::Password => credential && text == k.value,
        Form::Token => text.contains(k.value),
        Form::Bcrypt => text.contains(bcrypt_body(k.value)),
    }
}

/// A bcrypt hash without its `$2?$` prefix: the cost, the salt and the
/// digest, which are the hash whatever the prefix says.
fn bcrypt_body(hash: &str) -> &str {
    let b = hash.as_bytes();
    if b.len() > 4 && b[0] == b'$' && b[1] == b'2' && b[3] == b'$' {
        &hash[4..]
    } else {
        hash
    }
}

/// What a bcrypt `hash` is when a bundle publishes it (any prefix).
pub fn published_hash(hash: &str) -> Option<&'static str> {
    KNOWN
        .iter()
        .find(|k| k.form == Form::Bcrypt && bcrypt_body(hash) == bcrypt_body(k.value))
        .map(|k| k.what)
}

/// Whether two bcrypt hashes are the same hash (prefixes aside).
pub fn same_bcrypt(a: &str, b: &str) -> bool {
    bcrypt_body(a) == bcrypt_body(b)
}

/// A Secret key or environment variable that holds a credential.
fn is_credential_name(name: &str) -> bool {
    let n = name.to_ascii_lowercase();
    [
        "password",
        "passwd",
        "pwd",
        "secret",
        "token",
        "key",
        "credential",
    ]
    .iter()
    .any(|w| n.contains(w))
}

/// Collects every string under `v` with its path, and whether it is a
/// credential environment variable's value.
fn walk(v: &Value, path: String, in_env: bool, out: &mut Vec<(String, String, bool)>) {
    match v {
        Value::String(s) => out.push((path, s.clone(), false)),
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                let env_name = in_env
                    .then(|| item.get("name").and_then(Value::as_str))
                    .flatten();
                match (env_name, item.get("value").and_then(Value::as_str)) {
                    (Some(name), Some(value)) => {
                        let at = format!("{path}[{name}]");
                        out.push((
                            format!("{at}.value"),
                            value.to_string(),
                            is_credential_name(name),
                        ));
                        if let Some(m) = item.as_object() {
                            for (k, child) in m.iter().filter(|(k, _)| *k != "value") {
                                walk(child, format!("{at}.{k}"), false, out);
                            }
                        }
                    }
                    _ => walk(item, format!("{path}[{i}]"), false, out),
                }
            }
        }
        Value::Object(m) => {
            for (k, child) in m {
                let at = if path.is_empty() {
                    k.clone()
                } else {
                    format!("{path}.{k}")
                };
                walk(child, at, k == "env", out);
            }
        }
        _ => {}
    }
}

fn object_name(o: &DynamicObject) -> String {
    let kind = o.types.as_ref().map_or("object", |t| t.kind.as_str());
    let name = o.metadata.name.as_deref().unwrap_or_default();
    match o.metadata.namespace.as_deref() {
        Some(ns) => format!("{kind} {ns}/{name}"),
        None => format!("{kind} {name}"),
    }
}

/// Refuses objects that hold a known secret or an empty password (or a
/// setting allowing one), naming the object and the field, and the
/// overrides that target that object (`overrides`: each list with the
/// field it comes from, as [`crate::render::overrides::apply`] names them). The
/// refusal never quotes the secret.
pub fn refuse(objects: &[DynamicObject], overrides: &[(&str, &[Override])]) -> Result<(), Refusal> {
    let published = find(objects).into_iter().next().map(|f| {
        (
            f,
            "a secret published with upstream's bundles that anyone can look up",
        )
    });
    let empty = || {
        find_empty_passwords(objects)
            .into_iter()
            .next()
            .map(|f| (f, "which lets anyone in who reaches it"))
    };
    let Some((found, why)) = published.or_else(empty) else {
        return Ok(());
    };
    let target = objects
        .iter()
        .find(|o| object_name(o) == found.object)
        .map(|o| crate::render::overrides::targeting(o, overrides))
        .unwrap_or_default();
    let message = if target.is_empty() {
        format!("{found}, {why}; nothing was applied (the component's own objects: report it)")
    } else {
        format!(
            "{}: {found}, {why}; nothing was applied; set another value in that override",
            target.join(", ")
        )
    };
    Err(Refusal::new(Reason::KnownSecret, message))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn object(v: Value) -> DynamicObject {
        serde_json::from_value(v).expect("object")
    }

    fn secret(data: Value) -> DynamicObject {
        object(json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "s", "namespace": "kubeflow"}, "data": data}))
    }

    fn b64(s: &str) -> String {
        crate::render::secrets::data([("k", s)])["k"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    }

    const DEX_HASH: &str = "$2y$12$4K/VkmDd1q1Orb3xAt82zu8gk7Ad6ReFR4LCP9UeYE90NLiN9Df72";

    #[test]
    fn the_published_dex_hash_is_found_whatever_its_prefix() {
        for prefix in ["$2a$", "$2b$", "$2x$", "$2y$"] {
            let hash = format!("{prefix}{}", &DEX_HASH[4..]);
            assert!(published_hash(&hash).is_some(), "{hash}");
            let config = format!("staticPasswords:\n- email: a@b.c\n  hash: \"{hash}\"\n");
            let found = find(&[secret(json!({"config.yaml": b64(&config)}))]);
            assert_eq!(found.len(), 1, "{prefix}");
            assert_eq!(found[0].field, "data.config.yaml");
            assert_eq!(found[0].object, "Secret kubeflow/s");
        }
        let other = "$2b$10$abcdefghijklmnopqrstuvABCDEFGHIJKLMNOPQRSTUVWXYZ01234";
        assert!(published_hash(other).is_none());
        assert!(same_bcrypt(DEX_HASH, &DEX_HASH.replace("$2y$", "$2a$")));
    }

    #[test]
    fn a_short_password_counts_only_as_a_credentials_whole_value() {
        let s = secret(json!({"MYSQL_ROOT_PASSWORD": b64("test"), "MYSQL_DATABASE": b64("test")}));
        let found = find(&[s]);
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].field, "data.MYSQL_ROOT_PASSWORD");
        let d = object(json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "db", "namespace": "kubeflow"},
            "spec": {"template": {"spec": {"containers": [{"name": "mysql",
                "args": ["test"],
                "env": [{"name": "MYSQL_ROOT_PASSWORD", "value": "test"},
                        {"name": "MODE", "value": "test"}]}]}}}}));
        let found = find(&[d]);
        assert_eq!(
            found,
            vec![Found {
                object: "Deployment kubeflow/db".into(),
                field: "spec.template.spec.containers[0].env[MYSQL_ROOT_PASSWORD].value".into(),
                what: KNOWN[3].what,
            }]
        );
        let string_data = object(json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "s"}, "stringData": {"password": "test"}}));
        assert_eq!(find(&[string_data])[0].field, "stringData.password");
    }

    #[test]
    fn a_token_is_found_anywhere() {
        let d = object(json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "proxy", "namespace": "auth"},
            "spec": {"template": {"spec": {"containers": [{"name": "p",
                "args": ["--cookie-secret=7d16fee92f8d11b8940b081b3f8b8acb"]}]}}}}));
        let found = find(&[d]);
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].field, "spec.template.spec.containers[0].args[0]");
        assert!(find(&[secret(json!({"cookie-secret": b64("0123abcd")}))]).is_empty());
    }

    #[test]
    fn a_refusal_names_the_override_the_object_and_the_field_never_the_value() {
        let objects = vec![secret(json!({"MYSQL_ROOT_PASSWORD": b64("test")}))];
        let ovr: Override = serde_json::from_value(json!({
            "target": {"kind": "Secret", "name": "s"},
            "mergePatch": {"data": {"MYSQL_ROOT_PASSWORD": "dGVzdA=="}}}))
        .expect("override");
        let list = [ovr];
        let r = refuse(&objects, &[("spec.overrides", &list)]).expect_err("refused");
        assert_eq!(r.reason, Reason::KnownSecret);
        assert!(
            r.message.starts_with(
                "spec.overrides[0] (Secret s): Secret kubeflow/s data.MYSQL_ROOT_PASSWORD holds"
            ),
            "{}",
            r.message
        );
        assert!(!r.message.contains("\"test\""), "{}", r.message);
        let r = refuse(&objects, &[]).expect_err("refused");
        assert!(r.message.starts_with("Secret kubeflow/s"), "{}", r.message);
        assert!(refuse(&[secret(json!({"MYSQL_ROOT_PASSWORD": b64("x9")}))], &[]).is_ok());
    }

    #[test]
    fn an_override_emptying_a_password_is_refused_too() {
        let objects = vec![secret(json!({"MYSQL_ROOT_PASSWORD": ""}))];
        let ovr: Override = serde_json::from_value(json!({
            "target": {"kind": "Secret", "name": "s"},
            "mergePatch": {"data": {"MYSQL_ROOT_PASSWORD": ""}}}))
        .expect("override");
        let list = [ovr];
        let r = refuse(&objects, &[("spec.overrides", &list)]).expect_err("refused");
        assert_eq!(r.reason, Reason::KnownSecret);
        assert!(
            r.message.starts_with(
                "spec.overrides[0] (Secret s): Secret kubeflow/s data.MYSQL_ROOT_PASSWORD holds an empty password"
            ),
            "{}",
            r.message
        );
        let allow = object(json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "mysql", "namespace": "kubeflow"},
            "spec": {"template": {"spec": {"containers": [{"name": "mysql",
                "env": [{"name": "MYSQL_ALLOW_EMPTY_PASSWORD", "value": "true"}]}]}}}}));
        assert!(refuse(&[allow], &[]).is_err());
    }
}

#[cfg(test)]
mod empty_password_tests {
    use super::*;
    use serde_json::json;

    fn object(v: Value) -> DynamicObject {
        serde_json::from_value(v).expect("object")
    }

    #[test]
    fn empty_passwords_and_allow_empty_settings_are_found_a_reference_is_not() {
        let secret = object(json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "mysql-secret", "namespace": "kubeflow"},
            "stringData": {"password": "", "username": ""}}));
        let d = object(json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "mysql", "namespace": "kubeflow"},
            "spec": {"template": {"spec": {"containers": [{"name": "mysql",
                "env": [{"name": "MYSQL_ALLOW_EMPTY_PASSWORD", "value": "true"},
                        {"name": "DB_PASSWORD", "value": ""},
                        {"name": "MYSQL_ROOT_PASSWORD", "valueFrom": {"secretKeyRef":
                            {"name": "mysql-secret", "key": "password"}}}]}]}}}}));
        let cm = object(json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "db", "namespace": "kubeflow"},
            "data": {"MYSQL_ALLOW_EMPTY_PASSWORD": "true", "MYSQL_DATABASE": ""}}));
        let found: Vec<String> = find_empty_passwords(&[secret, d, cm])
            .iter()
            .map(|f| format!("{} {}", f.object, f.field))
            .collect();
        assert_eq!(
            found,
            [
                "Secret kubeflow/mysql-secret stringData.password",
                "Deployment kubeflow/mysql spec.template.spec.containers[0].env[MYSQL_ALLOW_EMPTY_PASSWORD].value",
                "Deployment kubeflow/mysql spec.template.spec.containers[0].env[DB_PASSWORD].value",
                "ConfigMap kubeflow/db data.MYSQL_ALLOW_EMPTY_PASSWORD",
            ]
        );
    }

    /// The check bites on what upstream ships: every Pipelines bundle's
    /// demo keys and empty root password, Katib's and the Model Registry
    /// v0.3.7's `MYSQL_ALLOW_EMPTY_PASSWORD`, which the shared render step
    /// then drops.
    #[test]
    fn the_raw_bundles_hold_what_the_renders_must_not() {
        let root =
            std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/manifests");
        let root = std::env::var_os("MANIFESTS_DIR").map_or(root, std::path::PathBuf::from);
        for (folder, version) in [
            ("pipelines", "2.5.0"),
            ("pipelines", "2.16.1"),
            ("katib", "v0.19.0"),
            ("model-registry", "v0.3.7"),
        ] {
            let mut objects = crate::base::bundle::load(&root, folder, version)
                .expect("bundle")
                .objects();
            assert!(!find(&objects).is_empty(), "{folder}/{version}");
            let allow = |o: &[DynamicObject]| {
                find_empty_passwords(o)
                    .iter()
                    .filter(|f| f.field.contains("ALLOW_EMPTY_PASSWORD"))
                    .count()
            };
            assert!(allow(&objects) > 0, "{folder}/{version}");
            crate::render::transform::drop_allow_empty_password(&mut objects);
            assert_eq!(allow(&objects), 0, "{folder}/{version}");
        }
    }

    #[test]
    fn pipelines_demo_object_store_keys_are_known() {
        let s = object(json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "mlpipeline-minio-artifact", "namespace": "kubeflow"},
            "stringData": {"accesskey": "minio", "secretkey": "minio123"}}));
        assert_eq!(find(&[s]).len(), 2);
    }
}
