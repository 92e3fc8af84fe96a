//! Readiness of managed objects: workloads available, CRDs Established, Jobs complete.

use kube::api::DynamicObject;
use kubeflow_api::WorkloadStatus;
use serde_json::Value;

use crate::kinds::kind;

fn int(obj: &DynamicObject, pointer: &str) -> i64 {
    obj.data
        .pointer(pointer)
        .and_then(Value::as_i64)
        .unwrap_or(0)
}

fn condition_true(obj: &DynamicObject, type_: &str) -> bool {
    obj.data
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .is_some_and(|cs| {
            cs.iter().any(|c| {
                c.get("type").and_then(Value::as_str) == Some(type_)
                    && c.get("status").and_then(Value::as_str) == Some("True")
            })
        })
}

/// Whether a CRD is Established.
pub fn crd_established(obj: &DynamicObject) -> bool {
    condition_true(obj, "Established")
}

/// Whether the workload controller has seen the latest spec.
fn observed(obj: &DynamicObject) -> bool {
    let generation = obj.metadata.generation.unwrap_or(0);
    int(obj, "/status/observedGeneration") >= generation
}

/// Readiness of a Deployment, StatefulSet or DaemonSet; None for other kinds.
pub fn workload(obj: &DynamicObject) -> Option<WorkloadStatus> {
    let (desired, ready, available) = match kind(obj) {
        "Deployment" => {
            let desired = obj
                .data
                .pointer("/spec/replicas")
                .and_then(Value::as_i64)
                .unwrap_or(1);
            let ready = int(obj, "/status/readyReplicas");
            let ok = observed(obj)
                && int(obj, "/status/updatedReplicas") >= desired
                && int(obj, "/status/availableReplicas") >= desired
                && int(obj, "/status/replicas") <= desired;
            (desired, ready, ok)
        }
        "StatefulSet" => {
            let desired = obj
                .data
                .pointer("/spec/replicas")
                .and_then(Value::as_i64)
                .unwrap_or(1);
            let ready = int(obj, "/status/readyReplicas");
            (
                desired,
                ready,
                observed(obj) && ready >= desired && int(obj, "/status/updatedReplicas") >= desired,
            )
        }
        "DaemonSet" => {
            let desired = int(obj, "/status/desiredNumberScheduled");
            let ready = int(obj, "/status/numberReady");
            let ok = observed(obj)
                && obj.data.pointer("/status").is_some()
                && ready >= desired
                && int(obj, "/status/updatedNumberScheduled") >= desired
                && int(obj, "/status/numberAvailable") >= desired;
            (desired, ready, ok)
        }
        _ => return None,
    };
    Some(WorkloadStatus {
        kind: kind(obj).to_string(),
        namespace: obj.metadata.namespace.clone().unwrap_or_default(),
        name: obj.metadata.name.clone().unwrap_or_default(),
        desired: i32::try_from(desired).unwrap_or(i32::MAX),
        ready: i32::try_from(ready).unwrap_or(i32::MAX),
        available,
    })
}

/// Summary of a set of live objects' health.
#[derive(Debug, Default)]
pub struct Health {
    /// Workload readiness.
    pub workloads: Vec<WorkloadStatus>,
    /// What is not ready yet, for a message.
    pub waiting: Vec<String>,
}

impl Health {
    /// Whether everything assessed is ready.
    pub fn ready(&self) -> bool {
        self.waiting.is_empty()
    }
}

/// Assesses workloads, CRDs and Jobs among `live`.
pub fn assess(live: &[DynamicObject]) -> Health {
    let mut h = Health::default();
    for obj in live {
        let name = obj.metadata.name.clone().unwrap_or_default();
        if let Some(w) = workload(obj) {
            if !w.available {
                h.waiting.push(format!(
                    "{} {} ({}/{} ready)",
                    w.kind, w.name, w.ready, w.desired
                ));
            }
            h.workloads.push(w);
        } else if kind(obj) == "CustomResourceDefinition" && !crd_established(obj) {
            h.waiting
                .push(format!("CustomResourceDefinition {name} (not Established)"));
        } else if kind(obj) == "Job" && !condition_true(obj, "Complete") {
            h.waiting.push(format!("Job {name} (not Complete)"));
        }
    }
    h.workloads
        .sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
    h
}
