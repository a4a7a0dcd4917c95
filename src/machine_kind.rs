//! The kinds of machine resource whose boot images we manage, and everything that differs
//! between them. Revert, metrics, status and the CLI ask this type rather than match on kinds;
//! what else a new kind needs (its watch, its list in a plan) is listed in
//! docs/architecture.md, "Adding things".

use std::collections::BTreeMap;
use std::fmt;

use jsonptr::Pointer;
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::Value;

use crate::api::{
    ClusterApiMachineDeployment, ClusterApiMachineSet, ControlPlaneMachineSet, InfrastructureRef,
    LabelSelector, Leaves, MachineSet, MachineTemplate, ObjectMeta, ProviderSpec,
};
use crate::names::{
    AUTOSCALER_LABELS_ANNOTATION, BOOT_FAILURE_HOLD_ANNOTATION, HISTORY_ANNOTATION,
    HOT_LOOP_ANNOTATION, LEGACY_OPT_OUT_ANNOTATION, OPT_OUT_ANNOTATION, OS_ID_LABEL,
    OS_STREAM_LABEL, STUB_SECRET_FIELD,
};
use crate::platform::{self, Platform};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum MachineKind {
    MachineSet,
    ControlPlaneMachineSet,
    /// A `cluster.x-k8s.io` MachineSet: its boot image is in the infrastructure machine
    /// template it references, not in the object.
    ClusterApiMachineSet,
    /// A `cluster.x-k8s.io` MachineDeployment: like a Cluster API MachineSet, but a new template
    /// replaces every one of its machines, so it is updated only when the administrator opts in.
    ClusterApiMachineDeployment,
}

impl MachineKind {
    pub const ALL: [MachineKind; 4] = [
        MachineKind::MachineSet,
        MachineKind::ControlPlaneMachineSet,
        MachineKind::ClusterApiMachineSet,
        MachineKind::ClusterApiMachineDeployment,
    ];

