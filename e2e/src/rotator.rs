//! Acting as a component's own certificate rotator (training-operator's,
//! Trainer's, JobSet's): what such a controller writes, written the way it
//! writes it (an update under its own field manager), so tests can prove the
//! operators neither undo it nor count it as drift.

use std::time::Duration;

use kube::Client;
use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams};
use kube::core::GroupVersionKind;
use serde_json::{Value, json};

use crate::operator::{OperatorProcess, metric_sum};

/// The rotator's field manager.
pub const MANAGER: &str = "cert-rotator";
/// The CA the rotator puts into Secrets and caBundles (PEM): a real one,
/// since the API server parses a CRD's conversion caBundle.
pub fn ca() -> &'static str {
    static CA: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    CA.get_or_init(|| {
        kubeflow_operator::certs::generate("rotator", "e2e")
            .map(|c| c.ca_pem)
            .unwrap_or_else(|e| panic!("rotator CA: {e}"))
    })
}

fn ca_b64() -> String {
    use kubeflow_operator::certs::b64;
    b64(ca())
}

fn as_rotator() -> PatchParams {
    PatchParams {
        field_manager: Some(MANAGER.to_string()),
        ..Default::default()
    }
}

fn api(client: &Client, group: &str, kind: &str, plural: &str) -> Api<DynamicObject> {
    let ar = ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, "v1", kind), plural);
    Api::all_with(client.clone(), &ar)
}

/// Fills a certificate Secret the way the rotator does.
pub async fn fill_secret(client: &Client, namespace: &str, name: &str) {
    let secrets: Api<k8s_openapi::api::core::v1::Secret> =
        Api::namespaced(client.clone(), namespace);
    let ca = ca_b64();
    let patch = json!({"data": {"ca.crt": ca, "ca.key": ca, "tls.crt": ca, "tls.key": ca}});
    secrets
        .patch(name, &as_rotator(), &Patch::Merge(&patch))
        .await
        .unwrap_or_else(|e| panic!("rotator: fill Secret {name}: {e}"));
}

/// Sets the caBundle of every webhook of a webhook configuration.
pub async fn inject_webhooks(client: &Client, kind: &str, name: &str) {
    let plural = format!("{}s", kind.to_lowercase());
    let configs = api(client, "admissionregistration.k8s.io", kind, &plural);
    let mut live = configs
        .get(name)
        .await
        .unwrap_or_else(|e| panic!("rotator: read {kind} {name}: {e}"));
    let Some(Value::Array(hooks)) = live.data.get_mut("webhooks") else {
        panic!("{kind} {name} has no webhooks");
    };
    for h in hooks.iter_mut() {
        h["clientConfig"]["caBundle"] = json!(ca_b64());
    }
    let patch = json!({"webhooks": hooks});
    configs
        .patch(name, &as_rotator(), &Patch::Merge(&patch))
        .await
        .unwrap_or_else(|e| panic!("rotator: patch {kind} {name}: {e}"));
}

/// Sets the caBundle of a CRD's conversion webhook.
pub async fn inject_crd(client: &Client, name: &str) {
    let crds = api(
        client,
        "apiextensions.k8s.io",
        "CustomResourceDefinition",
        "customresourcedefinitions",
    );
    let patch =
        json!({"spec": {"conversion": {"webhook": {"clientConfig": {"caBundle": ca_b64()}}}}});
    crds.patch(name, &as_rotator(), &Patch::Merge(&patch))
        .await
        .unwrap_or_else(|e| panic!("rotator: patch CRD {name}: {e}"));
}

/// The operator's writes and drift repairs so far; panics naming the
/// endpoint when its metrics cannot be read (read as zeros, the quiet
/// check below would pass with the operator gone).
pub async fn writes_and_repairs(op: &OperatorProcess) -> (f64, f64) {
    let m = crate::operator::read_metrics(&op.metrics_addr)
        .await
        .unwrap_or_else(|e| panic!("{e:#}"));
    (
        metric_sum(&m, "kubeflow_apply_writes_total", &[]),
        metric_sum(&m, "kubeflow_drift_repairs_total", &[]),
    )
}

/// Asserts that over `window`, with reconciles forced by touching the CR
/// (an annotation: a watch event, no new generation), the operator writes
/// nothing and repairs nothing.
pub async fn assert_quiet(
    op: &OperatorProcess,
    cr: &Api<DynamicObject>,
    name: &str,
    window: Duration,
) {
    let before = writes_and_repairs(op).await;
    let reconciles = |m: &str| metric_sum(m, "controller_runtime_reconcile_total", &[]);
    let start_reconciles = reconciles(&op.metrics().await);
    let deadline = tokio::time::Instant::now() + window;
    let mut i = 0;
    while tokio::time::Instant::now() < deadline {
        i += 1;
        let patch = json!({"metadata": {"annotations": {"e2e.kubeflow.org/touch": i.to_string()}}});
        cr.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .unwrap_or_else(|e| panic!("touch {name}: {e}"));
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let m = op.metrics().await;
    assert!(
        reconciles(&m) > start_reconciles,
        "the touches forced no reconcile"
    );
    assert_eq!(
        writes_and_repairs(op).await,
        before,
        "(writes, drift repairs) changed while only the rotator wrote"
    );
}
