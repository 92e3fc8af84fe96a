//! The release table: which component versions each Kubeflow release is made
//! of, and which version changes are allowed.

use crate::component_kind::ComponentKind;

/// Component versions of one Kubeflow release.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Release {
    /// The Kubeflow release.
    pub kubeflow: &'static str,
    /// The version of each bundle folder the release carries, as
    /// kubeflow/manifests states it for the tag: a component's version is
    /// its first bundle folder's (in the component registry), Auth's is
    /// oauth2-proxy's (its dex is the one released beside it). A folder
    /// absent: not in that release's bundles (the device plugins' versions
    /// are chosen per resource).
    pub versions: &'static [(&'static str, &'static str)],
    /// The Istio version the bundle's control-plane images run, which the
    /// upgrade risk is judged by: 26.03's bundle is labelled 1.29.0 but runs
    /// 1.28.0 images (a test reads it from the bundle).
    pub istio_runs: &'static str,
}

/// Known releases, oldest first; an upgrade moves one step along this list.
pub const RELEASES: &[Release] = &[
    Release {
        kubeflow: "1.10.2",
        versions: &[
            ("training", "v1.9.2"),
            ("pipelines", "2.5.0"),
            ("serving", "v0.15.0"),
            ("istio", "1.26.1"),
        ],
        istio_runs: "1.26.1",
    },
    Release {
        kubeflow: "1.11.0",
        versions: &[
            ("training", "v1.9.2"),
            ("trainer", "v2.1.0"),
            ("pipelines", "2.15.0"),
            ("serving", "v0.15.2"),
            ("istio", "1.28.0"),
        ],
        istio_runs: "1.28.0",
    },
    // The first date release (kubeflow/manifests moved to YY.MM after 1.11.0).
    Release {
        kubeflow: "26.03",
        versions: &[
            ("training", "v1.9.2"),
            ("trainer", "v2.1.0"),
            ("pipelines", "2.16.0"),
            ("serving", "v0.16.0"),
            ("istio", "1.29.0"),
            ("cert-manager", "v1.19.4"),
            ("notebooks", "v1.10.0"),
            ("oauth2-proxy", "v7.14.3"),
            ("dex", "v2.45.0"),
            ("dashboard", "v1.10.0"),
            ("katib", "v0.19.0"),
            ("model-registry", "v0.3.7"),
            ("spark", "2.5.0"),
            ("knative", "v1.21.1"),
        ],
        istio_runs: "1.28.0",
    },
    Release {
        kubeflow: "26.03.1",
        versions: &[
            ("training", "v1.9.2"),
            ("trainer", "v2.2.0"),
            ("pipelines", "2.16.1"),
            ("serving", "v0.18.0"),
            ("istio", "1.30.1"),
            ("cert-manager", "v1.20.2"),
            ("notebooks", "v1.11.0"),
            ("oauth2-proxy", "v7.15.2"),
            ("dex", "v2.45.1"),
            ("dashboard", "v2.0.0"),
            ("katib", "v0.19.0"),
            ("model-registry", "v0.3.9"),
            ("spark", "2.5.0"),
            ("knative", "v1.22.0"),
        ],
        istio_runs: "1.30.1",
    },
];

impl Release {
    /// The version of a bundle folder in this release.
    pub fn version(&self, folder: &str) -> Option<&'static str> {
        self.versions
            .iter()
            .find(|(f, _)| *f == folder)
            .map(|(_, v)| *v)
    }

    /// The version of a component: its first bundle folder's. None for a
    /// component the release does not include or whose versions are chosen
    /// per CR (device plugins).
    pub fn component(&self, kind: ComponentKind) -> Option<&'static str> {
        kind.entry()
            .bundles
            .first()
            .and_then(|folder| self.version(folder))
    }

    /// The bundle folders and versions a component installs at this
    /// release: its bundle folders the release carries (Auth's dex beside
    /// oauth2-proxy), and the release's platform glue for a component that
    /// reads it (the Dashboard's Kubeflow roles, Knative's cluster-local
    /// gateway).
    pub fn bundles(&self, kind: ComponentKind) -> Vec<(&'static str, &'static str)> {
        if self.component(kind).is_none() {
            return Vec::new();
        }
        let entry = kind.entry();
        let platform = entry
            .takes_platform
            .then_some((kubeflow_api::registry::PLATFORM, self.kubeflow));
        entry
            .bundles
            .iter()
            .filter_map(|folder| self.version(folder).map(|v| (*folder, v)))
            .chain(platform)
            .collect()
    }
}

