//! An error as one line with its causes: kube's errors name only the outer
//! layer ("ServiceError: client error (SendRequest)"), while what a person
//! needs (a connection reset, no answer in time) is further down the chain.

use std::error::Error;

/// `e` and each of its sources, joined by ": ", a source left out when the
/// text before it already says it (most of our errors print their cause).
pub fn chain(e: &(dyn Error + 'static)) -> String {
    let mut out = brief(e);
    // An API server's refusal is told whole by `brief`: its `Status` source
    // would only say it again.
    let mut next = e.source().filter(|_| !is_api(e));
    while let Some(cause) = next {
        let text = brief(cause);
        if !text.is_empty() && !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        next = cause.source().filter(|_| !is_api(cause));
    }
    out
}

/// An error's own text; an API server's refusal as its message, reason
/// and code (kube prints the whole `Status` structure besides).
fn brief(e: &(dyn Error + 'static)) -> String {
    match e.downcast_ref::<kube::Error>() {
        Some(kube::Error::Api(s)) => status(s),
        _ => e.to_string(),
    }
}

fn is_api(e: &(dyn Error + 'static)) -> bool {
    matches!(e.downcast_ref::<kube::Error>(), Some(kube::Error::Api(_)))
}

/// An API server's `Status` as one short line: "message (Reason, code)".
pub fn status(s: &kube::core::Status) -> String {
    format!("{} ({}, {})", s.message, s.reason, s.code)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("outer")]
    struct Outer(#[source] std::io::Error);

    #[derive(Debug, thiserror::Error)]
    #[error("failed to apply X: {0}")]
    struct Says(#[source] std::io::Error);

    #[test]
    fn every_cause_is_named_once() {
        let reset = || std::io::Error::new(std::io::ErrorKind::ConnectionReset, "reset by peer");
        assert_eq!(chain(&Outer(reset())), "outer: reset by peer");
        assert_eq!(chain(&Says(reset())), "failed to apply X: reset by peer");
    }

    #[test]
    fn an_api_servers_refusal_is_told_briefly() {
        let timeout: kube::core::Status = serde_json::from_value(serde_json::json!({
            "status": "Failure", "code": 504, "reason": "Timeout", "message": "took too long"}))
        .expect("status");
        let e = kube::Error::Api(Box::new(timeout));
        assert_eq!(chain(&e), "took too long (Timeout, 504)");
    }
}
