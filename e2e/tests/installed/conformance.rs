//! What every component promises, checked for each component of the
//! registry on the shared install, its operator run as the chart runs it
//! (the chart's ServiceAccount, `ALLOWED_NAMESPACES`, the admission pins,
//! restricted Pod Security): at rest no operator writes, and none lists but
//! in a requeued pass (named in the output); a forced
//! reconcile of every component (its resource touched: a watch event, no
//! new generation) writes nothing; one object of every kind its inventory
//! holds deleted, then one edited, is put back within two seconds. A new
//! component gets these checks by being in the registry; a failure names
//! the component and the promise.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use futures::StreamExt;
use kubeflow_api::registry::COMPONENTS as REGISTRY;
use kubeflow_e2e::component::{component_api, condition, merge};
use kubeflow_e2e::demo::{COMPONENTS, Demo, KUBEFLOW_NAMESPACE};
use kubeflow_e2e::operator::{metric_value, read_metrics, writes_in};
use kubeflow_e2e::repair::assert_every_kind_repaired_but;
use kubeflow_e2e::wait::wait_for;
use serde_json::json;

const TIMEOUT: Duration = Duration::from_secs(120);
/// How long the install is watched at rest.
const AT_REST: Duration = Duration::from_secs(15);

/// Components whose repairs are checked side by side.
const REPAIRED_AT_ONCE: usize = 2;
const RECONCILES: &str = "controller_runtime_reconcile_total";

/// Kinds whose repair a component's inventory must show at 26.03.1 (beyond
/// "every kind it holds"): those whose watch took its own code, or that a
/// version added. The component's own test listed them before the suite.
const MUST_REPAIR: &[(&str, &[&str])] = &[
    (
        "auth",
        &[
            "Deployment.apps",
            "ConfigMap",
            "VirtualService.networking.istio.io",
            "AuthorizationPolicy.security.istio.io",
            "RequestAuthentication.security.istio.io",
            "ClusterRoleBinding.rbac.authorization.k8s.io",
        ],
    ),
    (
        "cert-manager",
        &[
            "Deployment.apps",
            "ClusterIssuer.cert-manager.io",
            "Role.rbac.authorization.k8s.io",
            "NetworkPolicy.networking.k8s.io",
            "ValidatingWebhookConfiguration.admissionregistration.k8s.io",
        ],
    ),
    (
        "dashboard",
        &[
            "Deployment.apps",
            "ConfigMap",
            "VirtualService.networking.istio.io",
            "AuthorizationPolicy.security.istio.io",
            "Certificate.cert-manager.io",
            "MutatingWebhookConfiguration.admissionregistration.k8s.io",
            "Profile.kubeflow.org",
            "ClusterRole.rbac.authorization.k8s.io",
        ],
    ),
    (
        "istio",
        &[
            "AuthorizationPolicy.security.istio.io",
            "Gateway.networking.istio.io",
            "HorizontalPodAutoscaler.autoscaling",
        ],
    ),
    (
        "knative",
        &[
            "Deployment.apps",
            "ConfigMap",
            "Gateway.networking.istio.io",
            "ValidatingWebhookConfiguration.admissionregistration.k8s.io",
            "Image.caching.internal.knative.dev",
        ],
    ),
    (
        "notebooks",
        &[
            "Deployment.apps",
            "ConfigMap",
            "VirtualService.networking.istio.io",
            "Certificate.cert-manager.io",
            "MutatingWebhookConfiguration.admissionregistration.k8s.io",
        ],
    ),
    (
        "pipelines",
        &[
            "NetworkPolicy.networking.k8s.io",
            "PriorityClass.scheduling.k8s.io",
        ],
    ),
    (
        "spark",
        &[
            "Deployment.apps",
            "Service",
            "Role.rbac.authorization.k8s.io",
            "MutatingWebhookConfiguration.admissionregistration.k8s.io",
        ],
    ),
];

/// Kinds the chart's admission keeps from deletion by anyone but their
/// operator (declared Profiles: `<release>-declared-profiles`): edited
/// only.
const UNDELETABLE: &[&str] = &["Profile.kubeflow.org"];

/// One operator's counters: apply writes, lists, reconciles.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Counts {
    writes: f64,
    lists: f64,
    reconciles: f64,
}

/// Every operator's counters, read so that a page nobody serves fails
/// (naming the operator) rather than reading as zeros.
async fn counts(demo: &Demo) -> BTreeMap<&'static str, Counts> {
    let mut out = BTreeMap::new();
    for &c in COMPONENTS.iter() {
        let addr = demo.metrics_addr(c);
        assert!(!addr.is_empty(), "{c}: no metrics address recorded");
        let text = read_metrics(&addr)
            .await
            .unwrap_or_else(|e| panic!("{c}: {e:#}"));
        let writes = writes_in(&addr, &text, true).unwrap_or_else(|e| panic!("{c}: {e:#}"));
        out.insert(
            c,
            Counts {
                writes,
                lists: metric_value(&text, "kubeflow_api_requests_total", &["verb=\"list\""])
                    .unwrap_or(0.0),
                reconciles: metric_value(&text, RECONCILES, &[])
                    .unwrap_or_else(|| panic!("{c}: no {RECONCILES} series")),
            },
        );
    }
    out
}

