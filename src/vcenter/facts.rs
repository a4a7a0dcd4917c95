//! What vCenter said about the templates the vSphere rule wants: the pure part the planner reads
//! from the snapshot, as `Ec2Facts` (src/ec2) is for AWS. The controller fills it from
//! answers already in; a pass never waits for vCenter.

use std::collections::BTreeMap;

use crate::reason::Reason;

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
    /// The last import failed (a wrong digest, a refused upload, a timeout:
    /// `TemplateImportFailed`; the OVA's host out of reach: `OvaUnreachable`); retried with
    /// backoff, the message says why.
    Failed { reason: Reason, message: String },
}

/// What vCenter says of the RHCOS release of a template a MachineSet clones now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TemplateVersion {
    /// The version of the template's vApp product, which an RHCOS OVA sets to its release
    /// (the MCO reads the same, `summary.config.product.version`, and compares it with the
    /// stream's `artifacts.vmware.release`: `createNewVMTemplate`, vsphere_helpers.go at
    /// 7ff337a).
    Release(String),
    /// No version to read: no such template where the MachineSet looks, or one without a
    /// product version; the message says which.
    Unknown(String),
}

/// Everything vCenter told, and whether it was asked at all.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct VcenterFacts {
    /// False when nothing asks vCenter (`plan` from manifests): the rule then says what it would
    /// import instead of waiting for an answer that never comes.
    pub consulted: bool,
    /// The golden templates wanted, by where they are to be.
    pub templates: BTreeMap<TemplateKey, TemplateState>,
    /// The release of the templates MachineSets clone now, keyed by the `template` they name
    /// (a name or an inventory path) in their vCenter and datacenter.
    pub versions: BTreeMap<TemplateKey, TemplateVersion>,
    /// vCenters that could not be reached or refused our credentials, with why.
    pub unavailable: BTreeMap<String, String>,
}

impl VcenterFacts {
    pub fn template(&self, key: &TemplateKey) -> Option<&TemplateState> {
        self.templates.get(key)
    }

    pub fn version(&self, key: &TemplateKey) -> Option<&TemplateVersion> {
        self.versions.get(key)
    }
}
