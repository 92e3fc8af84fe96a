//! How a reconcile that did not reach its goal ended, classified once for
//! every controller: refused (a person must act), waiting (on something
//! that will happen by itself), or a transient failure (retried with
//! backoff, Degraded once it repeats).

use std::sync::Arc;
use std::time::Duration;

use crate::base::conditions::Reason;
use crate::base::refusal::Refusal;
use crate::engine::apply::ApplyError;

/// How long a refused CR waits before it is looked at again without a
/// change: what a person does to fix it (create the missing Secret) may be
/// nothing a watch sees.
pub const REFUSED_REQUEUE: Duration = Duration::from_secs(30);

/// How soon a wait (a cleanup's objects going) is looked at again.
pub const WAITING_REQUEUE: Duration = Duration::from_millis(500);

/// The error behind a transient failure, kept whole for the log. Shared (an
/// `Arc`), so a failure stays `Clone`.
pub type Cause = Arc<dyn std::error::Error + Send + Sync + 'static>;

/// Why a reconcile did not reach its goal.
#[derive(Debug, Clone, thiserror::Error)]
pub enum Failure {
    /// The input's fault: a Degraded condition, an Event once, nothing
    /// applied; looked at again on a change (or after [`REFUSED_REQUEUE`]).
    #[error("{0}")]
    Refused(Refusal),
    /// Waiting for something outside the operator (objects being deleted,
    /// someone else's finalizer): not an error, looked at again soon.
    #[error("waiting for {0}")]
    Waiting(String),
    /// A passing failure: Ready false, retried with backoff, Degraded once
    /// the same message repeats (a missing permission at once).
    #[error("{message}")]
    Transient {
        /// The condition's reason.
        reason: Reason,
        /// What failed, for the status and the log.
        message: String,
        /// The error that failed, with its causes: the message is cut to
        /// the status' bound and says the chain as text only; the log
        /// records the whole chain from here.
        #[source]
        source: Option<Cause>,
    },
}

/// Two failures are the same when they say the same: the cause is how the
/// log tells it, not what failed.
impl PartialEq for Failure {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (Failure::Refused(a), Failure::Refused(b)) => a == b,
            (Failure::Waiting(a), Failure::Waiting(b)) => a == b,
            (
                Failure::Transient {
                    reason: a,
                    message: m,
                    ..
                },
                Failure::Transient {
                    reason: b,
                    message: n,
                    ..
                },
            ) => a == b && m == n,
            _ => false,
        }
    }
}

impl Failure {
    /// A passing failure no error of its own caused (a wait that ran out,
    /// a rule of the controller's).
    pub fn transient(reason: Reason, message: impl Into<String>) -> Self {
        Failure::Transient {
            reason,
            message: message.into(),
            source: None,
        }
    }

    /// The whole chain of the error behind a transient failure, one line,
    /// for the log (see [`crate::base::errors::chain`]).
    pub fn cause(&self) -> Option<String> {
        match self {
            Failure::Transient {
                source: Some(source),
                ..
            } => Some(crate::base::errors::chain(source.as_ref())),
            _ => None,
        }
    }

    /// A failed API request, named by what it was for. The authorizer's
    /// refusal is the operator's RBAC lacking a permission (a person must
    /// grant it), wherever the request was made.
    pub fn api(what: &str, e: kube::Error) -> Self {
        if let kube::Error::Api(status) = &e
            && status.code == 403
            && status.message.contains(" cannot ")
        {
            return Failure::Transient {
                reason: Reason::PermissionDenied,
                message: crate::base::conditions::bounded(&format!(
                    "the operator's RBAC does not allow this: failed to {what}: {e}"
                )),
                source: Some(Arc::new(e)),
            };
        }
        // With its causes: a lost connection says why only further down.
        let chain = crate::base::errors::chain(&e);
        Failure::Transient {
            reason: Reason::ApiError,
            message: crate::base::conditions::bounded(&format!("failed to {what}: {chain}")),
            source: Some(Arc::new(e)),
        }
    }

    /// The label of `kubeflow_reconcile_errors_total`.
    pub fn metric_reason(&self) -> &'static str {
        match self {
            Failure::Refused(r) => r.reason.as_str(),
            Failure::Waiting(_) => "Waiting",
            Failure::Transient { reason, .. } => reason.as_str(),
        }
    }
}

impl From<Refusal> for Failure {
    fn from(r: Refusal) -> Self {
        Failure::Refused(r)
    }
}

impl From<ApplyError> for Failure {
    /// As [`From<&ApplyError>`], keeping the error as the cause.
    fn from(e: ApplyError) -> Self {
        let mut failure = Failure::from(&e);
        if let Failure::Transient { source, .. } = &mut failure {
            *source = Some(Arc::new(e));
        }
        failure
    }
}

