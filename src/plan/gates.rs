//! The cluster-wide gates, evaluated once per plan: whether anything may be planned, and
//! whether planned changes may be written.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::ClusterSnapshot;
use super::decision::Blocked;
use super::other_managers;
use super::selection::{Declared, Origin, Selection, release_of};
use crate::api::{ClusterVersionStatus, MachineConfiguration, ObjectMeta};
use crate::arch::Arch;
use crate::golden_stream::{self, GoldenConfig};
use crate::known_images::KnownImages;
use crate::machine_kind::MachineKind;
use crate::names::{LEGACY_PAUSE_ANNOTATION, PAUSE_ANNOTATION};
use crate::platform::Platform;
use crate::reason::Reason;

/// Everything the gates established, when they let planning go ahead.
pub(super) struct Ready {
    pub platform: Platform,
    pub golden: Arc<GoldenConfig>,
    /// The snapshot's known images plus the golden stream's own.
    pub known_images: KnownImages,
    /// Which objects of each kind are selected, and where that came from.
    pub selections: BTreeMap<MachineKind, (Selection, Origin)>,
    /// The running release's major and minor version, as ClusterVersion says.
    pub release: Option<(u64, u64)>,
    pub multi_arch: bool,
    /// The control plane's architecture, or why it cannot be told.
    pub control_plane_arch: Result<Arch, String>,
    /// A gate that allows planning but not writing (pause, upgrade in progress, ...).
    pub hold: Option<Blocked>,
}

impl Ready {
    /// The gates, in the order of docs/how-it-decides.md ("Gates and rules"): MachineConfiguration
    /// readable, no other active boot-image manager, cluster stable and release matching, platform
    /// known, golden ConfigMap present and parseable, updates not paused. The first that fails is
    /// the one reported, so nothing this controller judges of its inputs is reported while another
    /// manager owns the shared conditions, nor while an upgrade is under way (the MCO waits for a
    /// stable cluster before anything else: `syncAll` and `isClusterStable`,
    /// openshift/machine-config-operator, pkg/controller/bootimage/boot_image_controller.go, branch
    /// release-4.21). Planning goes ahead whenever the platform and the golden ConfigMap can be
    /// read, whatever holds the writes.
    pub fn evaluate(
        snapshot: &ClusterSnapshot,
        arch_override: Option<Arch>,
        report_only: bool,
    ) -> Result<Ready, Blocked> {
        let mc = snapshot.machine_configuration.as_ref().ok_or_else(|| {
            blocked(
                Reason::MachineConfigurationMissing,
                "MachineConfiguration cluster does not exist; it says which MachineSets to update",
            )
        })?;
        let platform = platform(snapshot).ok_or_else(|| {
            blocked(
                Reason::InfrastructureMissing,
                "Infrastructure cluster is missing or has no status.platformStatus.type; the \
                 platform decides which images apply",
            )
        });
        let cv_status = snapshot
            .cluster_version
            .as_ref()
            .and_then(|cv| cv.status.as_ref());
        let release = cv_status.and_then(release_of);
        let selections = selections(snapshot);
        let golden = golden(snapshot, &selections);
        let first_failing = stand_down(mc, platform.as_ref().ok(), report_only)
            .or_else(|| stability_hold(snapshot, cv_status))
            .or_else(|| {
                let cm = snapshot.golden.as_ref()?;
                release_hold(cv_status?, golden_stream::release_version(cm).as_deref())
            })
            .or_else(|| platform.as_ref().err().cloned())
            .or_else(|| golden.as_ref().err().cloned())
            .or_else(|| pause_hold(mc));
        let (platform, golden) = match (platform, golden) {
            (Ok(platform), Ok(golden)) => (platform, golden),
            (Err(failed), _) | (_, Err(failed)) => return Err(first_failing.unwrap_or(failed)),
        };
        let mut known_images = snapshot.known_images.clone();
        known_images.extend(golden.image_references());
        let multi_arch = cv_status
            .and_then(|s| s.desired.as_ref())
            .and_then(|d| d.architecture.as_deref())
            == Some("Multi");
        Ok(Ready {
            selections,
            release,
            platform,
            golden,
            known_images,
            multi_arch,
            control_plane_arch: arch_override
                .map(Ok)
                .unwrap_or_else(|| control_plane_arch(&snapshot.control_plane_nodes)),
            hold: first_failing,
        })
    }
}

