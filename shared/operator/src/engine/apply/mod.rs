//! The apply engine: server-side apply of a component's objects in a safe
//! order, with ownership checks, no writes in steady state, and pruning of
//! inventory members no longer rendered. `Engine::apply` reads as its steps;
//! each step lives in its own module:
//!
//! - `plan`: objects made ready to send, live state read, the decisions;
//! - `claim`: the lock on a component's cluster scope;
//! - `isolate`: dry runs, and recreating objects whose live state refuses;
//! - `recreation`: which kinds may be recreated, and what is said of the rest;
//! - `waves`: the writes, wave by wave, and the CRD wait;
//! - `prune`: what is no longer rendered goes (or is released);
//! - `members`: the inventory as the API server holds it;
//! - `diff`: whether an object must be written; `fields`: what is left to others;
//!   `atomic`: a field gone from inside a value owned whole (our own kinds).

mod atomic;
mod claim;
mod deadline;
pub mod diff;
#[cfg(test)]
mod diff_properties;
pub mod early;
mod error;
mod fields;
mod isolate;
mod members;
mod memo;
mod plan;
mod prune;
mod recreation;
mod responses;
#[cfg(test)]
mod unknown_outcome_tests;
mod waves;
mod whole;

pub use crate::base::kinds::{ObjectKey, describe};
pub use error::ApplyError;
pub use fields::drop_foreign_fields;
pub use members::Member;
pub use prune::Released;
pub use recreation::{Held, may_recreate, summary as held_summary};

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::Client;
use kube::api::{Api, ApiResource, DynamicObject};

use crate::engine::discovery::{ApiResolver, Resolved};
use crate::engine::inventory::Inventory;
use error::classify;

/// How many API requests the engine keeps in flight at once.
const CONCURRENCY: usize = 16;

/// What an apply did.
#[derive(Debug, Default)]
pub struct ApplyOutcome {
    /// Live state of every applied object after the apply, for health checks.
    pub live: Vec<DynamicObject>,
    /// Objects written (created or changed).
    pub written: Vec<ObjectKey>,
    /// Objects that existed but whose fields had drifted from the rendered state.
    pub drifted: Vec<ObjectKey>,
    /// Why each drifted object was written (see [`diff::write_reason`]).
    pub why: BTreeMap<ObjectKey, diff::Why>,
    /// Objects that did not exist.
    pub created: Vec<ObjectKey>,
    /// Objects pruned because they are no longer rendered.
    pub pruned: Vec<ObjectKey>,
    /// Objects deleted and created anew because their live state refused
    /// the desired one (see `isolate`).
    pub recreated: Vec<ObjectKey>,
    /// Objects whose live state refuses the desired one, left as they are
    /// because deleting them would lose what they hold (see `recreation`):
    /// a person must act.
    pub held: Vec<Held>,
    /// Objects no longer rendered that a prune keeps and lets go of (a
    /// volume, a CRD): a person decides when they go.
    pub released: Vec<Released>,
    /// Objects left alone because they carry the skip-reconcile annotation.
    pub skipped: Vec<ObjectKey>,
    /// Objects not read: the watches showed them unchanged since the engine
    /// last verified them (see `memo`).
    pub unread: Vec<ObjectKey>,
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
    /// Objects a prune releases instead of deleting (they stay, nobody's,
    /// listed as released), with what the release says: a declared profile
    /// taken off its list keeps its namespace and the users' data in it.
    pub release_on_prune: Option<&'a ReleaseOnPrune<'a>>,
    /// Whether a CRD no longer rendered may be deleted (the component's
    /// `crdPolicy: Delete`); even then, never while custom resources of it exist.
    pub delete_crds: bool,
}

/// What a prune releases instead of deleting, with the release's message.
pub type ReleaseOnPrune<'a> = dyn Fn(&DynamicObject) -> Option<String> + Send + Sync + 'a;

/// The engine: a client, an operator's field manager and a discovery cache.
#[derive(Clone)]
pub struct Engine {
    client: Client,
    resolver: Arc<ApiResolver>,
    manager: String,
    /// Where members of namespaced kinds are listed: the operator may list
    /// nothing cluster-wide but cluster-scoped kinds.
    scope: crate::base::scope::NamespaceScope,
    /// What the watches of the managed kinds last saw, when the operator
    /// runs them: then unchanged objects are not read again.
    index: Option<crate::engine::live_index::LiveIndex>,
    memo: Arc<memo::Memo>,
    /// One large write at a time (see [`LARGE_WRITE_BYTES`]).
    large_writes: Arc<tokio::sync::Semaphore>,
}

/// Objects this large (KServe's, Spark's and Knative's CRDs, up to 780 KB)
/// are sent one at a time, dry runs included. A server-side apply of one
/// costs the API server 3 to 5 s of CPU whether or not it is a dry run, and
/// the server cuts every write at 34 s whatever its request limit: sent side
/// by side on a loaded server, three such dry runs each ran past it, all
/// three failed with 504, and every retry did the same (seen in CI:
/// Serving's install never finished). One at a time, each finishes.
const LARGE_WRITE_BYTES: usize = 128 * 1024;

