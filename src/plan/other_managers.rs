//! Whether another controller manages boot images on this cluster, told from who wrote the
//! MachineConfiguration's boot-image status.
//!
//! The Machine Config Operator runs its own boot image controller where its feature gates and
//! platform allow it (`IsBootImageControllerRequired` and `CheckBootImagePlatform`,
//! pkg/controller/common/featuregates.go). Where it runs, its operator publishes
//! `status.managedBootImagesStatus` (`syncManagedBootImagesStatus`, pkg/operator/sync.go) and its
//! controller writes the `BootImageUpdate*` conditions (pkg/controller/bootimage/
//! boot_image_controller.go). Both write with `UpdateStatus`, a PUT of the whole status, so the
//! API server records them in `managedFields` as `Update` operations of the managers their
//! clients name (`machine-config-operator`, `machine-config-controller`), owning exactly the
//! fields whose values they changed. A PUT that leaves our conditions as they were takes none
//! of them, so our own writes never make the MCO look active; once it writes boot-image status
//! of its own, it does. Any manager other than ours counts: a second copy of this controller
//! under another name, or a person editing those fields, would fight us just the same.
//!
//! Except the MCO when it enrolls nothing: see [`mco_enrolls_nothing`].

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use crate::api::MachineConfiguration;
use crate::names::FIELD_MANAGER;

/// The condition types both the MCO's boot image controller and we report.
pub const SHARED_CONDITION_TYPES: [&str; 2] =
    ["BootImageUpdateProgressing", "BootImageUpdateDegraded"];

/// The MCO's operator puts back the whole status it computed from its informer's copy
/// (`syncMachineConfiguration`, pkg/operator/sync.go), so when that copy was older than our
/// last condition write it changes our conditions back and, for the API server, takes them
/// over. It never reports these conditions itself (it only reads them, pkg/operator/status.go):
/// its ownership of them is an accident of that write, not a manager at work.
const WHOLE_STATUS_WRITERS: [&str; 1] = ["machine-config-operator"];

/// The names the MCO's clients give the API server: the user agents of its operator's and its
/// controller's binaries (`rest.AddUserAgent`, internal/clients/builder.go; the controller
/// builds the boot image controller's client with `OperatorClientOrDie`,
/// cmd/machine-config-controller/start.go, release-4.21).
pub const MCO_MANAGERS: [&str; 2] = ["machine-config-operator", "machine-config-controller"];

/// Another field manager that owns boot-image status on the MachineConfiguration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OtherManager {
    /// The field manager's name as `managedFields` records it.
    pub manager: String,
    /// The status fields it owns, as people read them (`status.managedBootImagesStatus`, ...).
    pub owns: Vec<String>,
}

impl OtherManager {
    pub fn describe(&self) -> String {
        format!(
            "field manager {:?} owns {}",
            self.manager,
            self.owns.join(", ")
        )
    }
}

/// Whether the MCO's boot image controller enrolls nothing, so that what the MCO writes is not
/// a manager at work (openshift/machine-config-operator, branch release-4.21). Its operator
/// publishes the effective selection wherever its feature gate covers the platform
/// (`syncMachineConfiguration` and `syncManagedBootImagesStatus`, pkg/operator/sync.go): where its updates are opt-in and the administrator has
/// no opinion, that is `machinesets: None` (Azure and vSphere on 4.21: `enabledByDefault` of
/// `CheckBootImagePlatform`, pkg/controller/common/featuregates.go), and `{}` where it publishes
/// nothing (the field has no `omitempty`: openshift/api operator/v1/types_machineconfiguration.go).
/// Its controller then lists no machine resource (`getMachineResourceSelectorFromMachineManagers`,
/// pkg/controller/bootimage/helpers.go, returns `labels.Nothing()`) yet writes the shared
/// conditions on each sync ("Reconciled 0 of 0 ...": `syncMAPIMachineSets`, ms_helpers.go, and
/// `updateConditions`, boot_image_controller.go). The spec counts too: an administrator's opt-in
/// reaches the MCO's status only at its operator's next sync, and we stop at once, not after
/// the MCO started. Without a published status (releases before 4.19) we cannot tell: the MCO's
/// fields count as a manager, as they always did.
pub fn mco_enrolls_nothing(mc: &MachineConfiguration) -> bool {
    let status = mc.status.as_ref();
    let Some(published) = status.and_then(|s| s.extra.get("managedBootImagesStatus")) else {
        return false;
    };
    let published = published.get("machineManagers").and_then(Value::as_array);
    let published_none = (published.into_iter().flatten())
        .all(|m| m.pointer("/selection/mode").and_then(Value::as_str) == Some("None"));
    let spec = (mc.spec.managed_boot_images.as_ref()).and_then(|m| m.machine_managers.as_ref());
    let spec_none = (spec.into_iter().flatten()).all(|m| m.selection.mode == "None");
    published_none && spec_none
}

