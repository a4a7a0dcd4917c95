//! moto, the EC2 simulator from PyPI (installed by `hack/ensure-moto.sh`), run on loopback for
//! the tests that ask EC2 about AMIs; and a proxy in front of it that throttles.
//!
//! moto loads the AMIs it serves from the JSON file `MOTO_AMIS_PATH` names, read when its EC2
//! backend is imported (moto/ec2/models/amis.py): a list of objects with the keyword arguments
//! of its `Ami` model (`ami_id`, `owner_id`, `name`, ...). That is how images can exist under
//! Red Hat's and the AWS Marketplace's accounts.

use std::path::Path;
use std::process::{Child, Command};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Request, Response};
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo};
use serde_json::{Value, json};

use super::{REPO, free_port};

/// One AMI as moto's `MOTO_AMIS_PATH` file describes it.
pub fn ami(
    id: &str,
    owner: &str,
    name: &str,
    description: &str,
    arch: &str,
    created: &str,
) -> Value {
    json!({
        "ami_id": id,
        "name": name,
        "description": description,
        "owner_id": owner,
        "public": true,
        "virtualization_type": "hvm",
        "architecture": arch,
        "state": "available",
        "platform": null,
        "image_type": "machine",
        "hypervisor": "xen",
        "root_device_name": "/dev/xvda",
        "root_device_type": "ebs",
        "sriov": "simple",
        "creation_date": created,
    })
}

/// The `moto_server` executable, installed on first use; `None` when it cannot be.
fn moto_server() -> Option<String> {
    static PATH: OnceLock<Option<String>> = OnceLock::new();
    PATH.get_or_init(|| super::ensured_tool("hack/ensure-moto.sh"))
        .clone()
}

/// A moto server serving `amis`, stopped when dropped.
pub struct Moto {
    child: Child,
    pub port: u16,
    _amis: tempfile::NamedTempFile,
    /// Where moto's recorder writes each request it receives, when started recording.
    recording: Option<std::path::PathBuf>,
}

impl Moto {
    /// Starts moto with `amis`; `None` (the test is then skipped) when moto cannot be installed.
    pub fn start(amis: &[Value]) -> Option<Moto> {
        Moto::spawn(amis, &[])
    }

    /// Starts moto with `amis` and IAM authentication: every request must be signed (SigV4,
    /// checked by botocore inside moto) with the keys of an IAM user whose policy allows the
    /// action. Creates one user allowed `ec2:DescribeImages` only; returns its access key id and
    /// secret key.
    pub fn start_with_iam(amis: &[Value]) -> Option<(Moto, String, String)> {
        // The three IAM calls below are the only ones moto lets through unsigned.
        let moto = Moto::spawn(amis, &[("INITIAL_NO_AUTH_ACTION_COUNT", "3")])?;
        let python = Path::new(&moto_server()?).with_file_name("python");
        let script = r#"
import json, sys
import boto3
iam = boto3.client("iam", endpoint_url=sys.argv[1], region_name="us-east-1",
                   aws_access_key_id="bootstrap", aws_secret_access_key="bootstrap")
iam.create_user(UserName="machine-api")
iam.put_user_policy(UserName="machine-api", PolicyName="describe-images",
    PolicyDocument=json.dumps({"Version": "2012-10-17", "Statement": [
        {"Effect": "Allow", "Action": "ec2:DescribeImages", "Resource": "*"}]}))
key = iam.create_access_key(UserName="machine-api")["AccessKey"]
print(key["AccessKeyId"], key["SecretAccessKey"])
"#;
        let out = Command::new(python)
            .args(["-c", script, &moto.endpoint()])
            .output()
            .expect("run the IAM set-up");
        assert!(
            out.status.success(),
            "IAM set-up failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let mut keys = text.split_whitespace();
        let id = keys.next().expect("an access key id").to_string();
        let secret = keys.next().expect("a secret key").to_string();
        Some((moto, id, secret))
    }

    /// Starts moto with `amis`, its recorder writing every request it receives (headers and
    /// body: moto/moto_api/_internal/recorder/models.py), for [`Moto::requests`].
    pub fn start_recording(amis: &[Value]) -> Option<Moto> {
        static N: AtomicUsize = AtomicUsize::new(0);
        let dir = Path::new(REPO).join("target/test-logs");
        std::fs::create_dir_all(&dir).unwrap();
        let n = N.fetch_add(1, Ordering::SeqCst);
        let path = dir.join(format!("moto-requests-{}-{n}.jsonl", std::process::id()));
        let _ = std::fs::remove_file(&path);
        let env = [
            ("MOTO_ENABLE_RECORDING", "True"),
            ("MOTO_RECORDER_FILEPATH", path.to_str().unwrap()),
        ];
        let mut moto = Moto::spawn(amis, &env)?;
        moto.recording = Some(path);
        Some(moto)
    }

    /// The requests moto received so far, as its recorder wrote them (`headers`, `method`,
    /// `url`, and `body` decoded to text).
    pub fn requests(&self) -> Vec<Value> {
        let path = self.recording.as_ref().expect("started recording");
        let text = std::fs::read_to_string(path).unwrap_or_default();
        (text.lines())
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .map(|mut request| {
                if request["body_encoded"] == true {
                    use base64::Engine;
                    let body = request["body"].as_str().unwrap_or_default();
                    let bytes = base64::engine::general_purpose::STANDARD
                        .decode(body)
                        .unwrap_or_default();
                    request["body"] = String::from_utf8_lossy(&bytes).into_owned().into();
                }
                request
            })
            .collect()
    }

    /// moto's state (`/moto-api/data.json`): what it issued, e.g. STS's assumed roles.
    pub async fn state(&self) -> Value {
        let client: Client<_, Full<Bytes>> = Client::builder(TokioExecutor::new()).build_http();
        let uri = format!("{}moto-api/data.json", self.endpoint());
        let answer = client
            .get(uri.parse().unwrap())
            .await
            .expect("moto answers");
        let body = answer.into_body().collect().await.unwrap().to_bytes();
        serde_json::from_slice(&body).expect("moto's state as JSON")
    }

    fn spawn(amis: &[Value], env: &[(&str, &str)]) -> Option<Moto> {
        let Some(server) = moto_server() else {
            boot_image_controller::testkit::skips::skip(
                "moto (PyPI) cannot be installed by hack/ensure-moto.sh",
            );
            return None;
        };
        let file = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(file.path(), serde_json::to_vec(amis).unwrap()).unwrap();
        let port = free_port();
        let dir = Path::new(REPO).join("target/test-logs");
        std::fs::create_dir_all(&dir).unwrap();
        let log = std::fs::File::create(dir.join(format!("moto-{port}.log"))).unwrap();
        let child = Command::new(server)
            .args(["-H", "127.0.0.1", "-p", &port.to_string()])
            .env("MOTO_AMIS_PATH", file.path())
            .envs(env.iter().copied())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("start moto_server");
        let moto = Moto {
            child,
            port,
            _amis: file,
            recording: None,
        };
        // Ready once it accepts connections; moto imports its services first (seconds).
        let deadline = Instant::now() + Duration::from_secs(120);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                Instant::now() < deadline,
                "moto_server never listened on {port}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        Some(moto)
    }

    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}/", self.port)
    }
}

