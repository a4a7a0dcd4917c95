//! What vCenter said about the templates the vSphere rule wants: the pure part the planner reads
//! from the snapshot, as [`super::ec2::Ec2Facts`] is for AWS. The controller fills it from
//! answers already in; a pass never waits for vCenter. And what the rule asks of vCenter
//! ([`TemplateRequest`]), which the client in `src/vcenter` carries out.

use std::collections::BTreeMap;

use crate::golden_stream::VmwareOva;
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

/// One failure domain of `Infrastructure.spec.platformSpec.vsphere.failureDomains`, as far as a
/// template import needs it.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct FailureDomain {
    pub name: String,
    pub server: String,
    pub datacenter: String,
    pub datastore: String,
    pub resource_pool: String,
    pub folder: String,
    pub network: String,
    pub vm_group: String,
}

/// The template of the golden release for one failure domain, and where and from what to
/// import it when it is not there yet.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct TemplateRequest {
    pub key: TemplateKey,
    pub failure_domain: FailureDomain,
    /// The workspace folder of the MachineSet, where the MCO imports too; else the domain's.
    pub folder: String,
    pub ova: VmwareOva,
    /// The template the MachineSet clones now (its `template`, a name or an inventory path) in
    /// the same vCenter and datacenter: whether it is at the golden release already decides
    /// whether anything is imported.
    pub current: TemplateKey,
}
