//! Objects that hold data or other objects are never deleted to be
//! recreated: a volume a storage administrator grew keeps its size, uid and
//! binding with nothing written to it; a claim, a namespace and a CRD whose
//! live state refuses our apply are kept, and the component says which.

use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Namespace, PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use kubeflow_e2e::component::{apply_resource, component_api, condition, wait_condition};
use kubeflow_e2e::operator::OperatorProcess;
use kubeflow_e2e::{TestNamespace, apply_yaml, run_tool, wait_for};
use serde::de::DeserializeOwned;
use serde_json::json;

const TIMEOUT: Duration = Duration::from_secs(90);
/// The StorageClass that lets claims grow (made the default for the test).
const CLASS: &str = "e2e-expandable";
/// Objects carrying this label refuse every update (see `Freezer`).
const FROZEN: &str = "e2e.kubeflow.org/frozen";
const POLICY: &str = "e2e-frozen-objects";
/// Marks the volumes this test makes, so a later run removes a failed one's.
const LEFT_BY: &str = "e2e.kubeflow.org/made-by";
/// The claims of the Pipelines bundle: the database's and the object store's.
const CLAIMS: [&str; 2] = ["mysql-pv-claim", "seaweedfs-pvc"];

/// A ValidatingAdmissionPolicy that refuses, as invalid (422), any update of
/// a claim, namespace or CRD labelled `FROZEN`: a live state our apply cannot
/// change, while a create of the same object alone would pass (what made the
/// engine recreate such objects). Removed when dropped, even by a failing
/// test, so no other test meets it.
struct Freezer;

impl Freezer {
    async fn install(client: &kube::Client) {
        apply_yaml(
            client,
            "default",
            &format!(
                r#"apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {{name: {POLICY}}}
spec:
  failurePolicy: Fail
  matchConstraints:
    resourceRules:
    - apiGroups: ["", "apiextensions.k8s.io"]
      apiVersions: ["*"]
      operations: ["UPDATE"]
      resources: ["persistentvolumeclaims", "namespaces", "customresourcedefinitions"]
  matchConditions:
  - name: frozen
    expression: "has(oldObject.metadata.labels) && '{FROZEN}' in oldObject.metadata.labels"
  validations:
  - expression: "false"
    message: "this object is frozen by the test"
    reason: Invalid
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {{name: {POLICY}}}
spec:
  policyName: {POLICY}
  validationActions: [Deny]
"#
            ),
        )
        .await;
    }
}

impl Freezer {
    /// Waits until the policy is in force: a dry-run update of a frozen
    /// probe (the test's own namespace) is refused. (The API server loads a
    /// new policy a moment after it is created.)
    async fn wait_enforced(client: &kube::Client, probe: &str) {
        let namespaces: Api<Namespace> = Api::all(client.clone());
        let label = json!({"metadata": {"labels": {FROZEN: "true"}}});
        namespaces
            .patch(probe, &PatchParams::default(), &Patch::Merge(&label))
            .await
            .unwrap_or_else(|e| panic!("label {probe}: {e}"));
        let touch = json!({"metadata": {"labels": {"e2e.kubeflow.org/probe": "1"}}});
        let params = PatchParams {
            dry_run: true,
            ..PatchParams::default()
        };
        wait_for("the freezing policy to be in force", TIMEOUT, || async {
            match namespaces
                .patch(probe, &params, &Patch::Merge(&touch))
                .await
            {
                Err(kube::Error::Api(e)) if e.code == 422 => Some(()),
                _ => None,
            }
        })
        .await;
    }
}

impl Drop for Freezer {
    fn drop(&mut self) {
        kubeflow_e2e::remove_admission_policy(POLICY);
    }
}

/// Labels `name` frozen and, in the same write (an update of an object not
/// yet frozen, so the policy lets it through), edits a label the operator
/// sets: the operator's repair is then refused.
async fn freeze<K>(api: &Api<K>, name: &str)
where
    K: kube::Resource + Clone + DeserializeOwned + std::fmt::Debug,
{
    let patch = json!({"metadata": {"labels": {FROZEN: "true", "app.kubernetes.io/version": "edited-by-hand"}}});
    api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap_or_else(|e| panic!("freeze {name}: {e}"));
}

