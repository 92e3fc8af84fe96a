//! What every step of a component's reconcile shares: the component, the
//! apply engine, the operator's tools and caches. Data only: the steps
//! (reconcile, inputs, upgrade, assess, announce, removal) take it, and the
//! controller (controller.rs) drives them, so no step imports the controller.

use std::path::PathBuf;
use std::sync::Mutex;

use kubeflow_api::Platform;

use super::Component;
use crate::base::bundle::BundleCache;
use crate::base::scope::NamespaceScope;
use crate::engine::apply::Engine;
use crate::framework::controller::Tools;

pub(super) struct Context<C: Component> {
    pub(super) component: C,
    pub(super) engine: Engine,
    /// Client, Events, metrics and the operator's name.
    pub(super) tools: Tools,
    pub(super) bundles: BundleCache,
    pub(super) manifests_dir: PathBuf,
    /// Where CRs may install (the chart's `allowedNamespaces`).
    pub(super) scope: NamespaceScope,
    pub(super) detected_platform: Mutex<Option<Platform>>,
    /// Which CR applied each managed object (see `owners`).
    pub(super) owners: super::owners::Owners,
    /// What each CR's referenced ConfigMaps held when last read.
    pub(super) last_read: super::last_read::LastRead,
    /// The released objects each CR's last reconcile reported.
    pub(super) released: super::released_memory::ReleasedMemory,
}
