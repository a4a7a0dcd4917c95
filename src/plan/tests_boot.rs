//! The planner following a moved MachineSet's Machines: proven, failed, not counted, reverted
//! and held (`plan::boot_evidence`, `plan::boot_follow`).

use std::sync::Arc;

use jiff::{SignedDuration, Timestamp};
use serde_json::{Value, json};

use super::boot_evidence::{BootEvidence, BootState};
use super::history::{Change, HistoryEntry};
use super::{Action, ClusterSnapshot, Decision, MachineResource, Options, plan};
use crate::api::{Machine, MachineSet};
use crate::names::{
    BOOT_FAILURE_HOLD_ANNOTATION, HISTORY_ANNOTATION, MACHINE_API_NAMESPACE,
    REVERT_FAILED_BOOT_IMAGES_ANNOTATION,
};
use crate::reason::Reason;
use crate::testkit::objects;
use crate::testkit::provider_specs;
use crate::testkit::snapshot::{ClusterChanges, cluster_snapshot};
use crate::testkit::streams::{AMI_420_US_EAST_1, AMI_421_US_EAST_1, stream_421_all_platforms};

const NS: &str = MACHINE_API_NAMESPACE;
/// When `worker-a` was moved from the 4.20 AMI to the golden 4.21 one.
const MOVED_AT: &str = "2026-03-02T10:00:00Z";

fn at(minutes_after_the_move: i64) -> Timestamp {
    MOVED_AT.parse::<Timestamp>().unwrap() + SignedDuration::from_mins(minutes_after_the_move)
}

fn cluster() -> ClusterSnapshot {
    cluster_snapshot("AWS", "4.21.0", &stream_421_all_platforms().to_string())
        .upgraded("4.20.5", "4.21.0", "Completed")
        .stub_secret(NS, "worker-user-data", "3.2.0")
        // The 4.20 AMIs, remembered as CoreOS AMIs when that stream was golden.
        .knowing(&objects::AMIS_420)
        .build()
}

fn move_entry() -> HistoryEntry {
    HistoryEntry {
        time: MOVED_AT.into(),
        release: Some("4.21.0".into()),
        stream: "rhcos-4.21".into(),
        boot_image: Some(Change {
            from: json!(AMI_420_US_EAST_1),
            to: json!(AMI_421_US_EAST_1),
        }),
        ..Default::default()
    }
}

/// `worker-a` on the golden AMI, with `history` recorded.
fn moved(history: &[HistoryEntry]) -> objects::MachineSetBuilder {
    let history = serde_json::to_string(history).unwrap();
    objects::machine_set(NS, "worker-a")
        .ami(AMI_421_US_EAST_1)
        .annotate(HISTORY_ANNOTATION, &history)
}

/// A Machine `worker-a` created `minutes` after the move, on `ami`, with `status`.
fn machine(name: &str, minutes: i64, ami: &str, status: Value) -> Arc<Machine> {
    machine_edited(name, minutes, ami, status, |_| {})
}

/// [`machine`], then edited.
fn machine_edited(
    name: &str,
    minutes: i64,
    ami: &str,
    status: Value,
    edit: impl FnOnce(&mut Value),
) -> Arc<Machine> {
    let created = at(minutes);
    let labels = &moved(&[]).build()["spec"]["template"]["metadata"]["labels"];
    let mut value = json!({
        "apiVersion": "machine.openshift.io/v1beta1", "kind": "Machine",
        "metadata": {
            "name": name, "namespace": NS, "creationTimestamp": created.to_string(),
            "labels": labels,
            "ownerReferences": [{"apiVersion": "machine.openshift.io/v1beta1", "kind": "MachineSet",
                                 "name": "worker-a", "uid": "", "controller": true}]
        },
        "spec": {"providerSpec": {"value": provider_specs::aws(ami, "us-east-1", "worker-user-data", "worker")}},
        "status": status,
    });
    edit(&mut value);
    Arc::new(serde_json::from_value(value).unwrap())
}

fn running_on(node: &str) -> Value {
    json!({"phase": "Running", "nodeRef": {"kind": "Node", "name": node}})
}

fn failed(reason: &str, message: &str) -> Value {
    json!({"phase": "Failed", "errorReason": reason, "errorMessage": message})
}

