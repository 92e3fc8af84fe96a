//! Telemetry: tracing setup, Prometheus metrics and the HTTP server exposing them.

pub mod metrics;
pub mod server;

pub use metrics::Metrics;
pub use server::{Probe, bind, serve};

/// Sets up tracing: JSON lines when `LOG_FORMAT=json` (as in clusters),
/// readable text otherwise. `RUST_LOG` filters (default `info`).
pub fn init_tracing() {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| EnvFilter::new("info,kube_client=warn,kube_runtime=warn"));
    // Target filters match by prefix, so `kube=` would also silence `kubeflow_*`.
    let json = std::env::var("LOG_FORMAT").is_ok_and(|v| v == "json");
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_target(false);
    // A second init (tests run several operators in one process) is harmless.
    let _ = if json {
        builder.json().try_init()
    } else {
        builder.try_init()
    };
}
