//! The planner's specification: one scenario per gate, per rule (docs/how-it-decides.md, "Gates
//! and rules") and per reason a MachineSet can end up with.
//!
//! Objects come from the test kit (`crate::testkit`), in the shapes the API server serves them,
//! so a scenario reads like the cluster it describes and starts from the objects the integration
//! tests apply: `machine_set("worker-a").ami(AMI_PREVIOUS).region("us-east-1")`.

use std::collections::BTreeMap;

use jiff::{SignedDuration, Timestamp};
use json_patch::PatchOperation;
use serde_json::{Value, json};

use super::history::{self, Change, HistoryEntry};
use super::{
    Action, Blocked, ClusterSnapshot, Decision, MachineResource, Malformed, Options, Patch, Plan,
    plan,
};
use crate::api::{ControlPlaneMachineSet, MachineSet};
use crate::arch::Arch;
use crate::machine_kind::MachineKind;
use crate::names::{
    AUTOSCALER_LABELS_ANNOTATION, LEGACY_OPT_OUT_ANNOTATION, LEGACY_PAUSE_ANNOTATION,
    OPT_IN_ANNOTATION, OPT_OUT_ANNOTATION, OS_ID_LABEL, OS_STREAM_LABEL, PAUSE_ANNOTATION,
};
use crate::plan::selection::OPT_IN_COMMAND;
use crate::reason::Reason;
use crate::testkit::ec2::marketplace_ami;
use crate::testkit::objects::{
    self, ControlPlaneMachineSetBuilder, MachineSetBuilder, machine_manager,
};
use crate::testkit::provider_specs::{self, INFRASTRUCTURE_NAME};
use crate::testkit::snapshot::{ClusterChanges, cluster_snapshot};
use crate::testkit::streams::{self, stream_421_all_platforms};

// ---------------------------------------------------------------------------------------------
// The cluster of most scenarios: AWS on 4.21.0, MachineSets managed by the platform default.

const NAMESPACE: &str = crate::names::MACHINE_API_NAMESPACE;
const RELEASE: &str = "4.21.0";
/// The release the cluster was installed at, before its update to [`RELEASE`].
const INSTALLED: &str = "4.20.5";

/// The golden 4.21 AMIs (rhcos 9.6.20251023-0).
const AMI_US_EAST_1: &str = streams::AMI_421_US_EAST_1;
const AMI_US_EAST_2: &str = streams::AMI_421_US_EAST_2;
const AMI_ARM64_US_EAST_1: &str = streams::AMI_421_ARM_US_EAST_1;
/// The 4.20 AMIs of us-east-1 (rhcos 9.6.20250826-1): ours once listed as known images.
const AMI_PREVIOUS: &str = streams::AMI_420_US_EAST_1;
const AMI_PREVIOUS_ARM64: &str = streams::AMI_420_ARM_US_EAST_1;
/// An AMI an administrator built.
const AMI_CUSTOM: &str = "ami-0a1b2c3d4e5f60718";

const GCP_IMAGE: &str = streams::GCP_IMAGE_421;
const GCP_IMAGE_PREVIOUS: &str = streams::GCP_IMAGE_420;

const STUB: &str = "worker-user-data";
const MANAGED_STUB: &str = "worker-user-data-managed";

/// Where the provider spec of a MachineSet and of a ControlPlaneMachineSet live.
const MACHINE_SET_SPEC: &str = objects::MACHINE_SET_PROVIDER_SPEC;
const CONTROL_PLANE_SPEC: &str = objects::CONTROL_PLANE_PROVIDER_SPEC;

/// The compact 4.21 stream of the kit, as the golden ConfigMap carries it.
fn golden_stream() -> String {
    stream_421_all_platforms().to_string()
}

fn now() -> Timestamp {
    "2026-03-02T10:00:00Z".parse().unwrap()
}

fn minutes_ago(minutes: i64) -> Timestamp {
    now() - SignedDuration::from_mins(minutes)
}

fn options() -> Options {
    Options {
        now: now(),
        ..Options::default()
    }
}

/// AWS, updated from [`INSTALLED`] to [`RELEASE`], with the Ignition 3 stubs of a cluster
/// installed on 4.6 or later: the installer's worker and control-plane stubs and their managed
/// twins.
fn aws_cluster() -> ClusterSnapshot {
    cluster_snapshot("AWS", RELEASE, &golden_stream())
        .upgraded(INSTALLED, RELEASE, "Completed")
        .stub_secret(NAMESPACE, STUB, "3.2.0")
        .stub_secret(NAMESPACE, MANAGED_STUB, "3.2.0")
        .stub_secret(NAMESPACE, "master-user-data-managed", "3.2.0")
        .stub_secret(NAMESPACE, "master-user-data", "3.2.0")
        .build()
}

fn gcp_cluster() -> ClusterSnapshot {
    aws_cluster().on_platform("GCP")
}

// ---------------------------------------------------------------------------------------------
// Machine resources.

/// The kit's AWS worker MachineSet in the Machine API namespace.
fn machine_set(name: &str) -> MachineSetBuilder {
    objects::machine_set(NAMESPACE, name)
}

/// A GCP worker MachineSet: a boot disk on the previous image and a data disk.
fn gcp_machine_set(name: &str) -> MachineSetBuilder {
    let scratch = "projects/my-project/global/images/scratch";
    machine_set(name).provider_spec(provider_specs::gcp(json!([
        provider_specs::gcp_boot_disk(GCP_IMAGE_PREVIOUS),
        provider_specs::gcp_data_disk(scratch)
    ])))
}

/// The AWS control plane, on the previous release's AMI.
fn control_plane_machine_set() -> ControlPlaneMachineSetBuilder {
    objects::control_plane_machine_set_builder(NAMESPACE, AMI_PREVIOUS)
}

// ---------------------------------------------------------------------------------------------
// Planning and looking at the result.

fn plan_machine_sets(
    cluster: &ClusterSnapshot,
    machine_sets: &[Result<MachineSet, Malformed>],
) -> Plan {
    plan(cluster, &listed(machine_sets), &options())
}

/// MachineSets as the planner lists machine resources.
fn listed(machine_sets: &[Result<MachineSet, Malformed>]) -> Vec<MachineResource> {
    (machine_sets.iter().cloned())
        .map(|ms| MachineResource::read(MachineKind::MachineSet, ms))
        .collect()
}

/// The entry of a single MachineSet.
fn decide(cluster: &ClusterSnapshot, ms: Result<MachineSet, Malformed>) -> Decision {
    let mut plan = plan_machine_sets(cluster, &[ms]);
    assert_eq!(plan.of(MachineKind::MachineSet).len(), 1);
    plan.decisions.remove(0)
}

fn decide_control_plane(
    cluster: &ClusterSnapshot,
    cp: Result<ControlPlaneMachineSet, Malformed>,
) -> Decision {
    let cp = MachineResource::read(MachineKind::ControlPlaneMachineSet, cp);
    let mut plan = plan(cluster, &[cp], &options());
    assert_eq!(plan.of(MachineKind::ControlPlaneMachineSet).len(), 1);
    plan.decisions.remove(0)
}

#[track_caller]
/// The decision of the updatable cluster for `worker-a` on `ami`.
fn decide_worker_a_on(ami: &str) -> Decision {
    decide_worker_a(|ms| ms.ami(ami))
}

/// The decision of the updatable cluster for `worker-a` changed by `change`.
fn decide_worker_a(change: impl FnOnce(MachineSetBuilder) -> MachineSetBuilder) -> Decision {
    decide(&updatable(), change(machine_set("worker-a")).served())
}

/// The updatable cluster selecting ControlPlaneMachineSets with `selection`.
fn managing_control_planes(selection: Value) -> ClusterSnapshot {
    updatable().machine_managers(json!([machine_manager(
        "controlplanemachinesets",
        selection
    )]))
}

/// The cluster updates the outdated MachineSet `worker-a`.
fn assert_updates_worker_a(cluster: &ClusterSnapshot) {
    let entry = decide(cluster, machine_set("worker-a").served());
    assert_decided(&entry, Action::Update, Reason::BootImageOutdated);
}

/// The decision's message names `what`, so a user reading it knows which thing to fix.
fn assert_mentions(message: &str, what: &str) {
    assert!(message.contains(what), "{message}");
}

fn assert_decided(entry: &Decision, action: Action, reason: Reason) {
    assert_eq!(
        (entry.action, entry.reason),
        (action, reason),
        "{}: {}",
        entry.name,
        entry.message
    );
    if action != Action::Update {
        assert!(entry.patch.is_empty(), "{entry:#?}");
    }
}

/// The patch as RFC 6902 JSON, the form the API server receives, without the bookkeeping
/// annotations every update also writes (their own tests check those).
/// The guards on the inputs that chose the change (tests of values nothing replaces) are left
/// out as well; `the_inputs_that_chose_an_image_are_tested_by_its_patch` checks them.
fn patch_json(entry: &Decision) -> Value {
    let ops = serde_json::to_value(&entry.patch).unwrap();
    let ops = ops.as_array().unwrap();
    let replaced: Vec<&Value> = ops
        .iter()
        .filter(|op| op["op"] == "replace")
        .map(|op| &op["path"])
        .collect();
    let changes = ops
        .iter()
        .filter(|op| !is_bookkeeping(op))
        .filter(|op| op["op"] != "test" || replaced.contains(&&op["path"]));
    Value::Array(changes.cloned().collect())
}

fn is_bookkeeping(op: &Value) -> bool {
    op["path"]
        .as_str()
        .is_some_and(|p| p.starts_with("/metadata/"))
}

fn guarded(path: &str, from: &str, to: &str) -> [Value; 2] {
    [
        json!({"op": "test", "path": path, "value": from}),
        json!({"op": "replace", "path": path, "value": to}),
    ]
}

/// The full patch of an AWS MachineSet moving to `ami` and to the managed stub secret.
fn aws_update_patch(base: &str, from_ami: &str, to_ami: &str) -> Value {
    Value::Array(guarded(&format!("{base}/ami/id"), from_ami, to_ami).to_vec())
}

fn apply(ms: &MachineSet, patch: &[PatchOperation]) -> MachineSet {
    let mut doc = serde_json::to_value(ms).unwrap();
    json_patch::patch(&mut doc, patch).expect("the patch applies");
    serde_json::from_value(doc).unwrap()
}

/// The AWS cluster with the previous release's AMIs in the known images, so they count as ours.
fn updatable() -> ClusterSnapshot {
    aws_cluster().knowing(&[AMI_PREVIOUS, AMI_PREVIOUS_ARM64])
}

// ---------------------------------------------------------------------------------------------
// Global gates.

#[test]
fn a_cluster_version_that_cannot_be_read_holds_every_write() {
    // Absent (but served), or without status: nothing tells the running release or whether an
    // upgrade runs, so the release gates fail closed.
    for cluster in [
        updatable().with(|c| c.cluster_version = None),
        updatable().with(|c| c.cluster_version.as_mut().unwrap().status = None),
    ] {
        let entry = decide(&cluster, machine_set("worker-a").served());
        assert_decided(&entry, Action::Skip, Reason::ClusterVersionUnknown);
        assert!(
            entry.message.starts_with("would update"),
            "{}",
            entry.message
        );
    }
    // Clusters that do not serve ClusterVersions at all have no such gate.
    let plain = updatable().with(|c| {
        c.cluster_version = None;
        c.cluster_version_served = false;
    });
    assert_updates_worker_a(&plain);
}

/// A gate that stops planning: every entry is a Skip with the gate's reason.
#[track_caller]
/// The updatable cluster changed by `change` plans nothing, for `reason`.
fn assert_gate_when(change: impl FnOnce(&mut ClusterSnapshot), reason: Reason) {
    assert_hard_gate(&updatable().with(change), reason);
}

fn assert_hard_gate(cluster: &ClusterSnapshot, reason: Reason) {
    let mut machines = listed(&[
        machine_set("worker-a").served(),
        machine_set("worker-b").ami(AMI_US_EAST_1).served(),
    ]);
    let cp = control_plane_machine_set().served();
    machines.push(MachineResource::read(
        MachineKind::ControlPlaneMachineSet,
        cp,
    ));
    let plan = plan(cluster, &machines, &options());
    assert_eq!(
        plan.blocked.as_ref().map(|b| b.reason),
        Some(reason),
        "{plan:#?}"
    );
    assert!(!plan.blocked.as_ref().unwrap().message.is_empty());
    for entry in plan
        .of(MachineKind::MachineSet)
        .iter()
        .chain(plan.of(MachineKind::ControlPlaneMachineSet))
    {
        assert_decided(entry, Action::Skip, reason);
        assert_eq!(entry.message, plan.blocked.as_ref().unwrap().message);
    }
}

