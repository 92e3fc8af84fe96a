//! A write that got no verdict (the API server's 504): the engine reads the
//! object before anything is sent again, against a mock API server (a real
//! one cannot be made to time out on one request on cue; the e2e tests do
//! it through a proxy).

use std::sync::{Arc, Mutex};

use http::{Request, Response};
use kube::Client;
use kube::api::{ApiResource, DynamicObject};
use kube::client::Body;
use serde_json::{Value, json};

use super::Engine;
use super::plan::Planned;
use crate::engine::discovery::Resolved;

const ME: &str = "kubeflow-test-operator";

fn desired() -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "big", "namespace": "kubeflow"},
        "data": {"k": "v"},
    }))
    .expect("object")
}

/// The object as the server holds it, `value` under `data.k`, its field
/// ownership ours.
fn live(value: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "big", "namespace": "kubeflow", "resourceVersion": "9",
            "managedFields": [{"manager": ME, "operation": "Apply", "apiVersion": "v1",
                "fieldsV1": {"f:data": {"f:k": {}}}}]},
        "data": {"k": value},
    })
}

/// A mock API server answering every PATCH with 504 and every GET with
/// `live`; returns the methods it was asked, in order.
fn server(live: Value) -> (Client, Arc<Mutex<Vec<String>>>) {
    let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    tokio::spawn(async move {
        while let Some((request, send)) = handle.next_request().await {
            let method = request.method().to_string();
            log.lock().expect("lock").push(method.clone());
            let (code, body) = if method == "PATCH" {
                let status = json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                    "reason": "Timeout", "code": 504,
                    "message": "the server was unable to return a response in the time allotted"});
                (504, status)
            } else {
                (200, live.clone())
            };
            let response = Response::builder()
                .status(code)
                .body(Body::from(serde_json::to_vec(&body).expect("json")))
                .expect("response");
            send.send_response(response);
        }
    });
    (Client::new(service, "default"), seen)
}

fn planned() -> Planned {
    let desired = desired();
    Planned {
        hash: super::memo::hash(&desired),
        desired,
        resolved: Some(Resolved {
            resource: ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(&()),
            namespaced: true,
        }),
        live: None,
        unchanged: false,
        proven: false,
        why: None,
        labels_only: false,
        remove: Vec::new(),
    }
}

#[tokio::test]
async fn a_write_the_server_did_after_its_timeout_is_not_sent_again() {
    let (client, seen) = server(live("v"));
    let engine = Engine::new(client, ME);
    let written = engine.patch(&planned()).await.expect("done after all");
    assert_eq!(written.metadata.resource_version.as_deref(), Some("9"));
    assert_eq!(
        *seen.lock().expect("lock"),
        ["PATCH", "GET"],
        "read, not resent"
    );
}

#[tokio::test]
async fn a_write_the_server_did_not_do_fails_naming_the_object_and_is_not_resent_at_once() {
    let (client, seen) = server(live("old"));
    let engine = Engine::new(client, ME);
    let e = engine.patch(&planned()).await.expect_err("not done");
    assert!(e.outcome_unknown());
    let text = e.to_string();
    assert!(
        text.contains("failed to apply ConfigMap kubeflow/big") && text.contains("504"),
        "{text}"
    );
    assert_eq!(
        *seen.lock().expect("lock"),
        ["PATCH", "GET"],
        "the next try comes after the backoff"
    );
}
