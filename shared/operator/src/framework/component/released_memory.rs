//! The released objects each CR's last reconcile reported. A reconcile can
//! start from a copy of the CR whose status predates the write that listed
//! a release (the watch had not delivered it yet); the release is
//! announced only once, by the apply that made it, so a list rebuilt from
//! that stale status alone would lose the entry for good. What this
//! process last reported is merged in; entries whose object is gone or
//! managed again are dropped as before. In memory only: after a restart
//! the status the operator reads is its own last write.

use std::collections::HashMap;
use std::sync::Mutex;

use kubeflow_api::ReleasedObject;

/// Per CR (namespace, name): the released list last reported.
#[derive(Default)]
pub(super) struct ReleasedMemory {
    map: Mutex<HashMap<(String, String), Vec<ReleasedObject>>>,
}

fn same(a: &ReleasedObject, b: &ReleasedObject) -> bool {
    a.kind == b.kind && a.namespace == b.namespace && a.name == b.name
}

impl ReleasedMemory {
    /// The status' entries and those last reported, each once (the status'
    /// copy first).
    pub(super) fn merged(
        &self,
        namespace: &str,
        cr: &str,
        status: &[ReleasedObject],
    ) -> Vec<ReleasedObject> {
        let mut out = status.to_vec();
        if let Ok(m) = self.map.lock() {
            let key = (namespace.to_string(), cr.to_string());
            for r in m.get(&key).into_iter().flatten() {
                if !out.iter().any(|o| same(o, r)) {
                    out.push(r.clone());
                }
            }
        }
        out
    }

    /// Keeps what this reconcile reports.
    pub(super) fn keep(&self, namespace: &str, cr: &str, released: &[ReleasedObject]) {
        if let Ok(mut m) = self.map.lock() {
            let key = (namespace.to_string(), cr.to_string());
            if released.is_empty() {
                m.remove(&key);
            } else {
                m.insert(key, released.to_vec());
            }
        }
    }

    /// The CR is gone: nothing of it is kept.
    pub(super) fn forget(&self, namespace: &str, cr: &str) {
        if let Ok(mut m) = self.map.lock() {
            m.remove(&(namespace.to_string(), cr.to_string()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(name: &str) -> ReleasedObject {
        ReleasedObject {
            kind: "CustomResourceDefinition.apiextensions.k8s.io".into(),
            namespace: String::new(),
            name: name.into(),
            message: "no longer in the bundle".into(),
        }
    }

    #[test]
    fn a_stale_status_does_not_lose_a_reported_release() {
        let m = ReleasedMemory::default();
        m.keep("ns", "kf", &[entry("tfjobs.kubeflow.org")]);
        // The watch's copy of the CR predates the write that listed it.
        let merged = m.merged("ns", "kf", &[]);
        assert_eq!(merged.len(), 1);
        assert_eq!(merged[0].name, "tfjobs.kubeflow.org");
        // Both copies agree: listed once.
        assert_eq!(m.merged("ns", "kf", &merged).len(), 1);
        // Another CR's list is its own.
        assert!(m.merged("ns", "other", &[]).is_empty());
    }

    #[test]
    fn an_empty_report_or_a_deleted_cr_leaves_nothing_kept() {
        let m = ReleasedMemory::default();
        m.keep("ns", "kf", &[entry("a")]);
        m.keep("ns", "kf", &[]);
        assert!(m.merged("ns", "kf", &[]).is_empty());
        m.keep("ns", "kf", &[entry("a")]);
        m.forget("ns", "kf");
        assert!(m.merged("ns", "kf", &[]).is_empty());
    }
}
