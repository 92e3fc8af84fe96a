//! OpenShift adaptations: no pinned UIDs or fsGroup (the restricted SCC
//! assigns them), and SecurityContextConstraints granted to ServiceAccounts
//! by RoleBinding to the `system:openshift:scc:<name>` ClusterRole.

use kube::api::DynamicObject;
use serde_json::{Value, json};

use crate::render::transform::pod_spec_mut;

/// Removes `runAsUser`, `runAsGroup` and `fsGroup` from pod and container security contexts.
pub fn unpin_ids(objects: &mut [DynamicObject]) {
    for obj in objects.iter_mut() {
        let Some(pod) = pod_spec_mut(obj) else {
            continue;
        };
        strip(
            pod.get_mut("securityContext"),
            &["runAsUser", "runAsGroup", "fsGroup"],
        );
        for list in ["containers", "initContainers"] {
            if let Some(Value::Array(cs)) = pod.get_mut(list) {
                for c in cs {
                    strip(c.get_mut("securityContext"), &["runAsUser", "runAsGroup"]);
                }
            }
        }
    }
}

fn strip(sc: Option<&mut Value>, keys: &[&str]) {
    if let Some(Value::Object(m)) = sc {
        for k in keys {
            m.remove(*k);
        }
    }
}

/// A RoleBinding granting the SCC `scc` to ServiceAccount `sa` in `namespace`.
pub fn scc_grant(namespace: &str, sa: &str, scc: &str) -> DynamicObject {
    let value = json!({
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": format!("{sa}-scc-{scc}"), "namespace": namespace},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": format!("system:openshift:scc:{scc}")},
        "subjects": [{"kind": "ServiceAccount", "name": sa, "namespace": namespace}],
    });
    // The literal above always has the fields DynamicObject needs.
    serde_json::from_value(value).unwrap_or_else(|_| DynamicObject {
        types: None,
        metadata: Default::default(),
        data: Value::Null,
    })
}
