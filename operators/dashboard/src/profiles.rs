//! Declared profiles: checked, and turned into the Profile objects the
//! profile controller makes namespaces of. A profile someone created
//! themselves (a user at first login, an administrator by hand) is never
//! taken over: a declared profile of the same name is refused.

use std::collections::BTreeSet;

use kubeflow_operator::api::{Contributor, ContributorRole, DeclaredProfile};
use kubeflow_operator::component::Refusal;
use kubeflow_operator::conditions::Reason;
use kubeflow_operator::kube::api::{ApiResource, DynamicObject};
use kubeflow_operator::kube::core::GroupVersionKind;
use kubeflow_operator::quantity::quantity;
use kubeflow_operator::validate::{is_dns_label, is_email, is_kubernetes_identity};
use serde_json::{Value, json};

/// The Profile kind (cluster-scoped; its v1 is the stored version in both
/// releases' CRDs).
pub fn kind() -> GroupVersionKind {
    GroupVersionKind::gvk("kubeflow.org", "v1", "Profile")
}

/// Namespaces a profile must not take: Kubernetes' own, the project's and
/// its components' (the profile controller would refuse them anyway, after
/// the fact, since it only makes namespaces it owns).
const RESERVED: &[&str] = &[
    "default",
    "kubeflow",
    "kubeflow-system",
    "istio-system",
    "cert-manager",
    "auth",
    "oauth2-proxy",
    "knative-serving",
    "knative-eventing",
];

/// The most profiles a Dashboard declares (the CRD's `maxItems`).
pub const DECLARED_PROFILES_MAX: usize = 1000;

/// Why a `system:` name is refused where a person is meant.
const SYSTEM_NAME: &str = "is a name Kubernetes keeps for itself (`system:`: a ServiceAccount, a Kubernetes component, or the group of anonymous, signed-in or all ServiceAccounts' requests), which would give the namespace to a program or to anyone";

/// A name as a refusal quotes it: bounded.
fn truncate(name: &str) -> String {
    kubeflow_operator::conditions::truncate(name, 256)
}

fn invalid(message: String) -> Refusal {
    Refusal::new(Reason::InvalidSpec, message)
}

/// Refuses a malformed entry, naming it: a name that is not a DNS label or
/// is reserved, a name listed twice, an owner that is not an email, a quota
/// that is not a quantity.
pub fn check(profiles: &[DeclaredProfile], own_namespace: &str) -> Result<(), Refusal> {
    // The schema's bound, again for a resource stored before it had one:
    // each profile is a namespace and several objects kept by every pass.
    if profiles.len() > DECLARED_PROFILES_MAX {
        return Err(invalid(format!(
            "spec.profiles: {} profiles declared; at most {DECLARED_PROFILES_MAX} (profiles beyond that are created by their owners, or by hand)",
            profiles.len()
        )));
    }
    let mut seen = BTreeSet::new();
    for (i, p) in profiles.iter().enumerate() {
        let at = format!("spec.profiles[{i}]");
        if !is_dns_label(&p.name) {
            return Err(invalid(format!(
                "{at}.name {:?} is not a DNS label (lowercase letters, digits and '-', at most 63): it names the profile's namespace",
                p.name
            )));
        }
        if RESERVED.contains(&p.name.as_str())
            || p.name.starts_with("kube-")
            || p.name == own_namespace
        {
            return Err(invalid(format!(
                "{at}.name {:?} is a namespace Kubernetes, the project or a component uses; a profile needs a namespace of its own",
                p.name
            )));
        }
        if !seen.insert(p.name.as_str()) {
            return Err(invalid(format!("{at}.name {:?} is listed twice", p.name)));
        }
        if is_kubernetes_identity(&p.owner) {
            return Err(invalid(format!(
                "{at}.owner {:?} {SYSTEM_NAME}; a profile's owner is a person, named by the email they log in with",
                truncate(&p.owner)
            )));
        }
        if !is_email(&p.owner) {
            return Err(invalid(format!(
                "{at}.owner {:?} is not an email address (the login's kubeflow-userid)",
                p.owner
            )));
        }
        check_contributors(p, &at)?;
        for (resource, q) in p.resource_quota.iter().flatten() {
            let name_ok = !resource.is_empty()
                && resource.len() <= 253
                && resource
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"./-".contains(&b));
            if !name_ok {
                return Err(invalid(format!(
                    "{at}.resourceQuota: {resource:?} is not a resource name (e.g. cpu, requests.memory, requests.nvidia.com/gpu)"
                )));
            }
            if quantity(&q.0).is_none() {
                return Err(invalid(format!(
                    "{at}.resourceQuota.{resource}: {:?} is not a quantity (e.g. 32, 500m, 64Gi)",
                    q.0
                )));
            }
        }
    }
    Ok(())
}

