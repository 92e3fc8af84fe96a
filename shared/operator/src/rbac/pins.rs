//! What of the ClusterRoles an operator writes its RBAC cannot limit, and
//! the chart's admission policy pins instead (CEL over the write, generated
//! here from the bundles so it always matches them):
//!
//! - an aggregated role's `aggregationRule`: holding `escalate` on the name
//!   (which writing an aggregated role needs) would let the operator select
//!   any role's rules, cluster-admin's included. Each selector must be one
//!   the bundles give that role;
//! - aggregation labels (`...aggregate-to-...`): one on a role hands its
//!   rules to every holder of the role it aggregates into (the built-in
//!   `view`, Kubeflow's `kubeflow-edit`). Each must be one the bundles set
//!   on that role;
//! - an aggregated role's `rules`, which are the aggregation controller's:
//!   the operator never writes them (with `escalate` it could write any).

use std::collections::{BTreeMap, BTreeSet};

use kube::api::DynamicObject;
use serde::{Deserialize, Serialize};

use crate::kinds::kind;

/// The CEL expressions of the chart's policy on an operator's ClusterRole
/// writes (each must hold for the write to be admitted).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Pins {
    /// Every `aggregationRule` selector is one the bundles give the role.
    pub aggregation_rule: String,
    /// Every aggregation label is one the bundles set on the role.
    pub aggregation_labels: String,
    /// The rules of an aggregated role are left as they are.
    pub aggregated_rules: String,
}

pub use crate::labels::is_aggregation_label;

/// The pins for the ClusterRoles among `objects` (every version's).
pub fn pins(objects: &[DynamicObject]) -> Pins {
    let mut selectors: BTreeSet<(String, BTreeMap<String, String>)> = BTreeSet::new();
    let mut labels: BTreeSet<String> = BTreeSet::new();
    for o in objects.iter().filter(|o| kind(o) == "ClusterRole") {
        let name = o.metadata.name.clone().unwrap_or_default();
        let listed = o
            .data
            .pointer("/aggregationRule/clusterRoleSelectors")
            .and_then(|s| s.as_array())
            .cloned()
            .unwrap_or_default();
        for s in listed {
            let match_labels: BTreeMap<String, String> = s
                .get("matchLabels")
                .and_then(|m| serde_json::from_value(m.clone()).ok())
                .unwrap_or_default();
            selectors.insert((name.clone(), match_labels));
        }
        for (k, v) in o.metadata.labels.iter().flatten() {
            if is_aggregation_label(k) {
                labels.insert(format!("{name} {k}={v}"));
            }
        }
    }
    let clauses: Vec<String> = selectors
        .iter()
        .map(|(name, m)| {
            let pairs: Vec<String> = m
                .iter()
                .map(|(k, v)| format!("{}: {}", quote(k), quote(v)))
                .collect();
            format!(
                "(object.metadata.name == {} && s.matchLabels == {{{}}})",
                quote(name),
                pairs.join(", ")
            )
        })
        .collect();
    let allowed_selector = if clauses.is_empty() {
        "false".to_string()
    } else {
        clauses.join(" || ")
    };
    let allowed_labels: Vec<String> = labels.iter().map(|l| quote(l)).collect();
    Pins {
        aggregation_rule: format!(
            "!has(object.aggregationRule) || !has(object.aggregationRule.clusterRoleSelectors) || \
             object.aggregationRule.clusterRoleSelectors.all(s, \
             (!has(s.matchExpressions) || size(s.matchExpressions) == 0) && has(s.matchLabels) && \
             ({allowed_selector}))"
        ),
        aggregation_labels: format!(
            "!has(object.metadata.labels) || type(object.metadata.labels) == null_type || \
             object.metadata.labels.all(k, !k.contains('aggregate-to-') || \
             (object.metadata.name + ' ' + k + '=' + object.metadata.labels[k]) in [{}])",
            allowed_labels.join(", ")
        ),
        // A list the API server holds as null (`rules` of a role with none)
        // has no size: null and empty are alike here.
        aggregated_rules: "!has(object.aggregationRule) || (oldObject == null ? \
             (!has(object.rules) || type(object.rules) == null_type || size(object.rules) == 0) : \
             ((!has(object.rules) || type(object.rules) == null_type || size(object.rules) == 0) ? \
             (!has(oldObject.rules) || type(oldObject.rules) == null_type || size(oldObject.rules) == 0) : \
             (has(oldObject.rules) && type(oldObject.rules) != null_type && object.rules == oldObject.rules)))"
            .to_string(),
    }
}

/// A CEL string literal.
fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\\', "\\\\").replace('\'', "\\'"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn role(v: serde_json::Value) -> DynamicObject {
        serde_json::from_value(v).expect("role")
    }

    #[test]
    fn the_bundles_selectors_and_labels_are_the_only_ones_allowed() {
        let objects = [
            role(json!({
                "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                "metadata": {"name": "kubeflow-training-admin",
                    "labels": {"rbac.authorization.kubeflow.org/aggregate-to-kubeflow-admin": "true"}},
                "aggregationRule": {"clusterRoleSelectors": [{"matchLabels":
                    {"rbac.authorization.kubeflow.org/aggregate-to-kubeflow-training-admin": "true"}}]},
                "rules": [],
            })),
            role(json!({
                "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                "metadata": {"name": "training-operator"}, "rules": [],
            })),
        ];
        let p = pins(&objects);
        assert!(p.aggregation_rule.contains(
            "(object.metadata.name == 'kubeflow-training-admin' && s.matchLabels == {'rbac.authorization.kubeflow.org/aggregate-to-kubeflow-training-admin': 'true'})"
        ), "{}", p.aggregation_rule);
        assert!(p.aggregation_labels.contains(
            "['kubeflow-training-admin rbac.authorization.kubeflow.org/aggregate-to-kubeflow-admin=true']"
        ), "{}", p.aggregation_labels);
        // No aggregation anywhere: none is allowed.
        let none = pins(&objects[1..]);
        assert!(
            none.aggregation_rule.ends_with("(false))"),
            "{}",
            none.aggregation_rule
        );
        assert!(
            none.aggregation_labels.ends_with("in [])"),
            "{}",
            none.aggregation_labels
        );
        assert_eq!(quote("it's"), r"'it\'s'");
    }
}
