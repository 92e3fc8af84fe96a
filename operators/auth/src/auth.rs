//! The Auth component: oauth2-proxy (folder `oauth2-proxy`, the version the
//! CR names) in front of the Istio ingress gateway, and the bundled dex
//! (folder `dex`) unless an external OIDC provider is named.
//!
//! The client and cookie secrets are generated once, kept in the Secret
//! `oauth2-proxy/oauth2-proxy` and read back on every pass: a reconcile
//! never rotates them (a new cookie secret would log everyone out). Users,
//! connectors and an external client secret come from Secrets the CR names
//! in its own namespace; a missing or malformed one is refused naming it,
//! before anything is applied.

use kubeflow_operator::api::{Auth, AuthStatus, Dex, ExternalOidc};
use kubeflow_operator::async_trait::async_trait;
use kubeflow_operator::component::{
    Component, DereferenceError, Reference, Refusal, RenderContext, Rendered, require_crd,
};
use kubeflow_operator::conditions::Reason;
use kubeflow_operator::kube::api::DynamicObject;
use kubeflow_operator::kube::{Client, ResourceExt};
use kubeflow_operator::rbac::Permissions;
use kubeflow_operator::render::{self, Layout, Target};
use kubeflow_operator::secrets;
use serde_json::Value;

use crate::dex::{self, User};
use crate::dex_storage;
use crate::proxy::{self, Login, ProxySecrets};

/// oauth2-proxy's bundle folder (the CR's `spec.version`).
const PROXY_FOLDER: &str = "oauth2-proxy";
/// dex's bundle folder (`spec.dex.version`).
const DEX_FOLDER: &str = "dex";
/// The dex each Kubeflow release ships beside its oauth2-proxy, the default
/// of `spec.dex.version` (a test reads the pairs from the manifests README).
const DEX_BESIDE: &[(&str, &str)] = &[("v7.14.3", "v2.45.0"), ("v7.15.2", "v2.45.1")];
/// The workloads replicas, resources and scheduling apply to.
const WORKLOADS: [&str; 2] = ["oauth2-proxy", "dex"];
/// Nothing of these bundles lives in Kubeflow's namespace: their objects
/// stay in the namespaces upstream gives them (`auth`, `oauth2-proxy`, and
/// the gateway's `istio-system`).
const MOVED_FROM: &[&str] = &["kubeflow"];
/// The Istio CRD the login's AuthorizationPolicies need.
const ISTIO_CRD: &str = "authorizationpolicies.security.istio.io";

/// The Auth component.
pub struct AuthComponent;

/// What the cluster holds for a render.
#[derive(Default)]
pub struct Inputs {
    /// The session cookies' key: kept, or generated on the first pass.
    cookie_secret: String,
    /// The dex client's secret: kept, or generated on the first pass.
    client_secret: String,
    /// People with a password (bundled dex).
    users: Vec<User>,
    /// Where `users` came from, for refusals.
    users_secret: String,
    /// Connectors (bundled dex).
    connectors: Vec<Value>,
    /// The external provider's client secret.
    external_client_secret: Option<String>,
}

/// The dex version: the CR's, or the one released beside its oauth2-proxy.
fn dex_version(cr: &Auth) -> Option<String> {
    let dex = cr.spec.dex.as_ref();
    dex.and_then(|d| d.version.clone()).or_else(|| {
        let proxy = cr.spec.common.version.as_deref()?;
        DEX_BESIDE
            .iter()
            .find(|(p, _)| *p == proxy)
            .map(|(_, d)| d.to_string())
    })
}

/// The issuer people log in with.
fn issuer(cr: &Auth) -> String {
    match &cr.spec.oidc {
        Some(o) => o.issuer_url.clone(),
        None => dex::ISSUER.to_string(),
    }
}

