//! Planner decisions as the reporting side receives them.

use crate::machine_kind::MachineKind;
use crate::plan::{Action, Decision};
use crate::reason::Reason;

/// The decision `action` for `reason` on the MachineSet `openshift-machine-api/name`, with a
/// message naming the reason.
pub fn decision(name: &str, action: Action, reason: Reason) -> Decision {
    Decision::new(
        MachineKind::MachineSet,
        "openshift-machine-api",
        name,
        action,
        reason,
        format!("{reason} message"),
    )
}
