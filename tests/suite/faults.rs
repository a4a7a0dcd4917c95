//! The fault matrix: the controller, as a real process, while its API server misbehaves.
//!
//! | fault | where it runs |
//! |---|---|
//! | kube-apiserver SIGKILLed mid-rollout and restarted | private control plane |
//! | watch resumed with an expired resourceVersion (410 Gone) | private control plane |
//! | latency and connection resets on the way to the API server | shared, through a proxy |
//! | another writer racing our patches | shared, through a latency proxy |
//! | malformed objects | shared |
//! | leader SIGKILLed | shared |
//!
//! Faults that kill or restart kube-apiserver get a private control plane
//! (`hack/local-cluster.sh` with `BIC_CLUSTER_DIR=.local-cluster-faults-*`, about 7 s to start),
//! so no other test ever sees its API server go away. Every test checks the same invariants at
//! the end: the controller converged, each MachineSet records exactly one change per upgrade (a
//! second entry would be a double patch), and the process is alive with no panic in its log.
//! `hack/faults.sh` runs them one by one and prints PASS/FAIL per fault.

use crate::support;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use futures::StreamExt;
use serde_json::{Value, json};
use support::fixtures::*;
use support::private_cluster::PrivateCluster;
use support::proxy::{Faults, Proxy, Stats};
use support::{ControllerProcess, TestEnv, eventually};

const OLD_AMI: &str = AMI_420_US_EAST_1;
const NEW_AMI: &str = AMI_421_US_EAST_1;
const MANAGED_SECRET: &str = "worker-user-data-managed";
/// Convergence under faults: generous, since CI machines are small and shared.
const CONVERGE: Duration = Duration::from_secs(120);

// ---------------------------------------------------------------------------------------------
// Harness: private control planes, controllers with their own kubeconfig, metrics

/// The controller's flags for `env`, talking to the API server through `kubeconfig`.
fn flags(env: &TestEnv, kubeconfig: &Path, extra: &[&str]) -> Vec<String> {
    let mut flags = vec![
        format!("--kubeconfig={}", kubeconfig.display()),
        format!("--namespace={}", env.ns),
        format!("--machine-api-namespace={}", env.ns),
        format!("--golden-configmap-namespace={}", env.ns),
        format!("--machine-configuration-name={}", env.singleton),
        format!("--infrastructure-name={}", env.singleton),
        format!("--cluster-version-name={}", env.singleton),
        "--log-level=debug".into(),
    ];
    flags.extend(extra.iter().map(|s| s.to_string()));
    flags
}

/// The sum of a metric's samples whose labels include `labels` (label order does not matter).
fn metric(text: &str, name: &str, labels: &[(&str, &str)]) -> f64 {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let (series, value) = l.rsplit_once(' ')?;
            let (series_name, series_labels) = series.split_once('{').unwrap_or((series, ""));
            let matches = series_name == name
                && labels
                    .iter()
                    .all(|(k, v)| series_labels.contains(&format!("{k}=\"{v}\"")));
            matches.then(|| value.parse::<f64>().ok()).flatten()
        })
        .sum()
}

async fn metric_of(controller: &ControllerProcess, name: &str, labels: &[(&str, &str)]) -> f64 {
    metric(&controller.metrics().await, name, labels)
}

const RESOURCES: &str = "boot_image_controller_machine_resources";

/// Makes the controller plan everything once more (a change to the golden ConfigMap that
/// changes no image) and waits until it has.
async fn full_pass(env: &TestEnv, controller: &ControllerProcess) {
    let passes = || async { metric_of(controller, PASSES, &[("scope", "all")]).await };
    let before = passes().await;
    let mut cm = golden_config_map(&env.ns, "4.21.0", &stream_421());
    cm["metadata"]["annotations"] = json!({"faults/nudge": before.to_string()});
    env.apply(cm).await;
    let passed = eventually(CONVERGE, || async {
        (passes().await > before).then_some(())
    })
    .await;
    assert!(
        passed.is_some(),
        "no full pass; {}",
        controller.log_tail(40)
    );
}
const PATCHES: &str = "boot_image_controller_patches_total";
const PASSES: &str = "boot_image_controller_reconcile_duration_seconds_count";

/// Waits until the controller's plan has `count` MachineSets with this action and reason.
async fn wait_planned(controller: &ControllerProcess, action: &str, reason: &str, count: usize) {
    let labels = [
        ("kind", "MachineSet"),
        ("action", action),
        ("reason", reason),
    ];
    let reached = eventually(CONVERGE, || async {
        (metric_of(controller, RESOURCES, &labels).await as usize == count).then_some(())
    })
    .await;
    assert!(
        reached.is_some(),
        "never {count} MachineSets {action}/{reason}; metrics:\n{}\n{}",
        controller
            .metrics()
            .await
            .lines()
            .filter(|l| l.starts_with(RESOURCES))
            .collect::<Vec<_>>()
            .join("\n"),
        controller.log_tail(40)
    );
}

/// `n` MachineSets `{prefix}-NNN` on the 4.20 image, already on the managed stub secret, so
/// that an upgrade changes exactly one thing on each: the image.
async fn fleet(env: &TestEnv, prefix: &str, n: usize) -> Vec<String> {
    let names: Vec<String> = (0..n).map(|i| format!("{prefix}-{i:03}")).collect();
    futures::stream::iter(names.clone())
        .map(|name| {
            let env = env.clone();
            async move {
                env.apply(
                    machine_set(&env.ns, &name)
                        .user_data(MANAGED_SECRET)
                        .build(),
                )
                .await
            }
        })
        .buffer_unordered(16)
        .collect::<Vec<_>>()
        .await;
    names
}

