//! The `plan` and `crds` commands as users and tools run them: the built binary, its exit code,
//! its stdout parsed as JSON or YAML.
//!
//! Most tests use the project's own fixtures (tests/testdata, see its README). The acceptance
//! test also reads real upstream data from the shared folder when it exists and says SKIPPED
//! otherwise.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use boot_image_controller::testkit::streams::{
    AMI_420_US_EAST_1, AMI_421_ARM_US_EAST_1, AMI_421_US_EAST_1, CUSTOM_AMI,
};
use serde_json::{Value, json};

/// What the real build01 MachineSet runs: an old RHCOS AMI, in no golden stream we carry.
const BUILD01_AMI: &str = "ami-06f85a7940faa3217";
const PROVIDER_SPEC: &str = "/spec/template/spec/providerSpec/value";

fn run(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_boot-image-controller"))
        .args(args)
        .output()
        .expect("the binary runs")
}

fn stdout(output: &Output) -> String {
    String::from_utf8(output.stdout.clone()).expect("stdout is UTF-8")
}

fn stderr(output: &Output) -> String {
    String::from_utf8(output.stderr.clone()).expect("stderr is UTF-8")
}

fn testdata(relative: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/testdata")
        .join(relative)
}

fn demo_cluster() -> String {
    testdata("aws-cluster").display().to_string()
}

/// Runs `plan -o json` with these arguments and returns the parsed plan.
fn plan_json(args: &[&str]) -> Value {
    let mut all = vec!["plan", "--output", "json"];
    all.extend_from_slice(args);
    let output = run(&all);
    assert!(
        output.status.success(),
        "plan failed ({:?}): {}",
        output.status,
        stderr(&output)
    );
    serde_json::from_str(&stdout(&output)).expect("stdout is one JSON document")
}

fn machine_set<'a>(plan: &'a Value, name: &str) -> &'a Value {
    plan["machineSets"]
        .as_array()
        .expect("machineSets is an array")
        .iter()
        .find(|e| e["name"] == name)
        .unwrap_or_else(|| panic!("no entry for {name} in {plan:#}"))
}

fn action_and_reason(entry: &Value) -> (&str, &str) {
    (
        entry["action"].as_str().unwrap(),
        entry["reason"].as_str().unwrap(),
    )
}

