//! `boot-image-controller revert` against a real kube-apiserver, with the controller as a
//! process: update, revert, and what the controller does afterwards.

use crate::support;

use std::process::Output;
use std::time::Duration;

use serde_json::{Value, json};
use support::fixtures::*;
use support::{
    TestEnv, eventually, plan_json, resource_version, run_binary as run, stderr_of as stderr,
};

const CONVERGE: Duration = Duration::from_secs(60);
const OPT_OUT: &str = "boot-image-controller.io/boot-image-updates";
const HISTORY: &str = "boot-image-controller.io/history";
const HOT_LOOP: &str = "boot-image-controller.io/hot-loop";

/// An AWS cluster on 4.21 that came from 4.20 (whose AMIs the controller remembers), with the
/// MachineSets named on 4.20's AMI and the installer's stub secret.
async fn upgraded_cluster(env: &TestEnv, machine_sets: &[&str]) {
    env.aws_cluster("4.21.0", &stream_421(), None).await;
    env.remember_images(&AMIS_420).await;
    for name in machine_sets {
        env.apply(machine_set(&env.ns, name).build()).await;
    }
}

/// Waits until the controller moved `name` to 4.21's AMI, keeping its stub secret.
async fn wait_updated(env: &TestEnv, name: &str) -> Value {
    let found = eventually(CONVERGE, || async {
        let ms = env.machine_set(name).await;
        (ami_of(&ms) == AMI_421_US_EAST_1 && secret_of(&ms) == "worker-user-data").then_some(ms)
    })
    .await;
    found.unwrap_or_else(|| panic!("{name} was never updated"))
}

/// `revert` on a MachineSet of this cluster, with extra flags.
fn revert(env: &TestEnv, name: &str, extra: &[&str]) -> Output {
    let mut args = vec![
        "revert".to_string(),
        format!("--kubeconfig={}", support::kubeconfig().display()),
        format!("--namespace={}", env.ns),
        format!("--machineset={name}"),
    ];
    args.extend(env.cluster_object_flags());
    args.extend(extra.iter().map(|s| s.to_string()));
    run(&args.iter().map(String::as_str).collect::<Vec<_>>())
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn entry<'a>(plan: &'a Value, name: &str) -> &'a Value {
    plan["machineSets"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["name"] == name)
        .unwrap_or_else(|| panic!("no {name} in {plan:#}"))
}

/// The JSON text of the provider spec: equal texts are equal bytes as the server serves them.
fn provider_spec_text(ms: &Value) -> String {
    serde_json::to_string(provider_spec_of(ms)).unwrap()
}

