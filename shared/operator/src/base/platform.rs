//! Platform detection: OpenShift or Kubernetes, by API discovery.

use kube::Client;
use kubeflow_api::Platform;

/// API groups whose presence means OpenShift.
pub const OPENSHIFT_GROUPS: [&str; 2] = ["route.openshift.io", "security.openshift.io"];

/// Detects the platform: OpenShift when both OpenShift groups are served.
pub async fn detect(client: &Client) -> Result<Platform, kube::Error> {
    let groups = client.list_api_groups().await?;
    let served = |g: &str| groups.groups.iter().any(|x| x.name == g);
    Ok(if OPENSHIFT_GROUPS.iter().all(|g| served(g)) {
        Platform::OpenShift
    } else {
        Platform::Kubernetes
    })
}

/// Resolves `auto` (or unset) by detection; passes an explicit platform through.
pub async fn resolve(client: &Client, wanted: Option<Platform>) -> Result<Platform, kube::Error> {
    match wanted {
        Some(Platform::Kubernetes) => Ok(Platform::Kubernetes),
        Some(Platform::OpenShift) => Ok(Platform::OpenShift),
        Some(Platform::Auto) | None => detect(client).await,
    }
}
