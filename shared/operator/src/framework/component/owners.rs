//! Which CR each managed object belongs to, as the operator applied it.
//! A watch event is mapped to its CR by the object's owner labels, and also
//! by this map: an object whose owner labels someone edited (to point
//! elsewhere) still brings a reconcile of the CR that applied it, which
//! puts the labels back with whatever else was changed. Without it the
//! edit went unrepaired until something else touched the CR.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::base::kinds::ObjectKey;

/// The CR (namespace, name) each applied object belongs to.
#[derive(Clone, Default)]
pub(super) struct Owners {
    map: Arc<Mutex<HashMap<ObjectKey, (String, String)>>>,
}

impl Owners {
    /// Records that the CR `namespace/name` applied `objects`.
    pub(super) fn record(
        &self,
        namespace: &str,
        name: &str,
        objects: impl IntoIterator<Item = ObjectKey>,
    ) {
        if let Ok(mut m) = self.map.lock() {
            for key in objects {
                m.insert(key, (namespace.to_string(), name.to_string()));
            }
        }
    }

    /// Forgets the CR `namespace/name` (it is gone).
    pub(super) fn forget(&self, namespace: &str, name: &str) {
        if let Ok(mut m) = self.map.lock() {
            m.retain(|_, (ns, n)| !(ns == namespace && n == name));
        }
    }

    /// The CR that applied the object `key`, if one did.
    pub(super) fn of(&self, key: &ObjectKey) -> Option<(String, String)> {
        self.map.lock().ok()?.get(key).cloned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(name: &str) -> ObjectKey {
        ObjectKey {
            group_kind: "Deployment.apps".into(),
            namespace: "kubeflow".into(),
            name: name.into(),
        }
    }

    #[test]
    fn objects_map_to_the_cr_that_applied_them_until_it_is_forgotten() {
        let owners = Owners::default();
        owners.record("kubeflow", "a", [key("x"), key("y")]);
        owners.record("team", "b", [key("z")]);
        assert_eq!(owners.of(&key("x")), Some(("kubeflow".into(), "a".into())));
        owners.forget("kubeflow", "a");
        assert_eq!(owners.of(&key("x")), None);
        assert_eq!(owners.of(&key("z")), Some(("team".into(), "b".into())));
    }
}
