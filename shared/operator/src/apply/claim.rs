//! The claim on a component's cluster scope: one empty ClusterRole, created
//! only if absent, labelled with the inventory that holds it. Two instances
//! of a component racing for the same cluster-scoped objects never each take
//! a part of them: the API server's create is the lock. At rest the claim is
//! read, found ours, and nothing is written.

use std::collections::BTreeMap;

use k8s_openapi::api::rbac::v1::ClusterRole;
use kube::api::Api;

use super::{ApplyError, ApplyRequest, Engine, ObjectKey};
use crate::labels;

/// Group-kind of the claim object.
const CLAIM_GROUP_KIND: &str = "ClusterRole.rbac.authorization.k8s.io";

impl Engine {
    /// Takes (or confirms) the claim on the component's cluster scope: an
    /// empty ClusterRole created only if absent, so exactly one inventory
    /// holds it. Read first: at rest the claim is ours and nothing is written.
    pub(super) async fn claim(
        &self,
        req: &ApplyRequest<'_>,
        member_labels: &BTreeMap<String, String>,
    ) -> Result<ObjectKey, ApplyError> {
        let name = crate::rbac::claim_role(&req.inventory.component);
        let key = ObjectKey {
            group_kind: CLAIM_GROUP_KIND.to_string(),
            namespace: String::new(),
            name: name.clone(),
        };
        let role = ClusterRole {
            metadata: kube::api::ObjectMeta {
                name: Some(name.clone()),
                labels: Some(member_labels.clone()),
                ..Default::default()
            },
            ..Default::default()
        };
        let api: Api<ClusterRole> = Api::all(self.client.clone());
        let live = match api
            .get_opt(&name)
            .await
            .map_err(|e| failed("read", &name, e))?
        {
            Some(live) => live,
            None => match api.create(&self.post_params(), &role).await {
                Ok(_) => return Ok(key),
                // Someone else created it between the read and the create.
                Err(kube::Error::Api(e)) if e.code == 409 => {
                    api.get(&name).await.map_err(|e| failed("read", &name, e))?
                }
                Err(e) => return Err(failed("claim", &name, e)),
            },
        };
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
                // Released by its last holder: take it, on condition nobody
                // changed it since the read (the replace carries its version).
                let mut taken = role;
                taken.metadata.resource_version = live.metadata.resource_version.clone();
                api.replace(&name, &self.post_params(), &taken)
                    .await
                    .map_err(|e| failed("claim", &name, e))?;
                Ok(key)
            }
        }
    }

    fn post_params(&self) -> kube::api::PostParams {
        kube::api::PostParams {
            field_manager: Some(self.manager.clone()),
            ..Default::default()
        }
    }
}

fn failed(verb: &'static str, name: &str, source: kube::Error) -> ApplyError {
    ApplyError::Api {
        verb,
        object: format!("ClusterRole {name}"),
        source,
    }
}
