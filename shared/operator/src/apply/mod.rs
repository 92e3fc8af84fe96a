//! The apply engine: server-side apply of a component's objects in a safe
//! order, with ownership checks, no writes in steady state, and pruning of
//! inventory members no longer rendered.

pub mod diff;
mod isolate;
mod prune;

pub use prune::Released;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use futures::{StreamExt, TryStreamExt, stream};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, ListParams, Patch, PatchParams};
use kube::{Client, discovery};
use serde_json::{Value, json};

use crate::discovery::{ApiResolver, Resolved};
use crate::inventory::{self, Inventory};
use crate::kinds::{self, kind};
use crate::labels;

/// Group-kind of the claim object.
const CLAIM_GROUP_KIND: &str = "ClusterRole.rbac.authorization.k8s.io";
/// How many API requests the engine keeps in flight at once.
const CONCURRENCY: usize = 16;
/// How long to wait for an applied CRD to become Established.
const CRD_ESTABLISH_TIMEOUT: Duration = Duration::from_secs(60);

/// Errors of an apply.
#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    /// Another inventory holds an object this one would take over.
    #[error("{object} is held by {holder}; nothing of this component was applied")]
    Conflict {
        /// The object, as "Kind name" or "Kind namespace/name".
        object: String,
        /// Who holds it, as "namespace/name".
        holder: String,
    },
    /// The API server refused an object as invalid (bad input).
    #[error("the API server refused {object}: {message}; nothing of this component was applied")]
    Invalid {
        /// The object.
        object: String,
        /// The server's message.
        message: String,
    },
    /// A request failed.
    #[error("failed to {verb} {object}: {source}")]
    Api {
        /// What was attempted.
        verb: &'static str,
        /// The object.
        object: String,
        /// Cause.
        source: kube::Error,
    },
    /// A CRD did not become Established in time.
    #[error("CustomResourceDefinition {0} did not become Established within {1:?}")]
    CrdNotEstablished(String, Duration),
}

impl ApplyError {
    /// Whether the API server's authorizer refused the request: the
    /// operator's RBAC lacks a permission, which a person must grant. (Not
    /// every 403: writes into a terminating namespace are refused too.)
    pub fn is_permission_denied(&self) -> bool {
        matches!(
            self,
            ApplyError::Api { source: kube::Error::Api(e), .. }
                if e.code == 403 && e.message.contains(" cannot ")
        )
    }

    /// Whether the error is the input's fault (a person must act) rather than a passing failure.
    pub fn is_refusal(&self) -> bool {
        matches!(
            self,
            ApplyError::Conflict { .. } | ApplyError::Invalid { .. }
        )
    }
}

/// What an apply did.
#[derive(Debug, Default)]
pub struct ApplyOutcome {
    /// Live state of every applied object after the apply, for health checks.
    pub live: Vec<DynamicObject>,
    /// Objects written (created or changed).
    pub written: Vec<String>,
    /// Objects that existed but whose fields had drifted from the rendered state.
    pub drifted: Vec<String>,
    /// Why each drifted object was written (see [`diff::write_reason`]).
    pub why: BTreeMap<String, diff::Reason>,
    /// Objects that did not exist.
    pub created: Vec<String>,
    /// Objects pruned because they are no longer rendered.
    pub pruned: Vec<String>,
    /// Objects deleted and created anew because their live state refused
    /// the desired one (see `isolate`).
    pub recreated: Vec<String>,
    /// Objects no longer rendered that a prune keeps and lets go of (a
    /// volume, a CRD): a person decides when they go.
    pub released: Vec<Released>,
    /// Objects left alone because they carry the skip-reconcile annotation.
    pub skipped: Vec<String>,
}

