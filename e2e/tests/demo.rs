//! The demo's path, end to end: the chart installed into a namespace that
//! enforces restricted Pod Security, the operators running as the chart's
//! ServiceAccounts, the example Kubeflow CR Ready at 26.03 with every
//! component; the upgrade to 26.03.1 with live user objects (kept with
//! their uids and never written by an operator; JobSet's controller
//! Deployment and KServe's `llmisvc-manager-rolebinding`, whose immutable
//! fields change, recreated with an Event saying why; the Istio move
//! flagged; every child at its new version; the Model Registry's records
//! still in MySQL on the same volume); then a component
//! removed, the CR deleted, the chart uninstalled, and nothing of the
//! project left but retained CRDs.

use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Namespace, PersistentVolumeClaim, Secret};
use k8s_openapi::api::rbac::v1::ClusterRoleBinding;
use kube::ResourceExt;
use kube::api::Api;
use kubeflow_e2e::component::{
    ALL_COMPONENTS, ALL_KINDS, component_api, condition, delete_and_wait, merge, prepare, wait_gone,
};
use kubeflow_e2e::demo::{
    COMPONENTS, Demo, KUBEFLOW_NAMESPACE, OPERATOR_NAMESPACE, RELEASE, clear_leftovers, tool_ok,
};
use kubeflow_e2e::user_objects;
use kubeflow_e2e::wait::wait_for;
use serde_json::{Value, json};

const TIMEOUT: Duration = Duration::from_secs(120);
/// Every object of every listable kind carrying `selector`, as `kind/name` lines.
fn objects_labelled(selector: &str) -> Vec<String> {
    let kinds = tool_ok("kubectl", &["api-resources", "--verbs=list", "-o", "name"]);
    let kinds: Vec<&str> = kinds
        .lines()
        // Events copy labels of nothing; they are not the project's objects.
        .filter(|k| !k.starts_with("events"))
        .collect();
    tool_ok(
        "kubectl",
        &["get", &kinds.join(","), "-A", "-l", selector, "-o", "name"],
    )
    .lines()
    .map(str::to_string)
    .collect()
}