#[test]
fn the_demo_cluster_updates_outdated_machine_sets_and_says_why_it_leaves_the_others() {
    let now = "2026-03-02T10:00:00Z";
    let plan = plan_json(&["--manifests", &demo_cluster(), "--now", now]);
    assert_eq!(plan["blocked"], Value::Null);
    assert_eq!(plan["machineSets"].as_array().unwrap().len(), 6);
    assert_eq!(plan["controlPlaneMachineSets"], json!([]));

    let outdated = machine_set(&plan, "demo-abc12-worker-us-east-1a");
    assert_eq!(action_and_reason(outdated), ("Update", "BootImageOutdated"));
    assert_eq!(
        outdated["bootImage"],
        json!({"current": AMI_420_US_EAST_1, "target": AMI_421_US_EAST_1})
    );
    assert_eq!(
        outdated["userDataSecret"],
        json!({"current": "worker-user-data", "target": null})
    );
    // The installer's spec-2 stub (tests/testdata) is upgraded in place first.
    assert_eq!(outdated["stubSecretUpgrade"]["name"], "worker-user-data");
    assert_eq!(outdated["stubSecretUpgrade"]["fromVersion"], "2.2.0");
    assert_eq!(
        outdated["patch"],
        json!([
            // The input that chose the AMI: moved to another region meanwhile, the patch fails.
            {"op": "test", "path": format!("{PROVIDER_SPEC}/placement/region"), "value": "us-east-1"},
            {"op": "test", "path": format!("{PROVIDER_SPEC}/ami/id"), "value": AMI_420_US_EAST_1},
            {"op": "replace", "path": format!("{PROVIDER_SPEC}/ami/id"), "value": AMI_421_US_EAST_1},
            // The stub it was checked against, and upgraded: another one set meanwhile fails it.
            {"op": "test", "path": format!("{PROVIDER_SPEC}/userDataSecret/name"), "value": "worker-user-data"},
            // No annotations yet (tests/testdata): the map is created, guarded by resourceVersion.
            {"op": "test", "path": "/metadata/resourceVersion", "value": "48211"},
            {"op": "add", "path": "/metadata/annotations", "value": {
                // The annotations' exact text, fields in the order the controller writes them.
                "boot-image-controller.io/history": format!(
                    r#"[{{"time":"{now}","release":"4.21.0","stream":"rhcos-4.21","bootImage":{{"from":"{AMI_420_US_EAST_1}","to":"{AMI_421_US_EAST_1}"}}}}]"#
                ),
                "boot-image-controller.io/hot-loop": format!(
                    r#"{{"patches":["{now}"]}}"#
                )
            }},
        ])
    );

    let arm64 = machine_set(&plan, "demo-abc12-worker-arm64-us-east-1a");
    assert_eq!(action_and_reason(arm64), ("Update", "BootImageOutdated"));
    assert_eq!(arm64["bootImage"]["target"], AMI_421_ARM_US_EAST_1);

    let current = machine_set(&plan, "demo-abc12-worker-us-east-1b");
    assert_eq!(action_and_reason(current), ("UpToDate", "UpToDate"));
    assert_eq!(current["patch"], json!([]));

    for (name, reason) in [
        ("demo-abc12-custom-us-east-1c", "CustomImage"),
        ("demo-abc12-infra-us-east-2a", "Owned"),
        ("demo-abc12-pinned-us-west-2a", "OptedOut"),
    ] {
        let entry = machine_set(&plan, name);
        assert_eq!(action_and_reason(entry), ("Skip", reason), "{name}");
        assert_eq!(entry["patch"], json!([]), "{name}");
        assert!(!entry["message"].as_str().unwrap().is_empty(), "{name}");
    }
}

#[test]
fn the_json_output_is_exactly_the_planners_plan() {
    use boot_image_controller::{manifests, plan};

    let now = "2026-03-02T10:00:00Z";
    let snapshot = manifests::load(&[testdata("aws-cluster")]).unwrap();
    let options = plan::Options {
        now: now.parse().unwrap(),
        ..plan::Options::default()
    };
    let expected = plan::plan(&snapshot.cluster, &snapshot.machines, &options);
    let output = run(&["plan", "-o", "json", "--now", now, "-f", &demo_cluster()]);
    assert_eq!(
        stdout(&output),
        serde_json::to_string_pretty(&expected).unwrap() + "\n"
    );
}

#[test]
fn known_images_from_a_file_make_an_image_ours() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("known.txt");
    std::fs::write(&file, format!("# our own build\n{CUSTOM_AMI}\n")).unwrap();
    let plan = plan_json(&[
        "-f",
        &demo_cluster(),
        "--known-images-file",
        file.to_str().unwrap(),
    ]);
    let custom = machine_set(&plan, "demo-abc12-custom-us-east-1c");
    assert_eq!(action_and_reason(custom), ("Update", "BootImageOutdated"));
    assert_eq!(custom["bootImage"]["target"], AMI_421_US_EAST_1);
}

#[test]
fn the_control_plane_arch_is_the_arch_of_machine_sets_that_do_not_name_theirs() {
    let default = plan_json(&["-f", &demo_cluster()]);
    let arm64_control_plane = plan_json(&["-f", &demo_cluster(), "--control-plane-arch", "arm64"]);
    let target = |plan: &Value, name: &str| machine_set(plan, name)["bootImage"]["target"].clone();
    let unannotated = "demo-abc12-worker-us-east-1a";
    assert_eq!(target(&default, unannotated), AMI_421_US_EAST_1);
    assert_eq!(
        target(&arm64_control_plane, unannotated),
        AMI_421_ARM_US_EAST_1
    );
    let annotated = "demo-abc12-worker-arm64-us-east-1a";
    assert_eq!(
        target(&arm64_control_plane, annotated),
        target(&default, annotated)
    );
}

