//! The cert-manager operator, as a process, against the real control plane:
//! cert-manager installed into its own namespace (leader election there, not
//! in kube-system), every kind repaired, upgraded v1.19.4 -> v1.20.2 with
//! the issuer kept, removed with its CRDs kept; and beside a cert-manager the
//! project did not install, only the issuer installed, the other one never
//! touched, and `mode: Install` refused naming it.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::api::rbac::v1::Role;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::ResourceExt;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, ListParams, Patch, PatchParams};
use kube::core::GroupVersionKind;
use kubeflow_e2e::component::{
    condition, delete_and_wait, install, merge, wait_condition, wait_gone,
};
use kubeflow_e2e::objects::{first_image, wait_all_deleting_of};
use kubeflow_e2e::wait_for;
use serde_json::json;

const OPERATOR: &str = "kubeflow-cert-manager-operator";
const TIMEOUT: Duration = Duration::from_secs(90);
const NAMESPACE: &str = "cert-manager";
const CERTIFICATES: &str = "certificates.cert-manager.io";
const ISSUER: &str = "kubeflow-self-signing-issuer";

fn cluster_issuers(client: &kube::Client) -> Api<DynamicObject> {
    let ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("cert-manager.io", "v1", "ClusterIssuer"),
        "clusterissuers",
    );
    Api::all_with(client.clone(), &ar)
}

/// Deletes every cert-manager CRD (a foreign one an earlier run left
/// included) and the cert-manager namespace, and waits until they are gone.
async fn start_without_cert_manager(client: &kube::Client) {
    kubeflow_e2e::component::delete_crds_of(client, "cert-manager.io").await;
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let _ = namespaces.delete(NAMESPACE, &DeleteParams::default()).await;
    wait_gone(&namespaces, NAMESPACE, Duration::from_secs(120)).await;
}

fn container_args(d: &Deployment) -> Vec<String> {
    d.spec
        .as_ref()
        .and_then(|s| s.template.spec.as_ref())
        .and_then(|p| p.containers[0].args.clone())
        .unwrap_or_default()
}

#[tokio::test]
async fn cert_manager_installs_in_its_namespace_repairs_upgrades_and_keeps_its_crds() {
    let (client, _g) = kubeflow_e2e::component::prepare(&["CertManager"], &["cert-manager"]).await;
    start_without_cert_manager(&client).await;
    let yaml = "apiVersion: components.kubeflow.org/v1alpha1\nkind: CertManager\nmetadata: {name: kubeflow}\nspec: {version: v1.19.4}\n";
    let (ns, op, cms, cr) = install(&client, "certmanager", OPERATOR, yaml, TIMEOUT).await;
    assert_eq!(cr.data.pointer("/status/version"), Some(&json!("v1.19.4")));
    assert_eq!(
        cr.data.pointer("/status/found"),
        None,
        "its own cert-manager is not a found one"
    );

    // In cert-manager's namespace, leader election there too: nothing in kube-system.
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), NAMESPACE);
    for name in ["cert-manager", "cert-manager-cainjector"] {
        let args = container_args(&deployments.get(name).await.expect(name));
        assert!(
            args.contains(&"--leader-election-namespace=cert-manager".to_string()),
            "{name}: {args:?}"
        );
    }
    let roles: Api<Role> = Api::namespaced(client.clone(), NAMESPACE);
    roles
        .get("cert-manager:leaderelection")
        .await
        .expect("the leader-election Role in cert-manager");
    let in_kube_system: Api<Role> = Api::namespaced(client.clone(), "kube-system");
    let stray = in_kube_system
        .list(&ListParams::default().labels("components.kubeflow.org/component=cert-manager"))
        .await
        .expect("list");
    assert!(stray.items.is_empty(), "nothing in kube-system");
    let issuers = cluster_issuers(&client);
    issuers.get(ISSUER).await.expect("the issuer");

    wait_condition(&cms, "kubeflow", "Ready", "True", TIMEOUT).await;

    // The issuer turned into a CA issuer of someone else's, as a merge
    // patch of another field manager would, is turned back whole within a
    // second or two: every webhook certificate would be theirs after it.
    issuers
        .patch(
            ISSUER,
            &PatchParams {
                field_manager: Some("mallory".into()),
                ..PatchParams::default()
            },
            &Patch::Merge(
                json!({"spec": {"selfSigned": null, "ca": {"secretName": "mallory-ca"}}}),
            ),
        )
        .await
        .expect("the issuer patched");
    let start = std::time::Instant::now();
    wait_for("the issuer's spec put back whole", TIMEOUT, || async {
        let issuer = issuers.get(ISSUER).await.ok()?;
        (issuer.data.get("spec") == Some(&json!({"selfSigned": {}}))).then_some(())
    })
    .await;
    let took = start.elapsed();
    assert!(took < Duration::from_secs(2), "the issuer took {took:?}");
    let issuer_uid = issuers.get(ISSUER).await.expect("the issuer").uid();

    // Upgrade: v1.20.2's images, the issuer kept (same object).
    merge(&cms, "kubeflow", json!({"spec": {"version": "v1.20.2"}})).await;
    kubeflow_e2e::component::wait_version_ready(&cms, "kubeflow", "v1.20.2", TIMEOUT).await;
    let image = first_image(deployments.get("cert-manager").await.expect("controller"));
    assert!(image.ends_with(":v1.20.2"), "{image}");
    let issuer = issuers.get(ISSUER).await.expect("the issuer");
    assert_eq!(
        issuer.uid(),
        issuer_uid,
        "the issuer was kept, not recreated"
    );

    // Removal: cert-manager and the issuer go; the CRDs (users'
    // Certificates) and the namespace stay, released.
    delete_and_wait(&cms, "kubeflow", TIMEOUT).await;
    wait_all_deleting_of(&deployments, &ListParams::default(), TIMEOUT).await;
    assert!(issuers.get_opt(ISSUER).await.expect("get").is_none());
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let kept = crds.get(CERTIFICATES).await.expect("the CRD is kept");
    assert!(!kept.labels().contains_key("applyset.kubernetes.io/part-of"));
    let namespace = Api::<Namespace>::all(client.clone())
        .get(NAMESPACE)
        .await
        .expect("the namespace is kept");
    assert!(
        !namespace
            .labels()
            .contains_key("applyset.kubernetes.io/part-of")
    );
    drop(op);
    ns.delete().await;
}

