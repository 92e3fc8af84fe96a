//! The local control plane itself: nodes, controllers, garbage collection,
//! helm, kubectl, and the `up`/`down` lifecycle.

use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Node};
use kube::api::{Api, DeleteParams, ListParams};
use kubeflow_e2e::{TestNamespace, apply_yaml, client, cluster_cmd, run_tool, serial, wait_for};

#[tokio::test]
async fn nodes_are_ready_and_some_look_like_gpu_nodes() {
    let client = client().await;
    let nodes: Api<Node> = Api::all(client);
    let list = nodes
        .list(&ListParams::default().labels("type=kwok"))
        .await
        .expect("list nodes");
    assert!(
        list.items.len() >= 5,
        "expected at least 5 kwok nodes, got {}",
        list.items.len()
    );
    for n in &list.items {
        let ready = n
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
        assert!(ready, "node {:?} is not Ready", n.metadata.name);
    }
    let nvidia = nodes
        .list(&ListParams::default().labels("feature.node.kubernetes.io/pci-10de.present=true"))
        .await
        .expect("list");
    let intel = nodes
        .list(&ListParams::default().labels("intel.feature.node.kubernetes.io/gpu=true"))
        .await
        .expect("list");
    assert_eq!(nvidia.items.len(), 2);
    assert_eq!(intel.items.len(), 1);
    let gpus = nvidia.items[0]
        .status
        .as_ref()
        .and_then(|s| s.capacity.as_ref())
        .and_then(|c| c.get("nvidia.com/gpu"))
        .cloned();
    assert_eq!(gpus.map(|q| q.0), Some("8".to_string()));
}

#[tokio::test]
async fn a_deployment_reaches_its_ready_replicas() {
    let client = client().await;
    let ns = TestNamespace::new(&client, "cluster-deploy").await;
    apply_yaml(
        &client,
        &ns.name,
        r#"
apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
spec:
  replicas: 3
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec: {containers: [{name: web, image: example.invalid/web:1}]}
"#,
    )
    .await;
    let api: Api<Deployment> = Api::namespaced(client.clone(), &ns.name);
    let ready = wait_for("3 ready replicas", Duration::from_secs(30), || async {
        let d = api.get("web").await.ok()?;
        let r = d.status?.ready_replicas?;
        (r == 3).then_some(r)
    })
    .await;
    assert_eq!(ready, 3);
    ns.delete().await;
}

#[tokio::test]
async fn deleting_an_owner_garbage_collects_its_dependents() {
    let client = client().await;
    let ns = TestNamespace::new(&client, "cluster-gc").await;
    let owner = apply_yaml(
        &client,
        &ns.name,
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: owner}\n",
    )
    .await;
    let uid = owner[0].metadata.uid.clone().expect("uid");
    apply_yaml(&client, &ns.name, &format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: dependent\n  ownerReferences:\n  - {{apiVersion: v1, kind: ConfigMap, name: owner, uid: {uid}}}\n"
    )).await;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), &ns.name);
    api.delete("owner", &DeleteParams::background())
        .await
        .expect("delete owner");
    wait_for(
        "the dependent to be collected",
        Duration::from_secs(30),
        || async { api.get_opt("dependent").await.ok()?.is_none().then_some(()) },
    )
    .await;
    ns.delete().await;
}

