//! What the operator knows of the Spark operator: its controller and
//! webhook, the flags that name its namespace, which namespaces it serves,
//! its batch scheduler, and what it makes at run time.

use kubeflow_operator::api::{BatchScheduler, Spark};
use kubeflow_operator::async_trait::async_trait;
use kubeflow_operator::component::{
    Component, DereferenceError, Draft, Refusal, RunTimeObject, RunTimeScope, require_crd,
};
use kubeflow_operator::conditions::Reason;
use kubeflow_operator::kube::Client;
use kubeflow_operator::render::{Layout, Target};
use kubeflow_operator::transform;

/// The namespace the upstream bundle installs into.
const BUNDLE_NAMESPACE: &str = "kubeflow";
/// The controller and the webhook, both the same program.
const CONTROLLER: &str = "spark-operator-controller";
const WEBHOOK: &str = "spark-operator-webhook";
const WORKLOADS: [&str; 2] = [CONTROLLER, WEBHOOK];
/// Flags that name the namespace the bundle installs into (the leader
/// election's, the webhook certificate Secret's and the webhook Service's);
/// kustomize's namespace move leaves arguments alone.
const NAMESPACE_FLAGS: [(&str, &str); 3] = [
    (CONTROLLER, "--leader-election-lock-namespace"),
    (WEBHOOK, "--leader-election-lock-namespace"),
    (WEBHOOK, "--webhook-secret-namespace"),
];
const WEBHOOK_SERVICE_FLAG: &str = "--webhook-svc-namespace";
/// A leader election Lease of one of the two programs.
const fn lease(name: &'static str) -> RunTimeObject {
    RunTimeObject {
        group: "coordination.k8s.io",
        version: "v1",
        kind: "Lease",
        plural: "leases",
        name,
        scope: RunTimeScope::ResourceNamespace,
    }
}

/// The Spark component.
pub struct SparkComponent;

#[async_trait]
impl Component for SparkComponent {
    type Resource = Spark;
    type Inputs = ();

    const LAYOUT: Layout = Layout {
        from_namespaces: &[BUNDLE_NAMESPACE],
        target: Target::ResourceNamespace,
        workloads: &WORKLOADS,
    };

    /// What the two programs make at run time in their namespace: the
    /// webhook's certificate Secret and the leader election Leases.
    const RUN_TIME_OBJECTS: &'static [RunTimeObject] = &[
        RunTimeObject {
            group: "",
            version: "v1",
            kind: "Secret",
            plural: "secrets",
            name: "spark-operator-webhook-certs",
            scope: RunTimeScope::ResourceNamespace,
        },
        lease("spark-operator-controller-lock"),
        lease("spark-operator-webhook-lock"),
    ];

    async fn dereference(&self, cr: &Spark, client: &Client) -> Result<(), DereferenceError> {
        if cr.spec.batch_scheduler == Some(BatchScheduler::Volcano) {
            require_crd(
                client,
                "podgroups.scheduling.volcano.sh",
                "spec.batchScheduler is Volcano, which is not installed; install it or leave batchScheduler unset",
            )
            .await?;
        }
        Ok(())
    }

    fn customise(&self, draft: &mut Draft<'_, Self>) -> Result<(), Refusal> {
        let (cr, ctx) = (draft.cr, draft.ctx);
        let spec = &cr.spec;
        let objects = &mut draft.objects;
        for (workload, flag) in NAMESPACE_FLAGS {
            transform::set_arg(objects, workload, flag, Some(ctx.namespace));
        }
        transform::set_arg(objects, WEBHOOK, WEBHOOK_SERVICE_FLAG, Some(ctx.namespace));
        if let Some(namespaces) = &spec.job_namespaces {
            let list = job_namespaces(namespaces)?;
            for w in WORKLOADS {
                transform::set_arg(objects, w, "--namespaces", Some(&list));
            }
        }
        if let Some(s) = spec.batch_scheduler {
            let name = match s {
                BatchScheduler::Volcano => "volcano",
                BatchScheduler::YuniKorn => "yunikorn",
            };
            transform::set_arg(
                objects,
                CONTROLLER,
                "--enable-batch-scheduler",
                Some("true"),
            );
            transform::set_arg(objects, CONTROLLER, "--default-batch-scheduler", Some(name));
        }
        Ok(())
    }
}

