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
//! - a Deployment, StatefulSet or DaemonSet may only be one of the
//!   bundles', running as the bundle's ServiceAccount, with no host
//!   namespace, host path, privileged container or added capability the
//!   bundle does not give that workload, and only images the bundles run in
//!   it (any tag or digest of their repositories, or the same paths under a
//!   mirror the chart names): a stolen token cannot run code of its own
//!   choosing as a controller's ServiceAccount.
//!
//! The chart adds the variables `allowedNamespaces`, `imageMirrors` and
//! `extraImages` (its values).

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::rbac::v1::PolicyRule;
use kube::api::DynamicObject;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::kinds::kind;

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

pub use crate::labels::is_aggregation_label;

const RBAC: &str = "rbac.authorization.k8s.io";
const ADMISSION: &str = "admissionregistration.k8s.io";
const WEBHOOK_CONFIGS: [&str; 2] = [
    "mutatingwebhookconfigurations",
    "validatingwebhookconfigurations",
];
const WORKLOADS: [(&str, &str); 3] = [
    ("Deployment", "deployments"),
    ("StatefulSet", "statefulsets"),
    ("DaemonSet", "daemonsets"),
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

/// Null and absent alike (the API server keeps an empty list as null).
fn empty(list: &str) -> String {
    format!("(!has({list}) || type({list}) == null_type || size({list}) == 0)")
}

type Names = BTreeMap<String, BTreeSet<String>>;

fn add(map: &mut Names, name: &str, value: String) {
    map.entry(name.to_string()).or_default().insert(value);
}

/// What the bundles hold of each pinned kind, every version together.
#[derive(Default)]
struct Bundled {
    cluster_roles: Names,
    roles: Names,
    selectors: BTreeSet<(String, BTreeMap<String, String>)>,
    aggregation_labels: BTreeSet<String>,
    cluster_binding_roles: Names,
    cluster_binding_subjects: Names,
    binding_roles: Names,
    binding_subjects: Names,
    service_accounts: BTreeSet<String>,
    /// Per resource, per configuration: "webhook service path".
    webhooks: BTreeMap<&'static str, Names>,
    /// Per CRD: its conversion webhook's "service path", if it has one.
    crds: Names,
    /// Per resource, per workload: its ServiceAccounts; its host features.
    accounts: BTreeMap<&'static str, Names>,
    features: BTreeMap<&'static str, Names>,
    /// Per resource, per workload: its containers' image repositories (no
    /// tag or digest), and the path each has under a mirror.
    images: BTreeMap<&'static str, Names>,
    image_paths: BTreeMap<&'static str, Names>,
}

fn read(objects: &[DynamicObject], extra: &Extra<'_>) -> Bundled {
    let mut b = Bundled::default();
    b.cluster_roles
        .entry(extra.claim_role.to_string())
        .or_default();
    for r in WEBHOOK_CONFIGS {
        b.webhooks.entry(r).or_default();
    }
    for (_, r) in WORKLOADS {
        b.accounts.entry(r).or_default();
        b.features.entry(r).or_default();
        b.images.entry(r).or_default();
        b.image_paths.entry(r).or_default();
    }
    for o in objects {
        let name = o.metadata.name.clone().unwrap_or_default();
        let rules = || -> Vec<PolicyRule> {
            serde_json::from_value(o.data["rules"].clone()).unwrap_or_default()
        };
        match kind(o) {
            "ClusterRole" => {
                let aggregated = o.data.get("aggregationRule").is_some_and(|a| !a.is_null());
                let entry = b.cluster_roles.entry(name.clone()).or_default();
                if !aggregated {
                    entry.extend(rules().iter().map(rule_key));
                }
                for s in o
                    .data
                    .pointer("/aggregationRule/clusterRoleSelectors")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                {
                    let labels: BTreeMap<String, String> = s
                        .get("matchLabels")
                        .and_then(|m| serde_json::from_value(m.clone()).ok())
                        .unwrap_or_default();
                    b.selectors.insert((name.clone(), labels));
                }
                for (k, v) in o.metadata.labels.iter().flatten() {
                    if is_aggregation_label(k) {
                        b.aggregation_labels.insert(format!("{name} {k}={v}"));
                    }
                }
            }
            "Role" => {
                let entry = b.roles.entry(name.clone()).or_default();
                entry.extend(rules().iter().map(rule_key));
            }
            k @ ("ClusterRoleBinding" | "RoleBinding") => {
                let (roles, subjects) = if k == "RoleBinding" {
                    (&mut b.binding_roles, &mut b.binding_subjects)
                } else {
                    (
                        &mut b.cluster_binding_roles,
                        &mut b.cluster_binding_subjects,
                    )
                };
                let r = &o.data["roleRef"];
                let role = format!(
                    "{}/{}",
                    r["kind"].as_str().unwrap_or_default(),
                    r["name"].as_str().unwrap_or_default()
                );
                add(roles, &name, role);
                subjects.entry(name.clone()).or_default();
                for s in o.data["subjects"].as_array().into_iter().flatten() {
                    let subject = format!(
                        "{}/{}",
                        s["kind"].as_str().unwrap_or_default(),
                        s["name"].as_str().unwrap_or_default()
                    );
                    add(subjects, &name, subject);
                }
            }
            "ServiceAccount" => {
                b.service_accounts.insert(name);
            }
            "CustomResourceDefinition" => {
                let entry = b.crds.entry(name.clone()).or_default();
                if let Some(service) = o
                    .data
                    .pointer("/spec/conversion/webhook/clientConfig/service")
                {
                    entry.insert(format!(
                        "{} {}",
                        service["name"].as_str().unwrap_or_default(),
                        service["path"].as_str().unwrap_or_default()
                    ));
                }
            }
            k @ ("MutatingWebhookConfiguration" | "ValidatingWebhookConfiguration") => {
                let resource = WEBHOOK_CONFIGS[usize::from(k.starts_with('V'))];
                let configs = b.webhooks.entry(resource).or_default();
                configs.entry(name.clone()).or_default();
                for w in o.data["webhooks"].as_array().into_iter().flatten() {
                    let service = &w["clientConfig"]["service"];
                    let key = format!(
                        "{} {} {}",
                        w["name"].as_str().unwrap_or_default(),
                        service["name"].as_str().unwrap_or_default(),
                        service["path"].as_str().unwrap_or_default()
                    );
                    add(configs, &name, key);
                }
            }
            k => {
                if let Some((_, resource)) = WORKLOADS.iter().find(|(w, _)| *w == k) {
                    let name = match extra.workload_suffix {
                        Some(suffix) => format!("*{suffix}"),
                        None => name,
                    };
                    let pod = &o.data["spec"]["template"]["spec"];
                    let account = pod["serviceAccountName"]
                        .as_str()
                        .or(pod["serviceAccount"].as_str())
                        .unwrap_or("default");
                    add(
                        b.accounts.entry(resource).or_default(),
                        &name,
                        account.to_string(),
                    );
                    let features = b.features.entry(resource).or_default();
                    let entry = features.entry(name.clone()).or_default();
                    entry.extend(host_features(pod));
                    let images = b.images.entry(resource).or_default();
                    images.entry(name.clone()).or_default();
                    let paths = b.image_paths.entry(resource).or_default();
                    paths.entry(name.clone()).or_default();
                    for image in pod_images(pod) {
                        let repo = repository(&image).to_string();
                        add(paths, &name, mirror_path(&repo));
                        add(images, &name, repo);
                    }
                }
            }
        }
    }
    b
}

/// The images of a pod spec's containers and init containers.
fn pod_images(pod: &Value) -> Vec<String> {
    ["containers", "initContainers"]
        .iter()
        .flat_map(|list| pod[*list].as_array().into_iter().flatten())
        .filter_map(|c| c["image"].as_str().map(str::to_string))
        .collect()
}

/// An image's repository: without its digest and tag (as the check's CEL
/// takes them off: the digest after `@`, the tag after the last `:` that
/// follows the last `/`).
fn repository(image: &str) -> &str {
    let named = image.split('@').next().unwrap_or(image);
    match (named.rfind(':'), named.rfind('/')) {
        (Some(colon), slash) if slash.is_none_or(|s| colon > s) => &named[..colon],
        _ => named,
    }
}

/// Where a mirror holds a repository: its path under the mirror's registry
/// (the rule `spec.imageRegistry` moves images by).
fn mirror_path(repo: &str) -> String {
    crate::images::moved(repo, "")
        .trim_start_matches('/')
        .to_string()
}

/// The repository of `image` (a CEL string expression), as [`repository`].
fn cel_repository(image: &str) -> String {
    let named = format!("{image}.split('@')[0]");
    format!(
        "({named}.lastIndexOf(':') > {named}.lastIndexOf('/') ? {named}.substring(0, {named}.lastIndexOf(':')) : {named})"
    )
}

/// What of the host a pod spec reaches: host namespaces, host paths,
/// privileged containers, added capabilities, host ports.
fn host_features(pod: &Value) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for h in ["hostNetwork", "hostPID", "hostIPC"] {
        if pod[h].as_bool() == Some(true) {
            out.insert(h.to_string());
        }
    }
    for v in pod["volumes"].as_array().into_iter().flatten() {
        if let Some(path) = v.pointer("/hostPath/path").and_then(Value::as_str) {
            out.insert(format!("hostPath:{path}"));
        }
    }
    for list in ["containers", "initContainers"] {
        for c in pod[list].as_array().into_iter().flatten() {
            let sc = &c["securityContext"];
            if sc["privileged"].as_bool() == Some(true) {
                out.insert("privileged".into());
            }
            for cap in sc
                .pointer("/capabilities/add")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                out.insert(format!("cap:{}", cap.as_str().unwrap_or_default()));
            }
            for p in c["ports"].as_array().into_iter().flatten() {
                if p["hostPort"].as_i64().is_some_and(|n| n != 0) {
                    out.insert("hostPort".into());
                }
            }
        }
    }
    out
}

