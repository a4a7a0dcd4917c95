//! Following the Machines a moved MachineSet creates, against a real kube-apiserver with the
//! test acting as the Machine API provider: it creates Machines from the MachineSet's template,
//! sets their status as the provider would, and creates their Nodes.

use crate::support;

use std::time::Duration;

use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams};
use serde_json::{Value, json};
use support::fixtures::*;
use support::{TestEnv, eventually, run_binary};

const CONVERGE: Duration = Duration::from_secs(60);
const HISTORY: &str = "boot-image-controller.io/history";
const HOLD: &str = "boot-image-controller.io/boot-failure-hold";
const REVERT_ANNOTATION: &str = "boot-image-controller.io/revert-failed-boot-images";
/// What the AWS provider says of a Machine whose AMI EC2 does not know
/// (openshift/machine-api-provider-aws, pkg/actuators/machine/instances.go).
pub(crate) const AMI_NOT_FOUND: &str = "error getting blockDeviceMappings: error describing AMI: \
                             InvalidAMIID.NotFound: The image id '[ami-0123]' does not exist";
/// ... and of one over the account's vCPU quota: EC2's sentence, without its code.
const QUOTA: &str = "error launching instance: You have requested more vCPU capacity than your \
                     current vCPU limit of 32 allows for the instance bucket that the specified \
                     instance type belongs to";

/// An AWS cluster on 4.21 that came from 4.20, with `worker-a` on 4.20's AMI and a spec-3 stub:
/// the controller moves it without touching the stub.
pub(crate) async fn upgraded_cluster(env: &TestEnv) {
    env.aws_cluster_without_secrets("4.21.0", &stream_421(), None)
        .await;
    env.apply(stub_secret(&env.ns, "worker-user-data", "3.2.0"))
        .await;
    env.remember_images(&AMIS_420).await;
    env.apply(machine_set(&env.ns, "worker-a").build()).await;
}

pub(crate) async fn wait_moved(env: &TestEnv) -> Value {
    wait_on(env, AMI_421_US_EAST_1).await
}

/// `worker-a` once it boots `ami`.
async fn wait_on(env: &TestEnv, ami: &str) -> Value {
    eventually(CONVERGE, || async {
        let ms = env.machine_set("worker-a").await;
        (ami_of(&ms) == ami).then_some(ms)
    })
    .await
    .unwrap_or_else(|| panic!("worker-a never boots {ami}"))
}

fn machines(env: &TestEnv) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk("machine.openshift.io", "v1beta1", "Machine");
    let resource = ApiResource::from_gvk_with_plural(&gvk, "machines");
    Api::namespaced_with(env.client.clone(), &env.ns, &resource)
}

/// What the MachineSet controller creates for one replica: a Machine from the template, owned
/// by the MachineSet.
pub(crate) async fn create_machine(env: &TestEnv, name: &str) {
    create_machine_edited(env, name, |_| {}).await
}

/// [`create_machine`], edited before it is created.
async fn create_machine_edited(env: &TestEnv, name: &str, edit: impl FnOnce(&mut Value)) {
    let ms = env.machine_set("worker-a").await;
    let template = &ms["spec"]["template"];
    let mut machine = json!({
        "apiVersion": "machine.openshift.io/v1beta1", "kind": "Machine",
        "metadata": {
            "name": name, "namespace": env.ns,
            "labels": template["metadata"]["labels"],
            "ownerReferences": [{
                "apiVersion": "machine.openshift.io/v1beta1", "kind": "MachineSet",
                "name": "worker-a", "uid": ms["metadata"]["uid"],
                "controller": true, "blockOwnerDeletion": true
            }]
        },
        "spec": template["spec"],
    });
    edit(&mut machine);
    env.create(machine).await;
}

/// The provider's status update.
async fn set_status(env: &TestEnv, machine: &str, status: Value) {
    let patch = Patch::Merge(json!({"status": status}));
    machines(env)
        .patch_status(machine, &PatchParams::default(), &patch)
        .await
        .expect("status patched");
}

