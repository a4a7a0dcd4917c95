//! `/metrics` over TLS, for clients the API server vouches for.
//!
//! The same contract as controller-runtime's secure metrics filter
//! (`sigs.k8s.io/controller-runtime/pkg/metrics/filters`, which kubebuilder scaffolds): the
//! bearer token is checked with a TokenReview, and the user it names must be allowed `get` on
//! the non-resource URL `/metrics` (a SubjectAccessReview). No token or a token the API server
//! rejects: 401. A valid token without that permission: 403. So Prometheus needs a ClusterRole
//! with `nonResourceURLs: ["/metrics"], verbs: ["get"]`, as it has for other OpenShift
//! components, and nothing else can read the series.
//!
//! The certificate is OpenShift's service-CA serving certificate: the Service annotation
//! `service.beta.openshift.io/serving-cert-secret-name` makes the service-ca operator write it
//! into a Secret that the Deployment mounts. The operator renews it before it expires and the
//! kubelet swaps the mounted files, so the files are re-read when they change, without a
//! restart.

use std::collections::HashMap;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec, UserInfo};
use k8s_openapi::api::authorization::v1::{
    NonResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::Client;
use kube::api::{Api, PostParams};
use parking_lot::{Mutex, RwLock};
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

/// File names inside the certificate folder: the keys of a `kubernetes.io/tls` Secret, which
/// is what the service-ca operator writes.
pub const CERT_FILE: &str = "tls.crt";
pub const KEY_FILE: &str = "tls.key";

/// How often the certificate files are compared with what is served. The service-CA renews
/// certificates long before they expire, so a few seconds of delay never matter.
const RELOAD_INTERVAL: Duration = Duration::from_secs(5);

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: {message}")]
    Invalid { path: PathBuf, message: String },
}

/// The certificate and key currently served, replaced when the files change.
#[derive(Debug)]
pub struct ReloadingCertificate {
    dir: PathBuf,
    /// The files' bytes (to notice a change) and what they parsed into.
    current: RwLock<([Vec<u8>; 2], Arc<CertifiedKey>)>,
}

impl ReloadingCertificate {
    /// Reads the folder now, so a missing or broken certificate fails start-up.
    pub fn load(dir: &Path) -> Result<Arc<Self>, TlsError> {
        let bytes = raw_pair(dir)?;
        let key = parse_pair(dir, &bytes)?;
        Ok(Arc::new(ReloadingCertificate {
            dir: dir.to_path_buf(),
            current: RwLock::new((bytes, key)),
        }))
    }

    /// Re-reads the files until `shutdown`.
    pub fn watch(self: &Arc<Self>, shutdown: CancellationToken) {
        let this = self.clone();
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    _ = shutdown.cancelled() => return,
                    _ = tokio::time::sleep(RELOAD_INTERVAL) => {}
                }
                this.reload();
            }
        });
    }

    fn reload(&self) {
        // Missing for a moment while the kubelet swaps the files: keep serving the old pair.
        let Ok(bytes) = raw_pair(&self.dir) else {
            return;
        };
        if self.current.read().0 == bytes {
            return;
        }
        match parse_pair(&self.dir, &bytes) {
            Ok(key) => {
                *self.current.write() = (bytes, key);
                info!(dir = %self.dir.display(), "serving a renewed metrics certificate");
            }
            // Caught half-written, or a key that does not match yet: the next round retries.
            Err(e) => warn!(error = %e, "keeping the previous metrics certificate"),
        }
    }
}

impl ResolvesServerCert for ReloadingCertificate {
    fn resolve(&self, _: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current.read().1.clone())
    }
}

/// The certificate's and the key's bytes.
fn raw_pair(dir: &Path) -> Result<[Vec<u8>; 2], TlsError> {
    let read = |name: &str| {
        let path = dir.join(name);
        std::fs::read(&path).map_err(|source| TlsError::Read { path, source })
    };
    Ok([read(CERT_FILE)?, read(KEY_FILE)?])
}

