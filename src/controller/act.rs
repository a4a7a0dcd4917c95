//! Step 3 of a pass: send the planned patches, a bounded number at a time, and say how each
//! went. What a decision decided (action, reason, values) is never edited here: its operations
//! go to the API server and the outcome travels beside the rest.

use std::collections::BTreeMap;

use futures::StreamExt;
use kube::Client;
use kube::api::{Api, DynamicObject, Patch, PostParams};
use kube::core::PartialObjectMeta;
use tokio::sync::watch;

use crate::api_client;
use crate::machine_kind::MachineKind;
use crate::plan::Decision;
use crate::plan::infrastructure::TemplateCopy;

/// How sending a decision's patch went.
#[derive(Clone, Debug, PartialEq)]
pub(super) enum Outcome {
    /// The decision writes nothing.
    NothingToSend,
    Patched,
    /// A `test` op failed or the object changed: re-plan from fresh state.
    Conflict,
    Gone,
    /// The API server refused the patched object as invalid (e.g. annotations too large):
    /// retrying the same patch cannot succeed.
    Rejected(String),
    Failed(String),
    /// Not attempted: lost leadership, paused or shutting down meanwhile.
    Withheld,
    /// Not attempted yet: its last patch failed, and its retry is not due.
    Deferred,
}

/// A decision and what became of it.
pub(super) struct Applied {
    pub decision: Decision,
    pub outcome: Outcome,
}

/// Patches machine resources of every kind, each in its namespace, and creates the
/// infrastructure templates Cluster API MachineSets move to.
pub(super) struct Patcher {
    /// Patches answered with the patched object's metadata only (`PartialObjectMetadata`): the
    /// patch applies to the whole object as usual, but nothing reads the rest of the answer,
    /// and encoding and decoding a whole MachineSet per patch costs both sides CPU.
    apis: BTreeMap<MachineKind, Api<PartialObjectMeta<DynamicObject>>>,
    templates: Api<DynamicObject>,
    /// True while a wave of patches is in flight.
    patching: watch::Sender<bool>,
}

impl Patcher {
    /// Whether a wave of patches is in flight, for writers that should wait for it.
    pub fn patching(&self) -> watch::Receiver<bool> {
        self.patching.subscribe()
    }

    pub fn new(client: &Client, machine_api: &str, cluster_api: &str) -> Self {
        let apis = MachineKind::ALL
            .into_iter()
            .map(|kind| {
                let namespace = if kind.is_cluster_api() {
                    cluster_api
                } else {
                    machine_api
                };
                let api = Api::namespaced_with(client.clone(), namespace, &kind.api_resource());
                (kind, api)
            })
            .collect();
        let templates = crate::plan::infrastructure::api_resource();
        Patcher {
            apis,
            templates: Api::namespaced_with(client.clone(), cluster_api, &templates),
            patching: watch::Sender::new(false),
        }
    }

    /// Sends what `decision` writes, taking its operations (and template) out of it: they go to
    /// the API server, and only the outcome comes back. At 10,000 MachineSets, keeping every
    /// patch until the wave ends is tens of megabytes of peak memory.
    async fn send(&self, decision: &mut Decision) -> Outcome {
        let ops = std::mem::take(&mut decision.patch);
        if let Some(copy) = decision.infrastructure_template.take()
            && let Err(outcome) = self.create_template(&copy).await
        {
            return outcome;
        }
        let patch = Patch::Json::<()>(json_patch::Patch(ops));
        let api = &self.apis[&decision.kind];
        let params = api_client::patch_params();
        let sent = api.patch(&decision.name, &params, &patch);
        match api_client::bounded(sent).await {
            Ok(_) => Outcome::Patched,
            Err(kube::Error::Api(status)) => classify(&status),
            Err(e) => Outcome::Failed(e.to_string()),
        }
    }
}

