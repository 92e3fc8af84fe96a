//! Helpers for tests of component CRs: read conditions, wait for Ready.

use std::sync::LazyLock;
use std::time::Duration;

use kube::Client;
use kube::api::{Api, ApiResource, DynamicObject};
use kube::core::GroupVersionKind;
use kubeflow_api::registry;
use serde_json::Value;

use crate::operator::OperatorProcess;
use crate::{TestNamespace, wait_for};

/// The Training resource most tests install: `kubeflow`, at v1.9.2.
pub const TRAINING_CR: &str = "apiVersion: components.kubeflow.org/v1alpha1\nkind: Training\nmetadata: {name: kubeflow}\nspec: {version: v1.9.2}\n";

/// The API of a component kind (`Training`, `Pipelines`, ...) as dynamic objects.
pub fn component_api(client: &Client, ns: &str, kind: &str) -> Api<DynamicObject> {
    Api::namespaced_with(client.clone(), ns, &component_resource(kind))
}

/// Starts `operator`, applies the resource `cr` (one document) into `ns` and
/// waits until it is Ready at its generation: how nearly every component
/// test begins once its namespace holds what the resource needs. Returns the
/// operator (stopped when dropped, so keep it bound), the API of the
/// resource's kind, and the resource as it was when Ready.
pub async fn start_ready(
    client: &Client,
    ns: &str,
    operator: &str,
    cr: &str,
    timeout: Duration,
) -> (OperatorProcess, Api<DynamicObject>, DynamicObject) {
    let op = OperatorProcess::start(operator, &[]);
    let (api, name) = apply_resource(client, ns, cr).await;
    let ready = wait_condition(&api, &name, "Ready", "True", timeout).await;
    (op, api, ready)
}

/// Applies one component resource (`Kubeflow` or a component's, one YAML
/// document) into `ns`; returns the API of its kind and its name, which
/// the test then waits on as it needs.
pub async fn apply_resource(client: &Client, ns: &str, cr: &str) -> (Api<DynamicObject>, String) {
    let applied = crate::apply_yaml(client, ns, cr).await;
    let [resource] = applied.as_slice() else {
        panic!(
            "a component resource is one document, not {}",
            applied.len()
        )
    };
    let kind = resource
        .types
        .as_ref()
        .map(|t| t.kind.as_str())
        .unwrap_or_default();
    let name = resource.metadata.name.clone().unwrap_or_default();
    (component_api(client, ns, kind), name)
}

/// What [`install`] gives a test: its namespace, the operator (stopped when
/// dropped, so keep it bound), the API of the resource's kind, and the
/// resource as it was when Ready.
pub type Installed = (
    TestNamespace,
    OperatorProcess,
    Api<DynamicObject>,
    DynamicObject,
);

/// [`start_ready`] in a new namespace `<prefix>-...`, for a test that needs
/// nothing in it first. Returns the namespace too.
pub async fn install(
    client: &Client,
    prefix: &str,
    operator: &str,
    cr: &str,
    timeout: Duration,
) -> Installed {
    let ns = TestNamespace::new(client, prefix).await;
    let (op, api, ready) = start_ready(client, &ns.name, operator, cr, timeout).await;
    (ns, op, api, ready)
}

/// [`install`] of [`TRAINING_CR`] with its operator: the component most
/// tests of the operators' shared behaviour use.
pub async fn install_training(client: &Client, prefix: &str, timeout: Duration) -> Installed {
    install(
        client,
        prefix,
        "kubeflow-training-operator",
        TRAINING_CR,
        timeout,
    )
    .await
}

/// Waits until condition `type_` of `name`, whatever its generation,
/// satisfies `accept(status, reason, message)`; returns the message. For
/// the refusals and holds a test expects, each named by `what` when the
/// wait times out.
pub async fn wait_condition_where(
    api: &Api<DynamicObject>,
    name: &str,
    type_: &str,
    what: &str,
    timeout: Duration,
    accept: impl Fn(&str, &str, &str) -> bool,
) -> String {
    wait_object(api, name, what, timeout, |obj| {
        let (status, reason, message, _) = condition(obj, type_)?;
        accept(&status, &reason, &message).then_some(message)
    })
    .await
}

