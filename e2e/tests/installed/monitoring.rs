//! What the chart ships for Prometheus and Grafana, checked against a real
//! Prometheus scraping the demo's operators on 127.0.0.1 (the shared
//! install, see main.rs): the alert rules
//! pass promtool's checks and unit tests, every dashboard query evaluates and
//! returns series, and a component made unready flips its readiness gauge and
//! makes the alert's expression true.

use std::path::Path;
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use kubeflow_e2e::chart::{of_kind, template};
use kubeflow_e2e::component::{component_api, condition, wait_gone};
use kubeflow_e2e::demo::{COMPONENTS, Demo, KUBEFLOW_NAMESPACE, OPERATOR_NAMESPACE, RELEASE};
use kubeflow_e2e::prometheus::Prometheus;
use kubeflow_e2e::wait::wait_for;
use serde_json::{Value, json};

const TIMEOUT: Duration = Duration::from_secs(120);

/// The chart's ServiceMonitor and PrometheusRule, as `helm template` renders
/// them for the demo's release.
fn rendered_monitoring() -> (Value, Value) {
    let objects = template(&[
        "--set",
        "monitoring.prometheusRule.enabled=true",
        "--set",
        "monitoring.serviceMonitor.enabled=true",
    ])
    .expect("renders");
    let spec = |kind: &str| {
        of_kind(&objects, kind)
            .next()
            .unwrap_or_else(|| panic!("a {kind}"))
            .data["spec"]
            .clone()
    };
    (spec("ServiceMonitor"), spec("PrometheusRule"))
}

/// The scrape jobs the Prometheus Operator makes of the ServiceMonitor, as
/// kube-prometheus-stack runs it: each endpoint's target labelled with the
/// namespace, service, pod, container and endpoint it came from, `job` the
/// Service's name, and the endpoint's `honorLabels` deciding whose
/// `namespace` wins when a series carries one too. The targets are the
/// operators' addresses on 127.0.0.1 (no service discovery dialling pods).
fn service_monitor_jobs(monitor: &Value, demo: &Demo) -> String {
    let endpoint = &monitor["endpoints"][0];
    assert_eq!(endpoint["port"], "metrics");
    let honor = endpoint["honorLabels"].as_bool().unwrap_or(false);
    let mut jobs = String::new();
    for &c in COMPONENTS.iter() {
        let service = format!("{RELEASE}-{c}-operator-metrics");
        jobs.push_str(&format!(
            "  - job_name: serviceMonitor/{OPERATOR_NAMESPACE}/{RELEASE}-operators/{c}\n    \
             honor_labels: {honor}\n    metrics_path: {}\n    static_configs:\n      \
             - targets: ['{}']\n        labels: {{namespace: {OPERATOR_NAMESPACE}, \
             service: {service}, job: {service}, pod: {RELEASE}-{c}-operator-0, \
             container: operator, endpoint: metrics}}\n",
            endpoint["path"].as_str().unwrap_or("/metrics"),
            demo.metrics_addr(c),
        ));
    }
    jobs
}

/// Every `expr` of every panel of every dashboard, with Grafana's variables
/// set as a user would pick "All".
fn dashboard_queries() -> Vec<(String, String)> {
    let dir = kubeflow_e2e::repo_root().join("charts/kubeflow/files/dashboards");
    let mut out = Vec::new();
    for entry in std::fs::read_dir(&dir).expect("dashboards") {
        let path = entry.expect("entry").path();
        let d: Value = serde_json::from_str(&std::fs::read_to_string(&path).expect("read"))
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        for panel in d["panels"].as_array().expect("panels") {
            for t in panel["targets"].as_array().expect("targets") {
                let expr = t["expr"]
                    .as_str()
                    .expect("expr")
                    .replace("$__rate_interval", "1m")
                    .replace("$namespace", ".*")
                    .replace("$controller", ".*")
                    .replace("$job", ".*")
                    .replace("$instance", ".*");
                out.push((format!("{} / {}", d["title"], panel["title"]), expr));
            }
        }
    }
    assert!(out.len() >= 15, "dashboards hold {} queries", out.len());
    out
}

fn promtool(dir: &Path, args: &[&str]) {
    let out = std::process::Command::new("promtool")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("promtool");
    assert!(
        out.status.success(),
        "promtool {args:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

async fn set_unschedulable(nodes: &Api<Node>, value: bool) {
    for n in nodes
        .list(&ListParams::default().labels("type=kwok"))
        .await
        .expect("nodes")
    {
        let name = n.metadata.name.unwrap_or_default();
        nodes
            .patch(
                &name,
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"unschedulable": value}})),
            )
            .await
            .unwrap_or_else(|e| panic!("cordon {name}: {e}"));
    }
}