/// What the AWS provider says of an AMI EC2 does not know: it describes the AMI before the
/// launch.
const AMI_NOT_FOUND: &str = "error getting blockDeviceMappings: error describing AMI: \
                             InvalidAMIID.NotFound: The image id '[ami-0123]' does not exist\n\t\
                             status code: 400, request id: 5f8e";
const QUOTA: &str = "error launching instance: You have requested more vCPU capacity than your \
                     current vCPU limit of 32 allows for the instance bucket that the specified \
                     instance type belongs to";

fn decide_at(
    cluster: &ClusterSnapshot,
    ms: objects::MachineSetBuilder,
    now: Timestamp,
) -> Decision {
    decide_with(
        cluster,
        ms,
        Options {
            now,
            ..Options::default()
        },
    )
}

fn decide_with(
    cluster: &ClusterSnapshot,
    ms: objects::MachineSetBuilder,
    options: Options,
) -> Decision {
    let ms: MachineSet = ms.served().unwrap();
    let mut plan = plan(cluster, &[ms.into()], &options);
    plan.decisions.remove(0)
}

fn evidence(d: &Decision) -> BootState {
    d.boot_evidence
        .as_ref()
        .expect("the move is followed")
        .state
}

/// The MachineSet after the decision's patch, as the API server would store it.
fn patched(ms: objects::MachineSetBuilder, d: &Decision) -> objects::MachineSetBuilder {
    let mut value = ms.build();
    value["metadata"]["resourceVersion"] = json!("73519");
    json_patch::patch(&mut value, &d.patch)
        .expect("the patch applies to the object it was made for");
    objects::machine_set(NS, "worker-a").edit(|v| *v = value)
}

fn history_of(ms: objects::MachineSetBuilder) -> Vec<Value> {
    objects::history_of(&ms.build())
}

#[test]
fn a_moved_machine_set_without_machines_yet_is_unproven_and_nothing_is_written() {
    let d = decide_at(&cluster(), moved(&[move_entry()]), at(30));
    assert_eq!((d.action, d.reason), (Action::UpToDate, Reason::UpToDate));
    assert_eq!(evidence(&d), BootState::Unproven);
    assert!(d.patch.0.is_empty(), "{:?}", d.patch);
}

#[test]
fn a_machine_whose_node_is_ready_proves_the_image_once_and_for_all() {
    let mut cluster = cluster();
    cluster.boots.machines = vec![machine(
        "worker-a-x1",
        2,
        AMI_421_US_EAST_1,
        running_on("ip-10-0-1-5"),
    )];
    cluster.boots.nodes.insert("ip-10-0-1-5".into(), true);
    let d = decide_at(&cluster, moved(&[move_entry()]), at(9));
    let proven = d.boot_evidence.clone().unwrap();
    assert_eq!(
        (proven.state, proven.machine.as_deref()),
        (BootState::Proven, Some("worker-a-x1"))
    );
    assert_eq!(d.action, Action::UpToDate);
    // Settled in the move's own history entry, and nothing else changed.
    let after = patched(moved(&[move_entry()]), &d);
    let history = history_of(after.clone());
    assert_eq!(history.len(), 1);
    assert_eq!(history[0]["bootEvidence"]["state"], "Proven");
    assert_eq!(history[0]["bootEvidence"]["machine"], "worker-a-x1");
    assert_eq!(objects::ami_of(&after.clone().build()), AMI_421_US_EAST_1);
    // Settled: later Machines (even failing ones) change nothing, and nothing more is written.
    cluster.boots.machines.push(machine(
        "worker-a-x2",
        40,
        AMI_421_US_EAST_1,
        failed("InvalidConfiguration", AMI_NOT_FOUND),
    ));
    cluster.boots.nodes.clear();
    let again = decide_at(&cluster, after, at(60));
    assert_eq!(evidence(&again), BootState::Proven);
    assert!(again.patch.0.is_empty());
}

#[test]
fn a_node_that_is_not_ready_proves_nothing() {
    let mut cluster = cluster();
    cluster.boots.machines = vec![machine(
        "worker-a-x1",
        2,
        AMI_421_US_EAST_1,
        running_on("ip-10-0-1-5"),
    )];
    cluster.boots.nodes.insert("ip-10-0-1-5".into(), false);
    let d = decide_at(&cluster, moved(&[move_entry()]), at(30));
    assert_eq!(evidence(&d), BootState::Unproven);
}

