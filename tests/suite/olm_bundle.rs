//! The OLM bundle in bundle/ (docs/olm.md) is what manifests/ installs, and OLM accepts it.
//!
//! - Its Deployment, RBAC and extra objects are those of manifests/ (pure file reads: a change
//!   to manifests/ without `hack/bundle.sh` fails here, with or without Go).
//! - `olm-bundle check` (hack/tools/olm-bundle, built by hack/ensure-olm-bundle.sh) renders it
//!   again byte for byte and runs operator-framework's validators: the default bundle ones, the
//!   OperatorHub suite, good practices, removed APIs, and the certification checks' feature
//!   annotations.
//! - The CSV is stored unchanged by an API server serving OLM's own ClusterServiceVersion CRD
//!   (from the same Go module): no field of ours is pruned as unknown.

use std::process::Command;
use std::sync::OnceLock;

use boot_image_controller::testkit::skips::skip;
use serde_json::{Value, json};

use crate::deploy::{Cluster, read, repo};

const CSV: &str = "bundle/manifests/boot-image-controller.clusterserviceversion.yaml";
/// The image name manifests/deployment.yaml gives the container (kustomize's `images:` sets it).
const MANIFEST_IMAGE: &str = "boot-image-controller";

fn yaml(relative: &str) -> Vec<Value> {
    let docs: Vec<Value> =
        serde_saphyr::from_multiple(&read(relative)).unwrap_or_else(|e| panic!("{relative}: {e}"));
    docs.into_iter().filter(|d| !d.is_null()).collect()
}

/// The one object of `kind` in a manifest file.
fn only(relative: &str, kind: &str) -> Value {
    let mut found: Vec<Value> = yaml(relative)
        .into_iter()
        .filter(|o| o["kind"] == kind)
        .collect();
    assert_eq!(found.len(), 1, "{relative}: one {kind} expected");
    found.remove(0)
}

fn csv() -> Value {
    only(CSV, "ClusterServiceVersion")
}

/// The object without the label every object of the kustomization carries.
fn without_part_of(mut object: Value) -> Value {
    if let Some(labels) = object["metadata"]["labels"].as_object_mut() {
        labels.remove("app.kubernetes.io/part-of");
        if labels.is_empty() {
            object["metadata"].as_object_mut().unwrap().remove("labels");
        }
    }
    object
}

#[test]
fn the_bundle_installs_what_the_manifests_install() {
    let csv = csv();
    let strategy = &csv["spec"]["install"]["spec"];

    // The Deployment: the same spec, with the image the bundle names.
    let deployment = only("manifests/deployment.yaml", "Deployment");
    let deployments = strategy["deployments"].as_array().expect("deployments");
    assert_eq!(deployments.len(), 1);
    assert_eq!(deployments[0]["name"], deployment["metadata"]["name"]);
    let mut spec = deployments[0]["spec"].clone();
    let image = csv["metadata"]["annotations"]["containerImage"].clone();
    let container = &mut spec["template"]["spec"]["containers"][0];
    assert_eq!(
        container["image"], image,
        "containerImage names the image the pod runs"
    );
    container["image"] = json!(MANIFEST_IMAGE);
    assert_eq!(
        spec, deployment["spec"],
        "the CSV's Deployment is not manifests/deployment.yaml: run hack/bundle.sh"
    );
    assert_eq!(
        csv["spec"]["relatedImages"],
        json!([{"name": "controller", "image": image}])
    );

    // The ServiceAccount's rules: the ClusterRole as clusterPermissions, the Role in its own
    // namespace as permissions.
    let account =
        only("manifests/serviceaccount.yaml", "ServiceAccount")["metadata"]["name"].clone();
    for (key, file, kind) in [
        (
            "clusterPermissions",
            "manifests/rbac-cluster.yaml",
            "ClusterRole",
        ),
        ("permissions", "manifests/rbac-own-namespace.yaml", "Role"),
    ] {
        let role = only(file, kind);
        assert_eq!(
            strategy[key],
            json!([{"serviceAccountName": account, "rules": role["rules"]}]),
            "{key} are not the rules of {file}: run hack/bundle.sh"
        );
    }

    // The objects beside the CSV.
    for (bundled, manifest, kind) in [
        (
            "bundle/manifests/boot-image-controller_v1_service.yaml",
            "manifests/service.yaml",
            "Service",
        ),
        (
            "bundle/manifests/boot-image-controller_policy_v1_poddisruptionbudget.yaml",
            "manifests/poddisruptionbudget.yaml",
            "PodDisruptionBudget",
        ),
    ] {
        assert_eq!(
            without_part_of(only(bundled, kind)),
            only(manifest, kind),
            "{bundled} is not {manifest}: run hack/bundle.sh"
        );
    }
    let published = only(
        "bundle/manifests/boot-image-controller-published-images_v1_configmap.yaml",
        "ConfigMap",
    );
    assert_eq!(
        published["data"]["images.txt"],
        json!(read("manifests/published-images.txt"))
    );
}

