//! kubeflow-model-registry-operator: installs the Model Registry (Kubeflow
//! Hub) from `ModelRegistry` custom resources.

mod database;
mod model_registry;

/// mimalloc: it gives freed memory back to the system, so the resident size
/// falls back after an install or upgrade (see `kubeflow_operator::Allocator`).
#[global_allocator]
static ALLOCATOR: kubeflow_operator::Allocator = kubeflow_operator::Allocator;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    kubeflow_operator::component::main(model_registry::ModelRegistryComponent).await
}