/// Waits until `pick` finds what it wants in the resource `name`. A timeout
/// panics naming `what` and showing the resource's last conditions: a
/// timeout alone does not tell a slow install from a refusal.
async fn wait_object<T>(
    api: &Api<DynamicObject>,
    name: &str,
    what: &str,
    timeout: Duration,
    pick: impl Fn(&DynamicObject) -> Option<T>,
) -> T {
    let waited = tokio::time::timeout(
        timeout,
        wait_for(what, timeout + Duration::from_secs(60), || async {
            pick(&api.get(name).await.ok()?)
        }),
    )
    .await;
    match waited {
        Ok(found) => found,
        Err(_) => {
            let last = api
                .get(name)
                .await
                .map(|o| {
                    serde_json::to_string_pretty(
                        o.data.pointer("/status/conditions").unwrap_or(&Value::Null),
                    )
                    .unwrap_or_default()
                })
                .unwrap_or_else(|e| format!("(cannot read it: {e})"));
            panic!("timed out after {timeout:?} waiting for {what}; its conditions: {last}")
        }
    }
}

/// A condition of an object: (status, reason, message, observedGeneration).
pub fn condition(
    obj: &DynamicObject,
    type_: &str,
) -> Option<(String, String, String, Option<i64>)> {
    let cs = obj.data.pointer("/status/conditions")?.as_array()?;
    let c = cs
        .iter()
        .find(|c| c.get("type").and_then(Value::as_str) == Some(type_))?;
    let s = |k: &str| c.get(k).and_then(Value::as_str).unwrap_or("").to_string();
    Some((
        s("status"),
        s("reason"),
        s("message"),
        c.get("observedGeneration").and_then(Value::as_i64),
    ))
}

/// Waits until condition `type_` has `status` at the object's current generation; returns the object.
pub async fn wait_condition(
    api: &Api<DynamicObject>,
    name: &str,
    type_: &str,
    status: &str,
    timeout: Duration,
) -> DynamicObject {
    let what = format!("{name} {type_}={status}");
    wait_object(api, name, &what, timeout, |obj| {
        let (s, _, _, g) = condition(obj, type_)?;
        (s == status && g == obj.metadata.generation).then(|| obj.clone())
    })
    .await
}

/// Waits until the resource `kubeflow` is Degraded (`True`) for `reason`,
/// with a message naming `mentions`; returns the message. A refusal is
/// told this way while the last good state stays in place.
pub async fn wait_degraded(
    api: &Api<DynamicObject>,
    reason: &str,
    mentions: &str,
    timeout: Duration,
) -> String {
    let what = format!("kubeflow Degraded for {reason}, naming {mentions:?}");
    wait_condition_where(api, "kubeflow", "Degraded", &what, timeout, |s, r, m| {
        s == "True" && r == reason && m.contains(mentions)
    })
    .await
}

/// Waits until the resource `kubeflow` is not Ready (`False`) for
/// `reason`; returns the message.
pub async fn wait_not_ready(api: &Api<DynamicObject>, reason: &str, timeout: Duration) -> String {
    let what = format!("kubeflow Ready=False for {reason}");
    wait_condition_where(api, "kubeflow", "Ready", &what, timeout, |s, r, _| {
        s == "False" && r == reason
    })
    .await
}

/// Waits until the resource `kubeflow` is Degraded at its generation and
/// returns that condition's (reason, message): for a test that then
/// checks both, whatever the reason was while it waited.
pub async fn degraded(api: &Api<DynamicObject>, timeout: Duration) -> (String, String) {
    let cr = wait_condition(api, "kubeflow", "Degraded", "True", timeout).await;
    let (_, reason, message, _) = condition(&cr, "Degraded").expect("Degraded");
    (reason, message)
}

