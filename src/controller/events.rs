//! Kubernetes Events on the machine resources: one per patch, one per new error and one per
//! stub secret that newly holds back an update.
//!
//! Events are sent by a task of their own, with its own bound on requests in flight, so that
//! they never hold up a rollout or the status that reports it: a pass queues them and goes on.
//! The task also waits while a wave of patches is in flight, and until its pass has written the
//! status that reports it, so that Events (a thousand from the last rollout) never compete with
//! a rollout or its closing status write for the API server,
//! and it spends a fleet-wide budget: a rollout of thousands still gets one Event per
//! MachineSet, spread out instead of sent at once.
//!
//! Not kube-runtime's `events::Recorder` (kube-runtime 5, `events.rs`, `Recorder::publish` and
//! `generate_event`), for three things it cannot do: it names an Event `<object>.<time>` uncut,
//! which the API server refuses for object names over about 236 characters (a MachineSet's may
//! have 253); it folds an Event with the reason of one sent about the same object in the last
//! six minutes into a series that keeps the first note, so a second update or a new error
//! message would not be told; and it sends each Event at once, with no bound on requests in
//! flight and no wait for the wave of patches. Its naming (`<object>.<time in hex
//! nanoseconds>`) and the `default` namespace for cluster-scoped objects are kept.

use std::time::Duration;

use futures::StreamExt;
use jiff::Timestamp;
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::Client;
use kube::api::Api;
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;
use tracing::warn;

use crate::api::ObjectMeta;
use crate::api_client;
use crate::metrics::Metrics;
use crate::plan::Decision;

const REPORTING_CONTROLLER: &str = "boot-image-controller";
/// Event notes are limited to 1 kB by the API.
const NOTE_LIMIT: usize = 1000;
/// Events queued beyond this are dropped (and counted as failed writes): a fleet-wide failure
/// must not grow the queue without bound while the API server is slow.
const QUEUE_LIMIT: usize = 10_000;
/// Events sent at once after a quiet spell, then [`EVENT_RATE`] a second. client-go's event
/// correlator limits each object on its own (`defaultSpamBurst` 25, `defaultSpamQPS` one per
/// five minutes, k8s.io/client-go tools/record/events_cache.go); we send at most two per object
/// per change, so the budget that matters is the fleet's.
const EVENT_BURST: f64 = 100.0;
const EVENT_RATE: f64 = 20.0;

/// What an Event says besides its note, which is the decision's message.
#[derive(Clone, Copy)]
pub(super) struct Notice {
    pub type_: &'static str,
    pub reason: &'static str,
    pub action: &'static str,
}

/// Queues Events for the sending task, as one reporting instance.
pub(super) struct EventPublisher {
    queue: mpsc::Sender<Queued>,
    metrics: Metrics,
}

/// An Event as it waits in the queue: what it says, built into an [`Event`] only when it is
/// sent. A rollout's Events wait for minutes (the fleet's budget, 20 a second), and whole
/// `Event`s would hold megabytes meanwhile (docs/performance.md).
struct Queued {
    at: Timestamp,
    notice: Notice,
    note: String,
    /// The object; no namespace: cluster-scoped.
    regarding: ObjectReference,
}

impl EventPublisher {
    /// Starts the sending task, which sends at most `concurrency` Events at a time, none while
    /// `patching` says a wave of patches is in flight or not yet reported, and ends once the
    /// publisher is dropped and the queue is empty.
    pub fn start(
        client: Client,
        instance: String,
        metrics: Metrics,
        concurrency: usize,
        patching: watch::Receiver<bool>,
    ) -> Self {
        let (queue, pending) = mpsc::channel(QUEUE_LIMIT);
        let sender = send_all(
            client,
            instance,
            pending,
            metrics.clone(),
            concurrency.max(1),
            patching,
        );
        tokio::spawn(sender);
        EventPublisher { queue, metrics }
    }

