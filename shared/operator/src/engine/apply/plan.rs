//! Planning an apply: the rendered objects made ready to send, the live state
//! read (resolve and GET, concurrently), and the pure decisions over both:
//! who holds what, whether the cluster scope must be claimed, what must be
//! written and why, what to dry-run first, which kinds the inventory lists.

use std::collections::{BTreeMap, BTreeSet};

use futures::{StreamExt, TryStreamExt, stream};
use kube::api::DynamicObject;
use serde_json::Value;

use super::fields::{
    drop_foreign_fields, foreign_meaning_labels, keep_grown_volume, skip_reconcile, with_value,
};
use super::{ApplyError, ApplyRequest, CONCURRENCY, Engine, ObjectKey, describe, diff, responses};
use crate::base::kinds::{self, kind};
use crate::base::labels;
use crate::engine::discovery::Resolved;
use crate::engine::inventory;

/// One object to apply: what we want, its kind as served, what is there.
pub(super) struct Planned {
    pub(super) desired: DynamicObject,
    /// None while the kind is not served (its CRD comes in an earlier wave).
    pub(super) resolved: Option<Resolved>,
    pub(super) live: Option<DynamicObject>,
    /// A hash of the desired object (see `memo`).
    pub(super) hash: u64,
    /// Live is the engine's own verified copy: the object has not changed
    /// since the engine last checked it, so it is neither read nor compared.
    pub(super) unchanged: bool,
    /// This desired state was applied before: creating it anew needs no dry run.
    pub(super) proven: bool,
    /// Why the live object must be written, decided when it was read (see
    /// `diff`); None: it need not be, or it was not read.
    pub(super) why: Option<diff::Why>,
    /// A CRD whose only difference from live is in the labels every member
    /// carries (one being adopted again after a release): the engine's own
    /// label values cannot make the server refuse it, so it needs no dry
    /// run, which would cost the server as much as the write (3 to 5 s of
    /// CPU for KServe's 780 KB CRDs).
    pub(super) labels_only: bool,
    /// Fields another manager added where the object is enforced whole
    /// (see `whole`), as JSON pointers into the live object read, removed
    /// before the object is written.
    pub(super) remove: Vec<String>,
}

impl Planned {
    pub(super) fn key(&self) -> ObjectKey {
        ObjectKey::of(&self.desired)
    }
}

/// What the engine decided to do with the objects that exist.
#[derive(Default)]
pub(super) struct Decisions {
    /// Why each existing object must be written; absent: it need not be.
    pub(super) why: BTreeMap<ObjectKey, diff::Why>,
    /// Objects whose live state refuses the desired one: delete and create
    /// anew (with the API server's refusal).
    pub(super) recreate: BTreeMap<ObjectKey, String>,
    /// Objects whose live state refuses the desired one and that are kept
    /// as they are (see `recreation`): not written.
    pub(super) held: BTreeMap<ObjectKey, super::Held>,
}

impl Decisions {
    /// Whether the object is written: it is missing, or it differs (and is
    /// not held as it is).
    pub(super) fn needs_write(&self, p: &Planned) -> bool {
        let key = p.key();
        p.live.is_none() || (self.why.contains_key(&key) && !self.held.contains_key(&key))
    }
}

/// Makes rendered objects ready to send: fields left to other controllers
/// dropped, values in the form the API server stores, no namespace on
/// cluster-scoped objects, the inventory's labels, and the parent as owner of
/// what lives in its namespace (unless retained: garbage collection would
/// take it).
pub(super) fn prepare(
    objects: &mut [DynamicObject],
    req: &ApplyRequest<'_>,
    member_labels: &BTreeMap<String, String>,
) {
    let cluster_custom = kinds::cluster_scoped_custom_kinds(objects);
    for obj in objects.iter_mut() {
        drop_foreign_fields(obj);
        diff::as_stored(obj);
        if kinds::is_cluster_scoped(obj, &cluster_custom) {
            obj.metadata.namespace = None;
        }
        obj.metadata
            .labels
            .get_or_insert_with(BTreeMap::new)
            .extend(member_labels.clone());
        let same_ns =
            obj.metadata.namespace.as_deref() == Some(req.inventory.parent_namespace.as_str());
        if same_ns && !(req.retain)(obj) {
            obj.metadata.owner_references = req.owner.clone().map(|o| vec![o]);
        }
    }
}

