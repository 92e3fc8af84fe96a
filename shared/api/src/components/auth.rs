//! The `Auth` kind: login in front of every Kubeflow web app. oauth2-proxy
//! checks each request at the Istio ingress gateway and sets the
//! `kubeflow-userid` and `kubeflow-groups` headers; the identities come from
//! the bundled dex (users or connectors from Secrets) or from an external
//! OIDC provider.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::common::{CommonSpec, ComponentStatus, SecretKeyRef};

/// The bundled dex identity provider.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Dex {
    /// dex version. Default: the one released beside `spec.version`'s
    /// oauth2-proxy (v2.45.0 with v7.14.3, v2.45.1 with v7.15.2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 64))]
    pub version: Option<String>,
    /// Name of a Secret in this resource's namespace whose key `users.yaml`
    /// lists the people who log in with a password: a YAML list of
    /// `{email, hash, username}`, `hash` a bcrypt hash (`htpasswd -nbBC 10
    /// "" PASSWORD | cut -d: -f2`). Never a password in clear.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub users_secret: Option<String>,
    /// Name of a Secret in this resource's namespace whose key
    /// `connectors.yaml` holds dex's `connectors` list (LDAP, GitHub, OIDC,
    /// ...), client secrets included: it is kept in a Secret, never a
    /// ConfigMap.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub connectors_secret: Option<String>,
}

/// An OIDC provider the project does not install (Keycloak, Entra ID,
/// Okta, ...), used instead of dex.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ExternalOidc {
    /// The issuer URL, as the provider's tokens name it (`iss`); its
    /// `/.well-known/openid-configuration` must be reachable from the
    /// cluster.
    #[schemars(length(min = 9, max = 2048), regex(pattern = r"^https://[^\s]+$"))]
    pub issuer_url: String,
    /// The client ID registered with the provider for Kubeflow.
    #[schemars(length(min = 1, max = 256), regex(pattern = r"^[^\s]+$"))]
    pub client_id: String,
    /// The client's secret: a key of a Secret in this resource's namespace.
    pub client_secret: SecretKeyRef,
    /// The callback URL registered with the provider
    /// (`https://<the host users reach Kubeflow at>/oauth2/callback`).
    /// Default: built from each request's host, with the scheme the
    /// request reached oauth2-proxy with (http behind a gateway that ends
    /// TLS): set it when Kubeflow is served over https.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(min = 10, max = 2048),
        regex(pattern = r"^https?://[^\s/]+(/[^\s]*)?/oauth2/callback$")
    )]
    pub redirect_url: Option<String>,
}

component_crd! {
    kind = "Auth", plural = "auths", shortname = "kfauth", status = "AuthStatus",
    doc = "Login in front of every Kubeflow web app: oauth2-proxy at the Istio ingress gateway setting kubeflow-userid and kubeflow-groups, with the bundled dex (users or connectors from Secrets) or an external OIDC provider; reconciled by the kubeflow-auth-operator. Its cookie and client secrets are generated once and kept in Secrets. Usually created by a Kubeflow resource; edit it to change this component alone.",
    version_doc = "oauth2-proxy version to deploy, e.g. \"v7.15.2\"; the meta-operator sets it from its release table. dex's is spec.dex.version.",
    images_doc = "Image overrides by container name, e.g. {\"oauth2-proxy\": \"registry.example/oauth2-proxy/oauth2-proxy:v7.15.2\", \"dex\": \"registry.example/dexidp/dex:v2.45.1\"}.",
    schema = JsonSchema, columns = [printcolumn(name = "Version", type_ = "string", json_path = ".status.version"), printcolumn(name = "Issuer", type_ = "string", json_path = ".status.issuer"),],
    /// Desired state of the login.
    pub struct AuthSpec {
        /// oauth2-proxy's version (e.g. "v7.15.2"), images, scale and
        /// scheduling (of oauth2-proxy's and dex's Deployments).
        #[serde(flatten)]
        pub common: CommonSpec,
        /// The bundled dex (the default when `oidc` is not set; setting
        /// both is refused).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub dex: Option<Dex>,
        /// An external OIDC provider instead of dex.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub oidc: Option<ExternalOidc>,
        /// Email domains allowed to log in (e.g. "example.com"). Default:
        /// any ("*").
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[schemars(length(max = 64), extend("items" = {"type": "string", "maxLength": 253, "pattern": r"^(\*|[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)+)$"}))]
        pub allowed_email_domains: Option<Vec<String>>,
        /// Only members of these IdP groups may log in. Default: no group
        /// required.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[schemars(length(max = 64), extend("items" = {"type": "string", "minLength": 1, "maxLength": 256, "pattern": r#"^[^"\\\n\r]+$"#}))]
        pub allowed_groups: Option<Vec<String>>,
    }
}

/// Status of the login.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AuthStatus {
    /// Conditions, versions and workloads.
    #[serde(flatten)]
    pub common: ComponentStatus,
    /// The OIDC issuer people log in with: the bundled dex's, or the
    /// external provider's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub issuer: Option<String>,
    /// The bundled dex's version, when it is used.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dex_version: Option<String>,
}

crate::status::extended_status!(AuthStatus);
