//! What RBAC cannot limit of an operator's writes, pinned instead by the
//! chart's admission policy (`<release>-<component>-operator-pins`: CEL
//! over the operator's own requests, generated here from the bundles so it
//! always matches them). The operator holds `escalate` and `bind` on its
//! bundles' roles instead of their rules (see `derive`); these pins are
//! what keeps that from being a path to anything else:
//!
//! - a ClusterRole or Role may only be one of the bundles' (by name), with
//!   rules each of which the bundles give that role in some version;
//! - an aggregated role's `aggregationRule` may hold only the bundles'
//!   selectors for it, and its `rules` (the aggregation controller's) are
//!   never written by the operator;
//! - an aggregation label (`...aggregate-to-...`) may be set only where the
//!   bundles set it: one would hand a role's rules to every holder of the
//!   role it aggregates into (the built-in `view`, `kubeflow-edit`);
//! - a binding may only be one of the bundles' (by name), with their
//!   `roleRef` and subjects, ServiceAccount subjects only in the allowed
//!   namespaces; or an OpenShift SCC grant (`<sa>-scc-<scc>`) to one of the
//!   bundles' ServiceAccounts in the binding's own namespace;
//! - a webhook configuration may only be one of the bundles', each webhook
//!   one of its webhooks pointing at the bundle's Service (name and path)
//!   in an allowed namespace, never at a URL;
//! - a CRD may only be one of the bundles', its conversion webhook (if any)
//!   calling the bundle's Service in an allowed namespace, never a URL: a
//!   URL would receive every object of the kind;
//! - a Deployment, StatefulSet, DaemonSet or Job may only be one of the
//!   bundles', running as the bundle's ServiceAccount, with no host
//!   namespace, host path, privileged container or added capability the
//!   bundle does not give that workload, and only images the bundles run in
//!   it (any tag or digest of their repositories, or the same paths under a
//!   mirror the chart names): a stolen token cannot run code of its own
//!   choosing as a controller's ServiceAccount.
//!
//! The chart adds the variables `allowedNamespaces`, `imageMirrors` and
//! `extraImages` (its values).

use k8s_openapi::api::rbac::v1::PolicyRule;
use kube::api::DynamicObject;
use serde::{Deserialize, Serialize};

/// The chart's admission policy on an operator's own writes.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Pins {
    /// The resources whose create and update the policy checks.
    pub resources: Vec<Matched>,
    /// Values the checks read (the bundles' contents), in order.
    pub variables: Vec<Variable>,
    /// Each must hold for a write to be admitted.
    pub validations: Vec<Check>,
}

/// One resource the policy matches.
#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Matched {
    /// API group ("" for core).
    pub group: String,
    /// Plural resource name.
    pub resource: String,
    /// Deletes are checked too (namespaced kinds, whose `delete` RBAC
    /// cannot limit by name; cluster-scoped ones are deleted by name only).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub delete: bool,
}

/// A named CEL expression.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Variable {
    /// Referred to as `variables.<name>`.
    pub name: String,
    /// Its value.
    pub expression: String,
}

/// A CEL check and what a refusal says.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Check {
    /// True to admit.
    pub expression: String,
    /// The refusal's message.
    pub message: String,
}

/// What besides the bundles' objects the operator writes of these kinds.
#[derive(Debug, Clone, Default)]
pub struct Extra<'a> {
    /// The empty ClusterRole the engine claims the component's cluster scope with.
    pub claim_role: &'a str,
    /// The OpenShift SCCs it grants the bundles' ServiceAccounts.
    pub sccs: &'a [String],
    /// When the code names the bundles' workloads itself (one per entry of
    /// the resource), the suffix every such name ends with: each is then
    /// allowed what any of the bundles' workloads is.
    pub workload_suffix: Option<&'a str>,
    /// The component, whose label (`components.kubeflow.org/component`)
    /// marks the objects the engine applied for it.
    pub component: &'a str,
    /// Kinds the code writes beyond the bundles, as (group, plural): only
    /// objects of the component's label may be created, and only objects
    /// carrying it already may be changed or deleted (another party's
    /// object of the kind is never the operator's to touch).
    pub labelled: &'a [(String, String)],
    /// The ClusterRoles the code binds people and groups to in Kubeflow
    /// profile namespaces (empty: it gives no such access; see `tenant`).
    pub tenant_roles: &'a [String],
}

mod bundled;
mod cel;

use cel::{list, map, map_of_maps, var};
mod roles;
mod tenant;
mod webhooks;
mod workloads;

pub use crate::base::labels::is_aggregation_label;

