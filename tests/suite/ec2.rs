//! EC2 look-ups against moto, the EC2 simulator, with the controller as a real process on a real
//! kube-apiserver: AMIs told apart by owner (RHCOS, AWS Marketplace including ROSA, custom),
//! credentials from the machine API's Secret or STS web identity, EC2 unreachable, and EC2
//! throttling.

use crate::support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use serde_json::{Value, json};
use support::fixtures::*;
use support::moto::{Answered, Moto, ThrottlingProxy, ami};
use support::{ControllerProcess, TestEnv, eventually};

const CONVERGE: Duration = Duration::from_secs(60);

const RHCOS_OWNER: &str = "531415883065";
const MARKETPLACE_OWNER: &str = "679593333241";
const OCP_X86: &str = "59ead7de-2540-4653-a8b0-fa7926d5c845";
const ROSA: &str = "34850061-abaf-402d-92df-94325c9e947f";

/// A standard RHCOS AMI (4.18 era) that neither the stream nor the shipped list names.
const RHCOS_UNLISTED: &str = "ami-0e1a5c0ffee000001";
const MARKET_OLD: &str = "ami-0e1a5c0ffee000002";
const MARKET_NEW: &str = "ami-0e1a5c0ffee000003";
/// Newer than the golden release (9.6): never chosen.
const MARKET_NEXT: &str = "ami-0e1a5c0ffee000004";
const ROSA_OLD: &str = "ami-0e1a5c0ffee000005";
const ROSA_NEW: &str = "ami-0e1a5c0ffee000006";
/// ROSA's product, newer, for arm64: not for x86_64 machines.
const ROSA_NEW_ARM: &str = "ami-0e1a5c0ffee000007";
/// Someone's own image, named like RHCOS.
const CUSTOM: &str = "ami-0e1a5c0ffee000008";

fn marketplace_ami(id: &str, product: &str, release: &str, arch: &str, created: &str) -> Value {
    let date = &release[4..12];
    ami(
        id,
        MARKETPLACE_OWNER,
        &format!("RHEL-9.4-RHCOS-9.6_HVM_GA-{date}-{arch}-0-{product}"),
        &format!("RHEL CoreOS 9.6 {release} {arch}"),
        arch,
        created,
    )
}

fn rosa_ami(id: &str, release: &str, arch: &str, created: &str) -> Value {
    ami(
        id,
        MARKETPLACE_OWNER,
        &format!("rhcos-{release}-{arch}-{ROSA}"),
        &format!("rhcos-{release}-{arch}"),
        arch,
        created,
    )
}

fn simulated_ec2() -> Vec<Value> {
    vec![
        ami(
            RHCOS_UNLISTED,
            RHCOS_OWNER,
            "rhcos-418.94.202410090804-0-x86_64",
            "OpenShift 4 418.94.202410090804-0",
            "x86_64",
            "2024-10-09T08:04:00.000Z",
        ),
        marketplace_ami(
            MARKET_OLD,
            OCP_X86,
            "9.6.20250801-0",
            "x86_64",
            "2025-08-01T00:00:00.000Z",
        ),
        marketplace_ami(
            MARKET_NEW,
            OCP_X86,
            "9.6.20251015-0",
            "x86_64",
            "2025-10-15T00:00:00.000Z",
        ),
        marketplace_ami(
            MARKET_NEXT,
            OCP_X86,
            "9.8.20260403-0",
            "x86_64",
            "2026-04-03T00:00:00.000Z",
        ),
        rosa_ami(
            ROSA_OLD,
            "9.6.20250701-0",
            "x86_64",
            "2025-07-01T00:00:00.000Z",
        ),
        rosa_ami(
            ROSA_NEW,
            "9.6.20251015-0",
            "x86_64",
            "2025-10-15T00:00:00.000Z",
        ),
        rosa_ami(
            ROSA_NEW_ARM,
            "9.6.20251101-0",
            "arm64",
            "2025-11-01T00:00:00.000Z",
        ),
        ami(
            CUSTOM,
            "123456789012",
            "rhcos-9.6.20251023-0-x86_64",
            "RHEL CoreOS 9.6 9.6.20251023-0 x86_64",
            "x86_64",
            "2025-10-24T00:00:00.000Z",
        ),
    ]
}

