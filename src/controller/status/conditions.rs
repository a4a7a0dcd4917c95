//! The conditions on the MachineConfiguration, computed by pure code from the decisions.
//!
//! We own our condition types and nothing else (the two the Machine Config Operator shares
//! with us only while no other manager is active).

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use jiff::{SignedDuration, Timestamp};

use crate::api::{Condition, Time};
use crate::machine_kind::MachineKind;
use crate::plan::boot_evidence::{BootEvidence, BootState};
use crate::plan::history::HistoryEntry;
use crate::plan::selection::{OPT_IN_COMMAND, Selected};
use crate::plan::{Action, Blocked, Decision, friendly_duration};
use crate::quoted::bounded;
use crate::reason::Reason;

pub const PROGRESSING: &str = "BootImageUpdateProgressing";
pub const DEGRADED: &str = "BootImageUpdateDegraded";
pub const PAUSED: &str = "BootImageUpdatePaused";
/// Ours alone: a gate that waits for the cluster has held writes longer than `--hold-limit`.
pub const HELD_TOO_LONG: &str = "BootImageUpdateHeldTooLong";

/// The API server refuses a condition message longer than this (metav1.Condition validation).
const MESSAGE_LIMIT: usize = 32_768;
/// How much of one object's message a condition quotes.
const QUOTED_MESSAGE_LIMIT: usize = 1_000;

/// How many erroring resources a message names before it summarises the rest.
const NAMED_ERRORS: usize = 10;
/// How many recent changes the Progressing message lists.
const NAMED_CHANGES: usize = 3;

/// How long the current hold has lasted, against the limit after which it degrades.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct HeldFor {
    pub duration: SignedDuration,
    pub limit: SignedDuration,
}

impl HeldFor {
    pub fn exceeded(&self) -> bool {
        self.duration >= self.limit
    }
}

/// A condition as we want it, without its transition time.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Desired {
    pub type_: &'static str,
    /// `None` is Unknown: the truth cannot be established.
    pub status: Option<bool>,
    pub reason: String,
    pub message: String,
}

impl Desired {
    pub(super) fn new(
        type_: &'static str,
        status: Option<bool>,
        reason: impl Into<String>,
        message: impl Into<String>,
    ) -> Self {
        Desired {
            type_,
            status,
            reason: reason.into(),
            message: message.into(),
        }
    }
}

/// What the conditions are computed from.
pub struct StatusInput<'a> {
    pub blocked: Option<&'a Blocked>,
    /// The latest decision for every machine resource, of every kind.
    pub decisions: &'a [&'a Decision],
    /// The effective selection mode of each kind, as of the last plan.
    pub selections: &'a [(MachineKind, Selected)],
    /// How long `blocked` has held, and after how long a hold counts as a failure.
    pub held: Option<HeldFor>,
    /// The pause annotation is set. Not derived from `blocked`: the planner reports only the
    /// first gate, and a release mismatch or missing ConfigMap would hide the pause and flip
    /// `BootImageUpdatePaused` to False for tools waiting on it, although nothing may write.
    ///
    /// Read from the pass's snapshot: a pause set while the pass patches withholds the rest of
    /// its patches (see `act`), and its watch event starts the pass that reports it.
    pub paused: bool,
}

/// Ours alone: whether this controller stood down, and why.
pub const STOOD_DOWN: &str = "BootImageControllerStoodDown";

/// The conditions we own. While we stand down, only our own types: the shared ones belong to
/// the manager in charge, and its operator turns `BootImageUpdateDegraded=True` into a Degraded
/// `machine-config` ClusterOperator (pkg/operator/sync.go, `syncMachineConfiguration`), so a
/// stale one of ours must not linger there. Applying without them also removes those we wrote
/// earlier; those the other manager has since taken over go into the apply as they are
/// (`shared_conditions_taken_over`, in the status writer).
pub fn desired(input: &StatusInput<'_>) -> Vec<Desired> {
    if let Some(b) = input.blocked.filter(|b| b.reason.stands_down()) {
        return vec![paused(input.paused), stood_down(Some(b))];
    }
    vec![
        progressing(input),
        degraded(input),
        paused(input.paused),
        held_too_long(input),
        boot_failures(input),
        stood_down(None),
    ]
}

