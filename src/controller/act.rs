//! Step 3 of a pass: send the planned patches, a bounded number at a time, and say how each
//! went. What a decision decided (action, reason, values) is never edited here: its operations
//! go to the API server and the outcome travels beside the rest.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use futures::StreamExt;
use kube::Client;
use kube::api::{Api, DynamicObject, PatchParams, PostParams};

use crate::api::Secret;
use crate::api_client;
use crate::machine_kind::MachineKind;
use crate::plan::TemplateCopy;
use crate::plan::cluster_api_templates::{self, RecordedCopy};
use crate::plan::stub::StubUpgrade;
use crate::plan::{Decision, Patch};

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
#[derive(Debug)]
pub(super) struct Applied {
    pub decision: Arc<Decision>,
    pub outcome: Outcome,
}

/// Patches machine resources of every kind, each in its namespace, and creates the
/// infrastructure templates Cluster API MachineSets move to.
pub(super) struct Patcher {
    /// Where the objects of each kind are patched. Patches ask to be answered with the patched
    /// object's metadata only (`PartialObjectMetadata`): the patch applies to the whole object
    /// as usual, but encoding a whole MachineSet per answer costs the API server CPU.
    apis: BTreeMap<MachineKind, Api<DynamicObject>>,
    client: Client,
    templates: Api<DynamicObject>,
    /// The stub secret upgrades sent, by the patch that made them: the objects that share a
    /// stub all carry its upgrade, and the first to go sends it for the others. Held while one
    /// is sent, so that the others wait for it rather than race it.
    stub_upgrades: tokio::sync::Mutex<BTreeMap<(String, String), Patch>>,
    /// The templates this controller created and the copies the machine resources record, by
    /// name and UID: what proves a template ours ([`crate::plan::cluster_api_templates`]).
    copies: std::sync::Mutex<OurCopies>,
}

/// The copies that are provably ours.
#[derive(Default)]
pub(super) struct OurCopies {
    /// Created by this process: proof until the patch that records one lands (or when it never
    /// does, e.g. after a conflict, for the retry that reuses it).
    created: Vec<RecordedCopy>,
    /// Recorded on the machine resources of the latest pass's snapshot.
    recorded: Vec<RecordedCopy>,
}

impl OurCopies {
    pub fn all(&self) -> Vec<RecordedCopy> {
        let mut all: Vec<RecordedCopy> =
            self.created.iter().chain(&self.recorded).cloned().collect();
        all.sort();
        all.dedup();
        all
    }
}

impl Patcher {
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
        let templates = crate::plan::cluster_api_templates::api_resource();
        Patcher {
            apis,
            client: client.clone(),
            templates: Api::namespaced_with(client.clone(), cluster_api, &templates),
            stub_upgrades: Default::default(),
            copies: Default::default(),
        }
    }

    /// The copies the machine resources of this pass record as ours; returns every copy
    /// provably ours, these and those this process created.
    pub fn recorded_copies(&self, recorded: Vec<RecordedCopy>) -> Vec<RecordedCopy> {
        let mut copies = self.copies.lock().unwrap_or_else(|e| e.into_inner());
        // Once recorded, a copy this process created needs no other proof.
        copies.created.retain(|c| !recorded.contains(c));
        copies.recorded = recorded;
        copies.all()
    }

    /// Sends one decision's operations to its object, after creating the template they point
    /// at, if any.
    async fn send(&self, outgoing: Outgoing) -> Outcome {
        let mut created = None;
        if let Some(copy) = &outgoing.template {
            match self.create_template(copy).await {
                Ok(uid) => created = Some(uid),
                Err(outcome) => return outcome,
            }
        }
        let patch = match &created {
            // The patch records the copy's UID, known only now.
            Some(uid) => cluster_api_templates::fill_created_uid(&outgoing.patch, uid),
            None => outgoing.patch,
        };
        self.patch(outgoing.kind, &outgoing.name, patch, false)
            .await
    }

    /// Sends one object's patch; with `dry_run`, the API server checks it (the `test`s,
    /// validation, admission) and stores nothing (`dryRun=All`).
    async fn patch(&self, kind: MachineKind, name: &str, patch: Patch, dry_run: bool) -> Outcome {
        let patch = kube::api::Patch::Json::<()>(patch);
        let params = PatchParams {
            dry_run,
            ..api_client::patch_params()
        };
        let sent = self.apis[&kind].patch_metadata(name, &params, &patch);
        match api_client::bounded(sent).await {
            Ok(_) => Outcome::Patched,
            Err(kube::Error::Api(status)) => classify(&status),
            Err(e) => Outcome::Failed(e.to_string()),
        }
    }
}

/// A stub secret, by namespace and name.
type StubKey = (String, String);

fn stub_key(upgrade: &StubUpgrade) -> StubKey {
    (upgrade.namespace.clone(), upgrade.name.clone())
}