/// The certificate and key in `bytes`, as [`raw_pair`] read them from `dir`.
fn parse_pair(dir: &Path, bytes: &[Vec<u8>; 2]) -> Result<Arc<CertifiedKey>, TlsError> {
    let invalid = |name: &str, message: String| TlsError::Invalid {
        path: dir.join(name),
        message,
    };
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&bytes[0])
        .collect::<Result<_, _>>()
        .map_err(|e| invalid(CERT_FILE, e.to_string()))?;
    if chain.is_empty() {
        return Err(invalid(CERT_FILE, "no certificate".into()));
    }
    let key =
        PrivateKeyDer::from_pem_slice(&bytes[1]).map_err(|e| invalid(KEY_FILE, e.to_string()))?;
    let signing = rustls::crypto::ring::sign::any_supported_type(&key)
        .map_err(|e| invalid(KEY_FILE, e.to_string()))?;
    let certified = CertifiedKey::new(chain, signing);
    // A renewed certificate arrives with its own key; serving it with the old one would fail
    // every handshake.
    certified
        .keys_match()
        .map_err(|e| invalid(KEY_FILE, format!("does not match {CERT_FILE}: {e}")))?;
    Ok(Arc::new(certified))
}

/// A TLS acceptor serving the current certificate, HTTP/1.1 only.
pub fn acceptor(certificate: Arc<ReloadingCertificate>) -> tokio_rustls::TlsAcceptor {
    let mut config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .expect("the ring provider supports the default protocol versions")
    .with_no_client_auth()
    .with_cert_resolver(certificate);
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    tokio_rustls::TlsAcceptor::from(Arc::new(config))
}

/// What the API server said about a request's credentials.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    Allowed,
    /// No bearer token, or one the API server does not accept (401).
    Unauthenticated,
    /// Authenticated, but not allowed the request (403); the user's name, for the log.
    Forbidden(String),
}

/// How long a verdict is given again without asking: the same as kube-apiserver's own delegated
/// authentication and controller-runtime's secure metrics filter (`TokenAccessReviewCacheTTL`,
/// 10 s, in `k8s.io/apiserver/pkg/server/options/authentication.go`), for accepted and rejected
/// tokens alike, so a client repeating a garbage token costs one review per 10 s.
pub const VERDICT_TTL: Duration = Duration::from_secs(10);
/// How long after its lifetime an allowed verdict is still given, at once, while it is checked
/// again in the background: a scraper (every 30 s, manifests/monitoring) never waits for a
/// review nor for the budget, and a revoked token is refused from the check's answer on. No
/// longer than kube-apiserver trusts a webhook's verdict on a token
/// (`--authentication-token-webhook-cache-ttl`, 2 min).
pub const ALLOWED_GRACE: Duration = Duration::from_secs(120);
/// Verdicts kept at once; beyond it (only a flood of distinct tokens gets there) a verdict is
/// given without being kept.
pub const MAX_VERDICTS: usize = 4096;
/// Reviews sent to the API server: at most this many at once, refilled at
/// [`REVIEWS_PER_SECOND`]. A request that would need more is answered 429. Each review is a
/// TokenReview and, for an accepted token, a SubjectAccessReview.
pub const REVIEW_BURST: f64 = 20.0;
pub const REVIEWS_PER_SECOND: f64 = 5.0;
/// Of that budget, what only the checks of verdicts already allowed may take: a flood of
/// unknown tokens, from any number of peers, leaves the scrapers their checks.
pub const REVIEW_RESERVE: f64 = 5.0;
/// Reviews of unknown tokens per peer (an IP address), refilled at
/// [`PEER_REVIEWS_PER_SECOND`]: one peer's flood does not take another's share. Per address,
/// not per IPv6 /64 as connections count: on OVN-Kubernetes every pod of a node shares one /64,
/// and the scraper's neighbours must not spend its share.
pub const PEER_REVIEW_BURST: f64 = 5.0;
pub const PEER_REVIEWS_PER_SECOND: f64 = 1.0;
/// Peers whose budget is remembered; a peer whose budget has refilled is forgotten first.
/// Beyond it a new peer's unknown tokens are answered 429 until some budget refills.
pub const MAX_PEERS: usize = 1024;

#[derive(Debug, thiserror::Error)]
pub enum ReviewError {
    #[error(transparent)]
    Api(#[from] kube::Error),
    #[error("too many credential checks at once: retry in a second")]
    TooMany,
}

/// A verdict being given or given recently, shared by every request with the same token, verb and
/// path: those arriving while the API server is asked wait for its answer instead of asking too.
type SharedVerdict = Arc<tokio::sync::OnceCell<Verdict>>;

/// A verdict and since when it holds.
#[derive(Debug)]
struct Recent {
    at: Instant,
    verdict: SharedVerdict,
    /// An allowed verdict past its lifetime is being checked again.
    rechecking: bool,
}

impl Recent {
    fn age(&self, now: Instant) -> Duration {
        now.saturating_duration_since(self.at)
    }

