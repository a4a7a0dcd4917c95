//! The controller against a real kube-apiserver (`KUBECONFIG`), beside a plain client that
//! sends the same JSON Patches; prints its figures as JSON, for `hack/bench.sh` to make the table.
//! Clusters and the controller come from the end-to-end tests' harness (`tests/suite/support`).
//! One run:
//! 1. a simulated OpenShift-on-AWS cluster at the old release, with `--count` MachineSets copied
//!    from a real one, on the old AMIs; with `--baseline`, the same fleet again in a namespace of
//!    its own for the plain client;
//! 2. the controller starts: seconds to `/readyz` 200, then to `BootImagesCurrent`;
//! 3. with `--switch`, `--rounds` times, both fleets move to the other stream (the new one first),
//!    one side at a time: the plain client first in rounds 1, 2, 5, 6... and second in the
//!    others, each turn once the controller has sent the Events of its last rollout. The
//!    controller's turn: the ClusterVersion, then the golden ConfigMap, moves to the release,
//!    timed from the ConfigMap update until every MachineSet has its new AMI and
//!    `BootImageUpdateProgressing=False`. The plain client's turn: the patches the planner writes
//!    for its fleet, as many in flight, timed until this benchmark's watch has seen every change.
//!    Each turn records its CPU;
//! 4. with `--steady-periods P`, writes and API requests are counted during P resync periods;
//! 5. with `--nodes N` (created before the controller starts, each with a Machine of the fleet
//!    running on it) and `--node-flips F`, F Nodes go NotReady, 20 a second, as kubelets report:
//!    the controller's CPU per flip, beyond what it uses idle over as long;
//! 6. the controller's peak resident memory (VmHWM) is read, and everything deleted.

#[path = "support/mod.rs"]
mod data;
#[path = "../tests/suite/support/mod.rs"]
mod harness;

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use boot_image_controller::api::{ConfigMap, Machine, MachineConfiguration, MachineSet};
use boot_image_controller::arch::Arch;
use boot_image_controller::names::{FIELD_MANAGER, GOLDEN_CONFIGMAP_NAME};
use boot_image_controller::plan::{Action, Options, Planner};
use boot_image_controller::testkit::objects;
use boot_image_controller::testkit::snapshot::{ClusterChanges, cluster_snapshot};
use clap::Parser;
use futures::{StreamExt, TryStreamExt, stream};
use harness::{ControllerProcess, TestEnv};
use k8s_openapi::api::core::v1::{Event, Namespace, Node};
use kube::api::{Api, ApiResource, DynamicObject, ListParams, ObjectList, Patch, PatchParams};
use kube::{Client, Resource, ResourceExt, runtime::watcher};
use serde_json::{Value, json};

const STUB: &str = "worker-user-data";
const WRITES: &str = "boot_image_controller_writes_total";
/// Resources the controller reads or writes; the API server's own housekeeping touches none.
const CONTROLLER_RESOURCES: &str = "machinesets controlplanemachinesets machineconfigurations \
    infrastructures clusterversions configmaps secrets events";

#[derive(Parser)]
struct Args {
    /// MachineSets in the controller's fleet, and in the plain client's.
    #[arg(long, default_value_t = 100)]
    count: usize,
    /// Patches in flight: the controller's `--max-concurrent-patches`, and the plain client's.
    #[arg(long, default_value_t = 8)]
    concurrency: usize,
    /// The controller's `--resync-period`.
    #[arg(long, default_value = "5s")]
    resync_period: jiff::SignedDuration,
    /// Resync periods of the settled cluster in which writes and requests are counted.
    #[arg(long, default_value_t = 0)]
    steady_periods: i32,
    /// A plain client's fleet beside the controller's, rolled out in turn with it.
    #[arg(long)]
    baseline: bool,
    /// Roll the fleets out to the other stream, `--rounds` times.
    #[arg(long)]
    switch: bool,
    #[arg(long, default_value_t = 1)]
    rounds: usize,
    /// Nodes, each running a Machine owned by the fleet's MachineSet `i % count`.
    #[arg(long, default_value_t = 0)]
    nodes: usize,
    /// Readiness flips of Nodes once the fleet has converged (at most `--nodes`).
    #[arg(long, default_value_t = 0)]
    node_flips: usize,
}

#[tokio::main]
async fn main() -> Result<()> {
    let bench = Bench::set_up(Args::parse()).await?;
    let result = bench.run().await;
    bench.clean_up().await;
    let log = bench.controller.log.display().to_string();
    let mut report = result.with_context(|| format!("the controller's log: {log}"))?;
    report["source"] = json!(bench.data.source.describe());
    report["controller_log"] = json!(log);
    println!("{}", serde_json::to_string_pretty(&report)?);
    Ok(())
}

