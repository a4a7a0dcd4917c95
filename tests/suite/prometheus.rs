//! A real Prometheus scrapes the running controller and evaluates the alert rules of
//! manifests/monitoring/prometheusrule.yaml (extracted by hack/promtool/extract-rules.sh, with
//! every `for` shortened to 1s): a MachineSet whose boot image cannot be updated must show in
//! Prometheus's HTTP API as `mcc_bootimage_update_error 1` and a firing BootImageUpdateError,
//! and the alert must resolve once the cause is fixed. Every query of the dashboard evaluates
//! on the same scrape, and its top panels read as they should for a healthy controller.
//!
//! The server comes from Debian's `prometheus` package (`$PROMETHEUS`, else `prometheus` on
//! PATH), installed by hack/ensure-prometheus.sh when missing and running as root. Without it
//! and without root the test prints `SKIPPED`.

use crate::metrics_tls;
use crate::support;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use boot_image_controller::metrics::names;
use serde_json::Value;
use support::fixtures::*;
use support::{REPO, TestEnv, eventually, free_port, http_get};

/// The `job` label the alert rules select on: the metrics Service's name, which a
/// ServiceMonitor makes the job name.
const JOB: &str = "boot-image-controller";
const ALERT: &str = "BootImageUpdateError";
const CONVERGE: Duration = Duration::from_secs(90);

fn works(binary: &Path) -> bool {
    Command::new(binary)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

/// The Prometheus server binary, installed if needed and possible; `None` means skip.
pub(crate) fn prometheus_binary() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("PROMETHEUS").filter(|p| !p.is_empty()) {
        let path = PathBuf::from(path);
        assert!(works(&path), "$PROMETHEUS={} does not run", path.display());
        return Some(path);
    }
    let on_path = PathBuf::from("prometheus");
    if works(&on_path) {
        return Some(on_path);
    }
    if !is_root() {
        boot_image_controller::testkit::skips::skip(
            "no prometheus binary and not root to install it \
             (apt-get install prometheus, or set PROMETHEUS)",
        );
        return None;
    }
    let status = Command::new(Path::new(REPO).join("hack/ensure-prometheus.sh"))
        .status()
        .expect("run hack/ensure-prometheus.sh");
    assert!(status.success(), "hack/ensure-prometheus.sh failed");
    assert!(
        works(&on_path),
        "prometheus still not on PATH after install"
    );
    Some(on_path)
}

