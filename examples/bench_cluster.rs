//! End-to-end benchmark of the controller against a real API server (`KUBECONFIG`); run by
//! `hack/bench.sh` on a private local control plane.
//!
//! One run builds a simulated OpenShift-on-AWS cluster in its own namespace (the controller takes
//! the names of its singletons as flags) with `--count` outdated MachineSets made from a real
//! MachineSet, and then:
//! 1. `--baseline`: in a second namespace, the same MachineSets for a plain client, brought to the
//!    state the controller will bring its own to (stub secrets switched, by the planner's
//!    patches; not timed);
//! 2. starts the controller at the old golden stream (time to `/readyz` 200) and waits until it
//!    converged there (it switches the stub secrets and remembers the old images);
//! 3. `--switch`: `--rounds` times, the plain client's fleet and the controller's move to the
//!    other stream (the new one first), the plain client first in odd rounds and second in even
//!    ones. Each turn starts once the controller has sent the Events it queued (they would load
//!    the API server during the turn after the controller's), and with `--collect-garbage`
//!    after the API server has collected its garbage:
//!    - the plain client, under the controller's field manager, sends the JSON Patches the
//!      planner writes for its fleet (the same `test`s, history and hot-loop annotations as the
//!      controller's; only a guarded replace of `ami.id` with `--minimal-baseline`) with kube's
//!      `Api::patch`, as many in flight as the controller, timed until the benchmark's own
//!      watch has seen every change: a raw patch loop;
//!    - the controller: the ClusterVersion, then the golden ConfigMap, moves to that release,
//!      timed from the ConfigMap update until every MachineSet has its new AMI and
//!      `BootImageUpdateProgressing=False`. The first patch is timed from the update call, from
//!      the benchmark's watch seeing the ConfigMap change, and by the API server's own clock
//!      when its audit log (`hack/local-cluster.sh` keeps one beside the kubeconfig) has the
//!      ConfigMap's writes.
//!
//!    Each figure is the median over the rounds; `rounds` in the JSON has every one, with the
//!    CPU seconds the controller, the API server, etcd and this benchmark used during each side's
//!    turn, and the API server's garbage collections in it. Taken in turn, both sides of a
//!    ratio meet the API server in the same moments;
//! 4. `--steady-periods P`: counts writes (controller metrics, resourceVersions) and API requests
//!    (kube-apiserver's `apiserver_request_total`) during P resync periods;
//! 5. reads the controller's peak resident memory (VmHWM) and stops it.
//!
//! Options: `--count N` `--concurrency 8` `--resync-period 5s` `--rounds 1` `--collect-garbage`
//! `--controller PATH` `--log-level info` `--json FILE` `--keep` (leave the objects behind).
//! Never asserts timings.

#[path = "../benches/support/mod.rs"]
mod support;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use boot_image_controller::arch::Arch;
use boot_image_controller::known_images::KnownImages;
use boot_image_controller::manifests;
use boot_image_controller::names::{
    CLUSTER_VERSION_NAME, FIELD_MANAGER, GOLDEN_CONFIGMAP_NAMESPACE, INFRASTRUCTURE_NAME,
    MACHINE_CONFIGURATION_NAME,
};
use boot_image_controller::plan::{self, Action};
use boot_image_controller::testkit::objects::{control_plane_nodes, golden_config_map};
use futures::{StreamExt, TryStreamExt};
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch,
    PatchParams, PostParams,
};
use kube::runtime::watcher;
use kube::{Client, ResourceExt};
use serde_json::{Value, json};
use support::Data;

const PROGRESSING: &str = "BootImageUpdateProgressing";
const CURRENT: &str = "BootImagesCurrent";
const AMI: &str = "/spec/template/spec/providerSpec/value/ami/id";
const STUB: &str = "/spec/template/spec/providerSpec/value/userDataSecret/name";
const GOLDEN: &str = boot_image_controller::names::GOLDEN_CONFIGMAP_NAME;
const MANAGED_STUB: &str = "worker-user-data-managed";
/// Resources the controller reads or writes; apiserver's own housekeeping touches none of them.
const CONTROLLER_RESOURCES: [&str; 8] = [
    "machinesets",
    "controlplanemachinesets",
    "machineconfigurations",
    "infrastructures",
    "clusterversions",
    "configmaps",
    "secrets",
    "events",
];

struct Args {
    count: usize,
    concurrency: usize,
    resync: String,
    steady_periods: u32,
    baseline: bool,
    /// The plain client sends only `test` + `replace` of `ami.id` (the figures before the plain
    /// client sent the controller's own patches).
    minimal_baseline: bool,
    collect_garbage: bool,
    switch: bool,
    /// Rollouts of each side, taken in turn: the fleets go to the new stream and back.
    rounds: usize,
    /// The controller's `--log-level` (its log is kept in target/bench/).
    log_level: String,
    controller: PathBuf,
    json: Option<PathBuf>,
    keep: bool,
    command: String,
}

impl Args {
    /// The controller's default (3), raised for more rounds: every round patches each
    /// MachineSet back to an image it had within the hot-loop window.
    fn hot_loop_threshold(&self) -> usize {
        (self.rounds + 2).max(3)
    }
}

fn parse_args() -> Result<Args> {
    let repo = Path::new(support::REPO);
    let mut args = Args {
        count: 100,
        concurrency: 8,
        resync: "5s".into(),
        steady_periods: 0,
        baseline: false,
        minimal_baseline: false,
        collect_garbage: false,
        switch: false,
        rounds: 1,
        log_level: "info".into(),
        controller: repo.join("target/release/boot-image-controller"),
        json: None,
        keep: false,
        command: std::env::args().collect::<Vec<_>>().join(" "),
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let (key, inline) = match arg.split_once('=') {
            Some((k, v)) => (k.to_string(), Some(v.to_string())),
            None => (arg.clone(), None),
        };
        let mut value = || {
            inline
                .clone()
                .or_else(|| it.next())
                .ok_or_else(|| anyhow!("{key} needs a value"))
        };
        match key.as_str() {
            "--count" => args.count = value()?.replace('_', "").parse()?,
            "--concurrency" => args.concurrency = value()?.parse()?,
            "--resync-period" => args.resync = value()?,
            "--steady-periods" => args.steady_periods = value()?.parse()?,
            "--baseline" => args.baseline = true,
            "--minimal-baseline" => args.minimal_baseline = true,
            "--collect-garbage" => args.collect_garbage = true,
            "--switch" => args.switch = true,
            "--log-level" => args.log_level = value()?,
            "--rounds" => args.rounds = value()?.parse::<usize>()?.max(1),
            "--controller" => args.controller = value()?.into(),
            "--json" => args.json = Some(value()?.into()),
            "--keep" => args.keep = true,
            other => bail!("unknown argument {other}"),
        }
    }
    Ok(args)
}

