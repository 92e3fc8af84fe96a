//! Checks of `spec.meshConfig` against the MeshConfig fields of the Istio
//! versions the bundles hold (1.26-1.29): a known field must have the JSON
//! type Istio expects, and a field one or two letters away from a known one
//! is a typo. istiod refuses a mesh config it cannot parse by not starting,
//! long after the CR was accepted; here it is refused at once.
//!
//! A field not in the table and not close to one passes: a newer Istio may
//! know it, and istiod has the last word.

use serde_json::{Map, Value};

/// A MeshConfig field's JSON type.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Type {
    String,
    Bool,
    Integer,
    Object,
    Array,
    /// One of these strings.
    OneOf(&'static [&'static str]),
}

/// Top-level MeshConfig fields and their types.
const FIELDS: &[(&str, Type)] = &[
    ("accessLogFile", Type::String),
    ("accessLogFormat", Type::String),
    ("accessLogEncoding", Type::OneOf(&["TEXT", "JSON"])),
    ("connectTimeout", Type::String),
    ("protocolDetectionTimeout", Type::String),
    ("dnsRefreshRate", Type::String),
    ("ingressClass", Type::String),
    ("ingressService", Type::String),
    ("ingressSelector", Type::String),
    (
        "ingressControllerMode",
        Type::OneOf(&["UNSPECIFIED", "OFF", "DEFAULT", "STRICT"]),
    ),
    ("rootNamespace", Type::String),
    ("trustDomain", Type::String),
    (
        "h2UpgradePolicy",
        Type::OneOf(&["DO_NOT_UPGRADE", "UPGRADE"]),
    ),
    ("inboundClusterStatName", Type::String),
    ("outboundClusterStatName", Type::String),
    ("enableTracing", Type::Bool),
    ("enableEnvoyAccessLogService", Type::Bool),
    ("disableEnvoyListenerLog", Type::Bool),
    ("enableAutoMtls", Type::Bool),
    ("enablePrometheusMerge", Type::Bool),
    ("verifyCertificateAtClient", Type::Bool),
    ("proxyListenPort", Type::Integer),
    ("proxyInboundListenPort", Type::Integer),
    ("proxyHttpPort", Type::Integer),
    ("defaultConfig", Type::Object),
    ("outboundTrafficPolicy", Type::Object),
    ("inboundTrafficPolicy", Type::Object),
    ("localityLbSetting", Type::Object),
    ("defaultProviders", Type::Object),
    ("tcpKeepalive", Type::Object),
    ("meshMTLS", Type::Object),
    ("tlsDefaults", Type::Object),
    ("defaultHttpRetryPolicy", Type::Object),
    ("extensionProviders", Type::Array),
    ("discoverySelectors", Type::Array),
    ("serviceSettings", Type::Array),
    ("configSources", Type::Array),
    ("certificates", Type::Array),
    ("caCertificates", Type::Array),
    ("trustDomainAliases", Type::Array),
    ("defaultServiceExportTo", Type::Array),
    ("defaultVirtualServiceExportTo", Type::Array),
    ("defaultDestinationRuleExportTo", Type::Array),
];

/// Nested fields with a closed set of values.
const NESTED: &[(&str, &str, &[&str])] = &[
    (
        "outboundTrafficPolicy",
        "mode",
        &["REGISTRY_ONLY", "ALLOW_ANY"],
    ),
    (
        "inboundTrafficPolicy",
        "mode",
        &["PASSTHROUGH", "LOCALHOST"],
    ),
];

fn has_type(v: &Value, t: Type) -> bool {
    match t {
        Type::String => v.is_string(),
        Type::Bool => v.is_boolean(),
        Type::Integer => v.is_i64() || v.is_u64(),
        Type::Object => v.is_object(),
        Type::Array => v.is_array(),
        Type::OneOf(values) => v.as_str().is_some_and(|s| values.contains(&s)),
    }
}

