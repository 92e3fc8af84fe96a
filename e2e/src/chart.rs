//! The Helm chart as `helm template` renders it: objects, and where two
//! renders differ (to check that a value changes exactly what it should).

use std::collections::{BTreeMap, BTreeSet};

use kube::api::DynamicObject;
use serde_json::Value;

/// The chart's folder.
pub fn dir() -> String {
    crate::repo_root()
        .join("charts/kubeflow")
        .display()
        .to_string()
}

/// `helm template kf` into `kubeflow-system` for Kubernetes 1.36, with
/// `extra` arguments; the objects, or helm's error output.
pub fn template(extra: &[&str]) -> Result<Vec<DynamicObject>, String> {
    let chart = dir();
    let mut args = vec![
        "template",
        "kf",
        &chart,
        "-n",
        "kubeflow-system",
        "--kube-version",
        "1.36.3",
    ];
    args.extend_from_slice(extra);
    let out = crate::run_tool("helm", &args);
    if out.status.success() {
        Ok(crate::parse_yaml(&String::from_utf8_lossy(&out.stdout)))
    } else {
        Err(String::from_utf8_lossy(&out.stderr).to_string())
    }
}

/// Names of the rendered objects of one kind.
pub fn names(objects: &[DynamicObject], kind: &str) -> Vec<String> {
    of_kind(objects, kind)
        .filter_map(|o| o.metadata.name.clone())
        .collect()
}

/// The rendered objects of one kind.
pub fn of_kind<'a>(
    objects: &'a [DynamicObject],
    kind: &'a str,
) -> impl Iterator<Item = &'a DynamicObject> + 'a {
    objects
        .iter()
        .filter(move |o| o.types.as_ref().is_some_and(|t| t.kind == kind))
}

fn keyed(objects: &[DynamicObject]) -> BTreeMap<String, Value> {
    objects
        .iter()
        .map(|o| {
            let kind = o.types.as_ref().map(|t| t.kind.clone()).unwrap_or_default();
            let key = format!(
                "{kind}/{}/{}",
                o.metadata.namespace.as_deref().unwrap_or(""),
                o.metadata.name.as_deref().unwrap_or("")
            );
            (key, serde_json::to_value(o).unwrap_or(Value::Null))
        })
        .collect()
}

/// Where two renders differ: `Kind:/json/pointer` (array indexes as `*`,
/// so that one change to every operator is one entry) mapped to the number
/// of objects differing there. An object only in one render counts as
/// `Kind:+` or `Kind:-`.
pub fn differences(base: &[DynamicObject], other: &[DynamicObject]) -> BTreeMap<String, usize> {
    let (a, b) = (keyed(base), keyed(other));
    let mut out: BTreeMap<String, usize> = BTreeMap::new();
    let kind_of = |key: &str| key.split('/').next().unwrap_or("").to_string();
    for (key, va) in &a {
        match b.get(key) {
            None => *out.entry(format!("{}:-", kind_of(key))).or_default() += 1,
            Some(vb) => {
                let mut paths = BTreeSet::new();
                diff(va, vb, String::new(), &mut paths);
                for p in paths {
                    *out.entry(format!("{}:{p}", kind_of(key))).or_default() += 1;
                }
            }
        }
    }
    for key in b.keys().filter(|k| !a.contains_key(*k)) {
        *out.entry(format!("{}:+", kind_of(key))).or_default() += 1;
    }
    out
}

fn diff(a: &Value, b: &Value, path: String, out: &mut BTreeSet<String>) {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            for k in x.keys().chain(y.keys()) {
                let p = format!("{path}/{}", k.replace('~', "~0").replace('/', "~1"));
                match (x.get(k), y.get(k)) {
                    (Some(u), Some(v)) => diff(u, v, p, out),
                    _ => {
                        out.insert(p);
                    }
                }
            }
        }
        (Value::Array(x), Value::Array(y)) => {
            for i in 0..x.len().max(y.len()) {
                let p = format!("{path}/*");
                match (x.get(i), y.get(i)) {
                    (Some(u), Some(v)) => diff(u, v, p, out),
                    _ => {
                        out.insert(p);
                    }
                }
            }
        }
        _ if a != b => {
            out.insert(path);
        }
        _ => {}
    }
}
