//! The connector of every outbound call that is not to the API server (EC2, vCenter, the OVA
//! download): through the cluster's proxy unless `NO_PROXY` names the destination ([`proxy`]),
//! trusting the system's CA roots, the cluster's trusted CA bundle (re-read when it changes) and
//! a service's own extra roots. Built from what kube already builds (hyper-util's client and its
//! CONNECT tunnel, hyper-rustls, ring); and the helpers their retries share.

pub mod proxy;

use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime};

use hyper::Uri;
use hyper_rustls::{HttpsConnector, MaybeHttpsStream};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::connect::proxy::Tunnel;
use hyper_util::rt::TokioIo;
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject as _;

pub use proxy::Proxies;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Where outbound calls go and what they trust besides the system's CA roots.
#[derive(Clone, Debug, Default)]
pub struct Egress {
    pub proxies: Proxies,
    /// The cluster's trusted CA bundle (`--trusted-ca-bundle`): read again when it changes; a
    /// missing file adds nothing.
    pub ca_bundle: Option<PathBuf>,
}

impl Egress {
    /// The proxy of this process's environment, as OLM injects it, and the bundle at `ca_bundle`.
    pub fn from_env(ca_bundle: Option<PathBuf>) -> Egress {
        Egress {
            proxies: Proxies::from_env(),
            ca_bundle,
        }
    }
}

/// A proxy refused or dropped the tunnel to a destination; names the proxy, never its
/// credentials.
#[derive(Debug, thiserror::Error)]
#[error("the proxy {proxy} {what}")]
pub struct ProxyError {
    pub proxy: String,
    pub what: String,
}

/// HTTPS, or plain HTTP (a local simulator), for outbound calls: connecting bounded by
/// `connect_timeout`; `service` names the API in the warning given when no CA roots exist.
pub fn connector(
    connect_timeout: Duration,
    service: &str,
    extra_roots: &[CertificateDer<'static>],
    egress: &Egress,
) -> Result<Connector, rustls::Error> {
    let mut http = HttpConnector::new();
    http.set_connect_timeout(Some(connect_timeout));
    http.enforce_http(false);
    let trust = Trust {
        service: service.to_string(),
        extra: extra_roots.to_vec(),
        bundle: egress.ca_bundle.clone(),
        current: Mutex::new(None),
    };
    trust.config()?;
    Ok(Connector {
        http,
        proxies: Arc::new(egress.proxies.clone()),
        trust: Arc::new(trust),
    })
}

/// See [`connector`].
#[derive(Clone)]
pub struct Connector {
    http: HttpConnector,
    proxies: Arc<Proxies>,
    trust: Arc<Trust>,
}

impl tower_service::Service<Uri> for Connector {
    type Response = MaybeHttpsStream<TokioIo<tokio::net::TcpStream>>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, dst: Uri) -> Self::Future {
        // Each new connection checks the bundle, so a long-lived client (EC2's) trusts a
        // rotated bundle from its next connection on, without a restart.
        let tls = match self.trust.config() {
            Ok(tls) => tls,
            Err(e) => return Box::pin(async move { Err(e.into()) }),
        };
        let Some(proxy) = self.proxies.for_uri(&dst).cloned() else {
            return Box::pin(HttpsConnector::from((self.http.clone(), tls)).call(dst));
        };
        if proxy.uri.scheme_str() != Some("http") {
            let error = ProxyError {
                proxy: proxy.to_string(),
                what: "is not supported: only http:// proxies are".into(),
            };
            return Box::pin(async move { Err(error.into()) });
        }
        // CONNECT for both schemes: one path, and the credentials go to the proxy only, never
        // in a request a destination could see. (Go forwards plain-HTTP requests instead; our
        // only plain-HTTP destinations are simulators and mirrors, usually in NO_PROXY.)
        let mut tunnel = Tunnel::new(proxy.uri.clone(), self.http.clone());
        if let Some(authorization) = &proxy.authorization {
            tunnel = tunnel.with_auth(authorization.clone());
        }
        let connecting = HttpsConnector::from((tunnel, tls)).call(with_port(dst));
        Box::pin(async move {
            connecting.await.map_err(|e| {
                // hyper-util's TunnelError is not public: its messages tell the cases apart.
                let message = error_chain(&*e);
                let what = if message.contains("proxy authorization required") {
                    "asks for credentials (HTTP 407): give them in the proxy URL (user:password@)"
                        .to_string()
                } else if message.contains("unexpected end of file") {
                    "closed the connection instead of opening a tunnel".to_string()
                } else if message.contains("io error establishing tunnel") {
                    format!("broke off the connection instead of opening a tunnel: {message}")
                } else if message.contains("tunnel error: unsuccessful") {
                    "refused to open a tunnel (CONNECT answered with an error)".to_string()
                } else if message.contains("tunnel error") {
                    format!("cannot be reached: {message}")
                } else {
                    // Past the proxy: the destination's own TLS, say.
                    return e;
                };
                ProxyError {
                    proxy: proxy.to_string(),
                    what,
                }
                .into()
            })
        })
    }
}

