//! What the bundles hold of each pinned kind, every version together: the
//! values the checks compare a write with.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::rbac::v1::PolicyRule;
use kube::api::DynamicObject;
use serde_json::Value;

use super::{Extra, WEBHOOK_CONFIGS, WORKLOADS, is_aggregation_label, rule_key};
use crate::base::kinds::kind;

pub(super) type Names = BTreeMap<String, BTreeSet<String>>;

pub(super) fn add(map: &mut Names, name: &str, value: String) {
    map.entry(name.to_string()).or_default().insert(value);
}

/// What the bundles hold of each pinned kind, every version together.
#[derive(Default)]
pub(super) struct Bundled {
    pub(super) cluster_roles: Names,
    pub(super) roles: Names,
    pub(super) selectors: BTreeSet<(String, BTreeMap<String, String>)>,
    pub(super) aggregation_labels: BTreeSet<String>,
    pub(super) cluster_binding_roles: Names,
    pub(super) cluster_binding_subjects: Names,
    pub(super) binding_roles: Names,
    pub(super) binding_subjects: Names,
    pub(super) service_accounts: BTreeSet<String>,
    /// Per resource, per configuration: "webhook service path".
    pub(super) webhooks: BTreeMap<&'static str, Names>,
    /// Per CRD: its conversion webhook's "service path", if it has one.
    pub(super) crds: Names,
    /// Per resource, per workload: its ServiceAccounts; its host features.
    pub(super) accounts: BTreeMap<&'static str, Names>,
    pub(super) features: BTreeMap<&'static str, Names>,
    /// Per resource, per workload: its containers' image repositories (no
    /// tag or digest), and the path each has under a mirror.
    pub(super) images: BTreeMap<&'static str, Names>,
    pub(super) image_paths: BTreeMap<&'static str, Names>,
}

pub(super) fn read(objects: &[DynamicObject], extra: &Extra<'_>) -> Bundled {
    let mut b = Bundled::default();
    b.cluster_roles
        .entry(extra.claim_role.to_string())
        .or_default();
    for r in WEBHOOK_CONFIGS {
        b.webhooks.entry(r).or_default();
    }
    for (_, r) in WORKLOADS {
        b.accounts.entry(r).or_default();
        b.features.entry(r).or_default();
        b.images.entry(r).or_default();
        b.image_paths.entry(r).or_default();
    }
    for o in objects {
        let name = o.metadata.name.clone().unwrap_or_default();
        match kind(o) {
            "ClusterRole" => b.add_cluster_role(o, name),
            "Role" => {
                let entry = b.roles.entry(name).or_default();
                entry.extend(rules(o).iter().map(rule_key));
            }
            k @ ("ClusterRoleBinding" | "RoleBinding") => {
                b.add_binding(o, name, k == "RoleBinding");
            }
            "ServiceAccount" => {
                b.service_accounts.insert(name);
            }
            "CustomResourceDefinition" => b.add_crd(o, name),
            k @ ("MutatingWebhookConfiguration" | "ValidatingWebhookConfiguration") => {
                let resource = WEBHOOK_CONFIGS[usize::from(k.starts_with('V'))];
                b.add_webhook_config(o, name, resource);
            }
            k => {
                if let Some((_, resource)) = WORKLOADS.iter().find(|(w, _)| *w == k) {
                    let name = match extra.workload_suffix {
                        Some(suffix) => format!("*{suffix}"),
                        None => name,
                    };
                    b.add_workload(o, name, resource);
                }
            }
        }
    }
    b
}

/// A role's rules.
fn rules(o: &DynamicObject) -> Vec<PolicyRule> {
    serde_json::from_value(o.data["rules"].clone()).unwrap_or_default()
}

/// `kind/name` of a role reference or a subject.
fn kind_and_name(v: &Value) -> String {
    format!(
        "{}/{}",
        v["kind"].as_str().unwrap_or_default(),
        v["name"].as_str().unwrap_or_default()
    )
}

