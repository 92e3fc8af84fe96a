//! Bundles: a component version's upstream manifests, read from
//! `<manifests-dir>/<component>/<version>/*.yaml` (multi-document YAML).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use kube::api::DynamicObject;

/// Errors reading a bundle.
#[derive(Debug, thiserror::Error)]
pub enum BundleError {
    /// The version folder does not exist.
    #[error("unknown {component} version {version:?}; available: {}", available.join(", "))]
    UnknownVersion {
        /// Component name.
        component: String,
        /// Version asked for.
        version: String,
        /// Versions found in the manifests folder.
        available: Vec<String>,
    },
    /// A file could not be read.
    #[error("failed to read {path}: {source}")]
    Read {
        /// File path.
        path: String,
        /// Cause.
        source: std::io::Error,
    },
    /// A document is not valid YAML or not a Kubernetes object.
    #[error("failed to parse {path} document {document}: {message}")]
    Parse {
        /// File path.
        path: String,
        /// 1-based document index within the file.
        document: usize,
        /// What is wrong.
        message: String,
    },
}

/// A loaded bundle: every object of every file, in file order.
///
/// Held as compact JSON, one text per object, and parsed per render: a
/// parsed `serde_json` tree of a CRD-heavy bundle takes about ten times the
/// memory of its text (the training bundle's 3.5 MB of YAML became tens of
/// MB), and a render needs its own copy to transform anyway.
#[derive(Debug, Clone)]
pub struct Bundle {
    /// Component name.
    pub component: String,
    /// Component version.
    pub version: String,
    /// Objects with `status` and null fields removed, as JSON.
    documents: Vec<Box<str>>,
}

impl Bundle {
    /// Its objects, parsed anew: the caller's to change.
    pub fn objects(&self) -> Vec<DynamicObject> {
        // Each text is a serialized `DynamicObject`, so parsing it back
        // cannot fail; `filter_map` only keeps this free of a panic path.
        self.documents
            .iter()
            .filter_map(|d| serde_json::from_str(d).ok())
            .collect()
    }

    /// How many objects it holds.
    pub fn len(&self) -> usize {
        self.documents.len()
    }

    /// Whether it holds no object.
    pub fn is_empty(&self) -> bool {
        self.documents.is_empty()
    }

    /// Bytes its object texts take.
    pub fn text_bytes(&self) -> usize {
        self.documents.iter().map(|d| d.len()).sum()
    }
}

/// Every bundle folder an operator installs from, under the manifests
/// folder (the device plugins one level deeper, one per plugin type), in
/// the order their components are installed: the component registry's.
pub fn folders() -> Vec<&'static str> {
    kubeflow_api::registry::bundle_folders()
}

/// Versions available for a component folder (sub-folders), sorted.
pub fn available_versions(dir: &Path) -> Vec<String> {
    let mut out: Vec<String> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.filter_map(Result::ok)
                .filter(|e| e.path().is_dir())
                .filter_map(|e| e.file_name().into_string().ok())
                .collect()
        })
        .unwrap_or_default();
    out.sort();
    out
}

/// Loads `<root>/<component>/<version>/*.yaml`, files in name order.
pub fn load(root: &Path, component: &str, version: &str) -> Result<Bundle, BundleError> {
    let component_dir = root.join(component);
    let dir = component_dir.join(version);
    // A version with a path separator could escape the manifests folder.
    if version.is_empty()
        || version.contains(['/', '\\'])
        || version.starts_with('.')
        || !dir.is_dir()
    {
        return Err(BundleError::UnknownVersion {
            component: component.to_string(),
            version: version.to_string(),
            available: available_versions(&component_dir),
        });
    }
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .map_err(|source| BundleError::Read {
            path: dir.display().to_string(),
            source,
        })?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| matches!(p.extension().and_then(|e| e.to_str()), Some("yaml" | "yml")))
        .collect();
    files.sort();
    // Each object becomes its text as soon as it is parsed, so at most one
    // object's tree is in memory while loading (all of them at once made the
    // 26.03 KServe bundle's load peak at 24 MiB for 1.2 MiB of text).
    let mut documents = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).map_err(|source| BundleError::Read {
            path: file.display().to_string(),
            source,
        })?;
        for_each_document(&text, &file.display().to_string(), |o| {
            if let Ok(json) = serde_json::to_string(&o) {
                documents.push(json.into_boxed_str());
            }
        })?;
    }
    Ok(Bundle {
        component: component.to_string(),
        version: version.to_string(),
        documents,
    })
}

