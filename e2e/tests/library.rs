//! The shared library's apply engine and cleanup against the real control
//! plane, driven directly (no operator process), with a component CR as the
//! inventory's parent.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, Patch, PatchParams};
use kube::{Client, Resource, ResourceExt};
use kubeflow_api::{Pipelines, Training};
use kubeflow_e2e::component::wait_gone;
use kubeflow_e2e::objects::exists;
use kubeflow_e2e::{
    TestNamespace, apply_yaml, client, install_crds, manifests_dir, serial, wait_for,
};
use kubeflow_operator::bundle;
use kubeflow_operator::engine::apply::{ApplyError, ApplyOutcome, ApplyRequest, Engine};
use kubeflow_operator::engine::cleanup;
use kubeflow_operator::engine::inventory::{self, Inventory};
use kubeflow_operator::kinds::{self, kind};
use kubeflow_operator::labels;
use kubeflow_operator::transform;

const MANAGER: &str = "kubeflow-library-test";

/// A parent CR with no operator watching it.
async fn parent<K>(client: &Client, ns: &str, yaml: &str) -> K
where
    K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    apply_yaml(client, ns, yaml).await;
    let api: Api<K> = Api::namespaced(client.clone(), ns);
    api.get("kubeflow").await.expect("parent CR")
}

fn rendered(component: &str, version: &str, ns: &str) -> Vec<DynamicObject> {
    let mut objects = bundle::load(&manifests_dir(), component, version)
        .expect("bundle")
        .objects();
    transform::set_namespace(&mut objects, ns, &[]);
    objects
}

/// Removes what an earlier, failed run of these tests left: every cluster-scoped
/// object labelled as managed by this test's field manager. Tests hold the
/// serial lock, so nothing else of this manager is live.
async fn clear_leftovers(client: &Client) {
    let selector = format!("{}={MANAGER}", labels::MANAGED_BY);
    let lp = kube::api::ListParams::default().labels(&selector);
    let crds: Api<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition> = Api::all(client.clone());
    for crd in crds.list(&lp).await.expect("list CRDs").items {
        let patch = serde_json::json!({"metadata": {"labels": {labels::APPLYSET_PART_OF: null, labels::MANAGED_BY: null}}});
        let _ = crds
            .patch(
                &crd.name_any(),
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await;
    }
    let roles: Api<k8s_openapi::api::rbac::v1::ClusterRole> = Api::all(client.clone());
    let _ = roles.delete_collection(&DeleteParams::default(), &lp).await;
    let bindings: Api<k8s_openapi::api::rbac::v1::ClusterRoleBinding> = Api::all(client.clone());
    let _ = bindings
        .delete_collection(&DeleteParams::default(), &lp)
        .await;
    let hooks: Api<k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration> =
        Api::all(client.clone());
    let _ = hooks.delete_collection(&DeleteParams::default(), &lp).await;
    let mhooks: Api<k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration> =
        Api::all(client.clone());
    let _ = mhooks
        .delete_collection(&DeleteParams::default(), &lp)
        .await;
    let priorities: Api<k8s_openapi::api::scheduling::v1::PriorityClass> = Api::all(client.clone());
    let _ = priorities
        .delete_collection(&DeleteParams::default(), &lp)
        .await;
}

fn retain_crds(o: &DynamicObject) -> bool {
    kind(o) == "CustomResourceDefinition"
}

async fn apply<K>(
    engine: &Engine,
    client: &Client,
    cr_name: &str,
    ns: &str,
    objects: Vec<DynamicObject>,
) -> Result<ApplyOutcome, ApplyError>
where
    K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    // Re-read the parent each time: the engine keeps its inventory annotation on it.
    let cr: K = Api::namespaced(client.clone(), ns)
        .get(cr_name)
        .await
        .expect("parent");
    let inv = Inventory::for_parent(&cr, "test", MANAGER);
    let resource = ApiResource::erase::<K>(&());
    let empty = BTreeMap::new();
    engine
        .apply(ApplyRequest {
            inventory: &inv,
            parent_resource: &resource,
            parent_annotations: cr.meta().annotations.as_ref().unwrap_or(&empty),
            parent_labels: cr.meta().labels.as_ref().unwrap_or(&empty),
            owner: cr.controller_owner_ref(&()),
            objects,
            version: "v1",
            retain: &retain_crds,
            release_on_prune: None,
            delete_crds: false,
        })
        .await
}