/// A CEL string literal.
fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\\', "\\\\").replace('\'', "\\'"))
}

fn list<'a>(items: impl IntoIterator<Item = &'a String>) -> String {
    let items: Vec<String> = items.into_iter().map(|s| quote(s)).collect();
    format!("[{}]", items.join(", "))
}

fn map(names: &Names) -> String {
    let entries: Vec<String> = names
        .iter()
        .map(|(k, v)| format!("{}: {}", quote(k), list(v)))
        .collect();
    format!("{{{}}}", entries.join(", "))
}

fn map_of_maps(by: &BTreeMap<&'static str, Names>) -> String {
    let entries: Vec<String> = by
        .iter()
        .map(|(k, v)| format!("{}: {}", quote(k), map(v)))
        .collect();
    format!("{{{}}}", entries.join(", "))
}

fn var(name: &str, expression: String) -> Variable {
    Variable {
        name: name.into(),
        expression,
    }
}

/// A check of creates and updates of `resources` (a delete has no
/// `object`: see `deletes`).
fn check(resources: &[&str], body: String, message: &str) -> Check {
    let guard: Vec<String> = resources
        .iter()
        .map(|r| format!("request.resource.resource != {}", quote(r)))
        .collect();
    Check {
        expression: format!(
            "({}) || request.operation == 'DELETE' || ({body})",
            guard.join(" && ")
        ),
        message: message.into(),
    }
}