/// A gate that lets us plan but not write: what would update is a Skip with the gate's reason
/// that still shows its target; everything else is decided as usual.
#[track_caller]
fn assert_hold(cluster: &ClusterSnapshot, reason: Reason) {
    let plan = plan_machine_sets(
        cluster,
        &[
            machine_set("a-outdated").served(),
            machine_set("b-current")
                .ami(AMI_US_EAST_1)
                .user_data(MANAGED_STUB)
                .served(),
            machine_set("c-custom").ami(AMI_CUSTOM).served(),
        ],
    );
    assert_eq!(
        plan.blocked.as_ref().map(|b| b.reason),
        Some(reason),
        "{plan:#?}"
    );
    let [outdated, current, custom] = plan.of(MachineKind::MachineSet) else {
        panic!("three entries expected: {plan:#?}");
    };
    assert_decided(outdated, Action::Skip, reason);
    assert_eq!(
        outdated.boot_image.target.as_ref(),
        Some(&json!(AMI_US_EAST_1))
    );
    assert!(
        outdated.message.starts_with("would update"),
        "{}",
        outdated.message
    );
    assert_decided(current, Action::UpToDate, Reason::UpToDate);
    assert_decided(custom, Action::Skip, Reason::CustomImage);
    assert!(
        plan.of(MachineKind::MachineSet)
            .iter()
            .all(|e| e.action != Action::Update)
    );
}

#[test]
fn without_a_machine_configuration_nothing_is_planned() {
    assert_gate_when(
        |c| c.machine_configuration = None,
        Reason::MachineConfigurationMissing,
    );
}

#[test]
fn without_an_infrastructure_platform_nothing_is_planned() {
    assert_gate_when(|c| c.infrastructure = None, Reason::InfrastructureMissing);
    let no_status = |c: &mut ClusterSnapshot| c.infrastructure.as_mut().unwrap().status = None;
    assert_gate_when(no_status, Reason::InfrastructureMissing);
    let empty_type = updatable().on_platform("");
    assert_hard_gate(&empty_type, Reason::InfrastructureMissing);
}

#[test]
fn without_the_golden_configmap_nothing_is_planned() {
    assert_gate_when(|c| c.golden = None, Reason::GoldenConfigMapMissing);
}

#[test]
fn a_malformed_golden_stream_blocks_everything() {
    let truncated = &golden_stream()[..golden_stream().len() / 2];
    let no_arches = r#"{"stream": "rhcos-4.21", "architectures": {}}"#;
    for stream in [truncated, no_arches, "", "null"] {
        let cluster = updatable().golden(stream, Some(RELEASE));
        assert_hard_gate(&cluster, Reason::GoldenStreamInvalid);
    }
    let no_stream_key = updatable().with(|c| {
        let data = c.golden.as_mut().unwrap().data.as_mut().unwrap();
        data.remove("stream");
    });
    assert_hard_gate(&no_stream_key, Reason::GoldenStreamInvalid);
}

/// The kit's 4.21 stream with its aarch64 us-east-1 AMI replaced by `image`.
fn stream_with_arm64_image(image: &str) -> String {
    let mut stream = stream_421_all_platforms();
    stream["architectures"]["aarch64"]["images"]["aws"]["regions"]["us-east-1"]["image"] =
        json!(image);
    stream.to_string()
}

#[test]
fn a_malformed_entry_stops_only_the_objects_that_use_it() {
    // An architecture nobody runs, or only some MachineSets run: the others move on.
    let cluster = updatable().golden(&stream_with_arm64_image("ami-xyz"), Some(RELEASE));
    let plan = plan_machine_sets(
        &cluster,
        &[
            machine_set("worker-a").served(),
            machine_set("worker-arm")
                .ami(AMI_PREVIOUS_ARM64)
                .arch("arm64")
                .served(),
        ],
    );
    assert_eq!(plan.blocked, None, "{plan:#?}");
    let [x86, arm] = plan.of(MachineKind::MachineSet) else {
        panic!("two entries expected: {plan:#?}");
    };
    assert_decided(x86, Action::Update, Reason::BootImageOutdated);
    assert_decided(arm, Action::Error, Reason::StreamEntryInvalid);
    assert_mentions(&arm.message, "aarch64");
    assert_mentions(&arm.message, "ami-xyz");
    assert!(arm.patch.is_empty());
    // The same for an OS stream under `streams`.
    let cluster = updatable().other_os_streams(json!({"rhel-10": "{not json"}));
    let rhel10 = decide(
        &cluster,
        machine_set("rhel10")
            .label(OS_STREAM_LABEL, "rhel-10")
            .served(),
    );
    assert_decided(&rhel10, Action::Error, Reason::StreamEntryInvalid);
    assert_mentions(&rhel10.message, "\"rhel-10\"");
    assert_updates_worker_a(&cluster);
}

#[test]
fn with_nothing_enrolled_the_golden_configmap_is_not_read() {
    // As the MCO reads it only for a machine resource it enrolls (`syncMAPIMachineSet`).
    let none =
        json!({"machineManagers": [machine_manager("machinesets", json!({"mode": "None"}))]});
    for opted_out in [json!({"machineManagers": []}), none] {
        let cluster = updatable().machine_managers(opted_out["machineManagers"].clone());
        for golden in [
            cluster.clone().with(|c| c.golden = None),
            cluster.clone().golden("{not json", Some(RELEASE)),
        ] {
            let plan = plan_machine_sets(&golden, &[machine_set("worker-a").served()]);
            assert_eq!(plan.blocked, None, "{plan:#?}");
            assert_decided(
                &plan.of(MachineKind::MachineSet)[0],
                Action::Skip,
                Reason::NotSelected,
            );
        }
    }
}

#[test]
fn while_another_manager_is_active_nothing_we_judge_is_reported() {
    let mco = managed_by_the_mco(updatable());
    assert_gate_when_on(&mco, |c| c.golden = None);
    assert_gate_when_on(&mco, |c| c.infrastructure = None);
    let malformed = managed_by_the_mco(updatable().golden("{not json", Some(RELEASE)));
    assert_hard_gate(&malformed, Reason::AnotherManagerActive);
}

#[track_caller]
fn assert_gate_when_on(cluster: &ClusterSnapshot, change: impl FnOnce(&mut ClusterSnapshot)) {
    assert_hard_gate(&cluster.clone().with(change), Reason::AnotherManagerActive);
}

#[test]
fn mid_upgrade_inputs_are_not_judged_before_the_upgrade_completes() {
    // The MCO waits for a stable cluster before anything else (`isClusterStable`).
    let upgrading = updatable().upgraded(INSTALLED, RELEASE, "Partial");
    assert_hard_gate(
        &upgrading.clone().golden("{not json", Some(RELEASE)),
        Reason::ClusterUpgrading,
    );
    assert_hard_gate(
        &upgrading.with(|c| c.golden = None),
        Reason::ClusterUpgrading,
    );
    // The next release's ConfigMap, already published and malformed: wait for this release's.
    let next = updatable().golden("{not json", Some("4.22.0"));
    assert_hard_gate(&next, Reason::ReleaseMismatch);
}

#[test]
fn an_mco_that_enrolls_nothing_leaves_the_boot_images_to_us() {
    // Azure or vSphere on 4.21 without an opinion: the MCO's operator publishes
    // `machinesets: None` and its controller reports that it reconciled nothing.
    let idle = managed_by_the_mco(updatable()).with(|c| {
        let mc = c.machine_configuration.as_mut().unwrap();
        mc.status = Some(
            serde_json::from_value(json!({"managedBootImagesStatus": {"machineManagers": [
                machine_manager("machinesets", json!({"mode": "None"}))]}}))
            .unwrap(),
        );
    });
    assert_updates_worker_a(&idle);
    // Once the administrator opts in, the MCO is about to manage them: we stand down at once.
    let opted_in = idle.machine_managers(json!([machine_manager(
        "machinesets",
        json!({"mode": "All"})
    )]));
    assert_hold(&opted_in, Reason::AnotherManagerActive);
}

#[test]
fn mid_upgrade_updates_wait_for_the_upgrade_to_complete() {
    // The golden ConfigMap already describes 4.21.0 while nodes still run 4.20.
    let cluster = updatable().upgraded(INSTALLED, RELEASE, "Partial");
    assert_hold(&cluster, Reason::ClusterUpgrading);
    let no_history = updatable().with(|c| {
        let status = c.cluster_version.as_mut().unwrap().status.as_mut().unwrap();
        status.history.clear();
    });
    assert_hold(&no_history, Reason::ClusterUpgrading);
}

#[test]
fn a_golden_configmap_without_release_version_holds_updates() {
    assert_hold(
        &updatable().golden(&golden_stream(), None),
        Reason::ReleaseVersionMissing,
    );
    assert_hold(
        &updatable().golden(&golden_stream(), Some("  ")),
        Reason::ReleaseVersionMissing,
    );
}

#[test]
fn a_golden_configmap_of_another_release_holds_updates() {
    let cluster = updatable().upgraded(INSTALLED, INSTALLED, "Completed");
    assert_hold(&cluster, Reason::ReleaseMismatch);
    let blocked = plan_machine_sets(&cluster, &[]).blocked.unwrap();
    assert_mentions(&blocked.message, "4.20.5");
    assert_mentions(&blocked.message, RELEASE);
    // A release candidate is a different release.
    let rc = updatable().golden(&golden_stream(), Some("4.21.0-rc.3"));
    assert_hold(&rc, Reason::ReleaseMismatch);
}

#[test]
fn releases_are_compared_as_semver() {
    // Build metadata does not change a version's identity (semver 2.0 section 10), and the
    // ConfigMap value may carry a trailing newline from a YAML block scalar.
    for (cm, history) in [
        ("4.21.0", "4.21.0"),
        ("4.21.0\n", "4.21.0"),
        ("4.21.0+build.7", "4.21.0"),
        ("4.21.0", "4.21.0+okd.scos"),
        (
            "4.21.0-0.nightly-2026-02-27-101010",
            "4.21.0-0.nightly-2026-02-27-101010",
        ),
    ] {
        let cluster = updatable().golden(&golden_stream(), Some(cm)).upgraded(
            INSTALLED,
            history,
            "Completed",
        );
        let plan = plan_machine_sets(&cluster, &[machine_set("worker-a").served()]);
        assert_eq!(plan.blocked, None, "{cm:?} vs {history:?}");
        assert_decided(
            &plan.of(MachineKind::MachineSet)[0],
            Action::Update,
            Reason::BootImageOutdated,
        );
    }
    // Versions that are not semver are compared as written.
    let odd =
        updatable()
            .golden(&golden_stream(), Some("4.21"))
            .upgraded(INSTALLED, "4.21", "Completed");
    assert_eq!(plan_machine_sets(&odd, &[]).blocked, None);
}

#[test]
fn where_cluster_versions_are_not_served_the_release_is_not_checked() {
    let cluster = ClusterSnapshot {
        cluster_version: None,
        cluster_version_served: false,
        ..updatable().golden(&golden_stream(), None)
    };
    assert_updates_worker_a(&cluster);
}

#[test]
fn the_pause_annotation_holds_updates() {
    let paused = updatable().annotate_machine_configuration(PAUSE_ANNOTATION, "true");
    assert_hold(&paused, Reason::Paused);
    let not_paused = updatable().annotate_machine_configuration(PAUSE_ANNOTATION, "false");
    assert_updates_worker_a(&not_paused);
}

/// The MachineConfiguration as the Machine Config Operator leaves it where it manages boot
/// images: its manager owns the effective selection it published.
fn managed_by_the_mco(cluster: ClusterSnapshot) -> ClusterSnapshot {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{FieldsV1, ManagedFieldsEntry};
    cluster.with(|c| {
        let mc = c.machine_configuration.as_mut().unwrap();
        mc.metadata.managed_fields = Some(vec![ManagedFieldsEntry {
            manager: Some("machine-config-operator".into()),
            operation: Some("Update".into()),
            subresource: Some("status".into()),
            fields_type: Some("FieldsV1".into()),
            fields_v1: Some(FieldsV1(
                json!({"f:status": {"f:managedBootImagesStatus": {"f:machineManagers": {}}}}),
            )),
            ..ManagedFieldsEntry::default()
        }]);
    })
}

