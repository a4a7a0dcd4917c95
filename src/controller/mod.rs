//! The controller: watch, plan, patch, report.
//!
//! Watches feed reflector stores and a trigger channel; one loop turns triggers into passes.
//! A pass is a pipeline: [`observe`] (stores -> snapshot), decide (the pure planner,
//! `Planner::decide_all`), [`act`] (guarded JSON Patches) and [`report`] (status, Events,
//! metrics, bookkeeping). This file only wires tasks together. Only the leader writes.

pub mod config;
mod lease;
pub mod lenient;
mod node_watch;

mod act;
mod ami_lookups;
mod boot_watches;
mod events;
mod lookups;
mod observe;
mod remembered_images;
mod report;
mod retry;
mod secrets;
pub mod status;
mod template_imports;
mod templates;
mod watches;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::coordination::v1::Lease;
use kube::Client;
use kube::api::Api;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::api::{ConfigMap, MachineConfiguration};
use crate::api_client::{self, ClientError};
use crate::known_images::{self, KnownImages};
use crate::machine_kind::MachineKind;
use crate::metrics::Metrics;
use crate::plan::selection::Selected;
use crate::plan::{Action, Blocked, Decision, ObjectKey, Options, Planner, history};
use crate::reason::Reason;
use crate::server::{self, Health};
pub use config::RunArgs;
use watches::{Stores, Trigger};

/// Retries of a failing resource start here and double up to [`MAX_BACKOFF`].
const MIN_BACKOFF: Duration = Duration::from_secs(1);
const MAX_BACKOFF: Duration = Duration::from_secs(300);
/// After a failed `test` op the store is usually one watch event behind; retry soon.
const CONFLICT_RETRY: Duration = Duration::from_millis(500);
/// How often the known-images file is checked for changes.
const FILE_POLL: Duration = Duration::from_secs(10);

