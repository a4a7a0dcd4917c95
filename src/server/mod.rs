//! The HTTP endpoints: `/metrics` on the metrics address, `/healthz` and `/readyz` on the probe
//! address (or all of them on one address when both flags name it, without `--metrics-secure`).
//!
//! Probes stay plain HTTP: the kubelet neither verifies certificates nor sends tokens.

pub mod connections;
pub mod secure;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::metrics::Metrics;
use connections::Connections;
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
#[derive(Debug)]
pub struct Health {
    /// Every watch delivered its first complete state.
    synced: AtomicBool,
    /// Shutdown started: stop receiving traffic before the process goes away.
    stopping: AtomicBool,
    started: std::time::Instant,
    /// When the reconcile loop last went round, in milliseconds since `started`.
    progress_ms: std::sync::atomic::AtomicU64,
    /// Without progress for this long the process counts as stuck: /healthz fails, and the
    /// kubelet restarts it.
    stall_limit: Duration,
}

impl Health {
    pub fn new(stall_limit: Duration) -> Self {
        Health {
            synced: AtomicBool::new(false),
            stopping: AtomicBool::new(false),
            started: std::time::Instant::now(),
            progress_ms: std::sync::atomic::AtomicU64::new(0),
            stall_limit,
        }
    }

    pub fn set_synced(&self) {
        self.synced.store(true, Ordering::SeqCst);
    }

    pub fn set_stopping(&self) {
        self.stopping.store(true, Ordering::SeqCst);
    }

    pub fn ready(&self) -> bool {
        self.synced.load(Ordering::SeqCst) && !self.stopping.load(Ordering::SeqCst)
    }

    /// The reconcile loop went round (a pass, or a wake-up with nothing to do).
    pub fn record_progress(&self) {
        let now = self.started.elapsed().as_millis() as u64;
        self.progress_ms.store(now, Ordering::SeqCst);
    }

    /// How long the loop has not gone round at `now`, when that is longer than the limit.
    fn stalled(&self, now: std::time::Instant) -> Option<Duration> {
        let last = self.started + Duration::from_millis(self.progress_ms.load(Ordering::SeqCst));
        let idle = now.saturating_duration_since(last);
        (idle > self.stall_limit).then_some(idle)
    }
}

/// Parses kubebuilder-style addresses: `:8080` means every interface, IPv6 and IPv4 alike (so
/// probes work on single-stack IPv6 clusters too), `0` disables.
pub fn parse_bind_address(addr: &str) -> Result<Option<SocketAddr>, std::net::AddrParseError> {
    match addr {
        "0" | "" => Ok(None),
        a if a.starts_with(':') => format!("[::]{a}").parse().map(Some),
        a => a.parse().map(Some),
    }
}

/// How much a client may hold of the process. The pod's memory limit is small and both replicas
/// serve the same ports: without these, any pod that can reach them can exhaust that memory with
/// requests it never finishes sending (slowloris).
#[derive(Clone, Copy, Debug)]
pub struct ConnectionLimits {
    /// Connections served at once per listener. A new connection is always served: when there is
    /// no room, the oldest connection of the peer holding the most is closed (see
    /// [`connections`]), so nobody can fill a listener and keep the others out.
    pub max_connections: usize,
    /// Connections served at once per peer (an IPv4 address or an IPv6 /64); a peer's next one
    /// closes its own oldest.
    pub max_connections_per_peer: usize,
    /// A request's headers must arrive within this, from its first byte.
    pub header_read_timeout: Duration,
    /// The TLS handshake must complete within this.
    pub handshake_timeout: Duration,
    /// Bytes hyper buffers per connection, which bounds the size of a request's headers.
    pub max_buffer_bytes: usize,
    /// A kept-alive connection is closed gracefully after this, so none is held forever.
    pub max_connection_age: Duration,
}

impl Default for ConnectionLimits {
    fn default() -> Self {
        ConnectionLimits {
            max_connections: 64,
            // Prometheus keeps one connection per target, the kubelet opens one per probe.
            max_connections_per_peer: 8,
            header_read_timeout: Duration::from_secs(5),
            handshake_timeout: Duration::from_secs(5),
            // hyper's floor (it refuses less); a scrape or probe request is a few hundred bytes.
            max_buffer_bytes: 8192,
            max_connection_age: Duration::from_secs(120),
        }
    }
}

