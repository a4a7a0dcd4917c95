//! The status fields the rest of OpenShift reads about boot images, when we are the manager:
//! `status.managedBootImagesStatus` (the effective selection) and
//! `status.bootImageSkewEnforcementStatus` (what the upgrade skew check compares). Pure: computed
//! from the MachineConfiguration, the platform, the release and the latest decisions, and
//! written by the status writer only when it differs from what the object holds.
//!
//! Shapes and modes follow the Machine Config Operator's operator (`syncManagedBootImagesStatus`
//! and `syncBootImageSkewEnforcementStatus`, pkg/operator/sync.go; the helpers in
//! pkg/apihelpers/apihelpers.go) so that its skew check (`checkBootImageSkewUpgradeableGuard`,
//! pkg/operator/status.go) reads our values as it would read its own.

use serde_json::{Value, json};

use super::conditions::Desired;
use super::served_schema::StatusSchema;
use crate::api::{ClusterVersionStatus, MachineConfiguration};
use crate::facts::ec2::{release_in, rhel_version};
use crate::machine_kind::MachineKind;
use crate::plan::selection::{Declared, release_of};
use crate::plan::{Action, Decision};
use crate::platform::Platform;
use crate::reason::{Category, SkewTally};

/// Our own condition, present in Manual skew enforcement only: whether the images in use are
/// at least as new as the version the administrator declared.
pub const MANUAL_SKEW_MET: &str = "BootImageManualSkewVersionMet";

/// What the fields are computed from.
pub struct FieldsInput<'a> {
    pub mc: &'a MachineConfiguration,
    pub platform: &'a Platform,
    pub decisions: &'a [&'a Decision],
    /// The golden ConfigMap's `releaseVersion`: the release whose boot images are current.
    pub golden_release: Option<&'a str>,
    /// The golden stream's oldest CoreOS release for this platform over its architectures.
    pub golden_rhcos: Option<&'a str>,
    pub cluster_version: Option<&'a ClusterVersionStatus>,
    /// `status.controlPlaneTopology` of the Infrastructure.
    pub single_replica: bool,
}

/// The status we maintain besides the conditions.
#[derive(Clone, Debug, PartialEq)]
pub struct Fields {
    /// `status.managedBootImagesStatus`, unless the declaration cannot be read.
    pub managed_boot_images: Option<Value>,
    pub skew_enforcement: Value,
    /// [`MANUAL_SKEW_MET`], in Manual mode with a declared version.
    pub manual_met: Option<Desired>,
}

impl Fields {
    /// The fields as they sit in `status`, for a server-side apply body: only those the served
    /// schema declares, and of `managedBootImagesStatus` only the managers it allows (4.19 to
    /// 4.21 allow `machinesets` alone). An apply carrying anything else is refused whole, the
    /// conditions with it.
    pub fn status_entries(&self, schema: &StatusSchema) -> serde_json::Map<String, Value> {
        let mut status = serde_json::Map::new();
        if let Some(managed) = &self.managed_boot_images
            && schema.managed_boot_images
        {
            let mut managed = managed.clone();
            if let Some(list) = managed
                .get_mut("machineManagers")
                .and_then(Value::as_array_mut)
            {
                list.retain(|m| m["resource"].as_str().is_some_and(|r| schema.allows(r)));
            }
            status.insert("managedBootImagesStatus".into(), managed);
        }
        if schema.skew_enforcement {
            status.insert(
                "bootImageSkewEnforcementStatus".into(),
                self.skew_enforcement.clone(),
            );
        }
        status
    }
}

/// The fields, where the platform has boot image management at all. Elsewhere boot images are
/// nobody's to update, and the MCO's operator decides the skew mode by itself on every platform
/// (`syncBootImageSkewEnforcementStatus`, pkg/operator/sync.go): publishing ours there would only
/// contradict it.
pub fn compute(input: &FieldsInput<'_>) -> Option<Fields> {
    if !input.platform.managed_by_default() {
        return None;
    }
    let managed = effective_managers(input);
    // `effective_managers` lists the MachineSets' entry first.
    let machine_sets_all = (managed.as_ref())
        .and_then(|m| m["machineManagers"].get(0))
        .is_some_and(|m| m["selection"]["mode"] == "All");
    let spec = input.mc.spec.extra.get("bootImageSkewEnforcement");
    let declared = spec.filter(|s| s.as_object().is_some_and(|o| !o.is_empty()));
    let install = install_version(input.cluster_version);
    let (skew_enforcement, manual_met) = match declared {
        Some(spec) if spec["mode"] == "Manual" => {
            let manual = spec.get("manual").cloned().unwrap_or_else(|| json!({}));
            let met = manual_met(&manual, input);
            (json!({"mode": "Manual", "manual": manual}), Some(met))
        }
        Some(_) => (json!({"mode": "None"}), None),
        // Single-node clusters do not scale, so skew does not matter (as the MCO decides).
        None if input.single_replica => (json!({"mode": "None"}), None),
        None if machine_sets_all => {
            let automatic = automatic_record(input, &install);
            (json!({"mode": "Automatic", "automatic": automatic}), None)
        }
        None => (
            json!({"mode": "Manual", "manual": {"mode": "OCPVersion", "ocpVersion": install}}),
            None,
        ),
    };
    Some(Fields {
        managed_boot_images: managed,
        skew_enforcement,
        manual_met,
    })
}

