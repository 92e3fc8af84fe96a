//! The skeleton against a mock API (a `tower-test` service standing in for
//! the API server): which requests each outcome of a reconcile makes, and
//! what it leaves behind. The real API server is the e2e tests' job; here
//! the point is the exact requests, which a real cluster cannot show.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http::{Request, Response};
use kube::client::Body;
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use kube::{Client, Resource};
use kubeflow_api::{ComponentStatus, Training};
use serde_json::{Value, json};

use super::{Failure, Reconciler, Skeleton, StatusOf, Tools};
use crate::base::conditions::{self, DEGRADED, READY, Reason};
use crate::base::refusal::Refusal;
use crate::report::telemetry::Metrics;

/// One request the skeleton made.
#[derive(Debug, Clone)]
struct Seen {
    method: String,
    path: String,
    query: String,
    body: Value,
}

/// A reconciler whose outcomes are scripted, one per call.
struct Scripted {
    tools: Tools,
    outcomes: Mutex<VecDeque<Result<Duration, Failure>>>,
    forgotten: Mutex<Vec<String>>,
}

#[async_trait::async_trait]
impl Reconciler for Scripted {
    type Resource = Training;
    const FINALIZER: &'static str = "test.kubeflow.org/cleanup";

    fn tools(&self) -> &Tools {
        &self.tools
    }

    async fn apply(&self, _: &Training, status: &mut StatusOf<Self>) -> Result<Duration, Failure> {
        let next = self.next();
        if next.is_ok() {
            status.version = Some("v1.9.3".into());
            conditions::set(
                &mut status.conditions,
                READY,
                true,
                Reason::Ready,
                "all ready",
                Some(1),
            );
        }
        next
    }

    async fn cleanup(&self, _: &Training, _: &mut StatusOf<Self>) -> Result<(), Failure> {
        self.next().map(|_| ())
    }

    fn forget(&self, cr: &ObjectRef<Training>) {
        if let Ok(mut f) = self.forgotten.lock() {
            f.push(cr.name.clone());
        }
    }
}

impl Scripted {
    fn next(&self) -> Result<Duration, Failure> {
        self.outcomes
            .lock()
            .expect("lock")
            .pop_front()
            .expect("an outcome scripted for every call")
    }
}

/// A mock API server: answers every request (a write's answer is the CR,
/// an Event's its own body) and records it.
fn mock_api(cr: Value) -> (Client, Arc<Mutex<Vec<Seen>>>) {
    mock_api_failing(cr, |_| false)
}

/// [`mock_api`] answering the requests `fails` picks with a 504.
fn mock_api_failing(cr: Value, fails: fn(&Seen) -> bool) -> (Client, Arc<Mutex<Vec<Seen>>>) {
    let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    tokio::spawn(async move {
        while let Some((request, send)) = handle.next_request().await {
            let (parts, body) = request.into_parts();
            let bytes = body.collect_bytes().await.expect("body");
            let body: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
            let answer = if parts.uri.path().contains("/events") {
                body.clone()
            } else {
                cr.clone()
            };
            let seen = Seen {
                method: parts.method.to_string(),
                path: parts.uri.path().to_string(),
                query: parts.uri.query().unwrap_or_default().to_string(),
                body,
            };
            let (code, answer) = if fails(&seen) {
                let timeout = json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                    "reason": "Timeout", "code": 504, "message": "request timed out"});
                (504, timeout)
            } else {
                (200, answer)
            };
            log.lock().expect("lock").push(seen);
            let response = Response::builder()
                .status(code)
                .body(Body::from(serde_json::to_vec(&answer).expect("json")))
                .expect("response");
            send.send_response(response);
        }
    });
    (Client::new(service, "default"), seen)
}

fn training(status: Option<ComponentStatus>, deleting: bool) -> Training {
    let mut cr: Training = serde_json::from_value(json!({
        "apiVersion": "components.kubeflow.org/v1alpha1", "kind": "Training",
        "metadata": {
            "name": "kubeflow", "namespace": "kubeflow", "uid": "u-1", "generation": 1,
            "resourceVersion": "7", "finalizers": ["test.kubeflow.org/cleanup"],
        },
        "spec": {"version": "v1.9.3"},
    }))
    .expect("a Training");
    cr.status = status;
    if deleting {
        cr.meta_mut().deletion_timestamp = Some(
            k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(jiff::Timestamp::UNIX_EPOCH),
        );
    }
    cr
}

