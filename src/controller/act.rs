//! Step 3 of a pass: send the planned patches, a bounded number at a time, and say how each
//! went. What a decision decided (action, reason, values) is never edited here: its operations
//! go to the API server and the outcome travels beside the rest.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::task::Poll;

use futures::StreamExt;
use futures::future::BoxFuture;
use futures::stream::FuturesUnordered;
use kube::Client;
use kube::Resource as _;
use kube::api::{Api, DynamicObject, PostParams};
use tokio::sync::watch;

use super::decide::Writing;
use crate::api::Secret;
use crate::api_client;
use crate::machine_kind::MachineKind;
use crate::plan::infrastructure::{self, RecordedCopy, TemplateCopy};
use crate::plan::stub::StubUpgrade;
use crate::plan::{Decision, Patch, Planner};

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
    pub decision: Arc<Decision>,
    pub outcome: Outcome,
}

/// Patches machine resources of every kind, each in its namespace, and creates the
/// infrastructure templates Cluster API MachineSets move to.
pub(super) struct Patcher {
    /// Where the objects of each kind are patched. Patches ask to be answered with the patched
    /// object's metadata only (`PartialObjectMetadata`): the patch applies to the whole object
    /// as usual, but encoding a whole MachineSet per answer costs the API server CPU. The
    /// answer is not decoded either (see [`Patcher::send`]).
    requests: BTreeMap<MachineKind, kube::core::Request>,
    client: Client,
    templates: Api<DynamicObject>,
    /// True from a wave's first patch until its pass has reported it: the status write that
    /// ends a rollout (Progressing=False) is on its critical path as much as the patches are.
    patching: watch::Sender<bool>,
    /// The stub secret upgrades sent, by the patch that made them: the objects that share a
    /// stub all carry its upgrade, and the first to go sends it for the others. Held while one
    /// is sent, so that the others wait for it rather than race it.
    stub_upgrades: tokio::sync::Mutex<BTreeMap<(String, String), Patch>>,
    /// The templates this controller created and the copies the machine resources record, by
    /// name and UID: what proves a template ours ([`crate::plan::infrastructure`]).
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
    /// Whether a wave of patches is in flight or not yet reported, for writers that should
    /// wait for it.
    pub fn patching(&self) -> watch::Receiver<bool> {
        self.patching.subscribe()
    }

    /// The pass has reported its wave (written its status, if that changed): the writers that
    /// waited may go.
    pub fn wave_reported(&self) {
        (self.patching).send_if_modified(|patching| std::mem::replace(patching, false));
    }

