//! A real kubelet on every workload the components install. kwok marks a pod
//! Running whatever its template says; here every Deployment, StatefulSet
//! and DaemonSet of every component of the demo's Kubeflow (the default
//! release, all fourteen components) runs on the cluster's real node
//! (containerd, runc, CNI): the kubelet mounts each Secret, ConfigMap,
//! projected token and volume and applies each security context, and the
//! API server admits each pod through Pod Security. A pod that could never
//! start on a real cluster fails the test, naming its workload and why.
//!
//! What is not the workload as installed, and why:
//! - the images: the project's own `imageRegistry` moves every image to a
//!   local name, and each name holds one stand-in program
//!   (`e2e/node/stand-in.c`) at every path a command names; no upstream
//!   program runs and nothing is pulled;
//! - where the pods run and what they request: each component's `overrides`
//!   put its workloads on the real node (a node selector and a toleration of
//!   its taint), ask 1m CPU and 4Mi each (the node has two cores; the
//!   bundles ask more than that in all) and `IfNotPresent` (the node may not
//!   pull);
//! - what upstream programs make at run time and other pods mount, made by
//!   the test as those programs would ([`MADE_AT_RUN_TIME`], and each
//!   cert-manager Certificate's Secret): their programs are stand-ins here.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::core::v1::{ConfigMap, Event, Pod, Secret};
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, ListParams, Patch, PatchParams};
use kubeflow_e2e::component::{ALL_COMPONENTS, ALL_KINDS, prepare};
use kubeflow_e2e::demo::{Demo, KUBEFLOW_NAMESPACE, clear_leftovers};
use serde_json::{Value, json};

/// The mirror every image moves to: local names the node holds.
const STAND_IN: &str = "localhost/kubeflow-e2e/stand-in";
/// The operators' metrics ports (16560-16575): apart from the other demos'.
const PORT_BASE: u16 = 16560;
/// How long the pods may take to start, every workload at once on a
/// two-core machine. A bound on waiting, not a measure of speed.
const START_TIMEOUT: Duration = Duration::from_secs(300);
const COMPONENT_LABEL: &str = "components.kubeflow.org/component";

/// Objects an upstream program makes at run time that another pod mounts:
/// (kind, name, the program). The test makes them as that program would.
const MADE_AT_RUN_TIME: &[(&str, &str, &str)] = &[
    (
        "ConfigMap",
        "istio-ca-root-cert",
        "istiod, in every namespace",
    ),
    (
        "Secret",
        "webhook-server-tls",
        "the Pipelines cache deployer, for the cache webhook",
    ),
];

/// Workloads that need a device this machine has no driver for: (workload,
/// the host path its device plugin mounts). Such a workload must reach the
/// kubelet and fail only on that path, while the path is missing here.
const NEEDS_A_DEVICE: &[(&str, &str)] = &[("intel-device-plugin", "/sys/class/drm")];

/// One workload as installed.
#[derive(Clone, Debug)]
struct Workload {
    component: String,
    kind: &'static str,
    namespace: String,
    name: String,
    replicas: i32,
    /// Its pods' label selector (`k=v,...`).
    selector: String,
    /// Its pod template's `spec`.
    pod: Value,
}

impl Workload {
    fn id(&self) -> String {
        format!("{} {}/{}", self.kind, self.namespace, self.name)
    }
    fn containers(&self) -> impl Iterator<Item = (&'static str, usize, &Value)> {
        ["initContainers", "containers"]
            .into_iter()
            .flat_map(move |list| {
                self.pod[list]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .enumerate()
                    .map(move |(i, c)| (list, i, c))
            })
    }
}

fn labelled() -> ListParams {
    ListParams::default().labels(COMPONENT_LABEL)
}