/// Refuses a contributor that names no one or two, a user who is not an
/// email or is the owner, a group Kubernetes reserves (`system:`: all
/// service accounts, everyone authenticated), someone listed twice, or two
/// contributors whose bindings would take the same name.
fn check_contributors(p: &DeclaredProfile, at: &str) -> Result<(), Refusal> {
    let mut names: Vec<(String, usize)> = Vec::new();
    for (j, c) in p.contributors.iter().flatten().enumerate() {
        let at = format!("{at}.contributors[{j}]");
        for (field, name) in [("user", &c.user), ("group", &c.group)] {
            if let Some(name) = name.as_deref().filter(|n| is_kubernetes_identity(n)) {
                return Err(invalid(format!(
                    "{at}.{field} {:?} {SYSTEM_NAME}; a contributor is a person (by email) or a group of the identity provider",
                    truncate(name)
                )));
            }
        }
        match (&c.user, &c.group) {
            (Some(user), None) => {
                if !is_email(user) {
                    return Err(invalid(format!(
                        "{at}.user {user:?} is not an email address (the login's kubeflow-userid)"
                    )));
                }
                if user.eq_ignore_ascii_case(&p.owner) {
                    return Err(invalid(format!(
                        "{at}.user {user:?} is the profile's owner, who administers it already"
                    )));
                }
            }
            (None, Some(group)) => {
                if group.is_empty()
                    || group.len() > 253
                    || group.chars().any(char::is_control)
                    || group.starts_with("system:")
                {
                    return Err(invalid(format!(
                        "{at}.group {group:?} is not a group of the identity provider (1 to 253 printable characters; `system:` groups are Kubernetes' own)"
                    )));
                }
            }
            _ => {
                return Err(invalid(format!("{at}: set exactly one of user and group")));
            }
        }
        let Some(name) = binding_name(c) else {
            return Err(invalid(format!(
                "{at}: the name has no letter or digit to name its binding after"
            )));
        };
        let subject = subject_name(&name);
        if let Some((_, k)) = names.iter().find(|(n, _)| subject_name(n) == subject) {
            return Err(invalid(format!(
                "{at} is contributors[{k}] again (each person or group is listed once, with one role; names that differ only in punctuation count as one)"
            )));
        }
        names.push((name, j));
    }
    Ok(())
}

/// KFAM's name for a contributor's RoleBinding and AuthorizationPolicy
/// (`user-<email>-clusterrole-<role>`, the email lowercased with each run
/// of other characters made one `-`), so the dashboard's contributor list
/// shows declared contributors like those added there; `group-...` for a
/// group. None when nothing of the name is left.
pub fn binding_name(c: &Contributor) -> Option<String> {
    let (prefix, who) = match (&c.user, &c.group) {
        (Some(u), _) => ("user", u),
        (None, Some(g)) => ("group", g),
        (None, None) => return None,
    };
    let mut safe = String::new();
    for ch in who.chars().flat_map(char::to_lowercase) {
        if ch.is_ascii_alphanumeric() {
            safe.push(ch);
        } else if !safe.is_empty() && !safe.ends_with('-') {
            safe.push('-');
        }
    }
    let safe = safe.trim_end_matches('-');
    (!safe.is_empty()).then(|| format!("{prefix}-{safe}-clusterrole-{}", c.role.as_str()))
}

/// Whether a name is one `binding_name` gives.
pub fn is_access_name(name: &str) -> bool {
    (name.starts_with("user-") || name.starts_with("group-")) && name.contains("-clusterrole-")
}

/// A binding name without its role: two entries with the same subject.
fn subject_name(binding: &str) -> &str {
    binding
        .rsplit_once("-clusterrole-")
        .map_or(binding, |(subject, _)| subject)
}

/// The ServiceAccounts whose requests carry a person's `kubeflow-userid`
/// into a profile's namespace: the ingress gateway's (every web app's
/// traffic) and the Pipelines UI's (it proxies artifacts and logs), as the
/// profile controller's owner policy and KFAM name them.
fn trusted_principals(kubeflow_namespace: &str) -> Value {
    json!([
        "cluster.local/ns/istio-system/sa/istio-ingressgateway-service-account",
        format!("cluster.local/ns/{kubeflow_namespace}/sa/ml-pipeline-ui"),
    ])
}

