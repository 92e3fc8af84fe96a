//! The claim on a component's cluster scope: one empty ClusterRole, created
//! only if absent, labelled with the inventory that holds it. Two instances
//! of a component racing for the same cluster-scoped objects never each take
//! a part of them: the API server's create is the lock. At rest the claim is
//! read, found ours, and nothing is written.

use std::collections::BTreeMap;

use k8s_openapi::api::rbac::v1::ClusterRole;
use kube::api::Api;

use super::{ApplyError, ApplyRequest, Engine, ObjectKey};
use crate::base::labels;

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
        let name = crate::render::rbac::claim_role(&req.inventory.component);
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
        let Some(live) = self.read_or_create(&api, &role).await? else {
            return Ok(key);
        };
        let labels = live.metadata.labels.clone().unwrap_or_default();
        let holder_gone = match labels.get(labels::APPLYSET_PART_OF) {
            Some(id) if *id != req.inventory.id => {
                let ns = labels
                    .get(labels::OWNER_NAMESPACE)
                    .cloned()
                    .unwrap_or_default();
                let owner = labels.get(labels::OWNER_NAME).cloned().unwrap_or_default();
                self.holder_gone(req, id, &ns, &owner).await?
            }
            _ => false,
        };
        match labels.get(labels::APPLYSET_PART_OF) {
            // Ours. An edit (a label changed, a rule added) is put back like
            // any member's: the claim stays an empty role with its labels.
            Some(id) if *id == req.inventory.id => {
                let drifted = live.rules.as_ref().is_some_and(|r| !r.is_empty())
                    || live.aggregation_rule.is_some()
                    || member_labels.iter().any(|(k, v)| labels.get(k) != Some(v));
                if drifted {
                    self.replace_claim(&api, role, &live, "repair").await?;
                }
                Ok(key)
            }
            Some(_) if !holder_gone => Err(ApplyError::Conflict {
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
            _ => {
                // Released by its last holder, or held by one that no
                // longer exists: take it, on condition nobody changed it
                // since the read (the replace carries its version).
                self.replace_claim(&api, role, &live, "claim").await?;
                Ok(key)
            }
        }
    }

    /// The claim as it is, or None when this call created it (someone
    /// else creating it between the read and the create: theirs, read).
    async fn read_or_create(
        &self,
        api: &Api<ClusterRole>,
        role: &ClusterRole,
    ) -> Result<Option<ClusterRole>, ApplyError> {
        let name = role.metadata.name.clone().unwrap_or_default();
        if let Some(live) = api
            .get_opt(&name)
            .await
            .map_err(|e| failed("read", &name, e))?
        {
            return Ok(Some(live));
        }
        match api.create(&self.post_params(), role).await {
            Ok(_) => Ok(None),
            Err(kube::Error::Api(e)) if e.code == 409 => api
                .get(&name)
                .await
                .map(Some)
                .map_err(|e| failed("read", &name, e)),
            Err(e) => Err(failed("claim", &name, e)),
        }
    }

    /// Writes the claim as `role` over `live`, on condition nobody changed
    /// it since it was read (the replace carries its version).
    async fn replace_claim(
        &self,
        api: &Api<ClusterRole>,
        mut role: ClusterRole,
        live: &ClusterRole,
        what: &'static str,
    ) -> Result<(), ApplyError> {
        let name = role.metadata.name.clone().unwrap_or_default();
        role.metadata.resource_version = live.metadata.resource_version.clone();
        api.replace(&name, &self.post_params(), &role)
            .await
            .map_err(|e| failed(what, &name, e))?;
        Ok(())
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

impl Engine {
    /// The first object another inventory holds, that inventory's parent
    /// still existing: then nothing is applied. A holder that no longer
    /// exists (its finalizer taken off by hand, so its cleanup never ran)
    /// holds nothing, and its objects are adopted: otherwise they would
    /// block every later instance of the component for ever.
    pub(super) async fn live_conflict(
        &self,
        planned: &[super::plan::Planned],
        req: &ApplyRequest<'_>,
    ) -> Result<Option<ApplyError>, ApplyError> {
        let mut gone: BTreeMap<(String, String, String), bool> = BTreeMap::new();
        for p in planned {
            let Some(live) = p.live.as_ref() else {
                continue;
            };
            let Some((id, ns, name)) = crate::engine::inventory::holder(live) else {
                continue;
            };
            if id == req.inventory.id {
                continue;
            }
            let key = (id.clone(), ns.clone(), name.clone());
            let is_gone = match gone.get(&key) {
                Some(g) => *g,
                None => {
                    let g = self.holder_gone(req, &id, &ns, &name).await?;
                    gone.insert(key, g);
                    g
                }
            };
            if !is_gone {
                return Ok(Some(ApplyError::Conflict {
                    object: super::describe(&p.desired),
                    holder: format!("{ns}/{name}"),
                }));
            }
        }
        Ok(None)
    }

    /// Whether the inventory `id` was a parent of this request's kind at
    /// `namespace/name` that no longer exists, or labels that fit no parent
    /// of the project's at all (edited by hand: they hold nothing, and the
    /// object is put back as ours). A holder of another kind is never taken
    /// for gone: this operator cannot tell.
    pub(super) async fn holder_gone(
        &self,
        req: &ApplyRequest<'_>,
        id: &str,
        namespace: &str,
        name: &str,
    ) -> Result<bool, ApplyError> {
        if crate::engine::inventory::forged_holder(id, namespace, name) {
            return Ok(true);
        }
        let r = req.parent_resource;
        if name.is_empty()
            || id != crate::engine::inventory::applyset_id(name, namespace, &r.kind, &r.group)
        {
            return Ok(false);
        }
        let api: Api<kube::api::DynamicObject> =
            Api::namespaced_with(self.client.clone(), namespace, r);
        api.get_metadata_opt(name)
            .await
            .map(|found| found.is_none())
            .map_err(|source| ApplyError::Api {
                verb: "get",
                object: format!("{} {namespace}/{name}", r.kind),
                source,
            })
    }
}
