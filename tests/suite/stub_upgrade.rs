//! A spec-2 stub secret on a real API server: the controller upgrades it in place before it
//! moves the MachineSet's image, the MachineSet keeps naming it, and `revert` puts its old
//! content back (MCO pkg/controller/bootimage/helpers.go, `upgradeStubIgnitionIfRequired`).

use crate::support;

use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use serde_json::Value;
use support::fixtures::*;
use support::{TestEnv, eventually, plan_json, run_binary, stderr_of};

const CONVERGE: Duration = Duration::from_secs(60);
const STUB: &str = "worker-user-data";
const UPGRADED_TO: &str = "machineconfiguration.openshift.io/stub-ignition-upgraded-to";
const UPGRADED_AT: &str = "machineconfiguration.openshift.io/stub-ignition-upgraded-at";
const OPT_OUT: &str = boot_image_controller::names::OPT_OUT_ANNOTATION;

async fn stub(env: &TestEnv) -> Secret {
    let secrets: Api<Secret> = Api::namespaced(env.client.clone(), &env.ns);
    secrets.get(STUB).await.expect("the stub secret")
}

fn user_data(secret: &Secret) -> Vec<u8> {
    secret.data.as_ref().unwrap()["userData"].0.clone()
}

fn annotation<'a>(secret: &'a Secret, key: &str) -> Option<&'a str> {
    secret
        .metadata
        .annotations
        .as_ref()?
        .get(key)
        .map(String::as_str)
}

