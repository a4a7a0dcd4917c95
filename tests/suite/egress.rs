//! The controller's calls beyond the API server (EC2, vCenter, the OVA download) through the
//! cluster's proxy, against real proxies on loopback (support::forward_proxy): squid for a
//! forward proxy, with and without a password, and mitmproxy for a TLS-inspecting one whose CA
//! only the cluster's trusted CA bundle vouches for. The destinations are named `*.bic.test`,
//! which only the proxies resolve: a call that succeeds went through the proxy, and its access
//! log shows it; a destination in `NO_PROXY` is called directly (and cannot be resolved here).

use crate::support;

use std::time::{Duration, Instant};

use boot_image_controller::http_client::{self, Egress, Proxies};
use boot_image_controller::vcenter::VcenterError;
use boot_image_controller::vcenter::client::{Limits, VcenterClient, sdk_url};
use boot_image_controller::vcenter::credentials::Credentials;
use boot_image_controller::vcenter::import::{Ensured, ImportLimits, ensure_template};
use bytes::Bytes;
use http_body_util::Full;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde_json::Value;
use support::fixtures::*;
use support::forward_proxy::{Mitmproxy, Squid};
use support::moto::{Moto, ami};
use support::vcsim::{self, FileServer, Vcsim};

const RHCOS_OWNER: &str = "531415883065";
const RHCOS_UNLISTED: &str = "ami-0e1a5c0ffee000001";

fn egress(proxy: &str, no_proxy: &str) -> Egress {
    Egress {
        proxies: Proxies::new(proxy, proxy, no_proxy),
        ca_bundle: None,
    }
}

fn vcenter_limits(egress: Egress) -> Limits {
    Limits {
        poll_interval: Duration::from_millis(50),
        egress,
        ..Limits::default()
    }
}

fn credentials() -> Credentials {
    Credentials {
        username: vcsim::USERNAME.into(),
        password: vcsim::PASSWORD.into(),
    }
}

/// `url` with its loopback address replaced by `host`, which only the proxies resolve.
fn named(url: &str, host: &str) -> String {
    url.replace("127.0.0.1", host)
}

/// The port of a URL such as `http://127.0.0.1:4242/sdk`.
fn port_of(url: &str) -> u16 {
    url.parse::<hyper::Uri>().unwrap().port_u16().unwrap()
}

async fn login(sdk: &str, egress: Egress) -> Result<VcenterClient, VcenterError> {
    VcenterClient::login(
        sdk_url(sdk).unwrap(),
        &credentials(),
        vcenter_limits(egress),
    )
    .await
}

/// `plan --ec2-lookup` (the binary, which reads the proxy from its environment) against moto at
/// `http://ec2.bic.test:<port>`; returns the decision for the MachineSet `rhcos-unlisted`, and
/// what the binary logged.
fn plan_with_env(moto: &Moto, env: &[(&str, &str)]) -> (Value, String) {
    let ns = "openshift-machine-api";
    let mut objects = vec![
        infrastructure("cluster", "AWS"),
        cluster_version("version", "4.21.0", "Completed"),
        machine_configuration("cluster", None),
        golden_config_map(ns, "4.21.0", &stream_421()),
        machine_set(ns, "rhcos-unlisted")
            .ami(RHCOS_UNLISTED)
            .build(),
        stub_secret(ns, "worker-user-data", "3.2.0"),
    ];
    objects.extend(control_plane_nodes());
    let dir = tempfile::tempdir().unwrap();
    let manifests = dir.path().join("cluster.json");
    std::fs::write(&manifests, as_cluster_manifests(objects).to_string()).unwrap();
    let endpoint = named(&moto.endpoint(), "ec2.bic.test");
    let mut command = std::process::Command::new(support::BINARY);
    command
        .args(["plan", "-f", manifests.to_str().unwrap(), "-o", "json"])
        .args(["--ec2-lookup", "--ec2-endpoint", &endpoint])
        .args(["--now", "2026-03-02T10:00:00Z"])
        .env_remove("KUBECONFIG")
        .env("AWS_ACCESS_KEY_ID", "AKIAIOSFODNN7EXAMPLE")
        .env(
            "AWS_SECRET_ACCESS_KEY",
            "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
        );
    for name in [
        "HTTP_PROXY",
        "http_proxy",
        "HTTPS_PROXY",
        "https_proxy",
        "NO_PROXY",
        "no_proxy",
    ] {
        command.env_remove(name);
    }
    let out = command
        .envs(env.iter().copied())
        .output()
        .expect("the binary runs");
    let plan: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|_| panic!("plan printed no JSON: {}", support::stderr_of(&out)));
    let decision = (plan["machineSets"].as_array().unwrap().iter())
        .find(|e| e["name"] == "rhcos-unlisted")
        .cloned()
        .unwrap_or_else(|| panic!("no rhcos-unlisted in {plan:#}"));
    (decision, support::stderr_of(&out))
}

