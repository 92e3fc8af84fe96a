//! A resource refused for its namespace (outside `ALLOWED_NAMESPACES`, as
//! the chart sets it) has nothing applied, so it carries no cleanup
//! finalizer: deleted, it is gone within seconds, and a `Kubeflow` resource
//! there goes with its refused child as quickly.

use std::time::{Duration, Instant};

use kube::api::DynamicObject;
use kubeflow_e2e::component::{
    ALL_COMPONENTS, ALL_KINDS, apply_resource, component_api, condition, wait_gone,
};
use kubeflow_e2e::operator::OperatorProcess;
use kubeflow_e2e::{TestNamespace, apply_yaml, wait_for};

const TIMEOUT: Duration = Duration::from_secs(60);
/// How soon a deleted refused resource must be gone.
const GONE_WITHIN: Duration = Duration::from_secs(10);
/// The chart's default `allowedNamespaces`: the test's namespace is not one.
const ALLOWED: &str =
    "kubeflow,istio-system,cert-manager,auth,oauth2-proxy,knative-serving,knative-eventing";

/// Waits for the refusal, then checks that nothing holds the resource.
async fn refused_without_finalizer(api: &kube::Api<DynamicObject>, name: &str) {
    let cr = wait_for("NamespaceNotAllowed", TIMEOUT, || async {
        let cr = api.get(name).await.ok()?;
        let (status, reason, _, _) = condition(&cr, "Ready")?;
        (status == "False" && reason == "NamespaceNotAllowed").then_some(cr)
    })
    .await;
    let finalizers = cr.metadata.finalizers.clone().unwrap_or_default();
    assert!(
        !finalizers
            .iter()
            .any(|f| f.ends_with(".kubeflow.org/cleanup")),
        "a refused resource carries {finalizers:?}"
    );
}

async fn deleted_quickly(api: &kube::Api<DynamicObject>, name: &str) -> Duration {
    let started = Instant::now();
    api.delete(name, &Default::default()).await.expect("delete");
    wait_gone(api, name, TIMEOUT).await;
    let took = started.elapsed();
    assert!(took < GONE_WITHIN, "{name} took {took:?} to go");
    took
}

#[tokio::test]
async fn a_refused_resource_and_a_refused_kubeflow_resource_are_gone_within_seconds() {
    let (client, _g) = kubeflow_e2e::component::prepare(&ALL_KINDS, &ALL_COMPONENTS).await;
    let ns = TestNamespace::new(&client, "tenant").await;
    let env = [("ALLOWED_NAMESPACES", ALLOWED)];
    let _pipelines = OperatorProcess::start_with_env("kubeflow-pipelines-operator", &[], &env);
    let _meta = OperatorProcess::start("kubeflow-meta-operator", &[]);

    // A component resource a tenant creates in their namespace.
    let yaml = "apiVersion: components.kubeflow.org/v1alpha1\nkind: Pipelines\nmetadata: {name: mine}\nspec: {version: \"2.15.0\"}\n";
    let (pipelines, _) = apply_resource(&client, &ns.name, yaml).await;
    refused_without_finalizer(&pipelines, "mine").await;
    let took = deleted_quickly(&pipelines, "mine").await;
    eprintln!("refused Pipelines gone {took:?} after its deletion");

    // A Kubeflow resource there: its Pipelines child is refused the same way.
    apply_yaml(
        &client,
        &ns.name,
        "apiVersion: platform.kubeflow.org/v1alpha1\nkind: Kubeflow\nmetadata: {name: kubeflow}\nspec:\n  version: \"26.03.1\"\n  components:\n    pipelines: {managementState: Managed}\n",
    )
    .await;
    refused_without_finalizer(&pipelines, "kubeflow").await;
    let kubeflows = component_api(&client, &ns.name, "Kubeflow");
    let took = deleted_quickly(&kubeflows, "kubeflow").await;
    eprintln!("refused Kubeflow gone {took:?} after its deletion");
    assert!(pipelines.get_opt("kubeflow").await.expect("get").is_none());
    ns.delete().await;
}