/// Parses multi-document YAML into objects; empty documents are skipped.
pub fn parse_documents(text: &str, path: &str) -> Result<Vec<DynamicObject>, BundleError> {
    let mut out = Vec::new();
    for_each_document(text, path, |o| out.push(o))?;
    Ok(out)
}

/// Parses multi-document YAML and hands each object to `f` in order.
fn for_each_document(
    text: &str,
    path: &str,
    mut f: impl FnMut(DynamicObject),
) -> Result<(), BundleError> {
    for (index, doc) in split_documents(text).into_iter().enumerate() {
        let err = |message: String| BundleError::Parse {
            path: path.to_string(),
            document: index + 1,
            message,
        };
        if doc
            .lines()
            .all(|l| l.trim().is_empty() || l.trim_start().starts_with('#'))
        {
            continue;
        }
        let mut value: serde_json::Value =
            serde_saphyr::from_str(doc).map_err(|e| err(e.to_string()))?;
        if value.is_null() {
            continue;
        }
        if !value.is_object() {
            return Err(err("not a mapping".into()));
        }
        strip_nulls(&mut value);
        canonical_base64(&mut value);
        if let Some(map) = value.as_object_mut() {
            map.remove("status");
        }
        for field in ["apiVersion", "kind"] {
            if value.get(field).and_then(|v| v.as_str()).is_none() {
                return Err(err(format!("missing {field}")));
            }
        }
        if value
            .pointer("/metadata/name")
            .and_then(|v| v.as_str())
            .is_none()
        {
            return Err(err("missing metadata.name".into()));
        }
        f(serde_json::from_value(value).map_err(|e| err(e.to_string()))?);
    }
    Ok(())
}

/// Base64 values as the API server returns them: a bundle may write a
/// ConfigMap's `binaryData` or a Secret's `data` wrapped over lines (the
/// Model Registry's catalog does), which the server stores as bytes and
/// gives back on one line. Left wrapped, every apply would see a difference.
fn canonical_base64(value: &mut serde_json::Value) {
    let field = match value.get("kind").and_then(|k| k.as_str()) {
        Some("ConfigMap") => "binaryData",
        Some("Secret") => "data",
        _ => return,
    };
    let Some(map) = value.get_mut(field).and_then(|d| d.as_object_mut()) else {
        return;
    };
    for v in map.values_mut() {
        if let Some(text) = v.as_str()
            && text.contains(|c: char| c.is_ascii_whitespace())
        {
            *v = serde_json::Value::String(
                text.chars().filter(|c| !c.is_ascii_whitespace()).collect(),
            );
        }
    }
}

/// Splits a YAML stream at `---` lines. Done by hand rather than by the YAML
/// parser so a multi-megabyte bundle stays within the parser's per-stream
/// budget and errors can name the document.
fn split_documents(text: &str) -> Vec<&str> {
    let mut docs = Vec::new();
    let mut start = 0;
    let mut pos = 0;
    for line in text.split_inclusive('\n') {
        let trimmed = line.trim_end();
        if trimmed == "---" || trimmed.starts_with("--- ") {
            docs.push(&text[start..pos]);
            start = pos + line.len();
        }
        pos += line.len();
    }
    docs.push(&text[start..]);
    docs
}

fn strip_nulls(value: &mut serde_json::Value) {
    match value {
        serde_json::Value::Object(map) => {
            map.retain(|_, v| !v.is_null());
            map.values_mut().for_each(strip_nulls);
        }
        serde_json::Value::Array(items) => items.iter_mut().for_each(strip_nulls),
        _ => {}
    }
}

/// Parsed bundles kept in memory, so a reconcile does not re-parse megabytes of YAML.
#[derive(Default)]
pub struct BundleCache {
    entries: Mutex<HashMap<(String, String), Arc<Bundle>>>,
}

/// How many bundles the cache keeps: the current version and the one being upgraded from.
const CACHE_CAPACITY: usize = 4;

impl BundleCache {
    /// Loads a bundle, from the cache when it was loaded before.
    pub fn get(
        &self,
        root: &Path,
        component: &str,
        version: &str,
    ) -> Result<Arc<Bundle>, BundleError> {
        let key = (component.to_string(), version.to_string());
        if let Some(b) = self.entries.lock().ok().and_then(|m| m.get(&key).cloned()) {
            return Ok(b);
        }
        let bundle = Arc::new(load(root, component, version)?);
        if let Ok(mut m) = self.entries.lock() {
            if m.len() >= CACHE_CAPACITY {
                m.clear();
            }
            m.insert(key, bundle.clone());
        }
        Ok(bundle)
    }

