//! The ClusterServiceVersion and the bundle's annotations.

use std::collections::{BTreeMap, BTreeSet};

use base64::Engine as _;
use serde::Deserialize;
use serde_json::{Map, Value, json};

use crate::render::Chart;

/// `bundle/base.yaml`: what no other file says.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Base {
    pub package: String,
    pub channel: String,
    display_name: String,
    provider: String,
    maintainers: Vec<Value>,
    links: Vec<Value>,
    keywords: Vec<String>,
    categories: String,
    maturity: String,
    capabilities: String,
    min_kube_version: String,
    /// The oldest OpenShift release (the `v4.N` form OpenShift's catalogs read).
    openshift_versions: String,
    suggested_namespace: String,
    short_description: String,
    description: String,
    /// The CSV this one replaces (the previous release's), if any.
    #[serde(default)]
    replaces: Option<String>,
    /// A component kind's descriptors where `kinds` names it not.
    component_defaults: ComponentDefaults,
    kinds: BTreeMap<String, KindInfo>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ComponentDefaults {
    spec: Vec<Descriptor>,
    status: Vec<Descriptor>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct KindInfo {
    display_name: String,
    description: String,
    spec: Vec<Descriptor>,
    status: Vec<Descriptor>,
}

#[derive(Deserialize, Clone)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Descriptor {
    path: String,
    display_name: String,
    #[serde(default)]
    description: Option<String>,
    #[serde(default)]
    x: Vec<String>,
}

pub struct Inputs<'a> {
    pub base: &'a Base,
    pub version: &'a str,
    pub chart: &'a Chart,
    pub crds: &'a [(String, Value)],
    pub examples: &'a [Value],
    pub images: &'a [String],
    pub icon_svg: &'a str,
}

pub fn build(i: &Inputs) -> Result<Value, String> {
    let base = i.base;
    let (install, operator_images) = install_strategy(i.chart)?;
    let meta_image = i
        .chart
        .operators
        .iter()
        .find(|o| o.component == "meta")
        .and_then(|o| {
            o.deployment
                .pointer("/spec/template/spec/containers/0/image")
        })
        .and_then(Value::as_str)
        .ok_or("the chart renders no meta-operator")?;

    let mut owned = Vec::new();
    for (_, crd) in i.crds {
        owned.push(owned_crd(crd, base)?);
    }
    let alm_examples = alm_examples(i.examples)?;
    let icon = base64::engine::general_purpose::STANDARD.encode(i.icon_svg.as_bytes());
    let repository = base
        .links
        .first()
        .and_then(|l| l.get("url"))
        .cloned()
        .unwrap_or(Value::Null);
    let mut spec = json!({
        "displayName": base.display_name,
        "description": base.description,
        "version": i.version,
        "maturity": base.maturity,
        "minKubeVersion": base.min_kube_version,
        "keywords": base.keywords,
        "maintainers": base.maintainers,
        "provider": {"name": base.provider},
        "links": base.links,
        "icon": [{"base64data": icon, "mediatype": "image/svg+xml"}],
        // AllNamespaces: the console's default, into openshift-operators;
        // OLM then grants the Roles' rules cluster-wide. MultiNamespace:
        // the Roles only in the OperatorGroup's namespaces, as the chart
        // does (docs/install.md). Not Own/SingleNamespace: the components
        // install into at least two namespaces (kubeflow, istio-system)
        // beside the operators' own.
        "installModes": [
            {"type": "OwnNamespace", "supported": false},
            {"type": "SingleNamespace", "supported": false},
            {"type": "MultiNamespace", "supported": true},
            {"type": "AllNamespaces", "supported": true},
        ],
        "customresourcedefinitions": {"owned": owned},
        "install": install,
        "relatedImages": related_images(&operator_images, i.images),
    });
    if let Some(previous) = &base.replaces {
        spec["replaces"] = Value::String(previous.clone());
    }
    Ok(json!({
        "apiVersion": "operators.coreos.com/v1alpha1",
        "kind": "ClusterServiceVersion",
        "metadata": {
            "name": format!("{}.v{}", base.package, i.version),
            "annotations": csv_annotations(i, &alm_examples, meta_image, repository),
        },
        "spec": spec,
    }))
}

