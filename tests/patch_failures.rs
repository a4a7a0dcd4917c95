//! A patch the API server refuses is reported, not retried in a tight loop: a failed `test` op
//! is a lost race (re-plan soon), but an object the patch would make invalid stays invalid.

mod support;

use std::path::PathBuf;
use std::time::Duration;

use serde_json::Value;
use support::fixtures::*;
use support::{TestEnv, audit_log, eventually};

const CONVERGE: Duration = Duration::from_secs(60);

/// The stage timestamps of every PATCH of `name` in `namespace` the API server answered.
fn patch_times(log: &PathBuf, namespace: &str, name: &str) -> Vec<jiff::Timestamp> {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    text.lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|e| {
            e["verb"] == "patch"
                && e["stage"] == "ResponseComplete"
                && e["objectRef"]["namespace"] == namespace
                && e["objectRef"]["name"] == name
                && e["userAgent"]
                    .as_str()
                    .is_some_and(|a| a.starts_with("boot-image-controller/"))
        })
        .filter_map(|e| e["stageTimestamp"].as_str()?.parse().ok())
        .collect()
}

#[tokio::test]
async fn a_patch_the_api_server_rejects_as_invalid_is_reported_and_backed_off() {
    let Some(log) = audit_log() else { return };
    let env = TestEnv::new("rejected").await;
    env.aws_cluster("4.21.0", &stream_421(), None).await;
    env.remember_images(&AMIS_420).await;
    // Annotations just under the API's 256 KiB limit: ours would push them over.
    let filler = "x".repeat(262_050);
    env.apply(
        machine_set(&env.ns, "crowded")
            .annotate("example.com/filler", &filler)
            .build(),
    )
    .await;
    let controller = env.controller(&[]);
    controller.wait_ready().await;

    let degraded = eventually(CONVERGE, || async {
        let c = env.condition("BootImageUpdateDegraded").await?;
        (c["reason"] == "PatchFailed").then_some(c)
    })
    .await
    .unwrap_or_else(|| panic!("never reported:\n{}", controller.log_tail(30)));
    let message = degraded["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("crowded") && message.contains("Too long"),
        "{message}"
    );

    // Retried with backoff, not every half second: wait for the second attempt and look at
    // when the API server saw each.
    let failed = r#"boot_image_controller_patches_total{kind="MachineSet",result="failed"}"#;
    let second = eventually(CONVERGE, || async {
        (controller.metric(failed).await? >= 2.0).then_some(())
    })
    .await;
    assert!(second.is_some(), "{}", controller.log_tail(30));
    let times = patch_times(&log, &env.ns, "crowded");
    assert!(times.len() >= 2, "{times:?}");
    let gap = times[1].duration_since(times[0]);
    assert!(
        gap >= jiff::SignedDuration::from_millis(900),
        "retried after {gap:#}"
    );
    // Nothing was written.
    let ms = env.machine_set("crowded").await;
    assert_eq!(ami_of(&ms), AMI_420_US_EAST_1);
}
