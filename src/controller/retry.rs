//! Retrying what failed: the doubling delay of errors, status writes and look-ups.

use std::time::Duration;

/// `first`, doubled for each failure after the first, at most `max`.
pub(super) fn doubling(first: Duration, max: Duration, attempts: u32) -> Duration {
    first
        .saturating_mul(1 << attempts.saturating_sub(1).min(10))
        .min(max)
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
