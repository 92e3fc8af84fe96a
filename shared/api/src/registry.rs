//! Every component, named once: what the meta-operator, the shared library,
//! the scripts (through `shared/api/components.tsv`, which `charts/generate`
//! writes from this table and CI checks) and the tests derive their lists
//! from. A new component is one entry here ([`for_each_component`]),
//! beside its crate and API type.

use std::fmt::Write as _;

/// One component of Kubeflow: its own custom resource kind and operator.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Component {
    /// Its name: the operator's (`kubeflow-<name>-operator`) and image's,
    /// the `components.kubeflow.org/component` label's value, its metrics'
    /// `component` label.
    pub name: &'static str,
    /// What people call it, in a console (the OLM bundle's descriptors).
    pub title: &'static str,
    /// Its custom resource's kind in `components.kubeflow.org`.
    pub kind: &'static str,
    /// Its custom resource's plural.
    pub plural: &'static str,
    /// Its field under the `Kubeflow` resource's `spec.components`, and the
    /// chart's `operators.<field>`.
    pub field: &'static str,
    /// Its own bundle folders, under the manifests folder.
    pub bundles: &'static [&'static str],
    /// Whether it also reads the platform glue ([`PLATFORM`]), which is
    /// no one component's bundle: files taken one by one, not a bundle
    /// moved into a namespace.
    pub takes_platform: bool,
    /// The components it waits for when they are Managed, by name.
    pub depends_on: &'static [&'static str],
}

/// The meta-operator's name among the operators (its image, its binary).
pub const META: &str = "meta";

/// The folder of the platform glue (the Kubeflow roles, the cluster-local
/// gateway), which two components read files of.
pub const PLATFORM: &str = "platform";