/// The effective selection, resolved per resource as the MCO's operator does
/// (`syncManagedBootImagesStatus`, pkg/operator/sync.go), from what the administrator declared
/// (see `plan::selection::Declared`): an empty list opts out of everything and is published as
/// it is; otherwise MachineSets take the declared entry or the release's default, and
/// ControlPlaneMachineSets (where the platform supports them) the declared entry or None.
/// `None` while the declaration cannot be read.
fn effective_managers(input: &FieldsInput<'_>) -> Option<Value> {
    let declared = Declared::read(input.mc);
    if declared.opts_out_of_everything() {
        return Some(json!({"machineManagers": []}));
    }
    let release = input.cluster_version.and_then(release_of);
    // Entries are keyed by resource and apiGroup (the CRD's list-map keys; upstream matches
    // both in `getMachineResourceSelectorFromMachineManagers`, pkg/controller/bootimage/
    // helpers.go, and `MergeMachineManager`, pkg/apihelpers/apihelpers.go, main): a Cluster
    // API `machinesets` entry (MCO PR 6469) says nothing of Machine API MachineSets.
    let entry = |kind: MachineKind| -> Option<Value> {
        let selection = match declared.entry(kind).ok()? {
            Some(m) => serde_json::to_value(&m.selection).unwrap_or_else(|_| json!({})),
            None if kind.selected_by_default(input.platform, release) => json!({"mode": "All"}),
            None => json!({"mode": "None"}),
        };
        let (resource, group) = (kind.plural(), kind.api_group());
        Some(json!({"resource": resource, "apiGroup": group, "selection": selection}))
    };
    let mut list = vec![entry(MachineKind::MachineSet)?];
    if input.platform.control_plane_boot_images_supported() {
        list.push(entry(MachineKind::ControlPlaneMachineSet)?);
    }
    Some(json!({"machineManagers": list}))
}

/// `x.y.z` of a release string, the only form the API accepts, read as the MCO reads it:
/// `k8sversion.ParseGeneric` (k8s.io/apimachinery pkg/util/version/version.go, `parse` with
/// `semver` false; used by `GetOCPInstallVersion`, pkg/apihelpers/apihelpers.go, and
/// `updateClusterBootImage`, pkg/controller/bootimage/boot_image_controller.go, main): an
/// optional `v`, at least two dotted numbers (a missing patch is 0), anything after them ignored.
fn ocp_version(release: &str) -> Option<String> {
    let text = release.trim_start();
    let text = text.strip_prefix('v').unwrap_or(text);
    // The leading digits and dots; a dot continues the numbers only when a digit follows it.
    let end = (text.find(|c: char| !c.is_ascii_digit() && c != '.')).unwrap_or(text.len());
    let components: Vec<&str> = text[..end]
        .split('.')
        .take_while(|c| !c.is_empty())
        .collect();
    if components.len() < 2 || (components[0].len() > 1 && components[0].starts_with('0')) {
        return None;
    }
    let parsed: Vec<u64> = (components.iter())
        .map(|c| c.parse().ok())
        .collect::<Option<_>>()?;
    let patch = parsed.get(2).copied().unwrap_or(0);
    Some(format!("{}.{}.{patch}", parsed[0], parsed[1]))
}

/// The release the cluster was installed with, as the MCO derives it (`GetOCPInstallVersion`,
/// pkg/apihelpers/apihelpers.go, main): the oldest completed update, else the oldest entry of
/// all (an install that never completed still names its release), `0.0.0` only without a
/// history or with a version that does not parse.
fn install_version(cv: Option<&ClusterVersionStatus>) -> String {
    let history = cv.map(|s| s.history.as_slice()).unwrap_or_default();
    let completed = history.iter().rev().find(|h| h.state == "Completed");
    completed
        .or(history.last())
        .and_then(|h| ocp_version(&h.version))
        .unwrap_or_else(|| "0.0.0".into())
}

