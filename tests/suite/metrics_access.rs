//! `run --metrics-secure` against the real API server: /metrics over TLS only for a client whose
//! token the API server accepts and allows `get` on `/metrics`, probes still plain HTTP, and a
//! renewed certificate served without a restart.
//!
//! Needs `openssl` and `curl` (the test harness installs openssl; curl is what a person uses to
//! check this by hand, so the test uses it too).

use crate::metrics_tls;
use crate::support;

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use metrics_tls::{allow_metrics, token_of, write_certificate};
use support::TestEnv;

const WAIT: Duration = Duration::from_secs(60);

/// `curl` of `url`: the HTTP status (0 when no HTTP response came back) and the body.
fn curl(url: &str, ca: &Path, token: Option<&str>) -> (u16, String) {
    let mut command = Command::new("curl");
    command
        .args([
            "-sS",
            "--max-time",
            "20",
            "-w",
            "\n%{http_code}",
            "--cacert",
        ])
        .arg(ca)
        .arg(url);
    if let Some(token) = token {
        command.args(["-H", &format!("Authorization: Bearer {token}")]);
    }
    let out = command.output().expect("curl runs");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", &text));
    (code.trim().parse().unwrap_or(0), body.to_string())
}

struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start(env: &TestEnv, extra: &[String], log: &Path) -> Running {
    let file = std::fs::File::create(log).unwrap();
    let child = Command::new(support::controller_binary())
        .arg("run")
        .args(env.controller_flags())
        .args(extra)
        .env_remove("KUBECONFIG")
        .stdout(file.try_clone().unwrap())
        .stderr(file)
        .stdin(Stdio::null())
        .spawn()
        .expect("start the controller");
    Running(child)
}

/// Where a controller started by [`start_secure`] listens.
struct Secure {
    url: String,
    metrics_port: u16,
    probe_port: u16,
}

/// The controller serving `/metrics` over TLS with the certificate in `certs`, on free ports.
fn start_secure(env: &TestEnv, certs: &Path, log: &Path) -> (Running, Secure) {
    let (metrics_port, probe_port) = (support::free_port(), support::free_port());
    let flags = [
        "--metrics-secure".into(),
        format!("--metrics-cert-dir={}", certs.display()),
        format!("--metrics-bind-address=127.0.0.1:{metrics_port}"),
        format!("--health-probe-bind-address=127.0.0.1:{probe_port}"),
    ];
    let url = format!("https://127.0.0.1:{metrics_port}/metrics");
    let secure = Secure {
        url,
        metrics_port,
        probe_port,
    };
    (start(env, &flags, log), secure)
}

#[tokio::test]
async fn metrics_are_served_over_tls_only_to_clients_allowed_to_get_them() {
    let env = TestEnv::new("metrics-access").await;
    let tmp = tempfile::tempdir().unwrap();
    let certs = tmp.path().join("metrics-tls");
    write_certificate(&certs, "first");
    let first_ca = tmp.path().join("first.crt");
    std::fs::copy(certs.join("tls.crt"), &first_ca).unwrap();

    // The scraper: allowed like the ServiceMonitor's reader in manifests/monitoring.
    allow_metrics(&env, "scraper").await;
    let scraper = token_of(&env, "scraper").await;
    let stranger = token_of(&env, "stranger").await;

    let log = tmp.path().join("controller.log");
    let (_controller, secure) = start_secure(&env, &certs, &log);
    let Secure {
        url,
        metrics_port,
        probe_port,
    } = secure;
    let logs = || std::fs::read_to_string(&log).unwrap_or_default();

    let answered = support::eventually(WAIT, || async {
        let (code, body) = curl(&url, &first_ca, Some(&scraper));
        (code == 200).then_some(body)
    })
    .await;
    let body = answered.unwrap_or_else(|| {
        panic!(
            "the scraper never got /metrics: {:?}\n{}",
            curl(&url, &first_ca, Some(&scraper)),
            logs()
        )
    });
    assert!(
        body.contains("boot_image_controller_build_info{"),
        "not the metrics: {body}"
    );

    assert_eq!(curl(&url, &first_ca, None).0, 401, "no token");
    assert_eq!(
        curl(&url, &first_ca, Some("not-a-token")).0,
        401,
        "a token the API server does not know"
    );
    assert_eq!(
        curl(&url, &first_ca, Some(&stranger)).0,
        403,
        "a valid token without get on /metrics"
    );
    // Plain HTTP gets no metrics out of the TLS port.
    let (code, body) = curl(
        &format!("http://127.0.0.1:{metrics_port}/metrics"),
        &first_ca,
        Some(&scraper),
    );
    assert!(
        code != 200 && !body.contains("boot_image_controller"),
        "plain HTTP answered {code}: {body}"
    );
    // The kubelet probes over plain HTTP, without a token.
    assert_eq!(
        support::http_get(probe_port, "/healthz")
            .await
            .map(|(code, _)| code),
        Some(200),
        "{}",
        logs()
    );

    // The service-CA renews the certificate: the new one is served without a restart.
    write_certificate(&certs, "renewed");
    let renewed_ca = certs.join("tls.crt");
    let renewed = support::eventually(WAIT, || async {
        (curl(&url, &renewed_ca, Some(&scraper)).0 == 200).then_some(())
    })
    .await;
    assert!(
        renewed.is_some(),
        "the renewed certificate is never served\n{}",
        logs()
    );
    assert_eq!(
        curl(&url, &first_ca, Some(&scraper)).0,
        0,
        "the old certificate is still served"
    );
}

