//! Typed views of the OpenShift objects the controller reads and writes.
//!
//! Only the fields we decide on are typed; everything else is preserved as JSON so that a view
//! round-trips the real objects. The provider spec stays an opaque `serde_json::Value`: its shape
//! differs per platform and it must survive our writes byte for byte, so we never re-serialize it
//! (writes are JSON Patches, see `plan::patch`).
//!
//! The `CustomResource` derives also produce the CRDs printed by `boot-image-controller crds`.
//! Those are for local clusters only (tests and the demo); real clusters ship the upstream ones.

use std::collections::BTreeMap;

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

pub use k8s_openapi::api::core::v1::{ConfigMap, Secret};
pub use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    Condition, LabelSelector, LabelSelectorRequirement, ObjectMeta, OwnerReference, Time,
};

/// Unknown fields kept verbatim so a typed view never loses data the API server sent.
pub type Extra = BTreeMap<String, Value>;

/// Declares a typed view of (part of) an object: the fields we decide on, typed, and every other
/// field kept verbatim in `extra`, so that the view round-trips what the API server sent and the
/// generated CRD preserves unknown fields.
macro_rules! view {
    (
        $(#[$attr:meta])*
        pub struct $name:ident { $($(#[$field_attr:meta])* pub $field:ident: $type:ty,)* }
    ) => {
        $(#[$attr])*
        #[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize, JsonSchema)]
        #[serde(rename_all = "camelCase")]
        #[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
        pub struct $name {
            $($(#[$field_attr])* pub $field: $type,)*
            #[serde(flatten)]
            #[schemars(skip)]
            pub extra: Extra,
        }
    };
}

// ---------------------------------------------------------------------------------------------
// machine.openshift.io/v1beta1 MachineSet

view! {
    #[derive(CustomResource)]
    #[kube(
        group = "machine.openshift.io",
        version = "v1beta1",
        kind = "MachineSet",
        plural = "machinesets",
        namespaced,
        status = "OpaqueStatus"
    )]
    pub struct MachineSetSpec {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub replicas: Option<i32>,
        #[serde(default)]
        pub template: MachineTemplate,
    }
}

view! {
    /// `spec.template` of a MachineSet, also embedded in ControlPlaneMachineSets.
    pub struct MachineTemplate {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub metadata: Option<TemplateMetadata>,
        #[serde(default)]
        pub spec: MachineSpec,
    }
}

view! {
    pub struct TemplateMetadata {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub labels: Option<BTreeMap<String, String>>,
    }
}

view! {
    pub struct MachineSpec {
        #[serde(default)]
        pub provider_spec: ProviderSpec,
    }
}

#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProviderSpec {
    /// Platform-specific machine configuration; the API server does not validate it either.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
    pub value: Option<Value>,
}

view! {
    /// A status we never interpret, kept so the generated CRDs carry a status subresource.
    pub struct OpaqueStatus {
    }
}

// ---------------------------------------------------------------------------------------------
// machine.openshift.io/v1 ControlPlaneMachineSet

view! {
    #[derive(CustomResource)]
    #[kube(
        group = "machine.openshift.io",
        version = "v1",
        kind = "ControlPlaneMachineSet",
        plural = "controlplanemachinesets",
        namespaced,
        status = "OpaqueStatus"
    )]
    pub struct ControlPlaneMachineSetSpec {
        #[serde(default)]
        pub template: ControlPlaneTemplate,
    }
}

view! {
    pub struct ControlPlaneTemplate {
        #[serde(
            rename = "machines_v1beta1_machine_openshift_io",
            default,
            skip_serializing_if = "Option::is_none"
        )]
        pub machines_v1beta1: Option<MachineTemplate>,
    }
}

// ---------------------------------------------------------------------------------------------
// operator.openshift.io/v1 MachineConfiguration

view! {
    #[derive(CustomResource)]
    #[kube(
        group = "operator.openshift.io",
        version = "v1",
        kind = "MachineConfiguration",
        plural = "machineconfigurations",
        status = "MachineConfigurationStatus"
    )]
    pub struct MachineConfigurationSpec {
        /// `None` (absent) means the platform default; `Some` with an empty list opts out of all.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub managed_boot_images: Option<ManagedBootImages>,
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

view! {
    pub struct MachineConfigurationStatus {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub observed_generation: Option<i64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
        pub conditions: Option<Vec<Condition>>,
    }
}

// ---------------------------------------------------------------------------------------------
// config.openshift.io/v1 Infrastructure and ClusterVersion

view! {
    #[derive(CustomResource)]
    #[kube(
        group = "config.openshift.io",
        version = "v1",
        kind = "Infrastructure",
        plural = "infrastructures",
        status = "InfrastructureStatus"
    )]
    pub struct InfrastructureSpec {
    }
}

view! {
    pub struct InfrastructureStatus {
        /// Prefix of every cloud resource the installer created; Azure image uploads carry it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub infrastructure_name: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub platform_status: Option<PlatformStatus>,
    }
}

view! {
    pub struct PlatformStatus {
        #[serde(rename = "type", default)]
        pub type_: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub azure: Option<AzurePlatformStatus>,
    }
}

view! {
    pub struct AzurePlatformStatus {
        /// `AzureStackCloud` on Azure Stack Hub, whose boot images are not managed.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub cloud_name: Option<String>,
    }
}

view! {
    #[derive(CustomResource)]
    #[kube(
        group = "config.openshift.io",
        version = "v1",
        kind = "ClusterVersion",
        plural = "clusterversions",
        status = "ClusterVersionStatus"
    )]
    pub struct ClusterVersionSpec {
    }
}

view! {
    pub struct ClusterVersionStatus {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub desired: Option<Release>,
        /// Newest first: `history[0]` is the current or in-progress update.
        #[serde(default)]
        pub history: Vec<UpdateHistory>,
    }
}

view! {
    pub struct Release {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub version: Option<String>,
        /// `Multi` on heterogeneous clusters, where a MachineSet must name its architecture.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub architecture: Option<String>,
    }
}

view! {
    pub struct UpdateHistory {
        #[serde(default)]
        pub state: String,
        #[serde(default)]
        pub version: String,
    }
}

/// The CRDs of every OpenShift kind we touch, for local clusters without the upstream ones.
pub fn local_crds()
-> Vec<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition>
{
    use kube::CustomResourceExt;
    vec![
        MachineSet::crd(),
        ControlPlaneMachineSet::crd(),
        MachineConfiguration::crd(),
        Infrastructure::crd(),
        ClusterVersion::crd(),
    ]
}
