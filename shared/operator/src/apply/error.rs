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
    /// A request failed.
    #[error("failed to {verb} {object}: {source}")]
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

    /// Whether the error is the input's fault (a person must act) rather than a passing failure.
    pub fn is_refusal(&self) -> bool {
        matches!(
            self,
            ApplyError::Conflict { .. } | ApplyError::Invalid { .. }
        )
    }
}

/// Maps a refused request to an error: 400/422 are the object's fault.
pub(super) fn classify(verb: &'static str, obj: &DynamicObject, source: kube::Error) -> ApplyError {
    match &source {
        kube::Error::Api(e) if e.code == 422 || e.code == 400 => ApplyError::Invalid {
            object: describe(obj),
            message: e.message.clone(),
        },
        _ => ApplyError::Api {
            verb,
            object: describe(obj),
            source,
        },
    }
}
