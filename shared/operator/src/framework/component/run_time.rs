//! What a component's programs make at run time (not from its bundle), on
//! the component's removal: the component names each object, the framework
//! deletes it through the engine's cleanup and keeps the list for the log.
//! An operator so never drives the engine itself (`layers.rs` checks).

use std::fmt::Debug;

use k8s_openapi::{ClusterResourceScope, NamespaceResourceScope};
use kube::api::Api;
use kube::{Client, Resource};
use serde::de::DeserializeOwned;

use crate::engine::cleanup;

/// The removal's handle on what the component's programs made at run time:
/// [`Component::cleanup_run_time_objects`](super::Component::cleanup_run_time_objects)
/// deletes through it.
pub struct RunTimeObjects {
    client: Client,
    /// The component resource's own namespace, where its programs run.
    namespace: String,
    /// What was deleted, as `Kind name` or `Kind namespace/name`.
    deleted: Vec<String>,
}

impl RunTimeObjects {
    pub(super) fn new(client: Client, namespace: &str) -> Self {
        Self {
            client,
            namespace: namespace.to_string(),
            deleted: Vec::new(),
        }
    }

    /// What the component deleted.
    pub(super) fn deleted(self) -> Vec<String> {
        self.deleted
    }

    /// Deletes the cluster-scoped `name` of kind `K` if it is there.
    pub async fn delete<K>(&mut self, name: &str) -> Result<(), kube::Error>
    where
        K: Resource<Scope = ClusterResourceScope, DynamicType = ()>
            + Clone
            + DeserializeOwned
            + Debug,
    {
        let api: Api<K> = Api::all(self.client.clone());
        if cleanup::delete_if_present(&api, name).await? {
            self.deleted.push(format!("{} {name}", K::kind(&())));
        }
        Ok(())
    }

    /// Deletes `name` of kind `K` in the component resource's own namespace
    /// if it is there. A refusal there is no failure: it means the
    /// namespace is being deleted, and the object goes with it (see
    /// `cleanup::delete_in_parent_namespace_if_present`).
    pub async fn delete_in_parent_namespace<K>(&mut self, name: &str) -> Result<(), kube::Error>
    where
        K: Resource<Scope = NamespaceResourceScope, DynamicType = ()>
            + Clone
            + DeserializeOwned
            + Debug,
    {
        let api: Api<K> = Api::namespaced(self.client.clone(), &self.namespace);
        if cleanup::delete_in_parent_namespace_if_present(&api, name).await? {
            let kind = K::kind(&());
            self.deleted
                .push(format!("{kind} {}/{name}", self.namespace));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use http::{Request, Response};
    use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
    use k8s_openapi::api::coordination::v1::Lease;
    use k8s_openapi::api::core::v1::Secret;
    use kube::client::Body;
    use serde_json::json;

    use super::*;

    /// A mock API server answering each DELETE by the code its path's last
    /// segment names (`gone`: 404, `refused`: 403, anything else: 200).
    fn mock_api() -> Client {
        let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
        tokio::spawn(async move {
            while let Some((request, send)) = handle.next_request().await {
                assert_eq!(request.method(), "DELETE");
                let code = match request.uri().path().rsplit('/').next() {
                    Some("gone") => 404,
                    Some("refused") => 403,
                    _ => 200,
                };
                let body = if code == 200 {
                    json!({"kind": "Status", "apiVersion": "v1", "status": "Success"})
                } else {
                    json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                        "reason": "NotFound", "code": code, "message": "no"})
                };
                let response = Response::builder()
                    .status(code)
                    .body(Body::from(serde_json::to_vec(&body).expect("json")))
                    .expect("response");
                send.send_response(response);
            }
        });
        Client::new(service, "default")
    }

    #[tokio::test]
    async fn lists_what_it_deleted_and_passes_over_what_is_gone_or_refused() {
        let mut objects = RunTimeObjects::new(mock_api(), "kubeflow");
        objects
            .delete::<MutatingWebhookConfiguration>("cache-webhook-kubeflow")
            .await
            .expect("deleted");
        objects
            .delete::<MutatingWebhookConfiguration>("gone")
            .await
            .expect("absent is no failure");
        objects
            .delete_in_parent_namespace::<Secret>("cert")
            .await
            .expect("deleted");
        objects
            .delete_in_parent_namespace::<Lease>("refused")
            .await
            .expect("a refusal in the parent's namespace is no failure");
        assert_eq!(
            objects.deleted(),
            [
                "MutatingWebhookConfiguration cache-webhook-kubeflow",
                "Secret kubeflow/cert"
            ]
        );
    }

    #[tokio::test]
    async fn a_refusal_outside_the_parents_namespace_fails() {
        let mut objects = RunTimeObjects::new(mock_api(), "kubeflow");
        let refused = objects
            .delete::<MutatingWebhookConfiguration>("refused")
            .await;
        assert!(matches!(refused, Err(kube::Error::Api(e)) if e.code == 403));
        assert!(objects.deleted().is_empty());
    }
}
