//! The Pod Security level a component's workloads need, by the Pod Security
//! Standards' checks of their pod templates, and whether a namespace's
//! `enforce` label admits them. A namespace stricter than its workloads
//! would have every pod refused by the API server long after the apply
//! "succeeded" (a Deployment that never becomes available, the reason only
//! in the ReplicaSet's events); the operator says so before it applies.

use std::collections::BTreeMap;
use std::fmt;

use kube::api::DynamicObject;
use serde_json::Value;

use crate::base::kinds::kind;

/// The namespace label Pod Security admission enforces.
pub const ENFORCE: &str = "pod-security.kubernetes.io/enforce";

/// Pod Security Standards levels, least to most permissive.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    Restricted,
    Baseline,
    Privileged,
}

impl Level {
    /// A label's value; `None` for one Pod Security admission does not know.
    pub fn parse(s: &str) -> Option<Level> {
        match s {
            "restricted" => Some(Level::Restricted),
            "baseline" => Some(Level::Baseline),
            "privileged" => Some(Level::Privileged),
            _ => None,
        }
    }
}

impl fmt::Display for Level {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Level::Restricted => "restricted",
            Level::Baseline => "baseline",
            Level::Privileged => "privileged",
        })
    }
}

/// What one workload needs, and the first reason it needs more than
/// `restricted`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Need {
    pub level: Level,
    /// `<Kind> <name>: <why>`, empty for `restricted`.
    pub why: String,
}

/// Capabilities the baseline level lets a container add.
const BASELINE_CAPABILITIES: &[&str] = &[
    "AUDIT_WRITE",
    "CHOWN",
    "DAC_OVERRIDE",
    "FOWNER",
    "FSETID",
    "KILL",
    "MKNOD",
    "NET_BIND_SERVICE",
    "SETFCAP",
    "SETGID",
    "SETPCAP",
    "SETUID",
    "SYS_CHROOT",
];

/// Volume types the restricted level admits.
const RESTRICTED_VOLUMES: &[&str] = &[
    "configMap",
    "csi",
    "downwardAPI",
    "emptyDir",
    "ephemeral",
    "persistentVolumeClaim",
    "projected",
    "secret",
];

/// A pod template's spec, for the workload kinds that have one.
fn pod_spec(o: &DynamicObject) -> Option<&Value> {
    match kind(o) {
        "Deployment" | "StatefulSet" | "DaemonSet" | "ReplicaSet" | "Job" => {
            o.data.pointer("/spec/template/spec")
        }
        "CronJob" => o.data.pointer("/spec/jobTemplate/spec/template/spec"),
        "Pod" => o.data.get("spec"),
        _ => None,
    }
}

/// The level a pod spec needs and why (the first check that raises it).
pub fn pod_level(pod: &Value) -> (Level, String) {
    let containers: Vec<&Value> = ["containers", "initContainers"]
        .iter()
        .flat_map(|l| pod[*l].as_array().into_iter().flatten())
        .collect();
    if let Some(why) = beyond_baseline(pod, &containers) {
        return (Level::Privileged, why);
    }
    if let Some(why) = beyond_restricted(pod, &containers) {
        return (Level::Baseline, why);
    }
    (Level::Restricted, String::new())
}

/// The first thing of a pod the baseline level forbids.
fn beyond_baseline(pod: &Value, containers: &[&Value]) -> Option<String> {
    for h in ["hostNetwork", "hostPID", "hostIPC"] {
        if pod[h].as_bool() == Some(true) {
            return Some(h.to_string());
        }
    }
    for v in pod["volumes"].as_array().into_iter().flatten() {
        if v.get("hostPath").is_some() {
            return Some(format!(
                "hostPath volume {}",
                v["name"].as_str().unwrap_or_default()
            ));
        }
    }
    let pod_seccomp = pod.pointer("/securityContext/seccompProfile/type");
    if pod_seccomp.and_then(Value::as_str) == Some("Unconfined") {
        return Some("seccomp Unconfined".into());
    }
    for c in containers {
        let name = c["name"].as_str().unwrap_or_default();
        let sc = &c["securityContext"];
        if sc["privileged"].as_bool() == Some(true) {
            return Some(format!("container {name} is privileged"));
        }
        for cap in sc
            .pointer("/capabilities/add")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
        {
            if !BASELINE_CAPABILITIES.contains(&cap) {
                return Some(format!("container {name} adds {cap}"));
            }
        }
        if c["ports"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|p| p["hostPort"].as_i64().is_some_and(|n| n != 0))
        {
            return Some(format!("container {name} uses a hostPort"));
        }
        if sc.pointer("/seccompProfile/type").and_then(Value::as_str) == Some("Unconfined") {
            return Some(format!("container {name}: seccomp Unconfined"));
        }
        if sc["procMount"].as_str() == Some("Unmasked") {
            return Some(format!("container {name}: procMount Unmasked"));
        }
    }
    None
}

