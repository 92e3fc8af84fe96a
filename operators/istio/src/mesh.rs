//! Mesh config overrides, merged into the `mesh` key of the `istio` ConfigMap.

use serde_json::{Map, Value};

/// Merges `overrides` into `base`: maps key by key, anything else replaced.
pub fn merge(base: &mut Value, overrides: &Value) {
    match (base, overrides) {
        (Value::Object(b), Value::Object(o)) => {
            for (k, v) in o {
                merge(b.entry(k.clone()).or_insert(Value::Null), v);
            }
        }
        (b, o) => *b = o.clone(),
    }
}

/// Applies overrides to the mesh config YAML text.
pub fn apply(mesh_yaml: &str, overrides: &Map<String, Value>) -> Result<String, String> {
    let mut mesh: Value = serde_saphyr::from_str(mesh_yaml)
        .map_err(|e| format!("failed to parse the bundle's mesh config: {e}"))?;
    merge(&mut mesh, &Value::Object(overrides.clone()));
    serde_saphyr::to_string(&mesh).map_err(|e| format!("failed to write the mesh config: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn overrides_merge_into_the_mesh_config() {
        let base = "accessLogFile: /dev/stdout\ndefaultConfig:\n  discoveryAddress: istiod.istio-system.svc:15012\n  tracing: {}\n";
        let overrides = json!({"accessLogFile": "", "defaultConfig": {"holdApplicationUntilProxyStarts": true}});
        let out = apply(base, overrides.as_object().expect("map")).expect("merge");
        let v: Value = serde_saphyr::from_str(&out).expect("yaml");
        assert_eq!(v["accessLogFile"], "");
        assert_eq!(
            v["defaultConfig"]["discoveryAddress"],
            "istiod.istio-system.svc:15012"
        );
        assert_eq!(v["defaultConfig"]["holdApplicationUntilProxyStarts"], true);
    }
}