fn api_resource(api_version: &str, kind: &str) -> (ApiResource, bool) {
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    let gvk = GroupVersionKind::gvk(group, version, kind);
    let plural = match kind {
        "MachineConfiguration" => "machineconfigurations".into(),
        "ClusterVersion" => "clusterversions".into(),
        "Infrastructure" => "infrastructures".into(),
        other => format!("{}s", other.to_lowercase()),
    };
    let cluster_scoped = matches!(
        kind,
        "Namespace" | "Node" | "MachineConfiguration" | "ClusterVersion" | "Infrastructure"
    );
    (
        ApiResource::from_gvk_with_plural(&gvk, &plural),
        cluster_scoped,
    )
}

fn api(client: &Client, api_version: &str, kind: &str, ns: &str) -> Api<DynamicObject> {
    let (resource, cluster_scoped) = api_resource(api_version, kind);
    if cluster_scoped {
        Api::all_with(client.clone(), &resource)
    } else {
        Api::namespaced_with(client.clone(), ns, &resource)
    }
}

fn machine_sets(client: &Client, ns: &str) -> Api<DynamicObject> {
    api(client, "machine.openshift.io/v1beta1", "MachineSet", ns)
}

/// Seconds to list every object of `api`, 500 a page.
async fn timed_list(api: &Api<DynamicObject>) -> Result<f64> {
    let started = Instant::now();
    let mut params = ListParams::default().limit(500);
    loop {
        let page = api.list(&params).await?;
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(token) => params = params.continue_token(&token),
            None => return Ok(started.elapsed().as_secs_f64()),
        }
    }
}

/// Server-side apply of an object, and of its status when it has one.
async fn apply(client: &Client, object: &Value) -> Result<()> {
    let ns = object["metadata"]["namespace"].as_str().unwrap_or_default();
    let api = api(
        client,
        object["apiVersion"].as_str().unwrap_or_default(),
        object["kind"].as_str().unwrap_or_default(),
        ns,
    );
    let name = object["metadata"]["name"].as_str().unwrap_or_default();
    let params = PatchParams::apply("bench").force();
    api.patch(name, &params, &Patch::Apply(object))
        .await
        .with_context(|| format!("apply {name}"))?;
    let subresource = !matches!(
        object["kind"].as_str(),
        Some("ConfigMap" | "Secret" | "Namespace")
    );
    if subresource && object.get("status").is_some() {
        api.patch_status(name, &params, &Patch::Apply(object))
            .await
            .with_context(|| format!("apply status of {name}"))?;
    }
    Ok(())
}

/// What the benchmark's watches saw, with the time each change arrived.
#[derive(Default)]
struct Seen {
    /// MachineSet name -> (AMI, stub secret, when it last changed).
    machine_sets: HashMap<String, (String, String, Instant)>,
    /// Every Progressing condition seen: (when, status, reason).
    progressing: Vec<(Instant, String, String)>,
    /// When each change of the golden ConfigMap arrived: as soon as the controller's own watch
    /// can have it, give or take the fan-out of one event.
    golden: Vec<Instant>,
}

fn field(obj: &Value, pointer: &str) -> String {
    obj.pointer(pointer)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string()
}

/// Watches `api` in a task of its own, handing `on_change` every object added or changed (and
/// every object of the first list, when `initial`) with the moment it arrived.
fn spawn_watch(
    api: Api<DynamicObject>,
    config: watcher::Config,
    initial: bool,
    mut on_change: impl FnMut(DynamicObject, Instant) + Send + 'static,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let stream = watcher(api, config);
        futures::pin_mut!(stream);
        while let Some(event) = stream.next().await {
            match event {
                Ok(watcher::Event::Apply(o)) => on_change(o, Instant::now()),
                Ok(watcher::Event::InitApply(o)) if initial => on_change(o, Instant::now()),
                _ => {}
            }
        }
    })
}

fn spawn_watches(
    client: &Client,
    ns: &str,
    singleton: &str,
) -> (Arc<Mutex<Seen>>, Vec<tokio::task::JoinHandle<()>>) {
    let seen = Arc::new(Mutex::new(Seen::default()));
    let ms_seen = seen.clone();
    let ms_task = spawn_watch(
        machine_sets(client, ns),
        watcher::Config::default(),
        true,
        move |o, now| {
            let value = serde_json::to_value(&o).unwrap_or_default();
            let (ami, stub) = (field(&value, AMI), field(&value, STUB));
            let mut seen = ms_seen.lock().unwrap();
            let entry = seen
                .machine_sets
                .entry(o.name_any())
                .or_insert_with(|| (String::new(), String::new(), now));
            if entry.0 != ami || entry.1 != stub {
                *entry = (ami, stub, now);
            }
        },
    );
    let mc_seen = seen.clone();
    let mc_task = spawn_watch(
        api(
            client,
            "operator.openshift.io/v1",
            "MachineConfiguration",
            "",
        ),
        watcher::Config::default().fields(&format!("metadata.name={singleton}")),
        true,
        move |o, now| {
            let value = serde_json::to_value(&o).unwrap_or_default();
            let condition = value
                .pointer("/status/conditions")
                .and_then(Value::as_array)
                .and_then(|c| c.iter().find(|c| c["type"] == PROGRESSING));
            if let Some(c) = condition {
                let status = c["status"].as_str().unwrap_or_default().to_string();
                let reason = c["reason"].as_str().unwrap_or_default().to_string();
                let mut seen = mc_seen.lock().unwrap();
                if seen
                    .progressing
                    .last()
                    .is_none_or(|(_, s, r)| *s != status || *r != reason)
                {
                    seen.progressing.push((now, status, reason));
                }
            }
        },
    );
    let cm_seen = seen.clone();
    let cm_task = spawn_watch(
        api(client, "v1", "ConfigMap", ns),
        watcher::Config::default().fields(&format!("metadata.name={GOLDEN}")),
        false,
        move |_, now| cm_seen.lock().unwrap().golden.push(now),
    );
    (seen, vec![ms_task, mc_task, cm_task])
}

/// Timing of one convergence, relative to `since`.
struct Converged {
    /// Every MachineSet as expected and Progressing=False (BootImagesCurrent).
    seconds: f64,
    first_patch: f64,
    last_patch: f64,
    /// When Progressing=True was first seen (the controller reporting the rollout).
    progressing_true: Option<f64>,
    /// Controller writes other than Events from `since` to convergence (filled by the caller).
    critical_path_writes: f64,
    /// Events sent in the same time.
    rollout_events: f64,
    /// How long the ConfigMap update call itself took (filled by the caller): part of the time
    /// to the first patch, spent before the controller can know of the change.
    config_map_update: f64,
}

