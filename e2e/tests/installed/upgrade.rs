//! The upgrade 26.03 -> 26.03.1 as the docs give it (`e2e/demo upgrade`),
//! with live user objects (`e2e/src/user_objects.rs`): kept with their
//! uids and never written by an operator; JobSet's controller Deployment
//! and KServe's `llmisvc-manager-rolebinding`, whose immutable fields
//! change, recreated with an Event saying why; the Istio move flagged;
//! every child at its new version with nothing held back; the Model
//! Registry's records still in MySQL on the same volume. The flows after
//! it run on 26.03.1.

use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Secret};
use k8s_openapi::api::rbac::v1::ClusterRoleBinding;
use kube::ResourceExt;
use kube::api::Api;
use kubeflow_e2e::component::{component_api, condition};
use kubeflow_e2e::demo::{COMPONENTS, Demo, KUBEFLOW_NAMESPACE};
use kubeflow_e2e::objects::exists;
use kubeflow_e2e::user_objects;
use kubeflow_e2e::wait::wait_for;
use serde_json::Value;

const TIMEOUT: Duration = Duration::from_secs(120);

/// Upgrades the install to 26.03.1 and checks what the upgrade did.
pub async fn check(client: &kube::Client, demo: &Demo) {
    let client = client.clone();
    // The users' objects, which the upgrade must leave as they are, and
    // two objects it must recreate (immutable fields change).
    user_objects::create(&client, KUBEFLOW_NAMESPACE).await;
    let before = user_objects::state(&client, KUBEFLOW_NAMESPACE).await;
    let deployments_kf: Api<Deployment> = Api::namespaced(client.clone(), KUBEFLOW_NAMESPACE);
    let jobset_uid = deployments_kf
        .get("jobset-controller-manager")
        .await
        .expect("JobSet's controller")
        .uid();
    let bindings: Api<ClusterRoleBinding> = Api::all(client.clone());
    let binding_uid = bindings
        .get("llmisvc-manager-rolebinding")
        .await
        .expect("KServe's binding")
        .uid();

    // The upgrade as the docs give it: the user sees the new release.
    let shown = demo.upgrade("26.03.1");
    let row = shown
        .lines()
        .find(|l| l.contains(" kubeflow "))
        .unwrap_or_default();
    assert!(
        row.contains("26.03.1") && row.contains("Ready") && row.contains("14/14"),
        "kubectl get kubeflow after the upgrade:\n{shown}"
    );
    upgraded_as_it_must(&client, &before, jobset_uid, binding_uid).await;
}