/// A set of objects to bring about for one inventory.
pub struct ApplyRequest<'a> {
    /// The inventory (parent CR and operator).
    pub inventory: &'a Inventory,
    /// API resource of the parent CR.
    pub parent_resource: &'a ApiResource,
    /// The parent's current annotations (for the group-kinds list).
    pub parent_annotations: &'a BTreeMap<String, String>,
    /// The parent's current labels.
    pub parent_labels: &'a BTreeMap<String, String>,
    /// ownerReference for objects in the parent's namespace.
    pub owner: Option<OwnerReference>,
    /// Rendered objects.
    pub objects: Vec<DynamicObject>,
    /// Version label value.
    pub version: &'a str,
    /// Objects never pruned nor owned (garbage collection would take owned
    /// ones): retained CRDs, retained volumes.
    pub retain: &'a (dyn Fn(&DynamicObject) -> bool + Send + Sync),
    /// Whether a CRD no longer rendered may be deleted (the component's
    /// `crdPolicy: Delete`); even then, never while custom resources of it exist.
    pub delete_crds: bool,
}

/// The engine: a client, an operator's field manager and a discovery cache.
#[derive(Clone)]
pub struct Engine {
    client: Client,
    resolver: Arc<ApiResolver>,
    manager: String,
    /// Where members of namespaced kinds are listed: the operator may list
    /// nothing cluster-wide but cluster-scoped kinds.
    scope: crate::scope::NamespaceScope,
}

struct Planned {
    desired: DynamicObject,
    resolved: Option<Resolved>,
    live: Option<DynamicObject>,
}

/// "Kind namespace/name" or "Kind name".
pub fn describe(obj: &DynamicObject) -> String {
    match &obj.metadata.namespace {
        Some(ns) => format!(
            "{} {}/{}",
            kind(obj),
            ns,
            obj.metadata.name.as_deref().unwrap_or("")
        ),
        None => format!(
            "{} {}",
            kind(obj),
            obj.metadata.name.as_deref().unwrap_or("")
        ),
    }
}

fn key(obj: &DynamicObject) -> (String, String, String) {
    (
        kinds::group_kind(obj),
        obj.metadata.namespace.clone().unwrap_or_default(),
        obj.metadata.name.clone().unwrap_or_default(),
    )
}

impl Engine {
    /// An engine writing as `manager`.
    pub fn new(client: Client, manager: &str) -> Self {
        Engine {
            client,
            resolver: Arc::new(ApiResolver::default()),
            manager: manager.to_string(),
            scope: crate::scope::NamespaceScope::all(),
        }
    }

    /// The engine limited to the namespaces of `scope`.
    pub fn within(mut self, scope: crate::scope::NamespaceScope) -> Self {
        self.scope = scope;
        self
    }

    /// The client.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// The discovery cache.
    pub fn resolver(&self) -> &ApiResolver {
        &self.resolver
    }

    fn api(&self, resolved: &Resolved, namespace: Option<&str>) -> Api<DynamicObject> {
        match (resolved.namespaced, namespace) {
            (true, Some(ns)) => Api::namespaced_with(self.client.clone(), ns, &resolved.resource),
            _ => Api::all_with(self.client.clone(), &resolved.resource),
        }
    }

    async fn get_live(
        &self,
        resolved: &Resolved,
        obj: &DynamicObject,
    ) -> Result<Option<DynamicObject>, ApplyError> {
        let name = obj.metadata.name.as_deref().unwrap_or("");
        self.api(resolved, obj.metadata.namespace.as_deref())
            .get_opt(name)
            .await
            .map_err(|source| ApplyError::Api {
                verb: "get",
                object: describe(obj),
                source,
            })
    }

