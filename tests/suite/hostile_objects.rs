//! One hostile object among the rest: `plan --live` and `revert` read the whole namespace, and
//! an object they cannot read (a providerSpec nested deeper than a JSON parser's recursion
//! limit, which the API server stores) is reported as malformed, as the controller reports it,
//! while everything else is planned and reverted as usual. The controller's watches of every
//! kind read their objects one by one too.

use crate::support;

use std::time::Duration;

use boot_image_controller::names::GOLDEN_CONFIGMAP_NAME;
use boot_image_controller::testkit::cluster_api;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams};
use serde_json::{Value, json};
use support::fixtures::*;
use support::{TestEnv, eventually, run_binary, stderr_of};

const HISTORY: &str = "boot-image-controller.io/history";

/// A MachineSet whose providerSpec nests 140 objects deep: more than serde_json's 128.
async fn create_too_deep(env: &TestEnv, name: &str) {
    let mut deep = json!("bottom");
    for _ in 0..140 {
        deep = json!({ "n": deep });
    }
    let ms = machine_set(&env.ns, name)
        .provider_spec(json!({"ami": {"id": AMI_420_US_EAST_1},
                              "placement": {"region": "us-east-1"}, "garbage": deep}))
        .build();
    let gvk = kube::api::GroupVersionKind::gvk("machine.openshift.io", "v1beta1", "MachineSet");
    let resource = kube::api::ApiResource::from_gvk_with_plural(&gvk, "machinesets");
    let api: kube::Api<kube::api::DynamicObject> =
        kube::Api::namespaced_with(env.client.clone(), &env.ns, &resource);
    let object: kube::api::DynamicObject = serde_json::from_value(ms).unwrap();
    // A plain POST (server-side apply would track 140 levels of managed fields); only our own
    // client cannot read the answer back.
    match api.create(&Default::default(), &object).await {
        Ok(_) | Err(kube::Error::SerdeError(_)) => {}
        Err(e) => panic!("the API server rejects {name}: {e}"),
    }
}

fn cluster_flags(env: &TestEnv) -> Vec<String> {
    let mut flags = vec![format!("--kubeconfig={}", support::kubeconfig().display())];
    flags.extend(env.cluster_object_flags());
    flags
}

fn run(args: Vec<String>) -> std::process::Output {
    run_binary(&args.iter().map(String::as_str).collect::<Vec<_>>())
}

#[tokio::test]
async fn a_live_plan_reports_a_too_deep_machine_set_and_plans_the_rest() {
    let env = TestEnv::new("hostile-plan").await;
    env.aws_cluster("4.21.0", &stream_421(), None).await;
    env.remember_images(&[AMI_420_US_EAST_1]).await;
    env.apply(
        machine_set(&env.ns, "worker-old")
            .ami(AMI_420_US_EAST_1)
            .build(),
    )
    .await;
    create_too_deep(&env, "too-deep").await;

    let mut args = vec![
        "plan".to_string(),
        "-o".into(),
        "json".into(),
        format!("--machine-api-namespace={}", env.ns),
    ];
    args.extend(cluster_flags(&env));
    let out = run(args);
    assert!(
        out.status.success(),
        "plan --live failed whole: {}",
        stderr_of(&out)
    );
    let plan: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let entry = |name: &str| {
        (plan["machineSets"].as_array().unwrap().iter())
            .find(|e| e["name"] == name)
            .unwrap_or_else(|| panic!("no {name} in {plan:#}"))
            .clone()
    };
    let bad = entry("too-deep");
    assert_eq!(
        (&bad["action"], &bad["reason"]),
        (&json!("Error"), &json!("MalformedObject")),
        "{bad:#}"
    );
    assert!(
        bad["message"].as_str().unwrap().contains("recursion limit"),
        "{bad:#}"
    );
    let good = entry("worker-old");
    assert_eq!(good["action"], "Update", "{good:#}");
}

