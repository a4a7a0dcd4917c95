//! Which machine resources the administrator opted in: our annotation on the
//! MachineConfiguration, else `spec.managedBootImages`, else the Machine Config Operator's own
//! default for the release and platform.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::core::{Selector, SelectorExt};

use crate::api::{ClusterVersionStatus, MachineConfiguration, MachineManager, ManagedBootImages};
use crate::machine_kind::MachineKind;
use crate::names::OPT_IN_ANNOTATION;
use crate::platform::Platform;

/// The opt-in rule for one resource kind.
#[derive(Clone, Debug, PartialEq)]
pub enum Selection {
    All,
    None,
    /// The selector's requirements, every one of which a selected resource meets.
    Partial(Selector),
    /// The configuration cannot be interpreted; every resource of this kind is an error.
    Invalid(String),
}

/// Where a kind's selection came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Origin {
    /// [`OPT_IN_ANNOTATION`] on the MachineConfiguration.
    Annotation,
    /// `spec.managedBootImages`.
    Spec,
    /// Nobody declared one for the kind: the Machine Config Operator's default.
    Default,
}

impl Origin {
    pub fn describe(self) -> &'static str {
        match self {
            Origin::Annotation => "the annotation boot-image-controller.io/managed-boot-images",
            Origin::Spec => "spec.managedBootImages",
            Origin::Default => "the release's default",
        }
    }

    /// The word `plan -o json` prints under `selectionFrom`.
    pub fn as_str(self) -> &'static str {
        match self {
            Origin::Annotation => "annotation",
            Origin::Spec => "spec",
            Origin::Default => "default",
        }
    }
}

/// A kind's effective selection as plans and status report it: the mode, and where it came
/// from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Selected {
    pub mode: &'static str,
    pub origin: Origin,
}

impl std::fmt::Display for Selected {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.origin {
            Origin::Default => write!(f, "{} by default", self.mode),
            origin => write!(f, "{} from {}", self.mode, origin.as_str()),
        }
    }
}

/// The command that opts every MachineSet in, as messages and the README show it.
pub const OPT_IN_COMMAND: &str = "oc annotate machineconfiguration cluster \
    boot-image-controller.io/managed-boot-images='{\"machineManagers\":[{\"resource\":\"machinesets\",\
\"apiGroup\":\"machine.openshift.io\",\"selection\":{\"mode\":\"All\"}}]}'";

/// The machine managers the administrator declared, and where. Our annotation comes first: the
/// spec cannot carry the choice on 4.16 (its API server prunes `managedBootImages`), and on AWS
/// and GCP from 4.17 setting it turns the Machine Config Operator's own boot image controller
/// on (`CheckBootImagePlatform`, pkg/controller/common/featuregates.go), which this controller
/// then leaves the MachineSets to. The annotation survives upgrades, so an opt-in made on 4.20
/// still holds on 4.21, where the MCO enrolls Azure and vSphere only on request.
pub struct Declared {
    pub origin: Origin,
    /// `None` when nothing is declared; `Err` when the annotation is not such JSON.
    managers: Result<Option<Vec<MachineManager>>, String>,
}

impl Declared {
    pub fn read(mc: &MachineConfiguration) -> Self {
        let annotation = (mc.metadata.annotations.as_ref()).and_then(|a| a.get(OPT_IN_ANNOTATION));
        if let Some(text) = annotation {
            let managers = serde_json::from_str::<ManagedBootImages>(text)
                .map(|declared| declared.machine_managers.or(Some(Vec::new())))
                .map_err(|e| {
                    format!(
                        "the annotation {OPT_IN_ANNOTATION} is not JSON of the shape of \
                         spec.managedBootImages ({{\"machineManagers\": [...]}}): {e}"
                    )
                });
            return Declared {
                origin: Origin::Annotation,
                managers,
            };
        }
        let spec = (mc.spec.managed_boot_images.as_ref()).and_then(|m| m.machine_managers.clone());
        let origin = spec.as_ref().map_or(Origin::Default, |_| Origin::Spec);
        Declared {
            origin,
            managers: Ok(spec),
        }
    }