/// Binds a listener; the unspecified IPv6 address also accepts IPv4 (dual stack), falling back to
/// IPv4 alone on a host without IPv6.
pub fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    use socket2::{Domain, Protocol, Socket, Type};
    let dual_stack = addr.ip() == std::net::Ipv6Addr::UNSPECIFIED;
    let socket = match Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP)) {
        Ok(socket) => socket,
        Err(e) if dual_stack => {
            let v4 = SocketAddr::from((std::net::Ipv4Addr::UNSPECIFIED, addr.port()));
            info!(address = %v4, error = %e, "no IPv6 socket on this host: listening on IPv4 only");
            return bind(v4);
        }
        Err(e) => return Err(e),
    };
    if dual_stack {
        socket.set_only_v6(false)?;
    }
    socket.set_reuse_address(true)?;
    socket.set_nonblocking(true)?;
    socket.bind(&addr.into())?;
    socket.listen(1024)?;
    TcpListener::from_std(socket.into())
}

/// What one listener serves, shared by its connections.
#[derive(Clone)]
pub struct Site {
    /// `/metrics`.
    pub serves_metrics: bool,
    /// `/healthz`, `/livez` and `/readyz`.
    pub serves_probes: bool,
    pub metrics: Metrics,
    pub health: Arc<Health>,
    pub security: Option<Security>,
    pub limits: ConnectionLimits,
}

/// Binds now (so a port conflict fails start-up) and serves until `shutdown`. With `security`,
/// the listener speaks TLS and checks every /metrics client; it must then not serve the probes.
pub async fn serve(
    addr: SocketAddr,
    mut site: Site,
    shutdown: CancellationToken,
) -> std::io::Result<tokio::task::JoinHandle<()>> {
    site.security = site.security.filter(|_| site.serves_metrics);
    if site.security.is_some() && site.serves_probes {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "with --metrics-secure the probes need an address of their own: the kubelet probes \
             over plain HTTP",
        ));
    }
    let listener = bind(addr)?;
    let connections = Arc::new(Connections::default());
    info!(address = %listener.local_addr()?, metrics = site.serves_metrics, probes = site.serves_probes, tls = site.security.is_some(), "serving HTTP");
    let site = Arc::new(site);
    Ok(tokio::spawn(async move {
        loop {
            let (stream, peer) = tokio::select! {
                _ = shutdown.cancelled() => return,
                accepted = listener.accept() => match accepted {
                    Ok(conn) => conn,
                    Err(e) => { debug!(error = %e, "accept failed"); continue; }
                },
            };
            let limits = &site.limits;
            let slot = connections.admit(
                peer.ip(),
                limits.max_connections,
                limits.max_connections_per_peer,
            );
            let site = site.clone();
            tokio::spawn(async move {
                let evicted = slot.evicted.clone();
                tokio::select! {
                    _ = serve_peer(stream, peer.ip(), site) => {}
                    _ = evicted.cancelled() => {
                        debug!(%peer, "closing a connection to make room for a newer one");
                    }
                }
                drop(slot);
            });
        }
    }))
}

/// Serves one accepted connection until it ends.
async fn serve_peer(stream: tokio::net::TcpStream, peer: std::net::IpAddr, site: Arc<Site>) {
    let limits = site.limits;
    let acceptor = site.security.as_ref().map(|s| s.acceptor.clone());
    let service = service_fn(move |req| respond(req, peer, site.clone()));
    let served = match acceptor {
        Some(acceptor) => {
            let handshake = tokio::time::timeout(limits.handshake_timeout, acceptor.accept(stream));
            match handshake.await {
                Ok(Ok(tls)) => serve_connection(tls, service, limits).await,
                Ok(Err(e)) => {
                    debug!(error = %e, "TLS handshake failed");
                    return;
                }
                Err(_) => {
                    debug!("TLS handshake timed out");
                    return;
                }
            }
        }
        None => serve_connection(stream, service, limits).await,
    };
    if let Err(e) = served {
        debug!(error = %e, "connection ended with an error");
    }
}