async fn cleanup_all<K>(engine: &Engine, client: &Client, ns: &str) -> cleanup::CleanupOutcome
where
    K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    let cr: K = Api::namespaced(client.clone(), ns)
        .get("kubeflow")
        .await
        .expect("parent");
    let inv = Inventory::for_parent(&cr, "test", MANAGER);
    let kinds: BTreeSet<String> =
        inventory::parse_group_kinds(cr.annotations().get(labels::APPLYSET_GROUP_KINDS))
            .into_iter()
            .collect();
    let mut last = cleanup::CleanupOutcome::default();
    for _ in 0..200 {
        last = cleanup::cleanup(engine, &inv, &kinds, &retain_crds, false)
            .await
            .expect("cleanup");
        if last.done() {
            return last;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("cleanup did not finish: {:?}", last.remaining);
}

async fn live_members(
    engine: &Engine,
    client: &Client,
    ns: &str,
    kinds: &BTreeSet<String>,
) -> Vec<DynamicObject> {
    let cr: Training = Api::namespaced(client.clone(), ns)
        .get("kubeflow")
        .await
        .expect("parent");
    let inv = Inventory::for_parent(&cr, "test", MANAGER);
    engine
        .list_members(&inv, kinds)
        .await
        .expect("list")
        .into_iter()
        .map(|m| m.object)
        .collect()
}

fn resource_versions(objects: &[DynamicObject]) -> BTreeMap<String, String> {
    objects
        .iter()
        .map(|o| {
            (
                kubeflow_operator::engine::apply::describe(o),
                o.resource_version().unwrap_or_default(),
            )
        })
        .collect()
}

#[tokio::test]
async fn the_training_bundle_applies_is_steady_repairs_and_cleans_up() {
    let client = client().await;
    let _g = serial().await;
    clear_leftovers(&client).await;
    install_crds(&client).await;
    let ns = TestNamespace::new(&client, "lib-training").await;
    let cr: Training = parent(&client, &ns.name, kubeflow_e2e::component::TRAINING_CR).await;
    let engine = Engine::new(client.clone(), MANAGER);
    let objects = rendered("training", "v1.9.2", &ns.name);
    let count = objects.len();
    let kinds: BTreeSet<String> = objects.iter().map(kinds::group_kind).collect();

    let first = apply::<Training>(&engine, &client, "kubeflow", &ns.name, objects.clone())
        .await
        .expect("first apply");
    // Created, or adopted where an earlier run left a kept (released) CRD.
    assert_eq!(first.written.len(), count, "every object is written");

    // Every object exists, labelled, owned when it shares the CR's namespace.
    let mut kinds = kinds;
    kinds.insert("ClusterRole.rbac.authorization.k8s.io".to_string());
    let live = live_members(&engine, &client, &ns.name, &kinds).await;
    // The bundle's objects, and the claim on the component's cluster scope.
    assert_eq!(live.len(), count + 1);
    assert!(
        live.iter()
            .any(|o| o.name_any() == "kubeflow-test-cluster-claim")
    );
    let id = Inventory::for_parent(&cr, "test", MANAGER).id;
    for o in &live {
        let l = o.labels();
        assert_eq!(
            l.get(labels::APPLYSET_PART_OF),
            Some(&id),
            "{}",
            o.name_any()
        );
        assert_eq!(l.get(labels::MANAGED_BY).map(String::as_str), Some(MANAGER));
        let owners = o.owner_references();
        if o.namespace().as_deref() == Some(ns.name.as_str()) {
            assert_eq!(owners.len(), 1, "{} has one owner", o.name_any());
            assert_eq!(owners[0].uid, cr.uid().unwrap_or_default());
            assert_eq!(owners[0].controller, Some(true));
        } else {
            assert!(
                o.namespace().is_none() && owners.is_empty(),
                "{} is cluster-scoped and unowned",
                o.name_any()
            );
        }
    }

    // Steady state: no write, no resourceVersion moves. First let the
    // Deployment settle: its controller updates its status (not us) while
    // kwok makes the pod ready.
    let deployments: Api<k8s_openapi::api::apps::v1::Deployment> =
        Api::namespaced(client.clone(), &ns.name);
    wait_for(
        "the Deployment to settle",
        Duration::from_secs(30),
        || async {
            let s = deployments.get("training-operator").await.ok()?.status?;
            (s.available_replicas == Some(1)
                && s.updated_replicas == Some(1)
                && s.unavailable_replicas.is_none())
            .then_some(())
        },
    )
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let live = live_members(&engine, &client, &ns.name, &kinds).await;
    let before = resource_versions(&live);
    let again = apply::<Training>(&engine, &client, "kubeflow", &ns.name, objects.clone())
        .await
        .expect("re-apply");
    assert!(
        again.written.is_empty(),
        "re-apply wrote {:?}",
        again.written
    );
    let after = resource_versions(&live_members(&engine, &client, &ns.name, &kinds).await);
    assert_eq!(before, after);

    // A deleted Deployment and ClusterRole come back.
    let roles: Api<k8s_openapi::api::rbac::v1::ClusterRole> = Api::all(client.clone());
    deployments
        .delete("training-operator", &DeleteParams::default())
        .await
        .expect("delete deployment");
    roles
        .delete("training-operator", &DeleteParams::default())
        .await
        .expect("delete clusterrole");
    let repaired = apply::<Training>(&engine, &client, "kubeflow", &ns.name, objects.clone())
        .await
        .expect("repair");
    let mut created: Vec<String> = repaired.created.iter().map(ToString::to_string).collect();
    created.sort();
    assert_eq!(
        created,
        vec![
            "ClusterRole training-operator".to_string(),
            format!("Deployment {}/training-operator", ns.name)
        ]
    );
    assert!(exists(&deployments, "training-operator").await);
    assert!(exists(&roles, "training-operator").await);

    // An edited field is put back.
    deployments
        .patch(
            "training-operator",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"spec": {"replicas": 4}})),
        )
        .await
        .expect("edit");
    let fixed = apply::<Training>(&engine, &client, "kubeflow", &ns.name, objects.clone())
        .await
        .expect("repair edit");
    assert_eq!(
        fixed
            .drifted
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>(),
        vec![format!("Deployment {}/training-operator", ns.name)]
    );
    assert_eq!(
        deployments
            .get("training-operator")
            .await
            .expect("get")
            .spec
            .and_then(|s| s.replicas),
        Some(1)
    );

    // Cleanup leaves nothing of the inventory but the CRDs, and releases them.
    let out = cleanup_all::<Training>(&engine, &client, &ns.name).await;
    assert_eq!(
        out.retained.len(),
        6,
        "the six job CRDs are kept: {:?}",
        out.retained
    );
    let left = live_members(&engine, &client, &ns.name, &kinds).await;
    assert!(
        left.is_empty(),
        "left behind: {:?}",
        left.iter().map(|o| o.name_any()).collect::<Vec<_>>()
    );
    let crds: Api<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition> = Api::all(client.clone());
    let tf = crds
        .get("tfjobs.kubeflow.org")
        .await
        .expect("the CRD is kept");
    assert!(
        !tf.labels().contains_key(labels::APPLYSET_PART_OF),
        "a kept CRD belongs to no inventory"
    );
    ns.delete().await;
}

