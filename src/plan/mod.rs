//! The planner: from a snapshot of the cluster, what must change on each machine resource, and
//! why nothing changes on the others. Pure: both the controller and the `plan` command call it,
//! and its decisions carry every operation the controller sends, so `plan -o json` is exactly
//! what `run` would patch.
//!
//! The cluster-wide gates come first ([`gates`]); then each object goes through the rules in
//! order ([`rules`]; docs/how-it-decides.md, "Gates and rules"), and the first that applies decides.

pub mod boot_evidence;
mod boot_follow;
pub mod cluster_api_templates;
mod decision;
mod gates;
pub mod history;
pub mod nodes;
pub mod other_managers;
pub(crate) mod patch;
pub mod pointer_config;
mod rules;
pub mod selection;
pub mod shared_stubs;
pub mod stub;
pub mod undo;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use jiff::{SignedDuration, Timestamp};

use crate::api::{ClusterVersion, ConfigMap, Infrastructure, MachineConfiguration, Secret};
use crate::arch::Arch;
use crate::golden_stream::GoldenConfig;
use crate::known_images::KnownImages;
use crate::machine_kind::{MachineKind, MachineObject};
use crate::platform::ImageOutcome;
use crate::reason::Reason;
pub use decision::{Action, Blocked, Decision, ObjectKey, Plan, TemplateCopy, Values, Warning};
use gates::Ready;
pub use gates::{pause_key, selections};
pub use json_patch::Patch;
use patch::Guarded;
use selection::{Origin, Selected, Selection};

/// The cluster-wide inputs of a plan, as observed at one moment.
#[derive(Clone, Debug, Default)]
pub struct ClusterSnapshot {
    pub machine_configuration: Option<MachineConfiguration>,
    pub infrastructure: Option<Infrastructure>,
    pub cluster_version: Option<ClusterVersion>,
    /// Whether the cluster serves ClusterVersions (every OpenShift cluster does). When it does,
    /// a ClusterVersion that is absent, unreadable or without status holds every write: the
    /// release and upgrade gates fail closed.
    pub cluster_version_served: bool,
    pub golden: Option<ConfigMap>,
    /// Stub secrets by (namespace, name): those the machine resources name.
    pub secrets: BTreeMap<(String, String), Secret>,
    /// Known images besides the golden ConfigMap's own: `--known-images-file` and those the
    /// controller remembers from earlier releases.
    pub known_images: KnownImages,
    /// The control-plane Nodes and the `kubernetes.io/arch` label of each: the architecture of
    /// ControlPlaneMachineSets and of MachineSets that do not name theirs.
    pub control_plane_nodes: BTreeMap<String, Option<String>>,
    /// What EC2 said about the AMIs of AWS MachineSets (their owner, product, architecture) and
    /// the marketplace AMIs that could replace them; empty when EC2 is not consulted.
    pub ec2: crate::facts::ec2::Ec2Facts,
    /// What vCenter said about the templates of vSphere MachineSets; empty (and not
    /// `consulted`) when vCenter is not asked.
    pub vcenter: crate::facts::vcenter::VcenterFacts,
    /// The infrastructure machine templates of the Cluster API namespace, which Cluster API
    /// MachineSets reference.
    pub infrastructure_templates: cluster_api_templates::Templates,
    /// The Machines and Nodes that show whether moved MachineSets' new images boot.
    pub boots: boot_evidence::Boots,
}

#[derive(Clone, Debug)]
pub struct Options {
    /// Overrides the control-plane architecture the cluster's Nodes report (`--control-plane-arch`).
    pub control_plane_arch: Option<Arch>,
    /// The clock: recorded in the history and hot-loop annotations the patches write.
    pub now: Timestamp,
    /// Patches of one object within the window, whatever their values, after which we stop.
    pub hot_loop_threshold: usize,
    pub hot_loop_window: SignedDuration,
    /// The controller's own memory of its recent patches, by object UID. The hot-loop guard
    /// reads the annotation first; this is its fallback for a writer that replaces whole
    /// objects (a PUT, a GitOps sync) and so erases that annotation with every revert.
    pub remembered_patches: HashMap<String, history::HotLoopMemory>,
    /// Plan and report, never write (`--report-only`), as when another manager is active.
    pub report_only: bool,
    /// Update Cluster API MachineDeployments too (`--update-machine-deployments`), knowing that
    /// a new template rolls every one of their machines.
    pub update_machine_deployments: bool,
    /// A Machine whose instance exists but whose Node has not joined this long after it was
    /// created fails its image (`--node-join-timeout`).
    pub node_join_limit: SignedDuration,
    /// Put back the image a move replaced when the new one fails to boot
    /// (`--revert-failed-boot-images`; the MachineConfiguration's annotation overrides it).
    pub revert_failed_boot_images: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            control_plane_arch: None,
            now: Timestamp::now(),
            hot_loop_threshold: 3,
            hot_loop_window: SignedDuration::from_hours(1),
            remembered_patches: HashMap::new(),
            report_only: false,
            update_machine_deployments: false,
            node_join_limit: SignedDuration::from_mins(20),
            revert_failed_boot_images: false,
        }
    }
}

