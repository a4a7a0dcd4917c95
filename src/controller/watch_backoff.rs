//! How watches wait after a failure, and how loudly they say so.
//!
//! kube-runtime's default backoff (client-go's reflector parameters: 0.8 s doubling to 30 s,
//! with jitter, forgotten after two quiet minutes) is reset by its stream on every `Ok` item,
//! and a watcher yields `Init` before each list attempt: with the API server down or a 403, a
//! watch whose list fails would retry at the first step for ever (kube-runtime 5,
//! `utils/stream_backoff.rs` `StreamBackoff::poll_next`, `watcher.rs` `step_trampolined`). So the
//! backoff goes after the reflector, which has used `Init` and the listed objects, and sees
//! only progress (a whole list, an object event) and errors.
//!
//! Every watch decodes its objects one by one ([`Lenient`]): an object that cannot be read is
//! reported here, alone, each time it is read, and the watch goes on without it.

use futures::{Stream, StreamExt, future};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{Error, Event};
use tracing::{debug, info, warn};

use super::lenient::Lenient;

/// `watch` (a reflector's stream) with kube-runtime's default backoff after each error, each
/// failure spell logged once: a warning when it starts, an info when the watch makes progress.
/// Yields errors and progress only (`InitDone`, `Apply`, `Delete`).
pub fn retried<K: Send + Sync>(
    name: impl Into<String>,
    watch: impl Stream<Item = Result<Event<Lenient<K>>, Error>> + Send,
) -> impl Stream<Item = Result<Event<Lenient<K>>, Error>> + Send {
    let (name, mut failing) = (name.into(), false);
    let unreadable_in = name.clone();
    watch
        .inspect(move |event| {
            if let Ok(Event::Apply(object) | Event::InitApply(object)) = event
                && let Err(unreadable) = object.object()
            {
                let meta = &unreadable.metadata;
                warn!(
                    watch = unreadable_in,
                    namespace = meta.namespace.as_deref().unwrap_or_default(),
                    name = meta.name.as_deref().unwrap_or_default(),
                    error = unreadable.malformed.error,
                    "an object cannot be read; it alone is left out"
                );
            }
        })
        .filter(|event| {
            let progress = !matches!(event, Ok(Event::Init | Event::InitApply(_)));
            future::ready(progress)
        })
        .default_backoff()
        .inspect(move |event| match event {
            Err(error) if failing => debug!(watch = name, %error, "watch still failing"),
            Err(error) => {
                warn!(watch = name, %error, "watch failed; retrying with backoff");
                failing = true;
            }
            Ok(_) if failing => {
                info!(watch = name, "watch recovered");
                failing = false;
            }
            Ok(_) => {}
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;
    use tokio::time::Instant;

    /// Every attempt of a watch whose list fails starts with `Init`, which must not reset the
    /// backoff: by the fifth failure in a row the wait is 12.8 s or more.
    #[tokio::test(start_paused = true)]
    async fn failed_lists_back_off_though_each_attempt_starts_with_init() {
        let attempts = futures::stream::iter((0..6).flat_map(|_| {
            [
                Ok(Event::<Lenient<()>>::Init),
                Err(Error::NoResourceVersion),
            ]
        }));
        let started = Instant::now();
        let failures: Vec<Duration> = retried("test", attempts)
            .map(|event| {
                assert!(event.is_err(), "only the errors are yielded");
                started.elapsed()
            })
            .collect()
            .await;
        let waits: Vec<Duration> = failures.windows(2).map(|w| w[1] - w[0]).collect();
        assert_eq!(waits.len(), 5);
        assert!(waits[4] >= Duration::from_millis(12_800), "{waits:?}");
    }

    /// A listed state is progress: the next failure waits the first step again.
    #[tokio::test(start_paused = true)]
    async fn progress_resets_the_backoff() {
        let failure = || Err(Error::NoResourceVersion);
        let mut events: Vec<Result<Event<Lenient<()>>, Error>> =
            (0..5).map(|_| failure()).collect();
        events.extend([Ok(Event::InitDone), failure(), failure()]);
        let started = Instant::now();
        let at: Vec<Duration> = retried("test", futures::stream::iter(events))
            .map(|_| started.elapsed())
            .collect()
            .await;
        let last_wait = at[7] - at[6];
        assert!(last_wait <= Duration::from_millis(1600), "{at:?}");
    }
}
