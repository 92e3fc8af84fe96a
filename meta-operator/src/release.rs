//! The release table: which component versions each Kubeflow release is made
//! of, and which version changes are allowed.

/// Component versions of one Kubeflow release.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Release {
    /// The Kubeflow release.
    pub kubeflow: &'static str,
    /// training-operator version.
    pub training: &'static str,
    /// Kubeflow Pipelines version.
    pub pipelines: &'static str,
    /// KServe version.
    pub serving: &'static str,
    /// Istio version.
    pub istio: &'static str,
}

/// Known releases, oldest first; an upgrade moves one step along this list.
/// Versions as kubeflow/manifests states them for each tag.
pub const RELEASES: &[Release] = &[
    Release {
        kubeflow: "1.10.2",
        training: "v1.9.2",
        pipelines: "2.5.0",
        serving: "v0.15.0",
        istio: "1.26.1",
    },
    Release {
        kubeflow: "1.11.0",
        training: "v1.9.2",
        pipelines: "2.15.0",
        serving: "v0.15.2",
        istio: "1.28.0",
    },
];

impl Release {
    /// The version of a component ("training", "pipelines", "serving", "istio").
    pub fn component(&self, name: &str) -> Option<&'static str> {
        match name {
            "training" => Some(self.training),
            "pipelines" => Some(self.pipelines),
            "serving" => Some(self.serving),
            "istio" => Some(self.istio),
            _ => None,
        }
    }
}

/// Looks a release up.
#[cfg(test)]
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_matches_the_manifests_readme() {
        let r = find("1.10.2").expect("1.10.2");
        assert_eq!(
            (r.training, r.pipelines, r.serving, r.istio),
            ("v1.9.2", "2.5.0", "v0.15.0", "1.26.1")
        );
        let r = find("1.11.0").expect("1.11.0");
        assert_eq!(
            (r.training, r.pipelines, r.serving, r.istio),
            ("v1.9.2", "2.15.0", "v0.15.2", "1.28.0")
        );
    }

    #[test]
    fn version_changes() {
        assert!(check_change(None, "1.10.2", false).is_ok());
        assert!(check_change(Some("1.10.2"), "1.11.0", false).is_ok());
        assert!(check_change(Some("1.11.0"), "1.11.0", false).is_ok());
        let err = check_change(None, "1.9.0", false).expect_err("unknown");
        assert!(err.to_string().contains("1.10.2, 1.11.0"), "{err}");
        assert!(matches!(
            check_change(Some("1.11.0"), "1.10.2", false),
            Err(ChangeRefused::Downgrade { .. })
        ));
        assert!(check_change(Some("1.11.0"), "1.10.2", true).is_ok());
    }
}
