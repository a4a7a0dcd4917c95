//! Step 3 of a pass: send the planned patches, a bounded number at a time, and say how each
//! went. Decisions are never edited here; the outcome travels beside them.

use std::collections::BTreeMap;

use futures::StreamExt;
use kube::Client;
use kube::api::{Api, DynamicObject, Patch};

use crate::api_client;
use crate::machine_kind::MachineKind;
use crate::plan::Decision;

/// How sending a decision's patch went.
#[derive(Clone, Debug, PartialEq)]
pub(super) enum Outcome {
    /// The decision writes nothing.
    NothingToSend,
    Patched,
    /// A `test` op failed or the object changed: re-plan from fresh state.
    Conflict,
    Gone,
    Failed(String),
    /// Not attempted: lost leadership, paused or shutting down meanwhile.
    Withheld,
}

/// A decision and what became of it.
pub(super) struct Applied {
    pub decision: Decision,
    pub outcome: Outcome,
}

/// Patches machine resources of every kind in the machine-API namespace.
pub(super) struct Patcher {
    apis: BTreeMap<MachineKind, Api<DynamicObject>>,
}

impl Patcher {
    pub fn new(client: &Client, namespace: &str) -> Self {
        let apis = MachineKind::ALL
            .into_iter()
            .map(|kind| {
                let api = Api::namespaced_with(client.clone(), namespace, &kind.api_resource());
                (kind, api)
            })
            .collect();
        Patcher { apis }
    }

    async fn send(&self, decision: &Decision) -> Outcome {
        let patch = Patch::Json::<()>(json_patch::Patch(decision.patch.clone()));
        let api = &self.apis[&decision.kind];
        match api
            .patch(&decision.name, &api_client::patch_params(), &patch)
            .await
        {
            Ok(_) => Outcome::Patched,
            // 422: a `test` op failed; 409: a resourceVersion precondition failed.
            Err(kube::Error::Api(e)) if e.code == 422 || e.code == 409 => Outcome::Conflict,
            Err(kube::Error::Api(e)) if e.code == 404 => Outcome::Gone,
            Err(e) => Outcome::Failed(e.to_string()),
        }
    }
}

/// Sends every non-empty patch, at most `concurrency` at a time. `may_write` is asked before
/// each patch, so that a pause or a lost lease stops the rest of a long rollout at once.
pub(super) async fn act(
    patcher: &Patcher,
    decisions: Vec<Decision>,
    concurrency: usize,
    may_write: impl Fn() -> bool,
) -> Vec<Applied> {
    let may_write = &may_write;
    futures::stream::iter(decisions)
        .map(|decision| async move {
            let outcome = if decision.patch.is_empty() {
                Outcome::NothingToSend
            } else if !may_write() {
                Outcome::Withheld
            } else {
                patcher.send(&decision).await
            };
            Applied { decision, outcome }
        })
        .buffer_unordered(concurrency.max(1))
        .collect()
        .await
}