#[test]
fn another_boot_image_manager_makes_the_plan_report_only() {
    let cluster = managed_by_the_mco(updatable());
    assert_hold(&cluster, Reason::AnotherManagerActive);
    let entry = decide(&cluster, machine_set("worker-a").served());
    assert_decided(&entry, Action::Skip, Reason::AnotherManagerActive);
    assert!(entry.patch.is_empty());
    assert!(
        entry.message.starts_with("would update"),
        "{}",
        entry.message
    );
    assert!(
        entry.message.contains("machine-config-operator"),
        "{}",
        entry.message
    );
    // Standing down outranks every other hold, so the reason stays put while they come and go.
    let paused = cluster.annotate_machine_configuration(PAUSE_ANNOTATION, "true");
    assert_hold(&paused, Reason::AnotherManagerActive);
}

#[test]
fn report_only_holds_every_write_and_never_forces_one() {
    let options = Options {
        report_only: true,
        ..options()
    };
    let plan = plan(
        &updatable(),
        &listed(&[machine_set("a").served()]),
        &options,
    );
    assert_eq!(
        plan.blocked.as_ref().map(|b| b.reason),
        Some(Reason::ReportOnly)
    );
    assert!(plan.of(MachineKind::MachineSet)[0].patch.is_empty());
    // With another manager active, the flag does not change the answer.
    let plan = plan_with(&managed_by_the_mco(updatable()), &options);
    assert_eq!(plan.map(|b| b.reason), Some(Reason::AnotherManagerActive));
}

fn plan_with(cluster: &ClusterSnapshot, options: &Options) -> Option<Blocked> {
    plan(cluster, &listed(&[machine_set("a").served()]), options).blocked
}

#[test]
fn the_deprecated_pause_key_still_pauses_and_says_so() {
    let paused = updatable().annotate_machine_configuration(LEGACY_PAUSE_ANNOTATION, "true");
    assert_hold(&paused, Reason::Paused);
    let plan = plan_machine_sets(&paused, &[machine_set("a").served()]);
    let message = plan.blocked.unwrap().message;
    assert!(
        message.contains(PAUSE_ANNOTATION) && message.contains("deprecated"),
        "{message}"
    );
}

#[test]
fn the_deprecated_opt_out_key_is_honoured_with_a_warning() {
    let entry = decide(
        &updatable(),
        machine_set("old-key")
            .annotate(LEGACY_OPT_OUT_ANNOTATION, "disabled")
            .served(),
    );
    assert_decided(&entry, Action::Skip, Reason::OptedOut);
    let warning = entry.warning.expect("a deprecation warning");
    assert_eq!(warning.reason, Reason::DeprecatedAnnotation);
    assert!(
        warning.message.contains(OPT_OUT_ANNOTATION),
        "{}",
        warning.message
    );
    let entry = decide(
        &updatable(),
        machine_set("new-key")
            .annotate(OPT_OUT_ANNOTATION, "disabled")
            .served(),
    );
    assert_decided(&entry, Action::Skip, Reason::OptedOut);
    assert_eq!(entry.warning, None);
}

// ---------------------------------------------------------------------------------------------
// Rule 1: opt-out.

#[test]
fn the_opt_out_annotation_wins_over_every_other_rule() {
    let cluster = updatable().machine_managers(json!([machine_manager(
        "machinesets",
        json!({"mode": "Partial", "partial": {"machineResourceSelector": {"matchLabels": {"boot-images": "managed"}}}})
    )]));
    let opted_out = |ms: MachineSetBuilder| ms.annotate(OPT_OUT_ANNOTATION, "disabled").served();
    for ms in [
        opted_out(machine_set("selected").label("boot-images", "managed")),
        opted_out(machine_set("unselected")),
        opted_out(
            machine_set("owned")
                .label("boot-images", "managed")
                .owned_by("WorkerPool", "worker"),
        ),
        opted_out(
            machine_set("windows")
                .label("boot-images", "managed")
                .template_label(OS_ID_LABEL, "Windows"),
        ),
        opted_out(
            machine_set("garbage")
                .label("boot-images", "managed")
                .provider_spec(json!("garbage")),
        ),
    ] {
        let entry = decide(&cluster, ms);
        assert_decided(&entry, Action::Skip, Reason::OptedOut);
    }
    // The control plane opts out the same way.
    let cp = control_plane_machine_set()
        .annotate(OPT_OUT_ANNOTATION, "disabled")
        .served();
    assert_decided(
        &decide_control_plane(&updatable(), cp),
        Action::Skip,
        Reason::OptedOut,
    );
}

#[test]
fn only_the_disabled_value_opts_out() {
    for value in ["enabled", "Disabled", ""] {
        let entry = decide_worker_a(|ms| ms.annotate(OPT_OUT_ANNOTATION, value));
        assert_decided(&entry, Action::Update, Reason::BootImageOutdated);
    }
}

// ---------------------------------------------------------------------------------------------
// Rule 2: selection.

#[test]
fn mode_none_selects_no_machine_set() {
    let none = updatable().machine_managers(json!([machine_manager(
        "machinesets",
        json!({"mode": "None"})
    )]));
    let entry = decide(&none, machine_set("worker-a").served());
    assert_decided(&entry, Action::Skip, Reason::NotSelected);
    assert_mentions(&entry.message, "None");
    // An empty list of managers is an explicit opt-out, unlike an absent managedBootImages.
    let empty = updatable().machine_managers(json!([]));
    assert_decided(
        &decide(&empty, machine_set("worker-a").served()),
        Action::Skip,
        Reason::NotSelected,
    );
}

#[test]
fn partial_selection_matches_the_machine_set_labels() {
    let cluster = updatable().machine_managers(json!([machine_manager(
        "machinesets",
        json!({"mode": "Partial", "partial": {"machineResourceSelector": {
            "matchLabels": {"boot-images": "managed"},
            "matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["gpu"]}]
        }}})
    )]));
    let plan = plan_machine_sets(
        &cluster,
        &[
            machine_set("a-selected")
                .label("boot-images", "managed")
                .served(),
            machine_set("b-no-label").served(),
            machine_set("c-gpu")
                .label("boot-images", "managed")
                .label("tier", "gpu")
                .served(),
            // Labels of the machine template are not the MachineSet's own.
            machine_set("d-template-only")
                .template_label("boot-images", "managed")
                .served(),
        ],
    );
    let [selected, no_label, gpu, template_only] = plan.of(MachineKind::MachineSet) else {
        panic!("{plan:#?}");
    };
    assert_decided(selected, Action::Update, Reason::BootImageOutdated);
    assert_decided(no_label, Action::Skip, Reason::NotSelected);
    assert_decided(gpu, Action::Skip, Reason::NotSelected);
    assert_decided(template_only, Action::Skip, Reason::NotSelected);
    assert_mentions(&no_label.message, "Partial");
}

#[test]
fn an_invalid_selector_is_an_error_for_its_resource_kind_only() {
    let cluster = updatable().machine_managers(json!([
        machine_manager(
            "machinesets",
            json!({"mode": "Partial", "partial": {"machineResourceSelector": {
                "matchExpressions": [{"key": "zone", "operator": "Near", "values": ["us-east-1a"]}]
            }}})
        ),
        machine_manager("controlplanemachinesets", json!({"mode": "All"})),
    ]));
    let mut machines = listed(&[
        machine_set("worker-a").served(),
        machine_set("worker-b").served(),
    ]);
    let cp = control_plane_machine_set().served();
    machines.push(MachineResource::read(
        MachineKind::ControlPlaneMachineSet,
        cp,
    ));
    let plan = plan(&cluster, &machines, &options());
    assert_eq!(plan.blocked, None);
    for entry in plan.of(MachineKind::MachineSet) {
        assert_decided(entry, Action::Error, Reason::InvalidSelector);
        assert_mentions(&entry.message, "machineResourceSelector");
    }
    assert_decided(
        &plan.of(MachineKind::ControlPlaneMachineSet)[0],
        Action::Update,
        Reason::BootImageOutdated,
    );
}

// ---------------------------------------------------------------------------------------------
// Rules 3 and 4: owned, Windows, other OS streams.

#[test]
fn owned_machine_sets_are_left_to_their_owner() {
    let entry = decide_worker_a(|ms| ms.owned_by("WorkerPool", "mycluster-gpu"));
    assert_decided(&entry, Action::Skip, Reason::Owned);
    assert_mentions(&entry.message, "WorkerPool mycluster-gpu");
}

/// Hive marks the MachineSets of its MachinePools with labels, not owner references, and does
/// not revert their providerSpec: they are updated, as the MCO updates them.
#[test]
fn hive_machine_sets_are_updated() {
    let entry = decide_worker_a(|ms| ms.managed_by_hive("worker"));
    assert_decided(&entry, Action::Update, Reason::BootImageOutdated);
}

#[test]
fn windows_machine_sets_are_skipped() {
    let entry = decide(
        &updatable(),
        machine_set("winworker")
            .template_label(OS_ID_LABEL, "Windows")
            .ami(AMI_CUSTOM)
            .served(),
    );
    assert_decided(&entry, Action::Skip, Reason::WindowsMachine);
    // Only the template label counts, and only with this value.
    let linux = decide_worker_a(|ms| ms.template_label(OS_ID_LABEL, "rhcos"));
    assert_decided(&linux, Action::Update, Reason::BootImageOutdated);
}

#[test]
fn a_machine_set_of_an_os_stream_the_golden_config_map_lacks_is_skipped_naming_it() {
    for ms in [
        machine_set("rhel10").label(OS_STREAM_LABEL, "rhel-10"),
        machine_set("rhel10-template").template_label(OS_STREAM_LABEL, "rhel-10"),
    ] {
        let entry = decide(&updatable(), ms.served());
        assert_decided(&entry, Action::Skip, Reason::OSStreamNotPublished);
        assert_mentions(&entry.message, "\"rhel-10\"");
    }
    // The label names OS streams: rhel-9 is the default stream, as is no label at all (and the
    // CoreOS stream's own name, which older tooling wrote).
    for label in ["rhel-9", "rhcos-4.21"] {
        let default = decide_worker_a(|ms| ms.label(OS_STREAM_LABEL, label));
        assert_decided(&default, Action::Update, Reason::BootImageOutdated);
    }
}

#[test]
fn a_missing_os_stream_names_a_few_of_20000_carried_and_counts_the_rest() {
    let minimal = json!({"stream": "rhel-x", "architectures": {"x86_64": {"artifacts": {}}}});
    let carried: serde_json::Map<String, Value> = (0..20_000)
        .map(|i| (format!("stream-{i:05}"), minimal.clone()))
        .collect();
    let cluster = updatable().other_os_streams(Value::Object(carried));
    let machine_sets: Vec<_> = (0..300)
        .map(|i| {
            machine_set(&format!("worker-{i}"))
                .label(OS_STREAM_LABEL, "rhel-11")
                .served()
        })
        .collect();
    let plan = plan_machine_sets(&cluster, &machine_sets);
    let entry = &plan.of(MachineKind::MachineSet)[0];
    assert_decided(entry, Action::Skip, Reason::OSStreamNotPublished);
    assert_mentions(&entry.message, "\"stream-00004\" and 19995 more");
    assert!(entry.message.len() < 400, "{} bytes", entry.message.len());
    let printed = serde_json::to_string(&plan).unwrap();
    assert!(
        printed.len() < 300 * 1024,
        "the plan of 300 MachineSets is {} bytes",
        printed.len()
    );
}

#[test]
fn a_machine_set_of_another_os_stream_is_updated_from_that_stream() {
    // A dual-stream release: the default rhel-9 stream, and rhel-10 under `streams`.
    const AMI_RHEL_10: &str = streams::AMI_RHEL_10_US_EAST_1;
    let cluster = updatable().other_os_streams(json!({"rhel-10": streams::stream_rhel_10()}));
    let ms = machine_set("worker-rhel10").label(OS_STREAM_LABEL, "rhel-10");
    let entry = decide(&cluster, ms.served());
    assert_decided(&entry, Action::Update, Reason::BootImageOutdated);
    assert_eq!(entry.boot_image.target.as_ref(), Some(&json!(AMI_RHEL_10)));
    assert_mentions(&entry.message, "rhcos-4.22 10.2.20260405-0");
    let history = recorded_history(
        &entry,
        machine_set("worker-rhel10")
            .label(OS_STREAM_LABEL, "rhel-10")
            .served(),
    );
    assert_eq!(history.stream, "rhcos-4.22");
    // The default stream's MachineSets are unaffected.
    let default = decide(&cluster, machine_set("worker-a").served());
    assert_eq!(
        default.boot_image.target.as_ref(),
        Some(&json!(AMI_US_EAST_1))
    );
}

// ---------------------------------------------------------------------------------------------
// Rule 5: architecture.

