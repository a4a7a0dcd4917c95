//! Operating the controller: the deployment manifests, their RBAC, the alerts and the dashboard,
//! checked with the real tools.
//!
//! - Against a real API server (the local control plane, `KUBECONFIG`): a server-side dry run of
//!   the manifests; what the ServiceAccount may and may not do once they are applied; and the
//!   controller itself running as that ServiceAccount, with exactly the manifests' RBAC and the
//!   real namespaces and singleton names, doing its whole job.
//! - The controller on a simulated cluster (the harness in `support/`): every metric the alerts
//!   and the dashboard use is one it really exports, and its measured peak memory with 200
//!   MachineSets fits the Deployment's request and limit.
//! - Without a cluster: the kustomize build (namespace override included), the wiring between
//!   Deployment, Service and ServiceMonitor, the dashboard's shape, and the metric names against
//!   the controller's own list (and, with `BIC_METRICS_URL`, against a deployed controller).
//!
//! kubectl: `$KUBECTL`, else `$BIC_BIN_DIR/kubectl`, else `kubectl` on PATH. The rules themselves
//! are unit-tested with promtool by hack/check-rules.sh, and evaluated by a real Prometheus in
//! tests/prometheus.rs.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read as _, Write as _};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use boot_image_controller::metrics::names;
use boot_image_controller::plan::Action;
use boot_image_controller::reason::Reason;
use serde_json::{Value, json};

mod support;

/// Every metric the controller exports: the set the alerts and the dashboard may use.
const EXPORTED_METRICS: &[&str] = &[
    "boot_image_controller_machine_resources",
    "boot_image_controller_patches_total",
    "boot_image_controller_errors_total",
    "boot_image_controller_hot_loops_total",
    "boot_image_controller_blocked",
    "boot_image_controller_reconcile_duration_seconds",
    "boot_image_controller_last_successful_sync_timestamp_seconds",
    "boot_image_controller_golden_stream_info",
    "boot_image_controller_leader",
    "boot_image_controller_ready",
    "boot_image_controller_writes_total",
    "boot_image_controller_hold_exceeded",
    "boot_image_controller_write_failures_total",
    "boot_image_controller_build_info",
    "mcc_bootimage_update_error",
];

const PROMETHEUS_RULE: &str = "manifests/monitoring/prometheusrule.yaml";
const DASHBOARD: &str = "dashboards/boot-image-controller.json";
/// The same dashboard, where the console's ConfigMap is generated from.
const CONSOLE_DASHBOARD: &str = "manifests/console-dashboard/boot-image-controller.json";
const PINNED_ANNOTATION: &str = "boot-image-controller/pinned-namespace";
const MACHINE_API: &str = "openshift-machine-api";
const MCO: &str = "openshift-machine-config-operator";
const FIELD_MANAGER: &str = "boot-image-controller-tests";

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn read(relative: &str) -> String {
    std::fs::read_to_string(repo().join(relative))
        .unwrap_or_else(|e| panic!("read {relative}: {e}"))
}

// ---------------------------------------------------------------------------------------------
// kubectl and the cluster

/// The kubectl to run, if one runs at all.
fn kubectl() -> Option<PathBuf> {
    let candidate = if let Some(path) = std::env::var_os("KUBECTL").filter(|p| !p.is_empty()) {
        PathBuf::from(path)
    } else if let Some(dir) = std::env::var_os("BIC_BIN_DIR").filter(|p| !p.is_empty()) {
        Path::new(&dir).join("kubectl")
    } else {
        PathBuf::from("kubectl")
    };
    let works = Command::new(&candidate)
        .args(["version", "--client"])
        .output()
        .is_ok_and(|o| o.status.success());
    works.then_some(candidate)
}

/// kubectl, or a visible skip.
fn kubectl_or_skip() -> Option<PathBuf> {
    let found = kubectl();
    if found.is_none() {
        eprintln!("SKIPPED: no kubectl (set KUBECTL or BIC_BIN_DIR, or put kubectl on PATH)");
    }
    found
}

/// kubectl talking to the test cluster, or a visible skip.
struct Cluster {
    kubectl: PathBuf,
    kubeconfig: PathBuf,
}

impl Cluster {
    fn from_env() -> Option<Cluster> {
        let Some(kubeconfig) = std::env::var_os("KUBECONFIG").filter(|p| !p.is_empty()) else {
            eprintln!("SKIPPED: no KUBECONFIG (run through hack/test.sh)");
            return None;
        };
        let kubectl = kubectl_or_skip()?;
        Some(Cluster {
            kubectl,
            kubeconfig: kubeconfig.into(),
        })
    }

    fn run(&self, args: &[&str], stdin: Option<&str>) -> Output {
        let mut child = Command::new(&self.kubectl)
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .arg("--request-timeout=60s")
            .args(args)
            .stdin(if stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("run {}: {e}", self.kubectl.display()));
        if let Some(input) = stdin {
            child
                .stdin
                .take()
                .expect("stdin is piped")
                .write_all(input.as_bytes())
                .expect("write kubectl's stdin");
        }
        child.wait_with_output().expect("wait for kubectl")
    }

    /// Runs kubectl and fails the test, with its output, when it fails.
    fn ok(&self, args: &[&str], stdin: Option<&str>) -> String {
        let out = self.run(args, stdin);
        assert!(
            out.status.success(),
            "kubectl {} failed:\n{}{}",
            args.join(" "),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// The (apiVersion, kind) pairs the server serves.
    fn served_kinds(&self) -> BTreeSet<(String, String)> {
        // Columns: NAME [SHORTNAMES] APIVERSION NAMESPACED KIND; SHORTNAMES may be empty, so
        // count from the right.
        self.ok(&["api-resources", "--no-headers"], None)
            .lines()
            .filter_map(|line| {
                let cols: Vec<&str> = line.split_whitespace().collect();
                (cols.len() >= 4).then(|| {
                    (
                        cols[cols.len() - 3].to_string(),
                        cols[cols.len() - 1].to_string(),
                    )
                })
            })
            .collect()
    }

    /// Applies objects for real (server-side apply, our own field manager).
    fn apply(&self, objects: &[Value]) -> String {
        self.ok(
            &[
                "apply",
                "--server-side",
                "--force-conflicts",
                &format!("--field-manager={FIELD_MANAGER}"),
                "-f",
                "-",
            ],
            Some(&list(objects)),
        )
    }
}

/// A v1 List of objects, which `kubectl apply -f -` expands.
fn list(objects: &[Value]) -> String {
    json!({"apiVersion": "v1", "kind": "List", "items": objects}).to_string()
}

// ---------------------------------------------------------------------------------------------
// The rendered manifests

/// The objects of a kustomize build.
struct Rendered(Vec<Value>);

impl Rendered {
    /// `kubectl kustomize <dir>`.
    fn build(kubectl: &Path, dir: &Path) -> Rendered {
        let out = Command::new(kubectl)
            .arg("kustomize")
            .arg(dir)
            .output()
            .expect("run kubectl kustomize");
        assert!(
            out.status.success(),
            "kubectl kustomize {} failed:\n{}",
            dir.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        let text = String::from_utf8(out.stdout).expect("kustomize prints UTF-8");
        let docs: Vec<Value> =
            serde_saphyr::from_multiple(&text).expect("kustomize prints valid YAML");
        Rendered(docs.into_iter().filter(|d| !d.is_null()).collect())
    }

    fn manifests(kubectl: &Path) -> Rendered {
        Rendered::build(kubectl, &repo().join("manifests"))
    }

    fn of_kind<'a>(&'a self, kind: &'a str) -> impl Iterator<Item = &'a Value> + 'a {
        self.0.iter().filter(move |o| o["kind"] == kind)
    }

    fn get(&self, kind: &str, name: &str) -> &Value {
        self.0
            .iter()
            .find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
            .unwrap_or_else(|| panic!("no {kind} {name} in the manifests"))
    }

    /// The controller's ServiceAccount: the one its Deployment runs as.
    fn service_account(&self) -> (String, String) {
        let deployments: Vec<&Value> = self.of_kind("Deployment").collect();
        assert_eq!(deployments.len(), 1, "exactly one Deployment");
        let name = str_of(&deployments[0]["spec"]["template"]["spec"]["serviceAccountName"]);
        let meta = &self.get("ServiceAccount", &name)["metadata"];
        (str_of(&meta["namespace"]), str_of(&meta["name"]))
    }
}

fn str_of(v: &Value) -> String {
    v.as_str()
        .unwrap_or_else(|| panic!("expected a string, got {v}"))
        .to_string()
}

/// The `namespace:` of manifests/kustomization.yaml.
fn kustomization_namespace() -> String {
    let kustomization: Value =
        serde_saphyr::from_str(&read("manifests/kustomization.yaml")).expect("valid YAML");
    str_of(&kustomization["namespace"])
}

fn api_version_and_kind(o: &Value) -> (String, String) {
    (str_of(&o["apiVersion"]), str_of(&o["kind"]))
}

/// Splits objects into those the server serves and those it does not (CRDs not installed).
fn split_by_served(
    objects: &[Value],
    served: &BTreeSet<(String, String)>,
) -> (Vec<Value>, Vec<Value>) {
    objects
        .iter()
        .cloned()
        .partition(|o| served.contains(&api_version_and_kind(o)))
}

fn describe(objects: &[Value]) -> String {
    let kinds: BTreeSet<String> = objects
        .iter()
        .map(|o| format!("{} ({})", str_of(&o["kind"]), str_of(&o["apiVersion"])))
        .collect();
    kinds.into_iter().collect::<Vec<_>>().join(", ")
}

/// The Namespace objects go in for real first: a dry run cannot create objects inside a
/// namespace that a dry run only pretended to create. So do the OpenShift namespaces the
/// manifests put objects into (openshift-config-managed, ...), which every OpenShift cluster has
/// and the local control plane may lack.
fn ensure_namespaces(cluster: &Cluster, rendered: &Rendered) {
    let mut namespaces: Vec<Value> = rendered.of_kind("Namespace").cloned().collect();
    assert!(
        !namespaces.is_empty(),
        "the manifests create their namespace"
    );
    let openshift: BTreeSet<String> = rendered
        .0
        .iter()
        .filter_map(|o| o["metadata"]["namespace"].as_str())
        .filter(|ns| ns.starts_with("openshift-"))
        .map(str::to_string)
        .collect();
    namespaces.extend(
        openshift
            .into_iter()
            .map(|ns| json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})),
    );
    cluster.apply(&namespaces);
}