#[test]
fn machines_from_before_the_move_or_on_another_image_are_not_evidence() {
    let mut cluster = cluster();
    let image_error = failed("InvalidConfiguration", AMI_NOT_FOUND);
    cluster.boots.machines = vec![
        // Created a minute before the move, on the old image.
        machine("worker-a-old", -1, AMI_420_US_EAST_1, image_error.clone()),
        // After the move, but on the old image (made from a template read before it).
        machine("worker-a-stale", 1, AMI_420_US_EAST_1, image_error),
    ];
    let d = decide_at(&cluster, moved(&[move_entry()]), at(30));
    assert_eq!(evidence(&d), BootState::Unproven);
    assert!(d.patch.0.is_empty());
}

#[test]
fn a_quota_failure_is_not_counted_against_the_image() {
    let mut cluster = cluster();
    cluster.boots.machines = vec![machine(
        "worker-a-x1",
        1,
        AMI_421_US_EAST_1,
        failed("InvalidConfiguration", QUOTA),
    )];
    let d = decide_at(&cluster, moved(&[move_entry()]), at(30));
    assert_eq!(evidence(&d), BootState::Unproven);
    assert!(d.patch.0.is_empty());
}

#[test]
fn an_image_error_fails_the_image_and_without_the_opt_in_it_is_reported_not_reverted() {
    let cluster = failing_cluster();
    let d = decide_at(&cluster, moved(&[move_entry()]), at(5));
    let failure = d.boot_evidence.clone().unwrap();
    assert_eq!(
        (failure.state, failure.machine.as_deref()),
        (BootState::Failed, Some("worker-a-x1"))
    );
    assert!(
        failure
            .reason
            .as_deref()
            .unwrap()
            .contains("InvalidAMIID.NotFound"),
        "{failure:?}"
    );
    assert_eq!(d.action, Action::UpToDate);
    assert!(
        d.message.contains("not reverted: automatic revert is off"),
        "{}",
        d.message
    );
    assert!(!d.boot_failure_on_record(), "news: announced");
    let after = patched(moved(&[move_entry()]), &d);
    assert_eq!(
        objects::ami_of(&after.clone().build()),
        AMI_421_US_EAST_1,
        "the image stays"
    );
    assert_eq!(
        history_of(after.clone())[0]["bootEvidence"]["state"],
        "Failed"
    );
    // Planned again, as after a restart: still failed, and on record, so not announced again.
    let again = decide_at(&cluster, after, at(6));
    assert_eq!(evidence(&again), BootState::Failed);
    assert!(again.boot_failure_on_record());
    assert!(again.patch.0.is_empty(), "settled once");
}

#[test]
fn a_node_that_never_joins_fails_the_image_at_the_limit() {
    let mut cluster = cluster();
    let provisioned = json!({"phase": "Provisioned"});
    cluster.boots.machines = vec![machine("worker-a-x1", 1, AMI_421_US_EAST_1, provisioned)];
    let waiting = decide_at(&cluster, moved(&[move_entry()]), at(15));
    let unproven = waiting.boot_evidence.clone().unwrap();
    assert_eq!(unproven.state, BootState::Unproven);
    assert_eq!(
        unproven.look_again_at,
        Some(at(26)),
        "looked at again at the limit, allowing for a controller clock 5 minutes ahead"
    );
    let provisioned = json!({"phase": "Provisioned"});
    cluster
        .boots
        .machines
        .push(machine("worker-a-x2", 2, AMI_421_US_EAST_1, provisioned));
    let d = decide_at(&cluster, moved(&[move_entry()]), at(27));
    let failure = d.boot_evidence.unwrap();
    assert_eq!(failure.state, BootState::Failed);
    assert!(
        failure
            .reason
            .unwrap()
            .contains("no Node joined within 20m on 2 Machines (worker-a-x1, worker-a-x2)")
    );
}