/// A Machine whose instance runs and whose Node joined and is Ready.
async fn boot(env: &TestEnv, machine: &str) {
    let node = format!("{}-{machine}", env.ns);
    let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(env.client.clone());
    let created = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": node}});
    nodes
        .create(
            &Default::default(),
            &serde_json::from_value(created).unwrap(),
        )
        .await
        .expect("node created");
    let ready = json!({"status": {"conditions": [{
        "type": "Ready", "status": "True", "reason": "KubeletReady",
        "message": "kubelet is posting ready status",
        "lastHeartbeatTime": "2026-01-01T00:00:00Z", "lastTransitionTime": "2026-01-01T00:00:00Z"
    }]}});
    nodes
        .patch_status(&node, &PatchParams::default(), &Patch::Merge(ready))
        .await
        .expect("node ready");
    let status = json!({"phase": "Running", "nodeRef": {"kind": "Node", "name": node}});
    set_status(env, machine, status).await;
}

pub(crate) async fn fail(env: &TestEnv, machine: &str, message: &str) {
    let status =
        json!({"phase": "Failed", "errorReason": "InvalidConfiguration", "errorMessage": message});
    set_status(env, machine, status).await;
}

/// The newest history entry's settled evidence, once there is one.
async fn wait_settled(env: &TestEnv, index: usize) -> Value {
    eventually(CONVERGE, || async {
        let ms = env.machine_set("worker-a").await;
        let history = history_of(&ms);
        let evidence = history.get(index)?.get("bootEvidence")?.clone();
        Some(evidence)
    })
    .await
    .unwrap_or_else(|| panic!("no evidence settled in entry {index}"))
}

fn live_plan(env: &TestEnv) -> Value {
    let mut args = vec![
        "plan".to_string(),
        "-o".into(),
        "json".into(),
        format!("--kubeconfig={}", support::kubeconfig().display()),
        format!("--machine-api-namespace={}", env.ns),
    ];
    args.extend(env.cluster_object_flags());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = run_binary(&args);
    assert!(
        out.status.success(),
        "plan failed: {}",
        support::stderr_of(&out)
    );
    serde_json::from_slice(&out.stdout).expect("plan prints JSON")
}

fn worker_a(plan: &Value) -> &Value {
    (plan["machineSets"].as_array().unwrap().iter())
        .find(|e| e["name"] == "worker-a")
        .unwrap_or_else(|| panic!("worker-a is planned: {plan:#}"))
}

/// The `BootImageFailedToBoot` Events on worker-a, once there are `count` (or after a minute).
async fn wait_failure_warnings(env: &TestEnv, count: usize) -> usize {
    let warnings = || async {
        let events = env.events_for("worker-a").await;
        (events.iter())
            .filter(|e| e["reason"] == "BootImageFailedToBoot")
            .count()
    };
    let reached = eventually(CONVERGE, || async {
        (warnings().await == count).then_some(())
    })
    .await;
    match reached {
        Some(()) => count,
        None => warnings().await,
    }
}

async fn metric_is(controller: &support::ControllerProcess, series: &str, value: f64) -> bool {
    eventually(CONVERGE, || async {
        (controller.metric(series).await == Some(value)).then_some(())
    })
    .await
    .is_some()
}

#[tokio::test]
async fn a_machine_whose_node_joins_proves_the_new_image() {
    let env = TestEnv::new("boot-proven").await;
    upgraded_cluster(&env).await;
    let mut controller = env.controller(&[]);
    controller.wait_ready().await;
    wait_moved(&env).await;
    let unproven = "boot_image_controller_boot_evidence_machinesets{state=\"Unproven\"}";
    assert!(
        metric_is(&controller, unproven, 1.0).await,
        "{}",
        controller.log_tail(30)
    );

    create_machine(&env, "worker-a-x1").await;
    set_status(&env, "worker-a-x1", json!({"phase": "Provisioned"})).await;
    boot(&env, "worker-a-x1").await;

    let evidence = wait_settled(&env, 0).await;
    assert_eq!(evidence["state"], "Proven", "{evidence}");
    assert_eq!(evidence["machine"], "worker-a-x1");
    let proven = "boot_image_controller_boot_evidence_machinesets{state=\"Proven\"}";
    assert!(metric_is(&controller, proven, 1.0).await);
    let condition = eventually(CONVERGE, || async {
        let c = env.condition("BootImageFailedToBoot").await?;
        (c["message"]
            .as_str()?
            .contains("1 moved MachineSet(s) proven"))
        .then_some(c)
    })
    .await
    .expect("the condition counts the proven MachineSet");
    assert_eq!(condition["status"], "False");
    let plan = live_plan(&env);
    assert_eq!(
        worker_a(&plan)["bootEvidence"]["state"],
        "Proven",
        "{plan:#}"
    );
    controller.terminate();
}

