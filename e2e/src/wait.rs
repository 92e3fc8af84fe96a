//! Waiting for a condition with a timeout, polling fast at first (the cluster is local).

use std::future::Future;
use std::time::{Duration, Instant};

/// How long a wait polls at its fastest.
const FAST_FOR: Duration = Duration::from_secs(3);

/// Polls `check` until it returns `Some`, or panics after `timeout` naming
/// `what`: every 50 ms for the first seconds (a repair is timed to tens of
/// milliseconds), then every 250 ms. Installs and removals take minutes, and
/// polling them 20 times a second kept the API server of a loaded two-core
/// machine busy answering the tests (900 reads of one Kubeflow resource in
/// one test binary).
pub async fn wait_for<T, F, Fut>(what: &str, timeout: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let start = Instant::now();
    loop {
        if let Some(v) = check().await {
            return v;
        }
        if start.elapsed() > timeout {
            panic!("timed out after {timeout:?} waiting for {what}");
        }
        let pause = if start.elapsed() < FAST_FOR {
            Duration::from_millis(50)
        } else {
            Duration::from_millis(250)
        };
        tokio::time::sleep(pause).await;
    }
}