/// A hold that waits for the cluster (an upgrade, a matching release) and lasts past its limit
/// is reported here, never as `BootImageUpdateDegraded` (see [`Reason::degrades`]).
fn held_too_long(input: &StatusInput<'_>) -> Desired {
    let lasting = input.held.filter(HeldFor::exceeded);
    match (input.blocked, lasting) {
        (Some(b), Some(held)) if b.reason.reported_when_lasting() => {
            let message = format!(
                "boot image updates have been held for {} (longer than {}): {}",
                friendly_duration(held.duration),
                friendly_duration(held.limit),
                b.message
            );
            Desired::new(HELD_TOO_LONG, Some(true), b.reason.to_string(), message)
        }
        _ => Desired::new(
            HELD_TOO_LONG,
            Some(false),
            "WithinLimit",
            "no gate has held boot image updates longer than its limit",
        ),
    }
}

/// Ours alone: whether a golden image failed to boot on a Machine of a MachineSet we moved
/// (`plan::boot_evidence`). Never `BootImageUpdateDegraded`: the MCO's operator would turn that
/// into a Degraded ClusterOperator, and the image that failed may well have been reverted.
pub const BOOT_FAILED: &str = "BootImageFailedToBoot";

fn boot_failures(input: &StatusInput<'_>) -> Desired {
    let followed: Vec<(&Decision, &BootEvidence)> = (input.decisions.iter())
        .filter_map(|d| Some((*d, d.boot_evidence.as_ref()?)))
        .collect();
    let count = |state| followed.iter().filter(|(_, e)| e.state == state).count();
    let failed: Vec<&(&Decision, &BootEvidence)> = (followed.iter())
        .filter(|(_, e)| e.state == BootState::Failed)
        .collect();
    if failed.is_empty() {
        let message = format!(
            "no new boot image failed to boot: {} moved MachineSet(s) proven by a Machine, {} \
             waiting for one",
            count(BootState::Proven),
            count(BootState::Unproven)
        );
        return Desired::new(BOOT_FAILED, Some(false), "NoBootFailure", message);
    }
    let named = failed.iter().map(|(d, e)| {
        let reverted = match d.reason {
            Reason::BootImageReverted | Reason::BootImageHeld => "; reverted and held",
            _ => "",
        };
        let what = bounded(&e.describe(), QUOTED_MESSAGE_LIMIT);
        format!("{} {} ({what}{reverted})", d.kind, d.name)
    });
    let message = format!(
        "new boot images failed to boot on {} MachineSet(s): {}",
        failed.len(),
        first_few(named, NAMED_ERRORS, "; ")
    );
    Desired::new(BOOT_FAILED, Some(true), "BootImageFailed", message)
}

fn stood_down(blocked: Option<&Blocked>) -> Desired {
    match blocked {
        Some(b) => Desired::new(STOOD_DOWN, Some(true), b.reason.to_string(), &b.message),
        None => Desired::new(
            STOOD_DOWN,
            Some(false),
            "ManagingBootImages",
            "no other boot image manager is active; this controller updates boot images",
        ),
    }
}

fn progressing(input: &StatusInput<'_>) -> Desired {
    let summary = summary(input);
    if let Some(b) = input.blocked {
        let message = format!("{}. {summary}", b.message);
        return Desired::new(PROGRESSING, Some(false), b.reason.to_string(), message);
    }
    // Done means nothing selected is still on its way: `oc wait` for False must mean that.
    let updating =
        (input.decisions.iter()).any(|d| d.action == Action::Update || d.reason.on_its_way());
    let not_opted_in = (input.decisions.iter()).any(|d| d.reason == Reason::NotOptedIn);
    let nothing_selected = (input.decisions.iter()).all(|d| left_out(d));
    let reason = match (updating, not_opted_in && nothing_selected) {
        (true, _) => "BootImagesUpdating",
        (false, true) => Reason::NotOptedIn.as_str(),
        (false, false) => "BootImagesCurrent",
    };
    let mut message = summary;
    if not_opted_in {
        // The one line that says how to opt in, where an administrator looks first.
        let _ = write!(
            message,
            " Not opted in: nothing is written to what nobody opted in, as the Machine Config \
             Operator of this release does; opt in with {OPT_IN_COMMAND}"
        );
    }
    Desired::new(PROGRESSING, Some(updating), reason, message)
}