const RBAC: &str = "rbac.authorization.k8s.io";
const ADMISSION: &str = "admissionregistration.k8s.io";
const WEBHOOK_CONFIGS: [&str; 2] = [
    "mutatingwebhookconfigurations",
    "validatingwebhookconfigurations",
];
const WORKLOADS: [(&str, &str); 4] = [
    ("Deployment", "deployments"),
    ("StatefulSet", "statefulsets"),
    ("DaemonSet", "daemonsets"),
    ("Job", "jobs"),
];

/// A role rule as the checks compare it: its lists joined, in order. A
/// separator inside an item (no real group, resource or verb has one) can
/// only make a rule that matches nothing.
pub fn rule_key(r: &PolicyRule) -> String {
    let join = |xs: &Option<Vec<String>>| xs.as_deref().unwrap_or_default().join(",");
    format!(
        "{}|{}|{}|{}|{}",
        join(&r.api_groups),
        join(&r.resources),
        r.verbs.join(","),
        join(&r.resource_names),
        join(&r.non_resource_urls)
    )
}

/// The same key in CEL, of the rule `r`.
const RULE_KEY: &str = "(has(r.apiGroups) ? r.apiGroups.join(',') : '') + '|' + \
     (has(r.resources) ? r.resources.join(',') : '') + '|' + r.verbs.join(',') + '|' + \
     (has(r.resourceNames) ? r.resourceNames.join(',') : '') + '|' + \
     (has(r.nonResourceURLs) ? r.nonResourceURLs.join(',') : '')";

/// The pins for `objects` (every version's) and what the code adds.
pub fn pins(objects: &[DynamicObject], extra: &Extra<'_>) -> Pins {
    let b = bundled::read(objects, extra);
    let mut validations = roles::checks(&b, extra);
    validations.extend(webhooks::checks());
    validations.extend(workloads::checks(extra));
    validations.extend(tenant::labelled(extra));
    validations.extend(tenant::tenant(extra));
    Pins {
        resources: matched(extra),
        variables: variables(&b, extra),
        validations,
    }
}

/// The resources the policy matches: the bundles' pinned kinds and what the code writes beyond them.
fn matched(extra: &Extra<'_>) -> Vec<Matched> {
    let workload_names: Vec<&str> = WORKLOADS.iter().map(|(_, r)| *r).collect();
    let mut resources: Vec<Matched> = [
        "clusterroles",
        "roles",
        "clusterrolebindings",
        "rolebindings",
    ]
    .iter()
    .map(|r| Matched {
        group: RBAC.into(),
        resource: r.to_string(),
        delete: matches!(*r, "roles" | "rolebindings"),
    })
    .collect();
    resources.extend(WEBHOOK_CONFIGS.iter().map(|r| Matched {
        group: ADMISSION.into(),
        resource: r.to_string(),
        delete: false,
    }));
    resources.push(Matched {
        group: "apiextensions.k8s.io".into(),
        resource: "customresourcedefinitions".into(),
        delete: false,
    });
    resources.extend(workload_names.iter().map(|r| Matched {
        group: "apps".into(),
        resource: r.to_string(),
        delete: true,
    }));
    if !extra.tenant_roles.is_empty() {
        resources.push(Matched {
            group: crate::render::rbac::TENANT_POLICY_GROUP.into(),
            resource: "authorizationpolicies".into(),
            delete: true,
        });
    }
    resources.extend(extra.labelled.iter().map(|(g, r)| Matched {
        group: g.clone(),
        resource: r.clone(),
        delete: true,
    }));
    resources
}

/// The bundles' contents, as the variables the checks read.
fn variables(b: &bundled::Bundled, extra: &Extra<'_>) -> Vec<Variable> {
    let sccs: Vec<String> = extra.sccs.to_vec();
    let workload_key = |of: &str| workloads::workload_key(extra, of);
    vec![
        var("clusterRoleRules", map(&b.cluster_roles)),
        var("roleRules", map(&b.roles)),
        var("clusterBindingRoles", map(&b.cluster_binding_roles)),
        var("clusterBindingSubjects", map(&b.cluster_binding_subjects)),
        var("bindingRoles", map(&b.binding_roles)),
        var("bindingSubjects", map(&b.binding_subjects)),
        var("serviceAccounts", list(&b.service_accounts)),
        var("sccs", list(&sccs)),
        var("webhooks", map_of_maps(&b.webhooks)),
        var("conversions", map(&b.crds)),
        var("workloadAccounts", map_of_maps(&b.accounts)),
        var("workloadFeatures", map_of_maps(&b.features)),
        var("workloadImages", map_of_maps(&b.images)),
        var("workloadImagePaths", map_of_maps(&b.image_paths)),
        var("workloadName", workload_key("object")),
    ]
}

#[cfg(test)]
mod tests;
