//! Properties of the planner over random clusters, through the public API only.
//!
//! 1. Every Update's patch applies to the object as the API server holds it, and planning the
//!    patched object again finds nothing left to do.
//! 2. A patch touches only the compared image fields and the stub secret name; every other byte
//!    of the object, `null`s and unknown fields included, is unchanged.
//! 3. Planning is deterministic and does not depend on the order of its input.
//! 4. No input panics the planner, arbitrary JSON as providerSpec included.

use std::collections::BTreeMap;

use base64::Engine as _;
use boot_image_controller::api::{
    ClusterVersion, ConfigMap, ControlPlaneMachineSet, Infrastructure, MachineConfiguration,
    MachineSet, Secret,
};
use boot_image_controller::arch::Arch;
use boot_image_controller::controller::lenient::Lenient;
use boot_image_controller::machine_kind::{MachineKind, MachineObject};
use boot_image_controller::names;
use boot_image_controller::plan::{
    Action, ClusterSnapshot, Decision, MachineResource, Malformed, Options, Plan, Planner, plan,
};
use boot_image_controller::reason::Reason;
use boot_image_controller::testkit::generators::*;
use boot_image_controller::testkit::provider_specs::INFRASTRUCTURE_NAME;
use boot_image_controller::testkit::streams::{
    AMI_420_ARM_US_EAST_1, AMI_420_US_EAST_1, stream_421_all_platforms,
};
use json_patch::PatchOperation;
use proptest::prelude::*;
use proptest::sample::Index;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

const CASES: u32 = 128;

const INFRA: &str = INFRASTRUCTURE_NAME;
const RELEASE: &str = "4.21.0";
const MACHINE_SET_SPEC: &str = "/spec/template/spec/providerSpec/value";
const CONTROL_PLANE_SPEC: &str =
    "/spec/template/machines_v1beta1_machine_openshift_io/spec/providerSpec/value";

// ---------------------------------------------------------------------------------------------
// Clusters.

#[derive(Clone, Debug)]
struct ClusterCase {
    platform: &'static str,
    /// `spec.managedBootImages` of the MachineConfiguration; `None` for the platform default.
    managed_boot_images: Option<Value>,
    /// userData of the worker stubs in openshift-machine-api (`worker-user-data` and its
    /// managed twin), if they exist.
    worker_managed: Option<&'static str>,
    know_previous: bool,
    multi_arch: bool,
    /// (history state, history version, paused)
    stability: (&'static str, &'static str, bool),
    control_plane_arch: Arch,
}