impl Engine {
    /// An engine writing as `manager`.
    pub fn new(client: Client, manager: &str) -> Self {
        Engine {
            client,
            resolver: Arc::new(ApiResolver::default()),
            manager: manager.to_string(),
            scope: crate::base::scope::NamespaceScope::all(),
            index: None,
            memo: Arc::default(),
            large_writes: Arc::new(tokio::sync::Semaphore::new(1)),
        }
    }

    /// The engine reading what the watches saw from `index` (see `memo`).
    pub fn with_index(mut self, index: crate::engine::live_index::LiveIndex) -> Self {
        self.index = Some(index);
        self
    }

    /// Other field managers' entries of `key`'s `managedFields`, as the
    /// watches last saw them; none without an index.
    pub fn foreign_fields(
        &self,
        key: &ObjectKey,
    ) -> Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry> {
        self.index
            .as_ref()
            .map(|i| i.foreign_fields(key))
            .unwrap_or_default()
    }

    /// The engine limited to the namespaces of `scope`.
    pub fn within(mut self, scope: crate::base::scope::NamespaceScope) -> Self {
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

    /// Applies the request: reads everything, checks ownership, claims the
    /// cluster scope, dry-runs what must change, applies in waves, prunes.
    pub async fn apply(&self, mut req: ApplyRequest<'_>) -> Result<ApplyOutcome, ApplyError> {
        let member_labels = req.inventory.member_labels(req.version);
        let mut objects = std::mem::take(&mut req.objects);
        plan::prepare(&mut objects, &req, &member_labels);
        // Everything is read first: a conflict anywhere means nothing is applied.
        let mut planned = self.read(objects).await?;
        if let Some(conflict) = self.live_conflict(&planned, &req).await? {
            return Err(conflict);
        }
        plan::drop_foreign_namespaces(&mut planned);
        // The cluster scope is claimed before any write, so two instances
        // racing never each take a part of it.
        let claim = if plan::reaches_out(&planned, &req.inventory.parent_namespace) {
            Some(self.claim(&req, &member_labels).await?)
        } else {
            None
        };
        let mut decisions = plan::Decisions {
            why: plan::write_reasons(&planned),
            ..Default::default()
        };
        // Every write is dry-run first, so invalid input changes nothing.
        let isolation = self
            .dry_run_all(plan::to_dry_run(&planned, &decisions), req.retain)
            .await?;
        decisions.recreate = isolation.recreate;
        decisions.held = isolation.held;
        let group_kinds = plan::GroupKinds::of(&planned, req.parent_annotations);
        let listed = group_kinds.union();
        self.write_parent(&req, &listed).await?;

        // What is read or written now is remembered as verified; what was
        // unchanged keeps the time of its last check.
        let hashes: HashMap<ObjectKey, u64> = planned
            .iter()
            .filter(|p| !p.unchanged)
            .map(|p| (p.key(), p.hash))
            .collect();
        let mut outcome = ApplyOutcome {
            unread: planned
                .iter()
                .filter(|p| p.unchanged)
                .map(plan::Planned::key)
                .collect(),
            held: decisions.held.values().cloned().collect(),
            ..Default::default()
        };
        let mut applied = self.apply_waves(planned, &decisions, &mut outcome).await?;
        self.remember_verified(&outcome, &hashes, &decisions);
        applied.extend(claim);
        let kept = self
            .prune_unless_settled(&req, &group_kinds, &applied, &mut outcome)
            .await?;
        let mut final_kinds = group_kinds.new;
        final_kinds.extend(kept);
        if final_kinds != listed {
            self.write_parent(&req, &final_kinds).await?;
        }
        Ok(outcome)
    }

    /// Records what the apply read or wrote as verified. A held object is
    /// not: it is read and tried again next time, so the report stays
    /// until it is resolved.
    fn remember_verified(
        &self,
        outcome: &ApplyOutcome,
        hashes: &HashMap<ObjectKey, u64>,
        decisions: &plan::Decisions,
    ) {
        for live in &outcome.live {
            let key = ObjectKey::of(live);
            if let Some(hash) = hashes.get(&key)
                && !outcome.skipped.contains(&key)
                && !decisions.held.contains_key(&key)
            {
                self.memo.record(key, *hash, live);
            }
        }
    }

    /// Prunes what the inventory no longer renders, and says which kinds
    /// kept objects remain of. A prune over the same set and kinds as the
    /// last complete one finds nothing new (members appear only by this
    /// engine's applies), and is skipped.
    async fn prune_unless_settled(
        &self,
        req: &ApplyRequest<'_>,
        group_kinds: &plan::GroupKinds,
        applied: &BTreeSet<ObjectKey>,
        outcome: &mut ApplyOutcome,
    ) -> Result<BTreeSet<String>, ApplyError> {
        let set = memo::set_hash(applied, &group_kinds.new);
        let id = &req.inventory.id;
        if group_kinds.old == group_kinds.new && self.memo.prune_settled(id, set) {
            return Ok(BTreeSet::new());
        }
        let kept = self.prune(req, &group_kinds.old, applied, outcome).await?;
        self.memo.forget(&outcome.pruned);
        self.memo.record_prune(id, set);
        Ok(kept)
    }
}
