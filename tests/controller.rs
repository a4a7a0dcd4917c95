//! The controller against a real kube-apiserver: each test builds a simulated OpenShift-on-AWS
//! cluster in its own namespace and runs `boot-image-controller run` as a process.

mod support;

use std::time::Duration;

use serde_json::json;
use support::fixtures::*;
use support::{TestEnv, eventually, sample};

const CONVERGE: Duration = Duration::from_secs(60);

/// Waits until the MachineSet's AMI is `ami`.
async fn wait_for_ami(env: &TestEnv, name: &str, ami: &str) -> serde_json::Value {
    let found = eventually(CONVERGE, || async {
        let ms = env.machine_set(name).await;
        (ami_of(&ms) == ami).then_some(ms)
    })
    .await;
    found.unwrap_or_else(|| panic!("{name} never reached {ami}"))
}

async fn wait_for_condition(
    env: &TestEnv,
    type_: &str,
    status: &str,
    reason: Option<&str>,
) -> serde_json::Value {
    let found = eventually(CONVERGE, || async {
        let c = env.condition(type_).await?;
        (c["status"] == status && reason.is_none_or(|r| c["reason"] == r)).then_some(c)
    })
    .await;
    let current = env.condition(type_).await;
    found.unwrap_or_else(|| panic!("{type_} never became {status} {reason:?}; now {current:?}"))
}

#[tokio::test]
async fn upgrade_rolls_the_new_golden_image_out() {
    let env = TestEnv::new("upgrade").await;
    env.aws_cluster("4.20.0", &stream_420(), None).await;
    env.apply(machine_set(&env.ns, "worker-a").build()).await;
    let before = env.machine_set("worker-a").await;

    let controller = env.controller(&[]);
    controller.wait_ready().await;
    // At 4.20 the image is current; only the stub secret moves to the managed one.
    let managed = eventually(CONVERGE, || async {
        let ms = env.machine_set("worker-a").await;
        (secret_of(&ms) == "worker-user-data-managed").then_some(ms)
    })
    .await
    .expect("stub secret switched to the managed one");
    assert_eq!(ami_of(&managed), AMI_420_US_EAST_1);

    // The upgrade completes and the MCO publishes 4.21's boot images.
    env.apply(cluster_version(&env.singleton, "4.21.0", "Completed"))
        .await;
    env.apply(golden_config_map(&env.ns, "4.21.0", &stream_421()))
        .await;
    let after = wait_for_ami(&env, "worker-a", AMI_421_US_EAST_1).await;

    // Everything else in providerSpec is untouched, byte for byte (nulls included).
    let strip = |ms: &serde_json::Value| {
        let mut spec = ms
            .pointer("/spec/template/spec/providerSpec/value")
            .unwrap()
            .clone();
        spec["ami"] = json!(null);
        spec["userDataSecret"] = json!(null);
        spec
    };
    assert_eq!(strip(&before), strip(&after));
    // Both changes are recorded on the object.
    let history = after["metadata"]["annotations"]["boot-image-controller.io/history"]
        .as_str()
        .expect("history annotation");
    assert!(
        history.contains(AMI_420_US_EAST_1) && history.contains("4.21.0"),
        "{history}"
    );
    assert!(history.contains("worker-user-data-managed"), "{history}");

    let progressing = wait_for_condition(
        &env,
        "BootImageUpdateProgressing",
        "False",
        Some("BootImagesCurrent"),
    )
    .await;
    assert!(
        progressing["message"]
            .as_str()
            .unwrap()
            .contains("1 up to date"),
        "{progressing}"
    );
    wait_for_condition(&env, "BootImageUpdateDegraded", "False", None).await;

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

    let metrics = controller.metrics().await;
    assert_eq!(
        sample(
            &metrics,
            r#"boot_image_controller_patches_total{kind="MachineSet",result="updated"}"#
        ),
        Some(2.0),
        "{metrics}"
    );
}
