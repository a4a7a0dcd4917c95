//! Asks EC2 who owns the AMIs of AWS MachineSets, in the background: a pass takes the answers
//! already in, never waits for EC2, and the next pass is triggered when new answers arrive.
//!
//! Credentials are the controller's own, the Secret the cloud credential operator (or `ccoctl`)
//! writes for its CredentialsRequest (manifests/credentialsrequest.yaml), else the machine
//! API's static keys: the Machine Config Operator reads the latter (`awsCredentialsSecretName`
//! in pkg/controller/bootimage/aws_helpers.go, openshift/machine-config-operator 7ff337a),
//! which the cloud credential operator fills from the machine-api-operator's CredentialsRequest
//! `openshift-machine-api-aws`, whose policy already grants `ec2:DescribeImages`
//! (install/0000_30_machine-api-operator_00_credentials-request.yaml, openshift/
//! machine-api-operator 001a53c). With STS that Secret names the machine API's role, which
//! trusts only the machine API's ServiceAccount, hence a CredentialsRequest of our own.
//!
//! An AMI's owner never changes, so an answer is kept for the life of the process; searches of
//! marketplace products are repeated hourly, since new AMIs are published there.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use kube::Api;
use parking_lot::Mutex;
use tokio::sync::mpsc;
use tracing::{info, warn};

use super::lookups::{self, Jobs};
use super::watches::Trigger;
use crate::api::{Infrastructure, Secret};
use crate::api_client::SECRET_TIMEOUT;
use crate::ec2::client::Ec2Client;
use crate::ec2::query::Ec2Error;
use crate::ec2::sigv4::Credentials;
use crate::ec2::sts::{self, SecretCredentials, Session, WebIdentity};
use crate::ec2::{Answered, RegionLookup};
use crate::facts::ec2::{AmiFacts, AmiOrigin, Consulted, Ec2Facts};
use crate::metrics::Metrics;
use crate::platform::Platform;

/// The Secret of `--machine-api-namespace` holding the machine API's AWS credentials.
pub const CREDENTIALS_SECRET: &str = "aws-cloud-credentials";
/// The Secret of the controller's namespace its own CredentialsRequest names.
pub const OWN_CREDENTIALS_SECRET: &str = "boot-image-controller-aws-credentials";
/// A ServiceAccount token is a few KiB; a Secret may name any file.
const MAX_TOKEN_BYTES: u64 = 64 << 10;

/// Marketplace searches are repeated this often: new AMIs of a product appear there.
const SEARCH_MAX_AGE: Duration = Duration::from_secs(3600);
/// An AMI EC2 did not show is asked about again after this long (it may have been shared since).
const NOT_FOUND_MAX_AGE: Duration = Duration::from_secs(3600);
/// A region whose look-up failed is retried after this, doubled per failure up to the maximum.
const FIRST_RETRY: Duration = Duration::from_secs(15);
const MAX_RETRY: Duration = Duration::from_secs(600);
/// Without credentials, the Secret is looked for again this often (when an AMI needs asking).
const CREDENTIALS_RECHECK: Duration = Duration::from_secs(60);
/// Answers kept at most; beyond, those no MachineSet names any more are dropped.
const MAX_CACHED: usize = 20_000;
/// Regions asked at once, one look-up each: MachineSets may name many regions (a region name
/// of AWS's form is enough), and each look-up is a task holding a connection. The others wait
/// for a later pass; every finished look-up triggers one.
const MAX_REGIONS_IN_FLIGHT: usize = 4;

/// The controller's EC2 look-ups (none when `--ec2-lookups=false`).
pub(super) struct Ec2Lookups {
    client: Ec2Client,
    secrets: Api<Secret>,
    own_secrets: Api<Secret>,
    /// The temporary credentials of the web identity; one exchange at a time.
    session: tokio::sync::Mutex<Option<Session>>,
    session_duration: Duration,
    wake: mpsc::UnboundedSender<Trigger>,
    metrics: Metrics,
    state: Mutex<State>,
}

