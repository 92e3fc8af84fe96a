//! The chart's operators as real pods: the images images/build makes,
//! imported into the cluster's real node (containerd, runc, CNI,
//! kube-proxy), installed by `e2e/demo up` under restricted Pod Security.
//! Each pod authenticates with its mounted token, is probed by the kubelet,
//! restarts after a crash and repairs, hands leadership over in a rollout,
//! and is scraped by Prometheus through the metrics Services' endpoints (what
//! a ServiceMonitor compiles to). And an operator told to stop exits in time
//! even when the API server stopped answering.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use kubeflow_e2e::component::{ALL_COMPONENTS, ALL_KINDS, component_api, condition, prepare};
use kubeflow_e2e::demo::{
    COMPONENTS, Demo, KUBEFLOW_NAMESPACE, OPERATOR_NAMESPACE, clear_leftovers, tool_ok,
    working_sets,
};
use kubeflow_e2e::operator::{OperatorProcess, binary};
use kubeflow_e2e::prometheus::Prometheus;
use kubeflow_e2e::stall::StallableRelay;
use kubeflow_e2e::wait::wait_for;
use serde_json::{Value, json};

const TIMEOUT: Duration = Duration::from_secs(120);

fn operator_pods() -> Vec<Value> {
    let out = tool_ok(
        "kubectl",
        &["-n", OPERATOR_NAMESPACE, "get", "pods", "-o", "json"],
    );
    let list: Value = serde_json::from_str(&out).expect("pod list");
    list["items"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .into_iter()
        .filter(|p| p["metadata"]["deletionTimestamp"].is_null())
        .collect()
}

fn ready(pod: &Value) -> bool {
    pod["status"]["conditions"].as_array().is_some_and(|cs| {
        cs.iter()
            .any(|c| c["type"] == "Ready" && c["status"] == "True")
    })
}

fn operator_of(pod: &Value) -> String {
    pod["metadata"]["labels"]["app.kubernetes.io/name"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// Kubelet probe results per pod: (probe type, result) -> count.
fn probe_counts(node: &str) -> BTreeMap<(String, String, String), f64> {
    let text = tool_ok(
        "kubectl",
        &[
            "get",
            "--raw",
            &format!("/api/v1/nodes/{node}/proxy/metrics/probes"),
        ],
    );
    let mut out = BTreeMap::new();
    for line in text
        .lines()
        .filter(|l| l.starts_with("prober_probe_total{"))
    {
        let label = |name: &str| {
            line.split(&format!("{name}=\""))
                .nth(1)
                .and_then(|r| r.split('"').next())
                .unwrap_or_default()
                .to_string()
        };
        let value: f64 = line
            .rsplit(' ')
            .next()
            .and_then(|v| v.parse().ok())
            .unwrap_or(0.0);
        *out.entry((label("pod"), label("probe_type"), label("result")))
            .or_default() += value;
    }
    out
}

#[tokio::test]
async fn the_charts_operators_run_as_pods_on_the_real_node() {
    if !kubeflow_e2e::real_node_possible("pod tests") {
        return;
    }
    let (client, _g) = prepare(&ALL_KINDS, &ALL_COMPONENTS).await;
    clear_leftovers(&client).await;

    let started = Instant::now();
    let (demo, printed) = Demo::up_as_pods("pods");
    eprintln!(
        "e2e/demo up (operators as pods) to Kubeflow Ready: {:?}",
        started.elapsed()
    );
    assert!(
        printed.contains("kubeflow.platform.kubeflow.org/kubeflow"),
        "{printed}"
    );
    let node = kubeflow_e2e::cluster_cmd(&["node-name"])
        .expect("e2e/cluster node-name")
        .trim()
        .to_string();
    assert!(!node.is_empty(), "the demo started the real node");
    let kf = component_api(&client, KUBEFLOW_NAMESPACE, "Kubeflow")
        .get("kubeflow")
        .await
        .expect("the example Kubeflow CR");
    assert_eq!(
        condition(&kf, "Ready").map(|c| c.0).as_deref(),
        Some("True")
    );
    assert_eq!(kf.data["status"]["readyComponents"], json!("14/14"));

    // The operators' pods, Running and Ready on the real node, admitted under the
    // restricted Pod Security level, authenticated by their mounted token.
    let ns = tool_ok(
        "kubectl",
        &["get", "namespace", OPERATOR_NAMESPACE, "-o", "json"],
    );
    let ns: Value = serde_json::from_str(&ns).expect("namespace");
    assert_eq!(
        ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce"],
        "restricted"
    );
    let pods = operator_pods();
    assert_eq!(pods.len(), COMPONENTS.len(), "one pod per operator");
    for pod in &pods {
        let name = pod["metadata"]["name"].as_str().unwrap_or_default();
        assert_eq!(pod["spec"]["nodeName"], json!(node), "{name}");
        assert_eq!(pod["status"]["phase"], "Running", "{name}");
        assert!(ready(pod), "{name} not Ready");
        let container = &pod["spec"]["containers"][0];
        let env = container["env"].as_array().cloned().unwrap_or_default();
        assert!(
            !env.iter().any(|e| e["name"] == "KUBECONFIG"),
            "{name}: in-cluster configuration only"
        );
        assert!(
            container["volumeMounts"].as_array().is_some_and(|m| m
                .iter()
                .any(|v| v["mountPath"] == "/var/run/secrets/kubernetes.io/serviceaccount")),
            "{name}: the ServiceAccount token is mounted"
        );
    }
    // Each leader Lease is held by one of the pods: it reached the API
    // server through the kubernetes Service with its own token.
    let leases: Api<Lease> = Api::namespaced(client.clone(), OPERATOR_NAMESPACE);
    for &c in COMPONENTS.iter() {
        let operator = format!("kubeflow-{c}-operator");
        let holder = leases
            .get(&operator)
            .await
            .unwrap_or_else(|e| panic!("Lease {operator}: {e}"))
            .spec
            .and_then(|s| s.holder_identity)
            .unwrap_or_default();
        assert!(
            pods.iter()
                .any(|p| p["metadata"]["name"] == json!(holder) && operator_of(p) == operator),
            "{operator}'s Lease is held by {holder:?}, not by its pod"
        );
    }
    // Their logs are JSON lines.
    let log = tool_ok(
        "kubectl",
        &[
            "-n",
            OPERATOR_NAMESPACE,
            "logs",
            "deployment/kubeflow-training-operator",
        ],
    );
    let first = log.lines().next().unwrap_or_default();
    let parsed: Value = serde_json::from_str(first).unwrap_or_else(|e| panic!("{e}: {first}"));
    assert!(parsed["level"].is_string(), "{first}");

    // The kubelet probed /readyz and /healthz of every pod, successfully.
    let probes = wait_for(
        "a liveness and a readiness probe of every pod",
        TIMEOUT,
        || {
            let probes = probe_counts(&node);
            let pods = operator_pods();
            let all = pods.iter().all(|p| {
                let name = p["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string();
                ["Liveness", "Readiness"].iter().all(|t| {
                    probes
                        .get(&(name.clone(), t.to_string(), "successful".into()))
                        .is_some_and(|n| *n > 0.0)
                })
            });
            async move { all.then_some(probes) }
        },
    )
    .await;
    // A liveness probe never fails; a readiness probe may fail once while
    // the process starts (the kubelet can probe before the server listens).
    // A startup probe's failures are what it is for (the chart gives a slow
    // start 60 of them, seen once on a loaded machine): one reaching its
    // threshold would restart the container, which the check below sees.
    let failed: Vec<_> = probes
        .iter()
        .filter(|((_, kind, result), n)| {
            let allowed = match kind.as_str() {
                "Readiness" => 1.0,
                "Startup" => 59.0,
                _ => 0.0,
            };
            result != "successful" && **n > allowed
        })
        .collect();
    assert!(failed.is_empty(), "failed probes: {failed:?}");
    let restarted: Vec<String> = operator_pods()
        .iter()
        .filter(|p| {
            p["status"]["containerStatuses"]
                .as_array()
                .is_some_and(|cs| cs.iter().any(|c| c["restartCount"] != json!(0)))
        })
        .map(|p| p["metadata"]["name"].to_string())
        .collect();
    assert!(
        restarted.is_empty(),
        "restarted before any crash: {restarted:?}"
    );

    let sets = working_sets(&node);
    eprintln!("operator pods' working set (MiB), after install: {sets:?}");
    assert_eq!(sets.len(), COMPONENTS.len(), "{sets:?}");

    scraped_through_endpoints().await;
    restarts_after_a_crash_and_repairs(&client).await;
    hands_over_leadership_in_a_rollout(&client).await;
    drop(demo);
}

/// Prometheus scrapes the pods at the addresses the metrics Services'
/// EndpointSlices list, labelled with the pod, which is what a
/// ServiceMonitor compiles to. (Debian's Prometheus is built without
/// Kubernetes service discovery, so the test reads the slices for it.)
async fn scraped_through_endpoints() {
    let slices = tool_ok(
        "kubectl",
        &[
            "-n",
            OPERATOR_NAMESPACE,
            "get",
            "endpointslices",
            "-o",
            "json",
        ],
    );
    let slices: Value = serde_json::from_str(&slices).expect("EndpointSlices");
    let mut jobs = String::from("  - job_name: kubeflow-operators\n    static_configs:\n");
    for slice in slices["items"].as_array().into_iter().flatten() {
        let Some(port) = slice["ports"]
            .as_array()
            .and_then(|ps| ps.iter().find(|p| p["name"] == "metrics"))
            .and_then(|p| p["port"].as_u64())
        else {
            continue;
        };
        for endpoint in slice["endpoints"].as_array().into_iter().flatten() {
            let pod = endpoint["targetRef"]["name"].as_str().unwrap_or_default();
            for address in endpoint["addresses"].as_array().into_iter().flatten() {
                jobs.push_str(&format!(
                    "      - targets: ['{}:{port}']\n        labels: {{pod: {pod}}}\n",
                    address.as_str().unwrap_or_default()
                ));
            }
        }
    }
    let prometheus = Prometheus::start_with_jobs(16620, &jobs);
    let up = wait_for("every operator pod scraped", TIMEOUT, || {
        let p = &prometheus;
        async move {
            let up = p.query("up{job=\"kubeflow-operators\"} == 1").await.ok()?;
            (up.len() == COMPONENTS.len()).then_some(up)
        }
    })
    .await;
    for series in &up {
        let instance = series["metric"]["instance"].as_str().unwrap_or_default();
        assert!(
            instance.starts_with("10.217.0."),
            "a pod address: {instance}"
        );
    }
    let requests = prometheus
        .query("count(count by (pod) (kubeflow_api_requests_total))")
        .await
        .expect("query");
    assert_eq!(
        requests.first().map(|s| s["value"][1].clone()),
        Some(json!(COMPONENTS.len().to_string())),
        "every pod's own series"
    );
}

/// The training operator's container killed (SIGKILL through containerd):
/// the kubelet restarts it and it repairs what was deleted meanwhile.
async fn restarts_after_a_crash_and_repairs(client: &kube::Client) {
    let pod = operator_pods()
        .into_iter()
        .find(|p| operator_of(p) == "kubeflow-training-operator")
        .expect("the training operator's pod");
    let name = pod["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let id = pod["status"]["containerStatuses"][0]["containerID"]
        .as_str()
        .and_then(|id| id.strip_prefix("containerd://"))
        .expect("a containerd container")
        .to_string();
    let deployments: Api<k8s_openapi::api::apps::v1::Deployment> =
        Api::namespaced(client.clone(), KUBEFLOW_NAMESPACE);
    let before = deployments
        .get("training-operator")
        .await
        .expect("the training-operator Deployment")
        .metadata
        .uid;
    kubeflow_e2e::cluster_cmd(&["ctr", "tasks", "kill", "-s", "SIGKILL", &id]).expect("kill");
    deployments
        .delete("training-operator", &Default::default())
        .await
        .expect("delete");
    let pods: Api<Pod> = Api::namespaced(client.clone(), OPERATOR_NAMESPACE);
    wait_for("the killed container restarted and Ready", TIMEOUT, || {
        let pods = pods.clone();
        let name = name.clone();
        async move {
            let p = pods.get(&name).await.ok()?;
            let s = p.status?.container_statuses?.into_iter().next()?;
            (s.restart_count >= 1 && s.ready).then_some(())
        }
    })
    .await;
    wait_for("the deleted Deployment repaired", TIMEOUT, || {
        let deployments = deployments.clone();
        let before = before.clone();
        async move {
            let d = deployments.get_opt("training-operator").await.ok()??;
            (d.metadata.uid != before).then_some(())
        }
    })
    .await;
}

fn scale(deployment: &str, replicas: u32) {
    tool_ok(
        "kubectl",
        &[
            "-n",
            OPERATOR_NAMESPACE,
            "scale",
            deployment,
            &format!("--replicas={replicas}"),
        ],
    );
}

/// With two replicas, `kubectl rollout restart` replaces both pods; the
/// Lease is never without a live holder for longer than its duration.
async fn hands_over_leadership_in_a_rollout(client: &kube::Client) {
    let deployment = "deployment/kubeflow-training-operator";
    scale(deployment, 2);
    tool_ok(
        "kubectl",
        &[
            "-n",
            OPERATOR_NAMESPACE,
            "rollout",
            "status",
            deployment,
            "--timeout=120s",
        ],
    );
    let leases: Api<Lease> = Api::namespaced(client.clone(), OPERATOR_NAMESPACE);
    let lease_of = || async {
        let spec = leases.get("kubeflow-training-operator").await.ok()?.spec?;
        Some((
            spec.holder_identity.unwrap_or_default(),
            spec.lease_duration_seconds.unwrap_or(15),
        ))
    };
    let (first_holder, duration) = lease_of().await.expect("the Lease");
    tool_ok(
        "kubectl",
        &["-n", OPERATOR_NAMESPACE, "rollout", "restart", deployment],
    );
    let rollout = std::thread::spawn(move || {
        kubeflow_e2e::run_tool(
            "kubectl",
            &[
                "-n",
                OPERATOR_NAMESPACE,
                "rollout",
                "status",
                deployment,
                "--timeout=180s",
            ],
        )
    });
    // Sampled every 100 ms until a new pod leads after the rollout: the
    // longest stretch without a holder that is a Ready pod.
    let pods: Api<Pod> = Api::namespaced(client.clone(), OPERATOR_NAMESPACE);
    let mut leaderless_since: Option<Instant> = None;
    let mut longest = Duration::ZERO;
    let mut finished_at: Option<Instant> = None;
    let mut last_holder = first_holder.clone();
    loop {
        let holder = lease_of().await.map(|l| l.0).unwrap_or_default();
        let live = !holder.is_empty()
            && pods.get_opt(&holder).await.ok().flatten().is_some_and(|p| {
                p.metadata.deletion_timestamp.is_none()
                    && p.status.and_then(|s| s.conditions).is_some_and(|cs| {
                        cs.iter().any(|c| c.type_ == "Ready" && c.status == "True")
                    })
            });
        if live {
            if let Some(since) = leaderless_since.take() {
                longest = longest.max(since.elapsed());
            }
            last_holder = holder;
        } else if leaderless_since.is_none() {
            leaderless_since = Some(Instant::now());
        }
        if finished_at.is_none() && rollout.is_finished() {
            finished_at = Some(Instant::now());
        }
        // Until a new pod leads (or a minute after the rollout, which the
        // assertions below then report).
        if finished_at.is_some_and(|t| {
            (live && last_holder != first_holder && t.elapsed() > Duration::from_secs(2))
                || t.elapsed() > Duration::from_secs(60)
        }) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    if let Some(since) = leaderless_since {
        longest = longest.max(since.elapsed());
    }
    let status = rollout.join().expect("rollout thread");
    assert!(status.status.success(), "rollout status failed");
    eprintln!("rollout restart with 2 replicas: longest time without a live leader {longest:?}");
    assert_ne!(
        last_holder, first_holder,
        "a new pod leads after the rollout"
    );
    assert!(
        longest < Duration::from_secs(duration as u64),
        "leaderless for {longest:?}, more than the {duration} s lease"
    );
    scale(deployment, 1);
}

/// SIGTERM exits within the shutdown deadline when the API server stops
/// answering: once while starting (waiting for the Lease), once while
/// running.
#[tokio::test]
async fn an_operator_stops_in_time_when_the_api_server_does_not_answer() {
    let _g = kubeflow_e2e::serial().await;
    // The operator is ready once it can list its own kind.
    kubeflow_e2e::install_crds(&kubeflow_e2e::client().await).await;
    let server = tool_ok(
        "kubectl",
        &[
            "config",
            "view",
            "--minify",
            "-o",
            "jsonpath={.clusters[0].cluster.server}",
        ],
    );
    let upstream = server.trim().trim_start_matches("https://").to_string();
    for stall_after_ready in [false, true] {
        let relay = StallableRelay::start(&upstream).await;
        // The admin kubeconfig, through the relay (127.0.0.1 is in the API
        // server's certificate).
        let kubeconfig = std::env::temp_dir().join(format!(
            "kubeflow-e2e-stall-{}-{stall_after_ready}.kubeconfig",
            std::process::id()
        ));
        let text = std::fs::read_to_string(kubeflow_e2e::kubeconfig_path())
            .expect("kubeconfig")
            .replace(server.trim(), &format!("https://{}", relay.addr));
        std::fs::write(&kubeconfig, text).expect("write kubeconfig");
        if !stall_after_ready {
            relay.stall();
        }
        let mut operator = OperatorProcess::start_with_env(
            "kubeflow-training-operator",
            &[],
            &[
                ("KUBECONFIG", kubeconfig.to_str().unwrap_or_default()),
                ("LEADER_ELECT", "true"),
                ("POD_NAMESPACE", "default"),
                ("POD_NAME", "stall-test"),
                ("SHUTDOWN_DEADLINE_SECONDS", "5"),
            ],
        );
        if stall_after_ready {
            wait_for("the operator ready", TIMEOUT, || {
                let r = operator.readiness();
                async move { (r.await.as_deref() == Some("active")).then_some(()) }
            })
            .await;
            relay.stall();
        } else {
            tokio::time::sleep(Duration::from_secs(2)).await;
        }
        assert!(
            operator.is_running(),
            "{}",
            binary("kubeflow-training-operator").display()
        );
        let sent = Instant::now();
        let _ = std::process::Command::new("kill")
            .arg(operator.pid().to_string())
            .status();
        let exited = wait_for("the operator to exit", Duration::from_secs(30), || {
            let running = operator.is_running();
            async move { (!running).then_some(sent.elapsed()) }
        })
        .await;
        eprintln!(
            "stalled API (after ready: {stall_after_ready}): exited {exited:?} after SIGTERM"
        );
        assert!(exited < Duration::from_secs(8), "{exited:?}");
        operator.stop();
        let _ = std::fs::remove_file(&kubeconfig);
    }
}
