//! Waits and reads on the plain Kubernetes objects a component makes
//! (Deployments, ConfigMaps, Secrets), which many tests repeat: one place
//! for each, so every test's wait fails with the same kind of message,
//! naming the object and where it looked (the API's resource path, which
//! names the kind and namespace).

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::time::Duration;

use k8s_openapi::ByteString;
use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{Api, ListParams};
use kube::{Client, Resource};
use serde::de::DeserializeOwned;

use crate::wait_for;

/// Waits until the object `name` exists and returns it: for what an
/// operator or its controllers make some time after the resource is Ready.
pub async fn wait_exists<K>(api: &Api<K>, name: &str, timeout: Duration) -> K
where
    K: Resource + Clone + DeserializeOwned + Debug,
{
    let what = format!("{name} in {} to exist", api.resource_url());
    wait_for(&what, timeout, || async {
        api.get_opt(name).await.ok().flatten()
    })
    .await
}

/// Waits until every object of the kind labelled as the component's
/// (`components.kubeflow.org/component=<component>`) is being deleted: a
/// removal has let go of them all, whatever the garbage collector's pace.
pub async fn wait_all_deleting<K>(api: &Api<K>, component: &str, timeout: Duration)
where
    K: Resource + Clone + DeserializeOwned + Debug,
{
    let labels = format!("components.kubeflow.org/component={component}");
    wait_all_deleting_of(api, &ListParams::default().labels(&labels), timeout).await;
}

/// Waits until every object `lp` lists is being deleted.
pub async fn wait_all_deleting_of<K>(api: &Api<K>, lp: &ListParams, timeout: Duration)
where
    K: Resource + Clone + DeserializeOwned + Debug,
{
    let what = listed(api, lp, "to be deleting");
    wait_for(&what, timeout, || async {
        let list = api.list(lp).await.ok()?;
        list.items
            .iter()
            .all(|o| o.meta().deletion_timestamp.is_some())
            .then_some(())
    })
    .await;
}

/// Waits until `lp` lists no object of the kind at all: the removal took
/// every one, not only began to.
pub async fn wait_none_left<K>(api: &Api<K>, lp: &ListParams, timeout: Duration)
where
    K: Resource + Clone + DeserializeOwned + Debug,
{
    let what = listed(api, lp, "to go");
    wait_for(&what, timeout, || async {
        api.list(lp).await.ok()?.items.is_empty().then_some(())
    })
    .await;
}

/// Names what a wait on a list waits for: the objects (the resource path
/// and label selector) and what should become of them.
fn listed<K: Resource>(api: &Api<K>, lp: &ListParams, goal: &str) -> String {
    let selector = lp.label_selector.as_deref().unwrap_or("any label");
    format!("every object of {} ({selector}) {goal}", api.resource_url())
}

/// The image of a Deployment's first container ("" where it has no pod
/// template; a template without containers panics, as indexing does).
pub fn first_image(d: Deployment) -> String {
    d.spec
        .and_then(|s| s.template.spec)
        .and_then(|p| p.containers[0].image.clone())
        .unwrap_or_default()
}

/// The arguments of a Deployment's first container, as [`first_image`].
pub fn first_args(d: Deployment) -> Vec<String> {
    d.spec
        .and_then(|s| s.template.spec)
        .and_then(|p| p.containers[0].args.clone())
        .unwrap_or_default()
}

/// The data of the ConfigMap `name` in `ns`, which must exist (empty where
/// it has none): what a component's bundle configures its workloads with.
pub async fn config_data(client: &Client, ns: &str, name: &str) -> BTreeMap<String, String> {
    let cm: ConfigMap = read(client, ns, name).await;
    cm.data.unwrap_or_default()
}

/// One key of [`config_data`] ("" where it is not set).
pub async fn config_value(client: &Client, ns: &str, name: &str, key: &str) -> String {
    config_data(client, ns, name)
        .await
        .remove(key)
        .unwrap_or_default()
}

/// The data of the Secret `name` in `ns`, which must exist (empty where it
/// has none): the credentials and certificates a component generates.
pub async fn secret_data(client: &Client, ns: &str, name: &str) -> BTreeMap<String, ByteString> {
    let secret: Secret = read(client, ns, name).await;
    secret.data.unwrap_or_default()
}

/// One key of [`secret_data`] as text (None where it is not set).
pub async fn secret_text(client: &Client, ns: &str, name: &str, key: &str) -> Option<String> {
    let bytes = secret_data(client, ns, name).await.remove(key)?;
    Some(String::from_utf8(bytes.0).expect("the Secret's value is text"))
}

/// Whether the object `name` exists now (a failed read fails the test,
/// rather than counting as absent).
pub async fn exists<K>(api: &Api<K>, name: &str) -> bool
where
    K: Resource + Clone + DeserializeOwned + Debug,
{
    api.get_opt(name)
        .await
        .unwrap_or_else(|e| panic!("cannot read {name} in {}: {e}", api.resource_url()))
        .is_some()
}

/// The object `name` of a namespaced kind in `ns`, which must exist: the
/// test fails naming the kind and the object where it cannot be read.
async fn read<K>(client: &Client, ns: &str, name: &str) -> K
where
    K: Resource<Scope = NamespaceResourceScope, DynamicType = ()>
        + Clone
        + DeserializeOwned
        + Debug,
{
    Api::<K>::namespaced(client.clone(), ns)
        .get(name)
        .await
        .unwrap_or_else(|e| panic!("{} {ns}/{name}: {e}", K::kind(&())))
}
