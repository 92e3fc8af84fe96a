//! A real Prometheus (Debian's package) on 127.0.0.1, scraping static
//! targets on 127.0.0.1 only: no service discovery that would dial pod IPs.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::Value;

/// A running Prometheus; stopped (by its own pid) when dropped.
pub struct Prometheus {
    child: Child,
    /// Its address, `127.0.0.1:<port>`.
    pub addr: String,
    /// Its folder: configuration, data and log.
    pub dir: PathBuf,
}

/// Whether `prometheus` and `promtool` are installed.
pub fn installed() -> bool {
    ["prometheus", "promtool"].iter().all(|b| {
        Command::new(b)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success())
    })
}

impl Prometheus {
    /// Starts Prometheus scraping `targets` (job name, `127.0.0.1:<port>`) every second.
    pub fn start(port: u16, targets: &[(String, String)]) -> Self {
        for (_, addr) in targets {
            assert!(
                addr.starts_with("127.0.0.1:"),
                "only loopback targets: {addr}"
            );
        }
        let mut jobs = String::new();
        for (job, addr) in targets {
            jobs.push_str(&format!(
                "  - job_name: {job}\n    static_configs:\n      - targets: ['{addr}']\n"
            ));
        }
        Self::start_with_jobs(port, &jobs)
    }

    /// Starts Prometheus with these `scrape_configs` entries (YAML, indented
    /// two spaces), e.g. Kubernetes service discovery.
    pub fn start_with_jobs(port: u16, jobs: &str) -> Self {
        assert!(
            installed(),
            "prometheus and promtool are needed (apt-get install prometheus; .ci/run does)"
        );
        let dir = crate::operator::target_dir()
            .join("e2e-prometheus")
            .join(format!("{}-{port}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("data")).expect("prometheus folder");
        let mut config = String::from(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n",
        );
        config.push_str(jobs);
        std::fs::write(dir.join("prometheus.yml"), config).expect("prometheus config");
        let log = std::fs::File::create(dir.join("prometheus.log")).expect("prometheus log");
        let addr = format!("127.0.0.1:{port}");
        let child = Command::new("prometheus")
            .arg(format!(
                "--config.file={}",
                dir.join("prometheus.yml").display()
            ))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("data").display()
            ))
            .arg(format!("--web.listen-address={addr}"))
            .stdin(Stdio::null())
            .stdout(Stdio::from(log.try_clone().expect("log")))
            .stderr(Stdio::from(log))
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start prometheus: {e}"));
        Prometheus { child, addr, dir }
    }

    /// Evaluates an instant query; the result vector, or Prometheus's error.
    pub async fn query(&self, expr: &str) -> Result<Vec<Value>, String> {
        let path = format!("/api/v1/query?query={}", encode(expr));
        let body = crate::operator::http_get(&self.addr, &path)
            .await
            .map_err(|e| e.to_string())?;
        let v: Value = serde_json::from_str(&body).map_err(|e| format!("{e}: {body}"))?;
        if v["status"] != "success" {
            return Err(format!("{}: {}", v["errorType"], v["error"]));
        }
        match &v["data"]["result"] {
            Value::Array(a) => Ok(a.clone()),
            // A scalar or string result is one value.
            other => Ok(vec![other.clone()]),
        }
    }

    /// Waits until every target is up.
    pub async fn wait_targets_up(&self, count: usize) {
        crate::wait::wait_for(
            "Prometheus to scrape every target",
            Duration::from_secs(60),
            || async {
                let up = self.query("up == 1").await.ok()?;
                (up.len() == count).then_some(())
            },
        )
        .await;
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        crate::operator::stop_child(&mut self.child);
    }
}

/// Percent-encodes a query parameter value.
fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}
