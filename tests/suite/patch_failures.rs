//! A patch the API server refuses is reported, not retried in a tight loop: a failed `test` op
//! is a lost race (re-plan soon), but an object the patch would make invalid stays invalid.

use crate::support;

use std::path::PathBuf;
use std::time::Duration;

use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams};
use serde_json::{Value, json};
use support::fixtures::*;
use support::{TestEnv, audit_log, eventually, waits};

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

    // Degraded, a Warning Event and the error metric all say so.
    let reason = "PatchFailed";
    waits::assert_reported_as_error(
        &env,
        &controller,
        "crowded",
        reason,
        &["Too long"],
        "Too long",
    )
    .await;

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

/// When the controller logged each failed status write, from its log's timestamps.
fn status_failure_times(log: &str) -> Vec<jiff::Timestamp> {
    support::strip_ansi(log)
        .lines()
        .filter(|l| l.contains("could not write MachineConfiguration status"))
        .filter_map(|l| l.split_whitespace().next()?.parse().ok())
        .collect()
}

#[tokio::test]
async fn a_status_the_api_server_refuses_is_retried_with_backoff_then_written() {
    let env = TestEnv::new("status-refused").await;
    env.aws_cluster("4.21.0", &stream_421(), None).await;
    // An admission policy that refuses every status write to this test's MachineConfiguration,
    // as a webhook or an overloaded API server might.
    const ADMISSION: &str = "admissionregistration.k8s.io/v1";
    let policy = format!("refuse-status-{}", env.singleton);
    let refuse = format!("object.metadata.name != '{}'", env.singleton);
    env.apply(json!({
        "apiVersion": ADMISSION,
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": policy},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {"resourceRules": [{
                "apiGroups": ["operator.openshift.io"], "apiVersions": ["*"],
                "operations": ["UPDATE"], "resources": ["machineconfigurations/status"],
            }]},
            "validations": [{"expression": refuse, "message": "status writes refused by the test"}],
        },
    }))
    .await;
    env.apply(json!({
        "apiVersion": ADMISSION,
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": policy},
        "spec": {"policyName": policy, "validationActions": ["Deny"]},
    }))
    .await;
    // The policy takes effect a moment after it is created: wait until it refuses a status
    // patch that changes nothing.
    let resource = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("operator.openshift.io", "v1", "MachineConfiguration"),
        "machineconfigurations",
    );
    let configurations: Api<DynamicObject> = Api::all_with(env.client.clone(), &resource);
    let unchanged: json_patch::Patch = serde_json::from_value(
        json!([{"op": "test", "path": "/metadata/name", "value": env.singleton}]),
    )
    .unwrap();
    let refused = eventually(CONVERGE, || async {
        let patch = Patch::Json::<()>(unchanged.clone());
        let params = PatchParams::default();
        let sent = configurations.patch_status(&env.singleton, &params, &patch);
        sent.await.is_err().then_some(())
    })
    .await;
    assert!(refused.is_some(), "the admission policy never took effect");

    let controller = env.controller(&[]);
    let failures =
        r#"boot_image_controller_write_failures_total{target="MachineConfiguration/status"}"#;
    let third = eventually(CONVERGE, || async {
        (controller.metric(failures).await? >= 3.0).then_some(())
    })
    .await;
    assert!(third.is_some(), "{}", controller.log_tail(30));
    // Each retry waits twice as long as the one before (1 s, then 2 s), however many passes
    // run meanwhile.
    let times = status_failure_times(&controller.logs());
    assert!(times.len() >= 3, "{times:?}");
    let second_gap = times[2].duration_since(times[1]);
    assert!(
        second_gap >= jiff::SignedDuration::from_millis(1800),
        "third attempt {second_gap:#} after the second: {times:?}"
    );

    // Once the API server accepts it again, the status is written.
    env.delete(ADMISSION, "ValidatingAdmissionPolicyBinding", &policy)
        .await;
    env.delete(ADMISSION, "ValidatingAdmissionPolicy", &policy)
        .await;
    let written = eventually(CONVERGE, || async {
        env.condition("BootImageUpdateProgressing").await
    })
    .await;
    assert!(written.is_some(), "{}", controller.log_tail(30));
}