/// Deletes of the namespaced kinds: only the bundles' names (as their
/// writes), so an operator's token cannot remove another party's role,
/// binding or workload in an allowed namespace.
fn deletes(workload_key: &str, tenant: Option<String>) -> Check {
    let tenant = tenant
        .map(|t| format!("(request.resource.resource == 'rolebindings' && {t}) || "))
        .unwrap_or_default();
    Check {
        expression: format!(
            "request.operation != 'DELETE' || \
             !(request.resource.resource in ['roles', 'rolebindings', 'deployments', 'statefulsets', 'daemonsets']) || \
             (request.resource.resource == 'roles' && oldObject.metadata.name in variables.roleRules) || {tenant}\
             (request.resource.resource == 'rolebindings' && (oldObject.metadata.name in variables.bindingRoles || \
             (oldObject.roleRef.name.startsWith('system:openshift:scc:') && \
             oldObject.metadata.name.endsWith('-scc-' + oldObject.roleRef.name.substring(21))))) || \
             (request.resource.resource in ['deployments', 'statefulsets', 'daemonsets'] && \
             ({workload_key}) in variables.workloadAccounts[request.resource.resource])"
        ),
        message: "the operator may delete only its bundles' Roles, RoleBindings and workloads"
            .into(),
    }
}

/// Whether `of` (object or oldObject) carries the component's label.
fn ours(of: &str, component: &str) -> String {
    format!(
        "(has({of}.metadata.labels) && {key} in {of}.metadata.labels && {of}.metadata.labels[{key}] == {c})",
        key = quote(crate::labels::COMPONENT),
        c = quote(component)
    )
}

/// The label the profile controller gives each profile's namespace (from
/// its namespace-labels configuration, the same in both releases).
const PROFILE_NAMESPACE_LABEL: (&str, &str) = ("app.kubernetes.io/part-of", "kubeflow-profile");

/// Whether the request's namespace is a Kubeflow profile's.
fn profile_namespace() -> String {
    let (k, v) = PROFILE_NAMESPACE_LABEL;
    format!(
        "(namespaceObject != null && has(namespaceObject.metadata.labels) && {k} in namespaceObject.metadata.labels && \
         namespaceObject.metadata.labels[{k}] == {v})",
        k = quote(k),
        v = quote(v)
    )
}

/// A RoleBinding the code writes in a profile namespace: its own label,
/// one of `roles`, and only people and groups, none Kubernetes' own (a
/// User named `system:serviceaccount:...` is a ServiceAccount, and
/// `system:serviceaccounts` or `system:authenticated` everyone of a kind).
fn tenant_binding(extra: &Extra<'_>) -> String {
    if extra.tenant_roles.is_empty() {
        return String::new();
    }
    format!(
        " || ({} && {} && object.roleRef.kind == 'ClusterRole' && object.roleRef.name in {} && \
         has(object.subjects) && size(object.subjects) > 0 && \
         object.subjects.all(s, (s.kind == 'User' || s.kind == 'Group') && !s.name.startsWith('system:')))",
        ours("object", extra.component),
        profile_namespace(),
        list(extra.tenant_roles)
    )
}