/// A workload from its object; a DaemonSet counts as one pod (the real node
/// is the only one it may use).
fn workload<K: serde::Serialize>(kind: &'static str, o: &K) -> Workload {
    let v = serde_json::to_value(o).expect("workload as JSON");
    let text = |v: &Value| v.as_str().unwrap_or_default().to_string();
    let replicas = if kind == "DaemonSet" {
        1
    } else {
        v["spec"]["replicas"]
            .as_i64()
            .and_then(|r| i32::try_from(r).ok())
            .unwrap_or(1)
    };
    let selector = v["spec"]["selector"]["matchLabels"]
        .as_object()
        .into_iter()
        .flatten()
        .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or_default()))
        .collect::<Vec<_>>()
        .join(",");
    Workload {
        component: text(&v["metadata"]["labels"][COMPONENT_LABEL]),
        kind,
        namespace: text(&v["metadata"]["namespace"]),
        name: text(&v["metadata"]["name"]),
        replicas,
        selector,
        pod: v["spec"]["template"]["spec"].clone(),
    }
}

/// Every Deployment, StatefulSet and DaemonSet a component installed.
async fn installed_workloads(client: &kube::Client) -> Vec<Workload> {
    let mut out = Vec::new();
    out.extend(listed::<Deployment>(client, "Deployment").await);
    out.extend(listed::<StatefulSet>(client, "StatefulSet").await);
    out.extend(listed::<DaemonSet>(client, "DaemonSet").await);
    out.retain(|w| w.replicas > 0);
    out
}

