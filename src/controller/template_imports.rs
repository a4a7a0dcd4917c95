//! Imports the golden release's vSphere templates into vCenter, in the background: a pass takes
//! what is known already (template there, import under way or failed, vCenter unavailable),
//! never waits for vCenter, and the next pass is triggered when an import ends or advances.
//!
//! Credentials are the machine API's (`vcenter::credentials`). Imports run one at a time (each
//! moves a gigabyte-sized OVA), each bounded by the import limits; a failed one is retried after
//! 30 s, doubling up to 30 min, a vCenter that cannot be asked after 30 s, doubling up to 1 min.
//! Only the leader's passes ask, so two replicas do not import at once; if they ever do,
//! vCenter's unique names keep it to one template (`vcenter::import`).

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use kube::Api;
use parking_lot::Mutex;
use tokio::sync::mpsc;
use tracing::{info, warn};

use super::lookups::{self, Jobs};
use super::observe::Observation;
use super::watches::Trigger;
use crate::api::Secret;
use crate::api_client::SECRET_TIMEOUT;
use crate::facts::vcenter::{
    TemplateKey, TemplateRequest, TemplateState, TemplateVersion, VcenterFacts,
};
use crate::machine_kind::MachineObject;
use crate::metrics::Metrics;
use crate::reason::Reason;
use crate::vcenter::VcenterError;
use crate::vcenter::client::{Limits, VcenterClient, sdk_url};
use crate::vcenter::credentials::{self, SECRET_NAME};
use crate::vcenter::import::{Ensured, ImportLimits, ensure_template};
use crate::vcenter::retention;
use crate::vcenter::version::template_version;

/// A failed import is retried after this, doubled per failure up to the maximum.
const FIRST_RETRY: Duration = Duration::from_secs(30);
const MAX_RETRY: Duration = Duration::from_secs(30 * 60);
/// A vCenter that cannot be asked is asked again sooner: nothing of it moves until it answers.
const UNAVAILABLE_MAX_RETRY: Duration = Duration::from_secs(60);
/// Another importer's temporary VM is looked at again this often.
const BUSY_RETRY: Duration = Duration::from_secs(30);
/// A template found or imported is looked for again after this long (someone may delete it).
const READY_MAX_AGE: Duration = Duration::from_secs(3600);
/// A whole import job may take its download and import timeouts and this much more.
const WHOLE_JOB_SLACK: Duration = Duration::from_secs(300);
/// Progress of an import wakes a pass when it moved by this many percent.
const PROGRESS_STEP: u8 = 10;

/// How the controller reaches vCenter and imports (from the `run` flags).
pub(super) struct Settings {
    /// `--vcenter-endpoint`: every server's SDK (a simulator, a proxy).
    pub endpoint: Option<String>,
    /// Calls to vCenter, and the CA it trusts besides the system's (`--vcenter-ca-file`).
    pub client: Limits,
    pub import: ImportLimits,
    /// `--vsphere-templates-kept`: old templates of ours kept per failure domain.
    pub keep: usize,
}

/// The controller's vCenter imports (none unless the cluster is on vSphere).
pub(super) struct TemplateImports {
    secrets: Api<Secret>,
    settings: Settings,
    wake: mpsc::UnboundedSender<Trigger>,
    metrics: Metrics,
    state: Mutex<State>,
}

struct State {
    /// The golden templates wanted, and since when each is in its state.
    templates: HashMap<TemplateKey, (TemplateState, Instant)>,
    /// The releases of the templates MachineSets clone now, and when they were read.
    versions: HashMap<TemplateKey, (TemplateVersion, Instant)>,
    /// Templates whose release is being read.
    reading: Jobs<TemplateKey>,
    /// Servers that could not be asked, with why and when to try again.
    unavailable: Jobs<String>,
    /// The import under way (one at a time), and failures in a row: the backoff doubles with
    /// each.
    imports: Jobs<TemplateKey>,
}