/// The install strategy: the chart's operator Deployments (as OLM runs
/// them) with their ServiceAccounts' rules; and the operators' images.
fn install_strategy(chart: &Chart) -> Result<(Value, Vec<String>), String> {
    let mut deployments = Vec::new();
    let mut permissions = Vec::new();
    let mut cluster_permissions = Vec::new();
    let mut operator_images = Vec::new();
    for op in &chart.operators {
        let deployment = for_olm(&op.deployment)?;
        for c in deployment
            .pointer("/spec/template/spec/containers")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            if let Some(image) = c.get("image").and_then(Value::as_str) {
                operator_images.push(image.to_string());
            }
        }
        deployments.push(deployment);
        permissions
            .push(json!({"serviceAccountName": op.service_account, "rules": op.namespaced_rules}));
        cluster_permissions
            .push(json!({"serviceAccountName": op.service_account, "rules": op.cluster_rules}));
    }
    let install = json!({
        "strategy": "deployment",
        "spec": {
            "deployments": deployments,
            "permissions": permissions,
            "clusterPermissions": cluster_permissions,
        },
    });
    Ok((install, operator_images))
}

/// The examples the console offers, as `alm-examples` holds them.
fn alm_examples(examples: &[Value]) -> Result<String, String> {
    let examples: Vec<Value> = examples
        .iter()
        .map(|e| {
            let mut e = e.clone();
            // The console creates an example in the namespace it shows.
            if let Some(meta) = e.get_mut("metadata").and_then(Value::as_object_mut) {
                meta.remove("namespace");
            }
            e
        })
        .collect();
    serde_json::to_string_pretty(&examples).map_err(|e| e.to_string())
}

/// The CSV's annotations.
fn csv_annotations(i: &Inputs, alm_examples: &str, meta_image: &str, repository: Value) -> Value {
    let base = i.base;
    json!({
        "alm-examples": alm_examples,
        "capabilities": base.capabilities,
        "categories": base.categories,
        "containerImage": meta_image,
        "description": base.short_description.trim(),
        "repository": repository,
        "support": base.provider,
        "operatorframework.io/suggested-namespace": base.suggested_namespace,
        // Any older version upgrades straight to this one.
        "olm.skipRange": format!("<{}", i.version),
        // Every image is named in relatedImages and can be mirrored
        // (docs/air-gap.md); the operators read no proxy settings.
        "features.operators.openshift.io/disconnected": "true",
        "features.operators.openshift.io/fips-compliant": "false",
        "features.operators.openshift.io/proxy-aware": "false",
        "features.operators.openshift.io/tls-profiles": "false",
        "features.operators.openshift.io/token-auth-aws": "false",
        "features.operators.openshift.io/token-auth-azure": "false",
        "features.operators.openshift.io/token-auth-gcp": "false",
        "features.operators.openshift.io/cnf": "false",
        "features.operators.openshift.io/cni": "false",
        "features.operators.openshift.io/csi": "false",
    })
}

