//! The controller asks the API server only for the stub secrets that selected objects point at,
//! and stops watching one when no selected object needs it any more. It used to open a watch
//! for the stub of every MachineSet, selected or not, and keep it for ever.
//!
//! What the controller asked for is read from its own debug log, where kube's client names
//! every request it sends (`http.url=...`).

use crate::support;

use std::time::Duration;

use serde_json::json;
use support::fixtures::*;
use support::{ControllerProcess, TestEnv, eventually, strip_ansi};

const CONVERGE: Duration = Duration::from_secs(60);
const SELECTED_STUB: &str = "worker-user-data";
const UNSELECTED_STUB: &str = "infra-user-data";

/// How many requests (lists and watches) for the secret `name` the controller has sent.
fn requests_for_secret(controller: &ControllerProcess, name: &str) -> usize {
    let by_name = format!("/secrets?&fieldSelector=metadata.name%3D{name}");
    strip_ansi(&controller.logs())
        .lines()
        .filter(|l| l.contains("requesting") && l.contains(&by_name))
        .count()
}

fn log_mentions(controller: &ControllerProcess, words: &[&str]) -> bool {
    strip_ansi(&controller.logs())
        .lines()
        .any(|l| words.iter().all(|w| l.contains(w)))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_stub_secrets_of_selected_machine_sets_are_watched_and_unneeded_ones_are_dropped()
{
    let env = TestEnv::new("secret-watches").await;
    let only_labelled = json!({"matchLabels": {"boot-images": "managed"}});
    env.aws_cluster(
        "4.21.0",
        &stream_421(),
        Some(selection("Partial", Some(only_labelled))),
    )
    .await;
    env.remember_images(&AMIS_420).await;
    env.apply(
        machine_set(&env.ns, "chosen")
            .label("boot-images", "managed")
            .user_data("worker-user-data")
            .build(),
    )
    .await;
    env.apply(
        machine_set(&env.ns, "left-alone")
            .user_data("infra-user-data")
            .build(),
    )
    .await;
    let controller = env.controller(&[]);
    controller.wait_ready().await;

    // The pass that patched `chosen` had checked its stub, so it had watched it; any watch for
    // the other stub would have been started in the same step.
    let patched = eventually(CONVERGE, || async {
        (ami_of(&env.machine_set("chosen").await) == AMI_421_US_EAST_1).then_some(())
    })
    .await;
    assert!(patched.is_some(), "{}", controller.log_tail(30));
    assert!(
        requests_for_secret(&controller, SELECTED_STUB) >= 1,
        "{}",
        controller.log_tail(30)
    );
    assert_eq!(
        requests_for_secret(&controller, UNSELECTED_STUB),
        0,
        "asked for the stub secret of a MachineSet that is not selected"
    );
    assert_eq!(
        secret_of(&env.machine_set("left-alone").await),
        "infra-user-data"
    );

    // Nothing selected any more: the watch of the selected stub is dropped.
    env.narrow_selection(selection("None", None)).await;
    let dropped = eventually(CONVERGE, || async {
        log_mentions(
            &controller,
            &["no longer watching a stub secret", SELECTED_STUB],
        )
        .then_some(())
    })
    .await;
    assert!(dropped.is_some(), "{}", controller.log_tail(30));

    // Everything selected: now the other stub is needed, and watched.
    env.select(Some(selection("All", None))).await;
    let watched = eventually(CONVERGE, || async {
        (requests_for_secret(&controller, UNSELECTED_STUB) >= 1).then_some(())
    })
    .await;
    assert!(watched.is_some(), "{}", controller.log_tail(30));
}
