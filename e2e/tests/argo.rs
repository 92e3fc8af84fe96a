//! Argo's workflow controller (v3.7.3, the engine Kubeflow Pipelines 2.16
//! installs), built from the Go module proxy, runs on what the Pipelines
//! operator installs: a Workflow shaped as KFP's API server submits a run
//! (the root DAG's driver, then a component's driver whose pod-spec patch
//! makes the component's pod) runs to Succeeded.
//!
//! kwok runs no container, so the test does the part of Argo's executor
//! (the `wait` container of each pod): it writes the pod's
//! WorkflowTaskResult as the executor does (created incomplete, named for
//! the node, owned by the Workflow, then marked complete with the output
//! parameters the KFP driver writes to its files), with the token of the
//! pod's ServiceAccount, `pipeline-runner`: the Role Pipelines installs
//! must allow it. kwok completes the pods (its pod-complete stage, for
//! pods a Workflow owns).

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::Client;
use kube::api::{Api, ApiResource, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::core::GroupVersionKind;
use kubeflow_e2e::access::client_for;
use kubeflow_e2e::apply_yaml;
use kubeflow_e2e::component::install;
use kubeflow_e2e::objects::config_value;
use kubeflow_e2e::upstream::{self, Controller, PrivateFolder, Quiet, UserObject};
use serde_json::{Value, json};

const OPERATOR: &str = "kubeflow-pipelines-operator";
const TIMEOUT: Duration = Duration::from_secs(120);
const CONTROLLER: &str = "workflow-controller";
const PROGRAM: &str = "argo-workflow-controller";
const RUNNER: &str = "pipeline-runner";
const RUN: &str = "hello-pipeline-run";
/// What the KFP driver's pod-spec patch runs: the component's own image and
/// command, which the component's pod must get from the controller.
const COMPONENT_IMAGE: &str = "python:3.11";

/// A one-component run as KFP's API server compiles it for Argo (the
/// templates and parameters its compiler names): the root DAG's driver
/// gives the run's execution id; the component's driver decides the
/// component's pod (its pod-spec patch, whether the cache serves it); the
/// component's pod is the impl template patched with it, with the launcher
/// as its init container.
fn run_workflow() -> String {
    let component = json!({"executorLabel": "exec-hello", "inputDefinitions": {"parameters": {"who": {"parameterType": "STRING"}}}});
    let root = json!({"dag": {"tasks": {"hello": {"componentRef": {"name": "comp-hello"}, "taskInfo": {"name": "hello"}}}}});
    let container = json!({"image": COMPONENT_IMAGE, "command": ["sh", "-c", "echo hello"]});
    // Both drivers' flags naming the run and the task (KFP's compiler
    // writes them in this order), then each kind's own.
    let run_flags = [
        "--pipeline_name",
        "hello-pipeline",
        "--run_id",
        "{{workflow.uid}}",
        "--run_name",
        "{{workflow.name}}",
        "--dag_execution_id",
        "{{inputs.parameters.parent-dag-id}}",
        "--component",
        "{{inputs.parameters.component}}",
        "--task",
        "{{inputs.parameters.task}}",
    ];
    let driver_args = [
        &["--type", "CONTAINER"][..],
        &run_flags,
        &[
            "--container",
            "{{inputs.parameters.container}}",
            "--iteration_index",
            "{{inputs.parameters.iteration-index}}",
            "--cached_decision_path",
            "{{outputs.parameters.cached-decision.path}}",
            "--pod_spec_patch_path",
            "{{outputs.parameters.pod-spec-patch.path}}",
            "--condition_path",
            "{{outputs.parameters.condition.path}}",
            "--kubernetes_config",
            "{{inputs.parameters.kubernetes-config}}",
        ],
    ]
    .concat();
    let dag_driver_args = [
        &["--type", "{{inputs.parameters.driver-type}}"][..],
        &run_flags,
        &[
            "--runtime_config",
            "{{inputs.parameters.runtime-config}}",
            "--execution_id_path",
            "{{outputs.parameters.execution-id.path}}",
            "--iteration_count_path",
            "{{outputs.parameters.iteration-count.path}}",
            "--condition_path",
            "{{outputs.parameters.condition.path}}",
        ],
    ]
    .concat();
    let param = |name: &str| json!({"name": name});
    let param_or = |name: &str, default: &str| json!({"name": name, "default": default});
    let out = |name: &str, default: &str| json!({"name": name, "default": default, "valueFrom": {"path": format!("/tmp/outputs/{name}"), "default": default}});
    let arg = |name: &str, value: &str| json!({"name": name, "value": value});
    let workflow = json!({
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Workflow",
        "metadata": {
            "name": RUN,
            "labels": {"pipelines.kubeflow.org/v2_component": "true", "pipeline/runid": "5f0c4d3e-0000-4000-8000-000000000001"},
            "annotations": {"pipelines.kubeflow.org/v2_pipeline": "true"},
        },
        "spec": {
            "entrypoint": "entrypoint",
            "serviceAccountName": RUNNER,
            "podMetadata": {"labels": {"pipelines.kubeflow.org/v2_component": "true", "pipeline/runid": "5f0c4d3e-0000-4000-8000-000000000001"}},
            "arguments": {"parameters": [
                arg("components-comp-hello", &component.to_string()),
                arg("implementations-comp-hello", &container.to_string()),
                arg("components-root", &root.to_string()),
            ]},
            "templates": [
                {
                    "name": "system-container-driver",
                    "inputs": {"parameters": [param("component"), param("task"), param("container"), param("parent-dag-id"), param_or("iteration-index", "-1"), param_or("kubernetes-config", "")]},
                    "outputs": {"parameters": [out("pod-spec-patch", ""), out("cached-decision", "false"), out("condition", "true")]},
                    "container": {"image": "ghcr.io/kubeflow/kfp-driver:2.16.1", "command": ["driver"], "args": driver_args, "resources": {"limits": {"cpu": "500m", "memory": "512Mi"}, "requests": {"cpu": "100m", "memory": "64Mi"}}},
                },
                {
                    "name": "system-container-impl",
                    "inputs": {"parameters": [param("pod-spec-patch"), param_or("cached-decision", "false")]},
                    "podSpecPatch": "{{inputs.parameters.pod-spec-patch}}",
                    "initContainers": [{"name": "kfp-launcher", "image": "ghcr.io/kubeflow/kfp-launcher:2.16.1", "command": ["launcher-v2", "--copy", "/kfp-launcher/launch"], "volumeMounts": [{"name": "kfp-launcher", "mountPath": "/kfp-launcher"}]}],
                    "volumes": [{"name": "kfp-launcher", "emptyDir": {}}],
                    "container": {"name": "", "image": "gcr.io/ml-pipeline/should-be-overridden-during-runtime", "command": ["should-be-overridden-during-runtime"], "env": [{"name": "KFP_POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}, {"name": "KFP_POD_UID", "valueFrom": {"fieldRef": {"fieldPath": "metadata.uid"}}}], "volumeMounts": [{"name": "kfp-launcher", "mountPath": "/kfp-launcher"}], "resources": {}},
                },
                {
                    "name": "system-container-executor",
                    "inputs": {"parameters": [param("component"), param("task"), param("container"), param("parent-dag-id"), param_or("iteration-index", "-1"), param_or("kubernetes-config", "")]},
                    "outputs": {},
                    "dag": {"tasks": [
                        {"name": "driver", "template": "system-container-driver", "arguments": {"parameters": [
                            arg("component", "{{inputs.parameters.component}}"), arg("task", "{{inputs.parameters.task}}"),
                            arg("container", "{{inputs.parameters.container}}"), arg("parent-dag-id", "{{inputs.parameters.parent-dag-id}}"),
                            arg("iteration-index", "{{inputs.parameters.iteration-index}}"), arg("kubernetes-config", "{{inputs.parameters.kubernetes-config}}"),
                        ]}},
                        {"name": "container", "template": "system-container-impl", "depends": "driver.Succeeded",
                         "when": "{{tasks.driver.outputs.parameters.cached-decision}} != true",
                         "arguments": {"parameters": [arg("pod-spec-patch", "{{tasks.driver.outputs.parameters.pod-spec-patch}}"), arg("cached-decision", "{{tasks.driver.outputs.parameters.cached-decision}}")]}},
                    ]},
                },
                {
                    "name": "root",
                    "inputs": {"parameters": [param("parent-dag-id")]},
                    "outputs": {},
                    "dag": {"tasks": [
                        {"name": "hello", "template": "system-container-executor", "arguments": {"parameters": [
                            arg("component", "{{workflow.parameters.components-comp-hello}}"),
                            arg("task", "{\"componentRef\":{\"name\":\"comp-hello\"},\"taskInfo\":{\"name\":\"hello\"}}"),
                            arg("container", "{{workflow.parameters.implementations-comp-hello}}"),
                            arg("parent-dag-id", "{{inputs.parameters.parent-dag-id}}"),
                        ]}},
                    ]},
                },
                {
                    "name": "system-dag-driver",
                    "inputs": {"parameters": [param("component"), param_or("runtime-config", ""), param_or("task", ""), param_or("parent-dag-id", "0"), param_or("iteration-index", "-1"), param_or("driver-type", "DAG")]},
                    "outputs": {"parameters": [out("execution-id", ""), out("iteration-count", "0"), out("condition", "true")]},
                    "container": {"image": "ghcr.io/kubeflow/kfp-driver:2.16.1", "command": ["driver"], "args": dag_driver_args, "resources": {"limits": {"cpu": "500m", "memory": "512Mi"}, "requests": {"cpu": "100m", "memory": "64Mi"}}},
                },
                {
                    "name": "entrypoint",
                    "dag": {"tasks": [
                        {"name": "root-driver", "template": "system-dag-driver", "arguments": {"parameters": [
                            arg("component", "{{workflow.parameters.components-root}}"), arg("runtime-config", "{}"), arg("driver-type", "ROOT_DAG"),
                        ]}},
                        {"name": "root", "template": "root", "depends": "root-driver.Succeeded", "arguments": {"parameters": [
                            arg("parent-dag-id", "{{tasks.root-driver.outputs.parameters.execution-id}}"),
                        ]}},
                    ]},
                },
            ],
        },
    });
    serde_json::to_string(&workflow).expect("workflow")
}

/// What the KFP driver writes to each output file, by output name: the
/// root DAG's execution id, and the component's pod (its image and command)
/// as a pod-spec patch on the `main` container.
fn driver_output(name: &str) -> Option<String> {
    match name {
        "execution-id" => Some("7".to_string()),
        "iteration-count" => Some("0".to_string()),
        "condition" => Some("true".to_string()),
        "cached-decision" => Some("false".to_string()),
        "pod-spec-patch" => Some(
            json!({"containers": [{"name": "main", "image": COMPONENT_IMAGE, "command": ["sh", "-c", "echo hello"]}]})
                .to_string(),
        ),
        _ => None,
    }
}

fn resource(kind: &str, plural: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("argoproj.io", "v1alpha1", kind),
        plural,
    )
}

/// The template a pod runs, as the controller hands it to the executor
/// (the `ARGO_TEMPLATE` variable of the pod's `init` container).
fn pod_template(pod: &Pod) -> Value {
    let text = pod
        .spec
        .iter()
        .flat_map(|s| s.init_containers.iter().flatten())
        .filter(|c| c.name == "init")
        .flat_map(|c| c.env.iter().flatten())
        .find(|e| e.name == "ARGO_TEMPLATE")
        .and_then(|e| e.value.clone())
        .unwrap_or_else(|| {
            panic!(
                "pod {:?} has no init container with ARGO_TEMPLATE",
                pod.metadata.name
            )
        });
    serde_json::from_str(&text).expect("ARGO_TEMPLATE is JSON")
}

/// Does what Argo's executor does for one finished pod: its task result,
/// created incomplete (owned by the Workflow, labelled with it), then
/// patched with the pod's output parameters and marked complete.
async fn report(results: &Api<DynamicObject>, workflow: &DynamicObject, pod: &Pod) {
    let annotations = pod.metadata.annotations.clone().unwrap_or_default();
    let node = annotations
        .get("workflows.argoproj.io/node-id")
        .unwrap_or_else(|| panic!("pod {:?} names no node", pod.metadata.name))
        .clone();
    let template = pod_template(pod);
    let mut parameters = Vec::new();
    for p in template
        .pointer("/outputs/parameters")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let name = p["name"].as_str().unwrap_or_default();
        let value = driver_output(name)
            .unwrap_or_else(|| panic!("the test has no value for output {name}"));
        parameters.push(json!({"name": name, "value": value}));
    }
    let wf = workflow.metadata.name.clone().unwrap_or_default();
    let result: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "WorkflowTaskResult",
        "metadata": {
            "name": node,
            "labels": {"workflows.argoproj.io/workflow": wf, "workflows.argoproj.io/report-outputs-completed": "false"},
            "ownerReferences": [{"apiVersion": "argoproj.io/v1alpha1", "kind": "Workflow", "name": wf, "uid": workflow.metadata.uid}],
        },
    }))
    .expect("task result");
    results
        .create(&PostParams::default(), &result)
        .await
        .unwrap_or_else(|e| panic!("{RUNNER} creates the task result of {node}: {e}"));
    let patch = json!({
        "metadata": {"labels": {"workflows.argoproj.io/report-outputs-completed": "true"}},
        "phase": "Succeeded",
        "outputs": {"parameters": parameters, "exitCode": "0"},
    });
    results
        .patch(&node, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap_or_else(|e| panic!("{RUNNER} completes the task result of {node}: {e}"));
}