impl From<&ApplyError> for Failure {
    /// The apply engine's errors: what the input caused is refused (a
    /// conflict of ownership, an invalid object), a missing permission
    /// names the operator's RBAC, the rest is passing.
    fn from(e: &ApplyError) -> Self {
        if e.is_refusal() {
            let reason = if matches!(e, ApplyError::Conflict { .. }) {
                Reason::OwnershipConflict
            } else {
                Reason::InvalidSpec
            };
            return Failure::Refused(Refusal::new(reason, e.to_string()));
        }
        if let ApplyError::Admission { .. } = e {
            return Failure::transient(
                Reason::AdmissionDenied,
                crate::base::conditions::bounded(&e.to_string()),
            );
        }
        if e.is_permission_denied() {
            return Failure::transient(
                Reason::PermissionDenied,
                crate::base::conditions::bounded(&format!(
                    "the operator's RBAC does not allow this: {e}"
                )),
            );
        }
        // The message names the verb and the object ("failed to apply
        // CustomResourceDefinition x: ..."), with the error's causes.
        Failure::transient(
            Reason::ApiError,
            crate::base::conditions::bounded(&crate::base::errors::chain(e)),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(code: u16, message: &str) -> kube::Error {
        kube::Error::Api(
            serde_json::from_value(serde_json::json!({
                "status": "Failure", "message": message, "reason": "Forbidden", "code": code,
            }))
            .expect("status"),
        )
    }

    #[test]
    fn a_gateway_timeout_on_an_apply_names_the_verb_the_object_and_the_error() {
        let crd: kube::api::DynamicObject = serde_json::from_value(serde_json::json!({
            "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": "inferenceservices.serving.kserve.io"}}))
        .expect("object");
        let timeout = status(
            504,
            "the server was unable to return a response in the time allotted",
        );
        let failure = Failure::from(crate::engine::apply::ApplyError::Api {
            verb: "apply",
            object: crate::engine::apply::describe(&crd),
            source: timeout,
        });
        let Failure::Transient {
            reason, message, ..
        } = &failure
        else {
            panic!("passing: {failure:?}");
        };
        assert_eq!(*reason, Reason::ApiError);
        assert!(
            message.starts_with(
                "failed to apply CustomResourceDefinition inferenceservices.serving.kserve.io: "
            ) && message.contains("time allotted"),
            "{message}"
        );
        let deployment: kube::api::DynamicObject = serde_json::from_value(serde_json::json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "kserve-controller-manager", "namespace": "kubeflow"}}))
        .expect("object");
        assert!(
            crate::engine::apply::describe(&deployment)
                .contains("kubeflow/kserve-controller-manager")
        );
    }

    /// A lost connection, as kube gives it: the reason is two sources down.
    fn lost_connection() -> kube::Error {
        #[derive(Debug, thiserror::Error)]
        #[error("client error (SendRequest)")]
        struct SendRequest(#[source] std::io::Error);
        let reset = std::io::Error::new(
            std::io::ErrorKind::ConnectionReset,
            "connection reset by peer",
        );
        kube::Error::Service(Box::new(SendRequest(reset)))
    }

    #[test]
    fn a_transient_failure_keeps_its_error_and_the_log_gets_the_whole_chain() {
        let failure = Failure::api("list pods", lost_connection());
        // The error itself (behind its `Arc`), not a copy of its text.
        let source = std::error::Error::source(&failure).expect("the error is kept");
        assert_eq!(source.to_string(), lost_connection().to_string());
        let cause = failure.cause().expect("a cause to log");
        assert!(cause.contains("connection reset by peer"), "{cause}");
        // The copy the early report sends keeps it too; equality is what is said.
        let copy = failure.clone();
        assert_eq!(copy.cause().as_deref(), Some(cause.as_str()));
        assert_eq!(
            copy,
            Failure::transient(Reason::ApiError, failure.to_string())
        );
        // Past the status' bound the message is cut; the cause is whole.
        let long = "x".repeat(crate::base::conditions::MESSAGE_MAX);
        let cut = Failure::api(&long, lost_connection());
        assert!(!cut.to_string().contains("connection reset"), "{cut}");
        assert!(
            cut.cause()
                .is_some_and(|c| c.contains("connection reset by peer"))
        );
        // A failure no error caused has no cause to log.
        assert_eq!(Failure::transient(Reason::ApiError, "gone").cause(), None);
    }

    #[test]
    fn an_apply_error_owned_is_kept_as_the_cause() {
        let failure = Failure::from(crate::engine::apply::ApplyError::Api {
            verb: "apply",
            object: "Deployment kubeflow/x".into(),
            source: lost_connection(),
        });
        assert_eq!(failure.metric_reason(), "ApiError");
        let cause = failure.cause().expect("kept");
        assert!(
            cause.starts_with("failed to apply Deployment kubeflow/x")
                && cause.contains("connection reset by peer"),
            "{cause}"
        );
    }

    #[test]
    fn an_authorizer_refusal_is_a_missing_permission_anything_else_passes() {
        let denied = Failure::api(
            "read namespace kubeflow",
            status(
                403,
                "namespaces \"kubeflow\" is forbidden: User \"system:serviceaccount:x:y\" cannot get resource \"namespaces\"",
            ),
        );
        assert_eq!(denied.metric_reason(), "PermissionDenied");
        // A 403 that is not the authorizer's (a terminating namespace).
        let other = Failure::api(
            "create",
            status(
                403,
                "unable to create new content in namespace kubeflow because it is being terminated",
            ),
        );
        assert_eq!(other.metric_reason(), "ApiError");
    }
}
