//! kubeflow-device-plugins-operator: runs GPU device plugins from `DevicePlugins` custom resources.

mod device_plugins;
mod overlap;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    kubeflow_operator::component::main(device_plugins::DevicePluginsComponent).await
}