/// Waits until every MachineSet has `expected(name)` and Progressing is False/BootImagesCurrent
/// since a moment after `since`.
async fn converge(
    seen: &Mutex<Seen>,
    names: &[String],
    expected: &dyn Fn(usize) -> (String, String),
    since: Instant,
    timeout: Duration,
) -> Result<Converged> {
    let deadline = since + timeout;
    loop {
        {
            let seen = seen.lock().unwrap();
            let mut done = 0;
            let mut first: Option<Instant> = None;
            let mut last = since;
            for (i, name) in names.iter().enumerate() {
                if let Some((ami, stub, at)) = seen.machine_sets.get(name)
                    && (ami.clone(), stub.clone()) == expected(i)
                {
                    done += 1;
                    if *at > since {
                        first = Some(first.map_or(*at, |f| f.min(*at)));
                        last = last.max(*at);
                    }
                }
            }
            // The start of the final run of False/BootImagesCurrent conditions.
            let stable = seen
                .progressing
                .iter()
                .rposition(|(_, s, r)| !(s == "False" && r == CURRENT))
                .map_or(0, |i| i + 1);
            let status_at = seen
                .progressing
                .get(stable)
                .map(|(at, _, _)| *at)
                .filter(|at| *at >= since);
            if done == names.len()
                && let Some(status_at) = status_at
            {
                let rel = |t: Instant| t.duration_since(since).as_secs_f64();
                let progressing_true = seen
                    .progressing
                    .iter()
                    .find(|(at, s, _)| *at >= since && s == "True")
                    .map(|(at, _, _)| rel(*at));
                return Ok(Converged {
                    seconds: rel(last.max(status_at)),
                    first_patch: first.map_or(0.0, rel),
                    last_patch: rel(last),
                    progressing_true,
                    critical_path_writes: 0.0,
                    rollout_events: 0.0,
                    config_map_update: 0.0,
                });
            }
            if Instant::now() > deadline {
                bail!(
                    "not converged after {:.0}s: {done}/{} MachineSets as expected, Progressing \
                     history {:?}",
                    timeout.as_secs_f64(),
                    names.len(),
                    seen.progressing
                        .iter()
                        .map(|(at, s, r)| format!(
                            "{:+.1}s {s}/{r}",
                            at.saturating_duration_since(since).as_secs_f64()
                        ))
                        .collect::<Vec<_>>()
                );
            }
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

async fn wait_for_reason(seen: &Mutex<Seen>, reason: &str, timeout: Duration) -> Result<()> {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if seen
            .lock()
            .unwrap()
            .progressing
            .last()
            .is_some_and(|(_, _, r)| r == reason)
        {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    bail!("Progressing never reported {reason}")
}

/// A minimal HTTP/1.0 GET on loopback.
async fn http_get(port: u16, path: &str) -> Option<(u16, String)> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .ok()?;
    let request = format!("GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n");
    stream.write_all(request.as_bytes()).await.ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).await.ok()?;
    let status = response.split_whitespace().nth(1)?.parse().ok()?;
    let body = response
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    Some((status, body))
}

/// Prometheus samples by their full series text (`name{labels}`).
fn samples(text: &str) -> BTreeMap<String, f64> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .filter_map(|l| {
            let (series, value) = l.rsplit_once(' ')?;
            Some((series.to_string(), value.parse().ok()?))
        })
        .collect()
}

fn label<'a>(series: &'a str, name: &str) -> &'a str {
    let key = format!("{name}=\"");
    series
        .find(&key)
        .map(|i| &series[i + key.len()..])
        .and_then(|rest| rest.split('"').next())
        .unwrap_or_default()
}

/// Sum of the samples of `metric`, by the value of `by`.
fn by_label(samples: &BTreeMap<String, f64>, metric: &str, by: &str) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    for (series, v) in samples {
        if series.split('{').next() == Some(metric) {
            *out.entry(label(series, by).to_string()).or_default() += v;
        }
    }
    out
}

/// The API server's own metrics (`/metrics`), every sample by its series.
async fn apiserver_samples(client: &Client) -> Result<BTreeMap<String, f64>> {
    let request = hyper::Request::get("/metrics").body(Vec::new())?;
    let text = (client.request_text(request).await).context("GET /metrics from the API server")?;
    Ok(samples(&text))
}

/// The API server's garbage collections so far (Go's `go_gc_duration_seconds_count`). A
/// collection that falls in a short rollout costs it about as much CPU as the rollout's
/// patches; counted over each turn, they show which turns had one.
async fn apiserver_gc_cycles(client: &Client) -> Option<f64> {
    let samples = apiserver_samples(client).await.ok()?;
    samples.get("go_gc_duration_seconds_count").copied()
}

/// Has the API server collect its garbage now, and waits until it has: Go's heap profile
/// runs a collection first when asked to (`gc=1`, net/http/pprof), and the API server serves
/// it to its administrators while profiling is on (`--profiling`, on by default). Every turn
/// then starts from the same heap, so a collection falls in a turn by its own allocations, not
/// by what the turn before it left.
async fn apiserver_collect_garbage(client: &Client) -> Result<()> {
    let request = hyper::Request::get("/debug/pprof/heap?gc=1&debug=1").body(Vec::new())?;
    client
        .request_text(request)
        .await
        .context("GET /debug/pprof/heap?gc=1 from the API server")?;
    Ok(())
}

/// The API server's requests so far (`apiserver_request_total`), by series.
async fn apiserver_requests(client: &Client) -> Result<BTreeMap<String, f64>> {
    let mut samples = apiserver_samples(client).await?;
    samples.retain(|series, _| series.starts_with("apiserver_request_total{"));
    Ok(samples)
}

/// User plus system CPU seconds a process has used (`/proc/<pid>/stat`, USER_HZ = 100): for a
/// whole run or a steady-state window, which it counts exactly enough, threads that have exited
/// included ([`cpu_time`] is for a turn).
fn cpu_seconds(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let ticks: u64 = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    Some(ticks as f64 / 100.0)
}

/// CPU seconds the threads of process `pid` have run so far, by the scheduler's nanosecond
/// count (`/proc/PID/task/*/schedstat`): `/proc/PID/stat` counts in 10 ms ticks, too coarse
/// for a rollout of 20. A thread that exits meanwhile takes its time with it; the long-lived
/// processes measured here keep theirs.
fn cpu_time(pid: u32) -> Option<f64> {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).ok()?;
    let nanos: u64 = tasks
        .flatten()
        .filter_map(|task| std::fs::read_to_string(task.path().join("schedstat")).ok())
        .filter_map(|stat| stat.split_whitespace().next()?.parse::<u64>().ok())
        .sum();
    Some(nanos as f64 / 1e9)
}

/// What a turn costs: the CPU of the controller, of the API server and etcd of
/// `hack/local-cluster.sh` (their pid files are beside the kubeconfig) and of this benchmark,
/// whose watches see both sides' changes, and the API server's garbage collections.
struct TurnMeter {
    processes: Vec<(&'static str, u32)>,
    client: Client,
}

/// Where a turn started from.
struct TurnStart {
    cpu: BTreeMap<&'static str, f64>,
    collections: Option<f64>,
}

impl TurnMeter {
    fn new(client: &Client, controller: u32) -> Self {
        let dir = std::env::var_os("KUBECONFIG")
            .map(PathBuf::from)
            .and_then(|k| k.parent().map(Path::to_path_buf));
        let pid_of = |name: &str| {
            let dir = dir.as_ref()?;
            std::fs::read_to_string(dir.join(format!("{name}.pid")))
                .ok()?
                .trim()
                .parse::<u32>()
                .ok()
        };
        let mut processes = vec![("controller", controller), ("bench", std::process::id())];
        processes.extend(pid_of("kube-apiserver").map(|pid| ("apiserver", pid)));
        processes.extend(pid_of("etcd").map(|pid| ("etcd", pid)));
        TurnMeter {
            processes,
            client: client.clone(),
        }
    }