/// The minor version of "1.28.0" (28).
fn minor(version: &str) -> Option<u32> {
    version
        .trim_start_matches('v')
        .split('.')
        .nth(1)?
        .parse()
        .ok()
}

/// What an upgrade between two releases risks that the operators cannot
/// make safe yet: Istio's control plane moved more than one minor version in
/// place, which Istio does not support (one minor at a time, or a
/// revision-based canary upgrade).
pub fn upgrade_risk(from: &Release, to: &Release) -> Option<String> {
    let (a, b) = (minor(from.istio_runs)?, minor(to.istio_runs)?);
    (b > a + 1).then(|| {
        format!(
            "Kubeflow {} -> {} moves the running Istio control plane {} -> {} in place (bundles {} -> {}), {} minor versions at once; Istio supports one minor at a time (or a revision-based canary upgrade). Sidecars of running workloads keep the {} proxy until their pods restart; check the mesh before relying on it",
            from.kubeflow,
            to.kubeflow,
            from.istio_runs,
            to.istio_runs,
            from.version("istio").unwrap_or_default(),
            to.version("istio").unwrap_or_default(),
            b - a,
            from.istio_runs
        )
    })
}

/// Looks a release up.
pub fn find(version: &str) -> Option<&'static Release> {
    RELEASES.iter().find(|r| r.kubeflow == version)
}

/// The known releases, for messages.
pub fn known() -> String {
    RELEASES
        .iter()
        .map(|r| r.kubeflow)
        .collect::<Vec<_>>()
        .join(", ")
}

/// Why a version change is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ChangeRefused {
    /// Unknown release.
    #[error("unknown Kubeflow release {0:?}; known releases: {1}")]
    Unknown(String, String),
    /// Moving to an older release.
    #[error(
        "downgrade from {from} to {to} is refused; annotate the Kubeflow CR with platform.kubeflow.org/allow-downgrade=true to force it"
    )]
    Downgrade {
        /// Release installed.
        from: String,
        /// Release asked for.
        to: String,
    },
    /// Skipping a release.
    #[error("upgrade from {from} to {to} skips {skipped}; upgrade one release at a time")]
    Skip {
        /// Release installed.
        from: String,
        /// Release asked for.
        to: String,
        /// Releases skipped.
        skipped: String,
    },
}

/// Checks moving from the installed release (`from`, None on first install) to `to`.
pub fn check_change(
    from: Option<&str>,
    to: &str,
    allow_downgrade: bool,
) -> Result<&'static Release, ChangeRefused> {
    let target = RELEASES
        .iter()
        .position(|r| r.kubeflow == to)
        .ok_or_else(|| ChangeRefused::Unknown(to.to_string(), known()))?;
    let Some(from) = from else {
        return Ok(&RELEASES[target]);
    };
    let Some(current) = RELEASES.iter().position(|r| r.kubeflow == from) else {
        return Ok(&RELEASES[target]);
    };
    if target < current && !allow_downgrade {
        return Err(ChangeRefused::Downgrade {
            from: from.to_string(),
            to: to.to_string(),
        });
    }
    if target > current + 1 {
        let skipped = RELEASES[current + 1..target]
            .iter()
            .map(|r| r.kubeflow)
            .collect::<Vec<_>>()
            .join(", ");
        return Err(ChangeRefused::Skip {
            from: from.to_string(),
            to: to.to_string(),
            skipped,
        });
    }
    Ok(&RELEASES[target])
}

/// What upgrading from Kubeflow `from` to `to` would do, component by
/// component, from the bundles as upstream ships them (before the operators'
/// transforms), with the upgrade's risks; refused as the operator would
/// refuse the change (unknown, skipped or downgraded release).
pub fn plan(manifests_dir: &std::path::Path, from: &str, to: &str) -> anyhow::Result<String> {
    use std::fmt::Write as _;
    let old = find(from).ok_or_else(|| ChangeRefused::Unknown(from.to_string(), known()))?;
    let new = check_change(Some(from), to, false)?;
    let mut out = format!("Kubeflow {from} -> {to}\n");
    match upgrade_risk(old, new) {
        Some(risk) => writeln!(out, "risk: {risk}")?,
        None => writeln!(out, "risks: none known")?,
    }
    for c in ComponentKind::ORDER {
        let (a, b) = (old.component(c), new.component(c));
        match (a, b) {
            (None, None) => continue,
            (Some(a), Some(b)) if a == b => writeln!(out, "{c} {a}: unchanged")?,
            (Some(a), Some(b)) => {
                let load = |r: &Release| -> anyhow::Result<Vec<kube::api::DynamicObject>> {
                    let mut objects = Vec::new();
                    for (folder, v) in r.bundles(c) {
                        objects.extend(
                            kubeflow_operator::bundle::load(manifests_dir, folder, v)?.objects(),
                        );
                    }
                    Ok(objects)
                };
                let plan = kubeflow_operator::upgrade_plan::Plan::compute(&load(old)?, &load(new)?);
                write!(out, "{c} {a} -> {b}: {plan}")?;
            }
            (None, Some(b)) => writeln!(out, "{c}: installed at {b}")?,
            (Some(a), None) => writeln!(out, "{c} {a}: not part of Kubeflow {to}")?,
        }
    }
    Ok(out)
}

