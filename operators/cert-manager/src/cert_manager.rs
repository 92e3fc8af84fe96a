//! What the operator knows of cert-manager: where it runs, how to tell a
//! cert-manager the project installed from one it did not, and which of the
//! bundle's objects are Kubeflow's issuer rather than cert-manager itself.
//!
//! cert-manager is one per cluster: two would both act on every Certificate.
//! So a cert-manager someone else installed (Helm, OLM, a cloud add-on) is
//! never adopted, changed or deleted; with `mode: Auto` (the default) it is
//! used, and only the Kubeflow issuer is installed beside it. It is told
//! apart by its `certificates.cert-manager.io` CRD: ours carries this
//! operator's `app.kubernetes.io/managed-by`, also after a removal released
//! it, so a CertManager created again finds its own CRDs and reinstalls.

use kubeflow_operator::api::{CertManager, CertManagerMode, CertManagerStatus, FoundCertManager};
use kubeflow_operator::async_trait::async_trait;
use kubeflow_operator::component::{Component, DereferenceError, Draft, Refusal, operator_name};
use kubeflow_operator::conditions::Reason;
use kubeflow_operator::kinds::kind;
use kubeflow_operator::kube::api::{Api, DynamicObject};
use kubeflow_operator::kube::{Client, Resource};
use kubeflow_operator::labels;
use kubeflow_operator::render::{Layout, Target};
use kubeflow_operator::transform;

/// The CRD whose presence means a cert-manager serves the cluster.
const CERTIFICATES_CRD: &str = "certificates.cert-manager.io";
/// Where cert-manager runs: its own namespace, as every cert-manager
/// install puts it (the issuer's NetworkPolicies name it too).
const NAMESPACE: &str = "cert-manager";
/// The bundle puts the leader-election Roles there; they move to
/// [`NAMESPACE`], so that no operator needs rights in `kube-system`.
const LEADER_ELECTION_BUNDLE_NAMESPACE: &str = "kube-system";
/// The controllers that elect a leader.
const ELECTING: [&str; 2] = ["cert-manager", "cert-manager-cainjector"];
/// cert-manager's Deployments (replicas, resources and scheduling apply to all).
const WORKLOADS: [&str; 3] = [
    "cert-manager",
    "cert-manager-cainjector",
    "cert-manager-webhook",
];
/// Kubeflow's own issuer: installed whichever cert-manager serves the cluster.
const ISSUER: &str = "kubeflow-self-signing-issuer";

/// The cert-manager component.
pub struct CertManagerComponent;

/// A cert-manager this operator did not install, if one serves the cluster.
async fn found(client: &Client) -> Result<Option<FoundCertManager>, DereferenceError> {
    use kubeflow_operator::k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let crd = crds
        .get_metadata_opt(CERTIFICATES_CRD)
        .await
        .map_err(|e| DereferenceError::Api("look for a cert-manager serving the cluster", e))?;
    Ok(crd.and_then(|crd| foreign(crd.meta().labels.as_ref())))
}

/// What the labels of a `certificates.cert-manager.io` CRD say of the
/// cert-manager that installed it: None when it is this operator's.
fn foreign(
    labels: Option<&std::collections::BTreeMap<String, String>>,
) -> Option<FoundCertManager> {
    let label = |key: &str| labels.and_then(|l| l.get(key)).cloned();
    let managed_by = label(labels::MANAGED_BY);
    if managed_by.as_deref() == Some(operator_name::<CertManager>().as_str()) {
        return None;
    }
    Some(FoundCertManager {
        version: label(labels::VERSION).unwrap_or_else(|| "unknown".to_string()),
        managed_by,
    })
}

/// The bundle objects that are Kubeflow's issuer, not cert-manager: the
/// ClusterIssuer (and, with cert-manager installed here, the
/// NetworkPolicies that upstream ships beside it for cert-manager's namespace).
fn is_issuer(o: &DynamicObject) -> bool {
    kind(o) == "ClusterIssuer" && o.metadata.name.as_deref() == Some(ISSUER)
}

#[async_trait]
impl Component for CertManagerComponent {
    type Resource = CertManager;
    /// The cert-manager found serving the cluster, when not this operator's.
    type Inputs = Option<FoundCertManager>;

    const LAYOUT: Layout = Layout {
        from_namespaces: &[LEADER_ELECTION_BUNDLE_NAMESPACE],
        target: Target::Fixed(NAMESPACE),
        workloads: &WORKLOADS,
    };

    async fn dereference(
        &self,
        _cr: &CertManager,
        client: &Client,
    ) -> Result<Option<FoundCertManager>, DereferenceError> {
        found(client).await
    }

    fn prepare(&self, draft: &mut Draft<'_, Self>) -> Result<(), Refusal> {
        let (cr, found) = (draft.cr, draft.inputs);
        let spec = &cr.spec;
        let objects = &mut draft.objects;
        match (spec.mode.unwrap_or_default(), found) {
            (CertManagerMode::Install, Some(f)) => {
                return Err(Refusal::new(
                    Reason::OwnershipConflict,
                    format!(
                        "spec.mode is Install, but a cert-manager this project did not install serves the cluster ({}); two cert-managers would both act on every Certificate. Set spec.mode to Auto or External to use it, or uninstall it first",
                        describe(f)
                    ),
                ));
            }
            (CertManagerMode::External, None) => {
                return Err(Refusal::new(
                    Reason::PrerequisiteMissing,
                    format!(
                        "spec.mode is External, but no cert-manager other than this operator's serves the cluster (no foreign {CERTIFICATES_CRD} CRD); install one, or set spec.mode to Auto"
                    ),
                ));
            }
            (_, Some(_)) => transform::remove(objects, |o| !is_issuer(o)),
            (_, None) => {}
        }
        Ok(())
    }