impl Default for State {
    fn default() -> Self {
        // Templates are few (one per failure domain and release), and vCenters fewer: reading
        // needs no bound. One import runs at a time (each moves a gigabyte-sized OVA); the next
        // starts in the pass the end of the last one triggers.
        State {
            templates: HashMap::new(),
            versions: HashMap::new(),
            reading: Jobs::new(usize::MAX, FIRST_RETRY, MAX_RETRY),
            unavailable: Jobs::new(usize::MAX, FIRST_RETRY, UNAVAILABLE_MAX_RETRY),
            imports: Jobs::new(1, FIRST_RETRY, MAX_RETRY),
        }
    }
}

/// What a pass asks of vCenter in the background.
#[derive(Debug)]
enum Job {
    /// Read the release of the request's current template.
    Version(TemplateRequest),
    /// Find or import the request's golden template.
    Import(TemplateRequest),
}

impl TemplateImports {
    pub fn new(
        client: kube::Client,
        namespace: &str,
        settings: Settings,
        wake: mpsc::UnboundedSender<Trigger>,
        metrics: Metrics,
    ) -> Arc<Self> {
        Arc::new(TemplateImports {
            secrets: Api::namespaced(client, namespace),
            settings,
            wake,
            metrics,
            state: Mutex::new(State::default()),
        })
    }

    /// Everything vCenter has said, for the pass's snapshot.
    pub fn facts(&self) -> VcenterFacts {
        self.state.lock().facts()
    }

    /// Starts the look-ups and imports the pass's decisions asked for that are due. `in_use`:
    /// the templates machine resources clone now, which no clean-up may destroy.
    pub fn ask(self: &Arc<Self>, wanted: &BTreeSet<TemplateRequest>, in_use: &BTreeSet<String>) {
        let jobs = self.state.lock().ask(wanted, Instant::now());
        for job in jobs {
            let (this, in_use) = (Arc::clone(self), in_use.clone());
            lookups::spawn(&self.wake, async move {
                match job {
                    Job::Version(request) => this.read_version(request).await,
                    Job::Import(request) => this.run(request, in_use).await,
                }
            });
        }
    }
}

impl State {
    /// Every template found, imported, importing or failed, every release read, every vCenter
    /// that cannot be asked. A release read stays known while its vCenter cannot be asked again.
    fn facts(&self) -> VcenterFacts {
        let templates =
            (self.templates.iter()).map(|(key, (state, _))| (key.clone(), state.clone()));
        let versions =
            (self.versions.iter()).map(|(key, (version, _))| (key.clone(), version.clone()));
        let unavailable = (self.unavailable.failures.iter())
            .map(|(server, failure)| (server.clone(), failure.message.clone()));
        VcenterFacts {
            consulted: true,
            templates: templates.collect(),
            versions: versions.collect(),
            unavailable: unavailable.collect(),
        }
    }

    /// The look-ups and imports to start for `wanted` at `now` (marked under way). Pure: no I/O,
    /// so the retry policy is unit-tested.
    ///
    /// A golden template is imported only once the release of the template a MachineSet clones
    /// now is known and is not the golden one: a fresh cluster, on the installer's templates of
    /// the golden release, imports nothing.
    fn ask(&mut self, wanted: &BTreeSet<TemplateRequest>, now: Instant) -> Vec<Job> {
        let mut jobs = Vec::new();
        for request in wanted {
            let key = &request.key;
            let unavailable = self.unavailable.failures.get(&key.server);
            if unavailable.is_some_and(|failure| failure.retry_at > now)
                || !self.current_needs_import(request, now, &mut jobs)
            {
                continue;
            }
            let (ready, due) = match self.templates.get(key) {
                Some((TemplateState::Ready, at)) => {
                    (true, now.duration_since(*at) >= READY_MAX_AGE)
                }
                // Ours is in flight, which `start` checks; another importer's is looked at again.
                Some((TemplateState::Importing { .. }, at)) => {
                    (false, now.duration_since(*at) >= BUSY_RETRY)
                }
                // Due when its backoff is over, which `start` checks.
                Some((TemplateState::Failed { .. }, _)) | None => (false, true),
            };
            if due && self.imports.start(key, now) {
                // A template that was there stays usable while it is looked for again.
                if !ready {
                    self.templates
                        .insert(key.clone(), (TemplateState::Importing { percent: 0 }, now));
                }
                jobs.push(Job::Import(request.clone()));
            }
        }
        // Requests that disappear (a MachineSet moved or opted out) are not forgotten: a
        // template found stays found, and a failure keeps its backoff.
        jobs
    }