/// The generated secrets, as last kept; new ones where none are. The cookie
/// secret is oauth2-proxy's; the client secret is dex's own (its client
/// Secret), so that an external provider's secret, which oauth2-proxy holds
/// while one is used, never becomes dex's.
async fn kept_or_new(client: &Client) -> Result<(String, String), DereferenceError> {
    let read = |ns: &'static str, name: &'static str| async move {
        secrets::read(client, ns, name)
            .await
            .map_err(|e| DereferenceError::Api("read a generated Secret", e))
            .map(Option::unwrap_or_default)
    };
    let proxy_kept = read(proxy::NAMESPACE, proxy::SECRET).await?;
    let dex_kept = read(dex::NAMESPACE, dex::CLIENT_SECRET).await?;
    let or_new = |kept: Option<&String>, bytes: usize| -> Result<String, DereferenceError> {
        match kept.filter(|v| !v.is_empty()) {
            Some(v) => Ok(v.clone()),
            None => Ok(secrets::random_hex(bytes)?),
        }
    };
    // 16 bytes: 32 hex characters, an AES-256 key as oauth2-proxy takes it.
    Ok((
        or_new(proxy_kept.get("cookie-secret"), 16)?,
        or_new(dex_kept.get("OIDC_CLIENT_SECRET"), 32)?,
    ))
}

/// The users and connectors the dex settings name.
async fn identities(
    dex: Option<&Dex>,
    ns: &str,
    client: &Client,
    inputs: &mut Inputs,
) -> Result<(), DereferenceError> {
    let users = dex.and_then(|d| d.users_secret.as_deref());
    let connectors = dex.and_then(|d| d.connectors_secret.as_deref());
    if users.is_none() && connectors.is_none() {
        return Err(Refusal::new(
            Reason::InvalidSpec,
            "spec.dex names neither usersSecret nor connectorsSecret, so nobody could log in; name a Secret of users (bcrypt hashes) or of dex connectors, or set spec.oidc",
        )
        .into());
    }
    if let Some(name) = users {
        let data = secrets::require(client, ns, name, &[dex::USERS_KEY]).await?;
        let text = data.get(dex::USERS_KEY).map(String::as_str).unwrap_or("");
        inputs.users_secret = format!("{ns}/{name}");
        inputs.users = dex::parse_users(&inputs.users_secret, text)?;
    }
    if let Some(name) = connectors {
        let data = secrets::require(client, ns, name, &[dex::CONNECTORS_KEY]).await?;
        let text = data
            .get(dex::CONNECTORS_KEY)
            .map(String::as_str)
            .unwrap_or("");
        inputs.connectors = dex::parse_connectors(&format!("{ns}/{name}"), text)?;
    }
    Ok(())
}

/// The external provider's client secret.
async fn external_secret(
    oidc: &ExternalOidc,
    ns: &str,
    client: &Client,
) -> Result<String, DereferenceError> {
    let key = oidc.client_secret.key.as_str();
    let data = secrets::require(client, ns, &oidc.client_secret.name, &[key]).await?;
    Ok(data.get(key).cloned().unwrap_or_default())
}

#[async_trait]
impl Component for AuthComponent {
    type Resource = Auth;
    type Inputs = Inputs;

    const LAYOUT: Layout = Layout {
        from_namespaces: MOVED_FROM,
        target: Target::ResourceNamespace,
        workloads: &WORKLOADS,
    };

    fn permissions(&self) -> Permissions {
        Permissions::bundles(&[PROXY_FOLDER, DEX_FOLDER]).with_objects(dex_storage::crds())
    }

    fn references(cr: &Auth) -> Vec<Reference> {
        let mut out = Vec::new();
        if let Some(d) = &cr.spec.dex {
            out.extend(d.users_secret.iter().map(|n| Reference::Secret(n.clone())));
            out.extend(
                d.connectors_secret
                    .iter()
                    .map(|n| Reference::Secret(n.clone())),
            );
        }
        if let Some(o) = &cr.spec.oidc {
            out.push(Reference::Secret(o.client_secret.name.clone()));
        }
        out
    }

