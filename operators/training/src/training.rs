//! What the operator knows of the training-operator: its bundle layout, and
//! which job kinds map to which CRDs and flags.
//!
//! The controller (v1.9.2) runs its own certificate rotator: at start it
//! replaces any certificate in its Secret that it did not make (it needs its
//! own `ca.key`) and patches the webhooks' caBundle. So the operator ships the
//! Secret empty, as upstream does, and never writes its data or the
//! caBundle: both are the controller's.

use kubeflow_operator::api::components::training::GangScheduler;
use kubeflow_operator::api::{ComponentResource, JobKind, Training};
use kubeflow_operator::async_trait::async_trait;
use kubeflow_operator::certs;
use kubeflow_operator::component::{Component, DereferenceError, Draft, Refusal, require_crd};
use kubeflow_operator::conditions::Reason;
use kubeflow_operator::kinds::kind;
use kubeflow_operator::kube::Client;
use kubeflow_operator::kube::api::DynamicObject;
use kubeflow_operator::rbac::Permissions;
use kubeflow_operator::render::{Layout, Target};
use kubeflow_operator::{openshift, transform};

/// The controller Deployment (and its container).
const WORKLOAD: &str = "training-operator";
/// The Secret the controller's rotator fills with its webhook certificate.
const CERT_SECRET: &str = "training-operator-webhook-cert";
/// The namespace the upstream bundle installs into.
const BUNDLE_NAMESPACE: &str = "kubeflow";
/// The OpenShift SCC the operator's ServiceAccount is granted.
const SCC: &str = "nonroot-v2";

/// The training component.
pub struct TrainingComponent;

/// The job kind a CRD defines, if it is one of the training-operator's.
fn job_kind_of(crd: &DynamicObject) -> Option<JobKind> {
    let k = crd.data.pointer("/spec/names/kind")?.as_str()?;
    JobKind::ALL.into_iter().find(|j| j.as_str() == k)
}

#[async_trait]
impl Component for TrainingComponent {
    type Resource = Training;
    type Inputs = ();

    const LAYOUT: Layout = Layout {
        from_namespaces: &[BUNDLE_NAMESPACE],
        target: Target::ResourceNamespace,
        workloads: &[WORKLOAD],
    };

    async fn dereference(&self, cr: &Training, client: &Client) -> Result<(), DereferenceError> {
        // The gang scheduler's PodGroup kind must exist, or every gang-scheduled job fails.
        let needed = cr.spec.gang_scheduler.map(|g| match g {
            GangScheduler::Volcano => ("podgroups.scheduling.volcano.sh", "Volcano"),
            GangScheduler::SchedulerPlugins => (
                "podgroups.scheduling.x-k8s.io",
                "the scheduler-plugins coscheduling plugin",
            ),
        });
        if let Some((crd, what)) = needed {
            require_crd(
                client,
                crd,
                &format!("spec.gangScheduler needs {what}, which is not installed; install it or leave gangScheduler unset"),
            )
            .await?;
        }
        Ok(())
    }

    fn permissions(&self) -> Permissions {
        Permissions::bundles(&[Training::COMPONENT]).openshift_scc(&[SCC])
    }

    fn prepare(&self, draft: &mut Draft<'_, Self>) -> Result<(), Refusal> {
        let cr = draft.cr;
        one_replica_unless_elected(&draft.objects, cr.spec.common.replicas)?;
        Ok(())
    }

    fn customise(&self, draft: &mut Draft<'_, Self>) -> Result<(), Refusal> {
        let (cr, ctx) = (draft.cr, draft.ctx);
        let objects = &mut draft.objects;
        let spec = &cr.spec;

        if let Some(enabled) = &spec.job_kinds {
            enable_only(objects, enabled);
        }
        let scheduler = spec.gang_scheduler.map(|g| match g {
            GangScheduler::Volcano => "volcano",
            GangScheduler::SchedulerPlugins => "scheduler-plugins",
        });
        if scheduler.is_some() {
            transform::set_arg(objects, WORKLOAD, "--gang-scheduler-name", scheduler);
        }

        certs::leave_to_controller(objects, &[CERT_SECRET]);
        if ctx.platform == kubeflow_operator::api::Platform::OpenShift {
            objects.push(openshift::scc_grant(ctx.namespace, WORKLOAD, SCC));
        }
        Ok(())
    }
}

/// More than one replica only of a controller that elects a leader: the
/// training-operator v1.9.2 is installed without `--leader-elect` (and its
/// role reads no Leases), so two replicas would each reconcile every job,
/// each undoing the other's writes.
fn one_replica_unless_elected(
    objects: &[DynamicObject],
    replicas: Option<i32>,
) -> Result<(), Refusal> {
    let Some(r) = replicas.filter(|r| *r > 1) else {
        return Ok(());
    };
    let elects = objects
        .iter()
        .filter(|o| kind(o) == "Deployment" && o.metadata.name.as_deref() == Some(WORKLOAD))
        .filter_map(|o| o.data.pointer("/spec/template/spec/containers/0/args"))
        .filter_map(|a| a.as_array())
        .flatten()
        .filter_map(|a| a.as_str())
        .any(|a| a == "--leader-elect" || a == "--leader-elect=true");
    if elects {
        return Ok(());
    }
    Err(Refusal::new(
        Reason::InvalidSpec,
        format!(
            "spec.replicas is {r}: this version's training-operator elects no leader, so more than one replica would run every job's controller twice; set 1 (a restarted pod takes over in seconds)"
        ),
    ))
}

