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

use super::status::Desired;
use super::status_schema::StatusSchema;
use crate::api::{ClusterVersionStatus, MachineConfiguration};
use crate::machine_kind::MachineKind;
use crate::plan::{Action, Decision};
use crate::platform::Platform;
use crate::reason::{Category, Reason};

/// Our own condition, present in Manual skew enforcement only: whether the images in use are
/// at least as new as the version the administrator declared.
pub const MANUAL_SKEW_MET: &str = "BootImageManualSkewVersionMet";

const MACHINE_API: &str = "machine.openshift.io";

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
    /// `status.managedBootImagesStatus`, where the platform has boot image management at all.
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
        if let (Some(managed), Some(allowed)) =
            (&self.managed_boot_images, &schema.managed_boot_images)
        {
            let mut managed = managed.clone();
            if let Some(list) = managed
                .get_mut("machineManagers")
                .and_then(Value::as_array_mut)
            {
                list.retain(|m| m["resource"].as_str().is_some_and(|r| allowed.allows(r)));
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

    /// Whether `status` (the object's) already says all of what `schema` lets us write.
    pub fn already_in(
        &self,
        schema: &StatusSchema,
        status: Option<&serde_json::Map<String, Value>>,
    ) -> bool {
        self.status_entries(schema)
            .iter()
            .all(|(k, v)| status.and_then(|s| s.get(k)) == Some(v))
    }
}

pub fn compute(input: &FieldsInput<'_>) -> Fields {
    let managed = effective_managers(input.mc, input.platform);
    let machine_sets_all = managed
        .as_ref()
        .and_then(|m| m.get("machineManagers")?.as_array().cloned())
        .unwrap_or_default()
        .iter()
        .any(|m| m["resource"] == "machinesets" && m["selection"]["mode"] == "All");
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
        None if managed.is_some() && machine_sets_all => {
            let version = automatic_version(input, &install);
            (
                json!({"mode": "Automatic", "automatic": {"ocpVersion": version}}),
                None,
            )
        }
        None => (
            json!({"mode": "Manual", "manual": {"mode": "OCPVersion", "ocpVersion": install}}),
            None,
        ),
    };
    Fields {
        managed_boot_images: managed,
        skew_enforcement,
        manual_met,
    }
}

/// The effective selection, resolved per resource as the MCO's operator does: an empty list
/// opts out of everything and is published as it is; otherwise MachineSets take the admin's
/// entry or the platform default, and ControlPlaneMachineSets (where the platform supports them)
/// the admin's entry or None. `None` where the MCO publishes nothing (unsupported platforms).
fn effective_managers(mc: &MachineConfiguration, platform: &Platform) -> Option<Value> {
    if !platform.managed_by_default() {
        return None;
    }
    let managers = mc
        .spec
        .managed_boot_images
        .as_ref()
        .and_then(|m| m.machine_managers.as_ref());
    if managers.is_some_and(Vec::is_empty) {
        return Some(json!({"machineManagers": []}));
    }
    let entry = |kind: MachineKind, default: &str| {
        let named = managers
            .into_iter()
            .flatten()
            .find(|m| m.resource == kind.plural());
        let selection = match named {
            Some(m) => serde_json::to_value(&m.selection).unwrap_or_else(|_| json!({})),
            None => json!({"mode": default}),
        };
        json!({"resource": kind.plural(), "apiGroup": MACHINE_API, "selection": selection})
    };
    let mut list = vec![entry(MachineKind::MachineSet, "All")];
    if platform.control_plane_boot_images_supported() {
        list.push(entry(MachineKind::ControlPlaneMachineSet, "None"));
    }
    Some(json!({"machineManagers": list}))
}

/// `x.y.z` of a release string, the only form the API accepts (the MCO parses the same way).
fn ocp_version(release: &str) -> Option<String> {
    let v = semver::Version::parse(release.trim_start_matches('v')).ok()?;
    Some(format!("{}.{}.{}", v.major, v.minor, v.patch))
}

