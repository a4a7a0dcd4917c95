//! Stable reasons: the one vocabulary shared by plans, conditions, Events, logs and metrics.
//!
//! Each reason is a static CamelCase word (valid as a condition reason and as a bounded metric
//! label); the free text that explains it travels separately as a message.

use std::fmt;

use serde::{Serialize, Serializer};

/// What a reason means for the object it is about, and so how it is counted and reported.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub enum Category {
    /// Something will be written.
    Update,
    UpToDate,
    /// Left alone on purpose; nothing is wrong.
    Skip,
    /// A cluster-wide gate: nothing is written until it clears.
    Hold,
    /// The object needs attention.
    Error,
}

macro_rules! reasons {
    ($($(#[$doc:meta])* $name:ident: $category:ident $(+ $degrades:ident)?),+ $(,)?) => {
        /// Why a MachineSet got its action, or why the whole plan is held.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum Reason { $($(#[$doc])* $name),+ }

        impl Reason {
            pub const ALL: &'static [Reason] = &[$(Reason::$name),+];

            pub fn as_str(self) -> &'static str {
                match self { $(Reason::$name => stringify!($name)),+ }
            }

            pub fn category(self) -> Category {
                match self { $(Reason::$name => Category::$category),+ }
            }

            /// Whether the reason makes `BootImageUpdateDegraded` true: every error, and the
            /// holds the Machine Config Operator's own boot image controller degrades on (it
            /// sets Degraded when it cannot read the golden ConfigMap, the Infrastructure or a
            /// stream: `syncMAPIMachineSets` and `syncMAPIMachineSet`,
            /// pkg/controller/bootimage/ms_helpers.go). A hold that waits for the cluster
            /// (an upgrade, a release) never degrades, however long it lasts: the MCO's
            /// operator fails its whole sync while `BootImageUpdateDegraded=True`
            /// (`syncMachineConfiguration`, pkg/operator/sync.go), so the upgrade it waits for
            /// would never complete.
            pub fn degrades(self) -> bool {
                match self { $(Reason::$name => reasons!(@degrades $category $($degrades)?)),+ }
            }
        }
    };
    (@degrades Error) => { true };
    (@degrades $category:ident degrades) => { true };
    (@degrades $category:ident) => { false };
}

reasons! {
    /// The boot image is older than the golden one (and a spec-2 stub secret, if any, is
    /// upgraded in place first).
    BootImageOutdated: Update,
    /// The golden image failed to boot on a Machine of this MachineSet: the image it replaced is
    /// put back (`--revert-failed-boot-images`), and the MachineSet held off the failed one.
    BootImageReverted: Update,
    UpToDate: UpToDate,

    /// The MachineSet carries the opt-out annotation.
    OptedOut: Skip,
    /// The MachineConfiguration does not select this MachineSet.
    NotSelected: Skip,
    /// Nobody opted this kind in, and the Machine Config Operator of this release does not
    /// update it by default either: nothing is written until the administrator opts in.
    NotOptedIn: Skip,
    /// Another controller (a Cluster API MachineDeployment, ...) owns the object through an
    /// owner reference and would revert us. Hive's MachineSets carry none and are updated, as
    /// upstream does (DESIGN.md section 2, rule 3).
    Owned: Skip,
    /// Another API acts on this object: a Machine API MachineSet whose authoritative API is
    /// Cluster API (or is being handed over), or a paused Cluster API MachineSet mirroring a
    /// Machine API one. Its counterpart is managed instead.
    AuthoritativeElsewhere: Skip,
    /// A Cluster API MachineDeployment, updated only where the administrator opted in
    /// (`--update-machine-deployments`): a new template replaces every one of its machines.
    MachineDeploymentNotOptedIn: Skip,
    /// A Cluster API MachineSet whose infrastructure template is of a kind we cannot update.
    InfrastructureTemplateNotSupported: Skip,
    WindowsMachine: Skip,
    /// The OS stream the machines boot (their `osstream` label) is not in the golden ConfigMap.
    OSStreamNotPublished: Skip,
    /// An image the golden streams and the known-images list do not contain.
    CustomImage: Skip,
    /// An AMI outside the golden streams and known images whose owner EC2 could not be asked
    /// (unreachable, throttled, refused): left alone until EC2 answers.
    Ec2Unavailable: Skip,
    /// An AMI outside the golden streams and known images whose owner EC2 has not told yet.
    Ec2LookupPending: Skip,
    /// A marketplace AMI with no newer AMI of its product and architecture in the region.
    MarketplaceImageNotFound: Skip,
    RegionNotInStream: Skip,
    /// The AMI is chosen by ARN or filters, which we cannot compare with a stream.
    ImageNotById: Skip,
    PlatformNotSupported: Skip,
    /// Azure confidential or trusted-launch VMs need images the marketplace stream lacks.
    SecurityTypeUnsupported: Skip,
    ArchitectureNotSupported: Skip,
    /// A MachineSet of a multi-architecture cluster that does not say its architecture; the
    /// Machine Config Operator skips these too.
    ArchitectureNotDeclared: Skip,
    /// The stub secret the object names does not exist or cannot be read: its boot image is
    /// not moved, since nothing shows a new image can boot from it.
    StubSecretMissing: Skip,
    /// The stub secret is not Ignition spec 3 and cannot be converted here (not JSON, no
    /// version, a spec we do not convert, more than a pointer config): the image is not moved
    /// until an administrator rewrites it.
    StubSecretUnconvertible: Skip,
    /// The stub secret's userData is blanked, as must-gather and `oc adm inspect` write every
    /// secret: its spec cannot be told, so the image is not moved in that plan.
    StubSecretUnverified: Skip,
    /// A Cluster API object's bootstrap secret is Ignition spec 2: this controller does not
    /// rewrite it (the cluster CAPI operator copies it from the Machine API's stub), so the
    /// image is not moved.
    StubSecretIncompatible: Skip,
    /// The stub secret is Ignition spec 2 and another object that names it does not move now
    /// (opted out, a custom image, an error, ...): upgrading it in place would leave that
    /// object's image, which may read spec 2 only, with a stub it cannot boot from, so neither
    /// the stub nor this image moves.
    StubSecretShared: Skip,
    /// The stream publishes no Azure marketplace images at all (OKD, for one).
    MarketplaceImagesNotPublished: Skip,
    /// Azure: the stream publishes no image of the Hyper-V generation the MachineSet boots
    /// (RHEL 10 streams retired the free Gen1 image); the other generation could not boot on its
    /// VM size.
    HyperVGenerationNotPublished: Skip,

    /// vSphere: the template of the golden release is not in vCenter yet; it is to be imported
    /// (the message says from which OVA, as what and where).
    TemplateImportPending: Skip,
    /// vSphere: the template of the golden release is being imported.
    TemplateImporting: Skip,
    /// vSphere: vCenter is being asked which RHCOS release the MachineSet's template is; a
    /// template at the golden release is kept, another is replaced by an import.
    TemplateVersionPending: Skip,
    /// vSphere: the cluster's templates cannot be placed (no failure domains in the
    /// Infrastructure, or no infrastructure name to recognise them by); left as they are.
    VSphereTopologyUnknown: Skip,
    /// vSphere: the MachineSet's workspace is in none of the Infrastructure's failure domains,
    /// so there is nowhere to import its template; left as it is (the MCO skips it too).
    FailureDomainNotFound: Skip,

    /// The golden image failed to boot here and was reverted: the MachineSet stays on its
    /// previous image until the golden image changes or the hold annotation is removed.
    BootImageHeld: Skip,

    /// A warning beside a decision: the object uses an annotation key of an earlier release.
    DeprecatedAnnotation: Skip,

    MalformedObject: Error,
    /// A Cluster API MachineSet's infrastructure template does not exist or cannot be read.
    InfrastructureTemplateMissing: Error,
    InvalidProviderSpec: Error,
    InvalidSelector: Error,
    UnknownArchitecture: Error,
    ArchitectureUndetermined: Error,
    ArchitectureNotInStream: Error,
    /// The current image belongs to another architecture than the one decided: one of them is
    /// wrong, and patching would put machines on an image they cannot boot.
    ArchitectureMismatch: Error,
    ImageNotInStream: Error,
    /// The golden ConfigMap's entry for the OS stream or architecture this object boots is
    /// malformed: nothing is written to it; objects of other streams and architectures move on.
    StreamEntryInvalid: Error,
    /// Someone keeps reverting our patch; we stop instead of fighting.
    HotLoop: Error,
    /// vSphere: importing the template of the golden release failed (download, digest, upload).
    TemplateImportFailed: Error,
    /// vSphere: the host of the OVA to import (the stream's, or the administrator's mirror)
    /// could not be connected to: a disconnected cluster without a mirror. An error, so it
    /// degrades, as the MCO's does: its `createNewVMTemplate` returns the failed
    /// `cache.DownloadOva` ("failed to download ..."), and `syncMAPIMachineSets` sets
    /// `BootImageUpdateDegraded` from every MachineSet's error (vsphere_helpers.go and
    /// ms_helpers.go, pkg/controller/bootimage, release-4.20 to 4.22).
    OvaUnreachable: Error,
    /// vSphere: vCenter could not be reached or refused the machine API's credentials.
    VCenterUnavailable: Error,
    PatchFailed: Error,

    MachineConfigurationMissing: Hold,
    InfrastructureMissing: Hold + degrades,
    GoldenConfigMapMissing: Hold + degrades,
    GoldenStreamInvalid: Hold + degrades,
    ReleaseVersionMissing: Hold,
    /// The cluster serves ClusterVersions but `version` is absent, unreadable or has no status.
    ClusterVersionUnknown: Hold,
    ClusterUpgrading: Hold,
    ReleaseMismatch: Hold,
    Paused: Hold,
    /// Another controller (the Machine Config Operator's own boot image controller) manages
    /// boot images on this cluster: we only report.
    AnotherManagerActive: Hold,
    /// `--report-only`: an administrator asked us to plan and report without writing.
    ReportOnly: Hold,
}

impl Reason {
    /// Whether a hold with this reason is reported (our own condition, a metric, an alert) when
    /// it lasts too long: holds that clear by themselves, unlike a pause (an administrator's
    /// choice), a missing MachineConfiguration (no status to report on) or holds that degrade
    /// at once. Never as `BootImageUpdateDegraded`: see [`Reason::degrades`].
    pub fn reported_when_lasting(self) -> bool {
        self.category() == Category::Hold
            && !self.degrades()
            && !matches!(
                self,
                Reason::Paused
                    | Reason::MachineConfigurationMissing
                    | Reason::AnotherManagerActive
                    | Reason::ReportOnly
            )
    }

    /// Whether an object with this reason is still on its way to its golden image: the image
    /// it needs is being imported or looked up, and the object moves once that is done. Such
    /// objects keep `BootImageUpdateProgressing` True, as upstream's does while machine
    /// resources are unprocessed (`updateConditions`,
    /// pkg/controller/bootimage/boot_image_controller.go), so that waiting for it to turn
    /// False means the work is done.
    pub fn on_its_way(self) -> bool {
        matches!(
            self,
            Reason::Ec2LookupPending
                | Reason::TemplateVersionPending
                | Reason::TemplateImportPending
                | Reason::TemplateImporting
        )
    }

    /// Whether this hold means we leave boot images (and their shared conditions) to another
    /// manager, or were told to only report.
    pub fn stands_down(self) -> bool {
        matches!(self, Reason::AnotherManagerActive | Reason::ReportOnly)
    }

    /// Every reason of one category, in declaration order.
    pub fn of(category: Category) -> impl Iterator<Item = Reason> {
        Reason::ALL
            .iter()
            .copied()
            .filter(move |r| r.category() == category)
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for Reason {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The condition-reason pattern the Kubernetes API enforces.
    fn is_valid_condition_reason(s: &str) -> bool {
        let bytes = s.as_bytes();
        let inner = |c: &u8| c.is_ascii_alphanumeric() || b"_,:".contains(c);
        bytes.first().is_some_and(u8::is_ascii_alphabetic)
            && bytes.iter().all(inner)
            && bytes
                .last()
                .is_some_and(|c| c.is_ascii_alphanumeric() || *c == b'_')
    }

    #[test]
    fn errors_always_degrade_and_skips_never_do() {
        for r in Reason::ALL {
            match r.category() {
                Category::Error => assert!(r.degrades(), "{r}"),
                Category::Skip | Category::Update | Category::UpToDate => {
                    assert!(!r.degrades(), "{r}")
                }
                Category::Hold => {}
            }
        }
        assert!(Reason::GoldenConfigMapMissing.degrades());
        assert!(!Reason::ClusterUpgrading.degrades());
    }

    #[test]
    fn every_reason_is_a_valid_condition_reason() {
        for r in Reason::ALL {
            assert!(is_valid_condition_reason(r.as_str()), "{r}");
        }
    }
}