/// Issue 46: a stalled CSR approver, an unreachable machine-config server or a slow first pull
/// keeps a kubelet out as surely as a bad image; one Machine settled it.
#[test]
fn one_machine_whose_node_never_joins_is_no_verdict() {
    let stuck = |name: &str| machine(name, 1, AMI_421_US_EAST_1, json!({"phase": "Provisioned"}));
    let mut cluster = cluster();
    cluster.boots.machines = vec![stuck("worker-a-x1")];
    let d = decide_with(
        &cluster,
        moved(&[move_entry()]),
        Options {
            now: at(30),
            ..reverting()
        },
    );
    let unproven = d.boot_evidence.clone().unwrap();
    assert_eq!(unproven.state, BootState::Unproven);
    assert!(d.patch.0.is_empty());
    assert!(
        unproven.describe().contains("alone is no verdict"),
        "says why: {}",
        unproven.describe()
    );
    // A second one corroborates, unless a Machine of the image is Ready elsewhere in the
    // cluster (here one of another MachineSet).
    cluster.boots.machines.push(stuck("worker-a-x2"));
    let elsewhere = machine_edited("infra-x1", -600, AMI_421_US_EAST_1, running_on("n1"), |m| {
        m["metadata"]["ownerReferences"][0]["name"] = json!("infra")
    });
    cluster.boots.nodes.insert("n1".into(), true);
    let mut with_elsewhere = cluster.clone();
    with_elsewhere.boots.machines.push(elsewhere);
    let d = decide_with(
        &with_elsewhere,
        moved(&[move_entry()]),
        Options {
            now: at(30),
            ..reverting()
        },
    );
    assert_eq!(evidence(&d), BootState::Unproven, "{}", d.message);
    let d = decide_with(
        &cluster,
        moved(&[move_entry()]),
        Options {
            now: at(30),
            ..reverting()
        },
    );
    assert_eq!(d.reason, Reason::BootImageReverted, "{}", d.message);
}

fn reverting() -> Options {
    Options {
        now: at(5),
        revert_failed_boot_images: true,
        ..Options::default()
    }
}

fn failing_cluster() -> ClusterSnapshot {
    let mut cluster = cluster();
    cluster.boots.machines = vec![machine(
        "worker-a-x1",
        1,
        AMI_421_US_EAST_1,
        failed("InvalidConfiguration", AMI_NOT_FOUND),
    )];
    cluster
}

#[test]
fn with_the_opt_in_a_failed_image_is_reverted_and_the_machine_set_held_off_it() {
    let cluster = failing_cluster();
    let d = decide_with(&cluster, moved(&[move_entry()]), reverting());
    assert_eq!(
        (d.action, d.reason),
        (Action::Update, Reason::BootImageReverted)
    );
    let after = patched(moved(&[move_entry()]), &d);
    let object = after.clone().build();
    assert_eq!(
        objects::ami_of(&object),
        AMI_420_US_EAST_1,
        "the previous image is back"
    );
    let history = history_of(after.clone());
    assert_eq!(history.len(), 2);
    assert_eq!(history[0]["bootEvidence"]["state"], "Failed");
    assert_eq!(history[1]["bootImage"]["to"], json!(AMI_420_US_EAST_1));
    assert_eq!(history[1]["revertedAfter"]["machine"], "worker-a-x1");
    let hold = &object["metadata"]["annotations"][BOOT_FAILURE_HOLD_ANNOTATION];
    let hold: Value = serde_json::from_str(hold.as_str().unwrap()).unwrap();
    assert_eq!(hold["image"], json!(AMI_421_US_EAST_1));
    // Planned again (as the watch brings it back): held, nothing written, still failed.
    let mut held = decide_with(&cluster, after, reverting());
    assert_eq!(
        (held.action, held.reason),
        (Action::Skip, Reason::BootImageHeld)
    );
    // What the controller reports as soon as the patch is in is what the next plan decides.
    held.uid = d.uid.clone();
    assert_eq!(d.clone().applied(), held);
    assert!(held.patch.0.is_empty());
    assert_eq!(evidence(&held), BootState::Failed);
    assert!(!d.boot_failure_on_record() && held.boot_failure_on_record());
    assert!(
        held.message.contains(BOOT_FAILURE_HOLD_ANNOTATION),
        "{}",
        held.message
    );
}

#[test]
fn the_machine_configuration_annotation_overrides_the_flag_both_ways() {
    for (annotated, flag, reverts) in [("true", false, true), ("false", true, false)] {
        let mut cluster = failing_cluster();
        let mc = cluster.machine_configuration.as_mut().unwrap();
        (mc.metadata.annotations.get_or_insert_default()).insert(
            REVERT_FAILED_BOOT_IMAGES_ANNOTATION.into(),
            annotated.into(),
        );
        let options = Options {
            revert_failed_boot_images: flag,
            ..reverting()
        };
        let d = decide_with(&cluster, moved(&[move_entry()]), options);
        assert_eq!(
            d.reason == Reason::BootImageReverted,
            reverts,
            "{annotated}: {}",
            d.message
        );
    }
}

