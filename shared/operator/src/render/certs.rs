//! Self-signed webhook certificates: a CA and a serving certificate for a
//! webhook Service's DNS names, kept in a Secret and renewed before expiry.

use base64::Engine as _;
use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::core::v1::Secret;
use kube::Client;
use kube::api::{Api, DynamicObject};
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose};
use serde_json::{Value, json};

use crate::base::kinds::kind;

/// Annotation on the Secret: when the serving certificate expires (RFC 3339).
pub const NOT_AFTER: &str = "components.kubeflow.org/cert-not-after";
/// Annotation on the Secret: the DNS name the certificate was made for.
pub const DNS: &str = "components.kubeflow.org/cert-dns";

/// How long a generated certificate is valid.
const VALIDITY: SignedDuration = SignedDuration::from_hours(24 * 365);
/// Renew when less than this is left.
const RENEW_BEFORE: SignedDuration = SignedDuration::from_hours(24 * 30);

/// A CA and the serving certificate it signed.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct WebhookCert {
    /// CA certificate (PEM): the webhook configurations' caBundle.
    pub ca_pem: String,
    /// Serving certificate (PEM).
    pub cert_pem: String,
    /// Serving key (PEM).
    pub key_pem: String,
    /// Expiry of the serving certificate.
    pub not_after: Timestamp,
    /// Service DNS name it is for.
    pub dns: String,
}