async fn listed<K>(client: &kube::Client, kind: &'static str) -> Vec<Workload>
where
    K: kube::Resource<DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + serde::Serialize
        + std::fmt::Debug,
{
    Api::<K>::all(client.clone())
        .list(&labelled())
        .await
        .unwrap_or_else(|e| panic!("{kind}s: {e}"))
        .items
        .iter()
        .map(|o| workload(kind, o))
        .collect()
}

/// A command's path inside the image: absolute, relative to the working
/// directory, or a bare name found on the image's PATH.
fn command_path(command: &str, working_dir: Option<&str>) -> String {
    if command.starts_with('/') {
        command.to_string()
    } else if command.contains('/') {
        let joined = Path::new(working_dir.unwrap_or("/")).join(command);
        normalise(&joined)
    } else {
        format!("/usr/local/bin/{command}")
    }
}

fn normalise(p: &Path) -> String {
    let mut parts: Vec<String> = Vec::new();
    for c in p.components() {
        match c {
            std::path::Component::ParentDir => {
                parts.pop();
            }
            std::path::Component::Normal(s) => parts.push(s.to_string_lossy().to_string()),
            _ => {}
        }
    }
    format!("/{}", parts.join("/"))
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .into_iter()
        .flatten()
        .filter_map(|s| s.as_str().map(str::to_string))
        .collect()
}

/// What the stand-in image must hold for these workloads.
#[derive(Default, Debug)]
struct StandIn {
    /// Paths of the program: every command, exec probe and hook.
    paths: BTreeSet<String>,
    /// Init containers' command lines (see stand-in.c).
    init_commands: BTreeSet<String>,
    /// Every TCP port declared or probed.
    ports: BTreeSet<i64>,
    /// Every image reference, as the pods name it.
    images: BTreeSet<String>,
}

fn stand_in_for(workloads: &[Workload]) -> StandIn {
    let mut s = StandIn::default();
    s.paths.insert("/stand-in".to_string());
    for w in workloads {
        for (list, _, c) in w.containers() {
            let dir = c["workingDir"].as_str();
            s.images
                .insert(c["image"].as_str().unwrap_or_default().to_string());
            let command = strings(&c["command"]);
            if let Some(first) = command.first() {
                s.paths.insert(command_path(first, dir));
            }
            for probe in ["livenessProbe", "readinessProbe", "startupProbe"] {
                if let Some(first) = strings(&c[probe]["exec"]["command"]).first() {
                    s.paths.insert(command_path(first, dir));
                }
                if let Some(p) = c[probe]["httpGet"]["port"]
                    .as_i64()
                    .or(c[probe]["tcpSocket"]["port"].as_i64())
                {
                    s.ports.insert(p);
                }
            }
            for hook in ["postStart", "preStop"] {
                if let Some(first) = strings(&c["lifecycle"][hook]["exec"]["command"]).first() {
                    s.paths.insert(command_path(first, dir));
                }
            }
            for p in c["ports"].as_array().into_iter().flatten() {
                if let Some(n) = p["containerPort"].as_i64() {
                    s.ports.insert(n);
                }
            }
            if list == "initContainers" {
                let argv = if command.is_empty() {
                    vec!["/stand-in".to_string()]
                } else {
                    command
                };
                let line = argv
                    .into_iter()
                    .chain(strings(&c["args"]))
                    .collect::<Vec<_>>()
                    .join(" ")
                    .replace(['\n', '\r'], " ");
                s.init_commands.insert(line);
            }
        }
    }
    s
}

/// Builds the stand-in image and gives it every name the pods use.
fn import_stand_in(s: &StandIn, work: &Path) {
    let _ = std::fs::remove_dir_all(work);
    std::fs::create_dir_all(work).expect("work folder");
    // Built here (milliseconds), so it is always this checkout's.
    let program = work.join("stand-in");
    kubeflow_e2e::run_ok(
        Path::new("musl-gcc"),
        &[
            "-static",
            "-Os",
            "-s",
            "-o",
            &program.display().to_string(),
            &kubeflow_e2e::repo_root()
                .join("e2e/node/stand-in.c")
                .display()
                .to_string(),
        ],
    );
    let root = work.join("rootfs");
    for p in &s.paths {
        let to = root.join(p.trim_start_matches('/'));
        std::fs::create_dir_all(to.parent().expect("a parent")).expect("folder");
        std::fs::copy(&program, &to)
            .unwrap_or_else(|e| panic!("{} to {}: {e}", program.display(), to.display()));
    }
    let lines = |set: Vec<String>| set.join("\n") + "\n";
    std::fs::write(
        root.join("init-commands"),
        lines(s.init_commands.iter().cloned().collect()),
    )
    .expect("init-commands");
    std::fs::write(
        root.join("ports"),
        lines(s.ports.iter().map(|p| p.to_string()).collect()),
    )
    .expect("ports");
    let archive = work.join("stand-in.oci.tar");
    let root_s = root.display().to_string();
    let archive_s = archive.display().to_string();
    kubeflow_e2e::run_ok(
        &kubeflow_e2e::repo_root().join("images/pack"),
        &[
            &root_s,
            &archive_s,
            "1",
            "65532:65532",
            "/stand-in",
            "PATH=/usr/local/bin:/usr/bin:/bin",
        ],
    );
    kubeflow_e2e::cluster_cmd(&["import", STAND_IN, &archive_s]).expect("import the stand-in");
    let mut names = Vec::new();
    for image in &s.images {
        assert!(
            image.starts_with(&format!("{STAND_IN}/")),
            "{image} did not move to the mirror: imageRegistry missed it"
        );
        match image.split_once('@') {
            // A reference with tag and digest is looked up by its digest.
            Some((named, digest)) => {
                let name = match named.rsplit_once(':') {
                    Some((n, tag)) if !tag.contains('/') => n,
                    _ => named,
                };
                names.push(image.clone());
                names.push(format!("{name}@{digest}"));
            }
            // An untagged one is looked up as its `latest`.
            None if !image.rsplit('/').next().unwrap_or_default().contains(':') => {
                names.push(format!("{image}:latest"));
            }
            None => names.push(image.clone()),
        }
    }
    let source = format!("{STAND_IN}:1");
    let mut args = vec!["ctr", "images", "tag", "--force", source.as_str()];
    args.extend(names.iter().map(String::as_str));
    kubeflow_e2e::cluster_cmd(&args).unwrap_or_else(|e| panic!("tag the stand-in: {e}"));
}

/// Each component's overrides that put its workloads on the real node.
fn overrides(workloads: &[Workload], node: &str) -> BTreeMap<String, Vec<Value>> {
    let mut out: BTreeMap<String, Vec<Value>> = BTreeMap::new();
    for w in workloads {
        let mut ops = vec![
            json!({"op": "add", "path": "/spec/template/spec/nodeSelector",
                   "value": {"kubernetes.io/hostname": node}}),
            json!({"op": "add", "path": "/spec/template/spec/tolerations",
                   "value": [{"operator": "Exists"}]}),
        ];
        for (list, i, _) in w.containers() {
            ops.push(
                json!({"op": "add", "path": format!("/spec/template/spec/{list}/{i}/resources"),
                "value": {"requests": {"cpu": "1m", "memory": "4Mi"}}}),
            );
            ops.push(json!({"op": "add", "path": format!("/spec/template/spec/{list}/{i}/imagePullPolicy"),
                "value": "IfNotPresent"}));
        }
        out.entry(w.component.clone()).or_default().push(json!({
            "target": {"kind": w.kind, "name": w.name, "namespace": w.namespace},
            "jsonPatch": ops,
        }));
    }
    out
}

/// Sets (or, with `None`, clears) each component's overrides in the
/// `Kubeflow` resource, as a person would edit it.
async fn set_overrides(
    client: &kube::Client,
    per_component: &BTreeMap<String, Option<&Vec<Value>>>,
) {
    let mut components = serde_json::Map::new();
    for (name, list) in per_component {
        let field = kubeflow_api::registry::by_name(name)
            .unwrap_or_else(|| panic!("{name} is no component"))
            .field;
        components.insert(field.to_string(), json!({"spec": {"overrides": list}}));
    }
    let kubeflow: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        KUBEFLOW_NAMESPACE,
        &ApiResource {
            group: "platform.kubeflow.org".into(),
            version: "v1alpha1".into(),
            api_version: "platform.kubeflow.org/v1alpha1".into(),
            kind: "Kubeflow".into(),
            plural: "kubeflows".into(),
        },
    );
    kubeflow
        .patch(
            "kubeflow",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"components": components}})),
        )
        .await
        .expect("patch the Kubeflow resource's overrides");
}