fn degraded(input: &StatusInput<'_>) -> Desired {
    if let Some(b) = input.blocked.filter(|b| b.reason.degrades()) {
        return Desired::new(DEGRADED, Some(true), b.reason.to_string(), &b.message);
    }
    let errors: Vec<&&Decision> = (input.decisions.iter())
        .filter(|e| e.action == Action::Error)
        .collect();
    let Some(first) = errors.first().map(|e| e.reason) else {
        return Desired::new(DEGRADED, Some(false), "AsExpected", "no errors");
    };
    let reason = if errors.iter().all(|e| e.reason == first) {
        first.to_string()
    } else {
        "MultipleErrors".to_string()
    };
    let named = errors.iter().map(|e| {
        let quoted = bounded(&e.message, QUOTED_MESSAGE_LIMIT);
        format!("{}/{} {}: {quoted}", e.namespace, e.name, e.reason)
    });
    let message = format!(
        "{} machine resource(s) cannot be updated: {}",
        errors.len(),
        first_few(named, NAMED_ERRORS, "; ")
    );
    Desired::new(DEGRADED, Some(true), reason, message)
}

/// The first `limit` items joined by `separator`, then how many more there are: a message stays
/// bounded however many there are, and only the items shown are made.
pub(super) fn first_few(
    items: impl ExactSizeIterator<Item = String>,
    limit: usize,
    separator: &str,
) -> String {
    let total = items.len();
    let mut text = items.take(limit).collect::<Vec<_>>().join(separator);
    if total > limit {
        let _ = write!(text, "{separator}and {} more", total - limit);
    }
    text
}

fn paused(paused: bool) -> Desired {
    let (reason, message) = match paused {
        true => (
            Reason::Paused.as_str(),
            "boot image updates are paused; no MachineSet is being written",
        ),
        false => ("NotPaused", "boot image updates are not paused"),
    };
    Desired::new(PAUSED, Some(paused), reason, message)
}

fn summary(input: &StatusInput<'_>) -> String {
    let mut text = String::new();
    for kind in MachineKind::ALL {
        let entries: Vec<&Decision> = (input.decisions.iter().copied())
            .filter(|d| d.kind == kind)
            .collect();
        // MachineSets are always counted; other kinds only where the cluster has them.
        if entries.is_empty() && kind != MachineKind::MachineSet {
            continue;
        }
        let mode = input.selections.iter().find(|(k, _)| *k == kind);
        text.push_str(&kind_summary(kind, mode.map(|(_, m)| m), &entries));
    }
    text.push_str(&imports_under_way(input.decisions));
    text.push_str(&last_changes(input.decisions));
    text.trim_end().to_string()
}

/// The vSphere template imports under way, with their progress: slow (a gigabyte-sized OVA),
/// so what an administrator waits for is said where they look. Imports run one at a time;
/// MachineSets waiting for the same template say the same, so each is named once.
fn imports_under_way(decisions: &[&Decision]) -> String {
    let importing: BTreeSet<&str> = (decisions.iter())
        .filter(|d| d.reason == Reason::TemplateImporting)
        .map(|d| d.message.as_str())
        .collect();
    importing
        .into_iter()
        .map(|m| format!("vSphere: {}. ", bounded(m, QUOTED_MESSAGE_LIMIT)))
        .collect()
}

/// The administrator's selection or opt-in leaves `d` out.
fn left_out(d: &Decision) -> bool {
    matches!(
        d.reason,
        Reason::NotSelected | Reason::NotOptedIn | Reason::OptedOut
    )
}

