//! What the planner decided about one machine resource, and the plan made of those decisions.

use std::collections::BTreeMap;
use std::sync::Arc;

use json_patch::Patch;
use serde::Serialize;
use serde_json::Value;

use super::boot_evidence::{BootEvidence, BootState};
use super::history::{self, HistoryEntry};
use super::selection::Selected;
use super::stub::StubUpgrade;
use crate::facts::Lookup;
use crate::machine_kind::MachineKind;
use crate::names::BOOT_FAILURE_HOLD_ANNOTATION;
use crate::platform::display_image;
use crate::reason::Reason;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub enum Action {
    Update,
    UpToDate,
    Skip,
    Error,
}

impl Action {
    pub const ALL: [Action; 4] = [
        Action::Update,
        Action::UpToDate,
        Action::Skip,
        Action::Error,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Action::Update => "Update",
            Action::UpToDate => "UpToDate",
            Action::Skip => "Skip",
            Action::Error => "Error",
        }
    }
}

/// Which object a decision is about; every machine resource lives in the machine-API namespace.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ObjectKey {
    pub kind: MachineKind,
    pub name: String,
}

/// Why nothing is written at all: the first cluster-wide gate that does not pass.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Blocked {
    pub reason: Reason,
    pub message: String,
}

/// A compared value: what the object has, and what we write (or would have written).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Values<T> {
    pub current: Option<T>,
    pub target: Option<T>,
}

impl<T: Clone> Values<T> {
    /// The change as the history records it; `None` when the value does not change.
    pub(super) fn change(&self) -> Option<history::Change<T>> {
        let (Some(from), Some(to)) = (&self.current, &self.target) else {
            return None;
        };
        Some(history::Change {
            from: from.clone(),
            to: to.clone(),
        })
    }

    /// Makes the target current.
    fn apply(&mut self) {
        if let Some(to) = self.target.take() {
            self.current = Some(to);
        }
    }
}

/// The template an update creates, and the names the MachineSet moves between.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TemplateCopy {
    pub kind: String,
    pub from: String,
    pub to: String,
    /// The object created, as sent.
    pub object: Value,
}

/// The decision for one machine resource.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Decision {
    /// Implied by the list a decision is in; kept for the controller.
    #[serde(skip)]
    pub kind: MachineKind,
    pub namespace: String,
    pub name: String,
    /// The object's uid, so that Events name this very object.
    #[serde(skip)]
    pub uid: Option<String>,
    pub action: Action,
    pub reason: Reason,
    pub message: String,
    pub boot_image: Values<Value>,
    /// The RHCOS release each boot image boots, where the image itself says so (a marketplace
    /// AMI): the skew status records it.
    #[serde(skip)]
    pub rhcos_release: Values<String>,
    pub user_data_secret: Values<String>,
    /// Every RFC 6902 operation the controller sends for this object, bookkeeping included: a
    /// `test` then a `replace` for each changed value, then the history and hot-loop
    /// annotations. Empty when nothing is written.
    pub patch: Patch,
    /// For a Cluster API MachineSet: the infrastructure template created before `patch` is
    /// sent, which `patch` points the MachineSet at.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub infrastructure_template: Option<Box<TemplateCopy>>,
    /// The in-place upgrade of a spec-2 stub secret, sent before `patch` (whose new image
    /// needs it). Shared by the decisions of every object that names the same stub.
    #[serde(rename = "stubSecretUpgrade", skip_serializing_if = "Option::is_none")]
    pub stub_upgrade: Option<Arc<StubUpgrade>>,
    /// The newest change this controller recorded on the object, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_change: Option<HistoryEntry>,
    /// Of an Update: the change its patch records in the history annotation, which becomes
    /// the object's newest change once the patch is applied (see [`Decision::apply`]). Its boot
    /// image change may be left out, when it is `boot_image` (current to target): a plan keeps
    /// every decision, and an image object is the largest thing a decision holds.
    #[serde(skip)]
    pub recorded: Option<Box<HistoryEntry>>,
    /// Something the decision worked around and an administrator should know of.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub warning: Option<Warning>,
    /// Of a MachineSet moved to a new image: whether its Machines showed that the image boots
    /// (see `plan::boot_evidence`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub boot_evidence: Option<BootEvidence>,
    /// What the platform rule asked a cloud to judge the image (an AMI's owner, a vSphere
    /// template): the controller's look-ups ask it after the pass when they have no fresh answer.
    #[serde(skip)]
    pub asks: Option<Lookup>,
}

