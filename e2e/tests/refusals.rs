//! Bad input is refused at the door: by the CRD schema where it can be, by
//! the operator otherwise (a condition naming the field, `Ready=False`, the
//! ready metric 0), and in both cases nothing of the component is written.

use std::time::Duration;

use kube::api::{Api, DynamicObject, ListParams};
use kubeflow_e2e::component::{
    apply_resource, component_api, condition, install_training, wait_condition,
};
use kubeflow_e2e::operator::{OperatorProcess, metric_sum};
use kubeflow_e2e::{TestNamespace, apply_yaml, run_tool, wait_for};

/// Each step takes seconds alone (the whole file: 76 s); on the CI machine,
/// two control planes and their installs on two cores, one took over 60 s.
const TIMEOUT: Duration = Duration::from_secs(180);

/// How many objects labelled as the component's exist in the namespace.
/// Panics when a list fails: counted as none, a "nothing written" check
/// would pass on an API server it could not read.
async fn written(client: &kube::Client, ns: &str, component: &str) -> usize {
    let mut n = 0;
    for (group, version, kind, plural) in [
        ("apps", "v1", "Deployment", "deployments"),
        ("", "v1", "ConfigMap", "configmaps"),
        ("", "v1", "ServiceAccount", "serviceaccounts"),
        ("apps", "v1", "DaemonSet", "daemonsets"),
    ] {
        let ar = kube::api::ApiResource::from_gvk_with_plural(
            &kube::core::GroupVersionKind::gvk(group, version, kind),
            plural,
        );
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &ar);
        n += api
            .list(
                &ListParams::default()
                    .labels(&format!("components.kubeflow.org/component={component}")),
            )
            .await
            .map(|l| l.items.len())
            .unwrap_or_else(|e| panic!("cannot list {plural} in {ns}: {e}"));
    }
    n
}

/// `written` fails when it cannot read (no cluster needed: a client for an
/// API server nobody runs).
#[tokio::test]
#[should_panic(expected = "cannot list deployments in team-a")]
async fn written_fails_when_it_cannot_read() {
    let addr = std::net::TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("address");
    let url = format!("http://{addr}").parse().expect("url");
    let client = kube::Client::try_from(kube::Config::new(url)).expect("client");
    written(&client, "team-a", "training").await;
}

/// Applies a CR the API server must refuse; returns its message.
fn refused_by_schema(ns: &str, yaml: &str) -> String {
    let file = std::env::temp_dir().join(format!("kubeflow-refusal-{}.yaml", std::process::id()));
    std::fs::write(&file, yaml).expect("write");
    let out = run_tool(
        "kubectl",
        &["apply", "-n", ns, "-f", &file.display().to_string()],
    );
    let _ = std::fs::remove_file(&file);
    assert!(!out.status.success(), "accepted: {yaml}");
    String::from_utf8_lossy(&out.stderr).to_string()
}

async fn refused(api: &Api<DynamicObject>, name: &str, reason: &str, needle: &str) {
    let cr = wait_condition(api, name, "Degraded", "True", TIMEOUT).await;
    let (_, r, message, _) = condition(&cr, "Degraded").expect("Degraded");
    assert_eq!(r, reason, "{message}");
    assert!(message.contains(needle), "{needle:?} not in {message}");
    assert_eq!(
        condition(&cr, "Ready").map(|c| c.0).as_deref(),
        Some("False")
    );
}

