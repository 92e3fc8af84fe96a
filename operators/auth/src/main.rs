//! kubeflow-auth-operator: installs Kubeflow's login from `Auth` custom
//! resources: oauth2-proxy in front of the Istio ingress gateway, with the
//! bundled dex or an external OIDC provider.

mod auth;
mod dex;
mod dex_storage;
mod proxy;

/// mimalloc: it gives freed memory back to the system, so the resident size
/// falls back after an install or upgrade (see `kubeflow_operator::Allocator`).
#[global_allocator]
static ALLOCATOR: kubeflow_operator::Allocator = kubeflow_operator::Allocator;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    kubeflow_operator::component::main(auth::AuthComponent).await
}