    /// Drops every other version of `component`'s bundle: after an upgrade
    /// the version left would otherwise stay parsed in memory.
    pub fn keep_only(&self, component: &str, version: &str) {
        if let Ok(mut m) = self.entries.lock() {
            m.retain(|(c, v), _| c != component || v == version);
        }
    }

    /// How many bundles are held.
    pub fn len(&self) -> usize {
        self.entries.lock().map(|m| m.len()).unwrap_or(0)
    }

    /// Whether none is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The (apiVersion, kind) pairs of every document in every version of a
/// bundle folder, read from top-level `apiVersion:`/`kind:` lines only: what
/// an operator needs at start (its watches, its RBAC) without parsing
/// megabytes of YAML it would then keep.
pub fn type_lines(folder: &Path) -> std::collections::BTreeSet<(String, String)> {
    let mut out = std::collections::BTreeSet::new();
    for version in available_versions(folder) {
        let Ok(entries) = std::fs::read_dir(folder.join(&version)) else {
            continue;
        };
        for entry in entries.filter_map(Result::ok) {
            let Ok(text) = std::fs::read_to_string(entry.path()) else {
                continue;
            };
            for doc in text.split("\n---") {
                let field = |key: &str| {
                    doc.lines()
                        .find_map(|l| l.strip_prefix(key))
                        .map(|v| v.trim().trim_matches('"').to_string())
                };
                if let (Some(api_version), Some(kind)) = (field("apiVersion: "), field("kind: ")) {
                    out.insert((api_version, kind));
                }
            }
        }
    }
    out
}

/// What a CRD of a bundle says of its kind: the plural, and whether objects
/// of it live in namespaces.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CrdNames {
    /// The resource (plural) name.
    pub plural: String,
    /// `scope: Namespaced`.
    pub namespaced: bool,
}

/// The names the CRDs of a bundle folder give their kinds, by (group, kind),
/// read from the CRD documents' `group:`, `scope:`, `kind:` and `plural:` lines.
pub fn crd_names(folder: &Path) -> HashMap<(String, String), CrdNames> {
    let mut out = HashMap::new();
    for version in available_versions(folder) {
        let Ok(entries) = std::fs::read_dir(folder.join(&version)) else {
            continue;
        };
        for entry in entries.filter_map(Result::ok) {
            let Ok(text) = std::fs::read_to_string(entry.path()) else {
                continue;
            };
            for doc in text
                .split("\n---")
                .filter(|d| d.lines().any(|l| l == "kind: CustomResourceDefinition"))
            {
                let field = |key: &str| {
                    doc.lines()
                        .find_map(|l| l.strip_prefix(key))
                        .map(|v| v.trim().trim_matches('"').to_string())
                };
                if let (Some(group), Some(kind), Some(plural)) = (
                    field("  group: "),
                    field("    kind: "),
                    field("    plural: "),
                ) {
                    let namespaced = field("  scope: ").as_deref() != Some("Cluster");
                    out.insert((group, kind), CrdNames { plural, namespaced });
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {

    #[test]
    fn wrapped_base64_is_read_as_the_api_server_returns_it() {
        let text = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\nbinaryData:\n  f.tgz: |\n    H4sI\n    AAAA\n";
        let objects = parse_documents(text, "t.yaml").expect("parse");
        assert_eq!(objects[0].data["binaryData"]["f.tgz"], "H4sIAAAA");
    }

    use super::*;

    #[test]
    fn after_an_upgrade_only_the_version_applied_stays_parsed() {
        let root = crate::framework::component::manifests_dir();
        let cache = BundleCache::default();
        for v in ["1.29.0", "1.30.1"] {
            cache.get(&root, "istio", v).expect("bundle");
        }
        cache.get(&root, "training", "v1.9.2").expect("bundle");
        assert_eq!(cache.len(), 3);
        cache.keep_only("istio", "1.30.1");
        assert_eq!(cache.len(), 2, "the other component's bundle stays");
        cache.keep_only("training", "v1.9.2");
        assert_eq!(cache.len(), 2);
    }
}