/// Makes what upstream programs make at run time and the pods mount: each
/// cert-manager Certificate's Secret, and [`MADE_AT_RUN_TIME`] where a pod
/// mounts it and it is missing.
async fn make_run_time_objects(client: &kube::Client, workloads: &[Workload]) {
    let certificates: Api<DynamicObject> = Api::all_with(
        client.clone(),
        &ApiResource {
            group: "cert-manager.io".into(),
            version: "v1".into(),
            api_version: "cert-manager.io/v1".into(),
            kind: "Certificate".into(),
            plural: "certificates".into(),
        },
    );
    for c in certificates
        .list(&Default::default())
        .await
        .expect("Certificates")
    {
        let ns = c.metadata.namespace.clone().unwrap_or_default();
        let secret = c.data["spec"]["secretName"].as_str().unwrap_or_default();
        let service = c.data["spec"]["dnsNames"][0]
            .as_str()
            .and_then(|d| d.split('.').next())
            .unwrap_or("webhook");
        let cert = kubeflow_operator::certs::generate(service, &ns).expect("certificate");
        let data =
            json!({"tls.crt": cert.cert_pem, "tls.key": cert.key_pem, "ca.crt": cert.ca_pem});
        create_if_missing::<Secret>(
            client,
            &ns,
            secret,
            json!({"type": "kubernetes.io/tls", "stringData": data}),
        )
        .await;
    }
    for w in workloads {
        for v in w.pod["volumes"].as_array().into_iter().flatten() {
            let (kind, name) = if let Some(n) = v["secret"]["secretName"].as_str() {
                ("Secret", n)
            } else if let Some(n) = v["configMap"]["name"].as_str() {
                ("ConfigMap", n)
            } else {
                continue;
            };
            if !MADE_AT_RUN_TIME
                .iter()
                .any(|(k, n, _)| *k == kind && *n == name)
            {
                continue;
            }
            let cert = kubeflow_operator::certs::generate(name, &w.namespace).expect("certificate");
            if kind == "Secret" {
                create_if_missing::<Secret>(
                    client,
                    &w.namespace,
                    name,
                    json!({"stringData": {"tls.crt": cert.cert_pem, "tls.key": cert.key_pem, "ca.crt": cert.ca_pem}}),
                )
                .await;
            } else {
                create_if_missing::<ConfigMap>(
                    client,
                    &w.namespace,
                    name,
                    json!({"data": {"root-cert.pem": cert.ca_pem}}),
                )
                .await;
            }
        }
    }
}