#[test]
fn a_new_golden_image_ends_the_hold() {
    // Held off an image that is no longer the golden one.
    let hold = json!({"image": "ami-0f00000000000000f", "failure": {"state": "Failed"}});
    let ms = objects::machine_set(NS, "worker-a")
        .ami(AMI_420_US_EAST_1)
        .annotate(BOOT_FAILURE_HOLD_ANNOTATION, &hold.to_string());
    let d = decide_at(&cluster(), ms.clone(), at(5));
    assert_eq!(
        (d.action, d.reason),
        (Action::Update, Reason::BootImageOutdated),
        "{}",
        d.message
    );
    let after = patched(ms, &d).build();
    assert_eq!(objects::ami_of(&after), AMI_421_US_EAST_1);
    assert!(
        after["metadata"]["annotations"]
            .get(BOOT_FAILURE_HOLD_ANNOTATION)
            .is_none()
    );
}

#[test]
fn a_hold_on_the_golden_image_keeps_the_machine_set_where_it_is() {
    let failure = BootEvidence {
        state: BootState::Failed,
        machine: Some("worker-a-x1".into()),
        time: Some(MOVED_AT.into()),
        reason: Some("no Node joined".into()),
        look_again_at: None,
    };
    let hold = json!({"image": AMI_421_US_EAST_1, "failure": failure});
    let ms = objects::machine_set(NS, "worker-a")
        .ami(AMI_420_US_EAST_1)
        .annotate(BOOT_FAILURE_HOLD_ANNOTATION, &hold.to_string());
    let d = decide_at(&cluster(), ms, at(5));
    assert_eq!((d.action, d.reason), (Action::Skip, Reason::BootImageHeld));
    assert!(d.patch.0.is_empty());
    assert_eq!(d.boot_evidence, Some(failure));
}

#[test]
fn an_image_reverted_once_is_not_reverted_again() {
    // Moved, failed, reverted; the hold was removed by an administrator; moved again.
    let reverted = HistoryEntry {
        time: "2026-03-01T10:00:00Z".into(),
        boot_image: Some(Change {
            from: json!(AMI_421_US_EAST_1),
            to: json!(AMI_420_US_EAST_1),
        }),
        reverted_after: Some(BootEvidence {
            state: BootState::Failed,
            machine: Some("worker-a-old".into()),
            time: None,
            reason: None,
            look_again_at: None,
        }),
        ..move_entry()
    };
    let history = [move_entry(), reverted, move_entry()];
    let cluster = failing_cluster();
    let d = decide_with(&cluster, moved(&history), reverting());
    assert_eq!(d.action, Action::UpToDate);
    assert_eq!(evidence(&d), BootState::Failed);
    assert!(
        d.message.contains("reverted from this image once already"),
        "{}",
        d.message
    );
    let after = patched(moved(&history), &d);
    assert_eq!(objects::ami_of(&after.build()), AMI_421_US_EAST_1);
}

#[test]
fn no_evidence_is_written_while_a_cluster_wide_hold_holds_writes() {
    let cluster = failing_cluster();
    let options = Options {
        report_only: true,
        ..reverting()
    };
    let d = decide_with(&cluster, moved(&[move_entry()]), options);
    assert_eq!(evidence(&d), BootState::Failed, "still reported");
    assert!(d.patch.0.is_empty());
}