/// Every field manager but ours that manages boot images, told from the boot-image
/// status fields it owns, in name order.
pub fn other_managers(mc: &MachineConfiguration) -> Vec<OtherManager> {
    let idle_mco = mco_enrolls_nothing(mc);
    owners_other_than(mc)
        .into_iter()
        .filter(|owner| !(idle_mco && MCO_MANAGERS.contains(&owner.manager.as_str())))
        .collect()
}

/// The boot-image status fields (`managedBootImagesStatus`, `bootImageSkewEnforcementStatus`)
/// some manager other than ours owns, whether it manages boot images or not: a server-side
/// apply of ours must never take them (forced) nor drop them.
pub fn status_fields_owned_by_others(mc: &MachineConfiguration) -> BTreeSet<String> {
    let owned = owners_other_than(mc).into_iter().flat_map(|o| o.owns);
    owned
        .filter_map(|field| field.strip_prefix("status.").map(str::to_string))
        .collect()
}

/// Every field manager other than ours that owns boot-image status fields, in name order.
fn owners_other_than(mc: &MachineConfiguration) -> Vec<OtherManager> {
    let mut found: BTreeMap<&str, BTreeSet<String>> = BTreeMap::new();
    for entry in mc.metadata.managed_fields.iter().flatten() {
        let Some(manager) = entry.manager.as_deref().filter(|m| *m != FIELD_MANAGER) else {
            continue;
        };
        let Some(fields) = &entry.fields_v1 else {
            continue;
        };
        let mut owns = boot_image_fields(&fields.0);
        if WHOLE_STATUS_WRITERS.contains(&manager) {
            owns.retain(|field| !field.starts_with("condition "));
        }
        if owns.is_empty() {
            continue;
        }
        // One manager may have several entries (an Update of status and one of the object).
        found.entry(manager).or_default().extend(owns);
    }
    (found.into_iter())
        .map(|(manager, owns)| OtherManager {
            manager: manager.to_string(),
            owns: owns.into_iter().collect(),
        })
        .collect()
}