async fn create_if_missing<K>(client: &kube::Client, ns: &str, name: &str, body: Value)
where
    K: kube::Resource<Scope = kube::core::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + serde::Serialize
        + std::fmt::Debug,
{
    let api: Api<K> = Api::namespaced(client.clone(), ns);
    if api.get_opt(name).await.expect("read").is_some() {
        return;
    }
    let mut object = body;
    object["apiVersion"] = json!(K::api_version(&()));
    object["kind"] = json!(K::kind(&()));
    object["metadata"] = json!({"name": name, "namespace": ns});
    let object: K = serde_json::from_value(object).expect("object");
    api.create(&Default::default(), &object)
        .await
        .unwrap_or_else(|e| panic!("create {} {ns}/{name}: {e}", K::kind(&())));
}

/// Events that say nothing about whether a pod can start.
const NOT_ABOUT_STARTING: &[&str] = &["MissingClusterDNS", "Unhealthy", "BackOff"];

/// What the cluster says of each workload that is not yet running on the
/// real node: its pods' states and the warnings about them. A workload is
/// running when `replicas` of its pods are on the node, Running, and each of
/// their containers has started (a container a failing HTTPS or gRPC probe
/// restarts has started; one that cannot start has not).
async fn not_running(
    client: &kube::Client,
    workloads: &[Workload],
    node: &str,
) -> BTreeMap<String, Vec<String>> {
    let namespaces: BTreeSet<&str> = workloads.iter().map(|w| w.namespace.as_str()).collect();
    let mut pods = Vec::new();
    let mut owners: BTreeMap<(String, String), String> = BTreeMap::new();
    let mut warnings: BTreeMap<(String, String), Vec<String>> = BTreeMap::new();
    for ns in &namespaces {
        pods.extend(
            Api::<Pod>::namespaced(client.clone(), ns)
                .list(&Default::default())
                .await
                .expect("pods")
                .items,
        );
        for rs in Api::<ReplicaSet>::namespaced(client.clone(), ns)
            .list(&Default::default())
            .await
            .expect("ReplicaSets")
        {
            if let Some(d) = rs
                .metadata
                .owner_references
                .iter()
                .flatten()
                .find(|o| o.kind == "Deployment")
            {
                owners.insert(
                    (ns.to_string(), rs.metadata.name.clone().unwrap_or_default()),
                    d.name.clone(),
                );
            }
        }
        for e in Api::<Event>::namespaced(client.clone(), ns)
            .list(&ListParams::default().fields("type=Warning"))
            .await
            .expect("events")
        {
            if NOT_ABOUT_STARTING.contains(&e.reason.as_deref().unwrap_or_default()) {
                continue;
            }
            let o = e.involved_object;
            warnings
                .entry((ns.to_string(), o.name.unwrap_or_default()))
                .or_default()
                .push(format!(
                    "{} {}: {}",
                    o.kind.unwrap_or_default(),
                    e.reason.unwrap_or_default(),
                    e.message.unwrap_or_default()
                ));
        }
    }
    let workload_of = |p: &Pod| -> Option<(String, String)> {
        let ns = p.metadata.namespace.clone()?;
        let o = p.metadata.owner_references.as_ref()?.first()?;
        let name = if o.kind == "ReplicaSet" {
            owners.get(&(ns.clone(), o.name.clone()))?.clone()
        } else {
            o.name.clone()
        };
        Some((ns, name))
    };
    let mut out = BTreeMap::new();
    for w in workloads {
        let key = (w.namespace.clone(), w.name.clone());
        let mine: Vec<&Pod> = pods
            .iter()
            .filter(|p| workload_of(p).as_ref() == Some(&key))
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .collect();
        let on_node: Vec<&&Pod> = mine
            .iter()
            .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node))
            .collect();
        let running = on_node.iter().filter(|p| started(p)).count();
        if running as i32 >= w.replicas {
            continue;
        }
        let mut said = vec![format!(
            "{running} of {} pods running on {node}",
            w.replicas
        )];
        // Warnings about the workload itself (a refused pod: FailedCreate
        // on its ReplicaSet, StatefulSet or DaemonSet) and its pods.
        let rs_names: Vec<&String> = owners
            .iter()
            .filter(|((ns, _), d)| *ns == w.namespace && **d == w.name)
            .map(|((_, rs), _)| rs)
            .collect();
        for ((ns, name), list) in &warnings {
            if *ns == w.namespace && (*name == w.name || rs_names.contains(&name)) {
                said.extend(list.iter().cloned());
            }
        }
        for p in &mine {
            let name = p.metadata.name.clone().unwrap_or_default();
            said.push(format!("pod {name}: {}", pod_state(p)));
            if let Some(list) = warnings.get(&(w.namespace.clone(), name)) {
                said.extend(list.iter().cloned());
            }
        }
        out.insert(w.id(), said);
    }
    out
}