/// Messages as the Machine API providers write them (see `boot_evidence::IMAGE_FAILURES` for
/// where), the cloud's own words inside.
#[test]
fn image_errors_are_told_from_quota_capacity_and_credentials() {
    use super::boot_evidence::image_failure;
    let image = [
        AMI_NOT_FOUND,
        "error launching instance: The image id '[ami-0123]' does not exist",
        "error launching instance: googleapi: Error 404: The resource \
         'projects/rhcos-cloud/global/images/rhcos-9-6-x' was not found, notFound",
        "error launching instance: googleapi: Error 400: Invalid value for field \
         'resource.disks[0].initializeParams.sourceImage': 'x'. The referenced image resource \
         cannot be found., invalid",
        "failed to reconcile machine \"w\": failed to create vm w: failed to create VM: cannot \
         create vm: PUT https://management.azure.com/x\nRESPONSE 404: 404 Not Found\nERROR CODE: \
         PlatformImageNotFound\n",
        "template not found, specify valid value",
        "multiple templates found, specify one in config",
    ];
    for message in image {
        assert!(
            image_failure("InvalidConfiguration", message).is_some(),
            "{message}"
        );
    }
    let not_image = [
        ("InvalidConfiguration", QUOTA),
        (
            "InvalidConfiguration",
            "error launching instance: Your requested instance type \
          (m6i.xlarge) is not supported in your requested Availability Zone (us-east-1e)",
        ),
        (
            "InvalidConfiguration",
            "error launching instance: You are not authorized to perform \
          this operation. Not authorized for images: [ami-0123]",
        ),
        (
            "InvalidConfiguration",
            "error launching instance: googleapi: Error 403: Quota 'CPUS' \
          exceeded. Limit: 24.0 in region us-central1., quotaExceeded",
        ),
        (
            "InvalidConfiguration",
            "failed to reconcile machine \"w\": ... ERROR CODE: \
          SkuNotAvailable\n",
        ),
        (
            "InvalidConfiguration",
            "failed to reconcile machine \"w\": ... ERROR CODE: \
          OperationNotAllowed\n Operation could not be completed as it results in exceeding \
          approved standardDSv3Family Cores quota",
        ),
        // Azure's asynchronous failures carry no cause.
        (
            "CreateError",
            "vm has unexpected 'Failed' provisioning state",
        ),
        // The instance disappeared after it was created.
        ("", "can't find created instance"),
        // Same words as an image error, but not a Failed Machine's reason.
        ("CreateError", AMI_NOT_FOUND),
    ];
    for (reason, message) in not_image {
        assert_eq!(image_failure(reason, message), None, "{reason}: {message}");
    }
}

/// Issue 46: a user who may only create Machines had a good image reverted and held, by
/// writing the AWS provider's words into Machines that name the MachineSet as an owner.
#[test]
fn only_machines_the_machine_set_controller_made_are_evidence() {
    let image_error = || failed("InvalidConfiguration", AMI_NOT_FOUND);
    let forged = [
        machine_edited("not-controlled", 1, AMI_421_US_EAST_1, image_error(), |m| {
            m["metadata"]["ownerReferences"][0]["controller"] = json!(false)
        }),
        machine_edited(
            "outside-the-selector",
            1,
            AMI_421_US_EAST_1,
            image_error(),
            |m| {
                m["metadata"]["labels"] =
                    json!({"machine.openshift.io/cluster-api-machineset": "other"})
            },
        ),
        machine_edited("another-region", 1, AMI_421_US_EAST_1, image_error(), |m| {
            m["spec"]["providerSpec"]["value"]["placement"]["region"] = json!("eu-west-1")
        }),
        machine_edited("another-subnet", 1, AMI_421_US_EAST_1, image_error(), |m| {
            m["spec"]["providerSpec"]["value"]["subnet"] = json!({"id": "subnet-0bad"})
        }),
        machine_edited(
            "a-cluster-api-owner",
            1,
            AMI_421_US_EAST_1,
            image_error(),
            |m| {
                m["metadata"]["ownerReferences"][0]["apiVersion"] =
                    json!("cluster.x-k8s.io/v1beta2")
            },
        ),
    ];
    for machine in forged {
        let mut cluster = cluster();
        let name = machine.metadata.name.clone().unwrap();
        cluster.boots.machines = vec![machine];
        let d = decide_with(&cluster, moved(&[move_entry()]), reverting());
        assert_eq!(evidence(&d), BootState::Unproven, "{name}: {}", d.message);
        assert!(d.patch.0.is_empty(), "{name}");
    }
    // What the Machine API's defaulting webhook fills in where the template leaves it empty
    // does not make a Machine a stranger.
    let mut cluster = cluster();
    cluster.boots.machines = vec![machine_edited(
        "worker-a-x1",
        1,
        AMI_421_US_EAST_1,
        image_error(),
        |m| m["spec"]["providerSpec"]["value"]["tenancy"] = json!("default"),
    )];
    let d = decide_with(&cluster, moved(&[move_entry()]), reverting());
    assert_eq!(d.reason, Reason::BootImageReverted, "{}", d.message);
}