/// One run: the fleets, what this benchmark's watches see of them, and the controller.
struct Bench {
    args: Args,
    data: data::Data,
    /// The (release, golden stream) of the old release, which the clusters start at, and the new.
    releases: [(String, String); 2],
    /// The controller's fleet, with its cluster.
    ours: Fleet,
    /// The plain client's fleet, in a cluster of its own that no controller watches.
    plain: Option<Fleet>,
    /// The controller's Progressing condition ("status/reason"), and the golden ConfigMap,
    /// whose changes arrive here as soon as they can reach the controller.
    progressing: Watch,
    golden: Watch,
    controller: ControllerProcess,
    started: Instant,
    /// Seconds a plain client takes to list the controller's fleet.
    list_seconds: f64,
    /// The Nodes of `--nodes`, by name.
    nodes: Vec<String>,
}

impl Bench {
    async fn set_up(args: Args) -> Result<Bench> {
        let data = data::Data::load();
        let env = TestEnv::new(&format!("bench-{}", args.count)).await;
        eprintln!("bench_cluster: {}; {}", env.ns, data.source.describe());
        let releases = [
            (data.old_release.clone(), data.old_stream.to_string()),
            (data.new_release.clone(), data.new_stream.to_string()),
        ];
        let (release, stream) = &releases[0];
        env.aws_cluster_without_secrets(release, stream, None).await;
        let ours = Fleet::create(&data, env, args.count).await;
        let plain = match args.baseline {
            true => Some(Fleet::create(&data, TestEnv::new("bench-plain").await, args.count).await),
            false => None,
        };
        let client = &ours.env.client;
        let config = dynamic::<MachineConfiguration>(client, None);
        let progressing = Watch::start(config, Some(&ours.env.singleton), |o| {
            let conditions = o.pointer("/status/conditions").and_then(Value::as_array);
            let mut conditions = conditions.into_iter().flatten();
            let c = conditions.find(|c| c["type"] == "BootImageUpdateProgressing");
            let text = |key: &str| c.and_then(|c| c[key].as_str()).unwrap_or_default();
            format!("{}/{}", text("status"), text("reason"))
        });
        let golden = dynamic::<ConfigMap>(client, Some(&ours.env.ns));
        let golden = Watch::start(golden, Some(GOLDEN_CONFIGMAP_NAME), |o| {
            o["metadata"]["resourceVersion"].to_string()
        });
        // What a plain client takes to list the MachineSets as kube-runtime's watcher does
        // (pages of 500, `watcher::Config::default()`): the controller cannot be ready sooner.
        let started = Instant::now();
        let mut page = ListParams::default().limit(500);
        let machine_sets = dynamic::<MachineSet>(client, Some(&ours.env.ns));
        let next = |list: ObjectList<_>| list.metadata.continue_.filter(|t| !t.is_empty());
        while let Some(token) = next(machine_sets.list(&page).await?) {
            page = page.continue_token(&token);
        }
        let list_seconds = secs(started.elapsed());
        let nodes = nodes_with_machines(&ours, args.nodes).await?;
        let mut flags = ours.env.controller_flags();
        flags.retain(|flag| !flag.starts_with("--log-level")); // the tests' debug logs cost time
        flags.extend([
            format!("--resync-period={:#}", args.resync_period),
            format!("--max-concurrent-patches={}", args.concurrency),
            format!("--hot-loop-threshold={}", hot_loop_threshold(&args)),
        ]);
        let started = Instant::now();
        let controller = ControllerProcess::spawn(&ours.env.ns, &flags);
        let bench = Bench {
            args,
            data,
            releases,
            ours,
            plain,
            progressing,
            golden,
            controller,
            started,
            list_seconds,
            nodes,
        };
        Ok(bench)
    }

    async fn run(&self) -> Result<Value> {
        let ready = async || (self.controller.http_get("/readyz").await?.0 == 200).then_some(());
        let timeout = Duration::from_secs(120 + self.args.count as u64 / 20);
        poll(timeout, "/readyz", ready).await?;
        let ready_seconds = secs(self.started.elapsed());
        eprintln!("bench_cluster: controller ready after {ready_seconds:.2}s");
        let initial = self.converge(false, self.started).await?;
        let mut rounds = Vec::new();
        for round in 0..self.args.rounds * usize::from(self.args.switch) {
            rounds.push(self.round(round).await?);
        }
        let steady = match self.args.steady_periods {
            0 => Value::Null,
            _ => self.steady().await?,
        };
        let node_churn = match self.args.node_flips.min(self.nodes.len()) {
            0 => Value::Null,
            flips => self.node_churn(flips).await?,
        };
        Ok(json!({
            "nodes": self.nodes.len(),
            "node_churn": node_churn,
            "count": self.args.count,
            "concurrency": self.args.concurrency,
            "list_seconds": self.list_seconds,
            "ready_seconds": ready_seconds,
            "initial_convergence_seconds": initial.0,
            "rounds": rounds,
            "steady": steady,
            "rss_hwm_bytes": self.controller.peak_rss_kib().map(|kib| kib * 1024),
        }))
    }

