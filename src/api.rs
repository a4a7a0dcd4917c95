//! Typed views of the OpenShift objects the controller reads and writes.
//!
//! Only the fields we decide on are typed; everything else is preserved as JSON so that a view
//! round-trips the real objects. The provider spec stays an opaque `serde_json::Value`: its shape
//! differs per platform and it must survive our writes byte for byte, so we never write it whole
//! (writes are JSON Patches, see `plan::patch`).
//!
//! The `CustomResource` derives also produce the CRDs printed by `boot-image-controller crds`.
//! Those are for local clusters only (tests and the demo); real clusters ship the upstream ones.

use std::collections::BTreeMap;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::{CustomResource, CustomResourceExt};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

pub use k8s_openapi::api::core::v1::{ConfigMap, Secret};
pub use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    Condition, LabelSelector, LabelSelectorRequirement, ObjectMeta, OwnerReference, Time,
};

/// Declares typed views of (parts of) objects: the fields we decide on, typed, and every other
/// field kept verbatim in `extra`, so that a view round-trips what the API server sent and the
/// generated CRD preserves unknown fields. A field the object lacks reads as its default; an
/// `Option` is absent, not `null`, when unset ([`Absent`]).
macro_rules! view {
    ($(
        $(#[$attr:meta])*
        pub struct $name:ident {
            $($(#[$field_attr:meta])* pub $field:ident: $type:ty,)*
        }
    )*) => {$(
        $(#[$attr])*
        #[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize, JsonSchema)]
        #[serde(default, rename_all = "camelCase")]
        #[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
        pub struct $name {
            $(
                $(#[$field_attr])*
                #[serde(skip_serializing_if = "Absent::absent")]
                pub $field: $type,
            )*
            #[serde(flatten)]
            #[schemars(skip)]
            pub extra: BTreeMap<String, Value>,
        }

        impl Absent for $name {}
    )*};
}

/// Which field values a view leaves out when written: an `Option` that is `None`. Every other
/// value is written, even empty.
trait Absent {
    fn absent(&self) -> bool {
        false
    }
}

impl<T> Absent for Option<T> {
    fn absent(&self) -> bool {
        self.is_none()
    }
}

impl Absent for String {}
impl<T> Absent for Vec<T> {}
impl Absent for ProviderSpec {}

// ---------------------------------------------------------------------------------------------
// machine.openshift.io/v1beta1 MachineSet

view! {
    #[derive(CustomResource)]
    #[kube(group = "machine.openshift.io", version = "v1beta1", kind = "MachineSet", plural = "machinesets", namespaced, status = "MachineSetStatus")]
    pub struct MachineSetSpec {
        pub replicas: Option<i32>,
        /// Which API should be authoritative (feature gate MachineAPIMigration); what is,
        /// is in the status.
        #[serde(rename = "authoritativeAPI")]
        #[schemars(extend("enum" = ["MachineAPI", "ClusterAPI"]))]
        pub authoritative_api: Option<String>,
        /// Which Machines are this MachineSet's; the template's labels match it.
        pub selector: Option<LabelSelector>,
        pub template: MachineTemplate,
    }

    /// `spec.template` of a MachineSet, also embedded in ControlPlaneMachineSets.
    pub struct MachineTemplate {
        pub metadata: Option<TemplateMetadata>,
        pub spec: MachineSpec,
    }

    pub struct TemplateMetadata {
        pub labels: Option<BTreeMap<String, String>>,
    }

    /// The spec of a Machine, and of the Machines a MachineSet's template stamps out.
    #[derive(CustomResource)]
    #[kube(group = "machine.openshift.io", version = "v1beta1", kind = "Machine", plural = "machines", namespaced, status = "MachineStatus")]
    pub struct MachineSpec {
        /// Of a Machine: its instance's ID at the cloud, set once the instance exists.
        #[serde(rename = "providerID")]
        pub provider_id: Option<String>,
        pub provider_spec: ProviderSpec,
    }

    /// What the Machine API says of one Machine: what `plan::boot_evidence` judges a new boot
    /// image by.
    pub struct MachineStatus {
        /// `Provisioning`, `Provisioned` (the instance exists), `Running` (its Node
        /// joined), `Deleting` or `Failed`.
        pub phase: Option<String>,
        pub node_ref: Option<NodeRef>,
        /// Set with `Failed`: a `MachineStatusError` constant of openshift/api.
        pub error_reason: Option<String>,
        pub error_message: Option<String>,
    }

    /// What deletes Machines whose Node does not come (openshift/machine-api-operator,
    /// pkg/controller/machinehealthcheck/machinehealthcheck_controller.go): read by
    /// `plan::boot_evidence` for the join limit that applies to a Machine.
    #[derive(CustomResource)]
    #[kube(group = "machine.openshift.io", version = "v1beta1", kind = "MachineHealthCheck", plural = "machinehealthchecks", namespaced, status = "OpaqueStatus")]
    pub struct MachineHealthCheckSpec {
        pub selector: Option<LabelSelector>,
        /// A Go duration (`10m`, `1h0m0s`); absent means 10 minutes, `0` never.
        pub node_startup_timeout: Option<String>,
        /// Set: remediation is external and no Machine is deleted.
        pub remediation_template: Option<RemediationTemplate>,
    }

    /// A reference to an external remediation template; only its presence is read.
    pub struct RemediationTemplate {}

    pub struct NodeRef {
        pub name: Option<String>,
    }

    /// A status we never interpret, kept so the generated CRDs carry a status subresource.
    pub struct OpaqueStatus {}

    pub struct MachineSetStatus {
        /// The API that currently acts on this MachineSet, set by the machine API migration
        /// controller: `MachineAPI`, `ClusterAPI` or `Migrating` (absent without the
        /// MachineAPIMigration feature gate, when the Machine API is).
        #[serde(rename = "authoritativeAPI")]
        #[schemars(extend("enum" = ["MachineAPI", "ClusterAPI", "Migrating"]))]
        pub authoritative_api: Option<String>,
    }
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ProviderSpec {
    /// Platform-specific machine configuration; the API server does not validate it either.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
    pub value: Option<Value>,
    /// What a trimmed `value` remembers of the whole one, recorded as the watch trims it
    /// (`MachineSpec::keep_only_what_the_rules_read`); never serialised.
    #[serde(skip)]
    #[schemars(skip)]
    pub leaves: Option<Leaves>,
}

/// The leaves of a provider spec that say something (not `null`, `false`, `0`, `""`, `[]` or
/// `{}`), each as a hash of its JSON Pointer and one of its value, sorted: enough to tell
/// whether every value a MachineSet's template sets is in a Machine
/// (`plan::boot_evidence`) after both were trimmed. At most [`Leaves::LIMIT`] are kept.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Leaves(Vec<(u64, u64)>);

impl Leaves {
    /// Of a Machine's provider spec (anyone who can create Machines writes one): a few
    /// kilobytes at most. Real provider specs have tens of leaves.
    pub const LIMIT: usize = 256;

    pub fn of(value: &Value) -> Self {
        fn walk(value: &Value, pointer: &mut String, out: &mut Vec<(u64, u64)>) {
            let len = pointer.len();
            match value {
                Value::Object(fields) => {
                    for (key, value) in fields {
                        pointer.push('/');
                        pointer.push_str(&key.replace('~', "~0").replace('/', "~1"));
                        walk(value, pointer, out);
                        pointer.truncate(len);
                    }
                }
                Value::Array(items) => {
                    for (index, value) in items.iter().enumerate() {
                        pointer.push('/');
                        pointer.push_str(&index.to_string());
                        walk(value, pointer, out);
                        pointer.truncate(len);
                    }
                }
                Value::Null | Value::Bool(false) => {}
                Value::String(text) if text.is_empty() => {}
                Value::Number(n) if n.as_f64() == Some(0.0) => {}
                leaf if out.len() < Leaves::LIMIT => {
                    out.push((hash(pointer.as_str()), hash(leaf.to_string())))
                }
                _ => {}
            }
        }
        fn hash(h: impl std::hash::Hash) -> u64 {
            use std::hash::{BuildHasher, BuildHasherDefault, DefaultHasher};
            BuildHasherDefault::<DefaultHasher>::default().hash_one(h)
        }
        let mut out = Vec::new();
        walk(value, &mut String::new(), &mut out);
        out.sort_unstable();
        out.dedup();
        Leaves(out)
    }

    /// Whether every leaf of `self` is one of `other`'s.
    pub fn within(&self, other: &Leaves) -> bool {
        (self.0.iter()).all(|leaf| other.0.binary_search(leaf).is_ok())
    }
}

impl ProviderSpec {
    /// Its leaves, as recorded before it was trimmed, or read from the whole value.
    pub fn leaves(&self) -> std::borrow::Cow<'_, Leaves> {
        match (&self.leaves, &self.value) {
            (Some(leaves), _) => std::borrow::Cow::Borrowed(leaves),
            (None, Some(value)) => std::borrow::Cow::Owned(Leaves::of(value)),
            (None, None) => std::borrow::Cow::Owned(Leaves::default()),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// machine.openshift.io/v1 ControlPlaneMachineSet

view! {
    #[derive(CustomResource)]
    #[kube(group = "machine.openshift.io", version = "v1", kind = "ControlPlaneMachineSet", plural = "controlplanemachinesets", namespaced, status = "OpaqueStatus")]
    pub struct ControlPlaneMachineSetSpec {
        pub template: ControlPlaneTemplate,
    }

    pub struct ControlPlaneTemplate {
        #[serde(rename = "machines_v1beta1_machine_openshift_io")]
        pub machines_v1beta1: Option<MachineTemplate>,
    }
}

// ---------------------------------------------------------------------------------------------
// cluster.x-k8s.io/v1beta2 MachineSet (Cluster API). Never in `local_crds`: tests install the
// upstream CRDs (hack/ensure-capi-crds.sh).

view! {
    #[derive(CustomResource)]
    #[kube(group = "cluster.x-k8s.io", version = "v1beta2", kind = "MachineSet", plural = "machinesets", namespaced, root = "ClusterApiMachineSet")]
    pub struct ClusterApiMachineSetSpec {
        pub template: ClusterApiMachineTemplate,
    }

    #[derive(CustomResource)]
    #[kube(group = "cluster.x-k8s.io", version = "v1beta2", kind = "MachineDeployment", plural = "machinedeployments", namespaced, root = "ClusterApiMachineDeployment")]
    pub struct ClusterApiMachineDeploymentSpec {
        pub template: ClusterApiMachineTemplate,
    }

    pub struct ClusterApiMachineTemplate {
        pub metadata: Option<TemplateMetadata>,
        pub spec: ClusterApiMachineSpec,
    }

    pub struct ClusterApiMachineSpec {
        pub bootstrap: Option<Bootstrap>,
        pub infrastructure_ref: Option<InfrastructureRef>,
    }

    pub struct Bootstrap {
        /// The secret holding the machines' user data (the Ignition stub on OpenShift).
        pub data_secret_name: Option<String>,
    }

    /// `spec.template.spec.infrastructureRef`: `{apiGroup, kind, name}` in v1beta2,
    /// `{apiVersion, kind, name}` in v1beta1; both are read.
    pub struct InfrastructureRef {
        pub api_group: Option<String>,
        pub api_version: Option<String>,
        pub kind: String,
        pub name: String,
    }
}

impl InfrastructureRef {
    /// The API group of the referenced template, from either shape.
    pub fn group(&self) -> &str {
        match (&self.api_group, &self.api_version) {
            (Some(group), _) => group,
            (None, Some(version)) => version.rsplit_once('/').map_or("", |(group, _)| group),
            (None, None) => "",
        }
    }
}

// ---------------------------------------------------------------------------------------------
// operator.openshift.io/v1 MachineConfiguration

view! {
    #[derive(CustomResource)]
    #[kube(group = "operator.openshift.io", version = "v1", kind = "MachineConfiguration", plural = "machineconfigurations", status = "MachineConfigurationStatus")]
    pub struct MachineConfigurationSpec {
        /// `None` (absent) means the platform default; `Some` with an empty list opts out of all.
        pub managed_boot_images: Option<ManagedBootImages>,
    }

    pub struct MachineConfigurationStatus {
        pub observed_generation: Option<i64>,
        #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
        pub conditions: Option<Vec<Condition>>,
    }
}

#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ManagedBootImages {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub machine_managers: Option<Vec<MachineManager>>,
}

#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MachineManager {
    #[schemars(extend("enum" = ["machinesets", "controlplanemachinesets"]))]
    pub resource: String,
    #[serde(default)]
    pub api_group: String,
    pub selection: MachineManagerSelector,
}

#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MachineManagerSelector {
    /// Kept as a string: an unexpected value must become a reported reason, not a failed watch.
    #[schemars(extend("enum" = ["All", "Partial", "None"]))]
    pub mode: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partial: Option<PartialSelector>,
}

#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PartialSelector {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub machine_resource_selector: Option<LabelSelector>,
}

// ---------------------------------------------------------------------------------------------
// config.openshift.io/v1 Infrastructure and ClusterVersion

view! {
    #[derive(CustomResource)]
    #[kube(group = "config.openshift.io", version = "v1", kind = "Infrastructure", plural = "infrastructures", status = "InfrastructureStatus")]
    pub struct InfrastructureSpec {}

    pub struct InfrastructureStatus {
        /// Prefix of every cloud resource the installer created; Azure image uploads carry it.
        pub infrastructure_name: Option<String>,
        pub platform_status: Option<PlatformStatus>,
    }

    pub struct PlatformStatus {
        pub azure: Option<AzurePlatformStatus>,
        pub aws: Option<AwsPlatformStatus>,
        #[serde(rename = "type")]
        pub type_: String,
    }

    pub struct AwsPlatformStatus {
        /// The cluster's region: Cluster API machine templates do not name it.
        pub region: Option<String>,
    }

    pub struct AzurePlatformStatus {
        /// `AzureStackCloud` on Azure Stack Hub, whose boot images are not managed.
        pub cloud_name: Option<String>,
    }

    #[derive(CustomResource)]
    #[kube(group = "config.openshift.io", version = "v1", kind = "ClusterVersion", plural = "clusterversions", status = "ClusterVersionStatus")]
    pub struct ClusterVersionSpec {}

    pub struct ClusterVersionStatus {
        pub desired: Option<Release>,
        /// Newest first: `history[0]` is the current or in-progress update.
        pub history: Vec<UpdateHistory>,
    }

    pub struct Release {
        pub version: Option<String>,
        /// `Multi` on heterogeneous clusters, where a MachineSet must name its architecture.
        pub architecture: Option<String>,
    }

    pub struct UpdateHistory {
        pub state: String,
        pub version: String,
    }
}

/// The CRDs of every OpenShift kind we touch, for local clusters without the upstream ones.
pub fn local_crds() -> Vec<CustomResourceDefinition> {
    vec![
        MachineSet::crd(),
        Machine::crd(),
        MachineHealthCheck::crd(),
        ControlPlaneMachineSet::crd(),
        machine_configuration_crd(),
        Infrastructure::crd(),
        ClusterVersion::crd(),
    ]
}

/// `MachineConfiguration`'s CRD with the boot-image status fields the newest release declares
/// (openshift/api 4.22, the Default feature set): the controller writes only what the served
/// schema declares (`controller::status::served_schema`), so without them a local cluster would test
/// a release older than every other fixture. They are added here rather than typed in
/// `MachineConfigurationStatus`, which reads the MCO's values from `extra` and must never fail
/// to decode one.
fn machine_configuration_crd() -> CustomResourceDefinition {
    let mode = |values: &[&str]| serde_json::json!({"type": "string", "enum": values});
    let versions = serde_json::json!({"type": "object", "properties": {
        "ocpVersion": {"type": "string"}, "rhcosVersion": {"type": "string"}}});
    let declared = serde_json::json!({
        "managedBootImagesStatus": {"type": "object", "properties": {"machineManagers": {
            "type": "array",
            "x-kubernetes-list-type": "map",
            "x-kubernetes-list-map-keys": ["resource", "apiGroup"],
            "items": {"type": "object", "required": ["resource", "apiGroup", "selection"],
                "properties": {
                    "resource": mode(&["machinesets", "controlplanemachinesets"]),
                    "apiGroup": mode(&["machine.openshift.io"]),
                    "selection": {"type": "object",
                        "x-kubernetes-preserve-unknown-fields": true,
                        "properties": {"mode": mode(&["All", "Partial", "None"])}}}}}}},
        "bootImageSkewEnforcementStatus": {"type": "object", "required": ["mode"], "properties": {
            "mode": mode(&["Automatic", "Manual", "None"]),
            "automatic": versions,
            "manual": {"type": "object", "properties": {
                "mode": mode(&["OCPVersion", "RHCOSVersion"]),
                "ocpVersion": {"type": "string"}, "rhcosVersion": {"type": "string"}}}}},
    });
    let mut crd = serde_json::to_value(MachineConfiguration::crd()).expect("a CRD is JSON");
    for version in crd["spec"]["versions"].as_array_mut().into_iter().flatten() {
        let status = &mut version["schema"]["openAPIV3Schema"]["properties"]["status"];
        for (field, schema) in declared.as_object().into_iter().flatten() {
            status["properties"][field] = schema.clone();
        }
    }
    serde_json::from_value(crd).expect("the declared status schemas are valid JSONSchemaProps")
}