#[test]
fn without_control_plane_nodes_an_unannotated_machine_set_gets_no_guessed_architecture() {
    let dir = tempfile::tempdir().unwrap();
    for entry in std::fs::read_dir(testdata("aws-cluster")).unwrap() {
        let path = entry.unwrap().path();
        if path.file_name().is_some_and(|n| n != "nodes.yaml") {
            std::fs::copy(&path, dir.path().join(path.file_name().unwrap())).unwrap();
        }
    }
    let plan = plan_json(&["-f", &dir.path().display().to_string()]);
    let unannotated = machine_set(&plan, "demo-abc12-worker-us-east-1a");
    assert_eq!(
        action_and_reason(unannotated),
        ("Error", "ArchitectureUndetermined")
    );
    assert_eq!(unannotated["patch"], json!([]));
    // The annotated one is judged on its own architecture; it stays too, since the unannotated
    // one keeps its image and names the same spec-2 stub (`StubSecretShared`).
    let annotated = machine_set(&plan, "demo-abc12-worker-arm64-us-east-1a");
    assert_eq!(annotated["bootImage"]["target"], AMI_421_ARM_US_EAST_1);
    assert_eq!(action_and_reason(annotated), ("Skip", "StubSecretShared"));
}

#[test]
fn the_table_names_every_machine_set_and_counts_the_actions() {
    let output = run(&["plan", "--manifests", &demo_cluster()]);
    assert!(output.status.success(), "{}", stderr(&output));
    let table = stdout(&output);
    assert!(
        table.starts_with(
            "Platform: AWS   Cluster: 4.21.0 (Completed)   Golden stream: rhcos-4.21 (release \
             4.21.0)\n"
        ),
        "{table}"
    );
    for name in [
        "demo-abc12-custom-us-east-1c",
        "demo-abc12-infra-us-east-2a",
        "demo-abc12-pinned-us-west-2a",
        "demo-abc12-worker-arm64-us-east-1a",
        "demo-abc12-worker-us-east-1a",
        "demo-abc12-worker-us-east-1b",
    ] {
        assert!(
            table.contains(&format!("openshift-machine-api/{name} ")),
            "{name} in\n{table}"
        );
    }
    assert!(table.contains(&format!("{AMI_420_US_EAST_1} -> {AMI_421_US_EAST_1}")));
    assert!(table.contains("worker-user-data (Ignition 2.2.0 -> 3.2.0)"));
    assert!(!table.contains("BLOCKED"));
    assert!(
        table.ends_with("Summary: 2 Update, 1 UpToDate, 3 Skip, 0 Error (6 MachineSets)\n"),
        "{table}"
    );
}

#[test]
fn mid_upgrade_the_plan_is_blocked_and_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let upgrading = std::fs::read_to_string(testdata("aws-cluster/clusterversion.yaml"))
        .unwrap()
        .replacen("state: Completed", "state: Partial", 1);
    std::fs::write(dir.path().join("clusterversion.yaml"), upgrading).unwrap();
    let mut args = vec!["-f".to_string(), dir.path().display().to_string()];
    for file in [
        "infrastructure.yaml",
        "machineconfiguration.yaml",
        "coreos-bootimages.yaml",
        "secrets.yaml",
        "known-images.yaml",
        "machinesets.yaml",
        "nodes.yaml",
    ] {
        args.extend([
            "-f".into(),
            testdata("aws-cluster").join(file).display().to_string(),
        ]);
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();

    let plan = plan_json(&args);
    assert_eq!(plan["blocked"]["reason"], "ClusterUpgrading");
    let outdated = machine_set(&plan, "demo-abc12-worker-us-east-1a");
    assert_eq!(action_and_reason(outdated), ("Skip", "ClusterUpgrading"));
    assert_eq!(outdated["patch"], json!([]));

    let mut table_args = vec!["plan"];
    table_args.extend(&args);
    let table = stdout(&run(&table_args));
    assert!(table.contains("\nBLOCKED: ClusterUpgrading: "), "{table}");
    assert!(
        table.contains("; blocked: nothing would be written"),
        "{table}"
    );
}

