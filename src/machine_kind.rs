//! The kinds of machine resource whose boot images we manage, and everything that differs
//! between them. Adding a kind (Cluster API MachineSets are next) is one variant here and one
//! [`MachineObject`] impl; the planner, revert, metrics, status and the CLI ask this type.

use std::fmt;

use kube::core::ApiResource;
use serde_json::Value;

use crate::api::{ControlPlaneMachineSet, MachineSet, MachineTemplate, ObjectMeta};
use crate::plan::stub;
use crate::platform::{self, Platform};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum MachineKind {
    MachineSet,
    ControlPlaneMachineSet,
}

impl MachineKind {
    pub const ALL: [MachineKind; 2] =
        [MachineKind::MachineSet, MachineKind::ControlPlaneMachineSet];

    /// The Kubernetes kind, as in `kind:` and in Event and log fields.
    pub fn kind(self) -> &'static str {
        match self {
            MachineKind::MachineSet => "MachineSet",
            MachineKind::ControlPlaneMachineSet => "ControlPlaneMachineSet",
        }
    }

    /// The kind in the plural, as people write it in messages: `MachineSets`.
    pub fn plural_title(self) -> &'static str {
        match self {
            MachineKind::MachineSet => "MachineSets",
            MachineKind::ControlPlaneMachineSet => "ControlPlaneMachineSets",
        }
    }

    /// The resource name, which is also what `managedBootImages.machineManagers[].resource`
    /// says.
    pub fn plural(self) -> &'static str {
        match self {
            MachineKind::MachineSet => "machinesets",
            MachineKind::ControlPlaneMachineSet => "controlplanemachinesets",
        }
    }

    pub fn api_group(self) -> &'static str {
        "machine.openshift.io"
    }

    pub fn api_version(self) -> &'static str {
        match self {
            MachineKind::MachineSet => "machine.openshift.io/v1beta1",
            MachineKind::ControlPlaneMachineSet => "machine.openshift.io/v1",
        }
    }

    /// For dynamic clients (the `revert` command patches objects it reads as JSON).
    pub fn api_resource(self) -> ApiResource {
        match self {
            MachineKind::MachineSet => ApiResource::erase::<MachineSet>(&()),
            MachineKind::ControlPlaneMachineSet => {
                ApiResource::erase::<ControlPlaneMachineSet>(&())
            }
        }
    }

    /// JSON Pointer to `providerSpec.value` inside an object of this kind.
    pub fn provider_spec_pointer(self) -> &'static str {
        match self {
            MachineKind::MachineSet => "/spec/template/spec/providerSpec/value",
            MachineKind::ControlPlaneMachineSet => {
                "/spec/template/machines_v1beta1_machine_openshift_io/spec/providerSpec/value"
            }
        }
    }

    /// Whether we may point objects of this kind at another stub secret. Never a
    /// ControlPlaneMachineSet: the control-plane machine set operator compares each control-plane
    /// Machine's providerSpec with the template's, ignoring only the boot image fields
    /// (openshift/cluster-control-plane-machine-set-operator,
    /// pkg/machineproviders/providers/openshift/machine/v1beta1/providerconfig: the `Diff` of
    /// aws.go, gcp.go and azure.go; `generateMachineInfo` in provider.go), so a new secret name
    /// would mark every control-plane Machine for replacement and, with the default
    /// RollingUpdate strategy, replace the whole control plane.
    pub fn may_change_stub_secret(self) -> bool {
        match self {
            MachineKind::MachineSet => true,
            MachineKind::ControlPlaneMachineSet => false,
        }
    }

    /// Whether `managedBootImages` may select objects of this kind by label. The
    /// MachineConfiguration API allows only All or None for ControlPlaneMachineSets.
    pub fn allows_partial_selection(self) -> bool {
        match self {
            MachineKind::MachineSet => true,
            MachineKind::ControlPlaneMachineSet => false,
        }
    }

    /// Whether objects of this kind are selected when `managedBootImages` does not name the
    /// kind: MachineSets follow the platform default; control-plane updates are opt-in only,
    /// since replacing every control-plane machine is too disruptive to do by default.
    pub fn selected_by_default(self, platform: &Platform) -> bool {
        match self {
            MachineKind::MachineSet => platform.managed_by_default(),
            MachineKind::ControlPlaneMachineSet => false,
        }
    }
}

