//! Writing the conditions: only when they differ from what the object (or our last write, until
//! the watch catches up) already says, and message-only changes at most once a second.

use jiff::{SignedDuration, Timestamp};
use tokio::time::Instant;
use tracing::warn;

use super::status::HeldFor;
use super::{Controller, STATUS_MIN_INTERVAL, status};
use crate::api::Condition;
use crate::plan::{Blocked, Decision};
use crate::reason::{Category, Reason};

impl Controller {
    /// Computes the conditions from the latest results and the gate of the last pass, and
    /// writes them if they changed.
    pub(super) async fn write_status(&mut self) {
        let name = &self.args.machine_configuration_name.clone();
        let Some(mc) = self.stores.machine_configuration(name) else {
            return;
        };
        let decisions: Vec<&Decision> = self.results.values().collect();
        let desired = status::desired(&status::StatusInput {
            blocked: self.last_blocked.as_ref(),
            decisions: &decisions,
            selections: &self.last_selections,
            held: self.held(),
            // Read now rather than from the pass's snapshot: every patch of the pass has
            // returned, and a pause set meanwhile withheld the rest (see `act`).
            paused: self.stores.paused(name),
        });
        let mut current = mc
            .status
            .as_ref()
            .and_then(|s| s.conditions.clone())
            .unwrap_or_default();
        // Until the watch delivers our own write, compare with what we wrote, not the stale copy.
        if let Some((basis, written)) = &self.status_basis
            && mc.metadata.resource_version.as_ref() == Some(basis)
        {
            current = written.clone();
        }
        let Some(conditions) =
            status::merge(&current, &desired, mc.metadata.generation, Timestamp::now())
        else {
            self.status_dirty = false;
            return;
        };
        if self.hold_back(&current, &conditions) || !*self.leader.borrow() {
            return;
        }
        match status::write(&self.configurations, name, &conditions).await {
            Ok(()) => {
                let target = ["MachineConfiguration/status"];
                self.metrics.writes.with_label_values(&target).inc();
                self.last_status_write = Some(Instant::now());
                self.status_dirty = false;
                self.status_basis = mc.metadata.resource_version.map(|rv| (rv, conditions));
            }
            Err(e) => {
                warn!(error = %e, "could not write MachineConfiguration status");
                let target = ["MachineConfiguration/status"];
                self.metrics.write_failures.with_label_values(&target).inc();
                self.status_dirty = true;
                self.last_status_write = Some(Instant::now());
            }
        }
    }

    /// How long the current hold that degrades when lasting has held, against its limit.
    pub(super) fn held(&self) -> Option<HeldFor> {
        let since = self.hold_since?;
        Some(HeldFor {
            duration: Timestamp::now().duration_since(since),
            limit: SignedDuration::try_from(self.args.hold_degrade_after)
                .unwrap_or(SignedDuration::MAX),
        })
    }

    /// Tracks since when writes are held. A hold continues across passes and across restarts:
    /// the Progressing condition we wrote says since when it has been False for that reason.
    pub(super) fn track_hold(&mut self, blocked: Option<&Blocked>) {
        let Some(blocked) = blocked.filter(|b| b.reason.degrades_when_lasting()) else {
            self.hold_since = None;
            self.metrics.observe_hold(None);
            return;
        };
        if self.hold_since.is_none() {
            let name = &self.args.machine_configuration_name;
            let reported = self.stores.machine_configuration(name).and_then(|mc| {
                let conditions = mc.status?.conditions?;
                let progressing = conditions
                    .into_iter()
                    .find(|c| c.type_ == status::PROGRESSING)?;
                let holding = progressing.status == "False"
                    && Reason::of(Category::Hold).any(|r| r.as_str() == progressing.reason);
                holding.then_some(progressing.last_transition_time.0)
            });
            self.hold_since = Some(reported.unwrap_or_else(Timestamp::now));
        }
        let exceeded = self.held().is_some_and(|h| h.exceeded());
        self.metrics
            .observe_hold(exceeded.then_some(blocked.reason));
    }

    /// Whether to hold back a message-only change written too soon after the last write; it is
    /// flushed when the interval ends. Flips of status or reason are never held back.
    fn hold_back(&mut self, current: &[Condition], conditions: &[Condition]) -> bool {
        let flips = conditions.iter().any(|c| {
            current
                .iter()
                .find(|o| o.type_ == c.type_)
                .is_none_or(|o| o.status != c.status || o.reason != c.reason)
        });
        let recent = self
            .last_status_write
            .is_some_and(|t| t.elapsed() < STATUS_MIN_INTERVAL);
        if recent && !flips {
            self.status_dirty = true;
            return true;
        }
        false
    }
}