/// The first thing of a pod the restricted level forbids.
fn beyond_restricted(pod: &Value, containers: &[&Value]) -> Option<String> {
    let pod_seccomp = pod.pointer("/securityContext/seccompProfile/type");
    for v in pod["volumes"].as_array().into_iter().flatten() {
        let types: Vec<&String> = v
            .as_object()
            .into_iter()
            .flat_map(|m| m.keys())
            .filter(|k| *k != "name")
            .collect();
        if let Some(t) = types
            .iter()
            .find(|t| !RESTRICTED_VOLUMES.contains(&t.as_str()))
        {
            return Some(format!("{t} volume"));
        }
    }
    let pod_non_root = pod
        .pointer("/securityContext/runAsNonRoot")
        .and_then(Value::as_bool);
    let pod_user = pod
        .pointer("/securityContext/runAsUser")
        .and_then(Value::as_i64);
    for c in containers {
        let name = c["name"].as_str().unwrap_or_default();
        let sc = &c["securityContext"];
        if sc["allowPrivilegeEscalation"].as_bool() != Some(false) {
            return Some(format!("container {name} may escalate privileges"));
        }
        let non_root = sc["runAsNonRoot"].as_bool().or(pod_non_root);
        let user = sc["runAsUser"].as_i64().or(pod_user);
        if non_root != Some(true) || user == Some(0) {
            return Some(format!("container {name} may run as root"));
        }
        let seccomp = sc
            .pointer("/seccompProfile/type")
            .or(pod_seccomp)
            .and_then(Value::as_str);
        if !matches!(seccomp, Some("RuntimeDefault" | "Localhost")) {
            return Some(format!("container {name} sets no seccomp profile"));
        }
        let caps = sc.get("capabilities");
        let drops_all = caps
            .and_then(|c| c["drop"].as_array())
            .is_some_and(|d| d.iter().any(|x| x == "ALL"));
        if !drops_all {
            return Some(format!("container {name} keeps capabilities"));
        }
        if caps
            .and_then(|c| c["add"].as_array())
            .is_some_and(|a| a.iter().any(|x| x != "NET_BIND_SERVICE"))
        {
            return Some(format!("container {name} adds a capability"));
        }
    }
    None
}

/// Per namespace, what the workloads among `objects` need (the most any
/// of them needs, and why).
pub fn needed(objects: &[DynamicObject]) -> BTreeMap<String, Need> {
    let mut out: BTreeMap<String, Need> = BTreeMap::new();
    for o in objects {
        let Some(pod) = pod_spec(o) else { continue };
        let (level, why) = pod_level(pod);
        let namespace = o.metadata.namespace.clone().unwrap_or_default();
        let entry = out.entry(namespace).or_insert(Need {
            level: Level::Restricted,
            why: String::new(),
        });
        if level > entry.level {
            entry.level = level;
            entry.why = format!(
                "{} {}: {why}",
                kind(o),
                o.metadata.name.as_deref().unwrap_or_default()
            );
        }
    }
    out
}