/// Errors making or reading certificates.
#[derive(Debug, thiserror::Error)]
pub enum CertError {
    /// Generation failed.
    #[error("failed to generate a certificate: {0}")]
    Generate(#[from] rcgen::Error),
    /// Reading the Secret failed.
    #[error("failed to read Secret {0}: {1}")]
    Read(String, #[source] kube::Error),
}

fn set_validity(params: &mut CertificateParams, from: Timestamp, to: Timestamp) {
    let ymd = |t: Timestamp| {
        let d = t.to_zoned(jiff::tz::TimeZone::UTC).date();
        rcgen::date_time_ymd(
            i32::from(d.year()),
            d.month().unsigned_abs(),
            d.day().unsigned_abs(),
        )
    };
    params.not_before = ymd(from);
    params.not_after = ymd(to);
}

/// The DNS name of a Service: `<service>.<namespace>.svc`.
pub fn service_dns(service: &str, namespace: &str) -> String {
    format!("{service}.{namespace}.svc")
}

/// Generates a CA and a serving certificate for `service.namespace.svc`.
pub fn generate(service: &str, namespace: &str) -> Result<WebhookCert, CertError> {
    let now = Timestamp::now();
    let not_after = now.checked_add(VALIDITY).unwrap_or(now);
    // The day granularity of rcgen's helper: start yesterday so clock skew never makes it not yet valid.
    let start = now
        .checked_sub(SignedDuration::from_hours(24))
        .unwrap_or(now);

    let ca_key = KeyPair::generate()?;
    let mut ca = CertificateParams::new(Vec::<String>::new())?;
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    ca.distinguished_name
        .push(DnType::CommonName, format!("{service}-ca"));
    set_validity(&mut ca, start, not_after);
    let ca_cert = ca.self_signed(&ca_key)?;

    let dns = service_dns(service, namespace);
    let key = KeyPair::generate()?;
    let mut leaf = CertificateParams::new(vec![
        service.to_string(),
        format!("{service}.{namespace}"),
        dns.clone(),
        format!("{dns}.cluster.local"),
    ])?;
    leaf.distinguished_name
        .push(DnType::CommonName, dns.clone());
    set_validity(&mut leaf, start, not_after);
    let issuer = Issuer::new(ca, ca_key);
    let cert = leaf.signed_by(&key, &issuer)?;
    Ok(WebhookCert {
        ca_pem: ca_cert.pem(),
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
        not_after,
        dns,
    })
}

fn decode(secret: &Secret, key: &str) -> Option<String> {
    let bytes = secret.data.as_ref()?.get(key)?;
    String::from_utf8(bytes.0.clone())
        .ok()
        .filter(|s| !s.is_empty())
}

/// Reads the certificate kept in a Secret when it is for `service` and not
/// near expiry; generates a new one otherwise.
pub async fn load_or_generate(
    client: &Client,
    namespace: &str,
    secret: &str,
    service: &str,
) -> Result<WebhookCert, CertError> {
    let api: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let existing = api
        .get_opt(secret)
        .await
        .map_err(|e| CertError::Read(format!("{namespace}/{secret}"), e))?;
    let dns = service_dns(service, namespace);
    if let Some(s) = existing {
        let annotations = s.metadata.annotations.clone().unwrap_or_default();
        let not_after = annotations
            .get(NOT_AFTER)
            .and_then(|t| t.parse::<Timestamp>().ok());
        let renew_at = not_after.and_then(|t| t.checked_sub(RENEW_BEFORE).ok());
        if let (Some(ca), Some(cert), Some(key), Some(not_after), Some(renew_at)) = (
            decode(&s, "ca.crt"),
            decode(&s, "tls.crt"),
            decode(&s, "tls.key"),
            not_after,
            renew_at,
        ) && annotations.get(DNS) == Some(&dns)
            && Timestamp::now() < renew_at
        {
            return Ok(WebhookCert {
                ca_pem: ca,
                cert_pem: cert,
                key_pem: key,
                not_after,
                dns,
            });
        }
    }
    generate(service, namespace)
}

/// Base64 of a PEM text, as Secrets' data and caBundles hold it.
pub fn b64(s: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(s)
}

/// Puts the certificate into the rendered Secret named `secret`.
pub fn fill_secret(objects: &mut [DynamicObject], secret: &str, cert: &WebhookCert) {
    for obj in objects
        .iter_mut()
        .filter(|o| kind(o) == "Secret" && o.metadata.name.as_deref() == Some(secret))
    {
        obj.data["data"] = json!({
            "ca.crt": b64(&cert.ca_pem),
            "tls.crt": b64(&cert.cert_pem),
            "tls.key": b64(&cert.key_pem),
        });
        let a = obj
            .metadata
            .annotations
            .get_or_insert_with(Default::default);
        a.insert(NOT_AFTER.to_string(), cert.not_after.to_string());
        a.insert(DNS.to_string(), cert.dns.clone());
    }
}

/// Sets `caBundle` on every webhook (and CRD conversion webhook) served by `service`.
pub fn set_ca_bundle(objects: &mut [DynamicObject], service: &str, cert: &WebhookCert) {
    let bundle = Value::String(b64(&cert.ca_pem));
    for obj in objects.iter_mut() {
        match kind(obj) {
            "MutatingWebhookConfiguration" | "ValidatingWebhookConfiguration" => {
                if let Some(Value::Array(hooks)) = obj.data.get_mut("webhooks") {
                    for h in hooks {
                        if h.pointer("/clientConfig/service/name")
                            .and_then(Value::as_str)
                            == Some(service)
                        {
                            h["clientConfig"]["caBundle"] = bundle.clone();
                        }
                    }
                }
            }
            "CustomResourceDefinition"
                if obj
                    .data
                    .pointer("/spec/conversion/webhook/clientConfig/service/name")
                    .and_then(Value::as_str)
                    == Some(service) =>
            {
                obj.data["spec"]["conversion"]["webhook"]["clientConfig"]["caBundle"] =
                    bundle.clone();
            }
            _ => {}
        }
    }
}

/// For components whose controllers make their own webhook certificates
/// (and patch the caBundles): the named Secrets are applied without data, so
/// the operator never owns, writes or fights over what the controller puts there.
pub fn leave_to_controller(objects: &mut [DynamicObject], secrets: &[&str]) {
    for obj in objects.iter_mut().filter(|o| {
        kind(o) == "Secret"
            && o.metadata
                .name
                .as_deref()
                .is_some_and(|n| secrets.contains(&n))
    }) {
        if let Some(m) = obj.data.as_object_mut() {
            m.remove("data");
            m.remove("stringData");
        }
    }
}
