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

/// The cluster and user of the first context of the kubeconfig at `path`.
fn cluster_and_user(path: &std::path::Path) -> (Value, Value) {
    let text = std::fs::read_to_string(path).expect("a kubeconfig");
    let config: Value = serde_saphyr::from_str(&text).expect("kubeconfig YAML");
    (
        config["clusters"][0]["cluster"].clone(),
        config["users"][0]["user"].clone(),
    )
}

/// A fleet of four contexts: this test's cluster (acting), a second control plane (stood down:
/// the MCO reports boot images there), an API server that is not running, and this test's
/// cluster again as a ServiceAccount allowed nothing. One set of object flags names the objects
/// of both running clusters: the second one's namespace and singletons are this test's names.
#[tokio::test]
async fn a_fleet_report_has_a_row_per_cluster_and_an_error_row_for_a_stopped_one() {
    let env = TestEnv::new("plan-fleet").await;
    env.aws_cluster("4.21.0", &stream_421(), None).await;
    env.remember_images(&[AMI_420_US_EAST_1]).await;
    env.apply(
        machine_set(&env.ns, "worker-old")
            .ami(AMI_420_US_EAST_1)
            .build(),
    )
    .await;
    let second = support::private_cluster::PrivateCluster::up("fleet").await;
    let other = second.env(&env.ns).await;
    other.aws_cluster("4.21.0", &stream_421(), None).await;
    other
        .apply(machine_set(&other.ns, "worker-current").current().build())
        .await;
    let degraded = serde_json::json!({"conditions": [{"type": "BootImageUpdateDegraded",
        "status": "False", "reason": "MCOReports", "message": "written by the MCO",
        "lastTransitionTime": "2026-11-01T00:00:00Z"}]});
    crate::sharing_with_mco::write_status_as(&other, "machine-config-controller", degraded).await;
    let token = crate::metrics_tls::token_of(&env, "fleet-reader").await;

    let (here, admin) = cluster_and_user(&support::kubeconfig());
    let (there, there_admin) = cluster_and_user(&second.kubeconfig);
    let mut stopped = here.clone();
    stopped["server"] = format!("https://127.0.0.1:{}", support::free_port()).into();
    // Connections are queued by the kernel and never answered.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let mut silent = here.clone();
    silent["server"] = format!("https://{}", listener.local_addr().unwrap()).into();
    let contexts = [
        ("acting", "here", "admin"),
        ("stood-down", "there", "there-admin"),
        ("stopped", "stopped", "admin"),
        ("forbidden", "here", "reader"),
    ];
    let kubeconfig = serde_json::json!({"apiVersion": "v1", "kind": "Config",
        "current-context": "acting",
        "clusters": [{"name": "here", "cluster": here}, {"name": "there", "cluster": there},
            {"name": "stopped", "cluster": stopped}, {"name": "silent", "cluster": silent}],
        "users": [{"name": "admin", "user": admin}, {"name": "there-admin", "user": there_admin},
            {"name": "reader", "user": {"token": token}}],
        "contexts": contexts.map(|(name, cluster, user)|
            serde_json::json!({"name": name, "context": {"cluster": cluster, "user": user}})),
    });

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("fleet.kubeconfig");
    std::fs::write(&path, kubeconfig.to_string()).unwrap();
    let fleet_in = |path: &std::path::Path, extra: &[&str]| {
        let mut args = vec![
            "plan".to_string(),
            format!("--kubeconfig={}", path.display()),
            format!("--machine-api-namespace={}", env.ns),
            format!("--now={NOW}"),
        ];
        args.extend(env.cluster_object_flags());
        args.extend(extra.iter().map(|s| s.to_string()));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        run_binary(&args)
    };
    let fleet = |extra: &[&str]| fleet_in(&path, extra);

    // Every context, in the kubeconfig's order; a failed cluster is a row, and exit code 4.
    let out = fleet(&["--all-contexts"]);
    assert_eq!(out.status.code(), Some(4), "{}", stderr_of(&out));
    let table = String::from_utf8(out.stdout).unwrap();
    let rows: Vec<Vec<&str>> = (table.lines().skip(1).take(4))
        .map(|l| {
            l.split("  ")
                .map(str::trim)
                .filter(|c| !c.is_empty())
                .collect()
        })
        .collect();
    assert_eq!(
        rows,
        [
            vec!["acting", "4.21.0", "AWS", "this controller", "1", "0", "0"],
            vec![
                "stood-down",
                "4.21.0",
                "AWS",
                "the MCO (stood down)",
                "0",
                "0",
                "0"
            ],
            vec!["stopped", "-", "-", "error (unreachable)"],
            vec!["forbidden", "-", "-", "error (forbidden)"],
        ],
        "{table}"
    );
    assert!(
        table.contains("=== stopped ===\nerror (unreachable): "),
        "{table}"
    );
    assert!(table.contains(&format!("{}/worker-old", env.ns)), "{table}");

    // The same as one JSON document, for the contexts named, in the order named.
    let out = fleet(&[
        "-o",
        "json",
        "--context",
        "stopped",
        "--context",
        "acting",
        "--context",
        "stood-down",
    ]);
    assert_eq!(out.status.code(), Some(4), "{}", stderr_of(&out));
    let report: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let clusters = report["clusters"].as_array().unwrap();
    let summary: Vec<(&str, &str, &str)> = (clusters.iter())
        .map(|c| {
            let s = |key: &str, inner: Option<&str>| {
                let v = &c[key];
                let v = inner.map_or(v, |k| &v[k]);
                v.as_str().unwrap_or("-")
            };
            (
                s("context", None),
                s("error", Some("kind")),
                s("managedBy", None),
            )
        })
        .collect();
    assert_eq!(
        summary,
        [
            ("stopped", "unreachable", "-"),
            ("acting", "-", "thisController"),
            ("stood-down", "-", "mco")
        ]
    );
    let acting = &clusters[1]["plan"]["machineSets"][0];
    assert_eq!(
        (&acting["name"], &acting["action"]),
        (&"worker-old".into(), &"Update".into())
    );

    // Every cluster read: 0, or 3 with --detailed-exitcode when one would be updated.
    let both = ["--context", "acting", "--context", "stood-down"];
    assert_eq!(fleet(&both).status.code(), Some(0));
    let detailed = [&both[..], &["--detailed-exitcode"]].concat();
    assert_eq!(fleet(&detailed).status.code(), Some(3));

    // An API server that never answers is a timeout, the next context reported all the same.
    let mut silent_fleet = kubeconfig.clone();
    silent_fleet["contexts"] = serde_json::json!([
        {"name": "silent", "context": {"cluster": "silent", "user": "admin"}},
        {"name": "stopped", "context": {"cluster": "stopped", "user": "admin"}},
    ]);
    let silent_path = dir.path().join("silent.kubeconfig");
    std::fs::write(&silent_path, silent_fleet.to_string()).unwrap();
    let out = fleet_in(
        &silent_path,
        &["--all-contexts", "-o", "json", "--cluster-timeout=1s"],
    );
    assert_eq!(out.status.code(), Some(4), "{}", stderr_of(&out));
    let report: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(
        report["clusters"][0]["error"]["kind"], "timeout",
        "{report}"
    );
    assert_eq!(
        report["clusters"][1]["error"]["kind"], "unreachable",
        "{report}"
    );
    drop(listener);
}