    /// Round `round`: each side's turn, to the new stream in odd rounds and back in even ones.
    async fn round(&self, round: usize) -> Result<Value> {
        // The order flips every second round, so that each direction is measured going first
        // and going second: with both flipping together, the controller went first only on the
        // way back, and the two could not be told apart.
        let (new, plain_first) = (round.is_multiple_of(2), (round / 2).is_multiple_of(2));
        let mut plain = None;
        if plain_first {
            plain = self.plain_turn(new).await?;
        }
        let mut figures = self.controller_turn(new).await?;
        if !plain_first {
            plain = self.plain_turn(new).await?;
        }
        eprintln!("bench_cluster: round {}: {figures}", round + 1);
        figures["plain_first"] = json!(plain_first);
        if let Some((seconds, first_patch, cpu)) = plain {
            let converged = figures["convergence_seconds"].as_f64().unwrap_or(f64::NAN);
            let update = figures["config_map_update_seconds"].as_f64().unwrap_or(0.0);
            figures["baseline_seconds"] = json!(seconds);
            figures["baseline_first_patch_seconds"] = json!(first_patch);
            figures["ratio"] = json!(converged / seconds);
            // Without the update call itself, which the controller cannot shorten.
            figures["ratio_after_update_answered"] = json!((converged - update) / seconds);
            figures["baseline_cpu_seconds"] = json!(cpu);
        }
        Ok(figures)
    }

    /// The controller's turn: the ClusterVersion moves to the release, and once the controller
    /// has seen it (and sent the Events of its last rollout), the golden ConfigMap.
    async fn controller_turn(&self, new: bool) -> Result<Value> {
        let (env, (release, stream)) = (&self.ours.env, &self.releases[usize::from(new)]);
        let (version, asked) = (
            objects::cluster_version(&env.singleton, release, "Completed"),
            Instant::now(),
        );
        env.apply(version).await;
        let mismatch = async || {
            let changes = self.progressing.changes_since(asked);
            changes
                .iter()
                .find(|(_, v)| v.ends_with("/ReleaseMismatch"))
                .map(|_| ())
        };
        poll(Duration::from_secs(60), "ReleaseMismatch", mismatch).await?;
        self.events_sent().await?;
        let (writes_before, cpu_before) = (self.metrics().await, self.cpu());
        let (since, since_wall) = (Instant::now(), jiff::Timestamp::now());
        env.apply(objects::golden_config_map(&env.ns, release, stream))
            .await;
        let update = secs(since.elapsed());
        let (seconds, first_patch) = self.converge(new, since).await?;
        let cpu = cpu_since(&cpu_before, self.cpu());
        let writes_after = self.metrics().await;
        let writes = |events: bool| {
            let keep = |s: &str| (label(s, "target") == "Event") == events;
            sum(&writes_after, WRITES, keep) - sum(&writes_before, WRITES, keep)
        };
        let golden = self.golden.changes_since(since);
        let golden_seen = golden.first().map(|(at, _)| secs(*at - since));
        Ok(json!({
            "to": if new { "new" } else { "old" },
            "convergence_seconds": seconds,
            "first_patch_seconds": first_patch,
            // From when this benchmark's watch saw the change: what the controller adds to the
            // change's fan-out and its first patch's round trip.
            "first_patch_after_golden_seen_seconds": golden_seen.map(|g| first_patch - g),
            "first_patch_server_seconds": first_patch_by_server_clock(&env.ns, since_wall),
            "config_map_update_seconds": update,
            // Events go out after Progressing=False; everything else is on the critical path.
            "critical_path_writes": writes(false),
            "rollout_events": writes(true),
            "cpu_seconds": cpu,
        }))
    }

