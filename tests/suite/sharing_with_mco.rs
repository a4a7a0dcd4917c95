//! Sharing a cluster with the Machine Config Operator, on a real kube-apiserver: standing down
//! while another field manager owns the boot-image status and taking over once it is gone; the
//! status the MCO's skew check reads, when we are the manager; the annotation keys of the
//! previous release, still honoured with a deprecation Event.

use crate::support;

use std::time::Duration;

use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams};
use serde_json::{Value, json};
use support::fixtures::*;
use support::{ControllerProcess, TestEnv, eventually};

const CONVERGE: Duration = Duration::from_secs(60);
const STOOD_DOWN: &str = "BootImageControllerStoodDown";
const STOOD_DOWN_METRIC: &str = "boot_image_controller_stood_down";
const FULL_PASSES: &str = r#"boot_image_controller_reconcile_duration_seconds_count{scope="all"}"#;
const MACHINE_SET_WRITES: &str = r#"boot_image_controller_writes_total{target="MachineSet"}"#;
const LEGACY_OPT_OUT: &str = "machineconfiguration.openshift.io/boot-image-updates";
const LEGACY_PAUSE: &str = "machineconfiguration.openshift.io/boot-image-updates-paused";
/// The names the MCO's clients give the API server (cmd/machine-config-operator/start.go and
/// cmd/machine-config-controller/start.go build them per component).
const MCO_OPERATOR: &str = "machine-config-operator";
const MCO_CONTROLLER: &str = "machine-config-controller";

fn configurations(env: &TestEnv) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk("operator.openshift.io", "v1", "MachineConfiguration");
    let resource = ApiResource::from_gvk_with_plural(&gvk, "machineconfigurations");
    Api::all_with(env.client.clone(), &resource)
}

/// A status write as the MCO sends it: an Update (here a merge patch) of the status subresource
/// under its own field manager, which then owns exactly the fields it changed.
pub async fn write_status_as(env: &TestEnv, manager: &str, status: Value) {
    let params = PatchParams {
        field_manager: Some(manager.into()),
        ..PatchParams::default()
    };
    configurations(env)
        .patch_status(
            &env.singleton,
            &params,
            &Patch::Merge(json!({"status": status})),
        )
        .await
        .unwrap_or_else(|e| panic!("status write as {manager}: {e}"));
}

