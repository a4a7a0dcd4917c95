//! Names of the well-known objects we read, shared by the controller's watches and the `plan`
//! command's manifest loader so that both look at the same objects.

/// Namespace of the golden ConfigMap, written by the Machine Config Operator.
pub const GOLDEN_CONFIGMAP_NAMESPACE: &str = "openshift-machine-config-operator";
/// The golden ConfigMap: the boot images of the running release.
pub const GOLDEN_CONFIGMAP_NAME: &str = "coreos-bootimages";
/// Our own ConfigMap of images known to be CoreOS images (in the controller's namespace).
pub const KNOWN_IMAGES_CONFIGMAP_NAME: &str = "boot-image-controller-known-images";
/// The singleton `MachineConfiguration` that says which MachineSets are managed.
pub const MACHINE_CONFIGURATION_NAME: &str = "cluster";
/// The singleton `Infrastructure` that names the platform.
pub const INFRASTRUCTURE_NAME: &str = "cluster";
/// The singleton `ClusterVersion` whose history says whether an upgrade is in progress.
pub const CLUSTER_VERSION_NAME: &str = "version";
