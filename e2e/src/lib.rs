//! Test support for the local control plane (`e2e/cluster`): connect (starting
//! the cluster when it is not running), throwaway namespaces, YAML apply,
//! waits with timeouts, the upstream bundles, and operator processes.
//!
//! Tests that need the cluster never pass silently without it: when it cannot
//! be reached or started they fail with the reason.

pub mod access;
pub mod chart;
pub mod component;
pub mod demo;
pub mod fault_proxy;
pub mod local_database;
pub mod login;
pub mod objects;
pub mod operator;
pub mod prometheus;
pub mod repair;
pub mod rotator;
pub mod stall;
pub mod upstream;
pub mod upstream_runs;
pub mod user_objects;
pub mod wait;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::discovery::Scope;
use kube::{Client, Config};
use tokio::sync::{Mutex, MutexGuard, OnceCell};

pub use wait::wait_for;

/// The repository's root folder.
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default()
}

/// The upstream bundles: `$KUBEFLOW_MANIFESTS`, `$MANIFESTS_DIR` (what the
/// operators read), or `../shared/manifests` beside the repository.
pub fn manifests_dir() -> PathBuf {
    let dir = std::env::var_os("KUBEFLOW_MANIFESTS")
        .or_else(|| std::env::var_os("MANIFESTS_DIR"))
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join("..").join("shared").join("manifests"));
    assert!(
        dir.is_dir(),
        "the upstream bundles are not at {}; put shared/ beside the repository or set KUBEFLOW_MANIFESTS",
        dir.display()
    );
    dir
}

/// Reads a bundle file's text, relative to [`manifests_dir`].
pub fn bundle_text(relative: &str) -> String {
    let path = manifests_dir().join(relative);
    std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read bundle {}: {e}", path.display()))
}

/// The cluster script.
pub fn cluster_script() -> PathBuf {
    repo_root().join("e2e").join("cluster")
}

