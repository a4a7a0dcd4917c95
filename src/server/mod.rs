//! The HTTP endpoints: `/metrics` on the metrics address, `/healthz` and `/readyz` on the probe
//! address (or all of them on one address when both flags name it, without `--metrics-secure`).
//!
//! Probes stay plain HTTP: the kubelet neither verifies certificates nor sends tokens.

pub mod secure;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::metrics::Metrics;
use secure::{ReloadingCertificate, Reviewer, Verdict};

#[derive(clap::Args, Clone, Debug)]
pub struct MetricsServerArgs {
    /// Serve /metrics over HTTPS, only to clients whose bearer token the API server accepts
    /// (TokenReview) and allows `get` on the non-resource URL /metrics (SubjectAccessReview).
    /// Without it /metrics is plain HTTP for anyone: for local runs only.
    #[arg(long, env = "BIC_METRICS_SECURE", default_value_t = false)]
    pub metrics_secure: bool,

    /// Folder holding tls.crt and tls.key for --metrics-secure (OpenShift's service-CA serving
    /// certificate Secret, mounted); the files are re-read when they change.
    #[arg(
        long,
        env = "BIC_METRICS_CERT_DIR",
        value_name = "DIR",
        default_value = "/etc/boot-image-controller/metrics-tls"
    )]
    pub metrics_cert_dir: PathBuf,
}

/// TLS and client checks for the metrics listener.
#[derive(Clone)]
pub struct Security {
    acceptor: tokio_rustls::TlsAcceptor,
    reviewer: Reviewer,
}

impl Security {
    /// `None` when `--metrics-secure` is off. Reads the certificate now and watches it until
    /// `shutdown`.
    pub fn from_args(
        args: &MetricsServerArgs,
        client: &kube::Client,
        shutdown: &CancellationToken,
    ) -> Result<Option<Security>, secure::TlsError> {
        if !args.metrics_secure {
            return Ok(None);
        }
        let certificate = ReloadingCertificate::load(&args.metrics_cert_dir)?;
        certificate.watch(shutdown.clone());
        Ok(Some(Security {
            acceptor: secure::acceptor(certificate),
            reviewer: Reviewer::new(client.clone()),
        }))
    }
}

/// What the probes report.
#[derive(Debug, Default)]
pub struct Health {
    /// Every watch delivered its first complete state.
    synced: AtomicBool,
    /// Shutdown started: stop receiving traffic before the process goes away.
    stopping: AtomicBool,
}

impl Health {
    pub fn set_synced(&self) {
        self.synced.store(true, Ordering::SeqCst);
    }

    pub fn set_stopping(&self) {
        self.stopping.store(true, Ordering::SeqCst);
    }

    pub fn ready(&self) -> bool {
        self.synced.load(Ordering::SeqCst) && !self.stopping.load(Ordering::SeqCst)
    }
}

/// Which paths a listener serves.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Endpoints {
    pub metrics: bool,
    pub probes: bool,
}

impl Endpoints {
    pub const METRICS: Endpoints = Endpoints {
        metrics: true,
        probes: false,
    };
    pub const PROBES: Endpoints = Endpoints {
        metrics: false,
        probes: true,
    };
}

impl std::ops::BitOrAssign for Endpoints {
    fn bitor_assign(&mut self, other: Endpoints) {
        self.metrics |= other.metrics;
        self.probes |= other.probes;
    }
}

/// Parses kubebuilder-style addresses: `:8080` means every interface, `0` disables.
pub fn parse_bind_address(addr: &str) -> Result<Option<SocketAddr>, std::net::AddrParseError> {
    match addr {
        "0" | "" => Ok(None),
        a if a.starts_with(':') => format!("0.0.0.0{a}").parse().map(Some),
        a => a.parse().map(Some),
    }
}

