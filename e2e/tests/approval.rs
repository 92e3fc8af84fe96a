//! `upgradeStrategy: Manual`: a change of release publishes each component's
//! plan and the release's digest, writes nothing until `spec.approvedPlan`
//! names that digest (a wrong one is refused by name), then completes. The
//! plan in the cluster is the one `plan --from --to` prints offline.

use std::collections::BTreeMap;
use std::process::Command;
use std::time::Duration;

use kube::api::{Api, ApiResource, DynamicObject, ListParams};
use kube::core::GroupVersionKind;
use kubeflow_e2e::component::{
    ALL_COMPONENTS, ALL_KINDS, apply_resource, component_api, condition, merge, ready_at,
};
use kubeflow_e2e::operator::{OperatorProcess, binary};
use kubeflow_e2e::{TestNamespace, wait_for};
use serde_json::{Value, json};

const TIMEOUT: Duration = Duration::from_secs(180);

/// The kinds the Trainer bundles hold, by (group, version, kind, plural, namespaced).
const KINDS: [(&str, &str, &str, &str, bool); 8] = [
    ("apps", "v1", "Deployment", "deployments", true),
    ("", "v1", "Service", "services", true),
    ("", "v1", "ServiceAccount", "serviceaccounts", true),
    ("", "v1", "ConfigMap", "configmaps", true),
    (
        "rbac.authorization.k8s.io",
        "v1",
        "ClusterRole",
        "clusterroles",
        false,
    ),
    (
        "rbac.authorization.k8s.io",
        "v1",
        "ClusterRoleBinding",
        "clusterrolebindings",
        false,
    ),
    (
        "apiextensions.k8s.io",
        "v1",
        "CustomResourceDefinition",
        "customresourcedefinitions",
        false,
    ),
    (
        "admissionregistration.k8s.io",
        "v1",
        "ValidatingWebhookConfiguration",
        "validatingwebhookconfigurations",
        false,
    ),
];

/// Every object the component CR in `ns` manages, by kind and name, with
/// its resourceVersion.
async fn managed_versions(client: &kube::Client, ns: &str) -> BTreeMap<String, String> {
    let selector = format!("{}={ns}", kubeflow_operator::labels::OWNER_NAMESPACE);
    let mut out = BTreeMap::new();
    for (group, version, kind, plural, namespaced) in KINDS {
        let ar =
            ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural);
        let api: Api<DynamicObject> = if namespaced {
            Api::namespaced_with(client.clone(), ns, &ar)
        } else {
            Api::all_with(client.clone(), &ar)
        };
        let list = api
            .list(&ListParams::default().labels(&selector))
            .await
            .unwrap_or_else(|e| panic!("list {kind}: {e}"));
        for o in list.items {
            out.insert(
                format!("{kind}/{}", o.metadata.name.unwrap_or_default()),
                o.metadata.resource_version.unwrap_or_default(),
            );
        }
    }
    out
}