/// Serves HTTP/1 on one connection within `limits`.
async fn serve_connection<I, S>(
    io: I,
    service: S,
    limits: ConnectionLimits,
) -> Result<(), hyper::Error>
where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    S: hyper::service::HttpService<Incoming, ResBody = Full<Bytes>>,
    S::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let connection = http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout)
        .max_buf_size(limits.max_buffer_bytes)
        .serve_connection(TokioIo::new(io), service);
    let mut connection = std::pin::pin!(connection);
    tokio::select! {
        served = connection.as_mut() => served,
        _ = tokio::time::sleep(limits.max_connection_age) => {
            // Let a request in flight finish; a client that stops reading its response is cut off.
            connection.as_mut().graceful_shutdown();
            tokio::time::timeout(limits.header_read_timeout, connection)
                .await
                .unwrap_or(Ok(()))
        }
    }
}

async fn respond(
    req: Request<Incoming>,
    peer: std::net::IpAddr,
    site: Arc<Site>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let (health, probes) = (&site.health, site.serves_probes);
    Ok(match req.uri().path() {
        "/metrics" if site.serves_metrics => {
            serve_metrics(req.headers(), req.method().as_str(), peer, &site).await
        }
        "/healthz" | "/livez" if probes => match health.stalled(std::time::Instant::now()) {
            None => text(StatusCode::OK, "ok\n"),
            Some(idle) => text(
                StatusCode::SERVICE_UNAVAILABLE,
                format!(
                    "stuck: the reconcile loop has not gone round for {}s\n",
                    idle.as_secs()
                ),
            ),
        },
        "/readyz" if probes && health.ready() => text(StatusCode::OK, "ok\n"),
        "/readyz" if probes => text(
            StatusCode::SERVICE_UNAVAILABLE,
            "not ready: caches not synced or shutting down\n",
        ),
        _ => text(StatusCode::NOT_FOUND, "not found\n"),
    })
}

/// Prometheus's text exposition format.
const EXPOSITION_FORMAT: &str = "text/plain; version=0.0.4";