fn started(p: &Pod) -> bool {
    let Some(status) = &p.status else {
        return false;
    };
    status.phase.as_deref() == Some("Running")
        && status.container_statuses.iter().flatten().all(|c| {
            let state = c.state.as_ref();
            state.is_some_and(|s| s.running.is_some())
                || c.last_state
                    .as_ref()
                    .and_then(|s| s.terminated.as_ref())
                    .is_some_and(|t| t.reason.as_deref() != Some("StartError"))
        })
}

fn pod_state(p: &Pod) -> String {
    let Some(status) = &p.status else {
        return "no status".into();
    };
    let mut out = format!(
        "{} on {}",
        status.phase.clone().unwrap_or_default(),
        p.spec
            .as_ref()
            .and_then(|s| s.node_name.clone())
            .unwrap_or("no node".into())
    );
    for c in status
        .init_container_statuses
        .iter()
        .flatten()
        .chain(status.container_statuses.iter().flatten())
    {
        if let Some(w) = c.state.as_ref().and_then(|s| s.waiting.as_ref()) {
            out.push_str(&format!(
                "; {} waiting: {} {}",
                c.name,
                w.reason.clone().unwrap_or_default(),
                w.message.clone().unwrap_or_default()
            ));
        }
    }
    out
}

/// Waits until every workload runs on the node, or fails naming each that
/// does not and what the cluster says of it. The workloads of
/// [`NEEDS_A_DEVICE`] must instead fail on their device's path alone.
async fn wait_all_running(client: &kube::Client, workloads: &[Workload], node: &str) {
    let started = Instant::now();
    let mut left;
    loop {
        left = not_running(client, workloads, node).await;
        left.retain(|id, said| !needs_a_missing_device(id, said));
        if left.is_empty() || started.elapsed() > START_TIMEOUT {
            break;
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    assert!(
        left.is_empty(),
        "{} of {} workloads do not run on a real kubelet after {START_TIMEOUT:?}:\n{}",
        left.len(),
        workloads.len(),
        left.iter()
            .map(|(w, said)| format!("{w}:\n    {}", said.join("\n    ")))
            .collect::<Vec<_>>()
            .join("\n")
    );
    kubeflow_e2e::print_time(&format!(
        "workloads: {} running on the real node in {:.0} s",
        workloads.len(),
        started.elapsed().as_secs_f64()
    ));
}

/// Whether the workload is one of [`NEEDS_A_DEVICE`], this machine lacks its
/// device's path, and that path is what its pod fails on.
fn needs_a_missing_device(id: &str, said: &[String]) -> bool {
    NEEDS_A_DEVICE.iter().any(|(name, path)| {
        id.ends_with(&format!("/{name}"))
            && !Path::new(path).exists()
            && said
                .iter()
                .any(|s| s.contains(&format!("mkdir \"{path}\"")))
    })
}

/// The test of the test: a Secret a Deployment mounts, deleted while its
/// operator is stopped (so nothing puts it back), and the pod restarted:
/// the check must name that Deployment and the mount. Then the operator
/// restores the Secret and the pod starts again.
async fn a_missing_secret_is_caught(
    client: &kube::Client,
    demo: &Demo,
    workloads: &[Workload],
    node: &str,
) {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), KUBEFLOW_NAMESPACE);
    let mut chosen = None;
    'find: for w in workloads
        .iter()
        .filter(|w| w.kind == "Deployment" && w.namespace == KUBEFLOW_NAMESPACE)
    {
        for v in w.pod["volumes"].as_array().into_iter().flatten() {
            let Some(name) = v["secret"]["secretName"].as_str() else {
                continue;
            };
            if v["secret"]["optional"] == json!(true) {
                continue;
            }
            let managed = secrets
                .get_opt(name)
                .await
                .expect("secret")
                .is_some_and(|s| {
                    s.metadata.labels.unwrap_or_default().get(COMPONENT_LABEL) == Some(&w.component)
                });
            if managed {
                chosen = Some((w.clone(), name.to_string()));
                break 'find;
            }
        }
    }
    let (w, secret) = chosen.expect("a Deployment that mounts a Secret its operator manages");
    demo.stop_operator(&w.component);
    secrets
        .delete(&secret, &DeleteParams::default())
        .await
        .expect("delete the Secret");
    restart_pods(client, &w).await;
    let caught = kubeflow_e2e::wait::wait_for(
        &format!(
            "the check to name {} and its missing Secret {secret}",
            w.id()
        ),
        Duration::from_secs(120),
        || async {
            let left = not_running(client, std::slice::from_ref(&w), node).await;
            left.get(&w.id())
                .filter(|said| {
                    said.iter()
                        .any(|s| s.contains("FailedMount") && s.contains(&secret))
                })
                .cloned()
        },
    )
    .await;
    eprintln!("caught: {}", caught.join("; "));
    demo.start();
    kubeflow_e2e::wait::wait_for(
        &format!("the operator to restore {secret}"),
        Duration::from_secs(60),
        || async { secrets.get_opt(&secret).await.ok().flatten() },
    )
    .await;
    // The kubelet retries a failed mount with a growing backoff; a new pod
    // mounts at once.
    restart_pods(client, &w).await;
    wait_all_running(client, std::slice::from_ref(&w), node).await;
}