/// Starts the controller with `extra` flags, expecting it to refuse them: returns its log once it
/// has exited with a failure, or fails the test if it kept running.
async fn refused_start(env: &TestEnv, extra: &[String], log: &Path) -> String {
    let mut controller = start(env, extra, log);
    let exited = support::eventually(WAIT, || {
        let status = controller.0.try_wait().expect("wait");
        async move { status }
    })
    .await;
    let log = std::fs::read_to_string(log).unwrap_or_default();
    assert!(exited.is_some_and(|s| !s.success()), "kept running: {log}");
    log
}

#[tokio::test]
async fn probes_and_tls_metrics_on_one_address_are_refused_at_start() {
    let env = TestEnv::new("metrics-one-port").await;
    let tmp = tempfile::tempdir().unwrap();
    let certs = tmp.path().join("metrics-tls");
    write_certificate(&certs, "only");
    let port = support::free_port();
    let flags = [
        "--metrics-secure".into(),
        format!("--metrics-cert-dir={}", certs.display()),
        format!("--metrics-bind-address=127.0.0.1:{port}"),
        format!("--health-probe-bind-address=127.0.0.1:{port}"),
    ];
    let log = refused_start(&env, &flags, &tmp.path().join("controller.log")).await;
    assert!(log.contains("probes need an address of their own"), "{log}");
}

#[tokio::test]
async fn a_missing_certificate_stops_the_start() {
    let env = TestEnv::new("metrics-no-cert").await;
    let tmp = tempfile::tempdir().unwrap();
    let flags = [
        "--metrics-secure".into(),
        format!("--metrics-cert-dir={}", tmp.path().join("absent").display()),
        format!("--metrics-bind-address=127.0.0.1:{}", support::free_port()),
        format!(
            "--health-probe-bind-address=127.0.0.1:{}",
            support::free_port()
        ),
    ];
    let log = refused_start(&env, &flags, &tmp.path().join("controller.log")).await;
    assert!(log.contains("tls.crt"), "does not name the file: {log}");
}

/// A `curl` command sending one request per token, each with `Authorization: Bearer <token>`,
/// from `clients` loopback addresses (127.0.0.2 and on) in turn, `clients` at a time, printing
/// each HTTP status on a line. The config file goes into `dir`.
fn curl_command(dir: &Path, url: &str, ca: &Path, tokens: &[String], clients: usize) -> Command {
    let config = dir.join("requests.curlrc");
    // Options hold per request in a config file: each one after `next` starts afresh.
    let ca = ca.display();
    let requests: Vec<String> = tokens
        .iter()
        .enumerate()
        .map(|(i, token)| {
            let client = 2 + i % clients;
            format!(
                "url = \"{url}\"\ncacert = \"{ca}\"\nmax-time = 20\ninterface = \"127.0.0.{client}\"\n\
                 header = \"Authorization: Bearer {token}\"\noutput = \"/dev/null\"\n\
                 write-out = \"%{{http_code}}\\n\"\n"
            )
        })
        .collect();
    std::fs::write(&config, requests.join("next\n")).unwrap();
    let mut command = Command::new("curl");
    command
        .args(["-sS", "--parallel", "--parallel-max"])
        .arg(clients.to_string())
        .arg("-K")
        .arg(&config);
    command
}