/// EC2 (moto), vCenter (vcsim) and the OVA's server are each reached through squid, as its own
/// access log shows; a destination in `NO_PROXY` is called directly. Prints what a call through
/// the proxy costs beside a direct one.
#[tokio::test]
async fn ec2_vcenter_and_the_ova_go_through_the_proxy_and_no_proxy_destinations_do_not() {
    let Some(squid) = Squid::start() else { return };
    let amis = [ami(
        RHCOS_UNLISTED,
        RHCOS_OWNER,
        "rhcos-418.94.202410090804-0-x86_64",
        "OpenShift 4 418.94.202410090804-0",
        "x86_64",
        "2024-10-09T08:04:00.000Z",
    )];
    let Some(moto) = Moto::start(&amis) else {
        return;
    };
    let Some(vcsim) = Vcsim::start() else { return };
    let ec2 = format!("ec2.bic.test:{}", moto.port);

    // EC2, from the environment as OLM injects it (upper case) and as shells set it (lower).
    let proxy_url = squid.url("");
    for proxy_var in ["HTTP_PROXY", "http_proxy"] {
        let env = [
            (proxy_var, proxy_url.as_str()),
            ("NO_PROXY", ".cluster.local,.svc"),
        ];
        let (decision, log) = plan_with_env(&moto, &env);
        assert_eq!(
            decision["action"], "Update",
            "{proxy_var}: {decision:#} {log}"
        );
    }
    assert_eq!(squid.requests_to(&ec2).len(), 2, "{}", squid.access_log());
    // In NO_PROXY (with its port): called directly, which cannot resolve the name.
    let env = [
        ("HTTP_PROXY", squid.url("")),
        ("NO_PROXY", format!("localhost,{ec2}")),
    ];
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let (decision, _) = plan_with_env(&moto, &env);
    assert_eq!(decision["reason"], "Ec2Unavailable", "{decision:#}");
    assert_eq!(squid.requests_to(&ec2).len(), 2, "{}", squid.access_log());

    // vCenter and the OVA: a login, then an import whose download and uploads all go through.
    let sdk = named(&vcsim.sdk, "vcenter.bic.test");
    let vcenter = format!("vcenter.bic.test:{}", port_of(&sdk));
    let ova = vcsim::ova();
    let server = FileServer::start(ova.clone()).await;
    let ova_url = named(&server.url, "ova.bic.test");
    let client = login(&sdk, egress(&squid.url(""), ".cluster.local"))
        .await
        .expect("log in to vCenter through the proxy");
    let request = vcsim.template_request(
        "egress-rhcos-9.6.20251023-0",
        &ova_url,
        &vcsim::sha256(&ova),
    );
    let dir = tempfile::tempdir().unwrap();
    let limits = ImportLimits {
        download_timeout: Duration::from_secs(60),
        import_timeout: Duration::from_secs(60),
        download_dir: dir.path().to_path_buf(),
        progress_interval: Duration::from_millis(50),
        ..ImportLimits::default()
    };
    let imported = ensure_template(&client, &request, &limits, &|_| {}).await;
    assert_eq!(imported.unwrap(), Ensured::Imported);
    assert_eq!(server.downloads(), 1);
    // squid logs a tunnel when it closes.
    client.logout().await;
    drop(client);
    let ova_host = format!("ova.bic.test:{}", port_of(&ova_url));
    squid.wait_for(&ova_host, 1).await;
    squid.wait_for(&vcenter, 1).await;

    // vCenter in NO_PROXY, as administrators often put it: called directly, which cannot
    // resolve the name.
    for no_proxy in ["vcenter.bic.test", ".bic.test", vcenter.as_str(), "*"] {
        let direct = login(&sdk, egress(&squid.url(""), no_proxy)).await;
        let Err(error) = direct else {
            panic!("NO_PROXY={no_proxy}: reached a name only the proxy resolves");
        };
        assert!(
            error.to_string().contains("dns error"),
            "{no_proxy}: {error}"
        );
    }
    // Another port of the same name is not in NO_PROXY.
    let other_port = format!("vcenter.bic.test:{}", port_of(&sdk) + 1);
    let proxied = login(&sdk, egress(&squid.url(""), &other_port)).await;
    proxied.expect("through the proxy").logout().await;

    // The cost of the proxy: a SOAP call on a pooled connection, direct and through squid, in
    // alternating rounds so that both see vcsim alike.
    let (direct, proxied) = (vcsim.sdk.clone(), sdk.clone());
    let started = Instant::now();
    let clients = [
        login(&direct, egress("", "")).await.unwrap(),
        login(&proxied, egress(&squid.url(""), "")).await.unwrap(),
    ];
    let mut spent = [Duration::ZERO; 2];
    let (rounds, calls) = (10, 20);
    for _ in 0..rounds {
        for (client, spent) in clients.iter().zip(&mut spent) {
            let started = Instant::now();
            for _ in 0..calls {
                client
                    .find(vcsim::DATACENTER)
                    .await
                    .unwrap()
                    .expect("the datacenter");
            }
            *spent += started.elapsed();
        }
    }
    let [direct, proxied] = spent.map(|s| s / (rounds * calls));
    eprintln!(
        "egress timing (vcsim, debug build, {} calls each after {:?} of log-ins): \
         FindByInventoryPath {direct:?} direct, {proxied:?} through squid: {:?} added per call",
        rounds * calls,
        started.elapsed().saturating_sub(spent[0] + spent[1]),
        proxied.saturating_sub(direct)
    );
}

