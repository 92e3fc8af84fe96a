//! Transforms of rendered objects: target namespace (with the rewrites
//! kustomize's namespace transformer makes), images, replicas, resources,
//! scheduling and labels. All pure functions over objects.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{ResourceRequirements, Toleration};
use kube::api::DynamicObject;
use serde_json::{Value, json};

use crate::base::kinds::{self, kind};

/// Moves every namespaced object from its bundle namespace to `target`, and
/// rewrites what points at those namespaces: ServiceAccount subjects of
/// (Cluster)RoleBindings, webhook, APIService and CRD conversion service
/// references. `only_from` limits the move to objects in those namespaces
/// (empty: all). Namespace objects named like a moved namespace are dropped,
/// since the target namespace is the component CR's and already exists.
/// Cluster-scoped objects lose any namespace they carry. (Long on purpose:
/// kustomize's namespace rewrites, one kind after another.)
pub fn set_namespace(objects: &mut Vec<DynamicObject>, target: &str, only_from: &[&str]) {
    let cluster_custom = kinds::cluster_scoped_custom_kinds(objects);
    let moves = |ns: &str| only_from.is_empty() || only_from.contains(&ns);
    let mut moved: Vec<String> = Vec::new();
    for obj in objects.iter_mut() {
        if kinds::is_cluster_scoped(obj, &cluster_custom) {
            // A rendered bundle may carry a namespace on a cluster-scoped
            // custom kind (kustomize cannot know its scope): it means nothing.
            obj.metadata.namespace = None;
            continue;
        }
        let from = obj.metadata.namespace.clone().unwrap_or_default();
        if from.is_empty() || moves(&from) {
            if !from.is_empty() && !moved.contains(&from) {
                moved.push(from);
            }
            obj.metadata.namespace = Some(target.to_string());
        }
    }
    for obj in objects.iter_mut() {
        point_references(obj, &moved, target);
    }
    objects.retain(|o| {
        !(kind(o) == "Namespace" && o.metadata.name.as_ref().is_some_and(|n| moved.contains(n)))
    });
}

/// Points what an object names in the `moved` namespaces at `target`:
/// ServiceAccount subjects of bindings, webhook, API service and conversion
/// services, and a webhook condition's account names.
fn point_references(obj: &mut DynamicObject, moved: &[String], target: &str) {
    let rewrite = |ns: &mut Value| {
        if let Some(s) = ns.as_str()
            && moved.iter().any(|m| m == s)
        {
            *ns = Value::String(target.to_string());
        }
    };
    match kind(obj) {
        "RoleBinding" | "ClusterRoleBinding" => {
            if let Some(subjects) = obj.data.get_mut("subjects").and_then(Value::as_array_mut) {
                for s in subjects {
                    if s.get("kind").and_then(Value::as_str) != Some("ServiceAccount") {
                        continue;
                    }
                    // A subject without a namespace means the bundle's own ServiceAccount.
                    match s.get_mut("namespace") {
                        Some(ns) => rewrite(ns),
                        None => s["namespace"] = Value::String(target.to_string()),
                    }
                }
            }
        }
        "MutatingWebhookConfiguration" | "ValidatingWebhookConfiguration" => {
            if let Some(hooks) = obj.data.get_mut("webhooks").and_then(Value::as_array_mut) {
                for h in hooks {
                    if let Some(ns) = h.pointer_mut("/clientConfig/service/namespace") {
                        rewrite(ns);
                    }
                    // A condition that exempts the bundle's own
                    // ServiceAccount by user name (Katib's pod mutator).
                    for c in h
                        .get_mut("matchConditions")
                        .and_then(Value::as_array_mut)
                        .into_iter()
                        .flatten()
                    {
                        if let Some(e) = c.get_mut("expression") {
                            rewrite_account_names(e, moved, target);
                        }
                    }
                }
            }
        }
        "APIService" => {
            if let Some(ns) = obj.data.pointer_mut("/spec/service/namespace") {
                rewrite(ns);
            }
        }
        "CustomResourceDefinition" => {
            if let Some(ns) = obj
                .data
                .pointer_mut("/spec/conversion/webhook/clientConfig/service/namespace")
            {
                rewrite(ns);
            }
        }
        _ => {}
    }
}

