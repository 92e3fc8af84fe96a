//! The meta-operator, running as a process with the training operator beside
//! it (the other component operators absent), against the real control plane.

use std::time::Duration;

use kube::ResourceExt;
use kube::api::{Api, DynamicObject};
use kubeflow_e2e::component::{
    ALL_COMPONENTS, ALL_KINDS, component_api, condition, degraded, ready_at, wait_condition,
    wait_gone,
};
use kubeflow_e2e::operator::OperatorProcess;
use kubeflow_e2e::{TestNamespace, apply_yaml, wait_for};
use serde_json::{Value, json};

const TIMEOUT: Duration = Duration::from_secs(60);

fn kubeflow(version: &str, components: &str) -> String {
    format!(
        "apiVersion: platform.kubeflow.org/v1alpha1\nkind: Kubeflow\nmetadata: {{name: kubeflow}}\nspec:\n  version: \"{version}\"\n  components:\n{components}"
    )
}

async fn gone(api: &Api<DynamicObject>, name: &str) {
    wait_gone(api, name, TIMEOUT).await;
}

fn status_str<'a>(obj: &'a DynamicObject, pointer: &str) -> Option<&'a str> {
    obj.data.pointer(pointer).and_then(Value::as_str)
}

#[tokio::test]
async fn children_follow_the_kubeflow_cr_in_order_and_user_edits_survive() {
    let (client, _g) = kubeflow_e2e::component::prepare(&ALL_KINDS, &ALL_COMPONENTS).await;
    let ns = TestNamespace::new(&client, "meta").await;
    let _meta = OperatorProcess::start("kubeflow-meta-operator", &[]);
    let _training = OperatorProcess::start("kubeflow-training-operator", &[]);
    let all = "    istio: {managementState: Managed}\n    training: {managementState: Managed, spec: {jobKinds: [PyTorchJob]}}\n    pipelines: {managementState: Managed}\n    serving: {managementState: Managed}\n    devicePlugins: {managementState: Removed}\n";
    apply_yaml(&client, &ns.name, &kubeflow("1.10.2", all)).await;
    let kfs = component_api(&client, &ns.name, "Kubeflow");
    let trainings = component_api(&client, &ns.name, "Training");
    let istios = component_api(&client, &ns.name, "Istio");
    let servings = component_api(&client, &ns.name, "Serving");
    let pipelines = component_api(&client, &ns.name, "Pipelines");

    // Istio and Training are created; Serving and Pipelines wait for Istio,
    // which no operator makes Ready here.
    let training = wait_condition(&trainings, "kubeflow", "Ready", "True", TIMEOUT).await;
    assert_eq!(
        training.data["spec"],
        // (crdPolicy: the CRD's default, filled in by the API server)
        json!({"jobKinds": ["PyTorchJob"], "version": "v1.9.2", "platform": "kubernetes", "crdPolicy": "Retain"})
    );
    let kf = kfs.get("kubeflow").await.expect("kubeflow");
    let owner = &training.owner_references()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.uid.as_str(), owner.controller),
        (
            "Kubeflow",
            kf.uid().unwrap_or_default().as_str(),
            Some(true)
        )
    );
    let istio = istios.get("kubeflow").await.expect("istio child");
    assert_eq!(istio.data.pointer("/spec/version"), Some(&json!("1.26.1")));
    assert!(
        servings.get_opt("kubeflow").await.expect("get").is_none(),
        "serving waits for istio"
    );
    assert!(
        pipelines.get_opt("kubeflow").await.expect("get").is_none(),
        "pipelines waits for istio"
    );
    let kf = wait_for(
        "the Kubeflow status to show waiting components",
        TIMEOUT,
        || async {
            let kf = kfs.get("kubeflow").await.ok()?;
            let (_, reason, _, g) = condition(&kf, "Progressing")?;
            (reason == "WaitingForDependency"
                && g == kf.metadata.generation
                && status_str(&kf, "/status/readyComponents") == Some("1/4"))
            .then_some(kf)
        },
    )
    .await;
    let serving = kf
        .data
        .pointer("/status/components")
        .and_then(Value::as_array)
        .and_then(|cs| cs.iter().find(|c| c["name"] == "serving"))
        .cloned();
    assert_eq!(
        serving.as_ref().and_then(|s| s["reason"].as_str()),
        Some("WaitingForDependency")
    );
    assert_eq!(status_str(&kf, "/status/phase"), Some("Installing"));
    // `kubectl get kubeflows` says which components wait and why, without -o
    // yaml. The plural: `library.rs` applies the bundles raw (not rendered by
    // an operator, which drops a category shadowing one of our names), and
    // Katib's CRDs it leaves carry the category `kubeflow`, which kubectl
    // expands before it looks for a kind (CI: Katib's kinds listed here).
    let out = kubeflow_e2e::run_tool("kubectl", &["get", "kubeflows", "-n", &ns.name]);
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(
        table.contains("MESSAGE") && table.contains("waiting for") && table.contains("serving ("),
        "{table}{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // A field set on the child and not stated by the Kubeflow CR survives reconciles.
    let toleration = json!([{"key": "e2e/meta", "operator": "Exists", "effect": "NoSchedule"}]);
    kubeflow_e2e::component::merge(
        &trainings,
        "kubeflow",
        json!({"spec": {"tolerations": toleration}}),
    )
    .await;
    kubeflow_e2e::component::merge(&kfs, "kubeflow", json!({"spec": {"components": {"training": {"spec": {"jobKinds": ["PyTorchJob", "TFJob"]}}}}})).await;
    let t = wait_for(
        "the parent's change to reach the child",
        TIMEOUT,
        || async {
            let t = trainings.get("kubeflow").await.ok()?;
            (t.data.pointer("/spec/jobKinds") == Some(&json!(["PyTorchJob", "TFJob"]))).then_some(t)
        },
    )
    .await;
    assert_eq!(
        t.data.pointer("/spec/tolerations"),
        Some(&toleration),
        "the user's edit survives"
    );

    // A field the Kubeflow CR states and then no longer states leaves the
    // child, and the child's Deployment returns to the bundle's value.
    // (Resources, not replicas: this version's training-operator elects no
    // leader, so its operator refuses more than one replica.)
    let deployments: Api<k8s_openapi::api::apps::v1::Deployment> =
        Api::namespaced(client.clone(), &ns.name);
    let requests = |d: &k8s_openapi::api::apps::v1::Deployment| {
        d.spec
            .as_ref()
            .and_then(|s| s.template.spec.as_ref())
            .and_then(|p| p.containers.first())
            .and_then(|c| c.resources.as_ref())
            .and_then(|r| r.requests.clone())
    };
    let bundled = requests(
        &deployments
            .get("training-operator")
            .await
            .expect("the training-operator Deployment"),
    );
    let stated = json!({"cpu": "150m", "memory": "64Mi"});
    assert_ne!(
        serde_json::to_value(&bundled).ok(),
        Some(stated.clone()),
        "the bundle's requests differ from the stated ones"
    );
    kubeflow_e2e::component::merge(
        &kfs,
        "kubeflow",
        json!({"spec": {"components": {"training": {"spec": {"resources": {"requests": stated}}}}}}),
    )
    .await;
    wait_for("the stated requests on the Deployment", TIMEOUT, || async {
        let d = deployments.get("training-operator").await.ok()?;
        (serde_json::to_value(requests(&d)).ok()? == stated).then_some(())
    })
    .await;
    kubeflow_e2e::component::merge(
        &kfs,
        "kubeflow",
        json!({"spec": {"components": {"training": {"spec": {"resources": null}}}}}),
    )
    .await;
    wait_for(
        "resources gone from the child and the bundle's back",
        TIMEOUT,
        || async {
            let t = trainings.get("kubeflow").await.ok()?;
            let d = deployments.get("training-operator").await.ok()?;
            (t.data.pointer("/spec/resources").is_none() && requests(&d) == bundled).then_some(())
        },
    )
    .await;

    // Removed: the child goes, and its operator cleans the component up.
    kubeflow_e2e::component::merge(
        &kfs,
        "kubeflow",
        json!({"spec": {"components": {"training": {"managementState": "Removed"}}}}),
    )
    .await;
    gone(&trainings, "kubeflow").await;

    // Deletion removes every child.
    kubeflow_e2e::component::delete_and_wait(&kfs, "kubeflow", TIMEOUT).await;
    for api in [&istios, &trainings, &servings, &pipelines] {
        assert!(api.get_opt("kubeflow").await.expect("get").is_none());
    }
    ns.delete().await;
}