// Several threads: `plan` blocks one while the fake proxy below answers it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_proxy_that_asks_for_credentials_or_hangs_up_is_named_and_its_password_never_shown() {
    const PASSWORD: &str = "s3cret-Pa55";
    let Some(squid) = Squid::start_with_password("bic", PASSWORD) else {
        return;
    };
    let Some(vcsim) = Vcsim::start() else { return };
    let sdk = named(&vcsim.sdk, "vcenter.bic.test");
    let shown = squid.url("");

    for userinfo in ["", "bic:wrong-Pa55@", "bic@"] {
        let refused = login(&sdk, egress(&squid.url(userinfo), "")).await;
        let Err(error) = refused else {
            panic!("{userinfo}: logged in through a proxy that wants a password");
        };
        let message = error.to_string();
        assert!(error.is_unavailable(), "{message}");
        assert!(
            message.contains(&format!(
                "the proxy {shown} asks for credentials (HTTP 407)"
            )),
            "{message}"
        );
        assert!(
            !message.contains("Pa55") && !message.contains("bic@"),
            "{message}"
        );
    }
    // The right password, percent-encoded in the URL as a URL wants it, is accepted.
    let encoded = PASSWORD.replace('-', "%2D");
    login(&sdk, egress(&squid.url(&format!("bic:{encoded}@")), ""))
        .await
        .expect("log in through the proxy with its password");
    assert!(
        squid.access_log().contains(" bic "),
        "{}",
        squid.access_log()
    );

    // A "proxy" that accepts connections and closes them at once.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let closing = format!("http://{}", listener.local_addr().unwrap());
    // It reads the CONNECT request, then hangs up.
    let task = tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let mut request = Vec::new();
            let mut buffer = [0u8; 1024];
            while !request.ends_with(b"\r\n\r\n") {
                match tokio::io::AsyncReadExt::read(&mut stream, &mut buffer).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => request.extend_from_slice(&buffer[..n]),
                }
            }
        }
    });
    let error = login(
        &sdk,
        egress(&format!("http://bic:{PASSWORD}@{}", &closing[7..]), ""),
    )
    .await
    .err()
    .expect("no login through a proxy that hangs up");
    let message = error.to_string();
    assert!(error.is_unavailable(), "{message}");
    assert!(
        message.contains(&format!("the proxy {closing} closed the connection")),
        "{message}"
    );
    assert!(!message.contains(PASSWORD), "{message}");
    // EC2 likewise: after its retries, reason Ec2Unavailable, and the proxy named.
    let amis = [ami(
        RHCOS_UNLISTED,
        RHCOS_OWNER,
        "rhcos-418.94.202410090804-0-x86_64",
        "",
        "x86_64",
        "2024-10-09T08:04:00.000Z",
    )];
    let Some(moto) = Moto::start(&amis) else {
        return;
    };
    let proxy = format!("http://bic:{PASSWORD}@{}", &closing[7..]);
    let (decision, log) = plan_with_env(&moto, &[("HTTP_PROXY", proxy.as_str())]);
    assert_eq!(decision["reason"], "Ec2Unavailable", "{decision:#}");
    let said = format!("{decision} {log}");
    assert!(
        said.contains(&format!("the proxy {closing} closed the connection")),
        "{said}"
    );
    assert!(!said.contains(PASSWORD), "{said}");
    task.abort();
}

