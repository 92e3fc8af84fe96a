//! kubeflow-training-operator: installs the Kubeflow training-operator from `Training` custom resources.

mod training;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    kubeflow_operator::component::main(training::TrainingComponent).await
}