/// Removes what earlier, failed runs left of these components: every CR of
/// the kinds (finalizers dropped, since their operator is gone) and every
/// cluster-scoped object labelled with the components. Kept CRDs only lose the
/// labels. Tests call it first, under the serial lock.
pub async fn sweep(client: &Client, kinds: &[&str], components: &[&str]) {
    use k8s_openapi::api::admissionregistration::v1::{
        MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
    };
    use k8s_openapi::api::core::v1::Namespace;
    use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    use kube::api::{DeleteParams, ListParams, Patch, PatchParams};

    for kind in kinds {
        let all: Api<DynamicObject> = Api::all_with(client.clone(), &component_resource(kind));
        let Ok(list) = all.list(&ListParams::default()).await else {
            continue;
        };
        for cr in list.items {
            let (Some(ns), Some(name)) = (cr.metadata.namespace.clone(), cr.metadata.name.clone())
            else {
                continue;
            };
            let api = component_api(client, &ns, kind);
            let _ = api
                .patch(
                    &name,
                    &PatchParams::default(),
                    &Patch::Merge(serde_json::json!({"metadata": {"finalizers": null}})),
                )
                .await;
            let _ = api.delete(&name, &DeleteParams::background()).await;
        }
    }
    if components.is_empty() {
        return;
    }
    // One pass for every component: one list of the CRDs (with their
    // schemas, a few MB: listed once, not once per component), one label
    // selector naming all the components, and the deletions side by side.
    let lp = ListParams::default().labels(&format!(
        "components.kubeflow.org/component in ({})",
        components.join(",")
    ));
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    // Kept CRDs may have lost their labels already: look at every one.
    let all_crds = crds
        .list(&ListParams::default())
        .await
        .map(|l| l.items)
        .unwrap_or_default();
    futures::future::join_all(
        all_crds
            .iter()
            .map(|crd| sweep_cluster_custom_objects(client, crd, &lp)),
    )
    .await;
    let labelled = |crd: &CustomResourceDefinition| {
        crd.metadata
            .labels
            .as_ref()
            .and_then(|l| l.get("components.kubeflow.org/component"))
            .is_some_and(|c| components.contains(&c.as_str()))
    };
    futures::future::join_all(all_crds.iter().filter(|c| labelled(c)).map(|crd| {
        let strip = serde_json::json!({"metadata": {"labels": {
            "applyset.kubernetes.io/part-of": null, "components.kubeflow.org/component": null,
            "components.kubeflow.org/owner-name": null, "components.kubeflow.org/owner-namespace": null}}});
        let crds = crds.clone();
        let name = crd.metadata.name.clone().unwrap_or_default();
        async move {
            let _ = crds
                .patch(&name, &PatchParams::default(), &Patch::Merge(strip))
                .await;
        }
    }))
    .await;
    let dp = DeleteParams::background();
    let (roles, bindings, mutating, validating, priorities) = (
        Api::<ClusterRole>::all(client.clone()),
        Api::<ClusterRoleBinding>::all(client.clone()),
        Api::<MutatingWebhookConfiguration>::all(client.clone()),
        Api::<ValidatingWebhookConfiguration>::all(client.clone()),
        Api::<k8s_openapi::api::scheduling::v1::PriorityClass>::all(client.clone()),
    );
    let _ = tokio::join!(
        roles.delete_collection(&dp, &lp),
        bindings.delete_collection(&dp, &lp),
        mutating.delete_collection(&dp, &lp),
        validating.delete_collection(&dp, &lp),
        priorities.delete_collection(&dp, &lp),
    );
    let namespaces: Api<Namespace> = Api::all(client.clone());
    if let Ok(list) = namespaces.list(&lp).await {
        futures::future::join_all(list.items.iter().map(|n| {
            let name = n.metadata.name.clone().unwrap_or_default();
            let namespaces = namespaces.clone();
            let dp = dp.clone();
            async move {
                let _ = namespaces.delete(&name, &dp).await;
            }
        }))
        .await;
    }
    // CRDs of other projects that a component's tests must start without.
    let unheld_crds: Vec<String> = all_crds
        .iter()
        .filter(|crd| {
            let group = &crd.spec.group;
            let labels = crd.metadata.labels.as_ref();
            // cert-manager CRDs another test left (the library tests apply
            // every bundle under a manager of their own) would look like a
            // cert-manager the project did not install, and the CertManager
            // operator would rightly install only the issuer beside it.
            let foreign_cert_manager = components.contains(&"cert-manager")
                && group.ends_with("cert-manager.io")
                && labels
                    .and_then(|l| l.get("app.kubernetes.io/managed-by"))
                    .is_none_or(|m| m != "kubeflow-cert-manager-operator");
            // Knative's and KServe's CRDs another test kept (the upgrade test
            // leaves KServe v0.18.0's, whose stored versions an older KServe
            // cannot take; Knative's make Serverless look installed) belong
            // to no inventory, or to one of these components' that this
            // sweep just released (CI: the demo's 26.03.1 left KServe
            // v0.18.0's labelled, and a later v0.16.0 test met them): the
            // Serving tests start without them.
            // Knative's go whoever holds them: a test that leaves a whole
            // install behind (CI: pods.rs, before serving.rs in one group)
            // leaves them in the Knative component's live inventory, and
            // Serverless would look installed.
            let stray_serving = components.contains(&"serving")
                && (group.ends_with("knative.dev")
                    || (group == "serving.kserve.io"
                        && (labelled(crd)
                            || !labels.is_some_and(|l| {
                                l.contains_key("applyset.kubernetes.io/part-of")
                            }))));
            foreign_cert_manager || stray_serving
        })
        .filter_map(|crd| crd.metadata.name.clone())
        .collect();
    // Namespaces are released, not deleted, by a cleanup; after a test
    // that stopped half-way, the namespace a component keeps for itself
    // (Istio's, cert-manager's) may still hold another instance's
    // objects. Every test of such a component starts without it.
    let own: Vec<&str> = components
        .iter()
        .flat_map(|c| own_namespaces(c).iter().copied())
        .collect();
    futures::future::join_all(unheld_crds.iter().map(|name| {
        let crds = crds.clone();
        async move {
            let _ = crds.delete(name, &DeleteParams::background()).await;
            wait_gone(&crds, name, CRD_DELETION_TIMEOUT).await;
        }
    }))
    .await;
    futures::future::join_all(own.iter().map(|own| {
        let namespaces = namespaces.clone();
        let dp = dp.clone();
        async move {
            let _ = namespaces.delete(own, &dp).await;
            crate::wait::wait_for(
                &format!("{own} to be deleted"),
                std::time::Duration::from_secs(120),
                || async {
                    match namespaces.get_opt(own).await {
                        Ok(None) => Some(()),
                        _ => None,
                    }
                },
            )
            .await;
        }
    }))
    .await;
}

