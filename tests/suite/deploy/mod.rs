//! What the tests of the deployment manifests share: kubectl against the test cluster, the
//! kustomize build, and RBAC questions to the API server.
//!
//! kubectl: `$KUBECTL`, else `$BIC_BIN_DIR/kubectl`, else `kubectl` on PATH.
#![allow(dead_code)]

use std::collections::BTreeSet;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use boot_image_controller::testkit::skips::skip;
use serde_json::{Value, json};

/// The alert rules, one of the manifests.
pub const PROMETHEUS_RULE: &str = "manifests/monitoring/prometheusrule.yaml";
pub const PINNED_ANNOTATION: &str = "boot-image-controller/pinned-namespace";
pub const MACHINE_API: &str = "openshift-machine-api";
pub const MCO: &str = "openshift-machine-config-operator";
pub const FIELD_MANAGER: &str = "boot-image-controller-tests";

pub fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

pub fn read(relative: &str) -> String {
    std::fs::read_to_string(repo().join(relative))
        .unwrap_or_else(|e| panic!("read {relative}: {e}"))
}

// ---------------------------------------------------------------------------------------------
// kubectl and the cluster

/// The kubectl to run, if one runs at all.
pub fn kubectl() -> Option<PathBuf> {
    let candidate = if let Some(path) = std::env::var_os("KUBECTL").filter(|p| !p.is_empty()) {
        PathBuf::from(path)
    } else if let Some(dir) = std::env::var_os("BIC_BIN_DIR").filter(|p| !p.is_empty()) {
        Path::new(&dir).join("kubectl")
    } else {
        PathBuf::from("kubectl")
    };
    let works = Command::new(&candidate)
        .args(["version", "--client"])
        .output()
        .is_ok_and(|o| o.status.success());
    works.then_some(candidate)
}

/// kubectl, or a visible skip.
pub fn kubectl_or_skip() -> Option<PathBuf> {
    let found = kubectl();
    if found.is_none() {
        skip("no kubectl (set KUBECTL or BIC_BIN_DIR, or put kubectl on PATH)");
    }
    found
}

/// kubectl talking to the test cluster, or a visible skip.
pub struct Cluster {
    pub kubectl: PathBuf,
    pub kubeconfig: PathBuf,
}

impl Cluster {
    pub fn from_env() -> Option<Cluster> {
        let Some(kubeconfig) = std::env::var_os("KUBECONFIG").filter(|p| !p.is_empty()) else {
            skip("no KUBECONFIG (run through hack/test.sh)");
            return None;
        };
        let kubectl = kubectl_or_skip()?;
        Some(Cluster {
            kubectl,
            kubeconfig: kubeconfig.into(),
        })
    }

    pub fn run(&self, args: &[&str], stdin: Option<&str>) -> Output {
        let mut child = Command::new(&self.kubectl)
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .arg("--request-timeout=60s")
            .args(args)
            .stdin(if stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("run {}: {e}", self.kubectl.display()));
        if let Some(input) = stdin {
            child
                .stdin
                .take()
                .expect("stdin is piped")
                .write_all(input.as_bytes())
                .expect("write kubectl's stdin");
        }
        child.wait_with_output().expect("wait for kubectl")
    }

    /// Runs kubectl and fails the test, with its output, when it fails.
    pub fn ok(&self, args: &[&str], stdin: Option<&str>) -> String {
        let out = self.run(args, stdin);
        assert!(
            out.status.success(),
            "kubectl {} failed:\n{}{}",
            args.join(" "),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Waits until the CRDs `crds` (`crd/<name>`) are established. `kubectl wait` fails at once
    /// on a CRD created a moment ago whose status has no conditions yet (".status.conditions
    /// accessor error"), so it is asked again for a while before the test fails.
    pub fn wait_established(&self, crds: &[&str]) {
        let mut args = vec!["wait", "--for=condition=Established", "--timeout=60s"];
        args.extend(crds);
        for _ in 0..20 {
            if self.run(&args, None).status.success() {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(250));
        }
        self.ok(&args, None);
    }

    /// The (apiVersion, kind) pairs the server serves.
    pub fn served_kinds(&self) -> BTreeSet<(String, String)> {
        // Columns: NAME [SHORTNAMES] APIVERSION NAMESPACED KIND; SHORTNAMES may be empty, so
        // count from the right.
        self.ok(&["api-resources", "--no-headers"], None)
            .lines()
            .filter_map(|line| {
                let cols: Vec<&str> = line.split_whitespace().collect();
                (cols.len() >= 4).then(|| {
                    (
                        cols[cols.len() - 3].to_string(),
                        cols[cols.len() - 1].to_string(),
                    )
                })
            })
            .collect()
    }

    /// Applies objects for real (server-side apply, our own field manager).
    pub fn apply(&self, objects: &[Value]) -> String {
        self.ok(
            &[
                "apply",
                "--server-side",
                "--force-conflicts",
                &format!("--field-manager={FIELD_MANAGER}"),
                "-f",
                "-",
            ],
            Some(&list(objects)),
        )
    }
}

/// A v1 List of objects, which `kubectl apply -f -` expands.
pub fn list(objects: &[Value]) -> String {
    json!({"apiVersion": "v1", "kind": "List", "items": objects}).to_string()
}

// ---------------------------------------------------------------------------------------------
// The rendered manifests

/// Copies a directory tree.
pub fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("create dir");
    for entry in std::fs::read_dir(from).expect("read dir") {
        let entry = entry.expect("dir entry");
        let target = to.join(entry.file_name());
        if entry.file_type().expect("file type").is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).expect("copy file");
        }
    }
}