/// A reason and message reported as a Warning beside the decision.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Warning {
    pub reason: Reason,
    pub message: String,
}

impl Decision {
    pub fn new(
        kind: MachineKind,
        namespace: &str,
        name: &str,
        action: Action,
        reason: Reason,
        message: String,
    ) -> Self {
        Decision {
            kind,
            namespace: namespace.to_string(),
            name: name.to_string(),
            uid: None,
            action,
            reason,
            message,
            boot_image: Values::default(),
            rhcos_release: Values::default(),
            user_data_secret: Values::default(),
            patch: Patch::default(),
            infrastructure_template: None,
            stub_upgrade: None,
            last_change: None,
            recorded: None,
            warning: None,
            boot_evidence: None,
            asks: None,
        }
    }

    /// Drops what the decision would write: its operations, the template it would create and the
    /// stub secret it would upgrade.
    pub(super) fn withdraw_writes(&mut self) {
        self.patch = Patch::default();
        self.infrastructure_template = None;
        self.stub_upgrade = None;
    }

    /// Makes this decision what planning the object again decides once this Update's patch is
    /// applied: up to date, at the values the patch wrote, with the change it recorded as the
    /// newest. The API server accepted every `test` of the patch, so it stored exactly those
    /// values: the controller reports the rollout from the patch responses instead of waiting
    /// for the watch to echo every patched object (a test checks this against planning the
    /// patched object).
    pub fn apply(&mut self) {
        if self.action != Action::Update {
            return;
        }
        let reverted = (self.reason == Reason::BootImageReverted)
            .then(|| self.boot_image.current.clone())
            .flatten();
        // A MachineSet just moved to a new image has no Machine on it yet: unproven, as the next
        // plan says, so that the status it reports is not written twice.
        let mut moved = false;
        if let Some(mut recorded) = self.recorded.take() {
            recorded.boot_image = recorded.boot_image.or_else(|| self.boot_image.change());
            moved = self.kind == MachineKind::MachineSet
                && reverted.is_none()
                && recorded.boot_image.is_some();
            self.last_change = Some(*recorded);
        }
        if moved {
            self.boot_evidence = Some(BootEvidence::unproven(None));
        }
        self.action = Action::UpToDate;
        self.reason = Reason::UpToDate;
        self.boot_image.apply();
        self.rhcos_release.apply();
        self.user_data_secret.apply();
        self.withdraw_writes();
        self.message = current_message(self.boot_image.current.as_ref());
        if let Some(failed) = reverted {
            // As the next plan sees it: held off the image that failed, which it would move to.
            self.action = Action::Skip;
            self.reason = Reason::BootImageHeld;
            self.boot_image.target = Some(failed);
            let why = (self.boot_evidence.as_ref()).map(BootEvidence::describe);
            self.message = held_message(&self.boot_image, why.as_deref());
        }
    }

    /// Whether the history this decision read already records its boot failure (settled, or
    /// reverted after it): news to nobody, so a restarted controller does not announce it again.
    pub fn boot_failure_on_record(&self) -> bool {
        self.last_change.as_ref().is_some_and(|c| {
            c.reverted_after.is_some()
                || (c.boot_evidence.as_ref()).is_some_and(|e| e.state == BootState::Failed)
        })
    }

    pub fn key(&self) -> ObjectKey {
        ObjectKey {
            kind: self.kind,
            name: self.name.clone(),
        }
    }
}

/// The message of a MachineSet held on `image.current` off `image.target`, which failed.
pub(super) fn held_message(image: &Values<Value>, why: Option<&str>) -> String {
    format!(
        "held on {} after the golden image {} failed to boot here ({}); it moves when the \
         golden image changes, or when the annotation {BOOT_FAILURE_HOLD_ANNOTATION} is removed",
        display_image(image.current.as_ref()),
        display_image(image.target.as_ref()),
        why.unwrap_or("no reason recorded"),
    )
}

