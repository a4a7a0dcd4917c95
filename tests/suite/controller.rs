//! The controller against a real kube-apiserver: each test builds a simulated OpenShift-on-AWS
//! cluster in its own namespace and runs `boot-image-controller run` as a process.
//!
//! Every assertion is something an administrator could check with `oc`: MachineSet contents and
//! resourceVersions, the conditions on the MachineConfiguration, Events, the Lease and
//! `/metrics`. "Nothing was written" is asserted only after the controller has visibly handled
//! the change in question (its status names it), never after a fixed sleep.

use crate::support;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::fixtures::*;
use support::waits::*;
use support::{ConditionLog, ControllerProcess, TestEnv, eventually, resource_version, sample};

const MACHINE_SET: (&str, &str) = ("machine.openshift.io/v1beta1", "MachineSet");
const OPT_OUT: &str = "boot-image-controller.io/boot-image-updates";
const PAUSE: &str = "boot-image-controller.io/boot-image-updates-paused";
const HOT_LOOP: &str = "boot-image-controller.io/hot-loop";
const FULL_PASSES: &str = r#"boot_image_controller_reconcile_duration_seconds_count{scope="all"}"#;
const LEADER: &str = "boot_image_controller_leader";

/// The MachineSets named, with the resourceVersions they have now.
fn versions_of(all: &BTreeMap<String, String>, names: &[&str]) -> BTreeMap<String, String> {
    names
        .iter()
        .map(|n| (n.to_string(), all.get(*n).cloned().unwrap_or_default()))
        .collect()
}

/// Another actor sets the MachineSet's AMI from `from` back to `to` (failing if it changed).
async fn set_ami(env: &TestEnv, name: &str, from: &str, to: &str) {
    env.json_patch(
        MACHINE_SET,
        name,
        json!([
            {"op": "test", "path": "/spec/template/spec/providerSpec/value/ami/id", "value": from},
            {"op": "replace", "path": "/spec/template/spec/providerSpec/value/ami/id", "value": to},
        ]),
    )
    .await
    .unwrap_or_else(|e| panic!("set the AMI of {name} to {to}: {e}"));
}

/// A MachineSet `worker-a` on 4.20 under a running controller, before and after the cluster
/// upgrades to 4.21: the object as first applied, and as the controller left it.
struct Upgraded {
    env: TestEnv,
    controller: ControllerProcess,
    before: Value,
    after: Value,
}

async fn upgraded_cluster(name: &str) -> Upgraded {
    let env = TestEnv::new(name).await;
    env.aws_cluster("4.20.0", &stream_420(), None).await;
    env.apply(machine_set(&env.ns, "worker-a").build()).await;
    let before = env.machine_set("worker-a").await;
    let controller = env.controller(&[]);
    controller.wait_ready().await;
    wait_for_golden(&env, &[&controller], "worker-a", AMI_420_US_EAST_1).await;
    // The upgrade completes and the MCO publishes 4.21's boot images.
    env.upgrade("4.21.0", &stream_421()).await;
    let after = wait_for_ami(&env, &[&controller], "worker-a", AMI_421_US_EAST_1).await;
    Upgraded {
        env,
        controller,
        before,
        after,
    }
}

/// A current image needs nothing of its stub, even a spec-2 one: nothing is written, neither
/// the MachineSet nor its stub (the MCO too checks the stub only when the image moves).
#[tokio::test]
async fn on_a_current_image_nothing_is_written_not_even_the_stub_secret() {
    let env = TestEnv::new("upgrade-stub").await;
    env.aws_cluster("4.20.0", &stream_420(), None).await;
    env.apply(machine_set(&env.ns, "worker-a").build()).await;
    let before = env.machine_set("worker-a").await;
    let probe = stub_secret(&env.ns, "worker-user-data", "2.2.0");
    let stub_before = env.get_in(&probe).await.map(|s| s.data["data"].clone());
    let controller = env.controller(&[]);
    controller.wait_ready().await;
    let c = [&controller];
    wait_for_condition(&env, &c, PROGRESSING, "False", Some("BootImagesCurrent")).await;
    let after = env.machine_set("worker-a").await;
    assert_eq!(resource_version(&after), resource_version(&before));
    assert_eq!(secret_of(&after), "worker-user-data");
    assert_eq!(
        env.get_in(&probe).await.map(|s| s.data["data"].clone()),
        stub_before,
        "the spec-2 stub is left alone"
    );
}

#[tokio::test]
async fn an_upgrade_changes_the_image_and_nothing_else_in_the_provider_spec() {
    let u = upgraded_cluster("upgrade").await;
    // Everything else in providerSpec is untouched, byte for byte (nulls included).
    let strip = |ms: &Value| {
        let mut spec = ms
            .pointer("/spec/template/spec/providerSpec/value")
            .unwrap()
            .clone();
        spec["ami"] = json!(null);
        spec["userDataSecret"] = json!(null);
        spec
    };
    assert_eq!(strip(&u.before), strip(&u.after));
}

#[tokio::test]
async fn an_upgrade_is_recorded_on_the_machine_set() {
    let u = upgraded_cluster("upgrade-history").await;
    let history = u.after["metadata"]["annotations"]["boot-image-controller.io/history"]
        .as_str()
        .expect("history annotation");
    assert!(
        history.contains(AMI_420_US_EAST_1) && history.contains("4.21.0"),
        "{history}"
    );
    assert!(
        !history.contains("userDataSecret"),
        "no stub secret renamed: {history}"
    );
}

#[tokio::test]
async fn an_upgrade_ends_with_the_status_current_and_an_event_naming_the_new_image() {
    let u = upgraded_cluster("upgrade-status").await;
    let (env, c) = (&u.env, [&u.controller]);
    let progressing =
        wait_for_condition(env, &c, PROGRESSING, "False", Some("BootImagesCurrent")).await;
    assert!(
        progressing["message"]
            .as_str()
            .unwrap()
            .contains("1 up to date"),
        "{progressing}"
    );
    wait_for_condition(env, &c, DEGRADED, "False", None).await;
    let event = eventually(CONVERGE, || async {
        env.events_for("worker-a").await.into_iter().find(|e| {
            e["reason"] == "BootImageUpdated"
                && e["note"]
                    .as_str()
                    .unwrap_or_default()
                    .contains(AMI_421_US_EAST_1)
        })
    })
    .await;
    assert!(
        event.is_some(),
        "a BootImageUpdated Event naming the new AMI"
    );
    let metrics = u.controller.metrics().await;
    assert_eq!(sample(&metrics, PATCHES_UPDATED), Some(1.0), "{metrics}");
}

/// An earlier run's known-images ConfigMap keeps its images and gains the new golden stream's,
/// appended after them (oldest first, so bounding drops the oldest).
#[tokio::test]
async fn the_known_images_configmap_keeps_earlier_images_and_gains_the_new_ones() {
    let env = TestEnv::new("remembered").await;
    env.aws_cluster("4.21.0", &stream_421(), None).await;
    env.remember_images(&AMIS_420).await;
    let controller = env.controller(&[]);
    controller.wait_ready().await;
    let name = boot_image_controller::names::KNOWN_IMAGES_CONFIGMAP_NAME;
    let images = eventually(Duration::from_secs(30), || async {
        let cm = env.get("v1", "ConfigMap", name).await?;
        let text = cm.data["data"]["images"].as_str()?.to_string();
        text.contains(AMI_421_US_EAST_1).then_some(text)
    })
    .await
    .unwrap_or_else(|| panic!("the 4.21 AMI never remembered\n{}", controller.logs()));
    let lines: Vec<&str> = images.lines().collect();
    assert_eq!(lines[..AMIS_420.len()], AMIS_420, "{images}");
}

