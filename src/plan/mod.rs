//! The planner: from a snapshot of the cluster, what must change on each machine resource, and
//! why nothing changes on the others. Pure: both the controller and the `plan` command call it.
//!
//! Global gates come first (see [`Planner::new`]); then each MachineSet goes through the rules of
//! DESIGN.md section 2 in order, and the first rule that applies decides.

pub mod record;
pub mod selection;
pub mod stub;

use std::collections::BTreeMap;
use std::fmt::Write as _;

use jiff::{SignedDuration, Timestamp};
use json_patch::{PatchOperation, ReplaceOperation};
use jsonptr::PointerBuf;
use serde::Serialize;
use serde_json::Value;

use crate::api::{
    ClusterVersion, ConfigMap, ControlPlaneMachineSet, Infrastructure, MachineConfiguration,
    MachineSet, MachineTemplate, ObjectMeta, Secret,
};
use crate::arch::Arch;
use crate::known_images::KnownImages;
use crate::platform::{ImageOutcome, Platform, RuleContext};
use crate::reason::Reason;
use crate::stream::GoldenConfig;
use record::HistoryEntry;
pub use selection::{Resource, Selection};

/// Per-MachineSet opt-out; checked before anything else.
pub const OPT_OUT_ANNOTATION: &str = "machineconfiguration.openshift.io/boot-image-updates";
pub const OPT_OUT_VALUE: &str = "disabled";
/// On the MachineConfiguration: stop all writes (acknowledged by `BootImageUpdatePaused`).
pub const PAUSE_ANNOTATION: &str = "machineconfiguration.openshift.io/boot-image-updates-paused";
/// The cluster autoscaler's scale-from-zero labels; the only place a MachineSet names its arch.
pub const AUTOSCALER_LABELS_ANNOTATION: &str = "capacity.cluster-autoscaler.kubernetes.io/labels";
pub const OS_ID_LABEL: &str = "machine.openshift.io/os-id";
pub const OS_STREAM_LABEL: &str = "machineconfiguration.openshift.io/osstream";

/// Where the provider spec lives in each kind of machine resource.
const MACHINE_SET_PROVIDER_SPEC: &str = "/spec/template/spec/providerSpec/value";
const CONTROL_PLANE_PROVIDER_SPEC: &str =
    "/spec/template/machines_v1beta1_machine_openshift_io/spec/providerSpec/value";

/// The cluster-wide inputs of a plan.
#[derive(Clone, Debug, Default)]
pub struct Cluster {
    pub machine_configuration: Option<MachineConfiguration>,
    pub infrastructure: Option<Infrastructure>,
    pub cluster_version: Option<ClusterVersion>,
    pub golden: Option<ConfigMap>,
    /// Stub secrets by (namespace, name). Only the managed ones are consulted.
    pub secrets: BTreeMap<(String, String), Secret>,
    /// Known images besides the golden ConfigMap's own: `--known-images-file` and those the
    /// controller remembers from earlier releases.
    pub known_images: KnownImages,
}

#[derive(Clone, Debug)]
pub struct Options {
    /// Architecture of MachineSets that do not say theirs, and of control-plane machines.
    pub control_plane_arch: Arch,
    pub now: Timestamp,
    /// Patches to the same value within the window after which we stop (someone reverts us).
    pub hot_loop_threshold: usize,
    pub hot_loop_window: SignedDuration,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            control_plane_arch: Arch::Amd64,
            now: Timestamp::now(),
            hot_loop_threshold: 3,
            hot_loop_window: SignedDuration::from_hours(1),
        }
    }
}

/// An object that could not be read as its kind; it becomes an error entry, never a panic.
#[derive(Clone, Debug, PartialEq)]
pub struct Malformed {
    pub namespace: String,
    pub name: String,
    pub error: String,
}

/// Why nothing is written at all.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Blocked {
    pub reason: Reason,
    pub message: String,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub enum Action {
    Update,
    UpToDate,
    Skip,
    Error,
}

impl Action {
    pub const ALL: [Action; 4] = [
        Action::Update,
        Action::UpToDate,
        Action::Skip,
        Action::Error,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Action::Update => "Update",
            Action::UpToDate => "UpToDate",
            Action::Skip => "Skip",
            Action::Error => "Error",
        }
    }
}

/// A compared value: what the object has, and what we write (or would have written).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Values<T> {
    pub current: Option<T>,
    pub target: Option<T>,
}

