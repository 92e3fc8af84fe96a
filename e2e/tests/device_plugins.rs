//! The device-plugins operator, as a process, on kwok nodes labelled as GPU nodes.

use std::time::Duration;

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams};
use kubeflow_e2e::component::{apply_resource, condition, wait_condition, wait_gone};
use kubeflow_e2e::objects::{exists, wait_none_left};
use kubeflow_e2e::operator::OperatorProcess;
use kubeflow_e2e::{TestNamespace, wait_for};
use serde_json::{Value, json};

const TIMEOUT: Duration = Duration::from_secs(60);

fn plugin<'a>(cr: &'a DynamicObject, name: &str) -> Option<&'a Value> {
    cr.data
        .pointer("/status/plugins")?
        .as_array()?
        .iter()
        .find(|p| p["name"] == name)
}

fn nodes_of(cr: &DynamicObject, name: &str) -> Vec<String> {
    plugin(cr, name)
        .and_then(|p| p["nodes"].as_array())
        .map(|a| {
            a.iter()
                .filter_map(|n| n.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

#[tokio::test]
async fn plugins_land_on_matching_nodes_follow_labels_refuse_overlaps_and_clean_up() {
    let (client, _g) =
        kubeflow_e2e::component::prepare(&["DevicePlugins"], &["device-plugins"]).await;
    let ns = TestNamespace::new(&client, "dp").await;
    let _op = OperatorProcess::start("kubeflow-device-plugins-operator", &[]);
    let yaml = "apiVersion: components.kubeflow.org/v1alpha1\nkind: DevicePlugins\nmetadata: {name: kubeflow}\nspec:\n  plugins:\n  - {name: nvidia, type: nvidia-gpu, version: v0.20.0}\n  - {name: intel, type: intel-gpu, version: v0.36.0, sharedDevNum: 2}\n";
    let (api, _) = apply_resource(&client, &ns.name, yaml).await;
    let cr = wait_for("both plugins ready on their nodes", TIMEOUT, || async {
        let cr = api.get("kubeflow").await.ok()?;
        let (s, ..) = condition(&cr, "Ready")?;
        (s == "True" && nodes_of(&cr, "nvidia").len() == 2 && nodes_of(&cr, "intel").len() == 1)
            .then_some(cr)
    })
    .await;
    assert_eq!(
        nodes_of(&cr, "nvidia"),
        vec!["kwok-nvidia-0", "kwok-nvidia-1"]
    );
    assert_eq!(nodes_of(&cr, "intel"), vec!["kwok-intel-0"]);
    let nvidia = plugin(&cr, "nvidia").expect("status");
    assert_eq!(
        (
            nvidia["desired"].as_i64(),
            nvidia["ready"].as_i64(),
            nvidia["available"].as_i64()
        ),
        (Some(2), Some(2), Some(2))
    );
    let daemonsets: Api<DaemonSet> = Api::namespaced(client.clone(), &ns.name);
    let intel = daemonsets
        .get("intel-device-plugin")
        .await
        .expect("intel DaemonSet");
    let args = intel
        .spec
        .and_then(|s| s.template.spec)
        .map(|p| p.containers[0].args.clone().unwrap_or_default());
    assert_eq!(args, Some(vec!["-shared-dev-num=2".to_string()]));

    // A node losing its GPU label drops out of the count.
    let nodes: Api<Node> = Api::all(client.clone());
    let unlabel =
        json!({"metadata": {"labels": {"feature.node.kubernetes.io/pci-10de.present": null}}});
    nodes
        .patch(
            "kwok-nvidia-1",
            &PatchParams::default(),
            &Patch::Merge(&unlabel),
        )
        .await
        .expect("unlabel");
    let relabel =
        json!({"metadata": {"labels": {"feature.node.kubernetes.io/pci-10de.present": "true"}}});
    wait_for("nvidia on one node", TIMEOUT, || async {
        let cr = api.get("kubeflow").await.ok()?;
        let p = plugin(&cr, "nvidia")?;
        (p["desired"] == 1 && nodes_of(&cr, "nvidia") == vec!["kwok-nvidia-0".to_string()])
            .then_some(())
    })
    .await;
    nodes
        .patch(
            "kwok-nvidia-1",
            &PatchParams::default(),
            &Patch::Merge(&relabel),
        )
        .await
        .expect("relabel");
    wait_for("nvidia back on two nodes", TIMEOUT, || async {
        let cr = api.get("kubeflow").await.ok()?;
        (nodes_of(&cr, "nvidia").len() == 2).then_some(())
    })
    .await;

    // Two entries of one type whose selectors can meet are refused, naming both; nothing changes.
    let rv = daemonsets
        .get("nvidia-device-plugin")
        .await
        .expect("get")
        .metadata
        .resource_version;
    let overlapping = json!({"spec": {"plugins": [
        {"name": "nvidia", "type": "nvidia-gpu", "version": "v0.20.0"},
        {"name": "intel", "type": "intel-gpu", "version": "v0.36.0", "sharedDevNum": 2},
        {"name": "nvidia-old", "type": "nvidia-gpu", "version": "v0.19.3"}]}});
    kubeflow_e2e::component::merge(&api, "kubeflow", overlapping).await;
    let cr = wait_condition(&api, "kubeflow", "Degraded", "True", TIMEOUT).await;
    let (_, reason, message, _) = condition(&cr, "Degraded").expect("Degraded");
    assert_eq!(reason, "InvalidSpec");
    assert!(
        message.contains("\"nvidia\"") && message.contains("\"nvidia-old\""),
        "{message}"
    );
    assert!(!exists(&daemonsets, "nvidia-old-device-plugin").await);
    assert_eq!(
        daemonsets
            .get("nvidia-device-plugin")
            .await
            .expect("get")
            .metadata
            .resource_version,
        rv
    );

    // Disjoint selectors of one type are fine.
    let disjoint = json!({"spec": {"plugins": [
        {"name": "nvidia", "type": "nvidia-gpu", "version": "v0.20.0", "nodeSelector": {"kubernetes.io/hostname": "kwok-nvidia-0"}},
        {"name": "nvidia-old", "type": "nvidia-gpu", "version": "v0.19.3", "nodeSelector": {"kubernetes.io/hostname": "kwok-nvidia-1"}}]}});
    kubeflow_e2e::component::merge(&api, "kubeflow", disjoint).await;
    let cr = wait_for("both nvidia versions, one node each", TIMEOUT, || async {
        let cr = api.get("kubeflow").await.ok()?;
        let (s, _, _, g) = condition(&cr, "Ready")?;
        (s == "True"
            && g == cr.metadata.generation
            && nodes_of(&cr, "nvidia-old") == vec!["kwok-nvidia-1".to_string()])
        .then_some(cr)
    })
    .await;
    assert_eq!(nodes_of(&cr, "nvidia"), vec!["kwok-nvidia-0"]);
    wait_gone(&daemonsets, "intel-device-plugin", TIMEOUT).await;

    // Deletion removes the DaemonSets.
    kubeflow_e2e::component::delete_and_wait(&api, "kubeflow", TIMEOUT).await;
    wait_none_left(&daemonsets, &ListParams::default(), TIMEOUT).await;
    ns.delete().await;
}
