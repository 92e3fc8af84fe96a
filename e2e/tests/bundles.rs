//! Pure tests over the real upstream bundles: loading, and the transforms,
//! with `kubectl kustomize` as the oracle of the namespace transform.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::ResourceRequirements;
use kube::api::DynamicObject;
use kubeflow_e2e::manifests_dir;
use kubeflow_operator::bundle::{self, BundleError};
use kubeflow_operator::kinds;
use kubeflow_operator::transform;
use serde_json::{Value, json};

/// Every `<component>/<version>` folder (device plugins one level deeper).
fn bundle_dirs() -> Vec<(String, String)> {
    let root = manifests_dir();
    let mut out = Vec::new();
    for folder in bundle::folders() {
        for v in bundle::available_versions(&root.join(folder)) {
            out.push((folder.to_string(), v));
        }
    }
    // Training has one version, Trainer two, pipelines, serving and istio
    // four each (26.03.1's included), cert-manager, dex, oauth2-proxy, the
    // dashboard, Notebooks and the device plugins two each, Katib and Spark one each, Knative and the Model Registry two. Fewer means the
    // data is missing, and every test over it would pass on nothing.
    assert_eq!(out.len(), 35, "{out:?}");
    out
}

#[test]
fn every_bundle_loads() {
    let dirs = bundle_dirs();
    for (component, version) in dirs {
        let b = bundle::load(&manifests_dir(), &component, &version)
            .unwrap_or_else(|e| panic!("{component}/{version}: {e}"));
        assert!(!b.is_empty(), "{component}/{version} is empty");
        for o in &b.objects() {
            assert!(!kinds::kind(o).is_empty() && o.metadata.name.is_some());
            assert!(o.data.get("status").is_none(), "status is stripped");
        }
    }
}

#[test]
fn an_unknown_version_lists_the_available_ones() {
    let err = bundle::load(&manifests_dir(), "pipelines", "9.9.9").expect_err("no such version");
    assert!(matches!(err, BundleError::UnknownVersion { .. }));
    let msg = err.to_string();
    assert!(
        msg.contains("9.9.9") && msg.contains("2.15.0") && msg.contains("2.5.0"),
        "{msg}"
    );
    // A version must not reach outside the manifests folder.
    assert!(matches!(
        bundle::load(&manifests_dir(), "pipelines", "../istio/1.28.0"),
        Err(BundleError::UnknownVersion { .. })
    ));
}