#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error(transparent)]
    Client(#[from] ClientError),
    #[error("cannot serve /metrics over TLS: {0}")]
    MetricsTls(#[from] server::secure::TlsError),
    /// An address, listener or the EC2 client that could not be set up, as people read it:
    /// nothing tells these apart but the message.
    #[error("{0}")]
    Setup(String),
    #[error(transparent)]
    LeaseLost(#[from] lease::LeaseLost),
    #[error("invalid leader election timings: {0}")]
    LeaseTimings(#[from] lease::TimingError),
}

/// Who decides whether this process writes.
enum Leadership {
    /// Without leader election we lead from the start. The sender must outlive the controller:
    /// a dropped sender would end its wait for leadership changes.
    Always {
        _sender: watch::Sender<bool>,
    },
    Elected(JoinHandle<Result<(), lease::LeaseLost>>),
}

/// The cluster's proxy (OLM puts it in our environment) and trusted CA bundle, for the calls to
/// EC2, vCenter and the OVA's server (docs/egress.md).
fn egress(args: &RunArgs) -> crate::http_client::Egress {
    crate::http_client::Egress::from_env(Some(args.trusted_ca_bundle.clone()))
}

/// The EC2 look-ups, unless `--ec2-lookups=false`; on AWS, their credentials checked once.
async fn ec2_lookups(
    args: &RunArgs,
    client: &kube::Client,
    stores: &Stores,
    wake: &mpsc::UnboundedSender<Trigger>,
    metrics: &Metrics,
) -> Result<Option<Arc<ami_lookups::Ec2Lookups>>, RunError> {
    if !args.ec2_lookups {
        return Ok(None);
    }
    let (endpoint, sts_endpoint) = (args.ec2_endpoint.as_deref(), args.sts_endpoint.as_deref());
    let ec2_client = crate::ec2::client::Ec2Client::new(endpoint, sts_endpoint, &egress(args))
        .map_err(|e| RunError::Setup(format!("cannot set up EC2 look-ups: {e}")))?;
    let lookups = ami_lookups::Ec2Lookups::new(
        ec2_client,
        client.clone(),
        (&args.machine_api_namespace, &args.own_namespace()),
        args.sts_session_duration,
        wake.clone(),
        metrics.clone(),
    );
    if ami_lookups::on_aws(stores.infrastructure().as_ref()) {
        lookups.check_credentials().await;
    }
    Ok(Some(lookups))
}

/// The vSphere template imports, unless `--vsphere-template-imports=false`.
fn template_imports(
    args: &RunArgs,
    client: &kube::Client,
    wake: &mpsc::UnboundedSender<Trigger>,
    metrics: &Metrics,
) -> Option<Arc<template_imports::TemplateImports>> {
    if !args.vsphere_template_imports {
        return None;
    }
    let settings = template_imports::Settings {
        endpoint: args.vcenter_endpoint.clone(),
        client: crate::vcenter::client::Limits {
            ca_file: args.vcenter_ca_file.clone(),
            egress: egress(args),
            ..Default::default()
        },
        import: crate::vcenter::import::ImportLimits {
            download_timeout: args.vsphere_import_timeout,
            import_timeout: args.vsphere_import_timeout,
            download_dir: (args.vsphere_download_dir.clone()).unwrap_or_else(std::env::temp_dir),
            mirror: crate::vcenter::ova::OvaMirror {
                base: args.vsphere_ova_mirror.clone(),
                urls: args.vsphere_ova_url.iter().cloned().collect(),
            },
            ..Default::default()
        },
        keep: args.vsphere_templates_kept,
    };
    Some(template_imports::TemplateImports::new(
        client.clone(),
        &args.machine_api_namespace,
        settings,
        wake.clone(),
        metrics.clone(),
    ))
}

/// Runs until `shutdown` is cancelled (clean exit) or the leader lease is lost (error).
pub async fn run(args: RunArgs, shutdown: CancellationToken) -> Result<(), RunError> {
    if args.leader_elect {
        lease::check_timings(
            args.leader_elect_lease_duration,
            args.leader_elect_renew_deadline,
            args.leader_elect_retry_period,
        )?;
    }
    let client = api_client::connect(&args.cluster).await?;
    let (metrics, health) = serve_endpoints(&args, &client, &shutdown).await?;

    let own_namespace = args.own_namespace();
    let (trigger_tx, trigger_rx) = mpsc::unbounded_channel();
    let stores = watches::start(&client, &args, &own_namespace, trigger_tx.clone()).await;
    let boots =
        boot_watches::BootStores::start(&client, &args.machine_api_namespace, &trigger_tx).await;
    let (leader_rx, leadership) = campaign(&client, &args, &own_namespace, &shutdown);

    if !caches_synced(&stores, &boots, &shutdown, &health, &metrics).await {
        // Stopped before the caches synced: still give back a lease we may already hold.
        return finish(leadership).await;
    }

    let patcher = act::Patcher::new(
        &client,
        &args.machine_api_namespace,
        &args.cluster_api_namespace,
    );
    let mut controller = Controller {
        schema: status::served_schema::ServedSchema::new(client.clone()),
        ec2: ec2_lookups(&args, &client, &stores, &trigger_tx, &metrics).await?,
        vcenter: template_imports(&args, &client, &trigger_tx, &metrics),
        events: events::EventPublisher::start(
            client.clone(),
            args.identity(),
            metrics.clone(),
            args.max_concurrent_patches,
        ),
        patcher,
        configurations: Api::all(client.clone()),
        known_images_api: Api::namespaced(client.clone(), &own_namespace),
        secrets: secrets::SecretWatches::new(
            client.clone(),
            &args.machine_api_namespace,
            trigger_tx.clone(),
        ),
        templates: templates::TemplateCollector::new(
            &client,
            &args.cluster_api_namespace,
            args.cluster_api_template_grace,
        ),
        cluster_api_secrets: secrets::SecretWatches::new(
            client,
            &args.cluster_api_namespace,
            trigger_tx,
        ),
        stores,
        boots,
        metrics: metrics.clone(),
        leader: leader_rx,
        shutdown,
        known_file: (args.known_images_file.clone()).map(|path| KnownImagesFile {
            path,
            ..Default::default()
        }),
        args,
        memory: Memory::default(),
        health: health.clone(),
    };
    controller.run_loop(trigger_rx).await;
    health.set_stopping();
    metrics.ready.set(0);
    finish(leadership).await
}

/// Waits until every watch of the planner's own inputs has listed its objects, then says the
/// controller is ready, and waits (a bounded time) for the Machines and Nodes, whose evidence
/// never holds readiness; false when it is stopped first.
async fn caches_synced(
    stores: &watches::Stores,
    boots: &boot_watches::BootStores,
    shutdown: &CancellationToken,
    health: &Health,
    metrics: &Metrics,
) -> bool {
    tokio::select! {
        _ = shutdown.cancelled() => return false,
        _ = stores.wait_until_ready() => {}
    }
    health.set_synced();
    metrics.ready.set(1);
    info!("caches synced; controller ready");
    tokio::select! {
        _ = shutdown.cancelled() => false,
        _ = boots.wait_until_listed() => true,
    }
}

/// Metrics and probes on their own addresses, as kubebuilder controllers do; one listener
/// serves both when the two flags name the same address (local runs and tests). Answers the
/// metrics and the health they serve.
async fn serve_endpoints(
    args: &RunArgs,
    client: &Client,
    shutdown: &CancellationToken,
) -> Result<(Metrics, Arc<Health>), RunError> {
    let metrics = Metrics::new();
    // The loop goes round at least once per resync period, even with nothing to do.
    let stall_limit = args.resync_period.saturating_mul(3) + Duration::from_secs(60);
    let health = Arc::new(Health::new(stall_limit));
    let parse = |address: &String| {
        server::parse_bind_address(address)
            .map_err(|e| RunError::Setup(format!("invalid bind address {address:?}: {e}")))
    };
    let metrics_at = parse(&args.metrics_bind_address)?;
    let probes_at = parse(&args.health_probe_bind_address)?;
    let security = server::Security::from_args(&args.metrics_server, client, shutdown)?;
    for address in BTreeSet::from_iter([metrics_at, probes_at].into_iter().flatten()) {
        let site = server::Site {
            serves_metrics: metrics_at == Some(address),
            serves_probes: probes_at == Some(address),
            metrics: metrics.clone(),
            health: health.clone(),
            security: security.clone(),
            limits: server::ConnectionLimits::default(),
        };
        (server::serve(address, site, shutdown.clone()).await)
            .map_err(|e| RunError::Setup(format!("cannot listen on {address}: {e}")))?;
    }
    Ok((metrics, health))
}

/// Starts campaigning for the lease; without leader election we lead from the start.
fn campaign(
    client: &Client,
    args: &RunArgs,
    own_namespace: &str,
    shutdown: &CancellationToken,
) -> (watch::Receiver<bool>, Leadership) {
    if !args.leader_elect {
        let (always, leader) = watch::channel(true);
        return (leader, Leadership::Always { _sender: always });
    }
    let (leader_tx, leader_rx) = watch::channel(false);
    let namespace = args
        .leader_election_namespace
        .clone()
        .unwrap_or_else(|| own_namespace.to_string());
    let config = lease::LeaseConfig {
        lease_duration: args.leader_elect_lease_duration,
        renew_deadline: args.leader_elect_renew_deadline,
        retry_period: args.leader_elect_retry_period,
        namespace: namespace.clone(),
        name: args.leader_election_id.clone(),
        identity: args.identity(),
    };
    info!(identity = %config.identity, lease = %format!("{namespace}/{}", config.name), "campaigning for leadership");
    let api: Api<Lease> = Api::namespaced(client.clone(), &namespace);
    let task = tokio::spawn(lease::run(api, config, leader_tx, shutdown.clone()));
    (leader_rx, Leadership::Elected(task))
}

/// Waits for the lease task (which releases the lease on shutdown) and reports a lost lease.
async fn finish(leadership: Leadership) -> Result<(), RunError> {
    if let Leadership::Elected(task) = leadership {
        match task.await {
            Ok(result) => result?,
            Err(e) => warn!(error = %e, "lease task ended abnormally"),
        }
    }
    info!("stopped");
    Ok(())
}

/// The `--known-images-file`, reloaded when it changes.
#[derive(Default)]
struct KnownImagesFile {
    path: PathBuf,
    /// Modification time of the content held; `None` until the first successful read.
    modified: Option<SystemTime>,
    images: KnownImages,
}

impl KnownImagesFile {
    /// Reads the file again if it changed; true when its content changed.
    fn reload(&mut self) -> bool {
        let modified = std::fs::metadata(&self.path)
            .and_then(|m| m.modified())
            .ok();
        if modified.is_some() && modified == self.modified {
            return false;
        }
        match known_images::read(&self.path) {
            Ok(fresh) => {
                self.modified = modified;
                let changed = fresh != self.images;
                if changed {
                    info!(path = %self.path.display(), images = fresh.len(), "loaded known images file");
                    self.images = fresh;
                }
                changed
            }
            Err(e) => {
                warn!(error = %e, "keeping the previous known images");
                false
            }
        }
    }
}

struct Controller {
    args: RunArgs,
    stores: Stores,
    /// Machines and Nodes, for the evidence that new boot images boot.
    boots: boot_watches::BootStores,
    secrets: secrets::SecretWatches,
    /// The bootstrap secrets of Cluster API MachineSets, in their own namespace.
    cluster_api_secrets: secrets::SecretWatches,
    /// Deletes the infrastructure templates we created once nothing uses them.
    templates: templates::TemplateCollector,
    /// EC2 look-ups of AMI owners (`--ec2-lookups`).
    ec2: Option<Arc<ami_lookups::Ec2Lookups>>,
    /// vSphere template imports (`--vsphere-template-imports`).
    vcenter: Option<Arc<template_imports::TemplateImports>>,
    events: events::EventPublisher,
    patcher: act::Patcher,
    configurations: Api<MachineConfiguration>,
    known_images_api: Api<ConfigMap>,
    metrics: Metrics,
    leader: watch::Receiver<bool>,
    shutdown: CancellationToken,
    known_file: Option<KnownImagesFile>,
    /// What it remembers from one pass to the next.
    memory: Memory,
    /// Told each time the loop goes round: /healthz fails when it stops doing so.
    health: Arc<Health>,
    /// The status fields the served MachineConfiguration schema declares.
    schema: status::served_schema::ServedSchema,
}

/// What the controller remembers of one machine resource from one pass to the next.
#[derive(Default)]
struct ObjectState {
    /// Its latest reported decision (`report::reported`: its outcome, without the operations);
    /// a pass's decisions move in without a copy.
    decision: Option<Arc<Decision>>,
    /// When to plan it again (an error's backoff, a conflict's quick retry), and the failed
    /// attempts before.
    retry: Option<(u32, Instant)>,
    /// Its patches that conflicted in a row.
    conflicts: u32,
}

/// What the controller remembers from one pass to the next.
#[derive(Default)]
struct Memory {
    objects: BTreeMap<ObjectKey, ObjectState>,
    /// Status writes that failed in a row: the next waits for a doubling backoff.
    status_failures: u32,
    /// When the backoff of a failed status write ends: a pass is woken then to write again.
    status_retry_at: Option<Instant>,
    /// Our last status write, for the writes that follow it until the watch delivers it.
    status_written: Option<status::Written>,
    /// The API server's last refusals of those fields, while they back off.
    fields_refused: Option<status::FieldsRefusal>,
    /// Whether the deprecated pause key has had its Warning Event (once per time it is set).
    legacy_pause_warned: bool,
    /// The gate that held writes in the last pass: logged when it changes, reported in status.
    last_blocked: Option<Blocked>,
    /// The effective selection of each kind in the last pass, reported in status.
    last_selections: Vec<(MachineKind, Selected)>,
    /// Since when a hold that degrades when lasting has held writes.
    hold_since: Option<Timestamp>,
    /// The hot-loop guard's memory of our own patches by object UID, for objects whose
    /// annotations a whole-object writer erases.
    remembered_patches: HashMap<String, history::HotLoopMemory>,
}

impl Memory {
    fn object(&mut self, key: &ObjectKey) -> &mut ObjectState {
        self.objects.entry(key.clone()).or_default()
    }

    /// The latest reported decision of every machine resource.
    fn decisions(&self) -> impl Iterator<Item = (&ObjectKey, &Arc<Decision>)> {
        (self.objects.iter()).filter_map(|(key, o)| Some((key, o.decision.as_ref()?)))
    }

    fn decision(&self, key: &ObjectKey) -> Option<&Decision> {
        self.objects.get(key)?.decision.as_deref()
    }
}

impl Controller {
    async fn run_loop(&mut self, mut triggers: mpsc::UnboundedReceiver<Trigger>) {
        // Whether something changed since the last pass: a pass plans everything.
        let mut replan = true;
        let period = self.args.resync_period;
        let mut resync = tokio::time::interval_at(Instant::now() + period, period);
        let mut file_poll = tokio::time::interval(FILE_POLL);
        // A pass longer than the period must not be followed by a burst of catch-up ticks.
        resync.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        file_poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            self.health.record_progress();
            if replan && *self.leader.borrow() {
                replan = false;
                let started = Instant::now();
                self.pass().await;
                self.metrics
                    .reconcile_duration
                    .with_label_values(&["all"])
                    .observe(started.elapsed().as_secs_f64());
            }
            self.metrics.leader.set(i64::from(*self.leader.borrow()));
            tokio::select! {
                _ = self.shutdown.cancelled() => return,
                received = triggers.recv() => match received {
                    Some(Trigger) => replan = true,
                    None => return,
                },
                _ = resync.tick() => {
                    debug!("periodic resync");
                    replan = true;
                }
                _ = file_poll.tick() => {
                    replan |= self.known_file.as_mut().is_some_and(KnownImagesFile::reload);
                }
                _ = sleep_until(self.next_wake()) => {
                    // A retry, the template collection, a status write's retry or a hold's limit
                    // is due: everything is planned again. The latter two are cleared here, as a
                    // pass need not reset them (a follower runs none).
                    let now = Instant::now();
                    self.templates.due.take_if(|at| *at <= now);
                    self.memory.status_retry_at.take_if(|at| *at <= now);
                    replan = true;
                }
                changed = self.leader.changed() => {
                    if changed.is_err() {
                        return;
                    }
                    if *self.leader.borrow() {
                        info!("leading: planning everything");
                        replan = true;
                    } else {
                        warn!("no longer leading: stopped writing");
                    }
                }
            }
            // Leading edge: act on a trigger at once (no debounce delays the first patch of a
            // rollout), taking along every trigger already queued. Triggers that arrive during a
            // pass (a rollout's own watch echoes, one per patched object) queue up meanwhile and
            // are handled together by the next pass.
            while let Ok(Trigger) = triggers.try_recv() {
                replan = true;
            }
        }
    }

    /// The next retry (of an object or of a failed status write), hold limit or template
    /// collection, whichever is due first.
    fn next_wake(&self) -> Option<Instant> {
        let next_retry = (self.memory.objects.values())
            .filter_map(|o| Some(o.retry?.1))
            .min();
        let hold_limit = self.held().filter(|h| !h.exceeded()).map(|h| {
            let left = (h.limit - h.duration).unsigned_abs();
            Instant::now() + left
        });
        let status_retry = self.memory.status_retry_at;
        [next_retry, status_retry, hold_limit, self.templates.due]
            .into_iter()
            .flatten()
            .min()
    }

    /// One pass of the pipeline over every machine resource.
    async fn pass(&mut self) {
        let started = Instant::now();
        let (mut observed, options) = self.observe().await;
        let planner = Planner::new(&observed.snapshot, &options);
        let mut decisions = planner.decide_all(&observed.machines);
        let facts = report::PassFacts::of(&planner);
        // Only the leader imports, and not while a gate holds writes.
        let leading = *self.leader.borrow() && facts.blocked.is_none();
        let imports = self.vcenter.as_ref().filter(|_| leading);
        ask_clouds(self.ec2.as_ref(), imports, &decisions, &observed);
        // A patch the API server refused waits for its retry even when a pass covers everything.
        let now = Instant::now();
        let ours = (self.patcher).recorded_copies(templates::recorded(&observed.machines));
        let moved_to = decisions
            .iter()
            .filter_map(|d| d.infrastructure_template.as_ref());
        let collectable = self.templates.candidates(
            &observed.snapshot.infrastructure_templates,
            &observed.machines,
            moved_to.map(|copy| copy.to.as_str()),
            &ours,
            options.now,
        );
        drop(planner);
        let sources = status::StatusSources::take(&mut observed.snapshot, facts.golden.clone());
        drop(observed);
        // Progressing=True goes before the first patch (a status write, a few milliseconds), and
        // the result after the last one has returned (`report`).
        self.announce_rollout(&sources, &facts, &decisions, now)
            .await;
        let may_write = || self.may_write();
        let deferred = |d: &Decision| self.deferred(d, now);
        let concurrency = self.args.max_concurrent_patches;
        let outcomes = act::act(
            &self.patcher,
            &mut decisions,
            concurrency,
            &may_write,
            &deferred,
        )
        .await;
        self.memory.remembered_patches = options.remembered_patches;
        // Deleting is a write too: only while nothing holds writes.
        if facts.blocked.is_none() && self.may_write() {
            self.templates.collect(collectable.unused).await;
        }
        self.remember_patches(&decisions, &outcomes, options.now, options.hot_loop_window);
        let sent = (outcomes.iter())
            .filter(|o| **o != act::Outcome::NothingToSend)
            .count();
        let planned = decisions.len();
        let applied = (decisions.into_iter().zip(outcomes)).map(|(decision, outcome)| {
            let decision = Arc::new(decision);
            act::Applied { decision, outcome }
        });
        self.report(facts, applied, &sources).await;
        let ms = started.elapsed().as_secs_f64() * 1e3;
        debug!(planned, sent, ms, "pass finished");
    }

    /// Step 1: the stores as one snapshot, with the known images and every answer EC2 and
    /// vCenter gave so far, and the options the pass decides with.
    async fn observe(&mut self) -> (observe::Observation, Options) {
        if let Some(file) = self.known_file.as_mut().filter(|f| f.modified.is_none()) {
            file.reload();
        }
        let mut known = (self.args.published_images)
            .then(known_images::published)
            .unwrap_or_default();
        if let Some(file) = &self.known_file {
            known.extend(file.images.iter().cloned());
        }
        let mut observed = observe::observe(
            &self.stores,
            &self.boots,
            &mut self.secrets,
            &mut self.cluster_api_secrets,
            known,
        )
        .await;
        let options = Options {
            control_plane_arch: self.args.control_plane_arch,
            now: Timestamp::now(),
            hot_loop_threshold: self.args.hot_loop_threshold,
            hot_loop_window: SignedDuration::try_from(self.args.hot_loop_window)
                .unwrap_or(SignedDuration::from_hours(1)),
            remembered_patches: std::mem::take(&mut self.memory.remembered_patches),
            report_only: self.args.report_only,
            update_machine_deployments: self.args.update_machine_deployments,
            node_join_limit: SignedDuration::try_from(self.args.node_join_timeout)
                .unwrap_or(SignedDuration::from_mins(20)),
            revert_failed_boot_images: self.args.revert_failed_boot_images,
        };
        if let Some(lookups) = &self.ec2 {
            observed.snapshot.ec2 = lookups.facts();
        }
        // Only the leader imports: a follower's vSphere decisions say what they would import.
        if let Some(imports) = self.vcenter.as_ref().filter(|_| *self.leader.borrow()) {
            observed.snapshot.vcenter = imports.facts();
        }
        (observed, options)
    }

    fn may_write(&self) -> bool {
        !self.shutdown.is_cancelled() && *self.leader.borrow() && !self.stores.paused()
    }

    /// Whether the patch of `d` waits: for the retry of an earlier one the API server refused,
    /// or for the retry after a conflict. Every pass plans everything, so without the latter a
    /// writer that keeps changing the object would meet a patch from every pass, each one behind
    /// the writer's latest version: a hot loop against the API server.
    fn deferred(&self, d: &Decision, now: Instant) -> bool {
        let Some(object) = self.memory.objects.get(&d.key()) else {
            return false;
        };
        // A refused patch is reported as PatchFailed, its retry scheduled as the error's.
        let refused = (object.decision.as_ref()).is_some_and(|d| d.reason == Reason::PatchFailed);
        let waiting = object.retry.is_some_and(|(_, due)| due > now);
        waiting && (refused || object.conflicts > 0)
    }

    /// Before a pass sends updates: the status write that says they are under way
    /// (Progressing=True), if it changes anything. The results stay as they were until `report`:
    /// it compares each decision with the previous one to tell new errors and warnings.
    async fn announce_rollout(
        &mut self,
        sources: &status::StatusSources,
        facts: &report::PassFacts,
        decisions: &[Decision],
        now: Instant,
    ) {
        if facts.blocked.is_some() || !self.may_write() {
            return;
        }
        let rolling = |d: &&Decision| {
            d.action == Action::Update && !d.patch.0.is_empty() && !self.deferred(d, now)
        };
        if !decisions.iter().any(|d| rolling(&d)) {
            return;
        }
        // The pass's other decisions are final whatever the patches do: its errors are reported
        // from this first write on, not a second later.
        let pending: BTreeMap<ObjectKey, &Decision> = (decisions.iter())
            .filter(|d| d.action != Action::Update || rolling(d))
            .map(|d| (d.key(), d))
            .collect();
        self.adopt_gates(None, facts.selections.clone(), sources.mc.as_ref());
        self.write_status(sources, &pending).await;
    }

    /// Keeps the hot-loop guard's own memory of this pass's updates (see
    /// [`Options::remembered_patches`]), forgetting what left the window.
    fn remember_patches(
        &mut self,
        decisions: &[Decision],
        outcomes: &[act::Outcome],
        now: Timestamp,
        window: SignedDuration,
    ) {
        let memory = &mut self.memory.remembered_patches;
        for (d, outcome) in decisions.iter().zip(outcomes) {
            let Some(uid) = &d.uid else {
                continue;
            };
            // Opting out resets the guard (docs/runbooks/BootImageHotLoop.md): this memory as
            // well as the annotation, which a whole-object writer has already erased.
            if d.reason == Reason::OptedOut {
                memory.remove(uid);
            } else if d.action == Action::Update && *outcome == act::Outcome::Patched {
                let remembered = history::remember_patch(memory.remove(uid), now, window);
                memory.insert(uid.clone(), remembered);
            }
        }
        memory.retain(|_, m| m.patches.iter().any(|t| now.duration_since(*t) < window));
    }
}

/// After `decide`: hands the look-ups what the pass's decisions asked (`Decision::asks`), and
/// they start jobs for what has no fresh answer; the answers trigger the next pass. `imports`
/// only on the leader while no gate holds writes.
fn ask_clouds(
    ec2: Option<&Arc<ami_lookups::Ec2Lookups>>,
    imports: Option<&Arc<template_imports::TemplateImports>>,
    decisions: &[Decision],
    observed: &observe::Observation,
) {
    let asks = || decisions.iter().filter_map(|d| d.asks.as_ref());
    if let Some(ec2) = ec2 {
        let amis = asks().filter_map(|ask| match ask {
            crate::facts::Lookup::Ami { region, image_id } => {
                Some((region.clone(), image_id.clone()))
            }
            crate::facts::Lookup::Template(_) => None,
        });
        ec2.ask(&amis.collect());
    }
    if let Some(imports) = imports {
        let templates = asks().filter_map(|ask| match ask {
            crate::facts::Lookup::Template(request) => Some((**request).clone()),
            crate::facts::Lookup::Ami { .. } => None,
        });
        imports.ask(&templates.collect(), &template_imports::in_use(observed));
    }
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}
