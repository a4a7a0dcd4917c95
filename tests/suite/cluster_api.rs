//! Cluster API end to end, on a real kube-apiserver with the upstream Cluster API and Cluster
//! API Provider AWS CRDs (hack/ensure-capi-crds.sh): a Machine API MachineSet whose authoritative
//! API is Cluster API is left alone, while its Cluster API MachineSet moves to a new
//! AWSMachineTemplate on the golden AMI; `plan --live` says so first; `revert` points it back;
//! the copy nothing uses any more is deleted and the original template stays.

use crate::support;

use std::time::Duration;

use boot_image_controller::testkit::cluster_api::{self, template_of};
use serde_json::{Value, json};
use support::fixtures::*;
use support::{ControllerProcess, TestEnv, run_binary, stderr_of, waits};

const CONVERGE: Duration = Duration::from_secs(60);
const CAPI_MACHINE_SET: (&str, &str) = ("cluster.x-k8s.io/v1beta2", "MachineSet");
const TEMPLATE: (&str, &str) = (
    "infrastructure.cluster.x-k8s.io/v1beta2",
    "AWSMachineTemplate",
);

/// An AWS cluster at 4.21 whose worker-a is managed through Cluster API: the Machine API copy
/// (status.authoritativeAPI ClusterAPI) and the Cluster API MachineSet with its 4.20 template
/// and an Ignition 3 bootstrap secret, in the test's Cluster API namespace.
async fn migrated_cluster(test: &str) -> TestEnv {
    let env = TestEnv::new(test).await;
    env.aws_cluster("4.21.0", &stream_421(), None).await;
    env.remember_images(&[AMI_420_US_EAST_1]).await;
    let mut mirror = machine_set(&env.ns, "worker-a")
        .ami(AMI_420_US_EAST_1)
        .build();
    mirror["spec"]["authoritativeAPI"] = json!("ClusterAPI");
    mirror["status"] = json!({"authoritativeAPI": "ClusterAPI"});
    env.apply(mirror).await;
    let capi = cluster_api_namespace(&env).await;
    env.apply(cluster_api::machine_set(&capi, "worker-a", "worker-a"))
        .await;
    env
}