/// How far the clocks of the controller's replicas and of the API server may differ: times
/// written by one and read against another's `now` are allowed this much (the hot-loop guard's
/// entries, a Machine's creation against the join limit).
pub const CLOCK_SKEW: SignedDuration = SignedDuration::from_mins(5);

/// A duration as people write it, to the second: `1h 5m 23s`.
pub fn friendly_duration(d: SignedDuration) -> String {
    format!("{:#}", SignedDuration::from_secs(d.as_secs()))
}

/// An object that could not be read as its kind; it becomes an error decision, never a panic.
#[derive(Clone, Debug, PartialEq)]
pub struct Malformed {
    pub namespace: String,
    pub name: String,
    pub error: String,
}

/// One machine resource of any kind as listed: the typed object, or why it could not be read as
/// its kind. The controller's pass and the `plan` command plan one list of them, whatever the
/// kinds.
#[derive(Clone, Debug)]
pub struct MachineResource {
    pub kind: MachineKind,
    pub object: Result<Arc<dyn MachineObject>, Malformed>,
}

impl MachineResource {
    /// The typed object, unless it could not be read.
    pub fn readable(&self) -> Option<&dyn MachineObject> {
        self.object.as_deref().ok()
    }
}

/// Plans every machine resource of a snapshot.
pub fn plan(snapshot: &ClusterSnapshot, machines: &[MachineResource], options: &Options) -> Plan {
    let planner = Planner::new(snapshot, options);
    let mut plan = Plan::new(planner.blocked().cloned(), planner.decide_all(machines));
    plan.selection = planner
        .selections()
        .into_iter()
        .map(|(kind, selected)| (kind.plural().to_string(), selected))
        .collect();
    plan
}

/// The planner with the global gates evaluated once; decides one object at a time.
pub struct Planner<'a> {
    pub(crate) snapshot: &'a ClusterSnapshot,
    options: &'a Options,
    state: Result<Ready, Blocked>,
    /// Each stub secret of the snapshot checked once, by namespace and name: MachineSets that
    /// share a stub share its upgrade, which is sent once.
    stub_checks: BTreeMap<(String, String), stub::StubCheck>,
    /// `options.now` as the history records it.
    now_text: String,
}

impl<'a> Planner<'a> {
    pub fn new(snapshot: &'a ClusterSnapshot, options: &'a Options) -> Self {
        let now_text = options.now.to_string();
        let stub_checks = (snapshot.secrets.iter())
            .map(|(key, secret)| {
                (
                    key.clone(),
                    stub::check(&key.0, &key.1, Some(secret), &now_text),
                )
            })
            .collect();
        Planner {
            snapshot,
            options,
            state: Ready::evaluate(snapshot, options.control_plane_arch, options.report_only),
            stub_checks,
            now_text,
        }
    }

    /// The gate that holds all writes, if any.
    pub fn blocked(&self) -> Option<&Blocked> {
        match &self.state {
            Err(blocked) => Some(blocked),
            Ok(ready) => ready.hold.as_ref(),
        }
    }

    /// The effective selection mode of each kind, once the gates let planning go ahead.
    pub fn selections(&self) -> Vec<(MachineKind, Selected)> {
        let Ok(ready) = &self.state else {
            return Vec::new();
        };
        let selected = |(kind, (selection, origin)): (&MachineKind, &(Selection, Origin))| {
            let (mode, origin) = (selection.describe(), *origin);
            (*kind, Selected { mode, origin })
        };
        ready.selections.iter().map(selected).collect()
    }