#[tokio::test]
async fn a_manual_upgrade_waits_for_its_plans_digest_and_the_plan_is_the_offline_one() {
    let (client, _g) = kubeflow_e2e::component::prepare(&ALL_KINDS, &ALL_COMPONENTS).await;
    kubeflow_e2e::demo::clear_leftovers(&client).await;
    let ns = TestNamespace::new(&client, "approval").await;
    let _ops: Vec<OperatorProcess> = ["meta", "trainer"]
        .iter()
        .map(|c| OperatorProcess::start(&format!("kubeflow-{c}-operator"), &[]))
        .collect();
    let yaml = "apiVersion: platform.kubeflow.org/v1alpha1\nkind: Kubeflow\nmetadata: {name: kubeflow}\nspec:\n  version: \"26.03\"\n  upgradeStrategy: Manual\n  components:\n    trainer: {managementState: Managed}\n";
    let (kfs, _) = apply_resource(&client, &ns.name, yaml).await;
    let trainers = component_api(&client, &ns.name, "Trainer");
    ready_at(&kfs, "kubeflow", "26.03", TIMEOUT).await;
    // An install is no upgrade: nothing to approve, no plan.
    let kf = kfs.get("kubeflow").await.expect("Kubeflow");
    assert!(kf.data.pointer("/status/upgradePlan").is_none(), "{kf:?}");

    merge(&kfs, "kubeflow", json!({"spec": {"version": "26.03.1"}})).await;
    let kf = wait_for("the upgrade awaiting approval", TIMEOUT, || async {
        let kf = kfs.get("kubeflow").await.ok()?;
        (kf.data.pointer("/status/phase") == Some(&json!("AwaitingApproval"))
            && kf.data.pointer("/status/observedGeneration")
                == kf.metadata.generation.map(Value::from).as_ref())
        .then_some(kf)
    })
    .await;
    let digest = kf
        .data
        .pointer("/status/upgradePlan/digest")
        .and_then(Value::as_str)
        .expect("a release plan digest")
        .to_string();
    let (ready, reason, message, _) = condition(&kf, "Ready").expect("Ready");
    assert_eq!(
        (ready.as_str(), reason.as_str()),
        ("False", "AwaitingApproval")
    );
    assert!(
        message.contains(&format!("set spec.approvedPlan to {digest}")),
        "{message}"
    );
    let trainer = trainers.get("kubeflow").await.expect("Trainer");
    let plan = trainer
        .data
        .pointer("/status/upgradePlan")
        .cloned()
        .expect("the Trainer's plan");
    assert_eq!(plan["from"], "v2.1.0");
    assert_eq!(plan["to"], "v2.2.0");
    assert_eq!(plan["awaitingApproval"], true);
    let details = plan["details"].as_str().unwrap_or_default();
    assert!(
        details.contains(&format!(
            "recreated: Deployment {}/jobset-controller-manager (immutable selector)",
            ns.name
        )),
        "{details}"
    );
    assert_eq!(
        trainer.data.pointer("/status/version"),
        Some(&json!("v2.1.0")),
        "the installed version stays while the plan waits"
    );

    // The plan the operator publishes is the one the binary prints offline.
    let offline = Command::new(binary("kubeflow-trainer-operator"))
        .args([
            "plan",
            "--from",
            "v2.1.0",
            "--to",
            "v2.2.0",
            "--namespace",
            &ns.name,
        ])
        .env("MANIFESTS_DIR", kubeflow_e2e::manifests_dir())
        .output()
        .expect("run the plan subcommand");
    assert!(offline.status.success(), "{offline:?}");
    let offline = String::from_utf8_lossy(&offline.stdout);
    assert_eq!(
        offline
            .strip_prefix("trainer v2.1.0 -> v2.2.0: ")
            .unwrap_or(&offline),
        details,
        "the offline plan and the published one differ"
    );

    // Nothing is written while the plan waits, a wrong digest included.
    let before = managed_versions(&client, &ns.name).await;
    assert!(before.len() > 10, "{before:?}");
    merge(
        &kfs,
        "kubeflow",
        json!({"spec": {"approvedPlan": "0000000000000000"}}),
    )
    .await;
    let refused = wait_for("the wrong digest named", TIMEOUT, || async {
        let kf = kfs.get("kubeflow").await.ok()?;
        let (_, _, message, g) = condition(&kf, "Ready")?;
        (g == kf.metadata.generation
            && message.contains("spec.approvedPlan \"0000000000000000\" is not"))
        .then_some(message)
    })
    .await;
    assert!(refused.contains(&digest), "{refused}");
    // Several reconciles of both operators pass (their requeue and the CR edits).
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        managed_versions(&client, &ns.name).await,
        before,
        "an object changed before approval"
    );

    merge(&kfs, "kubeflow", json!({"spec": {"approvedPlan": digest}})).await;
    let kf = ready_at(&kfs, "kubeflow", "26.03.1", TIMEOUT).await;
    assert_eq!(kf.data.pointer("/status/phase"), Some(&json!("Ready")));
    let trainer = trainers.get("kubeflow").await.expect("Trainer");
    assert_eq!(
        trainer.data.pointer("/status/version"),
        Some(&json!("v2.2.0"))
    );
    assert_eq!(
        trainer.data.pointer("/status/upgradePlan/awaitingApproval"),
        Some(&json!(false)),
        "the applied plan stays readable in the status"
    );
    let after = managed_versions(&client, &ns.name).await;
    assert_ne!(after, before, "the approved upgrade wrote nothing");

    kfs.delete("kubeflow", &Default::default()).await.ok();
    wait_for("Kubeflow gone", TIMEOUT, || async {
        kfs.get_opt("kubeflow").await.ok()?.is_none().then_some(())
    })
    .await;
    ns.delete().await;
}