#[tokio::test]
async fn an_unknown_release_is_refused_at_the_door_and_creates_nothing() {
    let (client, _g) = kubeflow_e2e::component::prepare(&ALL_KINDS, &ALL_COMPONENTS).await;
    let ns = TestNamespace::new(&client, "meta-unknown").await;
    let _meta = OperatorProcess::start("kubeflow-meta-operator", &[]);
    // The CRD's enum refuses it at `kubectl apply`, naming what it accepts.
    // (An operator older than the CRD refuses it too: UnknownVersion, unit-tested.)
    let file = std::env::temp_dir().join(format!("kf-unknown-{}.yaml", std::process::id()));
    std::fs::write(
        &file,
        kubeflow("1.9.0", "    training: {managementState: Managed}\n"),
    )
    .expect("write");
    let out = kubeflow_e2e::run_tool(
        "kubectl",
        &["apply", "-n", &ns.name, "-f", &file.display().to_string()],
    );
    let _ = std::fs::remove_file(&file);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "1.9.0 accepted");
    assert!(
        err.contains("spec.version")
            && err.contains("\"1.9.0\"")
            && err.contains(r#"supported values: "1.10.2", "1.11.0", "26.03", "26.03.1""#),
        "{err}"
    );
    let kfs = component_api(&client, &ns.name, "Kubeflow");
    assert!(kfs.get_opt("kubeflow").await.expect("get").is_none());
    assert!(
        component_api(&client, &ns.name, "Training")
            .get_opt("kubeflow")
            .await
            .expect("get")
            .is_none(),
        "nothing created"
    );
    ns.delete().await;
}