/// The objects of a kustomize build.
pub struct Rendered(pub Vec<Value>);

impl Rendered {
    /// `kubectl kustomize <dir>`.
    pub fn build(kubectl: &Path, dir: &Path) -> Rendered {
        let out = Command::new(kubectl)
            .arg("kustomize")
            .arg(dir)
            .output()
            .expect("run kubectl kustomize");
        assert!(
            out.status.success(),
            "kubectl kustomize {} failed:\n{}",
            dir.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        let text = String::from_utf8(out.stdout).expect("kustomize prints UTF-8");
        let docs: Vec<Value> =
            serde_saphyr::from_multiple(&text).expect("kustomize prints valid YAML");
        Rendered(docs.into_iter().filter(|d| !d.is_null()).collect())
    }

    pub fn manifests(kubectl: &Path) -> Rendered {
        Rendered::build(kubectl, &repo().join("manifests"))
    }

    /// The overlay docs/platforms/cluster-api.md shows administrators of clusters with Cluster
    /// API: its YAML block, with the checkout's path as seen from the overlay.
    pub fn manifests_with_cluster_api(kubectl: &Path) -> Rendered {
        let page = read("docs/platforms/cluster-api.md");
        let block = page
            .split("```yaml\n")
            .skip(1)
            .map(|b| b.split("```").next().unwrap_or_default())
            .find(|b| b.contains("# my-overlay/kustomization.yaml"))
            .expect("docs/platforms/cluster-api.md shows the overlay");
        // Indented under its list item; kustomize refuses an absolute path to a base, so the
        // overlay sits in the checkout's target/ and reaches manifests/ by a relative one.
        let overlay: String = block
            .lines()
            .map(|l| format!("{}\n", l.strip_prefix("  ").unwrap_or(l)))
            .collect::<String>()
            .replace("../boot-image-controller/", "../../");
        let scratch = repo().join("target");
        std::fs::create_dir_all(&scratch).expect("target/");
        let dir = tempfile::tempdir_in(&scratch).expect("overlay folder");
        std::fs::write(dir.path().join("kustomization.yaml"), overlay).expect("write overlay");
        Rendered::build(kubectl, dir.path())
    }

    pub fn of_kind<'a>(&'a self, kind: &'a str) -> impl Iterator<Item = &'a Value> + 'a {
        self.0.iter().filter(move |o| o["kind"] == kind)
    }

    pub fn get(&self, kind: &str, name: &str) -> &Value {
        self.0
            .iter()
            .find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
            .unwrap_or_else(|| panic!("no {kind} {name} in the manifests"))
    }

    /// The controller's ServiceAccount: the one its Deployment runs as.
    pub fn service_account(&self) -> (String, String) {
        let deployments: Vec<&Value> = self.of_kind("Deployment").collect();
        assert_eq!(deployments.len(), 1, "exactly one Deployment");
        let name = str_of(&deployments[0]["spec"]["template"]["spec"]["serviceAccountName"]);
        let meta = &self.get("ServiceAccount", &name)["metadata"];
        (str_of(&meta["namespace"]), str_of(&meta["name"]))
    }
}

pub fn str_of(v: &Value) -> String {
    v.as_str()
        .unwrap_or_else(|| panic!("expected a string, got {v}"))
        .to_string()
}