    fn cpu(&self) -> BTreeMap<&'static str, f64> {
        (self.processes.iter())
            .filter_map(|(name, pid)| Some((*name, cpu_time(*pid)?)))
            .collect()
    }

    /// Starts a turn, with `collect` once the API server has collected its garbage.
    async fn start(&self, collect: bool) -> Result<TurnStart> {
        if collect {
            apiserver_collect_garbage(&self.client).await?;
        }
        let collections = apiserver_gc_cycles(&self.client).await;
        Ok(TurnStart {
            cpu: self.cpu(),
            collections,
        })
    }

    /// The CPU seconds each process used since `start`, by process.
    fn cpu_since(&self, start: &TurnStart) -> BTreeMap<&'static str, f64> {
        (self.cpu().into_iter())
            .filter_map(|(name, now)| Some((name, now - start.cpu.get(name)?)))
            .collect()
    }

    /// The API server's garbage collections since `start`. Read after the turn's other
    /// figures: the API server takes a while to answer with its metrics.
    async fn collections_since(&self, start: &TurnStart) -> Option<f64> {
        let now = apiserver_gc_cycles(&self.client).await?;
        Some(now - start.collections?)
    }
}

fn proc_status_kib(pid: u32, key: &str) -> Option<u64> {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()?
        .lines()
        .find(|l| l.starts_with(key))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

struct Controller {
    child: Child,
    port: u16,
    log: PathBuf,
}

impl Controller {
    fn start(args: &Args, ns: &str, singleton: &str) -> Result<(Controller, Instant)> {
        let port = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        let dir = Path::new(support::REPO).join("target/bench");
        std::fs::create_dir_all(&dir)?;
        let log = dir.join(format!("{ns}.log"));
        let file = std::fs::File::create(&log)?;
        let kubeconfig = std::env::var("KUBECONFIG").context("KUBECONFIG must be set")?;
        let started = Instant::now();
        let child = Command::new(&args.controller)
            .args([
                "run".to_string(),
                format!("--kubeconfig={kubeconfig}"),
                format!("--metrics-bind-address=127.0.0.1:{port}"),
                format!("--health-probe-bind-address=127.0.0.1:{port}"),
                format!("--namespace={ns}"),
                format!("--machine-api-namespace={ns}"),
                format!("--golden-configmap-namespace={ns}"),
                format!("--machine-configuration-name={singleton}"),
                format!("--infrastructure-name={singleton}"),
                format!("--cluster-version-name={singleton}"),
                format!("--resync-period={}", args.resync),
                format!("--max-concurrent-patches={}", args.concurrency),
                format!("--hot-loop-threshold={}", args.hot_loop_threshold()),
                format!("--log-level={}", args.log_level),
            ])
            .stdin(Stdio::null())
            .stdout(file.try_clone()?)
            .stderr(file)
            .spawn()
            .with_context(|| format!("start {}", args.controller.display()))?;
        Ok((Controller { child, port, log }, started))
    }

    async fn wait_ready(&mut self, timeout: Duration) -> Result<()> {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                bail!(
                    "the controller exited ({status}); see {}",
                    self.log.display()
                );
            }
            if matches!(http_get(self.port, "/readyz").await, Some((200, _))) {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        bail!("the controller was not ready after {timeout:?}")
    }

    async fn metrics(&self) -> BTreeMap<String, f64> {
        samples(
            &http_get(self.port, "/metrics")
                .await
                .map(|(_, b)| b)
                .unwrap_or_default(),
        )
    }

    /// Waits until the controller has sent the Events it queued: it spreads them out (20 a
    /// second), so those of a rollout go on for a while after it, and would load the API server
    /// during whatever is measured next (the plain client's rollout, a steady state).
    async fn events_sent(&self, timeout: Duration) -> Result<()> {
        const EVENTS: &str = "boot_image_controller_writes_total{target=\"Event\"}";
        let deadline = Instant::now() + timeout;
        let mut last = self.metrics().await.get(EVENTS).copied();
        loop {
            tokio::time::sleep(Duration::from_secs(1)).await;
            let now = self.metrics().await.get(EVENTS).copied();
            if now == last {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!("the controller was still sending Events after {timeout:?}");
            }
            last = now;
        }
    }

    fn stop(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        for _ in 0..100 {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A fleet's move to one release: every MachineSet `i` ends at `ami(i)` with the managed stub.
struct Target<'a> {
    release: &'a str,
    stream: String,
    ami: &'a dyn Fn(usize) -> String,
}

impl Target<'_> {
    fn expected(&self, i: usize) -> (String, String) {
        ((self.ami)(i), MANAGED_STUB.to_string())
    }
}

/// The plain client: a fleet of its own in a second namespace, sent the JSON Patches the
/// controller's planner writes for it (so the same `test`s, history and hot-loop annotations as
/// the controller's), as many in flight, and timed until its own watch has seen every change.
struct PlainClient {
    api: Api<DynamicObject>,
    /// The cluster-wide objects of the simulated cluster, under the names the planner knows
    /// them by, with the fleet's stub secrets: everything but the ClusterVersion and the golden
    /// ConfigMap, which each target brings.
    inputs: Vec<Value>,
    known: KnownImages,
    observed: Arc<Mutex<Seen>>,
    observers: Vec<tokio::task::JoinHandle<()>>,
    concurrency: usize,
    hot_loop_threshold: usize,
}

/// One rollout of the plain client.
struct PlainRollout {
    /// From the first patch sent to the last change seen (or the last answer, if later).
    seconds: f64,
    /// When the first change was seen: the least time from sending a patch to a watcher seeing
    /// it, with as many in flight, which the controller's first patch cannot beat.
    first_patch: Option<f64>,
    /// CPU seconds of each process during it, and the API server's garbage collections
    /// (filled by the caller).
    cpu: BTreeMap<&'static str, f64>,
    collections: Option<f64>,
}

impl PlainClient {
    /// The patches the planner writes for the fleet as it is now, moving it to `target`; with
    /// `minimal`, only a guarded replace of each AMI.
    async fn planned(
        &self,
        names: &[String],
        target: &Target<'_>,
        minimal: bool,
    ) -> Result<Vec<(String, json_patch::Patch)>> {
        let (resource, _) = api_resource("machine.openshift.io/v1beta1", "MachineSet");
        let machine_sets: Vec<Value> = (self.api.list(&ListParams::default()).await?.items)
            .into_iter()
            .map(|o| {
                let mut value = serde_json::to_value(o).unwrap_or_default();
                value["apiVersion"] = json!(resource.api_version);
                value["kind"] = json!(resource.kind);
                value
            })
            .collect();
        if minimal {
            let index: HashMap<&str, usize> = (names.iter().enumerate())
                .map(|(i, n)| (n.as_str(), i))
                .collect();
            return (machine_sets.iter())
                .map(|ms| {
                    let name = field(ms, "/metadata/name");
                    let i = *index
                        .get(name.as_str())
                        .context("a MachineSet of the fleet")?;
                    let ops = json!([
                        {"op": "test", "path": AMI, "value": field(ms, AMI)},
                        {"op": "replace", "path": AMI, "value": (target.ami)(i)},
                    ]);
                    Ok((name, serde_json::from_value(ops)?))
                })
                .collect();
        }
        let mut golden =
            golden_config_map(GOLDEN_CONFIGMAP_NAMESPACE, target.release, &target.stream);
        golden["metadata"]["name"] = json!(GOLDEN);
        let version = support::cluster_version(CLUSTER_VERSION_NAME, target.release);
        let items: Vec<Value> = (self.inputs.iter().cloned())
            .chain([golden, version])
            .chain(machine_sets)
            .collect();
        let list = json!({"apiVersion": "v1", "kind": "List", "items": items});
        let mut snapshot = manifests::from_str("plain client", &list.to_string())?;
        snapshot.cluster.known_images.merge(&self.known);
        let options = plan::Options {
            hot_loop_threshold: self.hot_loop_threshold,
            ..plan::Options::default()
        };
        let planned = plan::plan(&snapshot.cluster, &snapshot.machine_sets, &[], &options);
        if let Some(blocked) = &planned.blocked {
            bail!("the plain client's plan is blocked: {}", blocked.message);
        }
        (planned.machine_sets.iter())
            .map(|decision| {
                if decision.action != Action::Update {
                    bail!(
                        "the plain client's plan does not update {}: {:?} ({})",
                        decision.name,
                        decision.action,
                        decision.message
                    );
                }
                let patch = decision.patch.clone();
                Ok((decision.name.clone(), patch))
            })
            .collect()
    }

    /// Moves the fleet to `target`: the patches are planned first, then sent and timed.
    async fn roll_out(
        &self,
        names: &[String],
        target: &Target<'_>,
        minimal: bool,
    ) -> Result<PlainRollout> {
        let patches = self.planned(names, target, minimal).await?;
        let api = &self.api;
        // Under the controller's field manager: the API server then keeps the same
        // `managedFields` on both fleets (the creator's entry and the patcher's), which it
        // decodes, updates and stores with every patch. Under the creator's own name, the plain
        // client's MachineSets would carry one entry.
        let params = &PatchParams {
            field_manager: Some(FIELD_MANAGER.into()),
            ..PatchParams::default()
        };
        let started = Instant::now();
        let failures = futures::stream::iter(patches)
            .map(|(name, patch)| async move {
                api.patch(&name, params, &Patch::Json::<()>(patch))
                    .await
                    .is_err()
            })
            .buffer_unordered(self.concurrency)
            .filter(|failed| futures::future::ready(*failed))
            .count()
            .await;
        if failures > 0 {
            bail!("{failures} of the plain client's patches failed");
        }
        let answered = started.elapsed().as_secs_f64();
        let deadline = started + Duration::from_secs(120);
        loop {
            let done: Vec<Instant> = {
                let seen = self.observed.lock().unwrap();
                (names.iter().enumerate())
                    .filter_map(|(i, name)| {
                        let (ami, stub, at) = seen.machine_sets.get(name)?;
                        ((ami.clone(), stub.clone()) == target.expected(i)).then_some(*at)
                    })
                    .collect()
            };
            if done.len() == names.len() {
                let since = |t: Instant| t.saturating_duration_since(started).as_secs_f64();
                let last = done.iter().max().map_or(0.0, |t| since(*t));
                return Ok(PlainRollout {
                    seconds: last.max(answered),
                    first_patch: done.iter().min().map(|t| since(*t)),
                    cpu: BTreeMap::new(),
                    collections: None,
                });
            }
            if Instant::now() > deadline {
                bail!(
                    "the plain client's watch saw {}/{} MachineSets changed",
                    done.len(),
                    names.len()
                );
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    fn stop(&self) {
        for task in &self.observers {
            task.abort();
        }
    }
}

/// The API server's audit log, which `hack/local-cluster.sh` writes beside the kubeconfig: its
/// current file and the one rotated out before it.
fn audit_files() -> Vec<PathBuf> {
    let Some(dir) = std::env::var_os("KUBECONFIG")
        .map(PathBuf::from)
        .and_then(|k| k.parent().map(Path::to_path_buf))
    else {
        return Vec::new();
    };
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|entries| entries.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    files.retain(|p| {
        let name = p.file_name().and_then(|n| n.to_str()).unwrap_or_default();
        name.starts_with("audit") && name.ends_with(".log")
    });
    files
}

/// By the API server's own clock (its audit log): seconds from its receiving the first write of
/// the golden ConfigMap of `ns` at or after `after` to its receiving the first MachineSet patch
/// of `ns` after that, and the same from its answer to that write. The second can be below zero:
/// a watcher may learn of the change before the writer does.
fn first_patch_by_server_clock(ns: &str, after: jiff::Timestamp) -> Option<(f64, f64)> {
    let needle = format!("\"namespace\":\"{ns}\"");
    let mut golden: Option<(jiff::Timestamp, jiff::Timestamp)> = None;
    let mut patches = Vec::new();
    for file in audit_files() {
        let text = std::fs::read_to_string(file).unwrap_or_default();
        for line in text.lines().filter(|l| l.contains(&needle)) {
            let Ok(event) = serde_json::from_str::<Value>(line) else {
                continue;
            };
            let at = |key: &str| event[key].as_str()?.parse::<jiff::Timestamp>().ok();
            let (Some(received), Some(answered)) =
                (at("requestReceivedTimestamp"), at("stageTimestamp"))
            else {
                continue;
            };
            if event["stage"] != "ResponseComplete" || received < after {
                continue;
            }
            match event["objectRef"]["resource"].as_str() {
                Some("configmaps") if golden.is_none_or(|(r, _)| received < r) => {
                    golden = Some((received, answered));
                }
                Some("machinesets") => patches.push(received),
                _ => {}
            }
        }
    }
    let (received, answered) = golden?;
    let first = patches.into_iter().filter(|p| *p >= received).min()?;
    let seconds = |from: jiff::Timestamp| first.duration_since(from).as_secs_f64();
    Some((seconds(received), seconds(answered)))
}

/// The median of the figures present, `None` when there are none.
fn median(values: impl IntoIterator<Item = Option<f64>>) -> Option<f64> {
    let mut values: Vec<f64> = values.into_iter().flatten().collect();
    values.sort_by(f64::total_cmp);
    let n = values.len();
    match n {
        0 => None,
        _ if n % 2 == 1 => Some(values[n / 2]),
        _ => Some((values[n / 2 - 1] + values[n / 2]) / 2.0),
    }
}

/// Creates `objects` with `concurrency` requests in flight.
async fn create_all(
    api: &Api<DynamicObject>,
    objects: Vec<Value>,
    concurrency: usize,
) -> Result<()> {
    futures::stream::iter(objects)
        .map(|o| async move {
            let object: DynamicObject = serde_json::from_value(o)?;
            api.create(&PostParams::default(), &object).await?;
            Ok::<_, anyhow::Error>(())
        })
        .buffer_unordered(concurrency)
        .try_collect::<Vec<_>>()
        .await?;
    Ok(())
}

async fn cleanup(client: &Client, ns: &str, singleton: Option<&str>) {
    let lp = ListParams::default();
    let dp = DeleteParams::default();
    for (api_version, kind) in [
        ("machine.openshift.io/v1beta1", "MachineSet"),
        ("v1", "Event"),
        ("v1", "Secret"),
        ("v1", "ConfigMap"),
    ] {
        let _ = api(client, api_version, kind, ns)
            .delete_collection(&dp, &lp)
            .await;
    }
    if let Some(name) = singleton {
        for (api_version, kind) in [
            ("operator.openshift.io/v1", "MachineConfiguration"),
            ("config.openshift.io/v1", "Infrastructure"),
            ("config.openshift.io/v1", "ClusterVersion"),
        ] {
            let _ = api(client, api_version, kind, "").delete(name, &dp).await;
        }
    }
    // Without kube-controller-manager the namespace stays Terminating; it is empty by now.
    let _ = api(client, "v1", "Namespace", "").delete(ns, &dp).await;
}

#[tokio::main]
async fn main() {
    match run().await {
        Ok(()) => {}
        Err(e) => {
            eprintln!("bench_cluster: error: {e:#}");
            std::process::exit(1);
        }
    }
}

async fn run() -> Result<()> {
    let args = parse_args()?;
    let data = Data::load();
    let client = Client::try_default()
        .await
        .context("connect to the API server named by KUBECONFIG")?;
    let n = args.count;
    let suffix = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_millis()
        % 1_000_000;
    let ns = format!("bench-{n}-{suffix}");
    let singleton = ns.clone();
    eprintln!(
        "bench_cluster: {n} MachineSets in namespace {ns}; data: {}",
        data.source.describe()
    );

    // The simulated cluster, installed at the old release.
    let template = &data.aws_templates[0];
    let regions = data.aws_common_regions(Arch::Amd64);
    let infra = "bench-x7k2p";
    apply(
        &client,
        &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}),
    )
    .await?;
    for object in [
        support::infrastructure(&singleton, "AWS", infra),
        support::cluster_version(&singleton, &data.old_release),
        support::machine_configuration(&singleton, None),
        golden_config_map(&ns, &data.old_release, &data.old_stream.to_string()),
        support::stub_secret(&ns, "worker-user-data", "2.2.0"),
        support::stub_secret(&ns, "worker-user-data-managed", "3.2.0"),
    ]
    .into_iter()
    // MachineSets without an architecture annotation boot the control plane's architecture,
    // which the controller reads from the control-plane Nodes.
    .chain(control_plane_nodes())
    {
        apply(&client, &object).await?;
    }
    let names: Vec<String> = (0..n).map(|i| format!("bench-worker-{i:05}")).collect();
    let region_of = |i: usize| &regions[i % regions.len()];
    let build = |ns: &str, i: usize, stub: &str| {
        let (region, old_ami, _) = region_of(i);
        let mut ms = support::instantiate(template, ns, &names[i]);
        let p = support::provider(&mut ms);
        p["ami"] = json!({"id": old_ami});
        p["placement"] = json!({"availabilityZone": format!("{region}a"), "region": region});
        p["userDataSecret"] = json!({"name": stub});
        ms
    };
    let started = Instant::now();
    create_all(
        &machine_sets(&client, &ns),
        (0..n).map(|i| build(&ns, i, "worker-user-data")).collect(),
        16,
    )
    .await?;
    let create_seconds = started.elapsed().as_secs_f64();
    eprintln!("bench_cluster: created {n} MachineSets in {create_seconds:.1}s");

    // 1. The plain client's fleet, made like the controller's and brought to the same state:
    //    its stub secrets switched by the planner's patches at the old stream (not timed).
    let old_ami = |i: usize| region_of(i).1.clone();
    let new_ami = |i: usize| region_of(i).2.clone();
    let old_target = Target {
        release: &data.old_release,
        stream: data.old_stream.to_string(),
        ami: &old_ami,
    };
    let new_target = Target {
        release: &data.new_release,
        stream: data.new_stream.to_string(),
        ami: &new_ami,
    };
    let bns = format!("{ns}-baseline");
    let plain = if args.baseline {
        apply(
            &client,
            &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": bns}}),
        )
        .await?;
        let api = machine_sets(&client, &bns);
        create_all(
            &api,
            (0..n).map(|i| build(&bns, i, "worker-user-data")).collect(),
            16,
        )
        .await?;
        let mut inputs = vec![
            support::infrastructure(INFRASTRUCTURE_NAME, "AWS", infra),
            support::machine_configuration(MACHINE_CONFIGURATION_NAME, None),
            support::stub_secret(&bns, "worker-user-data", "2.2.0"),
            support::stub_secret(&bns, MANAGED_STUB, "3.2.0"),
        ];
        inputs.extend(control_plane_nodes());
        let mut known = KnownImages::default();
        known.extend((0..regions.len()).flat_map(|i| [old_ami(i), new_ami(i)]));
        // The same observer as in the controller's run, so the API server fans out the same
        // watch events.
        let (observed, observers) = spawn_watches(&client, &bns, "-");
        let plain = PlainClient {
            api,
            inputs,
            known,
            observed,
            observers,
            concurrency: args.concurrency,
            hot_loop_threshold: args.hot_loop_threshold(),
        };
        plain.roll_out(&names, &old_target, false).await?;
        Some(plain)
    } else {
        None
    };

    // What listing the MachineSets takes a plain client, in pages of 500 as kube-runtime's
    // watcher lists them (kube-runtime 5, src/watcher.rs: `Config::default()` sets `page_size`
    // to 500): the readiness goal counts from when the lists have returned.
    let list_seconds = timed_list(&machine_sets(&client, &ns)).await?;
    eprintln!("bench_cluster: a plain client lists the {n} MachineSets in {list_seconds:.2}s");

    // 2. The controller, at the old stream.
    let (seen, watches) = spawn_watches(&client, &ns, &singleton);
    let (mut controller, started) = Controller::start(&args, &ns, &singleton)?;
    let pid = controller.child.id();
    let result = async {
        controller
            .wait_ready(Duration::from_secs(120 + n as u64 / 20))
            .await?;
        let ready_seconds = started.elapsed().as_secs_f64();
        // The caches are filled at this point; planning has not allocated much yet.
        let rss_ready = proc_status_kib(pid, "VmRSS:").map(|k| k * 1024);
        eprintln!("bench_cluster: controller ready after {ready_seconds:.2}s");
        let timeout = Duration::from_secs(120 + n as u64 / 5);
        let old = |i: usize| (region_of(i).1.clone(), "worker-user-data-managed".to_string());
        let initial = converge(&seen, &names, &old, started, timeout).await?;
        eprintln!(
            "bench_cluster: converged at the old stream {:.2}s after start (stub secrets switched)",
            initial.seconds
        );

        // 3. The updates: each round, the plain client's fleet and the controller's move to the
        //    other stream (the new one first), so that both sides of a ratio meet the API server
        //    in the same moments. Who goes first alternates: neither side always meets the API
        //    server just after the other's rollout (its garbage collection, its caches).
        let mut rounds = Vec::new();
        let events_timeout = Duration::from_secs(60 + n as u64 / 10);
        let meter = TurnMeter::new(&client, pid);
        for round in 0..if args.switch { args.rounds } else { 0 } {
            let (target, to) = match round % 2 {
                0 => (&new_target, "new"),
                _ => (&old_target, "old"),
            };
            let plain_first = round % 2 == 0;
            let plain_turn = async || -> Result<Option<PlainRollout>> {
                let Some(plain) = &plain else {
                    return Ok(None);
                };
                controller.events_sent(events_timeout).await?;
                let start = meter.start(args.collect_garbage).await?;
                let mut run = plain.roll_out(&names, target, args.minimal_baseline).await?;
                run.cpu = meter.cpu_since(&start);
                run.collections = meter.collections_since(&start).await;
                eprintln!(
                    "bench_cluster: round {}: plain client: {n} JSON patches, {} in flight, in \
                     {:.2}s",
                    round + 1,
                    args.concurrency,
                    run.seconds
                );
                Ok(Some(run))
            };
            let mut plain_run = match plain_first {
                true => plain_turn().await?,
                false => None,
            };
            // Each turn starts on a quiet API server: this one too waits for the Events of the
            // controller's previous rollout, when it follows it directly.
            if !plain_first {
                controller.events_sent(events_timeout).await?;
            }
            apply(&client, &support::cluster_version(&singleton, target.release)).await?;
            wait_for_reason(&seen, "ReleaseMismatch", Duration::from_secs(60)).await?;
            let writes_before = controller.metrics().await;
            let start = meter.start(args.collect_garbage).await?;
            let since = Instant::now();
            let since_wall = jiff::Timestamp::now();
            apply(&client, &golden_config_map(&ns, target.release, &target.stream)).await?;
            let update_seconds = since.elapsed().as_secs_f64();
            let expected = |i: usize| target.expected(i);
            let mut done = converge(&seen, &names, &expected, since, timeout).await?;
            let cpu = meter.cpu_since(&start);
            done.config_map_update = update_seconds;
            let golden_seen = (seen.lock().unwrap().golden.iter())
                .find(|at| **at >= since)
                .map(|at| at.duration_since(since).as_secs_f64());
            // Writes between the ConfigMap update and convergence, by kind: Events are sent off
            // the critical path, everything else (patches, status) is on it.
            let writes_after = controller.metrics().await;
            let collections = meter.collections_since(&start).await;
            let during = |kind: &str| {
                let key = format!("boot_image_controller_writes_total{{target=\"{kind}\"}}");
                let at = |m: &BTreeMap<String, f64>| m.get(&key).copied().unwrap_or(0.0);
                at(&writes_after) - at(&writes_before)
            };
            let kinds: BTreeSet<String> = by_label(&writes_after, "boot_image_controller_writes_total", "target")
                .into_keys()
                .collect();
            done.critical_path_writes = kinds
                .iter()
                .filter(|kind| kind.as_str() != "Event")
                .map(|kind| during(kind))
                .sum();
            done.rollout_events = during("Event");
            eprintln!(
                "bench_cluster: round {}: converged at the {to} stream {:.2}s after the golden \
                 ConfigMap update (patches seen from {:.2}s to {:.2}s)",
                round + 1,
                done.seconds,
                done.first_patch,
                done.last_patch
            );
            // Check with a fresh list, not only the watch.
            let listed = machine_sets(&client, &ns).list(&ListParams::default()).await?;
            let wrong = listed
                .items
                .iter()
                .filter(|o| {
                    let v = serde_json::to_value(o).unwrap_or_default();
                    let i = names.iter().position(|n| Some(n.as_str()) == o.metadata.name.as_deref());
                    i.is_none_or(|i| (field(&v, AMI), field(&v, STUB)) != expected(i))
                })
                .count();
            if wrong > 0 || listed.items.len() != n {
                bail!("{wrong} of {} MachineSets not at the {to} image", listed.items.len());
            }
            if !plain_first {
                plain_run = plain_turn().await?;
            }
            let baseline_seconds = plain_run.as_ref().map(|p| p.seconds);
            let by_server = first_patch_by_server_clock(&ns, since_wall);
            rounds.push(json!({
                "to": to,
                "plain_first": plain_first,
                "convergence_seconds": done.seconds,
                "first_patch_seconds": done.first_patch,
                // From the moment the benchmark's own watch saw the ConfigMap change: what the
                // controller adds to the change's fan-out and its first patch's round trip.
                "golden_seen_seconds": golden_seen,
                "first_patch_after_golden_seen_seconds": golden_seen.map(|g| done.first_patch - g),
                // By the API server's clock (its audit log), from its receiving the ConfigMap's
                // update, and from its answer, to its receiving the first patch.
                "first_patch_server_seconds": by_server.map(|s| s.0),
                "first_patch_after_update_answered_server_seconds": by_server.map(|s| s.1),
                "config_map_update_seconds": done.config_map_update,
                "last_patch_seconds": done.last_patch,
                "progressing_true_seconds": done.progressing_true,
                "critical_path_writes": done.critical_path_writes,
                "rollout_events": done.rollout_events,
                "baseline_seconds": baseline_seconds,
                "baseline_first_patch_seconds": plain_run.as_ref().and_then(|p| p.first_patch),
                "ratio": baseline_seconds.filter(|b| *b > 0.0).map(|b| done.seconds / b),
                // From the update's answer, when the change is in the cluster: without the
                // benchmark's own call, which the controller cannot shorten.
                "ratio_after_update_answered": baseline_seconds
                    .filter(|b| *b > 0.0)
                    .map(|b| (done.seconds - done.config_map_update) / b),
                // CPU seconds by process, and the API server's garbage collections, during
                // each side's turn.
                "cpu_seconds": cpu,
                "apiserver_gc_cycles": collections,
                "baseline_cpu_seconds": plain_run.as_ref().map(|p| &p.cpu),
                "baseline_apiserver_gc_cycles": plain_run.as_ref().and_then(|p| p.collections),
            }));
        }
        if let Some(plain) = &plain {
            plain.stop();
        }
        // Let held-back status writes and Events finish before counting.
        tokio::time::sleep(Duration::from_secs(2)).await;
        if args.steady_periods > 0 {
            controller.events_sent(events_timeout).await?;
        }
        let after_rollout = controller.metrics().await;

        // 4. Steady state.
        let mut steady = Value::Null;
        if args.steady_periods > 0 {
            for task in &watches {
                task.abort();
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
            let resource_versions = || async {
                let mut rvs: BTreeMap<String, String> = machine_sets(&client, &ns)
                    .list_metadata(&ListParams::default())
                    .await?
                    .items
                    .into_iter()
                    .map(|o| (o.name_any(), o.resource_version().unwrap_or_default()))
                    .collect();
                let mc = api(&client, "operator.openshift.io/v1", "MachineConfiguration", "")
                    .get(&singleton)
                    .await?;
                rvs.insert(
                    "MachineConfiguration".into(),
                    mc.resource_version().unwrap_or_default(),
                );
                Ok::<_, anyhow::Error>(rvs)
            };
            let rv_before = resource_versions().await?;
            let metrics_before = controller.metrics().await;
            let cpu_before = cpu_seconds(pid);
            let requests_before = apiserver_requests(&client).await?;
            let period = boot_image_controller::controller::config::parse_duration(&args.resync)
                .map_err(|e| anyhow!(e))?;
            let window = period * args.steady_periods;
            eprintln!(
                "bench_cluster: steady state: watching {} resync periods ({:.0}s)",
                args.steady_periods,
                window.as_secs_f64()
            );
            tokio::time::sleep(window + Duration::from_millis(500)).await;
            let requests_after = apiserver_requests(&client).await?;
            let metrics_after = controller.metrics().await;
            let cpu_after = cpu_seconds(pid);
            let rv_after = resource_versions().await?;
            let writes_before = by_label(&metrics_before, "boot_image_controller_writes_total", "target");
            let writes_after = by_label(&metrics_after, "boot_image_controller_writes_total", "target");
            let writes: BTreeMap<String, u64> = writes_after
                .iter()
                .map(|(k, v)| {
                    let delta = v - writes_before.get(k).copied().unwrap_or(0.0);
                    (k.clone(), delta.round().max(0.0) as u64)
                })
                .collect();
            let total_writes: u64 = writes.values().sum();
            let changed = rv_after
                .iter()
                .filter(|(k, v)| rv_before.get(*k) != Some(*v))
                .count();
            let mut requests: BTreeMap<String, u64> = BTreeMap::new();
            let mut all_resources = 0;
            for (series, after) in &requests_after {
                let delta = (after - requests_before.get(series).copied().unwrap_or(0.0)).round();
                let resource = label(series, "resource");
                if delta < 1.0 || resource.is_empty() {
                    continue;
                }
                let delta = delta as u64;
                all_resources += delta;
                if CONTROLLER_RESOURCES.contains(&resource) {
                    let key = format!("{} {resource}", label(series, "verb"));
                    *requests.entry(key).or_default() += delta;
                }
            }
            let controller_requests: u64 = requests.values().sum();
            let pass_seconds = |m: &BTreeMap<String, f64>| {
                m.get("boot_image_controller_reconcile_duration_seconds_sum{scope=\"all\"}")
                    .copied()
                    .unwrap_or(0.0)
            };
            let pass_count = |m: &BTreeMap<String, f64>| {
                m.get("boot_image_controller_reconcile_duration_seconds_count{scope=\"all\"}")
                    .copied()
                    .unwrap_or(0.0) as u64
            };
            eprintln!(
                "bench_cluster: steady state: {} writes, {controller_requests} API requests on the \
                 controller's resources ({all_resources} on all resources), {changed} \
                 resourceVersions changed, {} full passes",
                total_writes,
                pass_count(&metrics_after).saturating_sub(pass_count(&metrics_before)),
            );
            steady = json!({
                "periods": args.steady_periods,
                "resync_period": args.resync,
                "seconds": window.as_secs_f64(),
                "writes": total_writes,
                "writes_by_kind": writes,
                "resource_versions_changed": changed,
                "requests": controller_requests,
                "requests_by_verb_resource": requests,
                "requests_all_resources": all_resources,
                "full_passes": pass_count(&metrics_after).saturating_sub(pass_count(&metrics_before)),
                "full_pass_seconds": pass_seconds(&metrics_after) - pass_seconds(&metrics_before),
                "controller_cpu_seconds": cpu_after.zip(cpu_before).map(|(a, b)| a - b),
            });
        }

        // 5. Memory.
        let hwm = proc_status_kib(pid, "VmHWM:").map(|k| k * 1024);
        let rss = proc_status_kib(pid, "VmRSS:").map(|k| k * 1024);
        let reconcile = |scope: &str| {
            let get = |suffix: &str| {
                after_rollout
                    .get(&format!(
                        "boot_image_controller_reconcile_duration_seconds_{suffix}{{scope=\"{scope}\"}}"
                    ))
                    .copied()
                    .unwrap_or(0.0)
            };
            json!({"count": get("count"), "seconds": get("sum")})
        };
        Ok::<_, anyhow::Error>(json!({
            "ready_seconds": ready_seconds,
            "list_seconds": list_seconds,
            "initial_convergence_seconds": initial.seconds,
            // Each figure of a rollout is the median over the rounds; `rounds` has every one.
            "rounds": rounds,
            "controller_writes": by_label(&after_rollout, "boot_image_controller_writes_total", "target"),
            "controller_patches": by_label(&after_rollout, "boot_image_controller_patches_total", "result"),
            "reconcile": {"all": reconcile("all"), "some": reconcile("some")},
            "steady": steady,
            "rss_hwm_bytes": hwm,
            "rss_bytes": rss,
            "rss_ready_bytes": rss_ready,
            "controller_cpu_seconds": cpu_seconds(pid),
        }))
    }
    .await;
    controller.stop();
    for task in &watches {
        task.abort();
    }
    if !args.keep {
        cleanup(&client, &ns, Some(&singleton)).await;
    }
    if let Some(plain) = &plain {
        plain.stop();
        if !args.keep {
            cleanup(&client, &bns, None).await;
        }
    }
    let mut report =
        result.with_context(|| format!("controller log: {}", controller.log.display()))?;
    // Every figure of the rounds (each a number or null), as the median over them.
    let rounds = report["rounds"].as_array().cloned().unwrap_or_default();
    let figures: BTreeSet<String> = (rounds.iter())
        .filter_map(Value::as_object)
        .flat_map(|round| round.iter())
        .filter(|(_, value)| value.is_number() || value.is_null())
        .map(|(key, _)| key.clone())
        .collect();
    for key in figures {
        report[&key] = json!(median(rounds.iter().map(|r| r[&key].as_f64())));
    }
    let extra = json!({
        "count": n,
        "concurrency": args.concurrency,
        "fixtures": data.source.short(),
        "source": data.source.describe(),
        "create_seconds": create_seconds,
        "minimal_baseline": args.minimal_baseline,
        "controller_log": controller.log.display().to_string(),
        "command": args.command,
    });
    if let (Some(r), Some(e)) = (report.as_object_mut(), extra.as_object()) {
        r.extend(e.clone());
    }
    let text = serde_json::to_string_pretty(&report)?;
    match &args.json {
        Some(path) => std::fs::write(path, &text).with_context(|| path.display().to_string())?,
        None => println!("{text}"),
    }
    Ok(())
}
