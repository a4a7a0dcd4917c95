//! The controller: watch, plan, patch, report.
//!
//! Watches feed reflector stores and a trigger channel; one loop turns triggers into passes.
//! A pass snapshots the stores, asks the planner, carries out the Updates with guarded JSON
//! Patches, and reports (status, Events, metrics). Only the leader writes.

pub mod config;
pub mod lease;
pub mod lenient;
pub mod status;

mod known;
mod secrets;
mod watches;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use futures::StreamExt;
use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::events::v1::Event as KubeEvent;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::Client;
use kube::api::PostParams;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::reflector::ObjectRef;
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::api::{ConfigMap, ControlPlaneMachineSet, MachineConfiguration, MachineSet, ObjectMeta};
use crate::known_images::KnownImages;
use crate::metrics::Metrics;
use crate::plan::{self, Action, Cluster, Entry, Options, Planner, Resource, record};
use crate::reason::Reason;
use crate::server::{self, Health};
pub use config::RunArgs;
use lenient::Lenient;
use watches::{Stores, Trigger};

/// Retries of a failing resource start here and double up to [`MAX_BACKOFF`].
const MIN_BACKOFF: Duration = Duration::from_secs(1);
const MAX_BACKOFF: Duration = Duration::from_secs(300);
/// After a failed `test` op the store is usually one watch event behind; retry soon.
const CONFLICT_RETRY: Duration = Duration::from_millis(500);
/// Triggers arriving this close together are handled in one pass.
const DEBOUNCE: Duration = Duration::from_millis(100);
/// Message-only status changes are written at most this often during a rollout.
const STATUS_MIN_INTERVAL: Duration = Duration::from_secs(1);
/// How often the known-images file is checked for changes.
const FILE_POLL: Duration = Duration::from_secs(10);
const REPORTING_CONTROLLER: &str = "boot-image-controller";