/// `/metrics`: to every client without a reviewer, else to those whose token may get it.
async fn serve_metrics(
    headers: &hyper::HeaderMap,
    method: &str,
    peer: std::net::IpAddr,
    site: &Site,
) -> Response<Full<Bytes>> {
    let exposition = || response(StatusCode::OK, site.metrics.render(), EXPOSITION_FORMAT);
    let Some(Security { reviewer, .. }) = &site.security else {
        return exposition();
    };
    let authorization = headers
        .get(hyper::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    let review = reviewer.review(peer, authorization, method, "/metrics");
    match review.await {
        Ok(Verdict::Allowed) => exposition(),
        Ok(Verdict::Unauthenticated) => text(StatusCode::UNAUTHORIZED, "Unauthorized\n"),
        Ok(Verdict::Forbidden(user)) => {
            debug!(user, "refused a metrics client without get on /metrics");
            text(StatusCode::FORBIDDEN, "Forbidden\n")
        }
        Err(secure::ReviewError::TooMany) => {
            debug!("refused a metrics client: the review budget is spent");
            let body = "too many credential checks: retry in a second\n";
            let mut refused = text(StatusCode::TOO_MANY_REQUESTS, body);
            let retry_after = hyper::header::HeaderValue::from_static("1");
            refused
                .headers_mut()
                .insert(hyper::header::RETRY_AFTER, retry_after);
            refused
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

fn text(status: StatusCode, body: impl Into<Bytes>) -> Response<Full<Bytes>> {
    response(status, body, "text/plain")
}

fn response(
    status: StatusCode,
    body: impl Into<Bytes>,
    content_type: &str,
) -> Response<Full<Bytes>> {
    Response::builder()
        .status(status)
        .header("content-type", content_type)
        .body(Full::new(body.into()))
        .expect("static response parts are valid")
}

#[cfg(test)]
mod tests {
    use super::*;

    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpStream;

    impl Default for Health {
        fn default() -> Self {
            Health::new(Duration::from_secs(3600))
        }
    }

    #[test]
    fn bind_addresses() {
        assert_eq!(
            parse_bind_address(":8080").unwrap(),
            Some("[::]:8080".parse().unwrap())
        );
        assert_eq!(
            parse_bind_address("127.0.0.1:9").unwrap(),
            Some("127.0.0.1:9".parse().unwrap())
        );
        assert_eq!(parse_bind_address("0").unwrap(), None);
        assert!(parse_bind_address("nope").is_err());
    }

    // Judged at chosen instants, not after sleeps: a loaded machine must not make it flaky.
    #[test]
    fn liveness_fails_once_the_loop_stalls_past_the_limit() {
        let limit = Duration::from_secs(60);
        let h = Health::new(limit);
        h.record_progress();
        let recorded = std::time::Instant::now();
        assert_eq!(h.stalled(recorded), None);
        assert_eq!(h.stalled(recorded + limit - Duration::from_secs(1)), None);
        let later = recorded + limit + Duration::from_secs(1);
        assert!(h.stalled(later).is_some_and(|idle| idle > limit));
        h.record_progress();
        assert_eq!(h.stalled(std::time::Instant::now()), None);
    }

    #[tokio::test]
    async fn healthz_reports_a_stalled_loop() {
        // No progress allowed at all: stalled from the first instant, whatever the timing.
        let health = Arc::new(Health::new(Duration::ZERO));
        let limits = ConnectionLimits::default();
        let (addr, shutdown) = server_on("127.0.0.1", false, health.clone(), None, limits).await;
        health.record_progress();
        assert!(get(addr, "/healthz").await.contains(" 503 "));
        shutdown.cancel();
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

    /// A probe listener on a free port of `ip`, with `limits`, until the token is cancelled.
    async fn probe_server(ip: &str, limits: ConnectionLimits) -> (SocketAddr, CancellationToken) {
        let health = Arc::new(Health::default());
        server_on(ip, false, health, None, limits).await
    }

    /// A listener serving /metrics (`metrics`) or else the probes on a free port of `ip`, until
    /// the token is cancelled.
    async fn server_on(
        ip: &str,
        metrics: bool,
        health: Arc<Health>,
        tls: Option<Security>,
        limits: ConnectionLimits,
    ) -> (SocketAddr, CancellationToken) {
        let free = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
        let port = free.local_addr().expect("local address").port();
        drop(free);
        let addr: SocketAddr = format!("{ip}:{port}").parse().expect("address");
        let shutdown = CancellationToken::new();
        let site = Site {
            serves_metrics: metrics,
            serves_probes: !metrics,
            metrics: Metrics::new(),
            health,
            security: tls,
            limits,
        };
        serve(addr, site, shutdown.clone()).await.expect("serve");
        (addr, shutdown)
    }

    /// The status line of `GET path` on a new connection to `addr`.
    async fn get(addr: SocketAddr, path: &str) -> String {
        let mut stream = TcpStream::connect(addr).await.expect("connect");
        let request = format!("GET {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n");
        stream.write_all(request.as_bytes()).await.expect("send");
        let mut response = String::new();
        stream.read_to_string(&mut response).await.expect("read");
        response.lines().next().unwrap_or_default().to_string()
    }

    /// Whether the server closes `stream` (EOF or reset) within `bound`, which only stops a
    /// broken server from hanging the test.
    async fn closed_by_server(stream: &mut TcpStream, bound: Duration) -> bool {
        let mut buf = [0u8; 256];
        loop {
            match tokio::time::timeout(bound, stream.read(&mut buf)).await {
                Err(_) => return false,
                Ok(Ok(0)) | Ok(Err(_)) => return true,
                // A 408 before closing is fine: keep reading until the close.
                Ok(Ok(_)) => continue,
            }
        }
    }

    /// A connection to `addr` from the loopback address `source`: another peer on one host.
    async fn connect_from(source: &str, addr: SocketAddr) -> TcpStream {
        let socket = tokio::net::TcpSocket::new_v4().expect("socket");
        socket
            .bind(format!("{source}:0").parse().expect("source address"))
            .expect("bind the source address");
        socket.connect(addr).await.expect("connect")
    }

    /// The status line of `GET path` from `source`, empty when the server closed without one.
    async fn get_from(source: &str, addr: SocketAddr, path: &str) -> String {
        let mut stream = connect_from(source, addr).await;
        let request = format!("GET {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n");
        let _ = stream.write_all(request.as_bytes()).await;
        let mut response = Vec::new();
        let _ =
            tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut response)).await;
        let response = String::from_utf8_lossy(&response);
        response.lines().next().unwrap_or_default().to_string()
    }

    /// `count` connections from `source` that never send a byte.
    async fn idle_connections(source: &str, addr: SocketAddr, count: usize) -> Vec<TcpStream> {
        let mut idle = Vec::new();
        for _ in 0..count {
            idle.push(connect_from(source, addr).await);
        }
        idle
    }

    /// How long the server took to close `stream`, `None` if not within `bound`.
    async fn time_to_close(stream: &mut TcpStream, bound: Duration) -> Option<Duration> {
        let start = std::time::Instant::now();
        closed_by_server(stream, bound)
            .await
            .then(|| start.elapsed())
    }

    // Well under hyper's own default (30 s), so it holds only if our setting is applied.
    #[tokio::test]
    async fn a_client_that_never_finishes_its_headers_is_disconnected() {
        let limits = ConnectionLimits {
            header_read_timeout: Duration::from_millis(300),
            ..ConnectionLimits::default()
        };
        let (addr, shutdown) = probe_server("127.0.0.1", limits).await;
        let mut slow = TcpStream::connect(addr).await.expect("connect");
        slow.write_all(b"GET /healthz HTTP/1.1\r\nHost: test\r\nX-Slow: 1")
            .await
            .expect("send");
        assert!(
            closed_by_server(&mut slow, Duration::from_secs(3)).await,
            "a half-sent request kept its connection past 3 s with a 300 ms header timeout"
        );
        assert!(get(addr, "/healthz").await.contains(" 200 "));
        shutdown.cancel();
    }

    // The bound the README documents is the default the binary runs with.
    #[tokio::test]
    async fn request_headers_must_arrive_within_the_documented_5_seconds() {
        let (addr, shutdown) = probe_server("127.0.0.1", ConnectionLimits::default()).await;
        let mut slow = TcpStream::connect(addr).await.expect("connect");
        slow.write_all(b"GET /healthz HTTP/1.1\r\nHost: test\r\n")
            .await
            .expect("send");
        let took = time_to_close(&mut slow, Duration::from_secs(9)).await;
        assert!(
            took.is_some_and(|t| t >= Duration::from_secs(4)),
            "half-sent headers closed after {took:?}, documented: 5 s"
        );
        shutdown.cancel();
    }

    /// A TLS acceptor that never gets as far as needing a certificate, and a reviewer for an API
    /// server nobody asks: enough for a client that never says hello.
    fn tls_without_certificate() -> Security {
        #[derive(Debug)]
        struct NoCertificate;
        impl rustls::server::ResolvesServerCert for NoCertificate {
            fn resolve(
                &self,
                _: rustls::server::ClientHello<'_>,
            ) -> Option<Arc<rustls::sign::CertifiedKey>> {
                None
            }
        }
        let config = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .expect("protocol versions")
        .with_no_client_auth()
        .with_cert_resolver(Arc::new(NoCertificate));
        let nowhere = kube::Config::new("http://127.0.0.1:9".parse().expect("url"));
        Security {
            acceptor: tokio_rustls::TlsAcceptor::from(Arc::new(config)),
            reviewer: Reviewer::new(kube::Client::try_from(nowhere).expect("client")),
        }
    }

    #[tokio::test]
    async fn a_tls_handshake_must_finish_within_the_documented_5_seconds() {
        let tls = Some(tls_without_certificate());
        let health = Arc::new(Health::default());
        let limits = ConnectionLimits::default();
        let (addr, shutdown) = server_on("127.0.0.1", true, health, tls, limits).await;
        let mut silent = TcpStream::connect(addr).await.expect("connect");
        let took = time_to_close(&mut silent, Duration::from_secs(9)).await;
        assert!(
            took.is_some_and(|t| t >= Duration::from_secs(4)),
            "a client that never said hello was closed after {took:?}, documented: 5 s"
        );
        shutdown.cancel();
    }

    #[tokio::test]
    async fn oversized_headers_are_refused_without_buffering_them() {
        let (addr, shutdown) = probe_server("127.0.0.1", ConnectionLimits::default()).await;
        let mut stream = TcpStream::connect(addr).await.expect("connect");
        let header = format!("X-Big: {}\r\n", "a".repeat(64 * 1024));
        // The server may close while we are still sending: that is the point.
        let _ = stream
            .write_all(format!("GET /healthz HTTP/1.1\r\nHost: test\r\n{header}\r\n").as_bytes())
            .await;
        let mut response = Vec::new();
        let _ =
            tokio::time::timeout(Duration::from_secs(30), stream.read_to_end(&mut response)).await;
        let response = String::from_utf8_lossy(&response);
        assert!(
            !response.contains(" 200 "),
            "a 64 KiB header was accepted: {response}"
        );
        shutdown.cancel();
    }

    // The header timeout is far away here: only the connection limit can close anything.
    #[tokio::test]
    async fn a_full_listener_closes_its_oldest_connection_for_a_new_one() {
        let limits = ConnectionLimits {
            max_connections: 2,
            header_read_timeout: Duration::from_secs(60),
            ..ConnectionLimits::default()
        };
        let (addr, shutdown) = probe_server("127.0.0.1", limits).await;
        let mut held = Vec::new();
        for source in ["127.0.0.1", "127.0.0.2"] {
            let mut stream = connect_from(source, addr).await;
            // A started request: the server has accepted and is serving this connection.
            stream
                .write_all(b"GET /healthz HTTP/1.1\r\n")
                .await
                .expect("send");
            held.push(stream);
        }
        assert!(
            get_from("127.0.0.3", addr, "/healthz")
                .await
                .contains(" 200 "),
            "a new client was kept out of a full listener"
        );
        assert!(
            closed_by_server(&mut held[0], Duration::from_secs(5)).await,
            "a third connection was served beside two with a limit of 2"
        );
        assert!(
            !closed_by_server(&mut held[1], Duration::from_millis(300)).await,
            "the newer held connection was closed instead of the oldest"
        );
        shutdown.cancel();
    }

    #[tokio::test]
    async fn one_peer_with_80_idle_connections_does_not_keep_another_from_metrics() {
        let health = Arc::new(Health::default());
        let limits = ConnectionLimits::default();
        let (addr, shutdown) = server_on("127.0.0.1", true, health, None, limits).await;
        let mut idle = idle_connections("127.0.0.1", addr, 80).await;
        for _ in 0..5 {
            let status = get_from("127.0.0.2", addr, "/metrics").await;
            assert!(
                status.contains(" 200 "),
                "/metrics for another peer: {status:?}"
            );
        }
        // The flooding peer keeps its share, its newest connections, and no more.
        let share = ConnectionLimits::default().max_connections_per_peer;
        let (closed, kept) = idle.split_at_mut(80 - share);
        for stream in closed.iter_mut() {
            assert!(
                closed_by_server(stream, Duration::from_secs(2)).await,
                "one peer held more than {share} connections"
            );
        }
        for stream in kept.iter_mut() {
            assert!(!closed_by_server(stream, Duration::from_millis(10)).await);
        }
        shutdown.cancel();
    }

    #[tokio::test]
    async fn idle_connections_do_not_stop_the_probes() {
        let (addr, shutdown) = probe_server("127.0.0.1", ConnectionLimits::default()).await;
        let _idle = idle_connections("127.0.0.1", addr, 80).await;
        // The kubelet probes from the node's address; a pod on the host network shares it.
        for source in ["127.0.0.2", "127.0.0.1"] {
            for _ in 0..5 {
                let status = get_from(source, addr, "/healthz").await;
                assert!(
                    status.contains(" 200 "),
                    "/healthz from {source}: {status:?}"
                );
            }
        }
        shutdown.cancel();
    }

    #[tokio::test]
    async fn every_interface_means_ipv4_and_ipv6() {
        if std::net::TcpListener::bind("[::1]:0").is_err() {
            crate::testkit::skips::skip("no IPv6 loopback on this host");
            return;
        }
        let (addr, shutdown) = probe_server("[::]", ConnectionLimits::default()).await;
        let port = addr.port();
        for ip in ["127.0.0.1", "[::1]"] {
            let target: SocketAddr = format!("{ip}:{port}").parse().expect("address");
            assert!(get(target, "/healthz").await.contains(" 200 "), "{target}");
        }
        shutdown.cancel();
    }
}
