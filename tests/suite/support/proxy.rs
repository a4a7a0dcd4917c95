//! A TCP proxy between the controller and kube-apiserver that injects network faults: latency,
//! connection resets, and outages. It forwards the TLS stream untouched (the serving
//! certificate names 127.0.0.1, so any loopback port works), so it cannot see HTTP requests; it
//! counts what it can: connections, and chunks and bytes the client sends. Every request costs
//! the client at least one chunk, so chunks per second bound the request rate from above.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

/// What the proxy does to connections it accepts from now on.
#[derive(Clone, Debug, Default)]
pub struct Faults {
    /// Each connection gets a latency drawn from this range, added in both directions.
    pub latency: (Duration, Duration),
    /// Added to the client-to-server direction only: what the client sends arrives late, while
    /// what the server sends (watch events included) is not held back.
    pub request_delay: Duration,
    /// Share of connections (0.0 to 1.0) that are reset after a time drawn from `reset_after`.
    pub reset_probability: f64,
    pub reset_after: (Duration, Duration),
}

/// Counters since the proxy started.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    pub connections: u64,
    pub client_chunks: u64,
    pub client_bytes: u64,
    pub server_bytes: u64,
    pub resets: u64,
}

impl std::ops::Sub for Stats {
    type Output = Stats;
    fn sub(self, earlier: Stats) -> Stats {
        Stats {
            connections: self.connections - earlier.connections,
            client_chunks: self.client_chunks - earlier.client_chunks,
            client_bytes: self.client_bytes - earlier.client_bytes,
            server_bytes: self.server_bytes - earlier.server_bytes,
            resets: self.resets - earlier.resets,
        }
    }
}

#[derive(Default)]
struct Counters {
    connections: AtomicU64,
    client_chunks: AtomicU64,
    client_bytes: AtomicU64,
    server_bytes: AtomicU64,
    resets: AtomicU64,
}

struct Shared {
    upstream: SocketAddr,
    faults: Mutex<Faults>,
    blocked: Mutex<bool>,
    counters: Counters,
    /// Bumped to reset every open connection at once.
    cut: watch::Sender<u64>,
    rng: Mutex<u64>,
}

impl Shared {
    /// xorshift64*: enough randomness for fault injection without a dependency.
    fn random(&self) -> f64 {
        let mut s = self.rng.lock().unwrap();
        *s ^= *s >> 12;
        *s ^= *s << 25;
        *s ^= *s >> 27;
        (s.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 11) as f64 / (1u64 << 53) as f64
    }

    fn between(&self, (low, high): (Duration, Duration)) -> Duration {
        if high <= low {
            return low;
        }
        low + (high - low).mul_f64(self.random())
    }
}

pub struct Proxy {
    pub port: u16,
    /// The kubeconfig of the API server behind the proxy.
    upstream: PathBuf,
    shared: Arc<Shared>,
    task: tokio::task::JoinHandle<()>,
}

impl Proxy {
    /// Listens on a free loopback port and forwards to the API server `kubeconfig` points at.
    pub async fn in_front_of(kubeconfig: &Path, faults: Faults) -> Proxy {
        let upstream = api_server_address(kubeconfig);
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind proxy");
        let port = listener.local_addr().unwrap().port();
        let seed = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_nanos() as u64
            | 1;
        let shared = Arc::new(Shared {
            upstream,
            faults: Mutex::new(faults),
            blocked: Mutex::new(false),
            counters: Counters::default(),
            cut: watch::channel(0).0,
            rng: Mutex::new(seed),
        });
        let accept = shared.clone();
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let shared = accept.clone();
                tokio::spawn(async move { serve(shared, client).await });
            }
        });
        Proxy {
            port,
            upstream: kubeconfig.to_path_buf(),
            shared,
            task,
        }
    }

    pub fn set_faults(&self, faults: Faults) {
        *self.shared.faults.lock().unwrap() = faults;
    }

    /// An outage: every open connection is reset, and new ones are reset as soon as accepted.
    pub fn block(&self) {
        *self.shared.blocked.lock().unwrap() = true;
        self.shared.cut.send_modify(|n| *n += 1);
    }

    /// Resets every open connection once; new ones are accepted as usual.
    pub fn cut(&self) {
        self.shared.cut.send_modify(|n| *n += 1);
    }

    pub fn unblock(&self) {
        *self.shared.blocked.lock().unwrap() = false;
    }

    pub fn stats(&self) -> Stats {
        let c = &self.shared.counters;
        Stats {
            connections: c.connections.load(Ordering::SeqCst),
            client_chunks: c.client_chunks.load(Ordering::SeqCst),
            client_bytes: c.client_bytes.load(Ordering::SeqCst),
            server_bytes: c.server_bytes.load(Ordering::SeqCst),
            resets: c.resets.load(Ordering::SeqCst),
        }
    }

    /// Writes a copy of the upstream kubeconfig whose clusters point at this proxy (same CA and
    /// client credentials). JSON is valid YAML, so any kubeconfig reader takes it.
    pub fn kubeconfig(&self, out: &Path) {
        let mut config =
            kube::config::Kubeconfig::read_from(&self.upstream).expect("read the kubeconfig");
        for named in &mut config.clusters {
            if let Some(cluster) = named.cluster.as_mut() {
                cluster.server = Some(format!("https://127.0.0.1:{}", self.port));
            }
        }
        std::fs::write(out, serde_json::to_vec_pretty(&config).unwrap())
            .expect("write the proxy kubeconfig");
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.task.abort();
        self.shared.cut.send_modify(|n| *n += 1);
    }
}