#[test]
fn the_autoscaler_annotation_names_the_architecture() {
    let entry = decide_worker_a(|ms| {
        ms.ami(AMI_PREVIOUS_ARM64)
            .capacity_labels("foo=bar, kubernetes.io/arch=arm64")
    });
    assert_decided(&entry, Action::Update, Reason::BootImageOutdated);
    assert_eq!(
        entry.boot_image.target.as_ref(),
        Some(&json!(AMI_ARM64_US_EAST_1))
    );
    let amd64 = decide_worker_a(|ms| ms.capacity_labels(" kubernetes.io/arch = amd64 ,foo=bar"));
    assert_eq!(
        amd64.boot_image.target.as_ref(),
        Some(&json!(AMI_US_EAST_1))
    );
}

#[test]
fn an_unknown_architecture_is_an_error() {
    for arch in ["riscv64", "x86_64", ""] {
        let entry = decide_worker_a(|ms| ms.capacity_labels(&format!("kubernetes.io/arch={arch}")));
        assert_decided(&entry, Action::Error, Reason::UnknownArchitecture);
        assert_mentions(&entry.message, arch);
    }
}

#[test]
fn an_undetermined_architecture_is_an_error() {
    let no_arch_entry =
        decide_worker_a(|ms| ms.capacity_labels("foo=bar, node-role.kubernetes.io/worker="));
    assert_decided(
        &no_arch_entry,
        Action::Error,
        Reason::ArchitectureUndetermined,
    );
    let empty = decide_worker_a(|ms| ms.capacity_labels(""));
    assert_decided(&empty, Action::Error, Reason::ArchitectureUndetermined);
    // On a multi-arch cluster the control plane's arch says nothing about a MachineSet's: one
    // that does not declare its own is skipped (as the MCO does), not an error.
    let multi = updatable().multi_arch();
    let silent = decide(&multi, machine_set("worker-a").served());
    assert_decided(&silent, Action::Skip, Reason::ArchitectureNotDeclared);
    assert_mentions(&silent.message, "kubernetes.io/arch=");
    let named = decide(
        &multi,
        machine_set("worker-a")
            .capacity_labels("kubernetes.io/arch=amd64")
            .served(),
    );
    assert_decided(&named, Action::Update, Reason::BootImageOutdated);
}

#[test]
fn without_the_annotation_the_control_plane_nodes_architecture_applies() {
    let arm64 = updatable().control_plane_arch("arm64");
    let ms = machine_set("worker-a").ami(AMI_PREVIOUS_ARM64).served();
    let worker = plan(&arm64, &listed(std::slice::from_ref(&ms)), &options())
        .decisions
        .remove(0);
    assert_decided(&worker, Action::Update, Reason::BootImageOutdated);
    assert_eq!(
        worker.boot_image.target.as_ref(),
        Some(&json!(AMI_ARM64_US_EAST_1))
    );
    // --control-plane-arch overrides what the Nodes say.
    let override_arm64 = Options {
        control_plane_arch: Some(Arch::Arm64),
        ..options()
    };
    let worker = plan(&updatable(), &listed(&[ms]), &override_arm64)
        .decisions
        .remove(0);
    assert_decided(&worker, Action::Update, Reason::BootImageOutdated);
    assert_eq!(
        worker.boot_image.target.as_ref(),
        Some(&json!(AMI_ARM64_US_EAST_1))
    );
    // Control planes never carry the annotation, on multi-arch clusters too.
    let cluster = updatable()
        .multi_arch()
        .machine_managers(json!([machine_manager(
            "controlplanemachinesets",
            json!({"mode": "All"})
        )]));
    let cp = control_plane_machine_set().ami(AMI_PREVIOUS_ARM64).served();
    let cp = MachineResource::read(MachineKind::ControlPlaneMachineSet, cp);
    let planned = plan(&cluster, &[cp], &override_arm64);
    let entry = &planned.of(MachineKind::ControlPlaneMachineSet)[0];
    assert_decided(entry, Action::Update, Reason::BootImageOutdated);
    assert_eq!(
        entry.boot_image.target.as_ref(),
        Some(&json!(AMI_ARM64_US_EAST_1))
    );
}

#[test]
fn without_nodes_that_say_it_the_control_plane_architecture_is_an_error_never_a_default() {
    let managers = json!([machine_manager(
        "controlplanemachinesets",
        json!({"mode": "All"})
    )]);
    for (nodes, why) in [
        (BTreeMap::new(), "no control-plane Node is visible"),
        (
            BTreeMap::from([
                ("master-0".to_string(), Some("amd64".to_string())),
                ("master-1".to_string(), Some("arm64".to_string())),
            ]),
            "different architectures",
        ),
        (
            BTreeMap::from([("master-0".to_string(), None)]),
            "has no kubernetes.io/arch label",
        ),
    ] {
        let cluster = updatable()
            .machine_managers(managers.clone())
            .with(|c| c.control_plane_nodes = nodes);
        let worker = decide(&cluster, machine_set("worker-a").served());
        assert_decided(&worker, Action::Error, Reason::ArchitectureUndetermined);
        assert_mentions(&worker.message, why);
        let cp = decide_control_plane(&cluster, control_plane_machine_set().served());
        assert_decided(&cp, Action::Error, Reason::ArchitectureUndetermined);
        // A MachineSet that declares its architecture needs no Node.
        let declared = machine_set("worker-a").capacity_labels("kubernetes.io/arch=amd64");
        let worker = decide(&cluster, declared.served());
        assert_decided(&worker, Action::Update, Reason::BootImageOutdated);
    }
}

#[test]
fn an_image_of_another_architecture_than_the_decided_one_is_never_replaced() {
    // Declared arm64, but running the x86_64 AMI of the previous golden stream: either the
    // annotation or the image is wrong, and the arm64 AMI may not boot on its instance type.
    let cluster = updatable().other_os_streams(json!({"previous": previous_stream()}));
    let wrong = machine_set("worker-a")
        .capacity_labels("kubernetes.io/arch=arm64")
        .ami(AMI_PREVIOUS);
    let entry = decide(&cluster, wrong.served());
    assert_decided(&entry, Action::Error, Reason::ArchitectureMismatch);
    assert_mentions(&entry.message, AMI_PREVIOUS);
    assert_mentions(&entry.message, "amd64 image");
    // The golden image of the other architecture is caught too.
    let golden_x86 = machine_set("worker-a")
        .capacity_labels("kubernetes.io/arch=arm64")
        .ami(AMI_US_EAST_1);
    let entry = decide(&updatable(), golden_x86.served());
    assert_decided(&entry, Action::Error, Reason::ArchitectureMismatch);
}

/// The kit's 4.20 stream as a second stream of the golden ConfigMap, so that its AMIs are known
/// with their architectures.
fn previous_stream() -> Value {
    serde_json::from_str(&streams::RHCOS_420.to_json()).unwrap()
}

// ---------------------------------------------------------------------------------------------
// Rule 6: the platform's image rule.

#[test]
fn a_region_without_a_golden_ami_is_skipped() {
    let entry = decide_worker_a(|ms| ms.region("eu-west-3"));
    assert_decided(&entry, Action::Skip, Reason::RegionNotInStream);
    assert_mentions(&entry.message, "eu-west-3");
    assert_eq!(
        entry.boot_image.current.as_ref(),
        Some(&json!(AMI_PREVIOUS))
    );
    // The arm64 part of the stream has no us-east-2.
    let arm = decide(
        &updatable(),
        machine_set("worker-arm")
            .region("us-east-2")
            .capacity_labels("kubernetes.io/arch=arm64")
            .served(),
    );
    assert_decided(&arm, Action::Skip, Reason::RegionNotInStream);
}

#[test]
fn images_we_did_not_publish_are_never_replaced() {
    let entry = decide_worker_a_on(AMI_CUSTOM);
    assert_decided(&entry, Action::Skip, Reason::CustomImage);
    assert_eq!(entry.boot_image.current.as_ref(), Some(&json!(AMI_CUSTOM)));
    assert_eq!(entry.boot_image.target.as_ref(), None);
    // The previous release's AMI is ours only once it is a known image.
    let unknown = decide(&aws_cluster(), machine_set("worker-a").served());
    assert_decided(&unknown, Action::Skip, Reason::CustomImage);
    // A golden AMI of another region is ours through the stream itself.
    let copied = decide(
        &aws_cluster(),
        machine_set("worker-a")
            .ami(AMI_US_EAST_1)
            .region("us-east-2")
            .served(),
    );
    assert_decided(&copied, Action::Update, Reason::BootImageOutdated);
    assert_eq!(
        copied.boot_image.target.as_ref(),
        Some(&json!(AMI_US_EAST_2))
    );
}

#[test]
fn amis_chosen_by_filters_are_skipped() {
    let filters = json!({"filters": [{"name": "tag:Name", "values": ["rhcos-9.6*"]}]});
    let entry = decide_worker_a(|ms| ms.spec_field(&["ami"], filters.clone()));
    assert_decided(&entry, Action::Skip, Reason::ImageNotById);
    assert_eq!(entry.boot_image.current.as_ref(), Some(&filters));
}

#[test]
fn a_provider_spec_that_is_not_an_object_is_invalid() {
    for value in [
        json!("ami-09d23adad19cdb25c"),
        json!([]),
        json!(null),
        json!(42),
    ] {
        let entry = decide_worker_a(|ms| ms.provider_spec(value));
        assert_decided(&entry, Action::Error, Reason::InvalidProviderSpec);
    }
    let no_value = machine_set("worker-a").served().map(|mut ms| {
        ms.spec.template.spec.provider_spec.value = None;
        ms
    });
    assert_decided(
        &decide(&updatable(), no_value),
        Action::Error,
        Reason::InvalidProviderSpec,
    );
}

#[test]
fn a_provider_spec_without_an_ami_is_invalid() {
    for ms in [
        machine_set("worker-a").remove_spec_field("ami"),
        machine_set("worker-a").spec_field(&["ami"], json!({"id": null})),
        machine_set("worker-a").remove_spec_field("placement"),
    ] {
        let entry = decide(&updatable(), ms.served());
        assert_decided(&entry, Action::Error, Reason::InvalidProviderSpec);
    }
}

#[test]
fn a_machine_set_that_cannot_be_read_is_an_error() {
    let bad = machine_set("worker-bad").edit(|ms| ms["spec"]["replicas"] = json!("three"));
    let ms = bad.served();
    let Err(malformed) = &ms else {
        panic!("replicas must be an integer");
    };
    assert_eq!(
        (malformed.namespace.as_str(), malformed.name.as_str()),
        (NAMESPACE, "worker-bad")
    );
    let entry = decide(&updatable(), ms);
    assert_decided(&entry, Action::Error, Reason::MalformedObject);
    assert_eq!(
        (entry.namespace.as_str(), entry.name.as_str()),
        (NAMESPACE, "worker-bad")
    );
    assert_mentions(&entry.message, "\"three\"");
}

#[test]
fn unsupported_platforms_are_skipped() {
    // Platform None is not managed by default; selected explicitly, it is still not supported.
    let none = updatable().on_platform("None").not_opted_in();
    assert_decided(
        &decide(&none, machine_set("worker-a").served()),
        Action::Skip,
        Reason::NotSelected,
    );
    let entry = decide(&selecting_all(none), machine_set("worker-a").served());
    assert_decided(&entry, Action::Skip, Reason::PlatformNotSupported);
    assert_mentions(&entry.message, "None");
}

/// `cluster` with every MachineSet selected explicitly.
fn selecting_all(cluster: ClusterSnapshot) -> ClusterSnapshot {
    cluster.machine_managers(json!([machine_manager(
        "machinesets",
        json!({"mode": "All"})
    )]))
}

#[test]
fn unsupported_platforms_raise_no_errors_about_what_they_never_read() {
    // Architecture and providerSpec only matter to a platform rule; without one, reporting them
    // as errors would degrade a cluster we never write to.
    let none = selecting_all(updatable().on_platform("None"));
    for (cluster, ms) in [
        (none.clone().multi_arch(), machine_set("no-arch")),
        (
            none.clone(),
            machine_set("riscv").capacity_labels("kubernetes.io/arch=riscv64"),
        ),
        (
            none.clone(),
            machine_set("template").provider_spec(json!("vsphere-template")),
        ),
    ] {
        let entry = decide(&cluster, ms.served());
        assert_decided(&entry, Action::Skip, Reason::PlatformNotSupported);
    }
    // Rules 1 to 4 still explain themselves first.
    let owned = decide(
        &none,
        machine_set("owned").owned_by("WorkerPool", "w").served(),
    );
    assert_decided(&owned, Action::Skip, Reason::Owned);
}