#[tokio::test]
async fn bad_input_is_refused_and_writes_nothing() {
    let (client, _g) = kubeflow_e2e::component::prepare(
        &["Training", "Istio", "Serving", "DevicePlugins"],
        &["training", "istio", "serving", "device-plugins"],
    )
    .await;
    let ns = TestNamespace::new(&client, "refusals").await;

    // The schema: an image with a leading space, a 100 KB image, 100 plugin arguments.
    let msg = refused_by_schema(
        &ns.name,
        "apiVersion: components.kubeflow.org/v1alpha1\nkind: Training\nmetadata: {name: bad-image}\nspec: {version: v1.9.2, images: {training-operator: \" kubeflow/training:v1\"}}\n",
    );
    assert!(msg.contains("spec.images.training-operator"), "{msg}");
    let long = format!("a/{}", "b".repeat(100_000));
    let msg = refused_by_schema(
        &ns.name,
        &format!(
            "apiVersion: components.kubeflow.org/v1alpha1\nkind: Training\nmetadata: {{name: long-image}}\nspec: {{version: v1.9.2, images: {{training-operator: \"{long}\"}}}}\n"
        ),
    );
    assert!(
        msg.contains("Too long") || msg.contains("too long"),
        "{}",
        &msg[..msg.len().min(300)]
    );
    let args: Vec<String> = (0..100).map(|i| format!("-a{i}")).collect();
    let msg = refused_by_schema(
        &ns.name,
        &format!(
            "apiVersion: components.kubeflow.org/v1alpha1\nkind: DevicePlugins\nmetadata: {{name: many-args}}\nspec:\n  plugins: [{{name: n, type: nvidia-gpu, version: v0.20.0, args: {}}}]\n",
            serde_json::to_string(&args).expect("json")
        ),
    );
    assert!(msg.contains("args"), "{msg}");
    // A 100 KB gateway name (it was written into KServe's ConfigMap as is).
    let msg = refused_by_schema(
        &ns.name,
        &format!(
            "apiVersion: components.kubeflow.org/v1alpha1\nkind: Serving\nmetadata: {{name: long-gateway}}\nspec: {{version: v0.16.0, ingressGateway: \"kubeflow/{}\"}}\n",
            "g".repeat(100_000)
        ),
    );
    assert!(
        msg.contains("ingressGateway"),
        "{}",
        &msg[..msg.len().min(300)]
    );

    // The operators: what the schema cannot see.
    let training = OperatorProcess::start("kubeflow-training-operator", &[]);
    let _istio = OperatorProcess::start("kubeflow-istio-operator", &[]);
    let _serving = OperatorProcess::start("kubeflow-serving-operator", &[]);
    let _plugins = OperatorProcess::start("kubeflow-device-plugins-operator", &[]);
    let trainings = component_api(&client, &ns.name, "Training");

    // A quantity the API server would fail on (a 500 before): refused, not green.
    apply_yaml(&client, &ns.name, "apiVersion: components.kubeflow.org/v1alpha1\nkind: Training\nmetadata: {name: lots}\nspec: {version: v1.9.2, resources: {limits: {cpu: lots}}}\n").await;
    refused(
        &trainings,
        "lots",
        "InvalidSpec",
        "spec.resources.limits.cpu",
    )
    .await;
    let ready = wait_for("the ready metric at 0", TIMEOUT, || async {
        let m = training.metrics().await;
        let v = metric_sum(&m, "kubeflow_component_ready", &["name=\"lots\""]);
        (m.contains("name=\"lots\"") && v == 0.0).then_some(v)
    })
    .await;
    assert_eq!(ready, 0.0);
    assert_eq!(written(&client, &ns.name, "training").await, 0);
    trainings
        .delete("lots", &Default::default())
        .await
        .expect("delete");
    kubeflow_e2e::component::wait_gone(&trainings, "lots", TIMEOUT).await;

    // A gang scheduler that is not installed.
    apply_yaml(&client, &ns.name, "apiVersion: components.kubeflow.org/v1alpha1\nkind: Training\nmetadata: {name: volcano}\nspec: {version: v1.9.2, gangScheduler: volcano}\n").await;
    refused(
        &trainings,
        "volcano",
        "PrerequisiteMissing",
        "podgroups.scheduling.volcano.sh",
    )
    .await;
    assert_eq!(written(&client, &ns.name, "training").await, 0);

    // A digest map named by no ConfigMap name: refused naming the field, at
    // the CR's generation (the read failed before, with no status at all).
    apply_yaml(&client, &ns.name, "apiVersion: components.kubeflow.org/v1alpha1\nkind: Training\nmetadata: {name: digests}\nspec: {version: v1.9.2, imageDigests: ../x}\n").await;
    refused(&trainings, "digests", "InvalidSpec", "spec.imageDigests").await;
    assert_eq!(written(&client, &ns.name, "training").await, 0);

    // Serverless without Knative.
    let servings = component_api(&client, &ns.name, "Serving");
    apply_yaml(&client, &ns.name, "apiVersion: components.kubeflow.org/v1alpha1\nkind: Serving\nmetadata: {name: serverless}\nspec: {version: v0.16.0, deploymentMode: Serverless}\n").await;
    refused(&servings, "serverless", "PrerequisiteMissing", "Knative").await;
    assert_eq!(written(&client, &ns.name, "serving").await, 0);

    // A misspelt mesh setting.
    let istios = component_api(&client, &ns.name, "Istio");
    apply_yaml(&client, &ns.name, "apiVersion: components.kubeflow.org/v1alpha1\nkind: Istio\nmetadata: {name: typo}\nspec: {version: \"1.29.0\", meshConfig: {accesLogFile: /dev/stdout}}\n").await;
    refused(&istios, "typo", "InvalidSpec", "did you mean accessLogFile").await;
    assert_eq!(written(&client, "istio-system", "istio").await, 0);

    // A second DevicePlugins CR whose NVIDIA plugin targets the first one's nodes.
    let plugins = component_api(&client, &ns.name, "DevicePlugins");
    apply_yaml(&client, &ns.name, "apiVersion: components.kubeflow.org/v1alpha1\nkind: DevicePlugins\nmetadata: {name: first}\nspec:\n  plugins: [{name: nvidia, type: nvidia-gpu, version: v0.20.0}]\n").await;
    wait_condition(&plugins, "first", "Ready", "True", TIMEOUT).await;
    // Created a second later, so the order is certain.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    apply_yaml(&client, &ns.name, "apiVersion: components.kubeflow.org/v1alpha1\nkind: DevicePlugins\nmetadata: {name: second}\nspec:\n  plugins: [{name: gpus, type: nvidia-gpu, version: v0.19.3}]\n").await;
    refused(&plugins, "second", "InvalidSpec", "DevicePlugins").await;
    let daemonsets: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        &ns.name,
        &kube::api::ApiResource::from_gvk_with_plural(
            &kube::core::GroupVersionKind::gvk("apps", "v1", "DaemonSet"),
            "daemonsets",
        ),
    );
    let names: Vec<String> = daemonsets
        .list(&ListParams::default())
        .await
        .expect("list")
        .items
        .into_iter()
        .filter_map(|d| d.metadata.name)
        .collect();
    assert_eq!(names.len(), 1, "only the first CR's plugin runs: {names:?}");
    assert_eq!(
        condition(&plugins.get("first").await.expect("first"), "Ready")
            .map(|c| c.0)
            .as_deref(),
        Some("True")
    );

    for (api, name) in [
        (&trainings, "volcano"),
        (&servings, "serverless"),
        (&istios, "typo"),
        (&plugins, "second"),
        (&plugins, "first"),
    ] {
        kubeflow_e2e::component::delete_and_wait(api, name, TIMEOUT).await;
    }
    ns.delete().await;
}

