//! Holds that never end are reported, and never as `BootImageUpdateDegraded`: a gate that keeps
//! holding writes past `--hold-limit` sets our own `BootImageUpdateHeldTooLong`, with a metric,
//! and clears when the gate does. The Machine Config Operator's operator fails its whole sync
//! while `BootImageUpdateDegraded=True` (pkg/operator/sync.go, `syncMachineConfiguration`), so a
//! Degraded hold would keep the very upgrade it waits for from completing.

use crate::support;

use std::time::Duration;

use serde_json::Value;
use support::fixtures::*;
use support::{ConditionLog, TestEnv, eventually};

const CONVERGE: Duration = Duration::from_secs(60);
const DEGRADED: &str = "BootImageUpdateDegraded";
const HELD_TOO_LONG: &str = "BootImageUpdateHeldTooLong";
const PASSES: &str = r#"boot_image_controller_reconcile_duration_seconds_count{scope="all"}"#;

fn exceeded(reason: &str) -> String {
    format!("boot_image_controller_hold_exceeded{{reason=\"{reason}\"}}")
}

/// Waits until the hold of `reason` is reported past its limit, and returns the condition.
async fn reported_too_long(
    env: &TestEnv,
    controller: &support::ControllerProcess,
    reason: &str,
) -> Value {
    let report = eventually(CONVERGE, || async {
        let c = env.condition(HELD_TOO_LONG).await?;
        (c["status"] == "True" && c["reason"] == reason).then_some(c)
    })
    .await
    .unwrap_or_else(|| panic!("never reported:\n{}", controller.log_tail(40)));
    let message = report["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("held for") && message.contains("longer than 3s"),
        "{message}"
    );
    let exported = eventually(CONVERGE, || async {
        (controller.metric(&exceeded(reason)).await == Some(1.0)).then_some(())
    })
    .await;
    assert!(exported.is_some(), "{}", controller.metrics().await);
    report
}

/// Waits until no hold is reported past its limit any more.
async fn report_cleared(env: &TestEnv) {
    let cleared = eventually(CONVERGE, || async {
        let c = env.condition(HELD_TOO_LONG).await?;
        (c["status"] == "False").then_some(())
    })
    .await;
    assert!(
        cleared.is_some(),
        "{:?}",
        env.condition(HELD_TOO_LONG).await
    );
}

/// The gauge of a hold of `reason` past its limit, once a pass has ended (it reads 0 from the
/// start).
async fn hold_after_a_pass(controller: &support::ControllerProcess, reason: &str) -> Option<f64> {
    (controller.metric(PASSES).await? >= 1.0).then_some(())?;
    controller.metric(&exceeded(reason)).await
}

/// Degraded was never True while `log` recorded the conditions.
fn never_degraded(log: &ConditionLog) {
    let degraded: Vec<_> = (log.history(DEGRADED).into_iter())
        .filter(|c| c.status == "True")
        .collect();
    assert!(degraded.is_empty(), "Degraded was set: {degraded:?}");
}

#[tokio::test]
async fn a_release_mismatch_that_outlasts_the_limit_is_reported_until_it_clears() {
    let env = TestEnv::new("hold-lasts").await;
    let log = env.record_conditions().await;
    // The golden ConfigMap is for 4.21.0 but the cluster runs 4.20.0 and stays there, as with
    // a ConfigMap from a snapshot build that never matches.
    env.aws_cluster("4.20.0", &stream_420(), None).await;
    env.apply(golden_config_map(&env.ns, "4.21.0", &stream_421()))
        .await;
    env.apply(machine_set(&env.ns, "worker-a").build()).await;
    let controller = env.controller(&["--hold-limit=3s"]);
    controller.wait_ready().await;

    reported_too_long(&env, &controller, "ReleaseMismatch").await;
    // Nothing was written while held.
    assert_eq!(
        ami_of(&env.machine_set("worker-a").await),
        AMI_420_US_EAST_1
    );

    // The cluster catches up: the hold clears, and with it the report.
    env.upgrade("4.21.0", &stream_421()).await;
    report_cleared(&env).await;
    assert_eq!(
        controller.metric(&exceeded("ReleaseMismatch")).await,
        Some(0.0)
    );
    never_degraded(&log);
}