/// Argo's workflow controller as Pipelines 2.16.1 installs it (its
/// ServiceAccount `argo`, args, environment and ConfigMap), in a network
/// namespace of its own (its metrics and health servers take every
/// interface). A KFP-shaped run goes to Succeeded, its component's pod
/// made from the driver's patch and archiving its logs where the installed
/// artifact repository says; the controller is refused nothing and the
/// Pipelines operator writes nothing while it works.
#[tokio::test]
async fn argos_controller_runs_a_pipeline_run_on_what_is_installed() {
    let (client, mut phases) =
        kubeflow_e2e::component::prepare(&["Pipelines"], &["pipelines"]).await;
    let program = upstream::program(PROGRAM);
    phases.phase("upstream controller built");
    let yaml = "apiVersion: components.kubeflow.org/v1alpha1\nkind: Pipelines\nmetadata: {name: kubeflow}\nspec: {version: 2.16.1}\n";
    let (ns, op, pipelines, _) = install(&client, "argo-run", OPERATOR, yaml, TIMEOUT).await;
    phases.phase("Pipelines installed");

    let installed = upstream::installed(&client, &ns.name, CONTROLLER, CONTROLLER).await;
    assert_eq!(installed.service_account, "argo");
    assert!(
        installed.args.iter().any(|a| a == "--namespaced"),
        "Pipelines runs Argo in its own namespace only: {:?}",
        installed.args
    );
    let dir = upstream::run_dir(&format!("{}-{CONTROLLER}", ns.name));
    let kubeconfig = dir.join("kubeconfig");
    upstream::service_account_kubeconfig(&ns.name, &installed.service_account, &kubeconfig);
    let runner_config = dir.join("runner-kubeconfig");
    upstream::service_account_kubeconfig(&ns.name, RUNNER, &runner_config);
    let runner: Client = client_for(&runner_config)
        .await
        .expect("pipeline-runner's client");
    let env = installed.env_with_kubeconfig(&kubeconfig);
    let sa = dir.join("serviceaccount");
    let before = op.settled_writes().await;
    let mut controller = Controller::start_isolated(
        &program,
        &installed.args,
        &env,
        &[PrivateFolder::service_account_namespace(&sa, &ns.name)],
        dir.join(format!("{CONTROLLER}.log")),
    );
    apply_yaml(&client, &ns.name, &run_workflow()).await;
    phases.phase("controller started");

    let workflows: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), &ns.name, &resource("Workflow", "workflows"));
    let results: Api<DynamicObject> = Api::namespaced_with(
        runner.clone(),
        &ns.name,
        &resource("WorkflowTaskResult", "workflowtaskresults"),
    );
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns.name);
    let of_run = ListParams::default().labels(&format!("workflows.argoproj.io/workflow={RUN}"));
    let mut seen: BTreeMap<String, Pod> = BTreeMap::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    let workflow = loop {
        let workflow = workflows.get(RUN).await.expect("the run");
        // Each pod, once the controller made it, reported as its executor
        // would (kwok completes it meanwhile).
        for pod in pods.list(&of_run).await.expect("the run's pods").items {
            let name = pod.metadata.name.clone().unwrap_or_default();
            if !seen.contains_key(&name) {
                report(&results, &workflow, &pod).await;
            }
            seen.insert(name, pod);
        }
        let phase = workflow
            .data
            .pointer("/status/phase")
            .and_then(Value::as_str);
        assert!(
            !matches!(phase, Some("Failed" | "Error")),
            "the run failed: {:?}\n{}",
            workflow.data.get("status"),
            controller.log_text()
        );
        if phase == Some("Succeeded") {
            break workflow;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the run did not succeed in 120 s: {:?}\n{}",
            workflow.data.get("status"),
            controller.log_text()
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    phases.phase("the run Succeeded");

    // Three pods: the root DAG's driver, the component's driver, the
    // component; each node of the run Succeeded.
    assert_eq!(seen.len(), 3, "pods of the run: {:?}", seen.keys());
    let nodes = workflow
        .data
        .pointer("/status/nodes")
        .and_then(Value::as_object)
        .expect("the run's nodes");
    let pod_nodes: Vec<&Value> = nodes.values().filter(|n| n["type"] == "Pod").collect();
    assert_eq!(pod_nodes.len(), 3, "{nodes:?}");
    for n in nodes.values() {
        assert_eq!(n["phase"], "Succeeded", "{n}");
    }
    // The component's pod is what its driver decided: the controller
    // applied the driver's pod-spec patch, passed from one task to the next.
    let component = seen
        .values()
        .find(|p| {
            p.metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get("workflows.argoproj.io/node-name"))
                .is_some_and(|n| n.ends_with(".hello.container"))
        })
        .unwrap_or_else(|| panic!("no pod for the component: {:?}", seen.keys()));
    let main = component
        .spec
        .iter()
        .flat_map(|s| s.containers.iter())
        .find(|c| c.name == "main")
        .expect("main container");
    assert_eq!(main.image.as_deref(), Some(COMPONENT_IMAGE));
    assert_eq!(
        component
            .spec
            .as_ref()
            .and_then(|s| s.service_account_name.as_deref()),
        Some(RUNNER)
    );
    // Each pod archives its logs where the installed artifact repository
    // says (the ConfigMap the Pipelines operator wrote), under the run's
    // namespace and name.
    let repository = config_value(
        &client,
        &ns.name,
        "workflow-controller-configmap",
        "artifactRepository",
    )
    .await;
    for pod in seen.values() {
        let template = pod_template(pod);
        let s3 = template
            .pointer("/archiveLocation/s3")
            .unwrap_or_else(|| panic!("{:?}: no archive location: {template}", pod.metadata.name));
        let endpoint = s3["endpoint"].as_str().unwrap_or_default();
        assert!(
            !endpoint.is_empty() && repository.contains(&format!("endpoint: \"{endpoint}\"")),
            "{endpoint} is the installed repository's:\n{repository}"
        );
        // The object store the component installed, in its namespace.
        assert_eq!(endpoint, format!("seaweedfs.{}:9000", ns.name));
        assert_eq!(s3["bucket"], "mlpipeline");
        let key = s3["key"].as_str().unwrap_or_default();
        assert!(
            key.starts_with(&format!("private-artifacts/{}/{RUN}/", ns.name)),
            "{key}"
        );
        assert_eq!(
            s3.pointer("/accessKeySecret/name").and_then(Value::as_str),
            Some("mlpipeline-minio-artifact")
        );
    }
    assert!(controller.is_running(), "{}", controller.log_text());
    let quiet = Quiet {
        operator: &op,
        writes: before,
        controllers: &[(&controller, "Argo's workflow controller")],
    };
    quiet
        .assert("the Pipelines operator wrote nothing while Argo's controller worked")
        .await;
    let run = UserObject {
        api: &workflows,
        name: RUN,
        kind: "Workflow",
    };
    upstream::delete_object_then_component(&mut phases, run, &quiet, &pipelines, "Pipelines").await;
    // Argo's controller ends itself once its ConfigMap and its rights are
    // gone with the component (as its pod would go with it): not checked.
    drop(controller);
    ns.delete().await;
}