#[tokio::test]
async fn upgrades_move_every_child_and_downgrades_are_refused() {
    let (client, _g) = kubeflow_e2e::component::prepare(&ALL_KINDS, &ALL_COMPONENTS).await;
    let ns = TestNamespace::new(&client, "meta-upgrade").await;
    let _meta = OperatorProcess::start("kubeflow-meta-operator", &[]);
    let _training = OperatorProcess::start("kubeflow-training-operator", &[]);
    let istio_op = OperatorProcess::start("kubeflow-istio-operator", &[]);
    let comps = "    training: {managementState: Managed}\n    istio: {managementState: Managed}\n";
    apply_yaml(&client, &ns.name, &kubeflow("1.10.2", comps)).await;
    let kfs = component_api(&client, &ns.name, "Kubeflow");
    let istios = component_api(&client, &ns.name, "Istio");
    let kf = wait_condition(&kfs, "kubeflow", "Ready", "True", TIMEOUT).await;
    assert_eq!(status_str(&kf, "/status/version"), Some("1.10.2"));
    assert_eq!(
        istios
            .get("kubeflow")
            .await
            .expect("istio")
            .data
            .pointer("/spec/version"),
        Some(&json!("1.26.1"))
    );

    // With Istio's operator stopped the upgrade stays in progress, and says
    // so, naming the risk of moving Istio two minor versions in place.
    istio_op.stop();
    kubeflow_e2e::component::merge(&kfs, "kubeflow", json!({"spec": {"version": "1.11.0"}})).await;
    wait_for("istio child at 1.28.0", TIMEOUT, || async {
        (istios
            .get("kubeflow")
            .await
            .ok()?
            .data
            .pointer("/spec/version")?
            == "1.28.0")
            .then_some(())
    })
    .await;
    let kf = wait_for("the upgrade risk to be stated", TIMEOUT, || async {
        let kf = kfs.get("kubeflow").await.ok()?;
        (condition(&kf, "UpgradeRisk")?.0 == "True").then_some(kf)
    })
    .await;
    let (_, reason, message, _) = condition(&kf, "UpgradeRisk").expect("UpgradeRisk");
    assert_eq!(reason, "IstioMinorVersionSkip");
    assert!(message.contains("1.26.1 -> 1.28.0"), "{message}");
    assert_eq!(status_str(&kf, "/status/phase"), Some("Upgrading"));
    assert_eq!(
        kf.data.pointer("/status/upgrade"),
        Some(&json!({"from": "1.10.2", "to": "1.11.0"}))
    );

    // Istio's operator back: the upgrade completes, the risk is over, and
    // then a downgrade is refused.
    let _istio = OperatorProcess::start("kubeflow-istio-operator", &[]);
    let kf = ready_at(&kfs, "kubeflow", "1.11.0", TIMEOUT).await;
    assert!(
        condition(&kf, "UpgradeRisk").is_none(),
        "no risk once upgraded"
    );
    kubeflow_e2e::component::merge(&kfs, "kubeflow", json!({"spec": {"version": "1.10.2"}})).await;
    let kf = wait_condition(&kfs, "kubeflow", "Degraded", "True", TIMEOUT).await;
    assert_eq!(
        condition(&kf, "Degraded").map(|c| c.1).as_deref(),
        Some("DowngradeRefused")
    );
    assert_eq!(
        status_str(&kf, "/status/version"),
        Some("1.11.0"),
        "still the installed release"
    );
    // `kubectl describe kubeflow` tells the story, each step once.
    let events: Api<k8s_openapi::api::events::v1::Event> =
        Api::namespaced(client.clone(), &ns.name);
    let told = wait_for("the upgrade's Events", TIMEOUT, || async {
        let mut told: Vec<(String, String)> = events
            .list(&Default::default())
            .await
            .ok()?
            .items
            .into_iter()
            .filter(|e| e.regarding.as_ref().and_then(|r| r.kind.as_deref()) == Some("Kubeflow"))
            // An Event told again is a count in its series, not a new Event.
            .flat_map(|e| {
                let times = e.series.as_ref().map_or(1, |s| s.count.max(1)) as usize;
                let told = (e.reason.unwrap_or_default(), e.note.unwrap_or_default());
                std::iter::repeat_n(told, times)
            })
            .collect();
        told.sort();
        told.iter()
            .any(|(r, _)| r == "DowngradeRefused")
            .then_some(told)
    })
    .await;
    let reasons: Vec<&str> = told.iter().map(|(r, _)| r.as_str()).collect();
    assert_eq!(
        reasons,
        // Ready at 1.10.2, and again at 1.11.0 (Ready went False while
        // the Istio operator was away).
        [
            "DowngradeRefused",
            "Ready",
            "Ready",
            "UpgradeStarted",
            "Upgraded"
        ],
        "{told:?}"
    );
    assert!(
        told.iter()
            .any(|(_, n)| n.contains("from Kubeflow 1.10.2 to 1.11.0")),
        "{told:?}"
    );

    kubeflow_e2e::component::delete_and_wait(&kfs, "kubeflow", TIMEOUT).await;
    ns.delete().await;
}

