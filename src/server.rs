//! The HTTP endpoints: `/metrics` on the metrics address, `/healthz` and `/readyz` on the probe
//! address (or all of them on one address when both flags name it).

use std::convert::Infallible;
use std::net::SocketAddr;
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
use tracing::{debug, info};

use crate::metrics::Metrics;

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

/// Binds now (so a port conflict fails start-up) and serves until `shutdown`.
pub async fn serve(
    addr: SocketAddr,
    endpoints: Endpoints,
    metrics: Metrics,
    health: Arc<Health>,
    shutdown: CancellationToken,
) -> std::io::Result<tokio::task::JoinHandle<()>> {
    let listener = TcpListener::bind(addr).await?;
    info!(address = %listener.local_addr()?, metrics = endpoints.metrics, probes = endpoints.probes, "serving HTTP");
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
            tokio::spawn(async move {
                let service =
                    service_fn(move |req| respond(req, endpoints, metrics.clone(), health.clone()));
                if let Err(e) = http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await
                {
                    debug!(error = %e, "connection ended with an error");
                }
            });
        }
    }))
}

async fn respond(
    req: Request<Incoming>,
    endpoints: Endpoints,
    metrics: Metrics,
    health: Arc<Health>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let (status, body, content_type) = match req.uri().path() {
        "/metrics" if endpoints.metrics => (
            StatusCode::OK,
            metrics.render(),
            "text/plain; version=0.0.4",
        ),
        "/healthz" | "/livez" if endpoints.probes => {
            (StatusCode::OK, "ok\n".to_string(), "text/plain")
        }
        "/readyz" if endpoints.probes && health.ready() => {
            (StatusCode::OK, "ok\n".to_string(), "text/plain")
        }
        "/readyz" if endpoints.probes => (
            StatusCode::SERVICE_UNAVAILABLE,
            "not ready: caches not synced or shutting down\n".to_string(),
            "text/plain",
        ),
        _ => (
            StatusCode::NOT_FOUND,
            "not found\n".to_string(),
            "text/plain",
        ),
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