    fn customise(&self, draft: &mut Draft<'_, Self>) -> Result<(), Refusal> {
        let objects = &mut draft.objects;
        for workload in ELECTING {
            transform::set_arg(
                objects,
                workload,
                "--leader-election-namespace",
                Some(NAMESPACE),
            );
        }
        Ok(())
    }

    async fn report(
        &self,
        _cr: &CertManager,
        live: &[DynamicObject],
        client: &Client,
        status: &mut CertManagerStatus,
    ) {
        // What is live says whose cert-manager runs: ours brings its CRD.
        let ours = live.iter().any(|o| {
            kind(o) == "CustomResourceDefinition"
                && o.metadata.name.as_deref() == Some(CERTIFICATES_CRD)
        });
        status.found = if ours {
            None
        } else {
            // A failed read keeps what was last reported.
            found(client).await.unwrap_or_else(|_| status.found.clone())
        };
    }
}

/// "version v1.18.2, managed by Helm" for messages.
fn describe(f: &FoundCertManager) -> String {
    match &f.managed_by {
        Some(m) => format!("version {}, managed by {m}", f.version),
        None => format!("version {}", f.version),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kubeflow_operator::component::{assert_permitted, every_version, find, render_spec};
    use std::collections::BTreeMap;

    fn helm_install() -> Option<FoundCertManager> {
        Some(FoundCertManager {
            version: "v1.18.2".into(),
            managed_by: Some("Helm".into()),
        })
    }

    #[test]
    fn its_role_covers_what_it_renders_for_every_version_and_platform() {
        assert_permitted(&CertManagerComponent, |dir| {
            every_version(dir, "cert-manager")
        });
    }

    #[test]
    fn installed_here_it_runs_in_its_namespace_and_elects_leaders_there() {
        for version in ["v1.19.4", "v1.20.2"] {
            let r = render_spec(
                &CertManagerComponent,
                serde_json::json!({"version": version, "replicas": 2}),
                &None,
            )
            .expect("render");
            assert!(find(&r, "ClusterIssuer", ISSUER).is_some(), "{version}");
            for o in &r.objects {
                assert_ne!(
                    o.metadata.namespace.as_deref(),
                    Some(LEADER_ELECTION_BUNDLE_NAMESPACE),
                    "{version}: {}",
                    kubeflow_operator::kinds::describe(o)
                );
            }
            let role = find(&r, "Role", "cert-manager:leaderelection").expect("role");
            assert_eq!(role.metadata.namespace.as_deref(), Some(NAMESPACE));
            for name in ELECTING {
                let d = find(&r, "Deployment", name).expect("deployment");
                let args: Vec<String> = serde_json::from_value(
                    d.data["spec"]["template"]["spec"]["containers"][0]["args"].clone(),
                )
                .unwrap_or_default();
                assert!(
                    args.contains(&"--leader-election-namespace=cert-manager".to_string()),
                    "{name}: {args:?}"
                );
                assert!(!args.iter().any(|a| a.contains("kube-system")), "{args:?}");
                assert_eq!(d.data["spec"]["replicas"], 2);
            }
        }
    }

    #[test]
    fn beside_a_foreign_cert_manager_only_the_issuer_is_installed() {
        for mode in [serde_json::Value::Null, "Auto".into(), "External".into()] {
            let r = render_spec(
                &CertManagerComponent,
                serde_json::json!({"version": "v1.20.2", "mode": mode}),
                &helm_install(),
            )
            .expect("render");
            let names: Vec<String> = r
                .objects
                .iter()
                .map(kubeflow_operator::kinds::describe)
                .collect();
            assert_eq!(r.objects.len(), 1, "{mode}: {names:?}");
            assert!(find(&r, "ClusterIssuer", ISSUER).is_some());
        }
    }

    #[test]
    fn a_mode_the_cluster_contradicts_is_refused_naming_what_was_found() {
        let install = render_spec(
            &CertManagerComponent,
            serde_json::json!({"version": "v1.20.2", "mode": "Install"}),
            &helm_install(),
        )
        .err()
        .expect("refused");
        assert_eq!(install.reason, Reason::OwnershipConflict);
        assert!(install.message.contains("spec.mode"), "{}", install.message);
        assert!(
            install.message.contains("version v1.18.2, managed by Helm"),
            "{}",
            install.message
        );
        let external = render_spec(
            &CertManagerComponent,
            serde_json::json!({"version": "v1.20.2", "mode": "External"}),
            &None,
        )
        .err()
        .expect("refused");
        assert_eq!(external.reason, Reason::PrerequisiteMissing);
        assert!(external.message.contains(CERTIFICATES_CRD));
    }

    #[test]
    fn its_own_crd_is_not_foreign_even_once_released() {
        let ours = operator_name::<CertManager>();
        let released: BTreeMap<String, String> = [
            (labels::MANAGED_BY.to_string(), ours),
            (labels::VERSION.to_string(), "v1.20.2".to_string()),
        ]
        .into();
        assert_eq!(foreign(Some(&released)), None);
        let upstream: BTreeMap<String, String> =
            [(labels::VERSION.to_string(), "v1.19.4".to_string())].into();
        assert_eq!(
            foreign(Some(&upstream)),
            Some(FoundCertManager {
                version: "v1.19.4".into(),
                managed_by: None
            })
        );
        assert_eq!(
            foreign(None).map(|f| f.version),
            Some("unknown".to_string())
        );
    }
}