/// `system:serviceaccount:<from>:` to `system:serviceaccount:<target>:` in a
/// string, for each namespace `from` the bundle moved out of.
fn rewrite_account_names(v: &mut Value, moved: &[String], target: &str) {
    if let Some(text) = v.as_str() {
        let mut out = text.to_string();
        for from in moved {
            out = out.replace(
                &format!("system:serviceaccount:{from}:"),
                &format!("system:serviceaccount:{target}:"),
            );
        }
        *v = Value::String(out);
    }
}

/// Removes from every CRD's categories those in `names`.
pub fn drop_categories(objects: &mut [DynamicObject], names: &std::collections::BTreeSet<String>) {
    for crd in objects
        .iter_mut()
        .filter(|o| kind(o) == "CustomResourceDefinition")
    {
        if let Some(list) = crd
            .data
            .pointer_mut("/spec/names/categories")
            .and_then(Value::as_array_mut)
        {
            list.retain(|c| c.as_str().is_none_or(|c| !names.contains(c)));
        }
    }
}

/// The pod template spec of a workload (Deployment, StatefulSet, DaemonSet, Job), if it is one.
pub fn pod_spec_mut(obj: &mut DynamicObject) -> Option<&mut Value> {
    match kind(obj) {
        "Deployment" | "StatefulSet" | "DaemonSet" | "Job" | "ReplicaSet" => {
            obj.data.pointer_mut("/spec/template/spec")
        }
        "CronJob" => obj.data.pointer_mut("/spec/jobTemplate/spec/template/spec"),
        _ => None,
    }
}

fn containers_mut(pod: &mut Value) -> impl Iterator<Item = &mut Value> {
    let Value::Object(map) = pod else {
        return Vec::new().into_iter();
    };
    let mut out = Vec::new();
    for (key, list) in map.iter_mut() {
        if (key == "containers" || key == "initContainers")
            && let Value::Array(items) = list
        {
            out.extend(items.iter_mut());
        }
    }
    out.into_iter()
}

/// Sets the image of every container (and init container) named in `images`.
/// Returns the container names that matched nothing, so a caller can refuse a
/// misspelt override instead of ignoring it.
pub fn set_images(objects: &mut [DynamicObject], images: &BTreeMap<String, String>) -> Vec<String> {
    let mut unmatched: Vec<String> = images.keys().cloned().collect();
    for obj in objects.iter_mut() {
        let Some(pod) = pod_spec_mut(obj) else {
            continue;
        };
        for c in containers_mut(pod) {
            let Some(name) = c.get("name").and_then(Value::as_str).map(str::to_string) else {
                continue;
            };
            if let Some(image) = images.get(&name) {
                c["image"] = Value::String(image.clone());
                unmatched.retain(|u| *u != name);
            }
        }
    }
    unmatched
}

/// Sets `spec.replicas` of the named Deployments and StatefulSets.
pub fn set_replicas(objects: &mut [DynamicObject], workloads: &[&str], replicas: i32) {
    for obj in objects
        .iter_mut()
        .filter(|o| matches!(kind(o), "Deployment" | "StatefulSet"))
    {
        if obj
            .metadata
            .name
            .as_deref()
            .is_some_and(|n| workloads.contains(&n))
        {
            obj.data["spec"]["replicas"] = json!(replicas);
        }
    }
}

