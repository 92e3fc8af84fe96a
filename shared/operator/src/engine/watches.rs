//! What an operator watches, and how: every kind its bundles hold (so a
//! deleted or edited object of any managed kind brings a reconcile), each
//! watch with its own backoff. kube-runtime's controller backs off all of its
//! trigger streams together when any one fails; after an API server restart
//! each watch fails once in turn, and a shared backoff put every watch to
//! sleep for minutes. Here a watch's errors stay in that watch.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use futures::{Stream, StreamExt};
use kube::api::{Api, ApiResource};
use kube::core::GroupVersionKind;
use kube::runtime::WatchStreamExt;
use kube::runtime::utils::Backoff;
use kube::runtime::{reflector, watcher};

use crate::base::bundle;
use crate::render::rbac::Permissions;

/// A watch's own backoff: doubling from 200 ms, capped at 5 s, so a kind
/// whose CRD the operator is installing right now, or a restarted API
/// server, is watched again within seconds; back to 200 ms once the watch
/// has run without failing for `HEALTHY_FOR`.
///
/// kube's watcher yields an `Init` event before each list, and its backoff
/// resets on any event, so a kind that is not served "recovered" between
/// every two failures: its watch retried every 200 ms for ever (measured:
/// 592 requests a minute at rest from the serving operator's two
/// cert-manager watches). A reset therefore counts only when the next
/// failure comes long enough after the last one.
#[derive(Clone, Debug)]
pub struct WatchBackoff {
    next: Duration,
    last_failure: Option<Instant>,
    reset_asked: bool,
}

/// First retry delay.
const FIRST: Duration = Duration::from_millis(200);
/// Longest delay between retries.
const CAP: Duration = Duration::from_secs(5);
/// How long a watch must run without failing for its backoff to start over
/// (longer than `CAP`, so a watch failing at every try never starts over).
const HEALTHY_FOR: Duration = Duration::from_secs(10);

impl Default for WatchBackoff {
    fn default() -> Self {
        WatchBackoff {
            next: FIRST,
            last_failure: None,
            reset_asked: false,
        }
    }
}

impl WatchBackoff {
    /// The delay after a failure at `now`.
    fn delay_at(&mut self, now: Instant) -> Duration {
        let healthy = self
            .last_failure
            .is_none_or(|at| now.saturating_duration_since(at) >= HEALTHY_FOR);
        if self.reset_asked && healthy {
            self.next = FIRST;
        }
        self.reset_asked = false;
        self.last_failure = Some(now);
        let delay = self.next;
        self.next = (self.next * 2).min(CAP);
        delay
    }
}

impl Iterator for WatchBackoff {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        Some(self.delay_at(Instant::now()))
    }
}

impl Backoff for WatchBackoff {
    fn reset(&mut self) {
        self.reset_asked = true;
    }
}

/// The backoff of the controller's own trigger (its CR kind): the same.
pub fn trigger_backoff() -> WatchBackoff {
    WatchBackoff::default()
}

/// A watch of `api` whose errors are retried by its own backoff and logged,
/// never passed on: the stream only yields the objects it sees.
pub fn isolated<K>(
    api: Api<K>,
    config: watcher::Config,
    what: String,
) -> impl Stream<Item = Result<K, watcher::Error>> + Send + 'static
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    quiet(
        watcher::watcher(api, config)
            .backoff(WatchBackoff::default())
            .touched_objects(),
        what,
    )
}

/// `isolated`, also keeping what it sees in `writer`'s store: a controller
/// that reads these objects in every reconcile reads them from memory
/// instead of asking the API server each time (the meta-operator read its
/// fifteen children with fifteen GETs per reconcile: 19,000 GETs in one
/// install and upgrade).
pub fn isolated_into<K>(
    api: Api<K>,
    config: watcher::Config,
    what: String,
    writer: reflector::store::Writer<K>,
) -> impl Stream<Item = Result<K, watcher::Error>> + Send + 'static
where
    K: kube::Resource
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone + Send + Sync,
{
    quiet(
        watcher::watcher(api, config)
            .backoff(WatchBackoff::default())
            .reflect(writer)
            .touched_objects(),
        what,
    )
}

/// Drops a watch's errors after logging them (its backoff retries it).
pub(crate) fn quiet<K>(
    objects: impl Stream<Item = Result<K, watcher::Error>> + Send + 'static,
    what: String,
) -> impl Stream<Item = Result<K, watcher::Error>> + Send + 'static
where
    K: Send + 'static,
{
    objects.filter_map(move |r| {
        let out = match r {
            Ok(o) => Some(Ok(o)),
            Err(e) => {
                // A kind not served yet (its CRD comes with the bundle) fails until it is.
                tracing::debug!(watch = %what, error = %e, "watch failed; retrying on its own backoff");
                None
            }
        };
        futures::future::ready(out)
    })
}