impl Engine {
    /// Resolves each object's kind and reads its live state, concurrently;
    /// an object the watches show unchanged since the engine verified it is
    /// not read again. Kinds defined by CRDs of this very bundle may not be
    /// served yet.
    pub(super) async fn read(
        &self,
        objects: Vec<DynamicObject>,
    ) -> Result<Vec<Planned>, ApplyError> {
        stream::iter(objects.into_iter().map(|mut desired| async move {
            let key = ObjectKey::of(&desired);
            let hash = super::memo::hash(&desired);
            let proven = self.memo.proven(&key, hash);
            let resolved = self.resolver.resolve(&self.client, &desired).await.ok();
            let seen = self.index.as_ref().and_then(|i| i.resource_version(&key));
            let known = self.memo.unchanged(&key, hash, seen.as_deref());
            let unchanged = known.is_some();
            // The write decision is made as soon as an object is read, and
            // only its slim copy is kept: a CRD-heavy bundle's live schemas
            // would otherwise all be in memory at once.
            let (live, why, remove, labels_only) = match (&resolved, known) {
                (_, Some(known)) => (Some(known), None, Vec::new(), false),
                (Some(r), None) => match self.read_live(r, &desired).await? {
                    Some(live) => {
                        keep_grown_volume(&mut desired, &live);
                        let (why, remove) = with_value(&mut desired, |d| {
                            (
                                diff::write_reason(d, &live, &self.manager),
                                super::whole::removals(&live, d, &self.manager),
                            )
                        });
                        let labels_only = why.is_some()
                            && remove.is_empty()
                            && kind(&desired) == "CustomResourceDefinition"
                            && same_but_member_labels(&desired, &live, &self.manager);
                        // A field someone added where the object's meaning is
                        // its whole content is drift though ours agree.
                        let why = why.or_else(|| {
                            (!remove.is_empty()).then(|| {
                                format!("fields another manager added: {}", remove.join(", "))
                            })
                        });
                        let slim = responses::slim_value(live).map_err(|e| ApplyError::Api {
                            verb: "read",
                            object: describe(&desired),
                            source: kube::Error::SerdeError(e),
                        })?;
                        // A label that changes the object's meaning, added by
                        // someone else, is drift though the fields we set agree.
                        let why = why.or_else(|| {
                            let foreign = foreign_meaning_labels(&desired, &slim);
                            (!foreign.is_empty())
                                .then(|| format!("unwanted label {}", foreign.join(", ")))
                        });
                        // An object opted out of repair has no reason to be written.
                        let why = why.filter(|_| !skip_reconcile(&slim));
                        (Some(slim), why, remove, labels_only)
                    }
                    None => (None, None, Vec::new(), false),
                },
                (None, None) => (None, None, Vec::new(), false),
            };
            Ok::<_, ApplyError>(Planned {
                desired,
                resolved,
                live,
                hash,
                unchanged,
                proven,
                why,
                labels_only,
                remove,
            })
        }))
        .buffered(CONCURRENCY)
        .try_collect()
        .await
    }

    /// The live object as one JSON tree (no typed copy beside it).
    pub(super) async fn read_live(
        &self,
        resolved: &Resolved,
        obj: &DynamicObject,
    ) -> Result<Option<Value>, ApplyError> {
        responses::read(&self.client, resolved, obj)
            .await
            .map_err(|source| ApplyError::Api {
                verb: "get",
                object: describe(obj),
                source,
            })
    }

    pub(super) async fn get_live(
        &self,
        resolved: &Resolved,
        obj: &DynamicObject,
    ) -> Result<Option<DynamicObject>, ApplyError> {
        let name = obj.metadata.name.as_deref().unwrap_or("");
        self.api(resolved, obj.metadata.namespace.as_deref())
            .get_opt(name)
            .await
            .map_err(|source| ApplyError::Api {
                verb: "get",
                object: describe(obj),
                source,
            })
    }
}

/// A Namespace that exists and is not ours is someone else's (the chart's,
/// a person's): it is used, never adopted.
pub(super) fn drop_foreign_namespaces(planned: &mut Vec<Planned>) {
    planned.retain(|p| {
        !(kind(&p.desired) == "Namespace"
            && p.live
                .as_ref()
                .is_some_and(|l| inventory::holder(l).is_none()))
    });
}

/// Whether any object lies outside the parent's namespace: then the
/// component's cluster scope must be claimed first.
pub(super) fn reaches_out(planned: &[Planned], parent_namespace: &str) -> bool {
    planned
        .iter()
        .any(|p| p.desired.metadata.namespace.as_deref() != Some(parent_namespace))
}

/// Why each existing object must be written (see `diff`, decided as each
/// was read); objects opted out of repair are not.
pub(super) fn write_reasons(planned: &[Planned]) -> BTreeMap<ObjectKey, diff::Why> {
    planned
        .iter()
        .filter_map(|p| Some((p.key(), p.why.clone()?)))
        .collect()
}