    /// Waits until every MachineSet has its new (or old) AMI and Progressing has been
    /// False/BootImagesCurrent since after `since`: the seconds to both, and to the first patch.
    async fn converge(&self, new: bool, since: Instant) -> Result<(f64, f64)> {
        let converged = async || {
            let (first, last) = self.ours.at(new, since)?;
            let progressing = self.progressing.changes_since(since);
            // The start of the last run of False/BootImagesCurrent, after `since`.
            let start = progressing
                .iter()
                .rposition(|(_, v)| v != "False/BootImagesCurrent");
            let current = progressing.get(start.map_or(0, |i| i + 1))?.0;
            Some((secs(last.max(current) - since), secs(first - since)))
        };
        let timeout = Duration::from_secs(120 + self.args.count as u64 / 5);
        poll(timeout, "the controller's rollout", converged).await
    }

    /// The plain client's turn, when there is one: the JSON Patches the planner writes for its
    /// fleet (the same `test`s, history and hot-loop annotations as the controller's), sent with
    /// kube's `Api::patch`, timed until this benchmark's watch has seen the fleet at its new AMIs
    /// (or until the last answer, if later). Its seconds, to its first change seen, and its CPU.
    async fn plain_turn(&self, new: bool) -> Result<Option<(f64, f64, Cpu)>> {
        let Some(plain) = &self.plain else {
            return Ok(None);
        };
        self.events_sent().await?;
        let patches = self.plan_patches(&plain.env, new).await?;
        let api = &dynamic::<MachineSet>(&plain.env.client, Some(&plain.env.ns));
        let cpu_before = self.cpu();
        // Under the controller's field manager, so the API server keeps the same managedFields
        // on both fleets, which it decodes, updates and stores with every patch.
        let params = &PatchParams::default();
        let params = &PatchParams {
            field_manager: Some(FIELD_MANAGER.into()),
            ..params.clone()
        };
        let started = Instant::now();
        let send =
            |(name, patch): (String, _)| async move { api.patch(&name, params, &patch).await };
        let sent = stream::iter(patches)
            .map(send)
            .buffer_unordered(self.args.concurrency);
        sent.try_collect::<Vec<_>>()
            .await
            .context("a patch of the plain client")?;
        let answered = started.elapsed();
        let seen = async || plain.at(new, started);
        let (first, last) = poll(Duration::from_secs(120), "the plain rollout", seen).await?;
        let (seconds, first) = (secs(answered.max(last - started)), secs(first - started));
        Ok(Some((seconds, first, cpu_since(&cpu_before, self.cpu()))))
    }

    /// The patches the planner writes for the MachineSets of `env` as they are now, moving them
    /// to the new (or old) release. The cluster is the test kit's, with the images the controller
    /// remembers from the releases it saw: the controller's own reads stay its own.
    async fn plan_patches(&self, env: &TestEnv, new: bool) -> Result<Vec<(String, Patch<()>)>> {
        let (release, stream) = &self.releases[usize::from(new)];
        let regions = &self.ours.regions;
        let amis = regions.iter().flat_map(|(_, old, new)| [old.as_str(), new]);
        let cluster = cluster_snapshot("AWS", release, stream)
            .stub_secret(&env.ns, STUB, "3.2.0")
            .knowing(&amis.collect::<Vec<_>>())
            .build();
        let options = Options::default();
        let options = Options {
            hot_loop_threshold: hot_loop_threshold(&self.args),
            ..options
        };
        let planner = Planner::new(&cluster, &options);
        if let Some(blocked) = planner.blocked() {
            bail!("the plain client's plan is blocked: {}", blocked.message);
        }
        let patch = |ms: Value| {
            let decision = planner.decide_object(&serde_json::from_value::<MachineSet>(ms)?);
            if decision.action != Action::Update {
                bail!(
                    "the plan does not update {}: {}",
                    decision.name,
                    decision.message
                );
            }
            let patch = serde_json::from_value(serde_json::to_value(&decision.patch)?)?;
            Ok((decision.name, Patch::Json(patch)))
        };
        env.machine_sets().await.into_values().map(patch).collect()
    }