    /// Queues an Event about `decision`'s object, an Event of its own (not part of a series).
    pub fn publish(&self, decision: &Decision, notice: &Notice) {
        let queued = Queued {
            at: Timestamp::now(),
            notice: *notice,
            note: truncated(&decision.message),
            regarding: ObjectReference {
                api_version: Some(decision.kind.api_version().into()),
                kind: Some(decision.kind.kind().into()),
                name: Some(decision.name.clone()),
                namespace: Some(decision.namespace.clone()),
                uid: decision.uid.clone(),
                ..ObjectReference::default()
            },
        };
        if !self.queue(queued) {
            warn!(name = %decision.name, reason = notice.reason, "Event queue full: dropped an Event");
        }
    }

    /// Queues an Event about the (cluster-scoped) MachineConfiguration. Events about
    /// cluster-scoped objects live in `default`, as kubectl and the API server's own do.
    pub fn publish_about_configuration(&self, mc: &ObjectMeta, notice: &Notice, note: &str) {
        self.queue(Queued {
            at: Timestamp::now(),
            notice: *notice,
            note: truncated(note),
            regarding: ObjectReference {
                api_version: Some("operator.openshift.io/v1".into()),
                kind: Some("MachineConfiguration".into()),
                name: mc.name.clone(),
                uid: mc.uid.clone(),
                ..ObjectReference::default()
            },
        });
    }

    /// Whether `queued` found room; a full queue counts a failed write.
    fn queue(&self, queued: Queued) -> bool {
        let room = self.queue.try_send(queued).is_ok();
        if !room {
            self.metrics
                .write_failures
                .with_label_values(&["Event"])
                .inc();
        }
        room
    }
}

/// Event notes are limited by the API; a longer message is cut at a character boundary.
fn truncated(note: &str) -> String {
    note.chars().take(NOTE_LIMIT).collect()
}

/// The longest object name the API server accepts, which an Event's name must fit in too.
const MAX_NAME: usize = 253;

/// `<object>.<time in hex nanoseconds>`, as client-go's recorder names Events. A name near the
/// limit (a MachineSet's may take all 253 characters) is cut and a hash of the whole name
/// added: without it the API server refused every Event of names over about 236 characters,
/// and two long names sharing a beginning must not share Events.
fn event_name(object: &str, at: Timestamp) -> String {
    let time = format!("{:x}", at.as_nanosecond());
    if object.len() + 1 + time.len() <= MAX_NAME {
        return format!("{object}.{time}");
    }
    let digest = ring::digest::digest(&ring::digest::SHA256, object.as_bytes());
    let hash: String = (digest.as_ref()[..8].iter())
        .map(|b| format!("{b:02x}"))
        .collect();
    let room = MAX_NAME - time.len() - hash.len() - 2;
    let mut end = room.min(object.len());
    while !object.is_char_boundary(end) {
        end -= 1;
    }
    // Each part of a DNS subdomain starts and ends with a letter or digit.
    let cut = object[..end].trim_end_matches(['.', '-']);
    format!("{cut}-{hash}.{time}")
}

impl Queued {
    /// The Event to create, and the namespace it goes to.
    fn event(self, instance: &str) -> Event {
        let namespace = (self.regarding.namespace.clone()).unwrap_or_else(|| "default".into());
        let name = self.regarding.name.as_deref().unwrap_or_default();
        Event {
            metadata: ObjectMeta {
                name: Some(event_name(name, self.at)),
                namespace: Some(namespace),
                ..ObjectMeta::default()
            },
            event_time: Some(MicroTime(self.at)),
            type_: Some(self.notice.type_.to_string()),
            reason: Some(self.notice.reason.to_string()),
            action: Some(self.notice.action.to_string()),
            note: Some(self.note),
            regarding: Some(self.regarding),
            reporting_controller: Some(REPORTING_CONTROLLER.to_string()),
            reporting_instance: Some(instance.to_string()),
            ..Event::default()
        }
    }
}