/// The outcome of an object whose patch was accepted in a dry run, but another object that moves
/// with the same stub upgrade had its refused.
fn not_sent(upgrade: &StubUpgrade) -> String {
    format!(
        "not sent: the patch of another object that names stub secret {}/{} (Ignition {}) is \
         refused (see its reason), and the stub is upgraded only once every object that moves \
         with it is accepted",
        upgrade.namespace, upgrade.name, upgrade.from_version
    )
}

/// What one patch sends, taken out of its decision when it starts.
struct Outgoing {
    kind: MachineKind,
    name: String,
    patch: Patch,
    template: Option<Box<TemplateCopy>>,
    stub_upgrade: Option<Arc<StubUpgrade>>,
}

impl Patcher {
    /// Sends the stub secret upgrades `sends` carry, each before the patches of the objects that
    /// move with it and only once the API server refuses none of those patches in a dry run: a stub
    /// upgraded for a patch then refused would leave that object's image, which may read spec 2
    /// only, with a spec-3 stub (docs/how-it-decides.md, "Stub secrets"). Returns the sends that
    /// may go on, without their upgrades; the outcome of every other is set in `outcomes`. An
    /// upgrade waits, with every object that carries it, while one of them waits for its retry
    /// (`deferred`): that one keeps its image meanwhile. Upstream upgrades the stub inside
    /// `checkMachineSet` and patches the MachineSet after it, whatever becomes of that patch
    /// (`syncMAPIMachineSet`, pkg/controller/bootimage/ms_helpers.go, openshift/
    /// machine-config-operator main at 7ff337a4f).
    async fn upgrade_stubs(
        &self,
        mut sends: Vec<(usize, Outgoing)>,
        deferred: &BTreeSet<StubKey>,
        may_write: &dyn Fn() -> bool,
        outcomes: &mut [Outcome],
    ) -> Vec<(usize, Outgoing)> {
        let mut groups: BTreeMap<StubKey, Vec<usize>> = BTreeMap::new();
        for (at, (_, outgoing)) in sends.iter().enumerate() {
            if let Some(upgrade) = &outgoing.stub_upgrade {
                groups.entry(stub_key(upgrade)).or_default().push(at);
            }
        }
        let mut stopped = BTreeMap::new();
        for (stub, members) in groups {
            let Some(upgrade) = sends[members[0]].1.stub_upgrade.clone() else {
                continue;
            };
            let each = |outcome: Outcome| members.iter().map(move |&at| (at, outcome.clone()));
            if deferred.contains(&stub) {
                stopped.extend(each(Outcome::Deferred));
            } else if !may_write() {
                stopped.extend(each(Outcome::Withheld));
            } else {
                stopped.extend(self.upgrade_stub_for(&upgrade, &members, &sends).await);
            }
            for at in members {
                sends[at].1.stub_upgrade = None;
            }
        }
        let mut going = Vec::new();
        for (at, (i, outgoing)) in sends.into_iter().enumerate() {
            match stopped.remove(&at) {
                Some(outcome) => outcomes[i] = outcome,
                None => going.push((i, outgoing)),
            }
        }
        going
    }

    /// Dry-runs the patch of each of `members` (positions in `sends`), then upgrades the stub
    /// when none is refused and one at least is accepted. Returns the outcome of each member
    /// that is not to be sent: all of them when the stub is not upgraded, else those whose dry
    /// run found the object changed or gone (re-planned from fresh state, as after any
    /// conflict: a writer that keeps changing one object must not hold the others back).
    async fn upgrade_stub_for(
        &self,
        upgrade: &StubUpgrade,
        members: &[usize],
        sends: &[(usize, Outgoing)],
    ) -> BTreeMap<usize, Outcome> {
        if self.stub_upgrades.lock().await.get(&stub_key(upgrade)) == Some(&upgrade.patch) {
            return BTreeMap::new();
        }
        let mut unsent = BTreeMap::new();
        let mut refused = false;
        for &at in members {
            let outgoing = &sends[at].1;
            let (kind, name) = (outgoing.kind, &outgoing.name);
            match self.patch(kind, name, outgoing.patch.clone(), true).await {
                Outcome::Patched => {}
                outcome @ (Outcome::Conflict | Outcome::Gone) => {
                    unsent.insert(at, outcome);
                }
                outcome => {
                    refused = true;
                    unsent.insert(at, outcome);
                }
            }
        }
        let every = |outcome: Outcome| members.iter().map(move |&at| (at, outcome.clone()));
        if refused {
            let not_sent = Outcome::Failed(not_sent(upgrade));
            return every(not_sent).chain(unsent).collect();
        }
        if unsent.len() == members.len() {
            return unsent;
        }
        match self.upgrade_stub(upgrade).await {
            Ok(()) => unsent,
            Err(outcome) => every(outcome).collect(),
        }
    }

