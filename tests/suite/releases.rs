//! Each release's own API: the controller against the `MachineConfiguration` CRD that OpenShift
//! 4.16 to 4.22 serve (`fixtures/crds/releases/`, the Default feature set of each release).
//!
//! The CRD is cluster-wide, so each release gets a private control plane with that CRD installed
//! in place of the newest. On each one: a rollout, the conditions that report it, the status
//! fields the schema declares (and none it does not), the pause acknowledgement and the
//! stand-down beside another manager. A server-side apply with a field the schema does not
//! declare is refused whole, so on 4.17 to 4.21 a status that carried the newest fields wrote
//! no condition at all.

use crate::support;

use std::time::Duration;

use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, PostParams};
use serde_json::json;
use support::fixtures::*;
use support::private_cluster::PrivateCluster;
use support::{ControllerProcess, TestEnv, eventually};

const CONVERGE: Duration = Duration::from_secs(90);
const PAUSE: &str = "boot-image-controller.io/boot-image-updates-paused";

/// What a release's schema declares, as its CRD says (checked by the unit test of
/// `status_schema` against the same files).
struct Declared {
    managed_boot_images_status: bool,
    control_plane_managers: bool,
    skew_enforcement_status: bool,
}

fn declared(release: &str) -> Declared {
    let minor: u32 = release
        .strip_prefix("4.")
        .and_then(|m| m.parse().ok())
        .expect("a 4.x release");
    Declared {
        managed_boot_images_status: minor >= 19,
        control_plane_managers: minor >= 22,
        skew_enforcement_status: minor >= 22,
    }
}

async fn condition_is(env: &TestEnv, type_: &str, status: &str, reason: Option<&str>) -> bool {
    env.condition(type_)
        .await
        .is_some_and(|c| c["status"] == status && reason.is_none_or(|r| c["reason"] == r))
}

/// A condition write as another boot image manager (the MCO's controller) sends it: a PUT of
/// the whole status (`UpdateStatus`) under its own field manager, which then owns the fields
/// it changed.
async fn report_as_another_manager(env: &TestEnv) {
    let gvk = GroupVersionKind::gvk("operator.openshift.io", "v1", "MachineConfiguration");
    let resource = ApiResource::from_gvk_with_plural(&gvk, "machineconfigurations");
    let api: Api<DynamicObject> = Api::all_with(env.client.clone(), &resource);
    let params = PostParams {
        field_manager: Some("machine-config-controller".into()),
        ..PostParams::default()
    };
    let mut mc = api
        .get(&env.singleton)
        .await
        .expect("the MachineConfiguration");
    let conditions = mc.data["status"]["conditions"]
        .as_array_mut()
        .expect("conditions of ours");
    conditions.retain(|c| c["type"] != "BootImageUpdateDegraded");
    conditions.push(json!({"type": "BootImageUpdateDegraded", "status": "False",
        "reason": "MCOReports", "message": "written by the MCO",
        "lastTransitionTime": "2026-11-01T00:00:00Z"}));
    // A conflict (our own status write in between) is retried by the caller.
    let _ = api.replace_status(&env.singleton, &params, &mc).await;
}