fn describe(t: Type) -> String {
    match t {
        Type::String => "a string".into(),
        Type::Bool => "true or false".into(),
        Type::Integer => "an integer".into(),
        Type::Object => "an object".into(),
        Type::Array => "a list".into(),
        Type::OneOf(values) => format!("one of {}", values.join(", ")),
    }
}

/// Edit distance of two short names (for "did you mean").
fn distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let here = row[j + 1];
            row[j + 1] = if ca == *cb {
                prev
            } else {
                1 + prev.min(row[j]).min(row[j + 1])
            };
            prev = here;
        }
    }
    row[b.len()]
}

/// The most `spec.meshConfig` may hold, written out as JSON: a mesh config
/// is a few hundred bytes; a larger one is a mistake (or an attempt to fill
/// istiod's ConfigMap and every operator's memory).
const MESH_MAX: usize = 16 * 1024;

/// Checks `spec.meshConfig`; the message names the field and what it must be.
pub fn check(mesh: &Map<String, Value>) -> Result<(), String> {
    let size = serde_json::to_string(mesh).map_or(usize::MAX, |s| s.len());
    if size > MESH_MAX {
        return Err(format!(
            "spec.meshConfig is {size} bytes written out; at most {MESH_MAX} are accepted"
        ));
    }
    for (key, value) in mesh {
        match FIELDS.iter().find(|(name, _)| name == key) {
            Some((_, t)) if !has_type(value, *t) => {
                return Err(format!(
                    "spec.meshConfig.{key} must be {}, not {value}",
                    describe(*t)
                ));
            }
            Some(_) => {}
            None => {
                if let Some((near, _)) = FIELDS
                    .iter()
                    .find(|(name, _)| distance(&key.to_lowercase(), &name.to_lowercase()) <= 2)
                {
                    return Err(format!(
                        "spec.meshConfig.{key} is not a MeshConfig field; did you mean {near}?"
                    ));
                }
            }
        }
    }
    for (parent, field, values) in NESTED {
        if let Some(v) = mesh.get(*parent).and_then(|p| p.get(*field))
            && !v.as_str().is_some_and(|s| values.contains(&s))
        {
            return Err(format!(
                "spec.meshConfig.{parent}.{field} must be one of {}, not {v}",
                values.join(", ")
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_mesh_config_of_a_megabyte_is_refused() {
        let mut big = serde_json::Map::new();
        for i in 0..40 {
            big.insert(
                format!("unknownField{i}"),
                serde_json::json!("x".repeat(1000)),
            );
        }
        let e = super::check(&big).expect_err("too large");
        assert!(e.contains("spec.meshConfig") && e.contains("16384"), "{e}");
    }

    use super::*;
    use serde_json::json;

    fn map(v: Value) -> Map<String, Value> {
        v.as_object().cloned().expect("object")
    }

    #[test]
    fn valid_mesh_configs_pass() {
        let ok = map(json!({
            "accessLogFile": "/dev/stdout", "enableTracing": true,
            "outboundTrafficPolicy": {"mode": "REGISTRY_ONLY"},
            "defaultConfig": {"holdApplicationUntilProxyStarts": true},
            "someFutureField": {"x": 1},
        }));
        assert_eq!(check(&ok), Ok(()));
    }

    #[test]
    fn mistyped_fields_and_values_are_refused() {
        let typo = check(&map(json!({"accesLogFile": "/dev/stdout"}))).expect_err("typo");
        assert!(typo.contains("did you mean accessLogFile"), "{typo}");
        let wrong = check(&map(json!({"enableTracing": "yes"}))).expect_err("type");
        assert!(
            wrong.contains("enableTracing must be true or false"),
            "{wrong}"
        );
        let mode = check(&map(
            json!({"outboundTrafficPolicy": {"mode": "ALLOW_ALL"}}),
        ))
        .expect_err("enum");
        assert!(mode.contains("REGISTRY_ONLY, ALLOW_ANY"), "{mode}");
        let enc = check(&map(json!({"accessLogEncoding": "XML"}))).expect_err("enum");
        assert!(enc.contains("TEXT, JSON"), "{enc}");
    }
}
