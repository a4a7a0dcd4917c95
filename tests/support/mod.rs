//! Test harness: a real kube-apiserver (started by `hack/local-cluster.sh`, or the one named by
//! `KUBECONFIG`), an isolated simulated cluster per test, and the controller as a real process.
//!
//! Isolation: each test gets its own namespace (MachineSets, secrets, golden ConfigMap, the
//! controller's own objects) and its own names for the cluster-scoped singletons
//! (MachineConfiguration, Infrastructure, ClusterVersion), which the controller takes as flags.
//! Tests therefore run in parallel without sharing state.
#![allow(dead_code)]

pub mod fixtures;

use std::future::Future;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use kube::api::{
    Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams,
};
use kube::{Client, Config};
use serde_json::{Value, json};

pub const REPO: &str = env!("CARGO_MANIFEST_DIR");
pub const BINARY: &str = env!("CARGO_BIN_EXE_boot-image-controller");

/// The admin kubeconfig of the test control plane, starting one if needed.
pub fn kubeconfig() -> PathBuf {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| {
        if let Some(path) = std::env::var_os("KUBECONFIG").filter(|p| !p.is_empty()) {
            return PathBuf::from(path);
        }
        eprintln!(
            "KUBECONFIG not set: starting the local control plane (hack/local-cluster.sh up)"
        );
        let out = Command::new(Path::new(REPO).join("hack/local-cluster.sh"))
            .arg("up")
            .env("BIC_BINARY", BINARY)
            .stderr(Stdio::inherit())
            .output()
            .expect("run hack/local-cluster.sh");
        assert!(out.status.success(), "hack/local-cluster.sh up failed");
        let stdout = String::from_utf8(out.stdout).expect("utf-8");
        PathBuf::from(stdout.lines().last().expect("kubeconfig path").trim())
    })
    .clone()
}

pub async fn client() -> Client {
    let kubeconfig = kube::config::Kubeconfig::read_from(kubeconfig()).expect("read kubeconfig");
    let config = Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .expect("kubeconfig");
    Client::try_from(config).expect("client")
}

/// A short unique suffix, so reruns against a reused cluster never collide.
fn unique(prefix: &str) -> String {
    static COUNTER: AtomicUsize = AtomicUsize::new(0);
    let n = COUNTER.fetch_add(1, Ordering::SeqCst);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    let mut name = format!("{prefix}-{:x}{n}", nanos % 0xfffff);
    name.truncate(50);
    name.to_lowercase().replace('_', "-")
}

/// One simulated cluster.
pub struct TestEnv {
    pub client: Client,
    /// The namespace of everything namespaced: MachineSets, secrets, golden ConfigMap, Lease.
    pub ns: String,
    /// Name of this test's MachineConfiguration, Infrastructure and ClusterVersion.
    pub singleton: String,
}