#[tokio::test]
async fn revert_goes_ahead_beside_a_too_deep_machine_set() {
    let env = TestEnv::new("hostile-revert").await;
    env.aws_cluster("4.21.0", &stream_421(), None).await;
    env.remember_images(&AMIS_420).await;
    // As the controller left it: on 4.21's AMI, with the change recorded.
    let history = json!([{
        "time": "2026-03-01T00:00:00Z", "release": "4.21.0", "stream": "rhcos-4.21",
        "bootImage": {"from": AMI_420_US_EAST_1, "to": AMI_421_US_EAST_1}
    }]);
    env.apply(
        machine_set(&env.ns, "worker-a")
            .ami(AMI_421_US_EAST_1)
            .annotate(HISTORY, &history.to_string())
            .build(),
    )
    .await;
    create_too_deep(&env, "too-deep").await;

    let mut args = vec![
        "revert".to_string(),
        format!("--namespace={}", env.ns),
        "--machineset=worker-a".into(),
    ];
    args.extend(cluster_flags(&env));
    let out = run(args);
    assert!(
        out.status.success(),
        "revert failed: {}\n{}",
        stderr_of(&out),
        String::from_utf8_lossy(&out.stdout)
    );
    let ms = env.machine_set("worker-a").await;
    assert_eq!(ami_of(&ms), AMI_420_US_EAST_1);
}

/// 140 nested objects: more than serde_json's recursion limit of 128.
fn too_deep() -> Value {
    let mut deep = json!("bottom");
    for _ in 0..140 {
        deep = json!({ "n": deep });
    }
    deep
}

/// `managedFields` nested 140 deep, as any client may write them (kube-apiserver 1.34 stores
/// them as given).
fn too_deep_managed_fields(api_version: &str) -> Value {
    let mut fields = json!({});
    for _ in 0..140 {
        fields = json!({ "f:n": fields });
    }
    json!([{"manager": "deep-writer", "operation": "Update", "apiVersion": api_version,
            "time": "2026-01-01T00:00:00Z", "fieldsType": "FieldsV1", "fieldsV1": fields}])
}

fn api(
    env: &TestEnv,
    (group, version, kind, plural): (&str, &str, &str, &str),
    ns: Option<&str>,
) -> Api<DynamicObject> {
    let resource =
        ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural);
    match ns {
        Some(ns) => Api::namespaced_with(env.client.clone(), ns, &resource),
        None => Api::all_with(env.client.clone(), &resource),
    }
}

/// Our own client cannot read the answer back: only the API server's refusal fails the test.
fn stored<T>(what: &str, answer: Result<T, kube::Error>) {
    match answer {
        Ok(_) | Err(kube::Error::SerdeError(_)) => {}
        Err(e) => panic!("the API server refuses {what}: {e}"),
    }
}

/// Gives an existing object 140-deep managedFields.
async fn deepen_managed_fields(api: &Api<DynamicObject>, name: &str, api_version: &str) {
    let patch = json!({"metadata": {"managedFields": too_deep_managed_fields(api_version)}});
    let answer = api
        .patch(name, &PatchParams::default(), &Patch::Merge(patch))
        .await;
    stored(name, answer);
}

const CONFIG_MAPS: (&str, &str, &str, &str) = ("", "v1", "ConfigMap", "configmaps");
const SECRETS: (&str, &str, &str, &str) = ("", "v1", "Secret", "secrets");
const NODES: (&str, &str, &str, &str) = ("", "v1", "Node", "nodes");
const MACHINES: (&str, &str, &str, &str) =
    ("machine.openshift.io", "v1beta1", "Machine", "machines");
const TEMPLATES: (&str, &str, &str, &str) = (
    "infrastructure.cluster.x-k8s.io",
    "v1beta2",
    "AWSMachineTemplate",
    "awsmachinetemplates",
);

