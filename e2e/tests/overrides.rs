//! `spec.overrides`: an environment variable added to KServe's controller
//! and a key of `inferenceservice-config` changed survive a drift repair, a
//! reconcile that writes nothing, and the upgrade to the next version; an
//! override whose target the new version lacks holds the upgrade
//! (`UpgradeBlocked`, named in the plan) while the installed version runs
//! on; a bad override is refused with nothing written. Overrides from a
//! ConfigMap (`spec.overridesConfigMap`): missing and malformed maps
//! refused, a good one applied. A hand edit of a managed Deployment shows
//! in `status.foreignFields` and goes when undone.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::ResourceExt;
use kube::api::Api;
use kubeflow_e2e::component::{apply_resource, condition, merge, ready_at, wait_condition};
use kubeflow_e2e::operator::{OperatorProcess, metric_sum};
use kubeflow_e2e::{TestNamespace, apply_yaml, wait_for};
use serde_json::{Value, json};

const TIMEOUT: Duration = Duration::from_secs(120);
const SECURITY: &str = "{\"autoMountServiceAccountToken\": false}";

fn env_of(d: &Deployment) -> BTreeMap<String, String> {
    d.spec
        .as_ref()
        .and_then(|s| s.template.spec.as_ref())
        .and_then(|p| p.containers.first())
        .and_then(|c| c.env.clone())
        .unwrap_or_default()
        .into_iter()
        .map(|e| (e.name, e.value.unwrap_or_default()))
        .collect()
}

/// The overridden fields, as the cluster has them.
async fn overridden(
    deployments: &Api<Deployment>,
    cms: &Api<ConfigMap>,
) -> Option<(String, String, String)> {
    let d = deployments.get("kserve-controller-manager").await.ok()?;
    let env = env_of(&d).get("KUBEFLOW_OVERRIDE").cloned()?;
    let security = cms
        .get("inferenceservice-config")
        .await
        .ok()?
        .data?
        .get("security")
        .cloned()?;
    Some((env, security, d.uid().unwrap_or_default()))
}

async fn versions(deployments: &Api<Deployment>, cms: &Api<ConfigMap>) -> (String, String) {
    let d = deployments
        .get("kserve-controller-manager")
        .await
        .expect("controller");
    let c = cms.get("inferenceservice-config").await.expect("config");
    (
        d.resource_version().unwrap_or_default(),
        c.resource_version().unwrap_or_default(),
    )
}