/// Each contributor's access to its profile's namespace, as KFAM would
/// give it: a RoleBinding to `kubeflow-edit` or `kubeflow-view` (the
/// Kubernetes API, and the web apps' access reviews), and for a user an
/// Istio AuthorizationPolicy letting their requests through the mesh to
/// the namespace's notebooks and servers.
///
/// A group gets the RoleBinding only: Istio cannot copy a list claim such
/// as `groups` into a header (its `outputClaimToHeaders` takes strings,
/// numbers and booleans), so no header names a person's groups that a
/// policy could match; and a RequestAuthentication in the namespace, which
/// would let a policy read the claim itself, would refuse every token of
/// another issuer there (the Kubernetes service-account tokens of
/// machine-to-machine calls). Only profiles whose namespace exists
/// (`ready`) get them: the profile controller makes it after the Profile.
pub fn access_objects(
    profiles: &[DeclaredProfile],
    ready: &BTreeSet<String>,
    kubeflow_namespace: &str,
) -> Vec<DynamicObject> {
    let binding = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("rbac.authorization.k8s.io", "v1", "RoleBinding"),
        "rolebindings",
    );
    let policy = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("security.istio.io", "v1beta1", "AuthorizationPolicy"),
        "authorizationpolicies",
    );
    let mut out = Vec::new();
    for p in profiles.iter().filter(|p| ready.contains(&p.name)) {
        for c in p.contributors.iter().flatten() {
            let Some(name) = binding_name(c) else {
                continue;
            };
            let role = c.role.as_str();
            let (kind, who, annotation) = match (&c.user, &c.group) {
                (Some(u), _) => ("User", u, "user"),
                (None, Some(g)) => ("Group", g, "group"),
                (None, None) => continue,
            };
            let mut rb = DynamicObject::new(&name, &binding).within(&p.name);
            rb.metadata.annotations = Some(
                [
                    (annotation.to_string(), who.clone()),
                    ("role".to_string(), role.to_string()),
                ]
                .into(),
            );
            rb.data = json!({
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role_name(c.role)},
                "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": who}],
            });
            out.push(rb);
            if c.user.is_some() {
                let mut ap = DynamicObject::new(&name, &policy).within(&p.name);
                ap.metadata.annotations = Some(
                    [
                        ("user".to_string(), who.clone()),
                        ("role".to_string(), role.to_string()),
                    ]
                    .into(),
                );
                ap.data = json!({"spec": {"rules": [{
                    "from": [{"source": {"principals": trusted_principals(kubeflow_namespace)}}],
                    "when": [{"key": "request.headers[kubeflow-userid]", "values": [who]}],
                }]}});
                out.push(ap);
            }
        }
    }
    out
}

/// The aggregated Kubeflow role a contributor's role binds.
pub fn role_name(role: ContributorRole) -> &'static str {
    match role {
        ContributorRole::Edit => "kubeflow-edit",
        ContributorRole::View => "kubeflow-view",
    }
}

/// Refuses declared profiles whose name an existing profile holds that the
/// operator did not make (`foreign`: their names).
pub fn refuse_taken(profiles: &[DeclaredProfile], foreign: &[String]) -> Result<(), Refusal> {
    match profiles.iter().find(|p| foreign.contains(&p.name)) {
        Some(p) => Err(Refusal::new(
            Reason::OwnershipConflict,
            format!(
                "spec.profiles: a profile named {:?} exists already and was not declared here (a user or an administrator created it); it is left alone. Choose another name, or delete that profile first",
                p.name
            ),
        )),
        None => Ok(()),
    }
}

/// The Profile objects.
pub fn objects(profiles: &[DeclaredProfile]) -> Vec<DynamicObject> {
    let ar = ApiResource::from_gvk_with_plural(&kind(), "profiles");
    profiles
        .iter()
        .map(|p| {
            let mut o = DynamicObject::new(&p.name, &ar);
            let mut spec = json!({"owner": {"kind": "User", "name": p.owner}});
            if let Some(hard) = &p.resource_quota {
                spec["resourceQuotaSpec"] = json!({"hard": hard});
            }
            o.data = json!({"spec": spec});
            o
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn profile(name: &str, owner: &str) -> DeclaredProfile {
        DeclaredProfile {
            name: name.into(),
            owner: owner.into(),
            resource_quota: None,
            contributors: None,
        }
    }

    #[test]
    fn each_malformed_entry_is_refused_by_its_place() {
        assert!(check(&[profile("team-a", "jane@example.com")], "kubeflow").is_ok());
        for (entries, expected) in [
            (
                vec![profile("Team_A", "jane@example.com")],
                "spec.profiles[0].name",
            ),
            (
                vec![profile("kube-public", "jane@example.com")],
                "a namespace Kubernetes",
            ),
            (
                vec![profile("kubeflow", "jane@example.com")],
                "a namespace Kubernetes",
            ),
            (
                vec![
                    profile("a", "jane@example.com"),
                    profile("a", "joe@example.com"),
                ],
                "spec.profiles[1].name \"a\" is listed twice",
            ),
            (vec![profile("a", "jane")], "spec.profiles[0].owner"),
        ] {
            let r = check(&entries, "kubeflow").expect_err(expected);
            assert_eq!(r.reason, Reason::InvalidSpec);
            assert!(r.message.contains(expected), "{}", r.message);
        }
        let mut quota = profile("a", "jane@example.com");
        quota.resource_quota = Some(
            [(
                "cpu".to_string(),
                kubeflow_operator::k8s_openapi::apimachinery::pkg::api::resource::Quantity(
                    "lots".into(),
                ),
            )]
            .into(),
        );
        let r = check(&[quota], "kubeflow").expect_err("quota");
        assert!(
            r.message.contains("spec.profiles[0].resourceQuota.cpu"),
            "{}",
            r.message
        );
    }

    #[test]
    fn a_profile_someone_else_made_is_never_taken_over() {
        let r = refuse_taken(
            &[profile("team-a", "jane@example.com")],
            &["team-a".to_string()],
        )
        .expect_err("taken");
        assert_eq!(r.reason, Reason::OwnershipConflict);
        assert!(r.message.contains("team-a"));
    }
}