struct State {
    images: HashMap<(String, String), Looked>,
    searches: HashMap<(String, String), (Instant, Vec<AmiFacts>)>,
    /// One look-up per region at a time, its failures retried with backoff.
    jobs: Jobs<String>,
    /// Why there are no credentials to ask with, when that is the case, and when to look again.
    no_credentials: Option<(String, Instant)>,
}

impl Default for State {
    fn default() -> Self {
        State {
            images: HashMap::new(),
            searches: HashMap::new(),
            jobs: Jobs::new(MAX_REGIONS_IN_FLIGHT, FIRST_RETRY, MAX_RETRY),
            no_credentials: None,
        }
    }
}

enum Looked {
    Found(AmiFacts),
    NotFound(Instant),
}

/// Why a job could not ask EC2.
#[derive(Debug, thiserror::Error)]
enum JobError {
    #[error("{0}")]
    NoCredentials(String),
    #[error("cannot read the credentials Secret: {0}")]
    Secret(String),
    #[error("cannot assume role {role} with the ServiceAccount token: {error}")]
    AssumeRole { role: String, error: String },
    #[error(transparent)]
    Ec2(#[from] Ec2Error),
}

impl Ec2Lookups {
    /// Look-ups with the Secrets of `namespaces` (the machine API's, the controller's own),
    /// asking STS for credentials of `session_duration` where the Secret names a role.
    pub fn new(
        client: Ec2Client,
        client_kube: kube::Client,
        namespaces: (&str, &str),
        session_duration: Duration,
        wake: mpsc::UnboundedSender<Trigger>,
        metrics: Metrics,
    ) -> Arc<Self> {
        let (namespace, own_namespace) = namespaces;
        Arc::new(Ec2Lookups {
            client,
            secrets: Api::namespaced(client_kube.clone(), namespace),
            own_secrets: Api::namespaced(client_kube, own_namespace),
            session: tokio::sync::Mutex::new(None),
            session_duration,
            wake,
            metrics,
            state: Mutex::new(State::default()),
        })
    }

    /// Reads the credentials Secret once before the first pass, so that a cluster without one
    /// is planned as such from the start rather than as waiting for EC2.
    pub async fn check_credentials(&self) {
        if let Err(JobError::NoCredentials(why)) = self.secret_credentials().await {
            info!(reason = %why, "no AWS credentials: AMIs are recognised by the golden streams and known images only");
            self.state.lock().no_credentials = Some((why, Instant::now() + CREDENTIALS_RECHECK));
        }
    }

    /// Every answer in, for the pass's snapshot.
    pub fn facts(&self) -> Ec2Facts {
        self.state.lock().facts(Instant::now())
    }

    /// Starts look-ups of the (region, AMI) pairs the pass's decisions asked about that have no
    /// fresh answer. A pass decides every object, so a region none asked about any more is
    /// forgotten (and no longer counted unavailable).
    pub fn ask(self: &Arc<Self>, wanted: &BTreeSet<(String, String)>) {
        let (jobs, unavailable) = self.state.lock().ask(wanted, Instant::now());
        self.metrics.ec2_unavailable_regions.set(unavailable);
        for job in jobs {
            let this = Arc::clone(self);
            lookups::spawn(&self.wake, async move { this.run(job).await });
        }
    }
}

impl State {
    /// Every answer held at `now`: AMIs found, AMIs not shown lately, marketplace searches, and
    /// the regions EC2 cannot be asked in.
    fn facts(&self, now: Instant) -> Ec2Facts {
        let mut facts = Ec2Facts::consulted();
        if let Some((why, _)) = &self.no_credentials {
            facts.consulted = Consulted::Unable(why.clone());
        }
        for ((region, id), looked) in &self.images {
            match looked {
                Looked::Found(image) => facts.add_image(image.clone()),
                Looked::NotFound(at) if now.duration_since(*at) < NOT_FOUND_MAX_AGE => {
                    facts.add_not_found(region, id);
                }
                Looked::NotFound(_) => {}
            }
        }
        for ((region, product), (_, images)) in &self.searches {
            for image in images {
                facts.add_image(image.clone());
            }
            facts.add_search(region, product);
        }
        for (region, failure) in &self.jobs.failures {
            facts.set_unavailable(region, failure.message.clone());
        }
        facts
    }

