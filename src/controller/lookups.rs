//! What the look-ups of EC2 (`ami_lookups`) and vCenter (`template_imports`) share, written once:
//! the jobs under way (at most so many at once), failures retried after a doubling backoff, and
//! a pass triggered whenever a job ends. A pass never waits for a cloud: it decides with the
//! answers in, its decisions name what they wait for, and after `decide` the look-ups start jobs
//! for what has no fresh answer (docs/decisions/background-lookups.md). What each cloud is asked,
//! with which credentials, and how long its answers stay fresh stays in its own file.

use std::collections::{HashMap, HashSet};
use std::hash::Hash;
use std::time::{Duration, Instant};

use tokio::sync::mpsc;

use super::retry;
use super::watches::Trigger;

/// The jobs of one kind, by what each asks (a region, a template).
pub(super) struct Jobs<K> {
    in_flight: HashSet<K>,
    /// Read by each look-up for what it reports, and forgotten where nothing needs them.
    pub failures: HashMap<K, Failure>,
    max_in_flight: usize,
    first_retry: Duration,
    max_retry: Duration,
}

/// Why the last jobs of a key failed, how many failed in a row, and when to try again.
pub(super) struct Failure {
    pub message: String,
    pub attempts: u32,
    pub retry_at: Instant,
}

impl<K: Eq + Hash + Clone> Jobs<K> {
    /// At most `max_in_flight` jobs under way; a failed one retried after `first_retry`,
    /// doubled per failure in a row up to `max_retry`.
    pub fn new(max_in_flight: usize, first_retry: Duration, max_retry: Duration) -> Self {
        Jobs {
            in_flight: HashSet::new(),
            failures: HashMap::new(),
            max_in_flight,
            first_retry,
            max_retry,
        }
    }

    /// Marks a job for `key` under way, when one may start at `now`: none is under way for it,
    /// its last failure's retry is due, and fewer than the bound are under way.
    pub fn start(&mut self, key: &K, now: Instant) -> bool {
        let waiting = (self.failures.get(key)).is_some_and(|f| f.retry_at > now);
        let room = self.in_flight.len() < self.max_in_flight;
        !waiting && room && self.in_flight.insert(key.clone())
    }

    /// The job of `key` ended, neither answered nor failed (someone else is at it, its server
    /// could not be asked): its failures in a row still count.
    pub fn ended(&mut self, key: &K) {
        self.in_flight.remove(key);
    }

    /// The job of `key` ended well: its failures are forgotten. True when it had failed before.
    pub fn succeeded(&mut self, key: &K) -> bool {
        self.ended(key);
        self.failures.remove(key).is_some()
    }

    /// The job of `key` failed with `message` at `now`: the delay until its retry, and how many
    /// failed in a row.
    pub fn failed(&mut self, key: &K, message: String, now: Instant) -> (Duration, u32) {
        self.in_flight.remove(key);
        let attempts = self.failures.get(key).map_or(0, |f| f.attempts) + 1;
        let delay = retry::doubling(self.first_retry, self.max_retry, attempts);
        let retry_at = now + delay;
        let failure = Failure {
            message,
            attempts,
            retry_at,
        };
        self.failures.insert(key.clone(), failure);
        (delay, attempts)
    }
}

/// Runs `job` in the background, then triggers a pass; and another once the delay it returns is
/// over (the clouds send no events, and a Secret is not watched: a retry is a pass that asks).
pub(super) fn spawn(
    wake: &mpsc::UnboundedSender<Trigger>,
    job: impl Future<Output = Option<Duration>> + Send + 'static,
) {
    let wake = wake.clone();
    tokio::spawn(async move {
        let again_after = job.await;
        let _ = wake.send(Trigger);
        if let Some(delay) = again_after {
            tokio::time::sleep(delay).await;
            let _ = wake.send(Trigger);
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    const FIRST: Duration = Duration::from_secs(15);
    const MAX: Duration = Duration::from_secs(600);

    #[test]
    fn a_key_has_one_job_at_a_time_and_jobs_are_bounded() {
        let mut jobs = Jobs::new(2, FIRST, MAX);
        let now = Instant::now();
        assert!(jobs.start(&"a", now));
        assert!(!jobs.start(&"a", now), "twice under way");
        assert!(jobs.start(&"b", now));
        assert!(!jobs.start(&"c", now), "over the bound");
        jobs.succeeded(&"a");
        assert!(jobs.start(&"c", now));
    }

    #[test]
    fn a_failed_job_waits_for_its_retry_which_doubles_until_it_succeeds() {
        let mut jobs = Jobs::new(4, FIRST, MAX);
        let now = Instant::now();
        assert!(jobs.start(&"a", now));
        assert_eq!(jobs.failed(&"a", "timed out".into(), now), (FIRST, 1));
        assert!(!jobs.start(&"a", now));
        assert_eq!(
            jobs.failures.get(&"a").map(|f| f.message.as_str()),
            Some("timed out")
        );
        assert!(jobs.start(&"a", now + FIRST));
        assert_eq!(jobs.failed(&"a", "timed out".into(), now), (FIRST * 2, 2));
        for _ in 0..10 {
            jobs.failed(&"a", "timed out".into(), now);
        }
        assert_eq!(jobs.failures.get(&"a").map(|f| f.retry_at), Some(now + MAX));
        assert!(jobs.start(&"a", now + MAX));
        assert!(jobs.succeeded(&"a"), "it had failed");
        assert!(!jobs.failures.contains_key(&"a"));
        assert!(jobs.start(&"a", now));
    }
}