/// Deletes the component's objects of a cluster-scoped custom kind (Trainer's
/// ClusterTrainingRuntimes, KServe's ClusterServingRuntimes): no namespace
/// deletion takes them.
async fn sweep_cluster_custom_objects(
    client: &Client,
    crd: &k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
    lp: &kube::api::ListParams,
) {
    if crd.spec.scope != "Cluster" {
        return;
    }
    let Some(version) = crd.spec.versions.iter().find(|v| v.storage) else {
        return;
    };
    let ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(&crd.spec.group, &version.name, &crd.spec.names.kind),
        &crd.spec.names.plural,
    );
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &ar);
    let _ = api
        .delete_collection(&kube::api::DeleteParams::background(), lp)
        .await;
}

/// Deletes every CRD whose group ends with `group_suffix` (e.g.
/// "cert-manager.io"), with their objects, and waits until they are gone:
/// for a test that needs a cluster without that project, whatever earlier
/// tests kept.
pub async fn delete_crds_of(client: &Client, group_suffix: &str) {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let all = crds
        .list(&kube::api::ListParams::default())
        .await
        .map(|l| l.items)
        .unwrap_or_default();
    for crd in all
        .into_iter()
        .filter(|c| c.spec.group.ends_with(group_suffix))
    {
        let name = crd.metadata.name.clone().unwrap_or_default();
        let _ = crds
            .delete(&name, &kube::api::DeleteParams::default())
            .await;
        wait_gone(&crds, &name, CRD_DELETION_TIMEOUT).await;
    }
}

/// The API resource of one of the project's kinds: `Kubeflow`, or a
/// component kind the registry names (its plural from there).
pub fn component_resource(kind: &str) -> ApiResource {
    let (group, plural) = match kubeflow_api::registry::COMPONENTS
        .iter()
        .find(|c| c.kind == kind)
    {
        Some(c) => ("components.kubeflow.org", c.plural),
        None if kind == "Kubeflow" => ("platform.kubeflow.org", "kubeflows"),
        None => panic!("{kind} is neither Kubeflow nor a component kind of the registry"),
    };
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, "v1alpha1", kind), plural)
}

/// The namespaces a component installs into whatever its CR's namespace
/// (upstream's fixed ones), which the chart creates: Istio's, cert-manager's,
/// and the login's (dex in `auth`, oauth2-proxy in `oauth2-proxy`).
pub const OWN_NAMESPACES: &[(&str, &[&str])] = &[
    ("istio", &["istio-system"]),
    ("cert-manager", &["cert-manager"]),
    ("auth", &["auth", "oauth2-proxy"]),
    ("knative", &["knative-serving", "knative-eventing"]),
];