/// The chart's ServiceMonitor and rules, the rules checked and their
/// alerts unit-tested by promtool (no cluster needed).
pub fn rules_checked() -> (Value, Value) {
    // The rules as the chart renders them: valid, and each alert unit-tested.
    let (monitor, rules) = rendered_monitoring();
    let dir = kubeflow_e2e::operator::target_dir()
        .join("e2e-prometheus")
        .join(format!("rules-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("rules folder");
    std::fs::write(
        dir.join("alerts.yaml"),
        serde_json::to_string_pretty(&rules).expect("rules"),
    )
    .expect("write rules");
    std::fs::copy(
        kubeflow_e2e::repo_root().join("e2e/prometheus/alerts-test.yaml"),
        dir.join("alerts-test.yaml"),
    )
    .expect("copy rule tests");
    promtool(&dir, &["check", "rules", "alerts.yaml"]);
    promtool(&dir, &["test", "rules", "alerts-test.yaml"]);
    (monitor, rules)
}

/// The rules and dashboards work against a real Prometheus scraping the
/// installed demo's operators.
pub async fn check(client: &kube::Client, demo: &Demo, monitor: &Value, rules: &Value) {
    let client = client.clone();
    let alert_expr = |name: &str| -> String {
        rules["groups"][0]["rules"]
            .as_array()
            .expect("rules")
            .iter()
            .find(|r| r["alert"] == name)
            .and_then(|r| r["expr"].as_str())
            .unwrap_or_else(|| panic!("no alert {name}"))
            .to_string()
    };

    let prom = Prometheus::start_with_jobs(16540, &service_monitor_jobs(monitor, demo));
    prom.wait_targets_up(COMPONENTS.len()).await;
    wait_for("every CR's readiness gauge at 1", TIMEOUT, || async {
        let r = prom.query("kubeflow_component_ready == 1").await.ok()?;
        // The Kubeflow resource and its fourteen components.
        (r.len() == 15).then_some(())
    })
    .await;
    // Scraped through the ServiceMonitor, a series keeps the namespace of
    // its custom resource (what the dashboards' variable and the alerts'
    // text use); the operator's own namespace is not put in its place.
    for s in prom
        .query("kubeflow_component_ready")
        .await
        .expect("readiness series")
    {
        let labels = &s["metric"];
        assert_eq!(labels["namespace"], KUBEFLOW_NAMESPACE, "{labels}");
        assert!(labels.get("exported_namespace").is_none(), "{labels}");
        assert!(
            labels["service"]
                .as_str()
                .is_some_and(|v| v.ends_with("-operator-metrics")),
            "{labels}"
        );
    }

    // Training made unready while its operator is stopped: its Deployment
    // deleted, and no node taking new pods.
    let trainings = component_api(&client, KUBEFLOW_NAMESPACE, "Training");
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), KUBEFLOW_NAMESPACE);
    let nodes: Api<Node> = Api::all(client.clone());
    demo.stop_operator("training");
    set_unschedulable(&nodes, true).await;
    deployments
        .delete("training-operator", &DeleteParams::foreground())
        .await
        .expect("delete the training Deployment");
    wait_gone(&deployments, "training-operator", TIMEOUT).await;
    demo.start();
    wait_for("the Training readiness gauge at 0", TIMEOUT, || async {
        let r = prom
            .query(r#"kubeflow_component_ready{kind="Training"} == 0"#)
            .await
            .ok()?;
        (r.len() == 1).then_some(())
    })
    .await;
    let firing = prom
        .query(&alert_expr("KubeflowComponentNotReady"))
        .await
        .expect("the alert expression evaluates");
    let kinds: Vec<&str> = firing
        .iter()
        .filter_map(|s| s["metric"]["kind"].as_str())
        .collect();
    assert!(kinds.contains(&"Training"), "alert series: {firing:?}");
    let cr = trainings.get("kubeflow").await.expect("training CR");
    assert_eq!(condition(&cr, "Ready").map(|c| c.0), Some("False".into()));

    // Nodes back: the operator's repair becomes Ready and the gauge follows.
    set_unschedulable(&nodes, false).await;
    wait_for(
        "the Training readiness gauge back at 1",
        TIMEOUT,
        || async {
            let r = prom
                .query(r#"kubeflow_component_ready{kind="Training"} == 1"#)
                .await
                .ok()?;
            (r.len() == 1).then_some(())
        },
    )
    .await;
    // The Kubeflow CR follows its child a moment later.
    wait_for("no component left unready", TIMEOUT, || async {
        prom.query(&alert_expr("KubeflowComponentNotReady"))
            .await
            .ok()?
            .is_empty()
            .then_some(())
    })
    .await;

    // Every dashboard query evaluates and returns series.
    let mut empty = Vec::new();
    for (panel, expr) in dashboard_queries() {
        let series = wait_for(&format!("{panel} to evaluate"), TIMEOUT, || async {
            prom.query(&expr)
                .await
                .map_err(|e| panic!("{panel}: {expr}: {e}"))
                .ok()
        })
        .await;
        if series.is_empty() {
            empty.push(format!("{panel}: {expr}"));
        }
    }
    assert!(
        empty.is_empty(),
        "queries with no series:\n{}",
        empty.join("\n")
    );
    // The other alerts evaluate against live data and stay quiet.
    // KubeflowOperatorNotReconciling needs 30 minutes of history to be quiet
    // (a Ready CR is reconciled every 10); a Prometheus a minute old has seen
    // none, so live it is only evaluated, and its behaviour is unit-tested.
    for alert in [
        "KubeflowReconcileErrorsHigh",
        "KubeflowOperatorRestarting",
        "KubeflowOperatorNoLeader",
    ] {
        let r = prom.query(&alert_expr(alert)).await.expect("evaluates");
        assert!(r.is_empty(), "{alert} is true on a healthy install: {r:?}");
    }
    prom.query(&alert_expr("KubeflowOperatorNotReconciling"))
        .await
        .expect("evaluates");
    // One absence alert per operator, all quiet while every operator is scraped.
    let absent: Vec<String> = rules["groups"][1]["rules"]
        .as_array()
        .expect("absence rules")
        .iter()
        .filter_map(|r| r["expr"].as_str().map(str::to_string))
        .collect();
    assert_eq!(absent.len(), COMPONENTS.len());
    for expr in absent {
        let r = prom.query(&expr).await.expect("evaluates");
        assert!(
            r.is_empty(),
            "{expr} is true while the operator is scraped: {r:?}"
        );
    }

    let refused = demo.forbidden();
    assert!(refused.is_empty(), "RBAC refused: {refused:?}");
}