/// An administrator's own stub secret (a custom disk layout, say) stays the MachineSet's stub
/// while its image moves.
#[tokio::test]
async fn an_update_keeps_an_administrators_stub_secret() {
    let env = TestEnv::new("kept-stub").await;
    env.aws_cluster("4.21.0", &stream_421(), None).await;
    env.apply(stub_secret(&env.ns, "custom-user-data", "3.2.0"))
        .await;
    let ms = machine_set(&env.ns, "worker-a")
        .ami(AMI_420_US_EAST_1)
        .user_data("custom-user-data");
    env.apply(ms.build()).await;
    env.remember_images(&AMIS_420).await;
    let controller = env.controller(&[]);
    controller.wait_ready().await;
    let c = [&controller];
    let updated = wait_for_ami(&env, &c, "worker-a", AMI_421_US_EAST_1).await;
    assert_eq!(secret_of(&updated), "custom-user-data");
}

/// Scenario 1 setup: MachineSets `blue` and `green` (labelled `tier`) and `plain` (unlabelled),
/// all booting 4.20, under a running controller that selects none of them and has said so.
/// Returns the resourceVersions before any selection, to tell which objects were written.
async fn selection_cluster(name: &str) -> (TestEnv, ControllerProcess, BTreeMap<String, String>) {
    let env = TestEnv::new(name).await;
    env.aws_cluster("4.21.0", &stream_421(), Some(selection("None", None)))
        .await;
    env.remember_images(&AMIS_420).await;
    for (name, tier) in [
        ("blue", Some("blue")),
        ("green", Some("green")),
        ("plain", None),
    ] {
        let mut ms = machine_set(&env.ns, name).user_data("worker-user-data-managed");
        if let Some(tier) = tier {
            ms = ms.label("tier", tier);
        }
        env.apply(ms.build()).await;
    }
    let initial = env.machine_set_versions().await;
    let ctl = env.controller(&[]);
    ctl.wait_ready().await;
    wait_for_message(&env, &[&ctl], PROGRESSING, &["3 total, 0 selected"]).await;
    (env, ctl, initial)
}

/// Selects the MachineSets labelled `tier: blue` and waits until blue boots 4.21.
async fn select_blue(env: &TestEnv, ctl: &ControllerProcess) {
    env.select(Some(selection(
        "Partial",
        Some(json!({"matchLabels": {"tier": "blue"}})),
    )))
    .await;
    wait_for_ami(env, &[ctl], "blue", AMI_421_US_EAST_1).await;
}

/// Selects the MachineSets whose `tier` is in `[green]` and waits until green boots 4.21 and the
/// status names it as the last change.
async fn select_green_by_expression(env: &TestEnv, ctl: &ControllerProcess) {
    env.select(Some(selection(
        "Partial",
        Some(json!({"matchExpressions": [{"key": "tier", "operator": "In", "values": ["green"]}]})),
    )))
    .await;
    wait_for_ami(env, &[ctl], "green", AMI_421_US_EAST_1).await;
    wait_for_message(
        env,
        &[ctl],
        PROGRESSING,
        &[
            "1 selected, 0 to update, 1 up to date",
            "Last changes: green",
        ],
    )
    .await;
}

/// Selects every MachineSet and waits until all three are up to date.
async fn select_all(env: &TestEnv, ctl: &ControllerProcess) {
    env.select(Some(selection("All", None))).await;
    wait_for_ami(env, &[ctl], "plain", AMI_421_US_EAST_1).await;
    wait_for_message(
        env,
        &[ctl],
        PROGRESSING,
        &["3 total, 3 selected, 0 to update, 3 up to date"],
    )
    .await;
}

/// Scenario 1a: with selection None the controller reports, and writes nothing.
#[tokio::test]
async fn selection_none_reports_and_writes_nothing() {
    let (env, _ctl, initial) = selection_cluster("selection-none").await;
    assert_eq!(env.machine_set_versions().await, initial);
}

/// Scenario 1b: Partial by matchLabels, switched on a live controller, writes only the labelled
/// MachineSet.
#[tokio::test]
async fn partial_selection_by_labels_writes_only_the_selected_machine_set() {
    let (env, ctl, initial) = selection_cluster("selection-labels").await;
    select_blue(&env, &ctl).await;
    wait_for_message(
        &env,
        &[&ctl],
        PROGRESSING,
        &[
            "3 total, 1 selected, 0 to update, 1 up to date",
            "NotSelected: 2",
        ],
    )
    .await;
    let now = env.machine_set_versions().await;
    assert_eq!(
        versions_of(&now, &["green", "plain"]),
        versions_of(&initial, &["green", "plain"]),
        "only the selected MachineSet is written"
    );
}

/// Scenario 1c: Partial by matchExpressions writes only the matching MachineSet.
#[tokio::test]
async fn partial_selection_by_expressions_writes_only_the_matching_machine_set() {
    let (env, ctl, initial) = selection_cluster("selection-expressions").await;
    select_green_by_expression(&env, &ctl).await;
    let now = env.machine_set_versions().await;
    assert_eq!(
        versions_of(&now, &["blue", "plain"]),
        versions_of(&initial, &["blue", "plain"])
    );
}

/// Scenario 1d: a MachineSet no longer selected is not written again.
#[tokio::test]
async fn a_machine_set_no_longer_selected_is_not_written_again() {
    let (env, ctl, initial) = selection_cluster("selection-deselected").await;
    select_blue(&env, &ctl).await;
    let blue_updated = versions_of(&env.machine_set_versions().await, &["blue"]);
    select_green_by_expression(&env, &ctl).await;
    let now = env.machine_set_versions().await;
    assert_eq!(
        versions_of(&now, &["plain"]),
        versions_of(&initial, &["plain"])
    );
    assert_eq!(versions_of(&now, &["blue"]), blue_updated);
}

/// Scenario 1e: selection All, switched on a live controller, updates every MachineSet.
#[tokio::test]
async fn selection_all_updates_every_machine_set() {
    let (env, ctl, _) = selection_cluster("selection-all").await;
    select_all(&env, &ctl).await;
}

/// Scenario 1f: back to None, neither another actor's revert nor a new outdated MachineSet is
/// written.
#[tokio::test]
async fn selection_none_after_all_stops_every_write() {
    let (env, ctl, _) = selection_cluster("selection-all-none").await;
    let c = [&ctl];
    select_all(&env, &ctl).await;
    env.narrow_selection(selection("None", None)).await;
    wait_for_message(&env, &c, PROGRESSING, &["3 total, 0 selected"]).await;
    let writes = ctl.metric(MACHINE_SET_WRITES).await;
    set_ami(&env, "blue", AMI_421_US_EAST_1, AMI_420_US_EAST_1).await;
    env.apply(
        machine_set(&env.ns, "late")
            .user_data("worker-user-data-managed")
            .build(),
    )
    .await;
    let untouched = env.machine_set_versions().await;
    wait_for_message(&env, &c, PROGRESSING, &["4 total, 0 selected"]).await;
    assert_eq!(env.machine_set_versions().await, untouched);
    assert_eq!(ami_of(&env.machine_set("blue").await), AMI_420_US_EAST_1);
    assert_eq!(ctl.metric(MACHINE_SET_WRITES).await, writes);
    assert_eq!(writes, Some(3.0), "one patch per selected MachineSet");
}

