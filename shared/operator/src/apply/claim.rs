//! The claim on a component's cluster scope: one empty ClusterRole, created
//! only if absent, labelled with the inventory that holds it. Two instances
//! of a component racing for the same cluster-scoped objects never each take
//! a part of them: the API server's create is the lock.

use std::collections::BTreeMap;

use kube::api::Api;

use super::{ApplyError, ApplyRequest, Engine, ObjectKey};
use crate::labels;

/// Group-kind of the claim object.
const CLAIM_GROUP_KIND: &str = "ClusterRole.rbac.authorization.k8s.io";

impl Engine {
    /// Takes (or confirms) the claim on the component's cluster scope: an
    /// empty ClusterRole created only if absent, so exactly one inventory holds it.
    pub(super) async fn claim(
        &self,
        req: &ApplyRequest<'_>,
        member_labels: &BTreeMap<String, String>,
    ) -> Result<ObjectKey, ApplyError> {
        let name = crate::rbac::claim_role(&req.inventory.component);
        let api: Api<k8s_openapi::api::rbac::v1::ClusterRole> = Api::all(self.client.clone());
        let role = k8s_openapi::api::rbac::v1::ClusterRole {
            metadata: kube::api::ObjectMeta {
                name: Some(name.clone()),
                labels: Some(member_labels.clone()),
                ..Default::default()
            },
            ..Default::default()
        };
        let key = ObjectKey {
            group_kind: CLAIM_GROUP_KIND.to_string(),
            namespace: String::new(),
            name: name.clone(),
        };
        let what = || format!("ClusterRole {name}");
        match api
            .create(
                &kube::api::PostParams {
                    field_manager: Some(self.manager.clone()),
                    ..Default::default()
                },
                &role,
            )
            .await
        {
            Ok(_) => return Ok(key),
            Err(kube::Error::Api(e)) if e.code == 409 => {}
            Err(source) => {
                return Err(ApplyError::Api {
                    verb: "claim",
                    object: what(),
                    source,
                });
            }
        }
        let live = api.get(&name).await.map_err(|source| ApplyError::Api {
            verb: "read",
            object: what(),
            source,
        })?;
        let labels = live.metadata.labels.clone().unwrap_or_default();
        match labels.get(labels::APPLYSET_PART_OF) {
            Some(id) if *id == req.inventory.id => Ok(key),
            Some(_) => Err(ApplyError::Conflict {
                object: format!("the cluster-scoped objects of {}", req.inventory.component),
                holder: format!(
                    "{}/{}",
                    labels
                        .get(labels::OWNER_NAMESPACE)
                        .cloned()
                        .unwrap_or_default(),
                    labels.get(labels::OWNER_NAME).cloned().unwrap_or_default()
                ),
            }),
            None => {
                // Released by its last holder: take it, on condition nobody changed it since the read.
                let mut taken = role.clone();
                taken.metadata.resource_version = live.metadata.resource_version.clone();
                api.replace(
                    &name,
                    &kube::api::PostParams {
                        field_manager: Some(self.manager.clone()),
                        ..Default::default()
                    },
                    &taken,
                )
                .await
                .map_err(|source| ApplyError::Api {
                    verb: "claim",
                    object: what(),
                    source,
                })?;
                Ok(key)
            }
        }
    }
}
