//! Writing the conditions: only when they differ from what the object (or our last write, until
//! the watch catches up) already says, and message-only changes at most once a second.

use jiff::Timestamp;
use tokio::time::Instant;
use tracing::warn;

use super::{Controller, STATUS_MIN_INTERVAL, status};
use crate::api::Condition;
use crate::plan::Decision;

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
                self.metrics.writes.with_label_values(&["status"]).inc();
                self.last_status_write = Some(Instant::now());
                self.status_dirty = false;
                self.status_basis = mc.metadata.resource_version.map(|rv| (rv, conditions));
            }
            Err(e) => {
                warn!(error = %e, "could not write MachineConfiguration status");
                self.status_dirty = true;
                self.last_status_write = Some(Instant::now());
            }
        }
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