// ---------------------------------------------------------------------------------------------
// Against the API server

#[test]
fn the_manifests_pass_a_server_side_dry_run() {
    let Some(cluster) = Cluster::from_env() else {
        return;
    };
    let rendered = Rendered::manifests(&cluster.kubectl);
    let (served, unserved) = split_by_served(&rendered.0, &cluster.served_kinds());
    if !unserved.is_empty() {
        eprintln!(
            "not validated, their CRDs are not installed on this server: {}",
            describe(&unserved)
        );
    }
    // Only the prometheus-operator kinds may be missing; everything else must be validated.
    for o in &unserved {
        assert!(
            str_of(&o["apiVersion"]).starts_with("monitoring.coreos.com/"),
            "the server does not serve {}",
            describe(std::slice::from_ref(o))
        );
    }
    for kind in [
        "Namespace",
        "ServiceAccount",
        "ClusterRole",
        "Role",
        "RoleBinding",
        "Deployment",
        "Service",
    ] {
        assert!(
            served.iter().any(|o| o["kind"] == kind),
            "no {kind} validated"
        );
    }

    ensure_namespaces(&cluster, &rendered);
    let out = cluster.ok(
        &["apply", "--dry-run=server", "-f", "-"],
        Some(&list(&served)),
    );
    eprintln!("{out}");
}

/// One authorization question for `kubectl auth can-i`.
struct Access {
    allowed: bool,
    verb: &'static str,
    /// `resource[.group][/name]`, as can-i takes it.
    resource: String,
    subresource: Option<&'static str>,
    namespace: Option<String>,
}

fn allowed(verb: &'static str, resource: impl Into<String>, namespace: Option<&str>) -> Access {
    Access {
        allowed: true,
        verb,
        resource: resource.into(),
        subresource: None,
        namespace: namespace.map(str::to_string),
    }
}

fn denied(verb: &'static str, resource: impl Into<String>, namespace: Option<&str>) -> Access {
    Access {
        allowed: false,
        ..allowed(verb, resource, namespace)
    }
}

impl Access {
    fn status(mut self) -> Access {
        self.subresource = Some("status");
        self
    }

    fn describe(&self) -> String {
        let sub = self
            .subresource
            .map(|s| format!(" --subresource={s}"))
            .unwrap_or_default();
        let ns = self
            .namespace
            .as_deref()
            .map(|n| format!(" -n {n}"))
            .unwrap_or_default();
        format!("{} {}{sub}{ns}", self.verb, self.resource)
    }

