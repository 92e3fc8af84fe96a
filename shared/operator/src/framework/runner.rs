//! One way to run an operator process: flags, tracing, the metrics/probe
//! server, leader election on a Lease, and graceful shutdown on SIGTERM.

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::Context as _;
use kube::Client;
use kube_lease_manager::LeaseManagerBuilder;
use tokio::sync::watch;

use crate::report::telemetry::{self, Metrics, Probe};

/// Flags every operator takes.
#[derive(clap::Args, Clone, Debug)]
pub struct RunArgs {
    /// Address of the /metrics, /healthz and /readyz server.
    #[arg(long, env = "METRICS_ADDR", default_value = "127.0.0.1:8080")]
    pub metrics_addr: SocketAddr,
    /// Run only while holding the leader Lease (for more than one replica).
    #[arg(long, env = "LEADER_ELECT", default_value_t = false)]
    pub leader_elect: bool,
    /// Namespace of the leader Lease.
    #[arg(long, env = "POD_NAMESPACE", default_value = "default")]
    pub lease_namespace: String,
    /// Seconds a leader's Lease lasts without renewal: how long a standby
    /// waits after the leader crashed. (A leader that stops gracefully
    /// releases it, and a standby takes over at once.)
    #[arg(long, env = "LEASE_DURATION_SECONDS", default_value_t = 15, value_parser = clap::value_parser!(u64).range(5..=300))]
    pub lease_duration: u64,
    /// Seconds from SIGTERM to exit at the latest, whatever is still in
    /// flight: under the pod's grace period (30 s by default), so an operator
    /// that cannot reach the API server still stops before the kubelet kills
    /// it, and a rollout never waits on it.
    #[arg(long, env = "SHUTDOWN_DEADLINE_SECONDS", default_value_t = 20, value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub shutdown_deadline: u64,
}

/// Runs an operator's main loop, but returns at the latest `deadline`
/// after SIGTERM: the graceful path (finish reconciles, release the Lease)
/// waits on the API server, which may be down; the kubelet would otherwise
/// kill the process at the end of the grace period, or a process outside a
/// pod would retry for as long as the API stays away.
pub async fn until_deadline<F>(run: F, deadline: std::time::Duration) -> anyhow::Result<()>
where
    F: std::future::Future<Output = anyhow::Result<()>>,
{
    let forced = async {
        terminate().await;
        tokio::time::sleep(deadline).await;
    };
    tokio::select! {
        r = run => r,
        () = forced => {
            tracing::warn!(seconds = deadline.as_secs(), "graceful shutdown did not finish in time; exiting");
            // Not a return: dropping the runtime would wait on blocking
            // tasks, which may be the very calls that hang.
            std::process::exit(1)
        }
    }
}

/// What a running operator process holds.
pub struct Runtime {
    /// API client.
    pub client: Client,
    /// Metrics registry.
    pub metrics: Metrics,
    /// Readiness state.
    pub probe: Arc<Probe>,
    /// The operator's name, e.g. "kubeflow-training-operator".
    pub name: String,
    leadership: Option<watch::Receiver<bool>>,
    /// Told when the Lease could not be confirmed as this process's own
    /// for a lease duration (see `confirm_leadership`).
    unconfirmed: Arc<tokio::sync::Notify>,
    lease_task: Option<LeaseTask>,
}

/// Starts tracing, the client, the metrics server and (when asked) waits to
/// become leader.
pub async fn start(name: &str, args: &RunArgs) -> anyhow::Result<Runtime> {
    telemetry::init_tracing();
    // Before anything else: this may re-execute the process.
    crate::base::allocator::configure();
    // Listen for SIGTERM from the start: a standby must see one sent while it waits.
    drop(termination());
    let metrics = Metrics::new().context("failed to register metrics")?;
    let client = counted_client(&metrics).await?;
    let probe = Arc::new(Probe::default());
    let listener = telemetry::bind(args.metrics_addr)
        .await
        .with_context(|| format!("cannot listen on {} (METRICS_ADDR)", args.metrics_addr))?;
    let server = telemetry::serve(listener, metrics.clone(), probe.clone());
    tokio::spawn(async move {
        if let Err(e) = server.await {
            tracing::error!(error = %e, "metrics server stopped");
        }
    });
    initial_series(&metrics, name);
    let unconfirmed = Arc::new(tokio::sync::Notify::new());
    let (leadership, lease_task) = if args.leader_elect {
        probe.set_standby();
        let (rx, task) = lead(&client, name, args, unconfirmed.clone()).await?;
        (Some(rx), Some(task))
    } else {
        (None, None)
    };
    metrics.leader.with_label_values(&[name]).set(1);
    Ok(Runtime {
        client,
        metrics,
        probe,
        name: name.to_string(),
        leadership,
        unconfirmed,
        lease_task,
    })
}

