//! Benchmarks against the local control plane: repair latency, time to Ready,
//! apply cost against `kubectl apply --server-side`, requests at rest, memory
//! and CPU, and growth. Prints a markdown table and writes the same figures as
//! JSON to `target/bench/results.json`. Run through `e2e/bench`.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod};
use k8s_openapi::api::rbac::v1::ClusterRole;
use kube::api::{
    Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams, WatchEvent, WatchParams,
};
use kube::{Client, Resource, ResourceExt};
use kubeflow_e2e::component::{
    ALL_COMPONENTS, ALL_KINDS, component_api, condition, delete_and_wait, sweep,
};
use kubeflow_e2e::demo::{Demo, OPERATOR_NAMESPACE, cgroup_peak, clear_leftovers, working_sets};
use kubeflow_e2e::operator::{OperatorProcess, metric_sum};
use kubeflow_e2e::{TestNamespace, apply_yaml, client, install_crds, run_tool, wait_for};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

/// Every operator's binary, from the component registry.
fn operators() -> Vec<String> {
    kubeflow_api::registry::operators()
        .map(|c| format!("kubeflow-{c}-operator"))
        .collect()
}
const LONG: Duration = Duration::from_secs(300);

/// Summary of repeated measurements: a p99 only from 100 trials on (of
/// fewer it is the maximum under another name).
fn stats(mut xs: Vec<f64>) -> Value {
    xs.sort_by(|a, b| a.total_cmp(b));
    let q = |p: f64| xs[((p * xs.len() as f64).ceil() as usize).clamp(1, xs.len()) - 1];
    let mut out = json!({"trials": xs.len(), "p50": q(0.5), "p90": q(0.9), "max": xs[xs.len() - 1], "min": xs[0]});
    if xs.len() >= 100 {
        out["p99"] = json!(q(0.99));
    }
    out
}

fn ms(d: Duration) -> f64 {
    (d.as_secs_f64() * 1000.0 * 10.0).round() / 10.0
}

/// Resident and peak memory (MiB) and CPU seconds of a process, from /proc.
fn proc_usage(pid: u32) -> (f64, f64, f64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let kb = |key: &str| {
        status
            .lines()
            .find(|l| l.starts_with(key))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command's closing parenthesis; utime and stime are the 12th and 13th.
    let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    let f: Vec<f64> = rest
        .split_whitespace()
        .map(|x| x.parse().unwrap_or(0.0))
        .collect();
    let ticks = 100.0; // Linux USER_HZ
    let cpu = (f.get(11).copied().unwrap_or(0.0) + f.get(12).copied().unwrap_or(0.0)) / ticks;
    (kb("VmRSS:") / 1024.0, kb("VmHWM:") / 1024.0, cpu)
}

async fn wait_ready(api: &Api<DynamicObject>, name: &str, timeout: Duration) {
    wait_for(&format!("{name} Ready"), timeout, || async {
        let o = api.get(name).await.ok()?;
        let (s, _, _, g) = condition(&o, "Ready")?;
        (s == "True" && g == o.metadata.generation).then_some(())
    })
    .await;
}

/// Wall time of computing the 26.03 -> 26.03.1 plans of every component
/// whose version changes (each binary's `plan`, rendering both versions
/// from the bundles), summed, per trial.
fn plan_times(trials: usize) -> Vec<f64> {
    // The versions that change in the release table (training stays v1.9.2).
    const MOVES: [(&str, &str, &str); 9] = [
        ("istio", "1.29.0", "1.30.1"),
        ("cert-manager", "v1.19.4", "v1.20.2"),
        ("auth", "v7.14.3", "v7.15.2"),
        ("dashboard", "v1.10.0", "v2.0.0"),
        ("knative", "v1.21.1", "v1.22.0"),
        ("notebooks", "v1.10.0", "v1.11.0"),
        ("trainer", "v2.1.0", "v2.2.0"),
        ("pipelines", "2.16.0", "2.16.1"),
        ("serving", "v0.16.0", "v0.18.0"),
    ];
    (0..trials)
        .map(|_| {
            MOVES
                .iter()
                .map(|(c, from, to)| {
                    let start = Instant::now();
                    let out = std::process::Command::new(kubeflow_e2e::operator::binary(&format!(
                        "kubeflow-{c}-operator"
                    )))
                    .args(["plan", "--from", from, "--to", to])
                    .env("MANIFESTS_DIR", kubeflow_e2e::manifests_dir())
                    .output()
                    .expect("run plan");
                    assert!(out.status.success(), "{c} plan: {out:?}");
                    ms(start.elapsed())
                })
                .sum()
        })
        .collect()
}

/// Deletes an object, then times until a new one with another uid is announced by a watch.
async fn repair<K>(api: &Api<K>, name: &str) -> Duration
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    let old = api
        .get(name)
        .await
        .unwrap_or_else(|e| panic!("{name}: {e}"));
    let (uid, rv) = (old.uid(), old.resource_version().unwrap_or_default());
    let mut events = api
        .watch(
            &WatchParams::default().fields(&format!("metadata.name={name}")),
            &rv,
        )
        .await
        .expect("watch")
        .boxed();
    api.delete(name, &DeleteParams::background())
        .await
        .expect("delete");
    let deleted_at = Instant::now();
    let deadline = tokio::time::sleep(Duration::from_secs(30));
    tokio::pin!(deadline);
    loop {
        tokio::select! {
            ev = events.next() => match ev {
                Some(Ok(WatchEvent::Added(o))) if o.uid() != uid => return deleted_at.elapsed(),
                Some(_) => {}
                None => panic!("watch on {name} ended"),
            },
            () = &mut deadline => panic!("{name} was not recreated within 30 s"),
        }
    }
}