    /// The declared entry of `kind` (its resource and apiGroup), or why there is none to read:
    /// `Ok(None)` when the declaration does not name the kind.
    pub fn entry(&self, kind: MachineKind) -> Result<Option<&MachineManager>, &str> {
        let managers = self.managers.as_ref().map_err(String::as_str)?;
        Ok((managers.iter().flatten())
            .find(|m| m.resource == kind.plural() && m.api_group == kind.api_group()))
    }

    /// Whether the declaration is an empty list: an explicit opt-out of everything (the
    /// predecessor confused it with an absent list).
    pub fn opts_out_of_everything(&self) -> bool {
        matches!(&self.managers, Ok(Some(list)) if list.is_empty())
    }
}

/// The major and minor version of the release the cluster runs or is going to: the desired
/// release, else the newest history entry.
pub fn release_of(status: &ClusterVersionStatus) -> Option<(u64, u64)> {
    let version = (status.desired.as_ref())
        .and_then(|d| d.version.as_deref())
        .or_else(|| status.history.first().map(|h| h.version.as_str()))?;
    let mut numbers = version.trim_start_matches('v').split('.');
    let mut next = || numbers.next()?.parse::<u64>().ok();
    Some((next()?, next()?))
}

impl Selection {
    /// Interprets the declaration for one resource kind, each kind on its own, as the Machine
    /// Config Operator's operator does when it publishes the effective configuration
    /// (`syncManagedBootImagesStatus`, pkg/operator/sync.go): a kind the declaration does not
    /// name takes the default of `release` (see [`MachineKind::selected_by_default`]); an empty
    /// list opts out of everything. Returns where the selection came from.
    pub fn for_kind(
        declared: &Declared,
        kind: MachineKind,
        platform: &Platform,
        release: Option<(u64, u64)>,
    ) -> (Self, Origin) {
        let kind = kind.selected_as();
        let default = || match kind.selected_by_default(platform, release) {
            true => (Selection::All, Origin::Default),
            false => (Selection::None, Origin::Default),
        };
        if declared.opts_out_of_everything() {
            return (Selection::None, declared.origin);
        }
        let manager = match declared.entry(kind) {
            Err(why) => return (Selection::Invalid(why.to_string()), declared.origin),
            Ok(None) => return default(),
            Ok(Some(manager)) => manager,
        };
        (Selection::of_entry(manager, kind), declared.origin)
    }

    /// The selection one declared entry makes for `kind`.
    fn of_entry(manager: &MachineManager, kind: MachineKind) -> Self {
        match manager.selection.mode.as_str() {
            "All" => Selection::All,
            "None" => Selection::None,
            "Partial" if !kind.allows_partial_selection() => Selection::Invalid(format!(
                "selection mode Partial is not allowed for {}; use All or None",
                kind.plural()
            )),
            "Partial" => {
                let Some(selector) = manager
                    .selection
                    .partial
                    .as_ref()
                    .and_then(|p| p.machine_resource_selector.clone())
                else {
                    return Selection::Invalid(
                        "selection mode Partial needs partial.machineResourceSelector".into(),
                    );
                };
                match kubernetes_selector(selector) {
                    Ok(selector) => Selection::Partial(selector),
                    Err(why) => Selection::Invalid(format!(
                        "partial.machineResourceSelector of {} is invalid: {why}",
                        kind.plural()
                    )),
                }
            }
            other => Selection::Invalid(format!(
                "unknown selection mode {other:?} for {}; expected All, Partial or None",
                kind.plural()
            )),
        }
    }