/// How the MachineConfiguration selects each kind on the snapshot's platform and release;
/// nothing without a MachineConfiguration or a platform. The controller asks it before the
/// snapshot is complete, to know which stub secrets to watch.
pub fn selections(snapshot: &ClusterSnapshot) -> BTreeMap<MachineKind, (Selection, Origin)> {
    let (Some(mc), Some(platform)) = (&snapshot.machine_configuration, platform(snapshot)) else {
        return BTreeMap::new();
    };
    let release = (snapshot.cluster_version.as_ref())
        .and_then(|cv| cv.status.as_ref())
        .and_then(release_of);
    let declared = Declared::read(mc);
    let selection = |kind| Selection::for_kind(&declared, kind, &platform, release);
    MachineKind::ALL
        .into_iter()
        .map(|kind| (kind, selection(kind)))
        .collect()
}

fn blocked(reason: Reason, message: impl Into<String>) -> Blocked {
    Blocked {
        reason,
        message: message.into(),
    }
}

/// The golden ConfigMap, read only when some kind of machine resource is enrolled, as the MCO
/// reads it only for a machine resource it enrolls (`syncMAPIMachineSet`,
/// pkg/controller/bootimage/ms_helpers.go, release-4.21): with nothing enrolled, a missing or
/// malformed ConfigMap is nobody's concern and an empty one stands in. Its entries are judged
/// one stream and architecture at a time, by the objects that use them ([`GoldenConfig`]).
fn golden(
    snapshot: &ClusterSnapshot,
    selections: &BTreeMap<MachineKind, (Selection, Origin)>,
) -> Result<Arc<GoldenConfig>, Blocked> {
    let enrolled = selections.values().any(|(s, _)| *s != Selection::None);
    let read = match snapshot.golden.as_ref() {
        None => Err(blocked(
            Reason::GoldenConfigMapMissing,
            "the golden ConfigMap coreos-bootimages does not exist; the Machine Config \
             Operator publishes it",
        )),
        Some(cm) => (GoldenConfig::from_config_map(cm).map(Arc::new)).map_err(|e| {
            let message = format!("the golden ConfigMap cannot be used: {e}");
            blocked(Reason::GoldenStreamInvalid, message)
        }),
    };
    match read {
        Err(_) if !enrolled => Ok(Arc::default()),
        read => read,
    }
}

/// The architecture every control-plane Node reports in its `kubernetes.io/arch` label; never
/// a guess: without Nodes, or with Nodes that disagree, there is no answer.
fn control_plane_arch(nodes: &BTreeMap<String, Option<String>>) -> Result<Arch, String> {
    let mut found: Option<Arch> = None;
    for (node, label) in nodes {
        let Some(label) = label else {
            return Err(format!(
                "control-plane Node {node} has no kubernetes.io/arch label"
            ));
        };
        let arch: Arch = label
            .parse()
            .map_err(|e| format!("control-plane Node {node}: {e}"))?;
        match found {
            Some(other) if other != arch => {
                return Err(format!(
                    "control-plane Nodes report different architectures ({other} and {arch})"
                ));
            }
            _ => found = Some(arch),
        }
    }
    found.ok_or_else(|| {
        "no control-plane Node is visible (Nodes labelled node-role.kubernetes.io/control-plane \
         or node-role.kubernetes.io/master); set --control-plane-arch"
            .to_string()
    })
}

fn platform(snapshot: &ClusterSnapshot) -> Option<Platform> {
    snapshot
        .infrastructure
        .as_ref()?
        .status
        .as_ref()?
        .platform_status
        .as_ref()
        .filter(|p| !p.type_.is_empty())
        .map(Platform::from_status)
}

/// The annotation key that pauses updates, if any: ours, else the deprecated one.
pub fn pause_key(meta: &ObjectMeta) -> Option<&'static str> {
    let annotations = meta.annotations.as_ref()?;
    [PAUSE_ANNOTATION, LEGACY_PAUSE_ANNOTATION]
        .into_iter()
        .find(|key| annotations.get(*key).is_some_and(|v| v == "true"))
}