    /// Allowed, past its lifetime, and still within [`ALLOWED_GRACE`].
    fn stale_allowed(&self, now: Instant) -> bool {
        let age = self.age(now);
        age >= VERDICT_TTL && age < ALLOWED_GRACE && self.verdict.get() == Some(&Verdict::Allowed)
    }
}

/// What a request finds among the recent verdicts.
enum Found {
    /// A verdict given, or being given, within its lifetime (new when there was none).
    Shared(SharedVerdict),
    /// An allowed verdict past its lifetime, given again now; `recheck` when no check of it is
    /// under way yet.
    StaleAllowed { recheck: bool },
}

/// Who a review is for: the check of a verdict already allowed, or an unknown token from a peer.
#[derive(Clone, Copy, Debug)]
enum Caller {
    Allowed,
    Unknown(IpAddr),
}

/// Reviews left: at most `burst`, refilled at `rate` per second.
#[derive(Debug)]
struct Budget {
    left: f64,
    refilled: Instant,
}

impl Budget {
    fn full(burst: f64, now: Instant) -> Self {
        Budget {
            left: burst,
            refilled: now,
        }
    }

    /// What is left at `now`.
    fn refill(&mut self, now: Instant, burst: f64, rate: f64) -> f64 {
        let elapsed = now.saturating_duration_since(self.refilled).as_secs_f64();
        self.left = (self.left + elapsed * rate).min(burst);
        self.refilled = self.refilled.max(now);
        self.left
    }
}

/// Recent verdicts by a SHA-256 digest of the token and the request (the token itself is never
/// kept), and what is left of the review budgets.
#[derive(Debug)]
struct Verdicts {
    recent: HashMap<[u8; 32], Recent>,
    budget: Budget,
    peers: HashMap<IpAddr, Budget>,
}

impl Verdicts {
    fn new(now: Instant) -> Self {
        Verdicts {
            recent: HashMap::new(),
            budget: Budget::full(REVIEW_BURST, now),
            peers: HashMap::new(),
        }
    }

    /// The verdict for `key`: a recent one, or a new one to be given.
    fn look_up(&mut self, key: [u8; 32], now: Instant) -> Found {
        if let Some(recent) = self.recent.get_mut(&key) {
            if recent.age(now) < VERDICT_TTL {
                return Found::Shared(recent.verdict.clone());
            }
            if recent.stale_allowed(now) {
                let recheck = !std::mem::replace(&mut recent.rechecking, true);
                return Found::StaleAllowed { recheck };
            }
        }
        let verdict = SharedVerdict::default();
        if self.recent.len() >= MAX_VERDICTS {
            self.recent
                .retain(|_, r| r.age(now) < VERDICT_TTL || r.stale_allowed(now));
        }
        if self.recent.len() < MAX_VERDICTS || self.recent.contains_key(&key) {
            let recent = Recent {
                at: now,
                verdict: verdict.clone(),
                rechecking: false,
            };
            self.recent.insert(key, recent);
        }
        Found::Shared(verdict)
    }

    /// Records what checking an allowed verdict again said (`None`: it could not be asked).
    fn rechecked(&mut self, key: [u8; 32], verdict: Option<Verdict>, now: Instant) {
        match verdict {
            Some(verdict) => {
                let recent = Recent {
                    at: now,
                    verdict: Arc::new(tokio::sync::OnceCell::new_with(Some(verdict))),
                    rechecking: false,
                };
                self.recent.insert(key, recent);
            }
            None => {
                if let Some(recent) = self.recent.get_mut(&key) {
                    recent.rechecking = false;
                }
            }
        }
    }

    /// Takes one review from the budgets, if `caller` may have one: a check of a verdict
    /// already allowed from what is left, an unknown token only beyond the reserve and within
    /// its peer's own budget.
    fn spend(&mut self, caller: Caller, now: Instant) -> bool {
        let left = self.budget.refill(now, REVIEW_BURST, REVIEWS_PER_SECOND);
        match caller {
            Caller::Allowed if left < 1.0 => return false,
            Caller::Allowed => {}
            Caller::Unknown(_) if left < 1.0 + REVIEW_RESERVE => return false,
            Caller::Unknown(ip) => {
                let Some(peer) = self.peer(ip, now) else {
                    return false;
                };
                if peer.left < 1.0 {
                    return false;
                }
                peer.left -= 1.0;
            }
        }
        self.budget.left -= 1.0;
        true
    }

