//! Prometheus metrics every operator exposes. Names follow controller-runtime
//! where it has one, so existing controller dashboards work.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use prometheus::{
    GaugeVec, HistogramOpts, HistogramVec, IntCounterVec, IntGaugeVec, Opts, Registry,
};

/// Kind, namespace and name of a CR.
type CrKey = (String, String, String);

/// One component CR as the metrics label it.
pub struct ComponentRef<'a> {
    /// The operator reconciling it, e.g. `kubeflow-training-operator`.
    pub controller: &'a str,
    /// Its kind, e.g. `Training`.
    pub kind: &'a str,
    /// Its namespace.
    pub namespace: &'a str,
    /// Its name.
    pub name: &'a str,
}

impl ComponentRef<'_> {
    fn labels(&self) -> [&str; 4] {
        [self.controller, self.kind, self.namespace, self.name]
    }
}

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
    /// When the component CR's Ready condition last changed (Unix seconds).
    pub component_ready_transition: GaugeVec,
    /// The version each component CR's info series carries, to drop the old one on a change.
    versions: Arc<Mutex<HashMap<CrKey, String>>>,
    /// 1 while this process holds the leader lease (or runs without election).
    pub leader: IntGaugeVec,
    /// API requests the process sent, by verb and response code (or `error`).
    pub api_requests_total: IntCounterVec,
    /// Always 1, labelled with the operator and its build version.
    pub build_info: IntGaugeVec,
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

/// A registered gauge of float values (a timestamp).
fn float_gauge(
    registry: &Registry,
    name: &str,
    help: &str,
    labels: &[&str],
) -> prometheus::Result<GaugeVec> {
    let g = GaugeVec::new(Opts::new(name, help), labels)?;
    registry.register(Box::new(g.clone()))?;
    Ok(g)
}

/// The reconcile time histogram, with controller-runtime's name and
/// buckets from 5 ms to 30 s.
fn reconcile_time(registry: &Registry) -> prometheus::Result<HistogramVec> {
    let h = HistogramVec::new(
        HistogramOpts::new(
            "controller_runtime_reconcile_time_seconds",
            "Length of time per reconciliation per controller",
        )
        .buckets(vec![
            0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
        ]),
        &["controller"],
    )?;
    registry.register(Box::new(h.clone()))?;
    Ok(h)
}

impl Metrics {
    /// Registers every metric in a fresh registry: one registration per
    /// metric, read as the list of what is exported.
    pub fn new() -> prometheus::Result<Self> {
        let registry = Registry::new();
        let reconcile_time_seconds = reconcile_time(&registry)?;
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
                &["controller", "kind", "namespace", "name"],
            )?,
            component_info: gauge(
                &registry,
                "kubeflow_component_info",
                "Deployed version of a component CR",
                &["controller", "kind", "namespace", "name", "version"],
            )?,
            component_ready_transition: float_gauge(
                &registry,
                "kubeflow_component_ready_last_transition_timestamp_seconds",
                "When the component CR's Ready condition last changed",
                &["controller", "kind", "namespace", "name"],
            )?,
            versions: Arc::default(),
            leader: gauge(
                &registry,
                "kubeflow_leader",
                "1 while this process is the active controller",
                &["controller"],
            )?,
            api_requests_total: counter(
                &registry,
                "kubeflow_api_requests_total",
                "Kubernetes API requests sent, by verb and response code",
                &["verb", "code"],
            )?,
            build_info: gauge(
                &registry,
                "kubeflow_operator_build_info",
                "Always 1: the operator and its version",
                &["controller", "version"],
            )?,
            registry,
        })
    }

    /// Records a component CR's readiness, version and last Ready transition.
    pub fn record_component(
        &self,
        c: &ComponentRef<'_>,
        ready: bool,
        version: Option<&str>,
        conditions: &[Condition],
    ) {
        let labels = c.labels();
        self.component_ready
            .with_label_values(&labels)
            .set(i64::from(ready));
        if let Some(t) = crate::base::conditions::get(conditions, crate::base::conditions::READY) {
            self.component_ready_transition
                .with_label_values(&labels)
                .set(t.last_transition_time.0.as_second() as f64);
        }
        let Some(version) = version else { return };
        let key = (
            c.kind.to_string(),
            c.namespace.to_string(),
            c.name.to_string(),
        );
        let old = self
            .versions
            .lock()
            .ok()
            .and_then(|mut m| m.insert(key, version.to_string()));
        if let Some(old) = old.filter(|o| o != version) {
            let _ = self.component_info.remove_label_values(&[
                c.controller,
                c.kind,
                c.namespace,
                c.name,
                &old,
            ]);
        }
        self.component_info
            .with_label_values(&[c.controller, c.kind, c.namespace, c.name, version])
            .set(1);
    }

    /// Drops every series of a component CR that is gone.
    pub fn forget_component(&self, c: &ComponentRef<'_>) {
        let labels = c.labels();
        let _ = self.component_ready.remove_label_values(&labels);
        let _ = self.component_ready_transition.remove_label_values(&labels);
        let key = (
            c.kind.to_string(),
            c.namespace.to_string(),
            c.name.to_string(),
        );
        if let Some(v) = self.versions.lock().ok().and_then(|mut m| m.remove(&key)) {
            let _ = self.component_info.remove_label_values(&[
                c.controller,
                c.kind,
                c.namespace,
                c.name,
                &v,
            ]);
        }
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