#[tokio::test]
async fn a_spec2_stub_is_upgraded_in_place_kept_by_name_and_put_back_by_revert() {
    let env = TestEnv::new("stub-upgrade").await;
    // A cluster installed before 4.6: the installer's worker stub is Ignition 2.2.0.
    env.aws_cluster("4.21.0", &stream_421(), None).await;
    env.remember_images(&AMIS_420).await;
    env.apply(machine_set(&env.ns, "worker-a").build()).await;
    let before = user_data(&stub(&env).await);

    // The plan says which secret it upgrades, and that the MachineSet keeps it.
    let plan = plan_json(&env).await;
    let planned = &plan["machineSets"][0];
    assert_eq!(planned["action"], "Update", "{planned:#}");
    assert_eq!(planned["stubSecretUpgrade"]["name"], STUB, "{planned:#}");
    assert_eq!(planned["stubSecretUpgrade"]["toVersion"], "3.2.0");
    assert_eq!(planned["userDataSecret"]["target"], Value::Null);

    let mut controller = env.controller(&[]);
    let updated = eventually(CONVERGE, || async {
        let ms = env.machine_set("worker-a").await;
        (ami_of(&ms) == AMI_421_US_EAST_1).then_some(ms)
    })
    .await
    .unwrap_or_else(|| panic!("worker-a never updated:\n{}", controller.logs()));
    assert_eq!(secret_of(&updated), STUB, "the MachineSet keeps its stub");

    let upgraded = stub(&env).await;
    let config: Value = serde_json::from_slice(&user_data(&upgraded)).unwrap();
    assert_eq!(config["ignition"]["version"], "3.2.0");
    let old: Value = serde_json::from_slice(&before).unwrap();
    assert_eq!(
        config["ignition"]["config"]["merge"], old["ignition"]["config"]["append"],
        "the same machine config server, as spec 3 says it"
    );
    assert_eq!(annotation(&upgraded, UPGRADED_TO), Some("3.2.0"));
    assert!(annotation(&upgraded, UPGRADED_AT).is_some());
    controller.terminate();

    let mut args = vec![
        "revert".to_string(),
        format!("--kubeconfig={}", support::kubeconfig().display()),
        format!("--namespace={}", env.ns),
        "--machineset=worker-a".into(),
    ];
    args.extend(env.cluster_object_flags());
    let out = run_binary(&args.iter().map(String::as_str).collect::<Vec<_>>());
    assert!(out.status.success(), "revert failed: {}", stderr_of(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("Stub secret worker-user-data"), "{text}");
    let reverted = stub(&env).await;
    assert_eq!(
        user_data(&reverted),
        before,
        "the spec-2 stub is back, byte for byte"
    );
    assert_eq!(annotation(&reverted, UPGRADED_TO), None);
    assert_eq!(
        reverted.data.unwrap().len(),
        2,
        "userData and disableTemplating only"
    );
    let ms = env.machine_set("worker-a").await;
    assert_eq!((ami_of(&ms), secret_of(&ms)), (AMI_420_US_EAST_1, STUB));
}

/// Another MachineSet on the same stub would be left with spec 2 under a new image: the revert
/// refuses to put the stub back unless asked to leave it.
#[tokio::test]
async fn revert_keeps_a_shared_stub_unless_told() {
    let env = TestEnv::new("stub-shared").await;
    env.aws_cluster("4.21.0", &stream_421(), None).await;
    env.remember_images(&AMIS_420).await;
    for name in ["worker-a", "worker-b"] {
        env.apply(machine_set(&env.ns, name).build()).await;
    }
    let mut controller = env.controller(&[]);
    let both = eventually(CONVERGE, || async {
        let ms = env.machine_sets().await;
        ms.values()
            .all(|ms| ami_of(ms) == AMI_421_US_EAST_1)
            .then_some(())
    })
    .await;
    both.unwrap_or_else(|| panic!("never updated:\n{}", controller.logs()));
    controller.terminate();
    let upgraded = user_data(&stub(&env).await);

    let revert = |extra: &[&str]| {
        let mut args = vec![
            "revert".to_string(),
            format!("--kubeconfig={}", support::kubeconfig().display()),
            format!("--namespace={}", env.ns),
            "--machineset=worker-a".into(),
        ];
        args.extend(env.cluster_object_flags());
        args.extend(extra.iter().map(|s| s.to_string()));
        run_binary(&args.iter().map(String::as_str).collect::<Vec<_>>())
    };
    let refused = revert(&[]);
    assert_eq!(refused.status.code(), Some(3), "{}", stderr_of(&refused));
    assert!(
        stderr_of(&refused).contains("MachineSet worker-b"),
        "{}",
        stderr_of(&refused)
    );
    assert_eq!(
        ami_of(&env.machine_set("worker-a").await),
        AMI_421_US_EAST_1
    );

    let kept = revert(&["--keep-stub-secret"]);
    assert!(kept.status.success(), "{}", stderr_of(&kept));
    assert_eq!(
        ami_of(&env.machine_set("worker-a").await),
        AMI_420_US_EAST_1
    );
    assert_eq!(
        user_data(&stub(&env).await),
        upgraded,
        "the shared stub stays spec 3"
    );
}

/// A MachineSet patch the API server refuses (annotations over its 256 KiB limit) leaves the
/// stub as it was: the upgrade goes only once no dry run of the patches moving with it is
/// refused, else the MachineSet would stay on its old image, which may read spec 2 only, with a
/// spec-3 stub. The other MachineSet on that stub waits with it, and says why.
#[tokio::test]
async fn a_refused_machine_set_patch_leaves_the_spec2_stub_as_it_is() {
    let env = TestEnv::new("stub-refused").await;
    env.aws_cluster("4.21.0", &stream_421(), None).await;
    env.remember_images(&AMIS_420).await;
    // Annotations just under the API's 256 KiB limit: the controller's would push them over.
    let filler = "x".repeat(262_050);
    let crowded = machine_set(&env.ns, "crowded").annotate("example.com/filler", &filler);
    env.apply(crowded.build()).await;
    env.apply(machine_set(&env.ns, "worker-b").build()).await;
    let before = stub(&env).await;

    let controller = env.controller(&[]);
    controller.wait_ready().await;
    let failed = r#"boot_image_controller_patches_total{kind="MachineSet",result="failed"}"#;
    let refused = eventually(CONVERGE, || async {
        (controller.metric(failed).await? >= 1.0).then_some(())
    })
    .await;
    assert!(refused.is_some(), "{}", controller.log_tail(30));
    let degraded = eventually(CONVERGE, || async {
        let degraded = env.condition("BootImageUpdateDegraded").await?;
        let message = degraded["message"].as_str()?.to_string();
        let both = message.contains("Too long") && message.contains("not sent");
        both.then_some(message)
    })
    .await;
    assert!(degraded.is_some(), "{}", controller.log_tail(30));
    assert_eq!(
        ami_of(&env.machine_set("worker-b").await),
        AMI_420_US_EAST_1
    );

    let after = stub(&env).await;
    assert_eq!(
        user_data(&after),
        user_data(&before),
        "the stub is still spec 2"
    );
    assert_eq!(annotation(&after, UPGRADED_TO), None);
    assert_eq!(
        after.metadata.resource_version, before.metadata.resource_version,
        "the stub secret was not written"
    );
    assert_eq!(ami_of(&env.machine_set("crowded").await), AMI_420_US_EAST_1);
}

/// A spec-2 stub that a MachineSet keeping its image also names (here opted out) is not
/// upgraded, and the MachineSet that would move says why; once the other moves too, both move
/// and the stub is upgraded.
#[tokio::test]
async fn a_spec2_stub_that_a_machine_set_keeping_its_image_names_is_not_upgraded() {
    let env = TestEnv::new("stub-kept-by-other").await;
    env.aws_cluster("4.21.0", &stream_421(), None).await;
    env.remember_images(&AMIS_420).await;
    env.apply(machine_set(&env.ns, "worker-a").build()).await;
    env.apply(machine_set(&env.ns, "pinned").opted_out().build())
        .await;
    let before = stub(&env).await;

    let controller = env.controller(&[]);
    controller.wait_ready().await;
    let shared = r#"boot_image_controller_machine_resources{action="Skip",kind="MachineSet",reason="StubSecretShared"}"#;
    let counted = eventually(CONVERGE, || async {
        (controller.metric(shared).await? == 1.0).then_some(())
    })
    .await;
    assert!(counted.is_some(), "{}", controller.log_tail(30));
    let progressing = eventually(CONVERGE, || async {
        let condition = env.condition("BootImageUpdateProgressing").await?;
        let message = condition["message"].as_str()?.to_string();
        message.contains("StubSecretShared: 1").then_some(message)
    })
    .await;
    assert!(progressing.is_some(), "{}", controller.log_tail(30));
    // What `plan` prints for it names the MachineSet that keeps the stub in use.
    let plan = plan_json(&env).await;
    let entries = plan["machineSets"].as_array().unwrap();
    let worker = entries.iter().find(|e| e["name"] == "worker-a").unwrap();
    assert_eq!(worker["reason"], "StubSecretShared", "{worker:#}");
    let message = worker["message"].as_str().unwrap();
    assert!(message.contains("MachineSet pinned"), "{message}");
    let after = stub(&env).await;
    assert_eq!(
        user_data(&after),
        user_data(&before),
        "the stub is still spec 2"
    );
    assert_eq!(
        ami_of(&env.machine_set("worker-a").await),
        AMI_420_US_EAST_1
    );

    // Opted back in, it moves too: the stub is upgraded once, and both move.
    env.annotate_machine_set("pinned", OPT_OUT, None).await;
    let both = eventually(CONVERGE, || async {
        let ms = env.machine_sets().await;
        ms.values()
            .all(|ms| ami_of(ms) == AMI_421_US_EAST_1)
            .then_some(())
    })
    .await;
    assert!(both.is_some(), "{}", controller.log_tail(30));
    assert_eq!(annotation(&stub(&env).await, UPGRADED_TO), Some("3.2.0"));
}