/// Why a namespace enforcing `enforced` (its label's value, if any) would
/// refuse pods that need `need`; `None` when it admits them (or enforces
/// nothing this code knows).
pub fn refusal(namespace: &str, enforced: Option<&str>, need: &Need) -> Option<String> {
    let level = Level::parse(enforced?)?;
    (level < need.level).then(|| {
        format!(
            "namespace {namespace} enforces Pod Security level {level} ({ENFORCE}), which refuses this component's pods: {} needs {}. Label the namespace {ENFORCE}={} (or install the component into a namespace that allows it); nothing was applied",
            need.why, need.level, need.level
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn workload(kind: &str, pod: Value) -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "apps/v1", "kind": kind,
            "metadata": {"name": "w", "namespace": "kubeflow"},
            "spec": {"template": {"spec": pod}},
        }))
        .expect("workload")
    }

    fn restricted_container() -> Value {
        json!({"name": "c", "securityContext": {
            "allowPrivilegeEscalation": false, "runAsNonRoot": true,
            "seccompProfile": {"type": "RuntimeDefault"},
            "capabilities": {"drop": ["ALL"]}}})
    }

    #[test]
    fn each_standard_check_raises_the_level_it_belongs_to() {
        let ok = json!({"containers": [restricted_container()],
            "volumes": [{"name": "v", "configMap": {"name": "m"}}]});
        assert_eq!(pod_level(&ok).0, Level::Restricted);
        let mut root = ok.clone();
        root["containers"][0]["securityContext"]["runAsNonRoot"] = json!(false);
        assert_eq!(
            pod_level(&root),
            (Level::Baseline, "container c may run as root".into())
        );
        let mut by_pod = ok.clone();
        by_pod["containers"][0]["securityContext"]
            .as_object_mut()
            .expect("map")
            .remove("runAsNonRoot");
        by_pod["securityContext"] = json!({"runAsNonRoot": true});
        assert_eq!(pod_level(&by_pod).0, Level::Restricted);
        let bare = json!({"containers": [{"name": "c"}]});
        assert_eq!(pod_level(&bare).0, Level::Baseline);
        let mut host = ok.clone();
        host["volumes"] = json!([{"name": "dev", "hostPath": {"path": "/dev"}}]);
        assert_eq!(
            pod_level(&host),
            (Level::Privileged, "hostPath volume dev".into())
        );
        let mut caps = ok.clone();
        caps["containers"][0]["securityContext"]["capabilities"]["add"] = json!(["NET_ADMIN"]);
        assert_eq!(pod_level(&caps).0, Level::Privileged);
        let mut chown = ok.clone();
        chown["containers"][0]["securityContext"]["capabilities"]["add"] = json!(["CHOWN"]);
        assert_eq!(pod_level(&chown).0, Level::Baseline);
        let mut net = ok.clone();
        net["hostNetwork"] = json!(true);
        assert_eq!(pod_level(&net).0, Level::Privileged);
    }

    #[test]
    fn a_namespace_stricter_than_its_workloads_is_named_with_the_fix() {
        let objects = [
            workload(
                "Deployment",
                json!({"containers": [restricted_container()]}),
            ),
            workload(
                "DaemonSet",
                json!({"containers": [restricted_container()],
                    "volumes": [{"name": "dev", "hostPath": {"path": "/dev"}}]}),
            ),
        ];
        let need = &needed(&objects)["kubeflow"];
        assert_eq!(need.level, Level::Privileged);
        assert_eq!(need.why, "DaemonSet w: hostPath volume dev");
        let message = refusal("kubeflow", Some("baseline"), need).expect("refused");
        assert!(
            message.contains("enforces Pod Security level baseline"),
            "{message}"
        );
        assert!(
            message.contains("pod-security.kubernetes.io/enforce=privileged"),
            "{message}"
        );
        assert_eq!(refusal("kubeflow", Some("privileged"), need), None);
        // No label, or one Pod Security admission does not know: not ours to judge.
        assert_eq!(refusal("kubeflow", None, need), None);
        assert_eq!(refusal("kubeflow", Some("strictest"), need), None);
        assert_eq!(
            refusal(
                "kubeflow",
                Some("restricted"),
                &Need {
                    level: Level::Restricted,
                    why: String::new()
                }
            ),
            None
        );
    }
}
