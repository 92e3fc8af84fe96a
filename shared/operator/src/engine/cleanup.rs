//! The finalizer's work: remove what garbage collection cannot (cluster-scoped
//! and cross-namespace members), custom resources before the webhooks and
//! Services that serve them, CRDs only when asked and no custom resource of
//! them remains, Namespaces never (whatever else lives in one, the chart's
//! Roles included, would go with it). Retained members lose their inventory
//! labels, so nothing holds them afterwards.

use std::collections::{BTreeMap, BTreeSet};

use kube::api::DynamicObject;
use kubeflow_api::ReleasedObject;

use crate::base::kinds::{self, kind};
use crate::engine::apply::{ApplyError, Engine, Member, describe};
use crate::engine::inventory::Inventory;

mod aggregation;

/// Deletions of one wave in flight at once.
const DELETES_AT_ONCE: usize = 8;

/// What a cleanup pass left.
#[derive(Debug, Default)]
pub struct CleanupOutcome {
    /// Members deleted in this pass.
    pub deleted: Vec<String>,
    /// Members still present (deletion in progress), to wait for.
    pub remaining: Vec<String>,
    /// Members kept on purpose, and why.
    pub retained: Vec<String>,
    /// The same members, each with what it is kept for: a pass releases
    /// them (no inventory label left), so a later pass no longer lists
    /// them and the caller must remember them to say what was kept.
    pub kept: Vec<ReleasedObject>,
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
    // The parent's own namespace may be going with it: the namespace
    // controller removes the operator's Role there before the parent's
    // finalizer runs. Its members there have the parent as owner.
    let members = engine
        .list_members_but(inv, group_kinds, Some(&inv.parent_namespace))
        .await?;
    let own_crds = crd_names(&members);
    // Within its wave, an aggregated ClusterRole waits for its sources; and
    // none is left aggregating while anything is deleted (see aggregation).
    let aggregated = if members.iter().any(|m| kind(&m.object) == "ClusterRole") {
        aggregation::levels(engine, inv).await?
    } else {
        BTreeMap::new()
    };
    let disarmed: Vec<String> = members
        .iter()
        .filter(|m| kind(&m.object) == "ClusterRole" && !retain(&m.object))
        .filter_map(|m| m.object.metadata.name.clone())
        .filter(|n| aggregated.contains_key(n))
        .collect();
    aggregation::disarm(engine, &disarmed).await;
    let waves = waves(&members, &aggregated, &own_crds);
    let mut out = CleanupOutcome::default();
    for (_, wave) in waves {
        let (mut pending, doomed) = sort_wave(engine, wave, retain, delete_crds, &mut out).await?;
        // One wave's deletions side by side: each is one request the
        // server answers on its own, and one after another they took
        // seconds per object on a loaded API server (70 of Notebooks' in 28 s).
        let mut deleted: Vec<Result<(), ApplyError>> = Vec::with_capacity(doomed.len());
        for chunk in doomed.chunks(DELETES_AT_ONCE) {
            deleted.extend(futures::future::join_all(chunk.iter().map(|m| engine.delete(m))).await);
        }
        for (m, result) in doomed.iter().zip(deleted) {
            result?;
            let name = describe(&m.object);
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

/// The members in their deletion waves (by kind, then, for aggregated
/// ClusterRoles, by aggregation level), in order.
fn waves<'a>(
    members: &'a [Member],
    aggregated: &BTreeMap<String, u8>,
    own_crds: &BTreeSet<String>,
) -> BTreeMap<(u8, u8), Vec<&'a Member>> {
    let mut waves: BTreeMap<(u8, u8), Vec<&Member>> = BTreeMap::new();
    for m in members {
        let level = match kind(&m.object) {
            "ClusterRole" => m
                .object
                .metadata
                .name
                .as_ref()
                .and_then(|n| aggregated.get(n))
                .copied()
                .unwrap_or(0),
            _ => 0,
        };
        waves
            .entry((
                kinds::delete_wave(&m.object, is_own_custom(m, own_crds)),
                level,
            ))
            .or_default()
            .push(m);
    }
    waves
}

/// Sorts one wave: what is being deleted already (pending, named with who
/// holds it), what is kept (released, with why), and what is to be deleted.
async fn sort_wave<'a>(
    engine: &Engine,
    wave: Vec<&'a Member>,
    retain: &(dyn Fn(&DynamicObject) -> bool + Send + Sync),
    delete_crds: bool,
    out: &mut CleanupOutcome,
) -> Result<(bool, Vec<&'a Member>), ApplyError> {
    let mut pending = false;
    let mut doomed: Vec<&Member> = Vec::new();
    for m in wave {
        let name = describe(&m.object);
        if m.object.metadata.deletion_timestamp.is_some() {
            // Who holds it: someone else's finalizer a person may have
            // to look at.
            let held_by = m.object.metadata.finalizers.clone().unwrap_or_default();
            out.remaining.push(if held_by.is_empty() {
                name
            } else {
                format!("{name} (held by finalizers {})", held_by.join(", "))
            });
            pending = true;
            continue;
        }
        let is_crd = kind(&m.object) == "CustomResourceDefinition";
        let is_namespace = kind(&m.object) == "Namespace";
        if (is_crd && !delete_crds) || is_namespace || (!is_crd && retain(&m.object)) {
            engine.release(m).await?;
            out.retained.push(name);
            out.kept.push(kept_entry(&m.object, why_kept(&m.object)));
            continue;
        }
        if is_crd && let Some(n) = engine.crd_in_use(&m.object).await? {
            engine.release(m).await?;
            out.retained
                .push(format!("{name} ({n} custom resources remain)"));
            let why = format!("{n} custom resources of it remain: delete them, then the CRD");
            out.kept.push(kept_entry(&m.object, why));
            continue;
        }
        doomed.push(m);
    }
    Ok((pending, doomed))
}