/// What the upgrade to 26.03.1 must have done beyond reaching Ready: the
/// Istio move flagged at its start; every child at its new version and
/// nothing held back; the users' objects the same and never written by an
/// operator; the Model Registry's MySQL volume still in use, not released;
/// what the API server will not change in place recreated,
/// with an Event saying why.
async fn upgraded_as_it_must(
    client: &kube::Client,
    before: &[(String, Option<String>, Vec<String>)],
    jobset_uid: Option<String>,
    binding_uid: Option<String>,
) {
    let events: Api<k8s_openapi::api::events::v1::Event> =
        Api::namespaced(client.clone(), KUBEFLOW_NAMESPACE);
    let notes_of = |reason: &'static str| {
        let events = events.clone();
        async move {
            events
                .list(&Default::default())
                .await
                .map(|l| {
                    l.items
                        .into_iter()
                        .filter(|e| e.reason.as_deref() == Some(reason))
                        .filter_map(|e| e.note)
                        .collect::<Vec<_>>()
                })
                .unwrap_or_default()
        }
    };
    let started = notes_of("UpgradeStarted").await;
    assert!(
        started
            .iter()
            .any(|n| n.contains("to 26.03.1") && n.contains("1.28.0 -> 1.30.1")),
        "the start names the Istio images' two-minor move: {started:?}"
    );

    for (kind, version) in [
        ("Trainer", "v2.2.0"),
        ("Pipelines", "2.16.1"),
        ("Serving", "v0.18.0"),
        ("Istio", "1.30.1"),
        ("CertManager", "v1.20.2"),
        ("Notebooks", "v1.11.0"),
        ("Katib", "v0.19.0"),
        ("ModelRegistry", "v0.3.9"),
        ("Spark", "2.5.0"),
        ("Knative", "v1.22.0"),
        ("Auth", "v7.15.2"),
        ("Dashboard", "v2.0.0"),
    ] {
        let child = component_api(client, KUBEFLOW_NAMESPACE, kind)
            .get("kubeflow")
            .await
            .expect("child");
        assert_eq!(
            child.data.pointer("/status/version"),
            Some(&Value::from(version)),
            "{kind}"
        );
        // Nothing held back (a CRD or claim refusing the new state would be).
        assert_eq!(
            condition(&child, "Degraded").map(|c| c.0).as_deref(),
            Some("False"),
            "{kind}: {:?}",
            condition(&child, "Degraded")
        );
    }

    let after = user_objects::state(client, KUBEFLOW_NAMESPACE).await;
    for ((kind, uid, writers), (_, uid_before, _)) in after.iter().zip(before) {
        assert_eq!(uid, uid_before, "{kind} kept");
        let ours: Vec<&String> = writers
            .iter()
            .filter(|w| {
                COMPONENTS
                    .iter()
                    .any(|c| **w == format!("kubeflow-{c}-operator"))
            })
            .collect();
        assert!(ours.is_empty(), "{kind} written by {ours:?}");
    }

    // The Model Registry's records stay in MySQL: its volume is still the
    // component's, in use, and no empty PostgreSQL took its place.
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), KUBEFLOW_NAMESPACE);
    let mysql = claims
        .get("metadata-mysql")
        .await
        .expect("MySQL's volume is kept");
    assert!(
        mysql
            .labels()
            .contains_key("applyset.kubernetes.io/part-of"),
        "in use: the component's inventory holds it"
    );
    assert!(!exists(&claims, "metadata-postgres").await);
    let registry = component_api(client, KUBEFLOW_NAMESPACE, "ModelRegistry")
        .get("kubeflow")
        .await
        .expect("the ModelRegistry");
    assert!(
        !registry.data["status"]["released"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|r| r["name"] == "metadata-mysql"),
        "{}",
        registry.data["status"]
    );
    let secrets: Api<Secret> = Api::namespaced(client.clone(), KUBEFLOW_NAMESPACE);
    let keys: Vec<String> = secrets
        .get("model-registry-db-secrets")
        .await
        .expect("the registry's password")
        .data
        .unwrap_or_default()
        .into_keys()
        .collect();
    assert!(keys.iter().any(|k| k == "MYSQL_ROOT_PASSWORD"), "{keys:?}");

    let deployments: Api<Deployment> = Api::namespaced(client.clone(), KUBEFLOW_NAMESPACE);
    let jobset = deployments
        .get("jobset-controller-manager")
        .await
        .expect("JobSet's controller");
    assert_ne!(jobset.uid(), jobset_uid, "recreated for its new selector");
    assert_eq!(
        jobset
            .spec
            .and_then(|s| s.selector.match_labels)
            .map(|l| l.len()),
        Some(4)
    );
    let bindings: Api<ClusterRoleBinding> = Api::all(client.clone());
    let binding = bindings
        .get("llmisvc-manager-rolebinding")
        .await
        .expect("KServe's binding");
    assert_ne!(binding.uid(), binding_uid, "recreated for its new roleRef");
    assert_eq!(binding.role_ref.name, "kserve-llmisvc-manager-role");
    let notes = wait_for("the ObjectRecreated Events", TIMEOUT, || async {
        let notes = notes_of("ObjectRecreated").await;
        (notes
            .iter()
            .any(|n| n.contains("jobset-controller-manager"))
            && notes
                .iter()
                .any(|n| n.contains("llmisvc-manager-rolebinding")))
        .then_some(notes)
    })
    .await;
    assert!(
        notes
            .iter()
            .all(|n| n.contains("could not take the desired state (")),
        "each names the API server's refusal: {notes:?}"
    );
}
