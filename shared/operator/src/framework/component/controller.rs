//! The running process: the controller over the CR kind and every managed
//! kind, its shared state, the finalizer around each reconcile, and retries.

use std::sync::Mutex;
use std::time::Duration;

use kube::ResourceExt;
use kube::api::{Api, ApiResource};
use kube::runtime::controller::Controller;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use kubeflow_api::ComponentResource;

use super::context::Context;
use super::reconcile::apply;
use super::removal::cleanup_component;
use super::{Component, ComponentArgs, FINALIZER, Reference, operator_name, references_of};
use crate::base::bundle::BundleCache;
use crate::base::labels;
use crate::base::scope::NamespaceScope;
use crate::engine::apply::Engine;
use crate::framework::controller::{Failure, Reconciler, StatusOf, Tools};
use crate::framework::runner;
use crate::render::rbac;

#[async_trait::async_trait]
impl<C: Component> Reconciler for Context<C> {
    type Resource = C::Resource;
    const FINALIZER: &'static str = FINALIZER;

    fn tools(&self) -> &Tools {
        &self.tools
    }

    async fn apply(
        &self,
        cr: &C::Resource,
        status: &mut StatusOf<Self>,
    ) -> Result<Duration, Failure> {
        apply::<C>(cr, self, status).await
    }

    async fn cleanup(&self, cr: &C::Resource, status: &mut StatusOf<Self>) -> Result<(), Failure> {
        cleanup_component::<C>(cr, self, &mut status.as_mut().released).await
    }

    async fn announce(&self, cr: &C::Resource, old: &StatusOf<Self>, new: &StatusOf<Self>) {
        super::announce::announce_progress::<C>(cr, self, old.as_ref(), new.as_ref()).await;
    }

    fn record(&self, cr: &C::Resource, status: &StatusOf<Self>) {
        self.tools
            .metrics
            .managed_objects
            .with_label_values(&[
                &self.tools.name,
                &cr.namespace().unwrap_or_default(),
                &cr.name_any(),
            ])
            .set(status.as_ref().managed_objects.unwrap_or(0));
    }

    fn forget(&self, cr: &ObjectRef<C::Resource>) {
        let ns = cr.namespace.clone().unwrap_or_default();
        self.owners.forget(&ns, &cr.name);
        self.last_read.forget(&ns, &cr.name);
        self.released.forget(&ns, &cr.name);
        let _ = self.tools.metrics.managed_objects.remove_label_values(&[
            &self.tools.name,
            &ns,
            &cr.name,
        ]);
    }

    /// Not in a namespace the operator may not write to (its Roles stop at
    /// the allowed namespaces): there the status alone says it.
    fn may_publish(&self, cr: &C::Resource) -> bool {
        self.scope.allows(&cr.namespace().unwrap_or_default())
    }

    /// Outside the allowed namespaces nothing is applied: a CR there that
    /// lists no applied kinds has nothing to clean up.
    fn holds_nothing(&self, cr: &C::Resource) -> bool {
        !self.scope.allows(&cr.namespace().unwrap_or_default())
            && crate::engine::inventory::parse_group_kinds(
                cr.annotations().get(labels::APPLYSET_GROUP_KINDS),
            )
            .is_empty()
    }
}

