//! Whether two plugin entries could run on the same node.

use std::collections::BTreeMap;

/// Two equality node selectors can select the same node unless they require
/// different values for one label key.
pub fn can_overlap(a: &BTreeMap<String, String>, b: &BTreeMap<String, String>) -> bool {
    a.iter().all(|(k, v)| b.get(k).is_none_or(|w| w == v))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sel(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn overlap_rules() {
        let gpu = sel(&[("feature.node.kubernetes.io/pci-10de.present", "true")]);
        assert!(can_overlap(&gpu, &gpu));
        assert!(
            can_overlap(&gpu, &sel(&[("pool", "a")])),
            "different keys: a node may carry both"
        );
        assert!(can_overlap(
            &sel(&[("pool", "a")]),
            &sel(&[("pool", "a"), ("zone", "1")])
        ));
        assert!(!can_overlap(&sel(&[("pool", "a")]), &sel(&[("pool", "b")])));
        assert!(
            can_overlap(&sel(&[]), &gpu),
            "an empty selector selects every node"
        );
    }
}