/// What the code may delete of tenant access: its own, in profile namespaces.
fn tenant_delete(extra: &Extra<'_>) -> String {
    format!(
        "{} && {}",
        ours("oldObject", extra.component),
        profile_namespace()
    )
}

/// The pins of tenant access besides the bindings': AuthorizationPolicies
/// only of the component's label, in profile namespaces, only ALLOW (a
/// DENY would lock the namespace's people out, a CUSTOM send its requests
/// to another authorizer); and a Profile only for a person (the profile
/// controller makes its owner the namespace's admin, so an owner named
/// after the operator's ServiceAccount would hand the operator that).
fn tenant(extra: &Extra<'_>) -> Vec<Check> {
    if extra.tenant_roles.is_empty() {
        return Vec::new();
    }
    // In the allowed namespaces the bundles' own policies are written as
    // any namespaced kind there is (the Role grants them).
    let policy = format!(
        "request.namespace in variables.allowedNamespaces || ({} && {} && \
         (!has(object.spec) || ((!has(object.spec.action) || object.spec.action == 'ALLOW') && !has(object.spec.provider))))",
        ours("object", extra.component),
        profile_namespace()
    );
    vec![
        check(
            &["authorizationpolicies"],
            policy,
            "outside the allowed namespaces, the operator may write only AuthorizationPolicies of its own label, ALLOW ones, in Kubeflow profile namespaces",
        ),
        Check {
            expression: format!(
                "request.operation != 'DELETE' || request.resource.resource != 'authorizationpolicies' || \
                 request.namespace in variables.allowedNamespaces || ({})",
                tenant_delete(extra)
            ),
            message: "outside the allowed namespaces, the operator may delete only its own AuthorizationPolicies in Kubeflow profile namespaces".into(),
        },
        check(
            &["profiles"],
            "!has(object.spec) || !has(object.spec.owner) || \
             (object.spec.owner.kind == 'User' && !object.spec.owner.name.startsWith('system:'))"
                .to_string(),
            "the operator may make a Profile's owner only a person (kind User, no system: name)",
        ),
    ]
}

/// Objects of the kinds the code writes beyond the bundles: created only
/// with the component's label, changed or deleted only when they carry it.
fn labelled(extra: &Extra<'_>) -> Option<Check> {
    if extra.labelled.is_empty() {
        return None;
    }
    let ours = |of: &str| ours(of, extra.component);
    let guard: Vec<String> = extra
        .labelled
        .iter()
        .map(|(_, r)| format!("request.resource.resource != {}", quote(r)))
        .collect();
    Some(Check {
        expression: format!(
            "({}) || \
             ((request.operation == 'DELETE' || request.operation == 'UPDATE' || {}) && \
             (request.operation == 'CREATE' || {}))",
            guard.join(" && "),
            ours("object"),
            ours("oldObject")
        ),
        message: format!(
            "the operator may create only objects labelled {}={} of the kinds it writes beyond its bundles, and change or delete only those already labelled so",
            crate::labels::COMPONENT,
            extra.component
        ),
    })
}