async fn restart_pods(client: &kube::Client, w: &Workload) {
    Api::<Pod>::namespaced(client.clone(), &w.namespace)
        .delete_collection(
            &DeleteParams::default(),
            &ListParams::default().labels(&w.selector),
        )
        .await
        .expect("delete the pods");
}

/// The real node, brought up fresh after the install (a DaemonSet that
/// tolerates every taint and selects `kubernetes.io/os: linux`, Istio's CNI
/// agent, would otherwise land on it before its stand-in image is there,
/// and hold the install; stopping the node removes its Node object); on
/// drop, put back as found: stopped, or running again.
struct FreshNode {
    was_running: bool,
    /// Host folders the kubelet made for volumes: removed once it is down.
    folders: Vec<PathBuf>,
}

impl FreshNode {
    fn stop_if_running() -> Self {
        let was_running = !kubeflow_e2e::cluster_cmd(&["node-name"])
            .expect("node-name")
            .trim()
            .is_empty();
        if was_running {
            kubeflow_e2e::cluster_cmd(&["node-down"]).expect("stop the real node");
        }
        FreshNode {
            was_running,
            folders: Vec::new(),
        }
    }

    /// Starts it; its name.
    fn up(&self) -> String {
        kubeflow_e2e::cluster_cmd(&["node-up"]).expect("start the real node");
        let node = kubeflow_e2e::cluster_cmd(&["node-name"])
            .expect("node-name")
            .trim()
            .to_string();
        assert!(!node.is_empty(), "the real node is not running");
        node
    }
}