/// Scenario 2: a MachineSet `name` the controller must leave alone (`skipped` makes it so),
/// beside an outdated `worker`, on a stub secret of its own (a spec-2 stub that an object keeping
/// its image names is never upgraded: `StubSecretShared`). Once the status counts it as skipped
/// for `reason`, it is unchanged (same resourceVersion, stub secret, no history, no Event) and
/// the metric counts it.
async fn assert_left_alone(
    name: &str,
    skipped: fn(MachineSetBuilder) -> MachineSetBuilder,
    reason: &str,
) {
    let env = TestEnv::new(&format!("skip-{name}")).await;
    env.aws_cluster("4.21.0", &stream_421(), None).await;
    env.remember_images(&AMIS_420).await;
    env.apply(machine_set(&env.ns, "worker").build()).await;
    let own_stub = machine_set(&env.ns, name).user_data("worker-user-data-managed");
    env.apply(skipped(own_stub).build()).await;
    let initial = env.machine_set_versions().await;

    let ctl = env.controller(&[]);
    ctl.wait_ready().await;
    let c = [&ctl];
    wait_for_golden(&env, &c, "worker", AMI_421_US_EAST_1).await;
    let counts = format!("{reason}: 1");
    let progressing = wait_for_message(
        &env,
        &c,
        PROGRESSING,
        &[
            "2 total",
            "0 to update, 1 up to date, 1 skipped",
            &counts,
            "0 errored",
        ],
    )
    .await;
    assert_eq!(progressing["status"], "False", "{progressing}");
    wait_for_condition(&env, &c, DEGRADED, "False", Some("AsExpected")).await;

    let now = env.machine_set_versions().await;
    assert_eq!(versions_of(&now, &[name]), versions_of(&initial, &[name]));
    let ms = env.machine_set(name).await;
    assert_eq!(secret_of(&ms), "worker-user-data-managed", "{name}");
    assert!(history_of(&ms).is_empty(), "{name} has no history");
    assert!(
        env.events_for(name).await.is_empty(),
        "no Event about {name}"
    );
    assert_eq!(ctl.metric(MACHINE_SET_WRITES).await, Some(1.0));
    let series = format!(
        r#"boot_image_controller_machine_resources{{action="Skip",kind="MachineSet",reason="{reason}"}}"#
    );
    assert_eq!(ctl.metric(&series).await, Some(1.0), "{series}");
}

#[tokio::test]
async fn a_machine_set_owned_by_another_controller_is_left_to_its_owner() {
    assert_left_alone(
        "owned",
        MachineSetBuilder::owned_by_another_controller,
        "Owned",
    )
    .await;
}

/// Hive marks the MachineSets of a MachinePool with labels, not owner references, and leaves
/// their providerSpec alone: they are updated like any other, and keep Hive's labels.
#[tokio::test]
async fn a_machine_set_of_a_hive_machine_pool_is_updated() {
    let env = TestEnv::new("hive").await;
    env.aws_cluster("4.21.0", &stream_421(), None).await;
    env.remember_images(&AMIS_420).await;
    let hive = machine_set(&env.ns, "hive-worker").managed_by_hive("worker");
    env.apply(hive.build()).await;

    let ctl = env.controller(&[]);
    ctl.wait_ready().await;
    wait_for_golden(&env, &[&ctl], "hive-worker", AMI_421_US_EAST_1).await;
    let ms = env.machine_set("hive-worker").await;
    assert_eq!(
        ms["metadata"]["labels"]["hive.openshift.io/managed"],
        "true"
    );
    assert_eq!(
        ms["metadata"]["labels"]["hive.openshift.io/machine-pool"],
        "worker"
    );
    assert_eq!(history_of(&ms).len(), 1, "{ms}");
}

#[tokio::test]
async fn an_opted_out_machine_set_is_left_alone() {
    assert_left_alone("pinned", MachineSetBuilder::opted_out, "OptedOut").await;
}

#[tokio::test]
async fn a_machine_set_on_a_custom_image_keeps_it() {
    assert_left_alone("custom", |ms| ms.ami(CUSTOM_AMI), "CustomImage").await;
}

#[tokio::test]
async fn a_windows_machine_set_is_left_alone() {
    assert_left_alone("windows", MachineSetBuilder::windows, "WindowsMachine").await;
}

/// Scenario 3: MachineSets in two regions and two architectures, `(name, 4.20 AMI, 4.21 AMI)`.
const ROLLOUT_SETS: [(&str, &str, &str); 4] = [
    ("x86-east-1a", AMI_420_US_EAST_1, AMI_421_US_EAST_1),
    ("x86-east-1b", AMI_420_US_EAST_1, AMI_421_US_EAST_1),
    ("x86-east-2a", AMI_420_US_EAST_2, AMI_421_US_EAST_2),
    ("arm-east-1a", AMI_420_ARM_US_EAST_1, AMI_421_ARM_US_EAST_1),
];

/// Scenario 3 setup: [`ROLLOUT_SETS`] on 4.20's golden images, all selected, under a running
/// controller that has counted them up to date.
async fn rollout_cluster(name: &str) -> (TestEnv, ControllerProcess) {
    let env = TestEnv::new(name).await;
    env.aws_cluster("4.20.0", &stream_420(), Some(selection("All", None)))
        .await;
    for (name, ami, _) in ROLLOUT_SETS {
        let mut ms = machine_set(&env.ns, name)
            .ami(ami)
            .user_data("worker-user-data-managed");
        if name.contains("east-2") {
            ms = ms.region("us-east-2");
        }
        if name.starts_with("arm") {
            ms = ms.arch("arm64");
        }
        if name.ends_with("1b") {
            // The autoscaler writes several labels; the arch is one entry among them.
            ms = ms.annotate(
                "capacity.cluster-autoscaler.kubernetes.io/labels",
                "node-role.kubernetes.io/worker= , kubernetes.io/arch=amd64",
            );
        }
        env.apply(ms.build()).await;
    }
    let ctl = env.controller(&[]);
    ctl.wait_ready().await;
    let up_to_date = ["4 selected, 0 to update, 4 up to date"];
    wait_for_message(&env, &[&ctl], PROGRESSING, &up_to_date).await;
    (env, ctl)
}

#[tokio::test]
async fn machine_sets_already_on_the_golden_images_are_not_written() {
    let (env, ctl) = rollout_cluster("rollout-current").await;
    assert!(
        env.machine_sets()
            .await
            .values()
            .all(|ms| history_of(ms).is_empty()),
        "MachineSets already on the golden images are not written"
    );
    assert_eq!(ctl.metric(MACHINE_SET_WRITES).await, Some(0.0));
}

/// Scenario 3: a new golden ConfigMap reaches every selected MachineSet, whatever its region and
/// architecture, each with its history entry and Event.
#[tokio::test]
async fn golden_configmap_update_rolls_out_to_every_selected_machine_set() {
    let (env, ctl) = rollout_cluster("rollout").await;
    let c = [&ctl];
    env.upgrade("4.21.0", &stream_421()).await;
    for (name, _, golden) in ROLLOUT_SETS {
        let ms = wait_for_golden(&env, &c, name, golden).await;
        let history = history_of(&ms);
        assert_eq!(history.len(), 1, "{name}: {history:?}");
        assert_eq!(history[0]["release"], "4.21.0", "{name}: {history:?}");
        assert_eq!(history[0]["stream"], "rhcos-4.21", "{name}: {history:?}");
        wait_for_event(&env, &c, name, "Normal", "BootImageUpdated").await;
    }
    wait_for_metric(&ctl, PATCHES_UPDATED, CONVERGE, |v| v == 4.0).await;
    wait_for_condition(&env, &c, DEGRADED, "False", None).await;
}