/// Regression (issue 46): one deep object of any watched kind kept the controller from ever
/// becoming ready, and `plan --live` exited 1 on a Node with deep managedFields. Now a Machine
/// that cannot be read is reported alone, objects whose only depth is in their managedFields
/// (which are dropped) are read, and everything else goes on: the golden ConfigMap and the stub
/// secret with deep managedFields are read, so the MachineSet moves.
#[tokio::test]
async fn a_deep_object_of_any_watched_kind_is_reported_alone_and_the_controller_becomes_ready() {
    let env = TestEnv::new("hostile-watches").await;
    env.aws_cluster("4.21.0", &stream_421(), None).await;
    env.remember_images(&[AMI_420_US_EAST_1]).await;
    let managed_stub = "worker-user-data-managed";
    env.apply(
        machine_set(&env.ns, "worker-old")
            .ami(AMI_420_US_EAST_1)
            .user_data(managed_stub)
            .build(),
    )
    .await;
    let capi = env.cluster_api_ns();
    env.apply(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": capi}}))
        .await;
    env.apply(cluster_api::aws_machine_template(
        &capi,
        "worker-a",
        AMI_420_US_EAST_1,
    ))
    .await;

    let config_maps = api(&env, CONFIG_MAPS, Some(&env.ns));
    deepen_managed_fields(&config_maps, GOLDEN_CONFIGMAP_NAME, "v1").await;
    deepen_managed_fields(&api(&env, SECRETS, Some(&env.ns)), managed_stub, "v1").await;
    let templates = api(&env, TEMPLATES, Some(&capi));
    let template_version = "infrastructure.cluster.x-k8s.io/v1beta2";
    deepen_managed_fields(&templates, "worker-a", template_version).await;
    // A Node is cluster-wide: deleted at the end.
    let node = format!("{}-deep", env.ns);
    let nodes = api(&env, NODES, None);
    let object = json!({"apiVersion": "v1", "kind": "Node",
        "metadata": {"name": node, "managedFields": too_deep_managed_fields("v1")}});
    let object: DynamicObject = serde_json::from_value(object).unwrap();
    stored("the Node", nodes.create(&Default::default(), &object).await);
    let mut machine = machine_set(&env.ns, "x").build()["spec"]["template"].clone();
    machine["spec"]["providerSpec"]["value"]["garbage"] = too_deep();
    let object = json!({"apiVersion": "machine.openshift.io/v1beta1", "kind": "Machine",
        "metadata": {"name": "deep-machine", "namespace": env.ns}, "spec": machine["spec"]});
    let machines = api(&env, MACHINES, Some(&env.ns));
    let object: DynamicObject = serde_json::from_value(object).unwrap();
    stored(
        "the Machine",
        machines.create(&Default::default(), &object).await,
    );

    let controller = env.controller(&[]);
    let outcome = deep_objects_outcome(&env, &controller, &capi).await;
    // The Node is cluster-wide: gone whatever the outcome, before any assertion.
    let _ = nodes.delete(&node, &Default::default()).await;
    let (ready, moved, out) = outcome;
    assert!(
        ready,
        "controller never became ready: {}",
        controller.log_tail(40)
    );
    assert!(moved, "worker-old never moved: {}", controller.log_tail(40));
    let logs = support::strip_ansi(&controller.logs());
    let warnings: Vec<&str> = (logs.lines())
        .filter(|l| l.contains("WARN") && l.contains("cannot be read"))
        .collect();
    assert!(
        !warnings.is_empty(),
        "the Machine is reported: {}",
        controller.log_tail(40)
    );
    for warning in &warnings {
        assert!(
            warning.contains("deep-machine"),
            "only the Machine is unreadable: {warning}"
        );
    }
    assert!(
        !logs
            .lines()
            .any(|l| l.contains("WARN") && l.contains("f:n")),
        "no warning quotes a page of objects"
    );
    let stderr = stderr_of(&out);
    assert!(out.status.success(), "plan --live failed whole: {stderr}");
    assert!(
        stderr.contains("deep-machine"),
        "the Machine is left out, with a warning: {stderr}"
    );
    assert!(!stderr.contains(&node), "the Node is read: {stderr}");
}

/// Whether the controller became ready, whether it then moved worker-old, and `plan --live`.
async fn deep_objects_outcome(
    env: &TestEnv,
    controller: &support::ControllerProcess,
    capi: &str,
) -> (bool, bool, std::process::Output) {
    let ready = eventually(Duration::from_secs(60), || async {
        matches!(controller.http_get("/readyz").await, Some((200, _))).then_some(())
    })
    .await
    .is_some();
    let moved = ready
        && eventually(Duration::from_secs(60), || async {
            (ami_of(&env.machine_set("worker-old").await) == AMI_421_US_EAST_1).then_some(())
        })
        .await
        .is_some();
    let mut args = vec![
        "plan".to_string(),
        "-o".into(),
        "json".into(),
        format!("--machine-api-namespace={}", env.ns),
        format!("--cluster-api-namespace={capi}"),
    ];
    args.extend(cluster_flags(env));
    (ready, moved, run(args))
}