#[tokio::test]
async fn the_demo_installs_kubeflow_as_the_charts_service_accounts_and_uninstalls_cleanly() {
    let (client, _g) = prepare(&ALL_KINDS, &ALL_COMPONENTS).await;
    clear_leftovers(&client).await;

    // At the previous release, to upgrade from it below.
    let (demo, printed) = Demo::up_at("demo", 16500, "26.03");
    // What the user sees last: every kind, Ready.
    for line in [
        "kubeflow.platform.kubeflow.org/kubeflow",
        "pipelines.components.kubeflow.org/kubeflow",
        "serving.components.kubeflow.org/kubeflow",
        "training.components.kubeflow.org/kubeflow",
        "trainer.components.kubeflow.org/kubeflow",
        "istio.components.kubeflow.org/kubeflow",
        "certmanager.components.kubeflow.org/kubeflow",
        "notebooks.components.kubeflow.org/kubeflow",
        "katib.components.kubeflow.org/kubeflow",
        "modelregistry.components.kubeflow.org/kubeflow",
        "spark.components.kubeflow.org/kubeflow",
        "knative.components.kubeflow.org/kubeflow",
        "auth.components.kubeflow.org/kubeflow",
        "dashboard.components.kubeflow.org/kubeflow",
        "deviceplugins.components.kubeflow.org/kubeflow",
    ] {
        assert!(printed.contains(line), "{line} missing from:\n{printed}");
    }
    let kfs = component_api(&client, KUBEFLOW_NAMESPACE, "Kubeflow");
    let kf = kfs.get("kubeflow").await.expect("the example Kubeflow CR");
    assert_eq!(
        condition(&kf, "Ready").map(|c| c.0),
        Some("True".to_string())
    );
    assert_eq!(kf.data["status"]["readyComponents"], json!("14/14"));
    // The VERSION column's field: the release reached.
    assert_eq!(kf.data["status"]["release"], json!("26.03"));
    // The demo's login: a random password printed once, which the hash in
    // the users Secret verifies, and which reached dex's configuration.
    let password = printed
        .lines()
        .find_map(|l| l.strip_prefix("Log in as user@example.com with password "))
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap_or_else(|| panic!("no login printed:\n{printed}"));
    assert_eq!(password.len(), 24, "{password}");
    let secret_text = |ns: &str, name: &str, key: &str| {
        let b64 = tool_ok(
            "kubectl",
            &[
                "-n",
                ns,
                "get",
                "secret",
                name,
                "-o",
                &format!("jsonpath={{.data.{}}}", key.replace('.', "\\.")),
            ],
        );
        let bytes: k8s_openapi::ByteString =
            serde_json::from_value(json!(b64.trim())).expect("base64");
        String::from_utf8(bytes.0).expect("text")
    };
    let users = secret_text(KUBEFLOW_NAMESPACE, "kubeflow-users", "users.yaml");
    let hash = users
        .lines()
        .find_map(|l| l.trim().strip_prefix("hash: "))
        .map(|h| h.trim_matches('"').to_string())
        .expect("a hash");
    assert!(bcrypt::verify(password, &hash).expect("bcrypt"), "{users}");
    assert!(!users.contains(password), "only the hash is kept");
    let dex_config = secret_text("auth", "dex", "config.yaml");
    assert!(dex_config.contains(&hash), "{dex_config}");
    for kind in &ALL_KINDS[1..] {
        let cr = component_api(&client, KUBEFLOW_NAMESPACE, kind)
            .get("kubeflow")
            .await
            .unwrap_or_else(|e| panic!("{kind}: {e}"));
        assert_eq!(
            condition(&cr, "Ready").map(|c| c.0),
            Some("True".to_string()),
            "{kind}"
        );
    }

    // Each operator is its chart ServiceAccount, nothing more.
    for &c in COMPONENTS.iter() {
        let kubeconfig = demo.kubeconfig(c);
        let who = tool_ok(
            "kubectl",
            &[
                "--kubeconfig",
                &kubeconfig.display().to_string(),
                "auth",
                "whoami",
                "-o",
                "jsonpath={.status.userInfo.username}",
            ],
        );
        assert_eq!(
            who,
            format!("system:serviceaccount:{OPERATOR_NAMESPACE}:{RELEASE}-{c}-operator")
        );
        // No way to cluster-admin, and nothing outside what it manages
        // (`installed/reach.rs` tries every token on every dangerous request).
        for (verb, what) in [
            ("escalate", "clusterroles/cluster-admin"),
            ("bind", "clusterroles/cluster-admin"),
            ("delete", "nodes"),
        ] {
            // Upstream's profile controller runs bound to cluster-admin: the
            // Dashboard operator may bind that role by name, and admission
            // holds the one binding it may write to the bundle's subject
            // (`installed/reach.rs` tries binding it to the operator itself).
            let expected = if c == "dashboard" && verb == "bind" {
                "yes"
            } else {
                "no"
            };
            let out = kubeflow_e2e::run_tool(
                "kubectl",
                &[
                    "--kubeconfig",
                    &kubeconfig.display().to_string(),
                    "auth",
                    "can-i",
                    verb,
                    what,
                    "-n",
                    "kube-system",
                ],
            );
            assert_eq!(
                String::from_utf8_lossy(&out.stdout).trim(),
                expected,
                "{c} may {verb} {what}"
            );
        }
    }
    // The chart's pods were admitted under restricted Pod Security.
    let ns: Namespace = Api::all(client.clone())
        .get(OPERATOR_NAMESPACE)
        .await
        .expect("operator namespace");
    assert_eq!(
        ns.metadata
            .labels
            .as_ref()
            .and_then(|l| l.get("pod-security.kubernetes.io/enforce"))
            .map(String::as_str),
        Some("restricted")
    );
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), OPERATOR_NAMESPACE);
    for &c in COMPONENTS.iter() {
        let d = deployments
            .get(&format!("{RELEASE}-{c}-operator"))
            .await
            .unwrap_or_else(|e| panic!("{c} Deployment: {e}"));
        assert_eq!(
            d.status.and_then(|s| s.available_replicas),
            Some(1),
            "{c}: its pod was not admitted or not Ready"
        );
    }

    // A component that cannot move: the wait fails once nothing changed for
    // its stall window, naming the component and showing its operator's
    // last log lines; with the operator back, the same wait succeeds.
    demo.stop_operator("trainer");
    let trainers = component_api(&client, KUBEFLOW_NAMESPACE, "Trainer");
    merge(
        &trainers,
        "kubeflow",
        json!({"metadata": {"annotations": {"e2e/stall": "1"}}, "spec": {"controller": {"trainJobConcurrency": 7}}}),
    )
    .await;
    let (ready, printed) = demo.wait(15);
    assert!(
        !ready,
        "the wait succeeded with the trainer stopped:\n{printed}"
    );
    assert!(
        printed.contains("nothing moved for 15 s")
            && printed.contains("component trainer is not Ready")
            && printed.contains("last lines of kubeflow-trainer-operator's log"),
        "the stall does not name the component:\n{printed}"
    );
    let log = demo.log("trainer");
    let last = log
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .expect("the trainer logged");
    assert!(
        printed.contains(last.trim()),
        "its log's last line is not shown:\n{printed}"
    );
    // Slow but moving: the trainer's resource changes every 4 s for 28 s,
    // longer than a 10 s stall window, then its operator comes back. The
    // wait keeps going as long as something moves, and succeeds.
    let (state, port_base) = (demo.state.clone(), demo.port_base());
    let mover = std::thread::spawn(move || {
        let patch = |value: &str| {
            tool_ok(
                "kubectl",
                &[
                    "-n",
                    KUBEFLOW_NAMESPACE,
                    "patch",
                    "trainer.components.kubeflow.org",
                    "kubeflow",
                    "--type",
                    "merge",
                    "-p",
                    &format!(r#"{{"spec":{{"controller":{{"trainJobConcurrency":{value}}}}}}}"#),
                ],
            )
        };
        for n in 8..15 {
            patch(&n.to_string());
            std::thread::sleep(Duration::from_secs(4));
        }
        patch("null");
        let out = std::process::Command::new(kubeflow_e2e::repo_root().join("e2e/demo"))
            .arg("start")
            .env("KUBEFLOW_DEMO_STATE", &state)
            .env("KUBEFLOW_DEMO_PORT_BASE", port_base.to_string())
            .env("MANIFESTS_DIR", kubeflow_e2e::manifests_dir())
            .output()
            .expect("e2e/demo start");
        assert!(out.status.success(), "e2e/demo start: {out:?}");
    });
    let started = std::time::Instant::now();
    let (ready, printed) = demo.wait(10);
    mover.join().expect("the mover");
    assert!(ready, "the wait failed with the trainer back:\n{printed}");
    assert!(
        started.elapsed() > Duration::from_secs(25),
        "the wait ended before the trainer came back:\n{printed}"
    );

    // The users' objects, which the upgrade must leave as they are, and
    // two objects it must recreate (immutable fields change).
    user_objects::create(&client, KUBEFLOW_NAMESPACE).await;
    let before = user_objects::state(&client, KUBEFLOW_NAMESPACE).await;
    let deployments_kf: Api<Deployment> = Api::namespaced(client.clone(), KUBEFLOW_NAMESPACE);
    let jobset_uid = deployments_kf
        .get("jobset-controller-manager")
        .await
        .expect("JobSet's controller")
        .uid();
    let bindings: Api<ClusterRoleBinding> = Api::all(client.clone());
    let binding_uid = bindings
        .get("llmisvc-manager-rolebinding")
        .await
        .expect("KServe's binding")
        .uid();

    // The upgrade as the docs give it: the user sees the new release.
    let shown = demo.upgrade("26.03.1");
    let row = shown
        .lines()
        .find(|l| l.contains(" kubeflow "))
        .unwrap_or_default();
    assert!(
        row.contains("26.03.1") && row.contains("Ready") && row.contains("14/14"),
        "kubectl get kubeflow after the upgrade:\n{shown}"
    );
    upgraded_as_it_must(&client, &before, jobset_uid, binding_uid).await;

    // Removing one component through the Kubeflow CR removes it alone.
    merge(
        &kfs,
        "kubeflow",
        json!({"spec": {"components": {"serving": {"managementState": "Removed"}}}}),
    )
    .await;
    let servings = component_api(&client, KUBEFLOW_NAMESPACE, "Serving");
    wait_gone(&servings, "kubeflow", TIMEOUT).await;
    let workloads: Api<Deployment> = Api::namespaced(client.clone(), KUBEFLOW_NAMESPACE);
    wait_gone(&workloads, "kserve-controller-manager", TIMEOUT).await;
    wait_for("Kubeflow Ready with twelve components", TIMEOUT, || async {
        let kf = kfs.get("kubeflow").await.ok()?;
        (condition(&kf, "Ready")?.0 == "True" && kf.data["status"]["readyComponents"] == "13/13")
            .then_some(())
    })
    .await;
    assert!(
        workloads
            .get_opt("ml-pipeline")
            .await
            .expect("get")
            .is_some(),
        "pipelines stays"
    );

    // Delete the CR, then uninstall the chart.
    let roles_before = kubeflow_e2e::demo::managed_cluster_roles(&client).await;
    delete_and_wait(&kfs, "kubeflow", kubeflow_e2e::component::REMOVAL_TIMEOUT).await;
    let refused = demo.forbidden();
    drop(demo);
    // The operators stop first, as the chart's Deployments would: after the
    // uninstall their roles are gone.
    tool_ok(
        "helm",
        &["uninstall", RELEASE, "-n", OPERATOR_NAMESPACE, "--wait"],
    );
    assert!(
        refused.is_empty(),
        "the chart's RBAC refused requests:\n{}",
        refused.join("\n")
    );

    // Nothing of the project is left: no object the operators manage, no
    // object of the release, no claim, no istio-system.
    // Kept on purpose: CRDs, and the declared profile (its namespace holds
    // the user's data), released.
    const PROFILE: &str = "profile.kubeflow.org/kubeflow-user-example-com";
    let left: Vec<String> = objects_labelled("components.kubeflow.org/component")
        .into_iter()
        .filter(|o| !o.starts_with("customresourcedefinition"))
        .collect();
    assert_eq!(left, vec![PROFILE.to_string()]);
    // The test made it: it goes.
    tool_ok("kubectl", &["delete", PROFILE, "--wait=true"]);
    // Retained CRDs keep which component they came from, but no inventory holds them.
    assert_eq!(
        objects_labelled("applyset.kubernetes.io/part-of"),
        Vec::<String>::new()
    );
    // The allowed namespaces stay (the chart keeps them: they hold data);
    // this test removes them itself.
    assert_eq!(
        objects_labelled(&format!(
            "app.kubernetes.io/instance={RELEASE},app.kubernetes.io/managed-by=Helm"
        )),
        {
            let mut made: Vec<String> = kubeflow_e2e::component::chart_namespaces()
                .iter()
                .map(|n| format!("namespace/{n}"))
                .collect();
            made.sort();
            made
        }
    );
    let namespaces: Api<Namespace> = Api::all(client.clone());
    for ns in kubeflow_e2e::component::chart_namespaces() {
        let _ = namespaces.delete(ns, &Default::default()).await;
        wait_gone(&namespaces, ns, TIMEOUT).await;
    }
    let roles = tool_ok("kubectl", &["get", "clusterroles", "-o", "name"]);
    assert!(
        !roles.contains("-cluster-claim"),
        "a claim is left:\n{roles}"
    );
    kubeflow_e2e::demo::assert_cluster_roles_gone(&client, &roles_before).await;
    // Only CRDs remain: the project's own (Helm never deletes CRDs) and the
    // bundles' (kept by default, released from the project's labels).
    let crds = tool_ok("kubectl", &["get", "crds", "-o", "name"]);
    for crd in [
        "kubeflows.platform.kubeflow.org",
        "trainings.components.kubeflow.org",
        "pytorchjobs.kubeflow.org",
        "trainers.components.kubeflow.org",
        "trainjobs.trainer.kubeflow.org",
        "inferenceservices.serving.kserve.io",
    ] {
        assert!(crds.contains(crd), "{crd} was not retained");
    }
}

