//! Operators under test, run as real processes of the workspace's binaries.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU16, Ordering};

/// A running operator process; stopped (by its own pid) when dropped.
pub struct OperatorProcess {
    child: Child,
    /// Its metrics address.
    pub metrics_addr: String,
    /// Its log file.
    pub log: PathBuf,
}

/// Numbers the processes a test binary starts (their log files).
static STARTED: AtomicU16 = AtomicU16::new(0);

/// Ports for operators' metrics: below Linux's default range of outgoing
/// ports (32768 and up), so no client connection holds one, and a poll of a
/// port nobody listens on yet can never connect the poller to itself.
const PORTS: std::ops::Range<u32> = 20000..32000;

/// How many ports this test binary has tried: each try takes the next one.
static PORT_PROBE: AtomicU16 = AtomicU16::new(0);

/// A loopback port for an operator's metrics that no socket holds now; test
/// binaries start apart (by pid) and take the next free one.
pub fn free_port() -> u16 {
    let span = PORTS.end - PORTS.start;
    let start = std::process::id() % 1000 * 12;
    for _ in 0..span {
        let n = u32::from(PORT_PROBE.fetch_add(1, Ordering::Relaxed));
        let port = PORTS.start + (start + n) % span;
        if let Ok(port) = u16::try_from(port)
            && std::net::TcpListener::bind(("127.0.0.1", port)).is_ok()
        {
            return port;
        }
    }
    panic!("no free loopback port in {PORTS:?}")
}

/// The workspace's target folder.
pub fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| crate::repo_root().join("target"))
}

/// Path of a workspace binary, built by `cargo build --workspace`.
pub fn binary(name: &str) -> PathBuf {
    let profile = std::env::var("KUBEFLOW_E2E_PROFILE").unwrap_or_else(|_| "debug".into());
    let path = target_dir().join(profile).join(name);
    assert!(
        path.exists(),
        "{} is not built; run `cargo build --workspace` first",
        path.display()
    );
    path
}

impl OperatorProcess {
    /// Starts a component operator reading the shared bundles.
    pub fn start(name: &str, extra_args: &[&str]) -> Self {
        Self::start_with_env(name, extra_args, &[])
    }

    /// Starts an operator with extra environment.
    pub fn start_with_env(name: &str, extra_args: &[&str], env: &[(&str, &str)]) -> Self {
        let offset = STARTED.fetch_add(1, Ordering::Relaxed);
        let metrics_addr = format!("127.0.0.1:{}", free_port());
        let log = target_dir()
            .join("e2e-logs")
            .join(format!("{name}-{}-{offset}.log", std::process::id()));
        if let Some(dir) = log.parent() {
            let _ = std::fs::create_dir_all(dir);
        }
        let log_file = std::fs::File::create(&log)
            .unwrap_or_else(|e| panic!("cannot create {}: {e}", log.display()));
        let mut cmd = Command::new(binary(name));
        // Component operators read bundles (the shared ones unless `env`
        // names others); the meta-operator has none.
        if name != "kubeflow-meta-operator" && !env.iter().any(|(k, _)| *k == "MANIFESTS_DIR") {
            cmd.arg("--manifests-dir").arg(crate::manifests_dir());
        }
        cmd.args(extra_args)
            .env("KUBECONFIG", crate::kubeconfig_path())
            .env("METRICS_ADDR", &metrics_addr)
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::from(
                log_file.try_clone().unwrap_or_else(|e| panic!("log: {e}")),
            ))
            .stderr(Stdio::from(log_file));
        for (k, v) in env {
            cmd.env(k, v);
        }
        let child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {name}: {e}"));
        OperatorProcess {
            child,
            metrics_addr,
            log,
        }
    }

    /// What the process has logged so far.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The operator's apply writes so far.
    pub async fn writes(&self) -> f64 {
        metric_sum(&self.metrics().await, "kubeflow_apply_writes_total", &[])
    }

    /// The write count once the operator has settled: Ready is reported by
    /// the reconcile that applied, and the watch events of its own writes
    /// may still bring one more pass (which finds nothing to write).
    pub async fn settled_writes(&self) -> f64 {
        let mut last = self.writes().await;
        loop {
            tokio::time::sleep(std::time::Duration::from_secs(2)).await;
            let now = self.writes().await;
            if now == last {
                return now;
            }
            last = now;
        }
    }

    /// Fetches `/metrics` text.
    pub async fn metrics(&self) -> String {
        http_get(&self.metrics_addr, "/metrics")
            .await
            .unwrap_or_default()
    }

    /// Stops the process and waits for it.
    pub fn stop(mut self) {
        self.terminate();
    }

    /// Whether the process is still running (not exited).
    pub fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Kills the process with SIGKILL (a crash: no cleanup runs) and reaps it.
    pub fn kill(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// What its readiness endpoint says ("active", "standby", ...), if it answers.
    pub async fn readiness(&self) -> Option<String> {
        http_get(&self.metrics_addr, "/readyz")
            .await
            .ok()
            .map(|s| s.trim().to_string())
    }

    fn terminate(&mut self) {
        stop_child(&mut self.child);
    }
}

/// Stops a child process by its own pid: SIGTERM for a graceful shutdown,
/// then SIGKILL after 5 s.
pub fn stop_child(child: &mut Child) {
    // Already reaped: its pid may belong to another process by now.
    if matches!(child.try_wait(), Ok(Some(_))) {
        return;
    }
    let _ = Command::new("kill").arg(child.id().to_string()).status();
    for _ in 0..100 {
        if matches!(child.try_wait(), Ok(Some(_))) {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let _ = child.kill();
    let _ = child.wait();
}

impl Drop for OperatorProcess {
    fn drop(&mut self) {
        self.terminate();
    }
}

/// A minimal HTTP/1.0 GET over loopback (enough for /metrics and probes).
pub async fn http_get(addr: &str, path: &str) -> std::io::Result<String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    // Bounded: a peer that never closes must fail this poll, not hang the test.
    let get = async {
        let mut s = tokio::net::TcpStream::connect(addr).await?;
        s.write_all(format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").as_bytes())
            .await?;
        let mut buf = String::new();
        s.read_to_string(&mut buf).await?;
        Ok::<_, std::io::Error>(buf)
    };
    let buf = tokio::time::timeout(std::time::Duration::from_secs(10), get)
        .await
        .map_err(|_| {
            std::io::Error::new(std::io::ErrorKind::TimedOut, format!("GET {addr}{path}"))
        })??;
    Ok(buf
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or(buf))
}

/// The sum of every series of `name` whose labels include each of `labels`
/// (`key="value"` pairs), whatever other labels it has.
pub fn metric_sum(text: &str, name: &str, labels: &[&str]) -> f64 {
    text.lines()
        .filter(|l| {
            l.strip_prefix(name)
                .is_some_and(|rest| rest.starts_with('{') || rest.starts_with(' '))
        })
        .filter(|l| labels.iter().all(|p| l.contains(p)))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}
