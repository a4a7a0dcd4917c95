//! Kubernetes Events on the machine resources (one per patch, per new error, per stub secret
//! that newly holds back an update), queued by a pass and sent by one task from a bounded queue.
//!
//! Not kube-runtime's `events::Recorder` (kube-runtime 5, `events.rs`, `Recorder::publish` and
//! `generate_event`): it names an Event `<object>.<time>` uncut, refused for object names over
//! about 236 characters; it folds Events of one reason about one object within six minutes
//! into a series that keeps the first note (a second update or new error would not be told);
//! it has no bound on requests in flight. Its naming and `default` namespace are kept.

use futures::StreamExt;
use jiff::Timestamp;
use k8s_openapi::api::{core::v1::ObjectReference, events::v1::Event};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::{Client, api::Api};
use tokio::sync::mpsc;
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

/// What an Event says besides its note, which is the decision's message.
pub(super) struct Notice {
    pub type_: &'static str,
    pub reason: &'static str,
    pub action: &'static str,
}

/// Queues Events for the sending task, as one reporting instance.
pub(super) struct EventPublisher {
    queue: mpsc::Sender<Event>,
    instance: String,
    metrics: Metrics,
}

impl EventPublisher {
    /// Starts the sending task, which sends at most `concurrency` Events at a time and ends
    /// once the publisher is dropped and the queue is empty.
    pub fn start(client: Client, instance: String, metrics: Metrics, concurrency: usize) -> Self {
        let (queue, mut pending) = mpsc::channel(QUEUE_LIMIT);
        let pending = futures::stream::poll_fn(move |cx| pending.poll_recv(cx));
        let sent = metrics.clone();
        let send = move |event| send(client.clone(), sent.clone(), event);
        tokio::spawn(pending.for_each_concurrent(concurrency.max(1), send));
        EventPublisher {
            queue,
            instance,
            metrics,
        }
    }

    /// Queues an Event about `decision`'s object, an Event of its own (not part of a series).
    pub fn publish(&self, decision: &Decision, notice: &Notice) {
        let regarding = ObjectReference {
            api_version: Some(decision.kind.api_version().into()),
            kind: Some(decision.kind.kind().into()),
            name: Some(decision.name.clone()),
            namespace: Some(decision.namespace.clone()),
            uid: decision.uid.clone(),
            ..ObjectReference::default()
        };
        self.queue(notice, &decision.message, regarding);
    }

    /// Queues an Event about the MachineConfiguration, in `default` (cluster-scoped, as kubectl).
    pub fn publish_about_configuration(&self, mc: &ObjectMeta, notice: &Notice, note: &str) {
        let regarding = ObjectReference {
            api_version: Some("operator.openshift.io/v1".into()),
            kind: Some("MachineConfiguration".into()),
            name: mc.name.clone(),
            uid: mc.uid.clone(),
            ..ObjectReference::default()
        };
        self.queue(notice, note, regarding);
    }

    /// Queues the Event; a full queue drops it, logged and counted as a failed write.
    fn queue(&self, notice: &Notice, note: &str, regarding: ObjectReference) {
        let at = Timestamp::now();
        let name = regarding.name.clone().unwrap_or_default();
        let event = Event {
            metadata: ObjectMeta {
                name: Some(event_name(&name, at)),
                namespace: Some((regarding.namespace.clone()).unwrap_or_else(|| "default".into())),
                ..ObjectMeta::default()
            },
            event_time: Some(MicroTime(at)),
            type_: Some(notice.type_.to_string()),
            reason: Some(notice.reason.to_string()),
            action: Some(notice.action.to_string()),
            note: Some(note.chars().take(NOTE_LIMIT).collect()),
            regarding: Some(regarding),
            reporting_controller: Some(REPORTING_CONTROLLER.to_string()),
            reporting_instance: Some(self.instance.clone()),
            ..Event::default()
        };
        if self.queue.try_send(event).is_err() {
            warn!(%name, reason = notice.reason, "Event queue full: dropped an Event");
            let failures = self.metrics.write_failures.with_label_values(&["Event"]);
            failures.inc();
        }
    }
}

/// Sends one Event, counted as a write or a failed write.
async fn send(client: Client, metrics: Metrics, event: Event) {
    let namespace = event.metadata.namespace.clone().unwrap_or_default();
    let api: Api<Event> = Api::namespaced(client, &namespace);
    match api_client::bounded(api.create(&api_client::post_params(), &event)).await {
        Ok(_) => metrics.writes.with_label_values(&["Event"]).inc(),
        Err(e) => {
            warn!(error = %e, "could not publish an Event");
            metrics.write_failures.with_label_values(&["Event"]).inc();
        }
    }
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
    let hash = hex::encode(&digest.as_ref()[..8]);
    let room = MAX_NAME - time.len() - hash.len() - 2;
    let mut end = room.min(object.len());
    while !object.is_char_boundary(end) {
        end -= 1;
    }
    // Each part of a DNS subdomain starts and ends with a letter or digit.
    let cut = object[..end].trim_end_matches(['.', '-']);
    format!("{cut}-{hash}.{time}")
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
}
