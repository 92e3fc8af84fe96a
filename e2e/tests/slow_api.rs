//! A slow or failing API server, through the fault proxy between the
//! operator and the API server (`kubeflow_e2e::fault_proxy`): the status
//! says which object failed within seconds, a write the server did after
//! its 504 is not sent again, and the component is Ready again soon after
//! the faults stop.

use std::time::{Duration, Instant};

use http::Method;
use k8s_openapi::api::apps::v1::Deployment;
use kube::api::{Api, DeleteParams};
use kubeflow_e2e::component::{component_api, condition, wait_condition};
use kubeflow_e2e::fault_proxy::{Fault, FaultProxy, Rule};
use kubeflow_e2e::operator::OperatorProcess;
use kubeflow_e2e::{TestNamespace, apply_yaml, wait_for};

const TIMEOUT: Duration = Duration::from_secs(120);
const CRD: &str = "tfjobs.kubeflow.org";

/// A real write (not a dry run) of the TFJob CRD.
fn crd_write(method: &Method, path: &str) -> bool {
    method == Method::PATCH
        && path.contains(&format!("/customresourcedefinitions/{CRD}"))
        && !path.contains("dryRun")
}

/// A real write of the operator's Deployment.
fn deployment_write(method: &Method, path: &str) -> bool {
    method == Method::PATCH
        && path.contains("/deployments/training-operator")
        && !path.contains("dryRun")
}

/// A watch: held open for minutes, not what the faults are about.
fn is_watch(path: &str) -> bool {
    path.contains("watch=")
}

/// A read that is not a watch.
fn any_get(method: &Method, path: &str) -> bool {
    method == Method::GET && !is_watch(path)
}

/// Anything but a watch.
fn any_request(_: &Method, path: &str) -> bool {
    !is_watch(path)
}

/// A write of the Training's status.
fn status_write(method: &Method, path: &str) -> bool {
    method == Method::PATCH && path.contains("/trainings/") && path.contains("/status")
}

#[tokio::test]
async fn a_failing_api_server_is_in_the_status_at_once_and_survived() {
    let (client, _g) = kubeflow_e2e::component::prepare(&["Training"], &["training"]).await;
    let ns = TestNamespace::new(&client, "slowapi").await;
    let proxy = FaultProxy::start().await;
    let kubeconfig = std::env::temp_dir().join(format!(
        "kubeflow-e2e-slow-api-{}.kubeconfig",
        std::process::id()
    ));
    proxy.write_kubeconfig(&kubeconfig);
    // Four 504s on the CRD's write, the server never doing it.
    let faults = 4;
    proxy.inject(Rule {
        matches: crd_write,
        fault: Fault::GatewayTimeout { done: false },
        times: faults,
        until: Instant::now() + TIMEOUT,
    });
    let _operator = OperatorProcess::start_with_env(
        "kubeflow-training-operator",
        &[],
        &[("KUBECONFIG", kubeconfig.to_str().unwrap_or_default())],
    );
    let trainings = component_api(&client, &ns.name, "Training");
    apply_yaml(&client, &ns.name, kubeflow_e2e::component::TRAINING_CR).await;

    // The status names the verb, the object and the error within 10 s of
    // the first 504.
    let injected = |p: &FaultProxy| -> Vec<Instant> {
        p.seen()
            .into_iter()
            .filter(|s| s.fault.is_some())
            .map(|s| s.at)
            .collect()
    };
    let first = wait_for("the first 504", TIMEOUT, || {
        let at = injected(&proxy).first().copied();
        async move { at }
    })
    .await;
    let said = wait_for(
        "the failure in the status",
        Duration::from_secs(30),
        || async {
            let cr = trainings.get("kubeflow").await.ok()?;
            let (status, reason, message, _) = condition(&cr, "Progressing")?;
            (status == "True" && message.contains(CRD)).then_some((reason, message, Instant::now()))
        },
    )
    .await;
    let to_status = said.2.duration_since(first);
    eprintln!(
        "first 504 -> status in {to_status:?}: Progressing {} {:?}",
        said.0, said.1
    );
    assert_eq!(said.0, "ApiError");
    assert!(
        said.1
            .contains(&format!("failed to apply CustomResourceDefinition {CRD}"))
            && said.1.contains("504"),
        "the verb, the object and the error: {}",
        said.1
    );
    assert!(to_status < Duration::from_secs(10), "{to_status:?}");

    // Degraded from the third failure in a row, naming the object.
    let degraded = wait_condition(&trainings, "kubeflow", "Degraded", "True", TIMEOUT).await;
    let (_, reason, message, _) = condition(&degraded, "Degraded").unwrap_or_default();
    assert_eq!(reason, "ApiError");
    assert!(message.contains(CRD), "{message}");

    // Ready within 15 s of the last fault.
    let last = wait_for("every fault used", TIMEOUT, || {
        let at = injected(&proxy);
        async move {
            (at.len() == faults as usize)
                .then(|| at.last().copied())
                .flatten()
        }
    })
    .await;
    wait_condition(&trainings, "kubeflow", "Ready", "True", TIMEOUT).await;
    let recovered = last.elapsed();
    eprintln!("last 504 -> Ready in {recovered:?}");
    assert!(recovered < Duration::from_secs(15), "{recovered:?}");
    let crd_writes = proxy
        .seen()
        .iter()
        .filter(|s| crd_write(&s.method, &s.path))
        .count();
    eprintln!("CRD writes: {crd_writes} (of which {faults} answered 504)");
    assert_eq!(
        crd_writes,
        faults as usize + 1,
        "one write per try, none resent inside a try"
    );

    // A write the server did before its 504 is read back, not sent again;
    // 429s, delays, a cut connection on the way: Ready again.
    let until = Instant::now() + Duration::from_secs(30);
    proxy.inject(Rule {
        matches: deployment_write,
        fault: Fault::GatewayTimeout { done: true },
        times: 1,
        until,
    });
    proxy.inject(Rule {
        matches: status_write,
        fault: Fault::Drop,
        times: 1,
        until,
    });
    proxy.inject(Rule {
        matches: any_get,
        fault: Fault::TooManyRequests,
        times: 3,
        until,
    });
    proxy.inject(Rule {
        matches: any_request,
        fault: Fault::Delay(Duration::from_millis(500)),
        times: 10,
        until,
    });
    let before = proxy.seen().len();
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns.name);
    deployments
        .delete("training-operator", &DeleteParams::default())
        .await
        .expect("delete the Deployment");
    wait_for("the Deployment back", TIMEOUT, || async {
        deployments
            .get_opt("training-operator")
            .await
            .ok()
            .flatten()
            .filter(|d| d.metadata.deletion_timestamp.is_none())
    })
    .await;
    wait_condition(&trainings, "kubeflow", "Ready", "True", TIMEOUT).await;
    // Settled: later passes find nothing to write.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let after: Vec<_> = proxy.seen().into_iter().skip(before).collect();
    let writes = after
        .iter()
        .filter(|s| deployment_write(&s.method, &s.path))
        .count();
    let faults_used = after.iter().filter(|s| s.fault.is_some()).count();
    eprintln!("after the deletion: {writes} Deployment write(s), {faults_used} faults injected");
    assert_eq!(writes, 1, "done by the server before its 504: not resent");
    proxy.heal();
    let _ = std::fs::remove_file(&kubeconfig);
}