/// Every component, in the order the meta-operator creates them (each
/// after what it depends on: a unit test holds this), named once: the one
/// list the crate's per-component code is derived from. It passes the
/// entries to `$callback!`, which generates what it needs of them: this
/// table ([`COMPONENTS`]), the API types' registrations (the
/// `ComponentResource` impls, the crate root's re-exports, the CRD list),
/// the `Kubeflow` resource's component fields, and the meta-operator's
/// `ComponentKind`.
///
/// An entry is the module of its API type (`components/<module>.rs`, also
/// its field's Rust name in the `Kubeflow` resource) and its kind, the doc
/// of its `Kubeflow` entry (`kubectl explain`), then the fields of
/// [`Component`].
///
/// `$callback!` gets each entry in one fixed form, so that its matcher is
/// one line and no callback restates the entries' layout:
///
/// ```text
/// ($($module:ident $kind:ident $name:tt $field:tt $plural:tt [$($doc:tt)*] $component:tt)*)
/// ```
///
/// `$name`, `$field` and `$plural` are the entry's string literals (taken
/// as `tt`, which keeps the line short: this macro has checked them once),
/// `$doc` its doc lines, `$component` its [`Component`] as one expression.
#[macro_export]
macro_rules! for_each_component {
    ($callback:ident) => {
        $crate::for_each_component! { @fixed $callback
            /// The Istio control plane (Serving and Pipelines wait for it when it is Managed).
            istio::Istio {
                name: "istio",
                field: "istio",
                plural: "istios",
                title: "Istio",
                bundles: ["istio"],
                takes_platform: false,
                depends_on: [],
            },
            /// cert-manager and the Kubeflow issuer, or only the issuer where
            /// another cert-manager serves the cluster (Serving waits for it when it
            /// is Managed).
            cert_manager::CertManager {
                name: "cert-manager",
                field: "certManager",
                plural: "certmanagers",
                title: "cert-manager",
                bundles: ["cert-manager"],
                takes_platform: false,
                depends_on: [],
            },
            // net-istio and the cluster-local gateway are Istio objects.
            /// Knative Serving (and Eventing when asked): what KServe's Serverless
            /// mode runs on (waits for Istio when it is Managed; Serving waits for
            /// it when it is Managed).
            knative::Knative {
                name: "knative",
                field: "knative",
                plural: "knatives",
                title: "Knative",
                bundles: ["knative"],
                takes_platform: true,
                depends_on: ["istio"],
            },
            // Its version is oauth2-proxy's (dex is released beside it).
            // oauth2-proxy sits in front of Istio's ingress gateway, whose mesh
            // config must name it; cert-manager's webhook certificates come before
            // any web app.
            /// Login in front of the web apps: oauth2-proxy with the bundled dex or
            /// an external OIDC provider (waits for Istio and cert-manager when they
            /// are Managed; when it is Managed, the Istio entry gets the
            /// `oauth2-proxy` extension provider and the `kubeflow-gateway`).
            auth::Auth {
                name: "auth",
                field: "auth",
                plural: "auths",
                title: "Login (dex and oauth2-proxy)",
                bundles: ["oauth2-proxy", "dex"],
                takes_platform: false,
                depends_on: ["istio", "cert-manager"],
            },
            // Behind the login, with its PodDefaults webhook's certificate from
            // cert-manager; the Kubeflow roles come from the platform folder.
            /// The central dashboard, profiles (Kubeflow's tenancy) with KFAM, the
            /// PodDefaults webhook and the aggregated Kubeflow roles, and the
            /// profiles you declare (waits for Istio, cert-manager and Auth when
            /// they are Managed).
            dashboard::Dashboard {
                name: "dashboard",
                field: "dashboard",
                plural: "dashboards",
                title: "Central dashboard and profiles",
                bundles: ["dashboard"],
                takes_platform: true,
                depends_on: ["istio", "cert-manager", "auth"],
            },
            /// The training-operator (Trainer v1: TFJob, PyTorchJob, ...).
            training::Training {
                name: "training",
                field: "training",
                plural: "trainings",
                title: "Training operator",
                bundles: ["training"],
                takes_platform: false,
                depends_on: [],
            },
            /// Kubeflow Trainer v2 (TrainJob, with JobSet); part of releases from 1.11.0 on.
            trainer::Trainer {
                name: "trainer",
                field: "trainer",
                plural: "trainers",
                title: "Trainer",
                bundles: ["trainer"],
                takes_platform: false,
                depends_on: [],
            },
            /// GPU device plugins.
            device_plugins::DevicePlugins {
                name: "device-plugins",
                field: "devicePlugins",
                plural: "deviceplugins",
                title: "Device plugins",
                bundles: ["device-plugins/nvidia-gpu", "device-plugins/intel-gpu"],
                takes_platform: false,
                depends_on: [],
            },
            /// Kubeflow Pipelines.
            pipelines::Pipelines {
                name: "pipelines",
                field: "pipelines",
                plural: "pipelines",
                title: "Pipelines",
                bundles: ["pipelines"],
                takes_platform: false,
                depends_on: ["istio"],
            },
            // KServe's Issuer and Certificate, when cert-manager is there; Knative,
            // which its Serverless mode runs on.
            /// KServe.
            serving::Serving {
                name: "serving",
                field: "serving",
                plural: "servings",
                title: "Serving (KServe)",
                bundles: ["serving"],
                takes_platform: false,
                depends_on: ["istio", "cert-manager", "knative"],
            },
            // Its web apps' routes, login and menu, and its PVC viewer's webhook
            // certificate.
            /// Kubeflow Notebooks (waits for Istio and cert-manager when they are
            /// Managed: its web apps route through Istio, its PVC viewer's webhook
            /// certificate comes from cert-manager).
            notebooks::Notebooks {
                name: "notebooks",
                field: "notebooks",
                plural: "notebooks",
                title: "Notebooks",
                bundles: ["notebooks"],
                takes_platform: false,
                depends_on: ["istio", "cert-manager", "auth", "dashboard"],
            },
            // The same for its web app and its webhooks' certificate.
            /// Katib, hyperparameter tuning (waits for Istio, cert-manager and the
            /// Dashboard when they are Managed: its web app routes through Istio
            /// behind the login and is listed in the dashboard, its webhook
            /// certificate comes from cert-manager).
            katib::Katib {
                name: "katib",
                field: "katib",
                plural: "katibs",
                title: "Katib",
                bundles: ["katib"],
                takes_platform: false,
                depends_on: ["istio", "cert-manager", "auth", "dashboard"],
            },
            // Its web app's route, login and menu entry.
            /// Model Registry, Kubeflow Hub from 26.03.1 on (waits for Istio, and
            /// for the Dashboard when it is Managed: its web app routes through
            /// Istio behind the login and is listed in the dashboard).
            model_registry::ModelRegistry {
                name: "model-registry",
                field: "modelRegistry",
                plural: "modelregistries",
                title: "Model Registry",
                bundles: ["model-registry"],
                takes_platform: false,
                depends_on: ["istio", "auth", "dashboard"],
            },
            /// The Spark operator (Spark applications in the namespaces you name).
            spark::Spark {
                name: "spark",
                field: "spark",
                plural: "sparks",
                title: "Spark operator",
                bundles: ["spark"],
                takes_platform: false,
                depends_on: [],
            },
        }
    };
    // The entries above, parsed once, handed on in the fixed form.
    (@fixed $callback:ident $(
        $(#[doc = $doc:literal])*
        $module:ident :: $kind:ident {
            name: $name:literal,
            field: $field:literal,
            plural: $plural:literal,
            title: $title:literal,
            bundles: [$($bundle:literal),* $(,)?],
            takes_platform: $takes_platform:literal,
            depends_on: [$($depends_on:literal),* $(,)?] $(,)?
        }
    ),* $(,)?) => {
        $callback! {$(
            $module $kind $name $field $plural [$($doc)*] {
                $crate::registry::Component {
                    name: $name,
                    kind: stringify!($kind),
                    plural: $plural,
                    field: $field,
                    title: $title,
                    bundles: &[$($bundle),*],
                    takes_platform: $takes_platform,
                    depends_on: &[$($depends_on),*],
                }
            }
        )*}
    };
}

/// [`COMPONENTS`] from the entries of [`for_each_component`].
macro_rules! registry_table {
    ($($module:ident $kind:ident $name:tt $field:tt $plural:tt [$($doc:tt)*] $component:tt)*) => {
        /// Every component, in the order the meta-operator creates them.
        pub const COMPONENTS: &[Component] = &[$($component),*];
    };
}

for_each_component!(registry_table);

/// The component of that name.
pub fn by_name(name: &str) -> Option<&'static Component> {
    COMPONENTS.iter().find(|c| c.name == name)
}

