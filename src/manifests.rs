//! A cluster snapshot read from manifest files instead of an API server.
//!
//! The `plan` command has to work on what people actually have at hand: `oc get -o yaml`
//! output (often a `kind: List`), must-gather folders, hand-written fixtures. So a path may be a
//! file or a folder walked recursively, a file may hold several YAML documents or concatenated
//! JSON values, and anything we do not plan on is ignored rather than rejected.
//!
//! Broken input is reported with the file it came from. The one exception is a MachineSet or
//! ControlPlaneMachineSet that does not fit its typed view: that becomes a [`Malformed`] entry,
//! because the controller sees such objects too and must plan them as errors, not stop.

use std::collections::{BTreeMap, HashSet};
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use k8s_openapi::api::core::v1::Node;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

use crate::api::{
    ClusterApiMachineDeployment, ClusterApiMachineSet, ConfigMap, ControlPlaneMachineSet,
    MachineSet, Secret,
};
use crate::bounded_read::{MAX_INPUT_BYTES, read_regular_file};
use crate::known_images;
use crate::machine_kind::{MachineKind, MachineObject};
use crate::names::{
    CLUSTER_VERSION_NAME, GOLDEN_CONFIGMAP_NAME, GOLDEN_CONFIGMAP_NAMESPACE, INFRASTRUCTURE_NAME,
    KNOWN_IMAGES_CONFIGMAP_NAME, MACHINE_CONFIGURATION_NAME,
};
use crate::plan::nodes::{control_plane_arch, is_ready};
use crate::plan::{ClusterSnapshot, MachineResource, Malformed};

/// File name endings read when walking a folder. A file named explicitly is read whatever its
/// name, so `oc get ... > out.txt` works too.
const MANIFEST_EXTENSIONS: [&str; 3] = ["yaml", "yml", "json"];