/// The label every managed object carries with the value `kubeflow`: a
/// field the operator owns.
const OWNED_LABEL: &str = "app.kubernetes.io/part-of";

/// Edits a field the operator owns (as another field manager would, with a
/// merge patch), then times until a watch announces the value put back.
async fn edit_repair<K>(api: &Api<K>, name: &str) -> Duration
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    let old = api
        .get(name)
        .await
        .unwrap_or_else(|e| panic!("{name}: {e}"));
    let rv = old.resource_version().unwrap_or_default();
    let mut events = api
        .watch(
            &WatchParams::default().fields(&format!("metadata.name={name}")),
            &rv,
        )
        .await
        .expect("watch")
        .boxed();
    let edit = json!({"metadata": {"labels": {OWNED_LABEL: "edited"}}});
    api.patch(
        name,
        &kube::api::PatchParams::default(),
        &kube::api::Patch::Merge(&edit),
    )
    .await
    .expect("edit");
    let edited_at = Instant::now();
    let deadline = tokio::time::sleep(Duration::from_secs(30));
    tokio::pin!(deadline);
    loop {
        tokio::select! {
            ev = events.next() => match ev {
                Some(Ok(WatchEvent::Modified(o)))
                    if o.labels().get(OWNED_LABEL).map(String::as_str) == Some("kubeflow") =>
                {
                    return edited_at.elapsed();
                }
                Some(_) => {}
                None => panic!("watch on {name} ended"),
            },
            () = &mut deadline => panic!("{name} was not repaired within 30 s"),
        }
    }
}

/// Resident and peak memory (MiB) of every operator.
fn memory(ops: &BTreeMap<String, OperatorProcess>) -> BTreeMap<String, (f64, f64)> {
    ops.iter()
        .map(|(n, op)| {
            let (rss, peak, _) = proc_usage(op.pid());
            (n.to_string(), (rss, peak))
        })
        .collect()
}

/// Every component the release carries: cert-manager, Auth, the Dashboard, Notebooks, Katib, the Model Registry, Spark and Knative
/// from 26.03 on (the releases before carry none, and a Managed entry would
/// be refused). Auth's users Secret is made beside it ([`with_login`]).
fn all_components(version: &str) -> String {
    let cert_manager = if version.starts_with("26.") {
        format!(
            "    certManager: {{managementState: Managed}}\n    notebooks: {{managementState: Managed}}\n    katib: {{managementState: Managed}}\n    modelRegistry: {{managementState: Managed}}\n    spark: {{managementState: Managed}}\n    knative: {{managementState: Managed}}\n    dashboard: {{managementState: Managed}}\n    {}\n",
            kubeflow_e2e::login::AUTH_ENTRY
        )
    } else {
        String::new()
    };
    format!(
        "apiVersion: platform.kubeflow.org/v1alpha1\nkind: Kubeflow\nmetadata: {{name: kubeflow}}\nspec:\n  version: \"{version}\"\n  components:\n    istio: {{managementState: Managed}}\n{cert_manager}    training: {{managementState: Managed}}\n    trainer: {{managementState: Managed}}\n    pipelines: {{managementState: Managed}}\n    serving: {{managementState: Managed}}\n    devicePlugins:\n      managementState: Managed\n      spec: {{plugins: [{{name: nvidia, type: nvidia-gpu, version: v0.20.0}}]}}\n"
    )
}

/// The users Secret the Auth entry names, in `ns`.
async fn with_login(client: &kube::Client, ns: &str) {
    let user = kubeflow_e2e::login::TestUser::random("user@example.com");
    kubeflow_e2e::login::create_users_secret(client, ns, &[user]).await;
}

async fn operator_metric_sum(
    ops: &BTreeMap<String, OperatorProcess>,
    prefix: &str,
) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    for (name, op) in ops {
        let text = op.metrics().await;
        let total: f64 = text
            .lines()
            .filter(|l| l.starts_with(prefix))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum();
        out.insert(name.to_string(), total);
    }
    out
}

/// Per operator, its API requests so far: (reads, writes, watches). A
/// watch request is counted apart: kube renews every watch each 290 s (a
/// new `watch` request that lists nothing), so a 60 s window may hold one
/// renewal per watch while nothing is read.
async fn requests(ops: &BTreeMap<String, OperatorProcess>) -> BTreeMap<String, (f64, f64, f64)> {
    let mut out = BTreeMap::new();
    for (name, op) in ops {
        let text = op.metrics().await;
        let v = |verb: &str| {
            metric_sum(
                &text,
                "kubeflow_api_requests_total",
                &[&format!("verb=\"{verb}\"")],
            )
        };
        out.insert(
            name.to_string(),
            (
                v("get") + v("list"),
                v("create") + v("update") + v("patch") + v("delete"),
                v("watch"),
            ),
        );
    }
    out
}