/// An upgrade that takes longer than the limit (large clusters take hours) is waited for and
/// reported, and the upgrade is never blocked by a Degraded condition of ours.
#[tokio::test]
async fn an_upgrade_longer_than_the_limit_never_degrades() {
    let env = TestEnv::new("hold-upgrade").await;
    let log = env.record_conditions().await;
    env.aws_cluster("4.20.0", &stream_420(), None).await;
    env.apply(machine_set(&env.ns, "worker-a").build()).await;
    // The upgrade to 4.21.0 starts: the golden ConfigMap already carries it, nodes do not.
    env.apply(cluster_version(&env.singleton, "4.21.0", "Partial"))
        .await;
    env.apply(golden_config_map(&env.ns, "4.21.0", &stream_421()))
        .await;
    let controller = env.controller(&["--hold-limit=3s"]);
    controller.wait_ready().await;

    reported_too_long(&env, &controller, "ClusterUpgrading").await;
    let degraded = env.condition(DEGRADED).await.expect("a Degraded condition");
    assert_eq!(degraded["status"], "False", "{degraded}");

    // The upgrade completes: the rollout goes ahead and the report clears.
    env.upgrade("4.21.0", &stream_421()).await;
    let updated = eventually(CONVERGE, || async {
        let ms = env.machine_set("worker-a").await;
        (ami_of(&ms) == AMI_421_US_EAST_1).then_some(())
    })
    .await;
    assert!(updated.is_some(), "{}", controller.log_tail(40));
    report_cleared(&env).await;
    never_degraded(&log);
}

/// A ClusterVersion that exists but has no status (written by hand, restored from a backup
/// without status) says neither the running release nor whether an upgrade runs: the release and
/// multi-arch gates cannot be evaluated, so every write waits (fail closed) and says why, until
/// the status can be read.
#[tokio::test]
async fn a_cluster_version_without_status_holds_writes_until_it_can_be_read() {
    let env = TestEnv::new("cv-no-status").await;
    env.aws_cluster("4.21.0", &stream_421(), None).await;
    env.delete("config.openshift.io/v1", "ClusterVersion", &env.singleton)
        .await;
    let mut bare = cluster_version(&env.singleton, "4.21.0", "Completed");
    bare.as_object_mut().expect("an object").remove("status");
    env.apply(bare).await;
    env.apply(machine_set(&env.ns, "worker-a").build()).await;
    let controller = env.controller(&[]);
    controller.wait_ready().await;

    // The pass that wrote this condition planned with the bare ClusterVersion, and held.
    let held = eventually(CONVERGE, || async {
        let c = env.condition("BootImageUpdateProgressing").await?;
        (c["status"] == "False" && c["reason"] == "ClusterVersionUnknown").then_some(c)
    })
    .await
    .unwrap_or_else(|| panic!("never held:\n{}", controller.log_tail(40)));
    assert!(
        held["message"]
            .as_str()
            .is_some_and(|m| m.contains("no status")),
        "{held}"
    );
    assert_eq!(
        ami_of(&env.machine_set("worker-a").await),
        AMI_420_US_EAST_1,
        "written while the release was unknown"
    );

    // The status appears: the release is known again and the rollout goes ahead.
    env.upgrade("4.21.0", &stream_421()).await;
    let updated = eventually(CONVERGE, || async {
        let ms = env.machine_set("worker-a").await;
        (ami_of(&ms) == AMI_421_US_EAST_1).then_some(())
    })
    .await;
    assert!(updated.is_some(), "{}", controller.log_tail(40));
}

/// Mid-upgrade nothing of the golden ConfigMap is judged: the MCO waits for a stable cluster
/// first (`isClusterStable`, pkg/controller/bootimage/boot_image_controller.go, release-4.21),
/// and a Degraded here would stop the upgrade it waits for.
#[tokio::test]
async fn mid_upgrade_a_malformed_golden_configmap_is_waited_for_not_degraded() {
    let env = TestEnv::new("hold-bad-golden").await;
    let log = env.record_conditions().await;
    env.aws_cluster("4.21.0", "{not a stream", None).await;
    env.apply(upgraded_cluster_version(
        &env.singleton,
        "4.20.0",
        "4.21.0",
        "Partial",
    ))
    .await;
    env.apply(machine_set(&env.ns, "worker-a").build()).await;
    let controller = env.controller(&["--resync-period=1s"]);
    controller.wait_ready().await;
    let waiting = eventually(CONVERGE, || async {
        let c = env.condition("BootImageUpdateProgressing").await?;
        (c["reason"] == "ClusterUpgrading").then_some(())
    })
    .await;
    assert!(waiting.is_some(), "{}", controller.log_tail(40));
    let passes = r#"boot_image_controller_reconcile_duration_seconds_count{scope="all"}"#;
    let after = controller.metric(passes).await.unwrap_or_default() + 3.0;
    let resynced = eventually(CONVERGE, || async {
        (controller.metric(passes).await.unwrap_or_default() >= after).then_some(())
    })
    .await;
    assert!(resynced.is_some(), "{}", controller.metrics().await);
    never_degraded(&log);
}