    /// Asks the API server; true for "yes".
    fn ask(&self, cluster: &Cluster, user: &str) -> bool {
        let mut args = vec![
            "auth".to_string(),
            "can-i".to_string(),
            self.verb.to_string(),
            self.resource.clone(),
            format!("--as={user}"),
        ];
        if let Some(s) = self.subresource {
            args.push(format!("--subresource={s}"));
        }
        if let Some(ns) = &self.namespace {
            args.extend(["-n".to_string(), ns.clone()]);
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = cluster.run(&args, None);
        match String::from_utf8_lossy(&out.stdout).trim() {
            "yes" => true,
            "no" => false,
            other => panic!(
                "kubectl auth can-i {}: unexpected answer {other:?}: {}",
                self.describe(),
                String::from_utf8_lossy(&out.stderr)
            ),
        }
    }
}

/// The answers to `checks`, a few kubectl processes at a time.
fn ask_all(checks: &[Access], cluster: &Cluster, user: &str) -> Vec<bool> {
    checks
        .chunks(8)
        .flat_map(|chunk| {
            std::thread::scope(|scope| {
                let asking: Vec<_> = chunk
                    .iter()
                    .map(|c| scope.spawn(move || c.ask(cluster, user)))
                    .collect();
                asking
                    .into_iter()
                    .map(|h| h.join().expect("kubectl auth can-i"))
                    .collect::<Vec<bool>>()
            })
        })
        .collect()
}

#[test]
fn the_service_account_may_do_what_the_controller_needs_and_nothing_else() {
    let Some(cluster) = Cluster::from_env() else {
        return;
    };
    let rendered = Rendered::manifests(&cluster.kubectl);
    let (ns, sa) = rendered.service_account();
    assert_eq!(
        ns,
        kustomization_namespace(),
        "the ServiceAccount lives in the kustomization's namespace"
    );
    let own = Some(ns.as_str());
    let machine_api = Some(MACHINE_API);
    let mco = Some(MCO);

    ensure_namespaces(&cluster, &rendered);
    let (served, _) = split_by_served(&rendered.0, &cluster.served_kinds());
    cluster.apply(&served);

    let user = format!("system:serviceaccount:{ns}:{sa}");
    // The table reads best unformatted: one question per line.
    #[rustfmt::skip]
    let checks = [
        // MachineSets and ControlPlaneMachineSets: watched and patched, where they live only.
        allowed("list",   "machinesets.machine.openshift.io", machine_api),
        allowed("watch",  "machinesets.machine.openshift.io", machine_api),
        allowed("patch",  "machinesets.machine.openshift.io", machine_api),
        allowed("patch",  "controlplanemachinesets.machine.openshift.io", machine_api),
        denied("patch",   "machinesets.machine.openshift.io", Some("default")),
        denied("list",    "machinesets.machine.openshift.io", Some("default")),
        denied("update",  "machinesets.machine.openshift.io", machine_api),
        denied("delete",  "machinesets.machine.openshift.io", machine_api),
        denied("create",  "machinesets.machine.openshift.io", machine_api),
        // Secrets: the managed stubs by name, nothing else anywhere.
        allowed("get",    "secrets/worker-user-data-managed", machine_api),
        allowed("watch",  "secrets/worker-user-data-managed", machine_api),
        allowed("get",    "secrets/master-user-data-managed", machine_api),
        denied("get",     "secrets/worker-user-data", machine_api),
        denied("get",     "secrets/aws-cloud-credentials", machine_api),
        denied("list",    "secrets", machine_api),
        denied("patch",   "secrets/worker-user-data-managed", machine_api),
        denied("get",     "secrets/worker-user-data-managed", Some("default")),
        denied("get",     "secrets", Some("default")),
        denied("get",     "secrets", own),
        // Events on the MachineSets.
        allowed("create", "events.events.k8s.io", machine_api),
        denied("patch",   "events.events.k8s.io", machine_api),
        denied("create",  "events.events.k8s.io", Some("default")),
        // MachineConfiguration/cluster: read it, write its status only.
        allowed("get",    "machineconfigurations.operator.openshift.io/cluster", None),
        allowed("watch",  "machineconfigurations.operator.openshift.io/cluster", None),
        allowed("patch",  "machineconfigurations.operator.openshift.io/cluster", None).status(),
        denied("update",  "machineconfigurations.operator.openshift.io/cluster", None),
        denied("patch",   "machineconfigurations.operator.openshift.io/cluster", None),
        denied("patch",   "machineconfigurations.operator.openshift.io/other", None).status(),
        denied("list",    "machineconfigurations.operator.openshift.io", None),
        // The cluster singletons, read-only.
        allowed("get",    "infrastructures.config.openshift.io/cluster", None),
        allowed("get",    "clusterversions.config.openshift.io/version", None),
        denied("patch",   "infrastructures.config.openshift.io/cluster", None),
        denied("get",     "clusterversions.config.openshift.io/other", None),
        // The golden ConfigMap, and no other ConfigMap of the Machine Config Operator.
        allowed("get",    "configmaps/coreos-bootimages", mco),
        allowed("watch",  "configmaps/coreos-bootimages", mco),
        denied("patch",   "configmaps/coreos-bootimages", mco),
        denied("get",     "configmaps/machine-config-controller", mco),
        // Its own bookkeeping: the known-images ConfigMap and the Lease.
        allowed("patch",  "configmaps/boot-image-controller-known-images", own),
        allowed("create", "configmaps", own),
        denied("patch",   "configmaps/something-else", own),
        denied("delete",  "configmaps/boot-image-controller-known-images", own),
        allowed("get",    "leases.coordination.k8s.io/boot-image-controller", own),
        allowed("update", "leases.coordination.k8s.io/boot-image-controller", own),
        allowed("create", "leases.coordination.k8s.io", own),
        denied("update",  "leases.coordination.k8s.io/another-lease", own),
        denied("update",  "leases.coordination.k8s.io/boot-image-controller", Some("default")),
        // Checking who scrapes /metrics: the API server reviews the token and the access.
        allowed("create", "tokenreviews.authentication.k8s.io", None),
        allowed("create", "subjectaccessreviews.authorization.k8s.io", None),
        denied("create",  "localsubjectaccessreviews.authorization.k8s.io", own),
        denied("get",     "/metrics", None),
    ];

    // The authorizer learns about applied Roles and bindings through a watch, a moment later:
    // ask again until the answers settle, and fail if they are still wrong after a while.
    let deadline = Instant::now() + Duration::from_secs(20);
    let wrong = loop {
        let wrong: Vec<String> = ask_all(&checks, &cluster, &user)
            .into_iter()
            .zip(&checks)
            .filter(|(answer, c)| *answer != c.allowed)
            .map(|(_, c)| {
                let expected = if c.allowed { "allowed" } else { "denied" };
                format!("{} should be {expected}", c.describe())
            })
            .collect();
        if wrong.is_empty() || Instant::now() > deadline {
            break wrong;
        }
        std::thread::sleep(Duration::from_millis(500));
    };
    assert!(wrong.is_empty(), "as {user}:\n{}", wrong.join("\n"));
}

/// The identity the ServiceMonitor scrapes with may read /metrics, and nothing else.
#[test]
fn the_metrics_reader_may_get_metrics_and_nothing_else() {
    let Some(cluster) = Cluster::from_env() else {
        return;
    };
    let rendered = Rendered::manifests(&cluster.kubectl);
    let reader =
        &rendered.get("ServiceAccount", "boot-image-controller-metrics-reader")["metadata"];
    let user = format!(
        "system:serviceaccount:{}:{}",
        str_of(&reader["namespace"]),
        str_of(&reader["name"])
    );
    ensure_namespaces(&cluster, &rendered);
    let (served, _) = split_by_served(&rendered.0, &cluster.served_kinds());
    cluster.apply(&served);
    let own = Some(reader["namespace"].as_str().unwrap_or_default());
    #[rustfmt::skip]
    let checks = [
        allowed("get",   "/metrics", None),
        denied("post",   "/metrics", None),
        denied("get",    "/logs", None),
        denied("get",    "secrets", own),
        denied("list",   "pods", own),
        denied("get",    "machinesets.machine.openshift.io", Some(MACHINE_API)),
    ];
    let deadline = Instant::now() + Duration::from_secs(20);
    let wrong = loop {
        let wrong: Vec<String> = ask_all(&checks, &cluster, &user)
            .into_iter()
            .zip(&checks)
            .filter(|(answer, c)| *answer != c.allowed)
            .map(|(_, c)| c.describe())
            .collect();
        if wrong.is_empty() || Instant::now() > deadline {
            break wrong;
        }
        std::thread::sleep(Duration::from_millis(500));
    };
    assert!(wrong.is_empty(), "as {user}, wrong answer for: {wrong:?}");
}

// ---------------------------------------------------------------------------------------------
// The controller itself, as its ServiceAccount

/// Marks what the service-account scenario creates, so that it cleans up only its own objects
/// and recognises cluster singletons that belong to someone else.
const RBAC_TEST_LABEL: &str = "boot-image-controller.test/rbac-scenario";
/// Where the negative test's foreign MachineSet lives. Fixed: namespaces never finish deleting
/// on the local control plane, so a fresh one per run would pile up.
const ELSEWHERE: &str = "bic-rbac-elsewhere";

fn labelled(mut object: Value) -> Value {
    object["metadata"]["labels"][RBAC_TEST_LABEL] = json!("true");
    object
}

/// A kubeconfig that authenticates with `token` against the server and CA of the admin
/// kubeconfig's current context.
fn token_kubeconfig(admin: &Path, token: &str, namespace: &str) -> Value {
    let admin: Value = serde_saphyr::from_str(
        &std::fs::read_to_string(admin).unwrap_or_else(|e| panic!("read {}: {e}", admin.display())),
    )
    .expect("the admin kubeconfig is YAML");
    let find = |list: &str, name: &Value| {
        admin[list]
            .as_array()
            .and_then(|items| items.iter().find(|i| &i["name"] == name))
            .unwrap_or_else(|| panic!("no {list} entry {name} in the admin kubeconfig"))
            .clone()
    };
    let context = find("contexts", &admin["current-context"]);
    let cluster = find("clusters", &context["context"]["cluster"]);
    json!({
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "test", "cluster": cluster["cluster"]}],
        "users": [{"name": "service-account", "user": {"token": token}}],
        "contexts": [{"name": "service-account", "context": {"cluster": "test", "user": "service-account", "namespace": namespace}}],
        "current-context": "service-account",
    })
}

/// Deletes everything labelled [`RBAC_TEST_LABEL`] (and the controller's own objects) when
/// dropped, also when the test fails.
struct RbacScenarioCleanup<'a> {
    cluster: &'a Cluster,
    own_namespace: String,
}

impl RbacScenarioCleanup<'_> {
    fn run(&self) {
        let selector = format!("{RBAC_TEST_LABEL}=true");
        for (namespace, resources) in [
            (
                Some(MACHINE_API),
                "machinesets.machine.openshift.io,secrets",
            ),
            (Some(ELSEWHERE), "machinesets.machine.openshift.io"),
            (Some(MCO), "configmaps"),
            (
                None,
                "machineconfigurations.operator.openshift.io,infrastructures.config.openshift.io,clusterversions.config.openshift.io",
            ),
        ] {
            let mut args = vec!["delete", resources, "-l", &selector, "--ignore-not-found"];
            if let Some(ns) = namespace {
                args.extend(["-n", ns]);
            }
            let out = self.cluster.run(&args, None);
            if !out.status.success() {
                eprintln!(
                    "cleanup: kubectl {}: {}",
                    args.join(" "),
                    String::from_utf8_lossy(&out.stderr)
                );
            }
        }
        // What the controller created in its own namespace.
        let _ = self.cluster.run(
            &[
                "delete",
                "-n",
                &self.own_namespace,
                "--ignore-not-found",
                &format!(
                    "configmap/{}",
                    boot_image_controller::names::KNOWN_IMAGES_CONFIGMAP_NAME
                ),
                "lease.coordination.k8s.io/boot-image-controller",
            ],
            None,
        );
    }
}

impl Drop for RbacScenarioCleanup<'_> {
    fn drop(&mut self) {
        self.run();
    }
}

