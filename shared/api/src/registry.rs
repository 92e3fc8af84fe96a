//! Every component, named once: what the meta-operator, the shared library,
//! the scripts (through `shared/api/components.tsv`, which `charts/generate`
//! writes from this table and CI checks) and the tests derive their lists
//! from. A new component is one entry here, beside its crate and API type.

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

/// Every component, in the order the meta-operator creates them: each
/// after what it depends on (a unit test holds this).
pub const COMPONENTS: &[Component] = &[
    Component {
        name: "istio",
        title: "Istio",
        kind: "Istio",
        plural: "istios",
        field: "istio",
        bundles: &["istio"],
        takes_platform: false,
        depends_on: &[],
    },
    Component {
        name: "cert-manager",
        title: "cert-manager",
        kind: "CertManager",
        plural: "certmanagers",
        field: "certManager",
        bundles: &["cert-manager"],
        takes_platform: false,
        depends_on: &[],
    },
    // net-istio and the cluster-local gateway are Istio objects.
    Component {
        name: "knative",
        title: "Knative",
        kind: "Knative",
        plural: "knatives",
        field: "knative",
        bundles: &["knative"],
        takes_platform: true,
        depends_on: &["istio"],
    },
    // Its version is oauth2-proxy's (dex is released beside it).
    // oauth2-proxy sits in front of Istio's ingress gateway, whose mesh
    // config must name it; cert-manager's webhook certificates come before
    // any web app.
    Component {
        name: "auth",
        title: "Login (dex and oauth2-proxy)",
        kind: "Auth",
        plural: "auths",
        field: "auth",
        bundles: &["oauth2-proxy", "dex"],
        takes_platform: false,
        depends_on: &["istio", "cert-manager"],
    },
    // Behind the login, with its PodDefaults webhook's certificate from
    // cert-manager; the Kubeflow roles come from the platform folder.
    Component {
        name: "dashboard",
        title: "Central dashboard and profiles",
        kind: "Dashboard",
        plural: "dashboards",
        field: "dashboard",
        bundles: &["dashboard"],
        takes_platform: true,
        depends_on: &["istio", "cert-manager", "auth"],
    },
    Component {
        name: "training",
        title: "Training operator",
        kind: "Training",
        plural: "trainings",
        field: "training",
        bundles: &["training"],
        takes_platform: false,
        depends_on: &[],
    },
    Component {
        name: "trainer",
        title: "Trainer",
        kind: "Trainer",
        plural: "trainers",
        field: "trainer",
        bundles: &["trainer"],
        takes_platform: false,
        depends_on: &[],
    },
    Component {
        name: "device-plugins",
        title: "Device plugins",
        kind: "DevicePlugins",
        plural: "deviceplugins",
        field: "devicePlugins",
        bundles: &["device-plugins/nvidia-gpu", "device-plugins/intel-gpu"],
        takes_platform: false,
        depends_on: &[],
    },
    Component {
        name: "pipelines",
        title: "Pipelines",
        kind: "Pipelines",
        plural: "pipelines",
        field: "pipelines",
        bundles: &["pipelines"],
        takes_platform: false,
        depends_on: &["istio"],
    },
    // KServe's Issuer and Certificate, when cert-manager is there; Knative,
    // which its Serverless mode runs on.
    Component {
        name: "serving",
        title: "Serving (KServe)",
        kind: "Serving",
        plural: "servings",
        field: "serving",
        bundles: &["serving"],
        takes_platform: false,
        depends_on: &["istio", "cert-manager", "knative"],
    },
    // Its web apps' routes, login and menu, and its PVC viewer's webhook
    // certificate.
    Component {
        name: "notebooks",
        title: "Notebooks",
        kind: "Notebooks",
        plural: "notebooks",
        field: "notebooks",
        bundles: &["notebooks"],
        takes_platform: false,
        depends_on: &["istio", "cert-manager", "auth", "dashboard"],
    },
    // The same for its web app and its webhooks' certificate.
    Component {
        name: "katib",
        title: "Katib",
        kind: "Katib",
        plural: "katibs",
        field: "katib",
        bundles: &["katib"],
        takes_platform: false,
        depends_on: &["istio", "cert-manager", "auth", "dashboard"],
    },
    // Its web app's route, login and menu entry.
    Component {
        name: "model-registry",
        title: "Model Registry",
        kind: "ModelRegistry",
        plural: "modelregistries",
        field: "modelRegistry",
        bundles: &["model-registry"],
        takes_platform: false,
        depends_on: &["istio", "auth", "dashboard"],
    },
    Component {
        name: "spark",
        title: "Spark operator",
        kind: "Spark",
        plural: "sparks",
        field: "spark",
        bundles: &["spark"],
        takes_platform: false,
        depends_on: &[],
    },
];

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
