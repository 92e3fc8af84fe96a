//! Writing a CR's status through the `/status` subresource.

use kube::api::{Api, Patch, PatchParams};
use kube::{Resource, ResourceExt};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

/// Writes `new` as the status of `cr` with a merge patch. Lists are replaced
/// whole, and fields of `old` that `new` lacks are removed explicitly (a
/// merge patch would otherwise keep them).
pub async fn patch<K>(api: &Api<K>, cr: &K, old: &Value, mut new: Value) -> Result<(), kube::Error>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug,
{
    if let (Value::Object(old_map), Value::Object(new_map)) = (old, &mut new) {
        for k in old_map.keys() {
            new_map.entry(k.clone()).or_insert(Value::Null);
        }
    }
    api.patch_status(
        &cr.name_any(),
        &PatchParams::default(),
        &Patch::Merge(json!({ "status": new })),
    )
    .await?;
    Ok(())
}