    pub fn new(client: &Client, machine_api: &str, cluster_api: &str) -> Self {
        let requests = MachineKind::ALL
            .into_iter()
            .map(|kind| {
                let namespace = if kind.is_cluster_api() {
                    cluster_api
                } else {
                    machine_api
                };
                let url = DynamicObject::url_path(&kind.api_resource(), Some(namespace));
                (kind, kube::core::Request::new(url))
            })
            .collect();
        let templates = crate::plan::infrastructure::api_resource();
        Patcher {
            requests,
            client: client.clone(),
            templates: Api::namespaced_with(client.clone(), cluster_api, &templates),
            patching: watch::Sender::new(false),
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
    /// at, if any. Everything it sends is its own: the decision it came from may grow and move
    /// in its vector while this is in flight.
    async fn send(&self, outgoing: Outgoing) -> Outcome {
        let mut created = None;
        if let Some(copy) = &outgoing.template {
            match self.create_template(copy).await {
                Ok(uid) => created = Some(uid),
                Err(outcome) => return outcome,
            }
        }
        if let Some(upgrade) = &outgoing.stub_upgrade
            && let Err(outcome) = self.upgrade_stub(upgrade).await
        {
            return outcome;
        }
        // Built and named as kube's `Api::patch` builds a metadata API's patch (kube-client
        // 5.0.0, src/api/core_methods.rs: `patch_metadata`, then the name for its tracing), with
        // the patch's own text as the body: kube-core's `Request::patch_metadata` (5.0.0,
        // src/request.rs) sets the URL, content type and `Accept` from the kind of patch, and
        // its body is the serialized operations, which the planner wrote already.
        let json_patch = kube::api::Patch::Json::<()>(json_patch::Patch(Vec::new()));
        let params = api_client::patch_params();
        let request =
            self.requests[&outgoing.kind].patch_metadata(&outgoing.name, &params, &json_patch);
        let mut request = match request {
            Ok(request) => request,
            Err(e) => return Outcome::Failed(format!("cannot build the patch: {e}")),
        };
        *request.body_mut() = match &created {
            // The patch records the copy's UID, known only now.
            Some(uid) => infrastructure::fill_created_uid(&outgoing.patch.body(), uid),
            None => outgoing.patch.body(),
        };
        request.extensions_mut().insert("patch");
        // Only success or failure is read: an error's status is decoded as before, and an
        // answer's metadata is not. Decoding it (its managedFields into trees of values, its
        // history annotation) was about 8% of the controller's CPU during a rollout (`perf`), and
        // nothing read it.
        let sent = self.client.request_text(request);
        match api_client::bounded(sent).await {
            Ok(_) => Outcome::Patched,
            Err(kube::Error::Api(status)) => classify(&status),
            Err(e) => Outcome::Failed(e.to_string()),
        }
    }
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
    /// Upgrades a spec-2 stub secret in place with its guarded patch, unless this very upgrade
    /// was sent already for another object naming the same stub. A failed `test` (the secret
    /// changed since the pass read it) is a conflict: the object is planned again from the
    /// secret as it is now.
    async fn upgrade_stub(&self, upgrade: &StubUpgrade) -> Result<(), Outcome> {
        let key = (upgrade.namespace.clone(), upgrade.name.clone());
        let mut sent = self.stub_upgrades.lock().await;
        if sent.get(&key) == Some(&upgrade.patch) {
            return Ok(());
        }
        let secrets: Api<Secret> = Api::namespaced(self.client.clone(), &upgrade.namespace);
        let patch = kube::api::Patch::Json::<()>(json_patch::Patch(upgrade.patch.ops()));
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
        if infrastructure::is_the_copy(&existing, copy, &ours)
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

/// The patches of one pass: at most `concurrency` in flight, each started as soon as its
/// decision is made and a slot is free, so that a rollout's first patch leaves while the rest
/// of the fleet is still being decided (at 1,000 MachineSets, deciding them all took 10-25 ms
/// before the first patch could go).
///
/// `may_write` is asked before each patch, so that a pause or a lost lease stops the rest of a
/// long rollout at once. The decisions stay in the pass's vector, without their operations,
/// which are built again from each object when its patch is sent: at 10,000 MachineSets,
/// moving the decisions into a vector of results held a second copy of them at the wave's peak,
/// and holding their operations until sent held 20 MB more.
pub(super) struct Wave<'p> {
    patcher: &'p Patcher,
    concurrency: usize,
    /// What became of each decision so far, by index.
    outcomes: Vec<Outcome>,
    /// Decisions with operations, by index, in the order they were decided, and their objects.
    queued: VecDeque<Writing>,
    in_flight: FuturesUnordered<BoxFuture<'p, (usize, Outcome)>>,
    /// Whether each decision wrote or writes something (its operations leave it when sent).
    writes: Vec<bool>,
    /// When the first patch started.
    first_sent: Option<tokio::time::Instant>,
    /// The templates the pass's patches point at: they count as referenced for the rest of the
    /// pass, though a started patch takes its template out of its decision.
    templates: Vec<String>,
}

impl<'p> Wave<'p> {
    pub fn new(patcher: &'p Patcher, concurrency: usize) -> Self {
        Wave {
            patcher,
            concurrency: concurrency.max(1),
            outcomes: Vec::new(),
            queued: VecDeque::new(),
            in_flight: FuturesUnordered::new(),
            writes: Vec::new(),
            first_sent: None,
            templates: Vec::new(),
        }
    }

    /// Takes in the decisions made since the last call (those past the ones it knows), and
    /// queues those `writing` names. Their operations leave them: each patch is built again
    /// from its object when it is sent (see [`super::decide::Redecide`]).
    pub fn queue(&mut self, decisions: &mut [Arc<Decision>], writing: Vec<Writing>) {
        let known = self.outcomes.len();
        for decision in decisions.iter().skip(known) {
            if let Some(copy) = &decision.infrastructure_template {
                self.templates.push(copy.to.clone());
            }
            self.writes.push(!decision.patch.is_empty());
            self.outcomes.push(Outcome::NothingToSend);
        }
        for (i, object) in writing {
            // A decision with operations is new to this pass (the previous results keep none),
            // so this takes no copy.
            let decision = Arc::make_mut(&mut decisions[i]);
            decision.patch = Patch::default();
            decision.infrastructure_template = None;
            decision.stub_upgrade = None;
            self.queued.push_back((i, object));
        }
    }

    /// Whether `decisions[i]` writes something, sent or not.
    pub fn writes(&self, i: usize) -> bool {
        self.writes.get(i).copied().unwrap_or(false)
    }

    /// When the first patch started, if one has.
    pub fn first_sent(&self) -> Option<tokio::time::Instant> {
        self.first_sent
    }

    /// The templates the decisions so far point MachineSets at.
    pub fn templates(&self) -> impl Iterator<Item = &str> {
        self.templates.iter().map(String::as_str)
    }

    /// Starts queued patches into the free slots and records the outcomes that have arrived,
    /// without waiting for any.
    pub async fn progress(
        &mut self,
        decisions: &[Arc<Decision>],
        planner: &Planner<'_>,
        may_write: &dyn Fn() -> bool,
        deferred: &dyn Fn(&Decision) -> bool,
    ) {
        loop {
            self.start(decisions, planner, may_write, deferred);
            // The first poll of a new patch is what hands its request to the client.
            match futures::poll!(self.in_flight.next()) {
                Poll::Ready(Some((i, outcome))) => self.outcomes[i] = outcome,
                Poll::Ready(None) | Poll::Pending => return,
            }
        }
    }

    /// Sends the rest and says how each decision's patch went, in the order of `decisions`.
    pub async fn finish(
        mut self,
        decisions: &[Arc<Decision>],
        planner: &Planner<'_>,
        may_write: &dyn Fn() -> bool,
        deferred: &dyn Fn(&Decision) -> bool,
    ) -> Vec<Outcome> {
        loop {
            self.start(decisions, planner, may_write, deferred);
            match self.in_flight.next().await {
                Some((i, outcome)) => self.outcomes[i] = outcome,
                None if self.queued.is_empty() => break,
                None => {}
            }
        }
        self.outcomes
    }

    fn start(
        &mut self,
        decisions: &[Arc<Decision>],
        planner: &Planner<'_>,
        may_write: &dyn Fn() -> bool,
        deferred: &dyn Fn(&Decision) -> bool,
    ) {
        while self.in_flight.len() < self.concurrency
            && let Some((i, object)) = self.queued.pop_front()
        {
            let decided = &decisions[i];
            if deferred(decided) {
                self.outcomes[i] = Outcome::Deferred;
                continue;
            }
            if !may_write() {
                self.outcomes[i] = Outcome::Withheld;
                continue;
            }
            let Some(outgoing) = outgoing(decided, object.decide_to_send(planner)) else {
                self.outcomes[i] = Outcome::Failed(
                    "deciding the object again to build its patch gave another decision".into(),
                );
                continue;
            };
            self.first_sent
                .get_or_insert_with(tokio::time::Instant::now);
            // Other writers (the Event sender) wait while a wave of patches is in flight.
            self.patcher
                .patching
                .send_if_modified(|patching| !std::mem::replace(patching, true));
            let patcher = self.patcher;
            self.in_flight
                .push(Box::pin(async move { (i, patcher.send(outgoing).await) }));
        }
    }
}

/// The patch of `decided`, from `again`: the same object decided again by the same planner.
/// None if that gave another decision, which the planner, a function of the object and the
/// pass's snapshot, never does; the object is then left as it is.
fn outgoing(decided: &Decision, mut again: Decision) -> Option<Outgoing> {
    let patch = std::mem::take(&mut again.patch);
    let template = again.infrastructure_template.take();
    let stub_upgrade = again.stub_upgrade.take();
    (again == *decided && !patch.is_empty()).then(|| Outgoing {
        kind: decided.kind,
        name: decided.name.clone(),
        patch,
        template,
        stub_upgrade,
    })
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

    /// A patch built again is sent only for the decision the pass reported: never for another
    /// one, and never empty.
    #[test]
    fn a_patch_built_again_is_sent_only_for_the_decision_reported() {
        use crate::plan::Action;
        use crate::plan::patch::Path;
        use crate::reason::Reason;
        let update = |message: &str| {
            let mut d = Decision::new(
                MachineKind::MachineSet,
                "ns",
                "worker-a",
                Action::Update,
                Reason::BootImageOutdated,
                message.into(),
            );
            let path = jsonptr::Pointer::from_static("/spec/x");
            d.patch.guarded_replace(Path::At(path), "old", "new");
            d
        };
        let mut reported = update("from old to new");
        reported.patch = Patch::default();
        let sent = outgoing(&reported, update("from old to new")).expect("the same decision");
        assert_eq!(
            (sent.name.as_str(), sent.patch),
            ("worker-a", update("").patch)
        );
        assert!(outgoing(&reported, update("from old to newer")).is_none());
        let mut nothing_to_send = update("from old to new");
        nothing_to_send.patch = Patch::default();
        assert!(outgoing(&reported, nothing_to_send).is_none());
    }
}
