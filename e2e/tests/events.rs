//! What `kubectl describe` shows beside the conditions: Events for readiness
//! reached, a repair, a refused spec (once, however often it is retried),
//! and nothing while the component is at rest.

use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, DeleteParams, ListParams};
use kubeflow_e2e::component::{component_api, merge, prepare, wait_condition};
use kubeflow_e2e::operator::{OperatorProcess, without_colours};
use kubeflow_e2e::{TestNamespace, apply_yaml, wait_for};
use serde_json::json;

const TIMEOUT: Duration = Duration::from_secs(60);

/// (reason, note) of every Event about the Training CR `name`, oldest
/// first, once per occurrence (the recorder counts a repeat of the same
/// Event in its series instead of making a new one).
async fn events_of(api: &Api<Event>, name: &str) -> Vec<(String, String)> {
    let mut list: Vec<Event> = api
        .list(&ListParams::default())
        .await
        .expect("events")
        .items
        .into_iter()
        .filter(|e| {
            e.regarding.as_ref().is_some_and(|r| {
                r.kind.as_deref() == Some("Training") && r.name.as_deref() == Some(name)
            })
        })
        .collect();
    list.sort_by_key(|e| e.event_time.as_ref().map(|t| t.0));
    list.into_iter()
        .flat_map(|e| {
            let times = e.series.as_ref().map_or(1, |s| s.count.max(1)) as usize;
            let told = (e.reason.unwrap_or_default(), e.note.unwrap_or_default());
            std::iter::repeat_n(told, times)
        })
        .collect()
}

fn count(events: &[(String, String)], reason: &str) -> usize {
    events.iter().filter(|(r, _)| r == reason).count()
}

#[tokio::test]
async fn describe_shows_what_changed_once_and_nothing_at_rest() {
    let (client, _g) = prepare(&["Training"], &["training"]).await;
    let ns = TestNamespace::new(&client, "events").await;
    // The chart's default log filter (kube-runtime's own spans left out):
    // the operator's lines must name the CR by themselves.
    let op = OperatorProcess::start_with_env(
        "kubeflow-training-operator",
        &[],
        &[("RUST_LOG", "info,kube_client=warn,kube_runtime=warn")],
    );
    let trainings = component_api(&client, &ns.name, "Training");
    let events: Api<Event> = Api::namespaced(client.clone(), &ns.name);
    apply_yaml(&client, &ns.name, kubeflow_e2e::component::TRAINING_CR).await;
    wait_condition(&trainings, "kubeflow", "Ready", "True", TIMEOUT).await;
    let seen = wait_for("a Ready Event", TIMEOUT, || async {
        let e = events_of(&events, "kubeflow").await;
        (count(&e, "Ready") == 1).then_some(e)
    })
    .await;
    assert!(
        seen.iter().any(|(_, n)| n.contains("v1.9.2 is ready")),
        "{seen:?}"
    );

    // A repair is told, naming what was put back.
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns.name);
    deployments
        .delete("training-operator", &DeleteParams::default())
        .await
        .expect("delete the Deployment");
    let seen = wait_for("a DriftRepaired Event", TIMEOUT, || async {
        let e = events_of(&events, "kubeflow").await;
        (count(&e, "DriftRepaired") == 1).then_some(e)
    })
    .await;
    let (_, note) = seen
        .iter()
        .find(|(r, _)| r == "DriftRepaired")
        .expect("repair");
    assert!(note.contains("training-operator"), "{note}");
    // The Event is about the object put back (its `related`): repairs of
    // other objects are Events of their own, not a count on this one.
    let about: Vec<String> = events
        .list(&ListParams::default())
        .await
        .expect("events")
        .items
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some("DriftRepaired"))
        .filter_map(|e| {
            e.related
                .and_then(|r| Some(format!("{}/{}", r.kind?, r.name?)))
        })
        .collect();
    assert_eq!(about, ["Deployment/training-operator"]);

    // A refused spec is told once, though every retry and every other
    // change of the CR reconciles it again.
    merge(
        &trainings,
        "kubeflow",
        json!({"spec": {"resources": {"limits": {"cpu": "lots"}}}}),
    )
    .await;
    wait_condition(&trainings, "kubeflow", "Ready", "False", TIMEOUT).await;
    for i in 0..3 {
        merge(
            &trainings,
            "kubeflow",
            json!({"metadata": {"annotations": {"poke": i.to_string()}}}),
        )
        .await;
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    let e = events_of(&events, "kubeflow").await;
    assert_eq!(count(&e, "InvalidSpec"), 1, "{e:?}");
    let (_, note) = e.iter().find(|(r, _)| r == "InvalidSpec").expect("refusal");
    assert!(note.contains("spec.resources.limits.cpu"), "{note}");

    // Fixed: Ready again, which is news again: one more Ready Event (the
    // repair above may have told one too, while the new pod started).
    let readies = count(&e, "Ready");
    merge(&trainings, "kubeflow", json!({"spec": {"resources": null}})).await;
    wait_condition(&trainings, "kubeflow", "Ready", "True", TIMEOUT).await;
    let settled = wait_for("one more Ready Event", TIMEOUT, || async {
        let e = events_of(&events, "kubeflow").await;
        (count(&e, "Ready") == readies + 1).then_some(e)
    })
    .await;
    // At rest, reconciled again (an annotation change), nothing more is told.
    merge(
        &trainings,
        "kubeflow",
        json!({"metadata": {"annotations": {"poke": "rest"}}}),
    )
    .await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(
        events_of(&events, "kubeflow").await,
        settled,
        "Events at rest"
    );
    kubeflow_e2e::component::delete_and_wait(&trainings, "kubeflow", TIMEOUT).await;

    // Every line a reconcile logged names the CR it was about.
    let log = without_colours(&op.log_text());
    let told: Vec<&str> = log
        .lines()
        .filter(|l| {
            [
                "refused",
                "repaired drift",
                "applied",
                "cleanup",
                "reconcile failed",
            ]
            .iter()
            .any(|m| l.contains(m))
        })
        .collect();
    assert!(told.len() >= 4, "{log}");
    let object = format!("object={}/kubeflow", ns.name);
    for line in told {
        assert!(line.contains(&object), "{line}");
    }
    ns.delete().await;
}