fn arb_cluster() -> impl Strategy<Value = ClusterCase> {
    let platform = prop_oneof![
        4 => Just("AWS"),
        3 => Just("GCP"),
        3 => Just("Azure"),
        1 => Just("VSphere"),
        1 => Just("None"),
    ];
    let partial = json!({"mode": "Partial", "partial": {"machineResourceSelector": {
        "matchLabels": {"boot-images": "managed"}
    }}});
    let managed_boot_images = prop_oneof![
        3 => Just(None),
        2 => Just(Some(json!({"machineManagers": [
            {"resource": "machinesets", "apiGroup": "machine.openshift.io", "selection": {"mode": "All"}},
            {"resource": "controlplanemachinesets", "apiGroup": "machine.openshift.io", "selection": {"mode": "All"}}
        ]}))),
        1 => Just(Some(json!({"machineManagers": [
            {"resource": "machinesets", "apiGroup": "machine.openshift.io", "selection": partial}
        ]}))),
        1 => Just(Some(json!({"machineManagers": []}))),
        1 => Just(Some(json!({"machineManagers": [
            {"resource": "machinesets", "apiGroup": "machine.openshift.io", "selection": {"mode": "Sometimes"}}
        ]}))),
    ];
    let worker_managed = prop_oneof![
        6 => Just(Some(r#"{"ignition":{"config":{"merge":[{"source":"https://api-int.example.com:22623/config/worker"}]},"version":"3.2.0"}}"#)),
        1 => Just(Some(r#"{"ignition":{"version":"2.2.0"}}"#)),
        1 => Just(None),
    ];
    let stability = prop_oneof![
        6 => Just(("Completed", RELEASE, false)),
        1 => Just(("Partial", RELEASE, false)),
        1 => Just(("Completed", "4.20.5", false)),
        1 => Just(("Completed", RELEASE, true)),
    ];
    let arch = prop_oneof![4 => Just(Arch::Amd64), 1 => Just(Arch::Arm64)];
    (
        platform,
        managed_boot_images,
        worker_managed,
        any::<bool>(),
        prop::bool::weighted(0.2),
        stability,
        arch,
    )
        .prop_map(
            |(
                platform,
                managed_boot_images,
                worker_managed,
                know_previous,
                multi_arch,
                stability,
                control_plane_arch,
            )| {
                ClusterCase {
                    platform,
                    managed_boot_images,
                    worker_managed,
                    know_previous,
                    multi_arch,
                    stability,
                    control_plane_arch,
                }
            },
        )
}

fn from_json<T: DeserializeOwned>(value: Value) -> T {
    serde_json::from_value(value).expect("generated cluster objects deserialize")
}

fn secret(namespace: &str, name: &str, user_data: &str) -> ((String, String), Secret) {
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    let secret = from_json(json!({
        "apiVersion": "v1", "kind": "Secret", "type": "Opaque",
        "metadata": {"name": name, "namespace": namespace},
        "data": {"disableTemplating": b64("true"), "userData": b64(user_data)}
    }));
    ((namespace.into(), name.into()), secret)
}

impl ClusterCase {
    fn cluster(&self) -> ClusterSnapshot {
        let (state, version, paused) = self.stability;
        let mut mc = json!({
            "apiVersion": "operator.openshift.io/v1", "kind": "MachineConfiguration",
            "metadata": {"name": "cluster"},
            "spec": {"managementState": "Managed"}
        });
        if let Some(managed) = &self.managed_boot_images {
            mc["spec"]["managedBootImages"] = managed.clone();
        }
        if paused {
            mc["metadata"]["annotations"] =
                json!({"boot-image-controller.io/boot-image-updates-paused": "true"});
        }
        let mut desired = json!({"version": version});
        if self.multi_arch {
            desired["architecture"] = json!("Multi");
        }
        let ignition_3 = r#"{"ignition":{"version":"3.4.0"}}"#;
        let mut secrets = BTreeMap::from([
            secret(
                "openshift-machine-api",
                "master-user-data-managed",
                ignition_3,
            ),
            secret("team-a", "worker-user-data-managed", ignition_3),
        ]);
        if let Some(user_data) = self.worker_managed {
            secrets.extend(
                ["worker-user-data", "worker-user-data-managed"]
                    .map(|name| secret("openshift-machine-api", name, user_data)),
            );
        }
        let mut known_images = boot_image_controller::known_images::KnownImages::default();
        if self.know_previous {
            known_images.extend([
                AMI_420_US_EAST_1.to_string(),
                AMI_420_ARM_US_EAST_1.to_string(),
            ]);
        }
        ClusterSnapshot {
            infrastructure_templates: Default::default(),
            boots: Default::default(),
            machine_configuration: Some(from_json::<MachineConfiguration>(mc)),
            infrastructure: Some(from_json::<Infrastructure>(json!({
                "apiVersion": "config.openshift.io/v1", "kind": "Infrastructure",
                "metadata": {"name": "cluster"}, "spec": {},
                "status": {"infrastructureName": INFRA, "platformStatus": {"type": self.platform}}
            }))),
            cluster_version_served: true,
            cluster_version: Some(from_json::<ClusterVersion>(json!({
                "apiVersion": "config.openshift.io/v1", "kind": "ClusterVersion",
                "metadata": {"name": "version"}, "spec": {},
                "status": {"desired": desired, "history": [{"state": state, "version": version}]}
            }))),
            golden: Some(from_json::<ConfigMap>(json!({
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "coreos-bootimages", "namespace": "openshift-machine-config-operator"},
                "data": {"stream": stream_421_all_platforms().to_string(), "releaseVersion": RELEASE}
            }))),
            secrets,
            known_images,
            // The architecture the control-plane Nodes report.
            control_plane_nodes: (0..3)
                .map(|i| {
                    let arch = self.control_plane_arch.kube_name().to_string();
                    (format!("master-{i}"), Some(arch))
                })
                .collect(),
            ec2: Default::default(),
            vcenter: Default::default(),
        }
    }

    fn options(&self) -> Options {
        Options {
            now: "2026-03-02T10:00:00Z".parse().unwrap(),
            ..Options::default()
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Machine resources.

/// One machine resource as the API server would serve it, before it gets its name.
#[derive(Clone, Debug)]
struct ResourceCase {
    control_plane: bool,
    namespace: &'static str,
    labels: BTreeMap<String, String>,
    annotations: BTreeMap<String, String>,
    owned: bool,
    windows: bool,
    /// The OS stream its template's label names, if any.
    os_stream: Option<&'static str>,
    provider_spec: Value,
}

prop_compose! {
    fn arb_resource(platform: &'static str)(
        control_plane in prop::bool::weighted(0.15),
        namespace in prop_oneof![
            4 => Just("openshift-machine-api"),
            1 => Just("team-a"),
            1 => Just("zz-workers"),
        ],
        labels in arb_labels(),
        annotations in arb_annotations(),
        owned in prop::bool::weighted(0.1),
        windows in prop::bool::weighted(0.05),
        os_stream in prop::option::weighted(0.2, prop_oneof![Just("rhel-9"), Just("rhel-10")]),
        provider_spec in arb_provider_spec(platform),
    ) -> ResourceCase {
        ResourceCase {
            control_plane,
            namespace,
            labels,
            annotations,
            owned,
            windows,
            os_stream,
            provider_spec,
        }
    }
}

impl ResourceCase {
    /// The object's JSON, named `name`.
    fn doc(&self, name: &str) -> Value {
        let mut metadata =
            json!({"name": name, "namespace": self.namespace, "resourceVersion": "1"});
        if !self.labels.is_empty() {
            metadata["labels"] = json!(self.labels);
        }
        if !self.annotations.is_empty() {
            metadata["annotations"] = json!(self.annotations);
        }
        if self.owned {
            metadata["ownerReferences"] = json!([{
                "apiVersion": "pools.example.com/v1", "kind": "WorkerPool", "name": "worker",
                "uid": "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0", "controller": true
            }]);
        }
        let mut template_labels =
            json!({"machine.openshift.io/cluster-api-machine-role": "worker"});
        if self.windows {
            template_labels["machine.openshift.io/os-id"] = json!("Windows");
        }
        if let Some(stream) = self.os_stream {
            template_labels["machineconfiguration.openshift.io/osstream"] = json!(stream);
        }
        let template = json!({
            "metadata": {"labels": template_labels},
            "spec": {"lifecycleHooks": {}, "metadata": {}, "providerSpec": {"value": self.provider_spec}}
        });
        if self.control_plane {
            json!({
                "apiVersion": "machine.openshift.io/v1", "kind": "ControlPlaneMachineSet",
                "metadata": metadata,
                "spec": {"replicas": 3, "state": "Active", "template": {
                    "machineType": "machines_v1beta1_machine_openshift_io",
                    "machines_v1beta1_machine_openshift_io": template
                }}
            })
        } else {
            json!({
                "apiVersion": "machine.openshift.io/v1beta1", "kind": "MachineSet",
                "metadata": metadata,
                "spec": {"replicas": 1, "selector": {"matchLabels": {"set": name}}, "template": template},
                "status": {"replicas": 1}
            })
        }
    }
}

/// Resources with unique names: a random prefix and the position.
fn arb_resources(platform: &'static str) -> impl Strategy<Value = Vec<(String, ResourceCase)>> {
    prop::collection::vec(("[a-z]{1,6}", arb_resource(platform)), 0..10).prop_map(|cases| {
        cases
            .into_iter()
            .enumerate()
            .map(|(i, (prefix, case))| (format!("{prefix}-{i}"), case))
            .collect()
    })
}

/// A cluster and its machine resources.
fn arb_snapshot() -> impl Strategy<Value = (ClusterCase, Vec<(String, ResourceCase)>)> {
    arb_cluster().prop_flat_map(|case| {
        let resources = arb_resources(case.platform);
        (Just(case), resources)
    })
}

// ---------------------------------------------------------------------------------------------
// Planning.

type Inputs = (
    Vec<Result<MachineSet, Malformed>>,
    Vec<Result<ControlPlaneMachineSet, Malformed>>,
);

fn read<K: DeserializeOwned>(doc: &Value) -> Result<K, Malformed> {
    serde_json::from_value(doc.clone()).map_err(|e| Malformed {
        namespace: doc["metadata"]["namespace"]
            .as_str()
            .unwrap_or_default()
            .into(),
        name: doc["metadata"]["name"].as_str().unwrap_or_default().into(),
        error: e.to_string(),
    })
}

/// The planner's list of machine resources of `inputs`.
fn machines((machine_sets, control_planes): &Inputs) -> Vec<MachineResource> {
    let kind = MachineKind::ControlPlaneMachineSet;
    (machine_sets.iter().cloned())
        .map(|ms| MachineResource::read(MachineKind::MachineSet, ms))
        .chain((control_planes.iter().cloned()).map(|cp| MachineResource::read(kind, cp)))
        .collect()
}

fn inputs(docs: &[Value]) -> Inputs {
    let is_cp = |doc: &&Value| doc["kind"] == "ControlPlaneMachineSet";
    (
        docs.iter().filter(|d| !is_cp(d)).map(read).collect(),
        docs.iter().filter(is_cp).map(read).collect(),
    )
}

/// The plan of `docs` decoded as the controller's watch decodes them, each read through its
/// stored form (`Lenient::kept`).
fn plan_stored(cluster: &ClusterSnapshot, docs: &[Value], options: &Options) -> Plan {
    fn stored<K>(doc: &Value) -> Lenient<K>
    where
        Lenient<K>: DeserializeOwned,
    {
        serde_json::from_str(&doc.to_string()).expect("the watch decodes every object")
    }
    let planner = Planner::new(cluster, options);
    let is_cp = |doc: &&Value| doc["kind"] == "ControlPlaneMachineSet";
    let machines: Vec<MachineResource> = (docs.iter())
        .map(|doc| match is_cp(&doc) {
            true => {
                stored::<ControlPlaneMachineSet>(doc).listed(MachineKind::ControlPlaneMachineSet)
            }
            false => stored::<MachineSet>(doc).listed(MachineKind::MachineSet),
        })
        .collect();
    // As the controller's pass does (`controller::decide`): the stub rule across objects.
    Plan::new(planner.blocked().cloned(), planner.decide_all(&machines))
}

fn docs(resources: &[(String, ResourceCase)]) -> Vec<Value> {
    resources
        .iter()
        .map(|(name, case)| case.doc(name))
        .collect()
}

fn run(case: &ClusterCase, docs: &[Value]) -> Plan {
    plan(&case.cluster(), &machines(&inputs(docs)), &case.options())
}

/// The entries of a plan with the provider-spec pointer of their kind and their object.
fn updates<'a>(plan: &'a Plan, docs: &'a [Value]) -> Vec<(&'a Decision, &'static str, &'a Value)> {
    let find = |entry: &Decision, kind: &str| {
        docs.iter()
            .find(|d| {
                d["kind"] == kind
                    && d["metadata"]["namespace"] == entry.namespace.as_str()
                    && d["metadata"]["name"] == entry.name.as_str()
            })
            .expect("every entry comes from an input object")
    };
    let machine_sets = plan
        .of(MachineKind::MachineSet)
        .iter()
        .map(|e| (e, MACHINE_SET_SPEC, find(e, "MachineSet")));
    let control_planes = plan
        .of(MachineKind::ControlPlaneMachineSet)
        .iter()
        .map(|e| (e, CONTROL_PLANE_SPEC, find(e, "ControlPlaneMachineSet")));
    machine_sets
        .chain(control_planes)
        .filter(|(e, _, _)| e.action == Action::Update)
        .collect()
}

fn op_path(op: &PatchOperation) -> String {
    match op {
        PatchOperation::Test(op) => op.path.to_string(),
        PatchOperation::Replace(op) => op.path.to_string(),
        other => panic!("a boot-image patch only tests and replaces: {other:?}"),
    }
}

/// The controller's own records in the same patch: the history and hot-loop annotations (and
/// the resourceVersion guard when the annotation map has to be created).
fn is_bookkeeping(op: &PatchOperation) -> bool {
    let path = serde_json::to_value(op).unwrap()["path"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    path == "/metadata/resourceVersion"
        || path == "/metadata/annotations"
        || path
            == format!(
                "/metadata/annotations/{}",
                escaped(names::HISTORY_ANNOTATION)
            )
        || path
            == format!(
                "/metadata/annotations/{}",
                escaped(names::HOT_LOOP_ANNOTATION)
            )
}

/// A key as a JSON Pointer token.
fn escaped(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

/// `doc` without the controller's bookkeeping annotations (and without an annotation map the
/// bookkeeping created).
fn without_bookkeeping(mut doc: Value, had_annotations: bool) -> Value {
    if let Some(metadata) = doc.get_mut("metadata").and_then(Value::as_object_mut) {
        if let Some(Value::Object(annotations)) = metadata.get_mut("annotations") {
            annotations.remove(names::HISTORY_ANNOTATION);
            annotations.remove(names::HOT_LOOP_ANNOTATION);
        }
        if !had_annotations {
            metadata.remove("annotations");
        }
    }
    doc
}

/// Whether a pointer relative to the provider spec names a value the rules compare or the stub
/// secret name.
fn is_managed_field(relative: &str) -> bool {
    matches!(relative, "/ami/id" | "/image" | "/userDataSecret/name")
        || relative
            .strip_prefix("/disks/")
            .and_then(|rest| rest.strip_suffix("/image"))
            .is_some_and(|i| !i.is_empty() && i.bytes().all(|b| b.is_ascii_digit()))
}

/// Removes the value at `pointer` (its parent must be an object or array element object).
fn remove(doc: &mut Value, pointer: &str) {
    let (parent, key) = pointer.rsplit_once('/').expect("a pointer below the root");
    if let Some(Value::Object(map)) = doc.pointer_mut(parent) {
        map.remove(key);
    }
}

// ---------------------------------------------------------------------------------------------
// Properties.

proptest! {
    // Failures are reported with their minimal input; no regression file is written next to
    // the test (integration tests have no lib.rs for proptest to anchor it to).
    #![proptest_config(ProptestConfig {
        cases: CASES,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    /// (1) Patches apply, and a patched object is up to date.
    #[test]
    fn applied_updates_leave_nothing_to_do((case, resources) in arb_snapshot()) {
        let docs = docs(&resources);
        let plan = run(&case, &docs);
        for (entry, _, doc) in updates(&plan, &docs) {
            let mut patched = doc.clone();
            json_patch::patch(&mut patched, &entry.patch.0)
                .map_err(|e| TestCaseError::fail(format!("{}: {e}", entry.name)))?;
            let again = run(&case, std::slice::from_ref(&patched));
            let entry_again = again.decisions.first().unwrap();
            prop_assert_eq!(
                (entry_again.action, entry_again.reason),
                (Action::UpToDate, Reason::UpToDate),
                "{} after {:?}: {}", entry.name, entry.message, entry_again.message
            );
        }
    }

    /// (2) Patches only touch the compared image fields and the stub secret name.
    #[test]
    fn patches_touch_only_image_and_secret_fields(
        (case, resources) in arb_snapshot(),
    ) {
        let docs = docs(&resources);
        let plan = run(&case, &docs);
        for (entry, base, doc) in updates(&plan, &docs) {
            let (bookkeeping, ops): (Vec<_>, Vec<_>) =
                entry.patch.0.iter().cloned().partition(is_bookkeeping);
            prop_assert!(!bookkeeping.is_empty(), "an update records itself");
            // Guards test the inputs that chose the change, and hold what the object holds.
            let replaced: Vec<String> = ops
                .iter()
                .filter(|op| matches!(op, PatchOperation::Replace(_)))
                .map(op_path)
                .collect();
            let (guards, changes): (Vec<_>, Vec<_>) = ops
                .into_iter()
                .partition(|op| !replaced.contains(&op_path(op)));
            for guard in &guards {
                let PatchOperation::Test(test) = guard else {
                    return Err(TestCaseError::fail(format!("not a test: {guard:?}")));
                };
                prop_assert_eq!(doc.pointer(&test.path.to_string()), Some(&test.value));
            }
            prop_assert!(!changes.is_empty());
            prop_assert_eq!(changes.len() % 2, 0);
            let mut changed = Vec::new();
            for pair in changes.chunks(2) {
                let (PatchOperation::Test(test), PatchOperation::Replace(replace)) =
                    (&pair[0], &pair[1])
                else {
                    return Err(TestCaseError::fail(format!("not a test/replace pair: {pair:?}")));
                };
                prop_assert_eq!(&test.path, &replace.path);
                let path = op_path(&pair[0]);
                let relative = path.strip_prefix(base).unwrap_or_default();
                prop_assert!(is_managed_field(relative), "{} patches {}", entry.name, path);
                prop_assert_eq!(doc.pointer(&path), Some(&test.value), "test of {}", path);
                prop_assert_ne!(&test.value, &replace.value);
                changed.push(path);
            }
            let mut patched = doc.clone();
            json_patch::patch(&mut patched, &entry.patch.0).unwrap();
            let had_annotations = doc.pointer("/metadata/annotations").is_some();
            let mut patched = without_bookkeeping(patched, had_annotations);
            let mut original = without_bookkeeping(doc.clone(), had_annotations);
            for path in &changed {
                remove(&mut original, path);
                remove(&mut patched, path);
            }
            prop_assert_eq!(patched, original);
        }
    }

    /// (3) The same input gives the same plan, in any order.
    #[test]
    fn planning_is_deterministic_and_order_independent(
        (case, resources) in arb_snapshot(),
        swaps in prop::collection::vec((any::<Index>(), any::<Index>()), 0..12),
    ) {
        let docs = docs(&resources);
        let first = run(&case, &docs);
        prop_assert_eq!(&first, &run(&case, &docs));
        let mut shuffled = docs.clone();
        if !shuffled.is_empty() {
            for (a, b) in swaps {
                let (a, b) = (a.index(shuffled.len()), b.index(shuffled.len()));
                shuffled.swap(a, b);
            }
        }
        prop_assert_eq!(&first, &run(&case, &shuffled));
        for entries in [first.of(MachineKind::MachineSet), first.of(MachineKind::ControlPlaneMachineSet)] {
            let sorted = entries
                .windows(2)
                .all(|w| (&w[0].namespace, &w[0].name) < (&w[1].namespace, &w[1].name));
            prop_assert!(sorted, "not sorted by namespace then name");
        }
        let inputs = inputs(&docs);
        prop_assert_eq!(first.of(MachineKind::MachineSet).len(), inputs.0.len());
        prop_assert_eq!(first.of(MachineKind::ControlPlaneMachineSet).len(), inputs.1.len());
    }

    /// (3b) The watch keeps only what the planner reads of each object; planning those slimmed
    /// objects decides exactly what planning the whole ones does, patches included.
    #[test]
    fn the_watch_keeps_everything_the_planner_reads((case, resources) in arb_snapshot()) {
        let docs = docs(&resources);
        let mut inputs = inputs(&docs);
        let whole = plan(&case.cluster(), &machines(&inputs), &case.options());
        inputs.0.iter_mut().flatten().for_each(MachineObject::keep_only_what_the_planner_reads);
        inputs.1.iter_mut().flatten().for_each(MachineObject::keep_only_what_the_planner_reads);
        let slimmed = plan(&case.cluster(), &machines(&inputs), &case.options());
        prop_assert_eq!(&whole, &slimmed);
        // And as the watch decodes them, labels and annotations kept apart, compactly.
        let stored = plan_stored(&case.cluster(), &docs, &case.options());
        prop_assert_eq!(&whole.blocked, &stored.blocked);
        prop_assert_eq!(whole.of(MachineKind::MachineSet), stored.of(MachineKind::MachineSet));
        prop_assert_eq!(whole.of(MachineKind::ControlPlaneMachineSet), stored.of(MachineKind::ControlPlaneMachineSet));
    }

    /// (4) Nothing panics, whatever the provider spec, and gates hold back every write.
    #[test]
    fn arbitrary_provider_specs_never_panic(
        (case, resources) in arb_snapshot(),
        specs in prop::collection::vec(arb_json(), 0..4),
        spec_objects in prop::collection::vec(arb_json(), 0..3),
    ) {
        let mut docs = docs(&resources);
        let base = ResourceCase {
            control_plane: false,
            namespace: "openshift-machine-api",
            labels: BTreeMap::new(),
            annotations: BTreeMap::new(),
            owned: false,
            windows: false,
            os_stream: None,
            provider_spec: Value::Null,
        };
        for (i, spec) in specs.into_iter().enumerate() {
            for control_plane in [false, true] {
                let arbitrary = ResourceCase { control_plane, provider_spec: spec.clone(), ..base.clone() };
                docs.push(arbitrary.doc(&format!("arbitrary-{i}")));
            }
        }
        // Whole specs that may not even read as a MachineSet.
        for (i, spec) in spec_objects.into_iter().enumerate() {
            let mut doc = base.doc(&format!("spec-{i}"));
            doc["spec"] = spec;
            docs.push(doc);
        }
        let plan = run(&case, &docs);
        let entries = plan.of(MachineKind::MachineSet).iter().chain(plan.of(MachineKind::ControlPlaneMachineSet));
        if plan.blocked.is_some() {
            prop_assert!(entries.clone().all(|e| e.action != Action::Update && e.patch.is_empty()));
        }
        let supported = matches!(case.platform, "AWS" | "GCP" | "Azure" | "VSphere");
        for entry in entries {
            match (entry.action, entry.reason) {
                (Action::Update, _) => prop_assert!(!entry.patch.is_empty(), "{:?}", entry),
                // Opting out resets the hot-loop guard: the only write for a skipped object.
                (_, Reason::OptedOut) => {
                    prop_assert!(entry.patch.0.iter().all(is_bookkeeping), "{:?}", entry)
                }
                _ => prop_assert!(entry.patch.is_empty(), "{:?}", entry),
            }
            // Where we never write, the only errors are about configuration and unreadable
            // objects, never about what a platform rule would have read.
            if !supported && entry.action == Action::Error {
                prop_assert!(
                    matches!(entry.reason, Reason::InvalidSelector | Reason::MalformedObject),
                    "{:?}", entry
                );
            }
            prop_assert!(!entry.reason.as_str().is_empty());
        }
    }
}

/// The properties above quantify over Update entries; this keeps them from holding vacuously:
/// the generators must reach updates on every managed platform, and the common skips and errors.
#[test]
fn generators_reach_every_kind_of_decision() {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;
    use std::collections::BTreeSet;

    let mut runner = TestRunner::deterministic();
    let strategy = arb_snapshot();
    let mut seen: BTreeSet<(&str, Action, Reason)> = BTreeSet::new();
    for _ in 0..CASES * 4 {
        let (case, resources) = strategy.new_tree(&mut runner).unwrap().current();
        let plan = run(&case, &docs(&resources));
        for entry in plan
            .of(MachineKind::MachineSet)
            .iter()
            .chain(plan.of(MachineKind::ControlPlaneMachineSet))
        {
            seen.insert((case.platform, entry.action, entry.reason));
        }
    }
    for platform in ["AWS", "GCP", "Azure"] {
        for expected in [
            (Action::Update, Reason::BootImageOutdated),
            (Action::UpToDate, Reason::UpToDate),
            (Action::Skip, Reason::CustomImage),
        ] {
            let (action, reason) = expected;
            assert!(
                seen.contains(&(platform, action, reason)),
                "{platform}: never {action:?} {reason}; seen {seen:?}"
            );
        }
    }
    for (action, reason) in [
        (Action::Skip, Reason::OptedOut),
        (Action::Skip, Reason::NotSelected),
        (Action::Skip, Reason::Owned),
        (Action::Skip, Reason::RegionNotInStream),
        (Action::Skip, Reason::Paused),
        (Action::Error, Reason::InvalidProviderSpec),
        (Action::Error, Reason::UnknownArchitecture),
        (Action::Skip, Reason::StubSecretMissing),
    ] {
        assert!(
            seen.iter().any(|(_, a, r)| (*a, *r) == (action, reason)),
            "never {action:?} {reason}"
        );
    }
}
