//! kubeflow-cert-manager-operator: installs cert-manager and the Kubeflow
//! issuer from `CertManager` custom resources, or only the issuer where a
//! cert-manager the project did not install serves the cluster.

mod cert_manager;

/// mimalloc: it gives freed memory back to the system, so the resident size
/// falls back after an install or upgrade (see `kubeflow_operator::Allocator`).
#[global_allocator]
static ALLOCATOR: kubeflow_operator::Allocator = kubeflow_operator::Allocator;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    kubeflow_operator::component::main(cert_manager::CertManagerComponent).await
}
