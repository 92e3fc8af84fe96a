//! Declared Profiles are watched as the cluster-scoped kind they are, also
//! where the operator installs only into allowed namespaces (as the chart
//! runs it): a watch of them per namespace never saw one, so an owner edit
//! or a deletion waited for the 10-minute resync. Under the chart's policy
//! a declared Profile cannot be deleted at all (its namespace would go with
//! it); taken off the list, it is released and can be.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::ResourceExt;
use kube::api::PostParams;
use kube::api::{Api, DeleteParams};
use kubeflow_e2e::component::{
    chart_namespaces, component_api, install_bundle_crds, merge, wait_condition, wait_gone,
};
use kubeflow_e2e::operator::OperatorProcess;
use kubeflow_e2e::{TestNamespace, apply_yaml, wait_for};
use serde_json::json;

const TIMEOUT: Duration = Duration::from_secs(120);
const PROFILE: &str = "team-watched";
const OWNER: &str = "jane@example.com";

#[tokio::test]
async fn declared_profiles_are_repaired_within_a_second_with_allowed_namespaces() {
    let (client, _g) = kubeflow_e2e::component::prepare(&["Dashboard"], &["dashboard"]).await;
    install_bundle_crds(&client, "istio/1.30.1/crds.yaml").await;
    install_bundle_crds(&client, "cert-manager/v1.20.2/cert-manager.yaml").await;
    let all_profiles = kubeflow_e2e::component::profiles(&client);
    // An earlier run's policy, profile and its namespace.
    ChartPolicy::remove();
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let _ = namespaces
        .delete(PROFILE, &DeleteParams::background())
        .await;
    // Gone, not going: this test makes a namespace of that name again.
    wait_gone(&namespaces, PROFILE, TIMEOUT).await;
    // An earlier run's profile (kept on removal, as declared profiles are).
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    if crds
        .get_opt("profiles.kubeflow.org")
        .await
        .expect("get")
        .is_some()
    {
        let _ = all_profiles.delete(PROFILE, &DeleteParams::default()).await;
        wait_gone(&all_profiles, PROFILE, TIMEOUT).await;
    }
    let ns = TestNamespace::new(&client, "profiles").await;
    let allowed = std::iter::once(ns.name.as_str())
        .chain(chart_namespaces())
        .collect::<Vec<_>>()
        .join(",");
    let _op = OperatorProcess::start_with_env(
        "kubeflow-dashboard-operator",
        &[],
        &[("ALLOWED_NAMESPACES", &allowed)],
    );
    let dashboards = component_api(&client, &ns.name, "Dashboard");
    apply_yaml(
        &client,
        &ns.name,
        &format!(
            "apiVersion: components.kubeflow.org/v1alpha1\nkind: Dashboard\nmetadata: {{name: kubeflow}}\nspec:\n  version: v1.10.0\n  profiles:\n    - {{name: {PROFILE}, owner: {OWNER}}}\n"
        ),
    )
    .await;
    wait_condition(&dashboards, "kubeflow", "Ready", "True", TIMEOUT).await;

    // An owner edited by hand is put back within a second.
    merge(
        &all_profiles,
        PROFILE,
        json!({"spec": {"owner": {"kind": "User", "name": "mallory@example.com"}}}),
    )
    .await;
    let start = Instant::now();
    wait_for("the owner put back", Duration::from_secs(30), || async {
        let p = all_profiles.get(PROFILE).await.ok()?;
        (p.data.pointer("/spec/owner/name") == Some(&json!(OWNER))).then_some(())
    })
    .await;
    let took = start.elapsed();
    assert!(took < Duration::from_secs(1), "the owner took {took:?}");

    // Its labels edited by hand (each of the project's given another
    // value, so the profile would read as someone else's) are put back
    // within a second too.
    let labels = all_profiles
        .get(PROFILE)
        .await
        .expect("profile")
        .labels()
        .clone();
    let ours: serde_json::Map<String, serde_json::Value> = labels
        .iter()
        .filter(|(k, _)| k.contains("kubeflow.org") || k.starts_with("applyset.kubernetes.io"))
        .map(|(k, _)| (k.clone(), json!("mallory")))
        .collect();
    assert!(
        ours.keys()
            .any(|k| k == "components.kubeflow.org/component"),
        "the declared profile carries the component label: {labels:?}"
    );
    merge(
        &all_profiles,
        PROFILE,
        json!({"metadata": {"labels": ours}}),
    )
    .await;
    let start = Instant::now();
    wait_for("the labels put back", Duration::from_secs(30), || async {
        let p = all_profiles.get(PROFILE).await.ok()?;
        labels
            .iter()
            .all(|(k, v)| p.labels().get(k) == Some(v))
            .then_some(())
    })
    .await;
    let took = start.elapsed();
    assert!(took < Duration::from_secs(1), "the labels took {took:?}");

    // A deleted declared profile is back within a second.
    let uid = all_profiles.get(PROFILE).await.expect("profile").uid();
    all_profiles
        .delete(PROFILE, &DeleteParams::background())
        .await
        .expect("delete");
    let start = Instant::now();
    wait_for("the profile recreated", Duration::from_secs(30), || async {
        let p = all_profiles.get_opt(PROFILE).await.ok()??;
        (p.uid() != uid && p.metadata.deletion_timestamp.is_none()).then_some(())
    })
    .await;
    let took = start.elapsed();
    assert!(took < Duration::from_secs(1), "the profile took {took:?}");

    // With the chart's policy in force, deleting it is refused, and the
    // namespace the profile controller made of it stays with what is in it.
    let _policy = ChartPolicy::install(&client).await;
    let profile = all_profiles.get(PROFILE).await.expect("profile");
    let owned = namespaces
        .create(
            &PostParams::default(),
            &kubeflow_e2e::component::profile_namespace(
                &profile.name_any(),
                &profile.uid().unwrap_or_default(),
            ),
        )
        .await
        .expect("the profile's namespace");
    let configmaps: Api<ConfigMap> = Api::namespaced(client.clone(), PROFILE);
    let data = configmaps
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "user-data"}, "data": {"a": "b"}}))
                .expect("configmap"),
        )
        .await
        .expect("a user's object");
    let dry_run = DeleteParams {
        dry_run: true,
        ..DeleteParams::background()
    };
    wait_for("the policy in force", TIMEOUT, || async {
        all_profiles
            .delete(PROFILE, &dry_run)
            .await
            .is_err()
            .then_some(())
    })
    .await;
    for params in [DeleteParams::background(), DeleteParams::foreground()] {
        let refused = all_profiles
            .delete(PROFILE, &params)
            .await
            .expect_err("the deletion of a declared profile refused")
            .to_string();
        for needle in [
            format!("Profile {PROFILE}"),
            format!("Dashboard {}/kubeflow", ns.name),
            "spec.profiles".to_string(),
        ] {
            assert!(refused.contains(&needle), "{needle:?} not in {refused}");
        }
    }
    // Garbage collection would have begun at once: a second is plenty.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let still = all_profiles.get(PROFILE).await.expect("profile");
    assert_eq!(still.uid(), profile.uid());
    assert!(still.metadata.deletion_timestamp.is_none());
    let ns_now = namespaces.get(PROFILE).await.expect("namespace");
    assert_eq!(ns_now.uid(), owned.uid());
    assert!(ns_now.metadata.deletion_timestamp.is_none());
    assert_eq!(
        configmaps.get("user-data").await.expect("user data").uid(),
        data.uid()
    );

    // Taken off the list, it is released: the policy lets its deletion by.
    merge(&dashboards, "kubeflow", json!({"spec": {"profiles": []}})).await;
    wait_for("the profile released", TIMEOUT, || async {
        let p = all_profiles.get(PROFILE).await.ok()?;
        (!p.labels()
            .contains_key("components.kubeflow.org/owner-name"))
        .then_some(())
    })
    .await;
    all_profiles
        .delete(PROFILE, &DeleteParams::background())
        .await
        .expect("a released profile is deleted");

    kubeflow_e2e::component::delete_and_wait(&dashboards, "kubeflow", TIMEOUT).await;
    let _ = all_profiles.delete(PROFILE, &DeleteParams::default()).await;
    let _ = namespaces.delete(PROFILE, &DeleteParams::default()).await;
    ns.delete().await;
}

/// The chart's policy keeping declared Profiles from deletion, as `helm
/// template` renders it. Removed when dropped, even by a failing test, so
/// no other test meets it.
struct ChartPolicy;

const POLICY: &str = "kf-declared-profiles";

impl ChartPolicy {
    async fn install(client: &kube::Client) -> ChartPolicy {
        let objects = kubeflow_e2e::chart::template(&[]).expect("helm template");
        let policy: Vec<String> = objects
            .iter()
            .filter(|o| o.metadata.name.as_deref() == Some(POLICY))
            .map(|o| serde_json::to_string(o).expect("json"))
            .collect();
        assert_eq!(policy.len(), 2, "the chart's policy and its binding");
        apply_yaml(client, "default", &policy.join("\n---\n")).await;
        ChartPolicy
    }

    fn remove() {
        kubeflow_e2e::remove_admission_policy(POLICY);
    }
}

impl Drop for ChartPolicy {
    fn drop(&mut self) {
        ChartPolicy::remove();
    }
}
