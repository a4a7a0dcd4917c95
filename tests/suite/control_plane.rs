//! ControlPlaneMachineSets end to end: the controller as a process against a real kube-apiserver
//! serving the ControlPlaneMachineSet CRD (the upstream one when `../shared` is present).
//!
//! Control-plane boot images are opt-in only: an absent `managedBootImages` leaves them alone,
//! a `controlplanemachinesets` entry with mode All moves them like MachineSets, and they are
//! counted on their own in the status message, the metrics and the `plan` output.

use crate::support;

use std::time::Duration;

use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams};
use serde_json::{Value, json};
use support::fixtures::*;
use support::{
    TestEnv, eventually, plan_json, resource_version, run_binary as run, sample,
    stderr_of as stderr,
};

const CONVERGE: Duration = Duration::from_secs(60);
const CPMS: (&str, &str) = ("machine.openshift.io/v1", "ControlPlaneMachineSet");

/// An AWS cluster on 4.21 that came from 4.20: a worker MachineSet and the control plane are
/// still on 4.20's AMI with the installer's stub secrets (Ignition 3: installed on 4.6 or
/// later).
async fn upgraded_cluster(env: &TestEnv, managed_boot_images: Option<Value>) {
    upgraded_cluster_with_master_stub(env, managed_boot_images, "3.2.0").await;
}

async fn upgraded_cluster_with_master_stub(
    env: &TestEnv,
    managed_boot_images: Option<Value>,
    ignition_version: &str,
) {
    env.aws_cluster("4.21.0", &stream_421(), managed_boot_images)
        .await;
    env.remember_images(&AMIS_420).await;
    env.apply(stub_secret(&env.ns, "master-user-data", ignition_version))
        .await;
    env.apply(stub_secret(&env.ns, "master-user-data-managed", "3.2.0"))
        .await;
    env.apply(machine_set(&env.ns, "worker-a").build()).await;
    env.apply(control_plane_machine_set(&env.ns, AMI_420_US_EAST_1))
        .await;
}

async fn control_plane(env: &TestEnv) -> Value {
    let cp = env.get(CPMS.0, CPMS.1, "cluster").await;
    serde_json::to_value(cp.expect("the ControlPlaneMachineSet exists")).unwrap()
}

fn ami(object: &Value) -> &str {
    provider_spec_of(object)["ami"]["id"]
        .as_str()
        .unwrap_or_default()
}

fn stub(object: &Value) -> &str {
    provider_spec_of(object)["userDataSecret"]["name"]
        .as_str()
        .unwrap_or_default()
}

async fn progressing_message(env: &TestEnv, contains: &[&str]) -> String {
    let found = eventually(CONVERGE, || async {
        let c = env.condition("BootImageUpdateProgressing").await?;
        let message = c["message"].as_str()?.to_string();
        contains
            .iter()
            .all(|part| message.contains(part))
            .then_some(message)
    })
    .await;
    let now = env.condition("BootImageUpdateProgressing").await;
    found.unwrap_or_else(|| panic!("Progressing never said {contains:?}; now {now:#?}"))
}

