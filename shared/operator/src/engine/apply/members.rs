//! The inventory as the API server holds it: the parent's ApplySet
//! annotations, its live members (listed per allowed namespace), and the
//! kinds they are of.

use std::collections::BTreeSet;

use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams};
use kube::discovery;
use serde_json::json;

use super::{ApplyError, ApplyRequest, Engine, describe};
use crate::base::labels;
use crate::engine::discovery::Resolved;
use crate::engine::inventory::Inventory;

impl Engine {
    /// Writes the ApplySet id label and group-kinds annotation on the parent, when they differ.
    pub(super) async fn write_parent(
        &self,
        req: &ApplyRequest<'_>,
        group_kinds: &BTreeSet<String>,
    ) -> Result<(), ApplyError> {
        let joined = group_kinds.iter().cloned().collect::<Vec<_>>().join(",");
        let tooling = format!("{}/{}", self.manager, env!("CARGO_PKG_VERSION"));
        if req.parent_annotations.get(labels::APPLYSET_GROUP_KINDS) == Some(&joined)
            && req.parent_labels.get(labels::APPLYSET_ID) == Some(&req.inventory.id)
            && req.parent_annotations.get(labels::APPLYSET_TOOLING) == Some(&tooling)
        {
            return Ok(());
        }
        let api: Api<DynamicObject> = Api::namespaced_with(
            self.client.clone(),
            &req.inventory.parent_namespace,
            req.parent_resource,
        );
        let patch = json!({"metadata": {
            "labels": {labels::APPLYSET_ID: req.inventory.id},
            "annotations": {labels::APPLYSET_GROUP_KINDS: joined, labels::APPLYSET_TOOLING: tooling},
        }});
        api.patch(
            &req.inventory.parent_name,
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await
        .map_err(|source| ApplyError::Api {
            verb: "label",
            object: req.inventory.parent_ref(),
            source,
        })?;
        Ok(())
    }

    /// Every live member of the inventory among the given group-kinds.
    pub async fn list_members(
        &self,
        inv: &Inventory,
        group_kinds: &BTreeSet<String>,
    ) -> Result<Vec<Member>, ApplyError> {
        self.list_members_but(inv, group_kinds, None).await
    }

    /// Every live member, as [`Engine::list_members`], except in `ungranted`
    /// when the operator may no longer list there: the parent's own
    /// namespace while it is deleted with its parent (the namespace
    /// controller has removed the operator's Role first). What is there has
    /// the parent as owner, so garbage collection removes it either way.
    pub async fn list_members_but(
        &self,
        inv: &Inventory,
        group_kinds: &BTreeSet<String>,
        ungranted: Option<&str>,
    ) -> Result<Vec<Member>, ApplyError> {
        let mut out = Vec::new();
        for gk in group_kinds {
            let Some(resolved) = self.resolve_group_kind(gk).await? else {
                continue;
            };
            let apis: Vec<(Option<&str>, Api<DynamicObject>)> = match self.scope.namespaces() {
                // Tenant access lives outside the allowed namespaces.
                Some(namespaces) if resolved.namespaced && !self.scope.lists_everywhere(gk) => {
                    namespaces
                        .iter()
                        .map(|ns| {
                            (
                                Some(ns.as_str()),
                                Api::namespaced_with(self.client.clone(), ns, &resolved.resource),
                            )
                        })
                        .collect()
                }
                _ => vec![(None, Api::all_with(self.client.clone(), &resolved.resource))],
            };
            for (ns, api) in apis {
                // Metadata only: a prune decides by identity, labels and
                // kind, and a full list of CRDs is megabytes of schema.
                let list = match api
                    .list_metadata(&ListParams::default().labels(&inv.selector()))
                    .await
                {
                    Ok(l) => l,
                    Err(kube::Error::Api(e))
                        if e.code == 403 && ns.is_some() && ns == ungranted =>
                    {
                        tracing::info!(
                            namespace = ns.unwrap_or_default(),
                            kind = %gk,
                            "no right to list in the namespace being deleted; its objects go with it"
                        );
                        continue;
                    }
                    Err(source) => {
                        return Err(ApplyError::Api {
                            verb: "list",
                            object: gk.clone(),
                            source,
                        });
                    }
                };
                out.extend(list.items.into_iter().map(|item| Member {
                    object: DynamicObject {
                        types: Some(kube::api::TypeMeta {
                            api_version: resolved.resource.api_version.clone(),
                            kind: resolved.resource.kind.clone(),
                        }),
                        metadata: item.metadata,
                        data: serde_json::Value::Null,
                    },
                    resolved: resolved.clone(),
                }));
            }
        }
        Ok(out)
    }

    /// Whether an object of `group_kind` ("Kind.group") exists.
    pub async fn exists(
        &self,
        group_kind: &str,
        namespace: &str,
        name: &str,
    ) -> Result<bool, ApplyError> {
        let Some(resolved) = self.resolve_group_kind(group_kind).await? else {
            return Ok(false);
        };
        let ns = (!namespace.is_empty()).then_some(namespace);
        self.api(&resolved, ns)
            .get_opt(name)
            .await
            .map(|o| o.is_some())
            .map_err(|source| ApplyError::Api {
                verb: "get",
                object: format!("{group_kind} {namespace}/{name}"),
                source,
            })
    }

    /// The object of `group_kind` ("Kind.group") `namespace/name`, if it exists.
    pub async fn get_member(
        &self,
        group_kind: &str,
        namespace: &str,
        name: &str,
    ) -> Result<Option<Member>, ApplyError> {
        let Some(resolved) = self.resolve_group_kind(group_kind).await? else {
            return Ok(None);
        };
        let ns = (!namespace.is_empty()).then_some(namespace);
        let object = self
            .api(&resolved, ns)
            .get_opt(name)
            .await
            .map_err(|source| ApplyError::Api {
                verb: "get",
                object: format!("{group_kind} {namespace}/{name}"),
                source,
            })?;
        Ok(object.map(|object| Member { object, resolved }))
    }

    /// Resolves "Kind.group" to the group's preferred version; None when the group is not served.
    async fn resolve_group_kind(&self, gk: &str) -> Result<Option<Resolved>, ApplyError> {
        let (kind, group) = gk.split_once('.').unwrap_or((gk, ""));
        let api_group = match discovery::group(&self.client, group).await {
            Ok(g) => g,
            Err(kube::Error::Discovery(_)) => return Ok(None),
            Err(kube::Error::Api(e)) if e.code == 404 => return Ok(None),
            Err(source) => {
                return Err(ApplyError::Api {
                    verb: "discover",
                    object: gk.to_string(),
                    source,
                });
            }
        };
        // The preferred version first, then any other that serves the kind: a
        // kind need not be served at its group's preferred version.
        let preferred = api_group.preferred_version_or_latest().to_string();
        let mut versions = vec![preferred.clone()];
        versions.extend(
            api_group
                .versions()
                .filter(|v| *v != preferred)
                .map(str::to_string),
        );
        for v in versions {
            if let Some((resource, caps)) = api_group
                .versioned_resources(&v)
                .into_iter()
                .find(|(ar, _)| ar.kind == kind)
            {
                return Ok(Some(Resolved {
                    resource,
                    namespaced: caps.scope == discovery::Scope::Namespaced,
                }));
            }
        }
        Ok(None)
    }

    /// Deletes one member (in the background: dependents go by garbage collection).
    pub async fn delete(&self, member: &Member) -> Result<(), ApplyError> {
        let name = member.object.metadata.name.as_deref().unwrap_or("");
        let api = self.api(
            &member.resolved,
            member.object.metadata.namespace.as_deref(),
        );
        match api.delete(name, &DeleteParams::background()).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
            Err(source) => Err(ApplyError::Api {
                verb: "delete",
                object: describe(&member.object),
                source,
            }),
        }
    }
}

/// A live member of an inventory.
#[derive(Clone, Debug)]
pub struct Member {
    /// The live object.
    pub object: DynamicObject,
    /// Its resolved kind.
    pub resolved: Resolved,
}