/// The cluster's own admission control refuses a write the operator must
/// make (the spec is fine): `Ready=False` and `Degraded` at once, reason
/// `AdmissionDenied` naming the policy (not `InvalidSpec`), nothing else
/// changed; once the policy goes, the retries recover by themselves.
#[tokio::test]
async fn a_write_the_clusters_policy_refuses_is_named_and_recovers() {
    let (client, _g) = kubeflow_e2e::component::prepare(&["Training"], &["training"]).await;
    let (ns, _op, trainings, _) = install_training(&client, "admission", TIMEOUT).await;
    let policy = format!("e2e-freeze-{}", ns.name);
    apply_yaml(
        &client,
        "",
        &format!(
            r#"apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {{name: {policy}}}
spec:
  failurePolicy: Fail
  matchConstraints:
    resourceRules:
      - {{apiGroups: [apps], apiVersions: ["*"], operations: [UPDATE], resources: [deployments]}}
  validations:
    - expression: "object.metadata.namespace != '{ns}'"
      message: frozen for the test
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {{name: {policy}}}
spec:
  policyName: {policy}
  validationActions: [Deny]
"#,
            ns = ns.name
        ),
    )
    .await;
    // A policy binding takes a moment to be in force: the change that needs
    // a Deployment write comes once a write by hand is refused.
    wait_for("the policy in force", TIMEOUT, || async {
        let out = run_tool(
            "kubectl",
            &[
                "-n",
                &ns.name,
                "annotate",
                "deployment",
                "training-operator",
                "e2e/probe=1",
                "--overwrite",
            ],
        );
        (!out.status.success()).then_some(())
    })
    .await;
    kubeflow_e2e::component::merge(
        &trainings,
        "kubeflow",
        serde_json::json!({"spec": {"resources": {"requests": {"cpu": "150m"}}}}),
    )
    .await;
    let cr = wait_for("AdmissionDenied", TIMEOUT, || async {
        let cr = trainings.get("kubeflow").await.ok()?;
        let (status, reason, _, _) = condition(&cr, "Degraded")?;
        (status == "True" && reason == "AdmissionDenied").then_some(cr)
    })
    .await;
    let (ready, reason, message, generation) = condition(&cr, "Ready").expect("Ready");
    assert_eq!(
        (ready.as_str(), reason.as_str()),
        ("False", "AdmissionDenied")
    );
    assert_eq!(
        generation, cr.metadata.generation,
        "at the current generation"
    );
    assert!(
        message.contains(&policy) && message.contains("frozen for the test"),
        "{message}"
    );
    let _ = run_tool(
        "kubectl",
        &[
            "delete",
            "validatingadmissionpolicybinding,validatingadmissionpolicy",
            &policy,
        ],
    );
    wait_condition(&trainings, "kubeflow", "Ready", "True", TIMEOUT).await;
    kubeflow_e2e::component::delete_and_wait(&trainings, "kubeflow", TIMEOUT).await;
    ns.delete().await;
}