    /// Applies the request: checks ownership, dry-runs what must change,
    /// applies in waves, waits for CRDs, then prunes.
    pub async fn apply(&self, mut req: ApplyRequest<'_>) -> Result<ApplyOutcome, ApplyError> {
        let member_labels = req.inventory.member_labels(req.version);
        let mut objects = std::mem::take(&mut req.objects);
        let cluster_custom = kinds::cluster_scoped_custom_kinds(&objects);
        for obj in objects.iter_mut() {
            drop_foreign_fields(obj);
            diff::as_stored(obj);
            if kinds::is_cluster_scoped(obj, &cluster_custom) {
                obj.metadata.namespace = None;
            }
            obj.metadata
                .labels
                .get_or_insert_with(BTreeMap::new)
                .extend(member_labels.clone());
            let same_ns =
                obj.metadata.namespace.as_deref() == Some(req.inventory.parent_namespace.as_str());
            if same_ns && !(req.retain)(obj) {
                obj.metadata.owner_references = req.owner.clone().map(|o| vec![o]);
            }
        }

        // Resolve and read everything first: a conflict anywhere means nothing is applied.
        let mut planned: Vec<Planned> =
            stream::iter(objects.into_iter().map(|desired| async move {
                // Kinds defined by CRDs of this very bundle may not exist yet.
                let resolved = self.resolver.resolve(&self.client, &desired).await.ok();
                let live = match &resolved {
                    Some(r) => self.get_live(r, &desired).await?,
                    None => None,
                };
                Ok::<_, ApplyError>(Planned {
                    desired,
                    resolved,
                    live,
                })
            }))
            .buffered(CONCURRENCY)
            .try_collect()
            .await?;

        let mut outcome = ApplyOutcome::default();
        for p in &planned {
            if let Some(live) = &p.live
                && let Some((id, ns, name)) = inventory::holder(live)
                && id != req.inventory.id
            {
                return Err(ApplyError::Conflict {
                    object: describe(&p.desired),
                    holder: format!("{ns}/{name}"),
                });
            }
        }
        // A Namespace that exists and is not ours is someone else's: use it, never adopt it.
        planned.retain(|p| {
            !(kind(&p.desired) == "Namespace"
                && p.live
                    .as_ref()
                    .is_some_and(|l| inventory::holder(l).is_none()))
        });

        // Claim the component's cluster scope atomically before any write, so two
        // instances racing never each take a part of it.
        let reaches_out = planned.iter().any(|p| {
            p.desired.metadata.namespace.as_deref() != Some(req.inventory.parent_namespace.as_str())
        });
        let claim_key = if reaches_out {
            Some(self.claim(&req, &member_labels).await?)
        } else {
            None
        };

        // Why each existing object must be written (see `diff`); absent: it need not be.
        let why: BTreeMap<(String, String, String), diff::Reason> = planned
            .iter()
            .filter_map(|p| {
                let live = p.live.as_ref().filter(|l| !skip_reconcile(l))?;
                let reason =
                    diff::write_reason(&to_value(&p.desired), &to_value(live), &self.manager)?;
                Some((key(&p.desired), reason))
            })
            .collect();
        let needs_write = |p: &Planned| p.live.is_none() || why.contains_key(&key(&p.desired));

        // Dry-run every write whose kind already exists, so invalid input changes nothing.
        // Objects in a namespace this apply creates cannot be dry-run before it exists.
        let new_namespaces: BTreeSet<String> = planned
            .iter()
            .filter(|p| kind(&p.desired) == "Namespace" && p.live.is_none())
            .filter_map(|p| p.desired.metadata.name.clone())
            .collect();
        let dry: Vec<&Planned> = planned
            .iter()
            .filter(|p| p.resolved.is_some() && needs_write(p))
            .filter(|p| {
                !p.desired
                    .metadata
                    .namespace
                    .as_ref()
                    .is_some_and(|ns| new_namespaces.contains(ns))
            })
            .collect();
        let recreate = self.dry_run_all(dry).await?;

        let new_group_kinds: BTreeSet<String> = planned
            .iter()
            .map(|p| kinds::group_kind(&p.desired))
            .collect();
        let old_group_kinds: BTreeSet<String> =
            inventory::parse_group_kinds(req.parent_annotations.get(labels::APPLYSET_GROUP_KINDS))
                .into_iter()
                .collect();
        let union: BTreeSet<String> = old_group_kinds.union(&new_group_kinds).cloned().collect();
        self.write_parent(&req, &union).await?;

        let mut waves: BTreeMap<u8, Vec<Planned>> = BTreeMap::new();
        for p in planned {
            waves
                .entry(kinds::apply_wave(&p.desired))
                .or_default()
                .push(p);
        }
        let mut applied_keys = BTreeSet::new();
        applied_keys.extend(claim_key);
        // One object's passing failure does not stop the others: every wave
        // is applied, and the first failure is returned at the end.
        let mut first_failure: Option<ApplyError> = None;
        for (wave, items) in waves {
            let results: Vec<Result<(Planned, Option<DynamicObject>), ApplyError>> =
                stream::iter(items.into_iter().map(|mut p| async {
                    if p.resolved.is_none() {
                        p.resolved = Some(
                            self.resolver
                                .resolve(&self.client, &p.desired)
                                .await
                                .map_err(|source| ApplyError::Api {
                                    verb: "resolve the kind of",
                                    object: describe(&p.desired),
                                    source,
                                })?,
                        );
                        p.live = match &p.resolved {
                            Some(r) => self.get_live(r, &p.desired).await?,
                            None => None,
                        };
                    }
                    if p.live.as_ref().is_some_and(skip_reconcile) || !needs_write(&p) {
                        return Ok((p, None));
                    }
                    let out = if recreate.contains(&key(&p.desired)) {
                        self.recreate(&p).await?
                    } else {
                        self.patch(&p, false).await?
                    };
                    Ok::<_, ApplyError>((p, Some(out)))
                }))
                .buffer_unordered(CONCURRENCY)
                .collect()
                .await;
            let mut ok = Vec::new();
            for r in results {
                match r {
                    Ok(x) => ok.push(x),
                    Err(e) => {
                        tracing::warn!(error = %e, "an object failed; applying the others");
                        first_failure.get_or_insert(e);
                    }
                }
            }
            for (p, written) in ok {
                let name = describe(&p.desired);
                applied_keys.insert(key(&p.desired));
                match (&p.live, written) {
                    (Some(live), _) if skip_reconcile(live) => {
                        outcome.skipped.push(name);
                        outcome.live.push(live.clone());
                    }
                    (live, Some(new)) => {
                        if live.is_some() {
                            if recreate.contains(&key(&p.desired)) {
                                outcome.why.insert(
                                    name.clone(),
                                    "recreated: the live object could not take the desired state"
                                        .into(),
                                );
                                outcome.recreated.push(name.clone());
                            } else if let Some(reason) = why.get(&key(&p.desired)) {
                                outcome.why.insert(name.clone(), reason.clone());
                            }
                            outcome.drifted.push(name.clone())
                        } else {
                            outcome.created.push(name.clone())
                        }
                        outcome.written.push(name);
                        outcome.live.push(new);
                    }
                    (Some(live), None) => outcome.live.push(live.clone()),
                    (None, None) => {}
                }
            }
            if wave == 1 {
                let crds: Vec<String> = outcome
                    .live
                    .iter()
                    .filter(|o| {
                        kind(o) == "CustomResourceDefinition" && !crate::health::crd_established(o)
                    })
                    .filter_map(|o| o.metadata.name.clone())
                    .collect();
                for name in crds {
                    self.wait_established(&name).await?;
                }
            }
        }
        // Nothing is pruned after a failure: what failed may be what a prune
        // would judge no longer rendered.
        if let Some(e) = first_failure {
            return Err(e);
        }

        let kept = self
            .prune(&req, &old_group_kinds, &applied_keys, &mut outcome)
            .await?;
        let mut final_kinds = new_group_kinds;
        final_kinds.extend(kept);
        if final_kinds != union {
            self.write_parent(&req, &final_kinds).await?;
        }
        Ok(outcome)
    }