impl Drop for Moto {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// What the throttling proxy answered, in order (`Throttled`: its own error answer).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Answered {
    Throttled,
    Forwarded,
}

/// An HTTP proxy to an AWS endpoint that answers the first `throttled` requests with EC2's
/// `RequestLimitExceeded` (HTTP 503), as EC2 does when an account exceeds its request rate,
/// or with another error answer ([`ThrottlingProxy::refusing`]), and forwards the rest.
pub struct ThrottlingProxy {
    pub port: u16,
    answers: Arc<Mutex<Vec<(Instant, Answered)>>>,
    task: tokio::task::JoinHandle<()>,
}

impl ThrottlingProxy {
    pub async fn start(upstream: String, throttled: usize) -> ThrottlingProxy {
        let body = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\
            <Response><Errors><Error><Code>RequestLimitExceeded</Code>\
            <Message>Request limit exceeded.</Message></Error></Errors>\
            <RequestID>throttled</RequestID></Response>";
        ThrottlingProxy::refusing(upstream, throttled, 503, body).await
    }

    /// A proxy answering the first `refused` requests with `status` and `body`.
    pub async fn refusing(
        upstream: String,
        refused: usize,
        status: u16,
        body: &'static str,
    ) -> ThrottlingProxy {
        let throttled = refused;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let answers = Arc::new(Mutex::new(Vec::new()));
        let count = Arc::new(AtomicUsize::new(0));
        let client: Client<_, Full<Bytes>> = Client::builder(TokioExecutor::new()).build_http();
        let log = answers.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                let (upstream, log, count, client) =
                    (upstream.clone(), log.clone(), count.clone(), client.clone());
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |request: Request<Incoming>| {
                        let (upstream, log, count, client) =
                            (upstream.clone(), log.clone(), count.clone(), client.clone());
                        async move {
                            let n = count.fetch_add(1, Ordering::SeqCst);
                            if n < throttled {
                                log.lock()
                                    .unwrap()
                                    .push((Instant::now(), Answered::Throttled));
                                return Ok::<_, hyper::Error>(
                                    Response::builder()
                                        .status(status)
                                        .body(Full::new(Bytes::from(body)))
                                        .unwrap(),
                                );
                            }
                            let (parts, body) = request.into_parts();
                            let body = body.collect().await?.to_bytes();
                            let mut forward = Request::builder()
                                .method(parts.method)
                                .uri(upstream.as_str());
                            for (name, value) in &parts.headers {
                                forward = forward.header(name, value);
                            }
                            let answer = client
                                .request(forward.body(Full::new(body)).unwrap())
                                .await
                                .expect("moto answers");
                            let status = answer.status();
                            let body = answer.into_body().collect().await?.to_bytes();
                            log.lock()
                                .unwrap()
                                .push((Instant::now(), Answered::Forwarded));
                            Ok(Response::builder()
                                .status(status)
                                .body(Full::new(body))
                                .unwrap())
                        }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        ThrottlingProxy {
            port,
            answers,
            task,
        }
    }

    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}/", self.port)
    }

    pub fn answers(&self) -> Vec<(Instant, Answered)> {
        self.answers.lock().unwrap().clone()
    }
}

impl Drop for ThrottlingProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}