#[tokio::test]
async fn a_version_change_prunes_what_the_new_bundle_lacks() {
    let client = client().await;
    let _g = serial().await;
    clear_leftovers(&client).await;
    install_crds(&client).await;
    let ns = TestNamespace::new(&client, "lib-prune").await;
    let _: Pipelines = parent(&client, &ns.name, "apiVersion: components.kubeflow.org/v1alpha1\nkind: Pipelines\nmetadata: {name: kubeflow}\nspec: {version: 2.5.0}\n").await;
    let engine = Engine::new(client.clone(), MANAGER);
    let old = rendered("pipelines", "2.5.0", &ns.name);
    assert!(
        old.iter().all(|o| kind(o) != "Namespace"),
        "the bundle's namespace is replaced by the CR's"
    );
    apply::<Pipelines>(&engine, &client, "kubeflow", &ns.name, old)
        .await
        .expect("apply 2.5.0");
    let deployments: Api<k8s_openapi::api::apps::v1::Deployment> =
        Api::namespaced(client.clone(), &ns.name);
    assert!(deployments.get_opt("minio").await.expect("get").is_some());

    let new = rendered("pipelines", "2.15.0", &ns.name);
    let out = apply::<Pipelines>(&engine, &client, "kubeflow", &ns.name, new)
        .await
        .expect("apply 2.15.0");
    let pruned: Vec<String> = out.pruned.iter().map(ToString::to_string).collect();
    assert!(
        pruned.contains(&format!("Deployment {}/minio", ns.name)),
        "pruned: {pruned:?}"
    );
    // A volume is never pruned: it is kept, released and reported.
    assert!(
        !pruned.contains(&format!("PersistentVolumeClaim {}/minio-pvc", ns.name)),
        "pruned: {pruned:?}"
    );
    assert_eq!(
        out.released
            .iter()
            .map(|r| r.name.as_str())
            .collect::<Vec<_>>(),
        vec!["minio-pvc"]
    );
    let pvcs: Api<k8s_openapi::api::core::v1::PersistentVolumeClaim> =
        Api::namespaced(client.clone(), &ns.name);
    let pvc = pvcs.get("minio-pvc").await.expect("the volume is kept");
    assert!(
        pvc.owner_references().is_empty() && !pvc.labels().contains_key(labels::APPLYSET_PART_OF)
    );
    assert!(exists(&deployments, "seaweedfs").await);
    wait_gone(&deployments, "minio", Duration::from_secs(10)).await;

    cleanup_all::<Pipelines>(&engine, &client, &ns.name).await;
    assert!(
        pvcs.get_opt("minio-pvc").await.expect("get").is_some(),
        "released: no cleanup takes it"
    );
    ns.delete().await;
}

