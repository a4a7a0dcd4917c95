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

use boot_image_controller::names::OPT_IN_ANNOTATION;
use boot_image_controller::plan::selection::OPT_IN_COMMAND;
use boot_image_controller::testkit::provider_specs::{azure, azure_marketplace};
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, PostParams};
use serde_json::json;
use support::fixtures::*;
use support::private_cluster::PrivateCluster;
use support::{ControllerProcess, TestEnv, eventually, plan_json};

const CONVERGE: Duration = Duration::from_secs(90);
const PAUSE: &str = "boot-image-controller.io/boot-image-updates-paused";

/// What a release's schema declares, as its CRD says (checked by the unit test of
/// `status::served_schema` against the same files).
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

/// A status write as the MCO's operator and controller send it: a GET, then a PUT of the whole
/// status (`UpdateStatus`) under the manager their client names, retried on a conflict
/// (`retry.RetryOnConflict` in `syncMachineConfiguration`, pkg/operator/sync.go, and in
/// `updateMachineConfigurationStatus`, pkg/controller/bootimage/boot_image_controller.go,
/// release-4.21). The manager then owns the fields whose values it changed.
async fn put_status_as(env: &TestEnv, manager: &str, edit: impl Fn(&mut serde_json::Value)) {
    let gvk = GroupVersionKind::gvk("operator.openshift.io", "v1", "MachineConfiguration");
    let resource = ApiResource::from_gvk_with_plural(&gvk, "machineconfigurations");
    let api: Api<DynamicObject> = Api::all_with(env.client.clone(), &resource);
    let params = PostParams {
        field_manager: Some(manager.into()),
        ..PostParams::default()
    };
    for _ in 0..20 {
        let mut mc = api
            .get(&env.singleton)
            .await
            .expect("the MachineConfiguration");
        edit(&mut mc.data["status"]);
        match api.replace_status(&env.singleton, &params, &mc).await {
            Ok(_) => return,
            Err(kube::Error::Api(e)) if e.code == 409 => continue,
            Err(e) => panic!("status write as {manager}: {e}"),
        }
    }
    panic!("status write as {manager}: conflicts all along");
}

/// Puts the condition of `type_` into `status` as the MCO's controller writes it.
fn set_condition(status: &mut serde_json::Value, type_: &str, reason: &str, message: &str) {
    let conditions = status["conditions"].as_array_mut().expect("conditions");
    conditions.retain(|c| c["type"] != type_);
    conditions.push(json!({"type": type_, "status": "False", "reason": reason,
        "message": message, "lastTransitionTime": "2026-11-01T00:00:00Z"}));
}