/// The `namespace:` of manifests/kustomization.yaml.
pub fn kustomization_namespace() -> String {
    let kustomization: Value =
        serde_saphyr::from_str(&read("manifests/kustomization.yaml")).expect("valid YAML");
    str_of(&kustomization["namespace"])
}

pub fn api_version_and_kind(o: &Value) -> (String, String) {
    (str_of(&o["apiVersion"]), str_of(&o["kind"]))
}

/// Splits objects into those the server serves and those it does not (CRDs not installed).
pub fn split_by_served(
    objects: &[Value],
    served: &BTreeSet<(String, String)>,
) -> (Vec<Value>, Vec<Value>) {
    objects
        .iter()
        .cloned()
        .partition(|o| served.contains(&api_version_and_kind(o)))
}

pub fn describe(objects: &[Value]) -> String {
    let kinds: BTreeSet<String> = objects
        .iter()
        .map(|o| format!("{} ({})", str_of(&o["kind"]), str_of(&o["apiVersion"])))
        .collect();
    kinds.into_iter().collect::<Vec<_>>().join(", ")
}

/// The Namespace objects go in for real first: a dry run cannot create objects inside a
/// namespace that a dry run only pretended to create. So do the OpenShift namespaces the
/// manifests put objects into (openshift-config-managed, ...), which every OpenShift cluster has
/// and the local control plane may lack.
pub fn ensure_namespaces(cluster: &Cluster, rendered: &Rendered) {
    let mut namespaces: Vec<Value> = rendered.of_kind("Namespace").cloned().collect();
    assert!(
        !namespaces.is_empty(),
        "the manifests create their namespace"
    );
    let openshift: BTreeSet<String> = rendered
        .0
        .iter()
        .filter_map(|o| o["metadata"]["namespace"].as_str())
        .filter(|ns| ns.starts_with("openshift-"))
        .map(str::to_string)
        .collect();
    namespaces.extend(
        openshift
            .into_iter()
            .map(|ns| json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})),
    );
    cluster.apply(&namespaces);
}

pub struct Access {
    pub allowed: bool,
    pub verb: &'static str,
    /// `resource[.group][/name]`, as can-i takes it.
    resource: String,
    subresource: Option<&'static str>,
    namespace: Option<String>,
}

pub fn allowed(verb: &'static str, resource: impl Into<String>, namespace: Option<&str>) -> Access {
    Access {
        allowed: true,
        verb,
        resource: resource.into(),
        subresource: None,
        namespace: namespace.map(str::to_string),
    }
}

pub fn denied(verb: &'static str, resource: impl Into<String>, namespace: Option<&str>) -> Access {
    Access {
        allowed: false,
        ..allowed(verb, resource, namespace)
    }
}

impl Access {
    pub fn status(mut self) -> Access {
        self.subresource = Some("status");
        self
    }

    pub fn describe(&self) -> String {
        let sub = self
            .subresource
            .map(|s| format!(" --subresource={s}"))
            .unwrap_or_default();
        let ns = self
            .namespace
            .as_deref()
            .map(|n| format!(" -n {n}"))
            .unwrap_or_default();
        format!("{} {}{sub}{ns}", self.verb, self.resource)
    }

    /// Asks the API server; true for "yes".
    pub fn ask(&self, cluster: &Cluster, user: &str) -> bool {
        let mut args = vec![
            "auth".to_string(),
            "can-i".to_string(),
            self.verb.to_string(),
            self.resource.clone(),
            format!("--as={user}"),
        ];
        if let Some(s) = self.subresource {
            args.push(format!("--subresource={s}"));
        }
        if let Some(ns) = &self.namespace {
            args.extend(["-n".to_string(), ns.clone()]);
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = cluster.run(&args, None);
        match String::from_utf8_lossy(&out.stdout).trim() {
            "yes" => true,
            "no" => false,
            other => panic!(
                "kubectl auth can-i {}: unexpected answer {other:?}: {}",
                self.describe(),
                String::from_utf8_lossy(&out.stderr)
            ),
        }
    }
}

/// The answers to `checks`, a few kubectl processes at a time.
pub fn ask_all(checks: &[Access], cluster: &Cluster, user: &str) -> Vec<bool> {
    checks
        .chunks(8)
        .flat_map(|chunk| {
            std::thread::scope(|scope| {
                let asking: Vec<_> = chunk
                    .iter()
                    .map(|c| scope.spawn(move || c.ask(cluster, user)))
                    .collect();
                asking
                    .into_iter()
                    .map(|h| h.join().expect("kubectl auth can-i"))
                    .collect::<Vec<bool>>()
            })
        })
        .collect()
}