/// What the manifests say about a cluster: the planner's whole input.
#[derive(Clone, Debug, Default)]
pub struct Snapshot {
    pub cluster: ClusterSnapshot,
    /// Every machine resource, of every kind.
    pub machines: Vec<MachineResource>,
    /// Things worth telling a person that do not prevent a plan, e.g. conflicting duplicates.
    pub warnings: Vec<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    #[error("{}: no such file or directory", .path.display())]
    NotFound { path: PathBuf },
    #[error("cannot read {}: {source}", .path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{}: not valid YAML: {message}", .path.display())]
    Yaml { path: PathBuf, message: String },
    #[error("{}: not valid JSON: {source}", .path.display())]
    Json {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
    /// A cluster-wide object (or Secret) that does not fit its kind. Unlike a bad MachineSet,
    /// it would silently change every decision, so the plan is refused.
    #[error("{}: {object} cannot be read: {message}", .path.display())]
    InvalidObject {
        path: PathBuf,
        object: String,
        message: String,
    },
}

/// Reads every manifest under `paths` (files, or folders walked recursively) into a snapshot.
pub fn load<P: AsRef<Path>>(paths: &[P]) -> Result<Snapshot, ManifestError> {
    let mut walk = Walk::default();
    for path in paths {
        let path = path.as_ref();
        // A path named on the command line is followed wherever it leads; inside it, links
        // are followed only within it.
        walk.root = path.canonicalize().ok();
        collect_files(path, &mut walk)?;
    }
    let Walk {
        files, passed_over, ..
    } = walk;
    let mut objects = Objects::default();
    for file in &files {
        let text =
            read_regular_file(file, MAX_INPUT_BYTES).map_err(|source| ManifestError::Read {
                path: file.clone(),
                source,
            })?;
        objects.add_text(file, &text)?;
    }
    let mut snapshot = objects.into_snapshot()?;
    snapshot.warnings.extend(passed_over);
    Ok(snapshot)
}

/// What a walk of the command line's paths found.
#[derive(Default)]
struct Walk {
    /// The path being walked, resolved: links inside it must stay inside it.
    root: Option<PathBuf>,
    files: Vec<PathBuf>,
    /// Folders already walked (symlinked folders in must-gathers can form cycles).
    visited: HashSet<PathBuf>,
    /// Links not followed, and why.
    passed_over: Vec<String>,
}

/// Whether the link `entry` may be followed: it resolves, and to a place inside the walked
/// path. A must-gather or a checkout may hold a link to `/proc/self` or `/`, or one to itself;
/// neither may take the walk onto the host nor fail the whole plan.
fn link_followed(entry: &Path, is_manifest: bool, walk: &mut Walk) -> bool {
    let target = match entry.canonicalize() {
        Ok(target) => target,
        // Dangling or looping: worth a word only where a manifest was expected.
        Err(e) => {
            if is_manifest {
                (walk.passed_over).push(format!(
                    "{}: a link that cannot be followed ({e}); passed over",
                    entry.display()
                ));
            }
            return false;
        }
    };
    let inside = walk
        .root
        .as_ref()
        .is_some_and(|root| target.starts_with(root));
    if !inside && (is_manifest || target.is_dir()) {
        walk.passed_over.push(format!(
            "{}: a link to {}, outside the folder walked; not followed",
            entry.display(),
            target.display()
        ));
    }
    inside
}

/// Parses manifests held in memory; `source` names them in messages.
pub fn from_str(source: impl AsRef<Path>, text: &str) -> Result<Snapshot, ManifestError> {
    let mut objects = Objects::default();
    objects.add_text(source.as_ref(), text)?;
    objects.into_snapshot()
}

/// Objects read already (from an API server, by `plan --live`), each a JSON value of its own;
/// `source` names them in messages.
pub fn from_values(
    source: impl AsRef<Path>,
    values: impl IntoIterator<Item = Value>,
) -> Result<Snapshot, ManifestError> {
    let mut objects = Objects::default();
    for value in values {
        objects.add_value(source.as_ref(), value);
    }
    objects.into_snapshot()
}

fn collect_files(path: &Path, walk: &mut Walk) -> Result<(), ManifestError> {
    let metadata = std::fs::metadata(path).map_err(|source| io_error(path, source))?;
    if !metadata.is_dir() {
        walk.files.push(path.to_path_buf());
        return Ok(());
    }
    let canonical = path
        .canonicalize()
        .map_err(|source| io_error(path, source))?;
    if !walk.visited.insert(canonical) {
        return Ok(());
    }
    let mut entries = std::fs::read_dir(path)
        .and_then(|dir| {
            dir.map(|e| e.map(|e| e.path()))
                .collect::<Result<Vec<_>, _>>()
        })
        .map_err(|source| io_error(path, source))?;
    // Sorted so that duplicates resolve the same way on every machine.
    entries.sort();
    for entry in entries {
        let name = entry
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default();
        // Editor backups, VCS metadata and the like are never manifests we mean.
        if name.starts_with('.') {
            continue;
        }
        let is_manifest = entry
            .extension()
            .and_then(|e| e.to_str())
            .is_some_and(|e| MANIFEST_EXTENSIONS.contains(&e.to_ascii_lowercase().as_str()));
        let is_link = std::fs::symlink_metadata(&entry).is_ok_and(|m| m.file_type().is_symlink());
        if is_link && !link_followed(&entry, is_manifest, walk) {
            continue;
        }
        match std::fs::metadata(&entry) {
            Ok(m) if m.is_dir() => collect_files(&entry, walk)?,
            // Only regular files: a FIFO or device with a manifest's name is never opened.
            Ok(m) if is_manifest && m.is_file() => walk.files.push(entry),
            Ok(_) => {}
            Err(source) if is_manifest => return Err(io_error(&entry, source)),
            // A dangling link to something that would not have been read anyway.
            Err(_) => {}
        }
    }
    Ok(())
}

fn io_error(path: &Path, source: std::io::Error) -> ManifestError {
    if source.kind() == std::io::ErrorKind::NotFound {
        ManifestError::NotFound {
            path: path.to_path_buf(),
        }
    } else {
        ManifestError::Read {
            path: path.to_path_buf(),
            source,
        }
    }
}

/// The kinds we plan on, identified by apiVersion, kind and, for singletons, name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    /// Planned as malformed when it does not fit its typed view.
    MachineResource(MachineKind),
    AwsMachineTemplate,
    MachineConfiguration,
    Infrastructure,
    ClusterVersion,
    GoldenConfigMap,
    KnownImagesConfigMap,
    Secret,
    Node,
    Machine,
    MachineHealthCheck,
}

