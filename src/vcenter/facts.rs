//! What vCenter said about the templates the vSphere rule wants: the pure part the planner reads
//! from the snapshot, as `Ec2Facts` (src/ec2) is for AWS. The controller fills it from
//! answers already in; a pass never waits for vCenter.

use std::collections::BTreeMap;

/// Where a template lives: one vCenter, one datacenter, one name (vCenter names VMs uniquely per
/// datacenter folder tree as far as the finder is concerned, and ours are unique by design).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TemplateKey {
    pub server: String,
    pub datacenter: String,
    pub name: String,
}

/// What is known of one wanted template.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TemplateState {
    /// The template exists, marked as a template: MachineSets may move to it.
    Ready,
    /// Being imported by this replica; `percent` of the OVA uploaded.
    Importing { percent: u8 },
    /// The last import failed (a wrong digest, a refused upload, a timeout); retried with
    /// backoff, the message says why.
    Failed { message: String },
}

/// Everything vCenter told, and whether it was asked at all.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct VcenterFacts {
    /// False when nothing asks vCenter (`plan` from manifests): the rule then says what it would
    /// import instead of waiting for an answer that never comes.
    pub consulted: bool,
    pub templates: BTreeMap<TemplateKey, TemplateState>,
    /// vCenters that could not be reached or refused our credentials, with why.
    pub unavailable: BTreeMap<String, String>,
}

impl VcenterFacts {
    pub fn template(&self, key: &TemplateKey) -> Option<&TemplateState> {
        self.templates.get(key)
    }
}
