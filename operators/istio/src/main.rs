//! kubeflow-istio-operator: installs the Istio control plane from `Istio` custom resources.

mod istio;
mod mesh;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    kubeflow_operator::component::main(istio::IstioComponent).await
}
