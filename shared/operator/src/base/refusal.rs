//! Input a person must fix: what every step (render, overrides, the apply)
//! may answer instead of a result, and the controller turns into a
//! Degraded condition with nothing applied.

use crate::base::bundle::BundleError;
use crate::base::conditions::{self, Reason};

/// Input a person must fix: becomes a Degraded condition, applies nothing.
#[derive(Debug, Clone, PartialEq)]
pub struct Refusal {
    /// Why (see [`Reason`]).
    pub reason: Reason,
    /// What is wrong and what to do.
    pub message: String,
}

impl Refusal {
    /// A refusal; its message bounded (it may quote user input, and it is
    /// logged and written into the status).
    pub fn new(reason: Reason, message: impl Into<String>) -> Self {
        Refusal {
            reason,
            message: conditions::bounded(&message.into()),
        }
    }
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.reason, self.message)
    }
}

impl From<BundleError> for Refusal {
    fn from(e: BundleError) -> Self {
        let reason = match e {
            BundleError::UnknownVersion { .. } => Reason::UnknownVersion,
            _ => Reason::BundleError,
        };
        Refusal::new(reason, e.to_string())
    }
}