/// Issue 46: a 140 kB `errorMessage` made the revert patch too large, and a crafted one wrote
/// fake lines and escape bytes into the text log.
#[test]
fn a_machine_error_message_is_kept_bounded_and_escaped() {
    let crafted = format!(
        "{AMI_NOT_FOUND}\n2026-03-02T10:00:00Z  INFO boot_image_controller: all is well\u{1b}[2J{}",
        "x".repeat(140_000)
    );
    let mut cluster = cluster();
    cluster.boots.machines = vec![machine(
        "worker-a-x1",
        1,
        AMI_421_US_EAST_1,
        failed("InvalidConfiguration", &crafted),
    )];
    let d = decide_with(&cluster, moved(&[move_entry()]), reverting());
    assert_eq!(d.reason, Reason::BootImageReverted);
    let reason = d.boot_evidence.clone().unwrap().reason.unwrap();
    assert!(reason.len() < 1_200, "{} bytes", reason.len());
    assert!(
        reason.contains("\\u{a}2026-03-02T10:00:00Z  INFO"),
        "{reason}"
    );
    for text in [&reason, &d.message] {
        assert!(!text.chars().any(char::is_control), "{text:?}");
    }
    let patch = serde_json::to_string(&d.patch).unwrap();
    assert!(patch.len() < 8_000, "a patch of {} bytes", patch.len());
}

/// The watches keep a MachineSet's template and its Machines trimmed to the fields the rules
/// read: what the rest of the provider spec held is still compared.
#[test]
fn trimmed_as_the_watches_keep_them_machines_are_still_told_apart() {
    let trimmed = |edit: fn(&mut Value)| {
        let mut machine = Arc::unwrap_or_clone(machine_edited(
            "worker-a-x1",
            1,
            AMI_421_US_EAST_1,
            failed("InvalidConfiguration", AMI_NOT_FOUND),
            edit,
        ));
        machine.spec.keep_only_what_the_rules_read();
        Arc::new(machine)
    };
    let mut stored: MachineSet = moved(&[move_entry()]).served().unwrap();
    crate::machine_kind::MachineObject::keep_only_what_the_planner_reads(&mut stored);
    for (machine, reverted) in [
        (trimmed(|_| {}), true),
        (
            trimmed(|m| {
                m["spec"]["providerSpec"]["value"]["subnet"] = json!({"id": "subnet-0bad"})
            }),
            false,
        ),
    ] {
        let mut cluster = cluster();
        cluster.boots.machines = vec![machine];
        let stored = MachineResource::from(stored.clone());
        let d = plan(&cluster, &[stored], &reverting()).decisions[0].clone();
        assert_eq!(
            d.reason == Reason::BootImageReverted,
            reverted,
            "{}",
            d.message
        );
    }
}

/// Issue 46: the move is dated by the controller's clock and a Machine's creation by the API
/// server's; a controller clock ahead by minutes failed a good image before its Node joined.
#[test]
fn a_controller_clock_ahead_by_minutes_does_not_fail_a_good_image() {
    let mut cluster = cluster();
    let provisioned = json!({"phase": "Provisioned"});
    cluster.boots.machines = vec![machine("worker-a-x1", 1, AMI_421_US_EAST_1, provisioned)];
    // 21 minutes after the Machine's creation by a controller clock 4 minutes ahead: 17 by the
    // API server's.
    let d = decide_at(&cluster, moved(&[move_entry()]), at(22));
    assert_eq!(evidence(&d), BootState::Unproven);
    assert!(d.patch.0.is_empty());
    // The Node joins at 19 minutes.
    cluster.boots.machines = vec![machine(
        "worker-a-x1",
        1,
        AMI_421_US_EAST_1,
        running_on("ip-10-0-1-5"),
    )];
    cluster.boots.nodes.insert("ip-10-0-1-5".into(), true);
    let d = decide_at(&cluster, moved(&[move_entry()]), at(24));
    assert_eq!(evidence(&d), BootState::Proven);
}