    /// The look-ups to start for `wanted` at `now` (marked in flight), and the number of regions
    /// EC2 cannot be asked in. Pure: no I/O, so the policy is unit-tested.
    fn ask(
        &mut self,
        wanted: &BTreeSet<(String, String)>,
        now: Instant,
    ) -> (Vec<RegionLookup>, i64) {
        let waiting_for_credentials =
            (self.no_credentials.as_ref()).is_some_and(|(_, at)| *at > now);
        let due: Vec<RegionLookup> = (crate::ec2::lookups(wanted).into_iter())
            .filter_map(|lookup| self.job(lookup, now))
            .collect();
        // A region nothing needs asking in any more is not unavailable: forget its failure.
        (self.jobs.failures).retain(|region, _| due.iter().any(|job| job.region == *region));
        let unavailable = self.jobs.failures.len() as i64;
        let jobs = (due.into_iter())
            .filter(|job| !waiting_for_credentials && self.jobs.start(&job.region, now))
            .collect();
        if self.images.len() > MAX_CACHED {
            self.images.retain(|key, _| wanted.contains(key));
        }
        (jobs, unavailable)
    }

    /// What of `lookup` has no fresh answer: its AMIs not looked up (or not shown for long), and
    /// the searches of the marketplace products of those found.
    fn job(&self, mut job: RegionLookup, now: Instant) -> Option<RegionLookup> {
        for id in std::mem::take(&mut job.ids) {
            match self.images.get(&(job.region.clone(), id.clone())) {
                Some(Looked::Found(image)) => {
                    if let AmiOrigin::Marketplace { product } = image.origin()
                        && !self.searched_lately(&job.region, &product, now)
                    {
                        job.products.insert(product);
                    }
                }
                Some(Looked::NotFound(at)) if now.duration_since(*at) < NOT_FOUND_MAX_AGE => {}
                _ => job.ids.push(id),
            }
        }
        (!job.ids.is_empty() || !job.products.is_empty()).then_some(job)
    }

    /// Whether `product`'s AMIs in `region` were searched for within the hour.
    fn searched_lately(&self, region: &str, product: &str, now: Instant) -> bool {
        let key = (region.to_string(), product.to_string());
        (self.searches.get(&key)).is_some_and(|(at, _)| now.duration_since(*at) < SEARCH_MAX_AGE)
    }

    /// Keeps an answer of a look-up in `region`, come at `now`.
    fn record(&mut self, region: &str, answer: Answered, now: Instant) {
        match answer {
            Answered::Image(image) => {
                let key = (region.to_string(), image.image_id.clone());
                self.images.insert(key, Looked::Found(image));
            }
            Answered::NotFound(id) => {
                self.images
                    .insert((region.to_string(), id), Looked::NotFound(now));
            }
            Answered::Search(product, images) => {
                self.searches
                    .insert((region.to_string(), product), (now, images));
            }
        }
    }
}

impl Ec2Lookups {
    /// Asks EC2 what `job` says; how long until a pass should ask again (only while some AMI
    /// still needs asking, since only then is there a job).
    async fn run(&self, job: RegionLookup) -> Option<Duration> {
        let region = job.region.clone();
        let outcome = self.ask_ec2(job).await;
        let mut state = self.state.lock();
        match &outcome {
            Ok(()) => {
                state.no_credentials = None;
                if state.jobs.succeeded(&region) {
                    info!(region, "EC2 answers again");
                }
                None
            }
            Err(JobError::NoCredentials(why)) => {
                if state.no_credentials.is_none() {
                    info!(reason = %why, "no AWS credentials: AMIs are recognised by the golden streams and known images only");
                }
                state.no_credentials = Some((why.clone(), Instant::now() + CREDENTIALS_RECHECK));
                state.jobs.succeeded(&region);
                Some(CREDENTIALS_RECHECK)
            }
            Err(e) => {
                let (delay, attempts) = state.jobs.failed(&region, e.to_string(), Instant::now());
                if attempts == 1 {
                    warn!(region, error = %e, "EC2 cannot be asked about AMIs; only the golden streams and known images are recognised there until it answers");
                }
                Some(delay)
            }
        }
    }