fn skeleton(
    outcomes: Vec<Result<Duration, Failure>>,
    cr: &Training,
) -> (Skeleton<Scripted>, Arc<Mutex<Vec<Seen>>>) {
    let (client, seen) = mock_api(serde_json::to_value(cr).expect("json"));
    let metrics = Metrics::new().expect("metrics");
    let reconciler = Scripted {
        tools: Tools::new(client, metrics, "kubeflow-test-operator"),
        outcomes: Mutex::new(outcomes.into()),
        forgotten: Mutex::new(Vec::new()),
    };
    (Skeleton::new(reconciler), seen)
}

async fn reconcile(s: &Skeleton<Scripted>, cr: &Training) -> Result<Action, Failure> {
    tokio::time::timeout(Duration::from_secs(10), s.reconcile(Arc::new(cr.clone())))
        .await
        .expect("a reconcile ends")
}

/// The requests made so far, once the mock has seen them all.
async fn requests(seen: &Arc<Mutex<Vec<Seen>>>) -> Vec<Seen> {
    tokio::time::sleep(Duration::from_millis(50)).await;
    seen.lock().expect("lock").clone()
}

fn status_writes(seen: &[Seen]) -> Vec<&Seen> {
    seen.iter()
        .filter(|s| s.path.ends_with("/status"))
        .collect()
}

fn events(seen: &[Seen]) -> Vec<&Seen> {
    seen.iter().filter(|s| s.path.contains("/events")).collect()
}