impl Kind {
    fn classify(api_version: &str, kind: &str, namespace: &str, name: &str) -> Option<Kind> {
        let machine_kind = MachineKind::ALL.into_iter().find(|k| {
            // A Cluster API kind in either version: the shapes that differ (infrastructureRef)
            // are both read.
            let older = k.is_cluster_api() && api_version == "cluster.x-k8s.io/v1beta1";
            k.kind() == kind && (k.api_version() == api_version || older)
        });
        if let Some(machine_kind) = machine_kind {
            return Some(Kind::MachineResource(machine_kind));
        }
        Some(match (api_version, kind) {
            (
                "infrastructure.cluster.x-k8s.io/v1beta2"
                | "infrastructure.cluster.x-k8s.io/v1beta1",
                "AWSMachineTemplate",
            ) => Kind::AwsMachineTemplate,
            ("operator.openshift.io/v1", "MachineConfiguration")
                if name == MACHINE_CONFIGURATION_NAME =>
            {
                Kind::MachineConfiguration
            }
            ("config.openshift.io/v1", "Infrastructure") if name == INFRASTRUCTURE_NAME => {
                Kind::Infrastructure
            }
            ("config.openshift.io/v1", "ClusterVersion") if name == CLUSTER_VERSION_NAME => {
                Kind::ClusterVersion
            }
            ("v1", "ConfigMap")
                if namespace == GOLDEN_CONFIGMAP_NAMESPACE && name == GOLDEN_CONFIGMAP_NAME =>
            {
                Kind::GoldenConfigMap
            }
            ("v1", "ConfigMap") if name == KNOWN_IMAGES_CONFIGMAP_NAME => {
                Kind::KnownImagesConfigMap
            }
            ("v1", "Secret") => Kind::Secret,
            ("v1", "Node") => Kind::Node,
            ("machine.openshift.io/v1beta1", "Machine") => Kind::Machine,
            ("machine.openshift.io/v1beta1", "MachineHealthCheck") => Kind::MachineHealthCheck,
            _ => return None,
        })
    }
}

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct ObjectKey {
    kind: Kind,
    namespace: String,
    name: String,
    /// The object's `kind` (one per [`Kind`]), for messages.
    kind_name: String,
}

impl fmt::Display for ObjectKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.namespace.is_empty() {
            write!(f, "{} {}", self.kind_name, self.name)
        } else {
            write!(f, "{} {}/{}", self.kind_name, self.namespace, self.name)
        }
    }
}

struct Found {
    source: PathBuf,
    object: Value,
}

/// Recognised objects by identity; the same object in two files (common in must-gathers) is
/// read once.
#[derive(Default)]
struct Objects {
    by_key: BTreeMap<ObjectKey, Found>,
    warnings: Vec<String>,
}

impl Objects {
    fn add_text(&mut self, path: &Path, text: &str) -> Result<(), ManifestError> {
        let text = text.strip_prefix('\u{feff}').unwrap_or(text);
        let is_json = path
            .extension()
            .and_then(|e| e.to_str())
            .is_some_and(|e| e.eq_ignore_ascii_case("json"));
        let documents = if is_json {
            parse_json(path, text)?
        } else {
            parse_yaml(path, text)?
        };
        for document in documents {
            self.add_value(path, document);
        }
        Ok(())
    }