    /// The Kubernetes kind, as in `kind:` and in Event fields.
    pub fn kind(self) -> &'static str {
        match self {
            MachineKind::MachineSet | MachineKind::ClusterApiMachineSet => "MachineSet",
            MachineKind::ControlPlaneMachineSet => "ControlPlaneMachineSet",
            MachineKind::ClusterApiMachineDeployment => "MachineDeployment",
        }
    }

    /// The name of the kind in metric labels and logs, unique among kinds.
    pub fn label(self) -> &'static str {
        match self {
            MachineKind::ClusterApiMachineSet => "ClusterAPIMachineSet",
            MachineKind::ClusterApiMachineDeployment => "ClusterAPIMachineDeployment",
            other => other.kind(),
        }
    }

    /// The kind in the plural, as people write it in messages: `MachineSets`.
    pub fn plural_title(self) -> String {
        format!("{self}s")
    }

    /// The resource name, which is also what `managedBootImages.machineManagers[].resource`
    /// says of the Machine API kinds.
    pub fn plural(self) -> &'static str {
        match self {
            MachineKind::MachineSet | MachineKind::ClusterApiMachineSet => "machinesets",
            MachineKind::ControlPlaneMachineSet => "controlplanemachinesets",
            MachineKind::ClusterApiMachineDeployment => "machinedeployments",
        }
    }

    pub fn api_group(self) -> &'static str {
        self.api_version().split('/').next().unwrap_or_default()
    }

    pub fn api_version(self) -> &'static str {
        match self {
            MachineKind::MachineSet => "machine.openshift.io/v1beta1",
            MachineKind::ControlPlaneMachineSet => "machine.openshift.io/v1",
            MachineKind::ClusterApiMachineSet | MachineKind::ClusterApiMachineDeployment => {
                "cluster.x-k8s.io/v1beta2"
            }
        }
    }

    /// For dynamic clients (the `revert` command patches objects it reads as JSON).
    pub fn api_resource(self) -> ApiResource {
        let version = self.api_version().rsplit('/').next().unwrap_or_default();
        let gvk = GroupVersionKind::gvk(self.api_group(), version, self.kind());
        ApiResource::from_gvk_with_plural(&gvk, self.plural())
    }

    /// Whether objects of this kind live in the Cluster API namespace (`openshift-cluster-api`)
    /// rather than the Machine API one.
    pub fn is_cluster_api(self) -> bool {
        matches!(
            self,
            MachineKind::ClusterApiMachineSet | MachineKind::ClusterApiMachineDeployment
        )
    }

    /// The kind whose `managedBootImages` entry selects objects of this kind. The
    /// MachineConfiguration API names Machine API resources only (its `resource` enum); a
    /// Cluster API MachineSet makes the same machines as the Machine API MachineSet it
    /// replaces, so it follows that selection.
    pub fn selected_as(self) -> MachineKind {
        if self.is_cluster_api() {
            MachineKind::MachineSet
        } else {
            self
        }
    }

    /// JSON Pointer to `providerSpec.value` inside an object of this kind, checked at compile
    /// time. A Cluster API MachineSet has none: the planner judges a view of its infrastructure
    /// template in that shape (see [`crate::plan::cluster_api_templates`]), which it never
    /// patches in place.
    pub fn provider_spec_path(self) -> &'static Pointer {
        const MACHINE_SET: &Pointer =
            Pointer::from_static("/spec/template/spec/providerSpec/value");
        const CONTROL_PLANE: &Pointer = Pointer::from_static(
            "/spec/template/machines_v1beta1_machine_openshift_io/spec/providerSpec/value",
        );
        match self {
            MachineKind::MachineSet => MACHINE_SET,
            MachineKind::ControlPlaneMachineSet => CONTROL_PLANE,
            MachineKind::ClusterApiMachineSet | MachineKind::ClusterApiMachineDeployment => {
                Pointer::root()
            }
        }
    }

    /// Whether a spec-2 stub secret of an object of this kind is upgraded in place before its
    /// boot image moves, as the Machine Config Operator does for MachineSets and
    /// ControlPlaneMachineSets (pkg/controller/bootimage/platform_helpers.go: every
    /// `reconcile*ProviderSpec`, which both ms_helpers.go and cpms_helpers.go call, calls
    /// `upgradeStubIgnitionIfRequired`).
    ///
    /// Not a Cluster API object's: its `bootstrap.dataSecretName` names a secret of the Cluster
    /// API namespace that the cluster CAPI operator copies from the installer's
    /// `worker-user-data` (openshift/cluster-capi-operator,
    /// pkg/controllers/secretsync/secret_sync_controller.go), and would copy back over an
    /// upgrade made there; the Machine API's own stub, once upgraded, is copied instead.
    pub fn upgrades_stub_secret(self) -> bool {
        !self.is_cluster_api()
    }

    /// Whether `managedBootImages` may select objects of this kind by label. The
    /// MachineConfiguration API allows only All or None for ControlPlaneMachineSets.
    pub fn allows_partial_selection(self) -> bool {
        self.selected_as() != MachineKind::ControlPlaneMachineSet
    }

    /// Whether objects of this kind are selected when nobody declared a selection for the
    /// kind: MachineSets where the Machine Config Operator of `release` opts them in itself;
    /// control-plane updates are opt-in on every release (`syncManagedBootImagesStatus`,
    /// pkg/operator/sync.go, release-4.21: "Default to None unless overridden").
    pub fn selected_by_default(self, platform: &Platform, release: Option<(u64, u64)>) -> bool {
        match self.selected_as() {
            MachineKind::ControlPlaneMachineSet => false,
            _ => platform.mco_opts_in_by_default(release),
        }
    }
}

impl fmt::Display for MachineKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_cluster_api() {
            f.write_str("Cluster API ")?;
        }
        f.write_str(self.kind())
    }
}