#[test]
fn malformed_yaml_names_the_file_and_document() {
    let text = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: [unclosed\n";
    let err = bundle::parse_documents(text, "bad.yaml").expect_err("malformed");
    let msg = err.to_string();
    assert!(
        msg.contains("bad.yaml") && msg.contains("document 2"),
        "{msg}"
    );
    let err = bundle::parse_documents("kind: ConfigMap\nmetadata: {name: a}\n", "x.yaml")
        .expect_err("no apiVersion");
    assert!(err.to_string().contains("missing apiVersion"), "{err}");
}

fn to_json(objects: &[DynamicObject]) -> BTreeMap<(String, String, String), Value> {
    objects
        .iter()
        .map(|o| {
            let mut v = serde_json::to_value(o).expect("json");
            normalize(&mut v);
            (
                (
                    kinds::kind(o).to_string(),
                    o.metadata.namespace.clone().unwrap_or_default(),
                    o.metadata.name.clone().unwrap_or_default(),
                ),
                v,
            )
        })
        .collect()
}

fn normalize(v: &mut Value) {
    match v {
        Value::Object(m) => {
            m.retain(|_, x| !x.is_null());
            m.remove("status");
            m.values_mut().for_each(normalize);
        }
        Value::Array(a) => a.iter_mut().for_each(normalize),
        _ => {}
    }
}

fn kustomize(files: &[PathBuf], namespace: &str) -> Vec<DynamicObject> {
    let dir = std::env::temp_dir().join(format!(
        "kubeflow-kustomize-{}-{}",
        std::process::id(),
        files.len() + namespace.len()
    ));
    std::fs::create_dir_all(&dir).expect("tmp");
    let mut resources = String::new();
    for (i, f) in files.iter().enumerate() {
        let name = format!("r{i}.yaml");
        std::fs::copy(f, dir.join(&name)).expect("copy");
        resources.push_str(&format!("- {name}\n"));
    }
    std::fs::write(
        dir.join("kustomization.yaml"),
        format!("namespace: {namespace}\nresources:\n{resources}"),
    )
    .expect("write");
    let kubectl = kubeflow_e2e::bin_dir().join("kubectl");
    let kubectl = if kubectl.exists() {
        kubectl
    } else {
        PathBuf::from("kubectl")
    };
    let out = std::process::Command::new(kubectl)
        .arg("kustomize")
        .arg(&dir)
        .output()
        .expect("run kubectl kustomize");
    assert!(
        out.status.success(),
        "kustomize failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let _ = std::fs::remove_dir_all(&dir);
    bundle::parse_documents(&String::from_utf8_lossy(&out.stdout), "kustomize output")
        .expect("parse kustomize output")
}

fn yaml_files(dir: &Path) -> Vec<PathBuf> {
    let mut f: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("dir")
        .filter_map(Result::ok)
        .map(|e| e.path())
        .collect();
    f.sort();
    f
}

/// Our namespace transform gives what kustomize's gives, except where we
/// differ on purpose:
/// - a Namespace object named like the namespace being moved is dropped
///   (the target namespace is the component CR's and exists already);
/// - cluster-scoped custom kinds defined by the bundle's own CRDs (KServe's
///   ClusterServingRuntime, ...) get no namespace: kustomize cannot know their
///   scope, we read it from the CRD;
/// - a RoleBinding's ServiceAccount subject without a namespace (the
///   binding's own, to the API server) is given the target namespace
///   outright, which the admission pins compare.
///
/// A folder holding several namespaces' bundles (Knative's Serving and
/// Eventing) is compared file by file: kustomize refuses to move two
/// Namespace objects into one.
#[test]
fn the_namespace_transform_matches_kustomize() {
    let target = "team-a";
    for (component, version) in bundle_dirs() {
        let dir = manifests_dir().join(&component).join(&version);
        let whole = bundle::load(&manifests_dir(), &component, &version)
            .expect("load")
            .objects();
        let namespaces = whole
            .iter()
            .filter(|o| kinds::kind(o) == "Namespace")
            .count();
        if namespaces > 1 {
            for file in yaml_files(&dir) {
                let text = std::fs::read_to_string(&file).expect("read");
                let ours =
                    bundle::parse_documents(&text, &file.display().to_string()).expect("parse");
                let label = format!("{component}/{version}/{}", file.display());
                compare_with_kustomize(&label, std::slice::from_ref(&file), ours, target);
            }
        } else {
            let label = format!("{component}/{version}");
            compare_with_kustomize(&label, &yaml_files(&dir), whole, target);
        }
    }
}

/// Moves `ours` (the objects of `files`) to `target` and compares them with
/// kustomize's move of the same files.
fn compare_with_kustomize(
    label: &str,
    files: &[PathBuf],
    mut ours: Vec<DynamicObject>,
    target: &str,
) {
    let theirs = kustomize(files, target);
    let cluster_custom = kinds::cluster_scoped_custom_kinds(&ours);
    let moved: BTreeSet<String> = ours
        .iter()
        .filter_map(|o| o.metadata.namespace.clone())
        .collect();
    transform::set_namespace(&mut ours, target, &[]);
    let ours = to_json(&ours);
    let mut theirs = to_json(&theirs);
    // The documented differences, applied to kustomize's side.
    theirs.retain(|(kind, _, name), _| {
        !(kind == "Namespace" && (moved.contains(name) || name == target))
    });
    let theirs: BTreeMap<_, _> = theirs
        .into_iter()
        .map(|((kind, ns, name), mut v)| {
            let api_version = v["apiVersion"].as_str().unwrap_or("").to_string();
            let gk = if kinds::group_of(&api_version).is_empty() {
                kind.clone()
            } else {
                format!("{kind}.{}", kinds::group_of(&api_version))
            };
            if kind == "RoleBinding" {
                for subject in v["subjects"].as_array_mut().into_iter().flatten() {
                    if subject["kind"] == "ServiceAccount" && subject.get("namespace").is_none() {
                        subject["namespace"] = Value::String(ns.clone());
                    }
                }
            }
            // Ours also moves a webhook condition that exempts the
            // bundle's ServiceAccount by user name; kustomize leaves it.
            if kind.ends_with("WebhookConfiguration") {
                for hook in v["webhooks"].as_array_mut().into_iter().flatten() {
                    let conditions = hook.get_mut("matchConditions");
                    for c in conditions
                        .and_then(Value::as_array_mut)
                        .into_iter()
                        .flatten()
                    {
                        let mut e = c["expression"].as_str().unwrap_or("").to_string();
                        for from in &moved {
                            e = e.replace(
                                &format!("system:serviceaccount:{from}:"),
                                &format!("system:serviceaccount:{target}:"),
                            );
                        }
                        c["expression"] = Value::String(e);
                    }
                }
            }
            // A namespace on a cluster-scoped object means nothing (the
            // Spark bundle's ClusterRoles carry one); ours drops it.
            if cluster_custom.contains(&gk) || kinds::is_builtin_cluster_scoped(&kind) {
                if let Some(m) = v["metadata"].as_object_mut() {
                    m.remove("namespace");
                }
                return ((kind, String::new(), name), v);
            }
            ((kind, ns, name), v)
        })
        .collect();
    let only_ours: Vec<_> = ours.keys().filter(|k| !theirs.contains_key(*k)).collect();
    let only_theirs: Vec<_> = theirs.keys().filter(|k| !ours.contains_key(*k)).collect();
    assert!(
        only_ours.is_empty() && only_theirs.is_empty(),
        "{label}: only ours {only_ours:?}, only kustomize's {only_theirs:?}"
    );
    for (k, v) in &ours {
        assert_eq!(v, &theirs[k], "{label}: {k:?} differs from kustomize's");
    }
}

/// Paths (JSON pointers) at which two values differ.
fn diff(a: &Value, b: &Value, path: String, out: &mut Vec<String>) {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let keys: BTreeSet<&String> = x.keys().chain(y.keys()).collect();
            for k in keys {
                diff(
                    x.get(k).unwrap_or(&Value::Null),
                    y.get(k).unwrap_or(&Value::Null),
                    format!("{path}/{k}"),
                    out,
                );
            }
        }
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => {
            for (i, (p, q)) in x.iter().zip(y).enumerate() {
                diff(p, q, format!("{path}/{i}"), out);
            }
        }
        _ if a != b => out.push(path),
        _ => {}
    }
}

