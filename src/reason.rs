//! Stable reasons: the one vocabulary shared by plans, conditions, Events, logs and metrics.
//!
//! Each reason is a static CamelCase word (valid as a condition reason and as a bounded metric
//! label); the free text that explains it travels separately as a message.

use std::fmt;

use serde::Serialize;

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

/// How the Machine Config Operator counts a MachineSet when it updates the boot-image skew
/// record (`syncMAPIMachineSets` and `syncMAPIMachineSet`, pkg/controller/bootimage/ms_helpers.go),
/// as `controller/status/boot_image_fields.rs` moves it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SkewTally {
    /// Updated or already current (`reconcileSkipped` false, no error): the record may claim
    /// its image.
    Reconciled,
    /// `reconcileSkipped`: left on an image that needs an administrator, so the record falls
    /// back to the install release (`resetClusterBootImage`).
    Skipped,
    /// A sync error, or an update still under way: the record stays as it is.
    Unsettled,
    /// Excluded on purpose (another OS stream, Windows, ...) or not selected: not counted.
    NotCounted,
}

/// Each reason is `Name: Category`, then for a skip `(skew: SkewTally)`, how a MachineSet skipped
/// for it is counted in the skew record (every skip says it, or the table does not build; the
/// comment beside it says why, "ours" marking a reason upstream has no counterpart for), then
/// `+ degrades` for a hold that degrades.
macro_rules! reasons {
    ($($(#[$doc:meta])* $name:ident: $category:ident $((skew: $tally:ident))? $(+ $degrades:ident)?),+ $(,)?) => {
        /// Why a MachineSet got its action, or why the whole plan is held.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
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

            /// How a Machine API MachineSet skipped for this reason counts in the skew record.
            /// A hold skips every object, and upstream does not sync then, so nothing is
            /// recorded; the other categories are not reasons of a skip, and were one to be,
            /// leaving the record is the cautious reading: both `Unsettled`.
            pub fn skew_tally(self) -> SkewTally {
                match self { $(Reason::$name => reasons!(@tally $category $($tally)?)),+ }
            }
        }
    };
    (@tally Skip) => { compile_error!("a skip says how the skew record counts it: (skew: ...)") };
    (@tally Skip $tally:ident) => { SkewTally::$tally };
    (@tally $category:ident) => { SkewTally::Unsettled };
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
    // Ours. Upstream has none: in All mode it manages every MachineSet, and leaving one out
    // takes a Partial selection, which turns skew enforcement Manual. An opted-out MachineSet
    // keeps whatever image it has, which is exactly what `reconcileSkipped` stands for.
    OptedOut: Skip(skew: Skipped),
    /// The MachineConfiguration does not select this MachineSet.
    // Not in the lister's list at all: the selector leaves them out.
    NotSelected: Skip(skew: NotCounted),
    /// Nobody opted this kind in, and the Machine Config Operator of this release does not
    /// update it by default either: nothing is written until the administrator opts in.
    // Not in the lister's list, as the MCO's default leaves out what nobody opted in.
    NotOptedIn: Skip(skew: NotCounted),
    /// Another controller (a Cluster API MachineDeployment, ...) owns the object through an
    /// owner reference and would revert us. Hive's MachineSets carry none and are updated, as
    /// upstream does (docs/how-it-decides.md, "Gates and rules", rule 3).
    // `reconcileSkipped` for ownerReferences (`syncMAPIMachineSet`).
    Owned: Skip(skew: Skipped),
    /// Another API acts on this object: a Machine API MachineSet whose authoritative API is
    /// Cluster API (or is being handed over), or a paused Cluster API MachineSet mirroring a
    /// Machine API one. Its counterpart is managed instead.
    // Returned as not skipped, with no error: a MachineSet whose Machine API is not
    // authoritative is "out of scope for the MAPI path" (`syncMAPIMachineSet`'s doc comment).
    AuthoritativeElsewhere: Skip(skew: NotCounted),
    /// A Cluster API MachineDeployment, updated only where the administrator opted in
    /// (`--update-machine-deployments`): a new template replaces every one of its machines.
    // Ours, Cluster API only (never on a Machine API MachineSet): nothing to count.
    MachineDeploymentNotOptedIn: Skip(skew: NotCounted),
    /// A Cluster API MachineSet whose infrastructure template is of a kind we cannot update.
    // Ours, Cluster API only: nothing to count.
    InfrastructureTemplateNotSupported: Skip(skew: NotCounted),
    // Returned as not skipped, with no error (`syncMAPIMachineSet`).
    WindowsMachine: Skip(skew: NotCounted),
    /// The OS stream the machines boot (their `osstream` label) is not in the golden ConfigMap.
    // Returned as not skipped, with no error: a non-default OS stream label
    // (`syncMAPIMachineSet`).
    OSStreamNotPublished: Skip(skew: NotCounted),
    /// An image the golden streams and the known-images list do not contain.
    // `reconcileSkipped`: an AMI of an unknown owner (`reconcileAWSProviderSpec`), a GCP image
    // outside rhcos-cloud (`reconcileGCPProviderSpec`).
    CustomImage: Skip(skew: Skipped),
    /// An AMI outside the golden streams and known images whose owner EC2 could not be asked
    /// (unreachable, throttled, refused): left alone until EC2 answers.
    // Ours: EC2 unreachable. Upstream asks EC2 within its sync: a failure there is an error.
    Ec2Unavailable: Skip(skew: Unsettled),
    /// An AMI outside the golden streams and known images whose owner EC2 has not told yet.
    // Ours: EC2 not asked yet; until it answers nothing is known.
    Ec2LookupPending: Skip(skew: Unsettled),
    /// A marketplace AMI with no newer AMI of its product and architecture in the region.
    // `reconcileSkipped`: a marketplace product without a fitting AMI
    // (`reconcileAWSProviderSpec`).
    MarketplaceImageNotFound: Skip(skew: Skipped),
    // `reconcileSkipped`: a region the stream lacks (`reconcileAWSProviderSpec`).
    RegionNotInStream: Skip(skew: Skipped),
    /// The AMI is chosen by ARN or filters, which we cannot compare with a stream.
    // `reconcileSkipped`: an AMI not by id (`reconcileAWSProviderSpec`).
    ImageNotById: Skip(skew: Skipped),
    // Returned as not skipped, with no error: a platform without a rule (`checkMachineSet`).
    PlatformNotSupported: Skip(skew: NotCounted),
    /// Azure confidential or trusted-launch VMs need images the marketplace stream lacks.
    // `reconcileSkipped` for an Azure securityType (confidential VMs, trusted launch) since MCO
    // PR 6404 ("bootimage: fix Confidential Cluster skip", bf5c1c18c,
    // `reconcileAzureProviderSpec`): such a MachineSet stays on its image, so the record must
    // not claim it.
    SecurityTypeUnsupported: Skip(skew: Skipped),
    // Returned as not skipped, with no error: Azure's ppc64le/s390x
    // (`reconcileAzureProviderSpec`).
    ArchitectureNotSupported: Skip(skew: NotCounted),
    /// A MachineSet of a multi-architecture cluster that does not say its architecture; the
    /// Machine Config Operator skips these too.
    // `reconcileSkipped`: an undeclared architecture on a multi-arch cluster
    // (`syncMAPIMachineSet`).
    ArchitectureNotDeclared: Skip(skew: Skipped),
    /// The stub secret the object names does not exist or cannot be read: its boot image is
    /// not moved, since nothing shows a new image can boot from it.
    // A stub that cannot boot the new image (this one and the four below): upstream's
    // `upgradeStubIgnitionIfRequired` (pkg/controller/bootimage/helpers.go) fails the
    // MachineSet's sync, an error that leaves the record as it is.
    StubSecretMissing: Skip(skew: Unsettled),
    /// The stub secret is not Ignition spec 3 and cannot be converted here (not JSON, no
    /// version, a spec we do not convert, more than a pointer config): the image is not moved
    /// until an administrator rewrites it.
    StubSecretUnconvertible: Skip(skew: Unsettled),
    /// The stub secret's userData is blanked, as must-gather and `oc adm inspect` write every
    /// secret: its spec cannot be told, so the image is not moved in that plan.
    StubSecretUnverified: Skip(skew: Unsettled),
    /// A Cluster API object's bootstrap secret is Ignition spec 2: this controller does not
    /// rewrite it (the cluster CAPI operator copies it from the Machine API's stub), so the
    /// image is not moved.
    StubSecretIncompatible: Skip(skew: Unsettled),
    /// The stub secret is Ignition spec 2 and another object that names it does not move now
    /// (opted out, a custom image, an error, ...): upgrading it in place would leave that
    /// object's image, which may read spec 2 only, with a stub it cannot boot from, so neither
    /// the stub nor this image moves.
    StubSecretShared: Skip(skew: Unsettled),
    /// The stream publishes no Azure marketplace images at all (OKD, for one).
    // `reconcileSkipped`: a stream without Azure marketplace images
    // (`reconcileAzureProviderSpec`).
    MarketplaceImagesNotPublished: Skip(skew: Skipped),
    /// Azure: the stream publishes no image of the Hyper-V generation the MachineSet boots
    /// (RHEL 10 streams retired the free Gen1 image); the other generation could not boot on its
    /// VM size.
    // `reconcileSkipped`, as a stream without the marketplace image (`reconcileAzureProviderSpec`).
    HyperVGenerationNotPublished: Skip(skew: Skipped),

    /// vSphere: the template of the golden release is not in vCenter yet; it is to be imported
    /// (the message says from which OVA, as what and where).
    // Ours: a vSphere template on its way (this one and the two below). Upstream imports
    // templates within its sync: a failure there is an error, and until it is done nothing is
    // known.
    TemplateImportPending: Skip(skew: Unsettled),
    /// vSphere: the template of the golden release is being imported.
    TemplateImporting: Skip(skew: Unsettled),
    /// vSphere: vCenter is being asked which RHCOS release the MachineSet's template is; a
    /// template at the golden release is kept, another is replaced by an import.
    TemplateVersionPending: Skip(skew: Unsettled),
    /// vSphere: the cluster's templates cannot be placed (no failure domains in the
    /// Infrastructure, or no infrastructure name to recognise them by); left as they are.
    // Ours: no failure domains or infrastructure name to place templates by; upstream's
    // nearest is a nil vSphere platform spec (`reconcileVSphereProviderSpec`), not counted.
    VSphereTopologyUnknown: Skip(skew: NotCounted),
    /// vSphere: the MachineSet's workspace is in none of the Infrastructure's failure domains,
    /// so there is nowhere to import its template; left as it is (the MCO skips it too).
    // `reconcileSkipped`: a vSphere workspace in no failure domain (MCO PR 6477, after
    // 7ff337a4f).
    FailureDomainNotFound: Skip(skew: Skipped),

    /// The golden image failed to boot here and was reverted: the MachineSet stays on its
    /// previous image until the golden image changes or the hold annotation is removed.
    // Ours. Upstream never reverts; the MachineSet is on an image an administrator must look
    // at, as with `reconcileSkipped`.
    BootImageHeld: Skip(skew: Skipped),

    /// A warning beside a decision: the object uses an annotation key of an earlier release.
    // Ours: a warning beside a decision rather than one, nothing to count.
    DeprecatedAnnotation: Skip(skew: NotCounted),

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
    fn only_a_skip_can_move_the_skew_record_and_one_on_its_way_never_does() {
        for r in Reason::ALL {
            if r.category() != Category::Skip || r.on_its_way() {
                assert_eq!(r.skew_tally(), SkewTally::Unsettled, "{r}");
            }
            // Reconciled is what an up-to-date decision counts as, never a skip's reason.
            assert_ne!(r.skew_tally(), SkewTally::Reconciled, "{r}");
        }
        assert_eq!(Reason::OptedOut.skew_tally(), SkewTally::Skipped);
        assert_eq!(Reason::NotSelected.skew_tally(), SkewTally::NotCounted);
    }

    #[test]
    fn every_reason_is_a_valid_condition_reason() {
        for r in Reason::ALL {
            assert!(is_valid_condition_reason(r.as_str()), "{r}");
        }
    }
}