/// The cluster singletons and the golden ConfigMap that exist and were not created by this
/// scenario (for example by the demo on a shared local cluster).
async fn foreign_singletons(env: &support::TestEnv) -> Vec<String> {
    let mut foreign = Vec::new();
    for (api_version, kind, name) in [
        (
            "operator.openshift.io/v1",
            "MachineConfiguration",
            "cluster",
        ),
        ("config.openshift.io/v1", "Infrastructure", "cluster"),
        ("config.openshift.io/v1", "ClusterVersion", "version"),
    ] {
        if let Some(o) = env.get(api_version, kind, name).await
            && !o
                .metadata
                .labels
                .unwrap_or_default()
                .contains_key(RBAC_TEST_LABEL)
        {
            foreign.push(format!("{kind}/{name}"));
        }
    }
    let configmaps: kube::Api<k8s_openapi::api::core::v1::ConfigMap> =
        kube::Api::namespaced(env.client.clone(), MCO);
    if let Some(cm) = configmaps.get_opt("coreos-bootimages").await.expect("get")
        && !cm
            .metadata
            .labels
            .unwrap_or_default()
            .contains_key(RBAC_TEST_LABEL)
    {
        foreign.push(format!("{MCO}/configmaps/coreos-bootimages"));
    }
    foreign
}

/// The API requests the controller's debug log shows refused (403), as `METHOD URL`, and any
/// warning or error that mentions a refusal. None is expected: every request the controller
/// makes, including its probe for the ClusterVersion CRD, names what RBAC grants.
fn refused_requests(log: &str) -> Vec<String> {
    let plain = strip_ansi(log);
    let field = |line: &str, key: &str| {
        let start = line.find(key)? + key.len();
        let rest = &line[start..];
        Some(rest[..rest.find([' ', '}']).unwrap_or(rest.len())].to_string())
    };
    assert!(
        plain.contains("http.status_code=200"),
        "the log has no HTTP responses: is --log-level=debug on, and kube's trace format unchanged?"
    );
    let mut refused = Vec::new();
    for line in plain.lines() {
        if line.contains("http.status_code=403") {
            let url = field(line, "http.url=").unwrap_or_default();
            let method = field(line, "http.method=").unwrap_or_default();
            refused.push(format!("{method} {url}"));
        } else if (line.contains(" WARN ") || line.contains(" ERROR "))
            && (line.contains("403") || line.to_ascii_lowercase().contains("forbidden"))
        {
            refused.push(line.to_string());
        }
    }
    refused
}

/// The text without terminal colour sequences (`ESC [ ... m`).
fn strip_ansi(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
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

/// kubectl's answer to a request the ServiceAccount must not be allowed to make.
fn assert_forbidden(out: &Output, what: &str) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && stderr.contains("Forbidden"),
        "{what} should be Forbidden; kubectl said:\n{}{stderr}",
        String::from_utf8_lossy(&out.stdout)
    );
}

/// The real thing: the manifests applied, the controller started with a token of their
/// ServiceAccount (not as admin) and the real namespaces and singleton names, doing its whole
/// job: patching an outdated MachineSet, writing conditions, an Event, its known-images
/// ConfigMap and its Lease. Any rule missing from the manifests shows up as a 403.
///
/// This test owns the cluster singletons `MachineConfiguration/cluster`, `Infrastructure/cluster`
/// and `ClusterVersion/version` and the golden ConfigMap (every other test uses its own names).
/// If they exist and are not its own (the demo on the same cluster), it skips rather than
/// overwrite them; and its MachineConfiguration selects only its own MachineSets, so other
/// MachineSets in openshift-machine-api are never touched.
#[tokio::test]
async fn the_controller_works_as_its_service_account_with_exactly_the_manifests_rbac() {
    let Some(cluster) = Cluster::from_env() else {
        return;
    };
    let rendered = Rendered::manifests(&cluster.kubectl);
    let (own_ns, sa) = rendered.service_account();
    let admin = support::TestEnv {
        client: support::client().await,
        ns: MACHINE_API.to_string(),
        singleton: "cluster".to_string(),
    };
    let foreign = foreign_singletons(&admin).await;
    if !foreign.is_empty() {
        eprintln!(
            "SKIPPED: {} exist and were not created by this test (the demo?); \
             run it against a cluster of its own",
            foreign.join(", ")
        );
        return;
    }

    // The namespaces OpenShift has, then the manifests exactly as rendered.
    let namespace =
        |name: &str| json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}});
    cluster.apply(&[namespace(MACHINE_API), namespace(MCO), namespace(ELSEWHERE)]);
    ensure_namespaces(&cluster, &rendered);
    let (served, _) = split_by_served(&rendered.0, &cluster.served_kinds());
    cluster.apply(&served);

    let cleanup = RbacScenarioCleanup {
        cluster: &cluster,
        own_namespace: own_ns.clone(),
    };
    cleanup.run(); // leftovers of an interrupted run

    // A kubeconfig with a token of the ServiceAccount (TokenRequest API).
    let token = cluster
        .ok(
            &["create", "token", &sa, "-n", &own_ns, "--duration=1h"],
            None,
        )
        .trim()
        .to_string();
    let tmp = tempfile::tempdir().expect("temp dir");
    let sa_kubeconfig = tmp.path().join("service-account.kubeconfig");
    std::fs::write(
        &sa_kubeconfig,
        token_kubeconfig(&cluster.kubeconfig, &token, &own_ns).to_string(),
    )
    .expect("write kubeconfig");
    let as_sa = Cluster {
        kubectl: cluster.kubectl.clone(),
        kubeconfig: sa_kubeconfig.clone(),
    };
    let whoami = as_sa.ok(
        &[
            "auth",
            "whoami",
            "-o",
            "jsonpath={.status.userInfo.username}",
        ],
        None,
    );
    assert_eq!(whoami, format!("system:serviceaccount:{own_ns}:{sa}"));

    // An OpenShift-on-AWS cluster at 4.21 with one worker MachineSet still on 4.20's AMI and the
    // installer's unmanaged stub secret. The MachineConfiguration selects only this test's
    // MachineSets.
    use support::fixtures::*;
    admin
        .apply(labelled(infrastructure("cluster", "AWS")))
        .await;
    admin
        .apply(labelled(cluster_version("version", "4.21.0", "Completed")))
        .await;
    let selector = json!({"matchLabels": {RBAC_TEST_LABEL: "true"}});
    admin
        .apply(labelled(machine_configuration(
            "cluster",
            Some(selection("Partial", Some(selector))),
        )))
        .await;
    admin
        .apply(labelled(golden_config_map(MCO, "4.21.0", &stream_421())))
        .await;
    admin
        .apply(labelled(stub_secret(
            MACHINE_API,
            "worker-user-data",
            "2.2.0",
        )))
        .await;
    admin
        .apply(labelled(stub_secret(
            MACHINE_API,
            "worker-user-data-managed",
            "3.2.0",
        )))
        .await;
    let name = format!("rbac-worker-{}", std::process::id());
    admin
        .apply(labelled(machine_set(MACHINE_API, &name).build()))
        .await;
    // 4.20's AMI is a published CoreOS image: the Deployment mounts such a list from the
    // boot-image-controller-published-images ConfigMap.
    let known_images = tmp.path().join("images.txt");
    std::fs::write(&known_images, format!("{AMI_420_US_EAST_1}\n")).expect("write images");

    // The controller as the Deployment runs it, but as a local process: the ServiceAccount's
    // token, the manifests' namespace, default names for everything else.
    let identity = format!("rbac-test-{}", std::process::id());
    let mut controller = support::ControllerProcess::spawn(
        "rbac-service-account",
        &[
            format!("--kubeconfig={}", sa_kubeconfig.display()),
            format!("--namespace={own_ns}"),
            "--leader-elect".into(),
            format!("--identity={identity}"),
            format!("--known-images-file={}", known_images.display()),
            "--log-level=debug".into(),
        ],
    );
    controller.wait_ready().await;
    let converge = Duration::from_secs(90);
    let failed = |what: &str, controller: &support::ControllerProcess| {
        format!(
            "{what}\nrefused requests: {:?}\n{}",
            refused_requests(&controller.logs()),
            strip_ansi(&controller.log_tail(40))
        )
    };

    // It leads (the Lease in its namespace names it) ...
    let lease = support::eventually(converge, || async {
        let leases: kube::Api<k8s_openapi::api::coordination::v1::Lease> =
            kube::Api::namespaced(admin.client.clone(), &own_ns);
        let lease = leases.get_opt("boot-image-controller").await.ok()??;
        (lease.spec.as_ref()?.holder_identity.as_deref() == Some(identity.as_str()))
            .then_some(lease)
    })
    .await;
    assert!(
        lease.is_some(),
        "{}",
        failed("never acquired the Lease", &controller)
    );

    // ... patches the MachineSet: the image and the managed stub secret ...
    let patched = support::eventually(converge, || async {
        let ms = admin.machine_set(&name).await;
        (ami_of(&ms) == AMI_421_US_EAST_1 && secret_of(&ms) == "worker-user-data-managed")
            .then_some(ms)
    })
    .await;
    assert!(
        patched.is_some(),
        "{}",
        failed("the MachineSet was not updated", &controller)
    );

    // ... writes its conditions ...
    let conditions = support::eventually(converge, || async {
        let progressing = admin.condition("BootImageUpdateProgressing").await?;
        let degraded = admin.condition("BootImageUpdateDegraded").await?;
        (progressing["status"] == "False"
            && progressing["reason"] == "BootImagesCurrent"
            && degraded["status"] == "False")
            .then_some(())
    })
    .await;
    assert!(
        conditions.is_some(),
        "{}",
        failed(
            &format!(
                "conditions not written; now {:?}",
                admin.machine_configuration().await["status"]
            ),
            &controller
        )
    );

    // ... records an Event on the MachineSet ...
    let event = support::eventually(converge, || async {
        admin
            .events_for(&name)
            .await
            .into_iter()
            .find(|e| e["reason"] == "BootImageUpdated")
    })
    .await;
    assert!(
        event.is_some(),
        "{}",
        failed("no BootImageUpdated Event", &controller)
    );

    // ... and remembers the golden images in its own namespace.
    let configmaps: kube::Api<k8s_openapi::api::core::v1::ConfigMap> =
        kube::Api::namespaced(admin.client.clone(), &own_ns);
    let remembered = support::eventually(converge, || async {
        let cm = configmaps
            .get_opt(boot_image_controller::names::KNOWN_IMAGES_CONFIGMAP_NAME)
            .await
            .ok()??;
        cm.data?
            .values()
            .any(|v| v.contains(AMI_421_US_EAST_1))
            .then_some(())
    })
    .await;
    assert!(
        remembered.is_some(),
        "{}",
        failed(
            "no known-images ConfigMap in the controller's namespace",
            &controller
        )
    );
    assert_eq!(
        controller.metric(names::LEADER).await,
        Some(1.0),
        "boot_image_controller_leader"
    );
    assert_eq!(
        controller
            .metric(&format!(
                "{}{{target=\"ConfigMap\"}}",
                names::WRITE_FAILURES
            ))
            .await
            .unwrap_or(0.0),
        0.0,
        "bookkeeping writes failed"
    );

    // Nothing it needs was refused.
    let refused = refused_requests(&controller.logs());
    assert!(
        refused.is_empty(),
        "the controller was refused requests with the manifests' RBAC:\n{}",
        refused.join("\n")
    );
    assert_eq!(
        controller.terminate(),
        Some(0),
        "{}",
        controller.log_tail(30)
    );

    // What it must not do, asked with its own token: patch a MachineSet in another namespace,
    // read the installer's unmanaged stub secret. (It may read the managed one, so the token
    // works and the refusals are RBAC's.)
    admin
        .apply(labelled(machine_set(ELSEWHERE, "someone-elses").build()))
        .await;
    let patch = r#"[{"op":"replace","path":"/spec/template/spec/providerSpec/value/ami/id","value":"ami-0123456789abcdef0"}]"#;
    let deadline = Instant::now() + Duration::from_secs(20);
    // The first answers after applying the manifests may be stale (see the can-i test).
    while as_sa
        .run(
            &[
                "get",
                "secret",
                "worker-user-data-managed",
                "-n",
                MACHINE_API,
            ],
            None,
        )
        .status
        .code()
        != Some(0)
        && Instant::now() < deadline
    {
        std::thread::sleep(Duration::from_millis(500));
    }
    as_sa.ok(
        &[
            "get",
            "secret",
            "worker-user-data-managed",
            "-n",
            MACHINE_API,
        ],
        None,
    );
    assert_forbidden(
        &as_sa.run(
            &[
                "patch",
                "machinesets.machine.openshift.io",
                "someone-elses",
                "-n",
                ELSEWHERE,
                "--type=json",
                "-p",
                patch,
            ],
            None,
        ),
        &format!("patching a MachineSet in {ELSEWHERE}"),
    );
    assert_forbidden(
        &as_sa.run(
            &["get", "secret", "worker-user-data", "-n", MACHINE_API],
            None,
        ),
        "reading the unmanaged stub secret",
    );
    drop(cleanup);
}

