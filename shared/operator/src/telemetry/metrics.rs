//! Prometheus metrics every operator exposes. Names follow controller-runtime
//! where it has one, so existing controller dashboards work.

use prometheus::{HistogramOpts, HistogramVec, IntCounterVec, IntGaugeVec, Opts, Registry};

/// The metrics of one operator process.
#[derive(Clone)]
pub struct Metrics {
    /// The registry `/metrics` renders.
    pub registry: Registry,
    /// Reconciles by controller and result (success, error, refused).
    pub reconcile_total: IntCounterVec,
    /// Reconcile errors by controller and reason.
    pub reconcile_errors_total: IntCounterVec,
    /// Reconcile duration by controller.
    pub reconcile_time_seconds: HistogramVec,
    /// Objects managed per component CR.
    pub managed_objects: IntGaugeVec,
    /// Managed objects put back after a deletion or edit, by kind.
    pub drift_repairs_total: IntCounterVec,
    /// Objects written by apply, by controller.
    pub apply_writes_total: IntCounterVec,
    /// 1 when the component CR is Ready at its current generation.
    pub component_ready: IntGaugeVec,
    /// Always 1, labelled with the deployed version.
    pub component_info: IntGaugeVec,
    /// 1 while this process holds the leader lease (or runs without election).
    pub leader: IntGaugeVec,
    /// API requests the process sent, by verb (get, list, watch, create, apply, update, delete).
    pub api_requests_total: IntCounterVec,
}

fn counter(
    registry: &Registry,
    name: &str,
    help: &str,
    labels: &[&str],
) -> prometheus::Result<IntCounterVec> {
    let c = IntCounterVec::new(Opts::new(name, help), labels)?;
    registry.register(Box::new(c.clone()))?;
    Ok(c)
}

fn gauge(
    registry: &Registry,
    name: &str,
    help: &str,
    labels: &[&str],
) -> prometheus::Result<IntGaugeVec> {
    let g = IntGaugeVec::new(Opts::new(name, help), labels)?;
    registry.register(Box::new(g.clone()))?;
    Ok(g)
}

impl Metrics {
    /// Registers every metric in a fresh registry.
    pub fn new() -> prometheus::Result<Self> {
        let registry = Registry::new();
        let reconcile_time_seconds = HistogramVec::new(
            HistogramOpts::new(
                "controller_runtime_reconcile_time_seconds",
                "Length of time per reconciliation per controller",
            )
            .buckets(vec![
                0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
            ]),
            &["controller"],
        )?;
        registry.register(Box::new(reconcile_time_seconds.clone()))?;
        #[cfg(target_os = "linux")]
        registry.register(Box::new(
            prometheus::process_collector::ProcessCollector::for_self(),
        ))?;
        Ok(Metrics {
            reconcile_total: counter(
                &registry,
                "controller_runtime_reconcile_total",
                "Total number of reconciliations per controller",
                &["controller", "result"],
            )?,
            reconcile_errors_total: counter(
                &registry,
                "controller_runtime_reconcile_errors_total",
                "Total number of reconciliation errors per controller",
                &["controller", "reason"],
            )?,
            reconcile_time_seconds,
            managed_objects: gauge(
                &registry,
                "kubeflow_managed_objects",
                "Objects managed per component CR",
                &["controller", "namespace", "name"],
            )?,
            drift_repairs_total: counter(
                &registry,
                "kubeflow_drift_repairs_total",
                "Managed objects put back after a deletion or edit",
                &["controller", "kind"],
            )?,
            apply_writes_total: counter(
                &registry,
                "kubeflow_apply_writes_total",
                "Objects written by server-side apply",
                &["controller"],
            )?,
            component_ready: gauge(
                &registry,
                "kubeflow_component_ready",
                "1 when the component CR is Ready at its current generation",
                &["kind", "namespace", "name"],
            )?,
            component_info: gauge(
                &registry,
                "kubeflow_component_info",
                "Deployed version of a component CR",
                &["kind", "namespace", "name", "version"],
            )?,
            leader: gauge(
                &registry,
                "kubeflow_leader",
                "1 while this process is the active controller",
                &["controller"],
            )?,
            api_requests_total: counter(
                &registry,
                "kubeflow_api_requests_total",
                "Kubernetes API requests sent, by verb",
                &["verb"],
            )?,
            registry,
        })
    }

    /// Renders the registry in the Prometheus text format.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let encoder = prometheus::TextEncoder::new();
        if encoder
            .encode_utf8(&self.registry.gather(), &mut out)
            .is_err()
        {
            out.clear();
        }
        out
    }
}
