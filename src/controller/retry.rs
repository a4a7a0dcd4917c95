//! When to retry what failed: the doubling delay (of errors, status writes and look-ups) and
//! the pass a look-up triggers once its retry is due (neither EC2 nor vCenter sends events).

use std::time::Duration;

use tokio::sync::mpsc;

use super::watches::Trigger;

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
        let _ = wake.send(Trigger::All);
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
