//! Readiness of managed objects: workloads available, CRDs Established, Jobs complete.

use kube::api::DynamicObject;
use kubeflow_api::WorkloadStatus;
use serde_json::Value;

use crate::base::kinds::kind;

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
        problem: if available {
            None
        } else {
            workload_problem(obj)
        },
    })
}

/// What a workload's own conditions say is wrong: a ReplicaSet that cannot
/// create pods, or a rollout past its deadline.
fn workload_problem(obj: &DynamicObject) -> Option<String> {
    let conditions = obj.data.pointer("/status/conditions")?.as_array()?;
    let text = |c: &Value, k: &str| c.get(k).and_then(Value::as_str).unwrap_or("").to_string();
    conditions.iter().find_map(|c| {
        let (t, status, reason) = (text(c, "type"), text(c, "status"), text(c, "reason"));
        let failed = (t == "ReplicaFailure" && status == "True")
            || (t == "Progressing" && status == "False" && reason == "ProgressDeadlineExceeded");
        failed.then(|| {
            let why = if reason.is_empty() { t } else { reason };
            format!("{why}: {}", text(c, "message"))
        })
    })
}

/// Waiting reasons of pods' containers that mean they will not start by
/// themselves (image pull errors, crash loops, bad configuration).
const STUCK: &[&str] = &[
    "ImagePullBackOff",
    "ErrImagePull",
    "InvalidImageName",
    "CrashLoopBackOff",
    "CreateContainerConfigError",
    "CreateContainerError",
    "RunContainerError",
];