#[test]
fn a_malformed_machine_set_is_an_error_entry_not_a_failure() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("broken-machineset.yaml"),
        "apiVersion: machine.openshift.io/v1beta1\nkind: MachineSet\nmetadata:\n  name: \
         bad\n  namespace: openshift-machine-api\nspec:\n  replicas: many\n",
    )
    .unwrap();
    let plan = plan_json(&["-f", &demo_cluster(), "-f", dir.path().to_str().unwrap()]);
    let bad = machine_set(&plan, "bad");
    assert_eq!(action_and_reason(bad), ("Error", "MalformedObject"));
    assert!(
        bad["message"]
            .as_str()
            .unwrap()
            .contains("broken-machineset.yaml")
    );
}

fn assert_input_error(output: &Output, names: &str) {
    let err = stderr(output);
    assert_eq!(output.status.code(), Some(2), "stderr: {err}");
    assert!(err.starts_with("error: "), "{err}");
    assert!(err.contains(names), "{err} should name {names}");
    assert!(!err.contains("panicked"), "{err}");
    assert!(output.stdout.is_empty());
}

#[test]
fn a_yaml_syntax_error_exits_2_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("good.yaml"),
        "apiVersion: v1\nkind: List\nitems: []\n",
    )
    .unwrap();
    std::fs::create_dir(dir.path().join("nested")).unwrap();
    std::fs::write(
        dir.path().join("nested/broken.yaml"),
        "apiVersion: v1\nkind: [unclosed\n",
    )
    .unwrap();
    let output = run(&["plan", "-f", dir.path().to_str().unwrap()]);
    assert_input_error(&output, "broken.yaml");
    assert!(stderr(&output).contains("line 2"), "{}", stderr(&output));
}

#[test]
fn a_json_syntax_error_exits_2_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("objects.json");
    std::fs::write(&file, "{\"apiVersion\": \"v1\", ").unwrap();
    assert_input_error(
        &run(&["plan", "-f", file.to_str().unwrap()]),
        "objects.json",
    );
}

#[test]
fn a_missing_path_exits_2_naming_it() {
    let missing = testdata("does-not-exist");
    let output = run(&["plan", "--manifests", missing.to_str().unwrap()]);
    assert_input_error(&output, "does-not-exist");
}

#[test]
fn a_missing_known_images_file_exits_2_naming_it() {
    let output = run(&[
        "plan",
        "-f",
        &demo_cluster(),
        "--known-images-file",
        "no-such-known-images.txt",
    ]);
    assert_input_error(&output, "no-such-known-images.txt");
}

#[test]
fn crds_prints_the_seven_crds_as_a_yaml_stream() {
    let output = run(&["crds"]);
    assert!(output.status.success(), "{}", stderr(&output));
    let documents: Vec<Value> = serde_saphyr::from_multiple(&stdout(&output)).unwrap();
    assert!(
        documents
            .iter()
            .all(|d| d["apiVersion"] == "apiextensions.k8s.io/v1"
                && d["kind"] == "CustomResourceDefinition")
    );
    let mut names: Vec<&str> = documents
        .iter()
        .map(|d| d["metadata"]["name"].as_str().unwrap())
        .collect();
    names.sort();
    assert_eq!(
        names,
        [
            "clusterversions.config.openshift.io",
            "controlplanemachinesets.machine.openshift.io",
            "infrastructures.config.openshift.io",
            "machineconfigurations.operator.openshift.io",
            "machinehealthchecks.machine.openshift.io",
            "machines.machine.openshift.io",
            "machinesets.machine.openshift.io",
        ]
    );
}

// ---------------------------------------------------------------------------------------------
// Acceptance: real upstream data.

/// The real build01 MachineSet, renamed and changed by `edit`.
fn build01_variant(original: &Value, suffix: &str, edit: impl FnOnce(&mut Value)) -> Value {
    let mut ms = original.clone();
    let name = format!(
        "{}{suffix}",
        ms["metadata"]["name"].as_str().expect("build01 has a name")
    );
    ms["metadata"]["name"] = name.into();
    edit(&mut ms);
    ms
}

fn own_stub(ms: &mut Value) {
    ms["spec"]["template"]["spec"]["providerSpec"]["value"]["userDataSecret"]["name"] =
        json!("worker-user-data-managed");
}