#[tokio::test]
async fn beside_a_cert_manager_it_did_not_install_only_the_issuer_is_installed() {
    let (client, _g) = kubeflow_e2e::component::prepare(&["CertManager"], &["cert-manager"]).await;
    start_without_cert_manager(&client).await;
    // Another cert-manager: its CRDs, as its Helm chart labels them (its
    // Deployments would be in a namespace of its own).
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let helm: BTreeMap<String, String> = [
        ("app.kubernetes.io/managed-by", "Helm"),
        ("app.kubernetes.io/version", "v1.18.2"),
        ("app.kubernetes.io/instance", "cert-manager"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    let text = kubeflow_e2e::bundle_text("cert-manager/v1.20.2/cert-manager.yaml");
    let mut foreign = Vec::new();
    for obj in kubeflow_e2e::parse_yaml(&text).into_iter().filter(|o| {
        o.types
            .as_ref()
            .is_some_and(|t| t.kind == "CustomResourceDefinition")
    }) {
        let mut crd: CustomResourceDefinition =
            serde_json::from_value(serde_json::to_value(&obj).expect("json")).expect("crd");
        crd.metadata.labels = Some(helm.clone());
        foreign.push(crd.name_any());
        crds.create(&Default::default(), &crd)
            .await
            .expect("create a foreign CRD");
    }
    assert_eq!(foreign.len(), 6, "{foreign:?}");
    for name in &foreign {
        kubeflow_e2e::component::wait_established(&client, name, TIMEOUT).await;
    }
    let untouched = |crd: &CustomResourceDefinition| {
        (crd.labels().clone(), crd.metadata.resource_version.clone())
    };
    let before = untouched(&crds.get(CERTIFICATES).await.expect("crd"));

    let yaml = "apiVersion: components.kubeflow.org/v1alpha1\nkind: CertManager\nmetadata: {name: kubeflow}\nspec: {version: v1.20.2}\n";
    let (ns, op, cms, cr) = install(&client, "certmanager-foreign", OPERATOR, yaml, TIMEOUT).await;
    assert_eq!(
        cr.data.pointer("/status/found"),
        Some(&json!({"version": "v1.18.2", "managedBy": "Helm"})),
        "{:?}",
        cr.data.get("status")
    );
    // Only the issuer: no cert-manager of ours, and the other one's CRDs as they were.
    let issuers = cluster_issuers(&client);
    issuers.get(ISSUER).await.expect("the issuer");
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), NAMESPACE);
    assert!(
        deployments
            .list(&ListParams::default())
            .await
            .map(|l| l.items.is_empty())
            .unwrap_or(true),
        "no cert-manager Deployment"
    );
    assert_eq!(
        untouched(&crds.get(CERTIFICATES).await.expect("crd")),
        before
    );

    // At rest beside it: no writes.
    let at_rest = op.settled_writes().await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(op.writes().await, at_rest, "no writes at rest");

    // mode: Install would make two cert-managers: refused, naming the other
    // one, and nothing written.
    // Read strictly: the operator's page must answer, or this compares zeros.
    let writes_before = op.writes().await;
    merge(&cms, "kubeflow", json!({"spec": {"mode": "Install"}})).await;
    let cr = wait_condition(&cms, "kubeflow", "Degraded", "True", TIMEOUT).await;
    let (_, reason, message, _) = condition(&cr, "Degraded").expect("Degraded");
    assert_eq!(reason, "OwnershipConflict", "{message}");
    assert!(
        message.contains("spec.mode") && message.contains("version v1.18.2, managed by Helm"),
        "{message}"
    );
    assert_eq!(
        condition(&cr, "Ready").map(|c| c.0).as_deref(),
        Some("False")
    );
    assert_eq!(op.writes().await, writes_before, "nothing written");
    assert_eq!(
        untouched(&crds.get(CERTIFICATES).await.expect("crd")),
        before
    );

    // Back to Auto, then removed: the issuer goes, the other cert-manager stays.
    merge(&cms, "kubeflow", json!({"spec": {"mode": null}})).await;
    wait_condition(&cms, "kubeflow", "Ready", "True", TIMEOUT).await;
    delete_and_wait(&cms, "kubeflow", TIMEOUT).await;
    assert!(issuers.get_opt(ISSUER).await.expect("get").is_none());
    assert_eq!(
        untouched(&crds.get(CERTIFICATES).await.expect("crd")),
        before
    );
    for name in &foreign {
        crds.get(name)
            .await
            .unwrap_or_else(|e| panic!("{name} was kept: {e}"));
    }
    drop(op);
    ns.delete().await;
    start_without_cert_manager(&client).await;
}
