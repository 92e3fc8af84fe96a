//! kubeflow-trainer-operator: installs Kubeflow Trainer v2 and JobSet from `Trainer` custom resources.

mod trainer;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    kubeflow_operator::component::main(trainer::TrainerComponent).await
}