impl<T: Clone> Values<T> {
    /// The recorded form of a value we replace; `None` when it does not change.
    fn change(&self) -> Option<record::Change<T>> {
        match (&self.current, &self.target) {
            (Some(from), Some(to)) => Some(record::Change {
                from: from.clone(),
                to: to.clone(),
            }),
            _ => None,
        }
    }
}

/// The decision for one machine resource.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Entry {
    pub namespace: String,
    pub name: String,
    pub action: Action,
    pub reason: Reason,
    pub message: String,
    pub boot_image: Values<Value>,
    pub user_data_secret: Values<String>,
    /// RFC 6902 operations on the object: a `test` then a `replace` for each changed value.
    pub patch: Vec<PatchOperation>,
    /// The newest change this controller recorded on the object, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_change: Option<HistoryEntry>,
}

impl Entry {
    pub(crate) fn new(
        namespace: &str,
        name: &str,
        action: Action,
        reason: Reason,
        message: String,
    ) -> Self {
        Entry {
            namespace: namespace.to_string(),
            name: name.to_string(),
            action,
            reason,
            message,
            boot_image: Values::default(),
            user_data_secret: Values::default(),
            patch: Vec::new(),
            last_change: None,
        }
    }

    /// The history entry to record when this Update is applied.
    pub fn history_entry(&self, now: Timestamp, golden: &GoldenConfig) -> HistoryEntry {
        HistoryEntry {
            time: now.to_string(),
            release: golden.release_version.clone(),
            stream: golden.stream.stream.clone(),
            boot_image: self.boot_image.change(),
            user_data_secret: self.user_data_secret.change(),
        }
    }

    /// Identity of the values this entry writes, for the hot-loop guard.
    pub fn target_key(&self) -> String {
        record::target_key(
            self.boot_image.target.as_ref(),
            self.user_data_secret.target.as_deref(),
        )
    }
}

/// The whole decision.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Plan {
    pub blocked: Option<Blocked>,
    pub machine_sets: Vec<Entry>,
    pub control_plane_machine_sets: Vec<Entry>,
}

/// Plans every machine resource of a snapshot, sorted by namespace then name.
pub fn plan(
    cluster: &Cluster,
    machine_sets: &[Result<MachineSet, Malformed>],
    control_plane_machine_sets: &[Result<ControlPlaneMachineSet, Malformed>],
    options: &Options,
) -> Plan {
    let planner = Planner::new(cluster, options);
    let mut machine_sets: Vec<Entry> = machine_sets
        .iter()
        .map(|ms| planner.machine_set(ms))
        .collect();
    let mut control_plane: Vec<Entry> = control_plane_machine_sets
        .iter()
        .map(|cp| planner.control_plane_machine_set(cp))
        .collect();
    for entries in [&mut machine_sets, &mut control_plane] {
        entries.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
    }
    Plan {
        blocked: planner.blocked().cloned(),
        machine_sets,
        control_plane_machine_sets: control_plane,
    }
}

/// The planner with the global gates evaluated once; plans one resource at a time so the
/// controller can re-plan a single MachineSet when only it changed.
pub struct Planner<'a> {
    cluster: &'a Cluster,
    options: &'a Options,
    state: Result<Ready, Blocked>,
}

/// Everything the gates established.
struct Ready {
    platform: Platform,
    golden: GoldenConfig,
    known_images: KnownImages,
    machine_sets: Selection,
    control_plane: Selection,
    multi_arch: bool,
    /// A gate that allows planning but not writing (pause, upgrade in progress, ...).
    hold: Option<Blocked>,
}

/// The parts of a MachineSet or ControlPlaneMachineSet the rules look at.
struct MachineResource<'a> {
    kind: Resource,
    meta: &'a ObjectMeta,
    template: Option<&'a MachineTemplate>,
}

impl<'a> Planner<'a> {
    pub fn new(cluster: &'a Cluster, options: &'a Options) -> Self {
        Planner {
            cluster,
            options,
            state: Ready::evaluate(cluster),
        }
    }

    /// The gate that blocks all writes, if any.
    pub fn blocked(&self) -> Option<&Blocked> {
        match &self.state {
            Err(blocked) => Some(blocked),
            Ok(ready) => ready.hold.as_ref(),
        }
    }

    /// The golden ConfigMap's content, once it passed its gates.
    pub fn golden(&self) -> Option<&GoldenConfig> {
        self.state.as_ref().ok().map(|r| &r.golden)
    }

