//! Step 4 of a pass: say what happened. Logs, metrics, Events, retries, the known-images memory
//! and the MachineConfiguration status are all written from here (only a rollout's
//! `Progressing=True` goes before its patches: `Controller::announce_rollout`).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use tokio::time::Instant;
use tracing::{debug, info, warn};

use super::act::{Applied, Outcome};
use super::events::Notice;
use super::retry::doubling;
use super::status::StatusSources;
use super::{CONFLICT_RETRY, Controller, MAX_BACKOFF, MIN_BACKOFF, remembered_images};
use crate::api::MachineConfiguration;
use crate::golden_stream::GoldenConfig;
use crate::machine_kind::MachineKind;
use crate::names::{LEGACY_PAUSE_ANNOTATION, PAUSE_ANNOTATION};
use crate::plan::boot_evidence::BootState;
use crate::plan::selection::Selected;
use crate::plan::{self, Action, Blocked, Decision, Planner};
use crate::reason::Reason;

/// What reporting needs to know of a pass besides its decisions.
pub(super) struct PassFacts {
    pub blocked: Option<Blocked>,
    pub golden: Option<Arc<GoldenConfig>>,
    /// The effective selection mode of each kind.
    pub selections: Vec<(MachineKind, Selected)>,
}

impl PassFacts {
    pub fn of(planner: &Planner<'_>) -> Self {
        PassFacts {
            blocked: planner.blocked().cloned(),
            golden: planner.golden().cloned(),
            selections: planner.selections(),
        }
    }
}

impl Controller {
    pub(super) async fn report(
        &mut self,
        decided: PassFacts,
        applied: impl IntoIterator<Item = Applied>,
        sources: &StatusSources,
    ) {
        // A pass decides every object: the results of those it did not see go with them.
        let mut seen = BTreeSet::new();
        let mut all_done = true;
        for applied in applied {
            seen.insert(applied.decision.key());
            all_done &= self.record(applied);
        }
        self.memory.objects.retain(|key, _| seen.contains(key));
        self.warn_of_legacy_pause(sources.mc.as_ref());
        self.adopt_gates(decided.blocked, decided.selections, sources.mc.as_ref());
        self.observe_plan(decided.golden.as_deref());
        self.write_status(sources, &BTreeMap::new()).await;
        // After the status: remembering the golden images is bookkeeping for later releases,
        // and must not delay the report of this one's rollout. Usually all are remembered
        // already, and nothing is written.
        if let Some(golden) = &decided.golden {
            let existing = self.stores.known_images_config_map();
            let (api, refs) = (&self.known_images_api, golden.image_references());
            remembered_images::remember(api, existing, &refs, &self.metrics).await;
        }
        if all_done {
            (self.metrics.last_sync.with_label_values::<&str>(&[]))
                .set(Timestamp::now().as_second());
        }
    }

    /// Records one decision and how its patch went: counted and logged, its Events queued, its
    /// retry scheduled, and kept as the object's latest decision. False when the object still
    /// needs another pass.
    fn record(&mut self, applied: Applied) -> bool {
        let key = applied.decision.key();
        if applied.outcome == Outcome::Deferred {
            // Still failed as far as anyone can tell: keep reporting the failure.
            return false;
        }
        let object = self.memory.object(&key);
        if applied.outcome == Outcome::Conflict {
            object.conflicts += 1;
        } else if applied.outcome != Outcome::Withheld {
            object.conflicts = 0;
        }
        let in_a_row = object.conflicts;
        let conflicted = applied.outcome == Outcome::Conflict;
        let done = self.count_outcome(&applied);
        let updated =
            applied.decision.action == Action::Update && applied.outcome == Outcome::Patched;
        let mut reported = reported(applied, in_a_row);
        self.publish_events(&reported, updated);
        // A conflict's quick retry stands, unless it has become an error with a backoff.
        if !conflicted || reported.action == Action::Error {
            self.schedule_retry(&reported);
        }
        // Patched: reported as planning the patched object will decide, so status says
        // the rollout is done without waiting for the watch to echo every patch.
        if updated {
            Arc::make_mut(&mut reported).apply();
        }
        self.memory.object(&key).decision = Some(reported);
        done
    }