/// Input that echoes into a refusal (a value of 100 KB, a key of 40 KB, a
/// digest-map line of 40 KB) is refused with a bounded message, at the
/// current generation: the status write never fails on its size (the old
/// `Ready=True` stood while the write was retried for ever).
#[tokio::test]
async fn huge_input_gets_a_bounded_refusal_at_its_generation() {
    let (client, _g) = kubeflow_e2e::component::prepare(&["Training"], &["training"]).await;
    let ns = TestNamespace::new(&client, "huge").await;
    let _op = OperatorProcess::start("kubeflow-training-operator", &[]);
    let trainings = component_api(&client, &ns.name, "Training");
    let line = format!("{} sha256:{}", "a".repeat(40_000), "0".repeat(64));
    apply_yaml(
        &client,
        &ns.name,
        &format!("apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: huge}}\ndata:\n  digests: \"{line}\"\n"),
    )
    .await;
    // Each with the refusal it must get, the operator's (reason, a word of
    // its message): the schema admits all three, so a failed apply (or
    // another refusal) is not this one. Created in process, as JSON: YAML
    // (kubectl's file, the API server's apply patch) cannot hold a key of
    // 40 KB, and kubectl's parse error passed here for a refusal.
    let cases = [
        (
            "selector",
            serde_json::json!({"nodeSelector": {"zone": "z".repeat(100_000)}}),
            ("InvalidSpec", "nodeSelector"),
        ),
        (
            "key",
            serde_json::json!({"images": {"k".repeat(40_000): "a/b:1"}}),
            ("InvalidSpec", "spec.images"),
        ),
        (
            "digests",
            serde_json::json!({"imageDigests": "huge"}),
            ("InvalidSpec", "spec.imageDigests"),
        ),
    ];
    for (name, field, (expected, needle)) in &cases {
        let mut spec = field.clone();
        spec["version"] = "v1.9.2".into();
        let cr = serde_json::json!({
            "apiVersion": "components.kubeflow.org/v1alpha1",
            "kind": "Training",
            "metadata": {"name": name},
            "spec": spec,
        });
        let cr: DynamicObject = serde_json::from_value(cr).expect("a Training");
        if let Err(e) = trainings.create(&Default::default(), &cr).await {
            let e: String = e.to_string().chars().take(600).collect();
            panic!("{name}: the apply failed, not the operator's refusal: {e}");
        }
        let cr = wait_condition(&trainings, name, "Degraded", "True", TIMEOUT).await;
        let (_, reason, message, generation) = condition(&cr, "Ready").expect("Ready");
        assert!(
            message.len() <= 4096,
            "{name}: a {} byte message ({reason})",
            message.len()
        );
        let start: String = message.chars().take(600).collect();
        assert_eq!(reason, *expected, "{name}: {start}");
        assert!(
            message.contains(needle),
            "{name}: {needle:?} not in {start}"
        );
        assert_eq!(
            generation, cr.metadata.generation,
            "{name}: at its generation"
        );
        assert_eq!(
            written(&client, &ns.name, "training").await,
            0,
            "{name}: nothing written"
        );
        kubeflow_e2e::component::delete_and_wait(&trainings, name, TIMEOUT).await;
    }
    ns.delete().await;
}

