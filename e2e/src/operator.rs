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
            .env("RUST_LOG", operator_log_level())
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

    /// The operator's apply writes so far. Panics naming the endpoint when
    /// its metrics cannot be read: a "no writes" check comparing the zeros
    /// of a page nobody served would pass with the operator gone.
    pub async fn writes(&self) -> f64 {
        writes_at(&self.metrics_addr, false)
            .await
            .unwrap_or_else(|e| panic!("{e:#}"))
    }

    /// The write count once the operator has settled: Ready is reported by
    /// the reconcile that applied, and the watch events of its own writes
    /// may still bring one more pass (which finds nothing to write). Called
    /// after an install, so the count must exist: without it the checks
    /// that compare against it would compare nothing.
    pub async fn settled_writes(&self) -> f64 {
        let read = || async {
            writes_at(&self.metrics_addr, true)
                .await
                .unwrap_or_else(|e| panic!("{e:#}"))
        };
        // The series appears with the operator's first write: an install a
        // test saw finish may still be the operator's first pass, so it
        // gets 60 s to appear before its absence fails the check.
        let started = std::time::Instant::now();
        while writes_at(&self.metrics_addr, true).await.is_err()
            && started.elapsed() < std::time::Duration::from_secs(60)
        {
            tokio::time::sleep(std::time::Duration::from_millis(500)).await;
        }
        let mut last = read().await;
        loop {
            tokio::time::sleep(std::time::Duration::from_secs(2)).await;
            let now = read().await;
            if now == last {
                return now;
            }
            last = now;
        }
    }

    /// Fetches `/metrics` text; empty while nothing answers. For polls that
    /// wait for a value (a process still starting answers nothing yet);
    /// checks that compare counts read with [`read_metrics`] or
    /// [`Self::writes`], which fail instead.
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
        // CI shows a failure's output, not the target folder the operator
        // logs are in: the end of the log goes with the failure.
        if std::thread::panicking() {
            print_log_tail(&self.log, TAIL_LINES);
        }
    }
}

/// How many of a log's last lines a failing test prints.
const TAIL_LINES: usize = 30;

/// Prints the last `count` lines of the log at `path` on standard error.
pub fn print_log_tail(path: &std::path::Path, count: usize) {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    let tail = &lines[lines.len().saturating_sub(count)..];
    eprintln!("--- last {} lines of {}", tail.len(), path.display());
    for line in tail {
        eprintln!("{}", without_colours(line));
    }
}