    /// Takes (or confirms) the claim on the component's cluster scope: an
    /// empty ClusterRole created only if absent, so exactly one inventory holds it.
    async fn claim(
        &self,
        req: &ApplyRequest<'_>,
        member_labels: &BTreeMap<String, String>,
    ) -> Result<(String, String, String), ApplyError> {
        let name = format!("kubeflow-{}-cluster-claim", req.inventory.component);
        let api: Api<k8s_openapi::api::rbac::v1::ClusterRole> = Api::all(self.client.clone());
        let role = k8s_openapi::api::rbac::v1::ClusterRole {
            metadata: kube::api::ObjectMeta {
                name: Some(name.clone()),
                labels: Some(member_labels.clone()),
                ..Default::default()
            },
            ..Default::default()
        };
        let key = (CLAIM_GROUP_KIND.to_string(), String::new(), name.clone());
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

    /// Dry-runs every write. An object refused as invalid that is valid on
    /// its own is to be recreated (returned); any other refusal refuses the
    /// whole apply, so invalid input changes nothing.
    async fn dry_run_all(
        &self,
        items: Vec<&Planned>,
    ) -> Result<BTreeSet<(String, String, String)>, ApplyError> {
        // Bounded concurrency by hand: a `stream::iter(..).map(async ..)` over
        // borrowed items is not provably Send in the controller's future.
        let mut results: Vec<(&Planned, Result<DynamicObject, ApplyError>)> = Vec::new();
        let mut in_flight = futures::stream::FuturesUnordered::new();
        for p in items {
            in_flight.push(async move { (p, self.patch(p, true).await) });
            if in_flight.len() >= CONCURRENCY
                && let Some(r) = in_flight.next().await
            {
                results.push(r);
            }
        }
        while let Some(r) = in_flight.next().await {
            results.push(r);
        }
        let mut recreate = BTreeSet::new();
        for (p, r) in results {
            match r {
                Ok(_) => {}
                Err(e @ ApplyError::Invalid { .. }) => {
                    if self.valid_alone(p).await? {
                        tracing::warn!(object = %describe(&p.desired), error = %e, "the live object cannot take the desired state; it will be recreated");
                        recreate.insert(key(&p.desired));
                    } else {
                        return Err(e);
                    }
                }
                Err(e) => return Err(e),
            }
        }
        Ok(recreate)
    }

    async fn patch(&self, p: &Planned, dry_run: bool) -> Result<DynamicObject, ApplyError> {
        let Some(resolved) = &p.resolved else {
            return Err(ApplyError::Invalid {
                object: describe(&p.desired),
                message: "kind not served".into(),
            });
        };
        let mut params = PatchParams::apply(&self.manager).force();
        params.dry_run = dry_run;
        let name = p.desired.metadata.name.as_deref().unwrap_or("");
        self.api(resolved, p.desired.metadata.namespace.as_deref())
            .patch(name, &params, &Patch::Apply(&p.desired))
            .await
            .map_err(|source| classify("apply", &p.desired, source))
    }

    async fn wait_established(&self, name: &str) -> Result<(), ApplyError> {
        let api: Api<DynamicObject> = Api::all_with(
            self.client.clone(),
            &ApiResource::from_gvk(&kube::core::GroupVersionKind::gvk(
                "apiextensions.k8s.io",
                "v1",
                "CustomResourceDefinition",
            )),
        );
        let deadline = tokio::time::Instant::now() + CRD_ESTABLISH_TIMEOUT;
        loop {
            let crd = api.get_opt(name).await.map_err(|source| ApplyError::Api {
                verb: "read",
                object: format!("CustomResourceDefinition {name}"),
                source,
            })?;
            if crd.as_ref().is_some_and(crate::health::crd_established) {
                return Ok(());
            }
            if tokio::time::Instant::now() > deadline {
                return Err(ApplyError::CrdNotEstablished(
                    name.to_string(),
                    CRD_ESTABLISH_TIMEOUT,
                ));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Writes the ApplySet id label and group-kinds annotation on the parent, when they differ.
    async fn write_parent(
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
        let mut out = Vec::new();
        for gk in group_kinds {
            let Some(resolved) = self.resolve_group_kind(gk).await? else {
                continue;
            };
            let apis: Vec<Api<DynamicObject>> = match self.scope.namespaces() {
                Some(namespaces) if resolved.namespaced => namespaces
                    .iter()
                    .map(|ns| Api::namespaced_with(self.client.clone(), ns, &resolved.resource))
                    .collect(),
                _ => vec![Api::all_with(self.client.clone(), &resolved.resource)],
            };
            let mut items = Vec::new();
            for api in apis {
                let list = api
                    .list(&ListParams::default().labels(&inv.selector()))
                    .await
                    .map_err(|source| ApplyError::Api {
                        verb: "list",
                        object: gk.clone(),
                        source,
                    })?;
                items.extend(list.items);
            }
            for mut object in items {
                if object.types.is_none() {
                    object.types = Some(kube::api::TypeMeta {
                        api_version: resolved.resource.api_version.clone(),
                        kind: resolved.resource.kind.clone(),
                    });
                }
                out.push(Member {
                    object,
                    resolved: resolved.clone(),
                });
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

fn classify(verb: &'static str, obj: &DynamicObject, source: kube::Error) -> ApplyError {
    match &source {
        kube::Error::Api(e) if e.code == 422 || e.code == 400 => ApplyError::Invalid {
            object: describe(obj),
            message: e.message.clone(),
        },
        _ => ApplyError::Api {
            verb,
            object: describe(obj),
            source,
        },
    }
}

/// cert-manager's annotation asking it to inject a webhook's caBundle.
const CERT_MANAGER_INJECT: &str = "cert-manager.io/inject-ca-from";

/// Removes fields another controller owns, so the two never fight: the rules
/// of an aggregated ClusterRole (the aggregation controller fills them) and
/// caBundles cert-manager injects.
pub fn drop_foreign_fields(obj: &mut DynamicObject) {
    match kind(obj) {
        "ClusterRole" if obj.data.get("aggregationRule").is_some() => {
            if let Some(m) = obj.data.as_object_mut() {
                m.remove("rules");
            }
        }
        "MutatingWebhookConfiguration"
        | "ValidatingWebhookConfiguration"
        | "CustomResourceDefinition"
        | "APIService" => {
            let injected = obj
                .metadata
                .annotations
                .as_ref()
                .is_some_and(|a| a.contains_key(CERT_MANAGER_INJECT));
            if !injected {
                return;
            }
            if let Some(Value::Array(hooks)) = obj.data.get_mut("webhooks") {
                for h in hooks {
                    if let Some(Value::Object(cc)) = h.get_mut("clientConfig") {
                        cc.remove("caBundle");
                    }
                }
            }
            if let Some(Value::Object(cc)) = obj
                .data
                .pointer_mut("/spec/conversion/webhook/clientConfig")
            {
                cc.remove("caBundle");
            }
            if let Some(Value::Object(spec)) = obj.data.get_mut("spec")
                && kind_is_apiservice(spec)
            {
                spec.remove("caBundle");
            }
        }
        _ => {}
    }
}

fn kind_is_apiservice(spec: &serde_json::Map<String, Value>) -> bool {
    spec.contains_key("service") && spec.contains_key("groupPriorityMinimum")
}

/// Kinds whose change can widen someone's access: the opt-out annotation
/// never stops their repair (whoever can annotate a ClusterRole could
/// otherwise make it theirs to widen, and keep it that way).
const GUARDS_PRIVILEGE: &[&str] = &[
    "ClusterRole",
    "ClusterRoleBinding",
    "Role",
    "RoleBinding",
    "MutatingWebhookConfiguration",
    "ValidatingWebhookConfiguration",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
    "MutatingAdmissionPolicy",
    "MutatingAdmissionPolicyBinding",
    "CustomResourceDefinition",
    "APIService",
];

/// Whether a person opted the object out of drift repair
/// (`components.kubeflow.org/skip-reconcile: "true"`), and may.
fn skip_reconcile(obj: &DynamicObject) -> bool {
    !GUARDS_PRIVILEGE.contains(&kind(obj))
        && obj
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(labels::SKIP_RECONCILE))
            .is_some_and(|v| v == "true")
}

fn to_value(obj: &DynamicObject) -> Value {
    serde_json::to_value(obj).unwrap_or(Value::Null)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn annotated(kind: &str) -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "v1", "kind": kind,
            "metadata": {"name": "x", "annotations": {labels::SKIP_RECONCILE: "true"}},
        }))
        .expect("object")
    }

    #[test]
    fn the_opt_out_never_covers_what_guards_privilege() {
        assert!(skip_reconcile(&annotated("ConfigMap")));
        assert!(skip_reconcile(&annotated("Deployment")));
        for k in [
            "ClusterRole",
            "RoleBinding",
            "ValidatingWebhookConfiguration",
            "CustomResourceDefinition",
        ] {
            assert!(
                !skip_reconcile(&annotated(k)),
                "{k} is repaired whatever it says"
            );
        }
    }
}
