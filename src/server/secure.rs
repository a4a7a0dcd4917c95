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

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec, UserInfo};
use k8s_openapi::api::authorization::v1::{
    NonResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::Client;
use kube::api::{Api, PostParams};
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
    current: RwLock<(Vec<u8>, Arc<CertifiedKey>)>,
}

impl ReloadingCertificate {
    /// Reads the folder now, so a missing or broken certificate fails start-up.
    pub fn load(dir: &Path) -> Result<Arc<Self>, TlsError> {
        let (bytes, key) = read_pair(dir)?;
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
        if self.current.read().is_ok_and(|c| c.0 == bytes) {
            return;
        }
        match read_pair(&self.dir) {
            Ok((bytes, key)) => {
                if let Ok(mut current) = self.current.write() {
                    *current = (bytes, key);
                    info!(dir = %self.dir.display(), "serving a renewed metrics certificate");
                }
            }
            // Caught half-written, or a key that does not match yet: the next round retries.
            Err(e) => warn!(error = %e, "keeping the previous metrics certificate"),
        }
    }
}

impl ResolvesServerCert for ReloadingCertificate {
    fn resolve(&self, _: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        self.current.read().ok().map(|c| c.1.clone())
    }
}

fn raw_pair(dir: &Path) -> Result<Vec<u8>, TlsError> {
    let mut bytes = Vec::new();
    for name in [CERT_FILE, KEY_FILE] {
        let path = dir.join(name);
        bytes.extend(std::fs::read(&path).map_err(|source| TlsError::Read { path, source })?);
    }
    Ok(bytes)
}