/// `text` without its terminal colour codes (`ESC [ ... m`): the
/// operators log in colour, and a check of their words must not meet them.
pub fn without_colours(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for d in chars.by_ref() {
                if d == 'm' {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// The operators' log filter: `KUBEFLOW_E2E_OPERATOR_LOG` (for a flaky
/// test run again with `kubeflow_operator::engine=debug`), else `info`.
fn operator_log_level() -> String {
    std::env::var("KUBEFLOW_E2E_OPERATOR_LOG").unwrap_or_else(|_| "info".to_string())
}

/// A minimal HTTP/1.0 GET over loopback (enough for /metrics and probes):
/// the body, whatever the status.
pub async fn http_get(addr: &str, path: &str) -> std::io::Result<String> {
    let buf = http_response(addr, path).await?;
    Ok(buf
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or(buf))
}

/// The whole response (status line, headers, body) to a GET.
async fn http_response(addr: &str, path: &str) -> std::io::Result<String> {
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
    Ok(buf)
}

/// The series every operator sets to 1 at start, before it does anything:
/// a page without it is not an operator's metrics.
const BUILD_INFO: &str = "kubeflow_operator_build_info";

/// Objects an operator wrote by apply.
const WRITES: &str = "kubeflow_apply_writes_total";

/// An operator's `/metrics` page at `addr`, or an error naming the endpoint
/// when nothing answers, the answer is not a 200, or the page is not an
/// operator's (no `kubeflow_operator_build_info`): read leniently, a
/// missing page is all zeros, and a check of "no writes" passes on it.
pub async fn read_metrics(addr: &str) -> anyhow::Result<String> {
    use anyhow::Context;
    let response = http_response(addr, "/metrics")
        .await
        .with_context(|| format!("cannot read the metrics at http://{addr}/metrics"))?;
    let (head, body) = response
        .split_once("\r\n\r\n")
        .unwrap_or((response.as_str(), ""));
    let status = head.lines().next().unwrap_or_default();
    anyhow::ensure!(
        status.split_whitespace().nth(1) == Some("200"),
        "http://{addr}/metrics answered {status:?}"
    );
    anyhow::ensure!(
        metric_value(body, BUILD_INFO, &[]).is_some(),
        "http://{addr}/metrics is not an operator's metrics page (no {BUILD_INFO}): {:?}",
        body.chars().take(200).collect::<String>()
    );
    Ok(body.to_string())
}

/// The apply writes the operator at `addr` has counted. The counter has a
/// series only from the first write (Prometheus leaves out a vector with
/// none), so on an operator's page its absence is 0, unless `counted`
/// demands it: after an install, where its absence means the count is not
/// where the checks read it (renamed, relabelled).
pub async fn writes_at(addr: &str, counted: bool) -> anyhow::Result<f64> {
    let text = read_metrics(addr).await?;
    writes_in(addr, &text, counted)
}

/// [`writes_at`] of a page already read (by [`read_metrics`]) from `addr`.
pub fn writes_in(addr: &str, text: &str, counted: bool) -> anyhow::Result<f64> {
    match metric_value(text, WRITES, &[]) {
        Some(v) => Ok(v),
        None if !counted => Ok(0.0),
        None => anyhow::bail!(
            "http://{addr}/metrics has no {WRITES} series: the install's writes were not counted"
        ),
    }
}

/// The sum of every series of `name` whose labels include each of `labels`
/// (`key="value"` pairs), whatever other labels it has; 0 when none does
/// (use [`metric_value`] where that must not pass for a count).
pub fn metric_sum(text: &str, name: &str, labels: &[&str]) -> f64 {
    metric_value(text, name, labels).unwrap_or(0.0)
}

/// The sum of every series of `name` whose labels include each of `labels`,
/// or None when there is no such series.
pub fn metric_value(text: &str, name: &str, labels: &[&str]) -> Option<f64> {
    let values: Vec<f64> = text
        .lines()
        .filter(|l| {
            l.strip_prefix(name)
                .is_some_and(|rest| rest.starts_with('{') || rest.starts_with(' '))
        })
        .filter(|l| labels.iter().all(|p| l.contains(p)))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .collect();
    (!values.is_empty()).then(|| values.iter().sum())
}

/// The write counts' readers fail when their input is missing: a stopped
/// metrics server, a page that is not an operator's, a count that is not
/// there (no cluster needed).
#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    const PAGE: &str = "HTTP/1.0 200 OK\r\n\r\n# TYPE kubeflow_operator_build_info gauge\nkubeflow_operator_build_info{controller=\"t\",version=\"0\"} 1\nkubeflow_apply_writes_total{controller=\"t\"} 3\n";
    const NO_WRITES: &str =
        "HTTP/1.0 200 OK\r\n\r\nkubeflow_operator_build_info{controller=\"t\",version=\"0\"} 1\n";

    /// A metrics server answering every request with `response`.
    async fn serve(response: &'static str) -> (String, tokio::task::JoinHandle<()>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("address").to_string();
        let task = tokio::spawn(async move {
            while let Ok((mut s, _)) = listener.accept().await {
                let mut request = [0u8; 1024];
                let _ = s.read(&mut request).await;
                let _ = s.write_all(response.as_bytes()).await;
            }
        });
        (addr, task)
    }

    /// A loopback address nothing listens on.
    fn closed_port() -> String {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        l.local_addr().expect("address").to_string()
    }

    #[test]
    fn a_log_line_loses_its_colour_codes_and_nothing_else() {
        let line = "\u{1b}[2m2026-11-29T06:23:22Z\u{1b}[0m \u{1b}[32m INFO\u{1b}[0m applied [x=1]";
        assert_eq!(
            without_colours(line),
            "2026-11-29T06:23:22Z  INFO applied [x=1]"
        );
    }

    #[tokio::test]
    async fn a_stopped_metrics_server_fails_the_read_naming_it() {
        let (addr, server) = serve(PAGE).await;
        assert_eq!(writes_at(&addr, true).await.expect("served"), 3.0);
        server.abort();
        let _ = server.await;
        let e = writes_at(&addr, false)
            .await
            .expect_err("read a stopped server");
        assert!(format!("{e:#}").contains(&addr), "{e:#}");
        let e = read_metrics(&closed_port())
            .await
            .expect_err("read a closed port");
        assert!(
            format!("{e:#}").contains("cannot read the metrics"),
            "{e:#}"
        );
    }

    #[tokio::test]
    async fn a_page_that_is_not_an_operators_fails_the_read() {
        for response in [
            "HTTP/1.0 404 Not Found\r\n\r\nkubeflow_operator_build_info 1\n",
            "HTTP/1.0 200 OK\r\n\r\n",
            "HTTP/1.0 200 OK\r\n\r\nkubeflow_apply_writes_total{controller=\"t\"} 3\n",
        ] {
            let (addr, _server) = serve(response).await;
            assert!(writes_at(&addr, false).await.is_err(), "{response:?}");
        }
    }

    #[tokio::test]
    async fn an_absent_write_count_is_zero_only_where_none_was_expected() {
        let (addr, _server) = serve(NO_WRITES).await;
        assert_eq!(writes_at(&addr, false).await.expect("read"), 0.0);
        let e = writes_at(&addr, true)
            .await
            .expect_err("no count after an install");
        assert!(format!("{e:#}").contains(WRITES), "{e:#}");
        assert_eq!(metric_value(NO_WRITES, WRITES, &[]), None);
        assert_eq!(metric_value(PAGE, WRITES, &["controller=\"t\""]), Some(3.0));
    }

    /// What the "no writes" checks call: an operator whose metrics endpoint
    /// is down fails the check instead of reading 0.
    #[tokio::test]
    #[should_panic(expected = "cannot read the metrics")]
    async fn writes_of_an_operator_whose_endpoint_is_down_panics() {
        // A stand-in process (stopped by the guard by its own pid) whose
        // metrics address nothing serves.
        let op = OperatorProcess {
            child: Command::new("sleep")
                .arg("60")
                .spawn()
                .expect("start sleep"),
            metrics_addr: closed_port(),
            log: PathBuf::new(),
        };
        op.writes().await;
    }
}