fn set_ami(ms: &mut Value, ami: &str) {
    let id = ms
        .pointer_mut(&format!("{PROVIDER_SPEC}/ami/id"))
        .expect("build01 sets ami.id");
    *id = ami.into();
}

#[test]
fn acceptance_real_stream_and_build01_machine_sets() {
    let Some(shared) = boot_image_controller::testkit::skips::shared_dir() else {
        return;
    };
    let fixtures = shared.join("fixtures");
    let dir = tempfile::tempdir().unwrap();

    let stream =
        std::fs::read_to_string(fixtures.join("streams/rhcos-4.21-9.6.20251023-0.json")).unwrap();
    let golden = json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": "coreos-bootimages",
            "namespace": "openshift-machine-config-operator",
        },
        "data": {"releaseVersion": "4.21.0", "stream": stream},
    });
    std::fs::write(
        dir.path().join("coreos-bootimages.json"),
        serde_json::to_string_pretty(&golden).unwrap(),
    )
    .unwrap();

    let build01_yaml = std::fs::read_to_string(
        fixtures.join("machinesets/aws-openshift-release-build01-worker-us-east-1a.yaml"),
    )
    .unwrap();
    let original: Value = serde_saphyr::from_str(&build01_yaml).unwrap();
    assert_eq!(
        original.pointer(&format!("{PROVIDER_SPEC}/ami/id")),
        Some(&json!(BUILD01_AMI))
    );
    let moved = build01_variant(&original, "", |ms| set_ami(ms, AMI_420_US_EAST_1));
    // The variants that may keep their images name a stub of their own (Ignition spec 3):
    // beside the spec-2 `worker-user-data` they would hold its upgrade, and so the moves
    // (`StubSecretShared`), as on a real cluster.
    let untouched = build01_variant(&original, "-original", own_stub);
    // Another controller's MachineSet (an in-house operator's, by its owner reference), and one
    // of a Hive MachinePool, which Hive marks with labels only (openshift/hive
    // pkg/controller/machinepool, `generateMachineSets`).
    let owned = build01_variant(&moved, "-owned", |ms| {
        own_stub(ms);
        ms["metadata"]["ownerReferences"] = json!([{
            "apiVersion": "pools.example.com/v1",
            "kind": "WorkerPool",
            "name": "build01-gpu",
            "uid": "3c1f6a0e-5b7d-4e2a-9f18-6d0c2b4a8e91",
            "controller": true,
        }]);
    });
    let hive = build01_variant(&moved, "-hive", |ms| {
        let labels = ms["metadata"]["labels"].as_object_mut().expect("labels");
        labels.insert("hive.openshift.io/machine-pool".into(), json!("worker"));
        labels.insert("hive.openshift.io/managed".into(), json!("true"));
    });
    let custom = build01_variant(&moved, "-custom", |ms| {
        own_stub(ms);
        set_ami(ms, CUSTOM_AMI);
    });
    let opted_out = build01_variant(&moved, "-opted-out", |ms| {
        own_stub(ms);
        ms["metadata"]["annotations"] =
            json!({"boot-image-controller.io/boot-image-updates": "disabled"});
    });
    let machine_sets = [&moved, &untouched, &owned, &hive, &custom, &opted_out];
    std::fs::write(
        dir.path().join("machinesets.yaml"),
        serde_saphyr::to_string_multiple(&machine_sets).unwrap(),
    )
    .unwrap();

    let mut args = vec!["-f".to_string(), dir.path().display().to_string()];
    for file in [
        "infrastructure.yaml",
        "clusterversion.yaml",
        "machineconfiguration.yaml",
        "secrets.yaml",
        // The 4.20 AMIs the controller remembers from the release the cluster was installed at.
        "known-images.yaml",
        "nodes.yaml",
    ] {
        args.extend([
            "-f".into(),
            testdata("aws-cluster").join(file).display().to_string(),
        ]);
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    // The published RHCOS AMIs the binary ships know the build01 AMI; without them only the
    // upstream list (the MCO's allowed AMIs) given as a known-images file does.
    let without_published: Vec<&str> = args
        .iter()
        .copied()
        .chain(["--published-images=false"])
        .collect();
    let allowed_amis = fixtures.join("aws/mco-allowed-amis.txt");
    let with_allowed_amis: Vec<&str> = without_published
        .iter()
        .copied()
        .chain(["--known-images-file", allowed_amis.to_str().unwrap()])
        .collect();

    for (plan, knows_every_ami) in [
        (plan_json(&without_published), false),
        (plan_json(&with_allowed_amis), true),
        (plan_json(&args), true),
    ] {
        assert_eq!(plan["blocked"], Value::Null, "{plan:#}");
        let moved = machine_set(&plan, "build01-9hdwj-worker-us-east-1a");
        assert_eq!(action_and_reason(moved), ("Update", "BootImageOutdated"));
        assert_eq!(
            moved["bootImage"],
            json!({"current": AMI_420_US_EAST_1, "target": AMI_421_US_EAST_1})
        );
        assert_eq!(moved["userDataSecret"]["target"], Value::Null);

        let original = machine_set(&plan, "build01-9hdwj-worker-us-east-1a-original");
        if knows_every_ami {
            assert_eq!(action_and_reason(original), ("Update", "BootImageOutdated"));
            assert_eq!(
                original["bootImage"],
                json!({"current": BUILD01_AMI, "target": AMI_421_US_EAST_1})
            );
        } else {
            assert_eq!(action_and_reason(original), ("Skip", "CustomImage"));
            assert_eq!(original["bootImage"]["current"], BUILD01_AMI);
        }

        let hive = machine_set(&plan, "build01-9hdwj-worker-us-east-1a-hive");
        assert_eq!(action_and_reason(hive), ("Update", "BootImageOutdated"));

        let skips: Vec<(&str, &str)> = ["-owned", "-custom", "-opted-out"]
            .map(|suffix| {
                action_and_reason(machine_set(
                    &plan,
                    &format!("build01-9hdwj-worker-us-east-1a{suffix}"),
                ))
            })
            .to_vec();
        assert_eq!(
            skips,
            [
                ("Skip", "Owned"),
                ("Skip", "CustomImage"),
                ("Skip", "OptedOut")
            ]
        );
    }
}