/// Replaces the resources of the named workloads' containers (those named in
/// `containers`, or the first container when `containers` is empty).
pub fn set_resources(
    objects: &mut [DynamicObject],
    workloads: &[&str],
    containers: &[&str],
    resources: &ResourceRequirements,
) {
    let value = serde_json::to_value(resources).unwrap_or(Value::Null);
    for obj in objects.iter_mut() {
        if !obj
            .metadata
            .name
            .as_deref()
            .is_some_and(|n| workloads.contains(&n))
        {
            continue;
        }
        let Some(Value::Array(list)) = pod_spec_mut(obj).and_then(|p| p.get_mut("containers"))
        else {
            continue;
        };
        for (i, c) in list.iter_mut().enumerate() {
            let name = c.get("name").and_then(Value::as_str).unwrap_or("");
            if (containers.is_empty() && i == 0) || containers.contains(&name) {
                c["resources"] = value.clone();
            }
        }
    }
}

/// Sets nodeSelector and/or tolerations on the named workloads (all workloads when `workloads` is empty).
pub fn set_scheduling(
    objects: &mut [DynamicObject],
    workloads: &[&str],
    node_selector: Option<&BTreeMap<String, String>>,
    tolerations: Option<&Vec<Toleration>>,
) {
    for obj in objects.iter_mut() {
        if !workloads.is_empty()
            && !obj
                .metadata
                .name
                .as_deref()
                .is_some_and(|n| workloads.contains(&n))
        {
            continue;
        }
        let Some(pod) = pod_spec_mut(obj) else {
            continue;
        };
        if let Some(sel) = node_selector {
            pod["nodeSelector"] = json!(sel);
        }
        if let Some(tol) = tolerations {
            pod["tolerations"] = serde_json::to_value(tol).unwrap_or(Value::Null);
        }
    }
}

/// Sets (or appends) a container argument `--name=value` on the named workloads' first container.
pub fn set_arg(objects: &mut [DynamicObject], workload: &str, flag: &str, value: Option<&str>) {
    for obj in objects
        .iter_mut()
        .filter(|o| o.metadata.name.as_deref() == Some(workload))
    {
        let Some(Value::Array(list)) = pod_spec_mut(obj).and_then(|p| p.get_mut("containers"))
        else {
            continue;
        };
        let Some(c) = list.first_mut() else { continue };
        let args = c
            .as_object_mut()
            .map(|m| m.entry("args").or_insert_with(|| json!([])));
        let Some(Value::Array(args)) = args else {
            continue;
        };
        let prefix = format!("{flag}=");
        args.retain(|a| {
            a.as_str()
                .is_none_or(|s| s != flag && !s.starts_with(&prefix))
        });
        if let Some(v) = value {
            args.push(Value::String(format!("{flag}={v}")));
        }
    }
}

/// Removes objects matching `drop`.
pub fn remove(objects: &mut Vec<DynamicObject>, drop: impl Fn(&DynamicObject) -> bool) {
    objects.retain(|o| !drop(o));
}

/// Whether a variable or ConfigMap key lets a database start with no
/// password (MySQL's `MYSQL_ALLOW_EMPTY_PASSWORD`, MariaDB's `MARIADB_...`).
pub fn allows_empty_password(name: &str) -> bool {
    name.to_ascii_uppercase().ends_with("ALLOW_EMPTY_PASSWORD")
}

/// Removes every `*ALLOW_EMPTY_PASSWORD` variable from every container and
/// every such key from every ConfigMap (one a workload takes as `envFrom`).
/// Upstream's databases set it beside a root password (Katib, the Model
/// Registry) or instead of one (Pipelines); every bundled database the
/// operators install gets a generated password, so no database is ever
/// allowed to come up without one (the image only reads it when it
/// initialises an empty volume: a running database is unaffected).
pub fn drop_allow_empty_password(objects: &mut [DynamicObject]) {
    for obj in objects.iter_mut() {
        if kind(obj) == "ConfigMap" {
            if let Some(m) = obj.data.get_mut("data").and_then(Value::as_object_mut) {
                m.retain(|k, _| !allows_empty_password(k));
            }
            continue;
        }
        let Some(pod) = pod_spec_mut(obj) else {
            continue;
        };
        for c in containers_mut(pod) {
            if let Some(Value::Array(env)) = c.get_mut("env") {
                env.retain(|e| {
                    e.get("name")
                        .and_then(Value::as_str)
                        .is_none_or(|n| !allows_empty_password(n))
                });
            }
        }
    }
}

