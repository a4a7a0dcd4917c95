//! Holds that never end are failures: a gate that keeps holding writes past
//! `--hold-degrade-after` is reported as Degraded, with a metric, and clears when the gate does.

mod support;

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