#[tokio::test]
async fn helm_installs_a_tiny_chart() {
    let client = client().await;
    let ns = TestNamespace::new(&client, "cluster-helm").await;
    let chart = std::env::temp_dir().join(format!("kubeflow-e2e-chart-{}", std::process::id()));
    std::fs::create_dir_all(chart.join("templates")).expect("chart dir");
    std::fs::write(
        chart.join("Chart.yaml"),
        "apiVersion: v2\nname: tiny\nversion: 0.1.0\nkubeVersion: \">=1.33.0-0\"\n",
    )
    .expect("write");
    std::fs::write(
        chart.join("templates/cm.yaml"),
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: tiny}\ndata: {greeting: {{ .Values.greeting | quote }}}\n",
    )
    .expect("write");
    std::fs::write(chart.join("values.yaml"), "greeting: hello\n").expect("write");
    let chart_path = chart.display().to_string();
    let out = run_tool(
        "helm",
        &[
            "install",
            "tiny",
            &chart_path,
            "-n",
            &ns.name,
            "--wait",
            "--timeout",
            "60s",
        ],
    );
    assert!(
        out.status.success(),
        "helm install failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), &ns.name);
    let cm = api.get("tiny").await.expect("the chart's ConfigMap exists");
    assert_eq!(
        cm.data.and_then(|d| d.get("greeting").cloned()).as_deref(),
        Some("hello")
    );
    let out = run_tool("helm", &["uninstall", "tiny", "-n", &ns.name, "--wait"]);
    assert!(
        out.status.success(),
        "helm uninstall failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(api.get_opt("tiny").await.expect("get").is_none());
    let _ = std::fs::remove_dir_all(&chart);
    ns.delete().await;
}

#[tokio::test]
async fn kubectl_and_the_server_report_the_pinned_version() {
    client().await;
    let out = run_tool("kubectl", &["version", "-o", "json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(v["clientVersion"]["gitVersion"], "v1.36.3");
    assert_eq!(v["serverVersion"]["gitVersion"], "v1.36.3");
}

#[tokio::test]
async fn up_twice_is_harmless() {
    let client = client().await;
    let _g = serial().await;
    let before = cluster_cmd(&["status"]).expect("status");
    cluster_cmd(&["up"]).expect("second up");
    let after = cluster_cmd(&["status"]).expect("status");
    assert_eq!(before, after, "a second `up` must not restart anything");
    assert!(client.apiserver_version().await.is_ok());
}

/// A second, throwaway cluster on other ports and another state folder, so
/// the shared one keeps running: `up` starts empty, `down` must stop every
/// process `up` recorded.
#[tokio::test]
async fn up_starts_empty_and_down_stops_every_process_it_started() {
    let state = std::env::temp_dir().join(format!("kubeflow-e2e-down-{}", std::process::id()));
    let run = |cmd: &str| {
        std::process::Command::new("bash")
            .arg(kubeflow_e2e::cluster_script())
            .arg(cmd)
            .env("KUBEFLOW_E2E_STATE", &state)
            .env("KUBEFLOW_E2E_PORT_BASE", "17400")
            .output()
            .expect("run e2e/cluster")
    };
    let _g = serial().await;
    // A failing assertion still stops what `up` started.
    let _down = Throwaway(state.clone());
    // What a run killed before its `down` leaves: data and no etcd. `up`
    // starts empty anyway (CI once met an earlier, killed run's chart).
    let leftover = state.join("etcd/member/left-by-a-killed-run");
    std::fs::create_dir_all(leftover.parent().expect("parent")).expect("etcd folder");
    std::fs::write(&leftover, "x").expect("leftover");
    let up = run("up");
    assert!(
        up.status.success(),
        "up failed: {}",
        String::from_utf8_lossy(&up.stderr)
    );
    assert!(!leftover.exists(), "up started on a stopped run's data");
    let pids: Vec<u32> = std::fs::read_dir(state.join("pids"))
        .expect("pid folder")
        .filter_map(Result::ok)
        .filter_map(|e| std::fs::read_to_string(e.path()).ok()?.trim().parse().ok())
        .collect();
    assert_eq!(
        pids.len(),
        5,
        "etcd, apiserver, controller-manager, scheduler and kwok"
    );
    let down = run("down");
    assert!(
        down.status.success(),
        "down failed: {}",
        String::from_utf8_lossy(&down.stderr)
    );
    for pid in pids {
        // Gone, or exited and not yet reaped (a zombie: the init that
        // adopted it reaps every few seconds, and `down` does not wait).
        let state = std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|s| Some(s.rsplit_once(')')?.1.split_whitespace().next()?.to_string()));
        assert!(
            state.as_deref().is_none_or(|s| s == "Z"),
            "process {pid} survived `down` (state {state:?})"
        );
    }
}

/// Stops the throwaway cluster and removes its folder when dropped.
struct Throwaway(std::path::PathBuf);

impl Drop for Throwaway {
    fn drop(&mut self) {
        let _ = std::process::Command::new("bash")
            .arg(kubeflow_e2e::cluster_script())
            .arg("down")
            .env("KUBEFLOW_E2E_STATE", &self.0)
            .env("KUBEFLOW_E2E_PORT_BASE", "17400")
            .output();
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[tokio::test]
async fn a_claim_of_the_default_storage_class_gets_a_bound_volume() {
    let client = client().await;
    let ns = TestNamespace::new(&client, "cluster-pvc").await;
    apply_yaml(&client, &ns.name, "apiVersion: v1\nkind: PersistentVolumeClaim\nmetadata: {name: data}\nspec: {accessModes: [ReadWriteOnce], resources: {requests: {storage: 1Gi}}}\n").await;
    let api: Api<k8s_openapi::api::core::v1::PersistentVolumeClaim> =
        Api::namespaced(client.clone(), &ns.name);
    wait_for("the claim to be Bound", Duration::from_secs(30), || async {
        (api.get("data").await.ok()?.status?.phase.as_deref() == Some("Bound")).then_some(())
    })
    .await;
    ns.delete().await;
}
