//! An error as one line with its causes: kube's errors name only the outer
//! layer ("ServiceError: client error (SendRequest)"), while what a person
//! needs (a connection reset, no answer in time) is further down the chain.

use std::error::Error;

/// `e` and each of its sources, joined by ": ", a source left out when the
/// text before it already says it (most of our errors print their cause).
pub fn chain(e: &(dyn Error + 'static)) -> String {
    let mut out = e.to_string();
    let mut next = e.source();
    while let Some(cause) = next {
        let text = cause.to_string();
        if !text.is_empty() && !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        next = cause.source();
    }
    out
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
}