/// A vSphere cluster with the kit's one failure domain, whose vCenter has `templates` (or was
/// not asked, when `None`).
fn vsphere_cluster(templates: Option<&[&str]>) -> ClusterSnapshot {
    let cluster = updatable().on_vsphere();
    match templates {
        Some(templates) => cluster.vcenter_templates(templates),
        None => cluster,
    }
}

fn vsphere_machine_set(name: &str, template: &str) -> MachineSetBuilder {
    machine_set(name).provider_spec(provider_specs::vsphere(template))
}

fn golden_template() -> String {
    crate::platform::vsphere::template_name(
        INFRASTRUCTURE_NAME,
        provider_specs::VSPHERE_FAILURE_DOMAIN,
        crate::testkit::streams::VMWARE_RELEASE_421,
    )
}

#[test]
fn vsphere_machine_sets_move_to_the_imported_template_with_a_guarded_patch() {
    let installer = format!("{INFRASTRUCTURE_NAME}-rhcos-us-east-1a");
    let cluster = vsphere_cluster(Some(&[&golden_template()]))
        .vcenter_template_release(&installer, "9.6.20250826-1");
    let entry = decide(
        &cluster,
        vsphere_machine_set("worker-a", &installer).served(),
    );
    assert_decided(&entry, Action::Update, Reason::BootImageOutdated);
    let ops = serde_json::to_value(&entry.patch).unwrap();
    let template = "/spec/template/spec/providerSpec/value/template";
    let datastore = "/spec/template/spec/providerSpec/value/workspace/datastore";
    let op = |op: &str, path: &str| {
        ops.as_array()
            .unwrap()
            .iter()
            .find(|o| o["op"] == op && o["path"] == path)
            .cloned()
    };
    assert_eq!(op("test", template).unwrap()["value"], json!(installer));
    assert_eq!(
        op("replace", template).unwrap()["value"],
        json!(golden_template())
    );
    assert_eq!(op("test", datastore).unwrap()["value"], json!("datastore1"));
    // The template already there: nothing to write for the image.
    let current = vsphere_machine_set("worker-b", &golden_template()).served();
    let entry = decide(&cluster, current);
    assert_ne!(entry.reason, Reason::BootImageOutdated, "{}", entry.message);
}

/// A fresh cluster: the installer's template is at the golden release under a name without
/// one. It is current, as upstream judges it, whatever its name: nothing to import or write.
#[test]
fn vsphere_templates_at_the_golden_release_are_current_whatever_their_name() {
    let installer = format!("{INFRASTRUCTURE_NAME}-rhcos-us-east-1a");
    let cluster = vsphere_cluster(Some(&[]))
        .vcenter_template_release(&installer, crate::testkit::streams::VMWARE_RELEASE_421);
    let on_managed_stub = || {
        vsphere_machine_set("worker-a", &installer)
            .user_data("worker-user-data-managed")
            .served()
    };
    let entry = decide(&cluster, on_managed_stub());
    assert_decided(&entry, Action::UpToDate, Reason::UpToDate);
    assert!(entry.patch.is_empty(), "{:?}", entry.patch);
    // Until vCenter has said which release it is, nothing is imported or written either.
    let entry = decide(&vsphere_cluster(Some(&[])), on_managed_stub());
    assert_decided(&entry, Action::Skip, Reason::TemplateVersionPending);
    assert_mentions(&entry.message, &installer);
    assert!(entry.patch.is_empty(), "{:?}", entry.patch);
}

#[test]
fn vsphere_without_vcenter_facts_says_what_it_would_import_and_writes_nothing() {
    let installer = format!("{INFRASTRUCTURE_NAME}-rhcos");
    let entry = decide(
        &vsphere_cluster(None),
        vsphere_machine_set("worker-a", &installer).served(),
    );
    assert_decided(&entry, Action::Skip, Reason::TemplateImportPending);
    assert_mentions(&entry.message, &golden_template());
    assert_mentions(&entry.message, "would import");
    assert!(entry.patch.is_empty(), "{:?}", entry.patch);
}

#[test]
fn vsphere_custom_templates_are_never_replaced() {
    let entry = decide(
        &vsphere_cluster(Some(&[&golden_template()])),
        vsphere_machine_set("worker-a", "rhcos-golden-by-hand").served(),
    );
    assert_decided(&entry, Action::Skip, Reason::CustomImage);
    assert!(entry.patch.is_empty());
}

#[test]
fn gcp_updates_boot_disks_and_never_data_disks() {
    let entry = decide(&gcp_cluster(), gcp_machine_set("worker-b").served());
    assert_decided(&entry, Action::Update, Reason::BootImageOutdated);
    let ops = guarded(
        &format!("{MACHINE_SET_SPEC}/disks/0/image"),
        GCP_IMAGE_PREVIOUS,
        GCP_IMAGE,
    )
    .to_vec();
    assert_eq!(patch_json(&entry), Value::Array(ops));

    // A data disk before the boot disk keeps its image and its index.
    let data_first = gcp_machine_set("worker-c").spec_field(
        &["disks"],
        json!([
            provider_specs::gcp_data_disk(GCP_IMAGE_PREVIOUS),
            provider_specs::gcp_boot_disk(GCP_IMAGE_PREVIOUS)
        ]),
    );
    let ms = data_first.served();
    let entry = decide(&gcp_cluster(), ms.clone());
    let patched = apply(ms.as_ref().unwrap(), &entry.patch.0);
    let disks = &patched
        .spec
        .template
        .spec
        .provider_spec
        .value
        .as_ref()
        .unwrap()["disks"];
    assert_eq!(disks[0]["image"], GCP_IMAGE_PREVIOUS);
    assert_eq!(disks[1]["image"], GCP_IMAGE);
    assert_eq!(disks[1]["labels"], Value::Null);

    // An image outside rhcos-cloud is somebody's own.
    let custom = gcp_machine_set("worker-d")
        .spec_field(
            &["disks"],
            json!([{"boot": true, "image": "projects/my-project/global/images/golden"}]),
        )
        .served();
    assert_decided(
        &decide(&gcp_cluster(), custom),
        Action::Skip,
        Reason::CustomImage,
    );
}

/// The RHCOS release a marketplace AMI boots travels with its image into the decision, and to
/// the current image once the update is applied, where the skew status reads it.
#[test]
fn a_marketplace_ami_carries_the_rhcos_release_it_boots() {
    const OCP_X86: &str = "59ead7de-2540-4653-a8b0-fa7926d5c845";
    let mut ec2 = crate::facts::ec2::Ec2Facts::consulted();
    for (id, release) in [
        ("ami-0market96old0000", "9.6.20250801-0"),
        ("ami-0market96new0000", "9.6.20251015-0"),
    ] {
        ec2.add_image(marketplace_ami(id, OCP_X86, release, "x86_64"));
    }
    ec2.add_search("us-east-1", OCP_X86);
    let cluster = updatable().with(|c| c.ec2 = ec2);
    let release = |release: Option<&String>| release.cloned();

    let on_marketplace = machine_set("worker-a").ami("ami-0market96old0000");
    let entry = decide(&cluster, on_marketplace.served());
    assert_decided(&entry, Action::Update, Reason::BootImageOutdated);
    let values = &entry.rhcos_release;
    assert_eq!(
        release(values.current.as_ref()).as_deref(),
        Some("9.6.20250801-0")
    );
    assert_eq!(
        release(values.target.as_ref()).as_deref(),
        Some("9.6.20251015-0")
    );
    let applied = entry.applied();
    assert_eq!(
        release(applied.rhcos_release.current.as_ref()).as_deref(),
        Some("9.6.20251015-0")
    );

    // A golden AMI tells no release of its own: the golden release is its.
    let entry = decide(
        &cluster,
        machine_set("worker-a").ami(AMI_US_EAST_1).served(),
    );
    assert_eq!(release(entry.rhcos_release.current.as_ref()), None);
}

// ---------------------------------------------------------------------------------------------
// Rule 7: the stub secret.

#[test]
fn a_missing_stub_secret_keeps_the_image_and_says_what_to_do() {
    let cluster = updatable().without_secret(NAMESPACE, STUB);
    let entry = decide(&cluster, machine_set("worker-a").served());
    assert_decided(&entry, Action::Skip, Reason::StubSecretMissing);
    assert!(entry.patch.is_empty() && entry.stub_upgrade.is_none());
    assert_mentions(&entry.message, &format!("{NAMESPACE}/{STUB}"));
    assert_mentions(&entry.message, "Role");
    // The stub is looked up in the MachineSet's own namespace.
    let elsewhere = decide_worker_a(|ms| ms.namespace("team-a"));
    assert_decided(&elsewhere, Action::Skip, Reason::StubSecretMissing);
    // A current image needs no stub: nothing would change.
    let current = decide(
        &cluster,
        machine_set("worker-a").ami(AMI_US_EAST_1).served(),
    );
    assert_decided(&current, Action::UpToDate, Reason::UpToDate);
}

/// What a spec-2 stub the conversion does not handle looks like: not JSON, no version, a spec
/// neither old nor new images share, or more than a pointer config.
#[test]
fn an_unconvertible_stub_keeps_the_image_and_says_what_to_do() {
    let with_files = r#"{"ignition":{"version":"2.2.0"},"storage":{"files":[{"filesystem":"root","path":"/etc/motd"}]}}"#;
    for user_data in [
        "#!/bin/bash\necho hi",
        "{}",
        r#"{"ignition":{"version":"1.0.0"}}"#,
        with_files,
    ] {
        let cluster = updatable().stub_secret_with_user_data(NAMESPACE, STUB, user_data);
        let entry = decide(&cluster, machine_set("worker-a").served());
        assert_decided(&entry, Action::Skip, Reason::StubSecretUnconvertible);
        assert!(
            entry.patch.is_empty() && entry.stub_upgrade.is_none(),
            "{user_data}"
        );
        assert_mentions(
            &entry.message,
            "Rewrite its userData as an Ignition 3 config",
        );
        assert_eq!(
            entry.boot_image.target.as_ref(),
            Some(&json!(AMI_US_EAST_1))
        );
    }
}

/// A cluster installed before 4.6 still has the installer's spec-2 stub: it is upgraded in place,
/// as the MCO does, and the MachineSet keeps naming it.
#[test]
fn a_spec2_installer_stub_is_upgraded_in_place_and_keeps_its_name() {
    let cluster = updatable().stub_secret(NAMESPACE, STUB, "2.2.0").with(|c| {
        let served = c.secrets.get_mut(&(NAMESPACE.into(), STUB.into())).unwrap();
        served.metadata.resource_version = Some("7".into());
    });
    let entry = decide(&cluster, machine_set("worker-a").served());
    assert_decided(&entry, Action::Update, Reason::BootImageOutdated);
    assert_eq!(
        patch_json(&entry),
        aws_update_patch(MACHINE_SET_SPEC, AMI_PREVIOUS, AMI_US_EAST_1)
    );
    assert_eq!(entry.user_data_secret.current.as_deref(), Some(STUB));
    assert_eq!(entry.user_data_secret.target, None);
    // Its name is tested, not replaced: another stub set meanwhile fails the patch.
    let name_test = json!({"op": "test", "path": format!("{MACHINE_SET_SPEC}/userDataSecret/name"), "value": STUB});
    let ops = serde_json::to_value(&entry.patch).unwrap();
    assert!(ops.as_array().unwrap().contains(&name_test), "{ops}");
    assert_mentions(
        &entry.message,
        "stub secret worker-user-data upgraded in place",
    );
    // The plan shows the secret's write beside the MachineSet's.
    let json = serde_json::to_value(&entry).unwrap();
    let upgrade = &json["stubSecretUpgrade"];
    assert_eq!(upgrade["namespace"], NAMESPACE);
    assert_eq!(upgrade["name"], STUB);
    assert_eq!(upgrade["fromVersion"], "2.2.0");
    assert_eq!(upgrade["toVersion"], "3.2.0");
    let ops = upgrade["patch"].as_array().unwrap();
    let paths: Vec<&str> = ops.iter().filter_map(|o| o["path"].as_str()).collect();
    assert!(paths.contains(&"/metadata/resourceVersion"), "{paths:?}");
    assert!(paths.contains(&"/data/userData"), "{paths:?}");
    // Once the secret is spec 3, its MachineSet is decided as on any current cluster.
    let after = decide(&updatable(), machine_set("worker-a").served());
    assert_eq!(after.stub_upgrade, None);
    // A current image leaves even a spec-2 stub alone: nothing boots from it anew.
    let current = decide(
        &cluster,
        machine_set("worker-a").ami(AMI_US_EAST_1).served(),
    );
    assert_decided(&current, Action::UpToDate, Reason::UpToDate);
    assert_eq!(current.stub_upgrade, None);
}