/// The series that exist from the start, at 0 (build info at 1), so rates
/// and ratios over them are defined before the first reconcile or error.
fn initial_series(metrics: &Metrics, name: &str) {
    metrics
        .build_info
        .with_label_values(&[name, env!("CARGO_PKG_VERSION")])
        .set(1);
    metrics.leader.with_label_values(&[name]).set(0);
    for result in ["success", "error"] {
        metrics.reconcile_total.with_label_values(&[name, result]);
    }
    for reason in ["ApiError", "ApplyError"] {
        metrics
            .reconcile_errors_total
            .with_label_values(&[name, reason]);
    }
}

/// The Lease's renewing task once this process leads.
type LeaseTask =
    tokio::task::JoinHandle<kube_lease_manager::Result<kube_lease_manager::LeaseManager>>;

/// Waits until this process holds the Lease `name`, then keeps it: the
/// leadership's receiver and the task renewing it. `unconfirmed` is told
/// when the Lease could not be confirmed as this process's own.
async fn lead(
    client: &Client,
    name: &str,
    args: &RunArgs,
    unconfirmed: Arc<tokio::sync::Notify>,
) -> anyhow::Result<(watch::Receiver<bool>, LeaseTask)> {
    let identity =
        std::env::var("POD_NAME").unwrap_or_else(|_| format!("{name}-{}", std::process::id()));
    // One field manager per replica: the Lease is taken by server-side
    // apply, and two replicas applying as the same manager never conflict,
    // so both would believe they lead.
    let field_manager: String = format!("{name}-{identity}").chars().take(128).collect();
    let make = || {
        LeaseManagerBuilder::new(client.clone(), name)
            .with_namespace(&args.lease_namespace)
            .with_identity(identity.clone())
            .with_field_manager(field_manager.clone())
            .with_duration(args.lease_duration)
            // Renew a third of the way before expiry.
            .with_grace((args.lease_duration / 3).max(2))
            .build()
    };
    tracing::info!(lease = name, "waiting for leadership");
    let manager = acquire(make, client, &args.lease_namespace, name).await?;
    tracing::info!(lease = name, "became leader");
    // From here the manager renews the Lease in its own task, and
    // releases it when the last receiver is dropped (see `release`).
    let (rx, task) = manager.watch().await;
    confirm_leadership(
        client.clone(),
        &args.lease_namespace,
        name,
        &identity,
        std::time::Duration::from_secs(args.lease_duration),
        unconfirmed,
    );
    Ok((rx, task))
}

/// Confirms, every third of a lease duration, that the Lease is still this
/// process's: the lease manager keeps saying "leader" while it cannot renew
/// (the API server or etcd down), though the Lease expires and a standby
/// may take it. Held by another, or unconfirmed for a whole lease duration:
/// `unconfirmed` is told, and the process stops leading (its gauge drops,
/// its controller stops; a restart rejoins the election). One read per
/// period, only with leader election on.
fn confirm_leadership(
    client: Client,
    namespace: &str,
    name: &str,
    identity: &str,
    duration: std::time::Duration,
    unconfirmed: Arc<tokio::sync::Notify>,
) {
    use k8s_openapi::api::coordination::v1::Lease;
    let leases: kube::Api<Lease> = kube::Api::namespaced(client, namespace);
    let (name, identity) = (name.to_string(), identity.to_string());
    let period = (duration / 3).max(std::time::Duration::from_secs(1));
    tokio::spawn(async move {
        let mut confirmed = tokio::time::Instant::now();
        loop {
            tokio::time::sleep(period).await;
            // With etcd down a read hangs until the API server gives up (a
            // minute): a read that takes longer than a period counts as failed.
            let read = tokio::time::timeout(period, leases.get_opt(&name))
                .await
                .unwrap_or_else(|_| {
                    Err(kube::Error::Service(
                        "reading the Lease took longer than its renewal period".into(),
                    ))
                });
            match read {
                Ok(Some(lease))
                    if lease
                        .spec
                        .as_ref()
                        .and_then(|s| s.holder_identity.as_deref())
                        == Some(identity.as_str()) =>
                {
                    confirmed = tokio::time::Instant::now();
                }
                Ok(_) => {
                    tracing::warn!(lease = %name, "the leader Lease is no longer this process's");
                    break;
                }
                Err(e) if confirmed.elapsed() >= duration => {
                    tracing::warn!(lease = %name, error = %e, seconds = duration.as_secs(), "could not confirm the leader Lease for a lease duration; a standby may lead now");
                    break;
                }
                Err(e) => {
                    tracing::debug!(lease = %name, error = %e, "could not read the leader Lease")
                }
            }
        }
        unconfirmed.notify_one();
    });
}