/// Scenario 3: Progressing goes True during the rollout and False after it, and its
/// lastTransitionTime moves with the rollout.
#[tokio::test]
async fn progressing_is_true_during_a_rollout_and_false_after_it() {
    let (env, ctl) = rollout_cluster("rollout-progress").await;
    let c = [&ctl];
    let log = env.record_conditions().await;
    let started = jiff::Timestamp::now();
    env.upgrade("4.21.0", &stream_421()).await;
    for (name, _, golden) in ROLLOUT_SETS {
        wait_for_golden(&env, &c, name, golden).await;
    }
    let done = wait_for_condition(&env, &c, PROGRESSING, "False", Some("BootImagesCurrent")).await;
    assert!(
        done["message"]
            .as_str()
            .unwrap_or_default()
            .contains("4 selected, 0 to update, 4 up to date"),
        "{done}"
    );
    let transitions = log.transitions(PROGRESSING);
    let updating = transitions
        .iter()
        .position(|t| *t == ("True".into(), "BootImagesUpdating".into()));
    let current = transitions
        .iter()
        .rposition(|t| *t == ("False".into(), "BootImagesCurrent".into()));
    assert!(
        matches!((updating, current), (Some(u), Some(c)) if u < c),
        "Progressing must go True (BootImagesUpdating) then False (BootImagesCurrent); it went \
         {transitions:?}\n{}",
        ctl.log_tail(40)
    );
    let flipped: jiff::Timestamp = done["lastTransitionTime"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(
        flipped >= started.round(jiff::Unit::Second).unwrap() - jiff::SignedDuration::from_secs(1),
        "lastTransitionTime {flipped} moved with the rollout started at {started}"
    );
}

/// Issue 49's critical path: a rollout costs its patches and at most three status writes
/// (`Progressing=True` before the patches, the result after them), and the passes that follow
/// it (the watch's echoes of its patches and of its own status writes, resyncs) write nothing
/// more.
#[tokio::test]
async fn a_rollout_writes_the_status_at_most_three_times() {
    const STATUS_WRITES: &str =
        r#"boot_image_controller_writes_total{target="MachineConfiguration/status"}"#;
    let env = TestEnv::new("rollout-status-writes").await;
    env.aws_cluster("4.20.0", &stream_420(), None).await;
    let names = ["worker-a", "worker-b", "worker-c"];
    for name in names {
        let ms = machine_set(&env.ns, name).user_data("worker-user-data-managed");
        env.apply(ms.build()).await;
    }
    let ctl = env.controller(&["--resync-period", "2s"]);
    ctl.wait_ready().await;
    let c = [&ctl];
    wait_for_message(&env, &c, PROGRESSING, &["0 to update, 3 up to date"]).await;
    let passes = ctl.metric(FULL_PASSES).await.unwrap_or_default();
    wait_for_metric(&ctl, FULL_PASSES, CONVERGE, |v| v > passes).await;
    let before = ctl.metric(STATUS_WRITES).await.unwrap_or_default();

    env.upgrade("4.21.0", &stream_421()).await;
    for name in names {
        wait_for_golden(&env, &c, name, AMI_421_US_EAST_1).await;
    }
    wait_for_condition(&env, &c, PROGRESSING, "False", Some("BootImagesCurrent")).await;
    let passes = ctl.metric(FULL_PASSES).await.unwrap_or_default();
    wait_for_metric(&ctl, FULL_PASSES, CONVERGE, |v| v >= passes + 2.0).await;
    let written = ctl.metric(STATUS_WRITES).await.unwrap_or_default() - before;
    assert!(
        (1.0..=3.0).contains(&written),
        "{written} status writes for one rollout\n{}",
        ctl.log_tail(40)
    );
}

/// Scenario 4 setup: a converged MachineSet `current`, then the golden ConfigMap deleted and an
/// outdated MachineSet `outdated` created while it is gone. Returns once the status counts both as
/// blocked, with the resourceVersions at that point.
async fn golden_missing_cluster(
    name: &str,
) -> (TestEnv, ControllerProcess, BTreeMap<String, String>) {
    let env = TestEnv::new(name).await;
    env.aws_cluster("4.21.0", &stream_421(), None).await;
    env.remember_images(&AMIS_420).await;
    env.apply(machine_set(&env.ns, "current").current().build())
        .await;
    let ctl = env.controller(&[]);
    ctl.wait_ready().await;
    let c = [&ctl];
    wait_for_condition(&env, &c, PROGRESSING, "False", Some("BootImagesCurrent")).await;

    env.delete("v1", "ConfigMap", "coreos-bootimages").await;
    wait_for_condition(&env, &c, DEGRADED, "True", Some("GoldenConfigMapMissing")).await;
    // An outdated MachineSet arrives while the ConfigMap is gone: it is planned, not written.
    env.apply(machine_set(&env.ns, "outdated").build()).await;
    let before = env.machine_set_versions().await;
    wait_for_message(
        &env,
        &c,
        PROGRESSING,
        &["2 total", "GoldenConfigMapMissing: 2"],
    )
    .await;
    (env, ctl, before)
}

/// Recreates the golden ConfigMap with a stream that is not JSON, and waits until Degraded and
/// Progressing say so.
async fn apply_malformed_golden(env: &TestEnv, ctl: &ControllerProcess) {
    let mut broken = golden_config_map(&env.ns, "4.21.0", "");
    broken["data"]["stream"] = json!("{not json");
    env.apply(broken).await;
    wait_for_condition(env, &[ctl], DEGRADED, "True", Some("GoldenStreamInvalid")).await;
    wait_for_message(env, &[ctl], PROGRESSING, &["GoldenStreamInvalid: 2"]).await;
}

/// Scenario 4a: without the golden ConfigMap, Degraded names it and every MachineSet is blocked.
#[tokio::test]
async fn a_missing_golden_configmap_degrades_and_blocks_every_machine_set() {
    let (env, ctl, _) = golden_missing_cluster("golden").await;
    let degraded = wait_for_condition(
        &env,
        &[&ctl],
        DEGRADED,
        "True",
        Some("GoldenConfigMapMissing"),
    )
    .await;
    assert!(
        degraded["message"]
            .as_str()
            .unwrap_or_default()
            .contains("coreos-bootimages"),
        "{degraded}"
    );
    assert_eq!(
        ctl.metric(r#"boot_image_controller_blocked{reason="GoldenConfigMapMissing"}"#)
            .await,
        Some(1.0)
    );
}

/// Scenario 4b: a golden ConfigMap whose stream is malformed degrades, and nothing is written.
#[tokio::test]
async fn a_malformed_golden_stream_degrades_and_writes_nothing() {
    let (env, ctl, before) = golden_missing_cluster("golden-malformed").await;
    apply_malformed_golden(&env, &ctl).await;
    assert_eq!(
        env.machine_set_versions().await,
        before,
        "no MachineSet written"
    );
    assert_eq!(ctl.metric(MACHINE_SET_WRITES).await, Some(0.0));
}

/// Scenario 4c: fixing the golden ConfigMap resumes the rollout without a restart, and leaves the
/// MachineSet that was already current alone.
#[tokio::test]
async fn fixing_the_golden_configmap_resumes_the_rollout() {
    let (env, ctl, before) = golden_missing_cluster("golden-fixed").await;
    apply_malformed_golden(&env, &ctl).await;
    env.apply(golden_config_map(&env.ns, "4.21.0", &stream_421()))
        .await;
    let c = [&ctl];
    wait_for_golden(&env, &c, "outdated", AMI_421_US_EAST_1).await;
    wait_for_condition(&env, &c, DEGRADED, "False", Some("AsExpected")).await;
    wait_for_condition(&env, &c, PROGRESSING, "False", Some("BootImagesCurrent")).await;
    assert_eq!(
        versions_of(&env.machine_set_versions().await, &["current"]),
        versions_of(&before, &["current"])
    );
}

/// Scenario 5 setup: MachineSet `worker` points at `worker-user-data`, which does not exist;
/// `infra` at `infra-user-data`, a spec-2 stub. Returns the controller, once it has updated
/// `infra`, and `worker` as it was before the controller started.
async fn missing_secret_cluster(name: &str) -> (TestEnv, ControllerProcess, Value) {
    let env = TestEnv::new(name).await;
    env.aws_cluster_without_secrets("4.21.0", &stream_421(), None)
        .await;
    env.remember_images(&AMIS_420).await;
    for (name, version) in [
        ("worker-user-data-managed", "3.2.0"),
        ("infra-user-data", "2.2.0"),
    ] {
        env.apply(stub_secret(&env.ns, name, version)).await;
    }
    env.apply(machine_set(&env.ns, "worker").build()).await;
    env.apply(
        machine_set(&env.ns, "infra")
            .user_data("infra-user-data")
            .build(),
    )
    .await;
    let worker_before = env.machine_set("worker").await;

    let ctl = env.controller(&[]);
    ctl.wait_ready().await;
    let infra = wait_for_ami(&env, &[&ctl], "infra", AMI_421_US_EAST_1).await;
    assert_eq!(secret_of(&infra), "infra-user-data");
    (env, ctl, worker_before)
}

/// Scenario 5a: a missing stub secret keeps only the MachineSets naming it on their image, and
/// says so, in one Warning Event on the MachineSet (not one per pass); nothing is degraded (the
/// managed twin of the stub is not used in its place).
#[tokio::test]
async fn a_missing_stub_secret_keeps_only_the_machine_sets_using_it() {
    let (env, ctl, worker_before) = missing_secret_cluster("secret").await;
    let c = [&ctl];
    wait_for_message(&env, &c, PROGRESSING, &["StubSecretMissing: 1"]).await;
    let event = wait_for_event(&env, &c, "worker", "Warning", "StubSecretMissing").await;
    assert!(
        event["note"]
            .as_str()
            .unwrap_or_default()
            .contains("worker-user-data does not exist or cannot be read"),
        "{event}"
    );
    wait_for_condition(&env, &c, DEGRADED, "False", None).await;
    wait_for_metric(
        &ctl,
        r#"boot_image_controller_machine_resources{action="Skip",kind="MachineSet",reason="StubSecretMissing"}"#,
        CONVERGE,
        |v| v == 1.0,
    )
    .await;
    assert_eq!(
        resource_version(&env.machine_set("worker").await),
        resource_version(&worker_before),
        "a MachineSet without its stub is not written"
    );
    // Passes went on (the infra update's echo, the status writes); the Event was sent once.
    let stub_events = env.events_for("worker").await.into_iter();
    let stub_events = stub_events.filter(|e| e["reason"] == "StubSecretMissing");
    assert_eq!(stub_events.count(), 1, "one Event, not one per pass");
}

/// Scenario 5b: creating the missing stub recovers its MachineSets: the watch on it re-plans,
/// no restart needed.
#[tokio::test]
async fn creating_the_missing_stub_secret_recovers_without_a_restart() {
    let (env, mut ctl, _) = missing_secret_cluster("secret-created").await;
    wait_for_message(&env, &[&ctl], PROGRESSING, &["StubSecretMissing: 1"]).await;
    env.apply(stub_secret(&env.ns, "worker-user-data", "3.2.0"))
        .await;
    let c = [&ctl];
    wait_for_golden(&env, &c, "worker", AMI_421_US_EAST_1).await;
    wait_for_condition(&env, &c, PROGRESSING, "False", Some("BootImagesCurrent")).await;
    assert!(ctl.running(), "the same process recovered");
}

/// Scenario 6: another writer scaling the MachineSets during the rollout is never undone.
#[tokio::test]
async fn concurrent_replica_changes_are_never_undone() {
    let env = TestEnv::new("replicas").await;
    env.aws_cluster("4.21.0", &stream_421(), None).await;
    env.remember_images(&AMIS_420).await;
    let names = ["scale-a", "scale-b", "scale-c", "scale-d"];
    for name in names {
        env.apply(machine_set(&env.ns, name).build()).await;
    }

    // The writer keeps scaling every MachineSet, ten rounds a second: far more often than an
    // autoscaler (cluster-autoscaler scans every 10 s by default, `--scan-interval`), and still
    // racing every pass of the rollout. A writer that never paused would be ahead of any guarded
    // client whose pass takes longer than the writer's round, which in a debug build on a loaded
    // machine is a matter of luck.
    let stop = Arc::new(AtomicBool::new(false));
    let rounds = Arc::new(AtomicI64::new(0));
    let writer = {
        let (env, stop, rounds) = (env.clone(), stop.clone(), rounds.clone());
        tokio::spawn(async move {
            let mut last: BTreeMap<&str, i64> = BTreeMap::new();
            let mut replicas = 1;
            while !stop.load(Ordering::SeqCst) {
                replicas = rounds.fetch_add(1, Ordering::SeqCst) + 2;
                for name in names {
                    let op =
                        json!([{"op": "replace", "path": "/spec/replicas", "value": replicas}]);
                    env.json_patch(MACHINE_SET, name, op)
                        .await
                        .unwrap_or_else(|e| panic!("the writer scales {name}: {e}"));
                    last.insert(name, replicas);
                }
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            }
            (last, replicas)
        })
    };

    // Counted from the controller's start: its first pass can patch every MachineSet before
    // readiness is even seen, so rounds counted from then on can be none.
    let rounds_before = rounds.load(Ordering::SeqCst);
    let ctl = env.controller(&[]);
    ctl.wait_ready().await;
    let c = [&ctl];
    for name in names {
        wait_for_golden(&env, &c, name, AMI_421_US_EAST_1).await;
    }
    let rounds_during = rounds.load(Ordering::SeqCst) - rounds_before;
    stop.store(true, Ordering::SeqCst);
    let (last, replicas) = writer.await.expect("the writer finished");
    assert!(
        rounds_during > 0,
        "the writer kept scaling while the controller rolled out"
    );
    for name in names {
        let ms = env.machine_set(name).await;
        assert_eq!(
            replicas_of(&ms),
            last[name],
            "{name}: the writer's last scale stands"
        );
        assert_eq!(ami_of(&ms), AMI_421_US_EAST_1, "{name}");
        assert_eq!(history_of(&ms).len(), 1, "{name} patched once");
    }
    let metrics = ctl.metrics().await;
    eprintln!(
        "writer: {rounds_during} rounds during the rollout, last replicas {replicas}; controller \
         patches updated {:?}, conflicts {:?}",
        sample(&metrics, PATCHES_UPDATED),
        sample(
            &metrics,
            r#"boot_image_controller_patches_total{kind="MachineSet",result="conflict"}"#
        )
    );
    assert_eq!(sample(&metrics, PATCHES_UPDATED), Some(names.len() as f64));
    // A conflicted patch waits for its retry (500 ms, doubling) however often the writer's
    // changes start a pass: never a patch per pass against a writer that is always ahead.
    let conflicts = sample(
        &metrics,
        r#"boot_image_controller_patches_total{kind="MachineSet",result="conflict"}"#,
    )
    .unwrap_or(0.0);
    assert!(
        conflicts <= (names.len() * 8) as f64,
        "{conflicts} conflicts for {} MachineSets: patches did not wait for their retry",
        names.len()
    );
}

/// Scenario 7 setup: MachineSet `fought`, updated to 4.21 by a running controller.
async fn hot_loop_cluster(name: &str) -> (TestEnv, ControllerProcess) {
    let env = TestEnv::new(name).await;
    env.aws_cluster("4.21.0", &stream_421(), None).await;
    env.remember_images(&AMIS_420).await;
    env.apply(
        machine_set(&env.ns, "fought")
            .user_data("worker-user-data-managed")
            .build(),
    )
    .await;
    let ctl = env.controller(&[]);
    ctl.wait_ready().await;
    wait_for_ami(&env, &[&ctl], "fought", AMI_421_US_EAST_1).await;
    (env, ctl)
}

/// Another actor reverts `fought` twice; each revert is re-patched and remembered on the object.
async fn revert_twice(env: &TestEnv, ctl: &ControllerProcess) {
    for revert in 1..=2 {
        set_ami(env, "fought", AMI_421_US_EAST_1, AMI_420_US_EAST_1).await;
        let ms = wait_for_ami(env, &[ctl], "fought", AMI_421_US_EAST_1).await;
        assert_eq!(
            hot_loop_patches(&ms),
            revert + 1,
            "after revert {revert}: {:?}",
            annotation_of(&ms, HOT_LOOP)
        );
    }
}

/// Two reverts fought by one controller, which then dies; returns its successor, which knows only
/// what is on the object, once it has reported the cluster current.
async fn fought_twice_then_restarted(name: &str) -> (TestEnv, ControllerProcess) {
    let (env, mut first) = hot_loop_cluster(name).await;
    revert_twice(&env, &first).await;
    first.kill();
    let second = env.controller(&[]);
    second.wait_ready().await;
    wait_for_condition(
        &env,
        &[&second],
        PROGRESSING,
        "False",
        Some("BootImagesCurrent"),
    )
    .await;
    (env, second)
}

/// The third revert, which the guard stops: waits until it is reported as a HotLoop error.
async fn revert_a_third_time(env: &TestEnv, ctl: &ControllerProcess) {
    set_ami(env, "fought", AMI_421_US_EAST_1, AMI_420_US_EAST_1).await;
    assert_reported_as_error(
        env,
        ctl,
        "fought",
        "HotLoop",
        &["3 times", "opt this MachineSet out and back in"],
        "keeps reverting",
    )
    .await;
}

/// Scenario 7a: an actor reverting the image is fought, twice.
#[tokio::test]
async fn the_first_two_reverts_are_patched_again() {
    let (env, ctl) = hot_loop_cluster("hotloop-fought").await;
    revert_twice(&env, &ctl).await;
}

/// Scenario 7b: the guard stops the controller on the third revert, even across a restart.
#[tokio::test]
async fn hot_loop_guard_stops_after_the_third_revert_even_across_a_restart() {
    let (env, second) = fought_twice_then_restarted("hotloop").await;
    revert_a_third_time(&env, &second).await;
    wait_for_metric(
        &second,
        r#"boot_image_controller_hot_loops_total{kind="MachineSet"}"#,
        CONVERGE,
        |v| v == 1.0,
    )
    .await;
    assert_eq!(
        second
            .metric(r#"mcc_bootimage_update_error{machineset="fought"}"#)
            .await,
        Some(1.0)
    );
    let stopped = env.machine_set("fought").await;
    assert_eq!(
        ami_of(&stopped),
        AMI_420_US_EAST_1,
        "the revert is not fought"
    );
    assert_eq!(hot_loop_patches(&stopped), 3);
    assert_eq!(second.metric(MACHINE_SET_WRITES).await, Some(0.0));
}

/// Scenario 7c: opting out clears the hot-loop guard; opting back in updates the MachineSet again.
#[tokio::test]
async fn opting_out_and_back_in_resets_the_hot_loop_guard() {
    let (env, second) = fought_twice_then_restarted("hotloop-reset").await;
    revert_a_third_time(&env, &second).await;
    env.annotate_machine_set("fought", OPT_OUT, Some("disabled"))
        .await;
    let cleared = eventually(CONVERGE, || async {
        let ms = env.machine_set("fought").await;
        annotation_of(&ms, HOT_LOOP).is_none().then_some(())
    })
    .await;
    assert!(
        cleared.is_some(),
        "opting out clears {HOT_LOOP}\n{}",
        second.log_tail(40)
    );
    env.annotate_machine_set("fought", OPT_OUT, None).await;
    let c = [&second];
    let ms = wait_for_ami(&env, &c, "fought", AMI_421_US_EAST_1).await;
    assert_eq!(hot_loop_patches(&ms), 1);
    wait_for_condition(&env, &c, DEGRADED, "False", Some("AsExpected")).await;
    // Counted when the pass reports the patch, which can come a moment after the patched
    // object and the condition (already False since the opt-out) are seen.
    let both = eventually(CONVERGE, || async {
        (second.metric(MACHINE_SET_WRITES).await == Some(2.0)).then_some(())
    })
    .await;
    assert!(
        both.is_some(),
        "the guard's reset and the new patch are both counted as writes: {:?}\n{}",
        second.metric(MACHINE_SET_WRITES).await,
        second.log_tail(40)
    );
}

/// How many patches the hot-loop memory on the object holds.
fn hot_loop_patches(ms: &Value) -> usize {
    annotation_of(ms, HOT_LOOP)
        .map(|text| {
            let memory: Value = serde_json::from_str(text).expect("hot-loop memory is JSON");
            memory["patches"].as_array().map_or(0, Vec::len)
        })
        .unwrap_or(0)
}

/// Scenario 8 setup: two current MachineSets, the pause annotation set and acknowledged, then an
/// upgrade to 4.21 whose golden images the MCO publishes a little later (meanwhile the release
/// mismatch holds the writes too). Returns once the status counts both MachineSets as paused,
/// with the Paused condition as first acknowledged, the condition log since then and the
/// resourceVersions before the upgrade.
async fn paused_through_an_upgrade(
    name: &str,
) -> (
    TestEnv,
    ControllerProcess,
    Value,
    ConditionLog,
    BTreeMap<String, String>,
) {
    let env = TestEnv::new(name).await;
    env.aws_cluster("4.20.0", &stream_420(), None).await;
    for name in ["paused-a", "paused-b"] {
        env.apply(
            machine_set(&env.ns, name)
                .user_data("worker-user-data-managed")
                .build(),
        )
        .await;
    }
    let ctl = env.controller(&[]);
    ctl.wait_ready().await;
    let c = [&ctl];
    wait_for_message(&env, &c, PROGRESSING, &["0 to update, 2 up to date"]).await;

    env.annotate_machine_configuration(PAUSE, Some("true"))
        .await;
    let paused = wait_for_condition(&env, &c, PAUSED, "True", Some("Paused")).await;
    let log = env.record_conditions().await;
    let before = env.machine_set_versions().await;

    env.apply(cluster_version(&env.singleton, "4.21.0", "Completed"))
        .await;
    wait_for_condition(&env, &c, PROGRESSING, "False", Some("ReleaseMismatch")).await;
    env.apply(golden_config_map(&env.ns, "4.21.0", &stream_421()))
        .await;
    wait_for_metric(
        &ctl,
        r#"boot_image_controller_golden_stream_info{release="4.21.0",stream="rhcos-4.21"}"#,
        CONVERGE,
        |v| v == 1.0,
    )
    .await;
    wait_for_message(&env, &c, PROGRESSING, &["Paused: 2"]).await;
    (env, ctl, paused, log, before)
}

/// Scenario 8a: the pause annotation is acknowledged and holds every write; Paused does not
/// flicker while the upgrade goes through.
#[tokio::test]
async fn pause_is_acknowledged_and_holds_the_rollout() {
    let (env, ctl, paused, log, before) = paused_through_an_upgrade("pause").await;
    assert_eq!(
        env.machine_set_versions().await,
        before,
        "nothing written while paused"
    );
    assert_eq!(ctl.metric(MACHINE_SET_WRITES).await, Some(0.0));
    let still = env.condition(PAUSED).await.expect("Paused condition");
    assert_eq!(still["status"], "True", "{still}");
    assert_eq!(
        still["lastTransitionTime"], paused["lastTransitionTime"],
        "Paused stayed True throughout"
    );
    assert_eq!(
        log.transitions(PAUSED),
        vec![("True".to_string(), "Paused".to_string())],
        "Paused never flickered while the annotation was set"
    );
}

/// Scenario 8b: removing the pause annotation releases the held rollout.
#[tokio::test]
async fn removing_the_pause_releases_the_rollout() {
    let (env, ctl, ..) = paused_through_an_upgrade("pause-removed").await;
    let c = [&ctl];
    env.annotate_machine_configuration(PAUSE, None).await;
    for name in ["paused-a", "paused-b"] {
        wait_for_ami(&env, &c, name, AMI_421_US_EAST_1).await;
    }
    wait_for_condition(&env, &c, PAUSED, "False", Some("NotPaused")).await;
    wait_for_condition(&env, &c, PROGRESSING, "False", Some("BootImagesCurrent")).await;
}

/// The MachineSets of scenario 9.
const ELECTED: [&str; 3] = ["elect-a", "elect-b", "elect-c"];

/// Scenario 9 setup: two replicas with leader election over three MachineSets on 4.20. Returns
/// them with the index of the one leading, once it alone leads and has moved every MachineSet to
/// the managed stub secret.
async fn two_replicas(name: &str) -> (TestEnv, [ControllerProcess; 2], usize) {
    let env = TestEnv::new(name).await;
    env.aws_cluster("4.20.0", &stream_420(), None).await;
    for name in ELECTED {
        env.apply(machine_set(&env.ns, name).build()).await;
    }
    let lease = format!("bic-{}", env.ns);
    // Short lease timings (OpenShift's defaults are 137/107/26 s) so that a takeover happens
    // within the test.
    let flags = [
        "--leader-elect",
        "--leader-election-id",
        lease.as_str(),
        "--leader-elect-lease-duration=15s",
        "--leader-elect-renew-deadline=10s",
        "--leader-elect-retry-period=2s",
    ];
    let replicas = [env.controller(&flags), env.controller(&flags)];
    for r in &replicas {
        r.wait_ready().await;
    }

    // Exactly one leads.
    let leader = eventually(CONVERGE, || async {
        let a = replicas[0].metric(LEADER).await?;
        let b = replicas[1].metric(LEADER).await?;
        match (a, b) {
            (1.0, 0.0) => Some(0),
            (0.0, 1.0) => Some(1),
            _ => None,
        }
    })
    .await
    .unwrap_or_else(|| panic!("no single leader\n{}", tails(&[&replicas[0], &replicas[1]])));
    let holder = env.lease(&lease).await.expect("the Lease exists");
    let holder_identity = holder["spec"]["holderIdentity"]
        .as_str()
        .unwrap_or_default();
    assert!(
        holder_identity.ends_with(&format!("-{}", replicas[leader].pid())),
        "the Lease names the leader: {holder}"
    );

    // 4.20's images are current: nothing to write until the upgrade.
    for name in ELECTED {
        wait_for_golden(&env, &[&replicas[leader]], name, AMI_420_US_EAST_1).await;
    }
    wait_for_condition(
        &env,
        &[&replicas[leader]],
        PROGRESSING,
        "False",
        Some("BootImagesCurrent"),
    )
    .await;
    (env, replicas, leader)
}

/// Scenario 9a: two replicas with leader election write as one: the follower writes nothing.
#[tokio::test]
async fn two_replicas_write_as_one() {
    let (_env, replicas, leader) = two_replicas("leader").await;
    // The follower writes nothing at all: no MachineSet, status, Event or ConfigMap.
    let metrics = replicas[1 - leader].metrics().await;
    let follower_writes: Vec<&str> = metrics
        .lines()
        .filter(|l| l.starts_with("boot_image_controller_writes_total{") && !l.ends_with(" 0"))
        .collect();
    assert!(
        metrics.contains("boot_image_controller_writes_total{") && follower_writes.is_empty(),
        "the follower wrote: {follower_writes:?}"
    );
}

/// Scenario 9b: a leader killed without releasing the Lease is replaced by the follower once the
/// Lease expires, and the successor carries out the next rollout, one patch per MachineSet.
#[tokio::test]
async fn a_killed_leader_is_replaced() {
    let (env, mut replicas, leader) = two_replicas("leader-killed").await;
    let follower = 1 - leader;
    let killed = Instant::now();
    replicas[leader].kill();
    wait_for_metric(&replicas[follower], LEADER, Duration::from_secs(30), |v| {
        v == 1.0
    })
    .await;
    // A figure, not a limit: how soon depends on the machine (the lease lasts 15 s here).
    eprintln!("MEASURED: takeover after {:?}", killed.elapsed());
    let new = &replicas[follower];

    env.upgrade("4.21.0", &stream_421()).await;
    for name in ELECTED {
        let ms = wait_for_golden(&env, &[new], name, AMI_421_US_EAST_1).await;
        let history = history_of(&ms);
        assert_eq!(
            history.len(),
            1,
            "{name}: one entry per change: {history:#?}"
        );
        assert_eq!(history[0]["bootImage"]["to"], AMI_421_US_EAST_1, "{name}");
    }
    assert_eq!(
        new.metric(PATCHES_UPDATED).await,
        Some(ELECTED.len() as f64)
    );
}

/// Scenario 10: a controller stopped in the middle of a rollout, and its successor, patch every
/// MachineSet exactly once between them.
#[tokio::test]
async fn restart_mid_rollout_converges_with_one_patch_per_machine_set() {
    let env = TestEnv::new("restart").await;
    env.aws_cluster("4.21.0", &stream_421(), None).await;
    env.remember_images(&AMIS_420).await;
    let names: Vec<String> = (0..30).map(|i| format!("many-{i:02}")).collect();
    futures::future::join_all(
        names
            .iter()
            .map(|name| env.apply(machine_set(&env.ns, name).build())),
    )
    .await;
    let patched = |sets: &BTreeMap<String, Value>| {
        sets.values()
            .filter(|ms| !history_of(ms).is_empty())
            .count()
    };

    // One patch at a time, so that the rollout is still going when the first patch shows.
    let mut first = env.controller(&["--max-concurrent-patches", "1"]);
    first.wait_ready().await;
    let started = eventually(CONVERGE, || async {
        let n = patched(&env.machine_sets().await);
        (n > 0).then_some(n)
    })
    .await
    .unwrap_or_else(|| panic!("no patch\n{}", first.log_tail(40)));
    let stopping = Instant::now();
    let code = first.terminate();
    assert_eq!(
        code,
        Some(0),
        "SIGTERM exits cleanly\n{}",
        first.log_tail(40)
    );
    let by_first = patched(&env.machine_sets().await);
    eprintln!(
        "first controller: {started} patched when stopped, {by_first} after exiting {:?} later",
        stopping.elapsed()
    );

    let second = env.controller(&[]);
    second.wait_ready().await;
    for name in &names {
        wait_for_golden(&env, &[&second], name, AMI_421_US_EAST_1).await;
    }
    for (name, ms) in env.machine_sets().await {
        let history = history_of(&ms);
        assert_eq!(history.len(), 1, "{name} patched once: {history:#?}");
    }
    assert_eq!(
        second.metric(PATCHES_UPDATED).await,
        Some((names.len() - by_first) as f64),
        "the second controller patched only what the first had not"
    );
}

/// Scenario 11: what a converged cluster looked like before several more resyncs.
struct Converged {
    env: TestEnv,
    ctl: ControllerProcess,
    versions: BTreeMap<String, String>,
    configuration: String,
    writes: Vec<(String, Option<f64>)>,
}

/// Every write the controller counted (and every failed one), by target.
fn writes(metrics: &str) -> Vec<(String, Option<f64>)> {
    boot_image_controller::metrics::WRITE_TARGETS
        .iter()
        .flat_map(|target| {
            ["writes_total", "write_failures_total"].map(|family| {
                let series = format!(r#"boot_image_controller_{family}{{target="{target}"}}"#);
                let value = sample(metrics, &series);
                (series, value)
            })
        })
        .collect()
}

/// Scenario 11 setup: a converged cluster (an updated, a current, a custom and a broken
/// MachineSet) resyncing every 2 s; returns after three more full passes, with the state from
/// before them.
async fn resynced_converged_cluster(name: &str) -> Converged {
    let env = TestEnv::new(name).await;
    env.aws_cluster("4.21.0", &stream_421(), None).await;
    env.remember_images(&AMIS_420).await;
    env.apply(machine_set(&env.ns, "steady-outdated").build())
        .await;
    env.apply(machine_set(&env.ns, "steady-current").current().build())
        .await;
    // The two that keep their images have a stub of their own: a spec-2 stub that an object
    // keeping its image names is never upgraded (`StubSecretShared`).
    env.apply(
        machine_set(&env.ns, "steady-custom")
            .ami(CUSTOM_AMI)
            .user_data("worker-user-data-managed")
            .build(),
    )
    .await;
    // A lasting error is part of the steady state: its retries must not write either (no
    // repeated Events, no status rewrites).
    env.apply(
        machine_set(&env.ns, "steady-broken")
            .arch("sparc64")
            .user_data("worker-user-data-managed")
            .build(),
    )
    .await;
    let ctl = env.controller(&["--resync-period", "2s"]);
    ctl.wait_ready().await;
    let c = [&ctl];
    wait_for_golden(&env, &c, "steady-outdated", AMI_421_US_EAST_1).await;
    wait_for_message(
        &env,
        &c,
        PROGRESSING,
        &["0 to update, 2 up to date, 1 skipped (CustomImage: 1), 1 errored"],
    )
    .await;
    wait_for_condition(&env, &c, DEGRADED, "True", Some("UnknownArchitecture")).await;
    wait_for_event(&env, &c, "steady-broken", "Warning", "UnknownArchitecture").await;
    // One more full pass, so that anything the rollout left pending is flushed.
    let passes = ctl.metric(FULL_PASSES).await.unwrap_or_default();
    wait_for_metric(&ctl, FULL_PASSES, CONVERGE, |v| v > passes).await;

    let versions = env.machine_set_versions().await;
    let configuration = resource_version(&env.machine_configuration().await);
    let before = writes(&ctl.metrics().await);
    let passes = ctl.metric(FULL_PASSES).await.unwrap_or_default();
    wait_for_metric(&ctl, FULL_PASSES, Duration::from_secs(20), |v| {
        v >= passes + 3.0
    })
    .await;
    Converged {
        env,
        ctl,
        versions,
        configuration,
        writes: before,
    }
}

#[tokio::test]
async fn resyncs_of_a_converged_cluster_write_no_machine_set() {
    let c = resynced_converged_cluster("steady-sets").await;
    assert_eq!(c.env.machine_set_versions().await, c.versions);
}

#[tokio::test]
async fn resyncs_of_a_converged_cluster_do_not_rewrite_the_status() {
    let c = resynced_converged_cluster("steady-status").await;
    let now = resource_version(&c.env.machine_configuration().await);
    assert_eq!(now, c.configuration, "status not rewritten");
}

#[tokio::test]
async fn resyncs_of_a_converged_cluster_count_no_write() {
    let c = resynced_converged_cluster("steady-writes").await;
    assert_eq!(writes(&c.ctl.metrics().await), c.writes);
}

/// A lasting error is part of the steady state: its retries must not repeat its Event.
#[tokio::test]
async fn a_lasting_error_has_one_event_not_one_per_retry() {
    let c = resynced_converged_cluster("steady-events").await;
    assert_eq!(
        c.env.events_for("steady-broken").await.len(),
        1,
        "one Event for the error, not one per retry"
    );
}

/// Scenario 12: SIGTERM stops the leader with exit code 0 and releases the Lease.
#[tokio::test]
async fn sigterm_exits_cleanly_and_releases_the_lease() {
    let env = TestEnv::new("sigterm").await;
    env.aws_cluster("4.20.0", &stream_420(), None).await;
    env.apply(machine_set(&env.ns, "term").build()).await;
    let lease = format!("bic-{}", env.ns);
    let flags = ["--leader-elect", "--leader-election-id", lease.as_str()];
    let mut leader = env.controller(&flags);
    leader.wait_ready().await;
    wait_for_metric(&leader, LEADER, CONVERGE, |v| v == 1.0).await;
    wait_for_golden(&env, &[&leader], "term", AMI_420_US_EAST_1).await;
    let held = env.lease(&lease).await.expect("the Lease exists");
    assert!(
        held["spec"]["holderIdentity"]
            .as_str()
            .is_some_and(|h| h.ends_with(&format!("-{}", leader.pid()))),
        "{held}"
    );

    // Timings are figures, not limits: `terminate` gives the process 30 s before it kills it,
    // and a killed process has no exit code, so a hang fails the exit-code check.
    let stopping = Instant::now();
    let code = leader.terminate();
    eprintln!("MEASURED: stopped {:?} after SIGTERM", stopping.elapsed());
    assert_eq!(code, Some(0), "exit code\n{}", leader.log_tail(40));
    let released = env.lease(&lease).await.expect("the Lease exists");
    assert!(
        released["spec"]["holderIdentity"]
            .as_str()
            .is_none_or(str::is_empty),
        "holderIdentity emptied: {released}\n{}",
        leader.log_tail(40)
    );

    // Released, not left to expire (the emptied holder above), so a successor can lead at once.
    let starting = Instant::now();
    let successor = env.controller(&flags);
    successor.wait_ready().await;
    wait_for_metric(&successor, LEADER, CONVERGE, |v| v == 1.0).await;
    eprintln!(
        "MEASURED: successor led {:?} after it started",
        starting.elapsed()
    );
    let taken = env.lease(&lease).await.expect("the Lease exists");
    assert!(
        taken["spec"]["holderIdentity"]
            .as_str()
            .is_some_and(|h| h.ends_with(&format!("-{}", successor.pid()))),
        "{taken}"
    );
}

#[tokio::test]
async fn a_machine_set_with_a_name_of_253_characters_gets_its_events() {
    let env = TestEnv::new("long-name-events").await;
    env.aws_cluster("4.21.0", &stream_421(), None).await;
    env.remember_images(&AMIS_420).await;
    // The longest name the API server takes; Event names add a timestamp to it.
    let name = format!("{}.{}", "worker".repeat(40), "a".repeat(12));
    assert_eq!(name.len(), 253);
    env.apply(machine_set(&env.ns, &name).build()).await;
    let controller = env.controller(&[]);
    let event = eventually(CONVERGE, || async {
        (env.events_for(&name).await.into_iter()).find(|e| e["reason"] == "BootImageUpdated")
    })
    .await;
    assert!(
        event.is_some(),
        "no BootImageUpdated Event for the long-named MachineSet; it has {}\n{}",
        ami_of(&env.machine_set(&name).await),
        controller.log_tail(30)
    );
}