/// Only Machine API MachineSets move the record upstream: `syncMAPIMachineSets` is the only
/// caller of `updateClusterBootImage` and `resetClusterBootImage`; ControlPlaneMachineSets
/// never touch it, and upstream has no Cluster API path.
fn tally(d: &Decision) -> SkewTally {
    if d.kind != MachineKind::MachineSet {
        return SkewTally::NotCounted;
    }
    match d.action {
        Action::UpToDate => SkewTally::Reconciled,
        // Upstream patches within its sync, so it has no update still to send; ours waits for a
        // pause, a conflict or the rest of a wave, and whatever was recorded still holds.
        Action::Update | Action::Error => SkewTally::Unsettled,
        Action::Skip => d.reason.skew_tally(),
    }
}

/// Automatic mode, `status.bootImageSkewEnforcementStatus.automatic`, as the MCO's
/// `syncMAPIMachineSets` moves it: with every counted MachineSet reconciled, the oldest RHCOS
/// release of the marketplace images among them, else the golden release
/// (`updateClusterBootImage`); with one skipped and none failed, the install release
/// (`resetClusterBootImage`); otherwise what was recorded before.
fn automatic_record(input: &FieldsInput<'_>, install: &str) -> Value {
    let install_record = || json!({"ocpVersion": install});
    let tallied: Vec<(SkewTally, &Decision)> =
        (input.decisions.iter()).map(|d| (tally(d), *d)).collect();
    let any = |class: SkewTally| tallied.iter().any(|(c, _)| *c == class);
    if any(SkewTally::Unsettled) {
        return recorded_automatic(input.mc).unwrap_or_else(install_record);
    }
    if any(SkewTally::Skipped) {
        return install_record();
    }
    let releases: Vec<&str> = (tallied.iter())
        .filter(|(c, _)| *c == SkewTally::Reconciled)
        .filter_map(|(_, d)| d.rhcos_release.current.as_deref())
        .collect();
    // A release the CRD cannot hold would have the whole status refused: claim no more than the
    // install release then.
    if !releases.iter().all(|r| recordable_rhcos(r)) {
        return install_record();
    }
    if let Some(release) = releases.into_iter().min_by(|a, b| rhcos_order(a, b)) {
        return json!({"rhcosVersion": release});
    }
    match input.golden_release.and_then(ocp_version) {
        Some(release) => json!({"ocpVersion": release}),
        // `updateClusterBootImage` leaves the record when the ConfigMap names no release.
        None => recorded_automatic(input.mc).unwrap_or_else(install_record),
    }
}

/// RHCOS releases by the RHEL release they are built on, as the skew check reads them, then by
/// build. The MCO keeps the oldest by `CmpRHCOSVersion` (pkg/controller/bootimage/marketplace),
/// whose `major.minor` makes a 4.18 release (`418.94`) newer than 9.6; the oldest for the skew
/// check is the one it reads as the oldest.
pub(super) fn rhcos_order(a: &str, b: &str) -> std::cmp::Ordering {
    (rhel_version(a).cmp(&rhel_version(b)))
        .then_with(|| compare_versions(a, b).unwrap_or(std::cmp::Ordering::Equal))
}

/// The `automatic` record the object holds, when it is one the schema accepts back.
fn recorded_automatic(mc: &MachineConfiguration) -> Option<Value> {
    let status = (mc.status.as_ref()?.extra).get("bootImageSkewEnforcementStatus")?;
    if status["mode"] != "Automatic" {
        return None;
    }
    let automatic = &status["automatic"];
    let ocp = automatic["ocpVersion"].as_str();
    let rhcos = automatic["rhcosVersion"].as_str();
    (ocp.is_some() || rhcos.is_some()).then(|| automatic.clone())
}

/// Whether the 4.22 CRD accepts `release` as `automatic.rhcosVersion`: 14 to 21 characters of
/// `^[0-9]+\.[0-9]+\.([0-9]{8}|[0-9]{12})-[0-9]+$`, the pattern marketplace AMIs name theirs by.
fn recordable_rhcos(release: &str) -> bool {
    (14..=21).contains(&release.len()) && release_in(release) == Some(release)
}

