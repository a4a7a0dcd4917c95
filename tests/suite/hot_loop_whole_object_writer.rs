//! The hot-loop guard against a writer that replaces whole objects (a PUT of its own copy, as a
//! GitOps sync does): every revert erases the annotation in which the controller counts its
//! patches, so only the controller's own memory can tell that it is fighting.

use crate::support;

use std::time::Duration;

use boot_image_controller::machine_kind::MachineKind;
use boot_image_controller::names::OPT_OUT_ANNOTATION as OPT_OUT;
use kube::api::{Api, DynamicObject, PostParams};
use serde_json::Value;
use support::fixtures::*;
use support::{TestEnv, eventually, waits};

const CONVERGE: Duration = Duration::from_secs(60);
const HOT_LOOPS: &str = r#"boot_image_controller_hot_loops_total{kind="MachineSet"}"#;

/// Puts `original` back over the live object, whole: our annotations and image are gone.
async fn replace_whole(api: &Api<DynamicObject>, original: &Value) {
    let live = api.get("fought").await.expect("get");
    let mut copy: DynamicObject = serde_json::from_value(original.clone()).expect("an object");
    copy.metadata.resource_version = live.metadata.resource_version.clone();
    copy.metadata.managed_fields = None;
    api.replace("fought", &PostParams::default(), &copy)
        .await
        .expect("replace");
}

#[tokio::test]
async fn a_writer_that_replaces_whole_objects_is_fought_only_up_to_the_threshold() {
    let env = TestEnv::new("hotloop-replace").await;
    env.aws_cluster("4.21.0", &stream_421(), None).await;
    env.remember_images(&AMIS_420).await;
    env.apply(
        machine_set(&env.ns, "fought")
            .user_data("worker-user-data-managed")
            .build(),
    )
    .await;
    let original = env.machine_set("fought").await;
    let api: Api<DynamicObject> = Api::namespaced_with(
        env.client.clone(),
        &env.ns,
        &MachineKind::MachineSet.api_resource(),
    );
    let controller = env.controller(&[]);
    controller.wait_ready().await;

    // Each time the controller moves it to 4.21, the other writer puts its copy back. Without a
    // memory beyond the annotation, this would go on for ever.
    let mut reverts = 0;
    let stopped = loop {
        let seen = eventually(CONVERGE, || async {
            if controller.metric(HOT_LOOPS).await == Some(1.0) {
                return Some(true);
            }
            (ami_of(&env.machine_set("fought").await) == AMI_421_US_EAST_1).then_some(false)
        })
        .await
        .unwrap_or_else(|| panic!("neither patched nor stopped:\n{}", controller.log_tail(30)));
        if seen {
            break true;
        }
        assert!(
            reverts < 10,
            "still fighting after {reverts} whole-object reverts"
        );
        replace_whole(&api, &original).await;
        reverts += 1;
    };
    assert!(stopped);
    // Three patches (the default threshold), three reverts; the third one stands.
    assert_eq!(reverts, 3, "{}", controller.log_tail(30));
    let ms = env.machine_set("fought").await;
    assert_eq!(
        ami_of(&ms),
        AMI_420_US_EAST_1,
        "the last revert is not fought"
    );
    // The metric moves when the pass ends; the condition is written just after it.
    waits::wait_for_message(
        &env,
        &[&controller],
        "BootImageUpdateDegraded",
        &["keeps reverting"],
    )
    .await;

    // The other writer has stopped. The runbook's reset: opt out, wait until the controller has
    // cleared its guard (Degraded no longer names the MachineSet), opt back in. The guard's
    // memory of its own patches must go with the opt-out too: the annotation alone, already
    // erased by the writer, would not reset it.
    env.annotate_machine_set("fought", OPT_OUT, Some("disabled"))
        .await;
    let c = [&controller];
    waits::wait_for_condition(&env, &c, "BootImageUpdateDegraded", "False", None).await;
    env.annotate_machine_set("fought", OPT_OUT, None).await;
    waits::wait_for_ami(&env, &c, "fought", AMI_421_US_EAST_1).await;
}
