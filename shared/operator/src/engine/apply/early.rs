//! A failure told while the apply still runs. The engine goes on with the
//! other objects after one fails (one object's trouble must not stop the
//! repair of the rest), and with a loaded API server the rest of the pass
//! (the other CRDs, their Established wait, the later waves) takes longer
//! than a person should wait to see that something failed. Each object's
//! failure is handed, as it happens, to whoever runs the apply and listens
//! (the controller skeleton writes the first into the status at once).

use std::sync::Arc;

use super::ApplyError;

/// What a listener does with a failure.
pub type OnFailure = Arc<dyn Fn(&ApplyError) + Send + Sync>;

tokio::task_local! {
    static LISTENER: OnFailure;
}

/// Tells the failure to the apply's listener, if it has one.
pub(crate) fn report(e: &ApplyError) {
    let _ = LISTENER.try_with(|listener| listener(e));
}

/// Runs `work` with each object's failure handed to `listener` as it
/// happens.
pub async fn listening<T>(listener: OnFailure, work: impl std::future::Future<Output = T>) -> T {
    LISTENER.scope(listener, work).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    fn failed(object: &str) -> ApplyError {
        ApplyError::Timeout {
            what: object.into(),
            after: std::time::Duration::from_secs(1),
        }
    }

    #[tokio::test]
    async fn a_failure_reaches_the_apply_it_happens_in_and_no_other() {
        report(&failed("nobody listens")); // Nothing happens.
        let heard = Arc::new(Mutex::new(Vec::new()));
        let log = heard.clone();
        let listener: OnFailure = Arc::new(move |e| log.lock().expect("lock").push(e.to_string()));
        listening(listener, async { report(&failed("x")) }).await;
        assert_eq!(
            *heard.lock().expect("lock"),
            ["timed out after 1s waiting for x"]
        );
    }
}