    /// Writes and API requests during the steady-state window.
    async fn steady(&self) -> Result<Value> {
        self.events_sent().await?;
        for watch in [&self.ours.amis, &self.progressing, &self.golden] {
            watch.task.abort(); // so that their requests are not counted
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
        let client = &self.ours.env.client;
        let writes_before = self.metrics().await;
        let requests_before = apiserver_metrics(client).await?;
        let window = self.args.resync_period * self.args.steady_periods;
        eprintln!("bench_cluster: steady state for {window:#}");
        tokio::time::sleep(window.unsigned_abs() + Duration::from_millis(500)).await;
        let requests_after = apiserver_metrics(client).await?;
        let writes_after = self.metrics().await;
        let ours = |s: &str| {
            CONTROLLER_RESOURCES
                .split(' ')
                .any(|r| r == label(s, "resource"))
        };
        let requests = "apiserver_request_total";
        Ok(json!({
            "periods": self.args.steady_periods,
            "seconds": window.as_secs_f64(),
            "writes": sum(&writes_after, WRITES, |_| true) - sum(&writes_before, WRITES, |_| true),
            "requests": sum(&requests_after, requests, ours) - sum(&requests_before, requests, ours),
        }))
    }

    /// `flips` Nodes go NotReady, one every 50 ms: the controller's CPU during the flips and 3 s
    /// after (its passes coalesce Node changes over a second), less what it uses idle over as
    /// long, per flip.
    async fn node_churn(&self, flips: usize) -> Result<Value> {
        self.events_sent().await?;
        let interval = Duration::from_millis(50);
        let settle = Duration::from_secs(3);
        let idle_before = self.cpu();
        tokio::time::sleep(interval * flips as u32 + settle).await;
        let idle = cpu_since(&idle_before, self.cpu());
        let api: Api<Node> = Api::all(self.ours.env.client.clone());
        let before = self.cpu();
        let mut tick = tokio::time::interval(interval);
        for name in &self.nodes[..flips] {
            tick.tick().await;
            let patch = Patch::Merge(node_status(false));
            api.patch_status(name, &PatchParams::default(), &patch)
                .await?;
        }
        tokio::time::sleep(settle).await;
        let used = cpu_since(&before, self.cpu());
        let controller = |cpu: &Cpu| cpu.get("controller").copied().unwrap_or_default();
        let per_flip = (controller(&used) - controller(&idle)) / flips as f64;
        eprintln!(
            "bench_cluster: {:.3} ms of controller CPU per Node readiness flip",
            per_flip * 1e3
        );
        Ok(json!({
            "flips": flips,
            "interval_ms": interval.as_millis(),
            "cpu_seconds": used,
            "idle_cpu_seconds": idle,
            "controller_ms_per_flip": per_flip * 1e3,
        }))
    }

    async fn metrics(&self) -> BTreeMap<String, f64> {
        samples(&self.controller.metrics().await)
    }

    /// Waits until the controller has sent the Events it queued: those of a rollout would load
    /// whatever is measured next.
    async fn events_sent(&self) -> Result<()> {
        let event = |s: &str| label(s, "target") == "Event";
        let events = async || sum(&self.metrics().await, WRITES, event);
        let mut last = events().await;
        let unchanged = async || {
            tokio::time::sleep(Duration::from_secs(1)).await;
            let now = events().await;
            (now == std::mem::replace(&mut last, now)).then_some(())
        };
        let timeout = Duration::from_secs(60 + self.args.count as u64 / 10);
        poll(timeout, "the last Event sent", unchanged).await
    }

    /// CPU seconds so far of the controller, of this benchmark (whose watches see both sides'
    /// changes) and of the API server and etcd (their pid files lie beside the audit log).
    fn cpu(&self) -> Cpu {
        let pid_of = |name: &str| {
            let file = harness::audit_log()?.with_file_name(format!("{name}.pid"));
            std::fs::read_to_string(file).ok()?.trim().parse().ok()
        };
        let processes = [
            ("controller", Some(self.controller.pid())),
            ("bench", Some(std::process::id())),
            ("apiserver", pid_of("kube-apiserver")),
            ("etcd", pid_of("etcd")),
        ];
        let cpu = processes.map(|(name, pid)| Some((name, cpu_seconds(pid?)?)));
        cpu.into_iter().flatten().collect()
    }

    /// Stops the controller and the watches, and deletes what the run made (a namespace stays
    /// Terminating without kube-controller-manager, so its objects go first).
    async fn clean_up(&self) {
        for fleet in std::iter::once(&self.ours).chain(&self.plain) {
            fleet.amis.task.abort();
            let (client, ns) = (&fleet.env.client, Some(fleet.env.ns.as_str()));
            for api in [
                dynamic::<MachineSet>(client, ns),
                dynamic::<Event>(client, ns),
            ] {
                let _ = api
                    .delete_collection(&Default::default(), &Default::default())
                    .await;
            }
            let _ = dynamic::<Namespace>(client, None)
                .delete(&fleet.env.ns, &Default::default())
                .await;
        }
        self.progressing.task.abort();
        self.golden.task.abort();
        let client = &self.ours.env.client;
        let machines = dynamic::<Machine>(client, Some(&self.ours.env.ns));
        let _ = (machines.delete_collection(&Default::default(), &Default::default())).await;
        let nodes =
            ListParams::default().labels(&format!("{BENCH_NODE_LABEL}={}", self.ours.env.ns));
        let _ = (dynamic::<Node>(client, None))
            .delete_collection(&Default::default(), &nodes)
            .await;
    }
}

/// On the Nodes a run creates, with its namespace: what its clean-up deletes.
const BENCH_NODE_LABEL: &str = "boot-image-controller.io/bench";

/// A kubelet's Node status: Ready or not, with the conditions, addresses, capacity, version
/// information and images a kubelet reports (most of which the controller drops as it reads).
fn node_status(ready: bool) -> Value {
    let condition = |type_: &str, status: &str, reason: &str| {
        json!({"type": type_, "status": status, "reason": reason, "message": reason,
               "lastHeartbeatTime": "2026-01-01T00:00:00Z",
               "lastTransitionTime": "2026-01-01T00:00:00Z"})
    };
    let images: Vec<Value> = (0..30)
        .map(|i| {
            json!({"names": [format!("quay.io/openshift-release-dev/ocp-v4.0-art-dev@sha256:{i:064x}")],
                   "sizeBytes": 500_000_000 + i})
        })
        .collect();
    json!({"status": {
        "conditions": [
            condition("MemoryPressure", "False", "KubeletHasSufficientMemory"),
            condition("DiskPressure", "False", "KubeletHasNoDiskPressure"),
            condition("PIDPressure", "False", "KubeletHasSufficientPID"),
            condition("Ready", if ready { "True" } else { "False" },
                      if ready { "KubeletReady" } else { "KubeletNotReady" }),
        ],
        "addresses": [{"type": "InternalIP", "address": "10.0.1.2"},
                      {"type": "Hostname", "address": "ip-10-0-1-2.ec2.internal"}],
        "capacity": {"cpu": "4", "memory": "16000000Ki", "pods": "250"},
        "allocatable": {"cpu": "3500m", "memory": "15000000Ki", "pods": "250"},
        "nodeInfo": {"machineID": "ec2", "systemUUID": "ec2", "bootID": "b", "kernelVersion": "5.14.0",
                     "osImage": "Red Hat Enterprise Linux CoreOS", "containerRuntimeVersion": "cri-o://1.33",
                     "kubeletVersion": "v1.33.5", "kubeProxyVersion": "", "operatingSystem": "linux",
                     "architecture": "amd64"},
        "images": images,
    }})
}

/// `count` Ready worker Nodes, each with a Running Machine on it, Machine `i` made by the fleet's
/// MachineSet `i % fleet.count` from its template; their names.
async fn nodes_with_machines(fleet: &Fleet, count: usize) -> Result<Vec<String>> {
    if count == 0 {
        return Ok(Vec::new());
    }
    let (client, ns) = (&fleet.env.client, fleet.env.ns.as_str());
    let machine_sets: Vec<Value> = (0..fleet.count.min(count))
        .map(|i| async move { fleet.env.machine_set(&Fleet::name(i)).await })
        .collect::<stream::FuturesOrdered<_>>()
        .collect()
        .await;
    let (nodes, machines) = (
        dynamic::<Node>(client, None),
        dynamic::<Machine>(client, Some(ns)),
    );
    let params = &PatchParams::default();
    let one = |i: usize| {
        let (nodes, machines, ms) = (&nodes, &machines, &machine_sets[i % machine_sets.len()]);
        async move {
            let name = format!("{ns}-node-{i:05}");
            let node = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name,
                "labels": {BENCH_NODE_LABEL: ns, "kubernetes.io/arch": "amd64",
                           "node-role.kubernetes.io/worker": ""}}});
            nodes
                .create(&Default::default(), &serde_json::from_value(node)?)
                .await?;
            nodes
                .patch_status(&name, params, &Patch::Merge(node_status(true)))
                .await?;
            let machine = json!({"apiVersion": "machine.openshift.io/v1beta1", "kind": "Machine",
                "metadata": {"name": format!("bench-machine-{i:05}"), "namespace": ns,
                    "ownerReferences": [{"apiVersion": "machine.openshift.io/v1beta1",
                        "kind": "MachineSet", "name": ms["metadata"]["name"],
                        "uid": ms["metadata"]["uid"], "controller": true}]},
                "spec": ms["spec"]["template"]["spec"]});
            let machine: DynamicObject = serde_json::from_value(machine)?;
            let created = machines.create(&Default::default(), &machine).await?;
            let status =
                json!({"status": {"phase": "Running", "nodeRef": {"kind": "Node", "name": name}}});
            machines
                .patch_status(&created.name_any(), params, &Patch::Merge(status))
                .await?;
            anyhow::Ok(name)
        }
    };
    let started = Instant::now();
    let names = stream::iter(0..count).map(one).buffer_unordered(16);
    let names: Vec<String> = names.try_collect().await?;
    eprintln!(
        "bench_cluster: {count} Nodes and Machines in {:.1}s",
        secs(started.elapsed())
    );
    Ok(names)
}