/// The message of a decision that leaves a current boot image as it is.
pub(super) fn current_message(image: Option<&Value>) -> String {
    format!("boot image is current ({})", display_image(image))
}

/// The whole decision, as `plan -o json` prints it: every decision listed under its kind.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Plan {
    pub blocked: Option<Blocked>,
    /// The effective selection of each kind (by its resource name) and where it came from,
    /// once the gates let planning go ahead.
    pub selection: BTreeMap<String, Selected>,
    /// Every decision, kind by kind in the order of [`MachineKind::ALL`], each kind by
    /// namespace, then name.
    pub decisions: Vec<Decision>,
}

impl Plan {
    /// A plan of `decisions` in any order.
    pub fn new(blocked: Option<Blocked>, mut decisions: Vec<Decision>) -> Self {
        // Stable: equal names keep their order.
        decisions
            .sort_by(|a, b| (a.kind, &a.namespace, &a.name).cmp(&(b.kind, &b.namespace, &b.name)));
        Plan {
            blocked,
            selection: BTreeMap::new(),
            decisions,
        }
    }

    /// The decisions of one kind.
    pub fn of(&self, kind: MachineKind) -> &[Decision] {
        let start = self.decisions.partition_point(|d| d.kind < kind);
        let end = self.decisions.partition_point(|d| d.kind <= kind);
        &self.decisions[start..end]
    }
}

/// The JSON `plan -o json` has always printed: a list per kind, the Cluster API ones only when
/// they hold something.
impl Serialize for Plan {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = serializer.serialize_map(None)?;
        map.serialize_entry("blocked", &self.blocked)?;
        if !self.selection.is_empty() {
            let modes: BTreeMap<&str, &str> = (self.selection.iter())
                .map(|(k, s)| (k.as_str(), s.mode))
                .collect();
            let origins: BTreeMap<&str, &str> = (self.selection.iter())
                .map(|(k, s)| (k.as_str(), s.origin.as_str()))
                .collect();
            map.serialize_entry("selection", &modes)?;
            map.serialize_entry("selectionFrom", &origins)?;
        }
        // One list per kind of [`MachineKind::ALL`], in its order.
        let keys = [
            "machineSets",
            "controlPlaneMachineSets",
            "clusterApiMachineSets",
            "clusterApiMachineDeployments",
        ];
        for (kind, key) in MachineKind::ALL.into_iter().zip(keys) {
            let decisions = self.of(kind);
            if !kind.is_cluster_api() || !decisions.is_empty() {
                map.serialize_entry(key, decisions)?;
            }
        }
        map.end()
    }
}

#[cfg(test)]
impl Decision {
    /// This decision once its patch is applied ([`Decision::apply`]).
    pub fn applied(mut self) -> Decision {
        self.apply();
        self
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    /// Kinds, namespaces and names drawn from small pools, so that names repeat across kinds
    /// and a list holds equal names in a known order (told apart by their message).
    fn decisions() -> impl Strategy<Value = Vec<Decision>> {
        let kind = prop::sample::select(MachineKind::ALL.to_vec());
        let namespace = prop::sample::select(vec!["a", "b", "openshift-machine-api"]);
        let name = prop::sample::select(vec!["x", "worker-a", "worker-b", "worker-c"]);
        prop::collection::vec((kind, namespace, name), 0..40).prop_map(|drawn| {
            (drawn.into_iter().enumerate())
                .map(|(i, (kind, namespace, name))| {
                    let message = i.to_string();
                    Decision::new(
                        kind,
                        namespace,
                        name,
                        Action::Skip,
                        Reason::NotSelected,
                        message,
                    )
                })
                .collect()
        })
    }

    proptest! {
        /// Each kind's list holds exactly its decisions, in the order of a stable sort by
        /// namespace then name: what `plan` prints and the tests compare.
        #[test]
        fn a_plan_lists_each_kind_by_namespace_then_name(decisions in decisions()) {
            let plan = Plan::new(None, decisions.clone());
            for kind in MachineKind::ALL {
                let mut expected: Vec<&Decision> =
                    decisions.iter().filter(|d| d.kind == kind).collect();
                expected.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
                let listed: Vec<&Decision> = plan.of(kind).iter().collect();
                prop_assert_eq!(listed, expected);
            }
        }
    }
}