async fn send_all(
    client: Client,
    instance: String,
    mut pending: mpsc::Receiver<Queued>,
    metrics: Metrics,
    concurrency: usize,
    patching: watch::Receiver<bool>,
) {
    let mut budget = Budget::new(Instant::now());
    futures::stream::poll_fn(move |cx| pending.poll_recv(cx))
        .then(move |event| {
            let wait = budget.take(Instant::now());
            async move {
                tokio::time::sleep(wait).await;
                event
            }
        })
        .for_each_concurrent(concurrency, |queued| {
            let (client, metrics) = (client.clone(), metrics.clone());
            let mut patching = patching.clone();
            let event = queued.event(&instance);
            async move {
                // Patches first. An error means the controller is gone: send what is left.
                let _ = patching.wait_for(|busy| !busy).await;
                let namespace = event.metadata.namespace.clone().unwrap_or_default();
                let api: Api<Event> = Api::namespaced(client, &namespace);
                let params = api_client::post_params();
                match api_client::bounded(api.create(&params, &event)).await {
                    Ok(_) => metrics.writes.with_label_values(&["Event"]).inc(),
                    Err(e) => {
                        warn!(error = %e, "could not publish an Event");
                        metrics.write_failures.with_label_values(&["Event"]).inc();
                    }
                }
            }
        })
        .await;
}

/// A token bucket: [`EVENT_BURST`] tokens, refilled at [`EVENT_RATE`] a second. Tokens taken
/// beyond those left are a debt that the refill pays off, in the order they were taken.
struct Budget {
    tokens: f64,
    at: Instant,
}

impl Budget {
    fn new(now: Instant) -> Self {
        Budget {
            tokens: EVENT_BURST,
            at: now,
        }
    }

    /// Takes a token at `now`: how long its Event must wait for it.
    fn take(&mut self, now: Instant) -> Duration {
        let refill = now.saturating_duration_since(self.at).as_secs_f64() * EVENT_RATE;
        self.tokens = (self.tokens + refill).min(EVENT_BURST) - 1.0;
        self.at = now;
        Duration::from_secs_f64((-self.tokens).max(0.0) / EVENT_RATE)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_names_fit_the_api_whatever_the_object_name() {
        let at = Timestamp::from_second(1_800_000_000).unwrap();
        assert_eq!(
            event_name("worker-a", at),
            format!("worker-a.{:x}", at.as_nanosecond())
        );
        let long = format!("{}.{}", "a".repeat(200), "b".repeat(52));
        let other = format!("{}.{}", "a".repeat(200), "c".repeat(52));
        let (named, other_named) = (event_name(&long, at), event_name(&other, at));
        assert!(named.len() <= MAX_NAME, "{} characters", named.len());
        assert_ne!(
            named, other_named,
            "long names sharing a beginning share Events"
        );
        assert!(named.starts_with(&"a".repeat(200)), "{named}");
        // Cut before a dot: no empty or dash-ended part.
        let dotted = format!("{}.{}", "a".repeat(218), "b".repeat(34));
        let named = event_name(&dotted, at);
        assert!(!named.contains(".-") && !named.contains("-."), "{named}");
    }

    #[test]
    fn a_fleet_of_events_is_spread_out_after_the_burst() {
        let start = Instant::now();
        let mut budget = Budget::new(start);
        let waits: Vec<Duration> = (0..110).map(|_| budget.take(start)).collect();
        assert!(waits[..100].iter().all(|w| w.is_zero()), "{waits:?}");
        // The rest wait their turn, one refill period apart.
        let period = Duration::from_secs_f64(1.0 / EVENT_RATE);
        assert_eq!(waits[100], period);
        assert_eq!(waits[109], period * 10);
        // A quiet spell refills the budget, never beyond the burst.
        let later = start + Duration::from_secs(3600);
        let after_quiet: Vec<Duration> = (0..101).map(|_| budget.take(later)).collect();
        assert!(after_quiet[..100].iter().all(|w| w.is_zero()));
        assert_eq!(after_quiet[100], period);
    }
}