/// The test's Cluster API namespace, with an Ignition 3 bootstrap secret and the 4.20 template
/// `worker-a`; returns its name.
async fn cluster_api_namespace(env: &TestEnv) -> String {
    let capi = env.cluster_api_ns();
    env.apply(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": capi}}))
        .await;
    env.apply(stub_secret(&capi, "worker-user-data", "3.4.0"))
        .await;
    let template = cluster_api::aws_machine_template(&capi, "worker-a", AMI_420_US_EAST_1);
    env.apply(template).await;
    capi
}

async fn object(env: &TestEnv, (api_version, kind): (&str, &str), name: &str) -> Option<Value> {
    let probe = json!({"apiVersion": api_version, "kind": kind,
                       "metadata": {"name": name, "namespace": env.cluster_api_ns()}});
    let found = env.get_in(&probe).await?;
    Some(serde_json::to_value(found).unwrap())
}

async fn capi_machine_set(env: &TestEnv) -> Value {
    object(env, CAPI_MACHINE_SET, "worker-a")
        .await
        .expect("the Cluster API MachineSet exists")
}

fn cli(env: &TestEnv, command: &[&str]) -> std::process::Output {
    let mut args: Vec<String> = command.iter().map(|s| s.to_string()).collect();
    args.push(format!("--kubeconfig={}", support::kubeconfig().display()));
    args.push(format!("--cluster-api-namespace={}", env.cluster_api_ns()));
    args.extend(env.cluster_object_flags());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    run_binary(&args)
}

#[tokio::test]
async fn the_cluster_api_machine_set_moves_to_a_new_template_its_mirror_stays_and_revert_restores_it()
 {
    let env = migrated_cluster("capi").await;
    let mirror_before = support::resource_version(&env.machine_set("worker-a").await);

    // `plan --live` says what `run` will do, before it runs.
    let out = cli(
        &env,
        &[
            "plan",
            "--live",
            "-o",
            "json",
            &format!("--machine-api-namespace={}", env.ns),
        ],
    );
    assert!(out.status.success(), "{}", stderr_of(&out));
    let plan: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let mirror = &plan["machineSets"][0];
    assert_eq!(mirror["reason"], "AuthoritativeElsewhere", "{plan:#}");
    let planned = &plan["clusterApiMachineSets"][0];
    assert_eq!(planned["action"], "Update", "{plan:#}");
    let planned_name = planned["infrastructureTemplate"]["to"]
        .as_str()
        .unwrap()
        .to_string();

    let controller = env.controller(&["--cluster-api-template-grace=1s"]);
    controller.wait_ready().await;
    let moved = wait_for_template(&env, &controller, |t| t != "worker-a").await;
    assert_eq!(moved, planned_name, "run did what plan said");

    let copy = object(&env, TEMPLATE, &moved)
        .await
        .expect("the new template");
    assert_eq!(
        copy.pointer("/spec/template/spec/ami/id"),
        Some(&json!(AMI_421_US_EAST_1))
    );
    assert_eq!(
        copy.pointer("/spec/template/spec/instanceType"),
        Some(&json!("m6i.xlarge")),
        "the rest of the template is copied"
    );
    assert_eq!(
        copy.pointer("/metadata/labels/machine.openshift.io~1cluster-api-machineset"),
        Some(&json!("worker-a"))
    );
    // The template it used is untouched, and so is the mirror.
    let original = object(&env, TEMPLATE, "worker-a").await.expect("kept");
    assert_eq!(
        original.pointer("/spec/template/spec/ami/id"),
        Some(&json!(AMI_420_US_EAST_1))
    );
    let mirror = env.machine_set("worker-a").await;
    assert_eq!(support::resource_version(&mirror), mirror_before);
    assert_eq!(ami_of(&mirror), AMI_420_US_EAST_1);
    let skipped = r#"boot_image_controller_machine_resources{action="Skip",kind="MachineSet",reason="AuthoritativeElsewhere"}"#;
    waits::wait_for_metric(&controller, skipped, CONVERGE, |v| v == 1.0).await;
    let history = history_of(&capi_machine_set(&env).await);
    assert_eq!(
        history[0]["infrastructureTemplate"],
        json!({"from": "worker-a", "to": moved})
    );

    // Revert points it back and opts it out; the copy, now unused, is deleted.
    let out = cli(
        &env,
        &[
            "revert",
            "--cluster-api-machineset=worker-a",
            &format!("--namespace={}", env.cluster_api_ns()),
        ],
    );
    assert!(out.status.success(), "{}", stderr_of(&out));
    let reverted = capi_machine_set(&env).await;
    assert_eq!(template_of(&reverted), "worker-a");
    assert_eq!(
        annotation_of(&reverted, boot_image_controller::names::OPT_OUT_ANNOTATION),
        Some(boot_image_controller::names::OPT_OUT_VALUE)
    );
    let gone = || async { object(&env, TEMPLATE, &moved).await.is_none().then_some(()) };
    waits::converge(&[&controller], CONVERGE, gone, async || {
        format!("the unused copy {moved} was never deleted")
    })
    .await;
    assert!(object(&env, TEMPLATE, "worker-a").await.is_some());
    assert_eq!(template_of(&capi_machine_set(&env).await), "worker-a");
}

#[tokio::test]
async fn a_paused_cluster_api_mirror_is_left_to_its_machine_api_machine_set() {
    let env = TestEnv::new("capi-paused").await;
    env.aws_cluster("4.21.0", &stream_421(), None).await;
    env.remember_images(&[AMI_420_US_EAST_1]).await;
    let capi = cluster_api_namespace(&env).await;
    let mut paused = cluster_api::machine_set(&capi, "worker-a", "worker-a");
    paused["metadata"]["annotations"] = json!({"cluster.x-k8s.io/paused": ""});
    env.apply(paused).await;
    // A MachineDeployment is never changed without --update-machine-deployments.
    env.apply(cluster_api::machine_deployment(
        &capi, "workers", "worker-a",
    ))
    .await;
    // The Machine API copy is authoritative and moves as ever.
    env.apply(
        machine_set(&env.ns, "worker-a")
            .ami(AMI_420_US_EAST_1)
            .build(),
    )
    .await;

    let controller = env.controller(&[]);
    controller.wait_ready().await;
    waits::wait_for_ami(&env, &[&controller], "worker-a", AMI_421_US_EAST_1).await;
    let skipped = r#"boot_image_controller_machine_resources{action="Skip",kind="ClusterAPIMachineSet",reason="AuthoritativeElsewhere"}"#;
    waits::wait_for_metric(&controller, skipped, CONVERGE, |v| v == 1.0).await;
    assert_eq!(template_of(&capi_machine_set(&env).await), "worker-a");
    let not_opted_in = r#"boot_image_controller_machine_resources{action="Skip",kind="ClusterAPIMachineDeployment",reason="MachineDeploymentNotOptedIn"}"#;
    waits::wait_for_metric(&controller, not_opted_in, CONVERGE, |v| v == 1.0).await;
    let deployment = object(
        &env,
        ("cluster.x-k8s.io/v1beta2", "MachineDeployment"),
        "workers",
    )
    .await
    .expect("the MachineDeployment exists");
    assert_eq!(template_of(&deployment), "worker-a");
}

/// Waits until the Cluster API MachineSet's template name satisfies `ok`; returns it.
async fn wait_for_template(
    env: &TestEnv,
    controller: &ControllerProcess,
    ok: impl Fn(&str) -> bool,
) -> String {
    wait_for_template_of(env, controller, "worker-a", ok).await
}

/// Waits until the template name of the Cluster API MachineSet `machine_set` satisfies `ok`;
/// returns it.
async fn wait_for_template_of(
    env: &TestEnv,
    controller: &ControllerProcess,
    machine_set: &str,
    ok: impl Fn(&str) -> bool,
) -> String {
    let check = || async {
        let ms = object(env, CAPI_MACHINE_SET, machine_set).await?;
        let name = template_of(&ms).to_string();
        ok(&name).then_some(name)
    };
    waits::converge(&[controller], CONVERGE, check, async || {
        let ms = object(env, CAPI_MACHINE_SET, machine_set).await;
        format!("the Cluster API MachineSet {machine_set} never moved; now {ms:?}")
    })
    .await
}

#[tokio::test]
async fn a_revert_to_a_template_that_no_longer_exists_is_refused() {
    let env = migrated_cluster("capi-gone").await;
    let mut controller = env.controller(&[]);
    controller.wait_ready().await;
    let moved = wait_for_template(&env, &controller, |t| t != "worker-a").await;
    controller.terminate();
    // Someone deletes the template the MachineSet used before the update.
    let resource = kube::api::ApiResource::from_gvk_with_plural(
        &kube::api::GroupVersionKind::gvk(
            "infrastructure.cluster.x-k8s.io",
            "v1beta2",
            "AWSMachineTemplate",
        ),
        "awsmachinetemplates",
    );
    let templates: kube::Api<kube::api::DynamicObject> =
        kube::Api::namespaced_with(env.client.clone(), &env.cluster_api_ns(), &resource);
    templates
        .delete("worker-a", &Default::default())
        .await
        .expect("delete the original template");

    let revert = [
        "revert",
        "--cluster-api-machineset=worker-a",
        &format!("--namespace={}", env.cluster_api_ns()),
    ];
    let out = cli(&env, &revert);
    assert!(
        !out.status.success(),
        "a revert to a missing template went ahead"
    );
    let stderr = stderr_of(&out);
    assert!(stderr.contains("worker-a, no longer exists"), "{stderr}");
    assert_eq!(template_of(&capi_machine_set(&env).await), moved);
}

/// The Cluster API MachineSet `name` of the test's Cluster API namespace.
async fn capi_machine_set_named(env: &TestEnv, name: &str) -> Value {
    object(env, CAPI_MACHINE_SET, name)
        .await
        .unwrap_or_else(|| panic!("the Cluster API MachineSet {name} exists"))
}

/// `object` as someone's `oc get -o yaml` clone of it under `name` would create it: labels and
/// annotations (ours included) kept, identity dropped, and another instance type.
fn clone_of(object: &Value, name: &str) -> Value {
    let mut clone = object.clone();
    let metadata = clone["metadata"].as_object_mut().unwrap();
    for identity in [
        "uid",
        "resourceVersion",
        "creationTimestamp",
        "managedFields",
        "generation",
    ] {
        metadata.remove(identity);
    }
    metadata.insert("name".into(), json!(name));
    clone["spec"]["template"]["spec"]["instanceType"] = json!("p4d.24xlarge");
    clone
}

/// Templates carry our label and `copied-from` annotation whoever copied them: an
/// administrator's clone of one of our copies, with another instance type, is never deleted as
/// an unused copy of ours, and a template someone created under the very name of the copy the
/// controller would create is never reused (issue 38: a MachineSet on m6i.xlarge was moved to a
/// p4d.24xlarge template, and the administrator's templates were deleted).
#[tokio::test]
async fn templates_that_merely_look_like_our_copies_are_neither_reused_nor_deleted() {
    let env = TestEnv::new("capi-clones").await;
    env.aws_cluster("4.21.0", &stream_421(), None).await;
    env.remember_images(&[AMI_420_US_EAST_1]).await;
    let capi = cluster_api_namespace(&env).await;
    env.apply(cluster_api::aws_machine_template(
        &capi,
        "worker-b",
        AMI_420_US_EAST_1,
    ))
    .await;
    for name in ["worker-a", "worker-b"] {
        env.apply(cluster_api::machine_set(&capi, name, name)).await;
    }
    let out = cli(
        &env,
        &[
            "plan",
            "--live",
            "-o",
            "json",
            &format!("--machine-api-namespace={}", env.ns),
        ],
    );
    assert!(out.status.success(), "{}", stderr_of(&out));
    let plan: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let planned_copy = |name: &str| {
        (plan["clusterApiMachineSets"].as_array().unwrap().iter())
            .find(|e| e["name"] == name)
            .and_then(|e| e["infrastructureTemplate"]["to"].as_str())
            .unwrap_or_else(|| panic!("no copy planned for {name}: {plan:#}"))
            .to_string()
    };
    let (copy_a, copy_b) = (planned_copy("worker-a"), planned_copy("worker-b"));
    // Someone's template under the name worker-b's copy will have: its image, our label, and
    // another instance type.
    let planned_b = (plan["clusterApiMachineSets"].as_array().unwrap().iter())
        .find(|e| e["name"] == "worker-b")
        .map(|e| e["infrastructureTemplate"]["object"].clone())
        .unwrap();
    env.create(clone_of(&planned_b, &copy_b)).await;

    let controller = env.controller(&["--cluster-api-template-grace=1s"]);
    controller.wait_ready().await;
    let moved = || async {
        let ms = capi_machine_set_named(&env, "worker-a").await;
        (template_of(&ms) == copy_a).then_some(())
    };
    waits::converge(&[&controller], CONVERGE, moved, async || {
        format!("worker-a never moved to {copy_a}")
    })
    .await;
    // An administrator's clone of our copy, unused.
    let ours = object(&env, TEMPLATE, &copy_a).await.expect("our copy");
    env.create(clone_of(&ours, "spare-clone")).await;

    let refused = r#"boot_image_controller_machine_resources{action="Error",kind="ClusterAPIMachineSet",reason="PatchFailed"}"#;
    waits::wait_for_metric(&controller, refused, CONVERGE, |v| v == 1.0).await;
    // Passes past the grace: each would delete an unused copy of ours.
    for round in 0..3 {
        tokio::time::sleep(Duration::from_secs(2)).await;
        let mut cm = golden_config_map(&env.ns, "4.21.0", &stream_421());
        cm["metadata"]["annotations"] = json!({"test/nudge": round.to_string()});
        env.apply(cm).await;
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    let worker_b = capi_machine_set_named(&env, "worker-b").await;
    assert_eq!(
        template_of(&worker_b),
        "worker-b",
        "moved to someone's template"
    );
    let theirs = object(&env, TEMPLATE, &copy_b).await.expect("not deleted");
    assert_eq!(
        theirs.pointer("/spec/template/spec/instanceType"),
        Some(&json!("p4d.24xlarge"))
    );
    assert!(
        object(&env, TEMPLATE, "spare-clone").await.is_some(),
        "the administrator's clone was deleted"
    );
    assert_eq!(
        template_of(&capi_machine_set_named(&env, "worker-a").await),
        copy_a
    );
}

/// A later RHCOS build for 4.21 (a z-stream's golden ConfigMap), so the copy of the first move
/// moves again.
const RHCOS_421_LATER: CompactStream = CompactStream {
    name: "rhcos-4.21",
    release: "9.6.20251212-0",
    amis: [
        "ami-0421b000000000001",
        "ami-0421b000000000002",
        "ami-0421b000000000003",
    ],
};

/// The copies `object` records as ours, as `(name, uid)`.
fn record_of(object: &Value) -> Vec<(String, String)> {
    let key = boot_image_controller::plan::cluster_api_templates::COPIES_ANNOTATION;
    let text = annotation_of(object, key).unwrap_or("[]");
    let record: Vec<Value> = serde_json::from_str(text).expect("a JSON record");
    (record.iter())
        .map(|c| {
            (
                c["name"].as_str().unwrap().into(),
                c["uid"].as_str().unwrap().into(),
            )
        })
        .collect()
}

fn uid_of(object: &Value) -> String {
    object["metadata"]["uid"].as_str().expect("a uid").into()
}

/// Two golden images with a restart of the controller in between (issue 46). The restarted
/// controller remembers no copy it made: it proves its copies by the record on the MachineSet
/// alone, which its watch used to drop. Now a MachineSet that needs the copy made before the
/// restart reuses it (it was stuck at `PatchFailed`), the second move is named after the
/// original template (not `<first copy>-<release>-...`), the first copy is deleted once unused,
/// and the record holds both copies, not only the newest.
#[tokio::test]
async fn after_a_restart_the_controller_still_proves_and_collects_its_copies() {
    let env = migrated_cluster("capi-restart").await;
    let mut controller = env.controller(&["--cluster-api-template-grace=1s"]);
    controller.wait_ready().await;
    let first = wait_for_template(&env, &controller, |t| t != "worker-a").await;
    let first_uid = uid_of(
        &object(&env, TEMPLATE, &first)
            .await
            .expect("the first copy"),
    );
    controller.terminate();

    let controller = env.controller(&["--cluster-api-template-grace=1s"]);
    controller.wait_ready().await;
    // A new MachineSet on the original template needs the very copy made before the restart.
    let capi = env.cluster_api_ns();
    env.apply(cluster_api::machine_set(&capi, "worker-b", "worker-a"))
        .await;
    let reused = wait_for_template_of(&env, &controller, "worker-b", |t| t != "worker-a").await;
    assert_eq!(reused, first);

    env.remember_images(&[AMI_420_US_EAST_1, AMI_421_US_EAST_1])
        .await;
    env.upgrade("4.21.1", &RHCOS_421_LATER.to_json()).await;
    let second = wait_for_template(&env, &controller, |t| t != first).await;
    assert!(
        second.starts_with(&format!("worker-a-{}-", RHCOS_421_LATER.release)),
        "{second} is not named after the original template worker-a"
    );
    assert_eq!(
        wait_for_template_of(&env, &controller, "worker-b", |t| t != first).await,
        second
    );
    let copy = object(&env, TEMPLATE, &second)
        .await
        .expect("the second copy");
    assert_eq!(
        copy.pointer("/spec/template/spec/ami/id"),
        Some(&json!(RHCOS_421_LATER.amis[0]))
    );
    let gone = || async { object(&env, TEMPLATE, &first).await.is_none().then_some(()) };
    waits::converge(&[&controller], CONVERGE, gone, async || {
        format!("the unused first copy {first} was never deleted")
    })
    .await;
    assert_eq!(
        record_of(&capi_machine_set(&env).await),
        [(first, first_uid), (second, uid_of(&copy))]
    );
    assert!(object(&env, TEMPLATE, "worker-a").await.is_some());
}

/// Anyone who may patch a MachineDeployment can write our record of copies and our history on
/// it. Naming an administrator's unused template there, with its UID and a move to it, never
/// gets it deleted, while the controller does delete its own unused copy meanwhile.
#[tokio::test]
async fn a_forged_record_never_gets_an_administrators_template_deleted() {
    let env = migrated_cluster("capi-forged").await;
    let capi = env.cluster_api_ns();
    let spare = env
        .apply(cluster_api::aws_machine_template(
            &capi,
            "spare",
            AMI_420_US_EAST_1,
        ))
        .await;
    let spare_uid = spare.metadata.uid.clone().expect("a uid");
    let mut forged = cluster_api::machine_deployment(&capi, "workers", "worker-a");
    let history = json!([{"time": "2026-01-01T00:00:00Z", "stream": "rhcos-4.21",
                          "infrastructureTemplate": {"from": "worker-a", "to": "spare"}}]);
    forged["metadata"]["annotations"] = json!({
        boot_image_controller::plan::cluster_api_templates::COPIES_ANNOTATION:
            json!([{"name": "spare", "uid": spare_uid}]).to_string(),
        boot_image_controller::names::HISTORY_ANNOTATION: history.to_string(),
    });
    env.apply(forged).await;

    let controller = env.controller(&["--cluster-api-template-grace=1s"]);
    controller.wait_ready().await;
    let moved = wait_for_template(&env, &controller, |t| t != "worker-a").await;
    // Reverted, the copy is unused: the controller collects it, and nothing else.
    let out = cli(
        &env,
        &[
            "revert",
            "--cluster-api-machineset=worker-a",
            &format!("--namespace={capi}"),
        ],
    );
    assert!(out.status.success(), "{}", stderr_of(&out));
    let gone = || async { object(&env, TEMPLATE, &moved).await.is_none().then_some(()) };
    waits::converge(&[&controller], CONVERGE, gone, async || {
        format!("the unused copy {moved} was never deleted")
    })
    .await;
    assert!(
        object(&env, TEMPLATE, "spare").await.is_some(),
        "the administrator's template was deleted on a forged record"
    );
}