impl TestEnv {
    pub async fn new(test: &str) -> TestEnv {
        let client = client().await;
        let id = unique(test);
        let env = TestEnv {
            client,
            ns: id.clone(),
            singleton: id,
        };
        env.apply(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": env.ns}}))
            .await;
        env
    }

    /// An AWS cluster at `release` with `stream` golden, managed and unmanaged stub secrets, and
    /// the MachineConfiguration given (None = absent `managedBootImages`, the platform default).
    pub async fn aws_cluster(
        &self,
        release: &str,
        stream: &str,
        managed_boot_images: Option<Value>,
    ) {
        self.apply(fixtures::infrastructure(&self.singleton, "AWS"))
            .await;
        self.apply(fixtures::cluster_version(
            &self.singleton,
            release,
            "Completed",
        ))
        .await;
        self.apply(fixtures::machine_configuration(
            &self.singleton,
            managed_boot_images,
        ))
        .await;
        self.apply(fixtures::golden_config_map(&self.ns, release, stream))
            .await;
        self.apply(fixtures::stub_secret(&self.ns, "worker-user-data", "2.2.0"))
            .await;
        self.apply(fixtures::stub_secret(
            &self.ns,
            "worker-user-data-managed",
            "3.2.0",
        ))
        .await;
    }

    /// Creates or updates an object (server-side apply, field manager `test`), and its status
    /// through the status subresource when the object carries one.
    pub async fn apply(&self, object: Value) -> DynamicObject {
        let (api, name) = self.api_for(&object);
        let params = PatchParams::apply("test").force();
        let applied = api
            .patch(&name, &params, &Patch::Apply(&object))
            .await
            .unwrap_or_else(|e| panic!("apply {name}: {e}"));
        let has_status_subresource = !matches!(
            object["kind"].as_str(),
            Some("ConfigMap" | "Secret" | "Namespace")
        );
        if has_status_subresource && object.get("status").is_some() {
            return api
                .patch_status(&name, &params, &Patch::Apply(&object))
                .await
                .unwrap_or_else(|e| panic!("apply status of {name}: {e}"));
        }
        applied
    }

    /// Creates an object; fails if it exists.
    pub async fn create(&self, object: Value) -> DynamicObject {
        let (api, _) = self.api_for(&object);
        let object: DynamicObject = serde_json::from_value(object).unwrap();
        api.create(&PostParams::default(), &object)
            .await
            .expect("create")
    }

    pub async fn get(&self, api_version: &str, kind: &str, name: &str) -> Option<DynamicObject> {
        let probe = json!({"apiVersion": api_version, "kind": kind, "metadata": {"name": name, "namespace": self.ns}});
        let (api, _) = self.api_for(&probe);
        api.get_opt(name).await.expect("get")
    }

    pub async fn delete(&self, api_version: &str, kind: &str, name: &str) {
        let probe = json!({"apiVersion": api_version, "kind": kind, "metadata": {"name": name, "namespace": self.ns}});
        let (api, _) = self.api_for(&probe);
        let _ = api.delete(name, &Default::default()).await;
    }

    pub async fn machine_set(&self, name: &str) -> Value {
        let ms = self
            .get("machine.openshift.io/v1beta1", "MachineSet", name)
            .await
            .unwrap_or_else(|| panic!("MachineSet {name} exists"));
        serde_json::to_value(ms).unwrap()
    }

    pub async fn machine_configuration(&self) -> Value {
        let mc = self
            .get(
                "operator.openshift.io/v1",
                "MachineConfiguration",
                &self.singleton,
            )
            .await
            .expect("MachineConfiguration exists");
        serde_json::to_value(mc).unwrap()
    }

    /// The condition of our MachineConfiguration with this type, if any.
    pub async fn condition(&self, type_: &str) -> Option<Value> {
        let mc = self.machine_configuration().await;
        mc.pointer("/status/conditions")?
            .as_array()?
            .iter()
            .find(|c| c["type"] == type_)
            .cloned()
    }

    /// JSON Patch on a MachineSet, as another actor would send it.
    pub async fn json_patch(
        &self,
        kind_api_version: (&str, &str),
        name: &str,
        ops: Value,
    ) -> Result<(), kube::Error> {
        let probe = json!({"apiVersion": kind_api_version.0, "kind": kind_api_version.1, "metadata": {"name": name, "namespace": self.ns}});
        let (api, _) = self.api_for(&probe);
        let patch: json_patch::Patch = serde_json::from_value(ops).unwrap();
        api.patch(name, &PatchParams::default(), &Patch::Json::<()>(patch))
            .await
            .map(|_| ())
    }

    pub async fn events_for(&self, name: &str) -> Vec<Value> {
        let api: Api<k8s_openapi::api::events::v1::Event> =
            Api::namespaced(self.client.clone(), &self.ns);
        api.list(&Default::default())
            .await
            .expect("list events")
            .items
            .into_iter()
            .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name))
            .map(|e| serde_json::to_value(e).unwrap())
            .collect()
    }

    fn api_for(&self, object: &Value) -> (Api<DynamicObject>, String) {
        let api_version = object["apiVersion"].as_str().expect("apiVersion");
        let kind = object["kind"].as_str().expect("kind");
        let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
        let gvk = GroupVersionKind::gvk(group, version, kind);
        let plural = match kind {
            "MachineConfiguration" => "machineconfigurations".to_string(),
            "ClusterVersion" => "clusterversions".to_string(),
            "Infrastructure" => "infrastructures".to_string(),
            other => format!("{}s", other.to_lowercase()),
        };
        let resource = ApiResource::from_gvk_with_plural(&gvk, &plural);
        let cluster_scoped = matches!(
            kind,
            "Namespace" | "MachineConfiguration" | "ClusterVersion" | "Infrastructure"
        );
        let name = object["metadata"]["name"]
            .as_str()
            .expect("name")
            .to_string();
        let api = if cluster_scoped {
            Api::all_with(self.client.clone(), &resource)
        } else {
            let ns = object["metadata"]["namespace"].as_str().unwrap_or(&self.ns);
            Api::namespaced_with(self.client.clone(), ns, &resource)
        };
        (api, name)
    }

    /// Starts the controller for this cluster as a real process.
    pub fn controller(&self, extra: &[&str]) -> ControllerProcess {
        ControllerProcess::start(self, extra)
    }
}

