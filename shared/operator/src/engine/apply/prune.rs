//! Pruning: inventory members no longer rendered go, except what would take
//! a user's data with it. A CRD is deleted only when the component's policy
//! allows it and no custom resource of it exists; a PersistentVolumeClaim is
//! never deleted by a prune (a store a new version no longer ships, like
//! MinIO in Pipelines 2.15, may hold data to migrate), nor is a Namespace
//! (it holds whatever else lives in it). They are released instead: kept,
//! without the inventory's labels and owner, and reported.

use std::collections::BTreeSet;

use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams};
use serde_json::json;

use super::{ApplyError, ApplyOutcome, ApplyRequest, Engine, Member, ObjectKey, describe};
use crate::base::kinds::{self, kind};
use crate::base::labels;

/// An object a prune kept and let go of, and what to do about it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Released {
    /// `Kind.group` of the object.
    pub group_kind: String,
    /// Its namespace ("" for cluster-scoped objects).
    pub namespace: String,
    /// Its name.
    pub name: String,
    /// Why it was kept and what a person may do.
    pub message: String,
}

impl Engine {
    /// Deletes inventory members not applied this time; keeps retained ones
    /// (returning their group-kinds, which stay in the inventory) and
    /// releases those a prune must not delete.
    pub(super) async fn prune(
        &self,
        req: &ApplyRequest<'_>,
        group_kinds: &BTreeSet<String>,
        applied: &BTreeSet<ObjectKey>,
        outcome: &mut ApplyOutcome,
    ) -> Result<BTreeSet<String>, ApplyError> {
        let mut kept = BTreeSet::new();
        for member in self.list_members(req.inventory, group_kinds).await? {
            if applied.contains(&ObjectKey::of(&member.object)) {
                continue;
            }
            if let Some(message) = self.keep_reason(req, &member).await? {
                self.release(&member).await?;
                outcome.released.push(Released {
                    group_kind: kinds::group_kind(&member.object),
                    namespace: member.object.metadata.namespace.clone().unwrap_or_default(),
                    name: member.object.metadata.name.clone().unwrap_or_default(),
                    message,
                });
                continue;
            }
            if (req.retain)(&member.object) {
                kept.insert(kinds::group_kind(&member.object));
                continue;
            }
            self.delete(&member).await?;
            outcome.pruned.push(ObjectKey::of(&member.object));
        }
        Ok(kept)
    }

    /// Why a member must not be deleted by a prune, if it must not.
    async fn keep_reason(
        &self,
        req: &ApplyRequest<'_>,
        member: &Member,
    ) -> Result<Option<String>, ApplyError> {
        let version = req.version;
        if let Some(message) = req.release_on_prune.and_then(|r| r(&member.object)) {
            return Ok(Some(message));
        }
        Ok(match kind(&member.object) {
            "PersistentVolumeClaim" => Some(format!(
                "version {version} no longer uses this volume; it was kept with its data and released: move what you need from it, then delete it"
            )),
            "Namespace" => Some(format!(
                "version {version} no longer installs this namespace; it was kept with what it holds and released: delete it when it is empty"
            )),
            "CustomResourceDefinition" if !req.delete_crds => Some(format!(
                "version {version} (or the spec) no longer installs this CRD; it was kept with its custom resources (crdPolicy Retain) and released"
            )),
            "CustomResourceDefinition" => self.crd_in_use(&member.object).await?.map(|n| {
                format!(
                    "no longer installed, but {n} custom resources of it exist; it was kept and released: delete them first, then the CRD"
                )
            }),
            _ => None,
        })
    }

    /// Removes the inventory labels and owner from a member that stays, so
    /// it is nobody's.
    pub(crate) async fn release(&self, m: &Member) -> Result<(), ApplyError> {
        let name = m.object.metadata.name.as_deref().unwrap_or("");
        let api: Api<DynamicObject> = match (&m.object.metadata.namespace, m.resolved.namespaced) {
            (Some(ns), true) => {
                Api::namespaced_with(self.client().clone(), ns, &m.resolved.resource)
            }
            _ => Api::all_with(self.client().clone(), &m.resolved.resource),
        };
        let mut remove = serde_json::Map::new();
        for key in [
            labels::APPLYSET_PART_OF,
            labels::OWNER_NAME,
            labels::OWNER_NAMESPACE,
            labels::INSTANCE,
        ] {
            remove.insert(key.to_string(), serde_json::Value::Null);
        }
        let patch = json!({"metadata": {"labels": remove, "ownerReferences": null}});
        api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map_err(|source| ApplyError::Api {
                verb: "release",
                object: describe(&m.object),
                source,
            })?;
        Ok(())
    }

    /// How many custom resources of a CRD exist (None when none do).
    pub(crate) async fn crd_in_use(
        &self,
        crd: &DynamicObject,
    ) -> Result<Option<usize>, ApplyError> {
        // Members are listed as metadata: the CRD's spec is read here, for
        // the few CRDs a prune or cleanup considers.
        let name = crd.metadata.name.as_deref().unwrap_or("");
        let crds: Api<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition> =
            Api::all(self.client().clone());
        let Some(crd) = crds.get_opt(name).await.map_err(|source| ApplyError::Api {
            verb: "get",
            object: describe(crd),
            source,
        })?
        else {
            return Ok(None);
        };
        let Some(version) = crd
            .spec
            .versions
            .iter()
            .find(|v| v.served)
            .map(|v| v.name.as_str())
        else {
            return Ok(None);
        };
        let (group, kind_name) = (crd.spec.group.as_str(), crd.spec.names.kind.as_str());
        let gvk = kube::core::GroupVersionKind::gvk(group, version, kind_name);
        let Ok(resolved) = self.resolver().resolve_gvk(self.client(), &gvk).await else {
            return Ok(None);
        };
        let api: Api<DynamicObject> = Api::all_with(self.client().clone(), &resolved.resource);
        let list = api
            .list_metadata(&ListParams::default().limit(100))
            .await
            .map_err(|source| ApplyError::Api {
                verb: "list",
                object: format!("{kind_name}.{group}"),
                source,
            })?;
        Ok((!list.items.is_empty()).then_some(list.items.len()))
    }
}