/// A typed machine resource: what the planner reads of it. The controller's pass and the
/// `plan` command hold every kind in one list of these (`plan::MachineResource`).
pub trait MachineObject: fmt::Debug + Send + Sync {
    fn kind(&self) -> MachineKind;
    fn meta(&self) -> &ObjectMeta;
    /// The machine template holding the provider spec; `None` when the object has none.
    fn machine_template(&self) -> Option<&MachineTemplate>;
    /// The provider spec of its machine template, as written (any JSON value).
    fn provider_spec(&self) -> Option<&ProviderSpec> {
        Some(&self.machine_template()?.spec.provider_spec)
    }
    /// The infrastructure machine template holding the boot image, for kinds that reference
    /// one ([`MachineKind::ClusterApiMachineSet`]).
    fn infrastructure_ref(&self) -> Option<&InfrastructureRef> {
        None
    }
    /// The bootstrap secret, for kinds that name it outside a provider spec.
    fn data_secret_name(&self) -> Option<&str> {
        None
    }
    /// The labels of the machines' template, for kinds without a provider spec.
    fn template_labels(&self) -> Option<&BTreeMap<String, String>> {
        None
    }
    /// Which Machines are the object's (a Machine API MachineSet's `spec.selector`).
    fn selector(&self) -> Option<&LabelSelector> {
        None
    }
    /// Which API acts on the object, when another one may (`status.authoritativeAPI` of a
    /// Machine API MachineSet, and `spec.authoritativeAPI` while a handover is pending).
    fn authority(&self) -> Authority {
        Authority::ThisApi
    }
    /// Drops every field the planner does not read. The watch keeps objects this way: a
    /// MachineSet's provider spec, unknown fields and status are most of its memory.
    fn keep_only_what_the_planner_reads(&mut self);
}

/// Which API acts on a machine resource that exists in both the Machine API and Cluster API
/// (OpenShift's MachineAPIMigration: the cluster CAPI operator keeps the other copy in sync).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Authority {
    /// This object's API: we manage this copy.
    ThisApi,
    /// The other API does, or is taking over: this copy is a mirror that would be overwritten.
    Elsewhere(String),
}

/// The Cluster API annotation that stops every Cluster API controller from acting on an
/// object. The cluster CAPI operator sets it on the Cluster API copy of a MachineSet whose
/// Machine API copy is authoritative (openshift/cluster-capi-operator,
/// pkg/controllers/machinesetsync/machineset_sync_controller.go, `clusterv1.PausedAnnotation`).
pub const CLUSTER_API_PAUSED_ANNOTATION: &str = "cluster.x-k8s.io/paused";