/// A namespace whose Pod Security level would refuse the component's pods:
/// refused before anything is written, naming the label and the level the
/// pods need (the training-operator v1.9.2 runs as root: `baseline`). At
/// that level the API server's own Pod Security admission admits the pods
/// and the component becomes Ready.
#[tokio::test]
async fn a_namespace_whose_pod_security_would_refuse_the_pods_is_named_first() {
    let (client, _g) = kubeflow_e2e::component::prepare(&["Training"], &["training"]).await;
    let ns = TestNamespace::new(&client, "podsecurity").await;
    let label = |level: &str| {
        let out = run_tool(
            "kubectl",
            &[
                "label",
                "namespace",
                &ns.name,
                "--overwrite",
                &format!("pod-security.kubernetes.io/enforce={level}"),
            ],
        );
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    label("restricted");
    let _op = OperatorProcess::start("kubeflow-training-operator", &[]);
    let trainings = component_api(&client, &ns.name, "Training");
    apply_yaml(&client, &ns.name, kubeflow_e2e::component::TRAINING_CR).await;
    refused(
        &trainings,
        "kubeflow",
        "PodSecurity",
        "pod-security.kubernetes.io/enforce=baseline",
    )
    .await;
    assert_eq!(written(&client, &ns.name, "training").await, 0);
    label("baseline");
    wait_condition(&trainings, "kubeflow", "Ready", "True", TIMEOUT).await;
    let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(client.clone(), &ns.name);
    let admitted = pods.list(&ListParams::default()).await.expect("pods").items;
    assert!(!admitted.is_empty(), "no pod was admitted at baseline");
}

/// Names that are no person's, hosts and domains that are more than a
/// name, a list over its bound: refused by the schema, naming the field.
/// A published secret an override puts back: refused by the operator after
/// the overrides, at the resource's generation, naming the override, the
/// object and the field, with nothing written.
#[tokio::test]
async fn no_person_no_host_and_no_known_secret_gets_through() {
    let (client, _g) = kubeflow_e2e::component::prepare(
        &["Katib", "Dashboard", "Knative"],
        &["katib", "dashboard", "knative"],
    )
    .await;
    kubeflow_e2e::component::install_bundle_crds(&client, "istio/1.30.1/crds.yaml").await;
    kubeflow_e2e::component::install_bundle_crds(&client, "cert-manager/v1.20.2/cert-manager.yaml")
        .await;
    let ns = TestNamespace::new(&client, "people").await;
    let dashboard = |profiles: &str| {
        format!(
            "apiVersion: components.kubeflow.org/v1alpha1\nkind: Dashboard\nmetadata: {{name: people}}\nspec:\n  version: v2.0.0\n  profiles: {profiles}\n"
        )
    };
    for (profiles, field) in [
        (
            "[{name: team-a, owner: \"system:serviceaccount:kubeflow:default@x.io\"}]",
            "spec.profiles[0].owner",
        ),
        (
            "[{name: team-a, owner: jane@example.com, contributors: [{user: \"system:anonymous@x.io\", role: view}]}]",
            "spec.profiles[0].contributors[0].user",
        ),
        (
            "[{name: team-a, owner: jane@example.com, contributors: [{group: \"system:unauthenticated\", role: view}]}]",
            "spec.profiles[0].contributors[0].group",
        ),
    ] {
        let msg = refused_by_schema(&ns.name, &dashboard(profiles));
        assert!(msg.contains(field), "{field}: {msg}");
    }
    let many: Vec<String> = (0..1001)
        .map(|i| format!("{{name: t{i}, owner: a{i}@example.com}}"))
        .collect();
    let msg = refused_by_schema(&ns.name, &dashboard(&format!("[{}]", many.join(", "))));
    assert!(
        msg.contains("spec.profiles") && msg.contains("1000"),
        "{}",
        &msg[..msg.len().min(300)]
    );
    for host in ["pg.example\\\";DROP", "pg.example:5432", "pg.example\\nX=1"] {
        let msg = refused_by_schema(
            &ns.name,
            &format!(
                "apiVersion: components.kubeflow.org/v1alpha1\nkind: Katib\nmetadata: {{name: host}}\nspec:\n  version: v0.19.0\n  database: {{external: {{host: \"{host}\", credentialsSecret: db}}}}\n"
            ),
        );
        assert!(msg.contains("spec.database.external.host"), "{host}: {msg}");
    }
    let msg = refused_by_schema(
        &ns.name,
        &format!(
            "apiVersion: components.kubeflow.org/v1alpha1\nkind: Knative\nmetadata: {{name: domain}}\nspec: {{version: v1.22.0, domain: {}.example.org}}\n",
            "a".repeat(64)
        ),
    );
    assert!(msg.contains("spec.domain"), "{msg}");

    // Katib's demo root password, put back by an override on the Secret
    // the operator generates: refused after the overrides.
    let _op = OperatorProcess::start("kubeflow-katib-operator", &[]);
    let yaml = "apiVersion: components.kubeflow.org/v1alpha1\nkind: Katib\nmetadata: {name: kubeflow}\nspec:\n  version: v0.19.0\n  overrides:\n  - target: {kind: Secret, name: katib-mysql-secrets}\n    mergePatch: {data: {MYSQL_ROOT_PASSWORD: dGVzdA==}}\n";
    let (katibs, _) = apply_resource(&client, &ns.name, yaml).await;
    refused(
        &katibs,
        "kubeflow",
        "KnownSecret",
        "spec.overrides[0] (Secret katib-mysql-secrets): Secret",
    )
    .await;
    let cr = katibs.get("kubeflow").await.expect("katib");
    let (_, _, message, observed) = condition(&cr, "Degraded").expect("Degraded");
    assert!(
        message.contains("data.MYSQL_ROOT_PASSWORD") && !message.contains("dGVzdA"),
        "{message}"
    );
    assert_eq!(observed, cr.metadata.generation, "at its generation");
    assert_eq!(written(&client, &ns.name, "katib").await, 0);
}