#[tokio::test]
async fn overrides_survive_repair_and_upgrade_and_bad_ones_are_refused() {
    let (client, _g) = kubeflow_e2e::component::prepare(&["Serving"], &["serving"]).await;
    let ns = TestNamespace::new(&client, "overrides").await;
    let op = OperatorProcess::start("kubeflow-serving-operator", &[]);
    let overrides = json!([
        {"target": {"kind": "Deployment", "name": "kserve-controller-manager"},
         "jsonPatch": [{"op": "add", "path": "/spec/template/spec/containers/0/env/-",
                        "value": {"name": "KUBEFLOW_OVERRIDE", "value": "kept"}}]},
        {"target": {"kind": "ConfigMap", "name": "inferenceservice-config"},
         "mergePatch": {"data": {"security": SECURITY}}},
        // A role only v0.16.0 has: the upgrade must not drop this silently.
        {"target": {"kind": "ClusterRole", "name": "llmisvc-manager-role"},
         "mergePatch": {"metadata": {"annotations": {"example.com/owner": "ml-platform"}}}},
    ]);
    let yaml = "apiVersion: components.kubeflow.org/v1alpha1\nkind: Serving\nmetadata: {name: kubeflow}\nspec: {version: v0.16.0}\n";
    let (api, _) = apply_resource(&client, &ns.name, yaml).await;
    merge(&api, "kubeflow", json!({"spec": {"overrides": overrides}})).await;
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns.name);
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &ns.name);
    let (env, security, uid) = wait_for("the overrides applied", TIMEOUT, || async {
        overridden(&deployments, &cms).await
    })
    .await;
    assert_eq!((env.as_str(), security.as_str()), ("kept", SECURITY));
    wait_condition(&api, "kubeflow", "Ready", "True", TIMEOUT).await;

    // Drift repair puts the override back with the rest.
    deployments
        .delete("kserve-controller-manager", &Default::default())
        .await
        .expect("delete the controller");
    wait_for("the controller back, overridden", TIMEOUT, || async {
        let (env, _, new_uid) = overridden(&deployments, &cms).await?;
        (new_uid != uid && env == "kept").then_some(())
    })
    .await;

    // A reconcile at rest writes nothing, the overridden fields included.
    wait_condition(&api, "kubeflow", "Ready", "True", TIMEOUT).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let before = versions(&deployments, &cms).await;
    let reconciles = |text: &str| metric_sum(text, "controller_runtime_reconcile_total", &[]);
    let count = reconciles(&op.metrics().await);
    merge(
        &api,
        "kubeflow",
        json!({"metadata": {"annotations": {"example.com/poke": "1"}}}),
    )
    .await;
    wait_for("a reconcile", TIMEOUT, || async {
        (reconciles(&op.metrics().await) > count).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(
        versions(&deployments, &cms).await,
        before,
        "a reconcile at rest wrote an overridden object"
    );

    // A bad override: refused by index, nothing written.
    let mut bad = overrides.clone();
    if let Some(list) = bad.as_array_mut() {
        list.push(
            json!({"target": {"kind": "Deployment", "name": "kserve-controller-manager"},
            "mergePatch": {"metadata": {"namespace": "kube-system"}}}),
        );
    }
    merge(&api, "kubeflow", json!({"spec": {"overrides": bad}})).await;
    let message = wait_for("the bad override refused", TIMEOUT, || async {
        let cr = api.get("kubeflow").await.ok()?;
        let (s, reason, message, g) = condition(&cr, "Ready")?;
        (s == "False" && reason == "InvalidSpec" && g == cr.metadata.generation).then_some(message)
    })
    .await;
    assert!(
        message.contains("spec.overrides[3]") && message.contains("/metadata/namespace"),
        "{message}"
    );
    assert_eq!(
        versions(&deployments, &cms).await,
        before,
        "a refused override wrote"
    );
    // A patch that makes its object invalid: the API server's dry run
    // refuses it, named, before anything is written.
    let mut invalid = overrides.clone();
    if let Some(list) = invalid.as_array_mut() {
        list.push(
            json!({"target": {"kind": "Deployment", "name": "kserve-controller-manager"},
            "mergePatch": {"spec": {"replicas": "many"}}}),
        );
    }
    merge(&api, "kubeflow", json!({"spec": {"overrides": invalid}})).await;
    let message = wait_for("the invalid patch refused", TIMEOUT, || async {
        let cr = api.get("kubeflow").await.ok()?;
        let (s, reason, message, g) = condition(&cr, "Ready")?;
        (s == "False" && reason == "InvalidSpec" && g == cr.metadata.generation).then_some(message)
    })
    .await;
    assert!(
        message.contains("kserve-controller-manager") && message.contains("replicas"),
        "{message}"
    );
    assert_eq!(
        versions(&deployments, &cms).await,
        before,
        "an invalid override wrote"
    );
    merge(&api, "kubeflow", json!({"spec": {"overrides": overrides}})).await;
    wait_condition(&api, "kubeflow", "Ready", "True", TIMEOUT).await;

    // The upgrade: v0.18.0 has no llmisvc-manager-role. The upgrade waits
    // (Degraded, UpgradeBlocked) with the override named in the condition
    // and in the plan; v0.16.0 keeps running with every override.
    merge(&api, "kubeflow", json!({"spec": {"version": "v0.18.0"}})).await;
    let message = wait_for("the upgrade blocked", TIMEOUT, || async {
        let cr = api.get("kubeflow").await.ok()?;
        let (s, reason, message, g) = condition(&cr, "Degraded")?;
        (s == "True" && reason == "UpgradeBlocked" && g == cr.metadata.generation)
            .then_some(message)
    })
    .await;
    assert!(
        message.contains("spec.overrides[2] (ClusterRole llmisvc-manager-role)")
            && message.contains("v0.18.0 has no such object"),
        "{message}"
    );
    let cr = api.get("kubeflow").await.expect("Serving");
    assert_eq!(cr.data.pointer("/status/version"), Some(&json!("v0.16.0")));
    let plan = &cr.data["status"]["upgradePlan"];
    assert_eq!(plan["to"], json!("v0.18.0"));
    let details = plan["details"].as_str().unwrap_or_default();
    assert!(
        details.contains(
            "override does not apply: spec.overrides[2] (ClusterRole llmisvc-manager-role)"
        ),
        "{details}"
    );
    assert!(
        plan["summary"]
            .as_str()
            .unwrap_or_default()
            .contains("1 override(s) do not apply"),
        "{plan}"
    );
    let (env, security, _) = overridden(&deployments, &cms)
        .await
        .expect("the overrides while the upgrade waits");
    assert_eq!((env.as_str(), security.as_str()), ("kept", SECURITY));
    // Without it, the upgrade goes through and keeps the other two.
    let kept: Vec<Value> = overrides.as_array().cloned().unwrap_or_default()[..2].to_vec();
    merge(&api, "kubeflow", json!({"spec": {"overrides": kept}})).await;
    ready_at(&api, "kubeflow", "v0.18.0", TIMEOUT).await;
    let (env, security, _) = overridden(&deployments, &cms)
        .await
        .expect("the overrides after the upgrade");
    assert_eq!((env.as_str(), security.as_str()), ("kept", SECURITY));

    // Overrides from a ConfigMap: missing, then malformed, are refused with
    // nothing written; then its entry applies after the resource's own.
    let before = versions(&deployments, &cms).await;
    merge(
        &api,
        "kubeflow",
        json!({"spec": {"overridesConfigMap": "serving-overrides"}}),
    )
    .await;
    let refused = |want_reason: &'static str| {
        let api = api.clone();
        move || {
            let api = api.clone();
            async move {
                let cr = api.get("kubeflow").await.ok()?;
                let (s, reason, message, g) = condition(&cr, "Ready")?;
                (s == "False" && reason == want_reason && g == cr.metadata.generation)
                    .then_some(message)
            }
        }
    };
    let message = wait_for(
        "a missing ConfigMap refused",
        TIMEOUT,
        refused("PrerequisiteMissing"),
    )
    .await;
    assert!(
        message.contains("spec.overridesConfigMap") && message.contains("serving-overrides"),
        "{message}"
    );
    apply_yaml(
        &client,
        &ns.name,
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: serving-overrides}\ndata:\n  overrides: 'target: not a list'\n",
    )
    .await;
    // The ConfigMap is not watched: a change to the resource brings the reconcile.
    merge(
        &api,
        "kubeflow",
        json!({"metadata": {"annotations": {"example.com/poke": "2"}}}),
    )
    .await;
    let message = wait_for(
        "a malformed ConfigMap refused",
        TIMEOUT,
        refused("InvalidSpec"),
    )
    .await;
    assert!(
        message.contains("key overrides: not a list of overrides"),
        "{message}"
    );
    assert_eq!(
        versions(&deployments, &cms).await,
        before,
        "a refused ConfigMap wrote"
    );
    apply_yaml(
        &client,
        &ns.name,
        r#"apiVersion: v1
kind: ConfigMap
metadata: {name: serving-overrides}
data:
  overrides: |
    - target: {kind: Deployment, name: kserve-controller-manager}
      jsonPatch:
        - {op: add, path: /spec/template/spec/containers/0/env/-, value: {name: FROM_CONFIG_MAP, value: "yes"}}
"#,
    )
    .await;
    merge(
        &api,
        "kubeflow",
        json!({"metadata": {"annotations": {"example.com/poke": "3"}}}),
    )
    .await;
    wait_for("the ConfigMap's override applied", TIMEOUT, || async {
        let d = deployments.get("kserve-controller-manager").await.ok()?;
        let env = env_of(&d);
        (env.get("FROM_CONFIG_MAP").map(String::as_str) == Some("yes")
            && env.get("KUBEFLOW_OVERRIDE").map(String::as_str) == Some("kept"))
        .then_some(())
    })
    .await;
    wait_condition(&api, "kubeflow", "Ready", "True", TIMEOUT).await;

    // A hand edit shows in status.foreignFields within a reconcile (the
    // Deployment's own watch brings it), and goes when it is undone.
    let annotate = |value: &str| {
        let out = kubeflow_e2e::run_tool(
            "kubectl",
            &[
                "annotate",
                "-n",
                &ns.name,
                "deployment/kserve-controller-manager",
                value,
                "--overwrite",
            ],
        );
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    annotate("example.com/hand=edit");
    let entry = wait_for("the hand edit reported", TIMEOUT, || {
        kubeflow_e2e::component::foreign_entry(&api, "kubeflow", "kubectl-annotate")
    })
    .await;
    assert!(
        entry["object"]
            .as_str()
            .unwrap_or_default()
            .ends_with(&format!("{}/kserve-controller-manager", ns.name)),
        "{entry}"
    );
    assert_eq!(
        entry["fields"],
        json!(["metadata.annotations.example.com/hand"]),
        "{entry}"
    );
    assert!(
        entry.get("controller").is_none(),
        "a hand edit named a controller: {entry}"
    );
    annotate("example.com/hand-");
    wait_for("the undone edit dropped", TIMEOUT, || async {
        let cr = api.get("kubeflow").await.ok()?;
        let listed = cr.data["status"]["foreignFields"]
            .as_array()
            .is_some_and(|l| l.iter().any(|e| e["manager"] == "kubectl-annotate"));
        (!listed).then_some(())
    })
    .await;

    kubeflow_e2e::component::delete_and_wait(&api, "kubeflow", TIMEOUT).await;
    ns.delete().await;
}
