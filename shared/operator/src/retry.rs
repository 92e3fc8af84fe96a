//! One retry policy for every operator: a CR whose reconcile fails is
//! retried after 1 s, the delay doubling with each failure in a row up to 5
//! minutes (from the 10th); a success or a refusal (a person must act, the
//! condition says so) ends the run and its backoff.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

/// Delay before the first retry.
pub const FIRST: Duration = Duration::from_secs(1);
/// Longest delay between retries.
pub const CAP: Duration = Duration::from_secs(300);

/// The delay after `failures` failures in a row (1 for the first).
pub fn delay(failures: u32) -> Duration {
    let doublings = failures.saturating_sub(1).min(16);
    (FIRST * 2u32.pow(doublings)).min(CAP)
}

/// Failures in a row, per CR ("namespace/name").
#[derive(Debug, Default)]
pub struct Failures(Mutex<HashMap<String, u32>>);

impl Failures {
    /// Counts a failure of `key`; returns how many in a row.
    pub fn record(&self, key: &str) -> u32 {
        self.0
            .lock()
            .map(|mut f| {
                let n = f.entry(key.to_string()).or_insert(0);
                *n = n.saturating_add(1);
                *n
            })
            .unwrap_or(1)
    }

    /// Ends the run of failures of `key`.
    pub fn reset(&self, key: &str) {
        if let Ok(mut f) = self.0.lock() {
            f.remove(key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_delay_doubles_from_one_second_to_five_minutes_and_resets() {
        let secs: Vec<u64> = (1..=12).map(|n| delay(n).as_secs()).collect();
        assert_eq!(secs, [1, 2, 4, 8, 16, 32, 64, 128, 256, 300, 300, 300]);
        assert_eq!(delay(u32::MAX), CAP);
        let f = Failures::default();
        assert_eq!(f.record("ns/a"), 1);
        assert_eq!(f.record("ns/a"), 2);
        assert_eq!(f.record("ns/b"), 1);
        f.reset("ns/a");
        assert_eq!(f.record("ns/a"), 1);
    }
}