    /// Upgrades a spec-2 stub secret in place with its guarded patch (`upgrade_stub_for` sends
    /// each upgrade once). A failed `test` (the secret changed since the pass read it) is a
    /// conflict: the object is planned again from the secret as it is now.
    async fn upgrade_stub(&self, upgrade: &StubUpgrade) -> Result<(), Outcome> {
        let key = stub_key(upgrade);
        let mut sent = self.stub_upgrades.lock().await;
        let secrets: Api<Secret> = Api::namespaced(self.client.clone(), &upgrade.namespace);
        let patch = kube::api::Patch::Json::<()>(upgrade.patch.clone());
        let params = api_client::patch_params();
        match api_client::bounded(secrets.patch(&upgrade.name, &params, &patch)).await {
            Ok(_) => {
                sent.insert(key, upgrade.patch.clone());
                Ok(())
            }
            Err(kube::Error::Api(status)) => Err(match classify(&status) {
                Outcome::Failed(why) => Outcome::Failed(format!(
                    "cannot upgrade stub secret {}/{} to Ignition {}: {why}",
                    upgrade.namespace, upgrade.name, upgrade.to_version
                )),
                other => other,
            }),
            Err(e) => Err(Outcome::Failed(format!(
                "cannot upgrade stub secret {}/{}: {e}",
                upgrade.namespace, upgrade.name
            ))),
        }
    }
}

impl Patcher {
    /// Creates the template a patch will point at; returns its UID. Its name is derived from
    /// its whole spec, so one that exists already (from an earlier pass whose patch failed, or
    /// another MachineSet moved to the same copy) is reused when it is provably ours with the
    /// same spec, and refused otherwise: anyone can create a template under that name.
    async fn create_template(&self, copy: &TemplateCopy) -> Result<String, Outcome> {
        let object: DynamicObject = serde_json::from_value(copy.object.clone())
            .map_err(|e| Outcome::Failed(format!("cannot build {}: {e}", copy.to)))?;
        let params = PostParams::default();
        let created = self.templates.create(&params, &object);
        let error = match api_client::bounded(created).await {
            Ok(created) => {
                let Some(uid) = created.metadata.uid else {
                    return Err(Outcome::Failed(format!(
                        "{} was created without a UID",
                        copy.to
                    )));
                };
                let mut copies = self.copies.lock().unwrap_or_else(|e| e.into_inner());
                copies.created.push(RecordedCopy {
                    name: copy.to.clone(),
                    uid: uid.clone(),
                });
                return Ok(uid);
            }
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
        let ours = self.copies.lock().unwrap_or_else(|e| e.into_inner()).all();
        if cluster_api_templates::is_the_copy(&existing, copy, &ours)
            && let Some(uid) = existing.metadata.uid
        {
            return Ok(uid);
        }
        // Retried with backoff: the name is free again once its owner renames or deletes it.
        Err(Outcome::Failed(format!(
            "{} {} exists, and this controller cannot prove it created it with the spec of the \
             copy it would create (no MachineSet records its UID, or its spec differs); it is \
             left alone: rename or delete it",
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

impl Outgoing {
    fn take(decision: &mut Decision) -> Self {
        Outgoing {
            kind: decision.kind,
            name: decision.name.clone(),
            patch: std::mem::take(&mut decision.patch),
            template: decision.infrastructure_template.take(),
            stub_upgrade: decision.stub_upgrade.take(),
        }
    }
}

/// Sends the patches of `decisions`, at most `concurrency` at a time, and says how each
/// decision's patch went, in their order. A patch whose retry is not due yet (`deferred`) waits; `may_write` is asked before each patch, so
/// that a pause or a lost lease stops the rest of a long rollout at once. The operations leave
/// the decisions as they are sent.
pub(super) async fn act(
    patcher: &Patcher,
    decisions: &mut [Decision],
    concurrency: usize,
    may_write: &dyn Fn() -> bool,
    deferred: &dyn Fn(&Decision) -> bool,
) -> Vec<Outcome> {
    let mut outcomes = vec![Outcome::NothingToSend; decisions.len()];
    let mut sends = Vec::new();
    let mut deferred_stubs = BTreeSet::new();
    for (i, decision) in decisions.iter_mut().enumerate() {
        // Taken out either way: a decision is reported without its operations.
        let outgoing = Outgoing::take(decision);
        if outgoing.patch.0.is_empty() {
            continue;
        }
        if deferred(decision) {
            outcomes[i] = Outcome::Deferred;
            deferred_stubs.extend(outgoing.stub_upgrade.as_deref().map(stub_key));
        } else {
            sends.push((i, outgoing));
        }
    }
    let sends = (patcher)
        .upgrade_stubs(sends, &deferred_stubs, may_write, &mut outcomes)
        .await;
    let sending = futures::stream::iter(sends).map(|(i, outgoing)| async move {
        if !may_write() {
            return (i, Outcome::Withheld);
        }
        (i, patcher.send(outgoing).await)
    });
    let mut sent = sending.buffer_unordered(concurrency.max(1));
    while let Some((i, outcome)) = sent.next().await {
        outcomes[i] = outcome;
    }
    drop(sent);
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