/// `MachineSets (selection All from annotation): 3 total, 2 selected, ... (CustomImage: 1), 0
/// errored. `
fn kind_summary(kind: MachineKind, mode: Option<&Selected>, entries: &[&Decision]) -> String {
    let count = |f: &dyn Fn(&Decision) -> bool| entries.iter().filter(|e| f(e)).count();
    let selected = count(&|e| !left_out(e));
    let mut text = kind.plural_title().to_string();
    if let Some(mode) = mode {
        let _ = write!(text, " (selection {mode})");
    }
    let _ = write!(
        text,
        ": {} total, {selected} selected, {} to update, {} up to date, {} skipped",
        entries.len(),
        count(&|e| e.action == Action::Update),
        count(&|e| e.action == Action::UpToDate),
        count(&|e| e.action == Action::Skip),
    );
    // Why things were skipped is what an administrator asks next; reasons are few and fixed.
    let mut skipped: BTreeMap<Reason, usize> = BTreeMap::new();
    for e in entries.iter().filter(|e| e.action == Action::Skip) {
        *skipped.entry(e.reason).or_default() += 1;
    }
    if !skipped.is_empty() {
        let parts: Vec<String> = skipped.iter().map(|(r, n)| format!("{r}: {n}")).collect();
        let _ = write!(text, " ({})", parts.join(", "));
    }
    let errored = count(&|e| e.action == Action::Error);
    let _ = write!(text, ", {errored} errored. ");
    text
}

/// The newest changes this controller recorded, newest first.
fn last_changes(decisions: &[&Decision]) -> String {
    let mut recent: Vec<(&Decision, &HistoryEntry)> = (decisions.iter())
        .filter_map(|e| Some((*e, e.last_change.as_ref()?)))
        .collect();
    // Compared borrowed: a copy of both times at every comparison was most of a report after
    // a rollout, when every updated object names its change.
    recent.sort_by_key(|(_, change)| Reverse(change.time.as_str()));
    let mut text = String::new();
    for (i, (e, change)) in recent.iter().take(NAMED_CHANGES).enumerate() {
        text.push_str(if i == 0 { "Last changes: " } else { "; " });
        // Whole seconds read better; the full time stays in the history annotation.
        let time = (change.time)
            .split('.')
            .next()
            .unwrap_or_default()
            .trim_end_matches('Z');
        let _ = write!(text, "{} at {time}Z: {}", e.name, change.describe_changes());
    }
    text
}

