//! What can go wrong in an apply, and which failures are the input's fault.

use std::time::Duration;

use kube::api::DynamicObject;

use super::describe;

/// Errors of an apply.
#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    /// Another inventory holds an object this one would take over.
    #[error("{object} is held by {holder}; nothing of this component was applied")]
    Conflict {
        /// The object, as "Kind name" or "Kind namespace/name".
        object: String,
        /// Who holds it, as "namespace/name".
        holder: String,
    },
    /// The API server refused an object as invalid (bad input).
    #[error("the API server refused {object}: {message}; nothing of this component was applied")]
    Invalid {
        /// The object.
        object: String,
        /// The server's message.
        message: String,
    },
    /// An admission policy or webhook of the cluster refused the write:
    /// not the spec's fault (the same object is valid elsewhere), but a rule
    /// of the cluster's a person must look at.
    #[error("the cluster's admission control refused {object}: {message}")]
    Admission {
        /// The object.
        object: String,
        /// The server's message, naming the policy or webhook.
        message: String,
    },
    /// A request failed.
    #[error("failed to {verb} {object}: {}", crate::base::errors::chain(source))]
    Api {
        /// What was attempted.
        verb: &'static str,
        /// The object.
        object: String,
        /// Cause.
        source: kube::Error,
    },
    /// Something the apply waits for did not happen in time.
    #[error("timed out after {after:?} waiting for {what}")]
    Timeout {
        /// What was waited for.
        what: String,
        /// How long.
        after: Duration,
    },
}

impl ApplyError {
    /// Whether the API server's authorizer refused the request: the
    /// operator's RBAC lacks a permission, which a person must grant. (Not
    /// every 403: writes into a terminating namespace are refused too.)
    pub fn is_permission_denied(&self) -> bool {
        matches!(
            self,
            ApplyError::Api { source: kube::Error::Api(e), .. }
                if e.code == 403 && e.message.contains(" cannot ")
        )
    }

    /// Whether the request failed without the server's verdict (its own
    /// timeout, no answer in time, a lost connection): a write may have
    /// been done all the same.
    pub fn outcome_unknown(&self) -> bool {
        matches!(self, ApplyError::Api { source, .. } if super::deadline::outcome_unknown(source))
    }

    /// Whether the error is the input's fault (a person must act) rather than a passing failure.
    pub fn is_refusal(&self) -> bool {
        matches!(
            self,
            ApplyError::Conflict { .. } | ApplyError::Invalid { .. }
        )
    }
}

/// Maps a refused request to an error: 400/422 are the object's fault, and
/// so is a server-side apply whose fields do not fit the kind's schema (a
/// string where a number goes), which the API server answers with 500
/// "failed to create typed patch object": retrying it cannot help.
pub(super) fn classify(verb: &'static str, obj: &DynamicObject, source: kube::Error) -> ApplyError {
    match &source {
        kube::Error::Api(e) if is_admission_denial(&e.message) => ApplyError::Admission {
            object: describe(obj),
            message: e.message.clone(),
        },
        kube::Error::Api(e)
            if e.code == 422
                || e.code == 400
                || (e.code == 500 && e.message.contains("failed to create typed patch object")) =>
        {
            ApplyError::Invalid {
                object: describe(obj),
                message: e.message.clone(),
            }
        }
        _ => ApplyError::Api {
            verb,
            object: describe(obj),
            source,
        },
    }
}

/// Whether a refusal came from admission control: a ValidatingAdmissionPolicy
/// ("... denied request: ...") or a webhook ("admission webhook ... denied
/// the request"). A webhook that cannot be reached is not a denial.
fn is_admission_denial(message: &str) -> bool {
    (message.contains("ValidatingAdmissionPolicy '") && message.contains("denied request"))
        || (message.contains("admission webhook") && message.contains("denied the request"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn api_error(code: u16, message: &str) -> kube::Error {
        let status: kube::core::Status =
            serde_json::from_value(json!({"status": "Failure", "code": code, "message": message}))
                .expect("status");
        kube::Error::Api(Box::new(status))
    }

    #[test]
    fn a_patch_of_the_wrong_type_is_the_inputs_fault_other_500s_pass() {
        let obj: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "ctl", "namespace": "kubeflow"}}))
        .expect("object");
        let typed = api_error(
            500,
            "failed to create typed patch object (kubeflow/ctl; apps/v1, Kind=Deployment): .spec.replicas: expected numeric (int or float), got string",
        );
        assert!(classify("apply", &obj, typed).is_refusal());
        assert!(classify("apply", &obj, api_error(422, "invalid")).is_refusal());
        assert!(
            !classify("apply", &obj, api_error(500, "etcdserver: leader changed")).is_refusal()
        );
    }

    #[test]
    fn an_admission_denial_is_named_as_such_not_as_invalid_input() {
        let obj: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "ctl", "namespace": "kubeflow"}}))
        .expect("object");
        for message in [
            "deployments.apps \"ctl\" is forbidden: ValidatingAdmissionPolicy 'freeze' with binding 'freeze' denied request: frozen",
            "admission webhook \"policy.example.com\" denied the request: no",
        ] {
            let e = classify("apply", &obj, api_error(422, message));
            assert!(matches!(e, ApplyError::Admission { .. }), "{e}");
            assert!(!e.is_refusal(), "retried, not the spec's fault");
        }
        let unreachable =
            "Internal error occurred: failed calling webhook \"x\": connection refused";
        assert!(matches!(
            classify("apply", &obj, api_error(500, unreachable)),
            ApplyError::Api { .. }
        ));
    }
}