/// The component of that kind.
pub fn by_kind(kind: &str) -> Option<&'static Component> {
    COMPONENTS.iter().find(|c| c.kind == kind)
}

/// Every operator's name: the meta-operator's, then the components'.
pub fn operators() -> impl Iterator<Item = &'static str> {
    std::iter::once(META).chain(COMPONENTS.iter().map(|c| c.name))
}

impl Component {
    /// The folders its image carries: its bundles and the platform glue
    /// when it reads it.
    pub fn image_folders(&self) -> Vec<&'static str> {
        let platform = self.takes_platform.then_some(PLATFORM);
        self.bundles.iter().copied().chain(platform).collect()
    }
}

/// Every component's own bundle folders, in creation order.
pub fn bundle_folders() -> Vec<&'static str> {
    COMPONENTS
        .iter()
        .flat_map(|c| c.bundles.iter().copied())
        .collect()
}

/// The table for scripts: a header, then one line per operator, tab
/// separated (name, kind, plural, field, the folders its image carries,
/// dependencies; lists comma separated, `-` for none), which `read` and
/// `awk` take as it is.
pub fn to_tsv() -> String {
    let mut out = String::from(
        "# Generated by charts/generate from shared/api/src/registry.rs; do not edit.\n\
         # name\tkind\tplural\tfield\timage_folders\tdepends_on\n",
    );
    let list = |l: &[&str]| {
        if l.is_empty() {
            "-".to_string()
        } else {
            l.join(",")
        }
    };
    let _ = writeln!(out, "{META}\tKubeflow\tkubeflows\t-\t-\t-");
    for c in COMPONENTS {
        let _ = writeln!(
            out,
            "{}\t{}\t{}\t{}\t{}\t{}",
            c.name,
            c.kind,
            c.plural,
            c.field,
            list(&c.image_folders()),
            list(c.depends_on)
        );
    }
    out
}

