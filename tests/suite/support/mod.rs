//! Test harness: a real kube-apiserver (started by `hack/local-cluster.sh`, or the one named by
//! `KUBECONFIG`), an isolated simulated cluster per test, and the controller as a real process.
//!
//! Isolation: each test gets its own namespace (MachineSets, secrets, golden ConfigMap, the
//! controller's own objects) and its own names for the cluster-scoped singletons
//! (MachineConfiguration, Infrastructure, ClusterVersion), which the controller takes as flags.
//! Tests therefore run in parallel without sharing state.
#![allow(dead_code)]

pub mod fixtures;
pub mod forward_proxy;
pub mod moto;
pub mod private_cluster;
pub mod proxy;
pub mod vcsim;
pub mod waits;

use std::collections::BTreeMap;
use std::future::Future;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
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

/// One simulated cluster. Clones share it (e.g. with a task acting as another writer).
#[derive(Clone)]
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

    /// The namespace of this test's Cluster API objects (created by the tests that have some).
    pub fn cluster_api_ns(&self) -> String {
        format!("{}-capi", self.ns)
    }

    /// An AWS cluster at `release` with `stream` golden, managed and unmanaged stub secrets, and
    /// the MachineConfiguration given (None = absent `managedBootImages`, the platform default).
    pub async fn aws_cluster(
        &self,
        release: &str,
        stream: &str,
        managed_boot_images: Option<Value>,
    ) {
        self.aws_cluster_without_secrets(release, stream, managed_boot_images)
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

    /// [`TestEnv::aws_cluster`] without any stub secret, for tests that choose their own.
    pub async fn aws_cluster_without_secrets(
        &self,
        release: &str,
        stream: &str,
        managed_boot_images: Option<Value>,
    ) {
        self.apply(fixtures::infrastructure(&self.singleton, "AWS"))
            .await;
        for node in fixtures::control_plane_nodes() {
            self.apply(node).await;
        }
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
    }

    /// The controller's known-images ConfigMap as an earlier run would have left it: the images
    /// of a golden stream it saw before (without it, a MachineSet still on such an image looks
    /// custom once the golden ConfigMap moves on).
    pub async fn remember_images(&self, images: &[&str]) {
        self.apply(fixtures::known_images(&self.ns, images)).await;
    }

    /// What the cluster looks like once an upgrade to `release` completed: the ClusterVersion
    /// first, then the golden ConfigMap, in the order the CVO and the MCO write them.
    pub async fn upgrade(&self, release: &str, stream: &str) {
        self.apply(fixtures::cluster_version(
            &self.singleton,
            release,
            "Completed",
        ))
        .await;
        self.apply(fixtures::golden_config_map(&self.ns, release, stream))
            .await;
    }

    /// Replaces `spec.managedBootImages` of this test's MachineConfiguration.
    pub async fn select(&self, managed_boot_images: Option<Value>) {
        self.apply(fixtures::machine_configuration(
            &self.singleton,
            managed_boot_images,
        ))
        .await;
    }

    /// Replaces `spec.managedBootImages` with a selection that is not `All`, as an administrator
    /// must: while the status says skew enforcement is Automatic (the controller publishes that
    /// once every MachineSet is managed), the MachineConfiguration API refuses any other
    /// selection for MachineSets (a CEL rule on the kind: openshift/api,
    /// operator/v1/types_machineconfiguration.go, "any MachineAPI MachineSet MachineManager must
    /// use selection mode 'All'"), so skew enforcement is turned off first and the new selection
    /// applied once the status follows.
    pub async fn narrow_selection(&self, managed_boot_images: Value) {
        let mut declared = self.machine_configuration().await;
        let published = !declared["status"]["bootImageSkewEnforcementStatus"].is_null();
        let mut wanted = fixtures::machine_configuration_not_opted_in(&self.singleton);
        if let Some(current) = declared["spec"].get_mut("managedBootImages") {
            wanted["spec"]["managedBootImages"] = current.take();
        }
        wanted["spec"]["bootImageSkewEnforcement"] = json!({"mode": "None"});
        self.apply(wanted.clone()).await;
        if published {
            let off = eventually(Duration::from_secs(60), || async {
                let mc = self.machine_configuration().await;
                (mc["status"]["bootImageSkewEnforcementStatus"]["mode"] == "None").then_some(())
            })
            .await;
            assert!(off.is_some(), "skew enforcement never turned off");
        }
        wanted["spec"]["managedBootImages"] = managed_boot_images;
        // A pass that began before skew enforcement was turned off may still publish Automatic
        // after the status was read above (it was not yet published then): the API refuses the
        // narrower selection until the controller has published None, so it is tried again.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        while let Err(refused) = self.try_apply(wanted.clone()).await {
            assert!(
                tokio::time::Instant::now() < deadline,
                "narrower selection refused: {refused}"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Sets (or with `None` removes) an annotation of this test's MachineConfiguration.
    pub async fn annotate_machine_configuration(&self, key: &str, value: Option<&str>) {
        self.merge_patch(
            ("operator.openshift.io/v1", "MachineConfiguration"),
            &self.singleton,
            json!({"metadata": {"annotations": {key: value}}}),
        )
        .await;
    }

    /// Sets (or with `None` removes) an annotation of a MachineSet.
    pub async fn annotate_machine_set(&self, name: &str, key: &str, value: Option<&str>) {
        self.merge_patch(
            ("machine.openshift.io/v1beta1", "MachineSet"),
            name,
            json!({"metadata": {"annotations": {key: value}}}),
        )
        .await;
    }

    /// A JSON merge patch (RFC 7386), as `kubectl patch --type merge` sends it.
    pub async fn merge_patch(&self, kind_api_version: (&str, &str), name: &str, patch: Value) {
        let probe = json!({"apiVersion": kind_api_version.0, "kind": kind_api_version.1, "metadata": {"name": name, "namespace": self.ns}});
        let (api, _) = self.api_for(&probe);
        api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .unwrap_or_else(|e| panic!("merge patch {name}: {e}"));
    }

    /// Creates or updates an object (server-side apply, field manager `test`), and its status
    /// through the status subresource when the object carries one.
    pub async fn apply(&self, object: Value) -> DynamicObject {
        let name = object["metadata"]["name"].clone();
        (self.try_apply(object).await).unwrap_or_else(|e| panic!("apply {name}: {e}"))
    }

    /// [`TestEnv::apply`], with the API server's refusal returned instead of failing the test.
    pub async fn try_apply(&self, object: Value) -> Result<DynamicObject, kube::Error> {
        let (api, name) = self.api_for(&object);
        let params = PatchParams::apply("test").force();
        let applied = api.patch(&name, &params, &Patch::Apply(&object)).await?;
        let has_status_subresource = !matches!(
            object["kind"].as_str(),
            Some("ConfigMap" | "Secret" | "Namespace")
        );
        if has_status_subresource && object.get("status").is_some() {
            return api
                .patch_status(&name, &params, &Patch::Apply(&object))
                .await;
        }
        Ok(applied)
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

    /// The object `probe` names (apiVersion, kind, name and namespace, which defaults to the
    /// test's).
    pub async fn get_in(&self, probe: &Value) -> Option<DynamicObject> {
        let (api, name) = self.api_for(probe);
        api.get_opt(&name).await.expect("get")
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

    /// Every MachineSet of this cluster, by name.
    pub async fn machine_sets(&self) -> BTreeMap<String, Value> {
        self.try_machine_sets().await.expect("list MachineSets")
    }

    /// The MachineSets, or the error of listing them (an API server that is down or starting).
    pub async fn try_machine_sets(&self) -> Result<BTreeMap<String, Value>, kube::Error> {
        let probe = json!({"apiVersion": "machine.openshift.io/v1beta1", "kind": "MachineSet", "metadata": {"name": "-", "namespace": self.ns}});
        let (api, _) = self.api_for(&probe);
        let listed = api.list(&Default::default()).await?;
        Ok((listed.items.into_iter())
            .map(|ms| {
                let name = ms.metadata.name.clone().unwrap_or_default();
                (name, serde_json::to_value(ms).unwrap())
            })
            .collect())
    }

    /// The resourceVersion of every MachineSet: equal maps mean nothing was written.
    pub async fn machine_set_versions(&self) -> BTreeMap<String, String> {
        self.machine_sets()
            .await
            .into_iter()
            .map(|(name, ms)| (name, resource_version(&ms)))
            .collect()
    }

    pub async fn lease(&self, name: &str) -> Option<Value> {
        self.get("coordination.k8s.io/v1", "Lease", name)
            .await
            .map(|l| serde_json::to_value(l).unwrap())
    }

    /// Starts recording every change of our condition types on this test's MachineConfiguration;
    /// returns once the recorder has seen the current state, so no later transition is missed.
    pub async fn record_conditions(&self) -> ConditionLog {
        ConditionLog::start(self).await
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
            "ValidatingAdmissionPolicy" => "validatingadmissionpolicies".to_string(),
            other => format!("{}s", other.to_lowercase()),
        };
        let resource = ApiResource::from_gvk_with_plural(&gvk, &plural);
        let cluster_scoped = matches!(
            kind,
            "Namespace"
                | "Node"
                | "MachineConfiguration"
                | "ClusterVersion"
                | "Infrastructure"
                | "ValidatingAdmissionPolicy"
                | "ValidatingAdmissionPolicyBinding"
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

/// The path a `hack/ensure-*.sh` script prints once its tool is installed or built (on first
/// use, into the tool cache); `None` when it cannot be.
pub fn ensured_tool(script: &str) -> Option<String> {
    let out = Command::new("bash")
        .arg(Path::new(REPO).join(script))
        .stderr(Stdio::inherit())
        .output()
        .ok()?;
    let path = String::from_utf8_lossy(&out.stdout).trim().to_string();
    (out.status.success() && Path::new(&path).exists()).then_some(path)
}

/// A free TCP port on the loopback interface, for a server a test starts.
///
/// Taken below the kernel's ephemeral range, where it picks the local port of every outgoing
/// connection: a port found free there (by binding port 0) could be taken by a connection of
/// the controller or the API server before the server bound it, and Prometheus once failed to
/// start with "address already in use" that way. Each port is handed out once per process, from
/// a start that differs between processes; one still taken is passed over.
pub fn free_port() -> u16 {
    const LOW: u16 = 20_000;
    const SPAN: u16 = 12_000;
    static NEXT: OnceLock<std::sync::atomic::AtomicU16> = OnceLock::new();
    // Below 32768, the lowest bound Linux uses for its ephemeral range by default.
    let next = NEXT.get_or_init(|| {
        let start = (std::process::id() % u32::from(SPAN)) as u16;
        std::sync::atomic::AtomicU16::new(start)
    });
    for _ in 0..SPAN {
        let port = LOW + next.fetch_add(1, Ordering::Relaxed) % SPAN;
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .map(|address| address.port())
        .expect("a free port on the loopback interface")
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
        let mut flags = env.controller_flags();
        flags.extend(extra.iter().map(|s| s.to_string()));
        Self::spawn(&env.ns, &flags)
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

    /// The last `lines` lines of the log, for failure messages.
    /// Only the controller's own lines and warnings: at debug level the client's HTTP tracing
    /// would fill any tail. The full log stays in the file named in the header.
    pub fn log_tail(&self, lines: usize) -> String {
        let logs = strip_ansi(&self.logs());
        let relevant: Vec<&str> = logs
            .lines()
            .filter(|l| {
                l.contains(" boot_image_controller")
                    || l.contains(" WARN ")
                    || l.contains(" ERROR ")
            })
            .collect();
        let tail = relevant[relevant.len().saturating_sub(lines)..].join("\n");
        format!(
            "--- {} (last {lines} controller lines) ---\n{tail}",
            self.log.display()
        )
    }

    /// Whether the process still runs (it may have exited on its own).
    pub fn running(&mut self) -> bool {
        self.child
            .as_mut()
            .is_some_and(|c| matches!(c.try_wait(), Ok(None)))
    }

    /// One sample of `/metrics`, by exact series text (`name{labels}`).
    pub async fn metric(&self, series: &str) -> Option<f64> {
        sample(&self.metrics().await, series)
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

/// The controller binary the tests run: `BIC_CONTROLLER_BINARY` when set (for example a release
/// build, to measure what ships), else the one cargo built for the tests.
pub fn controller_binary() -> PathBuf {
    std::env::var_os("BIC_CONTROLLER_BINARY")
        .filter(|p| !p.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(BINARY))
}

impl TestEnv {
    /// The flags that name this cluster's objects for `plan --live` and `revert` (where the
    /// golden ConfigMap, the singletons and the known images are).
    pub fn cluster_object_flags(&self) -> Vec<String> {
        vec![
            format!("--golden-configmap-namespace={}", self.ns),
            format!("--machine-configuration-name={}", self.singleton),
            format!("--infrastructure-name={}", self.singleton),
            format!("--cluster-version-name={}", self.singleton),
            format!("--controller-namespace={}", self.ns),
        ]
    }

    /// The flags `controller()` passes for this cluster (admin kubeconfig, its namespace and
    /// singleton names, debug logs), without the listen addresses: for
    /// [`ControllerProcess::spawn`] with a few changes.
    pub fn controller_flags(&self) -> Vec<String> {
        self.controller_flags_with(&kubeconfig())
    }

    /// [`TestEnv::controller_flags`] for a controller that reaches the API server through
    /// `proxy` (its kubeconfig is written to `target/test-logs/<namespace>.kubeconfig`).
    pub fn controller_flags_through(&self, proxy: &proxy::Proxy) -> Vec<String> {
        let dir = Path::new(REPO).join("target/test-logs");
        std::fs::create_dir_all(&dir).expect("create target/test-logs");
        let through = dir.join(format!("{}.kubeconfig", self.ns));
        proxy.kubeconfig(&through);
        self.controller_flags_with(&through)
    }

    pub fn controller_flags_with(&self, kubeconfig: &Path) -> Vec<String> {
        vec![
            format!("--kubeconfig={}", kubeconfig.display()),
            format!("--namespace={}", self.ns),
            format!("--machine-api-namespace={}", self.ns),
            // Never the shared openshift-cluster-api: each test's Cluster API objects are its own.
            format!("--cluster-api-namespace={}", self.cluster_api_ns()),
            format!("--golden-configmap-namespace={}", self.ns),
            format!("--machine-configuration-name={}", self.singleton),
            format!("--infrastructure-name={}", self.singleton),
            format!("--cluster-version-name={}", self.singleton),
            "--log-level=debug".into(),
        ]
    }
}

impl ControllerProcess {
    /// Starts [`controller_binary`] `run` with exactly `flags`, plus metrics and probes on a free
    /// loopback port: for a controller that runs as another user (its own `--kubeconfig`) or with
    /// other names than a [`TestEnv`]'s. `label` names the log file in `target/test-logs/`.
    pub fn spawn(label: &str, flags: &[String]) -> ControllerProcess {
        let port = free_port();
        let dir = Path::new(REPO).join("target/test-logs");
        std::fs::create_dir_all(&dir).unwrap();
        static SPAWNS: AtomicUsize = AtomicUsize::new(0);
        let log = dir.join(format!(
            "{label}-{}-{}.log",
            std::process::id(),
            SPAWNS.fetch_add(1, Ordering::SeqCst)
        ));
        let mut args: Vec<String> = vec![
            "run".into(),
            format!("--metrics-bind-address=127.0.0.1:{port}"),
            format!("--health-probe-bind-address=127.0.0.1:{port}"),
        ];
        args.extend(flags.iter().cloned());
        let file = std::fs::File::create(&log).unwrap();
        let child = Command::new(controller_binary())
            .args(&args)
            .env_remove("KUBECONFIG")
            // As manifests/deployment.yaml and the image run it.
            .env("MALLOC_ARENA_MAX", "1")
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

    /// The process's peak resident set size so far (`VmHWM` in `/proc/<pid>/status`), in KiB.
    pub fn peak_rss_kib(&self) -> Option<u64> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid())).ok()?;
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmHWM:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
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

/// Removes the terminal colour codes the text log format writes.
pub fn strip_ansi(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            // An escape sequence ends with its first letter (`m` for colours).
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

pub fn resource_version(object: &Value) -> String {
    object["metadata"]["resourceVersion"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// One observed state of a condition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Observed {
    pub status: String,
    pub reason: String,
    pub message: String,
}

/// The successive states of our conditions, as a watch on the MachineConfiguration saw them.
/// Polling can miss a condition that is True for a few hundred milliseconds; a watch cannot.
pub struct ConditionLog {
    seen: Arc<Mutex<BTreeMap<String, Vec<Observed>>>>,
    task: tokio::task::JoinHandle<()>,
}

impl ConditionLog {
    async fn start(env: &TestEnv) -> ConditionLog {
        use futures::StreamExt;
        use kube::runtime::watcher;

        let gvk = GroupVersionKind::gvk("operator.openshift.io", "v1", "MachineConfiguration");
        let resource = ApiResource::from_gvk_with_plural(&gvk, "machineconfigurations");
        let api: Api<DynamicObject> = Api::all_with(env.client.clone(), &resource);
        let config = watcher::Config::default().fields(&format!("metadata.name={}", env.singleton));
        let seen: Arc<Mutex<BTreeMap<String, Vec<Observed>>>> = Arc::default();
        let (synced_tx, synced_rx) = tokio::sync::oneshot::channel();
        let record = seen.clone();
        let task = tokio::spawn(async move {
            let mut synced = Some(synced_tx);
            let stream = watcher(api, config);
            futures::pin_mut!(stream);
            while let Some(event) = stream.next().await {
                let object = match event {
                    Ok(watcher::Event::Apply(o) | watcher::Event::InitApply(o)) => o,
                    Ok(watcher::Event::InitDone) => {
                        if let Some(tx) = synced.take() {
                            let _ = tx.send(());
                        }
                        continue;
                    }
                    _ => continue,
                };
                let conditions = object
                    .data
                    .pointer("/status/conditions")
                    .and_then(Value::as_array)
                    .cloned()
                    .unwrap_or_default();
                let mut seen = record.lock().unwrap();
                for c in conditions {
                    let text = |k: &str| c[k].as_str().unwrap_or_default().to_string();
                    let observed = Observed {
                        status: text("status"),
                        reason: text("reason"),
                        message: text("message"),
                    };
                    let history = seen.entry(text("type")).or_default();
                    if history.last() != Some(&observed) {
                        history.push(observed);
                    }
                }
            }
        });
        tokio::time::timeout(Duration::from_secs(30), synced_rx)
            .await
            .expect("the MachineConfiguration watch lists within 30s")
            .expect("the watch task runs");
        ConditionLog { seen, task }
    }

    /// Every state the condition went through, oldest first.
    pub fn history(&self, type_: &str) -> Vec<Observed> {
        self.seen
            .lock()
            .unwrap()
            .get(type_)
            .cloned()
            .unwrap_or_default()
    }

    /// The `(status, reason)` sequence of a condition, for compact assertions and messages.
    pub fn transitions(&self, type_: &str) -> Vec<(String, String)> {
        let mut out: Vec<(String, String)> = Vec::new();
        for o in self.history(type_) {
            let pair = (o.status, o.reason);
            if out.last() != Some(&pair) {
                out.push(pair);
            }
        }
        out
    }
}

impl Drop for ConditionLog {
    fn drop(&mut self) {
        self.task.abort();
    }
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

/// [`eventually`], or a failed test saying what never happened (`explain` runs only then, so
/// it may read the controller's logs).
pub async fn eventually_or_fail<T, F, Fut>(
    timeout: Duration,
    check: F,
    explain: impl FnOnce() -> String,
) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    match eventually(timeout, check).await {
        Some(v) => v,
        None => panic!("{}", explain()),
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

/// Runs the binary with `args`, never against the caller's cluster unless the args say so.
pub fn run_binary(args: &[&str]) -> std::process::Output {
    Command::new(BINARY)
        .args(args)
        .env_remove("KUBECONFIG")
        .output()
        .expect("the binary runs")
}

pub fn stderr_of(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// `plan -o json` on what the simulated cluster holds.
pub async fn plan_json(env: &TestEnv) -> Value {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("cluster.json");
    std::fs::write(&file, fixtures::cluster_manifests(env).await.to_string()).unwrap();
    let out = run_binary(&[
        "plan",
        "-o",
        "json",
        "--manifests",
        &file.display().to_string(),
    ]);
    assert!(out.status.success(), "plan failed: {}", stderr_of(&out));
    serde_json::from_slice(&out.stdout).expect("plan prints JSON")
}

/// The local control plane's audit log of machine-resource patches (see hack/local-cluster.sh),
/// or `None`, said on stderr, when this control plane logs no audit.
pub fn audit_log() -> Option<PathBuf> {
    let dir = std::env::var_os("BIC_CLUSTER_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(REPO).join(".local-cluster"));
    let logged = dir.join("audit-policy.yaml").exists();
    if !logged {
        boot_image_controller::testkit::skips::skip(format_args!(
            "the local control plane at {} logs no audit",
            dir.display()
        ));
    }
    logged.then(|| dir.join("audit.log"))
}
