//! `plan --live` reads the cluster read-only and decides exactly as `plan` on the same objects
//! dumped to a file, and as the controller would; it writes nothing.

use crate::support;

use serde_json::Value;
use support::fixtures::*;
use support::{TestEnv, run_binary, stderr_of};

/// One clock for both plans: patches record the time in their history annotation.
const NOW: &str = "2026-03-02T10:00:00Z";

fn live_plan(env: &TestEnv, extra: &[&str]) -> std::process::Output {
    let kubeconfig = support::kubeconfig();
    let mut args = vec![
        "plan".to_string(),
        "-o".into(),
        "json".into(),
        format!("--now={NOW}"),
        format!("--kubeconfig={}", kubeconfig.display()),
        format!("--machine-api-namespace={}", env.ns),
        format!("--golden-configmap-namespace={}", env.ns),
        format!("--machine-configuration-name={}", env.singleton),
        format!("--infrastructure-name={}", env.singleton),
        format!("--cluster-version-name={}", env.singleton),
        format!("--controller-namespace={}", env.ns),
    ];
    args.extend(extra.iter().map(|s| s.to_string()));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    run_binary(&args)
}

#[tokio::test]
async fn a_live_plan_is_the_plan_of_the_same_objects_and_writes_nothing() {
    let env = TestEnv::new("plan-live").await;
    env.aws_cluster("4.21.0", &stream_421(), None).await;
    // The controller remembered 4.20's image: it is a CoreOS image, not a custom one.
    env.remember_images(&[AMI_420_US_EAST_1]).await;
    env.apply(
        machine_set(&env.ns, "worker-old")
            .ami(AMI_420_US_EAST_1)
            .build(),
    )
    .await;
    env.apply(machine_set(&env.ns, "worker-current").current().build())
        .await;
    let before = env.machine_set_versions().await;

    let out = live_plan(&env, &["--detailed-exitcode"]);
    assert_eq!(out.status.code(), Some(3), "{}", stderr_of(&out));
    let live: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    // The same objects dumped to a file, planned with the same clock.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("cluster.json");
    std::fs::write(&file, cluster_manifests(&env).await.to_string()).unwrap();
    let from_file = run_binary(&[
        "plan",
        "-o",
        "json",
        "--now",
        NOW,
        "-f",
        file.to_str().unwrap(),
    ]);
    assert!(from_file.status.success(), "{}", stderr_of(&from_file));
    let from_files: Value = serde_json::from_slice(&from_file.stdout).expect("JSON");
    let decisions = |plan: &Value| -> Vec<(String, String, String)> {
        plan["machineSets"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| {
                let s = |k: &str| e[k].as_str().unwrap_or_default().to_string();
                (s("name"), s("action"), s("reason"))
            })
            .collect()
    };
    assert_eq!(decisions(&live), decisions(&from_files));
    assert!(
        decisions(&live)
            .iter()
            .any(|(n, a, _)| n == "worker-old" && a == "Update"),
        "{live}"
    );
    // The patches too: what `run` would send.
    assert_eq!(live["machineSets"], from_files["machineSets"]);
    assert_eq!(
        env.machine_set_versions().await,
        before,
        "plan wrote something"
    );

    // Secret contents are read to check them, and printed only where a spec-2 stub is upgraded
    // in place: the write `run` would send holds the pointer config it replaces.
    let mut shown = live.clone();
    for decision in shown["machineSets"].as_array_mut().unwrap() {
        decision
            .as_object_mut()
            .unwrap()
            .remove("stubSecretUpgrade");
    }
    assert!(
        !shown.to_string().contains("ignition"),
        "secret content in the output"
    );
}

/// Behind a proxy, as `oc` is: the environment's `HTTPS_PROXY` is not used for an API server
/// that `NO_PROXY` names or that is on loopback (kube-client alone would take it, `NO_PROXY` or
/// not, and this one listens nowhere).
#[tokio::test]
async fn an_api_server_exempt_from_the_proxy_is_reached_directly() {
    let env = TestEnv::new("plan-live-proxy").await;
    env.aws_cluster("4.21.0", &stream_421(), None).await;
    let kubeconfig = support::kubeconfig();
    let mut args = vec![
        "plan".to_string(),
        format!("--kubeconfig={}", kubeconfig.display()),
    ];
    args.extend(env.cluster_object_flags());
    let out = std::process::Command::new(support::BINARY)
        .args(&args)
        .env_remove("KUBECONFIG")
        .env("HTTPS_PROXY", "http://user:secret@127.0.0.1:1")
        .env("NO_PROXY", "example.com")
        .output()
        .expect("the binary runs");
    assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
    assert!(!stderr_of(&out).contains("secret"), "{}", stderr_of(&out));
}

#[test]
fn an_unreachable_cluster_is_a_failure_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        r#"{"apiVersion": "v1", "kind": "Config", "current-context": "c",
            "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:1"}}],
            "users": [{"name": "u", "user": {"token": "t"}}],
            "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}]}"#,
    )
    .unwrap();
    let out = run_binary(&["plan", "--kubeconfig", kubeconfig.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr_of(&out).contains("cannot read the cluster"),
        "{}",
        stderr_of(&out)
    );
}
