//! Which machine resources the MachineConfiguration opts in (`spec.managedBootImages`).

use std::collections::BTreeMap;

use kube::core::{Selector, SelectorExt};

use crate::api::MachineConfiguration;
use crate::platform::Platform;

/// The API group every supported machine manager belongs to.
const MACHINE_API_GROUP: &str = "machine.openshift.io";

/// The kinds of machine resource a MachineConfiguration can opt in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Resource {
    MachineSets,
    ControlPlaneMachineSets,
}

impl Resource {
    pub fn name(self) -> &'static str {
        match self {
            Resource::MachineSets => "machinesets",
            Resource::ControlPlaneMachineSets => "controlplanemachinesets",
        }
    }
}

/// The opt-in rule for one resource kind.
#[derive(Clone, Debug, PartialEq)]
pub enum Selection {
    All,
    None,
    Partial(Selector),
    /// The configuration cannot be interpreted; every resource of this kind is an error.
    Invalid(String),
}

impl Selection {
    /// Interprets `managedBootImages` for one resource kind.
    ///
    /// `managedBootImages` (or its `machineManagers`) absent means "no opinion": the platform
    /// default, All on clouds we manage. An empty `machineManagers` list is an explicit opt-out of
    /// everything; the predecessor confused the two.
    pub fn for_resource(
        mc: &MachineConfiguration,
        resource: Resource,
        platform: &Platform,
    ) -> Self {
        let managers = mc
            .spec
            .managed_boot_images
            .as_ref()
            .and_then(|m| m.machine_managers.as_ref());
        let Some(managers) = managers else {
            return match resource {
                Resource::MachineSets if platform.managed_by_default() => Selection::All,
                // Control-plane updates are opt-in only: replacing every control-plane machine
                // is too disruptive to do by default.
                _ => Selection::None,
            };
        };
        let Some(manager) = managers
            .iter()
            .find(|m| m.resource == resource.name() && m.api_group == MACHINE_API_GROUP)
        else {
            return Selection::None;
        };
        match manager.selection.mode.as_str() {
            "All" => Selection::All,
            "None" => Selection::None,
            "Partial" if resource == Resource::ControlPlaneMachineSets => Selection::Invalid(
                "selection mode Partial is not allowed for controlplanemachinesets; use All or None"
                    .into(),
            ),
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
                match Selector::try_from(selector) {
                    Ok(selector) => Selection::Partial(selector),
                    Err(e) => Selection::Invalid(format!(
                        "partial.machineResourceSelector of {} is invalid: {e}",
                        resource.name()
                    )),
                }
            }
            other => Selection::Invalid(format!(
                "unknown selection mode {other:?} for {}; expected All, Partial or None",
                resource.name()
            )),
        }
    }

    /// Whether a resource with these labels is selected; `Err` carries the invalid-config text.
    pub fn selects(&self, labels: &BTreeMap<String, String>) -> Result<bool, &str> {
        match self {
            Selection::All => Ok(true),
            Selection::None => Ok(false),
            Selection::Partial(selector) => Ok(selector.matches(labels)),
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

#[cfg(test)]
mod tests {
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

    #[test]
    fn absent_config_is_the_platform_default() {
        let empty = mc(json!({}));
        let ms = Resource::MachineSets;
        assert_eq!(
            Selection::for_resource(&empty, ms, &Platform::Aws),
            Selection::All
        );
        assert_eq!(
            Selection::for_resource(&empty, ms, &Platform::VSphere),
            Selection::All
        );
        let none = Platform::Other("None".into());
        assert_eq!(Selection::for_resource(&empty, ms, &none), Selection::None);
        let cp = Resource::ControlPlaneMachineSets;
        assert_eq!(
            Selection::for_resource(&empty, cp, &Platform::Aws),
            Selection::None
        );
    }

    #[test]
    fn empty_manager_list_opts_out_of_everything() {
        let opted_out = mc(json!({"managedBootImages": {"machineManagers": []}}));
        let got = Selection::for_resource(&opted_out, Resource::MachineSets, &Platform::Aws);
        assert_eq!(got, Selection::None);
    }

    #[test]
    fn explicit_modes() {
        let all = managers(json!({"mode": "All"}));
        assert_eq!(
            Selection::for_resource(&all, Resource::MachineSets, &Platform::Gcp),
            Selection::All
        );
        let none = managers(json!({"mode": "None"}));
        assert_eq!(
            Selection::for_resource(&none, Resource::MachineSets, &Platform::Gcp),
            Selection::None
        );
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
        let sel = Selection::for_resource(&partial, Resource::MachineSets, &Platform::Aws);
        let base = [("boot", "yes"), ("zone", "a"), ("team", "x")];
        assert_eq!(sel.selects(&labels(&base)), Ok(true));
        assert_eq!(
            sel.selects(&labels(&[("boot", "yes"), ("zone", "c"), ("team", "x")])),
            Ok(false)
        );
        assert_eq!(
            sel.selects(&labels(&[("boot", "yes"), ("zone", "a")])),
            Ok(false)
        );
        let mut gpu = labels(&base);
        gpu.insert("tier".into(), "gpu".into());
        assert_eq!(sel.selects(&gpu), Ok(false));
        let mut legacy = labels(&base);
        legacy.insert("legacy".into(), "".into());
        assert_eq!(sel.selects(&legacy), Ok(false));
    }

    #[test]
    fn unknown_operator_or_mode_is_invalid_not_a_panic() {
        let bad_op = managers(
            json!({"mode": "Partial", "partial": {"machineResourceSelector": {
                "matchExpressions": [{"key": "zone", "operator": "Near", "values": ["a"]}]
            }}}),
        );
        let sel = Selection::for_resource(&bad_op, Resource::MachineSets, &Platform::Aws);
        assert!(
            matches!(sel, Selection::Invalid(ref m) if m.contains("invalid")),
            "{sel:?}"
        );
        assert!(sel.selects(&labels(&[])).is_err());
        let bad_mode = managers(json!({"mode": "Some"}));
        let sel = Selection::for_resource(&bad_mode, Resource::MachineSets, &Platform::Aws);
        assert!(matches!(sel, Selection::Invalid(ref m) if m.contains("Some")));
        let no_selector = managers(json!({"mode": "Partial"}));
        let sel = Selection::for_resource(&no_selector, Resource::MachineSets, &Platform::Aws);
        assert!(matches!(sel, Selection::Invalid(_)));
    }

    #[test]
    fn control_plane_allows_all_or_none_only() {
        let cfg = mc(json!({"managedBootImages": {"machineManagers": [
            {"resource": "controlplanemachinesets", "apiGroup": "machine.openshift.io",
             "selection": {"mode": "Partial", "partial": {"machineResourceSelector": {}}}}
        ]}}));
        let cp = Selection::for_resource(&cfg, Resource::ControlPlaneMachineSets, &Platform::Aws);
        assert!(matches!(cp, Selection::Invalid(_)));
        // The MachineSets entry is absent, so they are not selected.
        let ms = Selection::for_resource(&cfg, Resource::MachineSets, &Platform::Aws);
        assert_eq!(ms, Selection::None);
    }
}