/// Runs `e2e/cluster <args>` and returns its standard output.
pub fn cluster_cmd(args: &[&str]) -> anyhow::Result<String> {
    let out = Command::new("bash")
        .arg(cluster_script())
        .args(args)
        .output()?;
    if !out.status.success() {
        anyhow::bail!(
            "e2e/cluster {} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The e2e cache (`KUBEFLOW_E2E_CACHE`, else `~/.cache/kubeflow-e2e`).
pub fn cache_dir() -> PathBuf {
    let home = std::env::var_os("HOME")
        .map(PathBuf::from)
        .unwrap_or_default();
    std::env::var_os("KUBEFLOW_E2E_CACHE")
        .map(PathBuf::from)
        .unwrap_or(home.join(".cache/kubeflow-e2e"))
}

/// The kubeconfig `e2e/cluster up` writes.
pub fn kubeconfig_path() -> PathBuf {
    std::env::var_os("KUBEFLOW_E2E_STATE")
        .map(PathBuf::from)
        .unwrap_or(cache_dir().join("cluster"))
        .join("kubeconfig")
}

/// The folder with the control-plane binaries (kubectl, helm, ...).
pub fn bin_dir() -> PathBuf {
    cluster_cmd(&["bin-dir"])
        .map(|s| PathBuf::from(s.trim()))
        .unwrap_or_default()
}

async fn client_from_kubeconfig() -> anyhow::Result<Client> {
    let kc = Kubeconfig::read_from(kubeconfig_path())?;
    let config = Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default()).await?;
    Ok(Client::try_from(config)?)
}

/// A client of the test cluster that acts as `user` (impersonation, as
/// `kubectl --as` does: a ServiceAccount's name gets its groups).
pub async fn client_as(user: &str) -> anyhow::Result<Client> {
    let kc = Kubeconfig::read_from(kubeconfig_path())?;
    let mut config = Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default()).await?;
    config.auth_info.impersonate = Some(user.to_string());
    Ok(Client::try_from(config)?)
}

async fn reachable(client: &Client) -> bool {
    client.apiserver_version().await.is_ok()
}

static STARTED: OnceCell<()> = OnceCell::const_new();

/// A client of the test cluster; starts the cluster when it is not up.
/// Panics with the reason when it cannot.
pub async fn client() -> Client {
    STARTED
        .get_or_init(|| async {
            if let Ok(c) = client_from_kubeconfig().await
                && reachable(&c).await
            {
                return;
            }
            if let Err(e) = tokio::task::spawn_blocking(|| cluster_cmd(&["up"]))
                .await
                .map_err(anyhow::Error::from)
                .and_then(|r| r)
            {
                panic!("the test cluster is not running and could not be started: {e}");
            }
        })
        .await;
    match client_from_kubeconfig().await {
        Ok(c) if reachable(&c).await => c,
        Ok(_) => panic!(
            "the test cluster at {} does not answer",
            kubeconfig_path().display()
        ),
        Err(e) => panic!(
            "cannot read the test cluster's kubeconfig {}: {e}",
            kubeconfig_path().display()
        ),
    }
}

static SERIAL: Mutex<()> = Mutex::const_new(());

/// Serializes tests that touch cluster-scoped objects or run operators.
/// Held for the test's whole run, so its drop prints the test's time
/// (`[test time] <test>: <s> s`) past the harness's capture: CI's stage
/// table lists the slowest tests from these lines, passing or not.
pub async fn serial() -> Serial {
    let guard = SERIAL.lock().await;
    let now = std::time::Instant::now();
    Serial {
        _guard: guard,
        start: now,
        last: now,
    }
}

/// The serial lock of one test, with the time it was taken.
pub struct Serial {
    _guard: MutexGuard<'static, ()>,
    start: std::time::Instant,
    last: std::time::Instant,
}

impl Serial {
    /// Prints how long the phase that ends now took (`[test time] <test>:
    /// <phase>: <s> s (at <s> s)`), past the harness's capture, so that a
    /// passing run shows where a long test's time went too.
    pub fn phase(&mut self, phase: &str) {
        let now = std::time::Instant::now();
        print_time(&format!(
            "{phase}: {:.0} s (at {:.0} s)",
            (now - self.last).as_secs_f64(),
            (now - self.start).as_secs_f64()
        ));
        self.last = now;
    }
}

impl Drop for Serial {
    fn drop(&mut self) {
        print_time(&format!("{:.0} s", self.start.elapsed().as_secs_f64()));
    }
}

/// One `[test time]` line for the running test, on standard error (not
/// through `eprintln!`, which the harness captures).
pub fn print_time(what: &str) {
    use std::io::Write;
    // libtest names each test's thread after the test.
    let thread = std::thread::current();
    let test = thread.name().unwrap_or("a test");
    let _ = writeln!(std::io::stderr().lock(), "[test time] {test}: {what}");
}

static COUNTER: AtomicU32 = AtomicU32::new(0);

/// A namespace for one test, deleted by [`TestNamespace::delete`].
pub struct TestNamespace {
    /// Its name.
    pub name: String,
    client: Client,
}

impl TestNamespace {
    /// Creates `<prefix>-<pid>-<n>`.
    pub async fn new(client: &Client, prefix: &str) -> Self {
        let name = format!(
            "{prefix}-{}-{}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        );
        let api: Api<Namespace> = Api::all(client.clone());
        let ns: Namespace = serde_json::from_value(serde_json::json!({"metadata": {"name": name}}))
            .unwrap_or_else(|e| panic!("namespace literal: {e}"));
        api.create(&PostParams::default(), &ns)
            .await
            .unwrap_or_else(|e| panic!("cannot create namespace {name}: {e}"));
        TestNamespace {
            name,
            client: client.clone(),
        }
    }

    /// Deletes the namespace (without waiting for it to go).
    pub async fn delete(self) {
        let api: Api<Namespace> = Api::all(self.client.clone());
        let _ = api.delete(&self.name, &DeleteParams::background()).await;
    }
}

/// Leaves a test out on purpose, saying why on the test's output. Where
/// every test must run (`KUBEFLOW_E2E_REQUIRE_ALL=1`, which CI sets), a
/// test left out fails instead: a skip CI cannot see is a test that
/// silently stopped testing.
pub fn left_out(why: &str) {
    assert_ne!(
        std::env::var("KUBEFLOW_E2E_REQUIRE_ALL").as_deref(),
        Ok("1"),
        "{why}: this test would be left out, but KUBEFLOW_E2E_REQUIRE_ALL=1 wants every test to run"
    );
    eprintln!("{why}: left out");
}

/// Whether the cluster can run the real node; a clear failure where not,
/// unless left out on purpose (`KUBEFLOW_E2E_REAL_NODE=0`), then `what` is
/// left out.
pub fn real_node_possible(what: &str) -> bool {
    if cluster_cmd(&["node-enabled"]).is_ok() {
        return true;
    }
    assert_eq!(
        std::env::var("KUBEFLOW_E2E_REAL_NODE").as_deref(),
        Ok("0"),
        "the cluster cannot run a real node: run e2e/cluster as root (or set \
         KUBEFLOW_E2E_REAL_NODE=0 to leave these tests out on purpose)"
    );
    left_out(&format!("no real node (KUBEFLOW_E2E_REAL_NODE=0): {what}"));
    false
}

/// Parses multi-document YAML into objects (empty documents skipped).
pub fn parse_yaml(text: &str) -> Vec<DynamicObject> {
    text.split("\n---")
        .filter(|d| {
            d.lines().any(|l| {
                !l.trim().is_empty() && !l.trim_start().starts_with('#') && l.trim() != "---"
            })
        })
        .map(|d| {
            serde_saphyr::from_str::<serde_json::Value>(d)
                .unwrap_or_else(|e| panic!("bad YAML in test: {e}"))
        })
        .filter(|v| !v.is_null())
        .map(|v| serde_json::from_value(v).unwrap_or_else(|e| panic!("not an object: {e}")))
        .collect()
}

/// Resolves a kind by discovery, retrying briefly: a CRD applied a moment ago
/// may be listed before it is served.
async fn resolve(
    client: &Client,
    gvk: &kube::core::GroupVersionKind,
) -> (kube::api::ApiResource, kube::discovery::ApiCapabilities) {
    let mut last = None;
    for _ in 0..100 {
        match kube::discovery::pinned_kind(client, gvk).await {
            Ok(r) => return r,
            Err(e) => last = Some(e),
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    panic!("kind {gvk:?} is not served: {last:?}")
}

/// Server-side applies YAML (namespaced objects without a namespace go to `namespace`).
pub async fn apply_yaml(client: &Client, namespace: &str, text: &str) -> Vec<DynamicObject> {
    apply_objects(client, namespace, parse_yaml(text)).await
}

/// `apply_yaml` of objects already parsed.
pub async fn apply_objects(
    client: &Client,
    namespace: &str,
    objects: Vec<DynamicObject>,
) -> Vec<DynamicObject> {
    let mut out = Vec::new();
    for obj in objects {
        let types = obj
            .types
            .clone()
            .unwrap_or_else(|| panic!("object without apiVersion/kind"));
        let gvk = kube::core::GroupVersionKind::try_from(&types)
            .unwrap_or_else(|e| panic!("bad apiVersion: {e}"));
        let (ar, caps) = resolve(client, &gvk).await;
        let name = obj.metadata.name.clone().unwrap_or_default();
        let api: Api<DynamicObject> = if caps.scope == Scope::Namespaced {
            Api::namespaced_with(
                client.clone(),
                obj.metadata.namespace.as_deref().unwrap_or(namespace),
                &ar,
            )
        } else {
            Api::all_with(client.clone(), &ar)
        };
        let applied = api
            .patch(
                &name,
                &PatchParams::apply("kubeflow-e2e").force(),
                &Patch::Apply(&obj),
            )
            .await
            .unwrap_or_else(|e| panic!("cannot apply {} {name}: {e}", types.kind));
        out.push(applied);
    }
    out
}

/// The annotation `install_crds` marks each CRD it applied with: a hash of
/// the file it came from.
const CRD_SOURCE_HASH: &str = "e2e.kubeflow.org/source-hash";

/// Applies the project's CRDs from `crds/`, each unless the cluster holds
/// it as applied from the same file. Nearly every test starts with this,
/// and an unchanged apply of the 944 KB is no write but still costs the
/// API server a server-side apply of each schema and the test a parse of
/// the YAML (about 1.5 s of a loaded machine, sixty times a run).
pub async fn install_crds(client: &Client) {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    let dir = repo_root().join("crds");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", dir.display()))
        .filter_map(Result::ok)
        .map(|e| e.path())
        .collect();
    files.sort();
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    // Metadata only: the schemas are what this spares.
    let applied: std::collections::BTreeMap<String, String> = crds
        .list_metadata(&Default::default())
        .await
        .map(|l| l.items)
        .unwrap_or_default()
        .into_iter()
        .filter_map(|c| {
            let hash = c.metadata.annotations?.get(CRD_SOURCE_HASH)?.clone();
            Some((c.metadata.name?, hash))
        })
        .collect();
    for f in files {
        let text = std::fs::read_to_string(&f)
            .unwrap_or_else(|e| panic!("cannot read {}: {e}", f.display()));
        let hash = source_hash(&text);
        if crd_name_of_file(&f).is_some_and(|name| applied.get(&name) == Some(&hash)) {
            continue;
        }
        let mut objects = parse_yaml(&text);
        for o in &mut objects {
            o.metadata
                .annotations
                .get_or_insert_with(Default::default)
                .insert(CRD_SOURCE_HASH.to_string(), hash.clone());
        }
        apply_objects(client, "default", objects).await;
    }
}

/// A CRD file's CRD name: `crds/<group>_<plural>.yaml` holds `<plural>.<group>`.
fn crd_name_of_file(path: &Path) -> Option<String> {
    let stem = path.file_stem()?.to_str()?;
    let (group, plural) = stem.split_once('_')?;
    Some(format!("{plural}.{group}"))
}

/// A stable hash of a file's text (FNV-1a: the same in every build).
fn source_hash(text: &str) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in text.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{h:016x}")
}

/// Deletes a ValidatingAdmissionPolicy and its binding of the same name, if
/// there (from a guard's `Drop`, so no other test meets a test's policy).
pub fn remove_admission_policy(name: &str) {
    for kind in [
        "validatingadmissionpolicybinding",
        "validatingadmissionpolicy",
    ] {
        run_tool(
            "kubectl",
            &["delete", kind, name, "--ignore-not-found", "--wait=false"],
        );
    }
}

/// Runs a program of this machine (by path, or by name on `PATH`) and
/// fails the test with its standard error unless it succeeds; its output.
pub fn run_ok(program: &Path, args: &[&str]) -> String {
    let out = Command::new(program)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", program.display()));
    assert!(
        out.status.success(),
        "{} {args:?}: {}",
        program.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Runs a control-plane binary (kubectl, helm) against the test cluster.
pub fn run_tool(tool: &str, args: &[&str]) -> std::process::Output {
    Command::new(bin_dir().join(tool))
        .args(args)
        .env("KUBECONFIG", kubeconfig_path())
        .output()
        .unwrap_or_else(|e| panic!("cannot run {tool}: {e}"))
}

/// `install_crds` knows each file's CRD by the file's name (no cluster
/// needed).
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_crd_file_is_named_for_the_crd_it_holds() {
        let dir = repo_root().join("crds");
        let mut seen = 0;
        for entry in std::fs::read_dir(&dir).expect("crds/") {
            let path = entry.expect("entry").path();
            let text = std::fs::read_to_string(&path).expect("read");
            let objects = parse_yaml(&text);
            assert_eq!(objects.len(), 1, "{}", path.display());
            assert_eq!(
                crd_name_of_file(&path),
                objects[0].metadata.name,
                "{}",
                path.display()
            );
            seen += 1;
        }
        assert!(seen >= 15, "only {seen} CRD files in {}", dir.display());
    }

    #[test]
    fn a_files_hash_is_fixed_and_follows_its_text() {
        assert_eq!(source_hash(""), "cbf29ce484222325");
        assert_eq!(source_hash("a"), "af63dc4c8601ec8c");
        assert_ne!(source_hash("kind: A"), source_hash("kind: B"));
    }
}