#[tokio::test]
async fn by_default_the_control_plane_is_left_alone() {
    let env = TestEnv::new("cp-default").await;
    upgraded_cluster(&env, None).await;
    let before = control_plane(&env).await;

    let controller = env.controller(&[]);
    controller.wait_ready().await;
    // The MachineSet moves (opted in), the control plane is not opted in, and the status counts
    // the kinds apart, each with where its selection came from.
    eventually(CONVERGE, || async {
        (ami(&env.machine_set("worker-a").await) == AMI_421_US_EAST_1).then_some(())
    })
    .await
    .expect("the worker MachineSet is updated");
    let message = progressing_message(
        &env,
        &[
            "MachineSets (selection All from annotation): 1 total, 1 selected, 0 to update, 1 up to date",
            "ControlPlaneMachineSets (selection None by default): 1 total, 0 selected, 0 to update, 0 up to date, \
             1 skipped (NotOptedIn: 1)",
        ],
    )
    .await;

    let after = control_plane(&env).await;
    assert_eq!(
        resource_version(&after),
        resource_version(&before),
        "the ControlPlaneMachineSet was written to: {after:#}\nstatus: {message}"
    );
    let metrics = controller.metrics().await;
    let series = |kind: &str, action: &str, reason: &str| {
        sample(
            &metrics,
            &format!(
                r#"boot_image_controller_machine_resources{{action="{action}",kind="{kind}",reason="{reason}"}}"#
            ),
        )
    };
    assert_eq!(
        series("ControlPlaneMachineSet", "Skip", "NotOptedIn"),
        Some(1.0),
        "{metrics}"
    );
    assert_eq!(
        series("MachineSet", "UpToDate", "UpToDate"),
        Some(1.0),
        "{metrics}"
    );

    let plan = plan_json(&env).await;
    let entry = &plan["controlPlaneMachineSets"][0];
    assert_eq!(
        (&entry["name"], &entry["action"], &entry["reason"]),
        (&json!("cluster"), &json!("Skip"), &json!("NotOptedIn")),
        "{plan:#}"
    );
}

/// A control plane installed before 4.6 has a spec-2 `master-user-data`: it is upgraded in place
/// (as the MCO does, pkg/controller/bootimage/helpers.go), and the ControlPlaneMachineSet keeps
/// naming it, so that no control-plane Machine is replaced for it.
#[tokio::test]
async fn an_ignition_2_control_plane_stub_is_upgraded_in_place_and_keeps_its_name() {
    let env = TestEnv::new("cp-spec2").await;
    let managers = machine_managers(&[("machinesets", "All"), ("controlplanemachinesets", "All")]);
    upgraded_cluster_with_master_stub(&env, Some(managers), "2.2.0").await;
    let controller = env.controller(&[]);
    controller.wait_ready().await;
    let after = eventually(CONVERGE, || async {
        let cp = control_plane(&env).await;
        (ami(&cp) == AMI_421_US_EAST_1).then_some(cp)
    })
    .await
    .unwrap_or_else(|| panic!("never updated:\n{}", controller.log_tail(40)));
    assert_eq!(stub(&after), "master-user-data");
    let probe = stub_secret(&env.ns, "master-user-data", "2.2.0");
    let secret = env.get_in(&probe).await.expect("the stub secret");
    assert_eq!(
        secret.metadata.annotations.unwrap_or_default()["machineconfiguration.openshift.io/stub-ignition-upgraded-to"],
        "3.2.0"
    );
}

