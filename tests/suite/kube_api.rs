//! The local control plane is a real API server: the semantics the controller relies on
//! (JSON Patch `test` ops, watches, CRD validation) hold there, through kube-rs.

use crate::support;

use std::time::Duration;

use boot_image_controller::api::{MachineConfiguration, MachineSet};
use futures::StreamExt;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::json;
use support::TestEnv;
use support::fixtures::*;

#[tokio::test]
async fn failed_test_op_is_a_422_and_watches_see_changes() {
    let env = TestEnv::new("kube-api").await;
    let api: Api<MachineSet> = Api::namespaced(env.client.clone(), &env.ns);
    let ms: MachineSet = serde_json::from_value(machine_set(&env.ns, "worker-a").build()).unwrap();
    api.create(&PostParams::default(), &ms)
        .await
        .expect("create MachineSet");

    // A watch started now must deliver the change we make below.
    let config = watcher::Config::default().fields("metadata.name=worker-a");
    let mut changes = watcher(api.clone(), config).applied_objects().boxed();
    let first = changes.next().await.expect("initial state").expect("watch");
    assert_eq!(
        ami_of(&serde_json::to_value(&first).unwrap()),
        AMI_420_US_EAST_1
    );

    // A `test` op against a value the object does not have fails the whole patch.
    let stale = json_patch::Patch(serde_json::from_value(json!([
        {"op": "test", "path": "/spec/template/spec/providerSpec/value/ami/id", "value": "ami-stale"},
        {"op": "replace", "path": "/spec/template/spec/providerSpec/value/ami/id", "value": AMI_421_US_EAST_1}
    ]))
    .unwrap());
    let err = api
        .patch(
            "worker-a",
            &PatchParams::default(),
            &Patch::Json::<()>(stale),
        )
        .await
        .expect_err("a failed test op must reject the patch");
    match err {
        kube::Error::Api(status) => assert_eq!(status.code, 422, "{status:?}"),
        other => panic!("expected a 422 from the API server, got {other}"),
    }

    let guarded = json_patch::Patch(serde_json::from_value(json!([
        {"op": "test", "path": "/spec/template/spec/providerSpec/value/ami/id", "value": AMI_420_US_EAST_1},
        {"op": "replace", "path": "/spec/template/spec/providerSpec/value/ami/id", "value": AMI_421_US_EAST_1}
    ]))
    .unwrap());
    api.patch(
        "worker-a",
        &PatchParams::default(),
        &Patch::Json::<()>(guarded),
    )
    .await
    .expect("a guarded patch with the right value applies");

    let seen = tokio::time::timeout(Duration::from_secs(30), async {
        while let Some(ms) = changes.next().await {
            let ms = serde_json::to_value(ms.expect("watch event")).unwrap();
            if ami_of(&ms) == AMI_421_US_EAST_1 {
                return ms;
            }
        }
        panic!("watch ended");
    })
    .await
    .expect("the watch delivers the change");
    // Nothing else in the provider spec moved.
    assert_eq!(secret_of(&seen), "worker-user-data");
}

#[tokio::test]
async fn machine_configuration_crd_rejects_an_unknown_selection_mode() {
    let env = TestEnv::new("crd-validation").await;
    let api: Api<MachineConfiguration> = Api::all(env.client.clone());
    let bad: MachineConfiguration = serde_json::from_value(json!({
        "apiVersion": "operator.openshift.io/v1", "kind": "MachineConfiguration",
        "metadata": {"name": env.singleton},
        "spec": {"managementState": "Managed", "managedBootImages": {"machineManagers": [
            {"resource": "machinesets", "apiGroup": "machine.openshift.io", "selection": {"mode": "Bogus"}}
        ]}}
    }))
    .unwrap();
    let err = api
        .create(&PostParams::default(), &bad)
        .await
        .expect_err("the CRD's schema rejects mode Bogus");
    let kube::Error::Api(status) = err else {
        panic!("expected a validation error, got {err}");
    };
    assert_eq!(status.code, 422, "{status:?}");
    assert!(
        status.message.contains("Bogus") && status.message.contains("supported values"),
        "the message is the CRD's own enum validation: {}",
        status.message
    );
}