/// The chart's Deployment as a CSV's install strategy holds it: the
/// namespaces the operator may install into are the OperatorGroup's (OLM
/// writes them into the pods' `olm.targetNamespaces` annotation; empty, for
/// AllNamespaces, means any), where OLM grants the Roles' rules.
fn for_olm(deployment: &Value) -> Result<Value, String> {
    let name = deployment
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .ok_or("a Deployment without a name")?;
    let mut spec = deployment
        .get("spec")
        .cloned()
        .ok_or("a Deployment without a spec")?;
    for c in spec
        .pointer_mut("/template/spec/containers")
        .and_then(Value::as_array_mut)
        .into_iter()
        .flatten()
    {
        for e in c
            .get_mut("env")
            .and_then(Value::as_array_mut)
            .into_iter()
            .flatten()
        {
            if e.get("name").and_then(Value::as_str) == Some("ALLOWED_NAMESPACES") {
                *e = json!({
                    "name": "ALLOWED_NAMESPACES",
                    "valueFrom": {"fieldRef": {"fieldPath": "metadata.annotations['olm.targetNamespaces']"}},
                });
            }
        }
    }
    let mut labels = deployment
        .pointer("/metadata/labels")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    labels.remove("helm.sh/chart");
    labels.remove("app.kubernetes.io/managed-by");
    Ok(json!({"name": name, "label": labels, "spec": spec}))
}

/// The operator images first, then every image the supported releases run;
/// each named after its repository and tag, unique.
fn related_images(operators: &[String], releases: &[String]) -> Vec<Value> {
    let mut seen = BTreeSet::new();
    let mut names = BTreeSet::new();
    let mut out = Vec::new();
    for image in operators.iter().chain(releases) {
        if !seen.insert(image.clone()) {
            continue;
        }
        let base = image_name(image);
        let mut name = base.clone();
        let mut n = 2;
        while !names.insert(name.clone()) {
            name = format!("{base}-{n}");
            n += 1;
        }
        out.push(json!({"name": name, "image": image}));
    }
    out
}

/// `registry/org/repo:tag@sha256:...` -> `repo-tag`, lower-case, `[a-z0-9-]`.
fn image_name(image: &str) -> String {
    let without_digest = image.split('@').next().unwrap_or(image);
    let last = without_digest.rsplit('/').next().unwrap_or(without_digest);
    let raw = last.replace(':', "-");
    let mut name: String = raw
        .to_lowercase()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '-'
            }
        })
        .collect();
    name.truncate(63);
    name.trim_matches('-').to_string()
}

fn owned_crd(crd: &Value, base: &Base) -> Result<Value, String> {
    let kind = crd
        .pointer("/spec/names/kind")
        .and_then(Value::as_str)
        .ok_or("a CRD without a kind")?;
    let name = crd
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .ok_or("a CRD without a name")?;
    let version = crd
        .pointer("/spec/versions")
        .and_then(Value::as_array)
        .and_then(|vs| {
            vs.iter()
                .find(|v| v.get("storage") == Some(&Value::Bool(true)))
        })
        .ok_or(format!("{name} has no storage version"))?;
    let schema = version
        .pointer("/schema/openAPIV3Schema")
        .ok_or(format!("{name} has no schema"))?;
    let fallback;
    let info = match base.kinds.get(kind) {
        Some(info) => info,
        None => {
            fallback = component_default(kind, schema, base)
                .ok_or(format!("bundle/base.yaml says nothing of {kind}"))?;
            &fallback
        }
    };
    let spec = if kind == "Kubeflow" {
        with_component_states(&info.spec)
    } else {
        info.spec.clone()
    };
    let descriptors = |root: &str, list: &[Descriptor]| -> Result<Vec<Value>, String> {
        list.iter()
            .map(|d| {
                let field = field_schema(schema, root, &d.path).ok_or(format!(
                    "bundle/base.yaml: {kind} has no field {root}.{}",
                    d.path
                ))?;
                let description = d.description.clone().or_else(|| {
                    field
                        .get("description")
                        .and_then(Value::as_str)
                        .map(first_sentence)
                });
                let mut out = Map::new();
                out.insert("path".into(), json!(d.path));
                out.insert("displayName".into(), json!(d.display_name));
                if let Some(text) = description {
                    out.insert("description".into(), json!(text));
                }
                if !d.x.is_empty() {
                    out.insert("x-descriptors".into(), json!(d.x));
                }
                Ok(Value::Object(out))
            })
            .collect()
    };
    Ok(json!({
        "name": name,
        "version": version.get("name"),
        "kind": kind,
        "displayName": info.display_name,
        "description": info.description,
        "specDescriptors": descriptors("spec", &spec)?,
        "statusDescriptors": descriptors("status", &info.status)?,
    }))
}