/// Whether the planner compared the decision's image with the golden one: current, to be
/// updated, or held back from an update.
fn compared_with_golden(d: &Decision) -> bool {
    match d.action {
        Action::UpToDate | Action::Update => true,
        Action::Skip => d.reason.category() == Category::Hold,
        Action::Error => false,
    }
}

/// Manual mode: whether the images in use are as new as the declared version. Only images the
/// planner judged count: current ones boot the golden release; outdated ones something older,
/// by how much image ids do not say.
fn manual_met(manual: &Value, input: &FieldsInput<'_>) -> Desired {
    let judged: Vec<&&Decision> = (input.decisions.iter())
        .filter(|d| d.boot_image.current.is_some() && compared_with_golden(d))
        .collect();
    let outdated: Vec<String> = (judged.iter())
        .filter(|d| d.boot_image.target.is_some())
        .map(|d| format!("{}/{}", d.namespace, d.name))
        .collect();
    let (declared, golden, what) = declared_and_golden(manual, input);
    let condition =
        |status, reason, message| Desired::new(MANUAL_SKEW_MET, status, reason, message);
    let (Some(declared), Some(golden)) = (declared, golden) else {
        return condition(
            None,
            "VersionUnknown",
            "the declared version or the golden boot images' version is missing".to_string(),
        );
    };
    if judged.is_empty() {
        return condition(
            None,
            "NoImageJudged",
            format!(
                "no machine resource's boot image could be compared with the golden {what} \
                 {golden}, so the declared {declared} cannot be checked"
            ),
        );
    }
    let order = compare_versions(&declared, &golden);
    let named = super::conditions::first_few(outdated.iter().cloned(), 10, ", ");
    match (order, outdated.is_empty()) {
        (Some(std::cmp::Ordering::Greater), _) => condition(
            Some(false),
            "DeclaredVersionNewer",
            format!(
                "the declared {what} version {declared} is newer than the golden boot images \
                 ({golden}), so no machine resource can be using it; declare the oldest boot \
                 image in use"
            ),
        ),
        (_, true) => condition(
            Some(true),
            "DeclaredVersionMet",
            format!(
                "every judged machine resource ({}) boots the golden {what} {golden} images, at \
                 least the declared {declared}",
                judged.len()
            ),
        ),
        (Some(std::cmp::Ordering::Equal), false) => condition(
            Some(false),
            "OlderImagesInUse",
            format!(
                "{named} boot images older than the declared {what} {declared}; update them or \
                 declare an older version"
            ),
        ),
        _ => condition(
            None,
            "OlderImagesInUse",
            format!(
                "{named} boot images older than the golden {what} {golden}; whether they are as \
                 new as the declared {declared} cannot be told from their image ids"
            ),
        ),
    }
}

/// The version the admin declared for Manual mode and the golden one to compare it with, both
/// of the kind the mode names, and that kind for messages.
fn declared_and_golden(
    manual: &Value,
    input: &FieldsInput<'_>,
) -> (Option<String>, Option<String>, &'static str) {
    match manual["mode"].as_str() {
        Some("RHCOSVersion") => (
            manual["rhcosVersion"].as_str().map(str::to_string),
            input.golden_rhcos.map(str::to_string),
            "RHCOS",
        ),
        _ => (
            manual["ocpVersion"].as_str().map(str::to_string),
            input.golden_release.and_then(ocp_version),
            "OpenShift",
        ),
    }
}