// ---------------------------------------------------------------------------------------------
// The kustomize build

/// Every namespaced object sits in `ns`, except the pinned ones, which sit where their
/// annotation says; every binding of our ServiceAccount names `ns`.
fn assert_placed(rendered: &Rendered, ns: &str) {
    let (sa_ns, sa) = rendered.service_account();
    assert_eq!(sa_ns, ns);
    let namespaces: Vec<String> = rendered
        .of_kind("Namespace")
        .map(|o| str_of(&o["metadata"]["name"]))
        .collect();
    assert_eq!(
        namespaces,
        [ns],
        "the manifests create exactly their own namespace"
    );

    let mut pinned = BTreeMap::new();
    for o in &rendered.0 {
        let meta = &o["metadata"];
        let name = format!("{} {}", str_of(&o["kind"]), str_of(&meta["name"]));
        match (
            meta["annotations"][PINNED_ANNOTATION].as_str(),
            meta["namespace"].as_str(),
        ) {
            (Some(pin), actual) => {
                assert_eq!(actual, Some(pin), "{name} must stay in {pin}");
                pinned.insert(name.clone(), pin.to_string());
            }
            (None, Some(actual)) => assert_eq!(actual, ns, "{name}"),
            (None, None) => {}
        }
        if matches!(
            o["kind"].as_str(),
            Some("RoleBinding" | "ClusterRoleBinding")
        ) {
            for subject in o["subjects"].as_array().expect("subjects") {
                if subject["kind"] == "ServiceAccount" && subject["name"] == sa.as_str() {
                    assert_eq!(
                        subject["namespace"], ns,
                        "{name} binds the ServiceAccount in {ns}"
                    );
                }
            }
        }
    }
    // The Roles (and their bindings) for the MachineSets and for the golden ConfigMap.
    for (kind, name, pin) in [
        ("Role", "boot-image-controller-machine-api", MACHINE_API),
        (
            "RoleBinding",
            "boot-image-controller-machine-api",
            MACHINE_API,
        ),
        ("Role", "boot-image-controller-golden-configmap", MCO),
        ("RoleBinding", "boot-image-controller-golden-configmap", MCO),
    ] {
        assert_eq!(
            pinned.get(&format!("{kind} {name}")).map(String::as_str),
            Some(pin)
        );
    }
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("create dir");
    for entry in std::fs::read_dir(from).expect("read dir") {
        let entry = entry.expect("dir entry");
        let target = to.join(entry.file_name());
        if entry.file_type().expect("file type").is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).expect("copy file");
        }
    }
}

#[test]
fn the_namespace_can_be_changed_without_moving_the_roles_for_other_namespaces() {
    let Some(kubectl) = kubectl_or_skip() else {
        return;
    };
    assert_placed(&Rendered::manifests(&kubectl), &kustomization_namespace());

    let tmp = tempfile::tempdir().expect("temp dir");
    let base = tmp.path().join("manifests");
    copy_dir(&repo().join("manifests"), &base);

    // By editing the kustomization's namespace.
    let kustomization = read("manifests/kustomization.yaml");
    let line = format!("namespace: {}\n", kustomization_namespace());
    assert!(kustomization.contains(&line));
    std::fs::write(
        base.join("kustomization.yaml"),
        kustomization.replace(&line, "namespace: bic-edited\n"),
    )
    .expect("write kustomization");
    assert_placed(&Rendered::build(&kubectl, &base), "bic-edited");

    // By an overlay, as manifests/kustomization.yaml documents.
    let overlay = tmp.path().join("overlay");
    std::fs::create_dir(&overlay).expect("overlay dir");
    std::fs::write(
        overlay.join("kustomization.yaml"),
        "namespace: bic-overlay\nresources: [../manifests]\ntransformers: [../manifests/pinned-namespaces]\n",
    )
    .expect("write overlay");
    assert_placed(&Rendered::build(&kubectl, &overlay), "bic-overlay");
}

/// Label selector `selector` (matchLabels only) selects `labels`.
fn selects(selector: &Value, labels: &Value) -> bool {
    let wanted = selector.as_object().expect("matchLabels");
    !wanted.is_empty() && wanted.iter().all(|(k, v)| &labels[k] == v)
}