#[tokio::test]
async fn revert_restores_the_original_and_the_controller_leaves_it_until_opted_back_in() {
    let env = TestEnv::new("revert").await;
    upgraded_cluster(&env, &["worker-a"]).await;
    let original = provider_spec_text(&env.machine_set("worker-a").await);

    let mut controller = env.controller(&[]);
    controller.wait_ready().await;
    wait_updated(&env, "worker-a").await;

    // The change is visible in `plan` and in the status before anyone reverts it.
    let plan = plan_json(&env).await;
    let last = &entry(&plan, "worker-a")["lastChange"];
    assert_eq!(
        last["bootImage"],
        json!({"from": AMI_420_US_EAST_1, "to": AMI_421_US_EAST_1})
    );
    assert_eq!(
        last.get("userDataSecret"),
        None,
        "the stub secret keeps its name"
    );
    assert_eq!(last["release"], "4.21.0");
    let progressing = eventually(CONVERGE, || async {
        let message = env.condition("BootImageUpdateProgressing").await?["message"]
            .as_str()?
            .to_string();
        message
            .contains("Last changes: worker-a at ")
            .then_some(message)
    })
    .await
    .expect("the status names the last change");
    assert!(
        progressing.contains(&format!(
            "boot image {AMI_420_US_EAST_1} -> {AMI_421_US_EAST_1}"
        )),
        "{progressing}"
    );

    controller.terminate();
    let out = revert(&env, "worker-a", &[]);
    assert!(out.status.success(), "revert failed: {}", stderr(&out));
    let text = stdout(&out);
    for expected in [
        "Reverted MachineSet",
        &format!("bootImage  {AMI_421_US_EAST_1} -> {AMI_420_US_EAST_1}"),
        // The installer's spec-2 stub, upgraded in place for the new image, goes back with it.
        "Stub secret worker-user-data: Ignition 3.2.0 -> the content it had before",
        &format!(
            "oc annotate machinesets.machine.openshift.io/worker-a -n {} {OPT_OUT}-",
            env.ns
        ),
    ] {
        assert!(text.contains(expected), "{expected:?} not in:\n{text}");
    }

    let reverted = env.machine_set("worker-a").await;
    assert_eq!(
        provider_spec_text(&reverted),
        original,
        "byte-identical provider spec"
    );
    assert_eq!(annotation_of(&reverted, OPT_OUT), Some("disabled"));
    assert_eq!(
        annotation_of(&reverted, HISTORY),
        None,
        "the undone entry is dropped"
    );
    assert_eq!(annotation_of(&reverted, HOT_LOOP), None);
    let plan = plan_json(&env).await;
    assert_eq!(entry(&plan, "worker-a")["reason"], "OptedOut");
    assert_eq!(entry(&plan, "worker-a").get("lastChange"), None);

    // Restarted, the controller updates another MachineSet and leaves the reverted one alone.
    // That one has a stub of its own: the reverted MachineSet keeps its image and names the
    // stub put back at spec 2, which is then never upgraded (`StubSecretShared`).
    let reverted_version = resource_version(&reverted);
    let worker_b = machine_set(&env.ns, "worker-b").user_data("worker-user-data-managed");
    env.apply(worker_b.build()).await;
    let mut controller = env.controller(&[]);
    controller.wait_ready().await;
    let moved = eventually(CONVERGE, || async {
        (ami_of(&env.machine_set("worker-b").await) == AMI_421_US_EAST_1).then_some(())
    })
    .await;
    assert!(moved.is_some(), "{}", controller.log_tail(30));
    eventually(CONVERGE, || async {
        let message = env.condition("BootImageUpdateProgressing").await?["message"]
            .as_str()?
            .to_string();
        message.contains("(OptedOut: 1)").then_some(())
    })
    .await
    .expect("the status counts the opted-out MachineSet");
    let untouched = env.machine_set("worker-a").await;
    assert_eq!(
        resource_version(&untouched),
        reverted_version,
        "the controller wrote to the reverted MachineSet; log:\n{}",
        controller.log_tail(30)
    );

    // Opting back in: the controller updates it again, and records it again.
    env.annotate_machine_set("worker-a", OPT_OUT, None).await;
    let again = wait_updated(&env, "worker-a").await;
    let history = history_of(&again);
    assert_eq!(history.len(), 1, "{history:?}");
    assert_eq!(history[0]["bootImage"]["from"], AMI_420_US_EAST_1);
    controller.terminate();
}