#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("cannot configure the Kubernetes client: {0}")]
    Client(String),
    #[error("invalid bind address {address:?}: {source}")]
    BindAddress {
        address: String,
        source: std::net::AddrParseError,
    },
    #[error("cannot listen on {address}: {source}")]
    Listen {
        address: std::net::SocketAddr,
        source: std::io::Error,
    },
    #[error("cannot serve /metrics over TLS: {0}")]
    MetricsTls(#[from] server::secure::TlsError),
    #[error(transparent)]
    LeaseLost(#[from] lease::LeaseLost),
}

/// Which object a plan entry is about; all live in the machine-API namespace.
pub type Key = (Resource, String);

/// Runs until `shutdown` is cancelled (clean exit) or the leader lease is lost (error).
pub async fn run(args: RunArgs, shutdown: CancellationToken) -> Result<(), RunError> {
    let client = client(&args).await?;
    let metrics = Metrics::new();
    let health = Arc::new(Health::default());
    // Metrics and probes on their own addresses, as kubebuilder controllers do; one listener
    // serves both when the two flags name the same address (local runs and tests).
    let mut listeners: BTreeMap<std::net::SocketAddr, server::Endpoints> = BTreeMap::new();
    for (address, endpoints) in [
        (&args.metrics_bind_address, server::Endpoints::METRICS),
        (&args.health_probe_bind_address, server::Endpoints::PROBES),
    ] {
        let parsed =
            server::parse_bind_address(address).map_err(|source| RunError::BindAddress {
                address: address.clone(),
                source,
            })?;
        if let Some(addr) = parsed {
            *listeners.entry(addr).or_default() |= endpoints;
        }
    }
    let security = server::Security::from_args(&args.metrics_server, &client, &shutdown)?;
    for (addr, endpoints) in listeners {
        server::serve(
            addr,
            endpoints,
            metrics.clone(),
            health.clone(),
            shutdown.clone(),
            security.clone(),
        )
        .await
        .map_err(|source| RunError::Listen {
            address: addr,
            source,
        })?;
    }

    let own_namespace = args.own_namespace();
    let (trigger_tx, trigger_rx) = mpsc::unbounded_channel();
    let stores = watches::start(&client, &args, &own_namespace, trigger_tx.clone()).await;

    let (leader_tx, leader_rx) = watch::channel(!args.leader_elect);
    // Without leader election we lead from the start; the sender stays alive for the whole run.
    let mut _always_leader = None;
    let lease_task = if args.leader_elect {
        let namespace = args
            .leader_election_namespace
            .clone()
            .unwrap_or_else(|| own_namespace.clone());
        let config = lease::LeaseConfig::new(
            namespace.clone(),
            args.leader_election_id.clone(),
            args.identity(),
        );
        info!(identity = %config.identity, lease = %format!("{namespace}/{}", config.name), "campaigning for leadership");
        let api: Api<Lease> = Api::namespaced(client.clone(), &namespace);
        Some(tokio::spawn(lease::run(
            api,
            config,
            leader_tx,
            shutdown.clone(),
        )))
    } else {
        _always_leader = Some(leader_tx);
        None
    };

    let synced = tokio::select! {
        _ = shutdown.cancelled() => false,
        _ = stores.wait_until_ready() => true,
    };
    if !synced {
        // Stopped before the caches synced: still give back a lease we may already hold.
        return finish(lease_task).await;
    }
    health.set_synced();
    metrics.ready.set(1);
    info!("caches synced; controller ready");

    let mut controller = Controller {
        events: client.clone(),
        machine_sets: Api::namespaced(client.clone(), &args.machine_api_namespace),
        control_plane: Api::namespaced(client.clone(), &args.machine_api_namespace),
        configurations: Api::all(client.clone()),
        known_images_api: Api::namespaced(client.clone(), &own_namespace),
        secrets: secrets::SecretWatches::new(
            client.clone(),
            &args.machine_api_namespace,
            trigger_tx,
        ),
        stores,
        metrics: metrics.clone(),
        leader: leader_rx,
        shutdown: shutdown.clone(),
        known_file: args
            .known_images_file
            .clone()
            .map(|p| (p, None, KnownImages::default())),
        args,
        results: BTreeMap::new(),
        backoff: HashMap::new(),
        last_status_write: None,
        status_dirty: false,
        status_basis: None,
        last_blocked: None,
    };
    controller.run_loop(trigger_rx).await;
    health.set_stopping();
    metrics.ready.set(0);
    finish(lease_task).await
}

/// Waits for the lease task (which releases the lease on shutdown) and reports a lost lease.
async fn finish(
    lease_task: Option<tokio::task::JoinHandle<Result<(), lease::LeaseLost>>>,
) -> Result<(), RunError> {
    if let Some(task) = lease_task {
        match task.await {
            Ok(result) => result?,
            Err(e) => warn!(error = %e, "lease task ended abnormally"),
        }
    }
    info!("stopped");
    Ok(())
}

async fn client(args: &RunArgs) -> Result<Client, RunError> {
    let config = args.cluster.config().await.map_err(RunError::Client)?;
    Client::try_from(config).map_err(|e| RunError::Client(e.to_string()))
}

struct Controller {
    args: RunArgs,
    stores: Stores,
    secrets: secrets::SecretWatches,
    /// Client for Events, which live in the namespace of the object they are about.
    events: Client,
    machine_sets: Api<MachineSet>,
    control_plane: Api<ControlPlaneMachineSet>,
    configurations: Api<MachineConfiguration>,
    known_images_api: Api<ConfigMap>,
    metrics: Metrics,
    leader: watch::Receiver<bool>,
    shutdown: CancellationToken,
    /// The known-images file, its last modification time and content.
    known_file: Option<(PathBuf, Option<SystemTime>, KnownImages)>,
    /// The latest decision for every machine resource.
    results: BTreeMap<Key, Entry>,
    /// Resources to retry: attempts so far and when.
    backoff: HashMap<Key, (u32, Instant)>,
    last_status_write: Option<Instant>,
    /// A status change was held back by [`STATUS_MIN_INTERVAL`].
    status_dirty: bool,
    /// The resourceVersion our last status write was based on, and what we wrote.
    status_basis: Option<(String, Vec<crate::api::Condition>)>,
    /// The gate that held writes in the last pass: logged when it changes, reported in status.
    last_blocked: Option<plan::Blocked>,
}

/// What a pass covers.
#[derive(Default)]
struct Scope {
    all: bool,
    keys: BTreeSet<Key>,
}

impl Scope {
    fn add(&mut self, trigger: Trigger) {
        match trigger {
            Trigger::All => self.all = true,
            Trigger::One(key) => {
                self.keys.insert(key);
            }
        }
    }

    fn is_empty(&self) -> bool {
        !self.all && self.keys.is_empty()
    }
}

/// How a patch went.
enum PatchResult {
    Updated,
    /// A `test` op failed or the object changed: re-plan from fresh state.
    Conflict,
    Gone,
    Failed(String),
    /// Not attempted: lost leadership, paused or shutting down meanwhile.
    Withheld,
}

impl Controller {
    async fn run_loop(&mut self, mut triggers: mpsc::UnboundedReceiver<Trigger>) {
        let mut scope = Scope {
            all: true,
            ..Scope::default()
        };
        let mut resync = tokio::time::interval_at(
            Instant::now() + self.args.resync_period,
            self.args.resync_period,
        );
        let mut file_poll = tokio::time::interval(FILE_POLL);
        // A pass longer than the period must not be followed by a burst of catch-up ticks.
        resync.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        file_poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            if !scope.is_empty() && *self.leader.borrow() {
                let started = Instant::now();
                let label = if scope.all { "all" } else { "some" };
                self.pass(std::mem::take(&mut scope)).await;
                self.metrics
                    .reconcile_duration
                    .with_label_values(&[label])
                    .observe(started.elapsed().as_secs_f64());
            }
            self.metrics.leader.set(i64::from(*self.leader.borrow()));
            let next_retry = self.backoff.values().map(|(_, due)| *due).min();
            let status_flush = self
                .status_dirty
                .then(|| self.last_status_write.map(|t| t + STATUS_MIN_INTERVAL))
                .flatten();
            let wake = [next_retry, status_flush].into_iter().flatten().min();
            tokio::select! {
                _ = self.shutdown.cancelled() => return,
                received = triggers.recv() => match received {
                    Some(t) => scope.add(t),
                    None => return,
                },
                _ = resync.tick() => {
                    debug!("periodic resync");
                    scope.all = true;
                }
                _ = file_poll.tick() => {
                    if self.reload_known_images_file() {
                        scope.all = true;
                    }
                }
                _ = sleep_until(wake) => {
                    let now = Instant::now();
                    let due: Vec<Key> = self.backoff.iter().filter(|(_, (_, at))| *at <= now).map(|(k, _)| k.clone()).collect();
                    for key in due {
                        scope.keys.insert(key);
                    }
                    if self.status_dirty {
                        // Re-plan nothing, just flush the held-back status.
                        self.write_status().await;
                    }
                }
                changed = self.leader.changed() => {
                    if changed.is_err() {
                        return;
                    }
                    if *self.leader.borrow() {
                        info!("leading: planning everything");
                        scope.all = true;
                    } else {
                        warn!("no longer leading: stopped writing");
                    }
                }
            }
            // Gather triggers that arrive together (a rollout produces one per patched object).
            let deadline = Instant::now() + DEBOUNCE;
            while let Ok(Some(t)) = tokio::time::timeout_at(deadline, triggers.recv()).await {
                scope.add(t);
            }
        }
    }

    /// Reads the known-images file again if it changed; true when its content changed.
    fn reload_known_images_file(&mut self) -> bool {
        let Some((path, mtime, images)) = &mut self.known_file else {
            return false;
        };
        let modified = std::fs::metadata(&*path).and_then(|m| m.modified()).ok();
        if modified.is_some() && modified == *mtime {
            return false;
        }
        match KnownImages::read(path) {
            Ok(fresh) => {
                *mtime = modified;
                let changed = fresh != *images;
                if changed {
                    info!(path = %path.display(), images = fresh.len(), "loaded known images file");
                    *images = fresh;
                }
                changed
            }
            Err(e) => {
                warn!(error = %e, "keeping the previous known images");
                false
            }
        }
    }

    fn cluster(&self) -> Cluster {
        let mut known_images = self
            .known_file
            .as_ref()
            .map(|(_, _, images)| images.clone())
            .unwrap_or_default();
        known_images.extend(self.stores.remembered_images());
        Cluster {
            machine_configuration: self
                .stores
                .machine_configuration(&self.args.machine_configuration_name),
            infrastructure: self.stores.infrastructure(),
            cluster_version: self.stores.cluster_version(),
            golden: self.stores.golden(),
            secrets: self.secrets.snapshot(),
            known_images,
        }
    }

    async fn pass(&mut self, scope: Scope) {
        if self
            .known_file
            .as_ref()
            .is_some_and(|(_, mtime, _)| mtime.is_none())
        {
            self.reload_known_images_file();
        }
        let machine_sets = self.stores.machine_sets();
        let control_plane = self.stores.control_plane_machine_sets();
        // Each MachineSet needs the managed secret it would point at; watch those by name.
        let names: BTreeSet<String> = machine_sets
            .iter()
            .filter_map(|ms| ms.parsed.as_ref().ok())
            .map(|ms| &ms.spec.template)
            .chain(
                control_plane
                    .iter()
                    .filter_map(|cp| cp.parsed.as_ref().ok())
                    .filter_map(|cp| cp.spec.template.machines_v1beta1.as_ref()),
            )
            .filter_map(|t| {
                t.spec
                    .provider_spec
                    .value
                    .as_ref()?
                    .pointer("/userDataSecret/name")?
                    .as_str()
            })
            .filter_map(plan::stub::managed_name)
            .collect();
        self.secrets.ensure(&names).await;

        let cluster = self.cluster();
        let options = Options {
            control_plane_arch: self.args.control_plane_arch,
            now: Timestamp::now(),
            hot_loop_threshold: self.args.hot_loop_threshold,
            hot_loop_window: SignedDuration::try_from(self.args.hot_loop_window)
                .unwrap_or(SignedDuration::from_hours(1)),
        };
        let planner = Planner::new(&cluster, &options);

        let mut planned: Vec<(Key, Entry, ObjectMeta)> = Vec::new();
        let by_name = |meta: &ObjectMeta| meta.name.clone().unwrap_or_default();
        if scope.all {
            let live: BTreeSet<Key> = machine_sets
                .iter()
                .map(|m| (Resource::MachineSets, by_name(&m.metadata)))
                .chain(
                    control_plane
                        .iter()
                        .map(|c| (Resource::ControlPlaneMachineSets, by_name(&c.metadata))),
                )
                .collect();
            self.results.retain(|k, _| live.contains(k));
            self.backoff.retain(|k, _| live.contains(k));
        }
        for ms in &machine_sets {
            let key = (Resource::MachineSets, by_name(&ms.metadata));
            if scope.all || scope.keys.contains(&key) {
                planned.push((
                    key,
                    planner.machine_set(&ms.to_input()),
                    ms.metadata.clone(),
                ));
            }
        }
        for cp in &control_plane {
            let key = (Resource::ControlPlaneMachineSets, by_name(&cp.metadata));
            if scope.all || scope.keys.contains(&key) {
                planned.push((
                    key,
                    planner.control_plane_machine_set(&cp.to_input()),
                    cp.metadata.clone(),
                ));
            }
        }
        for key in &scope.keys {
            if !planned.iter().any(|(k, _, _)| k == key) {
                self.results.remove(key);
                self.backoff.remove(key);
            }
        }

        if let Some(golden) = planner.golden() {
            known::remember(
                &self.known_images_api,
                self.stores.known_images_config_map(),
                golden.image_references(),
                &self.metrics,
            )
            .await;
        }

        // Carry out the updates, a bounded number at a time.
        let golden = planner.golden().cloned();
        let updates: Vec<(usize, Vec<json_patch::PatchOperation>)> = planned
            .iter()
            .enumerate()
            .filter(|(_, (_, e, _))| e.action == Action::Update)
            .map(|(i, (_, e, meta))| {
                let golden = golden.as_ref().expect("updates need a golden stream");
                let mut ops = e.patch.clone();
                ops.extend(record::record_ops(
                    meta,
                    e.history_entry(options.now, golden),
                    &e.target_key(),
                    options.now,
                    options.hot_loop_window,
                ));
                (i, ops)
            })
            .collect();
        let this = &*self;
        let results: Vec<(usize, PatchResult)> = futures::stream::iter(updates)
            .map(|(i, ops)| {
                let (key, entry, meta) = &planned[i];
                async move {
                    let result = this.patch(key, ops).await;
                    if matches!(result, PatchResult::Updated) {
                        // Published with the patch, inside the same concurrency bound: sending
                        // Events one by one after all patches made rollouts a quarter slower.
                        this.publish(
                            key.0,
                            meta,
                            "Normal",
                            "BootImageUpdated",
                            "UpdateBootImage",
                            &entry.message,
                        )
                        .await;
                    }
                    (i, result)
                }
            })
            .buffer_unordered(self.args.max_concurrent_patches.max(1))
            .collect()
            .await;
        let mut all_done = true;
        for (i, result) in results {
            let (key, entry, _) = &mut planned[i];
            let kind = kind_label(key.0);
            match result {
                PatchResult::Updated => {
                    self.metrics
                        .patches
                        .with_label_values(&[kind, "updated"])
                        .inc();
                    self.metrics.writes.with_label_values(&[kind]).inc();
                    info!(kind, name = %key.1, change = %entry.message, "updated boot image");
                    self.backoff.remove(key);
                }
                PatchResult::Conflict => {
                    self.metrics
                        .patches
                        .with_label_values(&[kind, "conflict"])
                        .inc();
                    debug!(kind, name = %key.1, "object changed under us; re-planning");
                    self.backoff
                        .insert(key.clone(), (0, Instant::now() + CONFLICT_RETRY));
                    all_done = false;
                }
                PatchResult::Gone | PatchResult::Withheld => all_done = false,
                PatchResult::Failed(error) => {
                    self.metrics
                        .patches
                        .with_label_values(&[kind, "failed"])
                        .inc();
                    entry.action = Action::Error;
                    entry.reason = Reason::PatchFailed;
                    entry.message = format!("patch failed: {error}");
                    all_done = false;
                }
            }
        }

        // Reporting: Events for new errors, per-resource retries, opted-out cleanup.
        for (key, entry, meta) in planned {
            let previous = self.results.get(&key);
            let kind = kind_label(key.0);
            if entry.action == Action::Error {
                let new_error =
                    previous.is_none_or(|p| p.action != Action::Error || p.reason != entry.reason);
                if new_error {
                    warn!(kind, name = %key.1, reason = %entry.reason, message = %entry.message, "cannot update boot image");
                    self.metrics.error_entered(kind, entry.reason);
                    let event_reason = entry.reason.as_str();
                    self.publish(
                        key.0,
                        &meta,
                        "Warning",
                        event_reason,
                        "PlanBootImage",
                        &entry.message,
                    )
                    .await;
                }
                let attempts = self.backoff.get(&key).map_or(0, |(n, _)| n + 1);
                let delay = MIN_BACKOFF
                    .saturating_mul(1 << attempts.min(16))
                    .min(MAX_BACKOFF);
                self.backoff
                    .insert(key.clone(), (attempts, Instant::now() + delay));
            } else if entry.action != Action::Update {
                self.backoff.remove(&key);
            }
            if entry.reason == Reason::OptedOut && record::hot_loop_memory(&meta).is_some() {
                // Opting out and back in is the documented way to reset the hot-loop guard.
                self.clear_hot_loop(key.0, &meta).await;
            }
            self.results.insert(key, entry);
        }

        let blocked = planner.blocked().cloned();
        if blocked.as_ref().map(|b| b.reason) != self.last_blocked.as_ref().map(|b| b.reason) {
            match &blocked {
                Some(b) => {
                    warn!(reason = %b.reason, message = %b.message, "boot image writes are held")
                }
                None if self.last_blocked.is_some() => info!("boot image writes resumed"),
                None => {}
            }
        }
        self.last_blocked = blocked.clone();
        self.metrics.observe_plan(
            &self.plan_view(blocked.clone()),
            golden.as_ref().map(|g| {
                (
                    g.stream.stream.as_str(),
                    g.release_version.as_deref().unwrap_or(""),
                )
            }),
        );
        self.write_status().await;
        if all_done {
            self.metrics.last_sync.set(Timestamp::now().as_second());
        }
    }

    fn plan_view(&self, blocked: Option<plan::Blocked>) -> plan::Plan {
        let pick = |r: Resource| {
            self.results
                .iter()
                .filter(|((res, _), _)| *res == r)
                .map(|(_, e)| e.clone())
                .collect()
        };
        plan::Plan {
            blocked,
            machine_sets: pick(Resource::MachineSets),
            control_plane_machine_sets: pick(Resource::ControlPlaneMachineSets),
        }
    }

    async fn patch(&self, key: &Key, ops: Vec<json_patch::PatchOperation>) -> PatchResult {
        if self.shutdown.is_cancelled()
            || !*self.leader.borrow()
            || self.stores.paused(&self.args.machine_configuration_name)
        {
            return PatchResult::Withheld;
        }
        let patch = Patch::Json::<()>(json_patch::Patch(ops));
        let params = PatchParams::default();
        let outcome = match key.0 {
            Resource::MachineSets => self
                .machine_sets
                .patch(&key.1, &params, &patch)
                .await
                .map(|_| ()),
            Resource::ControlPlaneMachineSets => self
                .control_plane
                .patch(&key.1, &params, &patch)
                .await
                .map(|_| ()),
        };
        match outcome {
            Ok(()) => PatchResult::Updated,
            // 422: a `test` op failed; 409: a resourceVersion precondition failed.
            Err(kube::Error::Api(e)) if e.code == 422 || e.code == 409 => PatchResult::Conflict,
            Err(kube::Error::Api(e)) if e.code == 404 => PatchResult::Gone,
            Err(e) => PatchResult::Failed(e.to_string()),
        }
    }

    async fn clear_hot_loop(&self, resource: Resource, meta: &ObjectMeta) {
        let ops = record::remove_annotation_ops(meta, record::HOT_LOOP_ANNOTATION);
        let name = meta.name.clone().unwrap_or_default();
        match self.patch(&(resource, name.clone()), ops).await {
            PatchResult::Updated => {
                // Counted like any other write, so that `writes_total` stays a complete record
                // of what this controller changed.
                self.metrics
                    .writes
                    .with_label_values(&[kind_label(resource)])
                    .inc();
                info!(name = %name, "opted out: cleared the hot-loop guard")
            }
            PatchResult::Failed(e) => {
                warn!(name = %name, error = %e, "could not clear the hot-loop guard")
            }
            _ => {}
        }
    }

    /// Records an Event on the object. Each patch gets its own Event: kube-runtime's recorder
    /// folds events with the same reason into a series and would keep only the first note.
    async fn publish(
        &self,
        resource: Resource,
        meta: &ObjectMeta,
        type_: &str,
        reason: &str,
        action: &str,
        note: &str,
    ) {
        let regarding = match resource {
            Resource::MachineSets => object_ref::<MachineSet>(meta),
            Resource::ControlPlaneMachineSets => object_ref::<ControlPlaneMachineSet>(meta),
        };
        let now = Timestamp::now();
        let event = KubeEvent {
            metadata: ObjectMeta {
                name: Some(format!(
                    "{}.{:x}",
                    meta.name.as_deref().unwrap_or("object"),
                    now.as_nanosecond()
                )),
                namespace: meta.namespace.clone(),
                ..ObjectMeta::default()
            },
            event_time: Some(MicroTime(now)),
            type_: Some(type_.to_string()),
            reason: Some(reason.to_string()),
            action: Some(action.to_string()),
            // Event notes are limited to 1 kB by the API.
            note: Some(note.chars().take(1000).collect()),
            regarding: Some(regarding),
            reporting_controller: Some(REPORTING_CONTROLLER.to_string()),
            reporting_instance: Some(self.args.identity()),
            ..KubeEvent::default()
        };
        let api: Api<KubeEvent> = Api::namespaced(
            self.events.clone(),
            meta.namespace.as_deref().unwrap_or_default(),
        );
        match api.create(&PostParams::default(), &event).await {
            Ok(_) => self.metrics.writes.with_label_values(&["Event"]).inc(),
            Err(e) => warn!(error = %e, reason, "could not publish an Event"),
        }
    }

    /// Computes the conditions from the latest results and the gate of the last pass, and
    /// writes them if they changed.
    async fn write_status(&mut self) {
        let name = &self.args.machine_configuration_name;
        let Some(mc) = self.stores.machine_configuration(name) else {
            return;
        };
        let blocked = self.last_blocked.clone();
        let machine_sets: Vec<&Entry> = self
            .results
            .iter()
            .filter(|(k, _)| k.0 == Resource::MachineSets)
            .map(|(_, e)| e)
            .collect();
        let control_plane: Vec<&Entry> = self
            .results
            .iter()
            .filter(|(k, _)| k.0 == Resource::ControlPlaneMachineSets)
            .map(|(_, e)| e)
            .collect();
        let desired = status::desired(&status::StatusInput {
            blocked: blocked.as_ref(),
            machine_sets: &machine_sets,
            control_plane_machine_sets: &control_plane,
            // Read now rather than from the pass's snapshot: every patch of the pass has
            // returned, and a pause set meanwhile withheld the rest (see `patch`).
            paused: self.stores.paused(name),
            // Status is written after the pass's patches have all returned.
            writes_in_flight: 0,
        });
        let mut current = mc
            .status
            .as_ref()
            .and_then(|s| s.conditions.clone())
            .unwrap_or_default();
        // Until the watch delivers our own write, compare with what we wrote, not the stale copy.
        if let Some((basis, written)) = &self.status_basis
            && mc.metadata.resource_version.as_ref() == Some(basis)
        {
            current = written.clone();
        }
        let Some(conditions) =
            status::merge(&current, &desired, mc.metadata.generation, Timestamp::now())
        else {
            self.status_dirty = false;
            return;
        };
        let flips = conditions.iter().any(|c| {
            current
                .iter()
                .find(|o| o.type_ == c.type_)
                .is_none_or(|o| o.status != c.status || o.reason != c.reason)
        });
        let recent = self
            .last_status_write
            .is_some_and(|t| t.elapsed() < STATUS_MIN_INTERVAL);
        if recent && !flips {
            self.status_dirty = true;
            return;
        }
        if !*self.leader.borrow() {
            return;
        }
        match status::write(&self.configurations, name, &conditions).await {
            Ok(()) => {
                self.metrics
                    .writes
                    .with_label_values(&["MachineConfiguration/status"])
                    .inc();
                self.last_status_write = Some(Instant::now());
                self.status_dirty = false;
                self.status_basis = mc
                    .metadata
                    .resource_version
                    .clone()
                    .map(|rv| (rv, conditions));
            }
            Err(e) => {
                warn!(error = %e, "could not write MachineConfiguration status");
                self.status_dirty = true;
                self.last_status_write = Some(Instant::now());
            }
        }
    }
}

fn object_ref<K: kube::Resource<DynamicType = ()>>(
    meta: &ObjectMeta,
) -> k8s_openapi::api::core::v1::ObjectReference {
    k8s_openapi::api::core::v1::ObjectReference {
        api_version: Some(K::api_version(&()).into_owned()),
        kind: Some(K::kind(&()).into_owned()),
        name: meta.name.clone(),
        namespace: meta.namespace.clone(),
        uid: meta.uid.clone(),
        ..Default::default()
    }
}

fn kind_label(resource: Resource) -> &'static str {
    match resource {
        Resource::MachineSets => "MachineSet",
        Resource::ControlPlaneMachineSets => "ControlPlaneMachineSet",
    }
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

#[allow(dead_code)]
fn _assert_lenient_is_watchable(_: ObjectRef<Lenient<MachineSet>>) {}