impl Bundled {
    /// A ClusterRole's rules (none for an aggregated one: the aggregation
    /// controller writes them), its aggregation selectors and labels.
    fn add_cluster_role(&mut self, o: &DynamicObject, name: String) {
        let aggregated = o.data.get("aggregationRule").is_some_and(|a| !a.is_null());
        let entry = self.cluster_roles.entry(name.clone()).or_default();
        if !aggregated {
            entry.extend(rules(o).iter().map(rule_key));
        }
        for s in o
            .data
            .pointer("/aggregationRule/clusterRoleSelectors")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let labels: BTreeMap<String, String> = s
                .get("matchLabels")
                .and_then(|m| serde_json::from_value(m.clone()).ok())
                .unwrap_or_default();
            self.selectors.insert((name.clone(), labels));
        }
        for (k, v) in o.metadata.labels.iter().flatten() {
            if is_aggregation_label(k) {
                self.aggregation_labels.insert(format!("{name} {k}={v}"));
            }
        }
    }

    /// A binding's role reference and subjects.
    fn add_binding(&mut self, o: &DynamicObject, name: String, namespaced: bool) {
        let (roles, subjects) = if namespaced {
            (&mut self.binding_roles, &mut self.binding_subjects)
        } else {
            (
                &mut self.cluster_binding_roles,
                &mut self.cluster_binding_subjects,
            )
        };
        add(roles, &name, kind_and_name(&o.data["roleRef"]));
        subjects.entry(name.clone()).or_default();
        for s in o.data["subjects"].as_array().into_iter().flatten() {
            add(subjects, &name, kind_and_name(s));
        }
    }

    /// A CRD, and its conversion webhook's service and path.
    fn add_crd(&mut self, o: &DynamicObject, name: String) {
        let entry = self.crds.entry(name).or_default();
        if let Some(service) = o
            .data
            .pointer("/spec/conversion/webhook/clientConfig/service")
        {
            entry.insert(format!(
                "{} {}",
                service["name"].as_str().unwrap_or_default(),
                service["path"].as_str().unwrap_or_default()
            ));
        }
    }

    /// A webhook configuration's webhooks: name, service and path of each.
    fn add_webhook_config(&mut self, o: &DynamicObject, name: String, resource: &'static str) {
        let configs = self.webhooks.entry(resource).or_default();
        configs.entry(name.clone()).or_default();
        for w in o.data["webhooks"].as_array().into_iter().flatten() {
            let service = &w["clientConfig"]["service"];
            let key = format!(
                "{} {} {}",
                w["name"].as_str().unwrap_or_default(),
                service["name"].as_str().unwrap_or_default(),
                service["path"].as_str().unwrap_or_default()
            );
            add(configs, &name, key);
        }
    }

    /// A workload's ServiceAccount, host features and images (with the path
    /// each has under a mirror).
    fn add_workload(&mut self, o: &DynamicObject, name: String, resource: &'static str) {
        let pod = &o.data["spec"]["template"]["spec"];
        let account = pod["serviceAccountName"]
            .as_str()
            .or(pod["serviceAccount"].as_str())
            .unwrap_or("default");
        add(
            self.accounts.entry(resource).or_default(),
            &name,
            account.to_string(),
        );
        let features = self.features.entry(resource).or_default();
        let entry = features.entry(name.clone()).or_default();
        entry.extend(host_features(pod));
        let images = self.images.entry(resource).or_default();
        images.entry(name.clone()).or_default();
        let paths = self.image_paths.entry(resource).or_default();
        paths.entry(name.clone()).or_default();
        for image in pod_images(pod) {
            let repo = repository(&image).to_string();
            add(paths, &name, mirror_path(&repo));
            add(images, &name, repo);
        }
    }
}

/// The images of a pod spec's containers and init containers.
pub(super) fn pod_images(pod: &Value) -> Vec<String> {
    ["containers", "initContainers"]
        .iter()
        .flat_map(|list| pod[*list].as_array().into_iter().flatten())
        .filter_map(|c| c["image"].as_str().map(str::to_string))
        .collect()
}

/// An image's repository: without its digest and tag (as the check's CEL
/// takes them off: the digest after `@`, the tag after the last `:` that
/// follows the last `/`).
pub(super) fn repository(image: &str) -> &str {
    let named = image.split('@').next().unwrap_or(image);
    match (named.rfind(':'), named.rfind('/')) {
        (Some(colon), slash) if slash.is_none_or(|s| colon > s) => &named[..colon],
        _ => named,
    }
}

/// Where a mirror holds a repository: its path under the mirror's registry
/// (the rule `spec.imageRegistry` moves images by).
pub(super) fn mirror_path(repo: &str) -> String {
    crate::render::images::moved(repo, "")
        .trim_start_matches('/')
        .to_string()
}

/// What of the host a pod spec reaches: host namespaces, host paths,
/// privileged containers, added capabilities, host ports.
pub(super) fn host_features(pod: &Value) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for h in ["hostNetwork", "hostPID", "hostIPC"] {
        if pod[h].as_bool() == Some(true) {
            out.insert(h.to_string());
        }
    }
    for v in pod["volumes"].as_array().into_iter().flatten() {
        if let Some(path) = v.pointer("/hostPath/path").and_then(Value::as_str) {
            out.insert(format!("hostPath:{path}"));
        }
    }
    for list in ["containers", "initContainers"] {
        for c in pod[list].as_array().into_iter().flatten() {
            let sc = &c["securityContext"];
            if sc["privileged"].as_bool() == Some(true) {
                out.insert("privileged".into());
            }
            for cap in sc
                .pointer("/capabilities/add")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                out.insert(format!("cap:{}", cap.as_str().unwrap_or_default()));
            }
            for p in c["ports"].as_array().into_iter().flatten() {
                if p["hostPort"].as_i64().is_some_and(|n| n != 0) {
                    out.insert("hostPort".into());
                }
            }
        }
    }
    out
}