    async fn dereference(&self, cr: &Auth, client: &Client) -> Result<Inputs, DereferenceError> {
        require_crd(
            client,
            ISTIO_CRD,
            "Auth puts oauth2-proxy in front of the Istio ingress gateway; enable Istio first",
        )
        .await?;
        let ns = cr.namespace().unwrap_or_default();
        let (cookie_secret, client_secret) = kept_or_new(client).await?;
        let mut inputs = Inputs {
            cookie_secret,
            client_secret,
            ..Default::default()
        };
        match &cr.spec.oidc {
            Some(oidc) => {
                inputs.external_client_secret = Some(external_secret(oidc, &ns, client).await?);
            }
            None => identities(cr.spec.dex.as_ref(), &ns, client, &mut inputs).await?,
        }
        Ok(inputs)
    }

    /// Two bundles: oauth2-proxy's, and the bundled dex's unless an external
    /// provider is used, configured together before the shared settings.
    fn render(
        &self,
        cr: &Auth,
        ctx: &RenderContext<'_>,
        inputs: &Inputs,
    ) -> Result<Rendered, Refusal> {
        let spec = &cr.spec;
        if spec.dex.is_some() && spec.oidc.is_some() {
            return Err(Refusal::new(
                Reason::InvalidSpec,
                "spec.dex and spec.oidc exclude each other: set one, the bundled dex or an external OIDC provider",
            ));
        }
        let version = render::required_version(&spec.common, PROXY_FOLDER, ctx.manifests_dir)?;
        let mut objects = ctx.bundle_at(PROXY_FOLDER, &version)?.objects();
        let issuer = issuer(cr);
        let bundled_dex = spec.oidc.is_none();
        let (client_id, client_secret) = match &spec.oidc {
            Some(o) => (
                o.client_id.as_str(),
                inputs.external_client_secret.as_deref().unwrap_or_default(),
            ),
            None => (dex::CLIENT_ID, inputs.client_secret.as_str()),
        };
        if bundled_dex {
            let Some(dex_version) = dex_version(cr) else {
                return Err(Refusal::new(
                    Reason::VersionRequired,
                    format!(
                        "spec.dex.version is required with oauth2-proxy {version} (no dex is known to ship beside it); available dex versions: {}",
                        kubeflow_operator::bundle::available_versions(
                            &ctx.manifests_dir.join(DEX_FOLDER)
                        )
                        .join(", ")
                    ),
                ));
            };
            let mut dex_objects = ctx.bundle_at(DEX_FOLDER, &dex_version)?.objects();
            dex::refuse_published(
                &inputs.users_secret,
                &inputs.users,
                &dex::published_hashes(&dex_objects),
            )?;
            dex::configure(
                &mut dex_objects,
                &dex::Identities {
                    users: &inputs.users,
                    connectors: &inputs.connectors,
                    client_secret,
                },
            )?;
            dex_storage::add_missing(&mut dex_objects);
            objects.extend(dex_objects);
        }
        let login = Login {
            issuer: &issuer,
            bundled_dex,
            email_domains: spec.allowed_email_domains.as_deref().unwrap_or_default(),
            groups: spec.allowed_groups.as_deref().unwrap_or_default(),
            redirect_url: spec.oidc.as_ref().and_then(|o| o.redirect_url.as_deref()),
        };
        let keep = ProxySecrets {
            client_id,
            client_secret,
            cookie_secret: &inputs.cookie_secret,
        };
        proxy::configure(&mut objects, &login, &keep, ctx.namespace)?;
        render::apply_common(
            &mut objects,
            &spec.common,
            &Self::LAYOUT.placement(ctx.namespace),
            ctx.platform,
        )?;
        Ok(Rendered { objects, version })
    }