#[tokio::test]
async fn a_second_inventory_cannot_take_a_held_cluster_object_and_applies_nothing() {
    let client = client().await;
    let _g = serial().await;
    clear_leftovers(&client).await;
    install_crds(&client).await;
    let a = TestNamespace::new(&client, "lib-holder").await;
    let b = TestNamespace::new(&client, "lib-taker").await;
    let cr_yaml = kubeflow_e2e::component::TRAINING_CR;
    let _: Training = parent(&client, &a.name, cr_yaml).await;
    let _: Training = parent(&client, &b.name, cr_yaml).await;
    let engine = Engine::new(client.clone(), MANAGER);
    let role = "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata: {name: kubeflow-e2e-shared-role}\nrules: []\n";
    apply::<Training>(
        &engine,
        &client,
        "kubeflow",
        &a.name,
        kubeflow_e2e::parse_yaml(role),
    )
    .await
    .expect("holder applies");

    let mut objects = kubeflow_e2e::parse_yaml(&format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: would-be-created, namespace: {}}}\n",
        b.name
    ));
    objects.extend(kubeflow_e2e::parse_yaml(role));
    let err = apply::<Training>(&engine, &client, "kubeflow", &b.name, objects)
        .await
        .expect_err("conflict");
    assert!(matches!(err, ApplyError::Conflict { .. }), "{err}");
    assert!(
        err.to_string().contains(&format!("{}/kubeflow", a.name)),
        "names the holder: {err}"
    );
    let cms: Api<k8s_openapi::api::core::v1::ConfigMap> = Api::namespaced(client.clone(), &b.name);
    assert!(
        cms.get_opt("would-be-created")
            .await
            .expect("get")
            .is_none(),
        "nothing applied"
    );

    // The holder gone without its cleanup (its finalizer taken off by
    // hand): it holds nothing any more, and the next instance adopts what
    // it left, the cluster scope's claim included.
    let trainings: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        &a.name,
        &ApiResource::erase::<Training>(&()),
    );
    trainings
        .delete("kubeflow", &DeleteParams::default())
        .await
        .expect("delete the holder");
    wait_gone(&trainings, "kubeflow", Duration::from_secs(60)).await;
    let mut objects = kubeflow_e2e::parse_yaml(&format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: would-be-created, namespace: {}}}\n",
        b.name
    ));
    objects.extend(kubeflow_e2e::parse_yaml(role));
    apply::<Training>(&engine, &client, "kubeflow", &b.name, objects)
        .await
        .expect("an orphan's objects are adopted");
    let roles: Api<k8s_openapi::api::rbac::v1::ClusterRole> = Api::all(client.clone());
    let adopted = roles.get("kubeflow-e2e-shared-role").await.expect("role");
    assert_eq!(
        adopted.labels().get(labels::OWNER_NAMESPACE),
        Some(&b.name),
        "adopted by the new instance"
    );
    assert!(
        cms.get_opt("would-be-created")
            .await
            .expect("get")
            .is_some()
    );

    cleanup_all::<Training>(&engine, &client, &b.name).await;
    a.delete().await;
    b.delete().await;
}

