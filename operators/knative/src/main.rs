//! kubeflow-knative-operator: installs Knative Serving (and Eventing) from
//! `Knative` custom resources.

mod knative;

/// mimalloc: it gives freed memory back to the system, so the resident size
/// falls back after an install or upgrade (see `kubeflow_operator::Allocator`).
#[global_allocator]
static ALLOCATOR: kubeflow_operator::Allocator = kubeflow_operator::Allocator;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    kubeflow_operator::component::main(knative::KnativeComponent).await
}