/// Rewrites host names `<service>.<from>` in container env values and
/// ConfigMap data (where bundles write them as plain strings) to `<service>.<to>`,
/// for every Service of the bundle that moved. kustomize leaves these alone.
pub fn rewrite_service_hosts(objects: &mut [DynamicObject], from: &str, to: &str) {
    let services: Vec<String> = objects
        .iter()
        .filter(|o| kind(o) == "Service" && o.metadata.namespace.as_deref() == Some(to))
        .filter_map(|o| o.metadata.name.clone())
        .collect();
    let fix = |text: &str| -> Option<String> {
        let mut out = text.to_string();
        for svc in &services {
            let needle = format!("{svc}.{from}");
            let mut result = String::new();
            let mut rest = out.as_str();
            while let Some(i) = rest.find(&needle) {
                let before_ok = i == 0
                    || !rest[..i]
                        .ends_with(|c: char| c.is_ascii_alphanumeric() || c == '-' || c == '.');
                let after = &rest[i + needle.len()..];
                let after_ok = !after.starts_with(|c: char| c.is_ascii_alphanumeric() || c == '-');
                result.push_str(&rest[..i]);
                if before_ok && after_ok {
                    result.push_str(svc);
                    result.push('.');
                    result.push_str(to);
                } else {
                    result.push_str(&needle);
                }
                rest = after;
            }
            result.push_str(rest);
            out = result;
        }
        (out != text).then_some(out)
    };
    for obj in objects.iter_mut() {
        if kind(obj) == "ConfigMap" {
            if let Some(Value::Object(data)) = obj.data.get_mut("data") {
                for v in data.values_mut() {
                    if let Some(new) = v.as_str().and_then(fix) {
                        *v = Value::String(new);
                    }
                }
            }
            continue;
        }
        let Some(pod) = pod_spec_mut(obj) else {
            continue;
        };
        for c in containers_mut(pod) {
            if let Some(Value::Array(env)) = c.get_mut("env") {
                for e in env {
                    if let Some(new) = e.get("value").and_then(Value::as_str).and_then(fix) {
                        e["value"] = Value::String(new);
                    }
                }
            }
        }
    }
}

/// Rewrites the Istio hosts `<service>.<from>.svc.cluster.local` that name
/// one of the bundle's Services (a DestinationRule's `host`, a
/// VirtualService's route destinations) to `<service>.<to>.svc...`: a
/// bundle moved to another namespace keeps its routes. kustomize leaves
/// these alone.
pub fn rewrite_istio_hosts(objects: &mut [DynamicObject], from: &str, to: &str) {
    let services: Vec<String> = objects
        .iter()
        .filter(|o| kind(o) == "Service")
        .filter_map(|o| o.metadata.name.clone())
        .collect();
    let fix = |host: Option<&mut Value>| {
        let Some(host) = host else { return };
        let Some(h) = host.as_str() else { return };
        let Some(svc) = h.strip_suffix(&format!(".{from}.svc.cluster.local")) else {
            return;
        };
        if services.iter().any(|s| s == svc) {
            *host = Value::String(format!("{svc}.{to}.svc.cluster.local"));
        }
    };
    for obj in objects.iter_mut() {
        match kind(obj) {
            "DestinationRule" => fix(obj.data.pointer_mut("/spec/host")),
            "VirtualService" => {
                let http = obj
                    .data
                    .pointer_mut("/spec/http")
                    .and_then(Value::as_array_mut);
                for h in http.into_iter().flatten() {
                    let routes = h.get_mut("route").and_then(Value::as_array_mut);
                    for route in routes.into_iter().flatten() {
                        fix(route.pointer_mut("/destination/host"));
                    }
                }
            }
            _ => {}
        }
    }
}