#[tokio::test]
async fn an_image_error_fails_the_image_while_quota_and_machines_from_before_the_move_do_not() {
    let env = TestEnv::new("boot-failed").await;
    upgraded_cluster(&env).await;
    // Before the move, someone made a Machine on the golden AMI by hand, and it failed.
    env.json_patch(
        ("machine.openshift.io/v1beta1", "MachineSet"),
        "worker-a",
        json!([{"op": "replace", "path": "/spec/template/spec/providerSpec/value/ami/id", "value": AMI_421_US_EAST_1}]),
    )
    .await
    .unwrap();
    create_machine(&env, "worker-a-early").await;
    fail(&env, "worker-a-early", AMI_NOT_FOUND).await;
    env.json_patch(
        ("machine.openshift.io/v1beta1", "MachineSet"),
        "worker-a",
        json!([{"op": "replace", "path": "/spec/template/spec/providerSpec/value/ami/id", "value": AMI_420_US_EAST_1}]),
    )
    .await
    .unwrap();
    // creationTimestamp has whole seconds: the move comes in a later one.
    tokio::time::sleep(Duration::from_millis(1100)).await;

    let mut controller = env.controller(&[]);
    controller.wait_ready().await;
    wait_moved(&env).await;
    create_machine(&env, "worker-a-quota").await;
    fail(&env, "worker-a-quota", QUOTA).await;
    create_machine(&env, "worker-a-x1").await;
    fail(&env, "worker-a-x1", AMI_NOT_FOUND).await;

    let evidence = wait_settled(&env, 0).await;
    assert_eq!(evidence["state"], "Failed", "{evidence}");
    assert_eq!(
        evidence["machine"], "worker-a-x1",
        "neither the quota failure nor the early one"
    );
    assert!(
        evidence["reason"]
            .as_str()
            .unwrap()
            .contains("InvalidAMIID.NotFound")
    );
    // Without the opt-in, reported and left: the same pass would have put the image back.
    let ms = env.machine_set("worker-a").await;
    assert_eq!(ami_of(&ms), AMI_421_US_EAST_1);
    assert_eq!(annotation_of(&ms, HOLD), None);
    let failed = "boot_image_controller_boot_evidence_machinesets{state=\"Failed\"}";
    assert!(metric_is(&controller, failed, 1.0).await);
    let condition = eventually(CONVERGE, || async {
        let c = env.condition("BootImageFailedToBoot").await?;
        (c["status"] == "True").then_some(c)
    })
    .await
    .expect("the condition reports the failure");
    assert_eq!(condition["reason"], "BootImageFailed");
    assert!(
        condition["message"]
            .as_str()
            .unwrap()
            .contains("worker-a-x1"),
        "{condition}"
    );
    let warned = eventually(CONVERGE, || async {
        let events = env.events_for("worker-a").await;
        events
            .into_iter()
            .find(|e| e["reason"] == "BootImageFailedToBoot")
    })
    .await
    .expect("a Warning Event on the MachineSet");
    assert_eq!(warned["type"], "Warning");
    assert!(
        warned["note"].as_str().unwrap().contains("not reverted"),
        "{warned}"
    );
    let plan = live_plan(&env);
    assert_eq!(worker_a(&plan)["bootEvidence"]["state"], "Failed");
    controller.terminate();
}

#[tokio::test]
async fn a_node_that_never_joins_fails_the_image_at_the_limit() {
    let env = TestEnv::new("boot-no-node").await;
    upgraded_cluster(&env).await;
    let mut controller = env.controller(&["--node-join-timeout=5s"]);
    controller.wait_ready().await;
    wait_moved(&env).await;
    // Two Machines: one alone is no verdict (issue 46).
    create_stuck_machine(&env, "worker-a-x1").await;
    create_stuck_machine(&env, "worker-a-x2").await;
    // Past the limit (as a MachineHealthCheck would), the Machines are deleted: their creation
    // and deletion times are both the API server's, so no allowance for clock skew holds the
    // verdict back.
    tokio::time::sleep(Duration::from_secs(6)).await;
    delete_machine(&env, "worker-a-x1").await;
    delete_machine(&env, "worker-a-x2").await;
    let evidence = wait_settled(&env, 0).await;
    assert_eq!(evidence["state"], "Failed", "{evidence}");
    assert!(
        evidence["reason"]
            .as_str()
            .unwrap()
            .contains("no Node joined within 5s on 2 Machines"),
        "{evidence}"
    );
    release_machine(&env, "worker-a-x1").await;
    release_machine(&env, "worker-a-x2").await;
    controller.terminate();
}