/// The HTTP statuses `curl` printed, one a line.
fn statuses(out: &[u8]) -> Vec<u16> {
    String::from_utf8_lossy(out)
        .lines()
        .map(|l| l.trim().parse().unwrap_or(0))
        .collect()
}

/// The HTTP status of one request per token, as [`curl_command`] sends them.
fn curl_each(url: &str, ca: &Path, tokens: &[String], clients: usize) -> Vec<u16> {
    let dir = tempfile::tempdir().unwrap();
    let mut command = curl_command(dir.path(), url, ca, tokens, clients);
    statuses(&command.output().expect("curl runs").stdout)
}

/// The TokenReviews the API server answered for tokens starting with `prefix`.
fn token_reviews(log: &Path, prefix: &str) -> usize {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    text.lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|e| {
            e["objectRef"]["resource"] == "tokenreviews" && e["stage"] == "ResponseComplete"
        })
        .filter(|e| {
            (e["requestObject"]["spec"]["token"].as_str()).is_some_and(|t| t.starts_with(prefix))
        })
        .count()
}

#[tokio::test]
async fn garbage_tokens_cost_few_token_reviews() {
    // The control plane first: the audit log is its own.
    let env = TestEnv::new("metrics-token-flood").await;
    let Some(log) = support::audit_log() else {
        return;
    };
    let policy = std::fs::read_to_string(log.with_file_name("audit-policy.yaml")).unwrap();
    if !policy.contains("tokenreviews") {
        boot_image_controller::testkit::skips::skip(
            "the local control plane's audit policy predates TokenReviews: restart it \
             (hack/local-cluster.sh down)",
        );
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let certs = tmp.path().join("metrics-tls");
    write_certificate(&certs, "flood");
    let ca = certs.join("tls.crt");
    let controller_log = tmp.path().join("controller.log");
    let (_controller, Secure { url, .. }) = start_secure(&env, &certs, &controller_log);
    let serving = support::eventually(WAIT, || async {
        (curl(&url, &ca, Some(&format!("warm-up-{}", env.ns))).0 == 401).then_some(())
    })
    .await;
    let logs = || std::fs::read_to_string(&controller_log).unwrap_or_default();
    assert!(serving.is_some(), "never answered 401\n{}", logs());

    // Sixteen clients repeating one garbage token: one review, shared by all of them.
    let garbage = format!("garbage-{}", env.ns);
    let same = vec![garbage.clone(); 320];
    let codes = curl_each(&url, &ca, &same, 16);
    assert_eq!(codes.len(), same.len(), "{codes:?}");
    assert!(codes.iter().all(|c| *c == 401), "{codes:?}");
    let reviews = token_reviews(&log, &garbage);
    assert!(
        (1..=2).contains(&reviews),
        "{reviews} TokenReviews for 320 requests with one token"
    );

    // A new garbage token each time: reviews are limited to their budget, the rest refused.
    let prefix = format!("fresh-{}-", env.ns);
    let fresh: Vec<String> = (0..200).map(|i| format!("{prefix}{i}")).collect();
    let started = std::time::Instant::now();
    let codes = curl_each(&url, &ca, &fresh, 16);
    let elapsed = started.elapsed().as_secs_f64();
    assert!(codes.iter().all(|c| *c == 401 || *c == 429), "{codes:?}");
    let reviews = token_reviews(&log, &prefix);
    // REVIEW_BURST and REVIEWS_PER_SECOND of src/server/secure.rs.
    let budget = 20.0 + 5.0 * elapsed;
    assert!(
        reviews as f64 <= budget + 1.0,
        "{reviews} TokenReviews in {elapsed:.1} s for 200 tokens; the budget is {budget:.0}"
    );
    assert!(
        codes.contains(&429),
        "no request was turned away: {codes:?}"
    );
}

/// The HTTP status of `url` for `token`, asked from the loopback address `source`.
fn curl_from(source: &str, url: &str, ca: &Path, token: &str) -> u16 {
    let out = Command::new("curl")
        .args([
            "-sS",
            "--max-time",
            "20",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
        ])
        .args(["--interface", source, "--cacert"])
        .arg(ca)
        .args(["-H", &format!("Authorization: Bearer {token}")])
        .arg(url)
        .output()
        .expect("curl runs");
    String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .unwrap_or(0)
}

/// Garbage tokens sent without pause: one `curl` after another, each with 5,000 new tokens
/// from 127.0.0.2 to 127.0.0.9, the scraper's own address among them.
struct Flood {
    dir: tempfile::TempDir,
    url: String,
    ca: std::path::PathBuf,
    rounds: usize,
    running: Option<Running>,
    /// The statuses of the finished rounds.
    answered: Vec<u16>,
}

impl Flood {
    fn start(url: &str, ca: &Path) -> Flood {
        let mut flood = Flood {
            dir: tempfile::tempdir().unwrap(),
            url: url.to_string(),
            ca: ca.to_path_buf(),
            rounds: 0,
            running: None,
            answered: Vec::new(),
        };
        flood.keep_going();
        flood
    }

    /// Starts the next round once the last has ended.
    fn keep_going(&mut self) {
        if let Some(running) = &mut self.running {
            if running.0.try_wait().expect("wait").is_none() {
                return;
            }
            let output = self.dir.path().join(format!("round-{}.out", self.rounds));
            self.answered
                .extend(statuses(&std::fs::read(output).unwrap_or_default()));
        }
        self.rounds += 1;
        let tokens: Vec<String> = (0..5000)
            .map(|i| format!("flood-{}-{i}", self.rounds))
            .collect();
        let output = self.dir.path().join(format!("round-{}.out", self.rounds));
        let mut command = curl_command(self.dir.path(), &self.url, &self.ca, &tokens, 8);
        let child = command
            .stdout(std::fs::File::create(output).unwrap())
            .stderr(Stdio::null())
            .spawn()
            .expect("curl runs");
        self.running = Some(Running(child));
    }

    /// Every status answered so far, the round under way stopped.
    fn stop(mut self) -> Vec<u16> {
        drop(self.running.take());
        let output = self.dir.path().join(format!("round-{}.out", self.rounds));
        self.answered
            .extend(statuses(&std::fs::read(output).unwrap_or_default()));
        self.answered
    }
}

#[tokio::test]
async fn a_flood_of_garbage_tokens_does_not_blind_the_scraper() {
    let env = TestEnv::new("metrics-scraper-flood").await;
    let tmp = tempfile::tempdir().unwrap();
    let certs = tmp.path().join("metrics-tls");
    write_certificate(&certs, "scraper-flood");
    let ca = certs.join("tls.crt");
    allow_metrics(&env, "scraper").await;
    let scraper = token_of(&env, "scraper").await;
    let log = tmp.path().join("controller.log");
    let (_controller, Secure { url, .. }) = start_secure(&env, &certs, &log);
    let logs = || {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(30)..].join("\n")
    };
    let scrape = || curl_from("127.0.0.2", &url, &ca, &scraper);
    let served = support::eventually(WAIT, || async { (scrape() == 200).then_some(()) }).await;
    assert!(
        served.is_some(),
        "the scraper never got /metrics\n{}",
        logs()
    );

    // Scrapes for three verdict lifetimes (VERDICT_TTL of src/server/secure.rs is 10 s) while
    // other peers and the scraper's own address send garbage tokens without pause.
    let mut flood = Flood::start(&url, &ca);
    let started = std::time::Instant::now();
    let mut scrapes = Vec::new();
    while started.elapsed() < Duration::from_secs(30) {
        tokio::time::sleep(Duration::from_secs(2)).await;
        flood.keep_going();
        scrapes.push(scrape());
    }
    let flooded = flood.stop();
    assert!(
        flooded.contains(&429),
        "the flood was never turned away ({} answers)",
        flooded.len()
    );
    assert!(
        scrapes.iter().all(|code| *code == 200),
        "scrapes under the flood: {scrapes:?}\n{}",
        logs()
    );
}