#[tokio::test]
async fn mode_all_moves_the_control_plane_to_the_golden_image() {
    let env = TestEnv::new("cp-all").await;
    let managers = machine_managers(&[("machinesets", "All"), ("controlplanemachinesets", "All")]);
    upgraded_cluster(&env, Some(managers)).await;
    let before = control_plane(&env).await;

    let mut controller = env.controller(&[]);
    controller.wait_ready().await;
    let after = eventually(CONVERGE, || async {
        let cp = control_plane(&env).await;
        (ami(&cp) == AMI_421_US_EAST_1).then_some(cp)
    })
    .await
    .unwrap_or_else(|| {
        panic!(
            "the control plane never moved; log:\n{}",
            controller.log_tail(40)
        )
    });
    // The stub secret keeps its name: the control-plane machine set operator compares each
    // control-plane Machine's providerSpec (the template as it was) with the template, ignoring
    // only the boot image fields, and would replace every Machine over any other difference.
    assert_eq!(stub(&after), "master-user-data");
    let strip = |cp: &Value| {
        let mut spec = provider_spec_of(cp).clone();
        spec["ami"] = Value::Null;
        spec.to_string()
    };
    assert_eq!(strip(&after), strip(&before));
    assert_eq!(after["spec"]["replicas"], 3);
    assert_eq!(after["spec"]["strategy"], before["spec"]["strategy"]);
    let history = history_of(&after);
    assert_eq!(history.len(), 1, "{history:?}");
    assert_eq!(history[0]["bootImage"]["from"], AMI_420_US_EAST_1);
    assert_eq!(history[0]["userDataSecret"], Value::Null);

    progressing_message(
        &env,
        &[
            "MachineSets (selection All from spec): 1 total, 1 selected, 0 to update, 1 up to date",
            "ControlPlaneMachineSets (selection All from spec): 1 total, 1 selected, 0 to update, 1 up to date",
        ],
    )
    .await;
    let metrics = controller.metrics().await;
    assert_eq!(
        sample(
            &metrics,
            r#"boot_image_controller_machine_resources{action="UpToDate",kind="ControlPlaneMachineSet",reason="UpToDate"}"#
        ),
        Some(1.0),
        "{metrics}"
    );
    assert_eq!(
        sample(
            &metrics,
            r#"boot_image_controller_patches_total{kind="ControlPlaneMachineSet",result="updated"}"#
        ),
        Some(1.0),
        "{metrics}"
    );
    assert_eq!(
        sample(
            &metrics,
            r#"boot_image_controller_patches_total{kind="MachineSet",result="updated"}"#
        ),
        Some(1.0),
        "{metrics}"
    );
    let event = eventually(CONVERGE, || async {
        env.events_for("cluster")
            .await
            .into_iter()
            .find(|e| e["reason"] == "BootImageUpdated")
    })
    .await
    .expect("a BootImageUpdated Event on the ControlPlaneMachineSet");
    assert_eq!(event["regarding"]["kind"], "ControlPlaneMachineSet");

    // `plan` lists it with the change the controller recorded.
    let plan = plan_json(&env).await;
    let entries = plan["controlPlaneMachineSets"].as_array().unwrap();
    assert_eq!(entries.len(), 1, "{plan:#}");
    assert_eq!(entries[0]["action"], "UpToDate");
    assert_eq!(
        entries[0]["lastChange"]["bootImage"]["to"],
        AMI_421_US_EAST_1
    );
    assert!(
        plan["machineSets"]
            .as_array()
            .unwrap()
            .iter()
            .all(|e| e["name"] != "cluster"),
        "{plan:#}"
    );

    // And the revert command takes it back to the original, byte for byte.
    controller.terminate();
    let mut args = vec![
        "revert".to_string(),
        format!("--kubeconfig={}", support::kubeconfig().display()),
        format!("--namespace={}", env.ns),
        "--control-plane-machine-set=cluster".to_string(),
    ];
    args.extend(env.cluster_object_flags());
    let out = run(&args.iter().map(String::as_str).collect::<Vec<_>>());
    assert!(out.status.success(), "revert failed: {}", stderr(&out));
    let reverted = control_plane(&env).await;
    assert_eq!(
        provider_spec_of(&reverted).to_string(),
        provider_spec_of(&before).to_string()
    );
    assert_eq!(
        annotation_of(&reverted, "boot-image-controller.io/boot-image-updates"),
        Some("disabled")
    );
}

#[tokio::test]
async fn the_api_allows_only_all_or_none_for_control_plane_machine_sets() {
    // The generated CRDs do not carry this rule: the upstream ones, installed with them.
    if boot_image_controller::testkit::skips::shared_dir().is_none() {
        return;
    }
    let env = TestEnv::new("cp-partial").await;
    let mut mc = machine_configuration(
        &env.singleton,
        Some(machine_managers(&[("controlplanemachinesets", "Partial")])),
    );
    mc["spec"]["managedBootImages"]["machineManagers"][0]["selection"]["partial"] =
        json!({"machineResourceSelector": {"matchLabels": {"a": "b"}}});
    let gvk = GroupVersionKind::gvk("operator.openshift.io", "v1", "MachineConfiguration");
    let api: Api<DynamicObject> = Api::all_with(
        env.client.clone(),
        &ApiResource::from_gvk_with_plural(&gvk, "machineconfigurations"),
    );
    let err = api
        .patch(
            &env.singleton,
            &PatchParams::apply("test").force(),
            &Patch::Apply(&mc),
        )
        .await
        .expect_err("Partial is rejected for controlplanemachinesets");
    assert!(
        err.to_string()
            .contains("Only All or None selection mode is permitted for ControlPlaneMachineSets"),
        "{err}"
    );
}
