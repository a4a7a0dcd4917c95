//! `plan` as a CI step and on piped input: an exit code that says "changes pending", `-f -`,
//! YAML output, and a what-if selection for a cluster that has not opted in.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use serde_json::Value;

const BINARY: &str = env!("CARGO_BIN_EXE_boot-image-controller");
/// One clock for plans that are compared: patches record the time in their history annotation.
const NOW: &str = "2026-03-02T10:00:00Z";

fn demo_cluster() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/testdata/aws-cluster")
}

fn plan(args: &[&str], stdin: Option<&str>) -> Output {
    let mut child = Command::new(BINARY)
        .arg("plan")
        .args(args)
        .env_remove("KUBECONFIG")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the binary runs");
    let mut input = child.stdin.take().unwrap();
    // A plan refused on its arguments exits without reading its input, and may be gone before
    // it is written: the closed pipe is then part of its answer, which its exit code gives.
    if let Err(error) = input.write_all(stdin.unwrap_or("").as_bytes()) {
        assert_eq!(error.kind(), std::io::ErrorKind::BrokenPipe, "{error}");
    }
    drop(input);
    child.wait_with_output().unwrap()
}

fn json_of(output: &Output) -> Value {
    serde_json::from_slice(&output.stdout).unwrap_or_else(|e| {
        panic!(
            "not JSON ({e}): {}",
            String::from_utf8_lossy(&output.stderr)
        )
    })
}