/// Binds now (so a port conflict fails start-up) and serves until `shutdown`. With `security`,
/// the listener speaks TLS and checks every /metrics client; it must then not serve the probes.
pub async fn serve(
    addr: SocketAddr,
    endpoints: Endpoints,
    metrics: Metrics,
    health: Arc<Health>,
    shutdown: CancellationToken,
    security: Option<Security>,
) -> std::io::Result<tokio::task::JoinHandle<()>> {
    let security = security.filter(|_| endpoints.metrics);
    if security.is_some() && endpoints.probes {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "with --metrics-secure the probes need an address of their own: the kubelet probes \
             over plain HTTP",
        ));
    }
    let listener = TcpListener::bind(addr).await?;
    info!(address = %listener.local_addr()?, metrics = endpoints.metrics, probes = endpoints.probes, tls = security.is_some(), "serving HTTP");
    Ok(tokio::spawn(async move {
        loop {
            let (stream, _) = tokio::select! {
                _ = shutdown.cancelled() => return,
                accepted = listener.accept() => match accepted {
                    Ok(conn) => conn,
                    Err(e) => { debug!(error = %e, "accept failed"); continue; }
                },
            };
            let metrics = metrics.clone();
            let health = health.clone();
            let security = security.clone();
            tokio::spawn(async move {
                let reviewer = security.as_ref().map(|s| s.reviewer.clone());
                let service = service_fn(move |req| {
                    respond(
                        req,
                        endpoints,
                        metrics.clone(),
                        health.clone(),
                        reviewer.clone(),
                    )
                });
                let served = match security {
                    Some(security) => match security.acceptor.accept(stream).await {
                        Ok(tls) => {
                            http1::Builder::new()
                                .serve_connection(TokioIo::new(tls), service)
                                .await
                        }
                        Err(e) => {
                            debug!(error = %e, "TLS handshake failed");
                            return;
                        }
                    },
                    None => {
                        http1::Builder::new()
                            .serve_connection(TokioIo::new(stream), service)
                            .await
                    }
                };
                if let Err(e) = served {
                    debug!(error = %e, "connection ended with an error");
                }
            });
        }
    }))
}

fn text(status: StatusCode, body: &str) -> (StatusCode, String, &'static str) {
    (status, body.to_string(), "text/plain")
}

async fn respond(
    req: Request<Incoming>,
    endpoints: Endpoints,
    metrics: Metrics,
    health: Arc<Health>,
    reviewer: Option<Reviewer>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let (status, body, content_type) = match req.uri().path() {
        "/metrics" if endpoints.metrics => match reviewer {
            None => (
                StatusCode::OK,
                metrics.render(),
                "text/plain; version=0.0.4",
            ),
            Some(reviewer) => {
                let authorization = req
                    .headers()
                    .get(hyper::header::AUTHORIZATION)
                    .and_then(|v| v.to_str().ok());
                match reviewer
                    .review(authorization, req.method().as_str(), "/metrics")
                    .await
                {
                    Ok(Verdict::Allowed) => (
                        StatusCode::OK,
                        metrics.render(),
                        "text/plain; version=0.0.4",
                    ),
                    Ok(Verdict::Unauthenticated) => {
                        text(StatusCode::UNAUTHORIZED, "Unauthorized\n")
                    }
                    Ok(Verdict::Forbidden(user)) => {
                        debug!(user, "refused a metrics client without get on /metrics");
                        text(StatusCode::FORBIDDEN, "Forbidden\n")
                    }
                    Err(e) => {
                        warn!(error = %e, "cannot review a metrics client's token");
                        text(
                            StatusCode::INTERNAL_SERVER_ERROR,
                            "cannot check the client's credentials\n",
                        )
                    }
                }
            }
        },
        "/healthz" | "/livez" if endpoints.probes => text(StatusCode::OK, "ok\n"),
        "/readyz" if endpoints.probes && health.ready() => text(StatusCode::OK, "ok\n"),
        "/readyz" if endpoints.probes => text(
            StatusCode::SERVICE_UNAVAILABLE,
            "not ready: caches not synced or shutting down\n",
        ),
        _ => text(StatusCode::NOT_FOUND, "not found\n"),
    };
    Ok(Response::builder()
        .status(status)
        .header("content-type", content_type)
        .body(Full::new(Bytes::from(body)))
        .expect("static response parts are valid"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bind_addresses() {
        assert_eq!(
            parse_bind_address(":8080").unwrap(),
            Some("0.0.0.0:8080".parse().unwrap())
        );
        assert_eq!(
            parse_bind_address("127.0.0.1:9").unwrap(),
            Some("127.0.0.1:9".parse().unwrap())
        );
        assert_eq!(parse_bind_address("0").unwrap(), None);
        assert!(parse_bind_address("nope").is_err());
    }

    #[test]
    fn readiness_needs_sync_and_turns_off_on_shutdown() {
        let h = Health::default();
        assert!(!h.ready());
        h.set_synced();
        assert!(h.ready());
        h.set_stopping();
        assert!(!h.ready());
    }
}