    /// The golden ConfigMap's content, once it passed its gates.
    pub fn golden(&self) -> Option<&Arc<GoldenConfig>> {
        self.state.as_ref().ok().map(|r| &r.golden)
    }

    /// The decision on every machine resource, in their order; a spec-2 stub secret that
    /// several of them name is upgraded only when all may move ([`shared_stubs`]).
    /// An object that could not be read as its kind is an error decision.
    pub fn decide_all(&self, machines: &[MachineResource]) -> Vec<Decision> {
        let decide = |machine: &MachineResource| match &machine.object {
            Ok(object) => self.decide_object(&**object),
            Err(bad) => Decision::new(
                machine.kind,
                &bad.namespace,
                &bad.name,
                Action::Error,
                Reason::MalformedObject,
                format!("cannot read the object: {}", bad.error),
            ),
        };
        let mut decisions: Vec<Decision> = machines.iter().map(decide).collect();
        let users = shared_stubs::users_of(machines.iter().filter_map(MachineResource::readable));
        shared_stubs::hold_shared_upgrades(&mut decisions, &users);
        decisions
    }

    /// The decision for one readable object.
    pub fn decide_object(&self, object: &dyn MachineObject) -> Decision {
        let view;
        let subject = if object.kind().is_cluster_api() {
            // The view of its infrastructure template the rules judge.
            let region = cluster_api_templates::region(self.snapshot.infrastructure.as_ref());
            view = cluster_api_templates::view(
                object.infrastructure_ref(),
                &self.snapshot.infrastructure_templates,
                region,
                object.data_secret_name(),
                object.template_labels(),
            );
            rules::Subject::with_template(object, &view)
        } else {
            rules::Subject::of(object)
        };
        let mut decision = match &self.state {
            Err(blocked) => subject.decision(Action::Skip, blocked.reason, blocked.message.clone()),
            Ok(ready) => self.decide_readable(&subject, ready),
        };
        decision.uid = subject.meta.uid.clone();
        decision.last_change = history::last_change(subject.meta);
        if let Ok(ready) = &self.state {
            self.follow_boot(&subject, ready, &mut decision);
        }
        // Every write is guarded by the resourceVersion the decision read: the `test`s of the
        // values a patch replaces cannot say that what chose them is unchanged, e.g. that no
        // opt-out annotation was added meanwhile (JSON Patch cannot test that a key is still
        // absent: kube-apiserver 1.34 refuses a `test` of a missing key with `null`). A
        // concurrent edit anywhere then costs one conflict and a new decision.
        if !decision.patch.is_empty()
            && let Some(rv) = &subject.meta.resource_version
        {
            decision.patch.guard_resource_version(rv);
        }
        decision
    }

    /// Whether the boot image `object` holds is one the controller recognises as a CoreOS image
    /// (what it would update or leave as current), judged by the platform rule alone: selection,
    /// opt-out and ownership do not matter here. `revert` asks it of the value it would put back,
    /// since the history it reads can be written by anyone who can edit the object.
    pub fn recognise(&self, object: &dyn MachineObject) -> Recognition {
        let ready = match &self.state {
            Ok(ready) => ready,
            Err(blocked) => return Recognition::Unknown(blocked.message.clone()),
        };
        match self.evaluate_image(&rules::Subject::of(object), ready) {
            Err(decision) => Recognition::Unknown(decision.message),
            Ok(evaluated) => match evaluated.outcome {
                ImageOutcome::UpToDate { .. } | ImageOutcome::Update { .. } => Recognition::CoreOs,
                ImageOutcome::Skip {
                    reason: Reason::CustomImage,
                    message,
                    ..
                } => Recognition::NotCoreOs(message),
                ImageOutcome::Skip { message, .. } | ImageOutcome::Error { message, .. } => {
                    Recognition::Unknown(message)
                }
            },
        }
    }
}

/// What the controller makes of a boot image ([`Planner::recognise`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Recognition {
    /// A CoreOS image: one of a golden stream's, or remembered or published as one.
    CoreOs,
    /// Not a CoreOS image the controller knows (the rule's explanation).
    NotCoreOs(String),
    /// Cannot be judged here (why): the golden stream, platform or architecture is unknown.
    Unknown(String),
}

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_boot;
#[cfg(test)]
mod tests_cluster_api;