/// The Roles OLM cannot install (it creates a bundle's namespaced objects in the install
/// namespace) are named in the CSV's description, which tells the administrator to apply them.
#[test]
fn the_csv_names_every_role_it_cannot_install() {
    let description = csv()["spec"]["description"].as_str().unwrap().to_string();
    let mut files = 0;
    for entry in std::fs::read_dir(repo().join("manifests")).unwrap() {
        let name = entry.unwrap().file_name().to_string_lossy().into_owned();
        if !(name.starts_with("rbac-") && name.ends_with(".yaml")) {
            continue;
        }
        let relative = format!("manifests/{name}");
        let pinned = yaml(&relative).iter().any(|o| {
            o["kind"] == "Role"
                && !o["metadata"]["annotations"][crate::deploy::PINNED_ANNOTATION].is_null()
        });
        if pinned {
            files += 1;
            assert!(
                description.contains(&relative),
                "the CSV's description (hack/olm/clusterserviceversion.base.yaml) does not tell \
                 the administrator to apply {relative}"
            );
        }
    }
    assert!(
        files >= 2,
        "the Roles in openshift-machine-api and openshift-machine-config-operator"
    );
}

/// `olm-bundle`, built on first use; `None` (the test is skipped) when it cannot be.
fn olm_bundle() -> Option<String> {
    static PATH: OnceLock<Option<String>> = OnceLock::new();
    let path = PATH
        .get_or_init(|| crate::support::ensured_tool("hack/ensure-olm-bundle.sh"))
        .clone();
    if path.is_none() {
        skip(
            "olm-bundle cannot be built by hack/ensure-olm-bundle.sh (Go toolchain and module proxy)",
        );
    }
    path
}

fn run_olm_bundle(tool: &str, args: &[&str]) -> String {
    let out = Command::new(tool)
        .args(args)
        .output()
        .expect("run olm-bundle");
    assert!(
        out.status.success(),
        "olm-bundle {} failed:\n{}{}",
        args.join(" "),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn the_bundle_is_rendered_from_the_manifests_and_passes_operator_frameworks_validators() {
    let Some(tool) = olm_bundle() else {
        return;
    };
    let repo = repo().to_str().expect("a UTF-8 path");
    run_olm_bundle(&tool, &["check", "-repo", repo]);
}

#[test]
fn an_api_server_with_olms_crd_stores_the_csv_unchanged() {
    let Some(cluster) = Cluster::from_env() else {
        return;
    };
    let Some(tool) = olm_bundle() else {
        return;
    };
    let crd = run_olm_bundle(&tool, &["crd"]);
    cluster.ok(
        &[
            "apply",
            "--server-side",
            "--field-manager=boot-image-controller-tests",
            "-f",
            "-",
        ],
        Some(&crd),
    );
    let namespace = "olm-bundle-test";
    let mut csv = csv();
    csv["metadata"]["namespace"] = json!(namespace);
    cluster.apply(&[
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}),
    ]);
    // A new CRD is served a moment after it is created: until then kubectl finds no such kind.
    let objects = crate::deploy::list(std::slice::from_ref(&csv));
    let apply = [
        "apply",
        "--server-side",
        "--field-manager=boot-image-controller-tests",
        "-f",
        "-",
    ];
    let mut out = cluster.run(&apply, Some(&objects));
    for _ in 0..300 {
        let stderr = String::from_utf8_lossy(&out.stderr);
        if out.status.success() || !stderr.contains("no matches for kind") {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
        out = cluster.run(&apply, Some(&objects));
    }
    assert!(
        out.status.success(),
        "the CSV was not accepted:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stored: Value = serde_json::from_str(&cluster.ok(
        &[
            "-n",
            namespace,
            "get",
            "clusterserviceversion",
            csv["metadata"]["name"].as_str().unwrap(),
            "-o",
            "json",
        ],
        None,
    ))
    .unwrap();
    assert_eq!(
        stored["spec"], csv["spec"],
        "the API server pruned or changed the CSV's spec"
    );
    for (key, value) in csv["metadata"]["annotations"].as_object().unwrap() {
        assert_eq!(
            &stored["metadata"]["annotations"][key], value,
            "annotation {key}"
        );
    }
}