    /// Queues the Events of one reported decision for the Event task: Events never delay a
    /// rollout or its status.
    fn publish_events(&self, reported: &Decision, updated: bool) {
        if updated {
            let notice = match reported.reason {
                Reason::BootImageReverted => &REVERTED,
                _ => &UPDATED,
            };
            self.events.publish(reported, notice);
        } else if self.newly_failed_to_boot(reported) {
            self.events.publish(reported, &FAILED_TO_BOOT);
        } else if self.entered_error(reported) || self.newly_held_by_its_stub(reported) {
            self.events
                .publish(reported, &error_notice(reported.reason));
        }
        if let Some(reason) = self.new_warning(reported) {
            self.events.publish(reported, &error_notice(reason));
        }
    }

    /// The plan's gauges, from every object's latest decision and the gate that holds the pass.
    fn observe_plan(&self, golden: Option<&GoldenConfig>) {
        let golden = golden.map(|g| {
            let release = g.release_version.as_deref().unwrap_or("");
            (g.stream.stream.as_str(), release)
        });
        self.metrics.observe_plan(
            self.memory.decisions().map(|(_, d)| &**d),
            self.memory.last_blocked.as_ref(),
            golden,
        );
    }

    /// Counts and logs how a patch went; false when the object still needs another pass.
    fn count_outcome(&mut self, applied: &Applied) -> bool {
        let d = &applied.decision;
        let kind = d.kind.label();
        let update = d.action == Action::Update;
        let count = |result: &str| {
            if update {
                self.metrics
                    .patches
                    .with_label_values(&[kind, result])
                    .inc();
            }
        };
        match &applied.outcome {
            Outcome::NothingToSend => true,
            Outcome::Patched => {
                count("updated");
                // Counted for bookkeeping writes too, so that `writes_total` stays a complete
                // record of what this controller changed.
                self.metrics.writes.with_label_values(&[kind]).inc();
                if update {
                    info!(kind, name = %d.name, change = %d.message, "updated boot image");
                } else {
                    // Bookkeeping only: an opt-out's cleared hot-loop guard, or settled boot
                    // evidence.
                    info!(kind, name = %d.name, reason = %d.reason, message = %d.message, "updated its annotations");
                }
                self.memory.object(&d.key()).retry = None;
                true
            }
            Outcome::Conflict => {
                count("conflict");
                let in_a_row = self.memory.object(&d.key()).conflicts;
                debug!(kind, name = %d.name, in_a_row, "object changed under us; re-planning");
                // The store is usually one watch event behind: retry soon, then back off, and
                // past CONFLICT_LIMIT in a row report the object (see `reported`).
                let delay = doubling(CONFLICT_RETRY, CONFLICT_RETRY_MAX, in_a_row);
                self.memory.object(&d.key()).retry = Some((0, Instant::now() + delay));
                false
            }
            Outcome::Gone | Outcome::Withheld | Outcome::Deferred => false,
            Outcome::Failed(error) | Outcome::Rejected(error) => {
                count("failed");
                self.metrics.write_failures.with_label_values(&[kind]).inc();
                warn!(kind, name = %d.name, error = %error, "patch failed");
                false
            }
        }
    }

    /// Whether `reported` is the first decision to say that its new image failed to boot, and
    /// the history does not record it yet; the failure is logged and announced then, once, and
    /// not again by a controller that restarts.
    fn newly_failed_to_boot(&self, reported: &Decision) -> bool {
        let failed =
            |d: &Decision| (d.boot_evidence.as_ref()).is_some_and(|e| e.state == BootState::Failed);
        let previous = self.memory.decision(&reported.key());
        let newly =
            failed(reported) && !previous.is_some_and(failed) && !reported.boot_failure_on_record();
        if newly {
            let kind = reported.kind.label();
            warn!(kind, name = %reported.name, message = %reported.message, "new boot image failed to boot");
        }
        newly
    }