/// The release the cluster was installed with: the oldest completed update, or `0.0.0` (the
/// MCO's conservative fallback, `GetOCPInstallVersion`).
fn install_version(cv: Option<&ClusterVersionStatus>) -> String {
    cv.into_iter()
        .flat_map(|s| s.history.iter().rev())
        .find(|h| h.state == "Completed")
        .and_then(|h| ocp_version(&h.version))
        .unwrap_or_else(|| "0.0.0".into())
}

/// How a decision bears on the claim "every selected machine resource boots release R".
enum Standing {
    Current,
    /// An update is planned or held: not yet, and soon.
    Pending,
    /// Selected but left alone (custom image, error, opt-out, owner): its image is unknown.
    Unvouched,
    /// Not selected: not part of the claim.
    Outside,
}

fn standing(d: &Decision) -> Standing {
    match (d.action, d.reason.category()) {
        (Action::UpToDate, _) => Standing::Current,
        (Action::Update, _) => Standing::Pending,
        (Action::Skip, Category::Hold) => Standing::Pending,
        _ if d.reason == Reason::NotSelected => Standing::Outside,
        _ => Standing::Unvouched,
    }
}

/// Automatic mode: the golden release once every selected resource uses it; the install
/// release when one cannot be vouched for (as the MCO's `resetClusterBootImage`); during a
/// rollout, what was recorded before.
fn automatic_version(input: &FieldsInput<'_>, install: &str) -> String {
    let standings: Vec<Standing> = input.decisions.iter().map(|d| standing(d)).collect();
    let recorded = input
        .mc
        .status
        .as_ref()
        .and_then(|s| s.extra.get("bootImageSkewEnforcementStatus"))
        .filter(|s| s["mode"] == "Automatic")
        .and_then(|s| s["automatic"]["ocpVersion"].as_str())
        .map(str::to_string);
    if standings.iter().any(|s| matches!(s, Standing::Unvouched)) {
        return install.to_string();
    }
    if standings.iter().any(|s| matches!(s, Standing::Pending)) {
        return recorded.unwrap_or_else(|| install.to_string());
    }
    match input.golden_release.and_then(ocp_version) {
        Some(release) => release,
        None => recorded.unwrap_or_else(|| install.to_string()),
    }
}

/// Manual mode: whether the images in use are as new as the declared version. Only images the
/// planner judged count: current ones boot the golden release; outdated ones something older,
/// by how much image ids do not say.
fn manual_met(manual: &Value, input: &FieldsInput<'_>) -> Desired {
    let judged: Vec<&&Decision> = input
        .decisions
        .iter()
        .filter(|d| {
            d.boot_image.current.is_some()
                && matches!(standing(d), Standing::Current | Standing::Pending)
        })
        .collect();
    let outdated: Vec<String> = judged
        .iter()
        .filter(|d| d.boot_image.target.is_some())
        .map(|d| format!("{}/{}", d.namespace, d.name))
        .collect();
    let (declared, golden, what) = declared_and_golden(manual, input);
    let condition = |status: Option<bool>, reason: &str, message: String| Desired {
        type_: MANUAL_SKEW_MET,
        status,
        reason: reason.into(),
        message,
    };
    let (Some(declared), Some(golden)) = (declared, golden) else {
        return condition(
            None,
            "VersionUnknown",
            "the declared version or the golden boot images' version is missing".into(),
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
    let named = super::status::first_few(outdated.iter().cloned(), 10, ", ");
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
    use crate::platform::SharedImage;

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
            current: Some(SharedImage::of(json!("ami-old"))),
            target: outdated.then(|| SharedImage::of(json!("ami-new"))),
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
        assert!(
            !f.already_in(&StatusSchema::NEWEST, Some(&recorded)),
            "a changed record is written"
        );
        assert!(
            f.already_in(
                &StatusSchema::NEWEST,
                Some(&f.status_entries(&StatusSchema::NEWEST))
            ),
            "an unchanged one is not"
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
        });
        assert_eq!(f.skew_enforcement, json!({"mode": "None"}));
    }

    #[test]
    fn unsupported_platforms_publish_no_effective_selection() {
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
        assert_eq!(f.managed_boot_images, None);
        assert_eq!(
            f.skew_enforcement,
            json!({"mode": "Manual", "manual": {"mode": "OCPVersion", "ocpVersion": "0.0.0"}})
        );
    }
}