/// The bundle folders an operator's image carries (as `images/build` and
/// `images/fetch-bundles` copy them): its component's, but for Auth (dex
/// and oauth2-proxy) and the Dashboard (also the platform glue's roles).
pub fn bundle_folders_of(component: &str) -> Vec<&str> {
    match component {
        "auth" => vec!["dex", "oauth2-proxy"],
        "dashboard" => vec!["dashboard", "platform"],
        "knative" => vec!["knative", "platform"],
        c => vec![c],
    }
}

/// The chart's default `allowedNamespaces`, which it creates: Kubeflow's
/// and every component's own.
pub fn chart_namespaces() -> Vec<&'static str> {
    std::iter::once("kubeflow")
        .chain(all_own_namespaces())
        .collect()
}

/// The namespaces `component` keeps for itself.
pub fn own_namespaces(component: &str) -> &'static [&'static str] {
    OWN_NAMESPACES
        .iter()
        .find(|(c, _)| *c == component)
        .map(|(_, n)| *n)
        .unwrap_or_default()
}

/// Every component's own namespaces.
pub fn all_own_namespaces() -> impl Iterator<Item = &'static str> {
    OWN_NAMESPACES.iter().flat_map(|(_, n)| n.iter().copied())
}

/// Every kind of the project, for tests that sweep them all: the
/// `Kubeflow` kind and the component registry's.
pub static ALL_KINDS: LazyLock<Vec<&'static str>> = LazyLock::new(|| {
    std::iter::once("Kubeflow")
        .chain(registry::COMPONENTS.iter().map(|c| c.kind))
        .collect()
});
/// Every component label value, for tests that sweep them all.
pub static ALL_COMPONENTS: LazyLock<Vec<&'static str>> = LazyLock::new(|| {
    std::iter::once("kubeflow")
        .chain(registry::COMPONENTS.iter().map(|c| c.name))
        .collect()
});

/// How long a test waits for a whole release's removal: the components go
/// in waves (dependents first), each in several passes (webhooks after
/// what they admit, aggregated roles after their sources). On an idle
/// cluster it takes under a minute; on the loaded two-core CI machine, with
/// two control planes side by side, it took over two. A test of the
/// removal's own behaviour says so with its own limit; the others only
/// leave nothing behind.
pub const REMOVAL_TIMEOUT: Duration = Duration::from_secs(300);

/// How long a test waits for a CRD it deleted to be gone: the API server
/// first deletes every object of its kind. Seconds on an idle cluster; one
/// of KServe's 780 KB CRDs took over 60 s in CI (two control planes on two
/// cores).
pub const CRD_DELETION_TIMEOUT: Duration = Duration::from_secs(180);

/// Waits until the named object no longer exists.
pub async fn wait_gone<K>(api: &Api<K>, name: &str, timeout: Duration)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    wait_for(&format!("{name} to be deleted"), timeout, || async {
        api.get_opt(name).await.ok()?.is_none().then_some(())
    })
    .await;
}

/// Deletes a CR and waits until it is gone (its finalizer done).
pub async fn delete_and_wait(api: &Api<DynamicObject>, name: &str, timeout: Duration) {
    api.delete(name, &kube::api::DeleteParams::default())
        .await
        .unwrap_or_else(|e| panic!("cannot delete {name}: {e}"));
    wait_gone(api, name, timeout).await;
}

/// The start every operator test shares: a client, the serial lock, the
/// project's CRDs installed, and earlier runs' leftovers of these kinds swept.
pub async fn prepare(kinds: &[&str], components: &[&str]) -> (Client, crate::Serial) {
    let client = crate::client().await;
    let guard = crate::serial().await;
    crate::install_crds(&client).await;
    sweep(&client, kinds, components).await;
    (client, guard)
}

/// Merge-patches a CR's fields (a user's `kubectl patch --type merge`).
pub async fn merge(
    api: &Api<DynamicObject>,
    name: &str,
    patch: serde_json::Value,
) -> DynamicObject {
    api.patch(
        name,
        &kube::api::PatchParams::default(),
        &kube::api::Patch::Merge(&patch),
    )
    .await
    .unwrap_or_else(|e| panic!("cannot patch {name}: {e}"))
}