#[tokio::test]
async fn invalid_input_changes_nothing_and_opted_out_objects_are_left_alone() {
    let client = client().await;
    let _g = serial().await;
    clear_leftovers(&client).await;
    install_crds(&client).await;
    let ns = TestNamespace::new(&client, "lib-invalid").await;
    let _: Training = parent(&client, &ns.name, kubeflow_e2e::component::TRAINING_CR).await;
    let engine = Engine::new(client.clone(), MANAGER);
    let good = format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: good, namespace: {0}}}\n",
        ns.name
    );
    let bad = format!(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {{name: bad, namespace: {0}}}\nspec:\n  replicas: -1\n  selector: {{matchLabels: {{a: b}}}}\n  template:\n    metadata: {{labels: {{a: b}}}}\n    spec: {{containers: [{{name: c, image: x}}]}}\n",
        ns.name
    );
    let objects = kubeflow_e2e::parse_yaml(&format!("{good}---\n{bad}"));
    let err = apply::<Training>(&engine, &client, "kubeflow", &ns.name, objects)
        .await
        .expect_err("invalid");
    assert!(
        matches!(err, ApplyError::Invalid { .. }) && err.to_string().contains("replicas"),
        "{err}"
    );
    let cms: Api<k8s_openapi::api::core::v1::ConfigMap> = Api::namespaced(client.clone(), &ns.name);
    assert!(
        cms.get_opt("good").await.expect("get").is_none(),
        "the valid object was not applied either"
    );

    // Opt-out: an annotated object keeps a hand edit.
    let objects = kubeflow_e2e::parse_yaml(&format!("{good}data: {{k: v}}\n"));
    apply::<Training>(&engine, &client, "kubeflow", &ns.name, objects.clone())
        .await
        .expect("apply");
    cms.patch(
        "good",
        &PatchParams::default(),
        &Patch::Merge(serde_json::json!({"metadata": {"annotations": {labels::SKIP_RECONCILE: "true"}}, "data": {"k": "hand-edited"}})),
    )
    .await
    .expect("edit");
    let out = apply::<Training>(&engine, &client, "kubeflow", &ns.name, objects)
        .await
        .expect("apply");
    assert_eq!(
        out.skipped
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>(),
        vec![format!("ConfigMap {}/good", ns.name)]
    );
    let cm = cms.get("good").await.expect("get");
    assert_eq!(
        cm.data.and_then(|d| d.get("k").cloned()).as_deref(),
        Some("hand-edited")
    );

    cleanup_all::<Training>(&engine, &client, &ns.name).await;
    ns.delete().await;
}

/// Every bundle folder as (component path, version), in upgrade order.
fn every_bundle() -> Vec<(String, Vec<String>)> {
    let root = manifests_dir();
    bundle::folders()
        .into_iter()
        .map(|f| (f.to_string(), bundle::available_versions(&root.join(f))))
        .collect()
}

/// The API server stores some bundle values differently from how they are
/// written (quantities, empty strings, Secrets' stringData, defaults): a
/// second apply of each bundle, and of each upgrade along its versions, must
/// write nothing.
#[tokio::test]
async fn every_bundle_and_upgrade_applied_again_writes_nothing() {
    let client = client().await;
    let _g = serial().await;
    clear_leftovers(&client).await;
    install_crds(&client).await;
    let engine = Engine::new(client.clone(), MANAGER);
    for (component, mut versions) in every_bundle() {
        // Oldest first: semantic order of the folders' names.
        versions.sort_by_key(|v| {
            v.trim_start_matches('v')
                .split('.')
                .map(|p| p.parse::<u32>().unwrap_or(0))
                .collect::<Vec<_>>()
        });
        let count = versions
            .iter()
            .map(|v| parts(&component, v).len())
            .max()
            .unwrap_or(1);
        for part in 0..count {
            let ns = TestNamespace::new(&client, "lib-every").await;
            let _: Training = parent(&client, &ns.name, kubeflow_e2e::component::TRAINING_CR).await;
            for version in &versions {
                let Some(mut objects) = parts(&component, version).into_iter().nth(part) else {
                    continue;
                };
                transform::set_namespace(&mut objects, &ns.name, &[]);
                // cert-manager is not installed here; the Serving operator drops these too.
                objects.retain(|o| !kinds::api_version(o).starts_with("cert-manager.io/"));
                apply::<Training>(&engine, &client, "kubeflow", &ns.name, objects.clone())
                    .await
                    .unwrap_or_else(|e| panic!("{component} {version}: {e}"));
                let again = apply::<Training>(&engine, &client, "kubeflow", &ns.name, objects)
                    .await
                    .unwrap_or_else(|e| panic!("{component} {version} again: {e}"));
                assert!(
                    again.written.is_empty(),
                    "{component} {version} (part {part}): the second apply wrote: {:?}",
                    again.why
                );
            }
            cleanup_all::<Training>(&engine, &client, &ns.name).await;
            ns.delete().await;
        }
    }
}