/// A release's digest covers every component that moves: while one of them
/// (cert-manager, its operator stopped: a slow one) has not published its
/// plan, the resource shows no digest and names it; the first digest it
/// ever shows, approved at once, upgrades both.
#[tokio::test]
async fn the_first_digest_shown_covers_every_moving_component() {
    let (client, _g) = kubeflow_e2e::component::prepare(&ALL_KINDS, &ALL_COMPONENTS).await;
    kubeflow_e2e::demo::clear_leftovers(&client).await;
    let ns = TestNamespace::new(&client, "whole-plan").await;
    let _meta = OperatorProcess::start("kubeflow-meta-operator", &[]);
    let _trainer = OperatorProcess::start("kubeflow-trainer-operator", &[]);
    let cert_manager = OperatorProcess::start("kubeflow-cert-manager-operator", &[]);
    let yaml = "apiVersion: platform.kubeflow.org/v1alpha1\nkind: Kubeflow\nmetadata: {name: kubeflow}\nspec:\n  version: \"26.03\"\n  upgradeStrategy: Manual\n  components:\n    trainer: {managementState: Managed}\n    certManager: {managementState: Managed}\n";
    let (kfs, _) = apply_resource(&client, &ns.name, yaml).await;
    ready_at(&kfs, "kubeflow", "26.03", TIMEOUT).await;

    cert_manager.stop();
    merge(&kfs, "kubeflow", json!({"spec": {"version": "26.03.1"}})).await;
    let kf = wait_for(
        "the trainer's plan, cert-manager's still computing",
        TIMEOUT,
        || async {
            let kf = kfs.get("kubeflow").await.ok()?;
            let plan = kf.data.pointer("/status/upgradePlan")?;
            (plan["components"].as_array()?.len() == 1).then_some(kf)
        },
    )
    .await;
    let plan = &kf.data["status"]["upgradePlan"];
    assert_eq!(plan["computing"], json!(["cert-manager"]), "{plan}");
    assert_eq!(
        plan["digest"],
        json!(""),
        "a digest for part of the release: {plan}"
    );
    let (ready, reason, message, _) = condition(&kf, "Ready").expect("Ready");
    assert_eq!(
        (ready.as_str(), reason.as_str()),
        ("False", "AwaitingApproval")
    );
    assert!(
        message.contains("plans of cert-manager are still being computed"),
        "{message}"
    );

    // The slow component publishes; the first digest shown is approved.
    let _cert_manager = OperatorProcess::start("kubeflow-cert-manager-operator", &[]);
    let digest = wait_for("the first digest shown", TIMEOUT, || async {
        let kf = kfs.get("kubeflow").await.ok()?;
        let digest = kf.data.pointer("/status/upgradePlan/digest")?.as_str()?;
        (!digest.is_empty()).then(|| digest.to_string())
    })
    .await;
    merge(&kfs, "kubeflow", json!({"spec": {"approvedPlan": digest}})).await;
    ready_at(&kfs, "kubeflow", "26.03.1", TIMEOUT).await;
    for (kind, version) in [("Trainer", "v2.2.0"), ("CertManager", "v1.20.2")] {
        let child = component_api(&client, &ns.name, kind)
            .get("kubeflow")
            .await
            .unwrap_or_else(|e| panic!("{kind}: {e}"));
        assert_eq!(
            child.data.pointer("/status/version"),
            Some(&json!(version)),
            "{kind}"
        );
    }

    kfs.delete("kubeflow", &Default::default()).await.ok();
    wait_for("Kubeflow gone", TIMEOUT, || async {
        kfs.get_opt("kubeflow").await.ok()?.is_none().then_some(())
    })
    .await;
    ns.delete().await;
}