/// Only the enabled job kinds' CRDs and webhooks; the controller runs only
/// their schemes.
fn enable_only(objects: &mut Vec<DynamicObject>, enabled: &[JobKind]) {
    transform::remove(objects, |o| {
        kind(o) == "CustomResourceDefinition"
            && job_kind_of(o).is_some_and(|j| !enabled.contains(&j))
    });
    let disabled: Vec<String> = JobKind::ALL
        .iter()
        .filter(|j| !enabled.contains(j))
        .map(|j| format!("{}s", j.as_str().to_lowercase()))
        .collect();
    for obj in objects
        .iter_mut()
        .filter(|o| kind(o) == "ValidatingWebhookConfiguration")
    {
        if let Some(hooks) = obj.data.get_mut("webhooks").and_then(|h| h.as_array_mut()) {
            hooks.retain(|h| {
                let resources = h.pointer("/rules/0/resources").and_then(|r| r.as_array());
                !resources.is_some_and(|rs| {
                    rs.iter()
                        .any(|r| r.as_str().is_some_and(|r| disabled.iter().any(|d| d == r)))
                })
            });
        }
    }
    let mut kinds: Vec<&JobKind> = enabled.iter().collect();
    kinds.sort();
    kinds.dedup();
    let args: Vec<String> = kinds
        .iter()
        .map(|k| format!("--enable-scheme={}", k.as_str().to_lowercase()))
        .collect();
    for obj in objects
        .iter_mut()
        .filter(|o| o.metadata.name.as_deref() == Some(WORKLOAD) && kind(o) == "Deployment")
    {
        if let Some(c) = obj.data.pointer_mut("/spec/template/spec/containers/0") {
            c["args"] = serde_json::json!(args);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kubeflow_operator::component::{assert_permitted, every_version};

    #[test]
    fn its_role_covers_what_it_renders_for_every_version_and_platform() {
        assert_permitted(&TrainingComponent, |dir| every_version(dir, "training"));
    }

    #[test]
    fn more_than_one_replica_of_a_controller_without_leader_election_is_refused() {
        use kubeflow_operator::component::render_spec;
        let render = |replicas: i32| {
            render_spec(
                &TrainingComponent,
                serde_json::json!({"version": "v1.9.2", "replicas": replicas}),
                &(),
            )
        };
        assert!(render(1).is_ok());
        let refused = render(2).err().expect("two replicas refused");
        assert_eq!(refused.reason, Reason::InvalidSpec);
        assert!(
            refused.message.starts_with("spec.replicas is 2"),
            "{}",
            refused.message
        );
        // A version whose controller elects a leader may have more.
        let mut objects = render(1).expect("render").objects;
        transform::set_arg(&mut objects, WORKLOAD, "--leader-elect", Some("true"));
        assert!(one_replica_unless_elected(&objects, Some(3)).is_ok());
    }

    #[test]
    fn job_kinds_and_the_gang_scheduler_reach_crds_webhooks_and_flags() {
        use kubeflow_operator::component::{find, render_spec};
        let r = render_spec(
            &TrainingComponent,
            serde_json::json!({"version": "v1.9.2", "jobKinds": ["PyTorchJob"], "gangScheduler": "volcano"}),
            &(),
        )
        .expect("render");
        let crds: Vec<&str> = r
            .objects
            .iter()
            .filter(|o| kind(o) == "CustomResourceDefinition")
            .filter_map(|o| o.metadata.name.as_deref())
            .collect();
        assert_eq!(crds, ["pytorchjobs.kubeflow.org"]);
        let args = find(&r, "Deployment", WORKLOAD)
            .and_then(|d| d.data.pointer("/spec/template/spec/containers/0/args"))
            .cloned()
            .unwrap_or_default();
        let args: Vec<String> = serde_json::from_value(args).unwrap_or_default();
        assert!(
            args.contains(&"--enable-scheme=pytorchjob".to_string()),
            "{args:?}"
        );
        assert!(
            args.iter().any(|a| a == "--gang-scheduler-name=volcano"),
            "{args:?}"
        );
        let hooks = r
            .objects
            .iter()
            .find(|o| kind(o) == "ValidatingWebhookConfiguration")
            .and_then(|o| o.data["webhooks"].as_array().cloned())
            .unwrap_or_default();
        assert_eq!(hooks.len(), 1, "only the PyTorchJob webhook stays");
        assert!(
            render_spec(
                &TrainingComponent,
                serde_json::json!({"version": "v0.0.1"}),
                &()
            )
            .is_err()
        );
    }
}