    async fn ask_ec2(&self, job: RegionLookup) -> Result<(), JobError> {
        let region = job.region.clone();
        let secret = self.secret_credentials().await.inspect_err(|e| match e {
            JobError::NoCredentials(_) => self.count("images", "no_credentials"),
            _ => self.count("images", "secret_unreadable"),
        })?;
        // The keys of the Secret, or the temporary credentials of its web identity, exchanged
        // again at four fifths of their life (an exchange with STS is counted as such).
        let credentials = match secret {
            SecretCredentials::Keys(keys) => keys,
            SecretCredentials::WebIdentity(identity) => self.assume(&region, identity).await?,
        };
        let searched_lately =
            |product: &str| (self.state.lock()).searched_lately(&region, product, Instant::now());
        let count = |call: &str, result: &str| self.count(call, result);
        let record = |answer| self.state.lock().record(&region, answer, Instant::now());
        let asked = crate::ec2::ask_region(
            &self.client,
            &credentials,
            job,
            searched_lately,
            count,
            record,
        );
        Ok(asked.await?)
    }

    fn count(&self, call: &str, result: &str) {
        self.metrics
            .ec2_requests
            .with_label_values(&[call, result])
            .inc();
    }

    /// The controller's own Secret, else the machine API's static keys, or why there are none.
    async fn secret_credentials(&self) -> Result<SecretCredentials, JobError> {
        if let Some(own) = get_secret(&self.own_secrets, OWN_CREDENTIALS_SECRET).await? {
            return sts::read_secret(&secret_data(&own)).map_err(|why| {
                JobError::NoCredentials(format!("Secret {OWN_CREDENTIALS_SECRET} holds {why}"))
            });
        }
        let Some(secret) = get_secret(&self.secrets, CREDENTIALS_SECRET).await? else {
            return Err(JobError::NoCredentials(format!(
                "no Secret {OWN_CREDENTIALS_SECRET} in namespace {} nor {CREDENTIALS_SECRET} in \
                 namespace {}",
                (self.own_secrets.namespace()).unwrap_or_default(),
                self.secrets.namespace().unwrap_or_default()
            )));
        };
        match sts::read_secret(&secret_data(&secret)) {
            Ok(SecretCredentials::WebIdentity(_)) => Err(JobError::NoCredentials(format!(
                "Secret {CREDENTIALS_SECRET} holds the machine API's STS role, which trusts only \
                 its ServiceAccount; create this controller's own Secret \
                 {OWN_CREDENTIALS_SECRET} with ccoctl (docs/platforms/aws.md)"
            ))),
            read => read.map_err(|why| {
                JobError::NoCredentials(format!("Secret {CREDENTIALS_SECRET} holds {why}"))
            }),
        }
    }

