//! Choosing the cluster as with kubectl: `KUBECONFIG` may list several files (merged, the first
//! one's current context wins) and `--context` picks another context, against the real API
//! server.

use crate::support;

use std::path::Path;
use std::process::{Command, Output};

use serde_json::{Value, json};

/// The admin kubeconfig split in two: `first` has only a context `unreachable` (current) whose
/// server does not answer; `second` has the real cluster as context `local`.
fn write_kubeconfigs(dir: &Path) -> String {
    let admin: Value = serde_saphyr::from_str(
        &std::fs::read_to_string(support::kubeconfig()).expect("admin kubeconfig"),
    )
    .expect("kubeconfig YAML");
    let cluster = admin["clusters"][0]["cluster"].clone();
    let user = admin["users"][0]["user"].clone();
    let first = json!({
        "apiVersion": "v1", "kind": "Config", "current-context": "unreachable",
        "clusters": [{"name": "nowhere", "cluster": {"server": "https://127.0.0.1:1",
            "insecure-skip-tls-verify": true}}],
        "users": [{"name": "nobody", "user": {"token": "none"}}],
        "contexts": [{"name": "unreachable", "context": {"cluster": "nowhere", "user": "nobody"}}],
    });
    let second = json!({
        "apiVersion": "v1", "kind": "Config", "current-context": "local",
        "clusters": [{"name": "local", "cluster": cluster}],
        "users": [{"name": "admin", "user": user}],
        "contexts": [{"name": "local", "context": {"cluster": "local", "user": "admin"}}],
    });
    let (a, b) = (dir.join("first.yaml"), dir.join("second.yaml"));
    std::fs::write(&a, first.to_string()).unwrap();
    std::fs::write(&b, second.to_string()).unwrap();
    std::env::join_paths([a, b]).unwrap().into_string().unwrap()
}

fn revert(kubeconfig_env: &str, extra: &[&str]) -> Output {
    Command::new(support::BINARY)
        .args([
            "revert",
            "--namespace",
            "openshift-machine-api",
            "--machineset",
            "no-such-machineset",
            "--dry-run",
        ])
        .args(extra)
        .env("KUBECONFIG", kubeconfig_env)
        .env_remove("HOME")
        .output()
        .expect("the binary runs")
}

#[test]
fn kubeconfig_lists_and_context_choose_the_cluster() {
    let tmp = tempfile::tempdir().unwrap();
    let list = write_kubeconfigs(tmp.path());

    // The merged current context is the first file's: nothing answers there.
    let current = revert(&list, &[]);
    assert_eq!(current.status.code(), Some(1), "{current:?}");

    // --context picks the real cluster from the second file: it answers that the MachineSet
    // does not exist (exit 2), which only the API server can say.
    let chosen = revert(&list, &["--context", "local"]);
    let stderr = String::from_utf8_lossy(&chosen.stderr);
    assert_eq!(chosen.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("no-such-machineset"), "{stderr}");

    // A context no file has is an error naming it, never a fall-back to another cluster.
    let unknown = revert(&list, &["--context", "elsewhere"]);
    let stderr = String::from_utf8_lossy(&unknown.stderr);
    assert_eq!(unknown.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("elsewhere"), "{stderr}");
}
