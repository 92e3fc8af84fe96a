//! What a component's programs make at run time (not from its bundle), on
//! the component's removal: the component names each object, the framework
//! deletes it through the engine's cleanup and keeps the list for the log.
//! An operator so never drives the engine itself (`layers.rs` checks).

use kube::Client;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind};

use crate::engine::cleanup;
use crate::render::rbac::{self, Permissions};

/// Where a run-time object lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RunTimeScope {
    /// The component resource's own namespace, where its programs run.
    ResourceNamespace,
    /// Cluster-scoped; `{namespace}` in its name stands for the resource's
    /// namespace (a controller naming its object after where it runs).
    Cluster,
}

/// An object a component's programs make at run time, outside its bundle,
/// named once (`Component::RUN_TIME_OBJECTS`): the operator gets `delete`
/// on exactly that name, and deletes it when the component is removed.
#[derive(Clone, Copy, Debug)]
pub struct RunTimeObject {
    /// API group (empty for the core group).
    pub group: &'static str,
    /// API version.
    pub version: &'static str,
    /// Kind.
    pub kind: &'static str,
    /// Resource (plural), what RBAC names.
    pub plural: &'static str,
    /// Name (see [`RunTimeScope::Cluster`] for `{namespace}`).
    pub name: &'static str,
    /// Where it lives.
    pub scope: RunTimeScope,
}

/// The placeholder a cluster-scoped run-time object's name holds for the
/// resource's namespace (the one `Rules::cluster_per_namespace` fills in).
const NAMESPACE_PLACEHOLDER: &str = "{namespace}";

impl RunTimeObject {
    fn api_resource(&self) -> ApiResource {
        ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk(self.group, self.version, self.kind),
            self.plural,
        )
    }
}

/// `permissions` with `delete` on each run-time object: in the allowed
/// namespaces, or cluster-wide per allowed namespace; one rule per
/// resource, naming each of its objects.
pub(super) fn with_run_time_objects(
    permissions: Permissions,
    objects: &[RunTimeObject],
) -> Permissions {
    let rules = |scope: RunTimeScope| {
        let mut names: std::collections::BTreeMap<(&str, &str), Vec<String>> =
            std::collections::BTreeMap::new();
        for o in objects.iter().filter(|o| o.scope == scope) {
            names
                .entry((o.group, o.plural))
                .or_default()
                .push(o.name.to_string());
        }
        names
            .into_iter()
            .map(|((group, plural), names)| rbac::named(group, plural, &names, &["delete"]))
            .collect::<Vec<_>>()
    };
    permissions
        .with_namespaced(rules(RunTimeScope::ResourceNamespace))
        .with_per_namespace(rules(RunTimeScope::Cluster))
}

/// The removal's handle on what the component's programs made at run time:
/// it deletes each declared object and keeps the list for the log.
pub(super) struct RunTimeObjects {
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

    /// What was deleted.
    pub(super) fn deleted(self) -> Vec<String> {
        self.deleted
    }

    /// Deletes `object` if it is there. In the resource's own namespace a
    /// refusal is no failure: it means the namespace is being deleted, and
    /// the object goes with it (see
    /// `cleanup::delete_in_parent_namespace_if_present`).
    pub(super) async fn delete(&mut self, object: &RunTimeObject) -> Result<(), kube::Error> {
        let ar = object.api_resource();
        match object.scope {
            RunTimeScope::ResourceNamespace => {
                let api: Api<DynamicObject> =
                    Api::namespaced_with(self.client.clone(), &self.namespace, &ar);
                if cleanup::delete_in_parent_namespace_if_present(&api, object.name).await? {
                    self.deleted.push(format!(
                        "{} {}/{}",
                        object.kind, self.namespace, object.name
                    ));
                }
            }
            RunTimeScope::Cluster => {
                let name = object.name.replace(NAMESPACE_PLACEHOLDER, &self.namespace);
                let api: Api<DynamicObject> = Api::all_with(self.client.clone(), &ar);
                if cleanup::delete_if_present(&api, &name).await? {
                    self.deleted.push(format!("{} {name}", object.kind));
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use http::{Request, Response};
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

    const WEBHOOK: RunTimeObject = RunTimeObject {
        group: "admissionregistration.k8s.io",
        version: "v1",
        kind: "MutatingWebhookConfiguration",
        plural: "mutatingwebhookconfigurations",
        name: "run-time-webhook-{namespace}",
        scope: RunTimeScope::Cluster,
    };

    fn in_namespace(kind: &'static str, plural: &'static str, name: &'static str) -> RunTimeObject {
        RunTimeObject {
            group: "",
            version: "v1",
            kind,
            plural,
            name,
            scope: RunTimeScope::ResourceNamespace,
        }
    }

    fn cluster(name: &'static str) -> RunTimeObject {
        RunTimeObject { name, ..WEBHOOK }
    }

    #[tokio::test]
    async fn lists_what_it_deleted_and_passes_over_what_is_gone_or_refused() {
        let mut objects = RunTimeObjects::new(mock_api(), "kubeflow");
        objects.delete(&WEBHOOK).await.expect("deleted");
        objects
            .delete(&cluster("gone"))
            .await
            .expect("absent is no failure");
        objects
            .delete(&in_namespace("Secret", "secrets", "cert"))
            .await
            .expect("deleted");
        objects
            .delete(&in_namespace("Lease", "leases", "refused"))
            .await
            .expect("a refusal in the parent's namespace is no failure");
        assert_eq!(
            objects.deleted(),
            [
                "MutatingWebhookConfiguration run-time-webhook-kubeflow",
                "Secret kubeflow/cert"
            ]
        );
    }

    #[tokio::test]
    async fn a_refusal_outside_the_parents_namespace_fails() {
        let mut objects = RunTimeObjects::new(mock_api(), "kubeflow");
        let refused = objects.delete(&cluster("refused")).await;
        assert!(matches!(refused, Err(kube::Error::Api(e)) if e.code == 403));
        assert!(objects.deleted().is_empty());
    }

    #[test]
    fn each_object_is_deleted_by_name_and_nothing_more() {
        let lease = RunTimeObject {
            group: "coordination.k8s.io",
            version: "v1",
            ..in_namespace("Lease", "leases", "lock")
        };
        let other = RunTimeObject {
            name: "other-lock",
            ..lease
        };
        let p = with_run_time_objects(Permissions::bundles(&["c"]), &[WEBHOOK, lease, other]);
        // One rule per resource, naming each object.
        assert_eq!(
            p.extra_namespaced,
            [rbac::named(
                "coordination.k8s.io",
                "leases",
                &["lock".to_string(), "other-lock".to_string()],
                &["delete"]
            )]
        );
        assert_eq!(
            p.extra_per_namespace,
            [rbac::named(
                "admissionregistration.k8s.io",
                "mutatingwebhookconfigurations",
                &["run-time-webhook-{namespace}".to_string()],
                &["delete"]
            )]
        );
        assert!(p.extra.is_empty());
    }
}