#[tokio::main]
async fn main() {
    let client = client().await;
    install_crds(&client).await;
    sweep(&client, &ALL_KINDS, &ALL_COMPONENTS).await;
    let mut results = serde_json::Map::new();
    let mut table: Vec<(String, String, String)> = Vec::new();
    // Targets that must hold in every run; named at the end, exit status 1.
    let mut misses: Vec<String> = Vec::new();

    // 3. Apply cost against kubectl apply --server-side (training + pipelines bundles, 3 trials each).
    let (kubectl_ms, ours_ms, kubectl_work, ours_work) = apply_cost(&client).await;
    let ratio = stats(ours_ms.clone())["p50"].as_f64().unwrap_or(0.0)
        / stats(kubectl_ms.clone())["p50"].as_f64().unwrap_or(1.0);
    table.push((
        "Apply: kubectl apply --server-side (training + pipelines)".into(),
        format!("p50 {:.0} ms", stats(kubectl_ms.clone())["p50"]),
        "3".into(),
    ));
    table.push((
        "Apply: operators from fresh CRs, all objects applied".into(),
        format!(
            "p50 {:.0} ms (ratio {ratio:.2})",
            stats(ours_ms.clone())["p50"]
        ),
        "3".into(),
    ));
    results.insert("apply_kubectl_ms".into(), stats(kubectl_ms));
    results.insert("apply_operators_ms".into(), stats(ours_ms));
    results.insert("apply_ratio_operators_over_kubectl".into(), json!(ratio));
    // Where the API server's time went (3 trials each side, summed).
    for (who, w) in [("kubectl", kubectl_work), ("operators", ours_work)] {
        table.push((
            format!("Apply: API server mutating requests over {who}'s 3 trials: dry runs / writes"),
            format!(
                "{:.0} in {:.1} s / {:.0} in {:.1} s",
                w[0], w[1], w[2], w[3]
            ),
            "3".into(),
        ));
        results.insert(
            format!("apply_apiserver_{who}"),
            json!({"dry_runs": w[0], "dry_run_s": w[1], "writes": w[2], "write_s": w[3]}),
        );
    }

    // Operators for the remaining figures, started fresh so install CPU and peak memory are theirs.
    let mut ops: BTreeMap<String, OperatorProcess> = BTreeMap::new();
    for name in operators() {
        let op = OperatorProcess::start(&name, &[]);
        ops.insert(name, op);
    }
    tokio::time::sleep(Duration::from_secs(1)).await;

    // 2. Time to Ready, 5 trials, each from a clean namespace.
    let mut ready_s = Vec::new();
    let mut first_install_cpu = BTreeMap::new();
    let trials = 5;
    let mut last_ns = None;
    let mut work_s: Vec<f64> = Vec::new();
    let mut work_by_operator: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    let mut upgrade_s: Vec<f64> = Vec::new();
    let reconcile_time = "controller_runtime_reconcile_time_seconds_sum{";
    for trial in 0..trials {
        let ns = TestNamespace::new(&client, "bench-ready").await;
        with_login(&client, &ns.name).await;
        let api = component_api(&client, &ns.name, "Kubeflow");
        let work_before = operator_metric_sum(&ops, reconcile_time).await;
        let start = Instant::now();
        apply_yaml(&client, &ns.name, &all_components("26.03")).await;
        wait_ready(&api, "kubeflow", LONG).await;
        ready_s.push(start.elapsed().as_secs_f64());
        // Where the time goes: the operators' reconciles (summed; they run
        // side by side) against the wall time to Ready.
        let work_after = operator_metric_sum(&ops, reconcile_time).await;
        let mut total = 0.0;
        for (name, after) in &work_after {
            let w = after - work_before.get(name).copied().unwrap_or(0.0);
            total += w;
            work_by_operator.entry(name.clone()).or_default().push(w);
        }
        work_s.push(total);
        if trial == 0 {
            for (name, op) in &ops {
                first_install_cpu.insert(name.to_string(), proc_usage(op.pid()));
            }
        }
        // The release upgrade from there, to Ready at the new release.
        let start = Instant::now();
        api.patch(
            "kubeflow",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"version": "26.03.1"}})),
        )
        .await
        .expect("upgrade to 26.03.1");
        kubeflow_e2e::component::ready_at(&api, "kubeflow", "26.03.1", LONG).await;
        upgrade_s.push(start.elapsed().as_secs_f64());
        if trial + 1 < trials {
            delete_and_wait(&api, "kubeflow", LONG).await;
            ns.delete().await;
        } else {
            last_ns = Some(ns);
        }
    }
    let ns = last_ns.expect("the last trial's namespace");
    table.push((
        "Time to Ready, Kubeflow with 14 components".into(),
        format!(
            "p50 {:.1} s, max {:.1} s",
            stats(ready_s.clone())["p50"].as_f64().unwrap_or(0.0),
            stats(ready_s.clone())["max"].as_f64().unwrap_or(0.0)
        ),
        trials.to_string(),
    ));
    let work = stats(work_s.clone());
    table.push((
        "Time to Ready: reconcile time summed over the operators".into(),
        format!(
            "p50 {:.2} s ({})",
            work["p50"].as_f64().unwrap_or(0.0),
            work_by_operator
                .iter()
                .map(|(n, v)| format!(
                    "{} {:.2}",
                    n.trim_start_matches("kubeflow-")
                        .trim_end_matches("-operator"),
                    stats(v.clone())["p50"].as_f64().unwrap_or(0.0)
                ))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        trials.to_string(),
    ));
    table.push((
        "Upgrade 26.03 -> 26.03.1 to Ready, the same 14 components".into(),
        format!(
            "p50 {:.1} s, max {:.1} s",
            stats(upgrade_s.clone())["p50"].as_f64().unwrap_or(0.0),
            stats(upgrade_s.clone())["max"].as_f64().unwrap_or(0.0)
        ),
        trials.to_string(),
    ));
    results.insert("upgrade_to_ready_s".into(), stats(upgrade_s));
    let plan_ms = plan_times(trials);
    table.push((
        "Upgrade plan 26.03 -> 26.03.1 (`plan`, each component binary, summed)".into(),
        format!(
            "p50 {:.0} ms, max {:.0} ms",
            stats(plan_ms.clone())["p50"].as_f64().unwrap_or(0.0),
            stats(plan_ms.clone())["max"].as_f64().unwrap_or(0.0)
        ),
        trials.to_string(),
    ));
    results.insert("upgrade_plan_ms".into(), stats(plan_ms));
    results.insert("time_to_ready_s".into(), stats(ready_s));
    results.insert("time_to_ready_reconcile_s".into(), work);
    results.insert(
        "time_to_ready_reconcile_s_by_operator".into(),
        json!(
            work_by_operator
                .into_iter()
                .map(|(k, v)| (k, stats(v)))
                .collect::<serde_json::Map<_, _>>()
        ),
    );

    // 1. Repair latency, 60 trials over four kinds.
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns.name);
    let roles: Api<ClusterRole> = Api::all(client.clone());
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &ns.name);
    let vwcs: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
    let mut by_kind: BTreeMap<&str, Vec<f64>> = BTreeMap::new();
    let mut all = Vec::new();
    for i in 0..60 {
        let (k, d) = match i % 4 {
            0 => (
                "Deployment",
                repair(&deployments, "training-operator").await,
            ),
            1 => ("ClusterRole", repair(&roles, "training-operator").await),
            2 => ("ConfigMap", repair(&cms, "pipeline-install-config").await),
            _ => (
                "ValidatingWebhookConfiguration",
                repair(&vwcs, "validator.training-operator.kubeflow.org").await,
            ),
        };
        by_kind.entry(k).or_default().push(ms(d));
        all.push(ms(d));
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let s = stats(all.clone());
    table.push((
        "Repair latency, delete -> recreated (watch)".into(),
        format!(
            "p50 {} ms, p90 {} ms, max {} ms",
            s["p50"], s["p90"], s["max"]
        ),
        "60".into(),
    ));
    results.insert("repair_ms".into(), s);
    results.insert(
        "repair_ms_by_kind".into(),
        json!(
            by_kind
                .into_iter()
                .map(|(k, v)| (k.to_string(), stats(v)))
                .collect::<serde_json::Map<_, _>>()
        ),
    );

    // 1b. Repair after an edit of an owned field, 60 trials over the same kinds.
    let mut by_kind: BTreeMap<&str, Vec<f64>> = BTreeMap::new();
    let mut all = Vec::new();
    for i in 0..60 {
        let (k, d) = match i % 4 {
            0 => (
                "Deployment",
                edit_repair(&deployments, "training-operator").await,
            ),
            1 => (
                "ClusterRole",
                edit_repair(&roles, "training-operator").await,
            ),
            2 => (
                "ConfigMap",
                edit_repair(&cms, "pipeline-install-config").await,
            ),
            _ => (
                "ValidatingWebhookConfiguration",
                edit_repair(&vwcs, "validator.training-operator.kubeflow.org").await,
            ),
        };
        by_kind.entry(k).or_default().push(ms(d));
        all.push(ms(d));
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let s = stats(all);
    table.push((
        "Repair latency, edit of an owned field -> put back (watch)".into(),
        format!(
            "p50 {} ms, p90 {} ms, max {} ms",
            s["p50"], s["p90"], s["max"]
        ),
        "60".into(),
    ));
    results.insert("edit_repair_ms".into(), s);
    results.insert(
        "edit_repair_ms_by_kind".into(),
        json!(
            by_kind
                .into_iter()
                .map(|(k, v)| (k.to_string(), stats(v)))
                .collect::<serde_json::Map<_, _>>()
        ),
    );

    // 4. At rest: everything Ready, nothing changing, 60 s.
    let kf = component_api(&client, &ns.name, "Kubeflow");
    wait_ready(&kf, "kubeflow", LONG).await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let before = requests(&ops).await;
    let rec_before = operator_metric_sum(&ops, "controller_runtime_reconcile_total{").await;
    let cpu_before: BTreeMap<String, f64> = ops
        .iter()
        .map(|(n, op)| (n.to_string(), proc_usage(op.pid()).2))
        .collect();
    tokio::time::sleep(Duration::from_secs(60)).await;
    let after = requests(&ops).await;
    let rec_after = operator_metric_sum(&ops, "controller_runtime_reconcile_total{").await;
    let mut rest = serde_json::Map::new();
    let (mut reads, mut writes, mut watches, mut reconciles) = (0.0, 0.0, 0.0, 0.0);
    for (name, op) in &ops {
        let n = name.to_string();
        let (r0, w0, x0) = before[&n];
        let (r1, w1, x1) = after[&n];
        let (rss, peak, cpu) = proc_usage(op.pid());
        let install = first_install_cpu.get(&n).map(|u| u.2).unwrap_or(0.0);
        let rec = rec_after[&n] - rec_before[&n];
        reads += r1 - r0;
        writes += w1 - w0;
        watches += x1 - x0;
        reconciles += rec;
        rest.insert(n.clone(), json!({
            "reads_60s": r1 - r0, "writes_60s": w1 - w0, "watch_renewals_60s": x1 - x0, "reconciles_per_min": rec,
            "rss_mib": (rss * 10.0).round() / 10.0, "peak_rss_mib": (peak * 10.0).round() / 10.0,
            "cpu_s_first_install": (install * 100.0).round() / 100.0, "cpu_s_at_rest_60s": ((cpu - cpu_before[&n]) * 100.0).round() / 100.0,
        }));
        table.push((
            format!("{name}: RSS after Ready / peak, CPU first install / 60 s at rest"),
            format!(
                "{rss:.1} / {peak:.1} MiB, {install:.2} / {:.2} s",
                cpu - cpu_before[&n]
            ),
            "1".into(),
        ));
    }
    let total_rss: f64 = rest.values().filter_map(|f| f["rss_mib"].as_f64()).sum();
    table.push((
        format!("RSS after Ready, all {} operators together", rest.len()),
        format!("{total_rss:.1} MiB"),
        "1".into(),
    ));
    results.insert(
        "rss_total_mib".into(),
        json!((total_rss * 10.0).round() / 10.0),
    );
    // The target the distribution's last four components were built to.
    for name in [
        "kubeflow-katib-operator",
        "kubeflow-model-registry-operator",
        "kubeflow-spark-operator",
        "kubeflow-knative-operator",
    ] {
        let rss = rest
            .get(name)
            .and_then(|f| f["rss_mib"].as_f64())
            .unwrap_or(f64::MAX);
        if rss >= 32.0 {
            misses.push(format!("{name}: {rss:.1} MiB at rest (want < 32)"));
        }
    }
    table.push((
        "At rest, 60 s, all operators, leader election off: reads / writes / reconciles (watch renewals)".into(),
        format!("{reads} / {writes} / {reconciles} ({watches})"),
        "1".into(),
    ));
    // At rest nothing is read or written: any request is a defect (a watch
    // relisting, a resync that writes), and the run says so when it ends.
    // A watch's periodic renewal is not a read (it lists nothing).
    for (name, figures) in &rest {
        let (r, w) = (&figures["reads_60s"], &figures["writes_60s"]);
        if r.as_f64() != Some(0.0) || w.as_f64() != Some(0.0) {
            misses.push(format!(
                "{name} at rest: {r} reads, {w} writes in 60 s (want 0 / 0)"
            ));
        }
    }
    results.insert("at_rest".into(), Value::Object(rest));

    // 5. Forced reconciles: every CR touched (an annotation: a watch event,
    // no new generation) 5 times; a reconcile that finds everything as
    // wanted writes nothing.
    let before = requests(&ops).await;
    let rec_before = operator_metric_sum(&ops, "controller_runtime_reconcile_total{").await;
    for i in 0..5 {
        for kind in ALL_KINDS.iter() {
            let api = component_api(&client, &ns.name, kind);
            let touch =
                json!({"metadata": {"annotations": {"bench.kubeflow.org/touch": i.to_string()}}});
            let _ = api
                .patch(
                    "kubeflow",
                    &kube::api::PatchParams::default(),
                    &kube::api::Patch::Merge(&touch),
                )
                .await;
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    let after = requests(&ops).await;
    let rec_after = operator_metric_sum(&ops, "controller_runtime_reconcile_total{").await;
    let (mut reads, mut writes, mut reconciles) = (0.0, 0.0, 0.0);
    for name in ops.keys() {
        let n = name.to_string();
        reads += after[&n].0 - before[&n].0;
        writes += after[&n].1 - before[&n].1;
        reconciles += rec_after[&n] - rec_before[&n];
    }
    table.push((
        "Forced reconciles (each CR touched 5 times), all operators: reconciles / reads / writes"
            .into(),
        format!("{reconciles} / {reads} / {writes}"),
        "1".into(),
    ));
    results.insert(
        "forced_reconciles".into(),
        json!({"reconciles": reconciles, "reads": reads, "writes": writes}),
    );

    delete_and_wait(&kf, "kubeflow", LONG).await;
    ns.delete().await;

    // 6. An upgrade, 1.11.0 -> 26.03: time to Ready, and every operator's
    // peak memory over its whole life so far (five installs, the repairs
    // and this upgrade).
    let ns = TestNamespace::new(&client, "bench-upgrade").await;
    with_login(&client, &ns.name).await;
    let kf = component_api(&client, &ns.name, "Kubeflow");
    apply_yaml(&client, &ns.name, &all_components("1.11.0")).await;
    wait_ready(&kf, "kubeflow", LONG).await;
    let start = Instant::now();
    kf.patch(
        "kubeflow",
        &kube::api::PatchParams::default(),
        &kube::api::Patch::Merge(&json!({"spec": {"version": "26.03"}})),
    )
    .await
    .expect("upgrade");
    wait_ready(&kf, "kubeflow", LONG).await;
    let upgrade_s = start.elapsed().as_secs_f64();
    tokio::time::sleep(Duration::from_secs(10)).await;
    let mut upgrade = serde_json::Map::new();
    for (name, (rss, peak)) in memory(&ops) {
        table.push((
            format!("{name}: RSS 10 s after an upgrade / peak over installs and upgrade"),
            format!("{rss:.1} / {peak:.1} MiB"),
            "1".into(),
        ));
        upgrade.insert(
            name,
            json!({"rss_mib": (rss * 10.0).round() / 10.0, "peak_rss_mib": (peak * 10.0).round() / 10.0}),
        );
    }
    table.push((
        "Upgrade 1.11.0 -> 26.03, all components: time to Ready".into(),
        format!("{upgrade_s:.1} s"),
        "1".into(),
    ));
    upgrade.insert("seconds".into(), json!((upgrade_s * 10.0).round() / 10.0));
    results.insert("upgrade".into(), Value::Object(upgrade));

    // 6b. 10,000 unrelated ConfigMaps and Secrets: the operators' watches
    // select their own objects, so neither memory nor requests may change.
    let unrelated = unrelated_objects(&client, &ops).await;
    results.insert("unrelated_objects".into(), unrelated.0);
    table.extend(unrelated.1);
    delete_and_wait(&kf, "kubeflow", LONG).await;
    ns.delete().await;

    // 7. Growth: device plugins over more nodes; the meta-operator over more CRs.
    let dp_pid = ops["kubeflow-device-plugins-operator"].pid();
    let mut growth = serde_json::Map::new();
    for n in [10usize, 100, 1000] {
        let (secs, rss) = device_plugins_over_nodes(&client, n, dp_pid).await;
        table.push((
            format!("DevicePlugins over {n} extra GPU nodes: time to all ready, RSS"),
            format!("{secs:.1} s, {rss:.1} MiB"),
            "1".into(),
        ));
        growth.insert(
            format!("device_plugins_{n}_nodes"),
            json!({"seconds": secs, "rss_mib": rss}),
        );
    }
    let meta_pid = ops["kubeflow-meta-operator"].pid();
    for n in [1usize, 10, 50] {
        let (secs, rss) = meta_over_crs(&client, n, meta_pid).await;
        table.push((
            format!(
                "Meta-operator with {n} Kubeflow CRs (device plugins only): time to all Ready, RSS"
            ),
            format!("{secs:.1} s, {rss:.1} MiB"),
            "1".into(),
        ));
        growth.insert(
            format!("meta_{n}_crs"),
            json!({"seconds": secs, "rss_mib": rss}),
        );
    }
    results.insert("growth".into(), Value::Object(growth));
    drop(ops);

    let cpus = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(0);
    results.insert(
        "machine".into(),
        json!({"cpus": cpus, "os": std::env::consts::OS}),
    );
    // Written now and again after the real node's figures: a failure there
    // must not lose the rest of a quarter-hour run.
    report(&results, &table);

    // 8. The same memory figures for the chart's pods on the real node.
    if let Some((figures, rows)) = real_node(&client).await {
        results.insert("real_node".into(), figures);
        table.extend(rows);
        report(&results, &table);
    }
    if !misses.is_empty() {
        eprintln!("bench: targets missed:");
        for m in &misses {
            eprintln!("  {m}");
        }
        std::process::exit(1);
    }
}

/// Prints the table and writes the figures to `target/bench/results.json`.
fn report(results: &serde_json::Map<String, Value>, table: &[(String, String, String)]) {
    println!("| figure | value | trials |\n| --- | --- | --- |");
    for (a, b, c) in table {
        println!("| {a} | {b} | {c} |");
    }
    let dir = kubeflow_e2e::operator::target_dir().join("bench");
    let _ = std::fs::create_dir_all(&dir);
    let path = dir.join("results.json");
    std::fs::write(
        &path,
        serde_json::to_string_pretty(results).unwrap_or_default(),
    )
    .expect("write results");
    eprintln!("figures written to {}", path.display());
}

/// The API server's mutating requests so far (its own metrics), split into
/// dry runs and writes: (dry runs, their summed seconds, writes, seconds).
fn apiserver_mutations() -> [f64; 4] {
    let out = run_tool("kubectl", &["get", "--raw", "/metrics"]);
    let text = String::from_utf8_lossy(&out.stdout);
    let mut sums = [0.0; 4];
    for verb in ["POST", "PUT", "PATCH", "APPLY"] {
        let verb = format!("verb=\"{verb}\"");
        for (i, series) in ["count", "sum"].into_iter().enumerate() {
            let name = format!("apiserver_request_duration_seconds_{series}");
            let all = metric_sum(&text, &name, &[&verb]);
            // A request that is not a dry run carries an empty dry_run label.
            let writes = metric_sum(&text, &name, &[&verb, "dry_run=\"\""]);
            sums[i] += all - writes;
            sums[2 + i] += writes;
        }
    }
    sums
}

fn minus(a: [f64; 4], b: [f64; 4]) -> [f64; 4] {
    [a[0] - b[0], a[1] - b[1], a[2] - b[2], a[3] - b[3]]
}

/// Milliseconds of each trial, kubectl's then the operators', and the API
/// server's mutating work over each side's trials (see `apiserver_mutations`).
async fn apply_cost(client: &Client) -> (Vec<f64>, Vec<f64>, [f64; 4], [f64; 4]) {
    let m = kubeflow_e2e::manifests_dir();
    let files = [
        m.join("pipelines/2.15.0/cluster-scoped.yaml"),
        m.join("training/v1.9.2/training-operator.yaml"),
        m.join("pipelines/2.15.0/pipelines.yaml"),
    ];
    let mut args: Vec<String> = vec![
        "apply".into(),
        "--server-side".into(),
        "--force-conflicts".into(),
    ];
    for f in &files {
        args.push("-f".into());
        args.push(f.display().to_string());
    }
    let mut delete: Vec<String> = vec![
        "delete".into(),
        "--wait=true".into(),
        "--ignore-not-found".into(),
    ];
    for f in files.iter().rev() {
        delete.push("-f".into());
        delete.push(f.display().to_string());
    }
    let mut kubectl = Vec::new();
    let mut kubectl_work = [0.0; 4];
    let mut ours_work = [0.0; 4];
    for _ in 0..3 {
        let work = apiserver_mutations();
        let start = Instant::now();
        let out = run_tool(
            "kubectl",
            &args.iter().map(String::as_str).collect::<Vec<_>>(),
        );
        assert!(
            out.status.success(),
            "kubectl apply failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        kubectl.push(ms(start.elapsed()));
        let done = minus(apiserver_mutations(), work);
        kubectl_work = [0, 1, 2, 3].map(|i| kubectl_work[i] + done[i]);
        let out = run_tool(
            "kubectl",
            &delete.iter().map(String::as_str).collect::<Vec<_>>(),
        );
        assert!(
            out.status.success(),
            "kubectl delete failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let training = OperatorProcess::start("kubeflow-training-operator", &[]);
    let pipelines = OperatorProcess::start("kubeflow-pipelines-operator", &[]);
    tokio::time::sleep(Duration::from_secs(1)).await;
    let mut ours = Vec::new();
    for _ in 0..3 {
        let ns = TestNamespace::new(client, "bench-apply").await;
        let work = apiserver_mutations();
        let start = Instant::now();
        apply_yaml(client, &ns.name, "apiVersion: components.kubeflow.org/v1alpha1\nkind: Training\nmetadata: {name: kubeflow}\nspec: {version: v1.9.2}\n---\napiVersion: components.kubeflow.org/v1alpha1\nkind: Pipelines\nmetadata: {name: kubeflow}\nspec: {version: 2.15.0}\n").await;
        for kind in ["Training", "Pipelines"] {
            let api = component_api(client, &ns.name, kind);
            wait_for("all objects applied", LONG, || async {
                let o = api.get("kubeflow").await.ok()?;
                let applied = o.data.pointer("/status/managedObjects").is_some()
                    && o.data
                        .pointer("/status/observedGeneration")
                        .and_then(Value::as_i64)
                        == o.metadata.generation;
                applied.then_some(())
            })
            .await;
        }
        ours.push(ms(start.elapsed()));
        let done = minus(apiserver_mutations(), work);
        ours_work = [0, 1, 2, 3].map(|i| ours_work[i] + done[i]);
        for kind in ["Training", "Pipelines"] {
            delete_and_wait(&component_api(client, &ns.name, kind), "kubeflow", LONG).await;
        }
        ns.delete().await;
    }
    drop((training, pipelines));
    (kubectl, ours, kubectl_work, ours_work)
}

async fn device_plugins_over_nodes(client: &Client, n: usize, pid: u32) -> (f64, f64) {
    let nodes: Api<Node> = Api::all(client.clone());
    for i in 0..n {
        let node: Node = serde_json::from_value(json!({
            "metadata": {"name": format!("bench-gpu-{i}"), "annotations": {"kwok.x-k8s.io/node": "fake"},
                "labels": {"type": "kwok", "bench": "growth", "feature.node.kubernetes.io/pci-10de.present": "true"}},
            "status": {"allocatable": {"cpu": "32", "memory": "256Gi", "pods": "250"}, "capacity": {"cpu": "32", "memory": "256Gi", "pods": "250"}}
        }))
        .expect("node");
        let _ = nodes.create(&PostParams::default(), &node).await;
    }
    let ns = TestNamespace::new(client, "bench-dp").await;
    let api = component_api(client, &ns.name, "DevicePlugins");
    let start = Instant::now();
    apply_yaml(client, &ns.name, "apiVersion: components.kubeflow.org/v1alpha1\nkind: DevicePlugins\nmetadata: {name: kubeflow}\nspec:\n  plugins: [{name: nvidia, type: nvidia-gpu, version: v0.20.0}]\n").await;
    let want = (n + 2) as i64;
    wait_for(&format!("the plugin on {want} nodes"), LONG, || async {
        let o = api.get("kubeflow").await.ok()?;
        let p = o.data.pointer("/status/plugins/0")?;
        (p["ready"].as_i64() == Some(want)).then_some(())
    })
    .await;
    let secs = start.elapsed().as_secs_f64();
    let rss = proc_usage(pid).0;
    delete_and_wait(&api, "kubeflow", LONG).await;
    ns.delete().await;
    let growth = kube::api::ListParams::default().labels("bench=growth");
    let _ = nodes
        .delete_collection(&DeleteParams::default(), &growth)
        .await;
    kubeflow_e2e::objects::wait_none_left(&nodes, &growth, LONG).await;
    ((secs * 10.0).round() / 10.0, (rss * 10.0).round() / 10.0)
}

async fn meta_over_crs(client: &Client, n: usize, pid: u32) -> (f64, f64) {
    let mut namespaces = Vec::new();
    let start = Instant::now();
    for i in 0..n {
        let ns = TestNamespace::new(client, "bench-meta").await;
        // Each CR's plugin on nodes of its own (a value of the vendor label
        // no node has): plugins of one type on the same nodes are refused.
        apply_yaml(client, &ns.name, &format!("apiVersion: platform.kubeflow.org/v1alpha1\nkind: Kubeflow\nmetadata: {{name: kubeflow}}\nspec:\n  version: \"1.11.0\"\n  components:\n    devicePlugins:\n      managementState: Managed\n      spec: {{plugins: [{{name: nvidia, type: nvidia-gpu, version: v0.20.0, nodeSelector: {{feature.node.kubernetes.io/pci-10de.present: \"pool-{i}\"}}}}]}}\n")).await;
        namespaces.push(ns);
    }
    for ns in &namespaces {
        wait_ready(
            &component_api(client, &ns.name, "Kubeflow"),
            "kubeflow",
            LONG,
        )
        .await;
    }
    let secs = start.elapsed().as_secs_f64();
    let rss = proc_usage(pid).0;
    for ns in &namespaces {
        let api = component_api(client, &ns.name, "Kubeflow");
        let _ = api.delete("kubeflow", &DeleteParams::default()).await;
    }
    for ns in namespaces {
        delete_and_wait_gone(&component_api(client, &ns.name, "Kubeflow")).await;
        ns.delete().await;
    }
    ((secs * 10.0).round() / 10.0, (rss * 10.0).round() / 10.0)
}

async fn delete_and_wait_gone(api: &Api<DynamicObject>) {
    wait_for("a Kubeflow CR to go", LONG, || async {
        api.get_opt("kubeflow").await.ok()?.is_none().then_some(())
    })
    .await;
}

/// Creates 5,000 ConfigMaps and 5,000 Secrets no operator manages, then
/// reports each operator's RSS before and after and its requests over 60 s.
async fn unrelated_objects(
    client: &Client,
    ops: &BTreeMap<String, OperatorProcess>,
) -> (Value, Vec<(String, String, String)>) {
    use k8s_openapi::api::core::v1::Secret;
    let ns = TestNamespace::new(client, "bench-unrelated").await;
    let before_mem = memory(ops);
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &ns.name);
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns.name);
    let start = Instant::now();
    futures::stream::iter(0..5000)
        .for_each_concurrent(32, |i| {
            let (cms, secrets) = (cms.clone(), secrets.clone());
            async move {
                let cm: ConfigMap = serde_json::from_value(json!({
                    "metadata": {"name": format!("unrelated-{i}")},
                    "data": {"k": "x".repeat(256)}
                }))
                .expect("configmap");
                let secret: Secret = serde_json::from_value(json!({
                    "metadata": {"name": format!("unrelated-{i}")},
                    "stringData": {"k": "x".repeat(256)}
                }))
                .expect("secret");
                cms.create(&PostParams::default(), &cm)
                    .await
                    .expect("create configmap");
                secrets
                    .create(&PostParams::default(), &secret)
                    .await
                    .expect("create secret");
            }
        })
        .await;
    let created_s = start.elapsed().as_secs_f64();
    tokio::time::sleep(Duration::from_secs(5)).await;
    let before = requests(ops).await;
    tokio::time::sleep(Duration::from_secs(60)).await;
    let after = requests(ops).await;
    let after_mem = memory(ops);
    let mut rows = Vec::new();
    let mut out = serde_json::Map::new();
    let (mut reads, mut writes) = (0.0, 0.0);
    let mut deltas = Vec::new();
    for name in ops.keys() {
        let n = name.to_string();
        reads += after[&n].0 - before[&n].0;
        writes += after[&n].1 - before[&n].1;
        let (b, a) = (before_mem[&n].0, after_mem[&n].0);
        deltas.push(format!(
            "{} {b:.1} -> {a:.1}",
            n.trim_start_matches("kubeflow-")
                .trim_end_matches("-operator")
        ));
        out.insert(n, json!({"rss_before_mib": (b * 10.0).round() / 10.0, "rss_after_mib": (a * 10.0).round() / 10.0}));
    }
    out.insert("created_s".into(), json!((created_s * 10.0).round() / 10.0));
    out.insert("reads_60s".into(), json!(reads));
    out.insert("writes_60s".into(), json!(writes));
    rows.push((
        "10,000 unrelated ConfigMaps and Secrets: RSS before -> after (MiB)".into(),
        deltas.join(", "),
        "1".into(),
    ));
    rows.push((
        "10,000 unrelated ConfigMaps and Secrets: operators' reads / writes over the next 60 s"
            .into(),
        format!("{reads} / {writes}"),
        "1".into(),
    ));
    ns.delete().await;
    (Value::Object(out), rows)
}

/// The operators as the chart's pods on the real node (the demo, images
/// from images/build): each container's cgroup working set after Kubeflow is
/// Ready and after 60 s at rest, and its cgroup's peak. Left out (None) where
/// the cluster has no real node, or with KUBEFLOW_BENCH_REAL_NODE=0.
async fn real_node(client: &Client) -> Option<(Value, Vec<(String, String, String)>)> {
    if std::env::var("KUBEFLOW_BENCH_REAL_NODE").as_deref() == Ok("0")
        || kubeflow_e2e::cluster_cmd(&["node-enabled"]).is_err()
    {
        eprintln!("no real node: its memory figures left out");
        return None;
    }
    clear_leftovers(client).await;
    let (demo, _) = Demo::up_as_pods("bench");
    let node = kubeflow_e2e::cluster_cmd(&["node-name"])
        .unwrap_or_default()
        .trim()
        .to_string();
    // Pod name -> (operator, uid).
    let pods: Api<Pod> = Api::namespaced(client.clone(), OPERATOR_NAMESPACE);
    let listed = pods.list(&Default::default()).await.expect("operator pods");
    let operator_of = |pod: &str| {
        listed
            .items
            .iter()
            .find(|p| p.name_any() == pod)
            .and_then(|p| p.labels().get("app.kubernetes.io/name").cloned())
            .unwrap_or_else(|| pod.to_string())
    };
    let after_ready = working_sets(&node);
    tokio::time::sleep(Duration::from_secs(60)).await;
    let at_rest = working_sets(&node);
    let mut figures = serde_json::Map::new();
    let mut rows = Vec::new();
    for pod in &listed.items {
        let name = pod.name_any();
        let operator = operator_of(&name);
        let peak = pod.uid().and_then(|uid| cgroup_peak(&uid));
        let ready = after_ready.get(&name).copied().unwrap_or(f64::NAN);
        let rest = at_rest.get(&name).copied().unwrap_or(f64::NAN);
        rows.push((
            format!("{operator} pod: working set after Ready / after 60 s at rest, cgroup peak"),
            format!(
                "{ready:.1} / {rest:.1} MiB, {}",
                peak.map(|p| format!("{p:.1} MiB"))
                    .unwrap_or_else(|| "n/a".into())
            ),
            "1".into(),
        ));
        figures.insert(
            operator,
            json!({
                "working_set_after_ready_mib": (ready * 10.0).round() / 10.0,
                "working_set_at_rest_mib": (rest * 10.0).round() / 10.0,
                "cgroup_peak_mib": peak.map(|p| (p * 10.0).round() / 10.0),
            }),
        );
    }
    drop(demo);
    Some((Value::Object(figures), rows))
}
