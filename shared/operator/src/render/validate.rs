//! Checks of user input the CRD schemas cannot make (or that must hold even
//! when a CR was written before the schema had them): image references and
//! resource quantities. A failure is a refusal naming the field.

use std::sync::OnceLock;

use k8s_openapi::api::core::v1::ResourceRequirements;
use kubeflow_api::{IMAGE_MAX_LENGTH, IMAGE_PATTERN};
use regex::Regex;

use crate::base::quantity::quantity;

fn image_grammar() -> Option<&'static Regex> {
    static GRAMMAR: OnceLock<Option<Regex>> = OnceLock::new();
    GRAMMAR
        .get_or_init(|| Regex::new(IMAGE_PATTERN).ok())
        .as_ref()
}

/// Whether `image` is an OCI image reference; the message says why not.
pub fn image(field: &str, image: &str) -> Result<(), String> {
    if image.len() > IMAGE_MAX_LENGTH {
        return Err(format!(
            "{field}: an image reference of {} characters is longer than {IMAGE_MAX_LENGTH}",
            image.len()
        ));
    }
    match image_grammar() {
        Some(g) if g.is_match(image) => Ok(()),
        _ => Err(format!(
            "{field}: {image:?} is not an image reference ([registry[:port]/]repository[:tag][@digest], lowercase repository, no spaces)"
        )),
    }
}

/// Whether every request and limit is a Kubernetes quantity.
pub fn resources(field: &str, r: &ResourceRequirements) -> Result<(), String> {
    for (part, map) in [("limits", &r.limits), ("requests", &r.requests)] {
        for (name, q) in map.iter().flatten() {
            if quantity(&q.0).is_none() {
                return Err(format!(
                    "{field}.{part}.{name}: {:?} is not a quantity (e.g. 500m, 2, 512Mi, 1Gi)",
                    q.0
                ));
            }
        }
    }
    Ok(())
}

/// Whether `name` is a DNS subdomain, the form of most object names
/// (ConfigMaps, Secrets): lowercase letters, digits, '-' and '.', starting
/// and ending with a letter or digit, at most 253 characters.
pub fn is_dns_subdomain(name: &str) -> bool {
    let alnum = |b: u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    let bytes = name.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= 253
        && bytes.first().copied().is_some_and(alnum)
        && bytes.last().copied().is_some_and(alnum)
        && bytes.iter().all(|&b| alnum(b) || b == b'-' || b == b'.')
        && !name.contains("..")
}

/// Whether `name` is a DNS label, the form of a namespace's name: a DNS
/// subdomain without dots, at most 63 characters.
pub fn is_dns_label(name: &str) -> bool {
    name.len() <= 63 && !name.contains('.') && is_dns_subdomain(name)
}

/// Whether `name` is a domain name as DNS defines it: dot-separated labels
/// of lowercase letters, digits and '-' (not at either end), each at most
/// 63 characters, at most 253 in all. Stricter than a DNS subdomain, whose
/// parts Kubernetes lets be longer: a longer label is no host name.
pub fn is_domain_name(name: &str) -> bool {
    is_dns_subdomain(name) && name.split('.').all(is_dns_label)
}

/// Whether `host` is a server's address to connect to: an IPv4 or IPv6
/// address, or a host name (a domain name, letters of either case). No
/// port, scheme, path, space or quote: the value is written into
/// environment variables and connection strings as is.
pub fn is_host(host: &str) -> bool {
    host.parse::<std::net::IpAddr>().is_ok() || is_domain_name(&host.to_ascii_lowercase())
}

/// Why `host` (the field `field`) is not a server's address, if it is not.
pub fn host(field: &str, host: &str) -> Result<(), String> {
    if is_host(host) {
        return Ok(());
    }
    let quoted = crate::base::conditions::truncate(host, 256);
    let port_too = host
        .rsplit_once(':')
        .is_some_and(|(h, p)| is_host(h) && p.parse::<u16>().is_ok());
    Err(if port_too {
        format!("{field}: {quoted:?} has a port; give the host alone and the port in its own field")
    } else {
        format!(
            "{field}: {quoted:?} is not a host name or IP address (labels of letters, digits and '-', at most 63 each and 253 in all; or an IPv4 or IPv6 address)"
        )
    })
}

/// Whether `name` is one Kubernetes keeps for itself (`system:...`): its
/// components, every ServiceAccount (`system:serviceaccount:...`), the
/// groups of all of them (`system:serviceaccounts`), of everyone signed in
/// (`system:authenticated`) and of anonymous requests (`system:anonymous`,
/// `system:unauthenticated`). A profile that names one as a person gives a
/// namespace to a program or to anyone. Case and surrounding spaces are
/// ignored: such a name is never a person's either.
pub fn is_kubernetes_identity(name: &str) -> bool {
    name.trim().to_ascii_lowercase().starts_with("system:")
}

