//! How a reconcile that did not reach its goal ended, classified once for
//! every controller: refused (a person must act), waiting (on something
//! that will happen by itself), or a transient failure (retried with
//! backoff, Degraded once it repeats).

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

/// Why a reconcile did not reach its goal.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
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
    },
}

impl Failure {
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
            };
        }
        // With its causes: a lost connection says why only further down.
        let e = crate::base::errors::chain(&e);
        Failure::Transient {
            reason: Reason::ApiError,
            message: crate::base::conditions::bounded(&format!("failed to {what}: {e}")),
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
    fn from(e: ApplyError) -> Self {
        Failure::from(&e)
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
            return Failure::Transient {
                reason: Reason::AdmissionDenied,
                message: crate::base::conditions::bounded(&e.to_string()),
            };
        }
        if e.is_permission_denied() {
            return Failure::Transient {
                reason: Reason::PermissionDenied,
                message: crate::base::conditions::bounded(&format!(
                    "the operator's RBAC does not allow this: {e}"
                )),
            };
        }
        // The message names the verb and the object ("failed to apply
        // CustomResourceDefinition x: ..."), with the error's causes.
        Failure::Transient {
            reason: Reason::ApiError,
            message: crate::base::conditions::bounded(&crate::base::errors::chain(e)),
        }
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
        let Failure::Transient { reason, message } = &failure else {
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