fn worker_a(plan: &Plan) -> &Decision {
    let named = |d: &&Decision| d.name == "worker-a";
    plan.decisions
        .iter()
        .find(named)
        .expect("worker-a is planned")
}

/// A spec-2 stub that a MachineSet keeping its image also names is not upgraded: that
/// MachineSet's image may read spec 2 only. Neither the stub nor the other MachineSet's image
/// moves, and the reason names the one that stays (docs/how-it-decides.md, "Stub secrets").
#[test]
fn a_spec2_stub_that_a_machine_set_keeping_its_image_names_is_not_upgraded() {
    let cluster = updatable().stub_secret(NAMESPACE, STUB, "2.2.0");
    let moving = || machine_set("worker-a").served();
    for staying in [
        machine_set("pinned").opted_out().served(),
        machine_set("custom").ami(AMI_CUSTOM).served(),
    ] {
        let name = staying.as_ref().unwrap().metadata.name.clone().unwrap();
        let plan = plan_machine_sets(&cluster, &[moving(), staying]);
        let entry = worker_a(&plan);
        assert_decided(entry, Action::Skip, Reason::StubSecretShared);
        assert_eq!(entry.stub_upgrade, None);
        assert_mentions(&entry.message, &format!("MachineSet {name}"));
        assert_mentions(
            &entry.message,
            "stub secret openshift-machine-api/worker-user-data",
        );
    }
    // Another MachineSet that moves with it, or one on the golden image already (which reads
    // spec 3), does not hold it.
    let with = |other: MachineSetBuilder| {
        let plan = plan_machine_sets(&cluster, &[moving(), other.served()]);
        worker_a(&plan).clone()
    };
    for other in [
        machine_set("worker-b"),
        machine_set("current").ami(AMI_US_EAST_1),
    ] {
        let entry = with(other);
        assert_decided(&entry, Action::Update, Reason::BootImageOutdated);
        assert!(entry.stub_upgrade.is_some());
    }
    // A MachineSet on another stub does not either.
    let entry = with(machine_set("pinned").opted_out().user_data(MANAGED_STUB));
    assert_decided(&entry, Action::Update, Reason::BootImageOutdated);
}

/// The documented disk-partitioning case: an administrator points a MachineSet at a stub of
/// their own, a spec-3 config with a disk layout. It stays, and the image moves.
#[test]
fn a_custom_stub_is_kept_and_the_image_moves() {
    let layout = r#"{"ignition":{"version":"3.2.0","config":{"merge":[{"source":"https://api-int.demo.example.com:22623/config/worker"}]}},"storage":{"disks":[{"device":"/dev/nvme1n1","partitions":[{"label":"var","sizeMiB":0}]}],"filesystems":[{"device":"/dev/disk/by-partlabel/var","format":"xfs","path":"/var"}]}}"#;
    let cluster =
        updatable().stub_secret_with_user_data(NAMESPACE, "disk-layout-user-data", layout);
    let ms = machine_set("worker-a")
        .user_data("disk-layout-user-data")
        .served();
    let entry = decide(&cluster, ms.clone());
    assert_decided(&entry, Action::Update, Reason::BootImageOutdated);
    assert_eq!(
        patch_json(&entry),
        aws_update_patch(MACHINE_SET_SPEC, AMI_PREVIOUS, AMI_US_EAST_1)
    );
    assert_eq!(
        entry.user_data_secret.current.as_deref(),
        Some("disk-layout-user-data")
    );
    assert_eq!(
        (entry.warning.as_ref(), entry.stub_upgrade.as_ref()),
        (None, None)
    );
    // Even when a managed twin of that name exists.
    let with_twin = cluster.stub_secret(NAMESPACE, "disk-layout-user-data-managed", "3.2.0");
    let entry = decide(&with_twin, ms);
    assert_eq!(
        patch_json(&entry),
        aws_update_patch(MACHINE_SET_SPEC, AMI_PREVIOUS, AMI_US_EAST_1)
    );
}

#[test]
fn a_stub_secret_name_that_is_not_a_string_is_an_error() {
    let ms = machine_set("worker-a").spec_field(&["userDataSecret", "name"], json!(42));
    let entry = decide(&updatable(), ms.served());
    assert_decided(&entry, Action::Error, Reason::InvalidProviderSpec);
    assert_mentions(&entry.message, "userDataSecret.name");
}

#[test]
fn a_current_image_on_the_managed_stub_is_up_to_date() {
    let entry = decide(
        &updatable(),
        machine_set("worker-a")
            .ami(AMI_US_EAST_1)
            .user_data(MANAGED_STUB)
            .served(),
    );
    assert_decided(&entry, Action::UpToDate, Reason::UpToDate);
    assert_eq!(
        entry.boot_image.current.as_ref(),
        Some(&json!(AMI_US_EAST_1))
    );
    assert_eq!(
        entry.user_data_secret.current.as_deref(),
        Some(MANAGED_STUB)
    );
    assert_eq!(entry.user_data_secret.target, None);
    assert_mentions(&entry.message, AMI_US_EAST_1);
}

/// A MachineSet an earlier release moved to the managed stub stays there, and that stub is
/// checked like any other before the image moves.
#[test]
fn a_machine_set_on_the_managed_stub_stays_there() {
    let entry = decide_worker_a(|ms| ms.user_data(MANAGED_STUB));
    assert_decided(&entry, Action::Update, Reason::BootImageOutdated);
    assert_eq!(
        patch_json(&entry),
        aws_update_patch(MACHINE_SET_SPEC, AMI_PREVIOUS, AMI_US_EAST_1)
    );
    let missing = updatable().without_secret(NAMESPACE, MANAGED_STUB);
    let entry = decide(
        &missing,
        machine_set("worker-a").user_data(MANAGED_STUB).served(),
    );
    assert_decided(&entry, Action::Skip, Reason::StubSecretMissing);
    assert_mentions(&entry.message, MANAGED_STUB);
}

// ---------------------------------------------------------------------------------------------
// Rule 8: the hot-loop guard.

/// A MachineSet we patched at each of `times`, each time reverted by someone else.
fn reverted_at(
    times: &[i64],
    target_of: impl Fn(&Decision) -> Decision,
) -> Result<MachineSet, Malformed> {
    let ms = machine_set("worker-a").served();
    let first = target_of(&decide(&updatable(), ms.clone()));
    let mut ms = ms.unwrap();
    for minutes in times {
        // What our patch at that time wrote besides the change, which was then reverted.
        let at = minutes_ago(*minutes);
        let entry = HistoryEntry {
            infrastructure_template: None,
            time: at.to_string(),
            release: Some(RELEASE.to_string()),
            stream: "rhcos-4.21".to_string(),
            boot_image: first.boot_image.change(),
            user_data_secret: first.user_data_secret.change(),
            ..Default::default()
        };
        let window = options().hot_loop_window;
        let mut ops = Patch::default();
        history::record_ops(&mut ops, &ms.metadata, &entry, at, window);
        ms = apply(&ms, &ops.0);
    }
    Ok(ms)
}

#[test]
fn repeated_reverts_within_the_window_stop_the_updates() {
    let ms = reverted_at(&[30, 20, 10], Decision::clone);
    let entry = decide(&updatable(), ms);
    assert_decided(&entry, Action::Error, Reason::HotLoop);
    assert_mentions(&entry.message, "3 times within 1h");
    assert_eq!(
        entry.boot_image.target.as_ref(),
        Some(&json!(AMI_US_EAST_1))
    );
    let last = entry.last_change.expect("our patches are in the history");
    assert_eq!(last.time, minutes_ago(10).to_string());
}

#[test]
fn reverts_older_than_the_window_do_not_count() {
    let ms = reverted_at(&[70, 20, 10], Decision::clone);
    let entry = decide(&updatable(), ms);
    assert_decided(&entry, Action::Update, Reason::BootImageOutdated);
}

/// A golden image flipping between two targets: the earlier patches went to another image,
/// and they count all the same (issue 38: a guard that forgot on every new target let a
/// flipping ConfigMap patch each MachineSet 133 times in 30 s).
#[test]
fn patches_to_another_target_count_too() {
    let ms = reverted_at(&[30, 20, 10], |entry| {
        let mut older = entry.clone();
        older.boot_image.target = Some(json!("ami-0e1b2c3d4e5f6a7b8"));
        older
    });
    let entry = decide(&updatable(), ms);
    assert_decided(&entry, Action::Error, Reason::HotLoop);
    assert_mentions(&entry.message, "3 times within 1h");
}

// ---------------------------------------------------------------------------------------------
// Rule 9: the update itself.

#[test]
fn an_update_tests_then_replaces_each_changed_value() {
    let entry = decide(&updatable(), machine_set("worker-a").served());
    assert_decided(&entry, Action::Update, Reason::BootImageOutdated);
    assert_eq!(
        patch_json(&entry),
        aws_update_patch(MACHINE_SET_SPEC, AMI_PREVIOUS, AMI_US_EAST_1)
    );
    assert_eq!(
        entry.boot_image.current.as_ref(),
        Some(&json!(AMI_PREVIOUS))
    );
    assert_eq!(
        entry.boot_image.target.as_ref(),
        Some(&json!(AMI_US_EAST_1))
    );
    assert_eq!(entry.user_data_secret.current.as_deref(), Some(STUB));
    assert_eq!(entry.user_data_secret.target, None);
    assert_eq!(
        entry.message,
        format!("boot image {AMI_PREVIOUS} -> {AMI_US_EAST_1} (rhcos-4.21 9.6.20251023-0)")
    );
}

#[test]
fn the_inputs_that_chose_an_image_are_tested_by_its_patch() {
    let test_of = |entry: &Decision, path: &str| {
        serde_json::to_value(&entry.patch)
            .unwrap()
            .as_array()
            .unwrap()
            .iter()
            .any(|op| op["op"] == "test" && op["path"] == path)
    };
    let region = format!("{MACHINE_SET_SPEC}/placement/region");
    let annotated = machine_set("worker-a")
        .capacity_labels("kubernetes.io/arch=amd64")
        .served();
    let entry = decide(&updatable(), annotated.clone());
    assert_decided(&entry, Action::Update, Reason::BootImageOutdated);
    assert!(test_of(&entry, &region), "{:?}", entry.patch);
    let annotation = format!(
        "/metadata/annotations/{}",
        AUTOSCALER_LABELS_ANNOTATION.replace('/', "~1")
    );
    assert!(test_of(&entry, &annotation), "{:?}", entry.patch);
    // Moved to another region or architecture between plan and patch: the patch fails.
    for (pointer, value) in [
        (region.as_str(), "us-west-2"),
        (annotation.as_str(), "kubernetes.io/arch=arm64"),
    ] {
        let mut doc = serde_json::to_value(annotated.as_ref().unwrap()).unwrap();
        *doc.pointer_mut(pointer).unwrap() = json!(value);
        assert!(
            json_patch::patch(&mut doc, &entry.patch.0).is_err(),
            "{pointer}"
        );
    }
    // Without the annotation, the architecture came from elsewhere: an annotation added
    // meanwhile can only be caught by the resourceVersion.
    let entry = decide(&updatable(), machine_set("worker-a").served());
    assert!(
        test_of(&entry, "/metadata/resourceVersion"),
        "{:?}",
        entry.patch
    );
}

#[test]
fn gcp_boot_flags_and_the_azure_security_profile_are_tested_by_the_patch() {
    // Each input changed between plan and patch: the patch planned before must fail.
    let fails_after =
        |entry: &Decision, ms: &Result<MachineSet, Malformed>, pointer: &str, value: Value| {
            let mut doc = serde_json::to_value(ms.as_ref().unwrap()).unwrap();
            *doc.pointer_mut(pointer).unwrap() = value;
            json_patch::patch(&mut doc, &entry.patch.0).is_err()
        };
    // GCP: the boot flags chose which disk's image to replace.
    let ms = gcp_machine_set("worker-b").served();
    let entry = decide(&gcp_cluster(), ms.clone());
    assert_decided(&entry, Action::Update, Reason::BootImageOutdated);
    let boot = format!("{MACHINE_SET_SPEC}/disks/0/boot");
    assert!(
        fails_after(&entry, &ms, &boot, json!(false)),
        "{:?}",
        entry.patch
    );
    let data_disk_boot = format!("{MACHINE_SET_SPEC}/disks/1/boot");
    assert!(
        fails_after(&entry, &ms, &data_disk_boot, json!(true)),
        "{:?}",
        entry.patch
    );

    // Azure: the security profile decides whether a marketplace image may be used at all.
    let image =
        provider_specs::azure_marketplace("azureopenshift", "aro4", "419-v2", "419.6.20250523");
    let ms = machine_set("worker-z")
        .provider_spec(provider_specs::azure(image))
        .served();
    let entry = decide(&aws_cluster().on_platform("Azure"), ms.clone());
    assert_eq!(entry.action, Action::Update, "{}", entry.message);
    let trusted = json!({"settings": {"securityType": "TrustedLaunch"}});
    let profile = format!("{MACHINE_SET_SPEC}/securityProfile");
    assert!(
        fails_after(&entry, &ms, &profile, trusted),
        "{:?}",
        entry.patch
    );
}