async fn on_release(release: &str) {
    let Some(shared) = boot_image_controller::testkit::skips::shared_dir() else {
        return;
    };
    let crd = shared.join(format!(
        "fixtures/crds/releases/{release}/machineconfigurations.operator.openshift.io.yaml"
    ));
    let crd = crd.to_str().expect("a UTF-8 path");
    let name = format!("release-{}", release.replace('.', "-"));
    let cluster = PrivateCluster::up_with(&name, &[("BIC_MACHINECONFIGURATION_CRD", crd)]).await;
    let env = cluster.env("release").await;
    env.aws_cluster("4.21.0", &stream_421(), None).await;
    env.apply(machine_set(&env.ns, "worker-a").build()).await;
    let mut flags = env.controller_flags_with(&cluster.kubeconfig);
    flags.push("--resync-period=2s".into());
    let controller = ControllerProcess::spawn(&name, &flags);
    controller.wait_ready().await;

    // A rollout, and the conditions that say it is done.
    let done = eventually(CONVERGE, || async {
        let moved = ami_of(&env.machine_set("worker-a").await) == AMI_421_US_EAST_1;
        let current = condition_is(
            &env,
            "BootImageUpdateProgressing",
            "False",
            Some("BootImagesCurrent"),
        )
        .await;
        let healthy = condition_is(&env, "BootImageUpdateDegraded", "False", None).await;
        (moved && current && healthy).then_some(())
    })
    .await;
    assert!(
        done.is_some(),
        "{release}: no rollout reported; status {}\n{}",
        env.machine_configuration().await["status"],
        controller.log_tail(30)
    );

    // The status fields this release declares, and only those.
    let expected = declared(release);
    let status = eventually(CONVERGE, || async {
        let status = env.machine_configuration().await["status"].clone();
        let complete = status.get("managedBootImagesStatus").is_some()
            == expected.managed_boot_images_status
            && status.get("bootImageSkewEnforcementStatus").is_some()
                == expected.skew_enforcement_status;
        complete.then_some(status)
    })
    .await
    .unwrap_or_else(|| {
        panic!(
            "{release}: status fields not as the schema declares:\n{}",
            controller.log_tail(30)
        )
    });
    let resources: Vec<&str> = status["managedBootImagesStatus"]["machineManagers"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|m| m["resource"].as_str())
        .collect();
    if expected.managed_boot_images_status {
        assert!(resources.contains(&"machinesets"), "{release}: {status}");
    }
    assert_eq!(
        resources.contains(&"controlplanemachinesets"),
        expected.control_plane_managers,
        "{release}: {status}"
    );
    if expected.skew_enforcement_status {
        let mode = &status["bootImageSkewEnforcementStatus"]["mode"];
        assert!(mode.is_string(), "{release}: {status}");
    }

    // The pause is acknowledged, and lifted.
    for (pause, status) in [(Some("true"), "True"), (None, "False")] {
        env.annotate_machine_configuration(PAUSE, pause).await;
        let acknowledged = eventually(CONVERGE, || async {
            condition_is(&env, "BootImageUpdatePaused", status, None)
                .await
                .then_some(())
        })
        .await;
        assert!(
            acknowledged.is_some(),
            "{release}: BootImageUpdatePaused never {status}"
        );
    }

    // Beside another manager we stand down, and say so. The other manager writes again until
    // we do, as the MCO's controller does on every sync: a status apply of ours still in flight
    // may take its first write over.
    let mut stood_down = None;
    let deadline = tokio::time::Instant::now() + CONVERGE;
    while stood_down.is_none() && tokio::time::Instant::now() < deadline {
        report_as_another_manager(&env).await;
        stood_down = eventually(Duration::from_secs(3), || async {
            let c = env.condition("BootImageControllerStoodDown").await?;
            (c["status"] == "True").then_some(c)
        })
        .await;
    }
    assert!(
        stood_down.is_some(),
        "{release}: no stand-down reported:\n{}",
        controller.log_tail(30)
    );
    assert!(
        !controller
            .logs()
            .contains("could not write MachineConfiguration status"),
        "{release}: a status write failed:\n{}",
        controller.log_tail(30)
    );
}

macro_rules! releases {
    ($($test:ident: $release:literal),+ $(,)?) => {
        $(
            #[tokio::test]
            async fn $test() {
                on_release($release).await;
            }
        )+
    };
}

releases! {
    conditions_rollout_pause_and_stand_down_on_4_16: "4.16",
    conditions_rollout_pause_and_stand_down_on_4_17: "4.17",
    conditions_rollout_pause_and_stand_down_on_4_18: "4.18",
    conditions_rollout_pause_and_stand_down_on_4_19: "4.19",
    conditions_rollout_pause_and_stand_down_on_4_20: "4.20",
    conditions_rollout_pause_and_stand_down_on_4_21: "4.21",
    conditions_rollout_pause_and_stand_down_on_4_22: "4.22",
}
