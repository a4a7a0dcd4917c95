//! Waiting for what a user would see (an AMI, a condition, an Event, a metric), and the
//! assertions built on it, shared by the integration tests. A wait that times out fails with
//! the controllers' log tails.

use std::future::Future;
use std::time::Duration;

use serde_json::Value;

use super::fixtures::{ami_of, secret_of};
use super::{ControllerProcess, TestEnv, eventually};

pub const CONVERGE: Duration = Duration::from_secs(45);
pub const PROGRESSING: &str = "BootImageUpdateProgressing";
pub const DEGRADED: &str = "BootImageUpdateDegraded";
pub const PAUSED: &str = "BootImageUpdatePaused";
pub const MACHINE_SET_WRITES: &str = r#"boot_image_controller_writes_total{target="MachineSet"}"#;
pub const PATCHES_UPDATED: &str =
    r#"boot_image_controller_patches_total{kind="MachineSet",result="updated"}"#;

/// The log tails of the controllers involved, for failure messages.
pub fn tails(controllers: &[&ControllerProcess]) -> String {
    controllers
        .iter()
        .map(|c| c.log_tail(40))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Waits up to `timeout` until `check` finds something; otherwise fails the test with what
/// `explain` says about the present state and the controllers' log tails.
pub async fn converge<T, F, Fut>(
    controllers: &[&ControllerProcess],
    timeout: Duration,
    check: F,
    explain: impl AsyncFnOnce() -> String,
) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    match eventually(timeout, check).await {
        Some(found) => found,
        None => panic!("{}\n{}", explain().await, tails(controllers)),
    }
}

/// Waits until the MachineSet's AMI is `ami`.
pub async fn wait_for_ami(
    env: &TestEnv,
    controllers: &[&ControllerProcess],
    name: &str,
    ami: &str,
) -> Value {
    let check = || async {
        let ms = env.machine_set(name).await;
        (ami_of(&ms) == ami).then_some(ms)
    };
    converge(controllers, CONVERGE, check, async || {
        let now = ami_of(&env.machine_set(name).await).to_string();
        format!("{name} never reached {ami}; it has {now}")
    })
    .await
}

/// Waits until the MachineSet boots `ami`, still naming the stub secret it named before (the
/// controller never renames one).
pub async fn wait_for_golden(
    env: &TestEnv,
    controllers: &[&ControllerProcess],
    name: &str,
    ami: &str,
) -> Value {
    let stub = secret_of(&env.machine_set(name).await).to_string();
    let check = || async {
        let ms = env.machine_set(name).await;
        (ami_of(&ms) == ami && secret_of(&ms) == stub).then_some(ms)
    };
    converge(controllers, CONVERGE, check, async || {
        let ms = env.machine_set(name).await;
        let (now, secret) = (ami_of(&ms), secret_of(&ms));
        format!("{name} never reached {ami} with {stub}; it has {now} with {secret}")
    })
    .await
}

/// Waits until the condition has `status` (and `reason`, if given).
pub async fn wait_for_condition(
    env: &TestEnv,
    controllers: &[&ControllerProcess],
    type_: &str,
    status: &str,
    reason: Option<&str>,
) -> Value {
    let check = || async {
        let c = env.condition(type_).await?;
        (c["status"] == status && reason.is_none_or(|r| c["reason"] == r)).then_some(c)
    };
    converge(controllers, CONVERGE, check, async || {
        let now = env.condition(type_).await;
        format!("{type_} never became {status} {reason:?}; now {now:?}")
    })
    .await
}

/// Waits until the condition's message contains every one of `parts`.
pub async fn wait_for_message(
    env: &TestEnv,
    controllers: &[&ControllerProcess],
    type_: &str,
    parts: &[&str],
) -> Value {
    let check = || async {
        let c = env.condition(type_).await?;
        let message = c["message"].as_str().unwrap_or_default();
        parts.iter().all(|p| message.contains(p)).then_some(c)
    };
    converge(controllers, CONVERGE, check, async || {
        let now = env.condition(type_).await;
        format!("the {type_} message never contained {parts:?}; now {now:?}")
    })
    .await
}

/// Waits until a metric sample satisfies `ok`; returns its value.
pub async fn wait_for_metric(
    controller: &ControllerProcess,
    series: &str,
    timeout: Duration,
    ok: impl Fn(f64) -> bool,
) -> f64 {
    let check = || async { controller.metric(series).await.filter(|v| ok(*v)) };
    converge(&[controller], timeout, check, async || {
        let now = controller.metric(series).await;
        format!("{series} never reached the expected value; now {now:?}")
    })
    .await
}

/// Waits until a Warning or Normal Event with `reason` exists for the MachineSet.
pub async fn wait_for_event(
    env: &TestEnv,
    controllers: &[&ControllerProcess],
    name: &str,
    type_: &str,
    reason: &str,
) -> Value {
    let check = || async {
        env.events_for(name)
            .await
            .into_iter()
            .find(|e| e["type"] == type_ && e["reason"] == reason)
    };
    converge(controllers, CONVERGE, check, async || {
        let events: Vec<_> = env
            .events_for(name)
            .await
            .iter()
            .map(|e| (e["type"].clone(), e["reason"].clone()))
            .collect();
        format!("no {type_} Event {reason} for {name}; its Events: {events:?}")
    })
    .await
}

/// Asserts the MachineSet is reported as an error with `reason` everywhere a user looks: the
/// Degraded condition names it (with each of `message_parts`), a Warning Event on it has a note
/// containing `note_part`, and its `mcc_bootimage_update_error` series is 1.
pub async fn assert_reported_as_error(
    env: &TestEnv,
    ctl: &ControllerProcess,
    name: &str,
    reason: &str,
    message_parts: &[&str],
    note_part: &str,
) {
    let c = [ctl];
    let degraded = wait_for_condition(env, &c, DEGRADED, "True", Some(reason)).await;
    let message = degraded["message"].as_str().unwrap_or_default();
    assert!(
        message.contains(&format!("{}/{name} {reason}", env.ns))
            && message_parts.iter().all(|part| message.contains(part)),
        "{message}"
    );
    let event = wait_for_event(env, &c, name, "Warning", reason).await;
    assert!(
        event["note"]
            .as_str()
            .unwrap_or_default()
            .contains(note_part),
        "{event}"
    );
    let series = format!(r#"mcc_bootimage_update_error{{machineset="{name}"}}"#);
    wait_for_metric(ctl, &series, CONVERGE, |v| v == 1.0).await;
}
