//! Helpers for the tests of `run --metrics-secure`: a serving certificate as the service CA
//! would write it, and service-account tokens with and without the right to read /metrics.

use std::path::Path;
use std::process::Command;

use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;

use crate::support::TestEnv;

/// A self-signed certificate for 127.0.0.1 in `dir` (tls.crt, tls.key), as the service-CA
/// operator would write one (the names are the keys of its Secret).
pub fn write_certificate(dir: &Path, name: &str) {
    std::fs::create_dir_all(dir).unwrap();
    let out = Command::new("openssl")
        .args(["req", "-x509", "-newkey", "ec", "-pkeyopt"])
        .arg("ec_paramgen_curve:prime256v1")
        .args(["-nodes", "-days", "1", "-subj"])
        .arg(format!("/CN={name}"))
        .args(["-addext", "subjectAltName=IP:127.0.0.1"])
        .arg("-keyout")
        .arg(dir.join("tls.key.new"))
        .arg("-out")
        .arg(dir.join("tls.crt.new"))
        .output()
        .expect("openssl runs");
    assert!(
        out.status.success(),
        "openssl: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Key first, then certificate, each replaced in one rename: the controller may look at any
    // moment and must only ever keep a pair that parses.
    std::fs::rename(dir.join("tls.key.new"), dir.join("tls.key")).unwrap();
    std::fs::rename(dir.join("tls.crt.new"), dir.join("tls.crt")).unwrap();
}

/// A token of ServiceAccount `account` in the test's namespace, created if needed.
pub async fn token_of(env: &TestEnv, account: &str) -> String {
    env.apply(json!({"apiVersion": "v1", "kind": "ServiceAccount",
        "metadata": {"name": account, "namespace": env.ns}}))
        .await;
    let request = TokenRequest {
        spec: TokenRequestSpec {
            audiences: vec![],
            expiration_seconds: Some(3600),
            ..Default::default()
        },
        ..Default::default()
    };
    Api::<ServiceAccount>::namespaced(env.client.clone(), &env.ns)
        .create_token_request(account, &PostParams::default(), &request)
        .await
        .expect("a token for the service account")
        .status
        .expect("token status")
        .token
}

/// Lets ServiceAccount `account` of the test's namespace `get` /metrics, as the manifests let
/// the ServiceMonitor's reader.
pub async fn allow_metrics(env: &TestEnv, account: &str) {
    let reader_role = format!("{}-{account}-metrics-reader", env.ns);
    let apply = PatchParams::apply("boot-image-controller-tests").force();
    Api::<ClusterRole>::all(env.client.clone())
        .patch(
            &reader_role,
            &apply,
            &Patch::Apply(
                json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                "metadata": {"name": reader_role},
                "rules": [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}]}),
            ),
        )
        .await
        .expect("apply the ClusterRole");
    Api::<ClusterRoleBinding>::all(env.client.clone())
        .patch(
            &reader_role,
            &apply,
            &Patch::Apply(json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                "metadata": {"name": reader_role},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": reader_role},
                "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": env.ns}]})),
        )
        .await
        .expect("apply the ClusterRoleBinding");
}