fn actions(plan: &Value) -> Vec<(String, String)> {
    plan["machineSets"]
        .as_array()
        .expect("machineSets")
        .iter()
        .map(|e| {
            (
                e["name"].as_str().unwrap_or_default().to_string(),
                e["action"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect()
}

/// The demo cluster has outdated MachineSets: 3 with the flag, 0 without it.
#[test]
fn pending_changes_exit_3_with_detailed_exitcode() {
    let dir = demo_cluster();
    let dir = dir.to_str().unwrap();
    let with_flag = plan(&["-f", dir, "--detailed-exitcode"], None);
    assert_eq!(with_flag.status.code(), Some(3), "{with_flag:?}");
    assert!(
        String::from_utf8_lossy(&with_flag.stdout).contains("Update"),
        "the plan is still printed"
    );
    let without = plan(&["-f", dir], None);
    assert_eq!(without.status.code(), Some(0));
    // Nothing selected, nothing pending.
    let nothing = plan(
        &[
            "-f",
            dir,
            "--detailed-exitcode",
            "--assume-selection",
            "None",
        ],
        None,
    );
    assert_eq!(nothing.status.code(), Some(0), "{nothing:?}");
    // Unusable input keeps its own code.
    let missing = plan(&["-f", "/nonexistent", "--detailed-exitcode"], None);
    assert_eq!(missing.status.code(), Some(2));
}

#[test]
fn standard_input_plans_like_the_same_file() {
    let file = demo_cluster().join("machinesets.yaml");
    let text = std::fs::read_to_string(&file).unwrap();
    let from_file = plan(
        &["-f", file.to_str().unwrap(), "-o", "json", "--now", NOW],
        None,
    );
    let from_stdin = plan(&["-f", "-", "-o", "json", "--now", NOW], Some(&text));
    assert!(from_stdin.status.success(), "{from_stdin:?}");
    assert_eq!(json_of(&from_stdin), json_of(&from_file));

    let mixed = plan(&["-f", "-", "-f", file.to_str().unwrap()], Some(&text));
    assert_eq!(mixed.status.code(), Some(2), "{mixed:?}");
}

#[test]
fn yaml_output_holds_the_same_plan_as_json() {
    let dir = demo_cluster();
    let dir = dir.to_str().unwrap();
    // The same clock for both: patches record the time in their history annotation.
    let now = "2026-03-02T10:00:00Z";
    let json = json_of(&plan(&["-f", dir, "-o", "json", "--now", now], None));
    let yaml = plan(&["-f", dir, "-o", "yaml", "--now", now], None);
    assert!(yaml.status.success(), "{yaml:?}");
    let parsed: Value =
        serde_saphyr::from_str(&String::from_utf8_lossy(&yaml.stdout)).expect("valid YAML");
    assert_eq!(parsed, json);
}

/// Without a MachineConfiguration nothing can be planned; `--assume-selection All` shows what
/// opting in would change.
#[test]
fn assume_selection_all_shows_what_opting_in_would_change() {
    let tmp = tempfile::tempdir().unwrap();
    for entry in std::fs::read_dir(demo_cluster()).unwrap() {
        let path = entry.unwrap().path();
        if path.file_name().unwrap() != "machineconfiguration.yaml" {
            std::fs::copy(&path, tmp.path().join(path.file_name().unwrap())).unwrap();
        }
    }
    let dir = tmp.path().to_str().unwrap();
    let unconfigured = json_of(&plan(&["-f", dir, "-o", "json"], None));
    assert_eq!(
        unconfigured["blocked"]["reason"], "MachineConfigurationMissing",
        "{unconfigured}"
    );
    let what_if = json_of(&plan(
        &["-f", dir, "-o", "json", "--assume-selection", "All"],
        None,
    ));
    assert!(what_if["blocked"].is_null(), "{what_if}");
    let full = json_of(&plan(
        &["-f", demo_cluster().to_str().unwrap(), "-o", "json"],
        None,
    ));
    assert_eq!(
        actions(&what_if),
        actions(&full),
        "All is what the platform default does on AWS"
    );
    assert!(
        actions(&what_if).iter().any(|(_, a)| a == "Update"),
        "{what_if}"
    );
}

/// A must-gather blanks secrets: the managed stub cannot be checked there, and `plan` says so
/// instead of calling it invalid Ignition.
#[test]
fn a_must_gather_blanked_stub_secret_is_unverified_not_invalid() {
    let tmp = tempfile::tempdir().unwrap();
    for entry in std::fs::read_dir(demo_cluster()).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_owned();
        let mut text = std::fs::read_to_string(&path).unwrap();
        if name == "secrets.yaml" {
            // What `oc adm inspect` writes: every value replaced, here by "<N> bytes long".
            let elided = text
                .lines()
                .map(|l| match l.split_once("userData: ") {
                    Some((indent, _)) => format!("{indent}userData: MTkzNCBieXRlcyBsb25n"),
                    None => l.to_string(),
                })
                .collect::<Vec<_>>()
                .join("\n");
            text = elided;
        }
        std::fs::write(tmp.path().join(name), text).unwrap();
    }
    let plan = json_of(&plan(
        &["-f", tmp.path().to_str().unwrap(), "-o", "json"],
        None,
    ));
    let reasons: Vec<&str> = plan["machineSets"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| e["reason"].as_str())
        .collect();
    assert!(reasons.contains(&"StubSecretUnverified"), "{reasons:?}");
    assert!(!reasons.contains(&"StubSecretUnconvertible"), "{reasons:?}");
}

/// `-o wide` is the table plus every operation of every patch, so a reviewer sees exactly what
/// `run` would send.
#[test]
fn wide_output_adds_every_patch_operation_to_the_table() {
    let dir = demo_cluster();
    let dir = dir.to_str().unwrap();
    let table = String::from_utf8(plan(&["-f", dir, "--now", NOW], None).stdout).unwrap();
    let wide =
        String::from_utf8(plan(&["-f", dir, "--now", NOW, "-o", "wide"], None).stdout).unwrap();
    assert!(wide.starts_with(&table), "the table first:\n{wide}");
    let json = json_of(&plan(&["-f", dir, "--now", NOW, "-o", "json"], None));
    for entry in json["machineSets"].as_array().unwrap() {
        for op in entry["patch"].as_array().unwrap() {
            assert!(wide.contains(&op.to_string()), "{op} missing from:\n{wide}");
        }
    }
    assert!(wide.contains("\"op\":\"test\""), "{wide}");
}