/// Waits until the `Kubeflow` CR `name` is Ready at its current generation
/// and reports `version` reached; returns it.
pub async fn ready_at(
    api: &Api<DynamicObject>,
    name: &str,
    version: &str,
    timeout: Duration,
) -> DynamicObject {
    let wanted = Value::from(version);
    let start = std::time::Instant::now();
    loop {
        let cr = api.get(name).await.ok();
        if let Some(cr) = &cr
            && let Some((status, _, _, generation)) = condition(cr, "Ready")
            && status == "True"
            && generation == cr.metadata.generation
            && cr.data.pointer("/status/version") == Some(&wanted)
        {
            return cr.clone();
        }
        // A timeout says where the resource stood: which condition held
        // it, not only that it was not Ready.
        assert!(
            start.elapsed() <= timeout,
            "timed out after {timeout:?} waiting for {name} Ready at {version}; its status: {}",
            cr.and_then(|c| c.data.get("status").map(Value::to_string))
                .unwrap_or_else(|| "(not read)".to_string())
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// The `status.foreignFields` entry of `manager` on the CR `name`, once
/// there is one (None until then).
pub async fn foreign_entry(
    api: &Api<DynamicObject>,
    name: &str,
    manager: &str,
) -> Option<serde_json::Value> {
    let cr = api.get(name).await.ok()?;
    cr.data["status"]["foreignFields"]
        .as_array()?
        .iter()
        .find(|e| e["manager"] == manager)
        .cloned()
}

/// Waits until the CRD `name` is Established.
pub async fn wait_established(client: &Client, name: &str, timeout: Duration) {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    crate::wait_for(&format!("{name} established"), timeout, || async {
        crds.get(name)
            .await
            .ok()?
            .status?
            .conditions?
            .iter()
            .any(|c| c.type_ == "Established" && c.status == "True")
            .then_some(())
    })
    .await;
}

/// The CRDs of an upstream bundle file (what another component would have
/// installed: the kinds a component's bundle uses), created if absent.
pub async fn install_bundle_crds(client: &Client, file: &str) {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let params = kube::api::PatchParams::apply("e2e-prerequisites").force();
    for obj in crate::parse_yaml(&crate::bundle_text(file))
        .into_iter()
        .filter(|o| {
            o.types
                .as_ref()
                .is_some_and(|t| t.kind == "CustomResourceDefinition")
        })
    {
        let name = kube::ResourceExt::name_any(&obj);
        if crds.get_opt(&name).await.expect("get crd").is_some() {
            continue;
        }
        crds.patch(&name, &params, &kube::api::Patch::Apply(&obj))
            .await
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        wait_established(client, &name, Duration::from_secs(90)).await;
    }
}

/// Waits until the component CR `name` is Ready at its current generation
/// and reports `version`: an upgrade finished.
pub async fn wait_version_ready(
    api: &Api<DynamicObject>,
    name: &str,
    version: &str,
    timeout: Duration,
) {
    ready_at(api, name, version, timeout).await;
}

/// The cluster's Profiles (`kubeflow.org/v1`), which the Dashboard declares.
pub fn profiles(client: &Client) -> Api<DynamicObject> {
    Api::all_with(
        client.clone(),
        &ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("kubeflow.org", "v1", "Profile"),
            "profiles",
        ),
    )
}

/// The namespace the profile controller makes of a Profile (whose
/// controller is not run in these tests): owned by it, so deleting the
/// Profile deletes the namespace, and labelled as the controller labels it.
pub fn profile_namespace(name: &str, uid: &str) -> k8s_openapi::api::core::v1::Namespace {
    serde_json::from_value(serde_json::json!({"metadata": {
        "name": name,
        "labels": {"app.kubernetes.io/part-of": "kubeflow-profile"},
        "ownerReferences": [{"apiVersion": "kubeflow.org/v1", "kind": "Profile", "name": name,
            "uid": uid, "controller": true, "blockOwnerDeletion": true}],
    }}))
    .expect("namespace")
}

/// The message of the `Retained` Event a component's removal emits for its
/// resource `kubeflow` in `namespace`: the first that contains `marker`
/// (an earlier prune may have emitted one of its own).
pub async fn retained_note(
    client: &Client,
    namespace: &str,
    marker: &str,
    timeout: Duration,
) -> String {
    use k8s_openapi::api::core::v1::Event;
    use kube::api::ListParams;
    let events: Api<Event> = Api::namespaced(client.clone(), namespace);
    crate::wait_for("the Retained Event", timeout, || async {
        events
            .list(&ListParams::default().fields("involvedObject.name=kubeflow"))
            .await
            .ok()?
            .items
            .into_iter()
            .filter(|e| e.reason.as_deref() == Some("Retained"))
            .filter_map(|e| e.message)
            .find(|m| m.contains(marker))
    })
    .await
}