    /// Whether the release of the template `request`'s MachineSet clones now is known and not
    /// the golden one, so that the golden template is wanted; reads it (again, hourly) when
    /// due. A MachineSet already on the golden template needs no look-up.
    fn current_needs_import(
        &mut self,
        request: &TemplateRequest,
        now: Instant,
        jobs: &mut Vec<Job>,
    ) -> bool {
        let current = &request.current;
        if current.name == request.key.name {
            return true;
        }
        let known = self.versions.get(current);
        let due = known.is_none_or(|(_, at)| now.duration_since(*at) >= READY_MAX_AGE);
        if due && self.reading.start(current, now) {
            jobs.push(Job::Version(request.clone()));
        }
        let Some((version, _)) = known else {
            return false;
        };
        !matches!(version, TemplateVersion::Release(r) if *r == request.ova.release)
    }

    fn failed(&mut self, key: &TemplateKey, e: &VcenterError, now: Instant) -> Duration {
        let reason = match e {
            VcenterError::OvaUnreachable { .. } => Reason::OvaUnreachable,
            _ => Reason::TemplateImportFailed,
        };
        let failed = TemplateState::Failed {
            reason,
            message: e.to_string(),
        };
        self.templates.insert(key.clone(), (failed, now));
        self.imports.failed(key, e.to_string(), now).0
    }
}

impl TemplateImports {
    /// Finds or imports `request`'s golden template; how long until a pass should ask again.
    async fn run(&self, request: TemplateRequest, in_use: BTreeSet<String>) -> Option<Duration> {
        let key = request.key.clone();
        let outcome = self.import(&request, &in_use).await;
        self.metrics.vsphere_import_progress.set(0);
        let now = Instant::now();
        let mut state = self.state.lock();
        match outcome {
            Ok(ensured) => {
                state.unavailable.succeeded(&key.server);
                state.imports.succeeded(&key);
                state
                    .templates
                    .insert(key.clone(), (TemplateState::Ready, now));
                self.count(if ensured == Ensured::Imported {
                    "imported"
                } else {
                    "found"
                });
                None
            }
            Err(VcenterError::ImportInProgress(vm)) => {
                info!(template = %key.name, vm, "another import of this template is under way");
                state.imports.ended(&key);
                state
                    .templates
                    .insert(key.clone(), (TemplateState::Importing { percent: 0 }, now));
                self.count("in_progress");
                Some(BUSY_RETRY)
            }
            Err(e) if e.is_unavailable() => {
                state.imports.ended(&key);
                state.templates.remove(&key);
                self.unavailable(&mut state, &key.server, &e, now)
            }
            Err(e) => {
                warn!(template = %key.name, error = %e, "importing the golden template failed");
                let result = match e {
                    VcenterError::DigestMismatch { .. } => "digest_mismatch",
                    VcenterError::OvaUnreachable { .. } => "ova_unreachable",
                    _ => "failed",
                };
                self.count(result);
                Some(state.failed(&key, &e, now))
            }
        }
    }

    /// Reads the release of `request`'s current template, for the pass its end triggers to
    /// decide on; how long until a pass should ask again, when vCenter could not be asked.
    async fn read_version(&self, request: TemplateRequest) -> Option<Duration> {
        let current = request.current.clone();
        let outcome = match self.login(&current.server).await {
            Ok(client) => {
                let version = template_version(&client, &request).await;
                client.logout().await;
                version
            }
            Err(e) => Err(e),
        };
        let now = Instant::now();
        let mut state = self.state.lock();
        state.reading.ended(&current);
        let version = match outcome {
            Ok(version) => version,
            Err(e) if e.is_unavailable() => {
                return self.unavailable(&mut state, &current.server, &e, now);
            }
            // Not knowing is not a reason to stay behind: the golden template is imported.
            Err(e) => TemplateVersion::Unknown(format!(
                "vCenter could not say which release template {} is: {e}",
                current.name
            )),
        };
        info!(template = %current.name, server = %current.server, ?version, "read the release of a template in use");
        state.unavailable.succeeded(&current.server);
        state.versions.insert(current, (version, now));
        None
    }