impl Drop for FreshNode {
    fn drop(&mut self) {
        let _ = kubeflow_e2e::cluster_cmd(&["node-down"]);
        for f in &self.folders {
            let _ = std::fs::remove_dir_all(f);
            // Their parent too, when nothing else is in it.
            if let Some(parent) = f.parent() {
                let _ = std::fs::remove_dir(parent);
            }
        }
        if self.was_running {
            let _ = kubeflow_e2e::cluster_cmd(&["node-up"]);
        }
    }
}

/// The host folders the kwok volume class's hostPath volumes name, which
/// the real kubelet creates when it mounts them.
async fn volume_folders(client: &kube::Client) -> Vec<PathBuf> {
    let pvs: Api<k8s_openapi::api::core::v1::PersistentVolume> = Api::all(client.clone());
    pvs.list(&Default::default())
        .await
        .expect("PersistentVolumes")
        .items
        .into_iter()
        .filter_map(|pv| pv.spec?.host_path.map(|h| PathBuf::from(h.path)))
        .filter(|p| !p.exists())
        .collect()
}

#[tokio::test]
async fn every_workload_of_every_component_starts_on_a_real_kubelet() {
    if !kubeflow_e2e::real_node_possible("the real-kubelet workload test") {
        return;
    }
    let mut fresh = FreshNode::stop_if_running();
    let (client, mut phases) = prepare(&ALL_KINDS, &ALL_COMPONENTS).await;
    clear_leftovers(&client).await;
    phases.phase("leftovers swept, the node stopped");
    let (demo, _) = Demo::up_with_env(
        "workloads",
        PORT_BASE,
        "processes",
        &[("KUBEFLOW_DEMO_IMAGE_REGISTRY", STAND_IN)],
    );
    let workloads = installed_workloads(&client).await;
    let components: BTreeSet<&str> = workloads.iter().map(|w| w.component.as_str()).collect();
    let expected: BTreeSet<&str> = kubeflow_api::registry::operators()
        .filter(|c| *c != kubeflow_api::registry::META)
        .collect();
    assert_eq!(
        components, expected,
        "every component has its workloads here"
    );

    phases.phase("the demo installed on kwok");
    let node = fresh.up();
    phases.phase("the real node up");
    let stand_in = stand_in_for(&workloads);
    import_stand_in(
        &stand_in,
        &kubeflow_e2e::operator::target_dir().join("e2e-stand-in"),
    );
    phases.phase("the stand-in image built and tagged");
    make_run_time_objects(&client, &workloads).await;
    fresh.folders = volume_folders(&client).await;
    let moves = overrides(&workloads, &node);
    set_overrides(
        &client,
        &moves.iter().map(|(c, o)| (c.clone(), Some(o))).collect(),
    )
    .await;
    wait_all_running(&client, &workloads, &node).await;
    phases.phase("every workload running on the real node");
    a_missing_secret_is_caught(&client, &demo, &workloads, &node).await;
    phases.phase("a missing Secret caught");

    // Back to kwok: nothing of this test stays on the node.
    set_overrides(&client, &moves.keys().map(|c| (c.clone(), None)).collect()).await;
    kubeflow_e2e::wait::wait_for(
        "every component's pods to leave the real node",
        Duration::from_secs(180),
        || async {
            let pods: Api<Pod> = Api::all(client.clone());
            let on_node = pods
                .list(&ListParams::default().fields(&format!("spec.nodeName={node}")))
                .await
                .ok()?
                .items
                .into_iter()
                .filter(|p| {
                    p.metadata.namespace.as_deref() != Some(kubeflow_e2e::demo::OPERATOR_NAMESPACE)
                })
                // A DaemonSet keeps a pod wherever the node's labels fit its
                // selector (Istio's CNI agent: `kubernetes.io/os: linux`,
                // every taint tolerated); the node's stop ends those.
                .filter(|p| {
                    !p.metadata
                        .owner_references
                        .iter()
                        .flatten()
                        .any(|o| o.kind == "DaemonSet")
                })
                .count();
            (on_node == 0).then_some(())
        },
    )
    .await;
    phases.phase("back on kwok");
}
