//! Retrying what failed: the doubling delay (of errors, status writes and look-ups) and the
//! pass a look-up triggers once its retry is due (neither EC2 nor vCenter sends events); and
//! what the look-ups that retry in the background (EC2, vCenter) share: their state behind a
//! lock that survives a panic, and the bound on reading their credentials.

use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::mpsc;

use super::watches::Trigger;

/// Reading a credentials Secret (the machine API's, for EC2 or vCenter).
pub(super) const SECRET_TIMEOUT: Duration = Duration::from_secs(10);

/// The state behind `lock`; a panic while holding it leaves plain data behind, still usable.
pub(super) fn lock<T>(state: &Mutex<T>) -> MutexGuard<'_, T> {
    state.lock().unwrap_or_else(|e| e.into_inner())
}

/// `first`, doubled for each failure after the first, at most `max`.
pub(super) fn doubling(first: Duration, max: Duration, attempts: u32) -> Duration {
    first
        .saturating_mul(1 << attempts.saturating_sub(1).min(10))
        .min(max)
}

/// Triggers a pass over everything after `delay`.
pub(super) fn wake_after(wake: &mpsc::UnboundedSender<Trigger>, delay: Duration) {
    let wake = wake.clone();
    tokio::spawn(async move {
        tokio::time::sleep(delay).await;
        let _ = wake.send(Trigger);
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_backoff_doubles_up_to_its_maximum() {
        let (first, max) = (Duration::from_secs(15), Duration::from_secs(600));
        let delays: Vec<u64> = (1..=8).map(|n| doubling(first, max, n).as_secs()).collect();
        assert_eq!(delays, [15, 30, 60, 120, 240, 480, 600, 600]);
    }
}