    fn add_value(&mut self, path: &Path, value: Value) {
        let Value::Object(mut object) = value else {
            return;
        };
        let api_version = str_field(&object, "apiVersion").to_string();
        let kind_name = str_field(&object, "kind").to_string();
        if let Some(item_kind) = kind_name.strip_suffix("List")
            && let Some(Value::Array(items)) = object.remove("items")
        {
            for mut item in items {
                // Raw API list responses leave the kind of their items implicit.
                if let Value::Object(item) = &mut item {
                    if !item.contains_key("apiVersion") && !api_version.is_empty() {
                        item.insert("apiVersion".into(), api_version.clone().into());
                    }
                    if !item.contains_key("kind") && !item_kind.is_empty() {
                        item.insert("kind".into(), item_kind.into());
                    }
                }
                self.add_value(path, item);
            }
            return;
        }
        let metadata = object.get("metadata");
        let meta_field = |field: &str| {
            metadata
                .and_then(|m| m.get(field))
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string()
        };
        let (namespace, name) = (meta_field("namespace"), meta_field("name"));
        let Some(kind) = Kind::classify(&api_version, &kind_name, &namespace, &name) else {
            return;
        };
        let key = ObjectKey {
            kind,
            namespace,
            name,
            kind_name,
        };
        let object = Value::Object(object);
        if let Some(earlier) = self.by_key.get(&key)
            && earlier.object != object
        {
            self.warnings.push(format!(
                "{key} appears in {} and differently in {}; using the latter",
                earlier.source.display(),
                path.display()
            ));
        }
        self.by_key.insert(
            key,
            Found {
                source: path.to_path_buf(),
                object,
            },
        );
    }

    fn into_snapshot(self) -> Result<Snapshot, ManifestError> {
        let mut snapshot = Snapshot {
            warnings: self.warnings,
            ..Snapshot::default()
        };
        // Manifests come from OpenShift clusters, which always serve ClusterVersions: one
        // missing from them holds writes, as it would on the cluster.
        snapshot.cluster.cluster_version_served = true;
        let cluster = &mut snapshot.cluster;
        for (key, found) in self.by_key {
            match key.kind {
                Kind::MachineResource(kind) => snapshot.machines.push(machine(kind, &key, found)),
                Kind::AwsMachineTemplate => {
                    let kind = crate::plan::cluster_api_templates::AWS_MACHINE_TEMPLATE.to_string();
                    cluster
                        .infrastructure_templates
                        .insert((kind, key.name.clone()), Arc::new(typed(&key, found)?));
                }
                Kind::MachineConfiguration => {
                    cluster.machine_configuration = Some(typed_with_spec(&key, found)?);
                }
                Kind::Infrastructure => {
                    cluster.infrastructure = Some(typed_with_spec(&key, found)?)
                }
                Kind::ClusterVersion => {
                    cluster.cluster_version = Some(typed_with_spec(&key, found)?)
                }
                Kind::GoldenConfigMap => cluster.golden = Some(typed(&key, found)?),
                Kind::KnownImagesConfigMap => {
                    let cm: ConfigMap = typed(&key, found)?;
                    cluster
                        .known_images
                        .extend(known_images::in_config_map(&cm));
                }
                Kind::Secret => {
                    let secret: Secret = typed(&key, found)?;
                    cluster.secrets.insert((key.namespace, key.name), secret);
                }
                Kind::Machine => {
                    let machine: crate::api::Machine = typed(&key, found)?;
                    cluster.boots.machines.push(Arc::new(machine));
                }
                Kind::MachineHealthCheck => {
                    let check: crate::api::MachineHealthCheck = typed(&key, found)?;
                    cluster.boots.health_checks.push(Arc::new(check));
                }
                Kind::Node => {
                    let node: Node = typed(&key, found)?;
                    note_node(cluster, key.name, &node);
                }
            }
        }
        Ok(snapshot)
    }
}

/// A Node: its readiness (evidence that a Machine booted) and, on the control plane, its
/// architecture.
fn note_node(cluster: &mut ClusterSnapshot, name: String, node: &Node) {
    cluster.boots.nodes.insert(name.clone(), is_ready(node));
    if let Some(arch) = control_plane_arch(node) {
        cluster.control_plane_nodes.insert(name, arch);
    }
}