    pub fn platform(&self) -> Option<&Platform> {
        self.state.as_ref().ok().map(|r| &r.platform)
    }

    /// How MachineSets are selected, for status messages.
    pub fn selection(&self, resource: Resource) -> Option<&Selection> {
        self.state.as_ref().ok().map(|r| match resource {
            Resource::MachineSets => &r.machine_sets,
            Resource::ControlPlaneMachineSets => &r.control_plane,
        })
    }

    pub fn machine_set(&self, ms: &Result<MachineSet, Malformed>) -> Entry {
        match ms {
            Err(bad) => malformed(bad),
            Ok(ms) => self.resource(&MachineResource {
                kind: Resource::MachineSets,
                meta: &ms.metadata,
                template: Some(&ms.spec.template),
            }),
        }
    }

    pub fn control_plane_machine_set(
        &self,
        cp: &Result<ControlPlaneMachineSet, Malformed>,
    ) -> Entry {
        match cp {
            Err(bad) => malformed(bad),
            Ok(cp) => self.resource(&MachineResource {
                kind: Resource::ControlPlaneMachineSets,
                meta: &cp.metadata,
                template: cp.spec.template.machines_v1beta1.as_ref(),
            }),
        }
    }

    fn resource(&self, res: &MachineResource<'_>) -> Entry {
        let namespace = res.meta.namespace.as_deref().unwrap_or_default();
        let name = res.meta.name.as_deref().unwrap_or_default();
        let entry =
            |action, reason, message: String| Entry::new(namespace, name, action, reason, message);
        let mut decided = self.decide(res, namespace, &entry);
        decided.last_change = record::history(res.meta).pop();
        decided
    }

