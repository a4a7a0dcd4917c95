//! What the planner reads of a Node, whether it comes from the controller's watch or from
//! `plan`'s inputs: its readiness (a Ready Node proves the boot image of the Machine it runs
//! on) and, of a control-plane Node, its architecture (that of MachineSets that do not declare
//! theirs).

use k8s_openapi::api::core::v1::Node;

use crate::names::{ARCH_LABEL, CONTROL_PLANE_NODE_LABELS};

pub fn is_ready(node: &Node) -> bool {
    let conditions = (node.status.as_ref()).and_then(|s| s.conditions.as_deref());
    (conditions.unwrap_or_default().iter()).any(|c| c.type_ == "Ready" && c.status == "True")
}

/// Of a control-plane Node, its architecture label (`None` inside when it has none); `None` of
/// any other Node.
pub fn control_plane_arch(node: &Node) -> Option<Option<String>> {
    let labels = node.metadata.labels.as_ref()?;
    let control_plane = CONTROL_PLANE_NODE_LABELS
        .iter()
        .any(|l| labels.contains_key(*l));
    control_plane.then(|| labels.get(ARCH_LABEL).cloned())
}