/// The alert rules as the cluster gets them, with `for` shortened for a test.
fn rules(for_duration: &str) -> String {
    let out = Command::new(Path::new(REPO).join("hack/promtool/extract-rules.sh"))
        .args(["--for", for_duration])
        .output()
        .expect("run hack/promtool/extract-rules.sh");
    assert!(
        out.status.success(),
        "extract-rules.sh failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("UTF-8 rules")
}

/// A Prometheus server scraping one target every second; killed when dropped.
pub(crate) struct Prometheus {
    child: Child,
    pub(crate) port: u16,
    log: PathBuf,
    _dir: tempfile::TempDir,
}

impl Prometheus {
    /// Starts `binary` scraping `target` (`host:port`) as job [`JOB`], with the series labelled
    /// `namespace` as a ServiceMonitor would, and evaluating `rules` every second.
    fn start(binary: &Path, target: &str, namespace: &str, rules: &str) -> Prometheus {
        let scrape = format!(
            "  - job_name: {JOB}\n    static_configs:\n      \
             - targets: ['{target}']\n        labels:\n          namespace: {namespace}\n"
        );
        Prometheus::start_with(binary, &scrape, namespace, rules, |_| {})
    }

    /// Starts `binary` with the `scrape_configs` entries `scrape` (YAML list items, indented by
    /// two), after `prepare` has written what they refer to into the configuration folder.
    pub(crate) fn start_with(
        binary: &Path,
        scrape: &str,
        label: &str,
        rules: &str,
        prepare: impl FnOnce(&Path),
    ) -> Prometheus {
        let dir = tempfile::tempdir().expect("temp dir");
        prepare(dir.path());
        std::fs::write(dir.path().join("rules.yaml"), rules).expect("write rules");
        let config = format!(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n\
             rule_files:\n  - rules.yaml\n\
             scrape_configs:\n{scrape}"
        );
        let config_file = dir.path().join("prometheus.yml");
        std::fs::write(&config_file, config).expect("write config");
        let logs = Path::new(REPO).join("target/test-logs");
        std::fs::create_dir_all(&logs).expect("log dir");
        let log = logs.join(format!("prometheus-{label}.log"));
        let port = free_port();
        let file = std::fs::File::create(&log).expect("log file");
        let child = Command::new(binary)
            .arg(format!("--config.file={}", config_file.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path().join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdout(file.try_clone().expect("log file"))
            .stderr(file)
            .spawn()
            .unwrap_or_else(|e| panic!("start {}: {e}", binary.display()));
        Prometheus {
            child,
            port,
            log,
            _dir: dir,
        }
    }

    pub(crate) fn logs(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub(crate) async fn wait_ready(&self) {
        let ready = eventually(Duration::from_secs(60), || async {
            matches!(http_get(self.port, "/-/ready").await, Some((200, _))).then_some(())
        })
        .await;
        assert!(
            ready.is_some(),
            "Prometheus never became ready:\n{}",
            self.logs()
        );
    }

    /// `data` of a successful API answer.
    pub(crate) async fn api(&self, path: &str) -> Option<Value> {
        let (status, body) = http_get(self.port, path).await?;
        let answer: Value = serde_json::from_str(&body).ok()?;
        (status == 200 && answer["status"] == "success").then(|| answer["data"].clone())
    }

    /// An instant query's result vector.
    pub(crate) async fn query(&self, promql: &str) -> Vec<Value> {
        self.api(&format!("/api/v1/query?query={}", percent_encode(promql)))
            .await
            .and_then(|d| d["result"].as_array().cloned())
            .unwrap_or_default()
    }

    /// The pending and firing alerts.
    pub(crate) async fn alerts(&self) -> Vec<Value> {
        self.api("/api/v1/alerts")
            .await
            .and_then(|d| d["alerts"].as_array().cloned())
            .unwrap_or_default()
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Percent-encoding for a query parameter: everything but unreserved characters.
fn percent_encode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

#[test]
fn query_parameters_are_percent_encoded() {
    assert_eq!(
        percent_encode(r#"up{job="a b"} == 1"#),
        "up%7Bjob%3D%22a%20b%22%7D%20%3D%3D%201"
    );
}

/// `(alertname, machineset, state)` of each alert, for messages and comparisons.
fn summary(alerts: &[Value]) -> Vec<(String, String, String)> {
    let text = |v: &Value| v.as_str().unwrap_or_default().to_string();
    alerts
        .iter()
        .map(|a| {
            (
                text(&a["labels"]["alertname"]),
                text(&a["labels"]["machineset"]),
                text(&a["state"]),
            )
        })
        .collect()
}

#[tokio::test]
async fn prometheus_sees_the_error_metric_and_fires_the_alert_for_a_failing_machine_set() {
    let Some(binary) = prometheus_binary() else {
        return;
    };

    // A cluster with one MachineSet whose architecture annotation names an architecture that
    // does not exist: it cannot be updated.
    let env = TestEnv::new("prometheus").await;
    env.aws_cluster("4.21.0", &stream_421(), None).await;
    env.apply(
        machine_set(&env.ns, "infra-a")
            .ami(AMI_421_US_EAST_1)
            .arch("sparc64")
            .build(),
    )
    .await;
    let controller = env.controller(&["--leader-elect"]);
    controller.wait_ready().await;

    let prometheus = Prometheus::start(
        &binary,
        &format!("127.0.0.1:{}", controller.port),
        &env.ns,
        &rules("1s"),
    );
    prometheus.wait_ready().await;

    // Every rule loaded and evaluates without errors.
    let rules = eventually(CONVERGE, || async {
        let data = prometheus.api("/api/v1/rules").await?;
        let rules: Vec<Value> = data["groups"]
            .as_array()?
            .iter()
            .flat_map(|g| g["rules"].as_array().cloned().unwrap_or_default())
            .collect();
        (!rules.is_empty() && rules.iter().all(|r| r["health"] == "ok")).then_some(rules)
    })
    .await;
    let rules = rules.unwrap_or_else(|| {
        panic!(
            "the rules did not load or do not evaluate cleanly:\n{}",
            prometheus.logs()
        )
    });
    assert!(rules.iter().any(|r| r["name"] == ALERT), "{rules:?}");

    // The scraped gauge, with the job label the alerts select on ...
    let series = format!(
        "{}{{job=\"{JOB}\",machineset=\"infra-a\"}}",
        names::MCC_UPDATE_ERROR
    );
    let scraped = eventually(CONVERGE, || async {
        let result = prometheus.query(&series).await;
        (result.first()?["value"][1] == "1").then_some(())
    })
    .await;
    assert!(
        scraped.is_some(),
        "Prometheus never saw {series} = 1; targets: {:?}\ncontroller:\n{}",
        prometheus.api("/api/v1/targets").await,
        controller.log_tail(30)
    );

    // The dashboard as an SRE reads it, on the same scrape: every query evaluates, and the
    // panels that say whether it acts at all read one ready replica of one (no
    // kube-state-metrics here: the scraped replicas stand for the desired ones), not stood
    // down, no hold past its limit, EC2 reachable.
    let dashboard: Value = serde_json::from_str(
        &std::fs::read_to_string(Path::new(REPO).join("dashboards/boot-image-controller.json"))
            .expect("read the dashboard"),
    )
    .expect("the dashboard is JSON");
    let mut panels = std::collections::BTreeMap::new();
    for panel in dashboard["panels"].as_array().expect("panels") {
        let title = panel["title"].as_str().unwrap_or_default().to_string();
        for target in panel["targets"].as_array().into_iter().flatten() {
            let expr = (target["expr"].as_str().unwrap_or_default())
                .replace("$namespace", &env.ns)
                .replace("$__rate_interval", "1m");
            let path = format!("/api/v1/query?query={}", percent_encode(&expr));
            let answer = prometheus.api(&path).await;
            assert!(answer.is_some(), "{title}: Prometheus refuses {expr}");
            panels.insert(title.clone(), prometheus.query(&expr).await);
        }
    }
    let value = |title: &str| -> Vec<String> {
        let result = panels
            .get(title)
            .unwrap_or_else(|| panic!("no panel {title}"));
        result
            .iter()
            .map(|r| r["value"][1].as_str().unwrap_or_default().to_string())
            .collect()
    };
    assert_eq!(value("Ready replicas (of desired)"), ["1"]);
    assert_eq!(value("Stood down"), ["0"]);
    assert_eq!(value("Held past --hold-limit"), Vec::<String>::new());
    assert_eq!(value("EC2 unavailable regions"), ["0"]);

    // ... and the alert firing for that MachineSet, and no other alert (the controller is up,
    // leads, and the golden ConfigMap is fine).
    let firing = eventually(CONVERGE, || async {
        let alerts = summary(&prometheus.alerts().await);
        (alerts == [(ALERT.into(), "infra-a".into(), "firing".into())]).then_some(())
    })
    .await;
    assert!(
        firing.is_some(),
        "expected only {ALERT} firing for infra-a; alerts: {:?}",
        summary(&prometheus.alerts().await)
    );

    // The administrator fixes the annotation: the MachineSet is updated, the series goes away
    // and the alert resolves.
    env.annotate_machine_set(
        "infra-a",
        "capacity.cluster-autoscaler.kubernetes.io/labels",
        Some("kubernetes.io/arch=amd64"),
    )
    .await;
    let resolved = eventually(CONVERGE, || async {
        let alerts = prometheus.alerts().await;
        (prometheus.query(&series).await.is_empty() && alerts.is_empty()).then_some(())
    })
    .await;
    assert!(
        resolved.is_some(),
        "the alert did not resolve; alerts: {:?}; {series}: {:?}\ncontroller:\n{}",
        summary(&prometheus.alerts().await),
        prometheus.query(&series).await,
        controller.log_tail(30)
    );
    assert_eq!(
        secret_of(&env.machine_set("infra-a").await),
        "worker-user-data"
    );
}

/// Prometheus configured as the ServiceMonitor configures user-workload monitoring (HTTPS,
/// verifying the serving certificate's CA, a reader's bearer token) scrapes a controller run
/// with `--metrics-secure`; the same scrape without the token is refused with 401.
#[tokio::test]
async fn prometheus_scrapes_the_secure_endpoint_with_the_readers_token() {
    let Some(binary) = prometheus_binary() else {
        return;
    };
    let env = TestEnv::new("prometheus-tls").await;
    metrics_tls::allow_metrics(&env, "scraper").await;
    let token = metrics_tls::token_of(&env, "scraper").await;
    let certs = tempfile::tempdir().expect("temp dir");
    metrics_tls::write_certificate(certs.path(), "boot-image-controller");

    let (metrics_port, probe_port) = (free_port(), free_port());
    let mut flags = env.controller_flags();
    flags.extend([
        "--metrics-secure".to_string(),
        format!("--metrics-cert-dir={}", certs.path().display()),
        format!("--metrics-bind-address=127.0.0.1:{metrics_port}"),
        format!("--health-probe-bind-address=127.0.0.1:{probe_port}"),
    ]);
    let log = Path::new(REPO).join(format!("target/test-logs/{}-controller.log", env.ns));
    let mut controller = Command::new(support::controller_binary())
        .arg("run")
        .args(&flags)
        .env_remove("KUBECONFIG")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).expect("log file"))
        .spawn()
        .expect("start the controller");

    let target = format!("127.0.0.1:{metrics_port}");
    let scrape = format!(
        "  - job_name: {JOB}\n    scheme: https\n    authorization:\n      type: Bearer\n      \
         credentials_file: token\n    tls_config:\n      ca_file: ca.crt\n    static_configs:\n      \
         - targets: ['{target}']\n  - job_name: without-token\n    scheme: https\n    \
         tls_config:\n      ca_file: ca.crt\n    static_configs:\n      - targets: ['{target}']\n"
    );
    let ca = certs.path().join("tls.crt");
    let prometheus = Prometheus::start_with(&binary, &scrape, &env.ns, "groups: []\n", |dir| {
        std::fs::write(dir.join("token"), &token).expect("write token");
        std::fs::copy(&ca, dir.join("ca.crt")).expect("copy CA");
    });
    prometheus.wait_ready().await;

    let build_info = format!("{}{{job=\"{JOB}\"}}", names::BUILD_INFO);
    let scraped = eventually(CONVERGE, || async {
        let up = prometheus.query(&format!("up{{job=\"{JOB}\"}}")).await;
        let info = prometheus.query(&build_info).await;
        let refused = prometheus.query("up{job=\"without-token\"}").await;
        (up.first()?["value"][1] == "1" && !info.is_empty() && refused.first()?["value"][1] == "0")
            .then_some(())
    })
    .await;
    let targets = prometheus.api("/api/v1/targets").await;
    let _ = controller.kill();
    let _ = controller.wait();
    assert!(
        scraped.is_some(),
        "Prometheus never scraped {build_info} over HTTPS; targets: {targets:?}\ncontroller:\n{}",
        std::fs::read_to_string(&log).unwrap_or_default()
    );
    let refused = targets
        .as_ref()
        .and_then(|t| t["activeTargets"].as_array().cloned())
        .unwrap_or_default()
        .into_iter()
        .find(|t| t["labels"]["job"] == "without-token");
    let refused = refused.expect("the target without a token");
    assert_eq!(refused["health"], "down", "{refused}");
    assert!(
        refused["lastError"]
            .as_str()
            .unwrap_or_default()
            .contains("401"),
        "{refused}"
    );
}