    fn decide(
        &self,
        res: &MachineResource<'_>,
        namespace: &str,
        entry: &dyn Fn(Action, Reason, String) -> Entry,
    ) -> Entry {
        let ready = match &self.state {
            Err(blocked) => return entry(Action::Skip, blocked.reason, blocked.message.clone()),
            Ok(ready) => ready,
        };
        let annotations = res.meta.annotations.as_ref();
        if annotations
            .and_then(|a| a.get(OPT_OUT_ANNOTATION))
            .map(String::as_str)
            == Some(OPT_OUT_VALUE)
        {
            return entry(
                Action::Skip,
                Reason::OptedOut,
                format!("opted out by annotation {OPT_OUT_ANNOTATION}={OPT_OUT_VALUE}"),
            );
        }
        let selection = match res.kind {
            Resource::MachineSets => &ready.machine_sets,
            Resource::ControlPlaneMachineSets => &ready.control_plane,
        };
        match selection.selects(res.meta.labels.as_ref().unwrap_or(&BTreeMap::new())) {
            Err(message) => {
                return entry(Action::Error, Reason::InvalidSelector, message.to_string());
            }
            Ok(false) => {
                return entry(
                    Action::Skip,
                    Reason::NotSelected,
                    format!(
                        "not selected by MachineConfiguration managedBootImages ({} mode {})",
                        res.kind.name(),
                        selection.describe()
                    ),
                );
            }
            Ok(true) => {}
        }
        if let Some(owner) = res.meta.owner_references.as_ref().and_then(|o| o.first()) {
            return entry(
                Action::Skip,
                Reason::Owned,
                format!(
                    "owned by {} {}; its owner would revert our changes",
                    owner.kind, owner.name
                ),
            );
        }
        let template_labels = res
            .template
            .and_then(|t| t.metadata.as_ref())
            .and_then(|m| m.labels.as_ref());
        if template_labels
            .and_then(|l| l.get(OS_ID_LABEL))
            .map(String::as_str)
            == Some("Windows")
        {
            return entry(
                Action::Skip,
                Reason::WindowsMachine,
                "Windows machines boot Windows images, not CoreOS".into(),
            );
        }
        let os_stream = [res.meta.labels.as_ref(), template_labels]
            .into_iter()
            .flatten()
            .find_map(|labels| labels.get(OS_STREAM_LABEL));
        if let Some(stream) = os_stream.filter(|s| **s != ready.golden.stream.stream) {
            return entry(
                Action::Skip,
                Reason::NonDefaultOSStream,
                format!(
                    "uses OS stream {stream:?}, not the default {:?}",
                    ready.golden.stream.stream
                ),
            );
        }
        // Before the architecture and providerSpec checks: on a platform we never write to, their
        // errors would only raise a false Degraded (e.g. every MachineSet of a multi-arch vSphere
        // cluster without the autoscaler annotation).
        let Some(rule) = ready.platform.rule() else {
            return entry(
                Action::Skip,
                Reason::PlatformNotSupported,
                ready.platform.unsupported_message(),
            );
        };
        let arch = match self.arch(res, ready) {
            Ok(arch) => arch,
            Err((reason, message)) => return entry(Action::Error, reason, message),
        };
        let Some(provider_spec) = res
            .template
            .and_then(|t| t.spec.provider_spec.value.as_ref())
            .filter(|v| v.is_object())
        else {
            return entry(
                Action::Error,
                Reason::InvalidProviderSpec,
                "the machine template has no providerSpec.value object".into(),
            );
        };
        let ctx = RuleContext {
            stream: &ready.golden.stream,
            arch,
            known_images: &ready.known_images,
            infrastructure_name: self
                .cluster
                .infrastructure
                .as_ref()
                .and_then(|i| i.status.as_ref())
                .and_then(|s| s.infrastructure_name.as_deref()),
        };
        let base = match res.kind {
            Resource::MachineSets => MACHINE_SET_PROVIDER_SPEC,
            Resource::ControlPlaneMachineSets => CONTROL_PLANE_PROVIDER_SPEC,
        };
        let (boot_image, image_ops) = match rule.evaluate(provider_spec, &ctx) {
            ImageOutcome::Skip {
                reason,
                message,
                current,
            } => {
                return with_current(entry(Action::Skip, reason, message), current);
            }
            ImageOutcome::Error {
                reason,
                message,
                current,
            } => {
                return with_current(entry(Action::Error, reason, message), current);
            }
            ImageOutcome::UpToDate { current } => (
                Values {
                    current: Some(current),
                    target: None,
                },
                Vec::new(),
            ),
            ImageOutcome::Update {
                current,
                target,
                changes,
            } => {
                let ops = changes
                    .into_iter()
                    .flat_map(|c| guarded_replace(&format!("{base}{}", c.pointer), c.from, c.to))
                    .collect();
                (
                    Values {
                        current: Some(current),
                        target: Some(target),
                    },
                    ops,
                )
            }
        };

        // Rule 7: the stub secret, even when the image is current.
        let current_secret = provider_spec
            .pointer("/userDataSecret/name")
            .and_then(Value::as_str)
            .map(str::to_string);
        let target_secret = current_secret.as_deref().and_then(stub::managed_name);
        let mut decided = entry(Action::UpToDate, Reason::UpToDate, String::new());
        decided.boot_image = boot_image;
        decided.user_data_secret = Values {
            current: current_secret.clone(),
            target: target_secret.clone(),
        };
        if let Some(target) = &target_secret {
            let secret = self
                .cluster
                .secrets
                .get(&(namespace.to_string(), target.clone()));
            if let Err((reason, message)) = stub::verify(namespace, target, secret) {
                decided.action = Action::Error;
                decided.reason = reason;
                decided.message = message;
                return decided;
            }
        }
        let mut patch = image_ops;
        if let (Some(from), Some(to)) = (current_secret, target_secret) {
            patch.extend(guarded_replace(
                &format!("{base}/userDataSecret/name"),
                from.into(),
                to.into(),
            ));
        }
        if patch.is_empty() {
            decided.message = format!(
                "boot image is current ({})",
                display(decided.boot_image.current.as_ref())
            );
            return decided;
        }
        decided.message = change_message(&decided, &ready.golden, arch, &ready.platform);
        decided.reason = if decided.boot_image.target.is_some() {
            Reason::BootImageOutdated
        } else {
            Reason::StubSecretOutdated
        };

        // Rule 8: the hot-loop guard.
        let target_key = decided.target_key();
        let recent = record::recent_patches(
            res.meta,
            &target_key,
            self.options.now,
            self.options.hot_loop_window,
        );
        if recent >= self.options.hot_loop_threshold {
            decided.action = Action::Error;
            decided.reason = Reason::HotLoop;
            decided.message = format!(
                "patched to the same values {recent} times within {} but something keeps \
                 reverting them ({}); stopped to avoid fighting. Find the other writer, then opt \
                 this {} out and back in (annotation {OPT_OUT_ANNOTATION}) to retry",
                friendly(self.options.hot_loop_window),
                decided.message,
                res.kind.name().trim_end_matches('s'),
            );
            return decided;
        }
        if let Some(hold) = &ready.hold {
            decided.action = Action::Skip;
            decided.reason = hold.reason;
            decided.message = format!("would update: {}; held: {}", decided.message, hold.message);
            return decided;
        }
        decided.action = Action::Update;
        decided.patch = patch;
        decided
    }