/// Behind a TLS-inspecting proxy every TLS connection is signed by the proxy's CA: refused while
/// the cluster's trusted CA bundle lacks it, trusted once the bundle file (the mounted
/// ConfigMap's `ca-bundle.crt`) holds it, by the same long-lived client, without a restart.
#[tokio::test]
async fn a_tls_inspecting_proxy_is_trusted_once_the_cluster_bundle_holds_its_ca() {
    let Some(mitm) = Mitmproxy::start() else {
        return;
    };
    let Some(vcsim) = Vcsim::start_tls() else {
        return;
    };
    let sdk = named(&vcsim.sdk, "vcenter.bic.test");
    assert!(sdk.starts_with("https://"), "{sdk}");
    let dir = tempfile::tempdir().unwrap();
    let bundle = dir.path().join("ca-bundle.crt");
    let egress = Egress {
        proxies: Proxies::new("", &mitm.url(), ""),
        ca_bundle: Some(bundle.clone()),
    };
    // One connector for the whole test, as EC2's client lives as long as the process.
    let connector = http_client::connector(Duration::from_secs(5), "test", &[], &egress).unwrap();
    let http: Client<_, Full<Bytes>> = Client::builder(TokioExecutor::new()).build(connector);
    let get = || http.get(sdk.parse().unwrap());

    let untrusted = get().await.expect_err("trusted a CA no bundle holds");
    assert!(
        http_client::error_chain(&untrusted).contains("certificate"),
        "{untrusted:?}"
    );
    let refused = login(&sdk, egress.clone()).await.err().expect("no login");
    assert!(refused.to_string().contains("certificate"), "{refused}");

    // The network operator fills the ConfigMap; the kubelet swaps the file in.
    let staged = dir.path().join(".ca-bundle.crt.new");
    std::fs::write(&staged, mitm.ca_pem()).unwrap();
    std::fs::rename(&staged, &bundle).unwrap();
    let answer = get()
        .await
        .expect("trusted once the bundle holds the proxy's CA");
    assert!(answer.status().as_u16() < 500, "{:?}", answer.status());
    let client = login(&sdk, egress)
        .await
        .expect("log in through the inspecting proxy");
    client.logout().await;
    assert!(mitm.log().contains("vcenter.bic.test"), "{}", mitm.log());
}