    /// The session's credentials while they serve `identity`; else a new session from
    /// `region`'s STS with the token as the kubelet last wrote it.
    async fn assume(&self, region: &str, identity: WebIdentity) -> Result<Credentials, JobError> {
        let mut session = self.session.lock().await;
        if let Some(session) = session
            .as_ref()
            .filter(|s| s.serves(&identity, Instant::now()))
        {
            return Ok(session.credentials.clone());
        }
        let failed = |error: String| JobError::AssumeRole {
            role: identity.role_arn.clone(),
            error,
        };
        let path = std::path::PathBuf::from(&identity.token_file);
        let token = tokio::task::spawn_blocking(move || {
            crate::bounded_read::read_regular_file(&path, MAX_TOKEN_BYTES)
        })
        .await
        .map_err(|e| failed(e.to_string()))?
        .map_err(|e| {
            failed(format!(
                "cannot read {}: {e} (the Deployment mounts it: manifests/deployment.yaml)",
                identity.token_file
            ))
        })?;
        let duration = self.session_duration;
        let exchanged = (self.client)
            .assume_role_with_web_identity(region, &identity, &token, duration)
            .await;
        self.count("assume_role", Ec2Error::outcome(&exchanged));
        let (credentials, expiration) = exchanged.map_err(|e| failed(e.to_string()))?;
        info!(role = %identity.role_arn, %expiration, "assumed the role with the ServiceAccount token");
        let now = (jiff::Timestamp::now(), Instant::now());
        let new = Session::new(identity, credentials.clone(), expiration, now.0, now.1);
        *session = Some(new);
        Ok(credentials)
    }
}

async fn get_secret(api: &Api<Secret>, name: &str) -> Result<Option<Secret>, JobError> {
    tokio::time::timeout(SECRET_TIMEOUT, api.get_opt(name))
        .await
        .map_err(|_| JobError::Secret(format!("no answer within {SECRET_TIMEOUT:?}")))?
        .map_err(|e| JobError::Secret(format!("{name}: {e}")))
}

/// A Secret's data as text, key by key.
fn secret_data(secret: &Secret) -> BTreeMap<String, String> {
    (secret.data.iter().flatten())
        .map(|(k, v)| (k.clone(), String::from_utf8_lossy(&v.0).into_owned()))
        .collect()
}

/// Whether the Infrastructure says AWS: EC2 is asked nothing elsewhere.
pub(super) fn on_aws(infrastructure: Option<&Infrastructure>) -> bool {
    (infrastructure.and_then(|i| i.status.as_ref()?.platform_status.as_ref()))
        .is_some_and(|p| Platform::from_status(p) == Platform::Aws)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::facts::ec2::{Answer, MARKETPLACE_OWNER};

    const RHCOS_AMI: &str = "ami-0000000000000000a";
    const MARKET_AMI: &str = "ami-0000000000000000b";
    const OCP: &str = "59ead7de-2540-4653-a8b0-fa7926d5c845";

    /// What a pass sees (the answers in before it decides), then what its decisions start.
    fn answer(
        state: &mut State,
        wanted: &BTreeSet<(String, String)>,
        now: Instant,
    ) -> (Ec2Facts, Vec<RegionLookup>, i64) {
        let facts = state.facts(now);
        let (jobs, unavailable) = state.ask(wanted, now);
        (facts, jobs, unavailable)
    }

    fn wanted(pairs: &[(&str, &str)]) -> BTreeSet<(String, String)> {
        pairs
            .iter()
            .map(|(r, i)| (r.to_string(), i.to_string()))
            .collect()
    }

    fn found(state: &mut State, id: &str, owner: &str, name: &str) {
        let image = AmiFacts {
            image_id: id.into(),
            region: "us-east-1".into(),
            owner_id: owner.into(),
            name: name.into(),
            description: String::new(),
            architecture: "x86_64".into(),
            creation_date: String::new(),
        };
        let key = ("us-east-1".to_string(), id.to_string());
        state.images.insert(key, Looked::Found(image));
    }

    #[test]
    fn an_unknown_ami_is_asked_once_and_pending_meanwhile() {
        let mut state = State::default();
        let now = Instant::now();
        let asked = wanted(&[("us-east-1", RHCOS_AMI)]);
        let (facts, jobs, unavailable) = answer(&mut state, &asked, now);
        assert_eq!(facts.answer("us-east-1", RHCOS_AMI), Answer::Pending);
        assert_eq!(jobs.len(), 1);
        assert_eq!(jobs[0].ids, vec![RHCOS_AMI.to_string()]);
        assert_eq!(unavailable, 0);
        // The next pass, before the answer: no second look-up of the same region.
        let (_, jobs, _) = answer(&mut state, &asked, now);
        assert!(jobs.is_empty());
        // Answered: known for good, nothing more to ask.
        state.jobs.succeeded(&"us-east-1".to_string());
        found(
            &mut state,
            RHCOS_AMI,
            crate::facts::ec2::RHCOS_OWNER,
            "rhcos",
        );
        let (facts, jobs, _) = answer(&mut state, &asked, now + SEARCH_MAX_AGE * 10);
        assert!(matches!(
            facts.answer("us-east-1", RHCOS_AMI),
            Answer::Known(_)
        ));
        assert!(jobs.is_empty());
    }

    #[test]
    fn a_marketplace_ami_brings_a_search_of_its_product_repeated_hourly() {
        let mut state = State::default();
        let now = Instant::now();
        let name = format!("RHEL-9.4-RHCOS-9.6_HVM_GA-20260210-x86_64-0-{OCP}");
        found(&mut state, MARKET_AMI, MARKETPLACE_OWNER, &name);
        let asked = wanted(&[("us-east-1", MARKET_AMI)]);
        let (_, jobs, _) = answer(&mut state, &asked, now);
        assert_eq!(jobs[0].products, BTreeSet::from([OCP.to_string()]));
        assert!(jobs[0].ids.is_empty());
        state.jobs.succeeded(&"us-east-1".to_string());
        let key = ("us-east-1".to_string(), OCP.to_string());
        state.searches.insert(key, (now, Vec::new()));
        let (_, jobs, _) = answer(&mut state, &asked, now + Duration::from_secs(60));
        assert!(jobs.is_empty());
        let (_, jobs, _) = answer(&mut state, &asked, now + SEARCH_MAX_AGE);
        assert_eq!(jobs.len(), 1);
    }

    #[test]
    fn a_failed_region_is_unavailable_until_its_retry_and_forgotten_when_not_needed() {
        let mut state = State::default();
        let now = Instant::now();
        (state.jobs).failed(&"us-east-1".into(), "timed out".into(), now);
        let asked = wanted(&[("us-east-1", RHCOS_AMI)]);
        let (facts, jobs, unavailable) = answer(&mut state, &asked, now);
        assert_eq!(
            facts.answer("us-east-1", RHCOS_AMI),
            Answer::Unavailable("timed out")
        );
        assert!(jobs.is_empty());
        assert_eq!(unavailable, 1);
        let (_, jobs, unavailable) = answer(&mut state, &asked, now + FIRST_RETRY);
        assert_eq!((jobs.len(), unavailable), (1, 1));
        // The MachineSet moved to a listed AMI: nothing to ask, nothing unavailable.
        let (_, jobs, unavailable) = answer(&mut state, &BTreeSet::new(), now);
        assert_eq!((jobs.len(), unavailable), (0, 0));
        assert!(state.jobs.failures.is_empty());
    }

    #[test]
    fn without_credentials_the_secret_is_looked_for_again_only_when_due() {
        let mut state = State {
            no_credentials: Some(("no Secret".into(), Instant::now() + CREDENTIALS_RECHECK)),
            ..State::default()
        };
        let asked = wanted(&[("us-east-1", RHCOS_AMI)]);
        let (facts, jobs, _) = answer(&mut state, &asked, Instant::now());
        assert_eq!(facts.consulted, Consulted::Unable("no Secret".into()));
        assert!(jobs.is_empty());
        let (_, jobs, _) = answer(&mut state, &asked, Instant::now() + CREDENTIALS_RECHECK);
        assert_eq!(jobs.len(), 1);
    }

    #[test]
    fn look_ups_in_flight_are_bounded_whatever_the_number_of_regions() {
        let mut state = State::default();
        let now = Instant::now();
        let regions: Vec<String> = (1..=50).map(|n| format!("us-east-{n}")).collect();
        let asked: BTreeSet<(String, String)> = (regions.iter())
            .map(|r| (r.clone(), RHCOS_AMI.to_string()))
            .collect();
        let (_, first, _) = answer(&mut state, &asked, now);
        assert_eq!(first.len(), MAX_REGIONS_IN_FLIGHT);
        let (_, jobs, _) = answer(&mut state, &asked, now);
        assert!(
            jobs.is_empty(),
            "more look-ups while the first are under way"
        );
        // One finishes: one more starts.
        state.jobs.succeeded(&first[0].region);
        let (_, jobs, _) = answer(&mut state, &asked, now);
        assert_eq!(jobs.len(), 1);
    }
}