/// Every round patches each MachineSet back to an image it had within the hot-loop window: the
/// controller's default threshold (3), raised for more rounds.
fn hot_loop_threshold(args: &Args) -> usize {
    (args.rounds + 2).max(3)
}

/// CPU seconds by process.
type Cpu = BTreeMap<&'static str, f64>;

fn cpu_since(before: &Cpu, after: Cpu) -> Cpu {
    let used = after
        .into_iter()
        .map(|(name, now)| Some((name, now - before.get(name)?)));
    used.flatten().collect()
}

/// CPU seconds the threads of `pid` have run (`/proc/PID/task/*/schedstat`, in nanoseconds;
/// `/proc/PID/stat` counts 10 ms ticks, too coarse for a rollout of 20). A thread that exits
/// takes its time with it; the long-lived processes measured here keep theirs.
fn cpu_seconds(pid: u32) -> Option<f64> {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task"))
        .ok()?
        .flatten();
    let stats = tasks.map(|t| std::fs::read_to_string(t.path().join("schedstat")));
    let nanos = stats
        .flatten()
        .map(|s| s.split(' ').next()?.parse::<u64>().ok());
    Some(nanos.flatten().sum::<u64>() as f64 / 1e9)
}

fn secs(d: Duration) -> f64 {
    d.as_secs_f64()
}