/// The vSphere cluster of tests/testdata (opted in: on 4.21 vSphere is opt-in), with the AWS
/// cluster's release, Nodes and secrets (nothing in those is platform-specific).
fn vsphere_cluster() -> Vec<String> {
    let shared = ["clusterversion.yaml", "nodes.yaml", "secrets.yaml"];
    let mut args = vec![
        "--manifests".to_string(),
        testdata("vsphere-cluster").display().to_string(),
    ];
    for file in shared {
        args.push("--manifests".into());
        args.push(testdata("aws-cluster").join(file).display().to_string());
    }
    args
}

#[test]
fn vsphere_plans_say_which_template_they_would_import_and_leave_custom_ones() {
    let args = vsphere_cluster();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let plan = plan_json(&args);
    let worker = machine_set(&plan, "demo-vs9x2-worker-us-east-1a");
    assert_eq!(action_and_reason(worker), ("Skip", "TemplateImportPending"));
    let message = worker["message"].as_str().unwrap();
    for part in [
        "demo-vs9x2-rhcos-us-east-1a-9.6.20251023-0",
        "rhcos-9.6.20251023-0-vmware.x86_64.ova",
        "14fa549bb83b2e730de22312419b503bc1ce85adf72269582f0af60e366d87ff",
        "/dc1/datastore/datastore1",
    ] {
        assert!(message.contains(part), "{part} missing from {message}");
    }
    assert_eq!(worker["patch"], serde_json::json!([]));
    let custom = machine_set(&plan, "demo-vs9x2-custom-us-east-1b");
    assert_eq!(action_and_reason(custom), ("Skip", "CustomImage"));
    let elsewhere = machine_set(&plan, "demo-vs9x2-nfs-us-east-1a");
    assert_eq!(
        action_and_reason(elsewhere),
        ("Skip", "FailureDomainNotFound")
    );
}