/// A kind to watch, and whether it is watched per namespace.
#[derive(Clone, Debug)]
pub struct Watched {
    /// The kind's API resource.
    pub resource: ApiResource,
    /// Whether objects of it live in namespaces.
    pub namespaced: bool,
    /// The CRD that serves it (`plural.group`): the bundles' own, or another
    /// project's; its watch starts once that CRD exists (see `live_index`).
    /// None for Kubernetes' and OpenShift's own kinds.
    pub crd: Option<String>,
    /// A namespaced kind watched in every namespace, not once per allowed
    /// one: the operator writes objects of it outside them (the Dashboard's
    /// contributor bindings in profile namespaces), and its RBAC grants the
    /// watch cluster-wide.
    pub everywhere: bool,
}

impl Watched {
    /// A kind no bundle defines a CRD for: Kubernetes' own, or another
    /// project's (cert-manager's Certificate in the KServe bundles), which
    /// is watched once its CRD exists, so a cluster without that project
    /// costs no request.
    pub fn of_kind(resource: ApiResource) -> Self {
        Watched {
            crd: crate::base::kinds::is_served_by_crd(&resource.group)
                .then(|| format!("{}.{}", resource.plural, resource.group)),
            namespaced: !crate::base::kinds::is_builtin_cluster_scoped(&resource.kind),
            resource,
            everywhere: false,
        }
    }

    /// A kind the component's code writes beyond its bundles' objects, with
    /// the plural and scope its bundles' CRDs give it when they define it:
    /// the Dashboard's declared Profiles are cluster-scoped, and a watch of
    /// them per namespace never saw one (an owner edit or a deletion waited
    /// for the resync).
    pub fn of_bundle_kind(
        resource: ApiResource,
        manifests_dir: &Path,
        permissions: &Permissions,
    ) -> Self {
        let mut crds = BTreeMap::new();
        for folder in &permissions.bundles {
            crds.extend(bundle::crd_names(&manifests_dir.join(folder)));
        }
        Self::scoped_by(resource, &crds)
    }

    /// [`Watched::of_kind`], with the plural and scope of a CRD in `crds`.
    fn scoped_by(
        resource: ApiResource,
        crds: &BTreeMap<(String, String), bundle::CrdNames>,
    ) -> Self {
        match crds.get(&(resource.group.clone(), resource.kind.clone())) {
            Some(c) => {
                let gvk = GroupVersionKind::gvk(&resource.group, &resource.version, &resource.kind);
                Watched {
                    crd: Some(format!("{}.{}", c.plural, resource.group)),
                    resource: ApiResource::from_gvk_with_plural(&gvk, &c.plural),
                    namespaced: c.namespaced,
                    everywhere: false,
                }
            }
            None => Self::of_kind(resource),
        }
    }
}

/// Every kind of the permissions' bundles (every version), one version per
/// group and kind (the most stable one the bundles use), with the plural and
/// scope the bundles' CRDs give it.
pub fn bundle_kinds(manifests_dir: &Path, permissions: &Permissions) -> Vec<Watched> {
    let types = crate::render::rbac::bundle_types(manifests_dir, permissions);
    let mut crds = BTreeMap::new();
    for folder in &permissions.bundles {
        crds.extend(bundle::crd_names(&manifests_dir.join(folder)));
    }
    let mut chosen: BTreeMap<(String, String), GroupVersionKind> = BTreeMap::new();
    for (api_version, kind) in types {
        let (group, version) = api_version.rsplit_once('/').unwrap_or(("", &api_version));
        let gvk = GroupVersionKind::gvk(group, version, &kind);
        let slot = chosen
            .entry((group.to_string(), kind.clone()))
            .or_insert_with(|| gvk.clone());
        if stability(&gvk.version) > stability(&slot.version) {
            *slot = gvk;
        }
    }
    chosen
        .into_values()
        .map(
            |gvk| match crds.get(&(gvk.group.clone(), gvk.kind.clone())) {
                Some(c) => Watched {
                    crd: Some(format!("{}.{}", c.plural, gvk.group)),
                    resource: ApiResource::from_gvk_with_plural(&gvk, &c.plural),
                    namespaced: c.namespaced,
                    everywhere: false,
                },
                None => Watched::of_kind(ApiResource::from_gvk(&gvk)),
            },
        )
        .collect()
}

