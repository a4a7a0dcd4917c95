//! Holds that never end are failures: a gate that keeps holding writes past
//! `--hold-degrade-after` is reported as Degraded, with a metric, and clears when the gate does.

use crate::support;

use std::time::Duration;

use serde_json::Value;
use support::fixtures::*;
use support::{TestEnv, eventually};

const CONVERGE: Duration = Duration::from_secs(60);
const DEGRADED: &str = "BootImageUpdateDegraded";
const EXCEEDED: &str = "boot_image_controller_hold_exceeded{reason=\"ReleaseMismatch\"}";

async fn degraded(env: &TestEnv) -> Option<Value> {
    env.condition(DEGRADED).await
}

#[tokio::test]
async fn a_release_mismatch_that_outlasts_the_limit_degrades_until_it_clears() {
    let env = TestEnv::new("hold-lasts").await;
    // The golden ConfigMap is for 4.21.0 but the cluster runs 4.20.0 and stays there, as with
    // a ConfigMap from a snapshot build that never matches.
    env.aws_cluster("4.20.0", &stream_420(), None).await;
    env.apply(golden_config_map(&env.ns, "4.21.0", &stream_421()))
        .await;
    env.apply(machine_set(&env.ns, "worker-a").build()).await;
    let controller = env.controller(&["--hold-degrade-after=3s"]);
    controller.wait_ready().await;

    let report = eventually(CONVERGE, || async {
        let c = degraded(&env).await?;
        (c["status"] == "True" && c["reason"] == "ReleaseMismatch").then_some(c)
    })
    .await
    .unwrap_or_else(|| panic!("never degraded:\n{}", controller.log_tail(40)));
    let message = report["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("held for") && message.contains("longer than 3s"),
        "{message}"
    );
    let exported = eventually(CONVERGE, || async {
        (controller.metric(EXCEEDED).await == Some(1.0)).then_some(())
    })
    .await;
    assert!(exported.is_some(), "{}", controller.metrics().await);
    // Nothing was written while held.
    assert_eq!(
        ami_of(&env.machine_set("worker-a").await),
        AMI_420_US_EAST_1
    );

    // The cluster catches up: the hold clears, and with it the failure.
    env.upgrade("4.21.0", &stream_421()).await;
    let cleared = eventually(CONVERGE, || async {
        let c = degraded(&env).await?;
        (c["status"] == "False").then_some(())
    })
    .await;
    assert!(cleared.is_some(), "{:?}", degraded(&env).await);
    assert_eq!(controller.metric(EXCEEDED).await, Some(0.0));
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