/// `local@domain.tld` without spaces or control characters: what an identity
/// provider reports as a person's email, and the web apps as a user.
pub fn is_email(s: &str) -> bool {
    let Some((local, domain)) = s.split_once('@') else {
        return false;
    };
    !local.is_empty()
        && s.len() <= 254
        && domain.contains('.')
        && !domain.starts_with('.')
        && !domain.ends_with('.')
        && !domain.contains('@')
        && !s.chars().any(|c| c.is_whitespace() || c.is_control())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn emails_and_labels() {
        assert!(is_email("jane.doe+kf@example.co.uk"));
        for bad in [
            "",
            "@example.com",
            "jane@",
            "jane@example",
            "jane doe@example.com",
            "a@b@c.com",
        ] {
            assert!(!is_email(bad), "{bad}");
        }
        assert!(is_dns_label("team-a"));
        for bad in ["Team", "team.a", "-a", &"a".repeat(64)] {
            assert!(!is_dns_label(bad), "{bad}");
        }
    }

    #[test]
    fn domain_names_hosts_and_kubernetes_identities() {
        let label = "a".repeat(63);
        assert!(is_domain_name(&format!("{label}.example.com")));
        for bad in [
            format!("{label}a.example.com"),
            "Example.com".to_string(),
            "a..b".to_string(),
            format!("{}.com", ["a"; 126].join(".")),
        ] {
            assert!(!is_domain_name(&bad), "{bad}");
        }
        for ok in [
            "db",
            "mysql.kubeflow.svc.cluster.local",
            "DB.Example.com",
            "10.0.0.7",
            "fd00::1",
        ] {
            assert!(host("spec.database.external.host", ok).is_ok(), "{ok}");
        }
        for bad in [
            "db;rm -rf /",
            "db\nX: y",
            "db?sslmode=disable",
            "user@db",
            "db/other",
            "db example",
            "\"db\"",
            "",
            "-db",
        ] {
            let e = host("spec.database.external.host", bad).expect_err(bad);
            assert!(e.starts_with("spec.database.external.host: "), "{e}");
        }
        let e = host("h", "db.example:3306").expect_err("a port");
        assert!(e.contains("port in its own field"), "{e}");
        for name in [
            "system:anonymous",
            "system:serviceaccount:kubeflow:default",
            "System:Unauthenticated",
            " system:authenticated",
        ] {
            assert!(is_kubernetes_identity(name), "{name}");
        }
        assert!(!is_kubernetes_identity("jane@example.com"));
        assert!(!is_kubernetes_identity("ml-team"));
    }

    #[test]
    fn object_names() {
        for ok in ["digests", "kf-digests.v2", "a"] {
            assert!(is_dns_subdomain(ok), "{ok}");
        }
        let long = "a".repeat(254);
        for bad in [
            "",
            "../x",
            "Digests",
            "-x",
            "x-",
            "a..b",
            "a/b",
            long.as_str(),
        ] {
            assert!(!is_dns_subdomain(bad), "{bad}");
        }
    }

    #[test]
    fn image_references() {
        for ok in [
            "nginx",
            "library/nginx:1.27",
            "ghcr.io/kubeflow/trainer/trainer-controller-manager:v2.1.0",
            "localhost:5000/a/b@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
            "registry.k8s.io/jobset/jobset:v0.10.1",
            "mirror.example/kserve/kserve-controller:v0.16.0",
        ] {
            assert_eq!(image("spec.images.x", ok), Ok(()), "{ok}");
        }
        for bad in [
            " nginx",
            "nginx ",
            "Nginx/UPPER:1",
            "a//b",
            "a:b:c",
            "",
            "nginx@sha256:short",
        ] {
            assert!(image("spec.images.x", bad).is_err(), "{bad:?} is refused");
        }
        let long = format!("a/{}", "b".repeat(100_000));
        let err = image("spec.images.x", &long).expect_err("too long");
        assert!(err.contains("longer than 512"), "{err}");
    }

    #[test]
    fn quantities() {
        let r: ResourceRequirements = serde_json::from_value(serde_json::json!({
            "limits": {"cpu": "2", "memory": "1Gi"}, "requests": {"cpu": "lots"}
        }))
        .expect("resources");
        let err = resources("spec.resources", &r).expect_err("lots");
        assert_eq!(
            err,
            "spec.resources.requests.cpu: \"lots\" is not a quantity (e.g. 500m, 2, 512Mi, 1Gi)"
        );
    }
}