/// Points every `secretKeyRef` to Secret `from` (key `from_key`) at Secret `to` (key `to_key`).
pub fn redirect_secret_key(
    objects: &mut [DynamicObject],
    from: &str,
    from_key: &str,
    to: &str,
    to_key: &str,
) {
    for obj in objects.iter_mut() {
        let Some(pod) = pod_spec_mut(obj) else {
            continue;
        };
        for c in containers_mut(pod) {
            if let Some(Value::Array(env)) = c.get_mut("env") {
                for e in env {
                    if let Some(r) = e.pointer_mut("/valueFrom/secretKeyRef")
                        && r.get("name").and_then(Value::as_str) == Some(from)
                        && r.get("key").and_then(Value::as_str) == Some(from_key)
                    {
                        *r = json!({"name": to, "key": to_key});
                    }
                }
            }
        }
    }
}

/// Sets each variable of `env` (`EnvVar` objects) on a container, replacing
/// one of the same name, appending the others.
pub fn set_container_env(container: &mut Value, env: &[Value]) {
    if !container["env"].is_array() {
        container["env"] = json!([]);
    }
    if let Some(list) = container["env"].as_array_mut() {
        for e in env {
            match list.iter_mut().find(|x| x["name"] == e["name"]) {
                Some(x) => *x = e.clone(),
                None => list.push(e.clone()),
            }
        }
    }
}

/// Sets each variable of `env` on every container of the Deployment
/// `deployment`.
pub fn set_env(objects: &mut [DynamicObject], deployment: &str, env: &[Value]) {
    for d in objects
        .iter_mut()
        .filter(|o| kind(o) == "Deployment" && o.metadata.name.as_deref() == Some(deployment))
    {
        let Some(pod) = pod_spec_mut(d) else {
            continue;
        };
        for c in pod["containers"].as_array_mut().into_iter().flatten() {
            set_container_env(c, env);
        }
    }
}

/// Sets an env var's literal value on every container that already has it.
pub fn set_env_where_present(objects: &mut [DynamicObject], name: &str, value: &str) {
    for obj in objects.iter_mut() {
        let Some(pod) = pod_spec_mut(obj) else {
            continue;
        };
        for c in containers_mut(pod) {
            if let Some(Value::Array(env)) = c.get_mut("env") {
                for e in env
                    .iter_mut()
                    .filter(|e| e.get("name").and_then(Value::as_str) == Some(name))
                {
                    *e = json!({"name": name, "value": value});
                }
            }
        }
    }
}

/// Sets keys of a ConfigMap's data.
pub fn set_config(objects: &mut [DynamicObject], configmap: &str, entries: &[(&str, String)]) {
    for obj in objects
        .iter_mut()
        .filter(|o| kind(o) == "ConfigMap" && o.metadata.name.as_deref() == Some(configmap))
    {
        for (k, v) in entries {
            obj.data["data"][*k] = Value::String(v.clone());
        }
    }
}

/// The pod-template annotation that carries a digest of what a workload
/// reads only when it starts.
pub const CONFIG_DIGEST: &str = "components.kubeflow.org/config-digest";

/// Rolls `workload` whenever the content of `inputs` (objects it reads only
/// at start: a configuration file, secrets it takes as environment values)
/// changes: their content's digest is an annotation of its pod template.
/// The digest is of content the rendered objects hold anyway, and a SHA-256
/// of it gives away nothing of a secret in it.
pub fn roll_on_change(objects: &mut [DynamicObject], workload: &str, inputs: &[(&str, &str)]) {
    let mut text = String::new();
    for (kind_of, name) in inputs {
        for o in objects
            .iter()
            .filter(|o| kind(o) == *kind_of && o.metadata.name.as_deref() == Some(*name))
        {
            text.push_str(&o.data["data"].to_string());
            text.push('\n');
        }
    }
    let digest = crate::render::secrets::sha256_hex(text.as_bytes());
    for w in objects.iter_mut().filter(|o| {
        matches!(kind(o), "Deployment" | "StatefulSet" | "DaemonSet")
            && o.metadata.name.as_deref() == Some(workload)
    }) {
        let meta = &mut w.data["spec"]["template"]["metadata"];
        if !meta.is_object() {
            *meta = json!({});
        }
        meta["annotations"][CONFIG_DIGEST] = Value::String(digest[..16].to_string());
    }
}

