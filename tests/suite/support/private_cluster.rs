//! Private control planes: an etcd and kube-apiserver of one test alone, for tests that kill
//! the API server or need CRDs other than the shared cluster's (an older release's API).

use std::path::{Path, PathBuf};

use kube::Client;
use serde_json::{Value, json};

use super::{BINARY, REPO, TestEnv};

/// A control plane of this test alone, torn down when dropped (its logs are copied to
/// `target/test-logs/` first if the test failed).
pub struct PrivateCluster {
    dir: PathBuf,
    pub kubeconfig: PathBuf,
    etcd: String,
}

impl PrivateCluster {
    pub async fn up(name: &str) -> PrivateCluster {
        Self::up_with(name, &[]).await
    }

    /// [`PrivateCluster::up`] with extra environment for `hack/local-cluster.sh` (e.g.
    /// `BIC_MACHINECONFIGURATION_CRD`, the CRD of an older release).
    pub async fn up_with(name: &str, env: &[(&str, &str)]) -> PrivateCluster {
        // The process id keeps concurrent runs (two checkouts, a rerun) out of each other's way.
        let dir = Path::new(REPO).join(format!(
            ".local-cluster-faults-{name}-{}",
            std::process::id()
        ));
        let out = script_with(&dir, &["up"], env).await;
        let kubeconfig = PathBuf::from(out.lines().last().expect("kubeconfig path").trim());
        let env = std::fs::read_to_string(dir.join("cluster.env")).expect("cluster.env");
        let etcd = env
            .lines()
            .find_map(|l| l.strip_prefix("ETCD_URL=http://"))
            .expect("ETCD_URL in cluster.env")
            .to_string();
        PrivateCluster {
            dir,
            kubeconfig,
            etcd,
        }
    }

    pub async fn kill_apiserver(&self) {
        // SIGKILL at once, by PID: the moment matters, and on a loaded machine the script's own
        // start takes long enough for a rollout to finish. The script then confirms it is gone.
        let pid = std::fs::read_to_string(self.dir.join("kube-apiserver.pid"))
            .expect("kube-apiserver.pid");
        let _ = tokio::process::Command::new("kill")
            .args(["-KILL", pid.trim()])
            .status()
            .await;
        script(&self.dir, &["stop-apiserver", "--kill"]).await;
    }

    pub async fn start_apiserver(&self) {
        script(&self.dir, &["start-apiserver"]).await;
    }

    /// Starts kube-apiserver without waiting for it to be ready: the script checks readiness
    /// with kubectl every half second, and a test that races the controller after a restart
    /// must see the API server as soon as the controller can.
    pub async fn start_apiserver_no_wait(&self) {
        script(&self.dir, &["start-apiserver", "--no-wait"]).await;
    }

    /// A simulated cluster (namespace and singleton names) on this control plane.
    pub async fn env(&self, test: &str) -> TestEnv {
        let env = TestEnv {
            client: client_for(&self.kubeconfig).await,
            ns: test.to_string(),
            singleton: test.to_string(),
        };
        env.apply(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": test}}))
            .await;
        env
    }

    /// Compacts etcd's history up to its current revision (through etcd's gRPC gateway; the
    /// harness builds no etcdctl): afterwards no watch can resume from an older revision.
    pub async fn compact_etcd(&self) -> u64 {
        let range = etcd_post(
            &self.etcd,
            "/v3/kv/range",
            r#"{"key":"Lw==","count_only":true}"#,
        )
        .await;
        let revision: u64 = range["header"]["revision"]
            .as_str()
            .and_then(|r| r.parse().ok())
            .unwrap_or_else(|| panic!("no revision in {range}"));
        let body = json!({"revision": revision.to_string(), "physical": true}).to_string();
        etcd_post(&self.etcd, "/v3/kv/compaction", &body).await;
        revision
    }

    /// How many MachineSets of `namespace`, as etcd stores them, contain `text`. Read from
    /// etcd, not through the API server: a list sent while a restarted API server starts can
    /// wait seconds for its watch cache, while patches, which write to etcd, already pass.
    pub async fn machine_sets_in_etcd_containing(&self, namespace: &str, text: &str) -> usize {
        use base64::Engine as _;
        let b64 = base64::engine::general_purpose::STANDARD;
        let prefix = format!("/registry/machine.openshift.io/machinesets/{namespace}/");
        // Every key that starts with the prefix: up to the prefix with its last byte raised.
        let mut end = prefix.clone().into_bytes();
        *end.last_mut().expect("a prefix") += 1;
        let body = json!({"key": b64.encode(&prefix), "range_end": b64.encode(&end)});
        let range = etcd_post(&self.etcd, "/v3/kv/range", &body.to_string()).await;
        let values = range["kvs"].as_array().cloned().unwrap_or_default();
        (values.iter())
            .filter_map(|kv| b64.decode(kv["value"].as_str()?).ok())
            .filter(|value| String::from_utf8_lossy(value).contains(text))
            .count()
    }
}

impl Drop for PrivateCluster {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let logs = Path::new(REPO).join("target/test-logs");
            let _ = std::fs::create_dir_all(&logs);
            for name in ["kube-apiserver.log", "etcd.log"] {
                let label = self.dir.file_name().unwrap().to_string_lossy();
                let _ = std::fs::copy(self.dir.join(name), logs.join(format!("{label}-{name}")));
            }
        }
        let _ = std::process::Command::new(Path::new(REPO).join("hack/local-cluster.sh"))
            .arg("down")
            .env("BIC_CLUSTER_DIR", &self.dir)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status();
    }
}

/// Runs hack/local-cluster.sh on a private state directory; returns its stdout.
async fn script(dir: &Path, args: &[&str]) -> String {
    script_with(dir, args, &[]).await
}

async fn script_with(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> String {
    let out = tokio::process::Command::new(Path::new(REPO).join("hack/local-cluster.sh"))
        .args(args)
        .envs(env.iter().copied())
        .env("BIC_CLUSTER_DIR", dir)
        .env("BIC_BINARY", BINARY)
        .stderr(std::process::Stdio::inherit())
        .output()
        .await
        .expect("run hack/local-cluster.sh");
    assert!(
        out.status.success(),
        "hack/local-cluster.sh {} failed",
        args.join(" ")
    );
    String::from_utf8(out.stdout).expect("utf-8")
}

/// A JSON POST to etcd's HTTP gateway, over plain HTTP/1.0 on loopback.
async fn etcd_post(authority: &str, path: &str, body: &str) -> Value {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(authority)
        .await
        .expect("connect to etcd");
    let request = format!(
        "POST {path} HTTP/1.0\r\nHost: {authority}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).await.unwrap();
    let (head, body) = response.split_once("\r\n\r\n").expect("an HTTP response");
    assert!(head.contains(" 200 "), "etcd {path}: {response}");
    serde_json::from_str(body).unwrap_or_else(|e| panic!("etcd {path}: {e}: {body}"))
}

pub async fn client_for(kubeconfig: &Path) -> Client {
    let config = kube::config::Kubeconfig::read_from(kubeconfig).expect("read kubeconfig");
    let config = kube::Config::from_custom_kubeconfig(config, &Default::default())
        .await
        .expect("kubeconfig");
    Client::try_from(config).expect("client")
}