    fn arch(&self, res: &MachineResource<'_>, ready: &Ready) -> Result<Arch, (Reason, String)> {
        if res.kind == Resource::ControlPlaneMachineSets {
            return Ok(self.options.control_plane_arch);
        }
        let annotation = res
            .meta
            .annotations
            .as_ref()
            .and_then(|a| a.get(AUTOSCALER_LABELS_ANNOTATION));
        let Some(labels) = annotation else {
            if ready.multi_arch {
                return Err((
                    Reason::ArchitectureUndetermined,
                    format!(
                        "the cluster is multi-architecture and the MachineSet has no \
                         {AUTOSCALER_LABELS_ANNOTATION} annotation naming kubernetes.io/arch"
                    ),
                ));
            }
            return Ok(self.options.control_plane_arch);
        };
        let arch = labels
            .split(',')
            .filter_map(|pair| pair.trim().split_once('='))
            .find(|(key, _)| key.trim() == "kubernetes.io/arch")
            .map(|(_, value)| value.trim());
        let Some(arch) = arch else {
            return Err((
                Reason::ArchitectureUndetermined,
                format!(
                    "annotation {AUTOSCALER_LABELS_ANNOTATION} has no kubernetes.io/arch entry"
                ),
            ));
        };
        arch.parse().map_err(|e: crate::arch::UnknownArch| {
            (
                Reason::UnknownArchitecture,
                format!("annotation {AUTOSCALER_LABELS_ANNOTATION}: {e}"),
            )
        })
    }
}

impl Ready {
    /// The global gates, in order; the first failing one blocks everything.
    fn evaluate(cluster: &Cluster) -> Result<Ready, Blocked> {
        let block = |reason, message: String| Err(Blocked { reason, message });
        let Some(mc) = &cluster.machine_configuration else {
            return block(
                Reason::MachineConfigurationMissing,
                "MachineConfiguration cluster does not exist; it says which MachineSets to update"
                    .into(),
            );
        };
        let platform_type = cluster
            .infrastructure
            .as_ref()
            .and_then(|i| i.status.as_ref())
            .and_then(|s| s.platform_status.as_ref())
            .map(|p| p.type_.as_str())
            .filter(|t| !t.is_empty());
        let Some(platform_type) = platform_type else {
            return block(
                Reason::InfrastructureMissing,
                "Infrastructure cluster is missing or has no status.platformStatus.type; the \
                 platform decides which images apply"
                    .into(),
            );
        };
        let platform = Platform::from_type(platform_type);
        let Some(cm) = &cluster.golden else {
            return block(
                Reason::GoldenConfigMapMissing,
                "the golden ConfigMap coreos-bootimages does not exist; the Machine Config \
                 Operator publishes it"
                    .into(),
            );
        };
        let golden = match GoldenConfig::from_config_map(cm) {
            Ok(g) => g,
            Err(e) => {
                return block(
                    Reason::GoldenStreamInvalid,
                    format!("the golden ConfigMap cannot be used: {e}"),
                );
            }
        };
        let mut known_images = cluster.known_images.clone();
        known_images.extend(golden.image_references());
        let cv_status = cluster
            .cluster_version
            .as_ref()
            .and_then(|cv| cv.status.as_ref());
        let hold =
            cv_status.and_then(|status| release_hold(status, golden.release_version.as_deref()));
        let paused = mc
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(PAUSE_ANNOTATION))
            .is_some_and(|v| v == "true");
        let hold = hold.or_else(|| {
            paused.then(|| Blocked {
                reason: Reason::Paused,
                message: format!(
                    "boot image updates are paused by annotation {PAUSE_ANNOTATION}=true on \
                     MachineConfiguration {}",
                    mc.metadata.name.as_deref().unwrap_or("cluster")
                ),
            })
        });
        let multi_arch = cv_status
            .and_then(|s| s.desired.as_ref())
            .and_then(|d| d.architecture.as_deref())
            == Some("Multi");
        Ok(Ready {
            machine_sets: Selection::for_resource(mc, Resource::MachineSets, &platform),
            control_plane: Selection::for_resource(
                mc,
                Resource::ControlPlaneMachineSets,
                &platform,
            ),
            platform,
            golden,
            known_images,
            multi_arch,
            hold,
        })
    }
}