/// The registry as JSON, for tools that read that.
pub fn to_json() -> serde_json::Value {
    serde_json::json!({
        "operators": operators().collect::<Vec<_>>(),
        "components": COMPONENTS.iter().map(|c| serde_json::json!({
            "name": c.name,
            "title": c.title,
            "kind": c.kind,
            "plural": c.plural,
            "field": c.field,
            "bundles": c.bundles,
            "imageFolders": c.image_folders(),
            "dependsOn": c.depends_on,
        })).collect::<Vec<_>>(),
    })
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    #[test]
    fn dependencies_are_known_and_created_first() {
        for (i, c) in COMPONENTS.iter().enumerate() {
            for d in c.depends_on {
                let at = COMPONENTS
                    .iter()
                    .position(|x| x.name == *d)
                    .unwrap_or_else(|| panic!("{}: unknown dependency {d}", c.name));
                assert!(at < i, "{d} is created before {}", c.name);
            }
        }
    }

    #[test]
    fn names_kinds_plurals_and_fields_are_unique() {
        let each = |f: fn(&Component) -> &'static str| {
            COMPONENTS.iter().map(f).collect::<BTreeSet<_>>().len()
        };
        assert_eq!(each(|c| c.name), COMPONENTS.len());
        assert_eq!(each(|c| c.kind), COMPONENTS.len());
        assert_eq!(each(|c| c.plural), COMPONENTS.len());
        assert_eq!(each(|c| c.field), COMPONENTS.len());
        assert!(by_name(META).is_none());
    }

    /// The registry and the typed CRDs name the same kinds and plurals, and
    /// its fields are the `Kubeflow` resource's components.
    #[test]
    fn the_registry_matches_the_types() {
        let typed: BTreeSet<(String, String)> = crate::crds::all()
            .into_iter()
            .map(|(_, crd)| crd.spec)
            .filter(|s| s.group == "components.kubeflow.org")
            .map(|s| (s.names.kind, s.names.plural))
            .collect();
        let listed: BTreeSet<(String, String)> = COMPONENTS
            .iter()
            .map(|c| (c.kind.to_string(), c.plural.to_string()))
            .collect();
        assert_eq!(typed, listed);

        let kubeflow = serde_json::to_value(<crate::Kubeflow as kube::CustomResourceExt>::crd())
            .expect("json");
        let fields: BTreeSet<String> = kubeflow
            .pointer("/spec/versions/0/schema/openAPIV3Schema/properties/spec/properties/components/properties")
            .and_then(|p| p.as_object())
            .expect("spec.components")
            .keys()
            .cloned()
            .collect();
        let listed: BTreeSet<String> = COMPONENTS.iter().map(|c| c.field.to_string()).collect();
        assert_eq!(fields, listed);
    }

    #[test]
    fn the_table_has_a_line_per_operator() {
        let tsv = to_tsv();
        let rows: Vec<Vec<&str>> = tsv
            .lines()
            .filter(|l| !l.starts_with('#'))
            .map(|l| l.split('\t').collect())
            .collect();
        assert_eq!(rows.len(), COMPONENTS.len() + 1);
        assert!(rows.iter().all(|r| r.len() == 6), "{rows:?}");
        assert_eq!(rows[0][0], META);
        assert_eq!(
            rows[5],
            [
                "dashboard",
                "Dashboard",
                "dashboards",
                "dashboard",
                "dashboard,platform",
                "istio,cert-manager,auth"
            ]
        );
        assert!(!bundle_folders().contains(&PLATFORM));
        let unique: BTreeSet<_> = bundle_folders().into_iter().collect();
        assert_eq!(unique.len(), bundle_folders().len());
    }
}
