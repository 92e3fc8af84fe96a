//! Whether a token or a user may do something, asked of the API server in
//! process (SelfSubjectAccessReview, SubjectAccessReview). "No" and "could
//! not ask" are different answers here: `kubectl auth can-i` prints nothing
//! when it fails, and a check reading its output took that for "no", so a
//! broken kubeconfig passed every "may not" check. A process per question
//! was also the slowest part of the reach checks.

use std::path::Path;

use anyhow::Context;
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec, SubjectAccessReview,
    SubjectAccessReviewSpec, SubjectAccessReviewStatus,
};
use kube::api::{Api, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};

/// A request to ask about, as `kubectl auth can-i` takes it: empty fields
/// are left out ("" group: the core group; "" name: any object; ""
/// namespace: cluster-wide, or every namespace).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct Request<'a> {
    /// The verb (`get`, `create`, `escalate`, `*`, ...).
    pub verb: &'a str,
    /// The API group.
    pub group: &'a str,
    /// The resource (plural), or `*`.
    pub resource: &'a str,
    /// The subresource (`status`, ...).
    pub subresource: &'a str,
    /// The object's name.
    pub name: &'a str,
    /// The namespace.
    pub namespace: &'a str,
}

impl Request<'_> {
    fn attributes(&self) -> ResourceAttributes {
        let given = |s: &str| (!s.is_empty()).then(|| s.to_string());
        ResourceAttributes {
            verb: given(self.verb),
            group: given(self.group),
            resource: given(self.resource),
            subresource: given(self.subresource),
            name: given(self.name),
            namespace: given(self.namespace),
            ..Default::default()
        }
    }
}

/// A client acting with the credentials of `kubeconfig` (an operator's
/// ServiceAccount token).
pub async fn client_for(kubeconfig: &Path) -> anyhow::Result<Client> {
    let kc = Kubeconfig::read_from(kubeconfig)
        .with_context(|| format!("cannot read {}", kubeconfig.display()))?;
    let config = Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .with_context(|| format!("cannot use {}", kubeconfig.display()))?;
    Client::try_from(config).with_context(|| format!("no client for {}", kubeconfig.display()))
}

/// Whether the client's own identity may make `what`; an error when the
/// API server could not be asked or could not decide.
pub async fn can_i(client: &Client, what: Request<'_>) -> anyhow::Result<bool> {
    let review = SelfSubjectAccessReview {
        spec: SelfSubjectAccessReviewSpec {
            resource_attributes: Some(what.attributes()),
            ..Default::default()
        },
        ..Default::default()
    };
    let answered = Api::<SelfSubjectAccessReview>::all(client.clone())
        .create(&PostParams::default(), &review)
        .await
        .with_context(|| format!("cannot ask whether it may {what:?}"))?;
    answer(&what, answered.status)
}

/// Whether `user` (authenticated, as `kubectl --as` makes one) may make
/// `what`; an error when the API server could not be asked or could not
/// decide.
pub async fn can_user(client: &Client, user: &str, what: Request<'_>) -> anyhow::Result<bool> {
    let review = SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: Some(user.to_string()),
            // What impersonation adds, and so what `kubectl --as` was asked with.
            groups: Some(vec!["system:authenticated".to_string()]),
            resource_attributes: Some(what.attributes()),
            ..Default::default()
        },
        ..Default::default()
    };
    let answered = Api::<SubjectAccessReview>::all(client.clone())
        .create(&PostParams::default(), &review)
        .await
        .with_context(|| format!("cannot ask whether {user} may {what:?}"))?;
    answer(&what, answered.status)
}

/// A review's answer: a "no" that came with an evaluation error (a binding
/// whose role could not be read, say) is no answer, as is a review without
/// a status.
fn answer(what: &Request<'_>, status: Option<SubjectAccessReviewStatus>) -> anyhow::Result<bool> {
    let status = status.with_context(|| format!("the review of {what:?} has no status"))?;
    if status.allowed {
        return Ok(true);
    }
    if let Some(e) = status.evaluation_error.filter(|e| !e.is_empty()) {
        anyhow::bail!("the API server could not decide {what:?}: {e}");
    }
    Ok(false)
}

/// "Could not ask" is an error, never a "no" (no cluster needed).
#[cfg(test)]
mod tests {
    use super::*;

    const SECRETS: Request<'static> = Request {
        verb: "get",
        group: "",
        resource: "secrets",
        subresource: "",
        name: "",
        namespace: "kube-system",
    };

    /// A client for an API server nobody runs.
    fn unreachable() -> Client {
        let addr = std::net::TcpListener::bind("127.0.0.1:0")
            .expect("bind")
            .local_addr()
            .expect("address");
        let url = format!("http://{addr}").parse().expect("url");
        Client::try_from(Config::new(url)).expect("client")
    }

    #[tokio::test]
    async fn an_api_server_that_does_not_answer_is_not_a_no() {
        let client = unreachable();
        let e = can_i(&client, SECRETS).await.expect_err("asked nobody");
        assert!(format!("{e:#}").contains("cannot ask"), "{e:#}");
        assert!(can_user(&client, "jane", SECRETS).await.is_err());
    }

    #[tokio::test]
    async fn a_kubeconfig_that_cannot_be_read_is_not_a_no() {
        assert!(
            client_for(Path::new("/nonexistent/kubeconfig"))
                .await
                .is_err()
        );
    }

    #[test]
    fn an_undecided_or_empty_review_is_not_a_no() {
        let status = |allowed: bool, error: Option<&str>| {
            Some(SubjectAccessReviewStatus {
                allowed,
                evaluation_error: error.map(str::to_string),
                ..Default::default()
            })
        };
        assert!(answer(&SECRETS, status(true, None)).expect("yes"));
        assert!(!answer(&SECRETS, status(false, None)).expect("no"));
        assert!(!answer(&SECRETS, status(false, Some(""))).expect("no"));
        assert!(answer(&SECRETS, status(false, Some("role not found"))).is_err());
        assert!(answer(&SECRETS, None).is_err());
    }
}