/// The first stuck container among a workload's pods, as "Reason: message (pod/container)".
pub fn pod_problem(pods: &[Value]) -> Option<String> {
    pods.iter().find_map(|pod| {
        let name = pod
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or("");
        ["initContainerStatuses", "containerStatuses"]
            .iter()
            .filter_map(|k| pod.pointer(&format!("/status/{k}"))?.as_array())
            .flatten()
            .find_map(|cs| {
                let waiting = cs.pointer("/state/waiting")?;
                let reason = waiting.get("reason")?.as_str()?;
                STUCK.contains(&reason).then(|| {
                    let message = waiting.get("message").and_then(Value::as_str).unwrap_or("");
                    let container = cs.get("name").and_then(Value::as_str).unwrap_or("");
                    format!("{reason}: {message} ({name}/{container})")
                })
            })
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
                h.waiting.push(match &w.problem {
                    Some(p) => format!(
                        "{} {} ({}/{} ready; {p})",
                        w.kind, w.name, w.ready, w.desired
                    ),
                    None => format!("{} {} ({}/{} ready)", w.kind, w.name, w.ready, w.desired),
                });
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(v: Value) -> DynamicObject {
        serde_json::from_value(v).expect("object")
    }

    #[test]
    fn workload_availability_table() {
        // (kind, generation, status, spec replicas, available)
        let cases = [
            (
                "Deployment",
                1,
                json!({"observedGeneration": 1, "replicas": 2, "updatedReplicas": 2, "availableReplicas": 2, "readyReplicas": 2}),
                2,
                true,
            ),
            (
                "Deployment",
                2,
                json!({"observedGeneration": 1, "replicas": 2, "updatedReplicas": 2, "availableReplicas": 2}),
                2,
                false,
            ),
            (
                "Deployment",
                1,
                json!({"observedGeneration": 1, "replicas": 3, "updatedReplicas": 2, "availableReplicas": 2}),
                2,
                false,
            ),
            (
                "Deployment",
                1,
                json!({"observedGeneration": 1, "replicas": 2, "updatedReplicas": 1, "availableReplicas": 2}),
                2,
                false,
            ),
            ("Deployment", 1, json!({"observedGeneration": 1}), 0, true),
            (
                "StatefulSet",
                1,
                json!({"observedGeneration": 1, "readyReplicas": 1, "updatedReplicas": 1}),
                1,
                true,
            ),
            (
                "StatefulSet",
                1,
                json!({"observedGeneration": 1, "readyReplicas": 0, "updatedReplicas": 1}),
                1,
                false,
            ),
            (
                "DaemonSet",
                1,
                json!({"observedGeneration": 1, "desiredNumberScheduled": 3, "numberReady": 3, "updatedNumberScheduled": 3, "numberAvailable": 3}),
                0,
                true,
            ),
            (
                "DaemonSet",
                1,
                json!({"observedGeneration": 1, "desiredNumberScheduled": 3, "numberReady": 3, "updatedNumberScheduled": 2, "numberAvailable": 3}),
                0,
                false,
            ),
            (
                "DaemonSet",
                1,
                json!({"observedGeneration": 1, "desiredNumberScheduled": 0, "numberReady": 0, "updatedNumberScheduled": 0, "numberAvailable": 0}),
                0,
                true,
            ),
        ];
        for (i, (kind, generation, status, replicas, available)) in cases.into_iter().enumerate() {
            let o = obj(json!({
                "apiVersion": "apps/v1", "kind": kind,
                "metadata": {"name": "w", "namespace": "ns", "generation": generation},
                "spec": {"replicas": replicas}, "status": status,
            }));
            let w = workload(&o).expect("a workload");
            assert_eq!(w.available, available, "case {i}: {kind} {o:?}");
        }
        let cm = obj(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}}));
        assert!(workload(&cm).is_none());
    }

    #[test]
    fn workloads_say_why_they_are_not_available() {
        let stuck = obj(json!({
            "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d", "namespace": "n", "generation": 1},
            "spec": {"replicas": 1},
            "status": {"observedGeneration": 1, "conditions": [
                {"type": "Available", "status": "False", "reason": "MinimumReplicasUnavailable"},
                {"type": "ReplicaFailure", "status": "True", "reason": "FailedCreate", "message": "exceeded quota"}]}
        }));
        let h = assess(&[stuck]);
        assert!(!h.ready());
        assert_eq!(
            h.workloads[0].problem.as_deref(),
            Some("FailedCreate: exceeded quota")
        );
        assert_eq!(
            h.waiting,
            vec!["Deployment d (0/1 ready; FailedCreate: exceeded quota)"]
        );

        let late = obj(json!({
            "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d", "generation": 2},
            "spec": {"replicas": 2},
            "status": {"observedGeneration": 2, "readyReplicas": 1, "conditions": [
                {"type": "Progressing", "status": "False", "reason": "ProgressDeadlineExceeded", "message": "too slow"}]}
        }));
        assert_eq!(
            workload(&late).and_then(|w| w.problem).as_deref(),
            Some("ProgressDeadlineExceeded: too slow")
        );

        let fine = obj(json!({
            "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d", "generation": 1},
            "spec": {"replicas": 1},
            "status": {"observedGeneration": 1, "replicas": 1, "updatedReplicas": 1, "readyReplicas": 1, "availableReplicas": 1}
        }));
        let w = workload(&fine).expect("workload");
        assert!(w.available && w.problem.is_none());
    }

    #[test]
    fn stuck_pods_are_named() {
        let pods = vec![
            json!({"metadata": {"name": "ok"}, "status": {"containerStatuses": [{"name": "c", "state": {"running": {}}}]}}),
            json!({"metadata": {"name": "p"}, "status": {"containerStatuses": [
                {"name": "app", "state": {"waiting": {"reason": "ImagePullBackOff", "message": "Back-off pulling image"}}}]}}),
        ];
        assert_eq!(
            pod_problem(&pods).as_deref(),
            Some("ImagePullBackOff: Back-off pulling image (p/app)")
        );
        let starting = vec![
            json!({"metadata": {"name": "q"}, "status": {"containerStatuses": [
            {"name": "c", "state": {"waiting": {"reason": "ContainerCreating"}}}]}}),
        ];
        assert_eq!(pod_problem(&starting), None, "starting is not stuck");
    }
}