fn pause_hold(mc: &MachineConfiguration) -> Option<Blocked> {
    let key = pause_key(&mc.metadata)?;
    let mut message = format!(
        "boot image updates are paused by annotation {key}=true on MachineConfiguration {}",
        mc.metadata.name.as_deref().unwrap_or("cluster")
    );
    if key == LEGACY_PAUSE_ANNOTATION {
        message.push_str(&format!(
            "; that key is deprecated and will be ignored in the next release: annotate \
             {PAUSE_ANNOTATION}=true instead"
        ));
    }
    Some(blocked(Reason::Paused, message))
}

/// Report-only when another manager owns the boot-image status, or when asked to. Never the
/// other way round: no flag makes us write beside another manager.
fn stand_down(
    mc: &MachineConfiguration,
    platform: Option<&Platform>,
    report_only: bool,
) -> Option<Blocked> {
    let others = other_managers::other_managers(mc);
    if !others.is_empty() {
        let who: Vec<String> = others
            .iter()
            .map(other_managers::OtherManager::describe)
            .collect();
        // Where the MCO runs its own boot image controller (CheckBootImagePlatform,
        // pkg/controller/common/featuregates.go), that is almost certainly who it is.
        let likely = match platform.filter(|p| p.managed_by_default()) {
            Some(platform) => format!(
                "; on {} the Machine Config Operator runs its own boot image controller on \
                 recent releases",
                platform.name()
            ),
            None => String::new(),
        };
        return Some(blocked(
            Reason::AnotherManagerActive,
            format!(
                "another boot image manager is active on MachineConfiguration {} ({}){likely}; \
                 this controller only plans and reports, and takes over by itself once that \
                 manager's boot-image status is gone (see docs/operations.md, Switching over and back)",
                mc.metadata.name.as_deref().unwrap_or("cluster"),
                who.join("; ")
            ),
        ));
    }
    report_only.then(|| {
        let message = "started with --report-only: this controller only plans and reports";
        blocked(Reason::ReportOnly, message)
    })
}

/// Whether the cluster is stable, as far as ClusterVersion tells; the release is matched
/// separately ([`release_hold`]) once the golden ConfigMap's release is known. Mid-upgrade the
/// golden ConfigMap may already describe the next release while machines still run the old one;
/// writing then could roll MachineSets forward too early.
fn stability_hold(
    snapshot: &ClusterSnapshot,
    cv_status: Option<&ClusterVersionStatus>,
) -> Option<Blocked> {
    let Some(status) = cv_status else {
        return snapshot.cluster_version_served.then(|| {
            blocked(
                Reason::ClusterVersionUnknown,
                "ClusterVersion version is missing, unreadable or has no status, so neither the \
                 running release nor a running upgrade is known; writes wait until it can be read",
            )
        });
    };
    let Some(current) = status.history.first() else {
        return Some(blocked(
            Reason::ClusterUpgrading,
            "ClusterVersion has no update history yet; waiting for the install to complete",
        ));
    };
    (current.state != "Completed").then(|| {
        blocked(
            Reason::ClusterUpgrading,
            format!(
                "the cluster is updating to {} ({}); boot images are updated once it completes",
                current.version, current.state
            ),
        )
    })
}

/// Whether the golden ConfigMap belongs to the release the (stable) cluster runs.
fn release_hold(status: &ClusterVersionStatus, cm_release: Option<&str>) -> Option<Blocked> {
    let current = status.history.first()?;
    let Some(cm_release) = cm_release else {
        return Some(blocked(
            Reason::ReleaseVersionMissing,
            "the golden ConfigMap has no releaseVersion, so it cannot be matched to the cluster's \
             release",
        ));
    };
    if same_release(cm_release, &current.version) {
        return None;
    }
    Some(blocked(
        Reason::ReleaseMismatch,
        format!(
            "the golden ConfigMap is for release {cm_release} but the cluster runs {}; waiting \
             for the Machine Config Operator to publish this release's boot images",
            current.version
        ),
    ))
}

/// Build metadata is not part of a version's identity (semver 2.0 section 10), but
/// `semver::Version`'s `==` compares it.
fn same_release(a: &str, b: &str) -> bool {
    match (semver::Version::parse(a), semver::Version::parse(b)) {
        (Ok(a), Ok(b)) => a.cmp_precedence(&b).is_eq(),
        _ => a == b,
    }
}
