//! What the operator knows of oauth2-proxy: its configuration file (which
//! identity provider, who may log in), the Secret with its client and cookie
//! secrets, and the Istio objects that put it in front of the ingress
//! gateway.

use kubeflow_operator::component::Refusal;
use kubeflow_operator::conditions::Reason;
use kubeflow_operator::kinds::kind;
use kubeflow_operator::kube::api::DynamicObject;
use kubeflow_operator::secrets;
use serde_json::{Value, json};

/// Where oauth2-proxy runs (upstream's namespace; Istio's extension
/// provider names its Service there).
pub const NAMESPACE: &str = "oauth2-proxy";
/// The Secret with the client and cookie secrets. The bundle's has a
/// generated name and demo values; this one has a fixed name, so that the
/// values generated once are found again on every pass and across upgrades.
pub const SECRET: &str = "oauth2-proxy";
/// The Gateway the bundle's routes name, `<namespace>/kubeflow-gateway`.
const GATEWAY: &str = "kubeflow-gateway";

/// The secrets oauth2-proxy holds.
pub struct ProxySecrets<'a> {
    /// The OIDC client's ID.
    pub client_id: &'a str,
    /// The OIDC client's secret.
    pub client_secret: &'a str,
    /// The key of its session cookies.
    pub cookie_secret: &'a str,
}

/// Who may log in, and with which provider.
pub struct Login<'a> {
    /// The issuer: dex's, or the external provider's.
    pub issuer: &'a str,
    /// Whether it is the bundled dex (reached inside the cluster, with its
    /// login page under `/dex/` of the gateway) or an external provider
    /// (found by OIDC discovery).
    pub bundled_dex: bool,
    /// Allowed email domains; empty: any.
    pub email_domains: &'a [String],
    /// Required groups; empty: none.
    pub groups: &'a [String],
    /// The callback URL registered with an external provider; None: dex's
    /// relative one, or one built from each request's host.
    pub redirect_url: Option<&'a str>,
}

/// Applies the login settings and the secrets to the bundle's objects;
/// routes name the gateway in `gateway_namespace`.
pub fn configure(
    objects: &mut [DynamicObject],
    login: &Login<'_>,
    keep: &ProxySecrets<'_>,
    gateway_namespace: &str,
) -> Result<(), Refusal> {
    let mut old_secret = None;
    let mut config_map = None;
    for o in objects.iter_mut() {
        match kind(o) {
            "Secret" if o.metadata.namespace.as_deref() == Some(NAMESPACE) => {
                old_secret = o.metadata.name.replace(SECRET.to_string());
                o.data["data"] = secrets::data([
                    ("client-id", keep.client_id),
                    ("client-secret", keep.client_secret),
                    ("cookie-secret", keep.cookie_secret),
                ]);
            }
            "ConfigMap" if o.data["data"].get("oauth2_proxy.cfg").is_some() => {
                config_map.clone_from(&o.metadata.name);
                let text = o.data["data"]["oauth2_proxy.cfg"].as_str().unwrap_or("");
                o.data["data"]["oauth2_proxy.cfg"] = json!(config(text, login));
            }
            "RequestAuthentication" => {
                for rule in o.data["spec"]["jwtRules"]
                    .as_array_mut()
                    .into_iter()
                    .flatten()
                {
                    rule["issuer"] = json!(login.issuer);
                }
            }
            "VirtualService" => {
                for g in o.data["spec"]["gateways"]
                    .as_array_mut()
                    .into_iter()
                    .flatten()
                {
                    if g.as_str()
                        .is_some_and(|g| g.ends_with(&format!("/{GATEWAY}")))
                    {
                        *g = json!(format!("{gateway_namespace}/{GATEWAY}"));
                    }
                }
            }
            _ => {}
        }
    }
    let Some(old) = old_secret else {
        return Err(Refusal::new(
            Reason::BundleError,
            "the oauth2-proxy bundle has no Secret in namespace oauth2-proxy",
        ));
    };
    for d in objects.iter_mut().filter(|o| kind(o) == "Deployment") {
        rename_secret_refs(&mut d.data, &old);
    }
    // oauth2-proxy reads its file, and its secrets as environment values,
    // when it starts.
    let config_map = config_map.unwrap_or_default();
    kubeflow_operator::transform::roll_on_change(
        objects,
        "oauth2-proxy",
        &[("Secret", SECRET), ("ConfigMap", config_map.as_str())],
    );
    Ok(())
}

/// Points every `secretKeyRef` naming `old` at [`SECRET`].
fn rename_secret_refs(v: &mut Value, old: &str) {
    match v {
        Value::Object(m) => {
            if let Some(Value::Object(r)) = m.get_mut("secretKeyRef")
                && r.get("name").and_then(Value::as_str) == Some(old)
            {
                r.insert("name".into(), json!(SECRET));
            }
            for child in m.values_mut() {
                rename_secret_refs(child, old);
            }
        }
        Value::Array(a) => a.iter_mut().for_each(|c| rename_secret_refs(c, old)),
        _ => {}
    }
}

/// A TOML string.
fn quoted(s: &str) -> String {
    format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\""))
}

/// A TOML list of strings.
fn list(items: &[String]) -> String {
    let inner: Vec<String> = items.iter().map(|i| quoted(i)).collect();
    format!("[ {} ]", inner.join(", "))
}