/// A deleted Machine (as a MachineHealthCheck deletes one whose Node does not come) is judged
/// by its creation and deletion times, both the API server's: no allowance for skew needed.
#[test]
fn a_machine_deleted_without_a_node_past_the_limit_is_judged_by_the_api_servers_times() {
    let deleted = |minutes: i64| {
        machine_edited(
            "worker-a-x1",
            1,
            AMI_421_US_EAST_1,
            json!({"phase": "Deleting"}),
            |m| {
                m["spec"]["providerID"] = json!("aws:///us-east-1a/i-0123");
                m["metadata"]["deletionTimestamp"] = json!(at(minutes).to_string());
                m["metadata"]["finalizers"] = json!(["machine.machine.openshift.io"]);
            },
        )
    };
    let mut cluster = cluster();
    cluster.boots.machines = vec![deleted(11)];
    let d = decide_at(&cluster, moved(&[move_entry()]), at(22));
    assert_eq!(
        evidence(&d),
        BootState::Unproven,
        "deleted before the limit"
    );
    cluster.boots.machines = vec![deleted(21), deleted(21)];
    Arc::make_mut(&mut cluster.boots.machines[1]).metadata.name = Some("worker-a-x2".into());
    let d = decide_at(&cluster, moved(&[move_entry()]), at(22));
    assert_eq!(evidence(&d), BootState::Failed, "{}", d.message);
}

/// Issue 46: a MachineHealthCheck without `nodeStartupTimeout` deletes a Machine with no Node
/// after 10 minutes, before the 20-minute join limit, so the verdict was never reached.
#[test]
fn a_machine_a_health_check_deletes_for_not_starting_is_evidence() {
    let deleted_at_11 = |name: &str| {
        machine_edited(
            name,
            1,
            AMI_421_US_EAST_1,
            json!({"phase": "Deleting"}),
            |m| {
                m["spec"]["providerID"] = json!(format!("aws:///us-east-1a/i-{name}"));
                m["metadata"]["deletionTimestamp"] = json!(at(11).to_string());
            },
        )
    };
    let check = |spec: Value, annotations: Value| {
        let value = json!({
            "apiVersion": "machine.openshift.io/v1beta1", "kind": "MachineHealthCheck",
            "metadata": {"name": "workers", "namespace": NS, "annotations": annotations},
            "spec": spec,
        });
        Arc::new(serde_json::from_value::<crate::api::MachineHealthCheck>(value).unwrap())
    };
    let workers =
        json!({"matchLabels": {"machine.openshift.io/cluster-api-machine-role": "worker"}});
    let mut cluster = cluster();
    cluster.boots.machines = vec![deleted_at_11("worker-a-x1"), deleted_at_11("worker-a-x2")];
    let judged = |cluster: &ClusterSnapshot| {
        decide_at(cluster, moved(&[move_entry()]), at(12))
            .boot_evidence
            .unwrap()
    };
    assert_eq!(
        judged(&cluster).state,
        BootState::Unproven,
        "without a check: before 20m"
    );
    for (spec, annotations, state) in [
        (json!({"selector": workers}), json!({}), BootState::Failed),
        (
            json!({"selector": workers, "nodeStartupTimeout": "10m0s"}),
            json!({}),
            BootState::Failed,
        ),
        (
            json!({"selector": workers, "nodeStartupTimeout": "0"}),
            json!({}),
            BootState::Unproven,
        ),
        (
            json!({"selector": workers, "nodeStartupTimeout": "15m"}),
            json!({}),
            BootState::Unproven,
        ),
        (
            json!({"selector": workers, "remediationTemplate": {"kind": "Metal3RemediationTemplate", "name": "x"}}),
            json!({}),
            BootState::Unproven,
        ),
        (
            json!({"selector": workers}),
            json!({"cluster.x-k8s.io/paused": ""}),
            BootState::Unproven,
        ),
        (
            json!({"selector": {"matchLabels": {"role": "infra"}}}),
            json!({}),
            BootState::Unproven,
        ),
    ] {
        cluster.boots.health_checks = vec![check(spec.clone(), annotations)];
        let evidence = judged(&cluster);
        assert_eq!(evidence.state, state, "{spec}: {}", evidence.describe());
        if state == BootState::Failed {
            let reason = evidence.reason.unwrap();
            assert!(
                reason.contains("within 10m (the nodeStartupTimeout of MachineHealthCheck workers"),
                "{reason}"
            );
        }
    }
}
