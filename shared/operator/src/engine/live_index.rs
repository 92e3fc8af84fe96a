//! What the watches of the managed kinds last saw: each managed object's
//! resourceVersion, from metadata-only reflector stores.
//!
//! The engine reads an object from the API server only when this index says
//! it changed since the engine last verified it (see `apply::memo`), so a
//! repair is one watch event, a read of what changed and one write instead of
//! a read of every managed object. The stores hold metadata without
//! `managedFields` (a CRD's field set is as large as its schema) but for
//! other managers' entries (`foreign_fields`: hand edits, other
//! controllers), which the status reports: a few hundred bytes per managed
//! object, and nothing of unmanaged ones, since every watch selects the
//! component's label.
//!
//! A list only shows what matches the watch's selector now: an object
//! deleted, or whose labels someone edited, before a watch's first list or
//! while it was down and listed again, is in no event. Each such list
//! therefore signals `relisted`, and the controller reconciles every CR
//! (each then reads what the index no longer holds).
//!
//! A watch of a kind the bundles define by a CRD starts once that CRD
//! exists (one metadata watch of all CRDs tells): a kind of another bundle
//! version, never installed, costs no request at all, where a watch retried
//! on its backoff cost the serving operator 594 requests a minute at rest.

use std::sync::Arc;

use futures::{FutureExt, Stream, StreamExt};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry;
use kube::Client;
use kube::api::{Api, ApiResource, DynamicObject};
use kube::core::PartialObjectMeta;
use kube::runtime::reflector::{ObjectRef, Store, store::Writer};
use kube::runtime::{WatchStreamExt, watcher};

use crate::base::kinds::ObjectKey;
use crate::engine::watches::WatchBackoff;

/// A managed object as its watch holds it: metadata only.
pub type MetaObject = PartialObjectMeta<DynamicObject>;

struct Entry {
    group_kind: String,
    /// The namespace the watch covers; None: every namespace (or cluster-scoped).
    namespace: Option<String>,
    resource: ApiResource,
    store: Store<MetaObject>,
}

/// The stores of every managed watch, by group-kind and namespace.
#[derive(Clone, Default)]
pub struct LiveIndex {
    entries: Arc<Vec<Entry>>,
}

impl LiveIndex {
    /// The resourceVersion the watches last saw of `key`; None when the
    /// object is not in a store (absent, not seen yet, or not watched).
    pub fn resource_version(&self, key: &ObjectKey) -> Option<String> {
        self.get(key)?.metadata.resource_version.clone()
    }

    /// What the watch of `key`'s kind (and namespace) holds of it.
    fn get(&self, key: &ObjectKey) -> Option<Arc<MetaObject>> {
        let ns = (!key.namespace.is_empty()).then_some(key.namespace.as_str());
        self.entries
            .iter()
            .filter(|e| e.group_kind == key.group_kind)
            .filter(|e| e.namespace.is_none() || e.namespace.as_deref() == ns)
            .find_map(|e| {
                let mut r = ObjectRef::new_with(&key.name, e.resource.clone());
                if let Some(ns) = ns {
                    r = r.within(ns);
                }
                e.store.get(&r)
            })
    }

    /// Other field managers' entries of `key`'s `managedFields`, as the
    /// watches last saw them (see `foreign_fields::keep_foreign`).
    pub fn foreign_fields(&self, key: &ObjectKey) -> Vec<ManagedFieldsEntry> {
        self.get(key)
            .and_then(|o| o.metadata.managed_fields.clone())
            .unwrap_or_default()
    }
}

/// Builds the index while the watches are set up: each watch adds its store.
#[derive(Default)]
pub struct LiveIndexBuilder {
    entries: Vec<Entry>,
    crds: Option<CrdPresence>,
    /// The operator's field manager: other managers' entries are kept.
    own_manager: Option<String>,
    /// Told of every list that may have missed a deletion (see the module doc).
    relisted: Option<tokio::sync::mpsc::UnboundedSender<()>>,
    /// What `relisted` tells; taken once by the controller.
    relisted_rx: Option<tokio::sync::mpsc::UnboundedReceiver<()>>,
}

/// Which CRDs exist: a metadata store of all of them, and a signal bumped
/// on every change.
#[derive(Clone)]
struct CrdPresence {
    store: Store<MetaObject>,
    resource: ApiResource,
    changed: tokio::sync::watch::Receiver<u64>,
}

impl CrdPresence {
    /// Starts the watch of all CRDs (metadata only, without field sets).
    fn start(client: &Client) -> Self {
        let resource = ApiResource::erase::<
            k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
        >(&());
        let writer: Writer<MetaObject> = Writer::new(resource.clone());
        let store = writer.as_reader();
        let (tx, changed) = tokio::sync::watch::channel(0u64);
        let api: Api<MetaObject> = Api::all_with(client.clone(), &resource);
        tokio::spawn(
            watcher::watcher(api, watcher::Config::default().any_semantic())
                .backoff(WatchBackoff::default())
                .modify(|o: &mut MetaObject| o.metadata.managed_fields = None)
                .reflect(writer)
                .for_each(move |_| {
                    tx.send_modify(|n| *n = n.wrapping_add(1));
                    futures::future::ready(())
                }),
        );
        CrdPresence {
            store,
            resource,
            changed,
        }
    }

