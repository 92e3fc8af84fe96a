//! The API server's answers, read slim. The engine keeps a live object only
//! without its field ownership and, for a CRD, without its spec
//! (`memo::slim`); a dry run's answer only for whether it passed; and a read
//! object whole only for the one diff against the desired state. Parsing
//! answers whole built trees about twenty times their text (a KServe 26.03
//! CRD comes back with some 700 KB of schema and field ownership) with 16
//! requests in flight, and each read was copied once more for the diff. Here
//! an answer is read as text and built into one tree, of the parts kept.

use std::fmt;

use kube::api::{DynamicObject, GetParams, Patch, PatchParams};
use kube::core::Request;
use kube::{Client, Resource};
use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, Visitor};
use serde_json::{Map, Value};

use crate::base::kinds::kind;
use crate::engine::discovery::Resolved;

/// Server-side applies `desired`; returns the written object, slim (a dry
/// run: nothing, its answer is not parsed).
pub(super) async fn apply(
    client: &Client,
    resolved: &Resolved,
    desired: &DynamicObject,
    params: &PatchParams,
) -> Result<Option<DynamicObject>, kube::Error> {
    let request = requests(resolved, desired)
        .patch(name(desired), params, &Patch::Apply(desired))
        .map_err(kube::Error::BuildRequest)?;
    let text =
        super::deadline::within(super::deadline::LIMIT, client.request_text(request)).await?;
    if params.dry_run {
        return Ok(None);
    }
    parse(&text, is_crd(desired))
        .map(Some)
        .map_err(kube::Error::SerdeError)
}

/// The live object of `desired`'s name as one JSON tree, field ownership
/// included (the diff needs it); `None` when there is none.
pub(super) async fn read(
    client: &Client,
    resolved: &Resolved,
    desired: &DynamicObject,
) -> Result<Option<Value>, kube::Error> {
    let request = requests(resolved, desired)
        .get(name(desired), &GetParams::default())
        .map_err(kube::Error::BuildRequest)?;
    match super::deadline::within(super::deadline::LIMIT, client.request_text(request)).await {
        Ok(text) => serde_json::from_str(&text)
            .map(Some)
            .map_err(kube::Error::SerdeError),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(None),
        Err(e) => Err(e),
    }
}

/// A read object made slim (see `memo::slim`) without copying it.
pub(super) fn slim_value(mut live: Value) -> serde_json::Result<DynamicObject> {
    let crd = live.get("kind").and_then(Value::as_str) == Some("CustomResourceDefinition");
    if let Some(map) = live.as_object_mut() {
        if crd {
            map.remove("spec");
        }
        if let Some(meta) = map.get_mut("metadata").and_then(Value::as_object_mut) {
            meta.remove("managedFields");
        }
    }
    serde_json::from_value(live)
}

fn requests(resolved: &Resolved, desired: &DynamicObject) -> Request {
    let namespace = desired
        .metadata
        .namespace
        .as_deref()
        .filter(|_| resolved.namespaced);
    Request::new(DynamicObject::url_path(&resolved.resource, namespace))
}

fn name(desired: &DynamicObject) -> &str {
    desired.metadata.name.as_deref().unwrap_or("")
}

fn is_crd(o: &DynamicObject) -> bool {
    kind(o) == "CustomResourceDefinition"
}

/// An object from its JSON text, without `metadata.managedFields` and, for
/// a CRD (`crd`), without `spec`; those are skipped, never built.
pub(super) fn parse(text: &str, crd: bool) -> serde_json::Result<DynamicObject> {
    let mut de = serde_json::Deserializer::from_str(text);
    let value = Skipping {
        skip: if crd { &["spec"] } else { &[] },
        nested: Some(("metadata", &["managedFields"])),
    }
    .deserialize(&mut de)?;
    de.end()?;
    serde_json::from_value(value)
}

/// A JSON object read with the keys `skip` left out, and in the object
/// under `nested.0` the keys `nested.1` left out.
#[derive(Clone, Copy)]
struct Skipping {
    skip: &'static [&'static str],
    nested: Option<(&'static str, &'static [&'static str])>,
}

impl<'de> DeserializeSeed<'de> for Skipping {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, de: D) -> Result<Value, D::Error> {
        de.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for Skipping {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut out = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            if self.skip.contains(&key.as_str()) {
                map.next_value::<IgnoredAny>()?;
                continue;
            }
            let value = match self.nested {
                Some((field, skip)) if field == key => {
                    map.next_value_seed(Skipping { skip, nested: None })?
                }
                _ => map.next_value::<Value>()?,
            };
            out.insert(key, value);
        }
        Ok(Value::Object(out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn field_ownership_is_left_out_and_the_rest_kept() {
        let text = json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "d", "namespace": "n", "resourceVersion": "7",
                         "managedFields": [{"manager": "m", "fieldsV1": {"f:spec": {}}}]},
            "spec": {"replicas": 2}
        })
        .to_string();
        let o = parse(&text, false).expect("parses");
        assert_eq!(o.metadata.managed_fields, None);
        assert_eq!(o.metadata.resource_version.as_deref(), Some("7"));
        assert_eq!(o.data["spec"]["replicas"], 2);
    }

    #[test]
    fn a_crd_is_read_without_its_spec_but_with_its_status() {
        let text = json!({
            "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": "xs.example.com", "managedFields": []},
            "spec": {"group": "example.com", "versions": [{"name": "v1", "schema": {}}]},
            "status": {"conditions": [{"type": "Established", "status": "True"}]}
        })
        .to_string();
        let o = parse(&text, true).expect("parses");
        assert!(o.data.get("spec").is_none());
        assert_eq!(o.data["status"]["conditions"][0]["type"], "Established");
        assert_eq!(o.metadata.name.as_deref(), Some("xs.example.com"));
    }

    #[test]
    fn text_that_is_not_one_object_is_an_error() {
        assert!(parse("[1]", false).is_err());
        assert!(parse("{\"kind\": \"A\"} trailing", false).is_err());
    }

    #[test]
    fn a_read_object_is_made_slim_in_place() {
        let live = json!({
            "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": "xs.example.com", "resourceVersion": "3",
                         "managedFields": [{"manager": "m"}]},
            "spec": {"group": "example.com"},
            "status": {"acceptedNames": {"kind": "X"}}
        });
        let o = slim_value(live).expect("an object");
        assert_eq!(o.metadata.managed_fields, None);
        assert!(o.data.get("spec").is_none());
        assert_eq!(o.data["status"]["acceptedNames"]["kind"], "X");
        assert_eq!(o.metadata.resource_version.as_deref(), Some("3"));
    }
}
