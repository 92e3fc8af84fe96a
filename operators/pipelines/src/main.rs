//! kubeflow-pipelines-operator: installs Kubeflow Pipelines from `Pipelines` custom resources.

mod pipelines;
mod stores;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    kubeflow_operator::component::main(pipelines::PipelinesComponent).await
}