/// Removes the condition of `type_` the way a manager withdrawing it would: a JSON Patch that
/// tests the entry it removes, retried if our own writes moved the list meanwhile.
async fn remove_condition_as(env: &TestEnv, manager: &str, type_: &str) {
    let params = PatchParams {
        field_manager: Some(manager.into()),
        ..PatchParams::default()
    };
    for _ in 0..20 {
        let mc = env.machine_configuration().await;
        let conditions = mc["status"]["conditions"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let Some(index) = conditions.iter().position(|c| c["type"] == type_) else {
            return;
        };
        let ops: json_patch::Patch = serde_json::from_value(json!([
            {"op": "test", "path": format!("/status/conditions/{index}/type"), "value": type_},
            {"op": "remove", "path": format!("/status/conditions/{index}")},
        ]))
        .unwrap();
        let sent = configurations(env)
            .patch_status(&env.singleton, &params, &Patch::Json::<()>(ops))
            .await;
        if sent.is_ok() {
            return;
        }
    }
    panic!("could not remove condition {type_}");
}

/// Who owns what on the MachineConfiguration: (manager, fieldsV1) pairs.
async fn managed_fields(env: &TestEnv) -> Vec<(String, Value)> {
    let mc = env.machine_configuration().await;
    mc["metadata"]["managedFields"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .into_iter()
        .map(|e| {
            (
                e["manager"].as_str().unwrap_or_default().to_string(),
                e["fieldsV1"].clone(),
            )
        })
        .collect()
}

async fn wait_for_condition(
    env: &TestEnv,
    ctl: &ControllerProcess,
    type_: &str,
    status: &str,
    reason: &str,
) -> Value {
    let found = eventually(CONVERGE, || async {
        let c = env.condition(type_).await?;
        (c["status"] == status && c["reason"] == reason).then_some(c)
    })
    .await;
    match found {
        Some(c) => c,
        None => panic!(
            "{type_} never became {status} {reason}; now {:?}\n{}",
            env.condition(type_).await,
            ctl.log_tail(40)
        ),
    }
}

async fn wait_for_metric(ctl: &ControllerProcess, series: &str, ok: impl Fn(f64) -> bool) -> f64 {
    let found = eventually(CONVERGE, || async {
        ctl.metric(series).await.filter(|v| ok(*v))
    })
    .await;
    match found {
        Some(v) => v,
        None => panic!("{series} never as expected:\n{}", ctl.metrics().await),
    }
}

/// Waits for `n` more full passes: resyncs, counted by the controller itself.
async fn wait_for_passes(ctl: &ControllerProcess, n: f64) {
    let before = ctl.metric(FULL_PASSES).await.unwrap_or_default();
    wait_for_metric(ctl, FULL_PASSES, |v| v >= before + n).await;
}

async fn wait_for_status_field(
    env: &TestEnv,
    ctl: &ControllerProcess,
    field: &str,
    expected: &Value,
) {
    let found = eventually(CONVERGE, || async {
        let mc = env.machine_configuration().await;
        (mc["status"][field] == *expected).then_some(())
    })
    .await;
    if found.is_none() {
        let mc = env.machine_configuration().await;
        panic!(
            "status.{field} never became {expected}; it is {}\n{}",
            mc["status"][field],
            ctl.log_tail(40)
        );
    }
}

#[tokio::test]
async fn beside_another_boot_image_manager_nothing_is_written_until_it_is_gone() {
    let env = TestEnv::new("mco-active").await;
    env.aws_cluster("4.21.0", &stream_421(), None).await;
    env.apply(machine_set(&env.ns, "worker-a").build()).await;
    // The MCO where it manages boot images: its operator publishes the effective selection and
    // its controller reports the shared conditions.
    write_status_as(
        &env,
        MCO_OPERATOR,
        json!({"managedBootImagesStatus": {"machineManagers": [{"resource": "machinesets",
            "apiGroup": "machine.openshift.io", "selection": {"mode": "All"}}]}}),
    )
    .await;
    write_status_as(
        &env,
        MCO_CONTROLLER,
        json!({"conditions": [{"type": "BootImageUpdateDegraded", "status": "False",
            "reason": "MCOReports", "message": "written by the MCO",
            "lastTransitionTime": "2026-11-01T00:00:00Z"}]}),
    )
    .await;
    let versions = env.machine_set_versions().await;

    let ctl = env.controller(&["--resync-period", "1s"]);
    ctl.wait_ready().await;
    let reported = wait_for_condition(&env, &ctl, STOOD_DOWN, "True", "AnotherManagerActive").await;
    let message = reported["message"].as_str().unwrap_or_default();
    assert!(
        message.contains(MCO_OPERATOR) && message.contains(MCO_CONTROLLER),
        "the condition names who manages boot images: {message}"
    );
    wait_for_metric(&ctl, STOOD_DOWN_METRIC, |v| v == 1.0).await;
    wait_for_metric(
        &ctl,
        r#"boot_image_controller_blocked{reason="AnotherManagerActive"}"#,
        |v| v == 1.0,
    )
    .await;

    // Several resyncs later: no MachineSet written, the MCO's condition as it left it, and none
    // of the shared condition types or boot-image status taken over by us.
    wait_for_passes(&ctl, 3.0).await;
    assert_eq!(env.machine_set_versions().await, versions);
    assert_eq!(
        ctl.metric(MACHINE_SET_WRITES).await.unwrap_or_default(),
        0.0
    );
    let degraded = env.condition("BootImageUpdateDegraded").await.unwrap();
    assert_eq!(degraded["reason"], "MCOReports");
    assert!(env.condition("BootImageUpdateProgressing").await.is_none());
    for (manager, fields) in managed_fields(&env).await {
        if manager == "boot-image-controller" {
            let text = fields.to_string();
            assert!(
                !text.contains("BootImageUpdateProgressing")
                    && !text.contains("BootImageUpdateDegraded")
                    && !text.contains("managedBootImagesStatus"),
                "we own shared fields: {text}"
            );
        }
    }
    // Planning goes on: the update it would make is counted, held.
    let held = ctl
        .metric(r#"boot_image_controller_machine_resources{action="Skip",kind="MachineSet",reason="AnotherManagerActive"}"#)
        .await;
    assert_eq!(held, Some(1.0), "{}", ctl.metrics().await);

    // The other manager goes away: its fields are withdrawn, and we take over, no restart.
    write_status_as(&env, MCO_OPERATOR, json!({"managedBootImagesStatus": null})).await;
    remove_condition_as(&env, MCO_CONTROLLER, "BootImageUpdateDegraded").await;
    wait_for_condition(&env, &ctl, STOOD_DOWN, "False", "ManagingBootImages").await;
    let updated = eventually(CONVERGE, || async {
        let ms = env.machine_set("worker-a").await;
        (ami_of(&ms) == AMI_421_US_EAST_1).then_some(ms)
    })
    .await;
    assert!(updated.is_some(), "never took over:\n{}", ctl.log_tail(40));
    wait_for_metric(&ctl, STOOD_DOWN_METRIC, |v| v == 0.0).await;
    wait_for_condition(
        &env,
        &ctl,
        "BootImageUpdateProgressing",
        "False",
        "BootImagesCurrent",
    )
    .await;
}

/// Standing down comes before judging our own inputs: a golden ConfigMap this controller
/// rejects says nothing about the MCO's, and `BootImageUpdateDegraded=True` would stop the MCO's
/// operator's sync (`syncMachineConfiguration`, pkg/operator/sync.go: `syncAll` breaks before the
/// pools), an upgrade deadlock.
#[tokio::test]
async fn beside_another_manager_a_golden_configmap_we_reject_is_not_reported() {
    let env = TestEnv::new("mco-bad-golden").await;
    let log = env.record_conditions().await;
    env.aws_cluster("4.21.0", "{not a stream", None).await;
    env.apply(machine_set(&env.ns, "worker-a").build()).await;
    write_status_as(
        &env,
        MCO_OPERATOR,
        json!({"managedBootImagesStatus": {"machineManagers": [{"resource": "machinesets",
            "apiGroup": "machine.openshift.io", "selection": {"mode": "All"}}]}}),
    )
    .await;
    write_status_as(
        &env,
        MCO_CONTROLLER,
        json!({"conditions": [{"type": "BootImageUpdateDegraded", "status": "False",
            "reason": "MCOReports", "message": "written by the MCO",
            "lastTransitionTime": "2026-11-01T00:00:00Z"}]}),
    )
    .await;

    let ctl = env.controller(&["--resync-period", "1s"]);
    ctl.wait_ready().await;
    wait_for_condition(&env, &ctl, STOOD_DOWN, "True", "AnotherManagerActive").await;
    wait_for_passes(&ctl, 3.0).await;
    let degraded = env.condition("BootImageUpdateDegraded").await.unwrap();
    assert_eq!(
        (degraded["status"].as_str(), degraded["reason"].as_str()),
        (Some("False"), Some("MCOReports")),
        "{degraded}"
    );
    assert!(
        (log.history("BootImageUpdateDegraded").iter()).all(|c| c.reason == "MCOReports"),
        "{:?}",
        log.transitions("BootImageUpdateDegraded")
    );
    for (manager, fields) in managed_fields(&env).await {
        if manager == "boot-image-controller" {
            let text = fields.to_string();
            assert!(
                !text.contains("BootImageUpdateDegraded"),
                "we own it: {text}"
            );
        }
    }
    let blocked = r#"boot_image_controller_blocked{reason="GoldenStreamInvalid"}"#;
    assert_ne!(
        ctl.metric(blocked).await,
        Some(1.0),
        "{}",
        ctl.metrics().await
    );
}

#[tokio::test]
async fn skew_enforcement_status_follows_the_rollout_in_automatic_and_manual_modes() {
    let env = TestEnv::new("mco-skew").await;
    env.aws_cluster("4.21.0", &stream_421(), None).await;
    env.apply(upgraded_cluster_version(
        &env.singleton,
        "4.20.0",
        "4.21.0",
        "Completed",
    ))
    .await;
    env.remember_images(&[AMI_420_US_EAST_1]).await;
    env.apply(machine_set(&env.ns, "worker-a").build()).await;
    env.apply(machine_set(&env.ns, "worker-b").build()).await;
    let ctl = env.controller(&["--resync-period", "2s"]);
    ctl.wait_ready().await;

    // Automatic (the default where MachineSets are all managed): once the rollout is done, the
    // release whose boot images every selected MachineSet uses.
    for name in ["worker-a", "worker-b"] {
        let done = eventually(CONVERGE, || async {
            (ami_of(&env.machine_set(name).await) == AMI_421_US_EAST_1).then_some(())
        })
        .await;
        assert!(done.is_some(), "{name} not updated:\n{}", ctl.log_tail(40));
    }
    let automatic = json!({"mode": "Automatic", "automatic": {"ocpVersion": "4.21.0"}});
    wait_for_status_field(&env, &ctl, "bootImageSkewEnforcementStatus", &automatic).await;
    let managers = json!({"machineManagers": [
        {"resource": "machinesets", "apiGroup": "machine.openshift.io", "selection": {"mode": "All"}},
        {"resource": "controlplanemachinesets", "apiGroup": "machine.openshift.io", "selection": {"mode": "None"}},
    ]});
    wait_for_status_field(&env, &ctl, "managedBootImagesStatus", &managers).await;
    // Written by us, server-side, and not again while nothing changes.
    assert!(
        managed_fields(&env)
            .await
            .iter()
            .any(|(m, f)| m == "boot-image-controller"
                && f.pointer("/f:status/f:bootImageSkewEnforcementStatus")
                    .is_some()),
        "{:?}",
        managed_fields(&env).await
    );
    let rv = support::resource_version(&env.machine_configuration().await);
    wait_for_passes(&ctl, 3.0).await;
    assert_eq!(
        support::resource_version(&env.machine_configuration().await),
        rv
    );

    // Manual: the administrator's declaration, and whether the images in use meet it.
    let declare = |version: &str| {
        json!({"apiVersion": "operator.openshift.io/v1", "kind": "MachineConfiguration",
            "metadata": {"name": env.singleton},
            "spec": {"managementState": "Managed", "bootImageSkewEnforcement":
                {"mode": "Manual", "manual": {"mode": "OCPVersion", "ocpVersion": version}}}})
    };
    env.apply(declare("4.21.0")).await;
    let manual =
        json!({"mode": "Manual", "manual": {"mode": "OCPVersion", "ocpVersion": "4.21.0"}});
    wait_for_status_field(&env, &ctl, "bootImageSkewEnforcementStatus", &manual).await;
    wait_for_condition(
        &env,
        &ctl,
        "BootImageManualSkewVersionMet",
        "True",
        "DeclaredVersionMet",
    )
    .await;
    env.apply(declare("4.22.0")).await;
    let met = wait_for_condition(
        &env,
        &ctl,
        "BootImageManualSkewVersionMet",
        "False",
        "DeclaredVersionNewer",
    )
    .await;
    assert!(
        met["message"]
            .as_str()
            .unwrap_or_default()
            .contains("4.22.0"),
        "{met}"
    );
}

/// Events about the MachineConfiguration (cluster-scoped) live in `default`.
async fn configuration_events(env: &TestEnv, reason: &str) -> Vec<Event> {
    let api: Api<Event> = Api::namespaced(env.client.clone(), "default");
    api.list(&Default::default())
        .await
        .expect("list events")
        .items
        .into_iter()
        .filter(|e| {
            e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(env.singleton.as_str())
                && e.reason.as_deref() == Some(reason)
        })
        .collect()
}

#[tokio::test]
async fn the_previous_annotation_keys_are_honoured_with_a_deprecation_event() {
    let env = TestEnv::new("mco-legacy").await;
    env.aws_cluster("4.21.0", &stream_421(), None).await;
    env.remember_images(&[AMI_420_US_EAST_1]).await;
    env.apply(
        machine_set(&env.ns, "pinned")
            .user_data("worker-user-data-managed")
            .annotate(LEGACY_OPT_OUT, "disabled")
            .build(),
    )
    .await;
    env.apply(machine_set(&env.ns, "worker-a").build()).await;
    let ctl = env.controller(&["--resync-period", "1s"]);
    ctl.wait_ready().await;

    let updated = eventually(CONVERGE, || async {
        (ami_of(&env.machine_set("worker-a").await) == AMI_421_US_EAST_1).then_some(())
    })
    .await;
    assert!(updated.is_some(), "{}", ctl.log_tail(40));
    let deprecation = |events: Vec<Value>| -> Vec<Value> {
        events
            .into_iter()
            .filter(|e| e["reason"] == "DeprecatedAnnotation" && e["type"] == "Warning")
            .collect()
    };
    let warned = eventually(CONVERGE, || async {
        let found = deprecation(env.events_for("pinned").await);
        (!found.is_empty()).then_some(found)
    })
    .await
    .unwrap_or_else(|| panic!("no deprecation Event:\n{}", ctl.log_tail(40)));
    let note = warned[0]["note"].as_str().unwrap_or_default();
    assert!(
        note.contains("boot-image-controller.io/boot-image-updates"),
        "{note}"
    );
    // Once per object, not once per pass; and the opt-out held.
    wait_for_passes(&ctl, 3.0).await;
    assert_eq!(deprecation(env.events_for("pinned").await).len(), 1);
    assert_eq!(ami_of(&env.machine_set("pinned").await), AMI_420_US_EAST_1);

    // The old pause key pauses, with one Warning Event on the MachineConfiguration.
    env.annotate_machine_configuration(LEGACY_PAUSE, Some("true"))
        .await;
    wait_for_condition(&env, &ctl, "BootImageUpdatePaused", "True", "Paused").await;
    let events = eventually(CONVERGE, || async {
        let found = configuration_events(&env, "DeprecatedAnnotation").await;
        (!found.is_empty()).then_some(found)
    })
    .await
    .unwrap_or_else(|| panic!("no Event about the pause key:\n{}", ctl.log_tail(40)));
    assert_eq!(events[0].type_.as_deref(), Some("Warning"));
    wait_for_passes(&ctl, 3.0).await;
    assert_eq!(
        configuration_events(&env, "DeprecatedAnnotation")
            .await
            .len(),
        1
    );
    env.annotate_machine_configuration(LEGACY_PAUSE, None).await;
    wait_for_condition(&env, &ctl, "BootImageUpdatePaused", "False", "NotPaused").await;
}
