//! What the engine verified, so it need not read or check it again.
//!
//! After an apply, each object's desired state (a hash of the object sent)
//! is remembered with the resourceVersion the object had then and a slim
//! copy of it (for health and status). While the watches' index shows the
//! same resourceVersion and the rendered object hashes the same, the object
//! is as the engine left it: no read, no comparison. A deleted object whose
//! desired state was applied before is created without a dry run: dry runs
//! guard new input, and that repair only puts back what was accepted. Entries go stale after
//! `FRESH_FOR`, so the safety-net resync reads and checks everything anew.

use std::collections::{BTreeSet, HashMap};
use std::hash::{Hash, Hasher};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use kube::api::DynamicObject;

use super::ObjectKey;
use crate::base::kinds::kind;

/// How long a verification stands without a full read.
const FRESH_FOR: Duration = Duration::from_secs(300);

struct Verified {
    desired: u64,
    resource_version: String,
    live: DynamicObject,
    at: Instant,
}

/// The engine's memory of verified objects and of each inventory's last
/// pruned set.
#[derive(Default)]
pub(super) struct Memo {
    objects: Mutex<HashMap<ObjectKey, Verified>>,
    /// Per inventory id: the hash of the object set and group-kinds a prune
    /// last found complete.
    pruned_sets: Mutex<HashMap<String, (u64, Instant)>>,
}

impl Memo {
    /// The slim live copy, when the object is as the engine left it: the same
    /// desired state, and the index's resourceVersion the one verified.
    pub(super) fn unchanged(
        &self,
        key: &ObjectKey,
        desired: u64,
        resource_version: Option<&str>,
    ) -> Option<DynamicObject> {
        let rv = resource_version?;
        let objects = self.objects.lock().ok()?;
        let v = objects.get(key)?;
        (v.desired == desired && v.resource_version == rv && v.at.elapsed() < FRESH_FOR)
            .then(|| v.live.clone())
    }

    /// Whether this very desired state was applied before (recently).
    pub(super) fn proven(&self, key: &ObjectKey, desired: u64) -> bool {
        self.objects.lock().ok().is_some_and(|o| {
            o.get(key)
                .is_some_and(|v| v.desired == desired && v.at.elapsed() < FRESH_FOR)
        })
    }

    /// Remembers an object the engine read and checked, or wrote.
    pub(super) fn record(&self, key: ObjectKey, desired: u64, live: &DynamicObject) {
        let Some(rv) = live.metadata.resource_version.clone() else {
            return;
        };
        if let Ok(mut o) = self.objects.lock() {
            o.insert(
                key,
                Verified {
                    desired,
                    resource_version: rv,
                    live: slim(live),
                    at: Instant::now(),
                },
            );
        }
    }

    /// Forgets objects that went.
    pub(super) fn forget(&self, keys: &[ObjectKey]) {
        if let Ok(mut o) = self.objects.lock() {
            for k in keys {
                o.remove(k);
            }
        }
    }

    /// Whether a prune of `inventory` over this set is known to find nothing.
    pub(super) fn prune_settled(&self, inventory: &str, set: u64) -> bool {
        self.pruned_sets.lock().ok().is_some_and(|p| {
            p.get(inventory)
                .is_some_and(|(s, at)| *s == set && at.elapsed() < FRESH_FOR)
        })
    }

    /// Remembers that a prune over this set completed.
    pub(super) fn record_prune(&self, inventory: &str, set: u64) {
        if let Ok(mut p) = self.pruned_sets.lock() {
            p.insert(inventory.to_string(), (set, Instant::now()));
        }
    }
}

/// A hash of an object as it would be sent.
pub(super) fn hash(obj: &DynamicObject) -> u64 {
    let mut hasher = HashWriter(std::collections::hash_map::DefaultHasher::new());
    // Writing into a hasher cannot fail; a failure would only mean an
    // unhashable object, which then never matches a memo entry.
    if serde_json::to_writer(&mut hasher, obj).is_err() {
        return 0;
    }
    hasher.0.finish()
}

/// A hash of an applied set: its objects and its group-kinds.
pub(super) fn set_hash(keys: &BTreeSet<ObjectKey>, group_kinds: &BTreeSet<String>) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    keys.hash(&mut h);
    group_kinds.hash(&mut h);
    h.finish()
}

struct HashWriter(std::collections::hash_map::DefaultHasher);

impl std::io::Write for HashWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.write(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// What health checks and status need of a live object: without its field
/// ownership, and a CRD without its schema (its conditions are in status).
pub(super) fn slim(live: &DynamicObject) -> DynamicObject {
    let mut out = live.clone();
    out.metadata.managed_fields = None;
    if kind(&out) == "CustomResourceDefinition"
        && let Some(map) = out.data.as_object_mut()
    {
        map.remove("spec");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn object(rv: &str, replicas: i64) -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "d", "namespace": "n", "resourceVersion": rv,
                         "managedFields": [{"manager": "m"}]},
            "spec": {"replicas": replicas}
        }))
        .expect("object")
    }

    #[test]
    fn an_object_is_unchanged_only_at_the_verified_version_and_desired_state() {
        let memo = Memo::default();
        let live = object("7", 1);
        let key = ObjectKey::of(&live);
        let desired = hash(&object("", 1));
        assert!(
            memo.unchanged(&key, desired, Some("7")).is_none(),
            "nothing verified yet"
        );
        memo.record(key.clone(), desired, &live);
        let copy = memo.unchanged(&key, desired, Some("7")).expect("verified");
        assert!(copy.metadata.managed_fields.is_none(), "slim copy");
        assert!(
            memo.unchanged(&key, desired, Some("8")).is_none(),
            "changed since"
        );
        assert!(
            memo.unchanged(&key, desired, None).is_none(),
            "gone from the index"
        );
        let other = hash(&object("", 2));
        assert_ne!(desired, other);
        assert!(
            memo.unchanged(&key, other, Some("7")).is_none(),
            "new desired state"
        );
        assert!(memo.proven(&key, desired));
        assert!(!memo.proven(&key, other));
        memo.forget(std::slice::from_ref(&key));
        assert!(!memo.proven(&key, desired));
    }

    #[test]
    fn a_crd_is_kept_without_its_schema() {
        let crd: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": "a.b", "resourceVersion": "1"},
            "spec": {"group": "b"}, "status": {"conditions": []}
        }))
        .expect("crd");
        let s = slim(&crd);
        assert!(s.data.get("spec").is_none());
        assert!(s.data.get("status").is_some());
    }

    #[test]
    fn a_prune_is_settled_for_the_same_set_only() {
        let memo = Memo::default();
        let keys: BTreeSet<ObjectKey> = [ObjectKey::of(&object("1", 1))].into();
        let kinds: BTreeSet<String> = ["Deployment.apps".to_string()].into();
        let set = set_hash(&keys, &kinds);
        assert!(!memo.prune_settled("inv", set));
        memo.record_prune("inv", set);
        assert!(memo.prune_settled("inv", set));
        assert!(!memo.prune_settled("inv", set_hash(&BTreeSet::new(), &kinds)));
        assert!(!memo.prune_settled("other", set));
    }
}