#[tokio::test]
async fn a_dry_run_writes_nothing_and_a_stale_revert_is_refused() {
    let env = TestEnv::new("revert-guards").await;
    upgraded_cluster(&env, &["worker-a"]).await;
    let mut controller = env.controller(&[]);
    controller.wait_ready().await;
    wait_updated(&env, "worker-a").await;
    controller.terminate();
    let updated = env.machine_set("worker-a").await;

    // Dry run: the patch and the changes are printed, the server validates, nothing changes.
    let out = revert(&env, "worker-a", &["--dry-run"]);
    assert!(out.status.success(), "dry run failed: {}", stderr(&out));
    let text = stdout(&out);
    for expected in [
        "Would revert MachineSet",
        "\"op\": \"test\"",
        "\"op\": \"replace\"",
        "Dry run: the API server accepted the patch; nothing was written.",
    ] {
        assert!(text.contains(expected), "{expected:?} not in:\n{text}");
    }
    assert_eq!(
        resource_version(&env.machine_set("worker-a").await),
        resource_version(&updated)
    );

    // More steps than recorded: refused, naming how many exist.
    let out = revert(&env, "worker-a", &["--steps", "2"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("has only 1 recorded change(s)"),
        "{}",
        stderr(&out)
    );

    // Someone moved the AMI since the controller did: the revert must not overwrite that.
    env.json_patch(
        ("machine.openshift.io/v1beta1", "MachineSet"),
        "worker-a",
        json!([{"op": "replace", "path": "/spec/template/spec/providerSpec/value/ami/id", "value": CUSTOM_AMI}]),
    )
    .await
    .unwrap();
    let out = revert(&env, "worker-a", &[]);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    assert!(
        stderr(&out).contains(&format!(
            "bootImage at /spec/template/spec/providerSpec/value/ami/id is {CUSTOM_AMI}, but the \
             controller last set it to {AMI_421_US_EAST_1}"
        )),
        "{}",
        stderr(&out)
    );
    let after = env.machine_set("worker-a").await;
    assert_eq!(ami_of(&after), CUSTOM_AMI);
    assert_eq!(secret_of(&after), "worker-user-data");
    assert_eq!(annotation_of(&after, OPT_OUT), None);
}

#[tokio::test]
async fn without_history_there_is_nothing_to_revert() {
    let env = TestEnv::new("revert-none").await;
    upgraded_cluster(&env, &["worker-a"]).await;
    let before = env.machine_set("worker-a").await;

    let out = revert(&env, "worker-a", &[]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains(&format!(
            "MachineSet {}/worker-a has no boot-image history",
            env.ns
        )),
        "{}",
        stderr(&out)
    );
    assert_eq!(
        resource_version(&env.machine_set("worker-a").await),
        resource_version(&before)
    );

    let out = revert(&env, "missing", &[]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("not found"), "{}", stderr(&out));
}

/// The history annotation is not a trusted record: anyone who can edit the MachineSet can
/// write it. A history that would "restore" an image the controller does not recognise as
/// CoreOS is refused, naming who wrote it, unless the user says to go ahead.
#[tokio::test]
async fn a_planted_history_is_refused_unless_the_user_allows_the_image() {
    let env = TestEnv::new("revert-planted").await;
    upgraded_cluster(&env, &["worker-a"]).await;
    let mut controller = env.controller(&[]);
    controller.wait_ready().await;
    let updated = wait_updated(&env, "worker-a").await;
    controller.terminate();

    // Another writer swaps the recorded original for its own AMI.
    let history = annotation_of(&updated, HISTORY)
        .expect("history")
        .to_string();
    let planted = history.replace(AMI_420_US_EAST_1, CUSTOM_AMI);
    assert_ne!(planted, history, "the history records {AMI_420_US_EAST_1}");
    env.annotate_machine_set("worker-a", HISTORY, Some(&planted))
        .await;
    let before = env.machine_set("worker-a").await;

    let out = revert(&env, "worker-a", &[]);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    let refused = stderr(&out);
    for expected in [
        "is not a CoreOS image",
        CUSTOM_AMI,
        // The other writer now owns the annotation (an update takes over the fields it changes).
        "written by: ",
        "--allow-unrecognised-image",
    ] {
        assert!(
            refused.contains(expected),
            "{expected:?} not in:\n{refused}"
        );
    }
    assert_eq!(
        resource_version(&env.machine_set("worker-a").await),
        resource_version(&before),
        "a refused revert wrote"
    );

    // The user checked the value and insists.
    let out = revert(&env, "worker-a", &["--allow-unrecognised-image"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stdout(&out).contains("NOT recognised as a CoreOS image"),
        "{}",
        stdout(&out)
    );
    assert_eq!(ami_of(&env.machine_set("worker-a").await), CUSTOM_AMI);
}

/// A history the controller recorded restores a recognised image, and says so.
#[tokio::test]
async fn a_recorded_history_names_its_writer_and_the_image_is_recognised() {
    let env = TestEnv::new("revert-provenance").await;
    upgraded_cluster(&env, &["worker-a"]).await;
    let mut controller = env.controller(&[]);
    controller.wait_ready().await;
    wait_updated(&env, "worker-a").await;
    controller.terminate();

    let out = revert(&env, "worker-a", &["--dry-run"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(
        text.contains("History written by: boot-image-controller\n"),
        "{text}"
    );
    assert!(
        text.contains("Boot image put back: a CoreOS image the controller recognises"),
        "{text}"
    );
}
