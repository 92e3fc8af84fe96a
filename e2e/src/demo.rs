//! The demo (`e2e/demo`) driven from tests: the same script, with its own
//! state folder and ports, stopped when the guard drops.

use std::path::PathBuf;
use std::process::Command;
use std::sync::LazyLock;

/// The operators the demo runs, by component name: the registry's.
pub static COMPONENTS: LazyLock<Vec<&'static str>> =
    LazyLock::new(|| kubeflow_api::registry::operators().collect());

/// A demo run: `e2e/demo down` (by recorded pids) when dropped.
pub struct Demo {
    /// Its state folder (pids, logs, kubeconfigs).
    pub state: PathBuf,
    port_base: u16,
}

impl Demo {
    /// Runs `e2e/demo up --skip-build` (the binaries are built by the test
    /// command) and returns the guard and what the script printed.
    /// The operators run as local processes (tests read their logs and
    /// ports); `up_as_pods` runs them as the chart's pods.
    pub fn up(name: &str, port_base: u16) -> (Demo, String) {
        Self::up_with(name, port_base, "processes")
    }

    /// `e2e/demo upgrade <release>`: what it printed.
    pub fn upgrade(&self, release: &str) -> String {
        self.run(&["upgrade", release])
    }

    /// `e2e/demo up` with the operators as the chart's pods on the real node.
    pub fn up_as_pods(name: &str) -> (Demo, String) {
        Self::up_with(name, 0, "pods")
    }

    fn up_with(name: &str, port_base: u16, operators: &str) -> (Demo, String) {
        Self::up_with_env(name, port_base, operators, &[])
    }

