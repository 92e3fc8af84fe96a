//! kubeflow-pipelines-operator: installs Kubeflow Pipelines from `Pipelines` custom resources.

mod credentials;
mod pipelines;
mod rotation;
mod stores;

/// mimalloc: it gives freed memory back to the system, so the resident size
/// falls back after an install or upgrade (see `kubeflow_operator::Allocator`).
#[global_allocator]
static ALLOCATOR: kubeflow_operator::Allocator = kubeflow_operator::Allocator;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    kubeflow_operator::component::main(pipelines::PipelinesComponent).await
}
