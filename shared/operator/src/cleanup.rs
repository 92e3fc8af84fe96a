//! The finalizer's work: remove what garbage collection cannot (cluster-scoped
//! and cross-namespace members), custom resources before the webhooks and
//! Services that serve them, CRDs only when asked and no custom resource of
//! them remains. Retained members lose their inventory labels, so nothing
//! holds them afterwards.

use std::collections::{BTreeMap, BTreeSet};

use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams};
use serde_json::json;

use crate::apply::{ApplyError, Engine, Member, describe};
use crate::inventory::Inventory;
use crate::kinds::{self, kind};
use crate::labels;

/// What a cleanup pass left.
#[derive(Debug, Default)]
pub struct CleanupOutcome {
    /// Members deleted in this pass.
    pub deleted: Vec<String>,
    /// Members still present (deletion in progress), to wait for.
    pub remaining: Vec<String>,
    /// Members kept on purpose, and why.
    pub retained: Vec<String>,
}

impl CleanupOutcome {
    /// Whether the finalizer may go.
    pub fn done(&self) -> bool {
        self.remaining.is_empty()
    }
}

/// One cleanup pass over an inventory. `retain` keeps members; `delete_crds`
/// allows deleting CRDs that have no custom resources left.
pub async fn cleanup(
    engine: &Engine,
    inv: &Inventory,
    group_kinds: &BTreeSet<String>,
    retain: &(dyn Fn(&DynamicObject) -> bool + Send + Sync),
    delete_crds: bool,
) -> Result<CleanupOutcome, ApplyError> {
    let members = engine.list_members(inv, group_kinds).await?;
    let live_objects: Vec<DynamicObject> = members.iter().map(|m| m.object.clone()).collect();
    let custom = kinds::custom_kinds(&live_objects);
    let mut waves: BTreeMap<u8, Vec<&Member>> = BTreeMap::new();
    for m in &members {
        waves
            .entry(kinds::delete_wave(&m.object, &custom))
            .or_default()
            .push(m);
    }
    let mut out = CleanupOutcome::default();
    for (_, wave) in waves {
        let mut pending = false;
        for m in wave {
            let name = describe(&m.object);
            if m.object.metadata.deletion_timestamp.is_some() {
                out.remaining.push(name);
                pending = true;
                continue;
            }
            let is_crd = kind(&m.object) == "CustomResourceDefinition";
            if (is_crd && !delete_crds) || (!is_crd && retain(&m.object)) {
                release(engine, m).await?;
                out.retained.push(name);
                continue;
            }
            if is_crd && let Some(n) = crd_in_use(engine, &m.object).await? {
                release(engine, m).await?;
                out.retained
                    .push(format!("{name} ({n} custom resources remain)"));
                continue;
            }
            engine.delete(m).await?;
            out.deleted.push(name.clone());
            out.remaining.push(name);
            pending = true;
        }
        // Later waves wait until this one is gone: webhooks must outlive the
        // custom resources they admit.
        if pending {
            break;
        }
    }
    Ok(out)
}

/// Removes the inventory labels from a member that stays, so it is nobody's.
async fn release(engine: &Engine, m: &Member) -> Result<(), ApplyError> {
    let name = m.object.metadata.name.as_deref().unwrap_or("");
    let api: Api<DynamicObject> = match (&m.object.metadata.namespace, m.resolved.namespaced) {
        (Some(ns), true) => Api::namespaced_with(engine.client().clone(), ns, &m.resolved.resource),
        _ => Api::all_with(engine.client().clone(), &m.resolved.resource),
    };
    let mut remove = serde_json::Map::new();
    for key in [
        labels::APPLYSET_PART_OF,
        labels::OWNER_NAME,
        labels::OWNER_NAMESPACE,
        labels::INSTANCE,
    ] {
        remove.insert(key.to_string(), serde_json::Value::Null);
    }
    let patch = json!({"metadata": {"labels": remove, "ownerReferences": null}});
    api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map_err(|source| ApplyError::Api {
            verb: "release",
            object: describe(&m.object),
            source,
        })?;
    Ok(())
}

/// How many custom resources of a CRD exist (None when none do).
async fn crd_in_use(engine: &Engine, crd: &DynamicObject) -> Result<Option<usize>, ApplyError> {
    let (Some(group), Some(kind_name)) = (
        crd.data.pointer("/spec/group").and_then(|v| v.as_str()),
        crd.data
            .pointer("/spec/names/kind")
            .and_then(|v| v.as_str()),
    ) else {
        return Ok(None);
    };
    let Some(version) = crd
        .data
        .pointer("/spec/versions")
        .and_then(|v| v.as_array())
        .and_then(|vs| {
            vs.iter()
                .find(|v| v.get("served").and_then(|s| s.as_bool()) == Some(true))
        })
        .and_then(|v| v.get("name"))
        .and_then(|v| v.as_str())
    else {
        return Ok(None);
    };
    let gvk = kube::core::GroupVersionKind::gvk(group, version, kind_name);
    let Ok(resolved) = engine.resolver().resolve_gvk(engine.client(), &gvk).await else {
        return Ok(None);
    };
    let api: Api<DynamicObject> = Api::all_with(engine.client().clone(), &resolved.resource);
    let list = api
        .list_metadata(&ListParams::default().limit(100))
        .await
        .map_err(|source| ApplyError::Api {
            verb: "list",
            object: format!("{kind_name}.{group}"),
            source,
        })?;
    Ok(if list.items.is_empty() {
        None
    } else {
        Some(list.items.len())
    })
}