fn str_field<'a>(object: &'a Map<String, Value>, field: &str) -> &'a str {
    object
        .get(field)
        .and_then(Value::as_str)
        .unwrap_or_default()
}

fn typed<T: DeserializeOwned>(key: &ObjectKey, found: Found) -> Result<T, ManifestError> {
    serde_json::from_value(found.object).map_err(|e| ManifestError::InvalidObject {
        path: found.source,
        object: key.to_string(),
        message: e.to_string(),
    })
}

/// The API server always returns a `spec` for these kinds, but hand-written files often leave
/// an empty one out; that must not make the whole cluster unreadable.
fn typed_with_spec<T: DeserializeOwned>(
    key: &ObjectKey,
    mut found: Found,
) -> Result<T, ManifestError> {
    if let Value::Object(object) = &mut found.object {
        object
            .entry("spec")
            .or_insert_with(|| Value::Object(Map::new()));
    }
    typed(key, found)
}

/// `object` read as the typed view of a machine resource of `kind`.
pub fn machine_object(
    kind: MachineKind,
    object: Value,
) -> serde_json::Result<Arc<dyn MachineObject>> {
    fn read<T: DeserializeOwned + MachineObject + 'static>(
        object: Value,
    ) -> serde_json::Result<Arc<dyn MachineObject>> {
        Ok(Arc::new(serde_json::from_value::<T>(object)?))
    }
    match kind {
        MachineKind::MachineSet => read::<MachineSet>(object),
        MachineKind::ControlPlaneMachineSet => read::<ControlPlaneMachineSet>(object),
        MachineKind::ClusterApiMachineSet => read::<ClusterApiMachineSet>(object),
        MachineKind::ClusterApiMachineDeployment => read::<ClusterApiMachineDeployment>(object),
    }
}

/// A machine resource of `kind`, typed or malformed.
fn machine(kind: MachineKind, key: &ObjectKey, found: Found) -> MachineResource {
    let object = machine_object(kind, found.object).map_err(|e| Malformed {
        namespace: key.namespace.clone(),
        name: key.name.clone(),
        error: format!("{} in {}: {e}", key.kind_name, found.source.display()),
    });
    MachineResource { kind, object }
}

fn parse_json(path: &Path, text: &str) -> Result<Vec<Value>, ManifestError> {
    // Concatenated values, as `oc get -o json` prints when looping over objects.
    serde_json::Deserializer::from_str(text)
        .into_iter::<Value>()
        .collect::<Result<_, _>>()
        .map_err(|source| ManifestError::Json {
            path: path.to_path_buf(),
            source,
        })
}