/// The ConfigMaps whose name starts with `prefix` (kustomize appends a
/// hash of the content to a generated ConfigMap's name, which changes with
/// every release).
pub fn config_maps<'a>(
    objects: &'a mut [DynamicObject],
    prefix: &'a str,
) -> impl Iterator<Item = &'a mut DynamicObject> {
    objects.iter_mut().filter(move |o| {
        kind(o) == "ConfigMap"
            && o.metadata
                .name
                .as_deref()
                .is_some_and(|n| n.starts_with(prefix))
    })
}

/// Merges `overrides` into `base`: maps key by key, anything else replaced.
pub fn merge(base: &mut Value, overrides: &Value) {
    match (base, overrides) {
        (Value::Object(b), Value::Object(o)) => {
            for (k, v) in o {
                merge(b.entry(k.clone()).or_insert(Value::Null), v);
            }
        }
        (b, o) => *b = o.clone(),
    }
}

/// Merges `overrides` into a YAML document (a component's configuration file
/// held in a ConfigMap key) and writes it back as YAML.
pub fn merge_yaml(text: &str, overrides: &Value) -> Result<String, String> {
    let mut doc: Value = serde_saphyr::from_str(text)
        .map_err(|e| format!("failed to parse the bundle's configuration: {e}"))?;
    merge(&mut doc, overrides);
    serde_saphyr::to_string(&doc).map_err(|e| format!("failed to write the configuration: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_webhook_condition_naming_the_bundles_account_follows_the_move() {
        let mut objects: Vec<DynamicObject> = vec![
            serde_json::from_value(json!({"apiVersion": "v1", "kind": "ServiceAccount",
                "metadata": {"name": "ctl", "namespace": "kubeflow"}}))
            .expect("sa"),
            serde_json::from_value(json!({
                "apiVersion": "admissionregistration.k8s.io/v1",
                "kind": "MutatingWebhookConfiguration", "metadata": {"name": "m"},
                "webhooks": [{"name": "w", "matchConditions": [{"name": "not-self",
                    "expression": "request.userInfo.username != \"system:serviceaccount:kubeflow:ctl\""}]}]}))
            .expect("webhook"),
        ];
        set_namespace(&mut objects, "team", &["kubeflow"]);
        assert_eq!(
            objects[1].data["webhooks"][0]["matchConditions"][0]["expression"],
            "request.userInfo.username != \"system:serviceaccount:team:ctl\""
        );
    }

    #[test]
    fn overrides_merge_into_a_yaml_document() {
        let base = "accessLogFile: /dev/stdout\ndefaultConfig:\n  discoveryAddress: istiod.istio-system.svc:15012\n  tracing: {}\n";
        let overrides = json!({"accessLogFile": "", "defaultConfig": {"holdApplicationUntilProxyStarts": true}});
        let out = merge_yaml(base, &overrides).expect("merge");
        let v: Value = serde_saphyr::from_str(&out).expect("yaml");
        assert_eq!(v["accessLogFile"], "");
        assert_eq!(
            v["defaultConfig"]["discoveryAddress"],
            "istiod.istio-system.svc:15012"
        );
        assert_eq!(v["defaultConfig"]["holdApplicationUntilProxyStarts"], true);
        assert!(merge_yaml("a: [unclosed", &overrides).is_err());
    }
}
