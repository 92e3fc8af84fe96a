//! The shared install as a user meets it, at 26.03 (the previous release,
//! so that `upgrade` has one to move from): what `e2e/demo up` printed
//! (every kind, the login), the Kubeflow resource and each child Ready,
//! the demo's password kept only as its hash and in dex's configuration,
//! each operator its chart ServiceAccount and nothing more, the operators'
//! pods admitted under restricted Pod Security; then the demo's wait,
//! which fails naming a component that cannot move and keeps going while
//! one moves slowly.

use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::Api;
use kubeflow_e2e::component::{ALL_KINDS, component_api, condition, merge};
use kubeflow_e2e::demo::{
    COMPONENTS, Demo, KUBEFLOW_NAMESPACE, OPERATOR_NAMESPACE, RELEASE, tool_ok,
};
use serde_json::json;

/// What the install shows and holds, before anything else touches it.
pub async fn check(client: &kube::Client, demo: &Demo, printed: &str) {
    let client = client.clone();
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
            // No operator may: the Dashboard binds the profile controller
            // to a narrow role of its own, not upstream's cluster-admin.
            let expected = "no";
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
}

/// The demo's wait, on a component that stalls and then on one that moves
/// slowly; the install is Ready again at the end.
pub async fn stall(client: &kube::Client, demo: &Demo) {
    let client = client.clone();
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
    let (ready, printed) = demo.wait(8);
    assert!(
        !ready,
        "the wait succeeded with the trainer stopped:\n{printed}"
    );
    assert!(
        printed.contains("nothing moved for 8 s")
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
    // Slow but moving: the trainer's resource changes every 2 s for 14 s,
    // longer than a 6 s stall window, then its operator comes back. The
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
            std::thread::sleep(Duration::from_secs(2));
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
    let (ready, printed) = demo.wait(6);
    mover.join().expect("the mover");
    assert!(ready, "the wait failed with the trainer back:\n{printed}");
    assert!(
        started.elapsed() > Duration::from_secs(12),
        "the wait ended before the trainer came back:\n{printed}"
    );
}
