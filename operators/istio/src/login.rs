//! What Istio needs for Kubeflow's login (`spec.oauth2Proxy`, set when the
//! Auth component is on): the ingress gateway asks oauth2-proxy about every
//! request through the `oauth2-proxy` extension provider, istiod refreshes
//! the identity provider's signing keys every minute (istiod usually starts
//! before dex and would otherwise keep a placeholder key for twenty
//! minutes), and the `kubeflow-gateway` Gateway every web app's route names.

use kubeflow_operator::k8s_openapi::api::rbac::v1::PolicyRule;
use kubeflow_operator::kube::api::{ApiResource, DynamicObject};
use kubeflow_operator::kube::core::GroupVersionKind;
use kubeflow_operator::rbac::{self, MANAGE};
use serde_json::{Map, Value, json};

/// The extension provider the Auth component's AuthorizationPolicy names.
const PROVIDER: &str = "oauth2-proxy";
/// The Gateway the web apps' VirtualServices name (`<namespace>/kubeflow-gateway`).
pub const GATEWAY: &str = "kubeflow-gateway";
/// istiod's setting of how often it fetches JWKS keys.
const JWKS_REFRESH: &str = "PILOT_JWT_PUB_KEY_REFRESH_INTERVAL";

/// oauth2-proxy as Istio's external authorizer: which headers go to it and
/// which of its answers go on to the web app (`authorization` carries the
/// token Istio's RequestAuthentication turns into `kubeflow-userid`).
fn provider() -> Value {
    json!({
        "name": PROVIDER,
        "envoyExtAuthzHttp": {
            "service": "oauth2-proxy.oauth2-proxy.svc.cluster.local",
            "port": 80,
            "includeRequestHeadersInCheck": ["authorization", "cookie"],
            "headersToUpstreamOnAllow": [
                "authorization",
                "path",
                "x-auth-request-email",
                "x-auth-request-groups",
                "x-auth-request-user"
            ],
            "headersToDownstreamOnDeny": ["content-type", "set-cookie"]
        }
    })
}

/// Adds the provider to the mesh config's `extensionProviders`, keeping the
/// ones the CR's `meshConfig` lists (one of its own name is replaced).
pub fn add_extension_provider(mesh: &mut Map<String, Value>) {
    let mut providers: Vec<Value> = match mesh.get("extensionProviders") {
        Some(Value::Array(a)) => a
            .iter()
            .filter(|p| p.get("name").and_then(Value::as_str) != Some(PROVIDER))
            .cloned()
            .collect(),
        _ => Vec::new(),
    };
    providers.push(provider());
    mesh.insert("extensionProviders".into(), Value::Array(providers));
}

/// Sets istiod's key refresh to one minute.
pub fn refresh_keys_often(objects: &mut [DynamicObject], istiod: &str) {
    for d in objects.iter_mut().filter(|o| {
        kubeflow_operator::kinds::kind(o) == "Deployment"
            && o.metadata.name.as_deref() == Some(istiod)
    }) {
        let containers = d
            .data
            .pointer_mut("/spec/template/spec/containers")
            .and_then(Value::as_array_mut);
        for c in containers.into_iter().flatten() {
            if c.get("name").and_then(Value::as_str) != Some("discovery") {
                continue;
            }
            let env = c
                .as_object_mut()
                .map(|c| c.entry("env").or_insert_with(|| json!([])));
            if let Some(Value::Array(env)) = env {
                env.retain(|e| e.get("name").and_then(Value::as_str) != Some(JWKS_REFRESH));
                env.push(json!({"name": JWKS_REFRESH, "value": "1m"}));
            }
        }
    }
}

/// The Gateway's kind.
pub fn gateway_kind() -> GroupVersionKind {
    GroupVersionKind::gvk("networking.istio.io", "v1", "Gateway")
}

/// What writing the Gateway takes, in the allowed namespaces.
pub fn gateway_rule() -> PolicyRule {
    rbac::rule("networking.istio.io", &["gateways"], MANAGE)
}

/// The `kubeflow-gateway`: plain HTTP on port 80 of the ingress gateway,
/// any host (TLS and hosts belong to the load balancer or a Gateway of the
/// platform team's own, which the web apps' routes can name instead).
pub fn kubeflow_gateway(namespace: &str) -> DynamicObject {
    let ar = ApiResource::from_gvk_with_plural(&gateway_kind(), "gateways");
    let mut gw = DynamicObject::new(GATEWAY, &ar).within(namespace);
    gw.data = json!({
        "spec": {
            "selector": {"istio": "ingressgateway"},
            "servers": [{
                "hosts": ["*"],
                "port": {"name": "http", "number": 80, "protocol": "HTTP"}
            }]
        }
    });
    gw
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_provider_is_added_beside_the_users_own_and_replaces_one_of_its_name() {
        let mut mesh: Map<String, Value> = serde_json::from_value(json!({
            "extensionProviders": [
                {"name": "opa", "envoyExtAuthzGrpc": {"service": "opa.opa.svc", "port": 9191}},
                {"name": "oauth2-proxy", "envoyExtAuthzHttp": {"service": "old", "port": 1}}
            ]
        }))
        .expect("map");
        add_extension_provider(&mut mesh);
        let names: Vec<&str> = mesh["extensionProviders"]
            .as_array()
            .expect("list")
            .iter()
            .filter_map(|p| p["name"].as_str())
            .collect();
        assert_eq!(names, ["opa", "oauth2-proxy"]);
        assert_eq!(
            mesh["extensionProviders"][1]["envoyExtAuthzHttp"]["service"],
            "oauth2-proxy.oauth2-proxy.svc.cluster.local"
        );
    }
}