    /// vCenter `server` could not be asked (`e`): it is reported unavailable until a pass asks
    /// again, after the returned delay.
    fn unavailable(
        &self,
        state: &mut State,
        server: &str,
        e: &VcenterError,
        now: Instant,
    ) -> Option<Duration> {
        warn!(server, error = %e, "vCenter cannot be asked about templates");
        self.count("unavailable");
        let (delay, _) = (state.unavailable).failed(&server.into(), e.to_string(), now);
        Some(delay)
    }

    /// A session with the vCenter `server`, with the machine API's credentials.
    async fn login(&self, server: &str) -> Result<VcenterClient, VcenterError> {
        let secret = tokio::time::timeout(SECRET_TIMEOUT, self.secrets.get_opt(SECRET_NAME))
            .await
            .map_err(|_| VcenterError::TimedOut(SECRET_TIMEOUT))?
            .map_err(|e| VcenterError::Credentials {
                server: server.to_string(),
                why: format!("cannot read Secret {SECRET_NAME}: {e}"),
            })?
            .ok_or_else(|| VcenterError::Credentials {
                server: server.to_string(),
                why: format!("no Secret {SECRET_NAME} in the machine API's namespace"),
            })?;
        let credentials = credentials::for_server(&secret, server)?;
        let settings = &self.settings;
        let sdk = sdk_url(settings.endpoint.as_deref().unwrap_or(server))?;
        VcenterClient::login(sdk, &credentials, settings.client.clone()).await
    }

    async fn import(
        &self,
        request: &TemplateRequest,
        in_use: &BTreeSet<String>,
    ) -> Result<Ensured, VcenterError> {
        let settings = &self.settings;
        let client = self.login(&request.key.server).await?;
        // A pass is woken each time the import moved by a step, to show it in the status.
        let progress = |percent: u8| {
            self.metrics.vsphere_import_progress.set(i64::from(percent));
            if let Some((TemplateState::Importing { percent: before }, _)) =
                self.state.lock().templates.get_mut(&request.key)
                && (percent >= before.saturating_add(PROGRESS_STEP)
                    || (percent == 100 && *before < 100))
            {
                *before = percent;
                let _ = self.wake.send(Trigger);
            }
        };
        // Each step is bounded on its own; this bounds what is left (looking for the template,
        // removing a stale temporary VM, the clean-up), so a stuck vCenter task cannot hold the
        // one import slot for ever.
        let limits = &settings.import;
        let bound = limits.download_timeout + limits.import_timeout + WHOLE_JOB_SLACK;
        let ensured = ensure_template(&client, request, limits, &progress);
        let outcome = (tokio::time::timeout(bound, ensured).await)
            .unwrap_or_else(|_| Err(VcenterError::Import(format!("not done within {bound:?}"))));
        if outcome.is_ok() {
            // Best effort: a template left over is only disk space, never a failed import.
            if let Err(e) = retention::prune(&client, request, in_use, settings.keep).await {
                warn!(template = %request.key.name, error = %e, "could not remove old templates");
            }
        }
        client.logout().await;
        outcome
    }

    fn count(&self, result: &str) {
        self.metrics
            .vsphere_imports
            .with_label_values(&[result])
            .inc();
    }
}

/// The templates (names, without a folder) every machine resource of a pass clones.
pub(super) fn in_use(observed: &Observation) -> BTreeSet<String> {
    (observed.machines.iter())
        .filter_map(|m| template_of(m.readable()?))
        .collect()
}