/// Mid-upgrade the golden ConfigMap may already describe the next release while machines still
/// run the old one; writing then could roll MachineSets forward too early.
fn release_hold(
    status: &crate::api::ClusterVersionStatus,
    cm_release: Option<&str>,
) -> Option<Blocked> {
    let hold = |reason, message| Some(Blocked { reason, message });
    let Some(current) = status.history.first() else {
        return hold(
            Reason::ClusterUpgrading,
            "ClusterVersion has no update history yet; waiting for the install to complete".into(),
        );
    };
    if current.state != "Completed" {
        return hold(
            Reason::ClusterUpgrading,
            format!(
                "the cluster is updating to {} ({}); boot images are updated once it completes",
                current.version, current.state
            ),
        );
    }
    let Some(cm_release) = cm_release else {
        return hold(
            Reason::ReleaseVersionMissing,
            "the golden ConfigMap has no releaseVersion, so it cannot be matched to the cluster's \
             release"
                .into(),
        );
    };
    // Build metadata is not part of a version's identity (semver 2.0 section 10), but
    // `semver::Version`'s `==` compares it.
    let same = match (
        semver::Version::parse(cm_release),
        semver::Version::parse(&current.version),
    ) {
        (Ok(a), Ok(b)) => a.cmp_precedence(&b).is_eq(),
        _ => cm_release == current.version,
    };
    if same {
        return None;
    }
    hold(
        Reason::ReleaseMismatch,
        format!(
            "the golden ConfigMap is for release {cm_release} but the cluster runs {}; waiting \
             for the Machine Config Operator to publish this release's boot images",
            current.version
        ),
    )
}

fn malformed(bad: &Malformed) -> Entry {
    Entry::new(
        &bad.namespace,
        &bad.name,
        Action::Error,
        Reason::MalformedObject,
        format!("cannot read the object: {}", bad.error),
    )
}

fn with_current(mut entry: Entry, current: Option<Value>) -> Entry {
    entry.boot_image.current = current;
    entry
}

/// A `test` of the old value, then its `replace`: a concurrent edit of the same field makes the
/// API server reject the whole patch instead of us overwriting it.
pub fn guarded_replace(pointer: &str, from: Value, to: Value) -> [PatchOperation; 2] {
    let path = PointerBuf::parse(pointer).expect("pointers are built from valid constants");
    [
        record::test_op(path.clone(), from),
        PatchOperation::Replace(ReplaceOperation { path, value: to }),
    ]
}

/// A boot image as a person reads it: the id, the path, or an Azure URN.
pub fn display(value: Option<&Value>) -> String {
    match value {
        None | Some(Value::Null) => "-".into(),
        Some(Value::String(s)) => s.clone(),
        Some(Value::Object(o)) if o.contains_key("publisher") || o.contains_key("resourceID") => {
            let field = |k: &str| o.get(k).and_then(Value::as_str).unwrap_or_default();
            if !field("resourceID").is_empty() {
                field("resourceID").to_string()
            } else {
                ["publisher", "offer", "sku", "version"]
                    .map(field)
                    .join(":")
            }
        }
        Some(other) => other.to_string(),
    }
}

fn change_message(e: &Entry, golden: &GoldenConfig, arch: Arch, platform: &Platform) -> String {
    let mut message = String::new();
    if let Some(target) = &e.boot_image.target {
        let release = golden
            .stream
            .release(arch, &platform.name().to_ascii_lowercase())
            .map(|r| format!(" {r}"))
            .unwrap_or_default();
        let _ = write!(
            message,
            "boot image {} -> {} ({}{release})",
            display(e.boot_image.current.as_ref()),
            display(Some(target)),
            golden.stream.stream
        );
    }
    if let (Some(from), Some(to)) = (&e.user_data_secret.current, &e.user_data_secret.target) {
        if !message.is_empty() {
            message.push_str("; ");
        }
        let _ = write!(message, "stub secret {from} -> {to}");
    }
    message
}

fn friendly(d: SignedDuration) -> String {
    let secs = d.as_secs();
    match secs {
        s if s % 3600 == 0 => format!("{}h", s / 3600),
        s if s % 60 == 0 => format!("{}m", s / 60),
        s => format!("{s}s"),
    }
}

#[cfg(test)]
mod tests;
