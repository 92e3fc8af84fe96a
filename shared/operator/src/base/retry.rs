//! One retry policy for every operator: a CR whose reconcile fails is
//! retried after 1 s, the delay doubling with each failure in a row up to a
//! minute (from the 7th); a success or a refusal (a person must act, the
//! condition says so) ends the run and its backoff. Each delay is drawn
//! between half and all of that ("equal jitter"), so the operators an API
//! server's trouble failed at once do not all come back at once; never
//! longer, so a recovered server is seen as soon as the plain doubling
//! would see it. This is the only retry: the client's own is off (see
//! `runner`).

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::Mutex;
use std::time::Duration;

/// Delay before the first retry.
pub const FIRST: Duration = Duration::from_secs(1);
/// Longest delay between retries. Now that every 504 of a loaded server
/// is a failed reconcile (the client's hidden retry is off), a longer cap
/// (5 minutes once) left an operator asleep for minutes after the server
/// had recovered; one request a minute per failing CR loads no server.
pub const CAP: Duration = Duration::from_secs(60);

/// The delay after `failures` failures in a row (1 for the first).
pub fn delay(failures: u32) -> Duration {
    let doublings = failures.saturating_sub(1).min(16);
    (FIRST * 2u32.pow(doublings)).min(CAP)
}

/// [`delay`] for `failures` with equal jitter: between half and all of it.
pub fn jittered(failures: u32) -> Duration {
    use std::hash::{BuildHasher, Hasher};
    let full = delay(failures);
    // A fresh randomly keyed hasher is random enough to spread retries and
    // needs no extra crate.
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u32(failures);
    let thousandths = u32::try_from(h.finish() % 1_000).unwrap_or(0);
    full.mul_f64(0.5 + f64::from(thousandths) / 1000.0 / 2.0)
}

/// What an operator remembers of one CR between reconciles.
#[derive(Debug, Default, Clone, PartialEq)]
struct Remembered {
    /// Failures in a row (the backoff's count).
    failures: u32,
    /// The last failure's message and how many times in a row it came.
    last_failure: Option<(String, u32)>,
    /// The refusal last told in an Event, until an apply goes through.
    told_refusal: Option<String>,
}

/// Per CR (keyed by its object reference), what an operator remembers
/// between reconciles: failures in a row, the last failure and the refusal
/// last told. Kept by the controller skeleton, emptied for a CR that is
/// gone, so nothing grows with CRs created and deleted over an operator's life.
#[derive(Debug)]
pub struct Memory<Key = String>(Mutex<HashMap<Key, Remembered>>);

impl<Key> Default for Memory<Key> {
    fn default() -> Self {
        Memory(Mutex::new(HashMap::new()))
    }
}

impl<Key: Hash + Eq + Clone> Memory<Key> {
    fn with<T>(&self, key: &Key, fallback: T, f: impl FnOnce(&mut Remembered) -> T) -> T {
        let Ok(mut m) = self.0.lock() else {
            return fallback;
        };
        let entry = m.entry(key.clone()).or_default();
        let out = f(entry);
        if *entry == Remembered::default() {
            m.remove(key);
        }
        out
    }

    /// Counts a failure of `key` for its backoff; returns how many in a row.
    pub fn record(&self, key: &Key) -> u32 {
        self.with(key, 1, |e| {
            e.failures = e.failures.saturating_add(1);
            e.failures
        })
    }

    /// How many failures in a row of `key` were counted (see [`Memory::record`]).
    pub fn failures(&self, key: &Key) -> u32 {
        self.with(key, 0, |e| e.failures)
    }

    /// Counts this failure message: how many times in a row `key` failed with it.
    pub fn repeats(&self, key: &Key, message: &str) -> u32 {
        self.with(key, 1, |e| match &mut e.last_failure {
            Some((m, n)) if m == message => {
                *n = n.saturating_add(1);
                *n
            }
            _ => {
                e.last_failure = Some((message.to_string(), 1));
                1
            }
        })
    }

    /// Ends the run of failures of `key` (and its backoff).
    pub fn reset(&self, key: &Key) {
        self.with(key, (), |e| {
            e.failures = 0;
            e.last_failure = None;
        });
    }

    /// Whether this refusal is news for `key`: not the one last told.
    pub fn refusal_is_news(&self, key: &Key, refusal: &str) -> bool {
        self.with(key, true, |e| {
            e.told_refusal.replace(refusal.to_string()).as_deref() != Some(refusal)
        })
    }

    /// An apply went through: the next refusal of `key` is news again.
    pub fn forget_refusal(&self, key: &Key) {
        self.with(key, (), |e| e.told_refusal = None);
    }

    /// The CR is gone: nothing of it is kept.
    pub fn forget(&self, key: &Key) {
        if let Ok(mut m) = self.0.lock() {
            m.remove(key);
        }
    }

    /// How many CRs something is remembered of.
    pub fn len(&self) -> usize {
        self.0.lock().map(|m| m.len()).unwrap_or(0)
    }

    /// Whether nothing is remembered.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn k(name: &str) -> String {
        format!("ns/{name}")
    }

    #[test]
    fn the_delay_doubles_from_one_second_to_one_minute_and_resets() {
        let secs: Vec<u64> = (1..=12).map(|n| delay(n).as_secs()).collect();
        assert_eq!(secs, [1, 2, 4, 8, 16, 32, 60, 60, 60, 60, 60, 60]);
        assert_eq!(delay(u32::MAX), CAP);
        let f = Memory::default();
        assert_eq!(f.record(&k("a")), 1);
        assert_eq!(f.record(&k("a")), 2);
        assert_eq!(f.failures(&k("a")), 2);
        assert_eq!(f.failures(&k("c")), 0);
        assert_eq!(f.record(&k("b")), 1);
        f.reset(&k("a"));
        assert_eq!(f.record(&k("a")), 1);
    }

    #[test]
    fn a_jittered_delay_is_between_half_and_all_of_the_doubling() {
        for n in 1..=12 {
            for _ in 0..50 {
                let d = jittered(n);
                assert!(d <= delay(n) && d >= delay(n) / 2, "{n}: {d:?}");
            }
        }
        let spread: std::collections::BTreeSet<_> = (0..50).map(|_| jittered(8)).collect();
        assert!(spread.len() > 1, "the delays differ");
    }

    #[test]
    fn what_is_remembered_of_a_cr_goes_with_it() {
        let m = Memory::default();
        assert_eq!(m.repeats(&k("a"), "boom"), 1);
        assert_eq!(m.repeats(&k("a"), "boom"), 2);
        assert_eq!(m.repeats(&k("a"), "other"), 1);
        assert!(m.refusal_is_news(&k("a"), "InvalidSpec: x"));
        assert!(!m.refusal_is_news(&k("a"), "InvalidSpec: x"));
        m.record(&k("b"));
        assert_eq!(m.len(), 2);
        // A success ends failures and refusals: nothing is left of ns/b.
        m.reset(&k("b"));
        assert_eq!(m.len(), 1);
        m.forget_refusal(&k("a"));
        assert!(m.refusal_is_news(&k("a"), "InvalidSpec: x"));
        // A deleted CR leaves nothing behind.
        m.forget(&k("a"));
        assert!(m.is_empty());
    }
}