#[tokio::test]
async fn the_upgrade_to_26_03_keeps_a_trainer_made_at_1_11_0_and_its_jobs() {
    let (client, _g) = kubeflow_e2e::component::prepare(&ALL_KINDS, &ALL_COMPONENTS).await;
    let ns = TestNamespace::new(&client, "meta-2603").await;
    let _meta = OperatorProcess::start("kubeflow-meta-operator", &[]);
    let _training = OperatorProcess::start("kubeflow-training-operator", &[]);
    let _trainer = OperatorProcess::start("kubeflow-trainer-operator", &[]);
    let comps = "    training: {managementState: Managed}\n    trainer: {managementState: Managed, spec: {runtimes: [torch-distributed]}}\n";
    apply_yaml(&client, &ns.name, &kubeflow("1.11.0", comps)).await;
    let kfs = component_api(&client, &ns.name, "Kubeflow");
    let trainers = component_api(&client, &ns.name, "Trainer");
    let kf = wait_condition(&kfs, "kubeflow", "Ready", "True", TIMEOUT).await;
    assert_eq!(status_str(&kf, "/status/readyComponents"), Some("2/2"));
    let trainer = trainers.get("kubeflow").await.expect("trainer child");
    assert_eq!(
        trainer.data.pointer("/spec/version"),
        Some(&json!("v2.1.0"))
    );
    let uid = trainer.uid();
    apply_yaml(&client, &ns.name, "apiVersion: trainer.kubeflow.org/v1alpha1\nkind: TrainJob\nmetadata: {name: user-job}\nspec:\n  runtimeRef: {name: torch-distributed}\n").await;

    kubeflow_e2e::component::merge(&kfs, "kubeflow", json!({"spec": {"version": "26.03"}})).await;
    let kf = ready_at(&kfs, "kubeflow", "26.03", TIMEOUT).await;
    assert!(
        condition(&kf, "UpgradeRisk").is_none(),
        "1.11.0 -> 26.03 moves Istio one minor"
    );
    let trainer = wait_condition(&trainers, "kubeflow", "Ready", "True", TIMEOUT).await;
    assert_eq!(trainer.uid(), uid, "the same Trainer CR, upgraded in place");
    assert_eq!(
        trainer.data.pointer("/spec/runtimes"),
        Some(&json!(["torch-distributed"]))
    );
    let trainjobs: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        &ns.name,
        &kube::api::ApiResource::from_gvk_with_plural(
            &kube::core::GroupVersionKind::gvk("trainer.kubeflow.org", "v1alpha1", "TrainJob"),
            "trainjobs",
        ),
    );
    assert!(
        trainjobs.get_opt("user-job").await.expect("get").is_some(),
        "the TrainJob survives"
    );

    kubeflow_e2e::component::delete_and_wait(&kfs, "kubeflow", TIMEOUT).await;
    ns.delete().await;
}