    /// Whether `reported` is an error it was not in before; such errors are logged and counted
    /// once, not on every retry.
    fn entered_error(&self, reported: &Decision) -> bool {
        if reported.action != Action::Error {
            return false;
        }
        let previous = self.memory.decision(&reported.key());
        let new_error =
            previous.is_none_or(|p| p.action != Action::Error || p.reason != reported.reason);
        if new_error {
            let kind = reported.kind.label();
            warn!(kind, name = %reported.name, reason = %reported.reason, message = %reported.message, "cannot update boot image");
            self.metrics.error_entered(reported.kind, reported.reason);
        }
        new_error
    }

    /// Whether `reported` newly skips because of its stub secret. Such a Skip holds back an
    /// update that only an administrator can let through (create the secret, add its name to
    /// the Role, rewrite it), so it is told in a Warning Event once, when the object enters it,
    /// as errors are, not on every pass. It degrades nothing: the object keeps an image that
    /// boots, and the Machine Config Operator fails its sync while Degraded is True (see
    /// [`Reason::degrades`]).
    fn newly_held_by_its_stub(&self, reported: &Decision) -> bool {
        let by_stub = |d: &Decision| {
            matches!(
                d.reason,
                Reason::StubSecretMissing
                    | Reason::StubSecretUnconvertible
                    | Reason::StubSecretUnverified
                    | Reason::StubSecretIncompatible
                    | Reason::StubSecretShared
            )
        };
        let previous = self.memory.decision(&reported.key());
        by_stub(reported) && previous.is_none_or(|p| p.reason != reported.reason)
    }

    /// The reason of a warning `reported` did not carry before; logged once, like errors.
    fn new_warning(&self, reported: &Decision) -> Option<Reason> {
        let warning = reported.warning.as_ref()?;
        let previous = self.memory.decision(&reported.key());
        let before = previous.and_then(|p| p.warning.as_ref()).map(|w| w.reason);
        if before == Some(warning.reason) {
            return None;
        }
        let kind = reported.kind.label();
        warn!(kind, name = %reported.name, reason = %warning.reason, message = %warning.message, "boot image decision with a warning");
        Some(warning.reason)
    }

    /// Errors are retried with exponential backoff; settled objects need no retry.
    fn schedule_retry(&mut self, reported: &Decision) {
        let retry = &mut self.memory.object(&reported.key()).retry;
        match reported.action {
            // Every pass plans every object: one before the error's retry is due is no attempt,
            // and leaves the backoff as it is.
            Action::Error if retry.is_some_and(|(_, at)| at > Instant::now()) => {}
            Action::Error => {
                let attempts = retry.map_or(0, |(n, _)| n + 1);
                let delay = doubling(MIN_BACKOFF, MAX_BACKOFF, attempts + 1);
                *retry = Some((attempts, Instant::now() + delay));
            }
            // An update's retry, if any, was scheduled from its outcome.
            Action::Update => {}
            // A Machine waiting for its Node fails the image once the join limit passes:
            // looked at again then, whatever else happens meanwhile.
            Action::Skip | Action::UpToDate => {
                let look_again = (reported.boot_evidence.as_ref()).and_then(|e| e.look_again_at);
                *retry = look_again.map(|at| {
                    let wait = at.duration_since(Timestamp::now()).unsigned_abs();
                    (0, Instant::now() + wait + BOOT_LOOK_AGAIN_MARGIN)
                });
            }
        }
    }

    /// One Warning Event each time the deprecated pause key is set, not one per pass.
    fn warn_of_legacy_pause(&mut self, mc: Option<&MachineConfiguration>) {
        let Some(mc) = mc else {
            return;
        };
        let legacy = plan::pause_key(&mc.metadata) == Some(LEGACY_PAUSE_ANNOTATION);
        if legacy && !self.memory.legacy_pause_warned {
            let note = format!(
                "boot image updates are paused by the deprecated annotation \
                 {LEGACY_PAUSE_ANNOTATION}; it will be ignored in the next release: annotate \
                 {PAUSE_ANNOTATION}=true instead"
            );
            warn!(
                annotation = LEGACY_PAUSE_ANNOTATION,
                "deprecated pause annotation in use"
            );
            self.events
                .publish_about_configuration(&mc.metadata, &DEPRECATED, &note);
        }
        self.memory.legacy_pause_warned = legacy;
    }

