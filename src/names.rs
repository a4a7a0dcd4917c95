//! Names of the well-known objects we read, shared by the controller's watches and the `plan`
//! command's manifest loader so that both look at the same objects.

/// Where OpenShift keeps MachineSets and ControlPlaneMachineSets.
pub const MACHINE_API_NAMESPACE: &str = "openshift-machine-api";
/// Where OpenShift keeps its Cluster API objects (openshift/cluster-capi-operator,
/// pkg/controllers/common_consts.go, `DefaultCAPINamespace`).
pub const CLUSTER_API_NAMESPACE: &str = "openshift-cluster-api";
/// The field manager of every write: conditions applied server-side, patches, creates.
pub const FIELD_MANAGER: &str = "boot-image-controller";
/// The Lease replicas of the controller elect their leader with.
pub const LEADER_ELECTION_ID: &str = "boot-image-controller";
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

// Annotations and labels. Keys under `boot-image-controller.io/` are ours; the others are read
// only, and defined by the components named beside them.

/// Per-MachineSet opt-out; checked before anything else.
pub const OPT_OUT_ANNOTATION: &str = "boot-image-controller.io/boot-image-updates";
pub const OPT_OUT_VALUE: &str = "disabled";
/// On the MachineConfiguration: which machine resources this controller updates, as JSON of
/// the shape of `spec.managedBootImages` (`{"machineManagers": [...]}`). Read before the spec,
/// which 4.16 prunes and which on AWS and GCP from 4.17 hands the MachineSets to the Machine
/// Config Operator instead (see `plan::selection`).
pub const OPT_IN_ANNOTATION: &str = "boot-image-controller.io/managed-boot-images";
/// On the MachineConfiguration: stop all writes (acknowledged by `BootImageUpdatePaused`).
pub const PAUSE_ANNOTATION: &str = "boot-image-controller.io/boot-image-updates-paused";
/// The opt-out and pause keys of earlier releases. They sat in the Machine Config Operator's
/// domain although the MCO never defined or honoured them (its own keys are listed in
/// pkg/controller/common/constants.go, e.g. `boot-image-updates-opted-in-at`). Still honoured
/// for one release, with a deprecation Warning Event, so that nobody's opt-out is lost.
pub const LEGACY_OPT_OUT_ANNOTATION: &str = "machineconfiguration.openshift.io/boot-image-updates";
pub const LEGACY_PAUSE_ANNOTATION: &str =
    "machineconfiguration.openshift.io/boot-image-updates-paused";
/// The last changes we made to an object, for `revert` (see `plan::history`).
pub const HISTORY_ANNOTATION: &str = "boot-image-controller.io/history";
/// Set on a stub secret whose Ignition config was upgraded in place to spec 3: the version it
/// was upgraded to, and when. The Machine Config Operator's own keys
/// (pkg/controller/common/constants.go, `StubIgnitionVersionAnnotation` and
/// `StubIgnitionTimestampAnnotation`), set as its `upgradeStubIgnitionIfRequired` sets them.
pub const STUB_IGNITION_UPGRADED_TO_ANNOTATION: &str =
    "machineconfiguration.openshift.io/stub-ignition-upgraded-to";
pub const STUB_IGNITION_UPGRADED_AT_ANNOTATION: &str =
    "machineconfiguration.openshift.io/stub-ignition-upgraded-at";
/// The key of a stub secret's data under which its upgrade keeps the spec-2 `userData` it
/// replaced, for `revert`. In the data rather than an annotation: must-gather and
/// `oc adm inspect` blank a secret's data, not its annotations.
pub const PREVIOUS_USER_DATA_KEY: &str = "boot-image-controller.io-previous-userData";
/// On a MachineSet whose new boot image failed to boot and was put back: the image it is held
/// off, and the failure (see `plan::boot_follow`). Removing it lets the image be tried again.
pub const BOOT_FAILURE_HOLD_ANNOTATION: &str = "boot-image-controller.io/boot-failure-hold";
/// On the MachineConfiguration: `"true"` or `"false"` overrides `--revert-failed-boot-images`
/// without a restart.
pub const REVERT_FAILED_BOOT_IMAGES_ANNOTATION: &str =
    "boot-image-controller.io/revert-failed-boot-images";
/// When we patched an object to its current target, for the hot-loop guard.
pub const HOT_LOOP_ANNOTATION: &str = "boot-image-controller.io/hot-loop";
/// The cluster autoscaler's scale-from-zero labels; the only place a MachineSet names its arch.
pub const AUTOSCALER_LABELS_ANNOTATION: &str = "capacity.cluster-autoscaler.kubernetes.io/labels";
/// The Windows Machine Config Operator's marker on Windows machine templates.
pub const OS_ID_LABEL: &str = "machine.openshift.io/os-id";
pub const OS_STREAM_LABEL: &str = "machineconfiguration.openshift.io/osstream";
/// The labels that mark control-plane Nodes: `master` on every OpenShift 4 release,
/// `control-plane` as well on newer ones. Either is enough.
pub const CONTROL_PLANE_NODE_LABELS: [&str; 2] = [
    "node-role.kubernetes.io/master",
    "node-role.kubernetes.io/control-plane",
];
/// A Node's architecture, in the Kubernetes spelling (`amd64`, `arm64`, ...).
pub const ARCH_LABEL: &str = "kubernetes.io/arch";
/// On a Cluster API MachineSet (or MachineDeployment) we moved to copies of its infrastructure
/// template: the copies, by name and UID, as a JSON array of `{"name", "uid"}`, newest last.
/// What proves a template is ours (see `plan::cluster_api_templates`).
pub const COPIES_ANNOTATION: &str = "boot-image-controller.io/infrastructure-template-copies";
/// The provider-spec field that names the stub secret (`userDataSecret.name`).
pub const STUB_SECRET_FIELD: &str = "userDataSecret";
