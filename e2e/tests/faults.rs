//! Faults an operator must live through: the API server killed and
//! restarted, etcd paused, the operator itself killed in the middle of an
//! install; and a workload that cannot start, reported with its reason.

use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::rbac::v1::ClusterRole;
use kube::ResourceExt;
use kube::api::{Api, DynamicObject, ListParams};
use kubeflow_e2e::component::{component_api, condition, install_training, wait_condition};
use kubeflow_e2e::operator::OperatorProcess;
use kubeflow_e2e::repair::repair_time;
use kubeflow_e2e::{TestNamespace, apply_yaml, cluster_cmd, wait_for};
use serde_json::Value;

const TIMEOUT: Duration = Duration::from_secs(90);

/// Resumes a paused etcd when dropped.
struct ResumeEtcd;

impl Drop for ResumeEtcd {
    fn drop(&mut self) {
        let _ = cluster_cmd(&["resume", "etcd"]);
    }
}

async fn wait_serving(client: &kube::Client) {
    wait_for("the API server to serve", TIMEOUT, || async {
        Api::<k8s_openapi::api::core::v1::Namespace>::all(client.clone())
            .list(&ListParams::default().limit(1))
            .await
            .ok()
            .map(|_| ())
    })
    .await;
}

#[tokio::test]
async fn operators_outlive_api_server_restarts_etcd_pauses_and_their_own_crash() {
    let (client, _g) =
        kubeflow_e2e::component::prepare(&["Training", "Istio"], &["training", "istio"]).await;
    let (ns, mut training, trainings, _) = install_training(&client, "faults", TIMEOUT).await;
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns.name);
    let roles: Api<ClusterRole> = Api::all(client.clone());
    let pid = training.pid();

    // The API server killed, back after 5 s: the operator keeps its pid, and
    // every watch is back within seconds (each retries on its own backoff),
    // so deletions made after the return are repaired.
    cluster_cmd(&["kill", "kube-apiserver"]).expect("kill the API server");
    tokio::time::sleep(Duration::from_secs(5)).await;
    cluster_cmd(&["restart", "kube-apiserver"]).expect("restart the API server");
    wait_serving(&client).await;
    let returned = Instant::now();
    let deployment = repair_time(&deployments, "training-operator", Duration::from_secs(30)).await;
    let role = repair_time(&roles, "training-operator", Duration::from_secs(30)).await;
    let since_return = returned.elapsed();
    eprintln!(
        "after the API server's return: Deployment {deployment:?}, ClusterRole {role:?}, both within {since_return:?}"
    );
    assert!(
        training.is_running() && training.pid() == pid,
        "the operator survived"
    );
    // Each watch retries at most 5 s apart (`watches::WatchBackoff`), then
    // lists and reconciles: seconds on an idle machine, and 11 s once in CI
    // with two control planes on two cores. What is promised is recovery
    // without a restart, within the backoff's cap and a loaded pass or two.
    assert!(
        since_return < Duration::from_secs(20),
        "repairs took {since_return:?} after the API server returned"
    );

    // etcd paused for 20 s: requests hang, then everything resumes. A
    // leader (here the device-plugins operator, with a 5 s Lease) cannot
    // renew its Lease meanwhile, which then expires: it stops leading (its
    // gauge falls to 0) instead of reporting itself leader throughout.
    let leader = OperatorProcess::start_with_env(
        "kubeflow-device-plugins-operator",
        &["--leader-elect"],
        &[("LEASE_DURATION_SECONDS", "5"), ("POD_NAMESPACE", &ns.name)],
    );
    let leading = |text: &str| kubeflow_e2e::operator::metric_sum(text, "kubeflow_leader", &[]);
    wait_for("the leader gauge at 1", TIMEOUT, || async {
        (leading(&leader.metrics().await) == 1.0).then_some(())
    })
    .await;
    cluster_cmd(&["pause", "etcd"]).expect("pause etcd");
    // Resumed whatever happens: a failing wait must not leave the cluster
    // (and the other test of this binary) without etcd.
    let resume = ResumeEtcd;
    let paused = Instant::now();
    let stepped_down = wait_for(
        "the leader to stop leading",
        Duration::from_secs(18),
        || async { (leading(&leader.metrics().await) == 0.0).then_some(paused.elapsed()) },
    )
    .await;
    eprintln!("etcd paused: the leader stepped down after {stepped_down:?} (Lease 5 s)");
    assert!(
        leader
            .log_text()
            .contains("could not confirm the leader Lease"),
        "stepped down for the Lease it could not renew: {}",
        leader.log_text()
    );
    let rest = Duration::from_secs(20).saturating_sub(paused.elapsed());
    tokio::time::sleep(rest).await;
    drop(resume);
    drop(leader);
    wait_serving(&client).await;
    let after_pause = repair_time(&deployments, "training-operator", Duration::from_secs(30)).await;
    eprintln!("after a 20 s etcd pause: Deployment repaired in {after_pause:?}");
    assert!(after_pause < Duration::from_secs(5), "{after_pause:?}");
    assert!(training.is_running(), "the operator survived the pause");
    wait_condition(&trainings, "kubeflow", "Ready", "True", TIMEOUT).await;

    // The Istio operator killed 400 ms into an install, then restarted: the
    // install completes, nothing is created twice or left without its inventory.
    let istio = OperatorProcess::start("kubeflow-istio-operator", &[]);
    let istios = component_api(&client, &ns.name, "Istio");
    apply_yaml(&client, &ns.name, "apiVersion: components.kubeflow.org/v1alpha1\nkind: Istio\nmetadata: {name: kubeflow}\nspec: {version: \"1.29.0\"}\n").await;
    tokio::time::sleep(Duration::from_millis(400)).await;
    istio.kill();
    let istio = OperatorProcess::start("kubeflow-istio-operator", &[]);
    let cr = wait_condition(&istios, "kubeflow", "Ready", "True", TIMEOUT).await;
    let id = cr
        .labels()
        .get("applyset.kubernetes.io/id")
        .cloned()
        .expect("id");
    let labelled: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        "istio-system",
        &kube::api::ApiResource::from_gvk_with_plural(
            &kube::core::GroupVersionKind::gvk("apps", "v1", "Deployment"),
            "deployments",
        ),
    );
    let mine = labelled
        .list(&ListParams::default().labels("components.kubeflow.org/component=istio"))
        .await
        .expect("list");
    let mut names: Vec<String> = mine.items.iter().map(|d| d.name_any()).collect();
    let orphans: Vec<String> = mine
        .items
        .iter()
        .filter(|d| d.labels().get("applyset.kubernetes.io/part-of") != Some(&id))
        .map(|d| d.name_any())
        .collect();
    assert!(
        orphans.is_empty(),
        "objects outside the inventory: {orphans:?}"
    );
    let before = names.len();
    names.dedup();
    assert_eq!(names.len(), before, "no duplicates");
    assert!(names.contains(&"istiod".to_string()), "{names:?}");

    kubeflow_e2e::component::delete_and_wait(&istios, "kubeflow", TIMEOUT).await;
    kubeflow_e2e::component::delete_and_wait(&trainings, "kubeflow", TIMEOUT).await;
    drop(istio);
    training.stop();
    ns.delete().await;
}