impl MachineObject for MachineSet {
    fn kind(&self) -> MachineKind {
        MachineKind::MachineSet
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn machine_template(&self) -> Option<&MachineTemplate> {
        Some(&self.spec.template)
    }
    fn selector(&self) -> Option<&LabelSelector> {
        self.spec.selector.as_ref()
    }
    /// The status says which API acts now; a spec asking for Cluster API while the status is
    /// empty or still Machine API is a handover about to start. The migration controller sets
    /// an empty status straight to the spec's value, and otherwise moves it through `Migrating`
    /// to the spec's (openshift/cluster-capi-operator,
    /// pkg/controllers/machinesetmigration/machineset_migration_controller.go).
    fn authority(&self) -> Authority {
        let status = (self.status.as_ref()).and_then(|s| s.authoritative_api.as_deref());
        let spec = self.spec.authoritative_api.as_deref();
        match (status, spec) {
            (Some("MachineAPI") | None, Some("ClusterAPI")) => Authority::Elsewhere(
                "spec.authoritativeAPI asks for ClusterAPI: the handover to Cluster API is \
                 about to start"
                    .into(),
            ),
            (Some("MachineAPI") | None, _) => Authority::ThisApi,
            (Some("Migrating"), _) => Authority::Elsewhere(
                "status.authoritativeAPI is Migrating: authority is being handed over between \
                 the Machine API and Cluster API"
                    .into(),
            ),
            (Some(other), _) => Authority::Elsewhere(format!(
                "status.authoritativeAPI is {other}: this Machine API MachineSet mirrors its \
                 Cluster API MachineSet, which is managed instead"
            )),
        }
    }
    fn keep_only_what_the_planner_reads(&mut self) {
        keep_only_the_metadata_the_planner_reads(&mut self.metadata);
        self.spec.extra = Default::default();
        self.spec.template.keep_only_what_the_planner_reads();
        // Of the status, only which API is authoritative, and only when it says.
        self.status = (self.status.take())
            .and_then(|s| s.authoritative_api)
            .map(|api| crate::api::MachineSetStatus {
                authoritative_api: Some(api),
                ..Default::default()
            });
    }
}

impl MachineObject for ControlPlaneMachineSet {
    fn kind(&self) -> MachineKind {
        MachineKind::ControlPlaneMachineSet
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn machine_template(&self) -> Option<&MachineTemplate> {
        self.spec.template.machines_v1beta1.as_ref()
    }
    fn keep_only_what_the_planner_reads(&mut self) {
        keep_only_the_metadata_the_planner_reads(&mut self.metadata);
        self.spec.extra = Default::default();
        self.spec.template.extra = Default::default();
        if let Some(template) = &mut self.spec.template.machines_v1beta1 {
            template.keep_only_what_the_planner_reads();
        }
        self.status = None;
    }
}

/// Cluster API MachineSets and MachineDeployments share the shape the planner reads:
/// `spec.template` with its labels, bootstrap secret and infrastructure reference.
macro_rules! cluster_api_object {
    ($type:ty, $kind:expr) => {
        impl MachineObject for $type {
            fn kind(&self) -> MachineKind {
                $kind
            }
            fn meta(&self) -> &ObjectMeta {
                &self.metadata
            }
            fn machine_template(&self) -> Option<&MachineTemplate> {
                None
            }
            fn infrastructure_ref(&self) -> Option<&InfrastructureRef> {
                self.spec.template.spec.infrastructure_ref.as_ref()
            }
            fn data_secret_name(&self) -> Option<&str> {
                let bootstrap = self.spec.template.spec.bootstrap.as_ref()?;
                bootstrap.data_secret_name.as_deref()
            }
            fn template_labels(&self) -> Option<&BTreeMap<String, String>> {
                self.spec.template.metadata.as_ref()?.labels.as_ref()
            }
            /// A paused Cluster API object is a mirror of the Machine API one, which is
            /// authoritative.
            fn authority(&self) -> Authority {
                let annotations = self.metadata.annotations.as_ref();
                if !annotations.is_some_and(|a| a.contains_key(CLUSTER_API_PAUSED_ANNOTATION)) {
                    return Authority::ThisApi;
                }
                Authority::Elsewhere(format!(
                    "paused ({CLUSTER_API_PAUSED_ANNOTATION}): the Machine API object it mirrors \
                     is authoritative and managed instead"
                ))
            }
            fn keep_only_what_the_planner_reads(&mut self) {
                keep_only_the_metadata_the_planner_reads(&mut self.metadata);
                self.spec.extra = Default::default();
                let template = &mut self.spec.template;
                template.extra = Default::default();
                if let Some(metadata) = &mut template.metadata {
                    metadata.extra = Default::default();
                }
                template.spec.extra = Default::default();
            }
        }
    };
}

cluster_api_object!(ClusterApiMachineSet, MachineKind::ClusterApiMachineSet);
cluster_api_object!(
    ClusterApiMachineDeployment,
    MachineKind::ClusterApiMachineDeployment
);

/// The annotations of a machine resource that the planner reads. Every other annotation is
/// dropped from the watch store: on a MachineSet applied with kubectl, its
/// `last-applied-configuration` alone is a copy of the whole object, larger than all the rest
/// of what the store keeps (`examples/store_footprint.rs`). A rule that reads another
/// annotation must add it here; the property test `the_watch_keeps_everything_the_planner_reads`
/// plans every generated object both whole and as stored. The record of our template copies
/// is read too: without it, a restarted controller could prove none of its copies (issue 46).
const ANNOTATIONS_THE_PLANNER_READS: [&str; 8] = [
    OPT_OUT_ANNOTATION,
    BOOT_FAILURE_HOLD_ANNOTATION,
    LEGACY_OPT_OUT_ANNOTATION,
    AUTOSCALER_LABELS_ANNOTATION,
    HISTORY_ANNOTATION,
    HOT_LOOP_ANNOTATION,
    CLUSTER_API_PAUSED_ANNOTATION,
    crate::names::COPIES_ANNOTATION,
];

/// Metadata without managedFields, and without the annotations the planner never reads. The
/// annotation map itself stays, empty or not, when the object has one: our bookkeeping patch
/// adds keys to a map that exists and creates the map only when there is none
/// (`plan::patch::set_annotations`).
fn keep_only_the_metadata_the_planner_reads(metadata: &mut ObjectMeta) {
    metadata.managed_fields = None;
    if let Some(annotations) = &mut metadata.annotations {
        annotations.retain(|key, _| ANNOTATIONS_THE_PLANNER_READS.contains(&key.as_str()));
        if annotations.is_empty() {
            // An emptied map still holds its node (half a kilobyte); a new one holds none.
            *annotations = BTreeMap::new();
        }
    }
}

impl MachineTemplate {
    /// Of the template's labels, those the planner reads (the OS stream and the OS id), and of
    /// the provider spec, the fields a platform rule or the stub-secret rule reads; nothing else.
    /// A label map costs a whole B-tree node (about half a kilobyte) however few its labels:
    /// the template's usual four (the machine role, type, set and cluster) were a quarter of a
    /// stored MachineSet, and none of them is read.
    fn keep_only_what_the_planner_reads(&mut self) {
        self.extra = Default::default();
        if let Some(metadata) = &mut self.metadata {
            metadata.extra = Default::default();
            if let Some(labels) = &mut metadata.labels {
                labels.retain(|key, _| key == OS_STREAM_LABEL || key == OS_ID_LABEL);
            }
            if metadata.labels.as_ref().is_some_and(BTreeMap::is_empty) {
                metadata.labels = None;
            }
        }
        self.spec.keep_only_what_the_rules_read();
    }
}

impl crate::api::MachineSpec {
    /// Of the provider spec, the fields a platform rule or the stub rule reads, and the
    /// [`Leaves`] of the whole (which Machines a MachineSet made, `plan::boot_evidence`);
    /// Machines are trimmed the same way, since the same rules find their boot image.
    pub fn keep_only_what_the_rules_read(&mut self) {
        self.extra = Default::default();
        if self.provider_spec.leaves.is_none() {
            self.provider_spec.leaves = self.provider_spec.value.as_ref().map(Leaves::of);
        }
        if let Some(Value::Object(spec)) = &mut self.provider_spec.value {
            // Collected anew rather than `retain`ed: a map keeps the room of the fields it drops,
            // about 4 KiB of a real provider spec's, which every Machine of a large cluster held
            // (docs/performance.md, "Memory").
            *spec = (std::mem::take(spec).into_iter())
                .filter(|(field, _)| field == STUB_SECRET_FIELD || platform::read_by_a_rule(field))
                .collect();
            platform::keep_only_what_the_rules_read(spec);
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
        fn check<K: Resource<DynamicType = ()>>(kind: MachineKind) {
            assert_eq!(kind.kind(), K::kind(&()));
            assert_eq!(kind.plural(), K::plural(&()));
            assert_eq!(kind.api_group(), K::group(&()));
            assert_eq!(kind.api_version(), K::api_version(&()));
            assert_eq!(kind.api_resource(), ApiResource::erase::<K>(&()));
        }
        check::<MachineSet>(MachineKind::MachineSet);
        check::<ControlPlaneMachineSet>(MachineKind::ControlPlaneMachineSet);
        check::<ClusterApiMachineSet>(MachineKind::ClusterApiMachineSet);
        check::<ClusterApiMachineDeployment>(MachineKind::ClusterApiMachineDeployment);
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
                object.pointer(kind.provider_spec_path().as_str()),
                Some(&json!({"marker": 1})),
                "{kind}"
            );
        }
    }
}