/// How the console shows a component kind `kinds` says nothing of: by its
/// registry title and its CRD's first sentence, with the shared fields (so
/// that a new component needs no console text of its own).
fn component_default(kind: &str, schema: &Value, base: &Base) -> Option<KindInfo> {
    let entry = kubeflow_api::registry::by_kind(kind)?;
    let about = schema.get("description").and_then(Value::as_str)?;
    Some(KindInfo {
        display_name: entry.title.to_string(),
        description: first_sentence(about),
        spec: base.component_defaults.spec.clone(),
        status: base.component_defaults.status.clone(),
    })
}

/// The `Kubeflow` kind's descriptors with one Managed/Removed choice per
/// component of the registry, named by its title, after `components`.
fn with_component_states(list: &[Descriptor]) -> Vec<Descriptor> {
    let states = kubeflow_api::registry::COMPONENTS
        .iter()
        .map(|c| Descriptor {
            path: format!("components.{}.managementState", c.field),
            display_name: c.title.to_string(),
            description: None,
            x: ["Managed", "Removed"]
                .map(|s| format!("urn:alm:descriptor:com.tectonic.ui:select:{s}"))
                .to_vec(),
        });
    let at = list
        .iter()
        .position(|d| d.path == "components")
        .map_or(list.len(), |i| i + 1);
    let mut out = list[..at].to_vec();
    out.extend(states);
    out.extend_from_slice(&list[at..]);
    out
}

/// The schema of `<root>.<dotted path>`, if the kind has that field.
fn field_schema<'a>(schema: &'a Value, root: &str, path: &str) -> Option<&'a Value> {
    let mut at = schema.pointer(&format!("/properties/{root}"))?;
    for part in path.split('.') {
        at = at.get("properties")?.get(part)?;
    }
    Some(at)
}

fn first_sentence(text: &str) -> String {
    let text = text.split("\n\n").next().unwrap_or(text).replace('\n', " ");
    match text.find(". ") {
        Some(end) => text[..=end].to_string(),
        None => text,
    }
}

pub fn annotations(base: &Base) -> Value {
    json!({
        "annotations": {
            "operators.operatorframework.io.bundle.mediatype.v1": "registry+v1",
            "operators.operatorframework.io.bundle.manifests.v1": "manifests/",
            "operators.operatorframework.io.bundle.metadata.v1": "metadata/",
            "operators.operatorframework.io.bundle.package.v1": base.package,
            "operators.operatorframework.io.bundle.channels.v1": base.channel,
            "operators.operatorframework.io.bundle.channel.default.v1": base.channel,
            "com.redhat.openshift.versions": base.openshift_versions,
        }
    })
}

/// The bundle image's Dockerfile: the annotations again, as labels (OLM
/// reads either).
pub fn dockerfile(annotations: &Value) -> String {
    let mut out = String::from(
        "# Generated by bundle/generate; do not edit.\n\
         # The OLM bundle image: the generated manifests and metadata, nothing else\n\
         # (docs/install.md, \"OpenShift / OperatorHub\"). Build it from this folder:\n\
         #   docker build -t <registry>/kubeflow/kubeflow-operator-bundle:<version> bundle\n\
         FROM scratch\n",
    );
    let labels: Vec<String> = annotations["annotations"]
        .as_object()
        .into_iter()
        .flatten()
        .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or_default()))
        .collect();
    out.push_str(&format!("LABEL {}\n", labels.join(" \\\n      ")));
    out.push_str("COPY manifests /manifests/\nCOPY metadata /metadata/\n");
    out
}