/// The machine API's credentials Secret, as the cloud credential operator writes it.
fn credentials_secret(ns: &str) -> Value {
    keys_secret(
        ns,
        "AKIAIOSFODNN7EXAMPLE",
        "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
    )
}

fn keys_secret(ns: &str, id: &str, secret: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "aws-cloud-credentials", "namespace": ns},
        "stringData": {"aws_access_key_id": id, "aws_secret_access_key": secret}
    })
}

/// A cluster at 4.21 whose MachineSets are on `amis` (name, AMI), with the credentials Secret.
/// They name the spec-3 managed stub: the fixture's spec-2 one would keep every MachineSet in
/// place while another waits for EC2 or keeps a custom image (`StubSecretShared`).
async fn cluster(test: &str, amis: &[(&str, &str)]) -> TestEnv {
    let env = cluster_with(test, web_identity_secret("unused", "unused")).await;
    env.apply(credentials_secret(&env.ns)).await;
    add_machine_sets(&env, amis).await;
    env
}

/// A cluster at 4.21 with `secret` (its namespace set to the test's) and no MachineSets.
async fn cluster_with(test: &str, mut secret: Value) -> TestEnv {
    let env = TestEnv::new(test).await;
    env.aws_cluster("4.21.0", &stream_421(), None).await;
    secret["metadata"]["namespace"] = json!(env.ns);
    // The web identity Secret only where a test asks for one; `cluster` uses the machine API's.
    if secret["metadata"]["name"] != "unused" {
        env.apply(secret).await;
    }
    env
}

async fn add_machine_sets(env: &TestEnv, amis: &[(&str, &str)]) {
    for (name, id) in amis {
        let machine_set = machine_set(&env.ns, name).ami(id);
        env.apply(machine_set.user_data("worker-user-data-managed").build())
            .await;
    }
}

/// The controller's own credentials Secret as `ccoctl aws create-iam-roles` writes it
/// (`secretManifestsTemplate`, pkg/cmd/provisioning/aws/create-iam-roles.go in
/// openshift/cloud-credential-operator).
fn web_identity_secret(name: &str, token_file: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": name},
        "stringData": {"credentials": format!(
            "[default]\nsts_regional_endpoints = regional\nrole_arn = {ROLE}\n\
             web_identity_token_file = {token_file}"
        )}
    })
}

const ROLE: &str = "arn:aws:iam::123456789012:role/boot-image-controller";
const OWN_SECRET: &str = "boot-image-controller-aws-credentials";

fn controller(env: &TestEnv, endpoint: &str) -> ControllerProcess {
    env.controller(&[&format!("--ec2-endpoint={endpoint}")])
}

async fn wait_for_ami(env: &TestEnv, controller: &ControllerProcess, name: &str, ami: &str) {
    let reached = eventually(CONVERGE, || async {
        (ami_of(&env.machine_set(name).await) == ami).then_some(())
    })
    .await;
    assert!(
        reached.is_some(),
        "{name} never reached {ami}; it has {}\n{}",
        ami_of(&env.machine_set(name).await),
        controller.log_tail(40)
    );
}

/// Waits until the Progressing condition's message satisfies `ok`.
async fn wait_for_message(
    env: &TestEnv,
    controller: &ControllerProcess,
    ok: impl Fn(&str) -> bool,
) {
    let message = || async {
        let condition = env.condition("BootImageUpdateProgressing").await?;
        Some(condition["message"].as_str()?.to_string())
    };
    let seen = eventually(CONVERGE, || async { message().await.filter(|m| ok(m)) }).await;
    assert!(
        seen.is_some(),
        "unexpected Progressing message: {:?}\n{}",
        message().await,
        controller.log_tail(40)
    );
}

fn resources(reason: &str) -> String {
    format!(
        r#"boot_image_controller_machine_resources{{action="Skip",kind="MachineSet",reason="{reason}"}}"#
    )
}