/// What the upgrade to 26.03.1 must have done beyond reaching Ready: the
/// Istio move flagged at its start; every child at its new version and
/// nothing held back; the users' objects the same and never written by an
/// operator; the Model Registry's MySQL volume still in use, not released;
/// what the API server will not change in place recreated,
/// with an Event saying why.
async fn upgraded_as_it_must(
    client: &kube::Client,
    before: &[(String, Option<String>, Vec<String>)],
    jobset_uid: Option<String>,
    binding_uid: Option<String>,
) {
    let events: Api<k8s_openapi::api::events::v1::Event> =
        Api::namespaced(client.clone(), KUBEFLOW_NAMESPACE);
    let notes_of = |reason: &'static str| {
        let events = events.clone();
        async move {
            events
                .list(&Default::default())
                .await
                .map(|l| {
                    l.items
                        .into_iter()
                        .filter(|e| e.reason.as_deref() == Some(reason))
                        .filter_map(|e| e.note)
                        .collect::<Vec<_>>()
                })
                .unwrap_or_default()
        }
    };
    let started = notes_of("UpgradeStarted").await;
    assert!(
        started
            .iter()
            .any(|n| n.contains("to 26.03.1") && n.contains("1.28.0 -> 1.30.1")),
        "the start names the Istio images' two-minor move: {started:?}"
    );

    for (kind, version) in [
        ("Trainer", "v2.2.0"),
        ("Pipelines", "2.16.1"),
        ("Serving", "v0.18.0"),
        ("Istio", "1.30.1"),
        ("CertManager", "v1.20.2"),
        ("Notebooks", "v1.11.0"),
        ("Katib", "v0.19.0"),
        ("ModelRegistry", "v0.3.9"),
        ("Spark", "2.5.0"),
        ("Knative", "v1.22.0"),
        ("Auth", "v7.15.2"),
        ("Dashboard", "v2.0.0"),
    ] {
        let child = component_api(client, KUBEFLOW_NAMESPACE, kind)
            .get("kubeflow")
            .await
            .expect("child");
        assert_eq!(
            child.data.pointer("/status/version"),
            Some(&Value::from(version)),
            "{kind}"
        );
        // Nothing held back (a CRD or claim refusing the new state would be).
        assert_eq!(
            condition(&child, "Degraded").map(|c| c.0).as_deref(),
            Some("False"),
            "{kind}: {:?}",
            condition(&child, "Degraded")
        );
    }

    let after = user_objects::state(client, KUBEFLOW_NAMESPACE).await;
    for ((kind, uid, writers), (_, uid_before, _)) in after.iter().zip(before) {
        assert_eq!(uid, uid_before, "{kind} kept");
        let ours: Vec<&String> = writers
            .iter()
            .filter(|w| {
                COMPONENTS
                    .iter()
                    .any(|c| **w == format!("kubeflow-{c}-operator"))
            })
            .collect();
        assert!(ours.is_empty(), "{kind} written by {ours:?}");
    }

    // The Model Registry's records stay in MySQL: its volume is still the
    // component's, in use, and no empty PostgreSQL took its place.
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), KUBEFLOW_NAMESPACE);
    let mysql = claims
        .get("metadata-mysql")
        .await
        .expect("MySQL's volume is kept");
    assert!(
        mysql
            .labels()
            .contains_key("applyset.kubernetes.io/part-of"),
        "in use: the component's inventory holds it"
    );
    assert!(
        claims
            .get_opt("metadata-postgres")
            .await
            .expect("get")
            .is_none()
    );
    let registry = component_api(client, KUBEFLOW_NAMESPACE, "ModelRegistry")
        .get("kubeflow")
        .await
        .expect("the ModelRegistry");
    assert!(
        !registry.data["status"]["released"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|r| r["name"] == "metadata-mysql"),
        "{}",
        registry.data["status"]
    );
    let secrets: Api<Secret> = Api::namespaced(client.clone(), KUBEFLOW_NAMESPACE);
    let keys: Vec<String> = secrets
        .get("model-registry-db-secrets")
        .await
        .expect("the registry's password")
        .data
        .unwrap_or_default()
        .into_keys()
        .collect();
    assert!(keys.iter().any(|k| k == "MYSQL_ROOT_PASSWORD"), "{keys:?}");

    let deployments: Api<Deployment> = Api::namespaced(client.clone(), KUBEFLOW_NAMESPACE);
    let jobset = deployments
        .get("jobset-controller-manager")
        .await
        .expect("JobSet's controller");
    assert_ne!(jobset.uid(), jobset_uid, "recreated for its new selector");
    assert_eq!(
        jobset
            .spec
            .and_then(|s| s.selector.match_labels)
            .map(|l| l.len()),
        Some(4)
    );
    let bindings: Api<ClusterRoleBinding> = Api::all(client.clone());
    let binding = bindings
        .get("llmisvc-manager-rolebinding")
        .await
        .expect("KServe's binding");
    assert_ne!(binding.uid(), binding_uid, "recreated for its new roleRef");
    assert_eq!(binding.role_ref.name, "kserve-llmisvc-manager-role");
    let notes = wait_for("the ObjectRecreated Events", TIMEOUT, || async {
        let notes = notes_of("ObjectRecreated").await;
        (notes
            .iter()
            .any(|n| n.contains("jobset-controller-manager"))
            && notes
                .iter()
                .any(|n| n.contains("llmisvc-manager-rolebinding")))
        .then_some(notes)
    })
    .await;
    assert!(
        notes
            .iter()
            .all(|n| n.contains("could not take the desired state (")),
        "each names the API server's refusal: {notes:?}"
    );
}