/// A Machine whose instance exists and whose Node never comes, with the finalizer the machine
/// controller sets (so that its deletion is seen before it is gone).
async fn create_stuck_machine(env: &TestEnv, name: &str) {
    create_machine_edited(env, name, |m| {
        m["metadata"]["finalizers"] = json!(["machine.machine.openshift.io"]);
        m["spec"]["providerID"] = json!(format!("aws:///us-east-1a/i-{name}"));
    })
    .await;
    set_status(env, name, json!({"phase": "Provisioned"})).await;
}

/// Deletes a Machine as a MachineHealthCheck would; its finalizer keeps it until
/// [`release_machine`].
async fn delete_machine(env: &TestEnv, name: &str) {
    machines(env)
        .delete(name, &Default::default())
        .await
        .expect("deletion started");
}

/// The machine controller's last step: the finalizer goes, and the Machine with it.
async fn release_machine(env: &TestEnv, name: &str) {
    let patch = Patch::Merge(json!({"metadata": {"finalizers": null}}));
    machines(env)
        .patch(name, &PatchParams::default(), &patch)
        .await
        .expect("finalizer removed");
}

#[tokio::test]
async fn with_the_opt_in_a_failed_image_is_put_back_held_and_tried_again_once_the_hold_is_cleared()
{
    let env = TestEnv::new("boot-revert").await;
    upgraded_cluster(&env).await;
    let mut controller = env.controller(&["--revert-failed-boot-images"]);
    controller.wait_ready().await;
    wait_moved(&env).await;
    create_machine(&env, "worker-a-x1").await;
    fail(&env, "worker-a-x1", AMI_NOT_FOUND).await;

    let reverted = wait_on(&env, AMI_420_US_EAST_1).await;
    let history = history_of(&reverted);
    assert_eq!(history[0]["bootEvidence"]["state"], "Failed");
    assert_eq!(
        history[1]["bootImage"],
        json!({"from": AMI_421_US_EAST_1, "to": AMI_420_US_EAST_1})
    );
    assert_eq!(history[1]["revertedAfter"]["machine"], "worker-a-x1");
    let hold: Value = serde_json::from_str(annotation_of(&reverted, HOLD).expect("held")).unwrap();
    assert_eq!(hold["image"], AMI_421_US_EAST_1);
    let event = eventually(CONVERGE, || async {
        let events = env.events_for("worker-a").await;
        events
            .into_iter()
            .find(|e| e["reason"] == "BootImageReverted")
    })
    .await
    .expect("a Warning Event says it was reverted");
    assert_eq!(event["type"], "Warning");

    // Held: the golden image is not tried again, however often the controller looks.
    let plan = live_plan(&env);
    assert_eq!(worker_a(&plan)["reason"], "BootImageHeld", "{plan:#}");
    tokio::time::sleep(Duration::from_secs(3)).await;
    let still = env.machine_set("worker-a").await;
    assert_eq!(ami_of(&still), AMI_420_US_EAST_1);
    assert_eq!(
        support::resource_version(&still),
        support::resource_version(&reverted),
        "nothing written"
    );

    // The administrator clears the hold (README): the image is tried again. The Machine that
    // failed predates this move and no longer counts.
    env.annotate_machine_set("worker-a", HOLD, None).await;
    let moved_again = wait_moved(&env).await;
    assert_eq!(history_of(&moved_again).len(), 3);
    controller.terminate();
}