/// The pins for `objects` (every version's) and what the code adds.
pub fn pins(objects: &[DynamicObject], extra: &Extra<'_>) -> Pins {
    let b = read(objects, extra);
    let selector_clauses: Vec<String> = b
        .selectors
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
    let allowed_selector = if selector_clauses.is_empty() {
        "false".to_string()
    } else {
        selector_clauses.join(" || ")
    };
    let rules_in = |var: &str| {
        format!(
            "{} || object.rules.all(r, ({RULE_KEY}) in variables.{var}[object.metadata.name])",
            empty("object.rules")
        )
    };
    let subjects_in = |var: &str| {
        format!(
            "{} || object.subjects.all(s, (s.kind + '/' + s.name) in variables.{var}[object.metadata.name] && \
             (s.kind != 'ServiceAccount' || (has(s.namespace) && s.namespace in variables.allowedNamespaces)))",
            empty("object.subjects")
        )
    };
    let pod = "object.spec.template.spec";
    let containers = |list: &str| {
        format!(
            "(!has({pod}.{list}) || {pod}.{list}.all(c, \
             (!has(c.securityContext) || ((!has(c.securityContext.privileged) || !c.securityContext.privileged || 'privileged' in f) && \
             (!has(c.securityContext.capabilities) || !has(c.securityContext.capabilities.add) || \
             c.securityContext.capabilities.add.all(x, ('cap:' + x) in f)))) && \
             (!has(c.ports) || c.ports.all(p, !has(p.hostPort) || p.hostPort == 0 || 'hostPort' in f))))"
        )
    };
    let host = |h: &str| format!("(!has({pod}.{h}) || !{pod}.{h} || '{h}' in f)");
    // Each container's image: a repository of the workload's in the bundles
    // (`i`), that repository's path under a mirror the chart names (`p`), or
    // under a prefix the chart allows as extra images.
    let images_allowed = |list: &str| {
        let repo = cel_repository("c.image");
        format!(
            "(!has({pod}.{list}) || {pod}.{list}.all(c, {repo} in i || \
             variables.imageMirrors.exists(m, {repo}.startsWith(m + '/') && {repo}.substring(size(m) + 1) in p) || \
             variables.extraImages.exists(e, {repo}.startsWith(e))))"
        )
    };
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
            group: crate::rbac::TENANT_POLICY_GROUP.into(),
            resource: "authorizationpolicies".into(),
            delete: true,
        });
    }
    resources.extend(extra.labelled.iter().map(|(g, r)| Matched {
        group: g.clone(),
        resource: r.clone(),
        delete: true,
    }));
    let sccs: Vec<String> = extra.sccs.to_vec();
    // The key of a workload's entry in the variables, by its name.
    let workload_key = |of: &str| match extra.workload_suffix {
        Some(suffix) => format!(
            "{of}.metadata.name.endsWith({s}) ? {named} : {of}.metadata.name",
            s = quote(suffix),
            named = quote(&format!("*{suffix}"))
        ),
        None => format!("{of}.metadata.name"),
    };
    Pins {
        resources,
        variables: vec![
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
        ],
        validations: vec![
            check(
                &["clusterroles"],
                format!(
                    "object.metadata.name in variables.clusterRoleRules && (has(object.aggregationRule) || {})",
                    rules_in("clusterRoleRules")
                ),
                "the operator may write only its bundles' ClusterRoles, each with the rules the bundles give it",
            ),
            check(
                &["clusterroles"],
                format!(
                    "!has(object.aggregationRule) || !has(object.aggregationRule.clusterRoleSelectors) || \
                     object.aggregationRule.clusterRoleSelectors.all(s, \
                     (!has(s.matchExpressions) || size(s.matchExpressions) == 0) && has(s.matchLabels) && \
                     ({allowed_selector}))"
                ),
                "the operator may give a ClusterRole only the aggregationRule its bundles give it",
            ),
            check(
                &["clusterroles"],
                format!(
                    "!has(object.metadata.labels) || type(object.metadata.labels) == null_type || \
                     object.metadata.labels.all(k, !k.contains('aggregate-to-') || \
                     (object.metadata.name + ' ' + k + '=' + object.metadata.labels[k]) in {})",
                    list(&b.aggregation_labels)
                ),
                "the operator may set only the aggregation labels its bundles set",
            ),
            check(
                &["clusterroles"],
                format!(
                    "!has(object.aggregationRule) || (oldObject == null ? {new} : \
                     ({new} ? {old} : (has(oldObject.rules) && type(oldObject.rules) != null_type && object.rules == oldObject.rules)))",
                    new = empty("object.rules"),
                    old = empty("oldObject.rules"),
                ),
                "the operator may not write the rules of an aggregated ClusterRole (the aggregation controller does)",
            ),
            check(
                &["roles"],
                format!(
                    "object.metadata.name in variables.roleRules && ({})",
                    rules_in("roleRules")
                ),
                "the operator may write only its bundles' Roles, each with the rules the bundles give it",
            ),
            check(
                &["clusterrolebindings"],
                format!(
                    "object.metadata.name in variables.clusterBindingRoles && \
                     (object.roleRef.kind + '/' + object.roleRef.name) in variables.clusterBindingRoles[object.metadata.name] && ({})",
                    subjects_in("clusterBindingSubjects")
                ),
                "the operator may write only its bundles' ClusterRoleBindings, with their roleRef and subjects (ServiceAccounts in the allowed namespaces)",
            ),
            check(
                &["rolebindings"],
                format!(
                    "(object.metadata.name in variables.bindingRoles && \
                     (object.roleRef.kind + '/' + object.roleRef.name) in variables.bindingRoles[object.metadata.name] && ({})) || \
                     (object.roleRef.kind == 'ClusterRole' && object.roleRef.name.startsWith('system:openshift:scc:') && \
                     object.roleRef.name.substring(21) in variables.sccs && has(object.subjects) && size(object.subjects) == 1 && \
                     object.subjects[0].kind == 'ServiceAccount' && object.subjects[0].name in variables.serviceAccounts && \
                     has(object.subjects[0].namespace) && object.subjects[0].namespace == object.metadata.namespace && \
                     object.metadata.name == object.subjects[0].name + '-scc-' + object.roleRef.name.substring(21)){}",
                    subjects_in("bindingSubjects"),
                    tenant_binding(extra)
                ),
                if extra.tenant_roles.is_empty() {
                    "the operator may write only its bundles' RoleBindings, with their roleRef and subjects (ServiceAccounts in the allowed namespaces), and SCC grants to its bundles' ServiceAccounts"
                } else {
                    "the operator may write only its bundles' RoleBindings, with their roleRef and subjects (ServiceAccounts in the allowed namespaces), SCC grants to its bundles' ServiceAccounts, and RoleBindings of its own label binding people and groups (no ServiceAccount, no system: name) to the Kubeflow roles in profile namespaces"
                },
            ),
            check(
                &WEBHOOK_CONFIGS,
                "object.metadata.name in variables.webhooks[request.resource.resource] && \
                 (!has(object.webhooks) || object.webhooks.all(w, !has(w.clientConfig.url) && has(w.clientConfig.service) && \
                 w.clientConfig.service.namespace in variables.allowedNamespaces && \
                 (w.name + ' ' + w.clientConfig.service.name + ' ' + (has(w.clientConfig.service.path) ? w.clientConfig.service.path : '')) \
                 in variables.webhooks[request.resource.resource][object.metadata.name]))"
                    .to_string(),
                "the operator may write only its bundles' webhook configurations, each webhook calling the bundle's Service in an allowed namespace",
            ),
            check(
                &["customresourcedefinitions"],
                "object.metadata.name in variables.conversions && \
                 (!has(object.spec.conversion) || !has(object.spec.conversion.webhook) || \
                 !has(object.spec.conversion.webhook.clientConfig) || \
                 (!has(object.spec.conversion.webhook.clientConfig.url) && \
                 has(object.spec.conversion.webhook.clientConfig.service) && \
                 object.spec.conversion.webhook.clientConfig.service.namespace in variables.allowedNamespaces && \
                 (object.spec.conversion.webhook.clientConfig.service.name + ' ' + \
                 (has(object.spec.conversion.webhook.clientConfig.service.path) ? object.spec.conversion.webhook.clientConfig.service.path : '')) \
                 in variables.conversions[object.metadata.name]))"
                    .to_string(),
                "the operator may write only its bundles' CRDs, a conversion webhook calling the bundle's Service in an allowed namespace",
            ),
            check(
                &workload_names,
                format!(
                    "variables.workloadName in variables.workloadAccounts[request.resource.resource] && \
                     (has({pod}.serviceAccountName) ? {pod}.serviceAccountName : 'default') in \
                     variables.workloadAccounts[request.resource.resource][variables.workloadName] && \
                     (!has({pod}.serviceAccount) || {pod}.serviceAccount == '' || \
                     {pod}.serviceAccount in variables.workloadAccounts[request.resource.resource][variables.workloadName]) && \
                     [variables.workloadFeatures[request.resource.resource][variables.workloadName]].all(f, \
                     {} && {} && {} && \
                     (!has({pod}.volumes) || {pod}.volumes.all(v, !has(v.hostPath) || ('hostPath:' + v.hostPath.path) in f)) && \
                     {} && {})",
                    host("hostNetwork"),
                    host("hostPID"),
                    host("hostIPC"),
                    containers("containers"),
                    containers("initContainers"),
                ),
                "the operator may write only its bundles' workloads, each running as the bundle's ServiceAccount with no more of the host than the bundle gives it",
            ),
            check(
                &workload_names,
                format!(
                    "variables.workloadName in variables.workloadImages[request.resource.resource] && \
                     [variables.workloadImages[request.resource.resource][variables.workloadName]].all(i, \
                     [variables.workloadImagePaths[request.resource.resource][variables.workloadName]].all(p, \
                     {} && {}))",
                    images_allowed("containers"),
                    images_allowed("initContainers"),
                ),
                "the operator may run in each workload only the images its bundles run there: from the bundle's repository, the same path under one of the chart's image mirrors, or one of the chart's extra images",
            ),
            deletes(
                &workload_key("oldObject"),
                (!extra.tenant_roles.is_empty()).then(|| tenant_delete(extra)),
            ),
        ]
        .into_iter()
        .chain(labelled(extra))
        .chain(tenant(extra))
        .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(v: serde_json::Value) -> DynamicObject {
        serde_json::from_value(v).expect("object")
    }

    fn variable<'a>(p: &'a Pins, name: &str) -> &'a str {
        &p.variables
            .iter()
            .find(|v| v.name == name)
            .expect("variable")
            .expression
    }

    #[test]
    fn the_bundles_roles_bindings_webhooks_and_workloads_are_the_only_ones_allowed() {
        let objects = [
            obj(json!({
                "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                "metadata": {"name": "kubeflow-training-admin",
                    "labels": {"rbac.authorization.kubeflow.org/aggregate-to-kubeflow-admin": "true"}},
                "aggregationRule": {"clusterRoleSelectors": [{"matchLabels":
                    {"rbac.authorization.kubeflow.org/aggregate-to-kubeflow-training-admin": "true"}}]},
                "rules": [],
            })),
            obj(json!({
                "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                "metadata": {"name": "training-operator"},
                "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]}],
            })),
            obj(json!({
                "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                "metadata": {"name": "training-operator"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "training-operator"},
                "subjects": [{"kind": "ServiceAccount", "name": "training-operator", "namespace": "kubeflow"}],
            })),
            obj(json!({
                "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
                "metadata": {"name": "validator.training-operator.kubeflow.org"},
                "webhooks": [{"name": "validate.tfjob", "clientConfig": {"service":
                    {"name": "training-operator", "namespace": "kubeflow", "path": "/validate-tfjob"}}}],
            })),
            obj(json!({
                "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
                "metadata": {"name": "trainjobs.trainer.kubeflow.org"},
                "spec": {"conversion": {"strategy": "Webhook", "webhook": {"clientConfig":
                    {"service": {"name": "trainer-webhook", "namespace": "kubeflow", "path": "/convert"}}}}},
            })),
            obj(json!({
                "apiVersion": "apps/v1", "kind": "DaemonSet",
                "metadata": {"name": "plugin", "namespace": "kubeflow"},
                "spec": {"template": {"spec": {"serviceAccountName": "plugin",
                    "volumes": [{"name": "d", "hostPath": {"path": "/var/lib/kubelet/device-plugins"}}],
                    "initContainers": [{"name": "i", "image": "busybox:1.36"}],
                    "containers": [{"name": "p", "image": "nvcr.io/nvidia/k8s-device-plugin:v0.17.0@sha256:abc",
                        "securityContext": {"capabilities": {"add": ["NET_ADMIN"]}}}]}}},
            })),
        ];
        let p = pins(
            &objects,
            &Extra {
                claim_role: "kubeflow-training-cluster-claim",
                sccs: &["nonroot-v2".to_string()],
                workload_suffix: None,
                component: "training",
                labelled: &[],
                tenant_roles: &[],
            },
        );
        assert_eq!(
            variable(&p, "clusterRoleRules"),
            "{'kubeflow-training-admin': [], 'kubeflow-training-cluster-claim': [], 'training-operator': ['|pods|get,list||']}"
        );
        assert_eq!(
            variable(&p, "clusterBindingRoles"),
            "{'training-operator': ['ClusterRole/training-operator']}"
        );
        assert_eq!(
            variable(&p, "clusterBindingSubjects"),
            "{'training-operator': ['ServiceAccount/training-operator']}"
        );
        assert_eq!(
            variable(&p, "webhooks"),
            "{'mutatingwebhookconfigurations': {}, 'validatingwebhookconfigurations': \
             {'validator.training-operator.kubeflow.org': ['validate.tfjob training-operator /validate-tfjob']}}"
        );
        assert_eq!(
            variable(&p, "workloadFeatures"),
            "{'daemonsets': {'plugin': ['cap:NET_ADMIN', 'hostPath:/var/lib/kubelet/device-plugins']}, \
             'deployments': {}, 'statefulsets': {}}"
        );
        assert_eq!(
            variable(&p, "workloadAccounts"),
            "{'daemonsets': {'plugin': ['plugin']}, 'deployments': {}, 'statefulsets': {}}"
        );
        // Images by repository (any tag or digest), and where a mirror
        // holds each (Docker Hub's implicit `library/` made explicit).
        assert_eq!(
            variable(&p, "workloadImages"),
            "{'daemonsets': {'plugin': ['busybox', 'nvcr.io/nvidia/k8s-device-plugin']}, \
             'deployments': {}, 'statefulsets': {}}"
        );
        assert_eq!(
            variable(&p, "workloadImagePaths"),
            "{'daemonsets': {'plugin': ['library/busybox', 'nvidia/k8s-device-plugin']}, \
             'deployments': {}, 'statefulsets': {}}"
        );
        assert_eq!(
            variable(&p, "conversions"),
            "{'trainjobs.trainer.kubeflow.org': ['trainer-webhook /convert']}"
        );
        let all: String = p.validations.iter().map(|c| c.expression.clone()).collect();
        assert!(all.contains(
            "(object.metadata.name == 'kubeflow-training-admin' && s.matchLabels == {'rbac.authorization.kubeflow.org/aggregate-to-kubeflow-training-admin': 'true'})"
        ), "{all}");
        assert!(all.contains(
            "in ['kubeflow-training-admin rbac.authorization.kubeflow.org/aggregate-to-kubeflow-admin=true']"
        ), "{all}");
        // Every check of writes is guarded by the resource it is about.
        for c in p
            .validations
            .iter()
            .filter(|c| !c.expression.starts_with("request.operation != 'DELETE'"))
        {
            assert!(
                c.expression.starts_with("(request.resource.resource != '"),
                "{}",
                c.expression
            );
        }
        assert_eq!(quote("it's"), r"'it\'s'");
    }

    #[test]
    fn kinds_written_beyond_the_bundles_are_held_to_the_components_label() {
        let labelled = [("kubeflow.org".to_string(), "profiles".to_string())];
        let p = pins(
            &[],
            &Extra {
                claim_role: "kubeflow-dashboard-cluster-claim",
                component: "dashboard",
                labelled: &labelled,
                ..Default::default()
            },
        );
        assert!(p.resources.contains(&Matched {
            group: "kubeflow.org".into(),
            resource: "profiles".into(),
            delete: true
        }));
        let check = p
            .validations
            .iter()
            .find(|c| {
                c.expression
                    .starts_with("(request.resource.resource != 'profiles')")
            })
            .expect("a check of profiles");
        for part in [
            "object.metadata.labels['components.kubeflow.org/component'] == 'dashboard'",
            "request.operation == 'CREATE' || (has(oldObject.metadata.labels)",
        ] {
            assert!(
                check.expression.contains(part),
                "{part}: {}",
                check.expression
            );
        }
        let none = pins(&[], &Extra::default());
        assert!(
            !none
                .validations
                .iter()
                .any(|c| c.expression.contains("profiles"))
        );
    }

    #[test]
    fn tenant_access_is_pinned_to_profile_namespaces_people_and_the_kubeflow_roles() {
        let roles = ["kubeflow-edit".to_string(), "kubeflow-view".to_string()];
        let p = pins(
            &[],
            &Extra {
                component: "dashboard",
                tenant_roles: &roles,
                ..Default::default()
            },
        );
        let all: Vec<&str> = p
            .validations
            .iter()
            .map(|c| c.expression.as_str())
            .collect();
        let bindings = all
            .iter()
            .find(|e| e.starts_with("(request.resource.resource != 'rolebindings')"))
            .expect("a check of rolebindings");
        for part in [
            "object.roleRef.name in ['kubeflow-edit', 'kubeflow-view']",
            "(s.kind == 'User' || s.kind == 'Group') && !s.name.startsWith('system:')",
            "namespaceObject.metadata.labels['app.kubernetes.io/part-of'] == 'kubeflow-profile'",
            "object.metadata.labels['components.kubeflow.org/component'] == 'dashboard'",
        ] {
            assert!(bindings.contains(part), "{part}: {bindings}");
        }
        for part in [
            "object.spec.action == 'ALLOW') && !has(object.spec.provider)",
            "request.resource.resource != 'authorizationpolicies' || request.namespace in variables.allowedNamespaces || ((has(oldObject.metadata.labels)",
            "object.spec.owner.kind == 'User' && !object.spec.owner.name.startsWith('system:')",
            "(request.resource.resource == 'rolebindings' && (has(oldObject.metadata.labels)",
        ] {
            assert!(all.iter().any(|e| e.contains(part)), "{part}: {all:#?}");
        }
        assert!(
            p.resources
                .iter()
                .any(|m| m.resource == "authorizationpolicies" && m.delete)
        );
        // Without tenant access, none of it.
        let none = pins(&[], &Extra::default());
        let text: String = none
            .validations
            .iter()
            .map(|c| c.expression.clone())
            .collect();
        assert!(!text.contains("kubeflow-profile") && !text.contains("authorizationpolicies"));
    }

    #[test]
    fn an_images_repository_is_it_without_tag_or_digest() {
        for (image, repo) in [
            ("mysql:8.4", "mysql"),
            ("mysql", "mysql"),
            ("kserve/agent:v0.16.0", "kserve/agent"),
            (
                "registry.local:5000/kserve/agent:v1@sha256:ab",
                "registry.local:5000/kserve/agent",
            ),
            (
                "registry.local:5000/kserve/agent",
                "registry.local:5000/kserve/agent",
            ),
            (
                "ghcr.io/kubeflow/hub/server@sha256:ab",
                "ghcr.io/kubeflow/hub/server",
            ),
        ] {
            assert_eq!(repository(image), repo, "{image}");
        }
        assert_eq!(mirror_path("mysql"), "library/mysql");
        assert_eq!(mirror_path("kserve/agent"), "kserve/agent");
        assert_eq!(
            mirror_path("ghcr.io/kubeflow/hub/server"),
            "kubeflow/hub/server"
        );
        // A mirrored image's repository is the mirror and that path: what
        // the check compares.
        let moved =
            crate::images::moved("ghcr.io/kubeflow/hub/server:v0.3.9", "mirror.local:5000/kf");
        assert_eq!(
            repository(&moved),
            format!(
                "mirror.local:5000/kf/{}",
                mirror_path("ghcr.io/kubeflow/hub/server")
            )
        );
    }

    #[test]
    fn a_rule_key_joins_each_list_in_order() {
        let r: PolicyRule = serde_json::from_value(json!({
            "apiGroups": ["", "apps"], "resources": ["pods", "deployments"],
            "verbs": ["get"], "resourceNames": ["a"],
        }))
        .expect("rule");
        assert_eq!(rule_key(&r), ",apps|pods,deployments|get|a|");
        let urls: PolicyRule =
            serde_json::from_value(json!({"nonResourceURLs": ["/metrics"], "verbs": ["get"]}))
                .expect("rule");
        assert_eq!(rule_key(&urls), "||get||/metrics");
    }
}
