//! How watches wait after a failure, and how loudly they say so.
//!
//! kube-runtime's stream backoff resets on every `Ok` item, and a watcher yields one (`Init`)
//! before each list attempt: with the API server down or a 403 the default backoff never grows
//! past its first step, and every watch retried about once a second for ever, logging a
//! warning each time. Here the backoff ignores kube-runtime's resets; the consumer of the stream
//! resets it when the watch made real progress (a listed state, an object event).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use kube::runtime::utils::Backoff;
use tracing::{debug, info, warn};

/// The first wait after a failure, doubled per further failure up to [`MAX_DELAY`].
pub const FIRST_DELAY: Duration = Duration::from_secs(1);
pub const MAX_DELAY: Duration = Duration::from_secs(300);

/// Exponential backoff with jitter, reset only through [`WatchBackoff::progressed`].
#[derive(Clone, Debug)]
pub struct WatchBackoff {
    state: Arc<Mutex<State>>,
}

#[derive(Debug)]
struct State {
    next: Duration,
    /// xorshift state for the jitter: a deterministic sequence per watch is enough.
    seed: u64,
}

impl WatchBackoff {
    pub fn new() -> Self {
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0x9e37_79b9, |d| d.as_nanos() as u64)
            | 1;
        WatchBackoff {
            state: Arc::new(Mutex::new(State {
                next: FIRST_DELAY,
                seed,
            })),
        }
    }

    /// The watch delivered something real: the next failure waits [`FIRST_DELAY`] again.
    pub fn progressed(&self) {
        self.lock().next = FIRST_DELAY;
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl Default for WatchBackoff {
    fn default() -> Self {
        WatchBackoff::new()
    }
}

impl Iterator for WatchBackoff {
    type Item = Duration;

    /// The wait before the next attempt: between half and all of the current step, so that the
    /// watches of many replicas do not retry in step.
    fn next(&mut self) -> Option<Duration> {
        let mut state = self.lock();
        let step = state.next;
        state.next = (step * 2).min(MAX_DELAY);
        state.seed ^= state.seed << 13;
        state.seed ^= state.seed >> 7;
        state.seed ^= state.seed << 17;
        let fraction = 0.5 + (state.seed % 1000) as f64 / 2000.0;
        Some(step.mul_f64(fraction))
    }
}

impl Backoff for WatchBackoff {
    /// kube-runtime calls this on every `Ok` item, `Init` included, which is not progress.
    fn reset(&mut self) {}
}

/// Says a watch failed once per failure spell (and when the error changes), not per retry.
#[derive(Debug, Default)]
pub struct FailureLog {
    failing: Option<String>,
}

impl FailureLog {
    pub fn failed(&mut self, watch: &str, error: &dyn std::fmt::Display) {
        let error = error.to_string();
        if self.failing.as_ref() == Some(&error) {
            debug!(watch, %error, "watch still failing; retrying with backoff");
        } else {
            warn!(watch, %error, "watch failed; retrying with backoff");
            self.failing = Some(error);
        }
    }

    pub fn progressed(&mut self, watch: &str) {
        if self.failing.take().is_some() {
            info!(watch, "watch recovered");
        }
    }
}

/// The backoff and the failure log of one watch, fed by its consumer.
#[derive(Debug, Default)]
pub struct WatchHealth {
    pub backoff: WatchBackoff,
    log: FailureLog,
    name: String,
}

impl WatchHealth {
    pub fn new(name: impl Into<String>) -> Self {
        WatchHealth {
            backoff: WatchBackoff::new(),
            log: FailureLog::default(),
            name: name.into(),
        }
    }

    /// The watch listed its state or delivered an object event.
    pub fn progressed(&mut self) {
        self.backoff.progressed();
        self.log.progressed(&self.name);
    }

    pub fn failed(&mut self, error: &dyn std::fmt::Display) {
        self.log.failed(&self.name, error);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failures_double_the_wait_up_to_the_cap_and_only_progress_resets_it() {
        let mut b = WatchBackoff::new();
        let waits: Vec<Duration> = (0..12).map(|_| b.next().unwrap()).collect();
        for (i, wait) in waits.iter().enumerate() {
            let step = (FIRST_DELAY * 2u32.pow(i.min(20) as u32)).min(MAX_DELAY);
            assert!(
                *wait >= step / 2 && *wait <= step,
                "attempt {i}: {wait:?} not within half of {step:?}"
            );
        }
        // What kube-runtime calls on `Init`: no effect.
        Backoff::reset(&mut b);
        assert!(b.next().unwrap() >= MAX_DELAY / 2);
        b.progressed();
        assert!(b.next().unwrap() <= FIRST_DELAY);
    }

    #[test]
    fn a_failure_spell_is_logged_once_per_error() {
        let mut log = FailureLog::default();
        log.failed("w", &"403 Forbidden");
        assert_eq!(log.failing.as_deref(), Some("403 Forbidden"));
        log.failed("w", &"403 Forbidden");
        log.failed("w", &"connection refused");
        assert_eq!(log.failing.as_deref(), Some("connection refused"));
        log.progressed("w");
        assert_eq!(log.failing, None);
    }
}
