//! Resolution of kinds to API resources by discovery, cached per group-version-kind.

use std::collections::HashMap;
use std::sync::Mutex;

use kube::Client;
use kube::api::{ApiResource, DynamicObject};
use kube::core::GroupVersionKind;
use kube::discovery::{ApiCapabilities, Scope, pinned_kind};

use crate::base::kinds;

/// A kind resolved by discovery.
#[derive(Clone, Debug)]
pub struct Resolved {
    /// The API resource (plural, version, ...).
    pub resource: ApiResource,
    /// Whether it is namespaced.
    pub namespaced: bool,
}

/// Cache of discovery answers. A kind that is not found is not cached, so a
/// CRD applied a moment ago resolves on the next call.
#[derive(Default)]
pub struct ApiResolver {
    cache: Mutex<HashMap<GroupVersionKind, Resolved>>,
}

impl ApiResolver {
    /// Resolves the kind of an object.
    pub async fn resolve(
        &self,
        client: &Client,
        obj: &DynamicObject,
    ) -> Result<Resolved, kube::Error> {
        let api_version = kinds::api_version(obj);
        let (group, version) = match api_version.rsplit_once('/') {
            Some((g, v)) => (g, v),
            None => ("", api_version),
        };
        self.resolve_gvk(
            client,
            &GroupVersionKind::gvk(group, version, kinds::kind(obj)),
        )
        .await
    }

    /// Resolves a group-version-kind.
    pub async fn resolve_gvk(
        &self,
        client: &Client,
        gvk: &GroupVersionKind,
    ) -> Result<Resolved, kube::Error> {
        if let Some(r) = self.cache.lock().ok().and_then(|c| c.get(gvk).cloned()) {
            return Ok(r);
        }
        let (resource, caps): (ApiResource, ApiCapabilities) = pinned_kind(client, gvk).await?;
        let resolved = Resolved {
            resource,
            namespaced: caps.scope == Scope::Namespaced,
        };
        if let Ok(mut c) = self.cache.lock() {
            c.insert(gvk.clone(), resolved.clone());
        }
        Ok(resolved)
    }
}