/// A plan judges each image once per provider spec and shares the verdict: objects whose read
/// fields differ in any way (a region, a security profile, an image that is `null` rather than
/// absent) are still judged each on its own, and planning them together decides for each what
/// planning it alone does.
#[test]
fn objects_planned_together_are_each_decided_as_alone() {
    let aws = [
        machine_set("east-1a").served(),
        // Differs from east-1a only where no rule reads: shares its verdict.
        (machine_set("east-1b").spec_field(&["instanceType"], json!("m6i.2xlarge"))).served(),
        machine_set("east-2").region("us-east-2").served(),
        (machine_set("east-1-arm").capacity_labels("kubernetes.io/arch=arm64")).served(),
    ];
    let image =
        provider_specs::azure_marketplace("azureopenshift", "aro4", "419-v2", "419.6.20250523");
    let azure_with = |name: &str, field: &str, value: Option<Value>| {
        let mut spec = provider_specs::azure(image.clone());
        match value {
            Some(value) => spec[field] = value,
            None => _ = spec.as_object_mut().unwrap().remove(field),
        }
        machine_set(name).provider_spec(spec).served()
    };
    let trusted = json!({"settings": {"securityType": "TrustedLaunch"}});
    let azure = [
        azure_with("plain", "securityProfile", None),
        azure_with("trusted", "securityProfile", Some(trusted)),
        azure_with("no-image", "image", None),
        azure_with("null-image", "image", Some(Value::Null)),
    ];
    let clusters = [
        (updatable(), &aws[..]),
        (updatable().on_platform("Azure"), &azure[..]),
    ];
    for (cluster, machine_sets) in clusters {
        let together = plan_machine_sets(&cluster, machine_sets);
        assert_eq!(
            together.of(MachineKind::MachineSet).len(),
            machine_sets.len()
        );
        for ms in machine_sets {
            let alone = decide(&cluster, ms.clone());
            let decided = together
                .of(MachineKind::MachineSet)
                .iter()
                .find(|d| d.name == alone.name);
            assert_eq!(decided, Some(&alone));
        }
    }
    // Each judged on its own fields: what a shared verdict would have got wrong.
    let aws = plan_machine_sets(&updatable(), &aws);
    let target = |name: &str| {
        let decided = aws
            .of(MachineKind::MachineSet)
            .iter()
            .find(|d| d.name == name)
            .unwrap();
        decided.boot_image.target.as_ref().cloned()
    };
    assert_eq!(target("east-1a"), Some(json!(AMI_US_EAST_1)));
    assert_eq!(target("east-1b"), Some(json!(AMI_US_EAST_1)));
    assert_eq!(target("east-2"), Some(json!(AMI_US_EAST_2)));
    assert_eq!(target("east-1-arm"), Some(json!(AMI_ARM64_US_EAST_1)));
    let azure = plan_machine_sets(&updatable().on_platform("Azure"), &azure);
    let decided = |name: &str| {
        azure
            .of(MachineKind::MachineSet)
            .iter()
            .find(|d| d.name == name)
            .unwrap()
    };
    let (plain, trusted) = (decided("plain"), decided("trusted"));
    let (no_image, null_image) = (decided("no-image"), decided("null-image"));
    assert_eq!(plain.action, Action::Update, "{}", plain.message);
    assert_decided(trusted, Action::Skip, Reason::SecurityTypeUnsupported);
    assert_decided(no_image, Action::Error, Reason::InvalidProviderSpec);
    assert_decided(null_image, Action::Error, Reason::InvalidProviderSpec);
    assert_eq!(no_image.boot_image.current.as_ref(), None);
    assert_eq!(null_image.boot_image.current.as_ref(), Some(&Value::Null));
}

/// The controller reports a rollout from its patch responses (`Decision::apply`) instead of
/// waiting for the watch to echo each patched object: what it reports must be exactly what
/// planning the patched object decides, or the echo would change the status once more.
#[test]
fn an_applied_update_reports_what_planning_the_patched_object_decides() {
    let kept_stub = |ms: MachineSetBuilder| ms.user_data("custom-user-data");
    type Edit = fn(MachineSetBuilder) -> MachineSetBuilder;
    let cases: [(&str, Edit); 3] = [
        ("image, on the installer's stub", |ms| ms),
        ("image, on the managed stub", |ms| {
            ms.user_data(MANAGED_STUB)
        }),
        ("image, with the administrator's stub kept", kept_stub),
    ];
    for (case, change) in cases {
        let history = vec![HistoryEntry {
            time: minutes_ago(90).to_string(),
            release: Some(INSTALLED.into()),
            stream: "rhcos-4.20".into(),
            boot_image: Some(Change {
                from: json!(AMI_CUSTOM),
                to: json!(AMI_PREVIOUS),
            }),
            user_data_secret: None,
            infrastructure_template: None,
            ..Default::default()
        }];
        let history = serde_json::to_string(&history).unwrap();
        let ms = change(machine_set("worker-a").annotate(history::HISTORY_ANNOTATION, &history))
            .served();
        let cluster = updatable().stub_secret(NAMESPACE, "custom-user-data", "3.2.0");
        let update = decide(&cluster, ms.clone());
        assert_decided(&update, Action::Update, update.reason);
        let patched = apply(&ms.unwrap(), &update.patch.0);
        let mut replanned = decide(&cluster, Ok(patched));
        // The uid and resourceVersion the echo carries are the API server's to set.
        replanned.uid = update.uid.clone();
        assert_eq!(update.applied(), replanned, "{case}");
    }
}

#[test]
fn an_applied_update_leaves_the_machine_set_up_to_date_and_the_rest_untouched() {
    let ms = machine_set("worker-a").served();
    let entry = decide(&updatable(), ms.clone());
    let before = ms.unwrap();
    let after = apply(&before, &entry.patch.0);
    let again = decide(&updatable(), Ok(after.clone()));
    assert_decided(&again, Action::UpToDate, Reason::UpToDate);

    let mut expected = serde_json::to_value(&before).unwrap();
    let spec = expected.pointer_mut(MACHINE_SET_SPEC).unwrap();
    spec["ami"]["id"] = json!(AMI_US_EAST_1);
    // Besides the change, only our own bookkeeping annotations are added.
    let mut after = serde_json::to_value(&after).unwrap();
    let annotations = after["metadata"]["annotations"].as_object_mut().unwrap();
    for key in [history::HISTORY_ANNOTATION, history::HOT_LOOP_ANNOTATION] {
        assert!(annotations.remove(key).is_some(), "{key} missing");
    }
    assert!(annotations.is_empty(), "{annotations:?}");
    after["metadata"]
        .as_object_mut()
        .unwrap()
        .remove("annotations");
    assert_eq!(after, expected);
    assert_eq!(
        expected.pointer(&format!("{MACHINE_SET_SPEC}/metadata/creationTimestamp")),
        Some(&Value::Null)
    );
}

/// The watch store keeps only the annotations the planner reads, but keeps the map itself: an
/// object whose annotations are all someone else's is planned exactly as the whole object, and
/// its bookkeeping is added to the map it has rather than replacing that map.
#[test]
fn a_stored_object_is_planned_as_the_whole_one_whatever_its_other_annotations() {
    let whole = machine_set("worker-a")
        .annotate("kubectl.kubernetes.io/last-applied-configuration", "{}")
        .served()
        .unwrap();
    let mut stored = whole.clone();
    crate::machine_kind::MachineObject::keep_only_what_the_planner_reads(&mut stored);
    let planned = decide(&updatable(), Ok(whole));
    assert_decided(&planned, Action::Update, Reason::BootImageOutdated);
    assert_eq!(decide(&updatable(), Ok(stored)), planned);
    let paths: Vec<String> = (planned.patch.0.iter())
        .map(|op| serde_json::to_value(op).unwrap()["path"].to_string())
        .collect();
    assert!(
        !paths.contains(&"\"/metadata/annotations\"".to_string()),
        "{paths:?}"
    );
}

#[test]
fn a_concurrent_edit_of_a_replaced_value_fails_the_patch() {
    let ms = machine_set("worker-a").served();
    let entry = decide(&updatable(), ms.clone());
    let mut doc = serde_json::to_value(ms.unwrap()).unwrap();
    doc.pointer_mut(&format!("{MACHINE_SET_SPEC}/userDataSecret/name"))
        .map(|name| *name = json!("worker-user-data-custom"))
        .unwrap();
    assert!(json_patch::patch(&mut doc, &entry.patch.0).is_err());
}

#[test]
fn the_history_entry_records_what_changed_and_why() {
    let cluster = updatable();
    let entry = decide(&cluster, machine_set("worker-a").served());
    let recorded = recorded_history(&entry, machine_set("worker-a").served());
    assert_eq!(
        recorded,
        HistoryEntry {
            infrastructure_template: None,
            time: "2026-03-02T10:00:00Z".into(),
            release: Some(RELEASE.into()),
            stream: "rhcos-4.21".into(),
            boot_image: Some(Change {
                from: json!(AMI_PREVIOUS),
                to: json!(AMI_US_EAST_1),
            }),
            user_data_secret: None,
            ..Default::default()
        }
    );
}

/// The history entry an applied update leaves on the object.
fn recorded_history(entry: &Decision, ms: Result<MachineSet, Malformed>) -> HistoryEntry {
    let after = apply(&ms.unwrap(), &entry.patch.0);
    let mut history = history::history(&after.metadata);
    assert_eq!(history.len(), 1, "{history:?}");
    history.pop().unwrap()
}

#[test]
fn the_last_change_comes_from_the_history_annotation() {
    let fresh = decide(&updatable(), machine_set("worker-a").served());
    assert_eq!(fresh.last_change, None);

    let older = HistoryEntry {
        infrastructure_template: None,
        time: "2025-06-01T00:00:00Z".into(),
        release: Some("4.19.3".into()),
        stream: "rhcos-4.19".into(),
        boot_image: Some(Change {
            from: json!("ami-0c1d2e3f4a5b6c7d8"),
            to: json!(AMI_PREVIOUS),
        }),
        user_data_secret: None,
        ..Default::default()
    };
    let newer = HistoryEntry {
        time: "2026-01-11T00:00:00Z".into(),
        release: Some("4.20.5".into()),
        ..older.clone()
    };
    let history = serde_json::to_string(&[&older, &newer]).unwrap();
    let ms = machine_set("worker-a").annotate(history::HISTORY_ANNOTATION, &history);
    let entry = decide(&updatable(), ms.served());
    assert_eq!(entry.last_change, Some(newer));
    // It is reported whatever the decision.
    let skipped = machine_set("worker-a")
        .annotate(history::HISTORY_ANNOTATION, &history)
        .annotate(OPT_OUT_ANNOTATION, "disabled");
    assert!(decide(&updatable(), skipped.served()).last_change.is_some());
    // An unreadable history is no history, never an error.
    let garbled = machine_set("worker-a").annotate(history::HISTORY_ANNOTATION, "[{");
    let entry = decide(&updatable(), garbled.served());
    assert_eq!((entry.action, entry.last_change), (Action::Update, None));
}

// ---------------------------------------------------------------------------------------------
// ControlPlaneMachineSets.

#[test]
fn control_plane_machine_sets_are_not_updated_by_default() {
    // MachineSets are opted in; control planes are opt-in on every release.
    let entry = decide_control_plane(&updatable(), control_plane_machine_set().served());
    assert_decided(&entry, Action::Skip, Reason::NotOptedIn);
    assert_mentions(&entry.message, "naming controlplanemachinesets");
}