/// A bundle's objects as the test applies them, before the move into the
/// test's namespace: all in one part, unless two of the bundle's namespaces
/// hold objects of one kind and name (Knative's Serving and Eventing both
/// have a `config-logging`), which one namespace cannot hold. Then one part
/// per source namespace, the cluster-scoped objects with the first.
fn parts(component: &str, version: &str) -> Vec<Vec<DynamicObject>> {
    let objects = bundle::load(&manifests_dir(), component, version)
        .expect("bundle")
        .objects();
    let mut keys = std::collections::BTreeSet::new();
    let clash = objects
        .iter()
        .filter(|o| o.metadata.namespace.is_some())
        .any(|o| !keys.insert((kinds::kind(o).to_string(), o.name_any())));
    if !clash {
        return vec![objects];
    }
    let mut by_namespace: std::collections::BTreeMap<String, Vec<DynamicObject>> =
        std::collections::BTreeMap::new();
    // Each part goes into a test namespace: the bundle's own Namespace
    // objects would be made beside it and left behind (never deleted).
    for o in objects
        .into_iter()
        .filter(|o| kinds::kind(o) != "Namespace")
    {
        let ns = o.metadata.namespace.clone().unwrap_or_default();
        by_namespace.entry(ns).or_default().push(o);
    }
    let mut parts: Vec<Vec<DynamicObject>> = by_namespace.into_values().collect();
    // "" (cluster-scoped) sorts first: those join the first namespace's part.
    if parts.len() > 1 && parts[0].iter().all(|o| o.metadata.namespace.is_none()) {
        let cluster = parts.remove(0);
        parts[0].extend(cluster);
    }
    parts
}

/// A field the operator set and no longer wants leaves the object: the
/// object returns to the bundle's value.
#[tokio::test]
async fn a_field_set_and_then_removed_leaves_the_object() {
    let client = client().await;
    let _g = serial().await;
    clear_leftovers(&client).await;
    install_crds(&client).await;
    let ns = TestNamespace::new(&client, "lib-removal").await;
    let _: Training = parent(&client, &ns.name, kubeflow_e2e::component::TRAINING_CR).await;
    let engine = Engine::new(client.clone(), MANAGER);
    let plain = rendered("training", "v1.9.2", &ns.name);
    let mut edited = plain.clone();
    let toleration: k8s_openapi::api::core::v1::Toleration =
        serde_json::from_value(serde_json::json!({"key": "gpu", "operator": "Exists"}))
            .expect("toleration");
    transform::set_scheduling(
        &mut edited,
        &["training-operator"],
        None,
        Some(&vec![toleration]),
    );
    let resources: k8s_openapi::api::core::v1::ResourceRequirements =
        serde_json::from_value(serde_json::json!({"limits": {"memory": "1024Mi"}}))
            .expect("resources");
    transform::set_resources(&mut edited, &["training-operator"], &[], &resources);
    transform::set_replicas(&mut edited, &["training-operator"], 2);

    apply::<Training>(&engine, &client, "kubeflow", &ns.name, edited.clone())
        .await
        .expect("apply with the fields");
    let again = apply::<Training>(&engine, &client, "kubeflow", &ns.name, edited)
        .await
        .expect("again");
    assert!(
        again.written.is_empty(),
        "1024Mi is stored as 1Gi: {:?}",
        again.why
    );
    let deployments: Api<k8s_openapi::api::apps::v1::Deployment> =
        Api::namespaced(client.clone(), &ns.name);
    let pod = |d: &k8s_openapi::api::apps::v1::Deployment| {
        d.spec
            .as_ref()
            .and_then(|s| s.template.spec.clone())
            .expect("pod spec")
    };
    let d = deployments
        .get("training-operator")
        .await
        .expect("deployment");
    assert_eq!(d.spec.as_ref().and_then(|s| s.replicas), Some(2));
    assert!(pod(&d).tolerations.is_some_and(|t| t.len() == 1));

    let removed = apply::<Training>(&engine, &client, "kubeflow", &ns.name, plain)
        .await
        .expect("apply without them");
    assert_eq!(removed.written.len(), 1, "{:?}", removed.why);
    assert!(
        removed.why.values().all(|w| w.starts_with("unwanted")),
        "{:?}",
        removed.why
    );
    let d = deployments
        .get("training-operator")
        .await
        .expect("deployment");
    let p = pod(&d);
    assert!(
        p.tolerations.is_none_or(|t| t.is_empty()),
        "tolerations removed"
    );
    assert!(
        p.containers[0]
            .resources
            .as_ref()
            .and_then(|r| r.limits.as_ref())
            .is_none_or(|l| !l.contains_key("memory")),
        "the memory limit is removed"
    );
    // The bundle states no replicas: the server's default.
    assert_eq!(d.spec.as_ref().and_then(|s| s.replicas), Some(1));
    cleanup_all::<Training>(&engine, &client, &ns.name).await;
    ns.delete().await;
}

