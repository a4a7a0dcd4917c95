//! The Deployment's memory request and limit hold the controller's measured peak with 200
//! MachineSets.

use crate::deploy;
use crate::support;

use std::process::Command;
use std::time::Duration;

use boot_image_controller::metrics::names;
use deploy::*;
use serde_json::Value;

// ---------------------------------------------------------------------------------------------
// Resources

/// MachineSets in the sizing scenario: more than any real cluster has (a large one has a few
/// dozen: one per role and availability zone). `BIC_SIZING_MACHINE_SETS` measures another size.
fn sizing_machine_sets() -> usize {
    std::env::var("BIC_SIZING_MACHINE_SETS")
        .ok()
        .map(|n| n.parse().expect("BIC_SIZING_MACHINE_SETS is a number"))
        .unwrap_or(200)
}

/// A Kubernetes memory quantity (`64Mi`, `1Gi`, `500M`, bytes) in bytes.
fn quantity_bytes(q: &str) -> u64 {
    let (digits, unit) = q.split_at(q.find(|c: char| !c.is_ascii_digit()).unwrap_or(q.len()));
    let n: u64 = digits.parse().unwrap_or_else(|_| panic!("quantity {q:?}"));
    n * match unit {
        "" => 1,
        "Ki" => 1 << 10,
        "Mi" => 1 << 20,
        "Gi" => 1 << 30,
        "k" => 1_000,
        "M" => 1_000_000,
        "G" => 1_000_000_000,
        other => panic!("quantity {q:?}: unit {other:?}"),
    }
}

/// User plus system CPU time of a process so far, in seconds.
fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("/proc/<pid>/stat");
    // Fields after the parenthesised command name: state is field 3, utime 14, stime 15.
    let fields: Vec<&str> = stat[stat.rfind(')').expect("comm") + 2..]
        .split_whitespace()
        .collect();
    let ticks: f64 =
        fields[11].parse::<f64>().expect("utime") + fields[12].parse::<f64>().expect("stime");
    let per_second: f64 = Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok())
        .unwrap_or(100.0);
    ticks / per_second
}

#[test]
fn quantities_are_read_as_kubernetes_writes_them() {
    assert_eq!(quantity_bytes("64Mi"), 64 << 20);
    assert_eq!(quantity_bytes("1Gi"), 1 << 30);
    assert_eq!(quantity_bytes("500M"), 500_000_000);
    assert_eq!(quantity_bytes("1024"), 1024);
}