    /// The budget of the peer at `ip`, refilled; `None` when [`MAX_PEERS`] others hold one.
    fn peer(&mut self, ip: IpAddr, now: Instant) -> Option<&mut Budget> {
        let ip = ip.to_canonical();
        let refill = |b: &mut Budget| b.refill(now, PEER_REVIEW_BURST, PEER_REVIEWS_PER_SECOND);
        if !self.peers.contains_key(&ip) && self.peers.len() >= MAX_PEERS {
            // A budget refilled to its burst is the same as none.
            self.peers.retain(|_, b| refill(b) < PEER_REVIEW_BURST);
        }
        if !self.peers.contains_key(&ip) && self.peers.len() >= MAX_PEERS {
            return None;
        }
        let peer = (self.peers.entry(ip)).or_insert_with(|| Budget::full(PEER_REVIEW_BURST, now));
        refill(peer);
        Some(peer)
    }
}

fn verdict_key(token: &str, verb: &str, path: &str) -> [u8; 32] {
    let mut digest = ring::digest::Context::new(&ring::digest::SHA256);
    for part in [token, verb, path] {
        digest.update(&(part.len() as u64).to_be_bytes());
        digest.update(part.as_bytes());
    }
    digest
        .finish()
        .as_ref()
        .try_into()
        .expect("SHA-256 digests are 32 bytes")
}

/// Asks the API server who a token belongs to and whether they may make a request, remembering
/// the answer briefly and within budgets of reviews.
#[derive(Clone)]
pub struct Reviewer {
    client: Client,
    verdicts: Arc<Mutex<Verdicts>>,
}

impl Reviewer {
    pub fn new(client: Client) -> Self {
        Reviewer {
            client,
            verdicts: Arc::new(Mutex::new(Verdicts::new(Instant::now()))),
        }
    }

    /// `authorization` is the request's `Authorization` header, if any; `peer` the address the
    /// request came from.
    pub async fn review(
        &self,
        peer: IpAddr,
        authorization: Option<&str>,
        verb: &str,
        path: &str,
    ) -> Result<Verdict, ReviewError> {
        let Some(token) = authorization
            .and_then(|h| h.strip_prefix("Bearer "))
            .map(str::trim)
            .filter(|t| !t.is_empty())
        else {
            return Ok(Verdict::Unauthenticated);
        };
        let key = verdict_key(token, verb, path);
        let found = self.verdicts.lock().look_up(key, Instant::now());
        let shared = match found {
            Found::Shared(shared) => shared,
            Found::StaleAllowed { recheck } => {
                if recheck {
                    self.recheck(key, token, verb, path);
                }
                return Ok(Verdict::Allowed);
            }
        };
        // A failed review leaves the cell empty: the next request asks again.
        let verdict = shared
            .get_or_try_init(|| async {
                if !self
                    .verdicts
                    .lock()
                    .spend(Caller::Unknown(peer), Instant::now())
                {
                    return Err(ReviewError::TooMany);
                }
                self.review_now(token, verb, path).await
            })
            .await?;
        Ok(verdict.clone())
    }

    /// Checks an allowed verdict past its lifetime again, in the background, from the reserve.
    fn recheck(&self, key: [u8; 32], token: &str, verb: &str, path: &str) {
        let this = self.clone();
        let (token, verb, path) = (token.to_string(), verb.to_string(), path.to_string());
        tokio::spawn(async move {
            let spent = this.verdicts.lock().spend(Caller::Allowed, Instant::now());
            let verdict = match spent {
                false => None,
                true => match this.review_now(&token, &verb, &path).await {
                    Ok(verdict) => Some(verdict),
                    Err(e) => {
                        warn!(error = %e, "cannot check a metrics client's token again");
                        None
                    }
                },
            };
            this.verdicts.lock().rechecked(key, verdict, Instant::now());
        });
    }