#[test]
fn the_deployment_service_and_monitor_are_wired_together() {
    let Some(kubectl) = kubectl_or_skip() else {
        return;
    };
    let rendered = Rendered::manifests(&kubectl);
    let deployment = rendered.get("Deployment", "boot-image-controller");
    let pod = &deployment["spec"]["template"];
    let container = &pod["spec"]["containers"][0];
    let ports: BTreeMap<String, i64> = container["ports"]
        .as_array()
        .expect("container ports")
        .iter()
        .map(|p| {
            (
                str_of(&p["name"]),
                p["containerPort"].as_i64().expect("port"),
            )
        })
        .collect();
    let args: Vec<String> = container["args"]
        .as_array()
        .expect("args")
        .iter()
        .map(str_of)
        .collect();

    // The flags and the ports agree; the probes use the health port.
    assert_eq!(ports.get("metrics"), Some(&8080));
    assert_eq!(ports.get("health"), Some(&8081));
    assert!(
        args.contains(&"--metrics-bind-address=:8080".to_string()),
        "{args:?}"
    );
    assert!(
        args.contains(&"--health-probe-bind-address=:8081".to_string()),
        "{args:?}"
    );
    assert!(args.contains(&"--leader-elect".to_string()), "{args:?}");
    assert_eq!(
        container["livenessProbe"]["httpGet"],
        json!({"path": "/healthz", "port": "health"})
    );
    assert_eq!(
        container["readinessProbe"]["httpGet"],
        json!({"path": "/readyz", "port": "health"})
    );
    assert_eq!(deployment["spec"]["replicas"], 2);

    // The pod identity the Lease and the controller's namespace come from.
    let env: BTreeMap<String, Value> = container["env"]
        .as_array()
        .expect("env")
        .iter()
        .map(|e| {
            (
                str_of(&e["name"]),
                e["valueFrom"]["fieldRef"]["fieldPath"].clone(),
            )
        })
        .collect();
    assert_eq!(env.get("POD_NAME"), Some(&json!("metadata.name")));
    assert_eq!(env.get("POD_NAMESPACE"), Some(&json!("metadata.namespace")));

    // Hardened: what the restricted Pod Security Standard asks, and a read-only root.
    let security = &container["securityContext"];
    assert_eq!(security["readOnlyRootFilesystem"], true);
    assert_eq!(security["allowPrivilegeEscalation"], false);
    assert_eq!(security["capabilities"]["drop"], json!(["ALL"]));
    assert_eq!(pod["spec"]["securityContext"]["runAsNonRoot"], true);
    assert_eq!(
        pod["spec"]["securityContext"]["seccompProfile"]["type"],
        "RuntimeDefault"
    );

    // The known-images file is in the mounted ConfigMap the manifests create.
    let file_arg = args
        .iter()
        .find_map(|a| a.strip_prefix("--known-images-file="))
        .expect("--known-images-file");
    let mount = container["volumeMounts"]
        .as_array()
        .expect("volumeMounts")
        .iter()
        .find(|m| file_arg.starts_with(&format!("{}/", str_of(&m["mountPath"]))))
        .expect("a volume mounted where --known-images-file points");
    let volume = pod["spec"]["volumes"]
        .as_array()
        .expect("volumes")
        .iter()
        .find(|v| v["name"] == mount["name"])
        .expect("the mounted volume");
    let configmap = rendered.get("ConfigMap", &str_of(&volume["configMap"]["name"]));
    let key = file_arg.rsplit('/').next().expect("file name");
    assert!(
        configmap["data"][key].is_string(),
        "the ConfigMap has the key {key}"
    );

    // Service -> pods, ServiceMonitor -> Service and its port.
    let service = rendered.get("Service", "boot-image-controller");
    assert!(selects(
        &service["spec"]["selector"],
        &pod["metadata"]["labels"]
    ));
    assert!(
        service["spec"]["ports"]
            .as_array()
            .expect("service ports")
            .iter()
            .any(|p| p["name"] == "metrics" && p["targetPort"] == "metrics")
    );
    let monitor = rendered.get("ServiceMonitor", "boot-image-controller");
    assert!(selects(
        &monitor["spec"]["selector"]["matchLabels"],
        &service["metadata"]["labels"]
    ));
    assert_eq!(monitor["spec"]["endpoints"][0]["port"], "metrics");
    assert_eq!(monitor["spec"]["endpoints"][0]["path"], "/metrics");
    assert!(
        selects(
            &deployment["spec"]["selector"]["matchLabels"],
            &pod["metadata"]["labels"]
        ),
        "the Deployment selects its pods"
    );
    let pdb = rendered.get("PodDisruptionBudget", "boot-image-controller");
    assert!(selects(
        &pdb["spec"]["selector"]["matchLabels"],
        &pod["metadata"]["labels"]
    ));

    // The alerts select the scrape job by the Service's name (the job label of a ServiceMonitor).
    let rules = read(PROMETHEUS_RULE);
    let job = format!("job=\"{}\"", str_of(&service["metadata"]["name"]));
    assert!(rules.contains(&job), "the alerts use {job}");
    assert!(
        !rules.replace(&job, "").contains("job="),
        "every job matcher in the alerts is {job}"
    );
}

// ---------------------------------------------------------------------------------------------
// Metrics, alerts and dashboard

/// Metric names in `text`: `\b(boot_image_controller_[a-z_]+|mcc_bootimage_update_error)\b`,
/// with the `_bucket`, `_sum` and `_count` series of histograms folded into their family.
fn metric_names(text: &str) -> BTreeSet<String> {
    let word = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let mut found = BTreeSet::new();
    for (start, _) in text.char_indices() {
        if text[..start].chars().next_back().is_some_and(word) {
            continue;
        }
        let rest = &text[start..];
        let name = if let Some(tail) = rest.strip_prefix("boot_image_controller_") {
            let len = tail
                .find(|c: char| !(c.is_ascii_lowercase() || c == '_'))
                .unwrap_or(tail.len());
            if len == 0 || tail[len..].chars().next().is_some_and(word) {
                continue;
            }
            &rest[.."boot_image_controller_".len() + len]
        } else if rest.starts_with(names::MCC_UPDATE_ERROR)
            && !rest[names::MCC_UPDATE_ERROR.len()..]
                .chars()
                .next()
                .is_some_and(word)
        {
            names::MCC_UPDATE_ERROR
        } else {
            continue;
        };
        let family = ["_bucket", "_sum", "_count"]
            .iter()
            .find_map(|suffix| name.strip_suffix(suffix))
            .unwrap_or(name);
        found.insert(family.to_string());
    }
    found
}

fn used_metrics() -> BTreeMap<&'static str, BTreeSet<String>> {
    BTreeMap::from([
        (PROMETHEUS_RULE, metric_names(&read(PROMETHEUS_RULE))),
        (DASHBOARD, metric_names(&read(DASHBOARD))),
        (CONSOLE_DASHBOARD, metric_names(&read(CONSOLE_DASHBOARD))),
    ])
}

#[test]
fn metric_names_are_found_as_whole_words() {
    let text = "rate(boot_image_controller_reconcile_duration_seconds_bucket[5m]) \
                boot_image_controller_leader{pod=\"a\"} xboot_image_controller_ready \
                mcc_bootimage_update_error_total mcc_bootimage_update_error==1 \
                boot_image_controller_Oops boot_image_controller_";
    assert_eq!(
        metric_names(text),
        BTreeSet::from([
            "boot_image_controller_reconcile_duration_seconds".to_string(),
            "boot_image_controller_leader".to_string(),
            "mcc_bootimage_update_error".to_string(),
        ])
    );
}

#[test]
fn the_expected_metrics_are_the_ones_the_controller_defines() {
    let defined = BTreeSet::from([
        names::MACHINE_RESOURCES,
        names::PATCHES,
        names::ERRORS,
        names::HOT_LOOPS,
        names::BLOCKED,
        names::RECONCILE_DURATION,
        names::LAST_SYNC,
        names::GOLDEN_STREAM,
        names::LEADER,
        names::WRITES,
        names::WRITE_FAILURES,
        names::BUILD_INFO,
        names::READY,
        names::MCC_UPDATE_ERROR,
        names::HOLD_EXCEEDED,
    ]);
    let expected: BTreeSet<&str> = EXPORTED_METRICS.iter().copied().collect();
    assert_eq!(expected, defined);
}