/// Dotted numeric versions (`4.21.3`, `9.6.20251023-0`), compared field by field.
fn compare_versions(a: &str, b: &str) -> Option<std::cmp::Ordering> {
    let fields = |s: &str| -> Option<Vec<u64>> {
        s.split(['.', '-']).map(|f| f.parse::<u64>().ok()).collect()
    };
    Some(fields(a)?.cmp(&fields(b)?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{MachineConfigurationStatus, ManagedBootImages, UpdateHistory};
    use crate::plan::Values;
    use crate::reason::Reason;

    const MACHINE_API: &str = "machine.openshift.io";

    fn mc(spec: Value, status: Option<Value>) -> MachineConfiguration {
        let mut mc: MachineConfiguration = serde_json::from_value(json!({
            "apiVersion": "operator.openshift.io/v1", "kind": "MachineConfiguration",
            "metadata": {"name": "cluster"}, "spec": spec,
        }))
        .unwrap();
        mc.status =
            status.map(|s| serde_json::from_value::<MachineConfigurationStatus>(s).unwrap());
        mc
    }

    fn decision(name: &str, action: Action, reason: Reason, outdated: bool) -> Decision {
        let mut d = Decision::new(
            MachineKind::MachineSet,
            "openshift-machine-api",
            name,
            action,
            reason,
            String::new(),
        );
        d.boot_image = Values {
            current: Some(json!("ami-old")),
            target: outdated.then(|| json!("ami-new")),
        };
        d
    }

    fn cluster_version(installed: &str, current: &str) -> ClusterVersionStatus {
        let entry = |v: &str| UpdateHistory {
            state: "Completed".into(),
            version: v.into(),
            ..Default::default()
        };
        ClusterVersionStatus {
            history: vec![entry(current), entry(installed)],
            ..Default::default()
        }
    }

    fn fields(mc: &MachineConfiguration, decisions: &[Decision]) -> Fields {
        let refs: Vec<&Decision> = decisions.iter().collect();
        let cv = cluster_version("4.18.2", "4.21.3");
        compute(&FieldsInput {
            mc,
            platform: &Platform::Aws,
            decisions: &refs,
            golden_release: Some("4.21.3"),
            golden_rhcos: Some("9.6.20251023-0"),
            cluster_version: Some(&cv),
            single_replica: false,
        })
        .expect("AWS has boot image management")
    }

    #[test]
    fn effective_selection_resolves_defaults_like_the_mco() {
        let f = fields(&mc(json!({}), None), &[]);
        assert_eq!(
            f.managed_boot_images,
            Some(json!({"machineManagers": [
                {"resource": "machinesets", "apiGroup": MACHINE_API, "selection": {"mode": "All"}},
                {"resource": "controlplanemachinesets", "apiGroup": MACHINE_API, "selection": {"mode": "None"}},
            ]}))
        );
        let mut opted_out = mc(json!({}), None);
        opted_out.spec.managed_boot_images = Some(ManagedBootImages {
            machine_managers: Some(vec![]),
        });
        let f = fields(&opted_out, &[]);
        assert_eq!(f.managed_boot_images, Some(json!({"machineManagers": []})));
        // Opted out of everything: no automatic updates, so skew is tracked by hand.
        assert_eq!(f.skew_enforcement["mode"], "Manual");
        assert_eq!(f.skew_enforcement["manual"]["ocpVersion"], "4.18.2");

        let partial = mc(
            json!({"managedBootImages": {"machineManagers": [{"resource": "machinesets",
                "apiGroup": MACHINE_API, "selection": {"mode": "Partial", "partial":
                {"machineResourceSelector": {"matchLabels": {"a": "b"}}}}}]}}),
            None,
        );
        let f = fields(&partial, &[]);
        assert_eq!(
            f.managed_boot_images.unwrap()["machineManagers"][0]["selection"]["partial"]["machineResourceSelector"]
                ["matchLabels"]["a"],
            "b"
        );
        // The MCO enforces skew automatically only when every MachineSet is managed.
        assert_eq!(f.skew_enforcement["mode"], "Manual");
    }

    #[test]
    fn a_cluster_api_entry_says_nothing_of_machine_api_machine_sets() {
        let cluster_api = |mode: &str| {
            json!({"resource": "machinesets", "apiGroup": "cluster.x-k8s.io",
                "selection": {"mode": mode}})
        };
        // Machine API MachineSets not named: their platform default (All), with Automatic skew.
        let only_cluster_api = mc(
            json!({"managedBootImages": {"machineManagers": [cluster_api("None")]}}),
            None,
        );
        let f = fields(&only_cluster_api, &[]);
        let published = &f.managed_boot_images.unwrap()["machineManagers"];
        assert_eq!(
            published[0],
            json!({"resource": "machinesets", "apiGroup": MACHINE_API, "selection": {"mode": "All"}})
        );
        assert_eq!(f.skew_enforcement["mode"], "Automatic");
        // Named after a Cluster API entry: the Machine API one decides.
        let both = mc(
            json!({"managedBootImages": {"machineManagers": [cluster_api("All"),
                {"resource": "machinesets", "apiGroup": MACHINE_API, "selection": {"mode": "None"}}]}}),
            None,
        );
        let f = fields(&both, &[]);
        assert_eq!(
            f.managed_boot_images.unwrap()["machineManagers"][0]["selection"]["mode"],
            "None"
        );
        assert_eq!(f.skew_enforcement["mode"], "Manual");
    }

    #[test]
    fn automatic_records_the_golden_release_once_every_selected_machine_set_uses_it() {
        let mc = mc(json!({}), None);
        let current = decision("a", Action::UpToDate, Reason::UpToDate, false);
        let outside = decision("b", Action::Skip, Reason::NotSelected, true);
        let f = fields(&mc, &[current.clone(), outside]);
        assert_eq!(
            f.skew_enforcement,
            json!({"mode": "Automatic", "automatic": {"ocpVersion": "4.21.3"}})
        );
        assert_eq!(f.manual_met, None);

        // Mid-rollout, nothing recorded yet: the install release, the oldest we can claim.
        let pending = decision("c", Action::Update, Reason::BootImageOutdated, true);
        let f = fields(&mc, &[current.clone(), pending.clone()]);
        assert_eq!(f.skew_enforcement["automatic"]["ocpVersion"], "4.18.2");
    }

    #[test]
    fn automatic_keeps_its_record_during_a_rollout_and_falls_back_when_one_is_left_behind() {
        let recorded = json!({"bootImageSkewEnforcementStatus":
            {"mode": "Automatic", "automatic": {"ocpVersion": "4.20.1"}}});
        let mc = mc(json!({}), Some(recorded));
        let current = decision("a", Action::UpToDate, Reason::UpToDate, false);
        let pending = decision("b", Action::Update, Reason::BootImageOutdated, true);
        let f = fields(&mc, &[current.clone(), pending]);
        assert_eq!(f.skew_enforcement["automatic"]["ocpVersion"], "4.20.1");
        let custom = decision("c", Action::Skip, Reason::CustomImage, false);
        let f = fields(&mc, &[current, custom]);
        assert_eq!(f.skew_enforcement["automatic"]["ocpVersion"], "4.18.2");
        let recorded: serde_json::Map<String, Value> = mc
            .status
            .as_ref()
            .unwrap()
            .extra
            .clone()
            .into_iter()
            .collect();
        // Everything the newest release declares, with no limit on the managers' resources.
        let newest = StatusSchema {
            managed_boot_images: true,
            managed_resources: None,
            skew_enforcement: true,
        };
        let entries = f.status_entries(&newest);
        let key = "bootImageSkewEnforcementStatus";
        assert_ne!(
            entries.get(key),
            recorded.get(key),
            "a changed record is written"
        );
    }

    /// `decision` on an image whose RHCOS release is known, as a marketplace AMI's is.
    fn on_release(name: &str, release: &str) -> Decision {
        let mut d = decision(name, Action::UpToDate, Reason::UpToDate, false);
        d.boot_image.current = Some(json!(format!("ami-{name}")));
        d.rhcos_release.current = Some(release.into());
        d
    }

    fn recorded(automatic: Value) -> MachineConfiguration {
        mc(
            json!({}),
            Some(json!({"bootImageSkewEnforcementStatus":
                {"mode": "Automatic", "automatic": automatic}})),
        )
    }

    fn automatic(mc: &MachineConfiguration, decisions: &[Decision]) -> Value {
        let f = fields(mc, decisions);
        assert_eq!(f.skew_enforcement["mode"], "Automatic", "{f:?}");
        f.skew_enforcement["automatic"].clone()
    }

    #[test]
    fn rhcos_releases_order_by_the_rhel_release_they_are_built_on_not_as_text() {
        use std::cmp::Ordering::*;
        // As text "10.1.." comes first; the golden stream's oldest release (Manual mode's
        // RHCOSVersion) is the one built on the older RHEL.
        assert_eq!(rhcos_order("10.1.20260301-0", "9.6.20251023-0"), Greater);
        assert_eq!(rhcos_order("418.94.202511191518-0", "9.6.20251023-0"), Less);
        assert_eq!(rhcos_order("9.6.20251023-0", "9.6.20251101-0"), Less);
    }

    #[test]
    fn automatic_records_the_oldest_rhcos_release_of_the_marketplace_images_in_use() {
        let mc = mc(json!({}), None);
        let newer = on_release("a", "9.6.20251015-0");
        let older = on_release("b", "9.4.20250601-0");
        let golden_ami = decision("c", Action::UpToDate, Reason::UpToDate, false);
        let outside = decision("d", Action::Skip, Reason::NotSelected, true);
        for decisions in [
            [
                newer.clone(),
                older.clone(),
                golden_ami.clone(),
                outside.clone(),
            ],
            [
                older.clone(),
                newer.clone(),
                outside.clone(),
                golden_ami.clone(),
            ],
        ] {
            assert_eq!(
                automatic(&mc, &decisions),
                json!({"rhcosVersion": "9.4.20250601-0"})
            );
        }
        // The oldest as the skew check reads it: 4.18's legacy release is RHEL 9.4.
        let legacy = on_release("f", "418.94.202511191518-0");
        assert_eq!(
            automatic(&mc, &[newer.clone(), legacy]),
            json!({"rhcosVersion": "418.94.202511191518-0"})
        );
        // One the CRD cannot hold would have the whole status refused: the install release.
        let unwritable = on_release("e", "12345.67890.20250601-12");
        assert_eq!(
            automatic(&mc, &[newer, unwritable]),
            json!({"ocpVersion": "4.18.2"})
        );
        // Golden AMIs only: the golden release.
        assert_eq!(
            automatic(&mc, &[golden_ami]),
            json!({"ocpVersion": "4.21.3"})
        );
    }

    #[test]
    fn a_skip_upstream_counts_resets_the_record_unless_an_error_leaves_it() {
        let mc = recorded(json!({"ocpVersion": "4.20.1"}));
        let current = decision("a", Action::UpToDate, Reason::UpToDate, false);
        let install = json!({"ocpVersion": "4.18.2"});
        // Upstream's reconcileSkipped (an image of an unknown owner, ownerReferences), and our
        // opt-out annotation, which upstream's All mode has no room for.
        for reason in [Reason::CustomImage, Reason::Owned, Reason::OptedOut] {
            let skipped = decision("b", Action::Skip, reason, false);
            assert_eq!(
                automatic(&mc, &[current.clone(), skipped]),
                install,
                "{reason}"
            );
        }
        // With an error beside the skip, upstream leaves the record as it is.
        let custom = decision("b", Action::Skip, Reason::CustomImage, false);
        let hot_loop = decision("c", Action::Error, Reason::HotLoop, true);
        assert_eq!(
            automatic(&mc, &[current.clone(), custom, hot_loop]),
            json!({"ocpVersion": "4.20.1"})
        );
    }

    #[test]
    fn an_error_leaves_the_record_as_it_is() {
        let current = on_release("a", "9.6.20251015-0");
        let failed = decision("b", Action::Error, Reason::PatchFailed, true);
        let decisions = [current, failed];
        for kept in [
            json!({"ocpVersion": "4.20.1"}),
            json!({"rhcosVersion": "9.4.20250601-0"}),
        ] {
            assert_eq!(automatic(&recorded(kept.clone()), &decisions), kept);
        }
        // Nothing recorded yet: the install release, as the MCO's operator first publishes it.
        assert_eq!(
            automatic(&mc(json!({}), None), &decisions),
            json!({"ocpVersion": "4.18.2"})
        );
    }

    #[test]
    fn an_azure_security_type_resets_the_record_as_upstream_now_does() {
        let mc = recorded(json!({"ocpVersion": "4.20.1"}));
        let current = decision("a", Action::UpToDate, Reason::UpToDate, false);
        let confidential = decision("b", Action::Skip, Reason::SecurityTypeUnsupported, false);
        assert_eq!(
            automatic(&mc, &[current, confidential]),
            json!({"ocpVersion": "4.18.2"})
        );
    }

    #[test]
    fn the_install_release_is_derived_as_upstream_derives_it() {
        let entry = |state: &str, version: &str| UpdateHistory {
            state: state.into(),
            version: version.into(),
            ..Default::default()
        };
        let history = |entries: Vec<UpdateHistory>| ClusterVersionStatus {
            history: entries,
            ..Default::default()
        };
        // The oldest completed update.
        let upgraded = history(vec![
            entry("Partial", "4.21.3"),
            entry("Completed", "4.20.1"),
            entry("Completed", "4.19.0"),
        ]);
        assert_eq!(install_version(Some(&upgraded)), "4.19.0");
        // An install that never completed: its release all the same, not 0.0.0.
        let never = history(vec![entry("Partial", "4.21.3"), entry("Partial", "4.21.0")]);
        assert_eq!(install_version(Some(&never)), "4.21.0");
        // ParseGeneric's forms: a `v`, two numbers, anything after the numbers.
        for (version, read) in [
            ("v4.21.3", "4.21.3"),
            ("4.21", "4.21.0"),
            ("4.22.0-0.nightly-2026-03-01-123456", "4.22.0"),
            ("4.21.3.1", "4.21.3"),
            ("4.21..3", "4.21.0"),
        ] {
            let one = history(vec![entry("Completed", version)]);
            assert_eq!(install_version(Some(&one)), read, "{version}");
        }
        for unreadable in ["", "4", "04.21.3", "four.21", "4.99999999999999999999"] {
            let one = history(vec![entry("Completed", unreadable)]);
            assert_eq!(install_version(Some(&one)), "0.0.0", "{unreadable:?}");
        }
        assert_eq!(install_version(Some(&history(vec![]))), "0.0.0");
        assert_eq!(install_version(None), "0.0.0");
    }

    #[test]
    fn machine_sets_upstream_does_not_count_never_reset_the_record() {
        let mc = recorded(json!({"ocpVersion": "4.20.1"}));
        let current = decision("a", Action::UpToDate, Reason::UpToDate, false);
        // Another OS stream, Windows, another authoritative API: upstream returns them as
        // neither skipped nor failed.
        for reason in [
            Reason::OSStreamNotPublished,
            Reason::WindowsMachine,
            Reason::AuthoritativeElsewhere,
        ] {
            let excluded = decision("b", Action::Skip, reason, false);
            assert_eq!(
                automatic(&mc, &[current.clone(), excluded]),
                json!({"ocpVersion": "4.21.3"}),
                "{reason}"
            );
        }
        // Only Machine API MachineSets move the record upstream.
        let mut control_plane = decision("cp", Action::Skip, Reason::CustomImage, false);
        control_plane.kind = MachineKind::ControlPlaneMachineSet;
        assert_eq!(
            automatic(&mc, &[current, control_plane]),
            json!({"ocpVersion": "4.21.3"})
        );
    }

    #[test]
    fn manual_mode_says_whether_the_declared_version_is_met() {
        let manual = |v: &str| {
            mc(
                json!({"bootImageSkewEnforcement": {"mode": "Manual",
                    "manual": {"mode": "OCPVersion", "ocpVersion": v}}}),
                None,
            )
        };
        let current = decision("a", Action::UpToDate, Reason::UpToDate, false);
        let outdated = decision("b", Action::Update, Reason::BootImageOutdated, true);

        let f = fields(&manual("4.21.3"), std::slice::from_ref(&current));
        assert_eq!(
            f.skew_enforcement,
            json!({"mode": "Manual", "manual": {"mode": "OCPVersion", "ocpVersion": "4.21.3"}})
        );
        let met = f.manual_met.unwrap();
        assert_eq!(
            (met.status, met.reason.as_str()),
            (Some(true), "DeclaredVersionMet")
        );

        let met = fields(&manual("4.21.3"), &[current.clone(), outdated.clone()])
            .manual_met
            .unwrap();
        assert_eq!(met.status, Some(false));
        assert!(
            met.message.contains("openshift-machine-api/b"),
            "{}",
            met.message
        );

        let met = fields(&manual("4.19.0"), &[current.clone(), outdated])
            .manual_met
            .unwrap();
        assert_eq!(
            met.status, None,
            "older than golden, maybe not older than declared"
        );

        let met = fields(&manual("4.22.0"), &[current]).manual_met.unwrap();
        assert_eq!(
            (met.status, met.reason.as_str()),
            (Some(false), "DeclaredVersionNewer")
        );

        let met = fields(&manual("4.21.3"), &[]).manual_met.unwrap();
        assert_eq!(met.status, None);
    }

    #[test]
    fn declared_none_and_single_node_clusters_enforce_nothing() {
        let none = mc(json!({"bootImageSkewEnforcement": {"mode": "None"}}), None);
        assert_eq!(fields(&none, &[]).skew_enforcement, json!({"mode": "None"}));
        let refs: Vec<&Decision> = Vec::new();
        let f = compute(&FieldsInput {
            mc: &mc(json!({}), None),
            platform: &Platform::Aws,
            decisions: &refs,
            golden_release: Some("4.21.3"),
            golden_rhcos: None,
            cluster_version: None,
            single_replica: true,
        })
        .expect("AWS has boot image management");
        assert_eq!(f.skew_enforcement, json!({"mode": "None"}));
    }

    #[test]
    fn unsupported_platforms_publish_no_boot_image_fields() {
        let refs: Vec<&Decision> = Vec::new();
        let f = compute(&FieldsInput {
            mc: &mc(json!({}), None),
            platform: &Platform::Other("BareMetal".into()),
            decisions: &refs,
            golden_release: None,
            golden_rhcos: None,
            cluster_version: None,
            single_replica: false,
        });
        assert_eq!(f, None);
    }
}