/// Only the stream entries that selected MachineSets use are judged: a malformed AMI for an
/// architecture no MachineSet runs stops nothing.
#[tokio::test]
async fn a_malformed_entry_for_an_architecture_nobody_runs_stops_nothing() {
    let env = TestEnv::new("hold-bad-entry").await;
    let log = env.record_conditions().await;
    let mut stream: Value = serde_json::from_str(&stream_421()).unwrap();
    stream["architectures"]["aarch64"]["images"]["aws"]["regions"]["us-east-1"]["image"] =
        "ami-xyz".into();
    env.aws_cluster("4.21.0", &stream.to_string(), None).await;
    env.remember_images(&[AMI_420_US_EAST_1]).await;
    env.apply(machine_set(&env.ns, "worker-a").build()).await;
    let controller = env.controller(&["--resync-period=1s"]);
    controller.wait_ready().await;
    let done = eventually(CONVERGE, || async {
        let moved = ami_of(&env.machine_set("worker-a").await) == AMI_421_US_EAST_1;
        let c = env.condition("BootImageUpdateProgressing").await?;
        (moved && c["reason"] == "BootImagesCurrent").then_some(())
    })
    .await;
    assert!(done.is_some(), "{}", controller.log_tail(40));
    never_degraded(&log);
}

/// A restart during an upgrade that began while Progressing was already False (the usual case:
/// boot images were current) does not report the hold as too long at once, as it did when the
/// hold was dated from Progressing's `lastTransitionTime`, which moved only with its status,
/// long before. A hold already reported too long stays reported across a restart.
#[tokio::test]
async fn a_restart_during_a_hold_times_it_from_its_start_not_from_progressing() {
    const LIMIT: &str = "--hold-limit=10s";
    let env = TestEnv::new("hold-restart").await;
    env.aws_cluster("4.20.0", &stream_420(), None).await;
    env.apply(machine_set(&env.ns, "worker-a").build()).await;
    let mut first = env.controller(&[LIMIT]);
    first.wait_ready().await;
    let progressing = |reason: &'static str| {
        let env = &env;
        async move {
            let c = env.condition("BootImageUpdateProgressing").await?;
            (c["status"] == "False" && c["reason"] == reason).then_some(())
        }
    };
    let current = eventually(CONVERGE, || progressing("BootImagesCurrent")).await;
    assert!(current.is_some(), "{}", first.log_tail(30));
    // Progressing has been False for longer than the limit when the upgrade starts.
    tokio::time::sleep(Duration::from_secs(11)).await;
    env.apply(cluster_version(&env.singleton, "4.21.0", "Partial"))
        .await;
    env.apply(golden_config_map(&env.ns, "4.21.0", &stream_421()))
        .await;
    let held = eventually(CONVERGE, || progressing("ClusterUpgrading")).await;
    assert!(held.is_some(), "{}", first.log_tail(30));
    first.kill();

    let mut second = env.controller(&[LIMIT]);
    second.wait_ready().await;
    let first_report =
        eventually(CONVERGE, || hold_after_a_pass(&second, "ClusterUpgrading")).await;
    assert_eq!(first_report, Some(0.0), "{}", second.log_tail(30));
    let condition = env.condition(HELD_TOO_LONG).await.expect("HeldTooLong");
    assert_eq!(condition["status"], "False", "{condition}");

    // The hold outlasts its limit, and a restart then keeps it reported.
    let reported = eventually(CONVERGE, || async {
        let c = env.condition(HELD_TOO_LONG).await?;
        (c["status"] == "True").then_some(())
    })
    .await;
    assert!(reported.is_some(), "{}", second.log_tail(30));
    second.kill();
    let third = env.controller(&[LIMIT]);
    third.wait_ready().await;
    let still = eventually(CONVERGE, || hold_after_a_pass(&third, "ClusterUpgrading")).await;
    assert_eq!(still, Some(1.0), "{}", third.log_tail(30));
}