    /// Takes on a pass's gate and selections as what status reports: logs a change of gate and
    /// tracks how long a hold lasts (`mc` says since when it was reported). Idempotent, so the
    /// announcement of a rollout can adopt them before `report` does.
    pub(super) fn adopt_gates(
        &mut self,
        blocked: Option<Blocked>,
        selections: Vec<(MachineKind, Selected)>,
        mc: Option<&MachineConfiguration>,
    ) {
        self.log_gate_change(blocked.as_ref());
        self.track_hold(blocked.as_ref(), mc);
        self.memory.last_blocked = blocked;
        self.memory.last_selections = selections;
    }

    fn log_gate_change(&self, blocked: Option<&Blocked>) {
        let before = self.memory.last_blocked.as_ref().map(|b| b.reason);
        if blocked.map(|b| b.reason) == before {
            return;
        }
        match blocked {
            Some(b) => {
                warn!(reason = %b.reason, message = %b.message, "boot image writes are held")
            }
            None if before.is_some() => info!("boot image writes resumed"),
            None => {}
        }
    }
}

const DEPRECATED: Notice = Notice {
    type_: "Warning",
    reason: "DeprecatedAnnotation",
    action: "PlanBootImage",
};

/// Past a Machine's join limit before it is looked at again, so that the limit has passed by
/// the clock the planner reads.
const BOOT_LOOK_AGAIN_MARGIN: std::time::Duration = std::time::Duration::from_secs(1);

const REVERTED: Notice = Notice {
    type_: "Warning",
    reason: "BootImageReverted",
    action: "RevertBootImage",
};

const FAILED_TO_BOOT: Notice = Notice {
    type_: "Warning",
    reason: "BootImageFailedToBoot",
    action: "FollowBootImage",
};

const UPDATED: Notice = Notice {
    type_: "Normal",
    reason: "BootImageUpdated",
    action: "UpdateBootImage",
};

/// A Warning Event for an error or a warning.
fn error_notice(reason: Reason) -> Notice {
    Notice {
        type_: "Warning",
        reason: reason.as_str(),
        action: "PlanBootImage",
    }
}

/// An update whose patch conflicted this many times in a row is reported as failed: something
/// keeps changing the object between our read and our write.
const CONFLICT_LIMIT: u32 = 5;
/// The longest wait after a conflict: 500 ms doubled five times, once past the limit.
const CONFLICT_RETRY_MAX: Duration = Duration::from_secs(16);

/// What status, metrics and the next pass see of an applied decision: the planner's decision,
/// except that an update whose patch the API server refused is an error of its own.
fn reported(applied: Applied, conflicts_in_a_row: u32) -> Arc<Decision> {
    let Applied {
        mut decision,
        outcome,
    } = applied;
    // Sent or not, the operations are not reported (`act` took them out of every decision): what
    // is kept of a decision until the next pass (status, Events, metrics) is its outcome. At
    // 10,000 MachineSets the patches and template copies kept would be tens of megabytes. The
    // change a patch records is kept only once it is made.
    if outcome != Outcome::Patched && decision.recorded.is_some() {
        Arc::make_mut(&mut decision).recorded = None;
    }
    if decision.action != Action::Update {
        return decision;
    }
    let failure = match outcome {
        Outcome::Failed(error) => format!("patch failed: {error}"),
        Outcome::Rejected(error) => format!(
            "the API server rejects the patched object as invalid, so retrying cannot help: \
             {error}"
        ),
        Outcome::Conflict if conflicts_in_a_row >= CONFLICT_LIMIT => format!(
            "the patch conflicted {conflicts_in_a_row} times in a row: another writer keeps \
             changing the values it tests; retrying with backoff"
        ),
        _ => return decision,
    };
    let d = Arc::make_mut(&mut decision);
    d.action = Action::Error;
    d.reason = Reason::PatchFailed;
    d.message = failure;
    decision
}