/// The names of the CRDs among the members. Members are listed as metadata
/// (a CRD's schema is megabytes), so a CRD is known by its name,
/// `<plural>.<group>`, not by its spec: reading the kind from a spec that
/// was never fetched put every custom resource in the same wave as its
/// controller's RBAC, and a runtime that controller holds with a finalizer
/// (Trainer's `resource-in-use`) waited for ever.
fn crd_names(members: &[Member]) -> BTreeSet<String> {
    members
        .iter()
        .filter(|m| kind(&m.object) == "CustomResourceDefinition")
        .filter_map(|m| m.object.metadata.name.clone())
        .collect()
}

/// Whether a member is a custom resource of one of the members' CRDs.
fn is_own_custom(member: &Member, crds: &BTreeSet<String>) -> bool {
    let r = &member.resolved.resource;
    !r.group.is_empty() && crds.contains(&format!("{}.{}", r.plural, r.group))
}

/// A kept member as the status lists it.
fn kept_entry(obj: &DynamicObject, message: String) -> ReleasedObject {
    ReleasedObject {
        kind: kinds::group_kind(obj),
        namespace: obj.metadata.namespace.clone().unwrap_or_default(),
        name: obj.metadata.name.clone().unwrap_or_default(),
        message,
    }
}

/// Why removal kept a member, and what a person does with it.
pub fn why_kept(obj: &DynamicObject) -> String {
    match kind(obj) {
        "CustomResourceDefinition" => "kept on removal: deleting a CRD deletes every object of its kind (crdPolicy Delete removes it once none is left)".into(),
        "Namespace" => "kept on removal: namespaces are never deleted (whatever else lives there would go with them)".into(),
        "PersistentVolumeClaim" => "kept on removal with its data (volumePolicy Retain): delete it when the data is no longer needed".into(),
        "Secret" => "kept on removal: it opens a kept database (volumePolicy Retain); delete it with that data".into(),
        _ => "kept on removal (the component's retention policy)".into(),
    }
}

/// Deletes `name` (in the background) if it exists: whether something was
/// deleted. For what a component's programs make at run time, which may or
/// may not be there when the component goes.
pub async fn delete_if_present<K>(api: &kube::Api<K>, name: &str) -> Result<bool, kube::Error>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    match api
        .delete(name, &kube::api::DeleteParams::background())
        .await
    {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(false),
        Err(e) => Err(e),
    }
}

/// [`delete_if_present`] for an object in the parent's own namespace. A
/// refusal there means that namespace is being deleted: the namespace
/// controller removes the operator's Role before the parent's finalizer
/// runs (the same reason [`cleanup`] leaves the parent's namespace to
/// garbage collection), and the object goes with the namespace. Failing
/// would hold the finalizer, and so the namespace, for ever.
pub async fn delete_in_parent_namespace_if_present<K>(
    api: &kube::Api<K>,
    name: &str,
) -> Result<bool, kube::Error>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    match delete_if_present(api, name).await {
        Err(kube::Error::Api(e)) if e.code == 403 => {
            tracing::warn!(name, message = %e.message, "not allowed to delete in the parent's namespace: left to the namespace's deletion");
            Ok(false)
        }
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::discovery::Resolved;
    use kube::api::{ApiResource, GroupVersionKind};

    /// A member as the metadata list gives it: no spec.
    fn member(group: &str, kind: &str, plural: &str, name: &str) -> Member {
        let gvk = GroupVersionKind::gvk(group, "v1", kind);
        let resource = ApiResource::from_gvk_with_plural(&gvk, plural);
        let mut object = DynamicObject::new(name, &resource);
        object.data = serde_json::Value::Null;
        Member {
            object,
            resolved: Resolved {
                resource,
                namespaced: false,
            },
        }
    }

    #[test]
    fn custom_resources_of_the_members_crds_go_first_known_by_the_crds_names() {
        let members = vec![
            member(
                "apiextensions.k8s.io",
                "CustomResourceDefinition",
                "customresourcedefinitions",
                "clustertrainingruntimes.trainer.kubeflow.org",
            ),
            member(
                "trainer.kubeflow.org",
                "ClusterTrainingRuntime",
                "clustertrainingruntimes",
                "torch-distributed",
            ),
            member(
                "rbac.authorization.k8s.io",
                "ClusterRole",
                "clusterroles",
                "kubeflow-trainer-controller-manager",
            ),
            // Another component's kind: its CRD is not a member here.
            member("jobset.x-k8s.io", "JobSet", "jobsets", "j"),
            member("", "ServiceAccount", "serviceaccounts", "sa"),
        ];
        let crds = crd_names(&members);
        let waves: Vec<u8> = members
            .iter()
            .map(|m| kinds::delete_wave(&m.object, is_own_custom(m, &crds)))
            .collect();
        assert_eq!(waves, vec![5, 0, 3, 3, 3]);
    }
}