fn template_of(object: &dyn MachineObject) -> Option<String> {
    let spec = object.provider_spec()?.value.as_ref()?;
    let template = spec.pointer("/template")?.as_str()?;
    Some(template.rsplit('/').next().unwrap_or(template).to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::MachineSet;
    use crate::facts::Lookup;
    use crate::facts::vcenter::FailureDomain;
    use crate::golden_stream::VmwareOva;
    use crate::names::MACHINE_API_NAMESPACE;
    use crate::plan::{Options, Planner};
    use crate::testkit::snapshot::{ClusterChanges, cluster_snapshot};
    use crate::testkit::{objects, provider_specs, streams};
    use serde_json::{Value, json};

    /// The decisions that ask for a template are those of the MachineSets the planner judges:
    /// not an opted-out one's, nor an unselected one's.
    #[test]
    fn only_the_machine_sets_the_planner_judges_ask_for_a_template() {
        let ns = MACHINE_API_NAMESPACE;
        let cluster = |selection: Value| {
            let stream = streams::stream_421_all_platforms().to_string();
            (cluster_snapshot("VSphere", "4.21.0", &stream))
                .stub_secret(ns, "worker-user-data-managed", "3.2.0")
                .managed_boot_images(selection)
                .build()
                .on_vsphere()
        };
        // One failure domain, so one golden template: a pass asks for it once or not at all.
        let machine_set = |pool: &str, opted_out: bool| {
            let installer = format!("{}-rhcos-us-east-1a", provider_specs::INFRASTRUCTURE_NAME);
            let mut ms = objects::machine_set(ns, &format!("{pool}-{opted_out}"))
                .provider_spec(provider_specs::vsphere(&installer))
                .label("pool", pool);
            if opted_out {
                ms = ms.opted_out();
            }
            serde_json::from_value(ms.build()).unwrap()
        };
        let asks = |selection: Value, machine_set: MachineSet| {
            let snapshot = cluster(selection);
            let options = Options::default();
            let decided = Planner::new(&snapshot, &options).decide_object(&machine_set);
            matches!(decided.asks, Some(Lookup::Template(_)))
        };
        let all = || objects::selection("All", None);
        let blue = || objects::selection("Partial", Some(json!({"matchLabels": {"pool": "blue"}})));
        assert!(asks(all(), machine_set("blue", false)));
        assert!(!asks(all(), machine_set("blue", true)), "opted out");
        assert!(asks(blue(), machine_set("blue", false)), "selected");
        assert!(!asks(blue(), machine_set("green", false)), "not selected");
    }

    fn in_vc(name: &str) -> TemplateKey {
        TemplateKey {
            server: "vc".into(),
            datacenter: "dc".into(),
            name: name.into(),
        }
    }

    /// The golden template `name` of release 1, for a MachineSet already on it (no release to
    /// read first).
    fn request(name: &str) -> TemplateRequest {
        TemplateRequest {
            key: in_vc(name),
            current: in_vc(name),
            failure_domain: FailureDomain::default(),
            folder: "/dc/vm".into(),
            ova: VmwareOva {
                release: "1".into(),
                location: "https://x/y.ova".into(),
                sha256: "0".repeat(64),
            },
        }
    }

    /// What a pass sees (the answers in before it decides), then what its decisions start.
    fn answer(
        state: &mut State,
        wanted: &BTreeSet<TemplateRequest>,
        now: Instant,
    ) -> (VcenterFacts, Vec<Job>) {
        let facts = state.facts();
        (facts, state.ask(wanted, now))
    }

    fn imports(jobs: &[Job]) -> usize {
        jobs.iter().filter(|j| matches!(j, Job::Import(_))).count()
    }

    /// A fresh cluster: the MachineSet's installer template is read first, and being at the
    /// golden release, nothing is imported; another release is replaced by an import.
    #[test]
    fn the_golden_template_is_imported_only_for_a_template_of_another_release() {
        let mut state = State::default();
        let now = Instant::now();
        let fresh = TemplateRequest {
            current: in_vc("installer"),
            ..request("golden")
        };
        let wanted: BTreeSet<_> = [fresh.clone()].into();
        let (facts, jobs) = answer(&mut state, &wanted, now);
        assert!(matches!(jobs.as_slice(), [Job::Version(r)] if r.current == fresh.current));
        assert_eq!(facts.versions.get(&fresh.current), None);
        let (_, jobs) = answer(&mut state, &wanted, now);
        assert!(jobs.is_empty(), "read twice: {jobs:?}");

        state.reading.ended(&fresh.current);
        let current = TemplateVersion::Release("1".into());
        state
            .versions
            .insert(fresh.current.clone(), (current.clone(), now));
        let (facts, jobs) = answer(&mut state, &wanted, now);
        assert!(jobs.is_empty(), "{jobs:?}");
        assert_eq!(facts.versions.get(&fresh.current), Some(&current));
        assert_eq!(facts.templates.get(&fresh.key), None);

        for other in [
            TemplateVersion::Release("0".into()),
            TemplateVersion::Unknown("no such template".into()),
        ] {
            let mut state = State::default();
            state.versions.insert(fresh.current.clone(), (other, now));
            let (_, jobs) = answer(&mut state, &wanted, now);
            assert_eq!(imports(&jobs), 1, "{jobs:?}");
        }
        // Read again hourly, the release known meanwhile still deciding.
        let (_, jobs) = answer(&mut state, &wanted, now + READY_MAX_AGE);
        assert!(matches!(jobs.as_slice(), [Job::Version(_)]), "{jobs:?}");
        // Known, it stays known while vCenter cannot be asked: the MachineSet stays current.
        (state.unavailable).failed(&"vc".into(), "connection refused".into(), now);
        let (facts, jobs) = answer(&mut state, &wanted, now);
        assert!(jobs.is_empty(), "{jobs:?}");
        assert_eq!(facts.versions.get(&fresh.current), Some(&current));
    }

    fn wanted(names: &[&str]) -> BTreeSet<TemplateRequest> {
        names.iter().map(|n| request(n)).collect()
    }

    #[test]
    fn an_unknown_template_is_imported_once_and_reported_under_way() {
        let mut state = State::default();
        let now = Instant::now();
        let (facts, jobs) = answer(&mut state, &wanted(&["t1"]), now);
        assert_eq!(imports(&jobs), 1);
        assert!(facts.consulted);
        assert_eq!(facts.templates.get(&request("t1").key), None);
        let (facts, jobs) = answer(&mut state, &wanted(&["t1"]), now);
        assert!(jobs.is_empty(), "imported twice");
        assert_eq!(
            facts.templates.get(&request("t1").key),
            Some(&TemplateState::Importing { percent: 0 })
        );
    }

    /// A second template waits, pending, for the pass the end of the first import triggers.
    #[test]
    fn imports_run_one_at_a_time() {
        let mut state = State::default();
        let now = Instant::now();
        let both = wanted(&["t1", "t2"]);
        let (_, jobs) = answer(&mut state, &both, now);
        assert!(
            matches!(jobs.as_slice(), [Job::Import(r)] if r.key.name == "t1"),
            "{jobs:?}"
        );
        let (facts, jobs) = answer(&mut state, &both, now);
        assert!(jobs.is_empty(), "{jobs:?}");
        assert_eq!(facts.templates.get(&request("t2").key), None);
        state.imports.succeeded(&request("t1").key);
        let (_, jobs) = answer(&mut state, &both, now);
        assert!(
            matches!(jobs.as_slice(), [Job::Import(r)] if r.key.name == "t2"),
            "{jobs:?}"
        );
    }

    /// Another importer's temporary VM (`run` on `ImportInProgress`): reported under way, and
    /// looked at again after `BUSY_RETRY` rather than never.
    #[test]
    fn another_importers_template_is_looked_at_again() {
        let mut state = State::default();
        let now = Instant::now();
        let key = request("t1").key;
        let (_, jobs) = answer(&mut state, &wanted(&["t1"]), now);
        assert_eq!(imports(&jobs), 1);
        let (_, jobs) = answer(&mut state, &wanted(&["t1"]), now + BUSY_RETRY);
        assert!(jobs.is_empty(), "ours is still in flight: {jobs:?}");
        state.imports.ended(&key);
        let busy = (TemplateState::Importing { percent: 0 }, now);
        state.templates.insert(key.clone(), busy);
        let (facts, jobs) = answer(&mut state, &wanted(&["t1"]), now);
        assert!(jobs.is_empty(), "{jobs:?}");
        assert_eq!(
            facts.templates.get(&key),
            Some(&TemplateState::Importing { percent: 0 })
        );
        let (_, jobs) = answer(&mut state, &wanted(&["t1"]), now + BUSY_RETRY);
        assert_eq!(imports(&jobs), 1, "{jobs:?}");
    }

    #[test]
    fn a_failed_import_waits_for_its_backoff_which_doubles() {
        let mut state = State::default();
        let now = Instant::now();
        let key = request("t1").key;
        let mismatch = VcenterError::DigestMismatch {
            url: "https://x/y.ova".into(),
            expected: "0".repeat(64),
            actual: "1".repeat(64),
        };
        assert_eq!(state.failed(&key, &mismatch, now), FIRST_RETRY);
        let (facts, jobs) = answer(&mut state, &wanted(&["t1"]), now);
        assert!(jobs.is_empty());
        assert!(
            matches!(facts.templates.get(&key), Some(TemplateState::Failed { message, .. }) if message.contains("sha256"))
        );
        let (facts, jobs) = answer(&mut state, &wanted(&["t1"]), now + FIRST_RETRY);
        assert_eq!(jobs.len(), 1);
        // Reported as failed until the retry itself reports.
        assert!(matches!(
            facts.templates.get(&key),
            Some(TemplateState::Failed { .. })
        ));
        state.imports.ended(&key);
        let unreachable = VcenterError::OvaUnreachable {
            url: "https://x/y.ova".into(),
            mirrored: false,
            message: "connection refused".into(),
        };
        assert_eq!(state.failed(&key, &unreachable, now), FIRST_RETRY * 2);
        let (facts, _) = answer(&mut state, &wanted(&["t1"]), now);
        assert!(matches!(
            facts.templates.get(&key),
            Some(TemplateState::Failed { reason: Reason::OvaUnreachable, message })
                if message.contains("--vsphere-ova-mirror")
        ));
    }

    #[test]
    fn an_unavailable_vcenter_is_reported_until_its_retry() {
        let mut state = State::default();
        let now = Instant::now();
        (state.unavailable).failed(&"vc".into(), "connection refused".into(), now);
        let (facts, jobs) = answer(&mut state, &wanted(&["t1"]), now);
        assert!(jobs.is_empty());
        assert_eq!(
            facts.unavailable.get("vc").map(String::as_str),
            Some("connection refused")
        );
        let (_, jobs) = answer(&mut state, &wanted(&["t1"]), now + FIRST_RETRY);
        assert_eq!(jobs.len(), 1);
    }

    /// The documented retry of a vCenter that cannot be asked: 30 s, doubling to 1 min.
    #[test]
    fn an_unavailable_vcenter_is_asked_again_after_30_s_doubling_to_1_min() {
        let mut state = State::default();
        let now = Instant::now();
        let delays: Vec<Duration> = (0..3)
            .map(|_| {
                (state.unavailable)
                    .failed(&"vc".into(), "refused".into(), now)
                    .0
            })
            .collect();
        let secs = |s| Duration::from_secs(s);
        assert_eq!(delays, [secs(30), secs(60), secs(60)]);
    }

    #[test]
    fn a_template_found_is_ready_and_looked_for_again_hourly() {
        let mut state = State::default();
        let now = Instant::now();
        let key = request("t1").key;
        state
            .templates
            .insert(key.clone(), (TemplateState::Ready, now));
        let (facts, jobs) = answer(&mut state, &wanted(&["t1"]), now);
        assert!(jobs.is_empty());
        assert_eq!(facts.templates.get(&key), Some(&TemplateState::Ready));
        let (facts, jobs) = answer(&mut state, &wanted(&["t1"]), now + READY_MAX_AGE);
        assert_eq!(jobs.len(), 1);
        assert_eq!(facts.templates.get(&key), Some(&TemplateState::Ready));
    }
}