/// `dst` with its port written out: hyper-util's tunnel assumes 443 otherwise.
fn with_port(dst: Uri) -> Uri {
    if dst.port().is_some() {
        return dst;
    }
    let port = if dst.scheme_str() == Some("http") {
        80
    } else {
        443
    };
    let mut parts = dst.clone().into_parts();
    parts.authority = (dst.host()).and_then(|h| format!("{h}:{port}").parse().ok());
    Uri::from_parts(parts).unwrap_or(dst)
}

/// What a connector trusts: built again only when the bundle file changes.
struct Trust {
    service: String,
    extra: Vec<CertificateDer<'static>>,
    bundle: Option<PathBuf>,
    current: Mutex<Option<(Option<Stamp>, Arc<rustls::ClientConfig>)>>,
}

/// What tells a changed file: the kubelet replaces a ConfigMap's files (new inode and mtime).
type Stamp = (SystemTime, u64);

fn stamp(path: &Path) -> Option<Stamp> {
    let meta = std::fs::metadata(path).ok()?;
    Some((meta.modified().ok()?, meta.len()))
}

impl Trust {
    fn config(&self) -> Result<Arc<rustls::ClientConfig>, rustls::Error> {
        let stamp = self.bundle.as_deref().and_then(stamp);
        let mut current = self.current.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((seen, config)) = current.as_ref()
            && *seen == stamp
        {
            return Ok(config.clone());
        }
        let config = Arc::new(self.build()?);
        *current = Some((stamp, config.clone()));
        Ok(config)
    }

    fn build(&self) -> Result<rustls::ClientConfig, rustls::Error> {
        // The crypto provider the rest of the program (kube, the metrics server) uses: no second
        // one is built (deny.toml).
        let builder = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()?;
        let mut roots = rustls::RootCertStore::empty();
        let native = rustls_native_certs::load_native_certs();
        let (added, _) = roots.add_parsable_certificates(native.certs);
        let bundle = self.bundle.as_deref().map(read_bundle).unwrap_or_default();
        // Not fatal: most clusters never call this API, and where they do every call then fails
        // with a certificate error that is reported like any other.
        if added == 0 && self.extra.is_empty() && bundle.is_empty() {
            let errors: Vec<String> = native.errors.iter().map(ToString::to_string).collect();
            let service = &self.service;
            tracing::warn!(errors = ?errors, service, "no system CA certificates: {service} cannot be verified");
        }
        roots.add_parsable_certificates(bundle);
        roots.add_parsable_certificates(self.extra.iter().cloned());
        Ok(builder.with_root_certificates(roots).with_no_client_auth())
    }
}

/// The certificates of the cluster's trusted CA bundle; none while the network operator has not
/// filled it (the file is then absent), and a warning for one that cannot be read.
fn read_bundle(path: &Path) -> Vec<CertificateDer<'static>> {
    if !path.exists() {
        tracing::debug!(path = %path.display(), "no trusted CA bundle (yet)");
        return Vec::new();
    }
    let certificates =
        CertificateDer::pem_file_iter(path).and_then(|certs| certs.collect::<Result<Vec<_>, _>>());
    match certificates {
        Ok(certificates) => {
            tracing::info!(path = %path.display(), certificates = certificates.len(), "read the trusted CA bundle");
            certificates
        }
        Err(error) => {
            tracing::warn!(path = %path.display(), error = %error, "the trusted CA bundle cannot be read; trusting the other roots only");
            Vec::new()
        }
    }
}

/// Between half and all of `d`, so that replicas failing together do not retry together.
pub fn jittered(d: Duration) -> Duration {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|t| t.subsec_nanos())
        .unwrap_or_default();
    d.mul_f64(0.5 + f64::from(nanos % 1000) / 2000.0)
}

/// An error and all its sources, as one line.
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let chain = std::iter::successors(Some(e), |e| e.source());
    chain
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(": ")
}