impl Patcher {
    /// Creates the template a patch will point at. Its name is derived from its content, so
    /// one that exists already (from an earlier pass whose patch failed, or another replica)
    /// is ours to reuse when its spec is the same, and a conflict otherwise.
    async fn create_template(&self, copy: &TemplateCopy) -> Result<(), Outcome> {
        let object: DynamicObject = serde_json::from_value(copy.object.clone())
            .map_err(|e| Outcome::Failed(format!("cannot build {}: {e}", copy.to)))?;
        let params = PostParams::default();
        let created = self.templates.create(&params, &object);
        let error = match api_client::bounded(created).await {
            Ok(_) => return Ok(()),
            Err(kube::Error::Api(status)) if status.code == 409 => None,
            Err(kube::Error::Api(status)) => Some(format!(
                "cannot create {} {}: {} ({})",
                copy.kind, copy.to, status.message, status.code
            )),
            Err(e) => Some(format!("cannot create {} {}: {e}", copy.kind, copy.to)),
        };
        if let Some(error) = error {
            return Err(Outcome::Failed(error));
        }
        let existing = match api_client::bounded(self.templates.get(&copy.to)).await {
            Ok(existing) => existing,
            Err(e) => return Err(Outcome::Failed(format!("cannot read {}: {e}", copy.to))),
        };
        // The API server may have defaulted other fields: the image is what must agree.
        let image = |v: &serde_json::Value| v.pointer("/spec/template/spec/ami").cloned();
        if image(&existing.data) == image(&copy.object) {
            return Ok(());
        }
        Err(Outcome::Rejected(format!(
            "{} {} exists with another image than the copy this controller would create; \
             rename or delete it",
            copy.kind, copy.to
        )))
    }
}

/// What an error status of a JSON Patch means. A failed `test` op and an invalid result are
/// both 422 Invalid; only the latter names the object and its offending fields (`details`):
/// the API server reports a failed test without them.
fn classify(status: &kube::core::Status) -> Outcome {
    let details = status.details.as_ref();
    let names_causes = details.is_some_and(|d| !d.name.is_empty() || !d.causes.is_empty());
    match status.code {
        409 => Outcome::Conflict,
        422 if !names_causes => Outcome::Conflict,
        422 => Outcome::Rejected(status.message.clone()),
        404 => Outcome::Gone,
        _ => Outcome::Failed(format!("{} ({})", status.message, status.code)),
    }
}

/// Sends every non-empty patch, at most `concurrency` at a time, and says how each went, in the
/// order of `decisions`. `may_write` is asked before each patch, so that a pause or a lost lease
/// stops the rest of a long rollout at once. The decisions stay where they are (each loses its
/// operations as they are sent): at 10,000 MachineSets, moving them into a vector of results
/// held a second copy of the wave's decisions at its peak.
pub(super) async fn act(
    patcher: &Patcher,
    decisions: &mut [Decision],
    concurrency: usize,
    may_write: impl Fn() -> bool,
    deferred: impl Fn(&Decision) -> bool,
) -> Vec<Outcome> {
    let (may_write, deferred) = (&may_write, &deferred);
    let wave = decisions.iter().any(|d| !d.patch.is_empty());
    // Other writers (the Event sender) wait while a wave of patches is in flight.
    if wave {
        patcher.patching.send_replace(true);
    }
    let mut outcomes = vec![Outcome::NothingToSend; decisions.len()];
    let mut sent = futures::stream::iter(decisions.iter_mut().enumerate())
        .filter(|(_, decision)| std::future::ready(!decision.patch.is_empty()))
        .map(|(i, decision)| async move {
            let outcome = if deferred(decision) {
                Outcome::Deferred
            } else if !may_write() {
                Outcome::Withheld
            } else {
                patcher.send(decision).await
            };
            (i, outcome)
        })
        .buffer_unordered(concurrency.max(1));
    while let Some((i, outcome)) = sent.next().await {
        outcomes[i] = outcome;
    }
    if wave {
        patcher.patching.send_replace(false);
    }
    outcomes
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A status as the API server sends it (bodies recorded from kube-apiserver 1.34).
    fn status(json: &str) -> kube::core::Status {
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn a_failed_test_op_is_a_conflict_and_an_invalid_object_is_a_rejection() {
        let failed_test = status(
            r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure",
            "message":"the server rejected our request due to an error in our request",
            "reason":"Invalid","details":{},"code":422}"#,
        );
        assert_eq!(classify(&failed_test), Outcome::Conflict);
        let invalid = status(
            r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure",
            "message":"MachineSet \"w\" is invalid: metadata.annotations: Too long: may not be more than 262144 bytes",
            "reason":"Invalid","details":{"name":"w","kind":"MachineSet","causes":[{"reason":"FieldValueTooLong",
            "message":"Too long: may not be more than 262144 bytes","field":"metadata.annotations"}]},"code":422}"#,
        );
        assert!(matches!(classify(&invalid), Outcome::Rejected(m) if m.contains("Too long")));
        let precondition =
            status(r#"{"status":"Failure","message":"conflict","reason":"Conflict","code":409}"#);
        assert_eq!(classify(&precondition), Outcome::Conflict);
        let forbidden =
            status(r#"{"status":"Failure","message":"forbidden","reason":"Forbidden","code":403}"#);
        assert!(matches!(classify(&forbidden), Outcome::Failed(m) if m.contains("403")));
    }
}