/// A real write of one of KServe v0.18.0's two largest CRDs (about 720 KB).
fn large_crd_write(method: &Method, path: &str) -> bool {
    method == Method::PATCH
        && path.contains("/customresourcedefinitions/llminferenceservices.serving.kserve.io")
        && !path.contains("dryRun")
}

/// Every request five seconds late, as on a loaded API server (where KServe
/// v0.18.0's install once failed for minutes with 504s and no status):
/// Serving v0.18.0 installs, never Degraded on the way, and its large CRDs
/// are sent once each.
#[tokio::test]
async fn serving_installs_when_every_request_is_five_seconds_late() {
    const DELAY: Duration = Duration::from_secs(5);
    const INSTALL: Duration = Duration::from_secs(600);
    let (client, _g) = kubeflow_e2e::component::prepare(&["Serving"], &["serving"]).await;
    let ns = TestNamespace::new(&client, "slowserving").await;
    let proxy = FaultProxy::start().await;
    let kubeconfig = std::env::temp_dir().join(format!(
        "kubeflow-e2e-slow-serving-{}.kubeconfig",
        std::process::id()
    ));
    proxy.write_kubeconfig(&kubeconfig);
    proxy.inject(Rule {
        matches: any_request,
        fault: Fault::Delay(DELAY),
        times: u32::MAX,
        until: Instant::now() + INSTALL,
    });
    let _operator = OperatorProcess::start_with_env(
        "kubeflow-serving-operator",
        &[],
        &[("KUBECONFIG", kubeconfig.to_str().unwrap_or_default())],
    );
    let servings = component_api(&client, &ns.name, "Serving");
    let started = Instant::now();
    apply_yaml(
        &client,
        &ns.name,
        "apiVersion: components.kubeflow.org/v1alpha1\nkind: Serving\nmetadata: {name: kubeflow}\nspec:\n  version: v0.18.0\n",
    )
    .await;
    // Ready at last; Degraded never seen on the way (read once a second).
    let degraded = std::sync::Arc::new(std::sync::Mutex::new(None));
    wait_for(
        "Serving v0.18.0 Ready through the slow proxy",
        INSTALL,
        || {
            let servings = servings.clone();
            let degraded = degraded.clone();
            async move {
                let cr = servings.get("kubeflow").await.ok()?;
                if let Some((s, reason, message, _)) = condition(&cr, "Degraded")
                    && s == "True"
                    && let Ok(mut seen) = degraded.lock()
                {
                    seen.get_or_insert((reason, message));
                }
                let (s, _, _, g) = condition(&cr, "Ready")?;
                (s == "True" && g == cr.metadata.generation).then_some(())
            }
        },
    )
    .await;
    let degraded = degraded.lock().map(|d| d.clone()).unwrap_or_default();
    let took = started.elapsed();
    let seen = proxy.seen();
    let delayed = seen
        .iter()
        .filter(|s| s.fault == Some(Fault::Delay(DELAY)))
        .count();
    let large = seen
        .iter()
        .filter(|s| large_crd_write(&s.method, &s.path))
        .count();
    eprintln!(
        "Ready through the proxy in {took:?}: {} requests, {delayed} delayed by {DELAY:?}, {large} write(s) of the largest CRD",
        seen.len()
    );
    assert!(delayed >= 20, "the delay was in force: {delayed}");
    assert_eq!(degraded, None, "never Degraded on the way");
    assert_eq!(large, 1, "the largest CRD sent once");
    proxy.heal();
    kubeflow_e2e::component::delete_and_wait(&servings, "kubeflow", TIMEOUT).await;
    let _ = std::fs::remove_file(&kubeconfig);
    ns.delete().await;
}