    pub fn up_with_env(
        name: &str,
        port_base: u16,
        operators: &str,
        env: &[(&str, &str)],
    ) -> (Demo, String) {
        let state = crate::operator::target_dir()
            .join("e2e-demo")
            .join(format!("{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&state);
        let _ = std::fs::create_dir_all(&state);
        let _ = std::fs::write(state.join("mode"), operators);
        let demo = Demo { state, port_base };
        let out = demo.run_with(&["up", "--skip-build"], env);
        (demo, out)
    }

    fn run(&self, args: &[&str]) -> String {
        self.run_with(args, &[])
    }

    fn run_with(&self, args: &[&str], env: &[(&str, &str)]) -> String {
        let out = Command::new(crate::repo_root().join("e2e/demo"))
            .args(args)
            .envs(env.iter().copied())
            .env("KUBEFLOW_DEMO_STATE", &self.state)
            .env("KUBEFLOW_DEMO_PORT_BASE", self.port_base.to_string())
            // Fail when nothing moves for 5 minutes (the default a user
            // gets), and in any case after 15: on the CI machine a loaded
            // API server kept Serving without news for over 3.
            .env("KUBEFLOW_DEMO_STALL", "300")
            .env("KUBEFLOW_DEMO_TIMEOUT", "900")
            .env("MANIFESTS_DIR", crate::manifests_dir())
            .output()
            .unwrap_or_else(|e| panic!("cannot run e2e/demo: {e}"));
        let stdout = String::from_utf8_lossy(&out.stdout).to_string();
        assert!(
            out.status.success(),
            "e2e/demo {args:?} failed:\n{stdout}\n{}\nlogs: {}",
            String::from_utf8_lossy(&out.stderr),
            self.state.join("logs").display()
        );
        stdout
    }

    /// The first of the operators' metrics ports.
    pub fn port_base(&self) -> u16 {
        self.port_base
    }

    /// `e2e/demo wait` with a stall window of `stall_secs`: whether the
    /// Kubeflow resource became Ready, and what the script printed (both
    /// streams: the reasons for a stall go to standard error).
    pub fn wait(&self, stall_secs: u32) -> (bool, String) {
        let out = Command::new(crate::repo_root().join("e2e/demo"))
            .arg("wait")
            .env("KUBEFLOW_DEMO_STATE", &self.state)
            .env("KUBEFLOW_DEMO_PORT_BASE", self.port_base.to_string())
            .env("KUBEFLOW_DEMO_STALL", stall_secs.to_string())
            .env("KUBEFLOW_DEMO_TIMEOUT", "900")
            .output()
            .unwrap_or_else(|e| panic!("cannot run e2e/demo: {e}"));
        (
            out.status.success(),
            format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ),
        )
    }

    /// Starts the operators that are not running (`e2e/demo start`).
    pub fn start(&self) {
        self.run(&["start"]);
    }

    /// Stops one operator by its recorded pid and waits until it is gone.
    pub fn stop_operator(&self, component: &str) {
        let pid_file = self.state.join("pids").join(component);
        let pid = std::fs::read_to_string(&pid_file)
            .unwrap_or_else(|e| panic!("{}: {e}", pid_file.display()));
        let pid = pid.trim();
        let _ = Command::new("kill").arg(pid).status();
        for _ in 0..100 {
            let alive = Command::new("kill")
                .args(["-0", pid])
                .status()
                .is_ok_and(|s| s.success());
            if !alive {
                let _ = std::fs::remove_file(&pid_file);
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        panic!("kubeflow-{component}-operator (pid {pid}) did not stop");
    }

    /// The kubeconfig (ServiceAccount token) an operator runs with.
    pub fn kubeconfig(&self, component: &str) -> PathBuf {
        self.state.join(format!("kubeconfig-{component}"))
    }

    /// An operator's log.
    pub fn log(&self, component: &str) -> String {
        std::fs::read_to_string(self.state.join("logs").join(format!("{component}.log")))
            .unwrap_or_default()
    }

    /// An operator's metrics address (`127.0.0.1:<port>`).
    pub fn metrics_addr(&self, component: &str) -> String {
        std::fs::read_to_string(self.state.join("ports").join(component))
            .unwrap_or_default()
            .trim()
            .to_string()
    }

    /// Log lines of any operator that show a request the chart's RBAC refused
    /// (not other 403s, such as writes into a terminating namespace).
    /// Panics naming the file when an operator's log is missing or empty:
    /// every operator logs from its start, and a log not there would pass
    /// for one without refusals.
    pub fn forbidden(&self) -> Vec<String> {
        let mut refused = Vec::new();
        for &c in COMPONENTS.iter() {
            let path = self.state.join("logs").join(format!("{c}.log"));
            let log = std::fs::read_to_string(&path).unwrap_or_else(|e| {
                panic!("no log of kubeflow-{c}-operator at {}: {e}", path.display())
            });
            assert!(
                !log.trim().is_empty(),
                "the log of kubeflow-{c}-operator at {} is empty",
                path.display()
            );
            refused.extend(
                log.lines()
                    .filter(|l| l.contains("is forbidden: User"))
                    .map(|l| format!("{c}: {l}")),
            );
        }
        refused
    }
}

/// How many of each operator's last log lines a failing test prints.
const TAIL_LINES: usize = 8;

impl Drop for Demo {
    fn drop(&mut self) {
        // CI shows a failure's output, not the demo's state folder: the
        // end of each operator's log goes with the failure.
        if std::thread::panicking() {
            for c in COMPONENTS.iter() {
                crate::operator::print_log_tail(
                    &self.state.join("logs").join(format!("{c}.log")),
                    TAIL_LINES,
                );
            }
        }
        let _ = Command::new(crate::repo_root().join("e2e/demo"))
            .arg("down")
            .env("KUBEFLOW_DEMO_STATE", &self.state)
            .output();
    }
}

/// The demo's Helm release and namespaces.
pub const RELEASE: &str = "kubeflow";
/// Where the chart is installed.
pub const OPERATOR_NAMESPACE: &str = "kubeflow-system";
/// Where the example Kubeflow CR lives.
pub const KUBEFLOW_NAMESPACE: &str = "kubeflow";

/// Runs a tool and asserts it succeeded; its stdout.
pub fn tool_ok(tool: &str, args: &[&str]) -> String {
    let out = crate::run_tool(tool, args);
    assert!(
        out.status.success(),
        "{tool} {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).to_string()
}

/// Uninstalls the demo's release when an earlier run left it behind, deletes
/// a component's own namespace (istio-system, cert-manager, auth,
/// oauth2-proxy) the chart did not make, and
/// waits until they are gone (nothing can be created in a namespace being
/// deleted).
pub async fn clear_leftovers(client: &kube::Client) {
    let _ = crate::run_tool(
        "helm",
        &["uninstall", RELEASE, "-n", OPERATOR_NAMESPACE, "--wait"],
    );
    let namespaces: kube::Api<k8s_openapi::api::core::v1::Namespace> =
        kube::Api::all(client.clone());
    // The chart creates them; one a component CR's install left (an
    // operator releases its Namespaces on removal) would refuse the install.
    for own in crate::component::all_own_namespaces() {
        if let Ok(Some(ns)) = namespaces.get_opt(own).await
            && ns
                .metadata
                .labels
                .as_ref()
                .and_then(|l| l.get("app.kubernetes.io/managed-by"))
                .is_none_or(|m| m != "Helm")
        {
            let _ = namespaces.delete(own, &Default::default()).await;
        }
        crate::wait::wait_for(
            &format!("an earlier {own} to be deleted"),
            std::time::Duration::from_secs(120),
            || async {
                match namespaces.get_opt(own).await.ok()? {
                    Some(ns) if ns.metadata.deletion_timestamp.is_some() => None,
                    _ => Some(()),
                }
            },
        )
        .await;
    }
}

/// cgroup working set of each operator pod on the real node, in MiB, as the
/// kubelet reports it (usage less inactive page cache), by pod name.
pub fn working_sets(node: &str) -> std::collections::BTreeMap<String, f64> {
    let text = tool_ok(
        "kubectl",
        &[
            "get",
            "--raw",
            &format!("/api/v1/nodes/{node}/proxy/stats/summary"),
        ],
    );
    let summary: serde_json::Value = serde_json::from_str(&text).expect("stats summary");
    summary["pods"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|p| p["podRef"]["namespace"] == OPERATOR_NAMESPACE)
        .filter_map(|p| {
            let bytes = p["memory"]["workingSetBytes"].as_f64()?;
            Some((
                p["podRef"]["name"].as_str()?.to_string(),
                bytes / 1024.0 / 1024.0,
            ))
        })
        .collect()
}

/// Highest memory use of a pod's cgroup since it started, in MiB (cgroup v1
/// `memory.max_usage_in_bytes` under the kubelet's cgroupfs layout; page
/// cache included, which the working set leaves out). None where the node
/// keeps its cgroups elsewhere.
pub fn cgroup_peak(pod_uid: &str) -> Option<f64> {
    ["kubepods/burstable", "kubepods/besteffort", "kubepods"]
        .iter()
        .map(|qos| {
            std::path::Path::new("/sys/fs/cgroup/memory")
                .join(qos)
                .join(format!("pod{pod_uid}"))
                .join("memory.max_usage_in_bytes")
        })
        .find_map(|path| std::fs::read_to_string(path).ok())
        .and_then(|text| text.trim().parse::<f64>().ok())
        .map(|bytes| bytes / 1024.0 / 1024.0)
}

/// The refusals check fails when the logs it reads are missing or empty
/// (no cluster needed: `e2e/demo down` on a state folder without pids
/// stops nothing).
/// The names of the ClusterRoles carrying `selector` (every one when empty).
async fn cluster_role_names(client: &kube::Client, selector: &str) -> Vec<String> {
    use k8s_openapi::api::rbac::v1::ClusterRole;
    use kube::api::{Api, ListParams, ResourceExt};
    let roles: Api<ClusterRole> = Api::all(client.clone());
    roles
        .list_metadata(&ListParams::default().labels(selector))
        .await
        .expect("list ClusterRoles")
        .items
        .iter()
        .map(|r| r.name_any())
        .collect()
}

/// The names of the ClusterRoles the operators manage (labelled), taken
/// before a removal so that afterwards a role of the same name, recreated
/// unlabelled (by Kubernetes' role-aggregation controller, say), is seen.
pub async fn managed_cluster_roles(client: &kube::Client) -> Vec<String> {
    let names = cluster_role_names(client, "components.kubeflow.org/component").await;
    // An install manages dozens: none found means the list was taken wrong.
    assert!(
        names.len() > 10,
        "only {names:?} managed before the removal"
    );
    names
}

/// Asserts that none of `before` (see [`managed_cluster_roles`]) exists
/// any more, labelled or not.
pub async fn assert_cluster_roles_gone(client: &kube::Client, before: &[String]) {
    let live = cluster_role_names(client, "").await;
    let left: Vec<&String> = before.iter().filter(|n| live.contains(n)).collect();
    assert!(
        left.is_empty(),
        "ClusterRoles of the project left or recreated after the removal: {left:?}"
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A demo's state folder with a log for each operator, `text` in each.
    fn state(name: &str, text: &str) -> Demo {
        let state = crate::operator::target_dir()
            .join("e2e-demo")
            .join(format!("{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&state);
        std::fs::create_dir_all(state.join("logs")).expect("logs folder");
        for &c in COMPONENTS.iter() {
            std::fs::write(state.join("logs").join(format!("{c}.log")), text).expect("log");
        }
        Demo {
            state,
            port_base: 0,
        }
    }

    #[test]
    fn the_refusals_are_read_from_every_log() {
        let demo = state(
            "forbidden-read",
            "INFO started\nERROR secrets is forbidden: User \"x\" cannot list\n",
        );
        assert_eq!(demo.forbidden().len(), COMPONENTS.len());
    }

    #[test]
    #[should_panic(expected = "is empty")]
    fn an_empty_log_fails_the_refusals_check() {
        let demo = state("forbidden-empty", "INFO started\n");
        std::fs::write(demo.state.join("logs").join("katib.log"), "").expect("empty the log");
        demo.forbidden();
    }

    #[test]
    #[should_panic(expected = "no log of kubeflow-meta-operator")]
    fn a_missing_log_fails_the_refusals_check() {
        let demo = state("forbidden-missing", "INFO started\n");
        std::fs::remove_file(demo.state.join("logs").join("meta.log")).expect("remove the log");
        demo.forbidden();
    }
}