    /// Whether a resource with these labels is selected; `Err` carries the invalid-config text.
    /// kube-core matches a requirement as Kubernetes does: `notin` and `!=` are met by a
    /// resource without the label (k8s.io/apimachinery, pkg/labels/selector.go,
    /// `Requirement.Matches`; the Machine Config Operator matches MachineSets with
    /// `metav1.LabelSelectorAsSelector`, which builds those requirements).
    pub fn selects(&self, labels: Option<&BTreeMap<String, String>>) -> Result<bool, &str> {
        match self {
            Selection::All => Ok(true),
            Selection::None => Ok(false),
            Selection::Partial(selector) => {
                Ok(selector.matches(labels.unwrap_or(&BTreeMap::new())))
            }
            Selection::Invalid(message) => Err(message),
        }
    }

    /// How the selection reads in a status message.
    pub fn describe(&self) -> &'static str {
        match self {
            Selection::All => "All",
            Selection::None => "None",
            Selection::Partial(_) => "Partial",
            Selection::Invalid(_) => "invalid",
        }
    }
}

/// `selector` as kube-core matches it, or why Kubernetes refuses it. The Machine Config Operator
/// turns the selector
/// into a `labels.Selector` with `metav1.LabelSelectorAsSelector`
/// (`getMachineResourceSelectorFromMachineManagers`, pkg/controller/bootimage/helpers.go) and
/// enqueues nothing when that fails; its checks are `labels.NewRequirement`'s
/// (k8s.io/apimachinery, pkg/labels/selector.go): a qualified-name key, `In` and `NotIn` with at
/// least one value, `Exists` and `DoesNotExist` with none, and label-value syntax for every
/// value. kube-core's `Selector` checks only the operator: `NotIn []` would select everything.
fn kubernetes_selector(selector: LabelSelector) -> Result<Selector, String> {
    let labels = (selector.match_labels.iter().flatten()).map(|(k, v)| (k, "In", Some(vec![v])));
    let expressions = (selector.match_expressions.iter().flatten()).map(|e| {
        (
            &e.key,
            e.operator.as_str(),
            e.values.as_ref().map(|v| v.iter().collect()),
        )
    });
    for (key, operator, values) in labels.chain(expressions) {
        let values: Vec<&String> = values.unwrap_or_default();
        if let Err(why) = label_key(key) {
            return Err(format!("key {:?}: {why}", clipped(key)));
        }
        match (operator, values.is_empty()) {
            ("In" | "NotIn", true) => {
                return Err(format!("{operator} on {key:?} needs at least one value"));
            }
            ("Exists" | "DoesNotExist", false) => {
                return Err(format!("{operator} on {key:?} takes no values"));
            }
            _ => {}
        }
        if let Some(value) = values.iter().find(|v| !is_label_value(v)) {
            return Err(format!(
                "value {:?} of {key:?} is not a label value (at most 63 characters: letters, \
                 digits, '-', '_' and '.', starting and ending with a letter or digit)",
                clipped(value)
            ));
        }
    }
    Selector::try_from(selector).map_err(|e| e.to_string())
}

/// A label key: an optional DNS subdomain prefix and `/`, then a name
/// (k8s.io/apimachinery, pkg/util/validation `IsQualifiedName`).
fn label_key(key: &str) -> Result<(), &'static str> {
    let (prefix, name) = match key.rsplit_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, key),
    };
    if let Some(prefix) = prefix
        && !is_dns_subdomain(prefix)
    {
        return Err("its prefix must be a DNS subdomain (lower case, at most 253 characters)");
    }
    if name.is_empty() || !is_label_value(name) {
        return Err(
            "its name must be 1 to 63 letters, digits, '-', '_' or '.', starting and \
                    ending with a letter or digit",
        );
    }
    Ok(())
}

/// A label value: empty, or up to 63 alphanumerics, `-`, `_` and `.` between alphanumerics.
fn is_label_value(value: &str) -> bool {
    let bytes = value.as_bytes();
    let edge = |b: Option<&u8>| b.is_none_or(u8::is_ascii_alphanumeric);
    value.len() <= 63
        && edge(bytes.first())
        && edge(bytes.last())
        && (bytes.iter()).all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(b))
}

