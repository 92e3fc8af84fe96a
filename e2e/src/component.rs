//! Helpers for tests of component CRs: read conditions, wait for Ready.

use std::time::Duration;

use kube::Client;
use kube::api::{Api, ApiResource, DynamicObject};
use kube::core::GroupVersionKind;
use serde_json::Value;

use crate::wait_for;

/// The API of a component kind (`Training`, `Pipelines`, ...) as dynamic objects.
pub fn component_api(client: &Client, ns: &str, kind: &str) -> Api<DynamicObject> {
    let (group, plural) = match kind {
        "Kubeflow" => ("platform.kubeflow.org", "kubeflows".to_string()),
        "DevicePlugins" => ("components.kubeflow.org", "deviceplugins".to_string()),
        "Pipelines" => ("components.kubeflow.org", "pipelines".to_string()),
        k => ("components.kubeflow.org", format!("{}s", k.to_lowercase())),
    };
    let ar =
        ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, "v1alpha1", kind), &plural);
    Api::namespaced_with(client.clone(), ns, &ar)
}

/// A condition of an object: (status, reason, message, observedGeneration).
pub fn condition(
    obj: &DynamicObject,
    type_: &str,
) -> Option<(String, String, String, Option<i64>)> {
    let cs = obj.data.pointer("/status/conditions")?.as_array()?;
    let c = cs
        .iter()
        .find(|c| c.get("type").and_then(Value::as_str) == Some(type_))?;
    let s = |k: &str| c.get(k).and_then(Value::as_str).unwrap_or("").to_string();
    Some((
        s("status"),
        s("reason"),
        s("message"),
        c.get("observedGeneration").and_then(Value::as_i64),
    ))
}

/// Waits until condition `type_` has `status` at the object's current generation; returns the object.
pub async fn wait_condition(
    api: &Api<DynamicObject>,
    name: &str,
    type_: &str,
    status: &str,
    timeout: Duration,
) -> DynamicObject {
    wait_for(&format!("{name} {type_}={status}"), timeout, || async {
        let obj = api.get(name).await.ok()?;
        let (s, _, _, g) = condition(&obj, type_)?;
        (s == status && g == obj.metadata.generation).then_some(obj)
    })
    .await
}