fn parse_yaml(path: &Path, text: &str) -> Result<Vec<Value>, ManifestError> {
    // Must-gather files can be large; the default budget is sized for configuration files
    // (serde-saphyr 2.1's `Budget::default`: 64 MiB of scalar text in all, 256 MiB read from a
    // reader), so the text may be as large as any input we read. Aliases keep their default
    // limits, which is what guards against expansion bombs.
    let input = usize::try_from(MAX_INPUT_BYTES).unwrap_or(usize::MAX);
    let options = serde_saphyr::options! {
        budget: serde_saphyr::budget! {
            max_events: 50_000_000,
            max_nodes: 20_000_000,
            max_documents: 1_000_000,
            max_total_scalar_bytes: input,
            max_reader_input_bytes: Some(input),
        },
    };
    serde_saphyr::from_multiple_with_options(text, options).map_err(|e| ManifestError::Yaml {
        path: path.to_path_buf(),
        // One line with the position: the source snippet would name `<input>`, not the file.
        message: e.without_snippet().to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::ByteString;

    const MACHINE_SET: &str = r#"
apiVersion: machine.openshift.io/v1beta1
kind: MachineSet
metadata:
  name: demo-worker-a
  namespace: openshift-machine-api
spec:
  template:
    spec:
      providerSpec:
        value:
          ami:
            id: ami-09d23adad19cdb25c
"#;

    fn load_one(text: &str) -> Snapshot {
        from_str("test.yaml", text).expect("manifests parse")
    }

    #[test]
    fn reads_every_document_of_a_multi_document_file() {
        let text = format!(
            "{MACHINE_SET}---\n{}\n---\n# only a comment\n",
            MACHINE_SET.replace("demo-worker-a", "demo-worker-b")
        );
        let snapshot = load_one(&text);
        let names: Vec<_> = (snapshot.machines.iter())
            .map(|ms| ms.readable().unwrap().meta().name.clone().unwrap())
            .collect();
        assert_eq!(names, ["demo-worker-a", "demo-worker-b"]);
    }

    #[test]
    fn flattens_lists_and_fills_in_the_kind_of_typed_list_items() {
        let text = r#"
apiVersion: v1
kind: List
items:
- apiVersion: v1
  kind: Secret
  metadata: {name: worker-user-data-managed, namespace: openshift-machine-api}
  stringData: {userData: '{"ignition":{"version":"3.2.0"}}'}
- apiVersion: machine.openshift.io/v1beta1
  kind: MachineSetList
  items:
  - metadata: {name: nested, namespace: openshift-machine-api}
    spec: {}
"#;
        let snapshot = load_one(text);
        assert_eq!(snapshot.machines.len(), 1);
        assert!(snapshot.machines[0].object.is_ok());
        let key = (
            "openshift-machine-api".to_string(),
            "worker-user-data-managed".to_string(),
        );
        assert!(snapshot.cluster.secrets.contains_key(&key));
    }

    #[test]
    fn reads_json_files_including_concatenated_values() {
        let json = r#"{"apiVersion":"config.openshift.io/v1","kind":"Infrastructure",
            "metadata":{"name":"cluster"},"spec":{},
            "status":{"infrastructureName":"demo-abc12","platformStatus":{"type":"AWS"}}}
            {"apiVersion":"v1","kind":"Secret","metadata":{"name":"s","namespace":"ns"},
             "data":{"userData":"eyJpZ25pdGlvbiI6e319"}}"#;
        let snapshot = from_str("objects.json", json).unwrap();
        let infra = snapshot.cluster.infrastructure.unwrap();
        assert_eq!(infra.status.unwrap().platform_status.unwrap().type_, "AWS");
        let secret = &snapshot.cluster.secrets[&("ns".to_string(), "s".to_string())];
        assert_eq!(
            secret.data.as_ref().unwrap()["userData"],
            ByteString(br#"{"ignition":{}}"#.to_vec())
        );
    }

    #[test]
    fn ignores_unknown_kinds_and_look_alikes() {
        let text = r#"
apiVersion: apps/v1
kind: Deployment
metadata: {name: machine-api-operator, namespace: openshift-machine-api}
---
apiVersion: machine.example.com/v1beta1
kind: MachineSet
metadata: {name: look-alike, namespace: openshift-machine-api}
spec: {}
---
apiVersion: config.openshift.io/v1
kind: Infrastructure
metadata: {name: not-the-singleton}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: coreos-bootimages, namespace: somewhere-else}
data: {stream: "{}"}
---
just a scalar
"#;
        let snapshot = load_one(text);
        assert!(snapshot.machines.is_empty());
        assert!(snapshot.cluster.infrastructure.is_none());
        assert!(snapshot.cluster.golden.is_none());
    }

    /// `plan` judges a new image's Machines with the join limit the controller uses: a
    /// MachineHealthCheck's shorter `nodeStartupTimeout` (plan::boot_evidence).
    #[test]
    fn machine_health_checks_are_read_for_the_boot_evidence() {
        let text = r#"
apiVersion: machine.openshift.io/v1beta1
kind: MachineHealthCheck
metadata: {name: workers, namespace: openshift-machine-api}
spec: {nodeStartupTimeout: 5m, selector: {matchLabels: {role: worker}}}
"#;
        let snapshot = load_one(text);
        let checks = &snapshot.cluster.boots.health_checks;
        assert_eq!(checks.len(), 1);
        assert_eq!(checks[0].spec.node_startup_timeout.as_deref(), Some("5m"));
    }

    #[test]
    fn a_cluster_api_machine_set_of_either_version_is_kept_apart_from_machine_api_ones() {
        let text = r#"
apiVersion: cluster.x-k8s.io/v1beta1
kind: MachineSet
metadata: {name: capi-beta1, namespace: openshift-cluster-api}
spec: {clusterName: demo}
---
apiVersion: cluster.x-k8s.io/v1beta2
kind: MachineSet
metadata: {name: capi-beta2, namespace: openshift-cluster-api}
spec: {clusterName: demo}
"#;
        let snapshot = load_one(text);
        let names: Vec<_> = (snapshot.machines.iter())
            .map(|m| match &m.object {
                Ok(ms) if m.kind == MachineKind::ClusterApiMachineSet => {
                    ms.meta().name.clone().unwrap_or_default()
                }
                Ok(_) => panic!("{:?}", m.kind),
                Err(malformed) => panic!("{}", malformed.error),
            })
            .collect();
        assert_eq!(names, ["capi-beta1", "capi-beta2"]);
    }

    #[test]
    fn a_machine_set_that_does_not_fit_becomes_malformed() {
        let text = r#"
apiVersion: machine.openshift.io/v1beta1
kind: MachineSet
metadata: {name: broken, namespace: openshift-machine-api}
spec:
  replicas: three
"#;
        let snapshot = load_one(text);
        let malformed = snapshot.machines[0].object.as_ref().unwrap_err();
        assert_eq!(
            (malformed.namespace.as_str(), malformed.name.as_str()),
            ("openshift-machine-api", "broken")
        );
        assert!(malformed.error.contains("test.yaml"), "{}", malformed.error);
    }

    #[test]
    fn a_syntax_error_names_the_file() {
        let err = from_str("folder/broken.yaml", "kind: [unclosed\n").unwrap_err();
        assert!(matches!(err, ManifestError::Yaml { .. }));
        assert!(err.to_string().starts_with("folder/broken.yaml: "), "{err}");
        let err = from_str("folder/broken.json", "{\"kind\": ").unwrap_err();
        assert!(err.to_string().starts_with("folder/broken.json: "), "{err}");
    }

    #[test]
    fn a_cluster_object_that_does_not_fit_is_refused_with_its_name() {
        let text = r#"
apiVersion: v1
kind: ConfigMap
metadata: {name: coreos-bootimages, namespace: openshift-machine-config-operator}
data: {releaseVersion: 4.21}
"#;
        let err = from_str("golden.yaml", text).unwrap_err().to_string();
        assert!(
            err.contains("golden.yaml")
                && err.contains("ConfigMap openshift-machine-config-operator/coreos-bootimages"),
            "{err}"
        );
    }

    #[test]
    fn known_images_config_maps_add_their_images() {
        let text = r#"
apiVersion: v1
kind: ConfigMap
metadata: {name: boot-image-controller-known-images, namespace: anywhere}
data:
  rhcos-4.20: |
    # remembered from release 4.20.0
    ami-09d23adad19cdb25c
    ami-05834415546b16278
"#;
        let known = load_one(text).cluster.known_images;
        assert!(known.contains("ami-09d23adad19cdb25c") && known.contains("ami-05834415546b16278"));
        assert_eq!(known.len(), 2);
    }

    #[test]
    fn duplicates_are_read_once_and_conflicts_are_reported() {
        let same = load_one(&format!("{MACHINE_SET}---\n{MACHINE_SET}"));
        assert_eq!(same.machines.len(), 1);
        assert!(same.warnings.is_empty());
        let changed = MACHINE_SET.replace("ami-09d23adad19cdb25c", "ami-01095d1967818437c");
        let conflict = load_one(&format!("{MACHINE_SET}---\n{changed}"));
        assert_eq!(conflict.machines.len(), 1);
        assert_eq!(conflict.warnings.len(), 1, "{:?}", conflict.warnings);
    }

    #[test]
    fn walks_folders_recursively_and_reports_missing_paths() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("a/b")).unwrap();
        std::fs::write(dir.path().join("a/b/ms.yml"), MACHINE_SET).unwrap();
        std::fs::write(dir.path().join("a/notes.txt"), "not: [yaml").unwrap();
        std::fs::write(dir.path().join(".hidden.yaml"), "not: [yaml").unwrap();
        let snapshot = load(&[dir.path()]).unwrap();
        assert_eq!(snapshot.machines.len(), 1);

        let missing = dir.path().join("nope");
        let err = load(&[&missing]).unwrap_err();
        assert!(matches!(err, ManifestError::NotFound { .. }));
        assert!(err.to_string().contains("nope"), "{err}");
    }

    #[test]
    fn yaml_beyond_the_parsers_default_budget_is_read_up_to_the_input_limit() {
        // One scalar of twice what the parser's own default allows (64 MiB of scalars). At the
        // full 512 MiB this passes too, in 75 s of a debug build: too slow to run every time.
        let size = 128 * 1024 * 1024;
        let mut text = String::with_capacity(size + 1024);
        text.push_str(MACHINE_SET);
        text.push_str(
            "---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: big\n  namespace: x\n",
        );
        text.push_str("data:\n  big: ");
        text.extend(std::iter::repeat_n('a', size - text.len()));
        text.push('\n');
        let snapshot = from_str("big.yaml", &text).expect("a file within the input limit");
        assert_eq!(snapshot.machines.len(), 1);
    }

    #[test]
    fn links_are_followed_only_within_the_folder_and_a_broken_one_is_passed_over() {
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(
            outside.path().join("other.yaml"),
            MACHINE_SET.replace("worker", "other"),
        )
        .unwrap();
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        std::fs::write(dir.path().join("sub/ms.yaml"), MACHINE_SET).unwrap();
        let link = |target: &Path, name: &str| {
            std::os::unix::fs::symlink(target, dir.path().join(name)).unwrap();
        };
        link(Path::new("/proc/self"), "host");
        link(outside.path(), "elsewhere");
        link(&outside.path().join("other.yaml"), "other.yaml");
        link(&dir.path().join("loop.yaml"), "loop.yaml");
        // Inside the folder: followed (its folder is walked once, the file read once).
        link(&dir.path().join("sub"), "same-sub");
        let snapshot = load(&[dir.path()]).unwrap();
        let names: Vec<&str> = (snapshot.machines.iter())
            .filter_map(|m| m.readable()?.meta().name.as_deref())
            .collect();
        assert_eq!(names, ["demo-worker-a"], "{:?}", snapshot.warnings);
        let warned = snapshot.warnings.join("\n");
        for name in ["host", "elsewhere", "other.yaml", "loop.yaml"] {
            assert!(
                warned.contains(&format!("/{name}: a link")),
                "{name}: {warned}"
            );
        }
        // Named on the command line, a link is followed wherever it leads.
        let named = load(&[dir.path().join("other.yaml")]).unwrap();
        assert_eq!(named.machines.len(), 1);
    }

    #[test]
    fn a_folder_is_read_for_its_regular_files_only() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("ms.yaml"), MACHINE_SET).unwrap();
        // A FIFO would block the read for ever, /dev/zero would fill memory: both carry a
        // manifest's name, neither is opened.
        let fifo = dir.path().join("pipe.yaml");
        let made = std::process::Command::new("mkfifo").arg(&fifo).status();
        assert!(made.is_ok_and(|s| s.success()), "mkfifo");
        std::os::unix::fs::symlink("/dev/zero", dir.path().join("zero.yaml")).unwrap();
        let snapshot = load(&[dir.path()]).unwrap();
        assert_eq!(snapshot.machines.len(), 1);
        // Named on the command line, they are refused rather than read.
        for name in ["pipe.yaml", "zero.yaml"] {
            let err = load(&[dir.path().join(name)]).unwrap_err();
            assert!(err.to_string().contains(name), "{err}");
        }
    }
}
