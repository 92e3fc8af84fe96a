//! A fault-injecting proxy on 127.0.0.1 between an operator and the API
//! server: chosen requests answered 504 (with or without the server having
//! done them) or 429, delayed, or cut off before their answer, each rule
//! bounded in count and in time.
//!
//! It speaks plain HTTP to the operator and forwards with the admin
//! kubeconfig's TLS and credentials (a `kube::Client` without retries):
//! injecting at the HTTP level needs to see requests, which a TLS
//! passthrough relay cannot, and terminating TLS would need a serving
//! certificate signed by the cluster's CA. The operator's client only sees
//! another server URL; its own TLS setup is not what these tests are about.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Body as AxumBody;
use axum::extract::{Request, State};
use axum::response::Response;
use http::{Method, StatusCode};
use kube::config::{KubeConfigOptions, Kubeconfig};

/// What a rule does to a request it matches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// 504 Gateway Timeout as the API server gives it; `done` forwards the
    /// request first (the server did it, the client never learns).
    GatewayTimeout {
        /// Whether the request reaches the server before the 504.
        done: bool,
    },
    /// 429 Too Many Requests with `Retry-After: 1`, not forwarded.
    TooManyRequests,
    /// Forwarded after this delay.
    Delay(Duration),
    /// Forwarded, then the connection is cut before the answer arrives.
    Drop,
}

/// A fault for the requests `matches` picks, at most `times` of them, and
/// none after `until`.
#[derive(Clone)]
pub struct Rule {
    /// Which requests: method and path with query.
    pub matches: fn(&Method, &str) -> bool,
    /// What happens to them.
    pub fault: Fault,
    /// How many at most.
    pub times: u32,
    /// When the rule ends, whatever is left of `times`.
    pub until: Instant,
}

/// One request the proxy saw.
#[derive(Clone, Debug)]
pub struct Seen {
    /// Its method.
    pub method: Method,
    /// Its path and query.
    pub path: String,
    /// The fault injected, if any.
    pub fault: Option<Fault>,
    /// When it came.
    pub at: Instant,
}

#[derive(Default)]
struct Shared {
    rules: Mutex<Vec<Rule>>,
    seen: Mutex<Vec<Seen>>,
}

/// The proxy; stops when dropped.
pub struct FaultProxy {
    /// `http://127.0.0.1:<port>`.
    pub url: String,
    shared: Arc<Shared>,
    task: tokio::task::JoinHandle<()>,
}

impl FaultProxy {
    /// Starts a proxy to the test cluster's API server, with no rules yet.
    pub async fn start() -> Self {
        let kc = Kubeconfig::read_from(crate::kubeconfig_path()).expect("read the kubeconfig");
        let mut config = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
            .await
            .expect("a client configuration");
        // The proxy forwards what it gets, once: the faults are its own.
        config.default_retry = false;
        let upstream = kube::Client::try_from(config).expect("a client");
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the proxy");
        let url = format!("http://{}", listener.local_addr().expect("address"));
        let shared = Arc::new(Shared::default());
        let app = axum::Router::new()
            .fallback(forward)
            .with_state((upstream, shared.clone()));
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        FaultProxy { url, shared, task }
    }

    /// Adds a rule; earlier rules are tried first.
    pub fn inject(&self, rule: Rule) {
        if let Ok(mut r) = self.shared.rules.lock() {
            r.push(rule);
        }
    }

    /// Ends every rule now.
    pub fn heal(&self) {
        if let Ok(mut r) = self.shared.rules.lock() {
            r.clear();
        }
    }

    /// Every request seen so far.
    pub fn seen(&self) -> Vec<Seen> {
        self.shared
            .seen
            .lock()
            .map(|s| s.clone())
            .unwrap_or_default()
    }

    /// A kubeconfig at `path` that reaches the API server through the proxy.
    pub fn write_kubeconfig(&self, path: &std::path::Path) {
        let text = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: proxy\n  cluster: {{server: \"{}\"}}\n\
             users:\n- name: proxy\n  user: {{}}\ncontexts:\n- name: proxy\n  context: {{cluster: proxy, user: proxy, namespace: default}}\n\
             current-context: proxy\n",
            self.url
        );
        std::fs::write(path, text).expect("write the proxy's kubeconfig");
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The fault for a request, counted against its rule.
fn fault_for(shared: &Shared, method: &Method, path: &str) -> Option<Fault> {
    let mut rules = shared.rules.lock().ok()?;
    let now = Instant::now();
    let rule = rules
        .iter_mut()
        .find(|r| r.times > 0 && now < r.until && (r.matches)(method, path))?;
    rule.times -= 1;
    Some(rule.fault)
}

async fn forward(
    State((upstream, shared)): State<(kube::Client, Arc<Shared>)>,
    request: Request,
) -> Response {
    let (parts, body) = request.into_parts();
    let path = parts
        .uri
        .path_and_query()
        .map(|p| p.as_str().to_string())
        .unwrap_or_default();
    let fault = fault_for(&shared, &parts.method, &path);
    if let Ok(mut s) = shared.seen.lock() {
        s.push(Seen {
            method: parts.method.clone(),
            path: path.clone(),
            fault,
            at: Instant::now(),
        });
    }
    match fault {
        Some(Fault::TooManyRequests) => return status(429, "TooManyRequests", "too many requests"),
        Some(Fault::GatewayTimeout { done: false }) => return timeout(),
        Some(Fault::Delay(d)) => tokio::time::sleep(d).await,
        _ => {}
    }
    let Ok(bytes) = axum::body::to_bytes(body, usize::MAX).await else {
        return status(400, "BadRequest", "unreadable body");
    };
    let mut out = http::Request::builder().method(parts.method).uri(&path);
    for (name, value) in &parts.headers {
        if matches!(name.as_str(), "content-type" | "accept") {
            out = out.header(name, value);
        }
    }
    let Ok(out) = out.body(kube::client::Body::from(bytes.to_vec())) else {
        return status(400, "BadRequest", "unforwardable request");
    };
    let answer = upstream.send(out).await;
    match fault {
        Some(Fault::GatewayTimeout { done: true }) => return timeout(),
        Some(Fault::Drop) => return cut_off(),
        _ => {}
    }
    match answer {
        Ok(answer) => {
            let (parts, body) = answer.into_parts();
            Response::from_parts(parts, AxumBody::new(body))
        }
        Err(e) => status(502, "BadGateway", &e.to_string()),
    }
}

/// A Status answer as the API server gives it.
fn status(code: u16, reason: &str, message: &str) -> Response {
    let body = serde_json::json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "reason": reason, "code": code, "message": message,
    });
    Response::builder()
        .status(StatusCode::from_u16(code).unwrap_or(StatusCode::BAD_GATEWAY))
        .header("content-type", "application/json")
        .header("retry-after", "1")
        .body(AxumBody::from(body.to_string()))
        .unwrap_or_default()
}

/// The API server's own 504: it stopped waiting for the request.
fn timeout() -> Response {
    status(
        504,
        "Timeout",
        "the server was unable to return a response in the time allotted, but may still be processing the request",
    )
}

/// An answer whose body fails at once: the server closes the connection,
/// and the client sees it lost before the answer was complete.
fn cut_off() -> Response {
    let broken = futures::stream::once(async {
        Err::<axum::body::Bytes, _>(std::io::Error::new(
            std::io::ErrorKind::ConnectionReset,
            "cut off by the fault proxy",
        ))
    });
    Response::builder()
        .status(200)
        .header("content-type", "application/json")
        .body(AxumBody::from_stream(broken))
        .unwrap_or_default()
}