/// Nothing is written where nobody opted in and the MCO of the release would not update either:
/// 4.16 to 4.18 everywhere, Azure and vSphere before 4.22. Where the MCO itself opts in (AWS and
/// GCP from 4.19), so does the default here. The decision says how to opt in.
#[test]
fn without_an_opt_in_the_release_and_platform_decide_as_the_mco_would() {
    for (platform, release, updated) in [
        ("AWS", "4.16.30", false),
        ("AWS", "4.18.9", false),
        ("AWS", "4.19.0", true),
        ("GCP", "4.20.4", true),
        ("Azure", "4.20.4", false),
        ("VSphere", "4.21.2", false),
        ("Azure", "4.22.0", true),
    ] {
        let cluster = updatable().on_platform(platform).not_opted_in();
        let cluster = cluster.with(|c| {
            let status = c.cluster_version.as_mut().unwrap().status.as_mut().unwrap();
            status.desired.as_mut().unwrap().version = Some(release.into());
        });
        let plan = plan_machine_sets(&cluster, &[machine_set("worker-a").served()]);
        let entry = &plan.of(MachineKind::MachineSet)[0];
        let what = format!("{platform} {release}: {}", entry.message);
        assert_eq!(entry.reason != Reason::NotOptedIn, updated, "{what}");
        assert_eq!(
            plan.selection["machinesets"].to_string(),
            match updated {
                true => "All by default",
                false => "None by default",
            },
            "{what}"
        );
        if !updated {
            assert_eq!(entry.action, Action::Skip, "{what}");
            assert!(entry.patch.is_empty(), "{what}");
            assert_mentions(&entry.message, OPT_IN_COMMAND);
        }
    }
}

/// Our annotation opts in wherever the spec cannot (4.16 prunes it; on AWS and GCP it would hand
/// the MachineSets to the MCO), by label selector too, and it comes before the spec.
#[test]
fn the_opt_in_annotation_selects_by_label_and_comes_before_the_spec() {
    let partial = json!({"machineManagers": [machine_manager("machinesets",
        json!({"mode": "Partial", "partial": {"machineResourceSelector": {
            "matchLabels": {"tier": "general"}}}}))]});
    let cluster = updatable()
        .machine_managers(json!([machine_manager(
            "machinesets",
            json!({"mode": "None"})
        )]))
        .annotate_machine_configuration(OPT_IN_ANNOTATION, &partial.to_string());
    let general = machine_set("general").label("tier", "general").served();
    let gpu = machine_set("gpu").label("tier", "gpu").served();
    let plan = plan_machine_sets(&cluster, &[general, gpu]);
    let [general, gpu] = plan.of(MachineKind::MachineSet) else {
        panic!("{plan:?}")
    };
    assert_decided(general, Action::Update, Reason::BootImageOutdated);
    assert_decided(gpu, Action::Skip, Reason::NotSelected);
    assert_mentions(&gpu.message, "boot-image-controller.io/managed-boot-images");
    assert_eq!(
        plan.selection["machinesets"].to_string(),
        "Partial from annotation"
    );
    // An annotation that is not such JSON is the configuration error it is, never a default.
    let broken = cluster.annotate_machine_configuration(OPT_IN_ANNOTATION, "{mode: All}");
    let entry = decide(&broken, machine_set("worker-a").served());
    assert_decided(&entry, Action::Error, Reason::InvalidSelector);
    assert_mentions(&entry.message, "not JSON");
}

/// The control-plane machine set operator replaces every control-plane Machine whose providerSpec
/// differs from the template in anything but the boot image: a ControlPlaneMachineSet keeps its
/// stub secret's name; a spec-2 stub is upgraded in place, and one that cannot be read keeps
/// the image.
#[test]
fn a_control_plane_machine_set_never_changes_its_stub_secret_name() {
    let all = json!([machine_manager(
        "controlplanemachinesets",
        json!({"mode": "All"})
    )]);
    let cluster = updatable().machine_managers(all.clone());
    let cp = control_plane_machine_set().served();
    let entry = decide_control_plane(&cluster, cp.clone());
    assert_decided(&entry, Action::Update, Reason::BootImageOutdated);
    let replaces_name = |entry: &Decision| {
        (entry.patch.0.iter())
            .map(|op| serde_json::to_value(op).unwrap())
            .any(|op| op["op"] != "test" && op["path"].as_str().unwrap().contains("userDataSecret"))
    };
    assert!(!replaces_name(&entry), "{:?}", entry.patch);
    assert!(!entry.message.contains("stub secret"), "{}", entry.message);

    // An Ignition 2 stub (a cluster installed before 4.6) cannot boot the new image.
    let spec2 = updatable().machine_managers(all.clone()).stub_secret(
        NAMESPACE,
        "master-user-data",
        "2.2.0",
    );
    let entry = decide_control_plane(&spec2, cp.clone());
    assert_decided(&entry, Action::Update, Reason::BootImageOutdated);
    assert!(!replaces_name(&entry), "{:?}", entry.patch);
    let upgrade = entry
        .stub_upgrade
        .as_ref()
        .expect("the stub is upgraded in place");
    assert_eq!(
        (upgrade.name.as_str(), upgrade.from_version.as_str()),
        ("master-user-data", "2.2.0")
    );
    // Without the secret, nothing tells that the new image can boot: no update either.
    let missing = updatable().machine_managers(all).with(|c| {
        c.secrets.retain(|(_, name), _| name != "master-user-data");
    });
    let entry = decide_control_plane(&missing, cp.clone());
    assert_decided(&entry, Action::Skip, Reason::StubSecretMissing);
    // A current image needs no stub check: nothing would change.
    let current = control_plane_machine_set().ami(AMI_US_EAST_1).served();
    let entry = decide_control_plane(&missing, current);
    assert_decided(&entry, Action::UpToDate, Reason::UpToDate);
}

#[test]
fn selected_control_plane_machine_sets_are_patched_at_their_own_provider_spec() {
    let cluster = managing_control_planes(json!({"mode": "All"}));
    let cp = control_plane_machine_set().served();
    let entry = decide_control_plane(&cluster, cp.clone());
    assert_decided(&entry, Action::Update, Reason::BootImageOutdated);
    // The image only: the stub secret's name stays (see the next test).
    assert_eq!(
        patch_json(&entry),
        json!(guarded(
            &format!("{CONTROL_PLANE_SPEC}/ami/id"),
            AMI_PREVIOUS,
            AMI_US_EAST_1
        ))
    );
    assert_eq!(entry.user_data_secret.target, None);
    // The patch applies to the object as served.
    let mut doc = serde_json::to_value(cp.unwrap()).unwrap();
    json_patch::patch(&mut doc, &entry.patch.0).unwrap();
    let again = decide_control_plane(&cluster, Ok(serde_json::from_value(doc).unwrap()));
    assert_decided(&again, Action::UpToDate, Reason::UpToDate);
    // Naming only control planes leaves MachineSets at their platform default (All on AWS).
    let ms = decide(&cluster, machine_set("worker-a").served());
    assert_decided(&ms, Action::Update, Reason::BootImageOutdated);
}

#[test]
fn control_planes_allow_only_all_or_none() {
    let cluster = managing_control_planes(
        json!({"mode": "Partial", "partial": {"machineResourceSelector": {}}}),
    );
    let entry = decide_control_plane(&cluster, control_plane_machine_set().served());
    assert_decided(&entry, Action::Error, Reason::InvalidSelector);
}

#[test]
fn a_control_plane_without_a_machine_template_is_invalid() {
    let cluster = managing_control_planes(json!({"mode": "All"}));
    let cp = control_plane_machine_set().edit(|cp| {
        let template = cp["spec"]["template"].as_object_mut().unwrap();
        template.remove("machines_v1beta1_machine_openshift_io");
    });
    let entry = decide_control_plane(&cluster, cp.served());
    assert_decided(&entry, Action::Error, Reason::InvalidProviderSpec);
}

// ---------------------------------------------------------------------------------------------
// The plan as a whole.

#[test]
fn entries_are_sorted_by_namespace_then_name() {
    let plan = plan_machine_sets(
        &updatable(),
        &[
            machine_set("b").namespace("zz-team").served(),
            machine_set("c").served(),
            machine_set("a").namespace("zz-team").served(),
            Err(Malformed {
                namespace: "a-team".into(),
                name: "z".into(),
                error: "bad".into(),
            }),
            machine_set("a").served(),
        ],
    );
    let order: Vec<(&str, &str)> = plan
        .of(MachineKind::MachineSet)
        .iter()
        .map(|e| (e.namespace.as_str(), e.name.as_str()))
        .collect();
    assert_eq!(
        order,
        [
            ("a-team", "z"),
            (NAMESPACE, "a"),
            (NAMESPACE, "c"),
            ("zz-team", "a"),
            ("zz-team", "b")
        ]
    );
}

#[test]
fn entries_serialize_with_camel_case_fields() {
    let entry = decide(&updatable(), machine_set("worker-a").served());
    let json = serde_json::to_value(&entry).unwrap();
    assert_eq!(json["action"], "Update");
    assert_eq!(json["reason"], "BootImageOutdated");
    assert_eq!(json["bootImage"]["target"], AMI_US_EAST_1);
    assert_eq!(json["userDataSecret"]["current"], STUB);
    assert_eq!(json["userDataSecret"]["target"], Value::Null);
    assert!(json.get("lastChange").is_none());
}

/// The planner runs once per pass: its decisions name the AMIs EC2 is asked about (those of
/// every machine kind that no list names, in a region of AWS's form) and nothing else, so that
/// nothing plans again to learn what to ask.
#[test]
fn decisions_name_the_unknown_amis_of_the_objects_they_judge_and_only_those() {
    use crate::api::{ClusterApiMachineDeployment, ClusterApiMachineSet};
    use crate::facts::Lookup;
    use crate::names::{CLUSTER_API_NAMESPACE, MACHINE_API_NAMESPACE};
    use crate::testkit::cluster_api;
    let template = cluster_api::aws_machine_template(CLUSTER_API_NAMESPACE, "t", "ami-capi");
    let cluster = cluster_snapshot("AWS", "4.21.0", &streams::stream_421())
        .knowing(&["ami-known"])
        .template(template)
        .machine_managers(json!([objects::machine_manager(
            "controlplanemachinesets",
            json!({"mode": "All"})
        )]))
        .build();
    let options = Options::default();
    let planner = super::Planner::new(&cluster, &options);
    let asks = |decided: Decision| match decided.asks {
        Some(Lookup::Ami { region, image_id }) => Some(format!("{region}/{image_id}")),
        Some(Lookup::Template(_)) => panic!("a template asked on AWS"),
        None => None,
    };
    let machine_set = |builder: MachineSetBuilder| {
        let ms: MachineSet = serde_json::from_value(builder.build()).unwrap();
        asks(planner.decide_object(&ms))
    };
    let named = |name, ami| objects::machine_set(MACHINE_API_NAMESPACE, name).ami(ami);
    assert_eq!(
        machine_set(named("a", "ami-unknown")).as_deref(),
        Some("us-east-1/ami-unknown")
    );
    assert_eq!(machine_set(named("b", "ami-known")), None);
    // Never asked: an object that is never updated, and a region that is no AWS region.
    assert_eq!(machine_set(named("c", "ami-opted-out").opted_out()), None);
    let elsewhere = named("d", "ami-elsewhere").region("x@127.0.0.1:8443/");
    assert_eq!(machine_set(elsewhere), None);
    let control_plane: ControlPlaneMachineSet = serde_json::from_value(
        objects::control_plane_machine_set(MACHINE_API_NAMESPACE, "ami-cp"),
    )
    .unwrap();
    assert_eq!(
        asks(planner.decide_object(&control_plane)).as_deref(),
        Some("us-east-1/ami-cp")
    );
    // Cluster API objects' AMIs are read from their templates, as the AWS rule reads them.
    let capi_set: ClusterApiMachineSet =
        serde_json::from_value(cluster_api::machine_set(CLUSTER_API_NAMESPACE, "s", "t")).unwrap();
    let capi_deployment: ClusterApiMachineDeployment = serde_json::from_value(
        cluster_api::machine_deployment(CLUSTER_API_NAMESPACE, "d", "t"),
    )
    .unwrap();
    assert_eq!(
        asks(planner.decide_object(&capi_set)).as_deref(),
        Some("us-east-1/ami-capi")
    );
    let orphan: ClusterApiMachineSet =
        serde_json::from_value(cluster_api::machine_set(CLUSTER_API_NAMESPACE, "o", "gone"))
            .unwrap();
    assert_eq!(
        asks(planner.decide_object(&orphan)),
        None,
        "no such template"
    );
    // A MachineDeployment only with --update-machine-deployments: otherwise it is never updated.
    assert_eq!(asks(planner.decide_object(&capi_deployment)), None);
    let options = Options {
        update_machine_deployments: true,
        ..Options::default()
    };
    let planner = super::Planner::new(&cluster, &options);
    assert_eq!(
        asks(planner.decide_object(&capi_deployment)).as_deref(),
        Some("us-east-1/ami-capi")
    );
}