#[tokio::test]
async fn a_failure_recorded_before_a_restart_is_not_announced_again_and_is_reverted_by_the_annotation()
 {
    let env = TestEnv::new("boot-restart").await;
    upgraded_cluster(&env).await;
    let mut first = env.controller(&[]);
    first.wait_ready().await;
    wait_moved(&env).await;
    create_machine(&env, "worker-a-x1").await;
    fail(&env, "worker-a-x1", AMI_NOT_FOUND).await;
    assert_eq!(wait_settled(&env, 0).await["state"], "Failed");
    assert_eq!(wait_failure_warnings(&env, 1).await, 1);
    first.terminate();

    // Restarted without the opt-in: the failure on record is reported, not announced again.
    let mut again = env.controller(&[]);
    again.wait_ready().await;
    let failed = "boot_image_controller_boot_evidence_machinesets{state=\"Failed\"}";
    assert!(metric_is(&again, failed, 1.0).await);
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(wait_failure_warnings(&env, 1).await, 1, "announced once");
    again.terminate();

    // The failed Machine is gone (a MachineHealthCheck deleted it); the evidence is not.
    machines(&env)
        .delete("worker-a-x1", &Default::default())
        .await
        .unwrap();
    env.annotate_machine_configuration(REVERT_ANNOTATION, Some("true"))
        .await;
    let mut second = env.controller(&[]);
    second.wait_ready().await;
    let reverted = wait_on(&env, AMI_420_US_EAST_1).await;
    assert!(annotation_of(&reverted, HOLD).is_some());
    assert_eq!(
        history_of(&reverted).len(),
        2,
        "{:?}",
        annotation_of(&reverted, HISTORY)
    );
    second.terminate();
}

/// A Node that turns Ready after its Machine names it proves the image: its readiness change
/// re-plans the MachineSet whose Machine runs on it (issue 46: a Node's event re-plans what it
/// changes, no more; the resync is 10 minutes away).
#[tokio::test]
async fn a_node_that_turns_ready_after_its_machine_names_it_proves_the_new_image() {
    let env = TestEnv::new("boot-late-ready").await;
    upgraded_cluster(&env).await;
    let mut controller = env.controller(&[]);
    controller.wait_ready().await;
    wait_moved(&env).await;
    create_machine(&env, "worker-a-x1").await;
    let node = format!("{}-worker-a-x1", env.ns);
    let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(env.client.clone());
    let created = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": node}});
    nodes
        .create(
            &Default::default(),
            &serde_json::from_value(created).unwrap(),
        )
        .await
        .expect("node created");
    let status = json!({"phase": "Running", "nodeRef": {"kind": "Node", "name": node}});
    set_status(&env, "worker-a-x1", status).await;
    // The Machine's own event has been planned: unproven, its Node not Ready yet.
    let unproven = "boot_image_controller_boot_evidence_machinesets{state=\"Unproven\"}";
    assert!(metric_is(&controller, unproven, 1.0).await);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let ready = json!({"status": {"conditions": [{
        "type": "Ready", "status": "True", "reason": "KubeletReady", "message": "ready",
        "lastHeartbeatTime": "2026-01-01T00:00:00Z", "lastTransitionTime": "2026-01-01T00:00:00Z"
    }]}});
    nodes
        .patch_status(&node, &PatchParams::default(), &Patch::Merge(ready))
        .await
        .expect("node ready");
    let evidence = wait_settled(&env, 0).await;
    let _ = nodes.delete(&node, &Default::default()).await;
    assert_eq!(evidence["state"], "Proven", "{evidence}");
    assert_eq!(evidence["machine"], "worker-a-x1");
    controller.terminate();
}