/// Every image a Kubeflow release would run, from its components' bundles as
/// upstream ships them (every device-plugin version: those are chosen per CR).
/// `all`: every release's, for a mirror that serves every upgrade step (and
/// the OLM bundle's relatedImages).
pub fn images(
    manifests_dir: &std::path::Path,
    kubeflow: &str,
) -> anyhow::Result<Vec<kubeflow_operator::images::Found>> {
    if kubeflow == "all" {
        let mut found = Vec::new();
        for r in RELEASES {
            found.extend(images(manifests_dir, r.kubeflow)?);
        }
        return Ok(found);
    }
    let release = find(kubeflow).ok_or_else(|| {
        anyhow::anyhow!(
            "unknown Kubeflow release {kubeflow}; known: {}",
            RELEASES
                .iter()
                .map(|r| r.kubeflow)
                .collect::<Vec<_>>()
                .join(", ")
        )
    })?;
    let mut bundles: Vec<(String, String)> = ComponentKind::ORDER
        .iter()
        .flat_map(|c| release.bundles(*c))
        // Only the platform glue's roles are applied: none of its images run.
        .filter(|(folder, _)| *folder != "platform")
        .map(|(folder, v)| (folder.to_string(), v.to_string()))
        .collect();
    for plugin in ["device-plugins/nvidia-gpu", "device-plugins/intel-gpu"] {
        for v in kubeflow_operator::bundle::available_versions(&manifests_dir.join(plugin)) {
            bundles.push((plugin.to_string(), v));
        }
    }
    let mut found = Vec::new();
    for (folder, version) in bundles {
        let bundle = kubeflow_operator::bundle::load(manifests_dir, &folder, &version)?;
        found.extend(kubeflow_operator::images::find(&bundle.objects()));
    }
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The bundles: `MANIFESTS_DIR`, or the folder beside the repository.
    fn manifests() -> std::path::PathBuf {
        std::env::var_os("MANIFESTS_DIR")
            .map(std::path::PathBuf::from)
            .unwrap_or_else(|| {
                std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/manifests")
            })
    }

    #[test]
    fn the_crd_accepts_exactly_the_releases_of_the_table() {
        let table: Vec<&str> = RELEASES.iter().map(|r| r.kubeflow).collect();
        assert_eq!(table, kubeflow_api::kubeflow::RELEASES);
    }

    #[test]
    fn the_table_matches_the_manifests_readme() {
        // The README beside the bundles gives each release's versions in a
        // table: Kubeflow, training-operator, trainer, pipelines, kserve,
        // istio, cert-manager ("n/r": not in that release's bundles), dex,
        // oauth2-proxy, dashboard, notebooks, katib, model registry, spark, knative, then the components no
        // operator installs yet.
        let readme =
            std::fs::read_to_string(manifests().join("README.md")).expect("the manifests README");
        // "v2.1.0 (upstream's default ...)" -> "v2.1.0"; "-" -> none.
        let cell = |c: &str| c.split_whitespace().next().unwrap_or("").to_string();
        let rows: Vec<Vec<String>> = readme
            .lines()
            .skip_while(|l| !l.starts_with("| Kubeflow | training-operator"))
            .skip(2)
            .take_while(|l| l.starts_with('|'))
            .map(|l| l.split('|').skip(1).map(cell).collect())
            .collect();
        assert_eq!(
            rows.len(),
            RELEASES.len(),
            "one README row per release of the table"
        );
        // The README's columns after Kubeflow's, as bundle folders.
        const COLUMNS: [&str; 14] = [
            "training",
            "trainer",
            "pipelines",
            "serving",
            "istio",
            "cert-manager",
            "dex",
            "oauth2-proxy",
            "dashboard",
            "notebooks",
            "katib",
            "model-registry",
            "spark",
            "knative",
        ];
        for row in rows {
            let r = find(&row[0]).unwrap_or_else(|| panic!("{} is not in the table", row[0]));
            for (i, folder) in COLUMNS.iter().enumerate() {
                let cell = row[i + 1].as_str();
                let given = (cell != "-" && cell != "n/r").then_some(cell);
                assert_eq!(r.version(folder), given, "{} {folder}", r.kubeflow);
            }
            // Nothing in the table the README does not give.
            for (folder, _) in r.versions {
                assert!(COLUMNS.contains(folder), "{} {folder}", r.kubeflow);
            }
        }
    }

    #[test]
    fn istio_runs_what_the_bundle_images_say() {
        let dir = manifests().join("istio");
        for r in RELEASES {
            let install = std::fs::read_to_string(
                dir.join(r.version("istio").expect("istio"))
                    .join("install.yaml"),
            )
            .expect("the istio bundle");
            let tags: std::collections::BTreeSet<&str> = install
                .lines()
                .filter_map(|l| l.trim().strip_prefix("image: "))
                .filter(|i| i.contains("/pilot:"))
                .filter_map(|i| i.rsplit(':').next())
                .collect();
            assert_eq!(
                tags.into_iter().collect::<Vec<_>>(),
                vec![r.istio_runs],
                "{}",
                r.kubeflow
            );
        }
    }

    #[test]
    fn every_version_of_the_table_has_a_bundle() {
        let dir = manifests();
        for r in RELEASES {
            for c in ComponentKind::ORDER {
                for (folder, v) in r.bundles(c) {
                    assert!(
                        dir.join(folder).join(v).is_dir(),
                        "{} {c}: {folder} {v}",
                        r.kubeflow
                    );
                }
            }
        }
    }

    #[test]
    fn only_the_istio_two_minor_jumps_are_a_risk() {
        let [a, b, c, d] = [
            find("1.10.2"),
            find("1.11.0"),
            find("26.03"),
            find("26.03.1"),
        ]
        .map(|r| r.expect("release"));
        let risk = upgrade_risk(a, b).expect("1.26 -> 1.28 skips 1.27");
        assert!(
            risk.contains("1.26.1 -> 1.28.0") && risk.contains("2 minor"),
            "{risk}"
        );
        assert_eq!(
            upgrade_risk(b, c),
            None,
            "1.28 -> 1.29 by label, and the images stay 1.28"
        );
        // 26.03 runs 1.28.0 under a 1.29.0 label: to 1.30.1 is two minors.
        let risk = upgrade_risk(c, d).expect("1.28 -> 1.30 skips 1.29");
        assert!(
            risk.contains("1.28.0 -> 1.30.1") && risk.contains("bundles 1.29.0 -> 1.30.1"),
            "{risk}"
        );
    }

    #[test]
    fn the_plan_to_26_03_1_names_the_recreations_and_the_risk() {
        let dir = manifests();
        let text = plan(&dir, "26.03", "26.03.1").expect("a plan");
        for line in [
            "Kubeflow 26.03 -> 26.03.1",
            "1.28.0 -> 1.30.1",
            "training v1.9.2: unchanged",
            "trainer v2.1.0 -> v2.2.0",
            "recreated: Deployment kubeflow-system/jobset-controller-manager (immutable selector)",
            "recreated: ClusterRoleBinding llmisvc-manager-rolebinding (immutable roleRef)",
            "image newly run: registry.istio.io/release/pilot:1.30.1",
        ] {
            assert!(text.contains(line), "{line} missing from:\n{text}");
        }
        assert!(!text.contains("held:"), "nothing held: {text}");
        assert!(
            plan(&dir, "1.11.0", "26.03.1").is_err(),
            "a skip is refused"
        );
    }

    #[test]
    fn version_changes() {
        assert!(check_change(None, "1.10.2", false).is_ok());
        assert!(check_change(Some("1.10.2"), "1.11.0", false).is_ok());
        assert!(check_change(Some("1.11.0"), "1.11.0", false).is_ok());
        assert!(check_change(Some("1.11.0"), "26.03", false).is_ok());
        assert!(check_change(Some("26.03"), "26.03.1", false).is_ok());
        assert!(matches!(
            check_change(Some("1.11.0"), "26.03.1", false),
            Err(ChangeRefused::Skip { .. })
        ));
        assert!(matches!(
            check_change(Some("1.10.2"), "26.03", false),
            Err(ChangeRefused::Skip { .. })
        ));
        let err = check_change(None, "1.9.0", false).expect_err("unknown");
        assert!(
            err.to_string().contains("1.10.2, 1.11.0, 26.03, 26.03.1"),
            "{err}"
        );
        assert!(matches!(
            check_change(Some("1.11.0"), "1.10.2", false),
            Err(ChangeRefused::Downgrade { .. })
        ));
        assert!(check_change(Some("1.11.0"), "1.10.2", true).is_ok());
    }
}