/// Every operator's counters once the install is at rest: the Kubeflow
/// resource Ready at its generation (every component Ready: a workload not
/// yet available is read about, its pods listed, until it is), then no
/// write or list count changed over two seconds.
async fn settled(client: &kube::Client, demo: &Demo) -> BTreeMap<&'static str, Counts> {
    let kfs = component_api(client, KUBEFLOW_NAMESPACE, "Kubeflow");
    wait_for("the Kubeflow resource Ready", TIMEOUT, || async {
        let kf = kfs.get("kubeflow").await.ok()?;
        let (s, _, _, g) = condition(&kf, "Ready")?;
        (s == "True" && g == kf.metadata.generation).then_some(())
    })
    .await;
    let deadline = Instant::now() + TIMEOUT;
    let mut last = counts(demo).await;
    loop {
        tokio::time::sleep(Duration::from_secs(2)).await;
        let now = counts(demo).await;
        if now
            .iter()
            .all(|(c, n)| last[c].writes == n.writes && last[c].lists == n.lists)
        {
            return now;
        }
        assert!(
            Instant::now() < deadline,
            "operators still writing or listing after {TIMEOUT:?}: {now:?}"
        );
        last = now;
    }
}

/// The three promises, for every component of the registry.
pub async fn check(client: &kube::Client, demo: &Demo) {
    // At rest: nothing written, nothing listed outside a requeued pass (the
    // watches' caches answer).
    let started = Instant::now();
    let before = settled(client, demo).await;
    kubeflow_e2e::print_time(&format!(
        "conformance: at rest after {:.0} s",
        started.elapsed().as_secs_f64()
    ));
    tokio::time::sleep(AT_REST).await;
    let after = counts(demo).await;
    for (c, b) in &before {
        let a = after[c];
        assert_eq!(a.writes, b.writes, "{c}: wrote at rest");
        // A list is a pass's read (a requeue's: the safety net of a Ready
        // resource, sooner while it waits on something) or a watch
        // relisting; only the second would be a poll nobody asked for.
        let reconciles = a.reconciles - b.reconciles;
        if a.lists != b.lists {
            eprintln!(
                "{c}: {} list(s) at rest, in {reconciles} requeued reconcile(s)",
                a.lists - b.lists
            );
            assert!(
                reconciles > 0.0,
                "{c}: listed {} time(s) at rest without a reconcile (a watch relisting, or a poll)",
                a.lists - b.lists
            );
        }
    }

    // A forced reconcile of every component writes nothing: each resource
    // touched, each operator seen to reconcile.
    for c in REGISTRY {
        let api = component_api(client, KUBEFLOW_NAMESPACE, c.kind);
        merge(
            &api,
            "kubeflow",
            json!({"metadata": {"annotations": {"e2e.kubeflow.org/touched": "conformance"}}}),
        )
        .await;
    }
    for c in REGISTRY {
        let name = c.name;
        wait_for(
            &format!("{name}: a reconcile of the touched resource"),
            TIMEOUT,
            || async {
                let addr = demo.metrics_addr(name);
                let text = read_metrics(&addr).await.ok()?;
                (metric_value(&text, RECONCILES, &[])? > after[name].reconciles).then_some(())
            },
        )
        .await;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let touched = counts(demo).await;
    eprintln!(
        "the meta-operator's writes while its children were touched: {}",
        touched["meta"].writes - after["meta"].writes
    );
    for c in REGISTRY {
        assert_eq!(
            touched[c.name].writes, after[c.name].writes,
            "{}: a forced reconcile wrote",
            c.name
        );
    }

    kubeflow_e2e::print_time(&format!(
        "conformance: forced reconciles checked at {:.0} s",
        started.elapsed().as_secs_f64()
    ));
    // Every managed kind repaired after a deletion and after an edit. A few
    // components at a time: each waits on its own operator, and one after
    // another they were half of the suite's time; not all at once, so that
    // the 2 s bound still measures a repair, not a queue at the API server.
    futures::stream::iter(REGISTRY)
        .for_each_concurrent(REPAIRED_AT_ONCE, |c| async move {
            let cr = component_api(client, KUBEFLOW_NAMESPACE, c.kind)
                .get("kubeflow")
                .await
                .unwrap_or_else(|e| panic!("{}: {e}", c.name));
            let must = MUST_REPAIR
                .iter()
                .find(|(n, _)| *n == c.name)
                .map_or(&[][..], |(_, k)| *k);
            assert_every_kind_repaired_but(client, &cr, must, UNDELETABLE).await;
        })
        .await;
    kubeflow_e2e::print_time(&format!(
        "conformance: repairs checked at {:.0} s",
        started.elapsed().as_secs_f64()
    ));
}