fn changes(before: &[DynamicObject], after: &[DynamicObject]) -> Vec<String> {
    let (b, a) = (to_json(before), to_json(after));
    let mut out = Vec::new();
    for (k, v) in &b {
        diff(v, &a[k], format!("{}/{}", k.0, k.2), &mut out);
    }
    out
}

#[test]
fn image_replica_resource_and_scheduling_transforms_change_exactly_what_they_should() {
    let before = bundle::load(&manifests_dir(), "pipelines", "2.15.0")
        .expect("load")
        .objects();

    let mut after = before.clone();
    let images = BTreeMap::from([(
        "ml-pipeline-api-server".to_string(),
        "registry.example/api:1".to_string(),
    )]);
    assert!(transform::set_images(&mut after, &images).is_empty());
    assert_eq!(
        changes(&before, &after),
        vec!["Deployment/ml-pipeline/spec/template/spec/containers/0/image"]
    );
    let unknown = BTreeMap::from([("no-such-container".to_string(), "x".to_string())]);
    assert_eq!(
        transform::set_images(&mut after.clone(), &unknown),
        vec!["no-such-container".to_string()]
    );

    let mut after = before.clone();
    transform::set_replicas(&mut after, &["ml-pipeline", "seaweedfs"], 3);
    assert_eq!(
        changes(&before, &after),
        vec![
            "Deployment/ml-pipeline/spec/replicas",
            "Deployment/seaweedfs/spec/replicas"
        ]
    );

    let mut after = before.clone();
    let res: ResourceRequirements =
        serde_json::from_value(json!({"limits": {"memory": "1Gi"}})).expect("resources");
    transform::set_resources(&mut after, &["ml-pipeline"], &[], &res);
    assert_eq!(
        changes(&before, &after), // Resources are replaced whole: the bundle's requests go, the limits come.
        vec![
            "Deployment/ml-pipeline/spec/template/spec/containers/0/resources/limits",
            "Deployment/ml-pipeline/spec/template/spec/containers/0/resources/requests"
        ]
    );

    let mut after = before.clone();
    let sel = BTreeMap::from([("pool".to_string(), "ml".to_string())]);
    transform::set_scheduling(&mut after, &["ml-pipeline"], Some(&sel), None);
    assert_eq!(
        changes(&before, &after),
        vec!["Deployment/ml-pipeline/spec/template/spec/nodeSelector"]
    );
}