#[test]
fn alerts_and_dashboard_use_only_exported_metrics() {
    let exported: BTreeSet<String> = EXPORTED_METRICS.iter().map(|s| s.to_string()).collect();
    for (file, used) in used_metrics() {
        assert!(!used.is_empty(), "{file} uses no metric at all?");
        let unknown: Vec<&String> = used.difference(&exported).collect();
        assert!(
            unknown.is_empty(),
            "{file} uses metrics the controller does not export: {unknown:?}"
        );
    }
    // The alerts cover the compatibility gauge, hot loops, the gates, planned updates and leader.
    let rules = &used_metrics()[PROMETHEUS_RULE];
    for name in [
        names::MCC_UPDATE_ERROR,
        names::HOT_LOOPS,
        names::BLOCKED,
        names::MACHINE_RESOURCES,
        names::LEADER,
    ] {
        assert!(rules.contains(name), "no alert uses {name}");
    }
}

/// Values of `label="..."` and `label=~"a|b"` matchers in `text`.
fn label_values(text: &str, label: &str) -> BTreeSet<String> {
    let mut values = BTreeSet::new();
    for op in ["=\"", "=~\"", "!=\""] {
        let needle = format!("{label}{op}");
        for (at, _) in text.match_indices(&needle) {
            if text[..at]
                .chars()
                .next_back()
                .is_some_and(|c| c.is_ascii_alphanumeric() || c == '_')
            {
                continue;
            }
            let rest = &text[at + needle.len()..];
            let value = &rest[..rest.find('"').expect("closing quote")];
            values.extend(
                value
                    .split('|')
                    .filter(|v| !v.is_empty())
                    .map(str::to_string),
            );
        }
    }
    values
}

#[test]
fn alerts_and_dashboard_match_on_real_reasons_and_actions() {
    let reasons: BTreeSet<&str> = Reason::ALL.iter().map(|r| r.as_str()).collect();
    let actions: BTreeSet<&str> = Action::ALL.iter().map(|a| a.as_str()).collect();
    for file in [PROMETHEUS_RULE, DASHBOARD, CONSOLE_DASHBOARD] {
        // The dashboard is JSON: its quotes are escaped.
        let text = read(file).replace("\\\"", "\"");
        for reason in label_values(&text, "reason") {
            assert!(
                reasons.contains(reason.as_str()),
                "{file}: reason {reason:?} is not a Reason"
            );
        }
        for action in label_values(&text, "action") {
            assert!(
                actions.contains(action.as_str()),
                "{file}: action {action:?} is not an Action"
            );
        }
    }
}

/// GET over plain HTTP/1.0: the body, or a message.
fn http_get(url: &str) -> Result<String, String> {
    let rest = url.strip_prefix("http://").ok_or("only http:// URLs")?;
    let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    let path = if path.is_empty() { "/metrics" } else { path };
    let mut stream =
        TcpStream::connect(authority).map_err(|e| format!("connect {authority}: {e}"))?;
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .map_err(|e| e.to_string())?;
    write!(
        stream,
        "GET {path} HTTP/1.0\r\nHost: {authority}\r\nAccept: text/plain\r\n\r\n"
    )
    .map_err(|e| e.to_string())?;
    let mut response = String::new();
    stream
        .read_to_string(&mut response)
        .map_err(|e| e.to_string())?;
    let (head, body) = response.split_once("\r\n\r\n").ok_or("no HTTP header")?;
    let status = head.lines().next().unwrap_or_default();
    if status.split_whitespace().nth(1) != Some("200") {
        return Err(format!("GET {url}: {status}"));
    }
    Ok(body.to_string())
}

/// Metric families in the text exposition format: `# TYPE` lines and sample names.
fn exposed_families(body: &str) -> BTreeSet<String> {
    body.lines()
        .filter_map(|line| match line.strip_prefix("# TYPE ") {
            Some(typed) => typed.split_whitespace().next(),
            None if !line.starts_with('#') => line.split(['{', ' ']).next(),
            None => None,
        })
        .filter(|name| !name.is_empty())
        .flat_map(metric_names)
        .collect()
}

/// Fails the test when the alerts or the dashboard use a family `exposed` lacks.
fn assert_exports_used_metrics(exposed: &BTreeSet<String>, source: &str) {
    for (file, used) in used_metrics() {
        let missing: Vec<&String> = used.difference(exposed).collect();
        assert!(
            missing.is_empty(),
            "{file} uses metrics {source} does not export: {missing:?} \
             (a labelled family appears only once it has a series)"
        );
    }
}

/// The controller on a simulated cluster, with one MachineSet current and one that cannot be
/// updated (its role's managed stub secret does not exist), so that the conditional families
/// have series too: `golden_stream_info` once the stream is read, `mcc_bootimage_update_error`
/// while a MachineSet fails.
#[tokio::test]
async fn a_running_controller_exports_every_metric_the_alerts_and_dashboard_use() {
    use support::fixtures::*;
    let env = support::TestEnv::new("metrics").await;
    env.aws_cluster("4.21.0", &stream_421(), None).await;
    env.apply(
        machine_set(&env.ns, "worker-current")
            .ami(AMI_421_US_EAST_1)
            .user_data("worker-user-data-managed")
            .build(),
    )
    .await;
    env.apply(
        machine_set(&env.ns, "infra-broken")
            .ami(AMI_421_US_EAST_1)
            .arch("sparc64")
            .build(),
    )
    .await;
    let controller = env.controller(&["--leader-elect"]);
    controller.wait_ready().await;

    let failing = format!("{}{{machineset=\"infra-broken\"}}", names::MCC_UPDATE_ERROR);
    let exported = support::eventually(Duration::from_secs(60), || async {
        let metrics = controller.metrics().await;
        (support::sample(&metrics, &failing) == Some(1.0)
            && metrics.contains(&format!("{}{{", names::GOLDEN_STREAM))
            && support::sample(&metrics, names::LEADER) == Some(1.0))
        .then_some(metrics)
    })
    .await;
    let Some(metrics) = exported else {
        let samples = controller.metrics().await;
        let samples: Vec<&str> = samples.lines().filter(|l| !l.starts_with('#')).collect();
        panic!(
            "never exported {failing} 1, the golden stream and leadership:\n{}\n{}",
            samples.join("\n"),
            controller.log_tail(40)
        );
    };
    let exposed = exposed_families(&metrics);
    assert_exports_used_metrics(&exposed, "the running controller");
    // And the list the static checks above rely on is what the controller really exports.
    let expected: BTreeSet<String> = EXPORTED_METRICS.iter().map(|s| s.to_string()).collect();
    assert_eq!(exposed, expected, "exported metric families");
}

/// The same check against a deployed controller (`BIC_METRICS_URL`, for example through
/// `oc port-forward`), when one is given.
#[test]
fn a_deployed_controller_exports_every_metric_the_alerts_and_dashboard_use() {
    let Some(url) = std::env::var("BIC_METRICS_URL")
        .ok()
        .filter(|u| !u.is_empty())
    else {
        eprintln!("SKIPPED: no BIC_METRICS_URL (the /metrics URL of a deployed controller)");
        return;
    };
    let exposed = exposed_families(&http_get(&url).unwrap_or_else(|e| panic!("{e}")));
    assert_exports_used_metrics(&exposed, &url);
}

/// The console shows exactly the Grafana dashboard: same file, in a ConfigMap where and how the
/// console looks for dashboards.
#[test]
fn the_console_dashboard_is_the_grafana_dashboard() {
    assert!(
        read(CONSOLE_DASHBOARD) == read(DASHBOARD),
        "{CONSOLE_DASHBOARD} differs from {DASHBOARD}: run hack/sync-console-dashboard.sh"
    );
    let Some(kubectl) = kubectl_or_skip() else {
        return;
    };
    let rendered = Rendered::manifests(&kubectl);
    let config_map = rendered.get("ConfigMap", "boot-image-controller-dashboard");
    // The console's server lists exactly these: ConfigMaps in openshift-config-managed with the
    // label console.openshift.io/dashboard=true (openshift/console, cmd/bridge:
    // `MonitoringDashboardConfigMapLister`).
    assert_eq!(
        config_map["metadata"]["namespace"], "openshift-config-managed",
        "{config_map}"
    );
    assert_eq!(
        config_map["metadata"]["labels"]["console.openshift.io/dashboard"], "true",
        "{config_map}"
    );
    let data = config_map["data"].as_object().expect("data");
    assert_eq!(data.len(), 1, "one dashboard per ConfigMap");
    let json = data
        .values()
        .next()
        .and_then(Value::as_str)
        .unwrap_or_default();
    assert_eq!(json, read(DASHBOARD), "the ConfigMap holds the dashboard");
}