    /// Asks the API server, without looking at recent verdicts.
    async fn review_now(
        &self,
        token: &str,
        verb: &str,
        path: &str,
    ) -> Result<Verdict, ReviewError> {
        let Some(user) = self.authenticate(token).await? else {
            return Ok(Verdict::Unauthenticated);
        };
        let name = user.username.clone().unwrap_or_default();
        Ok(if self.authorize(user, verb, path).await? {
            Verdict::Allowed
        } else {
            Verdict::Forbidden(name)
        })
    }

    /// Who `token` belongs to, if the API server accepts it.
    async fn authenticate(&self, token: &str) -> Result<Option<UserInfo>, kube::Error> {
        let review = TokenReview {
            spec: TokenReviewSpec {
                token: Some(token.to_string()),
                ..Default::default()
            },
            ..Default::default()
        };
        let status = self.create(&review).await?.status.unwrap_or_default();
        Ok(status.user.filter(|_| status.authenticated == Some(true)))
    }

    /// Whether `user` may `verb` the non-resource URL `path`.
    async fn authorize(&self, user: UserInfo, verb: &str, path: &str) -> Result<bool, kube::Error> {
        let access = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: user.username,
                groups: user.groups,
                uid: user.uid,
                extra: user.extra,
                non_resource_attributes: Some(NonResourceAttributes {
                    path: Some(path.to_string()),
                    verb: Some(verb.to_ascii_lowercase()),
                }),
                ..Default::default()
            },
            ..Default::default()
        };
        let decided = self.create(&access).await?;
        Ok(decided.status.is_some_and(|s| s.allowed))
    }

    /// Sends a review (a create that stores nothing) and returns the API server's answer.
    async fn create<K>(&self, review: &K) -> Result<K, kube::Error>
    where
        K: kube::Resource<Scope = kube::core::ClusterResourceScope, DynamicType = ()>
            + Clone
            + std::fmt::Debug
            + serde::Serialize
            + serde::de::DeserializeOwned,
    {
        Api::<K>::all(self.client.clone())
            .create(&PostParams::default(), review)
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The shared verdict a request for `key` gets, failing for a stale allowed one.
    fn shared(verdicts: &mut Verdicts, key: [u8; 32], now: Instant) -> SharedVerdict {
        match verdicts.look_up(key, now) {
            Found::Shared(shared) => shared,
            Found::StaleAllowed { .. } => panic!("a stale allowed verdict"),
        }
    }

    fn peer(i: u32) -> IpAddr {
        IpAddr::V4(std::net::Ipv4Addr::from(0x0a00_0000 + i))
    }

    #[test]
    fn a_verdict_is_shared_for_its_lifetime_then_asked_again() {
        let start = Instant::now();
        let mut verdicts = Verdicts::new(start);
        let key = verdict_key("garbage", "GET", "/metrics");
        let first = shared(&mut verdicts, key, start);
        let again = shared(
            &mut verdicts,
            key,
            start + VERDICT_TTL - Duration::from_millis(1),
        );
        assert!(Arc::ptr_eq(&first, &again));
        let other = shared(
            &mut verdicts,
            verdict_key("garbage", "HEAD", "/metrics"),
            start,
        );
        assert!(
            !Arc::ptr_eq(&first, &other),
            "another request, another verdict"
        );
        let later = shared(&mut verdicts, key, start + VERDICT_TTL);
        assert!(!Arc::ptr_eq(&first, &later), "kept past its lifetime");
    }

    #[test]
    fn an_allowed_verdict_is_given_past_its_lifetime_while_one_check_runs() {
        let start = Instant::now();
        let mut verdicts = Verdicts::new(start);
        let key = verdict_key("scraper", "GET", "/metrics");
        shared(&mut verdicts, key, start)
            .set(Verdict::Allowed)
            .expect("a new verdict");
        let expired = start + VERDICT_TTL + Duration::from_secs(20);
        assert!(matches!(
            verdicts.look_up(key, expired),
            Found::StaleAllowed { recheck: true }
        ));
        // Requests meanwhile are given it too, without a second check.
        assert!(matches!(
            verdicts.look_up(key, expired),
            Found::StaleAllowed { recheck: false }
        ));
        // A check that could not be made: the next request starts another.
        verdicts.rechecked(key, None, expired);
        assert!(matches!(
            verdicts.look_up(key, expired),
            Found::StaleAllowed { recheck: true }
        ));
        // The check's answer holds from then on: a revoked token is refused.
        verdicts.rechecked(key, Some(Verdict::Unauthenticated), expired);
        let now = shared(&mut verdicts, key, expired);
        assert_eq!(now.get(), Some(&Verdict::Unauthenticated));
        // Refused verdicts are never given past their lifetime, nor allowed ones past the grace.
        let refused = shared(&mut verdicts, key, expired + VERDICT_TTL);
        assert_eq!(refused.get(), None);
        refused.set(Verdict::Allowed).expect("a new verdict");
        let gone = expired + VERDICT_TTL + ALLOWED_GRACE;
        assert_eq!(shared(&mut verdicts, key, gone).get(), None);
    }

    #[test]
    fn distinct_tokens_beyond_the_limit_are_answered_but_not_kept() {
        let now = Instant::now();
        let mut verdicts = Verdicts::new(now);
        for i in 0..MAX_VERDICTS + 10 {
            shared(
                &mut verdicts,
                verdict_key(&format!("t{i}"), "GET", "/metrics"),
                now,
            );
        }
        assert_eq!(verdicts.recent.len(), MAX_VERDICTS);
        // Once they expire, room is made again.
        let key = verdict_key("new", "GET", "/metrics");
        shared(&mut verdicts, key, now + VERDICT_TTL);
        assert_eq!(verdicts.recent.len(), 1);
    }

    #[test]
    fn the_review_budget_refills_at_its_rate() {
        let now = Instant::now();
        let mut verdicts = Verdicts::new(now);
        let spent = (0..100)
            .filter(|_| verdicts.spend(Caller::Allowed, now))
            .count();
        assert_eq!(spent as f64, REVIEW_BURST);
        let next = now + Duration::from_secs_f64(1.0 / REVIEWS_PER_SECOND);
        assert!(verdicts.spend(Caller::Allowed, next));
        assert!(!verdicts.spend(Caller::Allowed, next));
    }

    #[test]
    fn a_flood_from_many_peers_leaves_the_reserve_to_verdicts_already_allowed() {
        let now = Instant::now();
        let mut verdicts = Verdicts::new(now);
        let flood = (0..1000)
            .filter(|i| verdicts.spend(Caller::Unknown(peer(*i)), now))
            .count();
        assert_eq!(flood as f64, REVIEW_BURST - REVIEW_RESERVE);
        let checks = (0..100)
            .filter(|_| verdicts.spend(Caller::Allowed, now))
            .count();
        assert_eq!(checks as f64, REVIEW_RESERVE);
    }

    #[test]
    fn one_peer_spends_its_own_budget_not_another_peers() {
        let now = Instant::now();
        let mut verdicts = Verdicts::new(now);
        let flooder = peer(1);
        let spent = (0..100)
            .filter(|_| verdicts.spend(Caller::Unknown(flooder), now))
            .count();
        assert_eq!(spent as f64, PEER_REVIEW_BURST);
        assert!(verdicts.spend(Caller::Unknown(peer(2)), now));
        // An IPv4 address mapped into IPv6 (a dual-stack listener) is the same peer.
        let mapped = IpAddr::V6(std::net::Ipv4Addr::from(0x0a00_0001).to_ipv6_mapped());
        assert!(!verdicts.spend(Caller::Unknown(mapped), now));
        // Two pods in one IPv6 /64 (one node on OVN-Kubernetes) are two peers.
        let pod = |last: u16| IpAddr::V6(std::net::Ipv6Addr::new(0xfd01, 0, 0, 1, 0, 0, 0, last));
        for _ in 0..100 {
            verdicts.spend(Caller::Unknown(pod(1)), now);
        }
        assert!(verdicts.spend(Caller::Unknown(pod(2)), now));
        let later = now + Duration::from_secs_f64(1.0 / PEER_REVIEWS_PER_SECOND);
        assert!(verdicts.spend(Caller::Unknown(flooder), later));
    }

    #[test]
    fn the_peers_remembered_are_bounded_and_refilled_ones_make_room() {
        let now = Instant::now();
        let mut verdicts = Verdicts::new(now);
        for i in 0..MAX_PEERS as u32 {
            verdicts.peer(peer(i), now).expect("room").left -= 1.0;
        }
        assert!(verdicts.peer(peer(1 << 20), now).is_none(), "one too many");
        let refilled = now + Duration::from_secs_f64(1.0 / PEER_REVIEWS_PER_SECOND);
        assert!(verdicts.peer(peer(1 << 20), refilled).is_some());
        assert_eq!(verdicts.peers.len(), 1);
    }
}