/// Issue 46: a user who may only create Machines had a good image reverted and held within
/// 15 s, by naming the MachineSet as an owner and writing the AWS provider's words.
#[tokio::test]
async fn machines_the_machine_set_controller_did_not_make_are_not_evidence() {
    let env = TestEnv::new("boot-forged").await;
    upgraded_cluster(&env).await;
    let mut controller = env.controller(&["--revert-failed-boot-images"]);
    controller.wait_ready().await;
    wait_moved(&env).await;
    // Named to sort before the genuine Machine: of failures, the oldest is named.
    create_machine_edited(&env, "a-forged-owner", |m| {
        m["metadata"]["ownerReferences"][0]["controller"] = json!(false)
    })
    .await;
    create_machine_edited(&env, "a-forged-labels", |m| {
        m["metadata"]["labels"] = json!({"machine.openshift.io/cluster-api-machineset": "other"})
    })
    .await;
    create_machine_edited(&env, "a-forged-region", |m| {
        m["spec"]["providerSpec"]["value"]["placement"]["region"] = json!("eu-west-1")
    })
    .await;
    for forged in ["a-forged-owner", "a-forged-labels", "a-forged-region"] {
        fail(&env, forged, AMI_NOT_FOUND).await;
    }
    let plan = live_plan(&env);
    assert_eq!(
        worker_a(&plan)["bootEvidence"]["state"],
        "Unproven",
        "{plan:#}"
    );

    create_machine(&env, "worker-a-x1").await;
    fail(&env, "worker-a-x1", AMI_NOT_FOUND).await;
    let reverted = wait_on(&env, AMI_420_US_EAST_1).await;
    let history = history_of(&reverted);
    assert_eq!(
        history[0]["bootEvidence"]["machine"], "worker-a-x1",
        "only the Machine the MachineSet made counts: {history:?}"
    );
    controller.terminate();
}

/// The MachineHealthCheck CRD: the upstream data has none, so the project's own
/// (`boot-image-controller crds`), applied where the cluster does not serve the kind yet.
async fn ensure_health_check_crd(env: &TestEnv) {
    use boot_image_controller::api::MachineHealthCheck;
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    use kube::CustomResourceExt;
    let crds: Api<CustomResourceDefinition> = Api::all(env.client.clone());
    let crd = MachineHealthCheck::crd();
    let name = crd.metadata.name.clone().unwrap();
    if crds.get_opt(&name).await.expect("CRDs readable").is_none() {
        let params = PatchParams::apply("boot-evidence-test");
        crds.patch(&name, &params, &Patch::Apply(&crd))
            .await
            .expect("MachineHealthCheck CRD applied");
    }
    let gvk = GroupVersionKind::gvk("machine.openshift.io", "v1beta1", "MachineHealthCheck");
    let resource = ApiResource::from_gvk_with_plural(&gvk, "machinehealthchecks");
    let checks: Api<DynamicObject> = Api::namespaced_with(env.client.clone(), &env.ns, &resource);
    eventually(CONVERGE, || async {
        checks.list(&Default::default()).await.ok()
    })
    .await
    .expect("MachineHealthChecks served");
}

/// Issue 46: a MachineHealthCheck without `nodeStartupTimeout` deletes a Machine whose Node has
/// not come after 10 minutes, before the 20-minute join limit: the verdict was never reached.
/// The check deletes each such Machine and the MachineSet makes the next: the one deleted
/// before still counts once it is gone.
#[tokio::test]
async fn machines_a_health_check_deletes_for_not_starting_fail_the_image_at_its_timeout() {
    let env = TestEnv::new("boot-mhc").await;
    ensure_health_check_crd(&env).await;
    upgraded_cluster(&env).await;
    env.create(json!({
        "apiVersion": "machine.openshift.io/v1beta1", "kind": "MachineHealthCheck",
        "metadata": {"name": "workers", "namespace": env.ns},
        "spec": {
            "selector": {"matchLabels": {"machine.openshift.io/cluster-api-machineset": "worker-a"}},
            "nodeStartupTimeout": "5s"
        }
    }))
    .await;
    // The default join limit, 20 minutes.
    let mut controller = env.controller(&[]);
    controller.wait_ready().await;
    wait_moved(&env).await;
    create_stuck_machine(&env, "worker-a-x1").await;
    tokio::time::sleep(Duration::from_secs(6)).await;
    delete_machine(&env, "worker-a-x1").await;
    release_machine(&env, "worker-a-x1").await;
    create_stuck_machine(&env, "worker-a-x2").await;
    tokio::time::sleep(Duration::from_secs(6)).await;
    delete_machine(&env, "worker-a-x2").await;

    let evidence = wait_settled(&env, 0).await;
    assert_eq!(evidence["state"], "Failed", "{evidence}");
    let reason = evidence["reason"].as_str().unwrap();
    assert!(
        reason.contains("within 5s (the nodeStartupTimeout of MachineHealthCheck workers")
            && reason.contains("on 2 Machines"),
        "{reason}"
    );
    release_machine(&env, "worker-a-x2").await;
    controller.terminate();
}