/// Calls `check` every 10 ms until it gives a value; fails after `timeout`.
async fn poll<T>(
    timeout: Duration,
    what: &str,
    mut f: impl AsyncFnMut() -> Option<T>,
) -> Result<T> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(value) = f().await {
            return Ok(value);
        }
        if Instant::now() > deadline {
            bail!("{what}: not seen after {timeout:?}");
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// A fleet of MachineSets in the namespace of a test cluster, and a watch on their AMIs.
struct Fleet {
    env: TestEnv,
    amis: Watch,
    count: usize,
    /// (region, old AMI, new AMI) of the regions both streams publish; MachineSet `i` is in
    /// region `i % len`.
    regions: Vec<(String, String, String)>,
}

impl Fleet {
    fn name(i: usize) -> String {
        format!("bench-worker-{i:05}")
    }

    /// `count` copies of a real MachineSet on their region's old AMI, and their stub secret.
    async fn create(data: &data::Data, env: TestEnv, count: usize) -> Fleet {
        env.apply(objects::stub_secret(&env.ns, STUB, "3.2.0"))
            .await;
        let regions = data.aws_common_regions(Arch::Amd64);
        let create = |i| {
            let (region, ami, _) = &regions[i % regions.len()];
            let mut ms = data::instantiate(&data.aws_templates[0], &env.ns, &Fleet::name(i));
            let spec = data::provider(&mut ms);
            spec["ami"] = json!({"id": ami});
            spec["placement"] = json!({"availabilityZone": format!("{region}a"), "region": region});
            spec["userDataSecret"] = json!({"name": STUB});
            env.create(ms)
        };
        stream::iter(0..count)
            .map(create)
            .buffer_unordered(16)
            .collect::<Vec<_>>()
            .await;
        let api = dynamic::<MachineSet>(&env.client, Some(&env.ns));
        let amis = Watch::start(api, None, |o| {
            let ami = o.pointer("/spec/template/spec/providerSpec/value/ami/id");
            ami.and_then(Value::as_str).unwrap_or_default().into()
        });
        Fleet {
            env,
            amis,
            count,
            regions,
        }
    }

    /// Once every MachineSet has its new (or old) AMI: when the first and the last of those that
    /// changed at or after `since` arrived (`since` when none did).
    fn at(&self, new: bool, since: Instant) -> Option<(Instant, Instant)> {
        let latest = &self.amis.seen.lock().unwrap().0;
        let (mut first, mut last) = (None::<Instant>, since);
        for i in 0..self.count {
            let (ami, at) = latest.get(&Fleet::name(i))?;
            let (_, old_ami, new_ami) = &self.regions[i % self.regions.len()];
            if ami != if new { new_ami } else { old_ami } {
                return None;
            }
            if *at >= since {
                first = Some(first.map_or(*at, |f| f.min(*at)));
                last = last.max(*at);
            }
        }
        Some((first.unwrap_or(since), last))
    }
}

/// The API of kind `K` as dynamic objects, in `ns` or cluster-wide.
fn dynamic<K: Resource<DynamicType = ()>>(client: &Client, ns: Option<&str>) -> Api<DynamicObject> {
    let resource = ApiResource::erase::<K>(&());
    match ns {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &resource),
        None => Api::all_with(client.clone(), &resource),
    }
}