/// The `--namespaces` value: the list, each once.
fn job_namespaces(namespaces: &[String]) -> Result<String, Refusal> {
    for (i, n) in namespaces.iter().enumerate() {
        if namespaces[..i].contains(n) {
            return Err(Refusal::new(
                Reason::InvalidSpec,
                format!("spec.jobNamespaces[{i}] {n:?} is listed twice"),
            ));
        }
    }
    Ok(namespaces.join(","))
}

#[cfg(test)]
mod tests {
    use super::*;
    use kubeflow_operator::component::{
        RenderContext, Rendered, assert_permitted, every_version, find, render_spec,
    };
    use kubeflow_operator::serde_json::{Value, json};

    #[test]
    fn its_role_covers_what_it_renders_for_every_version_and_platform() {
        assert_permitted(&SparkComponent, |dir| every_version(dir, "spark"));
    }

    fn args(r: &Rendered, workload: &str) -> Vec<String> {
        find(r, "Deployment", workload).expect("workload").data["spec"]["template"]["spec"]
            ["containers"][0]["args"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .map(str::to_string)
            .collect()
    }

    #[test]
    fn job_namespaces_and_the_batch_scheduler_reach_the_flags() {
        let r = render_spec(
            &SparkComponent,
            json!({"version": "2.5.0", "jobNamespaces": ["team-a", "team-b"], "batchScheduler": "Volcano"}),
            &(),
        )
        .expect("render");
        for w in WORKLOADS {
            let a = args(&r, w);
            let sub = if w == CONTROLLER {
                "controller"
            } else {
                "webhook"
            };
            assert_eq!(a[..2], [sub, "start"], "{w}: the subcommand stays first");
            let namespaces: Vec<&String> = a
                .iter()
                .filter(|x| x.starts_with("--namespaces="))
                .collect();
            assert_eq!(namespaces, ["--namespaces=team-a,team-b"], "{w}");
        }
        let c = args(&r, CONTROLLER);
        assert!(c.contains(&"--enable-batch-scheduler=true".to_string()));
        assert!(c.contains(&"--default-batch-scheduler=volcano".to_string()));
        assert!(
            !args(&r, WEBHOOK)
                .iter()
                .any(|a| a.contains("batch-scheduler"))
        );
        let twice = render_spec(
            &SparkComponent,
            json!({"version": "2.5.0", "jobNamespaces": ["a", "a"]}),
            &(),
        )
        .err()
        .expect("refused");
        assert!(
            twice.message.contains("spec.jobNamespaces[1]"),
            "{}",
            twice.message
        );
    }

    #[test]
    fn the_flags_naming_its_namespace_follow_the_resource() {
        let cr: Spark = serde_json::from_value(json!({
            "apiVersion": "components.kubeflow.org/v1alpha1", "kind": "Spark",
            "metadata": {"name": "kubeflow", "namespace": "ml-platform"},
            "spec": {"version": "2.5.0"}}))
        .expect("cr");
        let dir = kubeflow_operator::component::manifests_dir();
        let bundles = kubeflow_operator::bundle::BundleCache::default();
        let ctx = RenderContext::of(
            &cr,
            &dir,
            &bundles,
            kubeflow_operator::api::Platform::Kubernetes,
        );
        let r = SparkComponent.render(&cr, &ctx, &()).expect("render");
        let all: Vec<String> = WORKLOADS.iter().flat_map(|w| args(&r, w)).collect();
        assert!(
            !all.iter().any(|a| a.ends_with("=kubeflow")),
            "no flag names upstream's namespace: {all:?}"
        );
        let w = args(&r, WEBHOOK);
        for flag in [
            "--webhook-secret-namespace=ml-platform",
            "--webhook-svc-namespace=ml-platform",
            "--leader-election-lock-namespace=ml-platform",
        ] {
            assert!(w.contains(&flag.to_string()), "{flag}: {w:?}");
        }
    }

    #[test]
    fn unset_the_operator_serves_every_namespace_as_released() {
        let r = render_spec(&SparkComponent, json!({"version": "2.5.0"}), &()).expect("render");
        assert!(args(&r, CONTROLLER).contains(&"--namespaces=\"\"".to_string()));
        assert!(
            !args(&r, CONTROLLER)
                .iter()
                .any(|a| a.contains("batch-scheduler"))
        );
    }
}