/// The conditions to write: the `current` ones, where they already say the same, are returned
/// as they are.
///
/// `lastTransitionTime` moves only when a condition's status flips (the predecessor bumped it on
/// every message change, which made "how long has this been degraded" unanswerable).
pub fn merge(
    current: &[Condition],
    desired: &[Desired],
    generation: Option<i64>,
    now: Timestamp,
) -> Vec<Condition> {
    (desired.iter())
        .map(|d| {
            let status = match d.status {
                Some(true) => "True",
                Some(false) => "False",
                None => "Unknown",
            };
            let transition = match current.iter().find(|c| c.type_ == d.type_) {
                Some(c) if c.status == status => c.last_transition_time.clone(),
                _ => Time(now),
            };
            Condition {
                type_: d.type_.to_string(),
                status: status.to_string(),
                reason: d.reason.clone(),
                message: bounded(&d.message, MESSAGE_LIMIT),
                observed_generation: generation,
                last_transition_time: transition,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testkit::decisions::decision as entry;

    /// What a pass that decided `decisions`, with nothing blocked, held or paused, reports from.
    fn deciding<'a>(decisions: &'a [&'a Decision]) -> StatusInput<'a> {
        StatusInput {
            blocked: None,
            decisions,
            selections: &[],
            held: None,
            paused: false,
        }
    }

    /// What a pass stopped by `gate` reports from.
    fn blocked_by(gate: &Blocked) -> StatusInput<'_> {
        StatusInput {
            blocked: Some(gate),
            ..deciding(&[])
        }
    }

    fn blocked(reason: Reason, message: &str) -> Blocked {
        Blocked {
            reason,
            message: message.into(),
        }
    }

    fn conditions(input: &StatusInput<'_>) -> Vec<Condition> {
        merge(&[], &desired(input), Some(3), Timestamp::UNIX_EPOCH)
    }

    fn get<'a>(c: &'a [Condition], type_: &str) -> &'a Condition {
        c.iter().find(|c| c.type_ == type_).unwrap()
    }

    #[test]
    fn converged_cluster_is_neither_progressing_nor_degraded() {
        let a = entry("a", Action::UpToDate, Reason::UpToDate);
        let b = entry("b", Action::Skip, Reason::CustomImage);
        let c = conditions(&deciding(&[&a, &b]));
        assert_eq!(get(&c, PROGRESSING).status, "False");
        assert_eq!(get(&c, DEGRADED).status, "False");
        assert_eq!(get(&c, PAUSED).status, "False");
        assert!(
            get(&c, PROGRESSING)
                .message
                .contains("2 total, 2 selected, 0 to update, 1 up to date, 1 skipped")
        );
        assert_eq!(get(&c, PROGRESSING).observed_generation, Some(3));
    }

    #[test]
    fn errors_name_the_machine_sets() {
        let a = entry("a", Action::Error, Reason::ImageNotInStream);
        let b = entry("b", Action::Update, Reason::BootImageOutdated);
        let c = conditions(&deciding(&[&a, &b]));
        let degraded = get(&c, DEGRADED);
        assert_eq!(
            (degraded.status.as_str(), degraded.reason.as_str()),
            ("True", "ImageNotInStream")
        );
        assert!(
            degraded
                .message
                .contains("openshift-machine-api/a ImageNotInStream")
        );
        assert_eq!(get(&c, PROGRESSING).status, "True");
    }

    #[test]
    fn golden_configmap_missing_degrades_upgrade_does_not() {
        let missing = blocked(Reason::GoldenConfigMapMissing, "gone");
        let input = blocked_by;
        let c = conditions(&input(&missing));
        assert_eq!(get(&c, DEGRADED).reason, "GoldenConfigMapMissing");
        let upgrading = blocked(Reason::ClusterUpgrading, "updating");
        let c = conditions(&input(&upgrading));
        assert_eq!(get(&c, DEGRADED).status, "False");
        assert_eq!(get(&c, PROGRESSING).reason, "ClusterUpgrading");
    }

    #[test]
    fn pause_is_acknowledged_whatever_gate_is_reported_first() {
        let paused = blocked(Reason::Paused, "paused");
        let mut input = StatusInput {
            paused: true,
            ..blocked_by(&paused)
        };
        assert_eq!(get(&conditions(&input), PAUSED).status, "True");

        // Another gate reported first does not hide the pause.
        let mismatch = blocked(Reason::ReleaseMismatch, "waiting");
        input.blocked = Some(&mismatch);
        assert_eq!(get(&conditions(&input), PAUSED).status, "True");
        input.paused = false;
        assert_eq!(get(&conditions(&input), PAUSED).status, "False");
    }

    #[test]
    fn a_hold_that_lasts_past_its_limit_is_reported_but_never_degrades() {
        let hours = |h: i64| SignedDuration::from_hours(h);
        let held = |duration| {
            Some(HeldFor {
                duration,
                limit: hours(1),
            })
        };
        let mismatch = blocked(Reason::ReleaseMismatch, "waiting for 4.21.1");
        let mut input = StatusInput {
            held: held(SignedDuration::from_mins(30)),
            ..blocked_by(&mismatch)
        };
        assert_eq!(get(&conditions(&input), HELD_TOO_LONG).status, "False");
        input.held = held(hours(2) + SignedDuration::from_secs(5));
        let c = conditions(&input);
        // The MCO's operator fails its sync while Degraded is True: an upgrade we wait for
        // would never finish.
        assert_eq!(get(&c, DEGRADED).status, "False");
        let reported = get(&c, HELD_TOO_LONG);
        assert_eq!(
            (reported.status.as_str(), reported.reason.as_str()),
            ("True", "ReleaseMismatch")
        );
        assert!(
            reported.message.contains("held for 2h 5s (longer than 1h)")
                && reported.message.contains("waiting for 4.21.1"),
            "{}",
            reported.message
        );
        let gates = [Reason::ClusterUpgrading, Reason::ClusterVersionUnknown]
            .map(|reason| blocked(reason, "an upgrade runs"));
        for gate in &gates {
            input.blocked = Some(gate);
            let c = conditions(&input);
            assert_eq!(get(&c, DEGRADED).status, "False", "{}", gate.reason);
            assert_eq!(get(&c, HELD_TOO_LONG).status, "True", "{}", gate.reason);
        }
        let paused = blocked(Reason::Paused, "paused");
        input.blocked = Some(&paused);
        input.paused = true;
        input.held = held(hours(5));
        let c = conditions(&input);
        assert_eq!(get(&c, DEGRADED).status, "False");
        assert_eq!(get(&c, HELD_TOO_LONG).status, "False");
    }

    #[test]
    fn progressing_stays_true_while_an_image_is_still_being_imported_or_looked_up() {
        let current = entry("a", Action::UpToDate, Reason::UpToDate);
        for waiting in [
            Reason::TemplateImportPending,
            Reason::TemplateImporting,
            Reason::Ec2LookupPending,
        ] {
            let on_its_way = entry("b", Action::Skip, waiting);
            let c = conditions(&deciding(&[&current, &on_its_way]));
            assert_eq!(get(&c, PROGRESSING).status, "True", "{waiting}");
        }
        let custom = entry("b", Action::Skip, Reason::CustomImage);
        let c = conditions(&deciding(&[&current, &custom]));
        assert_eq!(get(&c, PROGRESSING).status, "False");
    }

    #[test]
    fn no_write_when_unchanged_and_transition_time_moves_only_on_flip() {
        let a = entry("a", Action::UpToDate, Reason::UpToDate);
        let decided = [&a];
        let all_from_annotation = Selected {
            mode: "All",
            origin: crate::plan::selection::Origin::Annotation,
        };
        let input = StatusInput {
            selections: &[(MachineKind::MachineSet, all_from_annotation)],
            ..deciding(&decided)
        };
        let t0 = Timestamp::UNIX_EPOCH;
        let first = merge(&[], &desired(&input), Some(1), t0);
        let message = &get(&first, PROGRESSING).message;
        assert!(
            message.starts_with("MachineSets (selection All from annotation): 1 total"),
            "{message}"
        );
        let t1: Timestamp = "2026-01-01T00:00:00Z".parse().unwrap();
        assert_eq!(merge(&first, &desired(&input), Some(1), t1), first);

        // A message change keeps the transition time.
        let b = entry("b", Action::Skip, Reason::OptedOut);
        let second = merge(&first, &desired(&deciding(&[&a, &b])), Some(1), t1);
        assert_eq!(get(&second, PROGRESSING).last_transition_time, Time(t0));

        // A status flip moves it.
        let c = entry("c", Action::Error, Reason::HotLoop);
        let third = merge(&second, &desired(&deciding(&[&a, &c])), Some(1), t1);
        assert_eq!(get(&third, DEGRADED).last_transition_time, Time(t1));
        assert_eq!(get(&third, PROGRESSING).last_transition_time, Time(t0));
    }

    #[test]
    fn a_template_import_under_way_is_in_the_progressing_message_once() {
        let mut a = entry("a", Action::Skip, Reason::TemplateImporting);
        a.message = "importing rhcos.ova as template t into vc/dc: 40% uploaded".into();
        let mut b = a.clone();
        b.name = "b".into();
        let c = conditions(&deciding(&[&a, &b]));
        let message = &get(&c, PROGRESSING).message;
        assert_eq!(message.matches("40% uploaded").count(), 1, "{message}");
        assert!(message.contains("(TemplateImporting: 2)"), "{message}");
    }

    #[test]
    fn messages_stay_within_what_the_api_server_accepts() {
        let huge = "x".repeat(40_000);
        let many: Vec<Decision> = (0..50)
            .map(|i| {
                let mut d = entry(&format!("ms-{i}"), Action::Error, Reason::HotLoop);
                d.message = format!("é{huge}");
                d
            })
            .collect();
        let refs: Vec<&Decision> = many.iter().collect();
        let c = conditions(&deciding(&refs));
        for condition in &c {
            assert!(
                condition.message.len() <= MESSAGE_LIMIT,
                "{}",
                condition.type_
            );
        }
        let degraded = &get(&c, DEGRADED).message;
        assert!(degraded.contains("more bytes)"), "{}", &degraded[..200]);
        assert!(
            degraded.contains("and 40 more"),
            "the count survives the cut"
        );
        assert_eq!(bounded("short", 10), "short");
    }
}