    /// Resolves once the CRD `name` exists.
    async fn exists(mut self, name: String) {
        let key = ObjectRef::new_with(&name, self.resource.clone());
        loop {
            if self.store.get(&key).is_some() {
                return;
            }
            if self.changed.changed().await.is_err() {
                // The CRD watch ended (the process is stopping): never start.
                futures::future::pending::<()>().await;
            }
        }
    }
}

impl LiveIndexBuilder {
    /// Keep other field managers' `managedFields` entries than `manager`'s
    /// (for the status's report); without it, none are kept.
    pub fn keeping_foreign_fields(mut self, manager: &str) -> Self {
        self.own_manager = Some(manager.to_string());
        self
    }

    /// A metadata watch of `resource` (in `namespace`, or all) whose objects land in a store of the
    /// index; errors are retried on the watch's own backoff and logged. The
    /// stream yields every object it sees (applied or deleted), after the
    /// store has taken it in, so a reconcile it triggers reads a current index.
    pub fn watch(
        &mut self,
        client: &Client,
        resource: &ApiResource,
        namespace: Option<&str>,
        crd: Option<&str>,
        config: watcher::Config,
        what: String,
    ) -> impl Stream<Item = Result<MetaObject, watcher::Error>> + Send + 'static + use<> {
        let writer: Writer<MetaObject> = Writer::new(resource.clone());
        self.entries.push(Entry {
            group_kind: crate::base::kinds::group_kind_of(&resource.group, &resource.kind),
            namespace: namespace.map(str::to_string),
            resource: resource.clone(),
            store: writer.as_reader(),
        });
        let api: Api<MetaObject> = match namespace {
            Some(ns) => Api::namespaced_with(client.clone(), ns, resource),
            None => Api::all_with(client.clone(), resource),
        };
        let ready: futures::future::BoxFuture<'static, ()> = match crd {
            Some(name) => {
                let presence = self
                    .crds
                    .get_or_insert_with(|| CrdPresence::start(client))
                    .clone();
                Box::pin(presence.exists(name.to_string()))
            }
            None => Box::pin(futures::future::ready(())),
        };
        let own = self.own_manager.clone();
        let relisted = self.relisted_sender();
        // A watch started with the operator is listed before or while its CRs
        // are first reconciled, and those reconciles read what the index does
        // not hold: its first list owes nothing. A watch that waited for its
        // CRD started after them.
        let mut lists_owed = usize::from(crd.is_none());
        let listed = what.clone();
        let objects = ready
            .map(move |()| {
                watcher::watcher(api, config)
                    .backoff(WatchBackoff::default())
                    .modify(move |o: &mut MetaObject| {
                        let entries = o.metadata.managed_fields.take();
                        o.metadata.managed_fields = match (&own, entries) {
                            (Some(own), Some(entries)) => {
                                crate::render::foreign_fields::keep_foreign(entries, own)
                            }
                            _ => None,
                        };
                    })
                    .reflect(writer)
                    .filter_map(move |event| {
                        let object = match event {
                            Ok(watcher::Event::Apply(o) | watcher::Event::Delete(o)) => Some(Ok(o)),
                            Ok(watcher::Event::InitApply(o)) => Some(Ok(o)),
                            Ok(watcher::Event::Init) => None,
                            Ok(watcher::Event::InitDone) => {
                                if lists_owed == 0 {
                                    tracing::debug!(watch = %listed, "listed after the CRs' reconciles; each CR is reconciled again");
                                    let _ = relisted.send(());
                                } else {
                                    lists_owed -= 1;
                                }
                                None
                            }
                            Err(e) => Some(Err(e)),
                        };
                        futures::future::ready(object)
                    })
            })
            .flatten_stream();
        crate::engine::watches::quiet(objects, what)
    }

    /// The sender every watch tells of its lists (made on first use).
    fn relisted_sender(&mut self) -> tokio::sync::mpsc::UnboundedSender<()> {
        match &self.relisted {
            Some(tx) => tx.clone(),
            None => {
                let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
                self.relisted = Some(tx.clone());
                self.relisted_rx = Some(rx);
                tx
            }
        }
    }

    /// A stream that yields once for each list of a watch that may have
    /// missed a deletion or a relabelling (see the module doc): the
    /// controller reconciles every CR on it. Empty when no watch was added,
    /// or when taken before.
    pub fn relisted(&mut self) -> futures::stream::BoxStream<'static, ()> {
        let rx = self.relisted_rx.take();
        futures::stream::unfold(rx, |rx| async move {
            let mut rx = rx?;
            rx.recv().await.map(|()| ((), Some(rx)))
        })
        .boxed()
    }

    /// The index over every store added.
    pub fn build(self) -> LiveIndex {
        LiveIndex {
            entries: Arc::new(self.entries),
        }
    }
}