/// Waits until every MachineSet in `names` satisfies `done`; returns them.
async fn wait_all(
    env: &TestEnv,
    names: &[String],
    what: &str,
    done: impl Fn(&Value) -> bool,
) -> BTreeMap<String, Value> {
    let started = Instant::now();
    let mut last = BTreeMap::new();
    while started.elapsed() < CONVERGE {
        last = env.machine_sets().await;
        if names.iter().all(|n| last.get(n).is_some_and(&done)) {
            return last;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let missing: Vec<&String> = names
        .iter()
        .filter(|n| !last.get(*n).is_some_and(&done))
        .collect();
    panic!("{} MachineSets never {what}: {missing:?}", missing.len());
}

/// How many changes to `ami` the MachineSet's history records: more than one is a double patch.
fn changes_to(ms: &Value, ami: &str) -> usize {
    history_of(ms)
        .iter()
        .filter(|h| h.pointer("/bootImage/to").and_then(Value::as_str) == Some(ami))
        .count()
}

fn assert_one_change_each(machine_sets: &BTreeMap<String, Value>, names: &[String], ami: &str) {
    let wrong: Vec<(String, Vec<Value>)> = names
        .iter()
        .filter(|n| changes_to(&machine_sets[*n], ami) != 1)
        .map(|n| (n.clone(), history_of(&machine_sets[n])))
        .collect();
    assert!(
        wrong.is_empty(),
        "MachineSets without exactly one recorded change to {ami} (a double patch, or a lost one): {wrong:#?}"
    );
}

/// When each MachineSet's newest recorded change was planned.
fn change_times(machine_sets: &BTreeMap<String, Value>, names: &[String]) -> Vec<jiff::Timestamp> {
    names
        .iter()
        .filter_map(|n| {
            history_of(&machine_sets[n]).last()?["time"]
                .as_str()?
                .parse()
                .ok()
        })
        .collect()
}

fn assert_alive(controller: &mut ControllerProcess) {
    assert!(
        controller.running(),
        "the controller exited; {}",
        controller.log_tail(60)
    );
    let logs = controller.logs();
    assert!(
        !logs.contains("panicked"),
        "the controller panicked; {}",
        controller.log_tail(60)
    );
}

/// Waits until BootImageUpdateDegraded is False: no error left behind by the fault.
async fn wait_not_degraded(env: &TestEnv, controller: &ControllerProcess) {
    let ok = eventually(CONVERGE, || async {
        let c = env.condition("BootImageUpdateDegraded").await?;
        (c["status"] == "False").then_some(())
    })
    .await;
    assert!(
        ok.is_some(),
        "still Degraded: {:?}\n{}",
        env.condition("BootImageUpdateDegraded").await,
        controller.log_tail(40)
    );
}

// ---------------------------------------------------------------------------------------------
// 1. kube-apiserver killed mid-rollout

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apiserver_killed_mid_rollout_converges_without_double_patches() {
    let cluster = PrivateCluster::up("restart").await;
    let env = cluster.env("restart").await;
    env.aws_cluster("4.20.0", &stream_420(), None).await;
    let names = fleet(&env, "ms", 100).await;
    // One patch at a time: the rollout lasts long enough to be cut in the middle.
    let mut controller = ControllerProcess::spawn(
        "faults-restart",
        &flags(&env, &cluster.kubeconfig, &["--max-concurrent-patches=1"]),
    );
    controller.wait_ready().await;
    wait_planned(&controller, "UpToDate", "UpToDate", 100).await;

    env.upgrade("4.21.0", &stream_421()).await;
    let first_patch = Instant::now() + CONVERGE;
    let mut seen = 0;
    while Instant::now() < first_patch {
        let all = env.machine_sets().await;
        seen = all.values().filter(|ms| ami_of(ms) == NEW_AMI).count();
        if seen > 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(
        seen > 0,
        "the rollout never started; {}",
        controller.log_tail(40)
    );
    let killed = jiff::Timestamp::now();
    cluster.kill_apiserver().await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    // Taken before the start, not after it: on a loaded machine the controller's retries go
    // through before the script has seen the new API server ready (CI once saw none after).
    let restarting = jiff::Timestamp::now();
    cluster.start_apiserver().await;

    let done = wait_all(&env, &names, "reached the new image", |ms| {
        ami_of(ms) == NEW_AMI
    })
    .await;
    assert_one_change_each(&done, &names, NEW_AMI);
    // The rollout really straddled the outage: some patches before the kill, some after.
    let times = change_times(&done, &names);
    let before = times.iter().filter(|t| **t < killed).count();
    let after = times.iter().filter(|t| **t > restarting).count();
    eprintln!(
        "apiserver killed with {seen}+ of 100 patched; {before} patches planned before the kill, \
         {after} after the restart began"
    );
    assert!(
        before > 0 && after > 0,
        "the kill did not land mid-rollout ({before} before, {after} after)"
    );
    wait_not_degraded(&env, &controller).await;
    assert_alive(&mut controller);
}

/// Slow variant for hack/faults.sh: three kills during a rollout of 300 MachineSets.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "soak (under a minute): run by hack/faults.sh and hack/test.sh"]
async fn soak_apiserver_killed_repeatedly_during_a_large_rollout() {
    let cluster = PrivateCluster::up("soak").await;
    let env = cluster.env("soak").await;
    env.aws_cluster("4.20.0", &stream_420(), None).await;
    let names = fleet(&env, "ms", 300).await;
    let mut controller = ControllerProcess::spawn(
        "faults-soak",
        &flags(&env, &cluster.kubeconfig, &["--max-concurrent-patches=1"]),
    );
    controller.wait_ready().await;
    wait_planned(&controller, "UpToDate", "UpToDate", 300).await;

    env.upgrade("4.21.0", &stream_421()).await;
    // The kills come early and one patch at a time, so that most of the rollout is still ahead
    // of each. The patches are counted in etcd, from the moment a restarted API server is
    // started: a count through the API server, after the script had seen it ready, once came
    // after all 150 patches left (at two at a time), and a list sent while it started once
    // waited 5.8 s, while the controller's patches went through.
    for (kill, threshold) in [30, 60, 90].into_iter().enumerate() {
        let deadline = Instant::now() + CONVERGE;
        let patched = loop {
            let n = cluster
                .machine_sets_in_etcd_containing(&env.ns, NEW_AMI)
                .await;
            if n >= threshold || Instant::now() > deadline {
                break n;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        eprintln!("kill {}: {patched} of 300 patched", kill + 1);
        assert!(
            patched < 300,
            "the rollout finished before kill {}",
            kill + 1
        );
        cluster.kill_apiserver().await;
        tokio::time::sleep(Duration::from_secs(1 + 2 * kill as u64)).await;
        cluster.start_apiserver_no_wait().await;
    }
    let deadline = Instant::now() + CONVERGE;
    while env.try_machine_sets().await.is_err() {
        assert!(
            Instant::now() < deadline,
            "the API server did not serve again after the last kill"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let done = wait_all(&env, &names, "reached the new image", |ms| {
        ami_of(ms) == NEW_AMI
    })
    .await;
    assert_one_change_each(&done, &names, NEW_AMI);
    wait_not_degraded(&env, &controller).await;
    assert_alive(&mut controller);
}

// ---------------------------------------------------------------------------------------------
// 2. watch resumed with an expired resourceVersion

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expired_resource_version_relists_and_converges() {
    let cluster = PrivateCluster::up("gone").await;
    let env = cluster.env("gone").await;
    env.aws_cluster("4.20.0", &stream_420(), None).await;
    let names = fleet(&env, "old", 5).await;
    let proxy = Proxy::in_front_of(&cluster.kubeconfig, Faults::default()).await;
    let mut controller =
        ControllerProcess::spawn("faults-gone", &env.controller_flags_through(&proxy));
    controller.wait_ready().await;
    wait_planned(&controller, "UpToDate", "UpToDate", 5).await;

    // Cut the controller off, then change the cluster behind its back.
    proxy.block();
    env.upgrade("4.21.0", &stream_421()).await;
    let added = fleet(&env, "new", 3).await;
    env.delete("machine.openshift.io/v1beta1", "MachineSet", &names[4])
        .await;
    // Its resourceVersions are now history: compacted in etcd, and older than anything the
    // restarted API server's watch cache holds. Resuming a watch from them is 410 Gone.
    let revision = cluster.compact_etcd().await;
    cluster.kill_apiserver().await;
    cluster.start_apiserver().await;
    proxy.unblock();

    let mut expect: Vec<String> = names[..4].to_vec();
    expect.extend(added);
    let done = wait_all(&env, &expect, "reached the new image", |ms| {
        ami_of(ms) == NEW_AMI
    })
    .await;
    assert_one_change_each(&done, &expect, NEW_AMI);
    let logs = controller.logs();
    assert!(
        logs.contains("too old resource version") || logs.contains("Expired"),
        "no 410 Gone in the controller log (etcd compacted at {revision}); {}",
        controller.log_tail(60)
    );
    // The deleted MachineSet left the plan with the relist.
    wait_planned(&controller, "UpToDate", "UpToDate", 7).await;
    wait_not_degraded(&env, &controller).await;
    assert_alive(&mut controller);
}

// ---------------------------------------------------------------------------------------------
// 3. latency and connection resets

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flaky_network_converges_without_busy_looping() {
    let env = TestEnv::new("flaky").await;
    env.aws_cluster("4.20.0", &stream_420(), None).await;
    let names = fleet(&env, "ms", 10).await;
    let flaky = Faults {
        latency: (Duration::from_millis(50), Duration::from_millis(200)),
        reset_probability: 0.3,
        reset_after: (Duration::from_millis(200), Duration::from_secs(4)),
        ..Faults::default()
    };
    let proxy = Proxy::in_front_of(&support::kubeconfig(), flaky).await;
    let mut controller =
        ControllerProcess::spawn("faults-flaky", &env.controller_flags_through(&proxy));
    controller.wait_ready().await;
    wait_planned(&controller, "UpToDate", "UpToDate", 10).await;
    // On top of the random resets, every connection is dropped every 2 s, as a flapping load
    // balancer would: long watches and in-flight patches included.
    let proxy = std::sync::Arc::new(proxy);
    let flapping = {
        let proxy = proxy.clone();
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_secs(2)).await;
                proxy.cut();
            }
        })
    };

    env.upgrade("4.21.0", &stream_421()).await;
    let done = wait_all(&env, &names, "reached the new image", |ms| {
        ami_of(ms) == NEW_AMI
    })
    .await;
    assert_one_change_each(&done, &names, NEW_AMI);
    wait_not_degraded(&env, &controller).await;
    let progressing = eventually(CONVERGE, || async {
        let c = env.condition("BootImageUpdateProgressing").await?;
        (c["status"] == "False").then_some(())
    })
    .await;
    assert!(progressing.is_some(), "still Progressing");

    // Idle: converged, faults still on. Whatever the controller sends now is reconnecting
    // watches after resets; a retry loop without backoff would show as hundreds per second.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let window = Duration::from_secs(10);
    let start = proxy.stats();
    tokio::time::sleep(window).await;
    let idle: Stats = proxy.stats() - start;
    let per_second = idle.client_chunks as f64 / window.as_secs_f64();
    eprintln!(
        "idle through the flaky proxy: {idle:?} in {window:?} ({per_second:.1} client writes/s); \
         whole run: {:?}",
        proxy.stats()
    );
    assert!(
        per_second < 50.0,
        "{per_second:.1} client writes per second while idle: a busy loop; {idle:?}"
    );
    assert!(
        idle.resets > 0,
        "no connection was reset while idle: the fault was not injected"
    );
    flapping.abort();
    assert_alive(&mut controller);
}

// ---------------------------------------------------------------------------------------------
// 4. another writer between our read and our write

/// A proxy through which everything the controller sends reaches the API server 500 ms late,
/// while watch events reach it at once: its store is current when it plans, and its patch is
/// in flight for half a second.
async fn requests_half_a_second_late() -> Proxy {
    let faults = Faults {
        latency: (Duration::from_millis(5), Duration::from_millis(5)),
        request_delay: Duration::from_millis(500),
        ..Faults::default()
    };
    Proxy::in_front_of(&support::kubeconfig(), faults).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conflicting_writers_lose_nothing() {
    let env = TestEnv::new("conflict").await;
    env.aws_cluster("4.21.0", &stream_421(), None).await;
    env.remember_images(&AMIS_420).await;
    // The proxy sees the first bytes of our patch leave; the other writer, talking to the API
    // server directly, then acts inside the window, between our read and our write.
    let proxy = requests_half_a_second_late().await;
    let mut controller = ControllerProcess::spawn(
        "faults-conflict",
        &[
            env.controller_flags_through(&proxy),
            vec!["--hot-loop-threshold=1000".into()],
        ]
        .concat(),
    );
    controller.wait_ready().await;

    let kind = ("machine.openshift.io/v1beta1", "MachineSet");
    let audit = support::audit_log();
    let mut custom = Vec::new();
    let mut scaled = Vec::new();
    let mut round = 0;
    loop {
        round += 1;
        // A quiet controller first, so that the next bytes it sends are about this round.
        quiet(&proxy, Duration::from_secs(2)).await;
        let mark = proxy.stats().client_chunks;
        let this_custom: Vec<String> = (0..4).map(|i| format!("custom-{round}-{i}")).collect();
        let this_scaled: Vec<String> = (0..4).map(|i| format!("scaled-{round}-{i}")).collect();
        // The custom ones first, so that the patch in flight when the other writer acts is to
        // one of them: a conflict on a scaled one alone would not show what the image's `test`
        // op guards.
        for names in [&this_custom, &this_scaled] {
            futures::future::join_all(names.iter().map(|name| {
                env.apply(machine_set(&env.ns, name).user_data(MANAGED_SECRET).build())
            }))
            .await;
        }
        // Outdated from birth: the controller plans and sends its patches.
        let sending = eventually(Duration::from_secs(30), || async {
            (proxy.stats().client_chunks > mark).then_some(())
        })
        .await;
        assert!(
            sending.is_some(),
            "the controller never wrote; {}",
            controller.log_tail(30)
        );
        // The other writers, while our patches are in flight: an administrator's `oc patch` of
        // the image (no precondition), and a scale-up.
        let image = json!([{"op": "replace",
            "path": "/spec/template/spec/providerSpec/value/ami/id", "value": CUSTOM_AMI}]);
        futures::future::join_all(this_custom.iter().map(|name| async {
            env.json_patch(kind, name, image.clone())
                .await
                .expect("the other writer's image patch");
        }))
        .await;
        futures::future::join_all(
            this_scaled
                .iter()
                .map(|name| env.merge_patch(kind, name, json!({"spec": {"replicas": 3}}))),
        )
        .await;
        custom.extend(this_custom);
        scaled.extend(this_scaled);

        // Settle: the other writer's image stays; replicas and our image both land.
        let done = wait_all(&env, &custom, "kept the other writer's image", |ms| {
            ami_of(ms) == CUSTOM_AMI
        })
        .await;
        let scaled_done = wait_all(&env, &scaled, "got both writes", |ms| {
            ami_of(ms) == NEW_AMI && replicas_of(ms) == 3
        })
        .await;
        let conflicts = metric_of(
            &controller,
            PATCHES,
            &[("kind", "MachineSet"), ("result", "conflict")],
        )
        .await;
        let overwritten = custom
            .iter()
            .filter(|n| changes_to(&done[*n], NEW_AMI) > 0)
            .count();
        eprintln!(
            "round {round}: {conflicts} conflicts so far; {overwritten} of {} custom MachineSets \
             were patched by us before the other writer replaced the image",
            custom.len()
        );
        assert_one_change_each(&scaled_done, &scaled, NEW_AMI);
        // Provoked when a patch of ours to a custom MachineSet was refused: read from the audit
        // log where there is one, else from the conflicts, which may also count scaled ones.
        let provoked = match &audit {
            Some(log) => !refused_controller_patches(log, &env.ns, &custom).is_empty(),
            None => conflicts > 0.0,
        };
        if provoked || round == 5 {
            assert!(
                provoked,
                "no patch of ours to a custom MachineSet was refused in {round} rounds \
                 ({conflicts} conflicts): the race was never provoked"
            );
            break;
        }
    }
    // Every patch also tests the resourceVersion, which alone refuses a patch sent after any
    // other write. What the patch tests of the image must refuse it too (the guard of a patch
    // `plan` prints and someone applies later, or of an object read without a resourceVersion):
    // our refused patches, without their resourceVersion test, still cannot overwrite the
    // other writer's image.
    if let Some(log) = &audit {
        for (name, ops) in refused_controller_patches(log, &env.ns, &custom) {
            let without_version: Vec<Value> = (ops.as_array().unwrap().iter())
                .filter(|op| op["path"] != "/metadata/resourceVersion")
                .cloned()
                .collect();
            let result = dry_run_json_patch(&env, &name, json!(without_version)).await;
            assert!(
                matches!(&result, Err(kube::Error::Api(e)) if e.code == 422),
                "our patch of {name} without its resourceVersion test would overwrite the other \
                 writer's image ({result:?}): {without_version:?}"
            );
        }
    }
    // The custom images are never overwritten afterwards: the controller now plans them as
    // custom, and nothing writes them again.
    wait_planned(&controller, "Skip", "CustomImage", custom.len()).await;
    let before = env.machine_set_versions().await;
    full_pass(&env, &controller).await;
    assert_eq!(
        before,
        env.machine_set_versions().await,
        "MachineSets written after convergence"
    );
    assert_alive(&mut controller);
}

/// The bodies of the controller's MachineSet patches in `namespace` that the API server refused,
/// for the objects `names`, from its audit log.
fn refused_controller_patches(
    log: &Path,
    namespace: &str,
    names: &[String],
) -> Vec<(String, Value)> {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    (text.lines())
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|e| {
            let target = &e["objectRef"];
            e["verb"] == "patch"
                && e["stage"] == "ResponseComplete"
                && e["responseStatus"]["code"] != 200
                && target["resource"] == "machinesets"
                && target["namespace"] == namespace
                && (e["userAgent"].as_str()).is_some_and(|a| a.contains("boot-image-controller"))
                && names.iter().any(|n| target["name"] == n.as_str())
        })
        .map(|e| {
            let name = e["objectRef"]["name"].as_str().unwrap().to_string();
            (name, e["requestObject"].clone())
        })
        .collect()
}

/// A JSON Patch of a MachineSet, validated and applied by the API server but not stored.
async fn dry_run_json_patch(env: &TestEnv, name: &str, ops: Value) -> Result<(), kube::Error> {
    let patch: json_patch::Patch = serde_json::from_value(ops).unwrap();
    let params = kube::api::PatchParams {
        dry_run: true,
        ..Default::default()
    };
    (dynamic_machine_sets(env).patch(name, &params, &kube::api::Patch::Json::<()>(patch)))
        .await
        .map(|_| ())
}

/// An opt-out added while the controller's patch is on its way (planned before it, sent after
/// it): the patch must fail, though the MachineSets declare their architecture and every value
/// the patch replaces is unchanged (issue 38: the patch tested only those, and the opted-out
/// MachineSet got the new image). Only the resourceVersion says the opt-out is new: JSON Patch
/// cannot test that an annotation is still absent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_opt_out_added_while_a_patch_is_in_flight_wins() {
    let env = TestEnv::new("optout-race").await;
    env.aws_cluster("4.21.0", &stream_421(), None).await;
    env.remember_images(&AMIS_420).await;
    let proxy = requests_half_a_second_late().await;
    let mut controller =
        ControllerProcess::spawn("faults-optout", &env.controller_flags_through(&proxy));
    controller.wait_ready().await;
    quiet(&proxy, Duration::from_secs(2)).await;
    let mark = proxy.stats().client_chunks;
    let names: Vec<String> = (0..4).map(|i| format!("declared-{i}")).collect();
    futures::future::join_all(names.iter().map(|name| {
        let ms = machine_set(&env.ns, name)
            .user_data(MANAGED_SECRET)
            .arch("amd64")
            .build();
        env.apply(ms)
    }))
    .await;
    let sending = eventually(Duration::from_secs(30), || async {
        (proxy.stats().client_chunks > mark).then_some(())
    })
    .await;
    assert!(
        sending.is_some(),
        "the controller never wrote; {}",
        controller.log_tail(30)
    );
    let opt_out = boot_image_controller::names::OPT_OUT_ANNOTATION;
    let disabled = boot_image_controller::names::OPT_OUT_VALUE;
    futures::future::join_all(
        (names.iter()).map(|name| env.annotate_machine_set(name, opt_out, Some(disabled))),
    )
    .await;
    wait_planned(&controller, "Skip", "OptedOut", names.len()).await;
    let machine_sets = env.machine_sets().await;
    for name in &names {
        let ms = &machine_sets[name];
        assert_eq!(ami_of(ms), OLD_AMI, "{name} was patched after it opted out");
        assert_eq!(changes_to(ms, NEW_AMI), 0, "{name}");
    }
    assert_alive(&mut controller);
}

/// Waits until the client behind the proxy has sent nothing for `period`.
async fn quiet(proxy: &Proxy, period: Duration) {
    let deadline = Instant::now() + CONVERGE;
    let mut last = proxy.stats().client_chunks;
    let mut since = Instant::now();
    while since.elapsed() < period {
        assert!(Instant::now() < deadline, "the controller never went quiet");
        tokio::time::sleep(Duration::from_millis(100)).await;
        let now = proxy.stats().client_chunks;
        if now != last {
            last = now;
            since = Instant::now();
        }
    }
}

// ---------------------------------------------------------------------------------------------
// 5. malformed objects

/// A cluster with one outdated MachineSet `good`, under a running controller that has
/// updated it (so every later change is seen by running watches).
async fn watched_cluster(name: &str, flags: &[&str]) -> (TestEnv, ControllerProcess) {
    let env = TestEnv::new(name).await;
    env.aws_cluster("4.21.0", &stream_421(), None).await;
    env.remember_images(&AMIS_420).await;
    env.apply(
        machine_set(&env.ns, "good")
            .user_data(MANAGED_SECRET)
            .build(),
    )
    .await;
    let controller = env.controller(flags);
    controller.wait_ready().await;
    wait_for_ami(&env, "good", NEW_AMI).await;
    (env, controller)
}

/// Creates an outdated MachineSet `name` and waits until the controller updates it: its watches
/// still run and it still writes.
async fn assert_still_acting(env: &TestEnv, name: &str) {
    env.apply(machine_set(&env.ns, name).user_data(MANAGED_SECRET).build())
        .await;
    wait_for_ami(env, name, NEW_AMI).await;
}

#[tokio::test]
async fn malformed_machine_sets_are_errors_with_a_reason_and_watches_keep_running() {
    let env = TestEnv::new("malformed").await;
    env.aws_cluster("4.21.0", &stream_421(), None).await;
    env.remember_images(&AMIS_420).await;
    let spec = |value: Value| {
        machine_set(&env.ns, "placeholder")
            .provider_spec(value)
            .build()
    };
    let named = |mut ms: Value, name: &str| {
        ms["metadata"]["name"] = json!(name);
        ms
    };
    let mut deep = json!("bottom");
    for _ in 0..200 {
        deep = json!({ "n": deep });
    }
    let garbage: Vec<(&str, Value)> = vec![
        (
            "ami-string",
            spec(json!({"ami": "ami-1", "placement": {"region": "us-east-1"}})),
        ),
        (
            "ami-number",
            spec(json!({"ami": {"id": 12345}, "placement": {"region": "us-east-1"}})),
        ),
        (
            "nested-garbage",
            spec(json!({"ami": [[{"id": null}]], "placement": 42,
                        "userDataSecret": {"name": {"deep": [1, 2, {"x": null}]}}})),
        ),
        // Deeper than a JSON parser's default recursion limit (serde_json: 128).
        (
            "too-deep",
            spec(
                json!({"ami": {"id": OLD_AMI}, "placement": {"region": "us-east-1"}, "garbage": deep}),
            ),
        ),
    ];
    // Created with a plain POST: server-side apply would track 200 levels of managed fields.
    let api = dynamic_machine_sets(&env);
    for (name, ms) in &garbage {
        let object: kube::api::DynamicObject =
            serde_json::from_value(named(ms.clone(), name)).unwrap();
        match api.create(&Default::default(), &object).await {
            // Created; only our own client cannot read the deep one back.
            Ok(_) | Err(kube::Error::SerdeError(_)) => {}
            Err(e) => panic!("the API server rejects {name}: {e}"),
        }
    }
    // The CRD allows those (providerSpec.value is an object of anything); a string providerSpec
    // or a non-integer replicas may or may not pass the CRD in use: try, and keep what it stores.
    let mut accepted: Vec<&str> = garbage.iter().map(|(n, _)| *n).collect();
    for (name, ms) in [
        ("spec-string", spec(json!("not an object"))),
        ("replicas-string", {
            let mut ms = machine_set(&env.ns, "x").user_data(MANAGED_SECRET).build();
            ms["spec"]["replicas"] = json!("three");
            ms
        }),
    ] {
        let object: kube::api::DynamicObject = serde_json::from_value(named(ms, name)).unwrap();
        match api.create(&Default::default(), &object).await {
            Ok(_) => accepted.push(name),
            Err(e) => eprintln!("the API server rejects {name}: {e}"),
        }
    }
    // The controller starts on them: its first lists hold the garbage.
    let mut controller = env.controller(&[]);
    controller.wait_ready().await;
    assert_still_acting(&env, "good").await;
    // Every garbage MachineSet is an error with a reason, not a crash.
    let errors = eventually(CONVERGE, || async {
        let text = controller.metrics().await;
        let n = metric(
            &text,
            RESOURCES,
            &[("kind", "MachineSet"), ("action", "Error")],
        );
        (n as usize == accepted.len()).then_some(text)
    })
    .await
    .unwrap_or_else(|| {
        panic!(
            "not every malformed MachineSet is an Error; {}",
            controller.log_tail(40)
        )
    });
    let reasons: Vec<&str> = errors
        .lines()
        .filter(|l| {
            l.starts_with(RESOURCES) && l.contains("action=\"Error\"") && !l.ends_with(" 0")
        })
        .collect();
    eprintln!("malformed MachineSets: {reasons:#?}");
    for line in &reasons {
        assert!(
            line.contains("InvalidProviderSpec") || line.contains("MalformedObject"),
            "unexpected reason for a malformed providerSpec: {line}"
        );
    }
    // The status follows the metrics: a change within a second of the last write waits for it.
    let degraded = eventually(CONVERGE, || async {
        let degraded = env.condition("BootImageUpdateDegraded").await?;
        (degraded["status"] == "True").then_some(degraded)
    })
    .await;
    let degraded = match degraded {
        Some(degraded) => degraded,
        None => panic!(
            "never Degraded: {:?}",
            env.condition("BootImageUpdateDegraded").await
        ),
    };
    let message = degraded["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("too-deep"),
        "the message names the MachineSets: {message}"
    );

    assert_alive(&mut controller);
}

/// A golden ConfigMap that is not JSON blocks all writes, with the reason, until it is fixed.
#[tokio::test]
async fn an_unparsable_golden_stream_blocks_writes_until_it_is_fixed() {
    let (env, mut controller) =
        watched_cluster("malformed-golden", &["--resync-period", "1s"]).await;
    let mut broken = golden_config_map(
        &env.ns,
        "4.21.0",
        "{\"stream\": \"rhcos-4.21\", \"architectures\": ",
    );
    env.apply(broken.clone()).await;
    let blocked = eventually(CONVERGE, || async {
        let text = controller.metrics().await;
        (metric(
            &text,
            "boot_image_controller_blocked",
            &[("reason", "GoldenStreamInvalid")],
        ) == 1.0)
            .then_some(())
    })
    .await;
    assert!(
        blocked.is_some(),
        "no GoldenStreamInvalid; {}",
        controller.log_tail(40)
    );
    // Changes keep arriving while blocked; none is acted on...
    let blocked_labels = [
        ("kind", "MachineSet"),
        ("action", "Skip"),
        ("reason", "GoldenStreamInvalid"),
    ];
    let held = metric_of(&controller, RESOURCES, &blocked_labels).await;
    env.apply(
        machine_set(&env.ns, "late")
            .user_data(MANAGED_SECRET)
            .build(),
    )
    .await;
    // The controller has planned it (one more MachineSet held by the gate), and left it alone.
    let planned = eventually(CONVERGE, || async {
        (metric_of(&controller, RESOURCES, &blocked_labels).await > held).then_some(())
    })
    .await;
    assert!(planned.is_some(), "{}", controller.log_tail(40));
    assert_eq!(ami_of(&env.machine_set("late").await), OLD_AMI);
    // ...until the ConfigMap is valid again: the watches still run.
    broken["data"]["stream"] = json!(stream_421());
    env.apply(broken).await;
    wait_for_ami(&env, "late", NEW_AMI).await;
    assert_alive(&mut controller);
}

/// A MachineConfiguration with fields we do not expect (the CRD preserves unknown fields under
/// observedConfig and unsupportedConfigOverrides) changes nothing.
#[tokio::test]
async fn unexpected_machine_configuration_fields_change_nothing() {
    let (env, mut controller) = watched_cluster("malformed-config", &[]).await;
    let mut mc = machine_configuration(&env.singleton, None);
    mc["spec"]["unsupportedConfigOverrides"] =
        json!({"bootImages": [1, {"x": null}], "nested": {"a": [{"b": {"c": [null, 1.5e300]}}]}});
    mc["spec"]["observedConfig"] = json!({"anything": {"goes": true}});
    env.apply(mc).await;
    assert_still_acting(&env, "after-overrides").await;
    assert_alive(&mut controller);
}

/// A selector operator the CRD does not enumerate is an error, reported as such; a sane
/// selection is acted on again.
#[tokio::test]
async fn an_unknown_selector_operator_is_an_invalid_selector_until_fixed() {
    let (env, mut controller) = watched_cluster("malformed-selector", &[]).await;
    let near = json!({"matchExpressions": [{"key": "zone", "operator": "Near", "values": ["a"]}]});
    env.narrow_selection(selection("Partial", Some(near))).await;
    let invalid = eventually(CONVERGE, || async {
        let text = controller.metrics().await;
        let labels = |action, reason| {
            [
                ("kind", "MachineSet"),
                ("action", action),
                ("reason", reason),
            ]
        };
        let invalid = metric(&text, RESOURCES, &labels("Error", "InvalidSelector"));
        let current = metric(&text, RESOURCES, &labels("UpToDate", "UpToDate"));
        (invalid >= 1.0 && current == 0.0).then_some(())
    })
    .await;
    assert!(
        invalid.is_some(),
        "no InvalidSelector; {}",
        controller.log_tail(40)
    );
    env.select(None).await;
    assert_still_acting(&env, "after-selector").await;
    assert_alive(&mut controller);
}

fn dynamic_machine_sets(env: &TestEnv) -> kube::Api<kube::api::DynamicObject> {
    let gvk = kube::api::GroupVersionKind::gvk("machine.openshift.io", "v1beta1", "MachineSet");
    let resource = kube::api::ApiResource::from_gvk_with_plural(&gvk, "machinesets");
    kube::Api::namespaced_with(env.client.clone(), &env.ns, &resource)
}

async fn wait_for_ami(env: &TestEnv, name: &str, ami: &str) {
    let reached = eventually(CONVERGE, || async {
        (ami_of(&env.machine_set(name).await) == ami).then_some(())
    })
    .await;
    assert!(reached.is_some(), "{name} never reached {ami}");
}

// ---------------------------------------------------------------------------------------------
// 6. leader SIGKILLed

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn standby_takes_over_from_a_killed_leader() {
    let env = TestEnv::new("leader").await;
    env.aws_cluster("4.20.0", &stream_420(), None).await;
    let names = fleet(&env, "ms", 30).await;
    let lease_name = "faults-leader";
    let candidate = |identity: &str| {
        let mut f = env.controller_flags();
        f.extend([
            "--leader-elect".to_string(),
            format!("--leader-election-id={lease_name}"),
            format!("--identity={identity}"),
            "--max-concurrent-patches=1".to_string(),
            "--leader-elect-lease-duration=15s".to_string(),
            "--leader-elect-renew-deadline=10s".to_string(),
            "--leader-elect-retry-period=2s".to_string(),
        ]);
        ControllerProcess::spawn(&format!("faults-leader-{identity}"), &f)
    };
    let mut alpha = candidate("alpha");
    alpha.wait_ready().await;
    let leading = eventually(CONVERGE, || async {
        (metric_of(&alpha, "boot_image_controller_leader", &[]).await == 1.0).then_some(())
    })
    .await;
    assert!(leading.is_some(), "alpha never led; {}", alpha.log_tail(40));
    let mut bravo = candidate("bravo");
    bravo.wait_ready().await;
    wait_planned(&alpha, "UpToDate", "UpToDate", 30).await;
    assert_eq!(
        metric_of(&bravo, "boot_image_controller_leader", &[]).await,
        0.0
    );
    let lease = env.lease(lease_name).await.expect("the Lease");
    assert_eq!(lease["spec"]["holderIdentity"], "alpha");
    let transitions = lease["spec"]["leaseTransitions"].as_i64().unwrap_or(0);

    // Kill the leader in the middle of the rollout.
    env.upgrade("4.21.0", &stream_421()).await;
    let started = Instant::now();
    loop {
        let all = env.machine_sets().await;
        if all.values().any(|ms| ami_of(ms) == NEW_AMI) {
            break;
        }
        assert!(
            started.elapsed() < CONVERGE,
            "alpha never started the rollout"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    alpha.kill();
    let killed = Instant::now();
    let killed_at = jiff::Timestamp::now();
    let took_over = eventually(CONVERGE, || async {
        (metric_of(&bravo, "boot_image_controller_leader", &[]).await == 1.0).then_some(())
    })
    .await;
    let takeover = killed.elapsed();
    assert!(
        took_over.is_some(),
        "bravo never took over; {}",
        bravo.log_tail(40)
    );
    // A figure, not a limit: the lease lasts 15 s from bravo's last sight of alpha's renewal,
    // and bravo retries every 2 s.
    eprintln!("MEASURED: bravo took over {takeover:?} after alpha was killed");

    let done = wait_all(&env, &names, "reached the new image", |ms| {
        ami_of(ms) == NEW_AMI
    })
    .await;
    assert_one_change_each(&done, &names, NEW_AMI);
    let times = change_times(&done, &names);
    let by_alpha = times.iter().filter(|t| **t < killed_at).count();
    let by_bravo = times.iter().filter(|t| **t > killed_at).count();
    eprintln!("patches planned by alpha: {by_alpha}, by bravo: {by_bravo}");
    assert!(
        by_alpha > 0 && by_bravo > 0,
        "the kill did not land mid-rollout (alpha {by_alpha}, bravo {by_bravo})"
    );
    let lease = env.lease(lease_name).await.expect("the Lease");
    assert_eq!(lease["spec"]["holderIdentity"], "bravo");
    assert_eq!(
        lease["spec"]["leaseTransitions"].as_i64().unwrap_or(0),
        transitions + 1,
        "{lease}"
    );
    // Each patch has its Event, reported by the instance that made it: both leaders patched,
    // and no MachineSet was patched by both.
    let mut by_instance: BTreeMap<String, usize> = BTreeMap::new();
    for name in &names {
        let reporters: Vec<String> = env
            .events_for(name)
            .await
            .into_iter()
            .filter(|e| {
                e["reason"] == "BootImageUpdated"
                    && e["note"].as_str().unwrap_or_default().contains(NEW_AMI)
            })
            .filter_map(|e| e["reportingInstance"].as_str().map(str::to_string))
            .collect();
        assert!(reporters.len() <= 1, "{name} patched by {reporters:?}");
        for r in reporters {
            *by_instance.entry(r).or_default() += 1;
        }
    }
    // Alpha publishes its Events after its batch of patches, so a kill mid-batch loses them.
    eprintln!("BootImageUpdated Events by instance: {by_instance:?}");
    assert_alive(&mut bravo);
}