fn read_pair(dir: &Path) -> Result<(Vec<u8>, Arc<CertifiedKey>), TlsError> {
    let bytes = raw_pair(dir)?;
    let cert_path = dir.join(CERT_FILE);
    let key_path = dir.join(KEY_FILE);
    let invalid = |path: &Path, message: String| TlsError::Invalid {
        path: path.to_path_buf(),
        message,
    };
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(&cert_path)
        .map_err(|e| invalid(&cert_path, e.to_string()))?
        .collect::<Result<_, _>>()
        .map_err(|e| invalid(&cert_path, e.to_string()))?;
    if chain.is_empty() {
        return Err(invalid(&cert_path, "no certificate".into()));
    }
    let key =
        PrivateKeyDer::from_pem_file(&key_path).map_err(|e| invalid(&key_path, e.to_string()))?;
    let signing = rustls::crypto::ring::sign::any_supported_type(&key)
        .map_err(|e| invalid(&key_path, e.to_string()))?;
    let certified = CertifiedKey::new(chain, signing);
    // A renewed certificate arrives with its own key; serving it with the old one would fail
    // every handshake.
    certified
        .keys_match()
        .map_err(|e| invalid(&key_path, format!("does not match {CERT_FILE}: {e}")))?;
    Ok((bytes, Arc::new(certified)))
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
/// Verdicts kept at once; beyond it (only a flood of distinct tokens gets there) a verdict is
/// given without being kept.
pub const MAX_VERDICTS: usize = 4096;
/// Reviews sent to the API server: at most this many at once, refilled at
/// [`REVIEWS_PER_SECOND`]. A request that would need more is answered 429. Each review is a
/// TokenReview and, for an accepted token, a SubjectAccessReview.
pub const REVIEW_BURST: f64 = 20.0;
pub const REVIEWS_PER_SECOND: f64 = 5.0;

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

/// Recent verdicts by a SHA-256 digest of the token and the request (the token itself is never
/// kept), and what is left of the review budget.
#[derive(Debug)]
struct Verdicts {
    recent: std::collections::HashMap<[u8; 32], (Instant, SharedVerdict)>,
    budget: f64,
    refilled: Instant,
}

impl Verdicts {
    fn new() -> Self {
        Verdicts {
            recent: Default::default(),
            budget: REVIEW_BURST,
            refilled: Instant::now(),
        }
    }

    /// The shared verdict for `key`, a new one when none is recent.
    fn entry(&mut self, key: [u8; 32], now: Instant) -> SharedVerdict {
        if let Some((at, verdict)) = self.recent.get(&key)
            && now.duration_since(*at) < VERDICT_TTL
        {
            return verdict.clone();
        }
        let verdict = SharedVerdict::default();
        if self.recent.len() >= MAX_VERDICTS {
            self.recent
                .retain(|_, (at, _)| now.duration_since(*at) < VERDICT_TTL);
        }
        if self.recent.len() < MAX_VERDICTS {
            self.recent.insert(key, (now, verdict.clone()));
        }
        verdict
    }

    /// Takes one review from the budget, if any is left.
    fn spend(&mut self, now: Instant) -> bool {
        let elapsed = now.duration_since(self.refilled).as_secs_f64();
        self.budget = (self.budget + elapsed * REVIEWS_PER_SECOND).min(REVIEW_BURST);
        self.refilled = now;
        if self.budget < 1.0 {
            return false;
        }
        self.budget -= 1.0;
        true
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
/// the answer briefly and within a budget of reviews.
#[derive(Clone)]
pub struct Reviewer {
    client: Client,
    verdicts: Arc<Mutex<Verdicts>>,
}

impl Reviewer {
    pub fn new(client: Client) -> Self {
        Reviewer {
            client,
            verdicts: Arc::new(Mutex::new(Verdicts::new())),
        }
    }

    /// `authorization` is the request's `Authorization` header, if any.
    pub async fn review(
        &self,
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
        let shared = self
            .lock()
            .entry(verdict_key(token, verb, path), Instant::now());
        // A failed review leaves the cell empty: the next request asks again.
        let verdict = shared
            .get_or_try_init(|| async {
                if !self.lock().spend(Instant::now()) {
                    return Err(ReviewError::TooMany);
                }
                self.review_now(token, verb, path).await
            })
            .await?;
        Ok(verdict.clone())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Verdicts> {
        self.verdicts
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
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

    #[test]
    fn a_verdict_is_shared_for_its_lifetime_then_asked_again() {
        let mut verdicts = Verdicts::new();
        let start = Instant::now();
        let key = verdict_key("garbage", "GET", "/metrics");
        let first = verdicts.entry(key, start);
        let again = verdicts.entry(key, start + VERDICT_TTL - Duration::from_millis(1));
        assert!(Arc::ptr_eq(&first, &again));
        let other = verdicts.entry(verdict_key("garbage", "HEAD", "/metrics"), start);
        assert!(
            !Arc::ptr_eq(&first, &other),
            "another request, another verdict"
        );
        let later = verdicts.entry(key, start + VERDICT_TTL);
        assert!(!Arc::ptr_eq(&first, &later), "kept past its lifetime");
    }

    #[test]
    fn distinct_tokens_beyond_the_limit_are_answered_but_not_kept() {
        let mut verdicts = Verdicts::new();
        let now = Instant::now();
        for i in 0..MAX_VERDICTS + 10 {
            verdicts.entry(verdict_key(&format!("t{i}"), "GET", "/metrics"), now);
        }
        assert_eq!(verdicts.recent.len(), MAX_VERDICTS);
        // Once they expire, room is made again.
        verdicts.entry(verdict_key("new", "GET", "/metrics"), now + VERDICT_TTL);
        assert_eq!(verdicts.recent.len(), 1);
    }

    #[test]
    fn the_review_budget_refills_at_its_rate() {
        let mut verdicts = Verdicts::new();
        let now = verdicts.refilled;
        let spent = (0..100).filter(|_| verdicts.spend(now)).count();
        assert_eq!(spent as f64, REVIEW_BURST);
        assert!(verdicts.spend(now + Duration::from_secs_f64(1.0 / REVIEWS_PER_SECOND)));
        assert!(!verdicts.spend(now + Duration::from_secs_f64(1.0 / REVIEWS_PER_SECOND)));
    }
}