/// A Deployment that cannot create pods says why, on the workload and in Ready.
#[tokio::test]
async fn a_workload_that_cannot_start_says_why() {
    let (client, _g) = kubeflow_e2e::component::prepare(&["Training"], &["training"]).await;
    let ns = TestNamespace::new(&client, "no-pods").await;
    // No pod may be created in this namespace.
    apply_yaml(&client, &ns.name, "apiVersion: v1\nkind: ResourceQuota\nmetadata: {name: no-pods}\nspec: {hard: {pods: \"0\"}}\n").await;
    // The quota binds once the controller manager has counted it; before
    // that, a pod creation fails with another message.
    let quotas: Api<k8s_openapi::api::core::v1::ResourceQuota> =
        Api::namespaced(client.clone(), &ns.name);
    wait_for("the quota counted", TIMEOUT, || async {
        let q = quotas.get("no-pods").await.ok()?;
        q.status?.hard?.contains_key("pods").then_some(())
    })
    .await;
    let _op = OperatorProcess::start("kubeflow-training-operator", &[]);
    let trainings = component_api(&client, &ns.name, "Training");
    apply_yaml(&client, &ns.name, kubeflow_e2e::component::TRAINING_CR).await;
    let cr = wait_for("the reason to show", TIMEOUT, || async {
        let cr = trainings.get("kubeflow").await.ok()?;
        let (s, reason, message, _) = condition(&cr, "Ready")?;
        (s == "False" && reason == "WorkloadsNotReady" && message.contains("exceeded quota"))
            .then_some(cr)
    })
    .await;
    let problem = cr
        .data
        .pointer("/status/workloads")
        .and_then(Value::as_array)
        .and_then(|w| w.first())
        .and_then(|w| w.get("problem"))
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    assert!(problem.starts_with("FailedCreate: "), "{problem}");
    kubeflow_e2e::component::delete_and_wait(&trainings, "kubeflow", TIMEOUT).await;
    ns.delete().await;
}
