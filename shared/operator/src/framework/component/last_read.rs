//! What a CR's referenced ConfigMaps held when last read: when one goes
//! missing after an install, the component goes on being applied (and
//! repaired) with what it last held, `Degraded` saying so, instead of
//! stopping every repair of the component over one missing map. Kept in
//! memory only: after a restart a missing map is refused as before.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;

use kubeflow_api::Override;

/// A CR's namespace and name, and the ConfigMap's name.
type Owned = (String, String, String);

/// Per CR (namespace, name) and map name: the digests and the overrides
/// last read.
#[derive(Default)]
pub(super) struct LastRead {
    digests: Mutex<HashMap<Owned, BTreeMap<String, String>>>,
    overrides: Mutex<HashMap<Owned, Vec<Override>>>,
}

type Key<'a> = (&'a str, &'a str, &'a str);

fn owned((ns, cr, map): Key<'_>) -> Owned {
    (ns.to_string(), cr.to_string(), map.to_string())
}

impl LastRead {
    pub(super) fn keep_digests(&self, key: Key<'_>, digests: &BTreeMap<String, String>) {
        if let Ok(mut m) = self.digests.lock() {
            m.insert(owned(key), digests.clone());
        }
    }

    pub(super) fn digests(&self, key: Key<'_>) -> Option<BTreeMap<String, String>> {
        self.digests.lock().ok()?.get(&owned(key)).cloned()
    }

    pub(super) fn keep_overrides(&self, key: Key<'_>, overrides: &[Override]) {
        if let Ok(mut m) = self.overrides.lock() {
            m.insert(owned(key), overrides.to_vec());
        }
    }

    pub(super) fn overrides(&self, key: Key<'_>) -> Option<Vec<Override>> {
        self.overrides.lock().ok()?.get(&owned(key)).cloned()
    }

    /// The CR is gone: nothing of it is kept.
    pub(super) fn forget(&self, namespace: &str, cr: &str) {
        let mine = |k: &Owned| k.0 == namespace && k.1 == cr;
        if let Ok(mut m) = self.digests.lock() {
            m.retain(|k, _| !mine(k));
        }
        if let Ok(mut m) = self.overrides.lock() {
            m.retain(|k, _| !mine(k));
        }
    }

    /// How many CRs something is kept of (for tests).
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.digests.lock().map_or(0, |m| m.len()) + self.overrides.lock().map_or(0, |m| m.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_was_read_is_kept_per_cr_until_it_is_gone() {
        let l = LastRead::default();
        let d = BTreeMap::from([("a:1".to_string(), "sha256:00".to_string())]);
        l.keep_digests(("ns", "kf", "digests"), &d);
        l.keep_overrides(("ns", "kf", "ov"), &[]);
        l.keep_digests(("ns", "other", "digests"), &d);
        assert_eq!(l.digests(("ns", "kf", "digests")), Some(d));
        assert_eq!(l.digests(("ns", "kf", "elsewhere")), None);
        l.forget("ns", "kf");
        assert_eq!(l.len(), 1);
        assert_eq!(l.overrides(("ns", "kf", "ov")), None);
    }
}