/// The `host:port` of the first cluster of a kubeconfig.
pub fn api_server_address(kubeconfig: &Path) -> SocketAddr {
    let config = kube::config::Kubeconfig::read_from(kubeconfig).expect("read the kubeconfig");
    let server = config
        .clusters
        .iter()
        .find_map(|c| c.cluster.as_ref()?.server.clone())
        .expect("a cluster with a server");
    let authority = server
        .trim_start_matches("https://")
        .trim_end_matches('/')
        .to_string();
    authority
        .parse()
        .unwrap_or_else(|e| panic!("server {server} is not host:port: {e}"))
}

async fn serve(shared: Arc<Shared>, mut client: TcpStream) {
    let counters = &shared.counters;
    counters.connections.fetch_add(1, Ordering::SeqCst);
    let mut cut = shared.cut.subscribe();
    if *shared.blocked.lock().unwrap() {
        reset(&shared, client);
        return;
    }
    let Ok(mut upstream) = TcpStream::connect(shared.upstream).await else {
        // Like the API server itself refusing: the client sees its connection fail.
        reset(&shared, client);
        return;
    };
    let _ = client.set_nodelay(true);
    let _ = upstream.set_nodelay(true);
    let faults = shared.faults.lock().unwrap().clone();
    let latency = shared.between(faults.latency);
    let reset_at = (shared.random() < faults.reset_probability)
        .then(|| Instant::now() + shared.between(faults.reset_after));

    let interrupted = {
        let (client_read, client_write) = client.split();
        let (upstream_read, upstream_write) = upstream.split();
        let up = pipe(
            client_read,
            upstream_write,
            latency + faults.request_delay,
            Some(&counters.client_chunks),
            &counters.client_bytes,
        );
        let down = pipe(
            upstream_read,
            client_write,
            latency,
            None,
            &counters.server_bytes,
        );
        tokio::select! {
            _ = async { tokio::join!(up, down) } => false,
            _ = sleep_until(reset_at) => true,
            _ = cut.changed() => true,
        }
    };
    if interrupted {
        reset(&shared, upstream);
        reset(&shared, client);
    }
}

/// Closes with RST rather than FIN: the peer sees "connection reset", as when a load balancer
/// or a crashed server drops it.
fn reset(shared: &Shared, stream: TcpStream) {
    shared.counters.resets.fetch_add(1, Ordering::SeqCst);
    let _ = stream.set_zero_linger();
    drop(stream);
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// Copies one direction with a fixed delay: each chunk is written `latency` after it was read,
/// without holding back the chunks behind it (a delay line, not a rate limit).
async fn pipe<R, W>(
    mut from: R,
    mut to: W,
    latency: Duration,
    chunks: Option<&AtomicU64>,
    bytes: &AtomicU64,
) where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let (tx, mut rx) = mpsc::unbounded_channel::<(Instant, Vec<u8>)>();
    let read = async move {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            match from.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if let Some(c) = chunks {
                        c.fetch_add(1, Ordering::SeqCst);
                    }
                    bytes.fetch_add(n as u64, Ordering::SeqCst);
                    if tx
                        .send((Instant::now() + latency, buf[..n].to_vec()))
                        .is_err()
                    {
                        break;
                    }
                }
            }
        }
    };
    let write = async {
        while let Some((due, data)) = rx.recv().await {
            tokio::time::sleep_until(due).await;
            if to.write_all(&data).await.is_err() {
                return;
            }
        }
        let _ = to.shutdown().await;
    };
    tokio::join!(read, write);
}