/// The controller's peak memory while it updates 200 outdated MachineSets
/// (watches, plans, 200 patches and Events, status, known images), against the Deployment's
/// memory request and limit: the request must cover the peak and the limit leave at least twice
/// the peak. Prints the measurement; manifests/deployment.yaml cites it.
#[tokio::test]
async fn the_memory_limit_leaves_headroom_over_200_machine_sets() {
    use support::fixtures::*;
    let Some(kubectl) = kubectl_or_skip() else {
        return;
    };
    let env = support::TestEnv::new("memory").await;
    env.aws_cluster("4.21.0", &stream_421(), None).await;
    let machine_sets = sizing_machine_sets();
    let objects: Vec<Value> = (0..machine_sets)
        .map(|i| {
            let (region, ami) = if i % 2 == 0 {
                ("us-east-1", AMI_420_US_EAST_1)
            } else {
                ("us-east-2", AMI_420_US_EAST_2)
            };
            machine_set(&env.ns, &format!("worker-{i:03}"))
                .region(region)
                .ami(ami)
                .build()
        })
        .collect();
    for chunk in objects.chunks(20) {
        futures::future::join_all(chunk.iter().map(|o| env.apply(o.clone()))).await;
    }
    // 4.20's AMIs are published CoreOS images (the Deployment mounts such a list).
    let tmp = tempfile::tempdir().expect("temp dir");
    let known_images = tmp.path().join("images.txt");
    std::fs::write(
        &known_images,
        format!("{AMI_420_US_EAST_1}\n{AMI_420_US_EAST_2}\n"),
    )
    .expect("write images");

    let mut flags = env.controller_flags();
    flags.retain(|f| !f.starts_with("--log-level"));
    flags.extend([
        format!("--known-images-file={}", known_images.display()),
        "--leader-elect".into(),
        "--log-level=info".into(),
        "--log-format=json".into(),
    ]);
    let controller = support::ControllerProcess::spawn("memory", &flags);
    controller.wait_ready().await;
    let updated = format!(
        "{}{{kind=\"MachineSet\",result=\"updated\"}}",
        names::PATCHES
    );
    let done = support::eventually(Duration::from_secs(180), || async {
        (controller.metric(&updated).await? >= machine_sets as f64).then_some(())
    })
    .await;
    assert!(
        done.is_some(),
        "{} of {machine_sets} MachineSets updated\n{}",
        controller.metric(&updated).await.unwrap_or(0.0),
        controller.log_tail(20)
    );
    // A few more passes over the updated set (the golden ConfigMap changing re-plans all),
    // each waited for by the controller's count of full passes.
    let full_passes = "boot_image_controller_reconcile_duration_seconds_count{scope=\"all\"}";
    for round in 0..3 {
        let before = controller.metric(full_passes).await.unwrap_or(0.0);
        let mut cm = golden_config_map(&env.ns, "4.21.0", &stream_421());
        cm["metadata"]["annotations"] = serde_json::json!({"bench/round": round.to_string()});
        env.apply(cm).await;
        let passed = support::eventually(Duration::from_secs(60), || async {
            (controller.metric(full_passes).await? > before).then_some(())
        })
        .await;
        assert!(
            passed.is_some(),
            "no full pass after golden ConfigMap change {round}"
        );
    }
    let peak = controller.peak_rss_kib().expect("VmHWM") * 1024;
    let busy = cpu_seconds(controller.pid());
    tokio::time::sleep(Duration::from_secs(5)).await;
    let idle = (cpu_seconds(controller.pid()) - busy) / 5.0;
    eprintln!(
        "MEASURED: {} with {machine_sets} MachineSets: peak RSS (VmHWM) {:.1} MiB, \
         {busy:.2} CPU seconds from start to the last pass, {:.1} millicores idle",
        support::controller_binary().display(),
        peak as f64 / f64::from(1 << 20),
        idle * 1000.0
    );

    let rendered = Rendered::manifests(&kubectl);
    let resources = &rendered.get("Deployment", "boot-image-controller")["spec"]["template"]["spec"]
        ["containers"][0]["resources"];
    let request = quantity_bytes(&str_of(&resources["requests"]["memory"]));
    let limit = quantity_bytes(&str_of(&resources["limits"]["memory"]));
    assert!(
        request >= peak,
        "memory request {request} below the measured peak {peak}"
    );
    assert!(
        limit >= 2 * peak,
        "memory limit {limit} leaves less than 2x headroom over the measured peak {peak}"
    );
}

/// 100 MachineSets of about 1 MB each (the API server stores objects up to about 1.5 MiB): the
/// first list must not hold them all at once, or the start-up peak passes the Deployment's
/// memory limit and the pod is killed before it ever plans (issue 38: 212 MB against 128 Mi).
/// Prints the peak; asserts only the limit, which is a correctness bound.
#[tokio::test]
async fn starting_on_100_machine_sets_of_a_megabyte_stays_within_the_memory_limit() {
    use support::fixtures::*;
    let Some(kubectl) = kubectl_or_skip() else {
        return;
    };
    let env = support::TestEnv::new("memory-big").await;
    env.aws_cluster("4.21.0", &stream_421(), None).await;
    let machine_sets = 100;
    // A field no rule reads, as a provider may define one (user data inline, tags).
    let blob = "x".repeat(1 << 20);
    for chunk in (0..machine_sets).collect::<Vec<_>>().chunks(10) {
        futures::future::join_all(chunk.iter().map(|i| {
            let ms = machine_set(&env.ns, &format!("worker-{i:03}"))
                .current()
                .spec_field(&["blob"], Value::String(blob.clone()))
                .build();
            env.create(ms)
        }))
        .await;
    }
    let controller = env.controller(&[]);
    controller.wait_ready().await;
    let up_to_date = "boot_image_controller_machine_resources{action=\"UpToDate\",kind=\"MachineSet\",reason=\"UpToDate\"}";
    let planned = support::eventually(Duration::from_secs(120), || async {
        (controller.metric(up_to_date).await? >= machine_sets as f64).then_some(())
    })
    .await;
    assert!(
        planned.is_some(),
        "the {machine_sets} MachineSets were never planned\n{}",
        controller.log_tail(20)
    );
    let peak = controller.peak_rss_kib().expect("VmHWM") * 1024;
    eprintln!(
        "MEASURED: start-up on {machine_sets} MachineSets of 1 MiB: peak RSS (VmHWM) {:.1} MiB",
        peak as f64 / f64::from(1 << 20)
    );
    let rendered = Rendered::manifests(&kubectl);
    let resources = &rendered.get("Deployment", "boot-image-controller")["spec"]["template"]["spec"]
        ["containers"][0]["resources"];
    let limit = quantity_bytes(&str_of(&resources["limits"]["memory"]));
    assert!(
        peak <= limit,
        "peak RSS {peak} above the Deployment's memory limit {limit}"
    );
}
