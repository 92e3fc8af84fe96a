//! kubeflow-dashboard-operator: installs Kubeflow's central dashboard, the
//! profile controller with KFAM, the PodDefaults webhook and the aggregated
//! Kubeflow roles from `Dashboard` custom resources, and keeps the profiles
//! they declare.

mod dashboard;
mod profile_rights;
mod profiles;

/// mimalloc: it gives freed memory back to the system, so the resident size
/// falls back after an install or upgrade (see `kubeflow_operator::Allocator`).
#[global_allocator]
static ALLOCATOR: kubeflow_operator::Allocator = kubeflow_operator::Allocator;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    kubeflow_operator::component::main(dashboard::DashboardComponent).await
}
