//! Kubernetes Events on the machine resources: one per patch and one per new error.

use jiff::Timestamp;
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::Client;
use kube::api::Api;

use crate::api::ObjectMeta;
use crate::api_client;
use crate::plan::Decision;

const REPORTING_CONTROLLER: &str = "boot-image-controller";
/// Event notes are limited to 1 kB by the API.
const NOTE_LIMIT: usize = 1000;

/// What an Event says besides its note, which is the decision's message.
pub(super) struct Notice {
    pub type_: &'static str,
    pub reason: &'static str,
    pub action: &'static str,
}

/// Publishes Events as one reporting instance.
pub(super) struct EventPublisher {
    client: Client,
    instance: String,
}

impl EventPublisher {
    pub fn new(client: Client, instance: String) -> Self {
        EventPublisher { client, instance }
    }

    /// Records an Event about `decision`'s object. Each gets its own Event: kube-runtime's
    /// recorder folds events with the same reason into a series and would keep only the first
    /// note.
    pub async fn publish(&self, decision: &Decision, notice: &Notice) -> Result<(), kube::Error> {
        let now = Timestamp::now();
        let event = Event {
            metadata: ObjectMeta {
                name: Some(format!("{}.{:x}", decision.name, now.as_nanosecond())),
                namespace: Some(decision.namespace.clone()),
                ..ObjectMeta::default()
            },
            event_time: Some(MicroTime(now)),
            type_: Some(notice.type_.to_string()),
            reason: Some(notice.reason.to_string()),
            action: Some(notice.action.to_string()),
            note: Some(decision.message.chars().take(NOTE_LIMIT).collect()),
            regarding: Some(regarding(decision)),
            reporting_controller: Some(REPORTING_CONTROLLER.to_string()),
            reporting_instance: Some(self.instance.clone()),
            ..Event::default()
        };
        let api: Api<Event> = Api::namespaced(self.client.clone(), &decision.namespace);
        api.create(&api_client::post_params(), &event)
            .await
            .map(|_| ())
    }
}

fn regarding(decision: &Decision) -> ObjectReference {
    ObjectReference {
        api_version: Some(decision.kind.api_version().to_string()),
        kind: Some(decision.kind.kind().to_string()),
        name: Some(decision.name.clone()),
        namespace: Some(decision.namespace.clone()),
        uid: decision.uid.clone(),
        ..Default::default()
    }
}