fn condition<'a>(write: &'a Seen, type_: &str) -> (&'a str, &'a str) {
    let c = write.body["status"]["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == type_))
        .unwrap_or_else(|| panic!("no {type_} in {}", write.body));
    (
        c["status"].as_str().unwrap_or_default(),
        c["reason"].as_str().unwrap_or_default(),
    )
}

fn refusal() -> Failure {
    Failure::Refused(Refusal::new(
        Reason::InvalidSpec,
        "spec.images: \"x y\" is not an image",
    ))
}

#[tokio::test]
async fn a_refusal_is_written_by_server_side_apply_and_told_once() {
    let cr = training(None, false);
    let (s, seen) = skeleton(vec![Err(refusal()), Err(refusal())], &cr);
    let action = reconcile(&s, &cr).await.expect("a refusal is no error");
    assert_eq!(action, Action::requeue(super::REFUSED_REQUEUE));
    let first = requests(&seen).await;
    let writes = status_writes(&first);
    assert_eq!(writes.len(), 1, "{first:?}");
    assert_eq!(writes[0].method, "PATCH");
    assert!(
        writes[0]
            .query
            .contains("fieldManager=kubeflow-test-operator")
            && writes[0].query.contains("force=true"),
        "a server-side apply as the operator: {}",
        writes[0].query
    );
    assert_eq!(writes[0].body["kind"], "Training");
    assert_eq!(condition(writes[0], READY), ("False", "InvalidSpec"));
    assert_eq!(condition(writes[0], DEGRADED), ("True", "InvalidSpec"));
    assert_eq!(writes[0].body["status"]["observedGeneration"], 1);
    let told = events(&first);
    assert_eq!(told.len(), 1, "{first:?}");
    assert_eq!(told[0].body["reason"], "InvalidSpec");
    assert_eq!(told[0].body["type"], "Warning");

    // The same refusal again, the CR still showing its old status (the
    // watch has not brought the new one back yet): written again (the
    // status the CR shows differs), but not told again.
    reconcile(&s, &cr).await.expect("a refusal is no error");
    let second = requests(&seen).await;
    assert_eq!(events(&second).len(), 1, "told once: {second:?}");
}

#[tokio::test]
async fn a_status_that_says_nothing_new_is_not_written() {
    let mut status = ComponentStatus {
        observed_generation: Some(1),
        version: Some("v1.9.3".into()),
        ..Default::default()
    };
    conditions::set(
        &mut status.conditions,
        READY,
        true,
        Reason::Ready,
        "all ready",
        Some(1),
    );
    let cr = training(Some(status), false);
    let (s, seen) = skeleton(vec![Ok(Duration::from_secs(600))], &cr);
    let action = reconcile(&s, &cr).await.expect("applied");
    assert_eq!(action, Action::requeue(Duration::from_secs(600)));
    let seen = requests(&seen).await;
    assert!(seen.is_empty(), "nothing written at rest: {seen:?}");
}

#[tokio::test]
async fn transient_failures_back_off_and_become_degraded_when_they_repeat() {
    let cr = training(None, false);
    let boom = || {
        Failure::transient(
            Reason::ApiError,
            "failed to apply: 500 etcdserver: request timed out",
        )
    };
    let (s, seen) = skeleton(vec![Err(boom()), Err(boom()), Err(boom())], &cr);
    let mut delays = Vec::new();
    for _ in 0..3 {
        let failure = reconcile(&s, &cr).await.expect_err("a transient failure");
        delays.push(s.error_policy(&cr, &failure));
    }
    for (n, delay) in delays.iter().enumerate() {
        // Between half and all of 1, 2, 4 s, in the thousandths `retry` draws.
        let full = Duration::from_secs(1 << n);
        let mut drawn =
            (0..1000u32).map(|m| Action::requeue(full.mul_f64(0.5 + f64::from(m) / 1000.0 / 2.0)));
        assert!(
            drawn.any(|d| d == *delay),
            "the delay doubles, with jitter: {delays:?}"
        );
    }
    let seen = requests(&seen).await;
    let writes = status_writes(&seen);
    assert_eq!(writes.len(), 3, "{seen:?}");
    assert_eq!(condition(writes[0], READY), ("False", "ApiError"));
    assert_eq!(condition(writes[0], DEGRADED).0, "False", "once is weather");
    assert_eq!(condition(writes[2], DEGRADED), ("True", "ApiError"));
    let told = events(&seen);
    assert_eq!(told.len(), 1, "told when it became Degraded: {seen:?}");
    assert_eq!(told[0].body["reason"], "ApiError");
    let errors = s
        .tools()
        .metrics
        .reconcile_errors_total
        .with_label_values(&["kubeflow-test-operator", "ApiError"])
        .get();
    assert_eq!(errors, 3);
}

#[tokio::test]
async fn a_wait_is_requeued_soon_and_is_no_error() {
    let cr = training(None, false);
    let (s, _seen) = skeleton(vec![Err(Failure::Waiting("the CRD".into()))], &cr);
    let action = reconcile(&s, &cr).await.expect("a wait is no error");
    assert_eq!(action, Action::requeue(super::WAITING_REQUEUE));
    let m = &s.tools().metrics;
    assert_eq!(
        m.reconcile_total
            .with_label_values(&["kubeflow-test-operator", "waiting"])
            .get(),
        1
    );
    assert_eq!(
        m.reconcile_total
            .with_label_values(&["kubeflow-test-operator", "error"])
            .get(),
        0
    );
}

#[tokio::test]
async fn a_removal_says_what_it_waits_for_and_forgets_the_cr_when_done() {
    let cr = training(None, true);
    let boom = Failure::transient(Reason::ApiError, "boom");
    let (s, seen) = skeleton(
        vec![
            Err(boom),
            Err(Failure::Waiting(
                "Deployment kubeflow/training-operator to be deleted (finalizer example.com/hold)"
                    .into(),
            )),
            Ok(Duration::ZERO),
        ],
        &cr,
    );
    let failure = reconcile(&s, &cr).await.expect_err("a failed cleanup");
    s.error_policy(&cr, &failure);
    assert_eq!(s.remembered(), 1, "the failure is counted for the backoff");
    let errors = || {
        s.tools()
            .metrics
            .reconcile_errors_total
            .with_label_values(&["kubeflow-test-operator", "Waiting"])
            .get()
    };
    let wait = reconcile(&s, &cr)
        .await
        .expect_err("a wait keeps the finalizer");
    assert_eq!(
        s.error_policy(&cr, &wait),
        Action::requeue(super::WAITING_REQUEUE),
        "requeued soon, not backed off"
    );
    let waiting = requests(&seen).await;
    assert!(
        !waiting
            .iter()
            .any(|r| r.method == "PATCH" && !r.path.ends_with("/status")),
        "the finalizer stays while the removal waits: {waiting:?}"
    );
    assert_eq!(errors(), 0, "a wait is no error");
    let write = status_writes(&waiting)
        .last()
        .map(|w| (*w).clone())
        .expect("the wait is in the status");
    assert_eq!(condition(&write, READY), ("False", "Deleting"));
    assert!(
        write
            .body
            .to_string()
            .contains("finalizer example.com/hold"),
        "{}",
        write.body
    );
    let action = reconcile(&s, &cr).await.expect("removed");
    assert_eq!(action, Action::await_change());
    let done = requests(&seen).await;
    let finalizer_patch = done
        .iter()
        .rev()
        .find(|r| r.method == "PATCH" && !r.path.ends_with("/status"))
        .expect("the finalizer is removed");
    assert!(
        finalizer_patch
            .body
            .to_string()
            .contains("/metadata/finalizers"),
        "{finalizer_patch:?}"
    );
    assert_eq!(s.remembered(), 0, "nothing of a deleted CR is remembered");
    assert_eq!(
        *s.reconciler().forgotten.lock().expect("lock"),
        ["kubeflow"],
        "the reconciler was told to forget it"
    );
}

fn condition_message(write: &Seen, type_: &str) -> String {
    write.body["status"]["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == type_))
        .and_then(|c| c["message"].as_str())
        .unwrap_or_default()
        .to_string()
}

#[tokio::test]
async fn the_first_failure_is_in_the_status_at_once_naming_the_object_and_the_verb() {
    let cr = training(None, false);
    let message = "failed to apply CustomResourceDefinition inferenceservices.serving.kserve.io: \
                   ApiError: request timed out: Timeout (504)";
    let failure = Failure::transient(Reason::ApiError, message);
    let (s, seen) = skeleton(vec![Err(failure)], &cr);
    reconcile(&s, &cr).await.expect_err("a transient failure");
    let seen = requests(&seen).await;
    let writes = status_writes(&seen);
    assert_eq!(writes.len(), 1, "written at the first failure: {seen:?}");
    assert_eq!(writes[0].body["status"]["observedGeneration"], 1);
    assert_eq!(condition(writes[0], READY), ("False", "ApiError"));
    assert_eq!(
        condition(writes[0], conditions::PROGRESSING),
        ("True", "ApiError"),
        "retrying"
    );
    assert_eq!(condition(writes[0], DEGRADED).0, "False");
    assert_eq!(
        condition_message(writes[0], conditions::PROGRESSING),
        message
    );
}

#[tokio::test]
async fn three_failures_in_a_row_are_degraded_though_each_names_another_object() {
    let cr = training(None, false);
    let failing = |object: &str| {
        Err(Failure::transient(
            Reason::ApiError,
            format!("failed to apply {object}: ApiError: request timed out (504)"),
        ))
    };
    let (s, seen) = skeleton(
        vec![
            failing("CustomResourceDefinition a.kserve.io"),
            failing("CustomResourceDefinition b.kserve.io"),
            failing("Deployment kubeflow/kserve-controller-manager"),
        ],
        &cr,
    );
    for _ in 0..3 {
        let failure = reconcile(&s, &cr).await.expect_err("a transient failure");
        s.error_policy(&cr, &failure);
    }
    let seen = requests(&seen).await;
    let writes = status_writes(&seen);
    assert_eq!(writes.len(), 3, "{seen:?}");
    assert_eq!(
        condition(writes[1], DEGRADED).0,
        "False",
        "twice is not yet"
    );
    assert_eq!(condition(writes[2], DEGRADED), ("True", "ApiError"));
    assert!(
        condition_message(writes[2], DEGRADED).contains("kubeflow/kserve-controller-manager"),
        "{}",
        writes[2].body
    );
}

#[tokio::test]
async fn a_finalizer_the_server_does_not_take_is_in_the_status() {
    // A new CR: the skeleton's first write is its finalizer.
    let mut cr = training(None, false);
    cr.meta_mut().finalizers = None;
    let (client, seen) = mock_api_failing(serde_json::to_value(&cr).expect("json"), |s| {
        s.method == "PATCH" && !s.path.ends_with("/status")
    });
    let reconciler = Scripted {
        tools: Tools::new(
            client,
            Metrics::new().expect("metrics"),
            "kubeflow-test-operator",
        ),
        outcomes: Mutex::new(VecDeque::new()),
        forgotten: Mutex::new(Vec::new()),
    };
    let s = Skeleton::new(reconciler);
    let failure = reconcile(&s, &cr).await.expect_err("the finalizer failed");
    assert!(failure.to_string().contains("finalizer"), "{failure}");
    let seen = requests(&seen).await;
    let writes = status_writes(&seen);
    assert_eq!(writes.len(), 1, "{seen:?}");
    assert_eq!(condition(writes[0], READY), ("False", "ApiError"));
    assert!(
        condition_message(writes[0], READY).contains("request timed out"),
        "{}",
        writes[0].body
    );
}

/// A pass that reports a failure, then goes on with the rest of its
/// objects until the status shows the failure (or 5 s pass), then fails.
struct ReportsEarly {
    tools: Tools,
    seen: Arc<Mutex<Vec<Seen>>>,
    /// Whether the status said it while the pass still ran.
    said_in_time: Mutex<bool>,
}

#[async_trait::async_trait]
impl Reconciler for ReportsEarly {
    type Resource = Training;
    const FINALIZER: &'static str = "test.kubeflow.org/cleanup";

    fn tools(&self) -> &Tools {
        &self.tools
    }

    async fn apply(&self, _: &Training, _: &mut StatusOf<Self>) -> Result<Duration, Failure> {
        let timeout: kube::core::Status = serde_json::from_value(json!({
            "status": "Failure", "code": 504, "reason": "Timeout", "message": "took too long"}))
        .expect("status");
        let failed = crate::engine::apply::ApplyError::Api {
            verb: "apply",
            object: "CustomResourceDefinition tfjobs.kubeflow.org".into(),
            source: kube::Error::Api(Box::new(timeout)),
        };
        // As the engine tells a failed object to the apply's listener.
        crate::engine::apply::early::report(&failed);
        let failure = Failure::from(failed);
        for _ in 0..100 {
            let said = status_writes(&self.seen.lock().expect("lock")).len() == 1;
            if said {
                *self.said_in_time.lock().expect("lock") = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Err(failure)
    }

    async fn cleanup(&self, _: &Training, _: &mut StatusOf<Self>) -> Result<(), Failure> {
        Ok(())
    }
}

#[tokio::test]
async fn a_failure_is_in_the_status_while_the_rest_of_the_pass_goes_on() {
    let cr = training(None, false);
    let (client, seen) = mock_api(serde_json::to_value(&cr).expect("json"));
    let s = Skeleton::new(ReportsEarly {
        tools: Tools::new(
            client,
            Metrics::new().expect("metrics"),
            "kubeflow-test-operator",
        ),
        seen: seen.clone(),
        said_in_time: Mutex::new(false),
    });
    let failure = tokio::time::timeout(Duration::from_secs(10), s.reconcile(Arc::new(cr.clone())))
        .await
        .expect("a reconcile ends")
        .expect_err("the pass failed");
    s.error_policy(&cr, &failure);
    assert!(
        *s.reconciler().said_in_time.lock().expect("lock"),
        "the status said it before the pass ended"
    );
    let seen = requests(&seen).await;
    let writes = status_writes(&seen);
    assert_eq!(writes.len(), 2, "at once, and at the end: {seen:?}");
    assert_eq!(condition(writes[0], READY), ("False", "ApiError"));
    assert!(condition_message(writes[0], READY).contains("tfjobs.kubeflow.org"));
    assert_eq!(events(&seen).len(), 0, "once is weather: no Event");
}

#[tokio::test]
async fn a_resource_deleted_without_a_last_reconcile_leaves_no_series_and_no_memory() {
    let cr = training(None, false);
    let (s, _seen) = skeleton(vec![Err(refusal())], &cr);
    let _ = reconcile(&s, &cr).await;
    // Counted without asking for the series by its labels (which would
    // make it).
    let exported = |s: &Skeleton<Scripted>| {
        use prometheus::core::Collector;
        s.tools()
            .metrics
            .component_ready
            .collect()
            .iter()
            .map(|f| f.get_metric().len())
            .sum::<usize>()
    };
    assert_eq!(
        exported(&s),
        1,
        "the refused resource's readiness is exported"
    );
    s.sweep_gone(|_| true);
    assert_eq!(exported(&s), 1, "still in the cache: kept");
    s.sweep_gone(|_| false);
    assert_eq!(exported(&s), 0, "no series of a resource that is gone");
    assert_eq!(s.remembered(), 0);
    assert_eq!(
        *s.reconciler().forgotten.lock().expect("lock"),
        ["kubeflow"],
        "the reconciler was told to forget it"
    );
}
