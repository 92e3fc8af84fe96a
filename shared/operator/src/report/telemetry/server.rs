//! The HTTP server of an operator: `/metrics`, `/healthz`, `/readyz`.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;

use super::Metrics;

/// What `/readyz` reports.
#[derive(Default)]
pub struct Probe {
    state: AtomicU8,
}

// 0 (the default) is "starting".
const STANDBY: u8 = 1;
const ACTIVE: u8 = 2;

impl Probe {
    /// Caches are synced and this process reconciles.
    pub fn set_active(&self) {
        self.state.store(ACTIVE, Ordering::Relaxed);
    }
    /// Another process holds the lease; this one waits, ready to take over.
    pub fn set_standby(&self) {
        self.state.store(STANDBY, Ordering::Relaxed);
    }
}

struct AppState {
    metrics: Metrics,
    probe: Arc<Probe>,
}

/// Binds the metrics and probe address. Done before anything else starts:
/// an operator that cannot serve its probes would never turn ready and say
/// nothing about why, so a taken port ends the process with that reason.
pub async fn bind(addr: SocketAddr) -> std::io::Result<tokio::net::TcpListener> {
    tokio::net::TcpListener::bind(addr).await
}

/// Serves until the process ends.
pub async fn serve(
    listener: tokio::net::TcpListener,
    metrics: Metrics,
    probe: Arc<Probe>,
) -> std::io::Result<()> {
    let state = Arc::new(AppState { metrics, probe });
    let app = Router::new()
        .route(
            "/metrics",
            get(|State(s): State<Arc<AppState>>| async move { s.metrics.render() }),
        )
        .route("/healthz", get(|| async { "ok" }))
        .route(
            "/readyz",
            get(|State(s): State<Arc<AppState>>| async move {
                match s.probe.state.load(Ordering::Relaxed) {
                    ACTIVE => (StatusCode::OK, "active"),
                    STANDBY => (StatusCode::OK, "standby"),
                    _ => (StatusCode::SERVICE_UNAVAILABLE, "starting"),
                }
            }),
        )
        .with_state(state);
    axum::serve(listener, app).await
}