    async fn report(
        &self,
        cr: &Auth,
        _live: &[DynamicObject],
        _client: &Client,
        status: &mut AuthStatus,
    ) {
        status.issuer = Some(issuer(cr));
        status.dex_version = if cr.spec.oidc.is_none() {
            dex_version(cr)
        } else {
            None
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kubeflow_operator::component::{assert_permitted, find, manifests_dir, render_spec};
    use kubeflow_operator::kinds::kind;
    use serde_json::json;

    const HASH: &str = "$2b$10$abcdefghijklmnopqrstuvABCDEFGHIJKLMNOPQRSTUVWXYZ01234";

    fn inputs() -> Inputs {
        Inputs {
            cookie_secret: "c".repeat(32),
            client_secret: "s".repeat(64),
            users: vec![User {
                email: "jane@example.com".into(),
                hash: HASH.into(),
                username: None,
            }],
            users_secret: "kubeflow/users".into(),
            ..Default::default()
        }
    }

    fn decoded(o: &DynamicObject, key: &str) -> String {
        use kubeflow_operator::k8s_openapi::ByteString;
        let b: ByteString = serde_json::from_value(o.data["data"][key].clone()).expect("base64");
        String::from_utf8(b.0).expect("text")
    }

    #[test]
    fn its_role_covers_what_it_renders_for_every_version_and_platform() {
        assert_permitted(&AuthComponent, |dir| {
            kubeflow_operator::bundle::available_versions(&dir.join(PROXY_FOLDER))
                .into_iter()
                .flat_map(|v| {
                    [
                        json!({"version": v}),
                        json!({"version": v, "oidc": {"issuerUrl": "https://idp.example.com", "clientId": "kf", "clientSecret": {"name": "s", "key": "k"}}}),
                    ]
                })
                .collect()
        });
    }

    #[test]
    fn the_readme_pairs_each_oauth2_proxy_with_the_dex_of_its_release() {
        let readme = std::fs::read_to_string(manifests_dir().join("README.md")).expect("README");
        let header = readme
            .lines()
            .find(|l| l.starts_with("| Kubeflow | training-operator"))
            .expect("the release table");
        let columns: Vec<&str> = header.split('|').map(str::trim).collect();
        let at = |name: &str| columns.iter().position(|c| *c == name).expect(name);
        let (dex_at, proxy_at) = (at("dex"), at("oauth2-proxy"));
        let pairs: Vec<(String, String)> = readme
            .lines()
            .skip_while(|l| *l != header)
            .skip(2)
            .take_while(|l| l.starts_with('|'))
            .map(|l| l.split('|').map(str::trim).collect::<Vec<_>>())
            .filter(|cells| cells[proxy_at] != "n/r")
            .map(|cells| (cells[proxy_at].to_string(), cells[dex_at].to_string()))
            .collect();
        let table: Vec<(String, String)> = DEX_BESIDE
            .iter()
            .map(|(p, d)| (p.to_string(), d.to_string()))
            .collect();
        assert_eq!(pairs, table);
    }

    #[test]
    fn with_dex_no_known_secret_is_installed_and_the_users_are_in_a_secret() {
        for version in ["v7.14.3", "v7.15.2"] {
            let spec = json!({"version": version, "dex": {"usersSecret": "users"}});
            let r = render_spec(&AuthComponent, spec, &inputs()).expect("render");
            assert!(find(&r, "Secret", "dex-passwords").is_none());
            assert!(find(&r, "ConfigMap", "dex").is_none());
            let config = decoded(
                find(&r, "Secret", "dex").expect("dex config"),
                "config.yaml",
            );
            assert!(
                config.contains("jane@example.com") && config.contains(HASH),
                "{config}"
            );
            assert!(!config.contains("user@example.com"), "{config}");
            let proxy = find(&r, "Secret", proxy::SECRET).expect("proxy secret");
            assert_eq!(decoded(proxy, "cookie-secret"), "c".repeat(32));
            assert_eq!(decoded(proxy, "client-secret"), "s".repeat(64));
            let client = find(&r, "Secret", dex::CLIENT_SECRET).expect("client");
            assert_eq!(decoded(client, "OIDC_CLIENT_SECRET"), "s".repeat(64));
            let text = serde_json::to_string(&r.objects).expect("json");
            assert!(
                !text.contains("oauth2-proxy-h675gf55ht"),
                "{version}: the bundle's Secret is named nowhere"
            );
            let dex = find(&r, "Deployment", "dex").expect("dex");
            let digest = |d: &DynamicObject| {
                d.data["spec"]["template"]["metadata"]["annotations"]
                    [kubeflow_operator::transform::CONFIG_DIGEST]
                    .as_str()
                    .map(str::to_string)
            };
            let mut other = inputs();
            other.users[0].email = "joe@example.com".into();
            let changed = render_spec(
                &AuthComponent,
                json!({"version": version, "dex": {"usersSecret": "users"}}),
                &other,
            )
            .expect("render");
            let (dex2, proxy2) = (
                find(&changed, "Deployment", "dex").expect("dex"),
                find(&changed, "Deployment", "oauth2-proxy").expect("proxy"),
            );
            let proxy1 = find(&r, "Deployment", "oauth2-proxy").expect("proxy");
            assert!(
                digest(dex).is_some() && digest(dex) != digest(dex2),
                "a new user rolls dex"
            );
            assert_eq!(digest(proxy1), digest(proxy2), "and not oauth2-proxy");
            assert!(!dex.data.to_string().contains("dex-passwords"));
            assert_eq!(
                dex.data["spec"]["template"]["spec"]["volumes"][0]["secret"]["secretName"],
                "dex"
            );
        }
    }

    /// Every secret value upstream's bundles publish: the demo user's hash
    /// (`stringData`) and the demo client and cookie secrets (`data`).
    fn published_secrets(objects: &[DynamicObject]) -> Vec<String> {
        let mut out = dex::published_hashes(objects);
        for o in objects.iter().filter(|o| kind(o) == "Secret") {
            for (key, v) in o.data["data"].as_object().into_iter().flatten() {
                if key.contains("SECRET") || key.contains("secret") {
                    let b: kubeflow_operator::k8s_openapi::ByteString =
                        serde_json::from_value(v.clone()).expect("base64");
                    out.push(String::from_utf8(b.0).expect("text"));
                }
            }
        }
        out
    }

    #[test]
    fn no_render_of_any_version_holds_a_secret_upstream_publishes() {
        let dir = manifests_dir();
        let mut published = Vec::new();
        for folder in [PROXY_FOLDER, DEX_FOLDER] {
            for v in kubeflow_operator::bundle::available_versions(&dir.join(folder)) {
                let objects = kubeflow_operator::bundle::load(&dir, folder, &v)
                    .expect("bundle")
                    .objects();
                published.extend(published_secrets(&objects));
            }
        }
        // The demo user's hash, the demo client secret, the demo cookie secret.
        published.sort();
        published.dedup();
        assert_eq!(published.len(), 3, "{}", published.len());
        // The library's list, which the check after the overrides reads,
        // holds each (a bundle that publishes a new one fails here).
        for secret in &published {
            assert!(
                kubeflow_operator::known_secrets::KNOWN
                    .iter()
                    .any(|k| k.value == secret.as_str()),
                "a secret the auth bundles publish is missing from known_secrets::KNOWN"
            );
        }
        for version in kubeflow_operator::bundle::available_versions(&dir.join(PROXY_FOLDER)) {
            for spec in [
                json!({"version": version, "dex": {"usersSecret": "users"}}),
                json!({"version": version}),
            ] {
                for inputs in [inputs(), Inputs::default()] {
                    let r = render_spec(&AuthComponent, spec.clone(), &inputs).expect("render");
                    let text = serde_json::to_string(&r.objects).expect("json");
                    let decoded: String = r
                        .objects
                        .iter()
                        .filter(|o| kind(o) == "Secret")
                        .flat_map(|o| {
                            o.data["data"]
                                .as_object()
                                .into_iter()
                                .flatten()
                                .map(|(k, _)| decoded(o, k))
                                .collect::<Vec<_>>()
                        })
                        .collect();
                    for secret in &published {
                        assert!(
                            !text.contains(secret.as_str()),
                            "{version}: a published secret"
                        );
                        assert!(
                            !decoded.contains(secret.as_str()),
                            "{version}: a published secret"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn upstreams_demo_user_hash_is_refused() {
        let dex_objects = kubeflow_operator::bundle::load(&manifests_dir(), DEX_FOLDER, "v2.45.1")
            .expect("bundle")
            .objects();
        let published = dex::published_hashes(&dex_objects);
        assert_eq!(published.len(), 1);
        let mut with_known = inputs();
        with_known.users[0].hash = published[0].clone();
        let r = render_spec(
            &AuthComponent,
            json!({"version": "v7.15.2", "dex": {"usersSecret": "users"}}),
            &with_known,
        )
        .err()
        .expect("refused");
        assert_eq!(r.reason, Reason::InvalidSpec);
        assert!(r.message.contains("everyone knows"), "{}", r.message);
        // The same hash under another prefix is the same hash to bcrypt.
        for prefix in ["$2a$", "$2b$"] {
            let mut with_known = inputs();
            with_known.users[0].hash = published[0].replacen("$2y$", prefix, 1);
            let r = render_spec(
                &AuthComponent,
                json!({"version": "v7.15.2", "dex": {"usersSecret": "users"}}),
                &with_known,
            )
            .err()
            .expect(prefix);
            assert!(r.message.contains("everyone knows"), "{}", r.message);
        }
    }

    #[test]
    fn an_external_provider_replaces_dex() {
        let mut i = inputs();
        i.external_client_secret = Some("from-the-idp".into());
        let spec = json!({"version": "v7.15.2", "allowedGroups": ["ml"],
            "oidc": {"issuerUrl": "https://idp.example.com/realms/kf", "clientId": "kubeflow", "clientSecret": {"name": "idp", "key": "secret"}}});
        let r = render_spec(&AuthComponent, spec, &i).expect("render");
        assert!(
            r.objects
                .iter()
                .all(|o| o.metadata.namespace.as_deref() != Some(dex::NAMESPACE))
        );
        assert!(find(&r, "Deployment", "dex").is_none());
        let proxy = find(&r, "Secret", proxy::SECRET).expect("proxy secret");
        assert_eq!(decoded(proxy, "client-secret"), "from-the-idp");
        assert_eq!(decoded(proxy, "client-id"), "kubeflow");
        let ra = r
            .objects
            .iter()
            .find(|o| kind(o) == "RequestAuthentication")
            .expect("ra");
        assert_eq!(
            ra.data["spec"]["jwtRules"][0]["issuer"],
            "https://idp.example.com/realms/kf"
        );
        let both = json!({"version": "v7.15.2", "dex": {}, "oidc": {"issuerUrl": "https://idp.example.com", "clientId": "kf", "clientSecret": {"name": "s", "key": "k"}}});
        let refused = render_spec(&AuthComponent, both, &i)
            .err()
            .expect("refused");
        assert!(
            refused.message.contains("spec.dex and spec.oidc"),
            "{}",
            refused.message
        );
    }

    #[test]
    fn routes_name_the_gateway_of_the_resources_namespace() {
        let r = render_spec(
            &AuthComponent,
            json!({"version": "v7.15.2", "dex": {"usersSecret": "u"}}),
            &inputs(),
        )
        .expect("render");
        let routes: Vec<&DynamicObject> = r
            .objects
            .iter()
            .filter(|o| kind(o) == "VirtualService")
            .collect();
        assert_eq!(routes.len(), 2);
        for vs in routes {
            assert_eq!(vs.data["spec"]["gateways"][0], "kubeflow/kubeflow-gateway");
        }
        let unpaired = render_spec(&AuthComponent, json!({"version": "v7.99.0"}), &inputs())
            .err()
            .expect("refused");
        assert_eq!(unpaired.reason, Reason::UnknownVersion);
    }
}