/// A watch in a task of its own, keeping a value of each object (what `start` reads from it):
/// the newest with when it arrived, and every change as (when, value).
struct Watch {
    seen: Arc<Mutex<Seen>>,
    task: tokio::task::JoinHandle<()>,
}

type Seen = (HashMap<String, (String, Instant)>, Vec<(Instant, String)>);

impl Watch {
    /// Watches the objects of `api` (or only `name`).
    fn start(api: Api<DynamicObject>, name: Option<&str>, value: fn(&Value) -> String) -> Watch {
        let mut config = watcher::Config::default();
        if let Some(name) = name {
            config = config.fields(&format!("metadata.name={name}"));
        }
        let seen = Arc::<Mutex<Seen>>::default();
        let keep = seen.clone();
        let task = tokio::spawn(async move {
            let mut events = watcher(api, config).boxed();
            while let Some(event) = events.next().await {
                let Ok(watcher::Event::Apply(o) | watcher::Event::InitApply(o)) = event else {
                    continue;
                };
                let (now, name) = (Instant::now(), o.name_any());
                let value = value(&serde_json::to_value(o).unwrap_or_default());
                let (latest, changes) = &mut *keep.lock().unwrap();
                if latest.get(&name).is_none_or(|(old, _)| *old != value) {
                    changes.push((now, value.clone()));
                    latest.insert(name, (value, now));
                }
            }
        });
        Watch { seen, task }
    }

    /// The changes that arrived at or after `since`.
    fn changes_since(&self, since: Instant) -> Vec<(Instant, String)> {
        let changes = &self.seen.lock().unwrap().1;
        changes
            .iter()
            .filter(|(at, _)| *at >= since)
            .cloned()
            .collect()
    }
}

/// By the API server's clock (its audit log): seconds from its receiving the first write of the
/// golden ConfigMap of `ns` at or after `after` to its receiving the first MachineSet patch of
/// `ns` after that.
fn first_patch_by_server_clock(ns: &str, after: jiff::Timestamp) -> Option<f64> {
    let text = std::fs::read_to_string(harness::audit_log()?).ok()?;
    let needle = format!("\"namespace\":\"{ns}\"");
    let events = text.lines().filter(|l| l.contains(&needle));
    let (mut golden, mut patches) = (None::<jiff::Timestamp>, Vec::new());
    for event in events.filter_map(|l| serde_json::from_str::<Value>(l).ok()) {
        let received = event["requestReceivedTimestamp"].as_str();
        let received = received.and_then(|t| t.parse::<jiff::Timestamp>().ok());
        let Some(received) = received.filter(|r| *r >= after) else {
            continue;
        };
        match event["objectRef"]["resource"].as_str() {
            Some("configmaps") => golden = Some(golden.map_or(received, |g| g.min(received))),
            Some("machinesets") => patches.push(received),
            _ => {}
        }
    }
    let golden = golden?;
    let first = patches.into_iter().filter(|p| *p >= golden).min()?;
    Some(first.duration_since(golden).as_secs_f64())
}

/// The API server's own metrics.
async fn apiserver_metrics(client: &Client) -> Result<BTreeMap<String, f64>> {
    let request = hyper::Request::get("/metrics").body(Vec::new())?;
    Ok(samples(&client.request_text(request).await?))
}

/// Prometheus samples by series (`name{labels}`).
fn samples(text: &str) -> BTreeMap<String, f64> {
    let lines = text.lines().filter(|l| !l.starts_with('#'));
    let sample = |l: &str| {
        let (series, value) = l.rsplit_once(' ')?;
        Some((series.to_string(), value.parse().ok()?))
    };
    lines.filter_map(sample).collect()
}

/// The value of label `name` in a series, or "".
fn label<'a>(series: &'a str, name: &str) -> &'a str {
    let key = format!("{name}=\"");
    let value = series.find(&key).map(|i| &series[i + key.len()..]);
    value
        .and_then(|rest| rest.split('"').next())
        .unwrap_or_default()
}

/// The sum of the samples of `metric` whose series `keep` keeps.
fn sum(samples: &BTreeMap<String, f64>, metric: &str, keep: impl Fn(&str) -> bool) -> f64 {
    let of_metric = samples
        .iter()
        .filter(|(s, _)| s.split('{').next() == Some(metric));
    of_metric.filter(|(s, _)| keep(s)).map(|(_, v)| v).sum()
}
