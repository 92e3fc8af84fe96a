//! kubeflow-serving-operator: installs KServe from `Serving` custom resources.

mod serving;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    kubeflow_operator::component::main(serving::ServingComponent).await
}