/// Waits until this process holds the Lease, and returns the manager that
/// holds it. The lease manager alone sleeps until the holder's Lease
/// expires, on the state it read last; a watch on the Lease wakes it as soon
/// as the holder releases it (a graceful shutdown), and a manager built anew
/// reads the Lease then, so a standby takes over in about a second instead
/// of a lease duration. A standby told to stop (a rollout, a drain) exits at
/// once: it holds nothing, and must not take the Lease on its way out.
async fn acquire<F, Fut>(
    make: F,
    client: &Client,
    namespace: &str,
    name: &str,
) -> anyhow::Result<kube_lease_manager::LeaseManager>
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = kube_lease_manager::Result<kube_lease_manager::LeaseManager>>,
{
    use futures::StreamExt;
    use k8s_openapi::api::coordination::v1::Lease;
    use kube::runtime::{WatchStreamExt, watcher};

    let leases: kube::Api<Lease> = kube::Api::namespaced(client.clone(), namespace);
    let released = watcher(
        leases,
        watcher::Config::default().fields(&format!("metadata.name={name}")),
    )
    .default_backoff()
    .applied_objects()
    .filter_map(|l| {
        let free = l.ok().map(|l| {
            l.spec
                .and_then(|s| s.holder_identity)
                .is_none_or(|h| h.is_empty())
        });
        futures::future::ready(free.filter(|f| *f))
    });
    let mut released = std::pin::pin!(released);
    let mut manager = make().await.context("failed to set up leader election")?;
    loop {
        tokio::select! {
            r = manager.changed() => {
                if r.context("leader election failed")? {
                    return Ok(manager);
                }
            }
            // Released: read the Lease now, not at the old Lease's expiry.
            Some(_) = released.next() => {
                manager = make().await.context("failed to set up leader election")?;
            }
            () = terminate() => {
                tracing::info!("termination signal received while standing by; exiting");
                std::process::exit(0);
            }
        }
    }
}

impl Runtime {
    /// Gives the Lease up (after the controller stopped), so a standby
    /// replica takes over at once instead of after the lease duration.
    pub async fn release(mut self) {
        drop(self.leadership.take());
        if let Some(task) = self.lease_task.take() {
            match tokio::time::timeout(std::time::Duration::from_secs(3), task).await {
                Ok(Ok(Ok(_))) => tracing::info!("released the leader Lease"),
                Ok(Ok(Err(e))) => tracing::warn!(error = %e, "failed to release the leader Lease"),
                Ok(Err(e)) => tracing::warn!(error = %e, "the lease task failed"),
                Err(_) => tracing::warn!("timed out releasing the leader Lease"),
            }
        }
    }

    /// Resolves on SIGTERM, Ctrl-C, or loss of the leader Lease.
    pub fn shutdown(&self) -> impl std::future::Future<Output = ()> + Send + 'static {
        let leadership = self.leadership.clone();
        let unconfirmed = self.unconfirmed.clone();
        let metrics = self.metrics.clone();
        let name = self.name.clone();
        async move {
            let lost = async move {
                match leadership {
                    Some(mut rx) => {
                        while *rx.borrow_and_update() {
                            if rx.changed().await.is_err() {
                                break;
                            }
                        }
                        tracing::warn!(
                            "lost leadership; stopping so a restart rejoins the election"
                        );
                    }
                    None => std::future::pending::<()>().await,
                }
            };
            tokio::select! {
                () = terminate() => tracing::info!("termination signal received; shutting down"),
                () = lost => {}
                () = unconfirmed.notified() => {
                    tracing::warn!("stopping: leadership could not be confirmed; a restart rejoins the election");
                }
            }
            metrics.leader.with_label_values(&[&name]).set(0);
        }
    }
}

/// Marks the process ready once the API answers a list of the operator's own
/// kind: the list the controller's cache starts from, made with the RBAC the
/// process really has.
pub fn mark_ready_when_listable<K>(api: kube::Api<K>, probe: Arc<Probe>)
where
    K: kube::Resource
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
{
    tokio::spawn(async move {
        while api
            .list_metadata(&kube::api::ListParams::default().limit(1))
            .await
            .is_err()
        {
            tokio::time::sleep(std::time::Duration::from_secs(1)).await;
        }
        probe.set_active();
    });
}

/// A client whose every request is counted by verb and response code in
/// `kubeflow_api_requests_total`.
async fn counted_client(metrics: &Metrics) -> anyhow::Result<Client> {
    let config = without_hidden_retries(
        kube::Config::infer()
            .await
            .context("failed to load a Kubernetes client configuration")?,
    );
    Ok(kube::client::ClientBuilder::try_from(config)
        .context("failed to create a Kubernetes client")?
        .with_layer(&CountLayer {
            counter: metrics.api_requests_total.clone(),
        })
        .build())
}