/// Whether `desired` asks nothing of `live` beyond the labels every member
/// carries.
fn same_but_member_labels(desired: &DynamicObject, live: &Value, manager: &str) -> bool {
    let mut bare = desired.clone();
    if let Some(l) = bare.metadata.labels.as_mut() {
        for key in inventory::MEMBER_LABEL_KEYS {
            l.remove(key);
        }
    }
    with_value(&mut bare, |d| diff::write_reason(d, live, manager)).is_none()
}

/// The writes to dry-run before any is made: those whose kind is served,
/// except objects in a namespace this apply creates (not there to dry-run
/// in) and custom resources whose CRD this apply writes (the server would
/// judge them by the schema they are about to leave: an upgrade's new
/// fields would be refused).
pub(super) fn to_dry_run<'a>(planned: &'a [Planned], decisions: &Decisions) -> Vec<&'a Planned> {
    let new_namespaces: BTreeSet<String> = planned
        .iter()
        .filter(|p| kind(&p.desired) == "Namespace" && p.live.is_none())
        .filter_map(|p| p.desired.metadata.name.clone())
        .collect();
    let changing = changing_custom_kinds(planned, decisions);
    planned
        .iter()
        .filter(|p| p.resolved.is_some() && decisions.needs_write(p))
        .filter(|p| !changing.contains(&kinds::group_kind(&p.desired)))
        // Putting back a deleted object whose desired state was accepted
        // before needs no dry run; an edited one still does, since its live
        // state may refuse the desired one (then it is recreated).
        .filter(|p| !(p.proven && p.live.is_none()))
        .filter(|p| !p.labels_only)
        .filter(|p| {
            !p.desired
                .metadata
                .namespace
                .as_ref()
                .is_some_and(|ns| new_namespaces.contains(ns))
        })
        .collect()
}

/// The kinds (`Kind.group`) defined by CRDs this apply creates or changes.
pub(super) fn changing_custom_kinds(
    planned: &[Planned],
    decisions: &Decisions,
) -> BTreeSet<String> {
    planned
        .iter()
        .filter(|p| kind(&p.desired) == "CustomResourceDefinition" && decisions.needs_write(p))
        .filter_map(|p| {
            let spec = p.desired.data.get("spec")?;
            let group = spec.get("group")?.as_str()?;
            let kind = spec.pointer("/names/kind")?.as_str()?;
            Some(kinds::group_kind_of(group, kind))
        })
        .collect()
}

/// The inventory's group-kinds: before this apply (the parent's annotation)
/// and in it. Members of both are listed for the prune.
pub(super) struct GroupKinds {
    pub(super) old: BTreeSet<String>,
    pub(super) new: BTreeSet<String>,
}

impl GroupKinds {
    pub(super) fn of(planned: &[Planned], parent_annotations: &BTreeMap<String, String>) -> Self {
        GroupKinds {
            new: planned
                .iter()
                .map(|p| kinds::group_kind(&p.desired))
                .collect(),
            old: inventory::parse_group_kinds(parent_annotations.get(labels::APPLYSET_GROUP_KINDS))
                .into_iter()
                .collect(),
        }
    }

    pub(super) fn union(&self) -> BTreeSet<String> {
        self.old.union(&self.new).cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn crd(labels: Value, spec: Value) -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": "things.example.com", "labels": labels}, "spec": spec,
        }))
        .expect("crd")
    }

    #[test]
    fn a_released_crd_adopted_again_differs_only_in_member_labels() {
        let spec = json!({"group": "example.com", "scope": "Namespaced"});
        let desired = crd(
            json!({"applyset.kubernetes.io/part-of": "applyset-x", "components.kubeflow.org/component": "serving", "app": "x"}),
            spec.clone(),
        );
        let released = json!({
            "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": "things.example.com", "labels": {"app": "x"}},
            "spec": spec,
        });
        assert!(same_but_member_labels(&desired, &released, "m"));
        // A label of the bundle's, or the spec, still needs its dry run.
        let other_label = json!({
            "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": "things.example.com", "labels": {}},
            "spec": {"group": "example.com", "scope": "Namespaced"},
        });
        assert!(!same_but_member_labels(&desired, &other_label, "m"));
        let other_spec = json!({
            "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": "things.example.com", "labels": {"app": "x"}},
            "spec": {"group": "example.com", "scope": "Cluster"},
        });
        assert!(!same_but_member_labels(&desired, &other_spec, "m"));
    }
}