/// Runs a component operator until SIGTERM (or loss of leadership).
pub async fn run<C: Component>(component: C, args: ComponentArgs) -> anyhow::Result<()> {
    let name = operator_name::<C::Resource>();
    let rt = runner::start(&name, &args.run).await?;
    let watched = watchable(&component, &args.manifests_dir);
    let watched_kinds = watched.clone();
    // Tenant access (the Dashboard's contributors) is inside the scope.
    let scope = NamespaceScope::only(&args.allowed_namespaces)
        .with_tenant_access(&component.permissions().tenant_roles);
    match scope.namespaces() {
        Some(n) => tracing::info!(namespaces = ?n, "installing only into the allowed namespaces"),
        None => tracing::warn!("no allowed namespaces set: CRs may install into any namespace"),
    }
    // Metadata watches of every managed kind: their events bring a
    // reconcile, their stores tell the engine what changed.
    let mut index =
        crate::engine::live_index::LiveIndexBuilder::default().keeping_foreign_fields(&name);
    let owners = super::owners::Owners::default();
    let mut streams = Vec::new();
    for w in managed_watches(watched, &scope) {
        let config = watcher::Config::default()
            .labels(&selector::<C>())
            .any_semantic();
        let stream = index.watch(
            &rt.client,
            &w.resource,
            w.namespace.as_deref(),
            w.crd.as_deref(),
            config,
            w.what,
        );
        streams.push((stream, w.resource));
    }
    let relisted = index.relisted();
    let context = Context {
        engine: Engine::new(rt.client.clone(), &name)
            .within(scope.clone())
            .with_index(index.build()),
        tools: Tools::new(rt.client.clone(), rt.metrics.clone(), &name),
        component,
        bundles: BundleCache::default(),
        manifests_dir: args.manifests_dir,
        scope: scope.clone(),
        detected_platform: Mutex::new(None),
        owners: owners.clone(),
        last_read: Default::default(),
        released: Default::default(),
    };
    let api: Api<C::Resource> = Api::all(rt.client.clone());
    let mut controller = Controller::new(api, watcher::Config::default().any_semantic())
        .trigger_backoff(crate::engine::watches::trigger_backoff());
    tracing::info!(
        watches = streams.len(),
        "watching every kind of the bundles"
    );
    for (stream, resource) in streams {
        let group_kind = crate::base::kinds::group_kind_of(&resource.group, &resource.kind);
        let owners = owners.clone();
        controller = controller.watches_stream_with(
            stream,
            move |obj| owners_of::<C::Resource>(&owners, &group_kind, obj),
            resource,
        );
    }
    // A list after a watch's restart (or its late start) shows no deletion.
    let controller = controller.reconcile_all_on(relisted);
    let controller = watch_references::<C>(controller, &rt.client, &scope, &watched_kinds);
    crate::framework::controller::run(context, controller, rt).await;
    Ok(())
}

/// Watches (their metadata only) the ConfigMaps and Secrets of the allowed
/// namespaces, each event reconciling the CRs that name the object: a
/// digest map edited, an overrides map fixed or a credentials Secret
/// created takes effect at once, not at the next requeue. Secrets only
/// where the operator's role lets it watch them (its bundles hold some).
fn watch_references<C: Component>(
    mut controller: Controller<C::Resource>,
    client: &kube::Client,
    scope: &NamespaceScope,
    watched: &[crate::engine::watches::Watched],
) -> Controller<C::Resource> {
    use k8s_openapi::api::core::v1::{ConfigMap, Secret};
    let may_watch = |kind: &str| {
        watched
            .iter()
            .any(|w| w.resource.group.is_empty() && w.resource.kind == kind)
    };
    let namespaces: Vec<Option<String>> = match scope.namespaces() {
        Some(n) => n.iter().cloned().map(Some).collect(),
        None => vec![None],
    };
    for ns in namespaces {
        // Every operator's Role grants watching ConfigMaps (see rbac).
        controller = watch_referenced::<C, ConfigMap>(controller, client, &ns, |name| {
            Reference::ConfigMap(name.into())
        });
        if may_watch("Secret") {
            controller = watch_referenced::<C, Secret>(controller, client, &ns, |name| {
                Reference::Secret(name.into())
            });
        }
    }
    controller
}

/// Adds a watch of objects of kind `K` in `ns` (all namespaces if `None`),
/// metadata only (their contents are never held), bringing a reconcile of
/// every CR whose reference `reference` makes names one.
fn watch_referenced<C, K>(
    controller: Controller<C::Resource>,
    client: &kube::Client,
    ns: &Option<String>,
    reference: fn(&str) -> Reference,
) -> Controller<C::Resource>
where
    C: Component,
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + Send
        + Sync
        + 'static,
{
    use kube::core::PartialObjectMeta;
    let api: Api<PartialObjectMeta<K>> = match ns {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    };
    let plural = K::plural(&()).to_string();
    let where_ = ns.clone().unwrap_or_else(|| "all namespaces".into());
    let stream = crate::engine::watches::isolated(
        api,
        watcher::Config::default().any_semantic(),
        format!("{plural} in {where_}"),
    );
    let store = controller.store();
    controller.watches_stream(stream, move |o| naming::<C>(&store, &o.metadata, reference))
}

/// The CRs (of the controller's cache) that name the object `meta`
/// describes, as `reference` makes its reference.
fn naming<C: Component>(
    store: &kube::runtime::reflector::Store<C::Resource>,
    meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    reference: impl Fn(&str) -> Reference,
) -> Vec<ObjectRef<C::Resource>> {
    let (Some(ns), Some(name)) = (meta.namespace.as_deref(), meta.name.as_deref()) else {
        return Vec::new();
    };
    let wanted = reference(name);
    store
        .state()
        .iter()
        .filter(|cr| cr.namespace().as_deref() == Some(ns))
        .filter(|cr| references_of::<C>(cr).contains(&wanted))
        .map(|cr| ObjectRef::from_obj(cr.as_ref()))
        .collect()
}