/// An engine reading through the watches' index: what the watches show
/// unchanged since the engine verified it is not read again; an object
/// deleted or edited is read, and put back; the others stay unread.
#[tokio::test]
async fn with_the_watch_index_only_what_changed_is_read() {
    use futures::StreamExt;
    use kube::runtime::watcher;
    use kubeflow_operator::engine::apply::ObjectKey;
    use kubeflow_operator::engine::live_index::LiveIndexBuilder;

    let client = client().await;
    let _g = serial().await;
    clear_leftovers(&client).await;
    install_crds(&client).await;
    let ns = TestNamespace::new(&client, "lib-index").await;
    let _: Pipelines = parent(&client, &ns.name, "apiVersion: components.kubeflow.org/v1alpha1\nkind: Pipelines\nmetadata: {name: kubeflow}\nspec: {version: 2.15.0}\n").await;
    let objects: Vec<DynamicObject> = (0..4)
        .map(|i| {
            serde_json::from_value(serde_json::json!({
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": format!("indexed-{i}"), "namespace": ns.name},
                "data": {"k": "v"}
            }))
            .expect("configmap")
        })
        .collect();
    // The watch the operator runs for the kind, selecting the inventory's component.
    let mut index = LiveIndexBuilder::default();
    let resource = ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(&());
    let config = watcher::Config::default().labels(&format!("{}=test", labels::COMPONENT));
    let stream = index.watch(
        &client,
        &resource,
        Some(&ns.name),
        None,
        config,
        "configmaps".into(),
    );
    let mut relisted = index.relisted();
    let watching = tokio::spawn(stream.for_each(|_| futures::future::ready(())));
    let index = index.build();
    let engine = Engine::new(client.clone(), MANAGER).with_index(index.clone());

    let first = apply::<Pipelines>(&engine, &client, "kubeflow", &ns.name, objects.clone())
        .await
        .expect("first apply");
    assert_eq!(first.created.len(), 4);
    assert!(first.unread.is_empty(), "nothing was verified before");
    // In name order: the outcome lists objects in the order their writes ended.
    let mut keys: Vec<ObjectKey> = first.live.iter().map(ObjectKey::of).collect();
    keys.sort();
    let versions: BTreeMap<String, String> = first
        .live
        .iter()
        .map(|o| (o.name_any(), o.resource_version().unwrap_or_default()))
        .collect();
    wait_for(
        "the index to see the applied objects",
        Duration::from_secs(10),
        || async {
            keys.iter()
                .all(|k| index.resource_version(k).as_ref() == versions.get(&k.name))
                .then_some(())
        },
    )
    .await;
    // A watch started with the operator owes nothing for its first list
    // (the first reconciles read what it did not hold yet).
    assert!(
        tokio::time::timeout(Duration::from_millis(500), relisted.next())
            .await
            .is_err(),
        "a first list at start asked for a reconcile of every CR"
    );

    let again = apply::<Pipelines>(&engine, &client, "kubeflow", &ns.name, objects.clone())
        .await
        .expect("again");
    assert_eq!(again.unread.len(), 4, "all four are known unchanged");
    assert!(again.written.is_empty());

    // One deleted, one edited by another field manager.
    let cms: Api<k8s_openapi::api::core::v1::ConfigMap> = Api::namespaced(client.clone(), &ns.name);
    cms.delete("indexed-0", &DeleteParams::default())
        .await
        .expect("delete");
    let edit = serde_json::json!({"data": {"k": "edited"}});
    let edited = cms
        .patch("indexed-1", &PatchParams::default(), &Patch::Merge(&edit))
        .await
        .expect("edit");
    let edited_rv = edited.metadata.resource_version.clone();
    wait_for(
        "the index to see both changes",
        Duration::from_secs(10),
        || async {
            (index.resource_version(&keys[0]).is_none()
                && index.resource_version(&keys[1]) == edited_rv)
                .then_some(())
        },
    )
    .await;
    let repaired = apply::<Pipelines>(&engine, &client, "kubeflow", &ns.name, objects)
        .await
        .expect("repair");
    let names = |ks: &[ObjectKey]| ks.iter().map(|k| k.name.clone()).collect::<BTreeSet<_>>();
    assert_eq!(
        names(&repaired.created),
        BTreeSet::from(["indexed-0".to_string()])
    );
    assert_eq!(
        names(&repaired.drifted),
        BTreeSet::from(["indexed-1".to_string()])
    );
    assert_eq!(
        names(&repaired.unread),
        BTreeSet::from(["indexed-2".to_string(), "indexed-3".to_string()])
    );
    let back = cms.get("indexed-1").await.expect("edited one");
    assert_eq!(
        back.data.and_then(|d| d.get("k").cloned()).as_deref(),
        Some("v")
    );
    watching.abort();
    cleanup_all::<Pipelines>(&engine, &client, &ns.name).await;
    ns.delete().await;
}