/// The Trainer bundles at v2.1.0 and v2.2.0, with one more served version
/// (`v1alpha0`) of the TrainJob CRD at v2.1.0 only: an upgrade that drops a
/// CRD version, which no real move between supported versions does yet.
fn bundles_dropping_a_crd_version() -> std::path::PathBuf {
    let dir = kubeflow_e2e::operator::target_dir()
        .join("e2e-bundles")
        .join(format!("dropped-crd-version-{}", std::process::id()));
    let source = kubeflow_e2e::manifests_dir().join("trainer");
    for version in ["v2.1.0", "v2.2.0"] {
        let out = dir.join("trainer").join(version);
        std::fs::create_dir_all(&out).expect("bundle folder");
        let text =
            std::fs::read_to_string(source.join(version).join("trainer.yaml")).expect("bundle");
        let mut docs = kubeflow_e2e::parse_yaml(&text);
        if version == "v2.1.0" {
            let crd = docs
                .iter_mut()
                .find(|d| d.metadata.name.as_deref() == Some("trainjobs.trainer.kubeflow.org"))
                .expect("the TrainJob CRD");
            crd.data["spec"]["versions"]
                .as_array_mut()
                .expect("versions")
                .push(json!({"name": "v1alpha0", "served": true, "storage": false,
                    "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}));
        }
        // Block YAML, as the bundles are written: the operator finds the
        // kinds it watches by scanning for block-style `apiVersion:` and
        // `kind:` lines (written as JSON, the bundle gave it no watch of a
        // Deployment, and a deleted one waited for a resync: CI).
        let joined: Vec<String> = docs
            .iter()
            .map(|d| kubeflow_operator::serde_saphyr::to_string(d).expect("yaml"))
            .collect();
        std::fs::write(out.join("trainer.yaml"), joined.join("\n---\n")).expect("write bundle");
    }
    dir
}

#[tokio::test]
async fn an_upgrade_that_drops_a_stored_crd_version_waits_and_says_what_to_migrate() {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    let (client, _g) = kubeflow_e2e::component::prepare(&ALL_KINDS, &ALL_COMPONENTS).await;
    let ns = TestNamespace::new(&client, "stored-version").await;
    let bundles = bundles_dropping_a_crd_version();
    let bundles_text = bundles.display().to_string();
    // Logged as in a cluster: JSON lines, the default filter (the chart sets none).
    let op = OperatorProcess::start_with_env(
        "kubeflow-trainer-operator",
        &[],
        &[
            ("MANIFESTS_DIR", bundles_text.as_str()),
            ("LOG_FORMAT", "json"),
            ("RUST_LOG", "info,kube_client=warn,kube_runtime=warn"),
        ],
    );
    let yaml = "apiVersion: components.kubeflow.org/v1alpha1\nkind: Trainer\nmetadata: {name: kubeflow}\nspec: {version: v2.1.0}\n";
    let (trainers, _) = apply_resource(&client, &ns.name, yaml).await;
    let ready_version = |version: &'static str| {
        let trainers = trainers.clone();
        async move {
            wait_for(&format!("Trainer Ready at {version}"), TIMEOUT, || async {
                let t = trainers.get("kubeflow").await.ok()?;
                let (s, _, _, g) = condition(&t, "Ready")?;
                (s == "True"
                    && g == t.metadata.generation
                    && t.data.pointer("/status/version") == Some(&json!(version)))
                .then_some(t)
            })
            .await
        }
    };
    ready_version("v2.1.0").await;

    // A repair's log line names the CR it was done for.
    let deployments: Api<k8s_openapi::api::apps::v1::Deployment> =
        Api::namespaced(client.clone(), &ns.name);
    deployments
        .delete("jobset-controller-manager", &Default::default())
        .await
        .expect("delete JobSet's controller");
    let object = format!("{}/kubeflow", ns.name);
    let line = wait_for("the repair logged", TIMEOUT, || async {
        op.log_text()
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .find(|l| l.pointer("/fields/message") == Some(&json!("repaired drift")))
    })
    .await;
    assert_eq!(
        line.pointer("/span/object"),
        Some(&json!(object)),
        "the log line does not name the CR: {line}"
    );
    assert_eq!(
        line.pointer("/span/kind"),
        Some(&json!("Trainer")),
        "{line}"
    );

    // Objects were once stored at v1alpha0 (as after a real migration's start).
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let stored = |versions: Value| {
        let crds = crds.clone();
        async move {
            crds.patch_status(
                "trainjobs.trainer.kubeflow.org",
                &kube::api::PatchParams::default(),
                &kube::api::Patch::Merge(json!({"status": {"storedVersions": versions}})),
            )
            .await
            .expect("set storedVersions");
        }
    };
    stored(json!(["v1alpha1", "v1alpha0"])).await;

    merge(
        &trainers,
        "kubeflow",
        json!({"spec": {"version": "v2.2.0"}}),
    )
    .await;
    let blocked = wait_for("the upgrade blocked", TIMEOUT, || async {
        let t = trainers.get("kubeflow").await.ok()?;
        let (s, reason, message, g) = condition(&t, "Degraded")?;
        (s == "True" && reason == "UpgradeBlocked" && g == t.metadata.generation)
            .then_some((t, message))
    })
    .await;
    assert!(
        blocked
            .1
            .contains("trainjobs.trainer.kubeflow.org v1alpha0"),
        "{}",
        blocked.1
    );
    assert_eq!(
        blocked.0.data.pointer("/status/version"),
        Some(&json!("v2.1.0")),
        "the installed version stays"
    );
    let crd = crds
        .get("trainjobs.trainer.kubeflow.org")
        .await
        .expect("the CRD");
    assert!(
        crd.spec.versions.iter().any(|v| v.name == "v1alpha0"),
        "the stored version was removed"
    );

    // Migrated: the upgrade goes on by itself.
    stored(json!(["v1alpha1"])).await;
    ready_version("v2.2.0").await;

    trainers.delete("kubeflow", &Default::default()).await.ok();
    wait_for("Trainer gone", TIMEOUT, || async {
        trainers
            .get_opt("kubeflow")
            .await
            .ok()?
            .is_none()
            .then_some(())
    })
    .await;
    ns.delete().await;
    let _ = std::fs::remove_dir_all(&bundles);
}