async fn wait_for_metric(controller: &ControllerProcess, series: &str, ok: impl Fn(f64) -> bool) {
    let seen = eventually(CONVERGE, || async {
        controller.metric(series).await.filter(|v| ok(*v))
    })
    .await;
    assert!(
        seen.is_some(),
        "{series} never as expected; now {:?}\n{}",
        controller.metric(series).await,
        controller.log_tail(40)
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn rhcos_marketplace_and_rosa_amis_are_updated_by_owner_and_custom_ones_never() {
    let Some(moto) = Moto::start(&simulated_ec2()) else {
        return;
    };
    let env = cluster(
        "ec2-owners",
        &[
            ("rhcos-unlisted", RHCOS_UNLISTED),
            ("marketplace", MARKET_OLD),
            ("rosa", ROSA_OLD),
            ("custom", CUSTOM),
        ],
    )
    .await;
    let controller = controller(&env, &moto.endpoint());
    controller.wait_ready().await;

    // Red Hat's account: the golden AMI of the region, though no list names the old one.
    wait_for_ami(&env, &controller, "rhcos-unlisted", AMI_421_US_EAST_1).await;
    // Marketplace: the newest AMI of the same product not newer than the golden 9.6 release.
    wait_for_ami(&env, &controller, "marketplace", MARKET_NEW).await;
    // ROSA: its product's newest x86_64 AMI, not the newer arm64 one.
    wait_for_ami(&env, &controller, "rosa", ROSA_NEW).await;
    // The custom AMI is reported as such once its owner is known, and never touched.
    wait_for_metric(&controller, &resources("CustomImage"), |v| v == 1.0).await;
    assert_eq!(ami_of(&env.machine_set("custom").await), CUSTOM);
    // What an administrator reads: one custom image skipped, nothing waiting for EC2.
    wait_for_message(&env, &controller, |m| {
        m.contains("(CustomImage: 1)") && !m.contains("Ec2")
    })
    .await;
    let asked = controller
        .metric(r#"boot_image_controller_ec2_requests_total{call="images",result="ok"}"#)
        .await;
    assert!(asked.is_some_and(|n| n >= 1.0), "{asked:?}");
    assert_eq!(
        controller
            .metric("boot_image_controller_ec2_unavailable_regions")
            .await,
        Some(0.0)
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn without_ec2_the_lists_still_apply_and_unknown_amis_are_left_alone() {
    // Nothing listens on this port: every connection is refused.
    let closed = format!("http://127.0.0.1:{}/", support::free_port());
    let env = cluster(
        "ec2-down",
        &[
            // In the shipped list of published AMIs: still updated.
            ("listed", AMI_420_US_EAST_1),
            ("rhcos-unlisted", RHCOS_UNLISTED),
        ],
    )
    .await;
    let controller = controller(&env, &closed);
    controller.wait_ready().await;

    wait_for_ami(&env, &controller, "listed", AMI_421_US_EAST_1).await;
    wait_for_metric(&controller, &resources("Ec2Unavailable"), |v| v == 1.0).await;
    wait_for_metric(
        &controller,
        "boot_image_controller_ec2_unavailable_regions",
        |v| v == 1.0,
    )
    .await;
    wait_for_metric(
        &controller,
        r#"boot_image_controller_ec2_requests_total{call="images",result="unreachable"}"#,
        |v| v >= 1.0,
    )
    .await;
    assert_eq!(
        ami_of(&env.machine_set("rhcos-unlisted").await),
        RHCOS_UNLISTED,
        "an AMI whose owner is unknown must not be treated as ours"
    );
    wait_for_message(&env, &controller, |m| m.contains("(Ec2Unavailable: 1)")).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_throttling_ec2_is_asked_again_after_a_backoff() {
    let Some(moto) = Moto::start(&simulated_ec2()) else {
        return;
    };
    let proxy = ThrottlingProxy::start(moto.endpoint(), 2).await;
    let env = cluster("ec2-throttled", &[("rhcos-unlisted", RHCOS_UNLISTED)]).await;
    let controller = controller(&env, &proxy.endpoint());
    controller.wait_ready().await;

    wait_for_ami(&env, &controller, "rhcos-unlisted", AMI_421_US_EAST_1).await;
    let answers = proxy.answers();
    let kinds: Vec<&Answered> = answers.iter().map(|(_, a)| a).collect();
    assert_eq!(
        kinds[..3],
        [
            &Answered::Throttled,
            &Answered::Throttled,
            &Answered::Forwarded
        ],
        "{answers:?}"
    );
    // Each retry waited: at least half the first backoff (500 ms, jittered), then more.
    let gaps: Vec<Duration> = answers
        .windows(2)
        .take(2)
        .map(|w| w[1].0 - w[0].0)
        .collect();
    assert!(
        gaps.iter().all(|g| *g >= Duration::from_millis(250)),
        "retried without backing off: {gaps:?}"
    );
    println!("throttled twice; retried after {gaps:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn requests_are_signed_with_the_secrets_keys_and_need_only_describe_images() {
    let Some((moto, key_id, secret_key)) = Moto::start_with_iam(&simulated_ec2()) else {
        return;
    };
    let env = cluster("ec2-signed", &[("rhcos-unlisted", RHCOS_UNLISTED)]).await;
    // A Secret with the right key id but a wrong secret key: EC2 refuses the signature.
    env.apply(keys_secret(&env.ns, &key_id, "not-the-secret-key"))
        .await;
    let controller = controller(&env, &moto.endpoint());
    controller.wait_ready().await;
    wait_for_metric(
        &controller,
        r#"boot_image_controller_ec2_requests_total{call="images",result="refused"}"#,
        |v| v >= 1.0,
    )
    .await;
    wait_for_metric(&controller, &resources("Ec2Unavailable"), |v| v == 1.0).await;
    assert_eq!(
        ami_of(&env.machine_set("rhcos-unlisted").await),
        RHCOS_UNLISTED
    );

    // The credential operator rotates the key into the Secret: the next attempt is accepted by
    // moto's own SigV4 check, and a policy of ec2:DescribeImages alone is enough.
    env.apply(keys_secret(&env.ns, &key_id, &secret_key)).await;
    wait_for_ami(&env, &controller, "rhcos-unlisted", AMI_421_US_EAST_1).await;
}

/// `plan` runs `boot-image-controller plan -f <manifests>` with `args` and the credentials in
/// the environment; returns the plan as JSON.
fn plan(manifests: &std::path::Path, args: &[&str]) -> Value {
    let out = std::process::Command::new(support::BINARY)
        .args(["plan", "-f", manifests.to_str().unwrap(), "-o", "json"])
        .args(args)
        .env_remove("KUBECONFIG")
        .env("AWS_ACCESS_KEY_ID", "AKIAIOSFODNN7EXAMPLE")
        .env(
            "AWS_SECRET_ACCESS_KEY",
            "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
        )
        .output()
        .expect("the binary runs");
    assert!(
        out.status.success(),
        "plan {args:?} failed: {}",
        support::stderr_of(&out)
    );
    serde_json::from_slice(&out.stdout).expect("plan -o json prints JSON")
}

fn entry<'a>(plan: &'a Value, name: &str) -> &'a Value {
    (plan["machineSets"].as_array().unwrap().iter())
        .find(|e| e["name"] == name)
        .unwrap_or_else(|| panic!("no {name} in {plan:#}"))
}

#[test]
fn plan_asks_ec2_and_plans_the_same_again_from_the_saved_facts() {
    let Some(moto) = Moto::start(&simulated_ec2()) else {
        return;
    };
    let ns = "openshift-machine-api";
    let mut objects = vec![
        infrastructure("cluster", "AWS"),
        cluster_version("version", "4.21.0", "Completed"),
        machine_configuration("cluster", None),
        golden_config_map(ns, "4.21.0", &stream_421()),
        machine_set(ns, "marketplace").ami(MARKET_OLD).build(),
        machine_set(ns, "custom").ami(CUSTOM).build(),
        stub_secret(ns, "worker-user-data", "3.2.0"),
    ];
    objects.extend(control_plane_nodes());
    let dir = tempfile::tempdir().unwrap();
    let manifests = dir.path().join("cluster.json");
    std::fs::write(&manifests, as_cluster_manifests(objects).to_string()).unwrap();
    let saved = dir.path().join("ec2-facts.json");

    let asked = plan(
        &manifests,
        &[
            "--ec2-lookup",
            "--ec2-endpoint",
            &moto.endpoint(),
            "--save-ec2-facts",
            saved.to_str().unwrap(),
            "--now",
            "2026-03-02T10:00:00Z",
        ],
    );
    let marketplace = entry(&asked, "marketplace");
    assert_eq!(marketplace["action"], "Update", "{marketplace:#}");
    assert_eq!(marketplace["bootImage"]["target"], MARKET_NEW);
    assert_eq!(entry(&asked, "custom")["reason"], "CustomImage");

    // Offline, from the file: the same decisions, patches included.
    drop(moto);
    let replayed = plan(
        &manifests,
        &[
            "--ec2-facts",
            saved.to_str().unwrap(),
            "--now",
            "2026-03-02T10:00:00Z",
        ],
    );
    assert_eq!(replayed, asked);
    // Without EC2 the marketplace AMI is not recognised: a custom image, left alone.
    let without = plan(&manifests, &["--now", "2026-03-02T10:00:00Z"]);
    assert_eq!(entry(&without, "marketplace")["reason"], "CustomImage");
}

/// A listener that records the body of every HTTP request it receives and answers 500: where a
/// request that must not be sent would arrive.
struct Recorder {
    port: u16,
    connections: Arc<AtomicUsize>,
    bodies: Arc<Mutex<Vec<String>>>,
}

impl Recorder {
    async fn start() -> Recorder {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let connections = Arc::new(AtomicUsize::new(0));
        let bodies = Arc::new(Mutex::new(Vec::new()));
        let (seen, kept) = (connections.clone(), bodies.clone());
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                seen.fetch_add(1, Ordering::SeqCst);
                let kept = kept.clone();
                tokio::spawn(async move {
                    let mut received = Vec::new();
                    let mut buf = [0u8; 4096];
                    let read = async {
                        while let Ok(n @ 1..) = stream.read(&mut buf).await {
                            received.extend_from_slice(&buf[..n]);
                            let text = String::from_utf8_lossy(&received);
                            if let Some((head, body)) = text.split_once("\r\n\r\n") {
                                let length = (head.lines())
                                    .filter_map(|l| l.split_once(':'))
                                    .find(|(k, _)| k.eq_ignore_ascii_case("content-length"))
                                    .and_then(|(_, v)| v.trim().parse::<usize>().ok())
                                    .unwrap_or(0);
                                if body.len() >= length {
                                    return;
                                }
                            }
                        }
                    };
                    let _ = tokio::time::timeout(Duration::from_secs(10), read).await;
                    kept.lock()
                        .unwrap()
                        .push(String::from_utf8_lossy(&received).into_owned());
                    let _ = stream
                        .write_all(b"HTTP/1.1 500 Internal Server Error\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
                        .await;
                });
            }
        });
        Recorder {
            port,
            connections,
            bodies,
        }
    }

    fn bodies(&self) -> Vec<String> {
        self.bodies.lock().unwrap().clone()
    }
}

/// A region this controller does not recognise (a made-up one, one AWS opened after its
/// partition table, or one written to reach another host) is skipped, as upstream skips a region
/// its stream lacks: nothing is sent to it, and it never degrades.
#[tokio::test(flavor = "multi_thread")]
async fn a_region_that_is_no_aws_region_sends_nothing_and_is_skipped() {
    let listener = Recorder::start().await;
    let hostile = format!("x@127.0.0.1:{}/", listener.port);
    let env = cluster("ec2-hostile-region", &[]).await;
    for (name, region) in [("hostile", hostile.as_str()), ("mars", "mars-east-1")] {
        let machine_set = machine_set(&env.ns, name)
            .ami(RHCOS_UNLISTED)
            .region(region)
            .build();
        env.apply(machine_set).await;
    }
    // No --ec2-endpoint: the host is what the region makes of it.
    let controller = env.controller(&[]);
    controller.wait_ready().await;
    wait_for_metric(&controller, &resources("RegionNotInStream"), |v| v == 2.0).await;
    // The status is written after the metrics: wait for it as a user would.
    wait_for_message(&env, &controller, |m| m.contains("(RegionNotInStream: 2)")).await;
    let degraded = env.condition("BootImageUpdateDegraded").await;
    assert_eq!(
        degraded.as_ref().map(|d| d["status"].clone()),
        Some(json!("False")),
        "{degraded:?}"
    );
    // Look-ups start on the pass that finds the AMI unknown: that pass is long over.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        listener.connections.load(Ordering::SeqCst),
        0,
        "the region's host was contacted: {:?}\n{}",
        listener.bodies(),
        controller.log_tail(40)
    );
    for name in ["hostile", "mars"] {
        assert_eq!(ami_of(&env.machine_set(name).await), RHCOS_UNLISTED);
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn only_amis_of_objects_that_would_be_updated_are_looked_up() {
    let ec2 = Recorder::start().await;
    let env = cluster("ec2-selected-only", &[("selected", RHCOS_UNLISTED)]).await;
    let opted_out = machine_set(&env.ns, "opted-out")
        .ami(CUSTOM)
        .opted_out()
        .build();
    env.apply(opted_out).await;
    let owned = machine_set(&env.ns, "owned")
        .ami(MARKET_OLD)
        .owned_by("SomeOperator", "owner")
        .build();
    env.apply(owned).await;
    let controller = controller(&env, &format!("http://127.0.0.1:{}/", ec2.port));
    controller.wait_ready().await;
    let asked = eventually(CONVERGE, || async {
        let bodies = ec2.bodies();
        bodies
            .iter()
            .any(|b| b.contains(RHCOS_UNLISTED))
            .then_some(bodies)
    })
    .await;
    let bodies = asked.unwrap_or_else(|| {
        panic!(
            "the selected MachineSet's AMI was never asked about\n{}",
            controller.log_tail(40)
        )
    });
    for body in bodies {
        assert!(
            !body.contains(CUSTOM) && !body.contains(MARKET_OLD),
            "asked about an object that is never updated: {body}"
        );
    }
}

/// The requests moto received for `action` (from its recorder).
fn requests_of(moto: &Moto, action: &str) -> Vec<Value> {
    let action = format!("Action={action}&");
    (moto.requests().into_iter())
        .filter(|r| r["body"].as_str().is_some_and(|b| b.contains(&action)))
        .collect()
}

/// The session tokens moto's STS issued, oldest first, with their access key ids.
async fn issued_sessions(moto: &Moto) -> Vec<(String, String)> {
    let state = moto.state().await;
    let roles = state["sts"]["AssumedRole"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    (roles.iter())
        .map(|r| (str_of(&r["access_key_id"]), str_of(&r["session_token"])))
        .collect()
}

fn str_of(v: &Value) -> String {
    v.as_str().unwrap_or_default().to_string()
}

/// A DescribeImages request's access key id and session token.
fn signed_with(request: &Value) -> (String, String) {
    let authorization = str_of(&request["headers"]["Authorization"]);
    let key = (authorization.split("Credential=").nth(1))
        .and_then(|c| c.split('/').next())
        .unwrap_or_default()
        .to_string();
    (key, str_of(&request["headers"]["X-Amz-Security-Token"]))
}

/// Manual mode with STS: the controller exchanges the projected ServiceAccount token (a file
/// the test writes) for temporary credentials with STS's AssumeRoleWithWebIdentity, signs
/// DescribeImages with them and their session token, and reads the token file again when it
/// exchanges again, so a token the kubelet rotated is the one sent.
#[tokio::test(flavor = "multi_thread")]
async fn web_identity_credentials_sign_describe_images_and_a_rotated_token_is_used() {
    let Some(moto) = Moto::start_recording(&simulated_ec2()) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, "first-token\n").unwrap();
    let secret = web_identity_secret(OWN_SECRET, token_file.to_str().unwrap());
    let env = cluster_with("ec2-sts", secret).await;
    add_machine_sets(&env, &[("rhcos-unlisted", RHCOS_UNLISTED)]).await;
    // Credentials asked to last 4 s are exchanged again after 3.2 s.
    let controller = env.controller(&[
        &format!("--ec2-endpoint={}", moto.endpoint()),
        &format!("--sts-endpoint={}", moto.endpoint()),
        "--sts-session-duration=4s",
    ]);
    controller.wait_ready().await;
    wait_for_ami(&env, &controller, "rhcos-unlisted", AMI_421_US_EAST_1).await;

    let assumed = requests_of(&moto, "AssumeRoleWithWebIdentity");
    let first = assumed.first().expect("STS was asked");
    let body = str_of(&first["body"]);
    assert!(
        body.split('&').any(|p| p == "WebIdentityToken=first-token"),
        "{body}"
    );
    assert!(
        body.contains("RoleArn=arn%3Aaws%3Aiam%3A%3A123456789012%3Arole%2Fboot-image-controller"),
        "{body}"
    );
    assert!(
        first["headers"].get("Authorization").is_none(),
        "the exchange is not signed"
    );
    // DescribeImages was signed with credentials moto's STS issued, session token included
    // (moto's recorder keeps every header it received).
    let issued = issued_sessions(&moto).await;
    let described = requests_of(&moto, "DescribeImages");
    let signed = signed_with(described.first().expect("EC2 was asked"));
    assert!(
        signed.0.starts_with("ASIA"),
        "not temporary credentials: {signed:?}"
    );
    assert!(
        issued.contains(&signed),
        "{signed:?} is no session STS issued: {issued:?}"
    );

    // The kubelet rotates the token; once the credentials are due, the next look-up (a new
    // MachineSet on an unlisted AMI) exchanges the new token for new credentials.
    std::fs::write(&token_file, "rotated-token\n").unwrap();
    tokio::time::sleep(Duration::from_secs(4)).await;
    add_machine_sets(&env, &[("custom", CUSTOM)]).await;
    wait_for_metric(&controller, &resources("CustomImage"), |v| v == 1.0).await;
    let assumed = requests_of(&moto, "AssumeRoleWithWebIdentity");
    // One exchange per session: the first served every call until it was due.
    assert_eq!(assumed.len(), 2, "{assumed:?}");
    let last = str_of(&assumed.last().unwrap()["body"]);
    assert!(
        last.split('&')
            .any(|p| p == "WebIdentityToken=rotated-token"),
        "{last}"
    );
    let issued = issued_sessions(&moto).await;
    let asked = requests_of(&moto, "DescribeImages");
    let custom = (asked.iter())
        .find(|r| str_of(&r["body"]).contains(CUSTOM))
        .expect("the custom AMI was asked about");
    assert_eq!(Some(&signed_with(custom)), issued.last(), "{issued:?}");
    assert_ne!(
        signed_with(custom),
        signed,
        "the first credentials were used again"
    );
}

/// STS refusing the token (here `ExpiredTokenException`, as for a token older than its life):
/// the unlisted AMI is left alone with `Ec2Unavailable` and the refusal in the log, listed AMIs
/// are still updated, and once STS accepts the token the look-up is made.
#[tokio::test(flavor = "multi_thread")]
async fn a_refused_web_identity_leaves_only_unlisted_amis_waiting() {
    let Some(moto) = Moto::start(&simulated_ec2()) else {
        return;
    };
    // STS's error answer (AWS STS API reference, "Common Errors" and AssumeRoleWithWebIdentity).
    let expired = "<ErrorResponse xmlns=\"https://sts.amazonaws.com/doc/2011-06-15/\"><Error>\
        <Type>Sender</Type><Code>ExpiredTokenException</Code><Message>Token expired: current \
        date/time 1764324000 must be before the expiration date/time 1764320400</Message>\
        </Error><RequestId>refused</RequestId></ErrorResponse>";
    let sts = ThrottlingProxy::refusing(moto.endpoint(), 1, 400, expired).await;
    let dir = tempfile::tempdir().unwrap();
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, "expired-token").unwrap();
    let secret = web_identity_secret(OWN_SECRET, token_file.to_str().unwrap());
    let env = cluster_with("ec2-sts-refused", secret).await;
    add_machine_sets(
        &env,
        &[
            ("listed", AMI_420_US_EAST_1),
            ("rhcos-unlisted", RHCOS_UNLISTED),
        ],
    )
    .await;
    let controller = env.controller(&[
        &format!("--ec2-endpoint={}", moto.endpoint()),
        &format!("--sts-endpoint={}", sts.endpoint()),
    ]);
    controller.wait_ready().await;

    wait_for_ami(&env, &controller, "listed", AMI_421_US_EAST_1).await;
    wait_for_metric(
        &controller,
        r#"boot_image_controller_ec2_requests_total{call="assume_role",result="refused"}"#,
        |v| v == 1.0,
    )
    .await;
    wait_for_metric(&controller, &resources("Ec2Unavailable"), |v| v == 1.0).await;
    wait_for_message(&env, &controller, |m| m.contains("(Ec2Unavailable: 1)")).await;
    assert_eq!(
        ami_of(&env.machine_set("rhcos-unlisted").await),
        RHCOS_UNLISTED
    );
    let log = controller.log_tail(200);
    assert!(
        log.contains("STS refused AssumeRoleWithWebIdentity (ExpiredTokenException)"),
        "{log}"
    );
    // The region is asked again after its backoff (15 s); STS now accepts the token.
    wait_for_ami(&env, &controller, "rhcos-unlisted", AMI_421_US_EAST_1).await;
}
