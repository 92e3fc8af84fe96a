//! Secrets an operator reads (the ones a CR names) or generates (cookie,
//! client and database secrets no one may know in advance).
//!
//! A value read or generated here is never logged, put into a status, an
//! Event or an error message: refusals name the Secret and its keys only.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Secret;
use kube::Client;
use kube::api::Api;
use ring::rand::{SecureRandom, SystemRandom};
use serde_json::{Map, Value};

use crate::base::conditions::Reason;
use crate::base::refusal::Refusal;

/// Why a Secret could not be read as asked.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// It, or a key, is missing or unreadable as text: a person must act.
    #[error("{}", .0.message)]
    Refused(Refusal),
    /// The request failed; retried with backoff.
    #[error("failed to read a Secret: {0}")]
    Api(#[source] kube::Error),
}

/// The text values of a Secret's keys; None when the Secret does not exist.
/// Keys whose value is not UTF-8 are left out.
pub async fn read(
    client: &Client,
    ns: &str,
    name: &str,
) -> Result<Option<BTreeMap<String, String>>, kube::Error> {
    let api: Api<Secret> = Api::namespaced(client.clone(), ns);
    Ok(api.get_opt(name).await?.map(|s| {
        s.data
            .unwrap_or_default()
            .into_iter()
            .filter_map(|(k, v)| String::from_utf8(v.0).ok().map(|v| (k, v)))
            .collect()
    }))
}

/// The values of `keys` of the Secret `ns/name`, which the user named:
/// refused (SecretMissing) naming the Secret, or the keys it lacks.
pub async fn require(
    client: &Client,
    ns: &str,
    name: &str,
    keys: &[&str],
) -> Result<BTreeMap<String, String>, ReadError> {
    let Some(data) = read(client, ns, name).await.map_err(ReadError::Api)? else {
        return Err(ReadError::Refused(Refusal::new(
            Reason::SecretMissing,
            format!("Secret {ns}/{name} does not exist; create it or fix the reference"),
        )));
    };
    let missing: Vec<&str> = keys
        .iter()
        .copied()
        .filter(|k| data.get(*k).is_none_or(|v| v.is_empty()))
        .collect();
    if !missing.is_empty() {
        return Err(ReadError::Refused(Refusal::new(
            Reason::SecretMissing,
            format!(
                "Secret {ns}/{name} lacks key(s) {} (or they are empty or not text)",
                missing.join(", ")
            ),
        )));
    }
    Ok(data
        .into_iter()
        .filter(|(k, _)| keys.contains(&k.as_str()))
        .collect())
}

/// The value of `key` kept in the Secret `ns/name` that the operator
/// generated on an earlier pass, or `bytes` new random bytes (as hex) when
/// there is none yet (the first install): a database password or a cookie
/// key no one may know in advance, generated once and kept.
pub async fn kept_or_generated(
    client: &Client,
    ns: &str,
    name: &str,
    key: &str,
    bytes: usize,
) -> Result<String, ReadError> {
    let kept = read(client, ns, name)
        .await
        .map_err(ReadError::Api)?
        .and_then(|d| d.get(key).cloned())
        .filter(|v| !v.is_empty());
    match kept {
        Some(v) => Ok(v),
        None => random_hex(bytes).map_err(ReadError::Refused),
    }
}

/// `bytes` random bytes from the system's secure generator, as lowercase
/// hex (twice as many characters; safe in any config file and header).
pub fn random_hex(bytes: usize) -> Result<String, Refusal> {
    let mut buf = vec![0u8; bytes];
    SystemRandom::new().fill(&mut buf).map_err(|_| {
        Refusal::new(
            Reason::InvalidSpec,
            "the system's random number generator failed; no secret was generated",
        )
    })?;
    Ok(buf.iter().map(|b| format!("{b:02x}")).collect())
}

/// The SHA-256 of `bytes` as lowercase hex: a stable identifier derived
/// from a value (never a way to store a secret).
pub fn sha256_hex(bytes: &[u8]) -> String {
    ring::digest::digest(&ring::digest::SHA256, bytes)
        .as_ref()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// A Secret's `data` (base64, as the API server stores it: `stringData`
/// would read back as `data` and differ on every pass).
pub fn data<'a>(entries: impl IntoIterator<Item = (&'a str, &'a str)>) -> Value {
    use base64::Engine as _;
    let map: Map<String, Value> = entries
        .into_iter()
        .map(|(k, v)| {
            (
                k.to_string(),
                Value::String(base64::engine::general_purpose::STANDARD.encode(v)),
            )
        })
        .collect();
    Value::Object(map)
}

/// A rendered Secret's `data` decoded to text (values that are not base64
/// of UTF-8 text are left out): what [`data`] wrote.
pub fn decoded(data: &Value) -> BTreeMap<String, String> {
    use base64::Engine as _;
    data.as_object()
        .into_iter()
        .flatten()
        .filter_map(|(k, v)| {
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(v.as_str()?)
                .ok()?;
            Some((k.clone(), String::from_utf8(bytes).ok()?))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn random_hex_is_as_long_as_asked_and_differs_each_time() {
        let a = random_hex(32).expect("random");
        let b = random_hex(32).expect("random");
        assert_eq!(a.len(), 64);
        assert!(a.bytes().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(a, b);
    }

    #[test]
    fn data_is_base64_as_the_server_keeps_it() {
        assert_eq!(
            data([("client-id", "kubeflow")]),
            serde_json::json!({"client-id": "a3ViZWZsb3c="})
        );
    }
}
