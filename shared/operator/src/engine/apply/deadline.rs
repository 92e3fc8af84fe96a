//! How long the engine waits for the API server's answer to one request,
//! and which failures leave a write's outcome unknown (the server may have
//! done it).
//!
//! The client has no timeout of its own (a watch's long poll would trip
//! it), so a connection that stops answering would hold a reconcile, and
//! its CR's status, forever. The API server ends every request that is not
//! a watch itself after its `--request-timeout` (60 s by default, raised
//! to 3 minutes on loaded test clusters; a write is cut sooner, at 34 s,
//! whatever that flag says) and answers 504, so a server that
//! is working, however loaded, always answers within that: the engine
//! waits a little longer than the longest such limit, and its own limit
//! only ends a connection that stopped answering.
//!
//! A shorter limit sized to the object was tried (10 s plus 1 s per
//! 16 KB): on the loaded two-core CI machine, an upgrade's eight operators
//! applying their CRDs at once gave up after 10 to 21 s while the server
//! was still writing, read back, sent the CRDs again and doubled the work,
//! and backed off for minutes; the release stalled at 6/14.

use std::time::Duration;

/// The wait for an answer to any request: beyond the API server's own
/// limit (60 s by default, up to 3 minutes where raised), so its answer
/// (the object, or a 504), not a guess, ends the request.
pub(super) const LIMIT: Duration = Duration::from_secs(185);

/// How many bytes `obj` takes as JSON, counted without building the text
/// (a CRD's is 720 KB).
pub(super) fn size_of(obj: &impl serde::Serialize) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0 += b.len();
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    // Counting cannot fail; an object that cannot be written is small.
    let _ = serde_json::to_writer(&mut count, obj);
    count.0
}

/// No answer came in time.
#[derive(Debug, thiserror::Error)]
#[error("no answer from the API server within {0:?}")]
pub struct NoAnswer(pub Duration);

/// `request` given at most `limit` to answer; a late one is a
/// [`kube::Error::Service`] carrying [`NoAnswer`].
pub(super) async fn within<T>(
    limit: Duration,
    request: impl std::future::Future<Output = Result<T, kube::Error>>,
) -> Result<T, kube::Error> {
    match tokio::time::timeout(limit, request).await {
        Ok(r) => r,
        Err(_) => Err(kube::Error::Service(Box::new(NoAnswer(limit)))),
    }
}

/// Whether a write that failed so may have been done all the same: the
/// server's own timeout (504), no answer in time, or a connection lost
/// before the answer. A refusal the server sent is an answer.
pub(super) fn outcome_unknown(e: &kube::Error) -> bool {
    match e {
        kube::Error::Api(s) => s.code == 504,
        kube::Error::Service(_) | kube::Error::HyperError(_) => true,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(code: u16) -> kube::Error {
        kube::Error::Api(Box::new(
            serde_json::from_value(serde_json::json!({"status": "Failure", "code": code}))
                .expect("status"),
        ))
    }

    #[test]
    fn every_request_is_waited_for_beyond_the_servers_own_limit() {
        let test_clusters_own = Duration::from_secs(180);
        assert!(LIMIT > test_clusters_own);
        assert!(LIMIT <= Duration::from_secs(190));
        assert_eq!(size_of(&serde_json::json!({"a": "bc"})), 10);
    }

    #[test]
    fn only_a_missing_answer_leaves_a_write_in_doubt() {
        assert!(outcome_unknown(&status(504)));
        assert!(outcome_unknown(&kube::Error::Service(Box::new(NoAnswer(
            LIMIT
        )))));
        for answered in [409, 422, 429, 500, 503] {
            assert!(!outcome_unknown(&status(answered)), "{answered}");
        }
    }

    #[tokio::test]
    async fn a_request_that_never_answers_ends_at_its_limit() {
        let never = std::future::pending::<Result<(), kube::Error>>();
        let e = within(Duration::from_millis(20), never)
            .await
            .expect_err("late");
        assert!(outcome_unknown(&e));
        assert!(e.to_string().contains("no answer"), "{e}");
    }
}