/// Removes the frozen label, retrying while the API server still holds the
/// policy it was told to delete (its policy cache follows a moment later).
async fn thaw<K>(api: &Api<K>, name: &str)
where
    K: kube::Resource + Clone + DeserializeOwned + std::fmt::Debug,
{
    let patch = json!({"metadata": {"labels": {FROZEN: null}}});
    wait_for(&format!("{name} to thaw"), TIMEOUT, || async {
        match api
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => Some(()),
            Err(kube::Error::Api(e)) if e.code == 404 => Some(()),
            Err(e) => {
                eprintln!("thaw {name}: {e}");
                None
            }
        }
    })
    .await;
}

/// Waits until the CR is Degraded for `LiveStateRefused` naming every one of
/// `objects`; returns the message.
async fn wait_held(api: &Api<kube::api::DynamicObject>, objects: &[&str]) -> String {
    wait_for("Degraded LiveStateRefused", TIMEOUT, || async {
        let cr = api.get("kubeflow").await.ok()?;
        let (status, reason, message, _) = condition(&cr, "Degraded")?;
        (status == "True"
            && reason == "LiveStateRefused"
            && objects.iter().all(|o| message.contains(o)))
        .then_some(message)
    })
    .await
}

#[tokio::test]
async fn volumes_namespaces_and_crds_are_never_recreated() {
    let (client, _g) =
        kubeflow_e2e::component::prepare(&["Pipelines", "Istio"], &["pipelines", "istio"]).await;
    let freezer = Freezer;
    // Namespaces an earlier, failed run of this test left (with its claims).
    let namespaces: Api<Namespace> = Api::all(client.clone());
    for old in namespaces
        .list(&Default::default())
        .await
        .expect("namespaces")
        .items
    {
        if old.name_any().starts_with("kept-") {
            let _ = namespaces
                .delete(&old.name_any(), &DeleteParams::background())
                .await;
        }
    }
    let ns = TestNamespace::new(&client, "kept").await;
    let classes: Api<kube::api::DynamicObject> = Api::all_with(
        client.clone(),
        &kube::api::ApiResource::from_gvk(&kube::core::GroupVersionKind::gvk(
            "storage.k8s.io",
            "v1",
            "StorageClass",
        )),
    );
    // A default class that allows expansion, and a volume of the bundle's
    // size for each claim to bind to (the claims name no class: the
    // default is theirs).
    apply_yaml(
        &client,
        "default",
        &format!(
            "apiVersion: storage.k8s.io/v1\nkind: StorageClass\nmetadata:\n  name: {CLASS}\n  annotations: {{storageclass.kubernetes.io/is-default-class: \"true\"}}\nprovisioner: kubernetes.io/no-provisioner\nallowVolumeExpansion: true\nvolumeBindingMode: Immediate\n"
        ),
    )
    .await;
    let pvs: Api<PersistentVolume> = Api::all(client.clone());
    // Volumes an earlier, failed run left.
    let _ = pvs
        .delete_collection(
            &DeleteParams::default(),
            &kube::api::ListParams::default().labels(&format!("{LEFT_BY}=kept-objects")),
        )
        .await;
    let pv_names: Vec<String> = CLAIMS.iter().map(|c| format!("{}-{c}", ns.name)).collect();
    for (pv, claim) in pv_names.iter().zip(CLAIMS) {
        apply_yaml(
            &client,
            "default",
            &format!(
                "apiVersion: v1\nkind: PersistentVolume\nmetadata: {{name: {pv}, labels: {{{LEFT_BY}: kept-objects}}}}\nspec:\n  capacity: {{storage: 20Gi}}\n  accessModes: [ReadWriteOnce]\n  storageClassName: {CLASS}\n  persistentVolumeReclaimPolicy: Retain\n  hostPath: {{path: /tmp/e2e-{pv}}}\n  claimRef: {{namespace: {ns}, name: {claim}}}\n",
                ns = ns.name
            ),
        )
        .await;
    }

    let op = OperatorProcess::start("kubeflow-pipelines-operator", &[]);
    apply_yaml(&client, &ns.name, "apiVersion: components.kubeflow.org/v1alpha1\nkind: Pipelines\nmetadata: {name: kubeflow}\nspec: {version: 2.16.0}\n").await;
    let pipelines = component_api(&client, &ns.name, "Pipelines");
    wait_condition(&pipelines, "kubeflow", "Ready", "True", TIMEOUT).await;
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), &ns.name);
    let bound = |c: &PersistentVolumeClaim| {
        c.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Bound")
    };
    for claim in CLAIMS {
        wait_for(&format!("{claim} to bind"), TIMEOUT, || async {
            pvcs.get(claim).await.ok().filter(bound).map(drop)
        })
        .await;
    }
    let uids: Vec<String> = {
        let mut v = Vec::new();
        for claim in CLAIMS {
            v.push(pvcs.get(claim).await.expect("claim").uid().expect("uid"));
        }
        v
    };

    // A storage administrator grows both volumes, as `kubectl patch` does.
    for claim in CLAIMS {
        let grow = json!({"spec": {"resources": {"requests": {"storage": "50Gi"}}}});
        pvcs.patch(claim, &PatchParams::default(), &Patch::Merge(&grow))
            .await
            .unwrap_or_else(|e| panic!("grow {claim}: {e}"));
    }
    let versions: Vec<String> = {
        let mut v = Vec::new();
        for claim in CLAIMS {
            v.push(
                pvcs.get(claim)
                    .await
                    .expect("claim")
                    .resource_version()
                    .expect("rv"),
            );
        }
        v
    };
    // Reconciles forced by touching the CR write nothing at all.
    kubeflow_e2e::rotator::assert_quiet(&op, &pipelines, "kubeflow", Duration::from_secs(4)).await;
    let cr = wait_condition(&pipelines, "kubeflow", "Ready", "True", TIMEOUT).await;
    assert_eq!(
        condition(&cr, "Degraded").map(|c| c.0).as_deref(),
        Some("False"),
        "a resize is not a fault"
    );
    for (i, claim) in CLAIMS.iter().enumerate() {
        let c = pvcs.get(claim).await.expect("the claim is still there");
        assert_eq!(c.uid().as_deref(), Some(uids[i].as_str()), "{claim} kept");
        assert_eq!(
            c.resource_version().as_deref(),
            Some(versions[i].as_str()),
            "nothing written to {claim}"
        );
        let size = c
            .spec
            .as_ref()
            .and_then(|s| s.resources.as_ref())
            .and_then(|r| r.requests.as_ref())
            .and_then(|r| r.get("storage"))
            .map(|q| q.0.clone());
        assert_eq!(size.as_deref(), Some("50Gi"), "{claim} keeps its size");
        let pv = pvs.get(&pv_names[i]).await.expect("volume");
        let bound_to = pv.spec.and_then(|s| s.claim_ref).and_then(|r| r.uid);
        assert_eq!(
            bound_to.as_deref(),
            Some(uids[i].as_str()),
            "the volume (the data) stays bound to {claim}"
        );
    }

    // A claim whose live state refuses our apply is kept, the condition
    // names it, and the rest of the component is still repaired.
    Freezer::install(&client).await;
    Freezer::wait_enforced(&client, &ns.name).await;
    freeze(&pvcs, CLAIMS[0]).await;
    let message = wait_held(
        &pipelines,
        &[&format!("PersistentVolumeClaim {}/{}", ns.name, CLAIMS[0])],
    )
    .await;
    assert!(message.contains("frozen by the test"), "{message}");
    assert!(message.contains("delete it yourself"), "{message}");
    let wide = run_tool(
        "kubectl",
        &["get", "pipelines", "-n", &ns.name, "-o", "wide"],
    );
    let wide = String::from_utf8_lossy(&wide.stdout);
    assert!(
        wide.contains("DEGRADED") && wide.contains("LiveStateRefused"),
        "-o wide says why: {wide}"
    );
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &ns.name);
    let old_cm = cms
        .get("pipeline-install-config")
        .await
        .expect("config")
        .uid();
    cms.delete("pipeline-install-config", &DeleteParams::background())
        .await
        .expect("delete a ConfigMap");
    wait_for("the ConfigMap back", TIMEOUT, || async {
        let cm = cms.get_opt("pipeline-install-config").await.ok()??;
        (cm.uid() != old_cm).then_some(())
    })
    .await;
    let cr = pipelines.get("kubeflow").await.expect("cr");
    assert_eq!(
        condition(&cr, "Ready").map(|c| c.0).as_deref(),
        Some("True"),
        "the rest works"
    );
    assert_eq!(
        pvcs.get(CLAIMS[0]).await.expect("claim").uid().as_deref(),
        Some(uids[0].as_str()),
        "the claim was never deleted"
    );
    drop(op);

    // A namespace and a CRD (Istio's) in the same state: both kept, both named.
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let crd = "gateways.networking.istio.io";
    // A label an earlier, failed run left (no policy holds it now).
    thaw(&crds, crd).await;
    let op = OperatorProcess::start("kubeflow-istio-operator", &[]);
    let yaml = "apiVersion: components.kubeflow.org/v1alpha1\nkind: Istio\nmetadata: {name: kubeflow}\nspec: {version: \"1.26.1\"}\n";
    let (istios, _) = apply_resource(&client, &ns.name, yaml).await;
    wait_condition(&istios, "kubeflow", "Ready", "True", TIMEOUT).await;
    let ns_uid = namespaces.get("istio-system").await.expect("ns").uid();
    let crd_uid = crds.get(crd).await.expect("crd").uid();
    freeze(&namespaces, "istio-system").await;
    freeze(&crds, crd).await;
    let message = wait_held(
        &istios,
        &[
            "Namespace istio-system",
            &format!("CustomResourceDefinition {crd}"),
        ],
    )
    .await;
    assert!(message.contains("every object in it"), "{message}");
    assert!(
        message.contains("every custom resource of its kind"),
        "{message}"
    );
    // Forced reconciles go on refusing; nothing is deleted.
    kubeflow_e2e::rotator::assert_quiet(&op, &istios, "kubeflow", Duration::from_secs(3)).await;
    assert_eq!(
        namespaces.get("istio-system").await.expect("ns").uid(),
        ns_uid
    );
    assert_eq!(crds.get(crd).await.expect("crd").uid(), crd_uid);

    // Once the objects accept the desired state again, they are repaired and
    // the condition clears.
    drop(freezer);
    wait_for("the policy to go", TIMEOUT, || async {
        let out = run_tool(
            "kubectl",
            &[
                "get",
                "validatingadmissionpolicy",
                POLICY,
                "--ignore-not-found",
                "-o",
                "name",
            ],
        );
        String::from_utf8_lossy(&out.stdout)
            .trim()
            .is_empty()
            .then_some(())
    })
    .await;
    thaw(&namespaces, "istio-system").await;
    thaw(&crds, crd).await;
    thaw(&pvcs, CLAIMS[0]).await;
    let cr = wait_condition(&istios, "kubeflow", "Degraded", "False", TIMEOUT).await;
    assert_eq!(
        condition(&cr, "Ready").map(|c| c.0).as_deref(),
        Some("True")
    );
    let labels = namespaces
        .get("istio-system")
        .await
        .expect("ns")
        .labels()
        .clone();
    assert_ne!(
        labels.get("app.kubernetes.io/version").map(String::as_str),
        Some("edited-by-hand"),
        "repaired once it may be"
    );
    assert_eq!(
        namespaces.get("istio-system").await.expect("ns").uid(),
        ns_uid
    );
    assert_eq!(crds.get(crd).await.expect("crd").uid(), crd_uid);

    kubeflow_e2e::component::delete_and_wait(&istios, "kubeflow", TIMEOUT).await;
    drop(op);
    // Released by the removal; the test's to delete (the chart tests make their own).
    let _ = namespaces
        .delete("istio-system", &DeleteParams::default())
        .await;
    kubeflow_e2e::component::wait_gone(&namespaces, "istio-system", TIMEOUT).await;
    let _op = OperatorProcess::start("kubeflow-pipelines-operator", &[]);
    kubeflow_e2e::component::delete_and_wait(&pipelines, "kubeflow", TIMEOUT).await;
    let _ = classes.delete(CLASS, &DeleteParams::default()).await;
    for pv in &pv_names {
        let _ = pvs.delete(pv, &DeleteParams::default()).await;
    }
    ns.delete().await;
}