#[tokio::test]
async fn two_instances_get_their_own_children_and_the_second_cannot_take_cluster_objects() {
    let (client, _g) = kubeflow_e2e::component::prepare(&ALL_KINDS, &ALL_COMPONENTS).await;
    let a = TestNamespace::new(&client, "meta-a").await;
    let b = TestNamespace::new(&client, "meta-b").await;
    let _meta = OperatorProcess::start("kubeflow-meta-operator", &[]);
    let _training = OperatorProcess::start("kubeflow-training-operator", &[]);
    let comps = "    training: {managementState: Managed}\n";
    apply_yaml(&client, &a.name, &kubeflow("1.11.0", comps)).await;
    let kfs_a = component_api(&client, &a.name, "Kubeflow");
    wait_condition(&kfs_a, "kubeflow", "Ready", "True", TIMEOUT).await;
    apply_yaml(&client, &b.name, &kubeflow("1.11.0", comps)).await;
    let kfs_b = component_api(&client, &b.name, "Kubeflow");
    let training_b = component_api(&client, &b.name, "Training");
    let (reason, message) = degraded(&training_b, TIMEOUT).await;
    assert_eq!(reason, "OwnershipConflict");
    assert!(
        message.contains(&format!("{}/kubeflow", a.name)),
        "names the holder: {message}"
    );
    let kf_b = wait_condition(&kfs_b, "kubeflow", "Degraded", "True", TIMEOUT).await;
    assert_eq!(status_str(&kf_b, "/status/phase"), Some("Degraded"));

    for (kfs, ns) in [(&kfs_b, b), (&kfs_a, a)] {
        kubeflow_e2e::component::delete_and_wait(kfs, "kubeflow", TIMEOUT).await;
        ns.delete().await;
    }
}
