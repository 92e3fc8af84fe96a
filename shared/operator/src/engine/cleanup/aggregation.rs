//! The order in which a removal deletes ClusterRoles that aggregate others.
//!
//! Kubernetes' role-aggregation controller writes an aggregated
//! ClusterRole's rules with a server-side apply whenever one of its source
//! roles changes, and an apply creates what is not there: deleting an
//! aggregated role in the same pass as its sources let the controller put
//! it back, unlabelled, with the sources' rules and managed by no one (three
//! of Knative's after an uninstall). Deleting each aggregated role only once
//! the roles it selects are gone leaves the controller nothing to react to
//! from this component, but not from another one removed at the same time:
//! Kubeflow's `kubeflow-admin` aggregates roles of nine components, each
//! deleting its own (one uninstall in five left it behind). So a removal
//! first takes the aggregation rule off (the controller skips a role
//! without one), then deletes in the order above.

use std::collections::BTreeMap;

use k8s_openapi::api::rbac::v1::ClusterRole;
use kube::api::{Api, ListParams, Patch, PatchParams};

use crate::engine::apply::{ApplyError, Engine};
use crate::engine::inventory::Inventory;

/// Deepest aggregation chain followed (Kubeflow's view -> edit -> admin is 3).
const MAX_LEVEL: u8 = 8;

/// Each of the inventory's aggregated ClusterRoles by name, with its level:
/// 1 for one that selects only plain roles, one more than the deepest
/// aggregated role it selects otherwise. Plain roles are absent (level 0).
pub async fn levels(engine: &Engine, inv: &Inventory) -> Result<BTreeMap<String, u8>, ApplyError> {
    let api: Api<ClusterRole> = Api::all(engine.client().clone());
    let roles = api
        .list(&ListParams::default().labels(&inv.selector()))
        .await
        .map_err(|source| ApplyError::Api {
            verb: "list",
            object: "ClusterRole".into(),
            source,
        })?;
    Ok(levels_of(&roles.items))
}

/// Takes the aggregation rule (and the rules the controller wrote from it)
/// off each of `names` that still has one, so that Kubernetes' controller
/// no longer writes it. A role already gone is no error; any other refusal
/// is logged and the removal goes on (the deletion order still holds).
pub async fn disarm(engine: &Engine, names: &[String]) {
    let api: Api<ClusterRole> = Api::all(engine.client().clone());
    // A merge patch, not an apply: the role is about to be deleted, and the
    // admission pins admit a bundle role with no rules.
    let patch = Patch::Merge(serde_json::json!({"aggregationRule": null, "rules": []}));
    for name in names {
        match api.patch(name, &PatchParams::default(), &patch).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(error) => {
                tracing::warn!(%name, %error, "could not take the aggregation rule off before deleting the role");
            }
        }
    }
}

/// [`levels`] over roles already read.
pub fn levels_of(roles: &[ClusterRole]) -> BTreeMap<String, u8> {
    let mut out = BTreeMap::new();
    for r in roles.iter().filter(|r| r.aggregation_rule.is_some()) {
        out.insert(
            r.metadata.name.clone().unwrap_or_default(),
            level(r, roles, 0),
        );
    }
    out
}

fn level(role: &ClusterRole, roles: &[ClusterRole], depth: u8) -> u8 {
    if role.aggregation_rule.is_none() || depth >= MAX_LEVEL {
        return 0;
    }
    roles
        .iter()
        .filter(|s| s.metadata.name != role.metadata.name && selects(role, s))
        .map(|s| level(s, roles, depth + 1))
        .max()
        .unwrap_or(0)
        + 1
}

/// Whether `aggregated`'s selectors pick `source` by its labels. Only
/// `matchLabels` is read (the bundles use nothing else); a selector with
/// expressions picks nothing here, which only makes its level lower.
fn selects(aggregated: &ClusterRole, source: &ClusterRole) -> bool {
    let labels = source.metadata.labels.clone().unwrap_or_default();
    aggregated
        .aggregation_rule
        .as_ref()
        .and_then(|a| a.cluster_role_selectors.as_ref())
        .into_iter()
        .flatten()
        .filter(|sel| sel.match_expressions.as_ref().is_none_or(Vec::is_empty))
        .any(|sel| {
            sel.match_labels.as_ref().is_some_and(|want| {
                !want.is_empty() && want.iter().all(|(k, v)| labels.get(k) == Some(v))
            })
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn role(
        name: &str,
        labels: serde_json::Value,
        selects: Option<serde_json::Value>,
    ) -> ClusterRole {
        let mut r = json!({"metadata": {"name": name, "labels": labels}, "rules": []});
        if let Some(sel) = selects {
            r["aggregationRule"] = json!({"clusterRoleSelectors": [{"matchLabels": sel}]});
        }
        serde_json::from_value(r).expect("role")
    }

    #[test]
    fn an_aggregated_role_goes_after_the_roles_it_selects() {
        let roles = [
            role(
                "knative-serving-core",
                json!({"serving.knative.dev/controller": "true"}),
                None,
            ),
            role(
                "knative-serving-admin",
                json!({}),
                Some(json!({"serving.knative.dev/controller": "true"})),
            ),
            role(
                "kubeflow-edit",
                json!({"rbac.authorization.kubeflow.org/aggregate-to-kubeflow-admin": "true"}),
                Some(json!({"rbac.authorization.kubeflow.org/aggregate-to-kubeflow-edit": "true"})),
            ),
            role(
                "kubeflow-admin",
                json!({}),
                Some(
                    json!({"rbac.authorization.kubeflow.org/aggregate-to-kubeflow-admin": "true"}),
                ),
            ),
        ];
        let l = levels_of(&roles);
        assert_eq!(
            l.get("knative-serving-core"),
            None,
            "a plain role is level 0"
        );
        assert_eq!(l.get("knative-serving-admin"), Some(&1));
        assert_eq!(l.get("kubeflow-edit"), Some(&1));
        assert_eq!(
            l.get("kubeflow-admin"),
            Some(&2),
            "after kubeflow-edit, which it selects"
        );
    }
}