/// A DNS-1123 subdomain: dot-separated lower-case labels, at most 253 characters.
fn is_dns_subdomain(name: &str) -> bool {
    let label_ok = |label: &str| {
        let bytes = label.as_bytes();
        let edge = |b: Option<&u8>| b.is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit());
        edge(bytes.first())
            && edge(bytes.last())
            && (bytes.iter()).all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-')
    };
    name.len() <= 253 && name.split('.').all(label_ok)
}

/// At most 64 characters of `text`, to quote it in a message: a label key or value, or the OS
/// stream a label names (longer ones name no stream a MachineSet can choose).
pub(super) fn clipped(text: &str) -> &str {
    text.char_indices()
        .nth(64)
        .map_or(text, |(end, _)| &text[..end])
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use serde_json::json;

    use super::*;

    fn mc(spec: serde_json::Value) -> MachineConfiguration {
        serde_json::from_value(json!({
            "apiVersion": "operator.openshift.io/v1", "kind": "MachineConfiguration",
            "metadata": {"name": "cluster"}, "spec": spec
        }))
        .unwrap()
    }

    fn managers(selection: serde_json::Value) -> MachineConfiguration {
        mc(json!({"managedBootImages": {"machineManagers": [
            {"resource": "machinesets", "apiGroup": "machine.openshift.io", "selection": selection}
        ]}}))
    }

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn selects<'s>(sel: &'s Selection, labels: &BTreeMap<String, String>) -> Result<bool, &'s str> {
        sel.selects(Some(labels))
    }

    /// `cfg` selects each `(kind, platform)` as expected.
    fn assert_selects(cfg: &MachineConfiguration, cases: &[(MachineKind, Platform, Selection)]) {
        for (kind, platform, expected) in cases {
            let got = for_kind(cfg, *kind, platform);
            assert_eq!(&got, expected, "{kind:?} on {platform:?}");
        }
    }

    /// The selection of `kind` at 4.22, where the MCO opts MachineSets in on all four platforms.
    fn for_kind(cfg: &MachineConfiguration, kind: MachineKind, platform: &Platform) -> Selection {
        Selection::for_kind(&Declared::read(cfg), kind, platform, Some((4, 22))).0
    }

    const MS: MachineKind = MachineKind::MachineSet;
    const CP: MachineKind = MachineKind::ControlPlaneMachineSet;

    fn no_platform() -> Platform {
        Platform::Other("None".into())
    }

    #[test]
    fn absent_config_is_the_platform_default() {
        assert_selects(
            &mc(json!({})),
            &[
                (MS, Platform::Aws, Selection::All),
                (MS, Platform::VSphere, Selection::All),
                (MS, no_platform(), Selection::None),
                (CP, Platform::Aws, Selection::None),
            ],
        );
    }

    #[test]
    fn empty_manager_list_opts_out_of_everything() {
        let opted_out = mc(json!({"managedBootImages": {"machineManagers": []}}));
        assert_selects(&opted_out, &[(MS, Platform::Aws, Selection::None)]);
    }

    #[test]
    fn a_list_naming_only_control_planes_leaves_machine_sets_at_their_default() {
        let cfg = mc(json!({"managedBootImages": {"machineManagers": [
            {"resource": "controlplanemachinesets", "apiGroup": "machine.openshift.io",
             "selection": {"mode": "All"}}
        ]}}));
        assert_selects(
            &cfg,
            &[
                (MS, Platform::Aws, Selection::All),
                (MS, no_platform(), Selection::None),
                (CP, Platform::Aws, Selection::All),
            ],
        );
        // And the other way round: control planes keep their default, None.
        let only_ms = managers(json!({"mode": "All"}));
        assert_selects(&only_ms, &[(CP, Platform::Aws, Selection::None)]);
    }

    #[test]
    fn azure_stack_hub_is_not_managed_by_default() {
        let status: crate::api::PlatformStatus = serde_json::from_value(json!({
            "type": "Azure", "azure": {"cloudName": "AzureStackCloud"}
        }))
        .unwrap();
        let platform = Platform::from_status(&status);
        assert_eq!(platform, Platform::AzureStackHub);
        assert!(platform.rule().is_none());
        assert_selects(&mc(json!({})), &[(MS, platform, Selection::None)]);
        let public: crate::api::PlatformStatus = serde_json::from_value(json!({
            "type": "Azure", "azure": {"cloudName": "AzurePublicCloud"}
        }))
        .unwrap();
        assert_eq!(Platform::from_status(&public), Platform::Azure);
    }

    #[test]
    fn explicit_modes() {
        let all = managers(json!({"mode": "All"}));
        assert_selects(&all, &[(MS, Platform::Gcp, Selection::All)]);
        let none = managers(json!({"mode": "None"}));
        assert_selects(&none, &[(MS, Platform::Gcp, Selection::None)]);
    }

    #[test]
    fn partial_matches_labels_and_expressions() {
        let partial = managers(
            json!({"mode": "Partial", "partial": {"machineResourceSelector": {
                "matchLabels": {"boot": "yes"},
                "matchExpressions": [
                    {"key": "zone", "operator": "In", "values": ["a", "b"]},
                    {"key": "tier", "operator": "NotIn", "values": ["gpu"]},
                    {"key": "team", "operator": "Exists"},
                    {"key": "legacy", "operator": "DoesNotExist"}
                ]
            }}}),
        );
        let sel = for_kind(&partial, MachineKind::MachineSet, &Platform::Aws);
        let base = [("boot", "yes"), ("zone", "a"), ("team", "x")];
        assert_eq!(selects(&sel, &labels(&base)), Ok(true));
        assert_eq!(
            selects(
                &sel,
                &labels(&[("boot", "yes"), ("zone", "c"), ("team", "x")])
            ),
            Ok(false)
        );
        assert_eq!(
            selects(&sel, &labels(&[("boot", "yes"), ("zone", "a")])),
            Ok(false)
        );
        let mut gpu = labels(&base);
        gpu.insert("tier".into(), "gpu".into());
        assert_eq!(selects(&sel, &gpu), Ok(false));
        let mut legacy = labels(&base);
        legacy.insert("legacy".into(), "".into());
        assert_eq!(selects(&sel, &legacy), Ok(false));
        assert_eq!(sel.selects(None), Ok(false), "no labels: no boot=yes");
        // A resource without the label meets `NotIn` and `!=` (`Requirement.Matches`).
        let not = managers(
            json!({"mode": "Partial", "partial": {"machineResourceSelector": {
                "matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["gpu"]}]
            }}}),
        );
        let sel = for_kind(&not, MachineKind::MachineSet, &Platform::Aws);
        assert_eq!(sel.selects(None), Ok(true));
        assert_eq!(selects(&sel, &labels(&[("tier", "gpu")])), Ok(false));
        assert_eq!(selects(&sel, &labels(&[("tier", "cpu")])), Ok(true));
    }

    #[test]
    fn unknown_operator_or_mode_is_invalid_not_a_panic() {
        let bad_op = managers(
            json!({"mode": "Partial", "partial": {"machineResourceSelector": {
                "matchExpressions": [{"key": "zone", "operator": "Near", "values": ["a"]}]
            }}}),
        );
        let sel = for_kind(&bad_op, MachineKind::MachineSet, &Platform::Aws);
        assert!(
            matches!(sel, Selection::Invalid(ref m) if m.contains("invalid")),
            "{sel:?}"
        );
        assert!(selects(&sel, &labels(&[])).is_err());
        let bad_mode = managers(json!({"mode": "Some"}));
        let sel = for_kind(&bad_mode, MachineKind::MachineSet, &Platform::Aws);
        assert!(matches!(sel, Selection::Invalid(ref m) if m.contains("Some")));
        let no_selector = managers(json!({"mode": "Partial"}));
        let sel = for_kind(&no_selector, MachineKind::MachineSet, &Platform::Aws);
        assert!(matches!(sel, Selection::Invalid(_)));
    }

    #[test]
    fn selectors_kubernetes_rejects_are_invalid_as_the_mco_reports_them() {
        for (expression, said) in [
            (
                json!({"key": "tier", "operator": "NotIn", "values": []}),
                "NotIn",
            ),
            (json!({"key": "tier", "operator": "NotIn"}), "NotIn"),
            (json!({"key": "tier", "operator": "In", "values": []}), "In"),
            (
                json!({"key": "tier", "operator": "Exists", "values": ["x"]}),
                "no values",
            ),
            (
                json!({"key": "tier", "operator": "DoesNotExist", "values": ["x"]}),
                "no values",
            ),
            (json!({"key": "bad key", "operator": "Exists"}), "bad key"),
            (json!({"key": "", "operator": "Exists"}), "key"),
            (
                json!({"key": "Example.com/tier", "operator": "Exists"}),
                "prefix",
            ),
            (json!({"key": "tier-", "operator": "Exists"}), "tier-"),
            (
                json!({"key": "tier", "operator": "In", "values": ["a b"]}),
                "a b",
            ),
            (
                json!({"key": "tier", "operator": "In", "values": ["x".repeat(64)]}),
                "value",
            ),
        ] {
            let cfg = managers(
                json!({"mode": "Partial", "partial": {"machineResourceSelector": {
                    "matchExpressions": [expression.clone()]
                }}}),
            );
            let sel = for_kind(&cfg, MachineKind::MachineSet, &Platform::Aws);
            let Selection::Invalid(message) = &sel else {
                panic!("{expression} was taken as {sel:?}");
            };
            assert!(message.contains(said), "{expression}: {message}");
            assert!(selects(&sel, &labels(&[])).is_err(), "{expression}");
        }
        let bad_label = managers(
            json!({"mode": "Partial", "partial": {"machineResourceSelector": {
                "matchLabels": {"tier": "no spaces allowed"}
            }}}),
        );
        let sel = for_kind(&bad_label, MachineKind::MachineSet, &Platform::Aws);
        assert!(matches!(sel, Selection::Invalid(_)), "{sel:?}");
        // What Kubernetes accepts stays valid: prefixed keys, empty values, dots and dashes.
        let fine = managers(
            json!({"mode": "Partial", "partial": {"machineResourceSelector": {
                "matchLabels": {"machine.openshift.io/cluster-api-machine-role": "worker", "empty": ""},
                "matchExpressions": [
                    {"key": "k8s.io/a_b.c", "operator": "In", "values": ["v1.2-x", ""]},
                    {"key": "x", "operator": "DoesNotExist", "values": []}
                ]
            }}}),
        );
        let sel = for_kind(&fine, MachineKind::MachineSet, &Platform::Aws);
        assert!(matches!(sel, Selection::Partial(_)), "{sel:?}");
    }

    #[test]
    fn control_plane_allows_all_or_none_only() {
        let cfg = mc(json!({"managedBootImages": {"machineManagers": [
            {"resource": "controlplanemachinesets", "apiGroup": "machine.openshift.io",
             "selection": {"mode": "Partial", "partial": {"machineResourceSelector": {}}}}
        ]}}));
        let cp = for_kind(&cfg, MachineKind::ControlPlaneMachineSet, &Platform::Aws);
        assert!(matches!(cp, Selection::Invalid(_)));
        // The MachineSets entry is absent, so they keep their default.
        let ms = for_kind(&cfg, MachineKind::MachineSet, &Platform::Aws);
        assert_eq!(ms, Selection::All);
    }
}