/// A condition write as another boot image manager (the MCO's controller) sends it.
async fn report_as_another_manager(env: &TestEnv) {
    put_status_as(env, "machine-config-controller", |status| {
        set_condition(
            status,
            "BootImageUpdateDegraded",
            "MCOReports",
            "written by the MCO",
        )
    })
    .await;
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

/// The effective selection as the MCO's operator publishes it: MachineSets only (the 4.21
/// Default feature set has no `ManagedBootImagesCPMS`: openshift/api features/features.go).
fn published_selection(mode: &str) -> serde_json::Value {
    json!({"machineManagers": [machine_manager("machinesets", json!({"mode": mode}))]})
}

/// Installed on a release where the MCO updates no boot image by default (4.16, whose API server
/// prunes `spec.managedBootImages`), the controller writes no MachineSet until the administrator
/// opts in, and says how in the conditions; the opt-in, by label selector, is our annotation.
#[tokio::test]
async fn on_4_16_nothing_is_written_until_an_opt_in_by_label() {
    let Some(shared) = boot_image_controller::testkit::skips::shared_dir() else {
        return;
    };
    let crd =
        shared.join("fixtures/crds/releases/4.16/machineconfigurations.operator.openshift.io.yaml");
    let crd = crd.to_str().expect("a UTF-8 path");
    let name = "release-4-16-opt-in";
    let cluster = PrivateCluster::up_with(name, &[("BIC_MACHINECONFIGURATION_CRD", crd)]).await;
    let env = cluster.env("opt-in").await;
    env.aws_cluster("4.16.30", &stream_421(), None).await;
    // As installed: nobody opted in.
    env.apply(machine_configuration_not_opted_in(&env.singleton))
        .await;
    // On stubs of their own: one that stays must not share a spec-2 stub with one that moves.
    for (name, tier, stub) in [
        ("general", "general", "worker-user-data"),
        ("gpu", "gpu", "worker-user-data-managed"),
    ] {
        let ms = machine_set(&env.ns, name)
            .label("tier", tier)
            .user_data(stub);
        env.apply(ms.build()).await;
    }
    let before = env.machine_set("general").await;
    let mut flags = env.controller_flags_with(&cluster.kubeconfig);
    flags.push("--resync-period=2s".into());
    let controller = ControllerProcess::spawn(name, &flags);
    controller.wait_ready().await;

    // Nothing selected: planned and reported, not written, and the condition says how to opt in.
    let reported = eventually(CONVERGE, || async {
        let c = env.condition("BootImageUpdateProgressing").await?;
        (c["reason"] == "NotOptedIn").then_some(c)
    })
    .await
    .unwrap_or_else(|| panic!("no NotOptedIn condition:\n{}", controller.log_tail(30)));
    let message = reported["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("MachineSets (selection None by default)")
            && message.contains("(NotOptedIn: 2)")
            && message.contains(OPT_IN_COMMAND),
        "{message}"
    );
    let plan = plan_json(&env).await;
    assert_eq!(plan["selectionFrom"]["machinesets"], "default", "{plan:#}");
    let reasons: Vec<&serde_json::Value> = (plan["machineSets"].as_array().into_iter().flatten())
        .map(|d| &d["reason"])
        .collect();
    assert_eq!(
        reasons,
        [&json!("NotOptedIn"), &json!("NotOptedIn")],
        "{plan:#}"
    );

    // Opted in by label, in our annotation: only the labelled MachineSet moves.
    let partial = json!({"machineManagers": [machine_manager("machinesets",
        json!({"mode": "Partial", "partial": {"machineResourceSelector": {
            "matchLabels": {"tier": "general"}}}}))]});
    env.annotate_machine_configuration(OPT_IN_ANNOTATION, Some(&partial.to_string()))
        .await;
    let moved = eventually(CONVERGE, || async {
        (ami_of(&env.machine_set("general").await) == AMI_421_US_EAST_1).then_some(())
    })
    .await;
    assert!(moved.is_some(), "never moved:\n{}", controller.log_tail(30));
    assert_ne!(ami_of(&before), AMI_421_US_EAST_1);
    let selected = eventually(CONVERGE, || async {
        let c = env.condition("BootImageUpdateProgressing").await?;
        let message = c["message"].as_str()?.to_string();
        message
            .contains("MachineSets (selection Partial from annotation)")
            .then_some(message)
    })
    .await;
    assert!(selected.is_some(), "{}", controller.log_tail(30));
    let gpu = env.machine_set("gpu").await;
    assert_ne!(
        ami_of(&gpu),
        AMI_421_US_EAST_1,
        "gpu is not selected: {gpu:#}"
    );
    assert!(
        gpu["metadata"]["annotations"]
            .get("boot-image-controller.io/history")
            .is_none()
    );
}

/// The 4.20 -> 4.21 handover on Azure (and vSphere, alike), opted in on 4.20 with our
/// annotation (which the upgrade keeps): on 4.21 the MCO's boot image
/// controller runs there (`ManagedBootImagesAzure` is in the Default feature set), but its updates
/// are opt-in (`enabledByDefault` false in `CheckBootImagePlatform`,
/// pkg/controller/common/featuregates.go), so with no opinion in the spec its operator publishes
/// `machinesets: None` (`syncManagedBootImagesStatus`, pkg/operator/sync.go) and its controller
/// reports that it reconciled nothing. Nobody would update the boot images: we do, without ever
/// writing the selection it publishes, and we stand down the moment an administrator opts in.
#[tokio::test]
async fn on_4_21_an_mco_that_enrolls_nothing_leaves_azure_boot_images_to_us() {
    let Some(shared) = boot_image_controller::testkit::skips::shared_dir() else {
        return;
    };
    let crd =
        shared.join("fixtures/crds/releases/4.21/machineconfigurations.operator.openshift.io.yaml");
    let crd = crd.to_str().expect("a UTF-8 path");
    let name = "release-4-21-azure";
    let cluster = PrivateCluster::up_with(name, &[("BIC_MACHINECONFIGURATION_CRD", crd)]).await;
    let env = cluster.env("azure-handover").await;
    let log = env.record_conditions().await;
    // Upgrading to 4.21: the golden ConfigMap is already the new release's.
    env.aws_cluster("4.21.0", &stream_421_all_platforms().to_string(), None)
        .await;
    env.apply(infrastructure(&env.singleton, "Azure")).await;
    env.apply(upgraded_cluster_version(
        &env.singleton,
        "4.20.5",
        "4.21.0",
        "Partial",
    ))
    .await;
    let old_image = azure_marketplace("azureopenshift", "aro4", "419-v2", "419.6.20250523");
    env.apply(
        machine_set(&env.ns, "worker-a")
            .provider_spec(azure(old_image.clone()))
            .build(),
    )
    .await;
    let mut flags = env.controller_flags_with(&cluster.kubeconfig);
    flags.push("--resync-period=2s".into());
    let controller = ControllerProcess::spawn(name, &flags);
    controller.wait_ready().await;
    // As on 4.20, where we managed Azure's boot images alone: our selection is published.
    let ours = eventually(CONVERGE, || async {
        let status = env.machine_configuration().await["status"].clone();
        (status["managedBootImagesStatus"] == published_selection("All")).then_some(())
    })
    .await;
    assert!(ours.is_some(), "{}", controller.log_tail(30));

    // The 4.21 MCO starts: its operator publishes None over our selection, its controller
    // reports that it reconciled nothing, each as its source writes them.
    put_status_as(&env, "machine-config-operator", |status| {
        status["managedBootImagesStatus"] = published_selection("None");
        status["nodeDisruptionPolicyStatus"] =
            json!({"clusterPolicies": {"sshkey": {"actions": [{"type": "None"}]}}});
        status["observedGeneration"] = json!(1);
    })
    .await;
    put_status_as(&env, "machine-config-controller", |status| {
        let counts = "Reconciled 0 of 0 MAPI MachineSets | Reconciled 0 of 0 \
                      ControlPlaneMachineSets | Reconciled 0 of 0 CAPI MachineSets | Reconciled 0 \
                      of 0 CAPI MachineDeployments";
        set_condition(
            status,
            "BootImageUpdateProgressing",
            "ClusterVersionStable",
            counts,
        );
        let degraded = "0 Degraded MAPI MachineSets | 0 Degraded ControlPlaneMachineSets | 0 \
                        Degraded CAPI MachineSets | 0 CAPI MachineDeployments";
        set_condition(
            status,
            "BootImageUpdateDegraded",
            "ClusterVersionStable",
            degraded,
        );
    })
    .await;
    env.apply(cluster_version(&env.singleton, "4.21.0", "Completed"))
        .await;

    // The upgrade done, the boot images move, by us.
    let moved = eventually(CONVERGE, || async {
        let ms = env.machine_set("worker-a").await;
        let image = &ms["spec"]["template"]["spec"]["providerSpec"]["value"]["image"];
        (*image != old_image).then(|| image.clone())
    })
    .await
    .unwrap_or_else(|| panic!("never updated:\n{}", controller.log_tail(40)));
    assert_eq!(moved["publisher"], "azureopenshift", "{moved}");
    let managing = eventually(CONVERGE, || async {
        condition_is(
            &env,
            "BootImageControllerStoodDown",
            "False",
            Some("ManagingBootImages"),
        )
        .await
        .then_some(())
    })
    .await;
    assert!(managing.is_some(), "{}", controller.log_tail(30));
    assert!(
        log.history("BootImageControllerStoodDown")
            .iter()
            .all(|c| c.status != "True")
    );
    // The MCO's selection stays as it published it: ours there would enrol every MachineSet in
    // its controller too.
    let status = env.machine_configuration().await["status"].clone();
    assert_eq!(
        status["managedBootImagesStatus"],
        published_selection("None"),
        "{status}"
    );

    // An administrator opts in: the MCO is about to manage, so we stop before it starts.
    env.select(Some(selection("All", None))).await;
    let stood_down = eventually(CONVERGE, || async {
        condition_is(
            &env,
            "BootImageControllerStoodDown",
            "True",
            Some("AnotherManagerActive"),
        )
        .await
        .then_some(())
    })
    .await;
    assert!(stood_down.is_some(), "{}", controller.log_tail(30));
    put_status_as(&env, "machine-config-operator", |status| {
        status["managedBootImagesStatus"] = published_selection("All");
    })
    .await;
    let writes = r#"boot_image_controller_writes_total{target="MachineSet"}"#;
    let before = controller.metric(writes).await;
    env.apply(
        machine_set(&env.ns, "worker-b")
            .provider_spec(azure(old_image.clone()))
            .build(),
    )
    .await;
    let passes = r#"boot_image_controller_reconcile_duration_seconds_count{scope="all"}"#;
    let after = controller.metric(passes).await.unwrap_or_default() + 3.0;
    let resynced = eventually(CONVERGE, || async {
        (controller.metric(passes).await.unwrap_or_default() >= after).then_some(())
    })
    .await;
    assert!(resynced.is_some(), "{}", controller.metrics().await);
    assert_eq!(controller.metric(writes).await, before);
    let untouched = env.machine_set("worker-b").await;
    assert_eq!(
        untouched["spec"]["template"]["spec"]["providerSpec"]["value"]["image"],
        old_image
    );
    assert!(
        !controller
            .logs()
            .contains("could not write MachineConfiguration status"),
        "a status write failed:\n{}",
        controller.log_tail(30)
    );
}