/// The bundle's `oauth2_proxy.cfg` with the login settings: single-line
/// `key = value` settings replaced (or added), those that only apply to the
/// bundled dex removed for an external provider.
fn config(text: &str, login: &Login<'_>) -> String {
    let domains = if login.email_domains.is_empty() {
        vec!["*".to_string()]
    } else {
        login.email_domains.to_vec()
    };
    let mut set: Vec<(&str, Option<String>)> = vec![
        ("oidc_issuer_url", Some(quoted(login.issuer))),
        ("email_domains", Some(list(&domains))),
        (
            "allowed_groups",
            (!login.groups.is_empty()).then(|| list(login.groups)),
        ),
    ];
    if let Some(url) = login.redirect_url {
        set.push(("redirect_url", Some(quoted(url))));
    }
    if !login.bundled_dex {
        // Discovery finds the provider's login, token and key URLs. The
        // callback is dex's relative path only beside dex (same host):
        // a provider elsewhere must be sent back to an absolute URL, which
        // oauth2-proxy builds from the request's host. `prompt = none`
        // would have the provider refuse anyone not logged in there
        // already (dex ignores it). The login test runs the real
        // oauth2-proxy through a provider's redirects with this.
        set.extend([
            ("skip_oidc_discovery", Some("false".to_string())),
            ("login_url", None),
            ("redeem_url", None),
            ("oidc_jwks_url", None),
            ("provider_display_name", None),
            ("relative_redirect_url", None),
            ("prompt", None),
        ]);
    }
    let mut out: Vec<String> = Vec::new();
    let mut done = std::collections::BTreeSet::new();
    for line in text.lines() {
        let key = line.split('=').next().unwrap_or("").trim();
        match set.iter().find(|(k, _)| *k == key && line.contains('=')) {
            Some((k, value)) => {
                done.insert(*k);
                if let Some(v) = value {
                    out.push(format!("{k} = {v}"));
                }
            }
            None => out.push(line.to_string()),
        }
    }
    for (k, v) in &set {
        if let (false, Some(v)) = (done.contains(k), v) {
            out.push(format!("{k} = {v}"));
        }
    }
    out.join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    const BUNDLE: &str = "provider = \"oidc\"\noidc_issuer_url = \"http://dex.auth.svc.cluster.local:5556/dex\"\nemail_domains = [ \"*\" ]\nskip_auth_routes = [\n  \"^/dex/\",\n]\nskip_oidc_discovery = true\nlogin_url = \"/dex/auth\"\nredeem_url = \"http://dex/token\"\noidc_jwks_url = \"http://dex/keys\"\nprovider_display_name = \"Dex\"\nprompt = \"none\"\nredirect_url = \"/oauth2/callback\"\nrelative_redirect_url = true\n";

    #[test]
    fn an_external_providers_callback_is_absolute() {
        let out = config(
            BUNDLE,
            &Login {
                issuer: "https://login.example.com/realms/kf",
                bundled_dex: false,
                email_domains: &[],
                groups: &[],
                redirect_url: Some("https://kubeflow.example.com/oauth2/callback"),
            },
        );
        assert!(
            out.contains("redirect_url = \"https://kubeflow.example.com/oauth2/callback\""),
            "{out}"
        );
        assert_eq!(out.matches("redirect_url").count(), 1, "{out}");
    }

    #[test]
    fn an_external_provider_is_found_by_discovery_and_the_settings_are_written_once() {
        let groups = vec!["ml-team".to_string(), "say \"hi\"".to_string()];
        let domains = vec!["example.com".to_string()];
        let out = config(
            BUNDLE,
            &Login {
                issuer: "https://login.example.com/realms/kf",
                bundled_dex: false,
                email_domains: &domains,
                groups: &groups,
                redirect_url: None,
            },
        );
        assert!(
            out.contains("oidc_issuer_url = \"https://login.example.com/realms/kf\""),
            "{out}"
        );
        assert!(out.contains("email_domains = [ \"example.com\" ]"), "{out}");
        assert!(
            out.contains(r#"allowed_groups = [ "ml-team", "say \"hi\"" ]"#),
            "{out}"
        );
        assert!(out.contains("skip_oidc_discovery = false"), "{out}");
        for gone in [
            "login_url",
            "redeem_url",
            "oidc_jwks_url",
            "provider_display_name",
            "relative_redirect_url",
            "prompt",
        ] {
            assert!(!out.contains(gone), "{gone}: {out}");
        }
        assert_eq!(out.matches("email_domains").count(), 1, "{out}");
        assert!(
            out.contains("  \"^/dex/\","),
            "multi-line settings stay: {out}"
        );
    }

    #[test]
    fn with_dex_the_bundle_settings_stay_and_no_group_is_required() {
        let out = config(
            BUNDLE,
            &Login {
                issuer: crate::dex::ISSUER,
                bundled_dex: true,
                email_domains: &[],
                groups: &[],
                redirect_url: None,
            },
        );
        assert!(out.contains("login_url = \"/dex/auth\""), "{out}");
        assert!(out.contains("email_domains = [ \"*\" ]"), "{out}");
        assert!(!out.contains("allowed_groups"), "{out}");
    }
}