/// The boot-image status fields a `fieldsV1` tree owns. The tree is cluster input: anything
/// unexpected in it means "owns nothing we care about", never a failure.
fn boot_image_fields(fields: &Value) -> BTreeSet<String> {
    let mut owns = BTreeSet::new();
    let Some(status) = fields.get("f:status") else {
        return owns;
    };
    for field in ["managedBootImagesStatus", "bootImageSkewEnforcementStatus"] {
        if status.get(format!("f:{field}")).is_some() {
            owns.insert(format!("status.{field}"));
        }
    }
    let conditions = status.get("f:conditions").and_then(Value::as_object);
    for (key, entry) in conditions.into_iter().flatten() {
        // List-map entries are keyed `k:{"type":"..."}`.
        let Some(type_) = key
            .strip_prefix("k:")
            .and_then(|k| serde_json::from_str::<Value>(k).ok())
            .and_then(|k| k.get("type").and_then(Value::as_str).map(str::to_string))
        else {
            continue;
        };
        // Owning an entry's key alone (`.`, `f:type`) is how a co-owner of an unchanged list
        // item looks; only the fields that carry the condition's meaning count.
        let meaningful = ["f:status", "f:reason", "f:message"]
            .iter()
            .any(|f| entry.get(f).is_some());
        if SHARED_CONDITION_TYPES.contains(&type_.as_str()) && meaningful {
            owns.insert(format!("condition {type_}"));
        }
    }
    owns
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::ObjectMeta;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{FieldsV1, ManagedFieldsEntry};
    use serde_json::json;

    fn entry(manager: &str, operation: &str, fields: Value) -> ManagedFieldsEntry {
        ManagedFieldsEntry {
            manager: Some(manager.into()),
            operation: Some(operation.into()),
            subresource: Some("status".into()),
            fields_type: Some("FieldsV1".into()),
            fields_v1: Some(FieldsV1(fields)),
            ..ManagedFieldsEntry::default()
        }
    }

    fn configuration(entries: Vec<ManagedFieldsEntry>) -> MachineConfiguration {
        let mut mc = MachineConfiguration::new("cluster", Default::default());
        mc.metadata = ObjectMeta {
            name: Some("cluster".into()),
            managed_fields: Some(entries),
            ..ObjectMeta::default()
        };
        mc
    }

    fn condition_fields(type_: &str) -> Value {
        json!({
            format!("k:{{\"type\":\"{type_}\"}}"): {
                ".": {}, "f:type": {}, "f:status": {}, "f:reason": {}, "f:message": {},
                "f:lastTransitionTime": {}
            }
        })
    }

    #[test]
    fn the_mco_publishing_managed_boot_images_is_another_manager() {
        let mc = configuration(vec![entry(
            "machine-config-operator",
            "Update",
            json!({"f:status": {"f:managedBootImagesStatus": {".": {}, "f:machineManagers": {}},
                                "f:observedGeneration": {}}}),
        )]);
        let found = other_managers(&mc);
        assert_eq!(
            found,
            vec![OtherManager {
                manager: "machine-config-operator".into(),
                owns: vec!["status.managedBootImagesStatus".into()],
            }]
        );
        assert!(found[0].describe().contains("machine-config-operator"));
    }

    #[test]
    fn the_mco_writing_the_shared_conditions_is_another_manager() {
        let fields =
            json!({"f:status": {"f:conditions": condition_fields("BootImageUpdateDegraded")}});
        let mc = configuration(vec![entry("machine-config-controller", "Update", fields)]);
        let found = other_managers(&mc);
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].owns, vec!["condition BootImageUpdateDegraded"]);
    }

    #[test]
    fn our_own_fields_and_unrelated_status_are_not_another_manager() {
        let ours = json!({"f:status": {
            "f:conditions": condition_fields("BootImageUpdateProgressing"),
            "f:managedBootImagesStatus": {}}});
        let unrelated = json!({"f:status": {
            "f:nodeDisruptionPolicyStatus": {}, "f:observedGeneration": {},
            "f:conditions": condition_fields("NodeDisruptionPolicyValid")}});
        // A PUT that kept our condition unchanged leaves only the list entry's key to its writer.
        let key_only = json!({"f:status": {"f:conditions": {
            "k:{\"type\":\"BootImageUpdateProgressing\"}": {".": {}, "f:type": {}}}}});
        // The MCO's operator reverting our conditions from a stale copy is not a manager.
        let reverted = json!({"f:status": {
            "f:conditions": condition_fields("BootImageUpdateDegraded")}});
        let mc = configuration(vec![
            entry("boot-image-controller", "Apply", ours),
            entry("machine-config-operator", "Update", unrelated),
            entry("machine-config-operator", "Update", key_only),
            entry("machine-config-operator", "Update", reverted),
            entry(
                "kubectl",
                "Update",
                json!({"f:metadata": {"f:annotations": {}}}),
            ),
        ]);
        assert_eq!(other_managers(&mc), vec![]);
    }

    #[test]
    fn malformed_managed_fields_are_ignored() {
        let mc = configuration(vec![
            entry("a", "Update", json!("not an object")),
            entry(
                "b",
                "Update",
                json!({"f:status": {"f:conditions": {"k:not json": {}}}}),
            ),
            entry("c", "Update", json!({"f:status": {"f:conditions": ["x"]}})),
            ManagedFieldsEntry::default(),
        ]);
        assert_eq!(other_managers(&mc), vec![]);
    }

    /// The MCO on an Azure or vSphere cluster of 4.21 whose administrator has no opinion: its
    /// operator publishes `machinesets: None` and its controller reports that it reconciled
    /// nothing, both with `UpdateStatus`.
    fn idle_mco(spec: Value, published_mode: &str) -> MachineConfiguration {
        let mut mc: MachineConfiguration = serde_json::from_value(json!({
            "apiVersion": "operator.openshift.io/v1", "kind": "MachineConfiguration",
            "metadata": {"name": "cluster"},
            "spec": spec,
            "status": {"managedBootImagesStatus": {"machineManagers": [{"resource": "machinesets",
                "apiGroup": "machine.openshift.io", "selection": {"mode": published_mode}}]}},
        }))
        .unwrap();
        mc.metadata.managed_fields = configuration(vec![
            entry(
                "machine-config-operator",
                "Update",
                json!({"f:status": {"f:managedBootImagesStatus": {"f:machineManagers": {}}}}),
            ),
            entry(
                "machine-config-controller",
                "Update",
                json!({"f:status": {"f:conditions": condition_fields("BootImageUpdateProgressing")}}),
            ),
        ])
        .metadata
        .managed_fields;
        mc
    }

    #[test]
    fn an_mco_that_enrolls_nothing_is_not_another_manager() {
        let mc = idle_mco(json!({"managementState": "Managed"}), "None");
        assert!(mco_enrolls_nothing(&mc));
        assert_eq!(other_managers(&mc), vec![]);
        // Its fields stay its own: we neither take nor drop them.
        assert_eq!(
            status_fields_owned_by_others(&mc),
            BTreeSet::from(["managedBootImagesStatus".to_string()])
        );
        // It manages once it enrolls something, or once the administrator asks it to.
        let publishing_all = idle_mco(json!({}), "All");
        let opted_in = idle_mco(
            json!({"managedBootImages": {"machineManagers": [{"resource": "machinesets",
                "apiGroup": "machine.openshift.io", "selection": {"mode": "All"}}]}}),
            "None",
        );
        for mc in [publishing_all, opted_in] {
            assert!(!mco_enrolls_nothing(&mc));
            let found = other_managers(&mc);
            let names: Vec<&str> = found.iter().map(|f| f.manager.as_str()).collect();
            assert_eq!(
                names,
                ["machine-config-controller", "machine-config-operator"]
            );
        }
        // Without a published status it cannot be told: its fields count, as before.
        let mut unpublished = idle_mco(json!({}), "None");
        unpublished.status = None;
        assert_eq!(other_managers(&unpublished).len(), 2);
    }

    #[test]
    fn entries_of_one_manager_are_merged() {
        let mc = configuration(vec![
            entry(
                "another-boot-image-tool",
                "Update",
                json!({"f:status": {"f:managedBootImagesStatus": {}}}),
            ),
            entry(
                "another-boot-image-tool",
                "Apply",
                json!({"f:status": {"f:conditions": condition_fields("BootImageUpdateProgressing")}}),
            ),
        ]);
        let found = other_managers(&mc);
        assert_eq!(found.len(), 1);
        assert_eq!(
            found[0].owns,
            vec![
                "condition BootImageUpdateProgressing",
                "status.managedBootImagesStatus"
            ]
        );
    }
}