impl fmt::Display for MachineKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.kind())
    }
}

/// A typed machine resource: what the planner reads of it.
pub trait MachineObject {
    const KIND: MachineKind;
    fn meta(&self) -> &ObjectMeta;
    /// The machine template holding the provider spec; `None` when the object has none.
    fn machine_template(&self) -> Option<&MachineTemplate>;
    /// Drops every field the planner does not read. The watch keeps objects this way: a
    /// MachineSet's provider spec, unknown fields and status are most of its memory.
    fn keep_only_what_the_planner_reads(&mut self);
}

impl MachineObject for MachineSet {
    const KIND: MachineKind = MachineKind::MachineSet;
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn machine_template(&self) -> Option<&MachineTemplate> {
        Some(&self.spec.template)
    }
    fn keep_only_what_the_planner_reads(&mut self) {
        self.metadata.managed_fields = None;
        self.spec.extra = Default::default();
        self.spec.template.keep_only_what_the_planner_reads();
        self.status = None;
    }
}

impl MachineObject for ControlPlaneMachineSet {
    const KIND: MachineKind = MachineKind::ControlPlaneMachineSet;
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn machine_template(&self) -> Option<&MachineTemplate> {
        self.spec.template.machines_v1beta1.as_ref()
    }
    fn keep_only_what_the_planner_reads(&mut self) {
        self.metadata.managed_fields = None;
        self.spec.extra = Default::default();
        self.spec.template.extra = Default::default();
        if let Some(template) = &mut self.spec.template.machines_v1beta1 {
            template.keep_only_what_the_planner_reads();
        }
        self.status = None;
    }
}

impl MachineTemplate {
    /// The template's labels (the OS label) and, of the provider spec, the fields a platform
    /// rule or the stub-secret rule reads; nothing else.
    fn keep_only_what_the_planner_reads(&mut self) {
        self.extra = Default::default();
        if let Some(metadata) = &mut self.metadata {
            metadata.extra = Default::default();
        }
        self.spec.extra = Default::default();
        if let Some(Value::Object(spec)) = &mut self.spec.provider_spec.value {
            // Rebuilt rather than filtered in place, which would keep the whole map's capacity.
            *spec = std::mem::take(spec)
                .into_iter()
                .filter(|(field, _)| field == stub::FIELD || platform::read_by_a_rule(field))
                .collect();
        }
    }
}

#[cfg(test)]
mod tests {
    use kube::Resource;
    use serde_json::json;

    use super::*;

    /// The names here are written out for `&'static str`; the typed API views are the other
    /// source of the same facts, and must agree.
    #[test]
    fn names_agree_with_the_typed_api_views() {
        fn check<K: Resource<DynamicType = ()> + MachineObject>() {
            assert_eq!(K::KIND.kind(), K::kind(&()));
            assert_eq!(K::KIND.plural(), K::plural(&()));
            assert_eq!(K::KIND.api_group(), K::group(&()));
            assert_eq!(K::KIND.api_version(), K::api_version(&()));
        }
        check::<MachineSet>();
        check::<ControlPlaneMachineSet>();
    }

    #[test]
    fn the_provider_spec_pointer_finds_the_provider_spec_of_each_kind() {
        let template = json!({"spec": {"providerSpec": {"value": {"marker": 1}}}});
        let objects = [
            (
                MachineKind::MachineSet,
                json!({"spec": {"template": template}}),
            ),
            (
                MachineKind::ControlPlaneMachineSet,
                json!({"spec": {"template": {"machines_v1beta1_machine_openshift_io": template}}}),
            ),
        ];
        for (kind, object) in objects {
            assert_eq!(
                object.pointer(kind.provider_spec_pointer()),
                Some(&json!({"marker": 1})),
                "{kind}"
            );
        }
    }
}
