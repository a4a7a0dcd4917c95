//! Real forward proxies on loopback for the egress tests: Debian's squid
//! (`hack/ensure-squid.sh`) and mitmproxy, a TLS-inspecting proxy (`hack/ensure-mitmproxy.sh`).
//! Each resolves the names of [`HOSTS`] to 127.0.0.1 for itself only (squid's `hosts_file`, an
//! addon for mitmproxy): this machine cannot resolve them, so a call that reached one went
//! through the proxy, and each proxy's own log says so.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use super::{ensured_tool, free_port};

/// Names only the proxies resolve (to 127.0.0.1); `.test` is reserved (RFC 2606).
pub const HOSTS: [&str; 3] = ["ec2.bic.test", "vcenter.bic.test", "ova.bic.test"];

fn tool(script: &'static str, cell: &'static OnceLock<Option<String>>) -> Option<String> {
    cell.get_or_init(|| ensured_tool(script)).clone()
}

/// Waits until something listens on `port`, or panics with `log` when `child` exited.
fn wait_listening(child: &mut Child, port: u16, what: &str, log: &Path) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        let exited = child.try_wait().ok().flatten();
        if exited.is_some() || Instant::now() > deadline {
            let log = std::fs::read_to_string(log).unwrap_or_default();
            panic!("{what} did not start ({exited:?}):\n{log}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A squid on a loopback port, stopped when dropped.
pub struct Squid {
    child: Child,
    pub port: u16,
    dir: tempfile::TempDir,
}

impl Squid {
    /// A proxy that lets every client through; `None` (the test is skipped) without squid.
    pub fn start() -> Option<Squid> {
        Squid::spawn(None)
    }

    /// A proxy that answers 407 to every request without `user`'s `password` (HTTP Basic).
    pub fn start_with_password(user: &str, password: &str) -> Option<Squid> {
        Squid::spawn(Some((user, password)))
    }

    fn spawn(login: Option<(&str, &str)>) -> Option<Squid> {
        static SQUID: OnceLock<Option<String>> = OnceLock::new();
        let Some(squid) = tool("hack/ensure-squid.sh", &SQUID) else {
            boot_image_controller::testkit::skips::skip(
                "squid (Debian) cannot be installed by hack/ensure-squid.sh",
            );
            return None;
        };
        let dir = tempfile::tempdir().unwrap();
        // Started as root, squid runs as its own user, which writes the logs here.
        std::fs::set_permissions(
            dir.path(),
            std::os::unix::fs::PermissionsExt::from_mode(0o777),
        )
        .unwrap();
        let path = |name: &str| dir.path().join(name).display().to_string();
        std::fs::write(path("hosts"), format!("127.0.0.1 {}\n", HOSTS.join(" "))).unwrap();
        let port = free_port();
        let access = match login {
            None => "http_access allow all".to_string(),
            Some((user, password)) => {
                let out = Command::new("openssl")
                    .args(["passwd", "-1", password])
                    .output()
                    .expect("openssl passwd");
                let hash = String::from_utf8_lossy(&out.stdout).trim().to_string();
                std::fs::write(path("passwd"), format!("{user}:{hash}\n")).unwrap();
                let helper = Path::new(&squid)
                    .parent()
                    .and_then(|sbin| sbin.parent())
                    .map(|usr| usr.join("lib/squid/basic_ncsa_auth"))
                    .unwrap();
                format!(
                    "auth_param basic program {} {}\nauth_param basic realm bic\n\
                     acl known proxy_auth REQUIRED\nhttp_access allow known\nhttp_access deny all",
                    helper.display(),
                    path("passwd")
                )
            }
        };
        // No cache, no `CONNECT` restriction to port 443 (the simulators listen elsewhere), and
        // its own names: the tests' hosts, and no other DNS.
        let config = format!(
            "http_port 127.0.0.1:{port}\npid_filename {pid}\naccess_log stdio:{access_log}\n\
             cache_log {cache_log}\ncache_store_log none\ncache deny all\nhosts_file {hosts}\n\
             dns_nameservers 127.0.0.1\ncoredump_dir {dir}\nshutdown_lifetime 0 seconds\n{access}\n",
            pid = path("squid.pid"),
            access_log = path("access.log"),
            cache_log = path("cache.log"),
            hosts = path("hosts"),
            dir = dir.path().display(),
        );
        std::fs::write(path("squid.conf"), config).unwrap();
        let mut child = Command::new(&squid)
            .args(["-N", "-f", &path("squid.conf")])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start squid");
        wait_listening(&mut child, port, "squid", &dir.path().join("cache.log"));
        Some(Squid { child, port, dir })
    }

    /// The proxy's URL, with `userinfo@` when given.
    pub fn url(&self, userinfo: &str) -> String {
        format!("http://{userinfo}127.0.0.1:{}", self.port)
    }

    /// squid's access log: one line per request (a `CONNECT` names the tunnel's destination).
    pub fn access_log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("access.log")).unwrap_or_default()
    }

    /// Waits until the access log names `destination` at least `count` times (squid logs a
    /// tunnel when it closes).
    pub async fn wait_for(&self, destination: &str, count: usize) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while self.requests_to(destination).len() < count {
            assert!(
                Instant::now() < deadline,
                "{destination} not in:\n{}",
                self.access_log()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The access log's lines that name `destination` (`host:port`).
    pub fn requests_to(&self, destination: &str) -> Vec<String> {
        (self.access_log().lines())
            .filter(|l| l.contains(&format!(" {destination} ")))
            .map(str::to_string)
            .collect()
    }
}

impl Drop for Squid {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A mitmproxy (`mitmdump`) on a loopback port re-signing every TLS connection with its own CA,
/// as an enterprise's TLS-inspecting proxy; stopped when dropped. It does not check the
/// destination's own certificate (the simulators' are private).
pub struct Mitmproxy {
    child: Child,
    pub port: u16,
    dir: tempfile::TempDir,
}

impl Mitmproxy {
    /// `None` (the test is skipped) when mitmproxy cannot be installed.
    pub fn start() -> Option<Mitmproxy> {
        static MITMDUMP: OnceLock<Option<String>> = OnceLock::new();
        let Some(mitmdump) = tool("hack/ensure-mitmproxy.sh", &MITMDUMP) else {
            boot_image_controller::testkit::skips::skip(
                "mitmproxy (PyPI) cannot be installed by hack/ensure-mitmproxy.sh",
            );
            return None;
        };
        let dir = tempfile::tempdir().unwrap();
        let addon = dir.path().join("hosts.py");
        let names = HOSTS.map(|h| format!("{h:?}")).join(", ");
        std::fs::write(
            &addon,
            format!(
                "def server_connect(data):\n    host, port = data.server.address\n    \
                 if host in ({names}):\n        data.server.address = (\"127.0.0.1\", port)\n"
            ),
        )
        .unwrap();
        let port = free_port();
        let log = dir.path().join("mitmdump.log");
        let mut child = Command::new(&mitmdump)
            .args([
                "--listen-host",
                "127.0.0.1",
                "--listen-port",
                &port.to_string(),
            ])
            .args([
                "--set",
                &format!("confdir={}", dir.path().join("conf").display()),
            ])
            .args(["--set", "ssl_insecure=true", "-s"])
            .arg(&addon)
            .stdout(std::fs::File::create(&log).unwrap())
            .stderr(Stdio::null())
            .spawn()
            .expect("start mitmdump");
        wait_listening(&mut child, port, "mitmdump", &log);
        Some(Mitmproxy { child, port, dir })
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The CA it signs with, as PEM (what an administrator puts in the cluster's trusted CA).
    pub fn ca_pem(&self) -> Vec<u8> {
        std::fs::read(self.dir.path().join("conf/mitmproxy-ca-cert.pem")).expect("mitmproxy's CA")
    }

    /// What it printed: a line per request it forwarded.
    pub fn log(&self) -> String {
        let file = std::fs::File::open(self.dir.path().join("mitmdump.log")).unwrap();
        (BufReader::new(file).lines().map_while(Result::ok))
            .collect::<Vec<_>>()
            .join("\n")
    }
}

impl Drop for Mitmproxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