#[test]
fn the_dashboard_has_what_grafana_needs() {
    let dashboard: Value = serde_json::from_str(&read(DASHBOARD)).expect("the dashboard is JSON");
    let uid = dashboard["uid"].as_str().expect("uid");
    assert!(
        !uid.is_empty() && uid.len() <= 40,
        "a stable uid of at most 40 characters"
    );
    assert!(
        dashboard["title"].as_str().is_some_and(|t| !t.is_empty()),
        "title"
    );
    assert!(
        dashboard["schemaVersion"].as_i64().is_some_and(|v| v >= 36),
        "schemaVersion"
    );

    let variables = dashboard["templating"]["list"]
        .as_array()
        .expect("templating.list");
    let datasource = variables
        .iter()
        .find(|v| v["type"] == "datasource")
        .expect("a datasource variable");
    assert_eq!(datasource["query"], "prometheus");
    let reference = format!("${{{}}}", str_of(&datasource["name"]));
    let uses_variable = |ds: &Value| ds["type"] == "prometheus" && ds["uid"] == reference.as_str();
    for v in variables.iter().filter(|v| v["type"] == "query") {
        assert!(
            uses_variable(&v["datasource"]),
            "variable {} uses {reference}",
            v["name"]
        );
    }

    let panels = dashboard["panels"].as_array().expect("panels");
    assert!(!panels.is_empty());
    let mut ids = BTreeSet::new();
    for panel in panels {
        let title = str_of(&panel["title"]);
        assert!(
            ids.insert(panel["id"].as_i64().expect("panel id")),
            "duplicate id on {title}"
        );
        assert!(panel["type"].is_string(), "{title}: type");
        for key in ["x", "y", "w", "h"] {
            assert!(panel["gridPos"][key].is_i64(), "{title}: gridPos.{key}");
        }
        assert!(
            uses_variable(&panel["datasource"]),
            "{title}: datasource {reference}"
        );
        let targets = panel["targets"].as_array().expect("targets");
        assert!(!targets.is_empty(), "{title}: no targets");
        for target in targets {
            assert!(target["refId"].is_string(), "{title}: refId");
            assert!(
                target["expr"].as_str().is_some_and(|e| !e.is_empty()),
                "{title}: expr"
            );
            assert!(
                uses_variable(&target["datasource"]),
                "{title}: target datasource"
            );
        }
    }

    // The panels the issue asks for.
    let text = read(DASHBOARD);
    for (what, needle) in [
        ("MachineSets by state", names::MACHINE_RESOURCES),
        ("patches", names::PATCHES),
        ("errors", names::ERRORS),
        ("hot loops", names::HOT_LOOPS),
        ("reconcile latency", "histogram_quantile"),
        ("time since last sync", names::LAST_SYNC),
        ("golden stream release", names::GOLDEN_STREAM),
        ("leader", names::LEADER),
    ] {
        assert!(text.contains(needle), "no panel for {what} ({needle})");
    }
}

// ---------------------------------------------------------------------------------------------
// Resources

/// MachineSets in the sizing scenario: more than any real cluster has (a large one has a few
/// dozen: one per role and availability zone). `BIC_SIZING_MACHINE_SETS` measures another size.
fn sizing_machine_sets() -> usize {
    std::env::var("BIC_SIZING_MACHINE_SETS")
        .ok()
        .map(|n| n.parse().expect("BIC_SIZING_MACHINE_SETS is a number"))
        .unwrap_or(200)
}

/// A Kubernetes memory quantity (`64Mi`, `1Gi`, `500M`, bytes) in bytes.
fn quantity_bytes(q: &str) -> u64 {
    let (digits, unit) = q.split_at(q.find(|c: char| !c.is_ascii_digit()).unwrap_or(q.len()));
    let n: u64 = digits.parse().unwrap_or_else(|_| panic!("quantity {q:?}"));
    n * match unit {
        "" => 1,
        "Ki" => 1 << 10,
        "Mi" => 1 << 20,
        "Gi" => 1 << 30,
        "k" => 1_000,
        "M" => 1_000_000,
        "G" => 1_000_000_000,
        other => panic!("quantity {q:?}: unit {other:?}"),
    }
}

/// User plus system CPU time of a process so far, in seconds.
fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("/proc/<pid>/stat");
    // Fields after the parenthesised command name: state is field 3, utime 14, stime 15.
    let fields: Vec<&str> = stat[stat.rfind(')').expect("comm") + 2..]
        .split_whitespace()
        .collect();
    let ticks: f64 =
        fields[11].parse::<f64>().expect("utime") + fields[12].parse::<f64>().expect("stime");
    let per_second: f64 = Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok())
        .unwrap_or(100.0);
    ticks / per_second
}

#[test]
fn quantities_are_read_as_kubernetes_writes_them() {
    assert_eq!(quantity_bytes("64Mi"), 64 << 20);
    assert_eq!(quantity_bytes("1Gi"), 1 << 30);
    assert_eq!(quantity_bytes("500M"), 500_000_000);
    assert_eq!(quantity_bytes("1024"), 1024);
}

/// The controller's peak memory while it updates 200 outdated MachineSets
/// (watches, plans, 200 patches and Events, status, known images), against the Deployment's
/// memory request and limit: the request must cover the peak and the limit leave at least twice
/// the peak. Prints the measurement; manifests/deployment.yaml cites it.
#[tokio::test]
async fn the_memory_limit_leaves_headroom_over_200_machine_sets() {
    use support::fixtures::*;
    let Some(kubectl) = kubectl_or_skip() else {
        return;
    };
    let env = support::TestEnv::new("memory").await;
    env.aws_cluster("4.21.0", &stream_421(), None).await;
    let machine_sets = sizing_machine_sets();
    let objects: Vec<Value> = (0..machine_sets)
        .map(|i| {
            let (region, ami) = if i % 2 == 0 {
                ("us-east-1", AMI_420_US_EAST_1)
            } else {
                ("us-east-2", AMI_420_US_EAST_2)
            };
            machine_set(&env.ns, &format!("worker-{i:03}"))
                .region(region)
                .ami(ami)
                .build()
        })
        .collect();
    for chunk in objects.chunks(20) {
        futures::future::join_all(chunk.iter().map(|o| env.apply(o.clone()))).await;
    }
    // 4.20's AMIs are published CoreOS images (the Deployment mounts such a list).
    let tmp = tempfile::tempdir().expect("temp dir");
    let known_images = tmp.path().join("images.txt");
    std::fs::write(
        &known_images,
        format!("{AMI_420_US_EAST_1}\n{AMI_420_US_EAST_2}\n"),
    )
    .expect("write images");

    let mut flags = env.controller_flags();
    flags.retain(|f| !f.starts_with("--log-level"));
    flags.extend([
        format!("--known-images-file={}", known_images.display()),
        "--leader-elect".into(),
        "--log-level=info".into(),
        "--log-format=json".into(),
    ]);
    let controller = support::ControllerProcess::spawn("memory", &flags);
    controller.wait_ready().await;
    let updated = format!(
        "{}{{kind=\"MachineSet\",result=\"updated\"}}",
        names::PATCHES
    );
    let done = support::eventually(Duration::from_secs(180), || async {
        (controller.metric(&updated).await? >= machine_sets as f64).then_some(())
    })
    .await;
    assert!(
        done.is_some(),
        "{} of {machine_sets} MachineSets updated\n{}",
        controller.metric(&updated).await.unwrap_or(0.0),
        controller.log_tail(20)
    );
    // A few more passes over the updated set (the golden ConfigMap changing re-plans all).
    for _ in 0..3 {
        env.apply(golden_config_map(&env.ns, "4.21.0", &stream_421()))
            .await;
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let peak = controller.peak_rss_kib().expect("VmHWM") * 1024;
    let busy = cpu_seconds(controller.pid());
    tokio::time::sleep(Duration::from_secs(5)).await;
    let idle = (cpu_seconds(controller.pid()) - busy) / 5.0;
    eprintln!(
        "MEASURED: {} with {machine_sets} MachineSets: peak RSS (VmHWM) {:.1} MiB, \
         {busy:.2} CPU seconds from start to the last pass, {:.1} millicores idle",
        support::controller_binary().display(),
        peak as f64 / f64::from(1 << 20),
        idle * 1000.0
    );

    let rendered = Rendered::manifests(&kubectl);
    let resources = &rendered.get("Deployment", "boot-image-controller")["spec"]["template"]["spec"]
        ["containers"][0]["resources"];
    let request = quantity_bytes(&str_of(&resources["requests"]["memory"]));
    let limit = quantity_bytes(&str_of(&resources["limits"]["memory"]));
    assert!(
        request >= peak,
        "memory request {request} below the measured peak {peak}"
    );
    assert!(
        limit >= 2 * peak,
        "memory limit {limit} leaves less than 2x headroom over the measured peak {peak}"
    );
}