/// A watch of a kind defined by a CRD starts only once the CRD exists, and
/// then sees the kind's objects; its first list (after the CRs it serves
/// were reconciled) asks for a reconcile of every CR, since an object
/// deleted or relabelled before it is in no event.
#[tokio::test]
async fn a_watch_of_a_custom_kind_starts_once_its_crd_exists() {
    use futures::StreamExt;
    use kube::runtime::watcher;
    use kubeflow_operator::engine::apply::ObjectKey;
    use kubeflow_operator::engine::live_index::LiveIndexBuilder;

    let client = client().await;
    let _g = serial().await;
    let ns = TestNamespace::new(&client, "lib-gate").await;
    let crd_name = "widgets.gate.kubeflow.test";
    let crds: Api<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition> =
        Api::all(client.clone());
    let _ = crds.delete(crd_name, &DeleteParams::default()).await;
    wait_gone(&crds, crd_name, Duration::from_secs(30)).await;
    let resource = ApiResource::from_gvk_with_plural(
        &kube::core::GroupVersionKind::gvk("gate.kubeflow.test", "v1", "Widget"),
        "widgets",
    );
    let mut index = LiveIndexBuilder::default();
    let config = watcher::Config::default().labels("gate=test");
    let stream = index.watch(
        &client,
        &resource,
        Some(&ns.name),
        Some(crd_name),
        config,
        "widgets".into(),
    );
    let mut relisted = index.relisted();
    let watching = tokio::spawn(stream.for_each(|_| futures::future::ready(())));
    let index = index.build();

    apply_yaml(&client, &ns.name, &format!("apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata: {{name: {crd_name}}}\nspec:\n  group: gate.kubeflow.test\n  scope: Namespaced\n  names: {{kind: Widget, plural: widgets, singular: widget, listKind: WidgetList}}\n  versions:\n  - name: v1\n    served: true\n    storage: true\n    schema: {{openAPIV3Schema: {{type: object, x-kubernetes-preserve-unknown-fields: true}}}}\n")).await;
    let widgets: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns.name, &resource);
    let widget: DynamicObject = serde_json::from_value(serde_json::json!({
        "apiVersion": "gate.kubeflow.test/v1", "kind": "Widget",
        "metadata": {"name": "w", "labels": {"gate": "test"}}
    }))
    .expect("widget");
    let created = wait_for("the kind to be served", Duration::from_secs(30), || async {
        widgets.create(&Default::default(), &widget).await.ok()
    })
    .await;
    let key = ObjectKey {
        group_kind: "Widget.gate.kubeflow.test".into(),
        namespace: ns.name.clone(),
        name: "w".into(),
    };
    wait_for(
        "the watch to start and see the widget",
        Duration::from_secs(30),
        || async {
            (index.resource_version(&key) == created.metadata.resource_version).then_some(())
        },
    )
    .await;
    tokio::time::timeout(Duration::from_secs(10), relisted.next())
        .await
        .expect("the late watch's list asks for a reconcile of every CR")
        .expect("the signal stream is open");
    watching.abort();
    ns.delete().await;
    let _ = crds.delete(crd_name, &DeleteParams::default()).await;
}