/// A free TCP port on the loopback interface.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A running `boot-image-controller run`; killed when dropped.
pub struct ControllerProcess {
    child: Option<Child>,
    pub port: u16,
    pub log: PathBuf,
    args: Vec<String>,
}

impl ControllerProcess {
    fn start(env: &TestEnv, extra: &[&str]) -> Self {
        let port = free_port();
        let dir = Path::new(REPO).join("target/test-logs");
        std::fs::create_dir_all(&dir).unwrap();
        static STARTS: AtomicUsize = AtomicUsize::new(0);
        let log = dir.join(format!(
            "{}-{}.log",
            env.ns,
            STARTS.fetch_add(1, Ordering::SeqCst)
        ));
        let mut args: Vec<String> = vec![
            "run".into(),
            format!("--kubeconfig={}", kubeconfig().display()),
            format!("--metrics-bind-address=127.0.0.1:{port}"),
            format!("--health-probe-bind-address=127.0.0.1:{port}"),
            format!("--namespace={}", env.ns),
            format!("--machine-api-namespace={}", env.ns),
            format!("--golden-configmap-namespace={}", env.ns),
            format!("--machine-configuration-name={}", env.singleton),
            format!("--infrastructure-name={}", env.singleton),
            format!("--cluster-version-name={}", env.singleton),
            "--log-level=debug".into(),
        ];
        args.extend(extra.iter().map(|s| s.to_string()));
        let file = std::fs::File::create(&log).unwrap();
        let child = Command::new(BINARY)
            .args(&args)
            .env_remove("KUBECONFIG")
            .stdout(file.try_clone().unwrap())
            .stderr(file)
            .spawn()
            .expect("start the controller");
        ControllerProcess {
            child: Some(child),
            port,
            log,
            args,
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("running").id()
    }

    /// SIGTERM, then wait for a clean exit; returns the exit code.
    pub fn terminate(&mut self) -> Option<i32> {
        let mut child = self.child.take()?;
        let _ = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status();
        for _ in 0..300 {
            if let Ok(Some(status)) = child.try_wait() {
                return status.code();
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = child.kill();
        child.wait().ok().and_then(|s| s.code())
    }

    /// SIGKILL: no chance to clean up, as when a node dies.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    pub fn logs(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub async fn http_get(&self, path: &str) -> Option<(u16, String)> {
        http_get(self.port, path).await
    }

    pub async fn metrics(&self) -> String {
        self.http_get("/metrics")
            .await
            .map(|(_, body)| body)
            .unwrap_or_default()
    }

    /// Waits until /readyz answers 200.
    pub async fn wait_ready(&self) {
        let ok = eventually(Duration::from_secs(60), || async {
            matches!(self.http_get("/readyz").await, Some((200, _))).then_some(())
        })
        .await;
        assert!(
            ok.is_some(),
            "controller never became ready; log:\n{}",
            self.logs()
        );
    }
}

impl Drop for ControllerProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A minimal HTTP/1.0 GET on loopback (no client crate needed for probes and metrics).
pub async fn http_get(port: u16, path: &str) -> Option<(u16, String)> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .ok()?;
    let request = format!("GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n");
    stream.write_all(request.as_bytes()).await.ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).await.ok()?;
    let status = response.split_whitespace().nth(1)?.parse().ok()?;
    let body = response
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    Some((status, body))
}

/// Polls `check` until it returns `Some` or the timeout passes.
pub async fn eventually<T, F, Fut>(timeout: Duration, mut check: F) -> Option<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if let Some(v) = check().await {
            return Some(v);
        }
        if tokio::time::Instant::now() >= deadline {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The value of one sample in a Prometheus text exposition, by exact series text.
pub fn sample(metrics: &str, series: &str) -> Option<f64> {
    metrics
        .lines()
        .find(|l| l.starts_with(series) && l[series.len()..].starts_with(' '))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}
