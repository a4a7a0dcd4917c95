//! A patch the API server refuses is reported, not retried in a tight loop: a failed `test` op
//! is a lost race (re-plan soon), but an object the patch would make invalid stays invalid.

use crate::support;

use std::path::{Path, PathBuf};
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

/// The API group of admission policies.
const ADMISSION: &str = "admissionregistration.k8s.io/v1";

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
    let policy = format!("refuse-status-{}", env.singleton);
    let refuse = format!("object.metadata.name != '{}'", env.singleton);
    refuse_status_writes(&env, &policy, &refuse, "status writes refused by the test").await;
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
        (status_failure_times(&controller.logs()).len() >= 3).then_some(())
    })
    .await;
    assert!(third.is_some(), "{}", controller.log_tail(30));
    let counted = controller.metric(failures).await.unwrap_or_default();
    assert!(counted >= 3.0, "{counted} failed status writes counted");
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

/// This controller's requests the API server answered, as its audit log has them (metadata
/// only: see hack/local-cluster.sh), oldest first.
fn controller_requests(log: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    text.lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|e| {
            e["stage"] == "ResponseComplete"
                && (e["userAgent"].as_str())
                    .is_some_and(|a| a.starts_with("boot-image-controller/"))
        })
        .collect()
}

/// When the API server answered each status patch of `name` with `code`.
fn status_patches(events: &[Value], name: &str, code: u16) -> Vec<jiff::Timestamp> {
    (events.iter())
        .filter(|e| {
            e["verb"] == "patch"
                && e["objectRef"]["resource"] == "machineconfigurations"
                && e["objectRef"]["subresource"] == "status"
                && e["objectRef"]["name"] == name
                && e["responseStatus"]["code"] == code
        })
        .filter_map(|e| e["stageTimestamp"].as_str()?.parse().ok())
        .collect()
}

#[tokio::test]
async fn boot_image_fields_the_api_server_refuses_back_off_and_the_schema_is_not_read_again() {
    let env = TestEnv::new("fields-refused").await;
    let Some(log) = audit_log() else { return };
    let policy = std::fs::read_to_string(log.with_file_name("audit-policy.yaml")).unwrap();
    if !policy.contains("machineconfigurations/status") {
        boot_image_controller::testkit::skips::skip(
            "the local control plane's audit policy predates status writes: restart it \
             (hack/local-cluster.sh down)",
        );
        return;
    }
    env.aws_cluster("4.21.0", &stream_421(), None).await;
    // An admission policy that refuses the boot-image fields, and only them, as a policy of
    // the cluster's (or a schema this controller misread) might.
    let policy = format!("refuse-fields-{}", env.singleton);
    let allow = format!(
        "object.metadata.name != '{}' || !has(object.status) || \
         !has(object.status.managedBootImagesStatus)",
        env.singleton
    );
    refuse_status_writes(
        &env,
        &policy,
        &allow,
        "boot-image fields refused by the test",
    )
    .await;
    // The policy takes effect a moment after it is created: wait until it refuses a dry run
    // that adds the field.
    let resource = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("operator.openshift.io", "v1", "MachineConfiguration"),
        "machineconfigurations",
    );
    let configurations: Api<DynamicObject> = Api::all_with(env.client.clone(), &resource);
    let adding = json!({"status": {"managedBootImagesStatus": {"machineManagers": [
        {"resource": "machinesets", "apiGroup": "machine.openshift.io", "selection": {"mode": "All"}},
    ]}}});
    let refused = eventually(CONVERGE, || async {
        let patch = Patch::Merge(&adding);
        let params = PatchParams::default().dry_run();
        let sent = configurations.patch_status(&env.singleton, &params, &patch);
        let error = sent.await.err()?;
        error
            .to_string()
            .contains("refused by the test")
            .then_some(())
    })
    .await;
    assert!(refused.is_some(), "the admission policy never took effect");

    // A pass every 200 ms: without a memory of the refusal, each would send the fields again.
    let controller = env.controller(&["--resync-period=200ms"]);
    let four = eventually(CONVERGE, || async {
        let events = controller_requests(&log);
        (status_patches(&events, &env.singleton, 422).len() >= 4).then_some(events)
    })
    .await;
    let events = four.unwrap_or_else(|| panic!("{}", controller.log_tail(30)));
    let refusals = status_patches(&events, &env.singleton, 422);
    // Each refused write waits twice as long as the one before: 1 s, 2 s, 4 s.
    for (i, pair) in refusals.windows(2).take(3).enumerate() {
        let gap = pair[1].duration_since(pair[0]);
        let backoff = jiff::SignedDuration::from_millis(900 << i);
        assert!(
            gap >= backoff,
            "refusal {} after {gap:#}: {refusals:?}",
            i + 2
        );
    }
    // The conditions went alone once; after that they had not changed, and were not sent again.
    let accepted = status_patches(&events, &env.singleton, 200);
    assert!(!accepted.is_empty(), "the conditions were never written");
    let again: Vec<_> = (accepted.iter()).filter(|t| **t > refusals[1]).collect();
    assert!(
        again.is_empty(),
        "unchanged conditions sent again: {again:?}"
    );
    // The schema's document was read once: a refusal reads the small index, which says the
    // schema has not changed.
    let logs = support::strip_ansi(&controller.logs());
    let documents = (logs.lines())
        .filter(|l| l.contains("read the served schema's OpenAPI document"))
        .count();
    assert_eq!(
        documents,
        1,
        "OpenAPI document reads\n{}",
        controller.log_tail(30)
    );

    // Once the API server accepts them again, the fields are written.
    env.delete(ADMISSION, "ValidatingAdmissionPolicyBinding", &policy)
        .await;
    env.delete(ADMISSION, "ValidatingAdmissionPolicy", &policy)
        .await;
    let written = eventually(Duration::from_secs(120), || async {
        let mc = env.machine_configuration().await;
        mc["status"].get("managedBootImagesStatus").cloned()
    })
    .await;
    assert!(written.is_some(), "{}", controller.log_tail(30));
}

/// An admission policy `policy`, bound, that refuses every write to a MachineConfiguration's
/// status for which `allow` (CEL) is false, with `message`.
async fn refuse_status_writes(env: &TestEnv, policy: &str, allow: &str, message: &str) {
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
            "validations": [{"expression": allow, "message": message}],
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
}