/// The client's own retry of 429, 503 and 504 turned off. It resent a
/// write up to 15 times, waiting up to 1000 s between tries, inside one
/// request: a reconcile stuck in it never failed, so its CR showed no status
/// for minutes, and a 720 KB CRD was sent again and again though the server
/// had often done the first write. Retries happen in one place instead, the
/// controller's backoff, where each failure is in the status and the log,
/// and the apply engine reads an object before it sends it again.
fn without_hidden_retries(mut config: kube::Config) -> kube::Config {
    config.default_retry = false;
    config
}

/// Counts each request once its response (or failure) arrives.
#[derive(Clone)]
struct CountLayer {
    counter: prometheus::IntCounterVec,
}

impl<S> tower::Layer<S> for CountLayer {
    type Service = Counted<S>;
    fn layer(&self, inner: S) -> Counted<S> {
        Counted {
            inner,
            counter: self.counter.clone(),
        }
    }
}

#[derive(Clone)]
struct Counted<S> {
    inner: S,
    counter: prometheus::IntCounterVec,
}

impl<S, B, R> tower::Service<http::Request<B>> for Counted<S>
where
    S: tower::Service<http::Request<B>, Response = http::Response<R>>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = futures::future::BoxFuture<'static, Result<S::Response, S::Error>>;

    fn poll_ready(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        let verb = verb(&req);
        let counter = self.counter.clone();
        let response = self.inner.call(req);
        Box::pin(async move {
            let result = response.await;
            let code = match &result {
                Ok(r) => r.status().as_str().to_string(),
                Err(_) => "error".to_string(),
            };
            counter.with_label_values(&[verb, &code]).inc();
            result
        })
    }
}

/// The Kubernetes verb of a request, from its method, path and query.
fn verb<B>(req: &http::Request<B>) -> &'static str {
    let query = req.uri().query().unwrap_or("");
    match *req.method() {
        http::Method::GET
            if query
                .split('&')
                .any(|p| p == "watch=true" || p == "watch=1") =>
        {
            "watch"
        }
        http::Method::GET if is_collection(req.uri().path()) => "list",
        http::Method::GET => "get",
        http::Method::POST => "create",
        http::Method::PUT => "update",
        http::Method::PATCH => "patch",
        http::Method::DELETE => "delete",
        _ => "other",
    }
}

/// Whether a resource path names a collection (`.../pods`) rather than one
/// object (`.../pods/name`) or a discovery document.
fn is_collection(path: &str) -> bool {
    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    let rest = match parts.first() {
        Some(&"api") if parts.len() > 2 => &parts[2..],
        Some(&"apis") if parts.len() > 3 => &parts[3..],
        _ => return false,
    };
    matches!(rest, ["namespaces", _, _] | [_])
}

async fn terminate() {
    let mut rx = termination();
    let _ = rx.wait_for(|stop| *stop).await;
}

/// Whether SIGTERM (or Ctrl-C) came, for every part of the process that
/// must know, whenever it starts listening: one listener, installed on first
/// use, keeps the answer (a signal stream only sees signals sent after it
/// was made, so late listeners would miss an early SIGTERM).
fn termination() -> watch::Receiver<bool> {
    static TERMINATION: std::sync::OnceLock<watch::Receiver<bool>> = std::sync::OnceLock::new();
    TERMINATION
        .get_or_init(|| {
            let (tx, rx) = watch::channel(false);
            tokio::spawn(async move {
                signalled().await;
                let _ = tx.send(true);
                // The sender stays, so the answer stays readable.
                std::future::pending::<()>().await;
            });
            rx
        })
        .clone()
}

async fn signalled() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = term.recv() => {}
                    _ = tokio::signal::ctrl_c() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

#[cfg(test)]
mod tests {
    use super::{is_collection, without_hidden_retries};

    #[test]
    fn the_client_never_retries_a_request_on_its_own() {
        let uri = http::Uri::from_static("https://127.0.0.1:6443");
        assert!(
            kube::Config::new(uri.clone()).default_retry,
            "kube's default"
        );
        assert!(!without_hidden_retries(kube::Config::new(uri)).default_retry);
    }

    #[test]
    fn collections_are_told_from_objects() {
        assert!(is_collection("/api/v1/namespaces/kf/pods"));
        assert!(is_collection("/apis/apps/v1/deployments"));
        assert!(is_collection("/api/v1/namespaces"));
        assert!(!is_collection("/api/v1/namespaces/kf"));
        assert!(!is_collection("/api/v1/namespaces/kf/pods/p"));
        assert!(!is_collection(
            "/apis/apps/v1/namespaces/kf/deployments/d/status"
        ));
        assert!(!is_collection(
            "/apis/rbac.authorization.k8s.io/v1/clusterroles/r"
        ));
        assert!(!is_collection("/apis/apps/v1"));
        assert!(!is_collection("/api"));
    }
}