/// Orders Kubernetes versions: GA above beta above alpha, then by number.
fn stability(version: &str) -> (u8, u32, u32) {
    let rest = version.trim_start_matches('v');
    let (major, tail) = rest.split_at(
        rest.find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len()),
    );
    let major = major.parse().unwrap_or(0);
    let (level, minor) = if let Some(n) = tail.strip_prefix("beta") {
        (1, n.parse().unwrap_or(0))
    } else if let Some(n) = tail.strip_prefix("alpha") {
        (0, n.parse().unwrap_or(0))
    } else {
        (2, 0)
    };
    (level, major, minor)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_watch_retries_quickly_and_never_waits_long() {
        let mut b = WatchBackoff::default();
        let delays: Vec<u128> = b.by_ref().take(7).map(|d| d.as_millis()).collect();
        assert_eq!(delays, vec![200, 400, 800, 1600, 3200, 5000, 5000]);
    }

    #[test]
    fn a_reset_counts_only_after_the_watch_ran_without_failing() {
        let start = Instant::now();
        let mut b = WatchBackoff::default();
        let mut at = start;
        let mut delays = Vec::new();
        // A kind that is not served: every list fails right after the
        // watcher's Init event (a reset) that precedes it.
        for _ in 0..7 {
            let d = b.delay_at(at);
            delays.push(d.as_millis());
            b.reset();
            at += d + Duration::from_millis(2);
        }
        assert_eq!(delays, vec![200, 400, 800, 1600, 3200, 5000, 5000]);
        // Then it is served and runs for a minute before it fails again.
        b.reset();
        assert_eq!(b.delay_at(at + Duration::from_secs(60)), FIRST);
        // Without a reset in between, no start over however long it ran.
        let mut c = WatchBackoff::default();
        c.delay_at(start);
        assert_eq!(c.delay_at(start + Duration::from_secs(60)).as_millis(), 400);
    }

    #[test]
    fn a_cluster_scoped_kind_of_a_bundle_crd_is_watched_cluster_wide() {
        let crds = BTreeMap::from([(
            ("kubeflow.org".to_string(), "Profile".to_string()),
            bundle::CrdNames {
                plural: "profiles".into(),
                namespaced: false,
            },
        )]);
        let profile =
            ApiResource::from_gvk(&GroupVersionKind::gvk("kubeflow.org", "v1", "Profile"));
        assert!(
            Watched::of_kind(profile.clone()).namespaced,
            "what of_kind alone guessed"
        );
        let w = Watched::scoped_by(profile, &crds);
        assert!(!w.namespaced);
        assert_eq!(w.resource.plural, "profiles");
        assert_eq!(w.crd.as_deref(), Some("profiles.kubeflow.org"));
    }

    #[test]
    fn the_most_stable_version_wins() {
        assert!(stability("v1") > stability("v1beta1"));
        assert!(stability("v2") > stability("v1"));
        assert!(stability("v1beta2") > stability("v1beta1"));
        assert!(stability("v1beta1") > stability("v2alpha1"));
    }

    #[test]
    fn every_kind_of_the_bundles_is_watched_with_its_crd_plural() {
        let root = std::env::temp_dir().join(format!("kubeflow-watches-{}", std::process::id()));
        let v = root.join("demo/v1");
        std::fs::create_dir_all(&v).expect("dir");
        std::fs::write(
            v.join("a.yaml"),
            "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: a}\n---\napiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata:\n  name: sidecars.networking.istio.io\nspec:\n  group: networking.istio.io\n  names:\n    kind: Sidecar\n    listKind: SidecarList\n    plural: sidecars\n    singular: sidecar\n---\napiVersion: networking.istio.io/v1beta1\nkind: Sidecar\nmetadata: {name: s}\n---\napiVersion: networking.istio.io/v1\nkind: Sidecar\nmetadata: {name: t}\n---\napiVersion: autoscaling/v2\nkind: HorizontalPodAutoscaler\nmetadata: {name: h}\n",
        )
        .expect("write");
        let kinds = bundle_kinds(&root, &Permissions::bundles(&["demo"]));
        let _ = std::fs::remove_dir_all(&root);
        let names: Vec<String> = kinds
            .iter()
            .map(|w| format!("{}/{}", w.resource.api_version, w.resource.plural))
            .collect();
        let namespaced: Vec<bool> = kinds.iter().map(|w| w.namespaced).collect();
        assert_eq!(namespaced, [false, true, true, true]);
        assert_eq!(
            names,
            vec![
                "apiextensions.k8s.io/v1/customresourcedefinitions",
                "apps/v1/deployments",
                "autoscaling/v2/horizontalpodautoscalers",
                "networking.istio.io/v1/sidecars",
            ]
        );
    }
}