/// The label selector of the objects this operator manages.
fn selector<C: Component>() -> String {
    format!("{}={}", labels::COMPONENT, C::Resource::COMPONENT)
}

/// One managed watch: a name for the logs, the kind, and the
/// namespace it covers (None: all, or cluster-scoped).
struct ManagedWatch {
    crd: Option<String>,
    what: String,
    resource: ApiResource,
    namespace: Option<String>,
}

/// One watch per managed kind, namespaced kinds once per allowed namespace
/// (the operator's Roles grant nothing cluster-wide).
fn managed_watches(
    watched: Vec<crate::engine::watches::Watched>,
    scope: &NamespaceScope,
) -> Vec<ManagedWatch> {
    let mut out = Vec::new();
    for kind in watched {
        let name = format!("{}/{}", kind.resource.api_version, kind.resource.plural);
        match (kind.namespaced, scope.namespaces()) {
            (true, Some(namespaces)) if !kind.everywhere => {
                for ns in namespaces {
                    out.push(ManagedWatch {
                        what: format!("{name} in {ns}"),
                        resource: kind.resource.clone(),
                        namespace: Some(ns.clone()),
                        crd: kind.crd.clone(),
                    });
                }
            }
            _ => out.push(ManagedWatch {
                what: name,
                resource: kind.resource.clone(),
                namespace: None,
                crd: kind.crd.clone(),
            }),
        }
    }
    out
}

/// What the operator watches: every kind of its bundles (their roles grant
/// `watch` on each), and the component's extra kinds its RBAC lets it watch
/// (a watch the chart's role does not grant would fail forever).
pub(super) fn watchable<C: Component>(
    component: &C,
    manifests_dir: &std::path::Path,
) -> Vec<crate::engine::watches::Watched> {
    let permissions = super::permissions_of(component);
    let mut out = crate::engine::watches::bundle_kinds(manifests_dir, &permissions);
    for gvk in component.watched_kinds() {
        let ar = ApiResource::from_gvk(&gvk);
        let covered = out
            .iter()
            .any(|a| a.resource.group == ar.group && a.resource.kind == ar.kind);
        let grants = |rules: &[k8s_openapi::api::rbac::v1::PolicyRule]| {
            rbac::allows(rules, &ar.group, &ar.plural, "watch")
        };
        // Kinds written beyond the bundles under the component's label
        // (the Dashboard's declared Profiles) are managed, watch included.
        let labelled = permissions
            .labelled
            .iter()
            .any(|(group, plural)| *group == ar.group && *plural == ar.plural);
        if !covered
            && (labelled || grants(&permissions.extra) || grants(&permissions.extra_namespaced))
        {
            out.push(crate::engine::watches::Watched::of_bundle_kind(
                ar,
                manifests_dir,
                &permissions,
            ));
        }
    }
    // A namespaced kind the code writes anywhere (granted cluster-wide
    // beyond the bundles) is watched everywhere, so an edit or deletion
    // of such an object outside the allowed namespaces is repaired too.
    for w in out.iter_mut().filter(|w| w.namespaced) {
        w.everywhere = rbac::allows(
            &permissions.extra,
            &w.resource.group,
            &w.resource.plural,
            "watch",
        );
    }
    out
}

/// Maps a managed object back to its component CR, from its owner labels.
pub(super) fn owner_of<K: ComponentResource>(
    obj: &crate::engine::live_index::MetaObject,
) -> Option<ObjectRef<K>> {
    let l = obj.metadata.labels.as_ref()?;
    Some(ObjectRef::new(l.get(labels::OWNER_NAME)?).within(l.get(labels::OWNER_NAMESPACE)?))
}

/// The CRs a watched object's event concerns: the one its owner labels name
/// and, when it differs, the one that applied it (its labels were edited).
fn owners_of<K: ComponentResource>(
    owners: &super::owners::Owners,
    group_kind: &str,
    obj: crate::engine::live_index::MetaObject,
) -> Vec<ObjectRef<K>> {
    let mut out: Vec<ObjectRef<K>> = owner_of::<K>(&obj).into_iter().collect();
    let key = crate::engine::apply::ObjectKey {
        group_kind: group_kind.to_string(),
        namespace: obj.metadata.namespace.clone().unwrap_or_default(),
        name: obj.metadata.name.clone().unwrap_or_default(),
    };
    if let Some((ns, name)) = owners.of(&key) {
        let applied = ObjectRef::new(&name).within(&ns);
        if !out.contains(&applied) {
            out.push(applied);
        }
    }
    out
}
