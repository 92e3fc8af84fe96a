//! Declared profiles: checked, and turned into the Profile objects the
//! profile controller makes namespaces of. A profile someone created
//! themselves (a user at first login, an administrator by hand) is never
//! taken over: a declared profile of the same name is refused.

use std::collections::BTreeSet;

use kubeflow_operator::api::DeclaredProfile;
use kubeflow_operator::component::Refusal;
use kubeflow_operator::conditions::Reason;
use kubeflow_operator::kube::api::{ApiResource, DynamicObject};
use kubeflow_operator::kube::core::GroupVersionKind;
use kubeflow_operator::quantity::quantity;
use kubeflow_operator::validate::{is_dns_label, is_email};
use serde_json::json;

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

fn invalid(message: String) -> Refusal {
    Refusal::new(Reason::InvalidSpec, message)
}

/// Refuses a malformed entry, naming it: a name that is not a DNS label or
/// is reserved, a name listed twice, an owner that is not an email, a quota
/// that is not a quantity.
pub fn check(profiles: &[DeclaredProfile], own_namespace: &str) -> Result<(), Refusal> {
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
        if !is_email(&p.owner) {
            return Err(invalid(format!(
                "{at}.owner {:?} is not an email address (the login's kubeflow-userid)",
                p.owner
            )));
        }
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
