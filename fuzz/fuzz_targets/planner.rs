//! The planner on arbitrary snapshots: every object of the cluster is generated JSON (realistic
//! most of the time, bent or replaced by garbage some of the time). No panic, and for every
//! Update the patch the controller would send (the rule's `test`/`replace` ops plus the history
//! and hot-loop annotations) applies to the object it was planned from, after which planning
//! that object again asks for no further Update: a patch that did not converge would be sent
//! again on every resync.
#![no_main]

use std::collections::BTreeMap;

use arbitrary::{Arbitrary, Unstructured};
use boot_image_controller::api::{
    ClusterVersion, ConfigMap, ControlPlaneMachineSet, Infrastructure, MachineConfiguration,
    MachineSet, Secret,
};
use boot_image_controller::arch::Arch;
use boot_image_controller::known_images::KnownImages;
use boot_image_controller::machine_kind::MachineKind;
use boot_image_controller::names;
use boot_image_controller::plan::{
    self, Action, ClusterSnapshot as Cluster, MachineResource, Malformed, Options, Planner, history,
};
use boot_image_controller_fuzz as g;
use jiff::Timestamp;
use libfuzzer_sys::fuzz_target;
use serde_json::{Map, Value, json};

const NOW: i64 = 1_767_225_600; // 2026-01-01T00:00:00Z

fn maybe_mutate(u: &mut Unstructured<'_>, v: &mut Value, odds: u8) -> arbitrary::Result<()> {
    if g::rarely(u, odds)? {
        g::mutate(u, v, 6)?;
    }
    Ok(())
}

fn machine_configuration(
    u: &mut Unstructured<'_>,
) -> arbitrary::Result<Option<MachineConfiguration>> {
    if g::rarely(u, 10)? {
        return Ok(None);
    }
    let mut managers = Vec::new();
    for _ in 0..u.int_in_range(0..=2)? {
        let mode = g::pick(u, &["All", "Partial", "None", "Some"])?;
        let mut selection = json!({"mode": mode});
        if mode == "Partial" || g::rarely(u, 8)? {
            selection["partial"] = json!({"machineResourceSelector": {
                "matchLabels": {"boot": g::pick(u, &["yes", "no"])?}
            }});
        }
        managers.push(json!({
            "resource": g::pick(u, &["machinesets", "controlplanemachinesets"])?,
            "apiGroup": "machine.openshift.io",
            "selection": selection,
        }));
    }
    // Declared nowhere (the release's default), in the spec, or in our opt-in annotation,
    // which the planner reads first.
    let declared = json!({"machineManagers": managers});
    let mut annotations = Map::new();
    let mut spec = match u.int_in_range(0..=3)? {
        0 => json!({}),
        1 => {
            let text = if g::rarely(u, 8)? {
                u.arbitrary::<String>()?
            } else {
                declared.to_string()
            };
            annotations.insert(names::OPT_IN_ANNOTATION.into(), json!(text));
            json!({})
        }
        _ => json!({"managedBootImages": declared}),
    };
    maybe_mutate(u, &mut spec, 8)?;
    if g::rarely(u, 6)? {
        let paused = g::pick(u, &["true", "false", ""])?;
        annotations.insert(names::PAUSE_ANNOTATION.into(), json!(paused));
    }
    let object = json!({
        "apiVersion": "operator.openshift.io/v1", "kind": "MachineConfiguration",
        "metadata": {"name": "cluster", "resourceVersion": "1", "annotations": annotations},
        "spec": spec,
    });
    Ok(serde_json::from_value(object).ok())
}

fn infrastructure(
    u: &mut Unstructured<'_>,
    platform: &str,
) -> arbitrary::Result<Option<Infrastructure>> {
    if g::rarely(u, 12)? {
        return Ok(None);
    }
    let mut status = json!({
        "infrastructureName": g::INFRASTRUCTURE_NAME,
        "platformStatus": {"type": platform},
    });
    maybe_mutate(u, &mut status, 10)?;
    let object = json!({
        "apiVersion": "config.openshift.io/v1", "kind": "Infrastructure",
        "metadata": {"name": "cluster"}, "spec": {}, "status": status,
    });
    Ok(serde_json::from_value(object).ok())
}

fn cluster_version(u: &mut Unstructured<'_>) -> arbitrary::Result<Option<ClusterVersion>> {
    if g::rarely(u, 5)? {
        return Ok(None);
    }
    let version = g::pick(u, &["4.21.0", "4.21.0+build.1", "4.20.0", "4.21", ""])?;
    let mut history = Vec::new();
    for _ in 0..u.int_in_range(0..=2)? {
        history.push(json!({
            "state": g::pick(u, &["Completed", "Partial"])?,
            "version": version,
        }));
    }
    let mut status = json!({
        "desired": {"version": version, "architecture": g::pick(u, &["", "Multi", "amd64"])?},
        "history": history,
    });
    maybe_mutate(u, &mut status, 10)?;
    let object = json!({
        "apiVersion": "config.openshift.io/v1", "kind": "ClusterVersion",
        "metadata": {"name": "version"}, "spec": {}, "status": status,
    });
    Ok(serde_json::from_value(object).ok())
}

fn golden(u: &mut Unstructured<'_>) -> arbitrary::Result<Option<ConfigMap>> {
    if g::rarely(u, 12)? {
        return Ok(None);
    }
    let mut data = BTreeMap::new();
    let stream = if g::rarely(u, 12)? {
        u.arbitrary::<String>()?
    } else {
        g::stream(u)?.to_string()
    };
    if u.ratio(15, 16)? {
        data.insert("stream".to_string(), stream);
    }
    if g::rarely(u, 6)? {
        let other = g::stream(u)?;
        let streams = if u.arbitrary()? {
            json!({"rhel-coreos-10": other})
        } else {
            json!({"rhel-coreos-10": other.to_string()})
        };
        data.insert("streams".to_string(), streams.to_string());
    }
    if u.ratio(7, 8)? {
        let release = g::pick(u, &["4.21.0", "4.21.0+build.1", "4.20.0", " 4.21.0 ", ""])?;
        data.insert("releaseVersion".to_string(), release.to_string());
    }
    Ok(Some(ConfigMap {
        data: Some(data),
        ..ConfigMap::default()
    }))
}

fn secrets(
    u: &mut Unstructured<'_>,
    namespace: &str,
) -> arbitrary::Result<BTreeMap<(String, String), Secret>> {
    let mut secrets = BTreeMap::new();
    for name in g::SECRET_NAMES {
        if !u.ratio(2, 3)? {
            continue;
        }
        let user_data = match u.int_in_range(0..=5)? {
            5 => u.arbitrary::<String>()?,
            4 => json!({"ignition": {"version": "2.2.0"}}).to_string(),
            3 => json!({"ignition": {"version": g::pick(u, &["3", "3.x", "", "4.0.0"])?}})
                .to_string(),
            _ => json!({"ignition": {"version": g::pick(u, &["3.2.0", "3.4.0", "3.1.0"])?}})
                .to_string(),
        };
        let key = if u.ratio(7, 8)? { "stringData" } else { "data" };
        let object = json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": name, "namespace": namespace},
            key: {"userData": if key == "data" { json!("!!not base64") } else { json!(user_data) }},
        });
        if let Ok(secret) = serde_json::from_value::<Secret>(object) {
            secrets.insert((namespace.to_string(), name.to_string()), secret);
        }
    }
    Ok(secrets)
}

/// Metadata of a machine resource, exercising every rule that reads it.
fn metadata(u: &mut Unstructured<'_>, name: &str, namespace: &str) -> arbitrary::Result<Value> {
    let mut annotations = Map::new();
    if g::rarely(u, 8)? {
        annotations.insert(
            names::OPT_OUT_ANNOTATION.into(),
            json!(g::pick(u, &[names::OPT_OUT_VALUE, "enabled", ""])?),
        );
    }
    if u.ratio(1, 2)? {
        let arch = g::pick(u, g::KUBE_ARCHES)?;
        let text = match u.int_in_range(0..=3)? {
            0 => format!("kubernetes.io/arch={arch}"),
            1 => format!(" kubernetes.io/os=linux , kubernetes.io/arch = {arch} ,"),
            2 => "kubernetes.io/os=linux".to_string(),
            _ => u.arbitrary()?,
        };
        annotations.insert(names::AUTOSCALER_LABELS_ANNOTATION.into(), json!(text));
    }
    if u.ratio(1, 4)? {
        let history = if u.arbitrary()? {
            u.arbitrary::<String>()?
        } else {
            json!([{"time": "2025-12-31T23:00:00Z", "stream": "rhcos-4.20",
                    "bootImage": {"from": g::pick(u, g::AMIS)?, "to": g::pick(u, g::AMIS)?}}])
            .to_string()
        };
        annotations.insert(history::HISTORY_ANNOTATION.into(), json!(history));
    }
    if u.ratio(1, 4)? {
        let mut patches = Vec::new();
        for _ in 0..u.int_in_range(0..=4)? {
            let ago = u.int_in_range(0..=7200)?;
            patches.push(
                Timestamp::from_second(NOW - ago)
                    .expect("in range")
                    .to_string(),
            );
        }
        let memory = if g::rarely(u, 6)? {
            json!(u.arbitrary::<String>()?)
        } else {
            json!(json!({"patches": patches}).to_string())
        };
        annotations.insert(history::HOT_LOOP_ANNOTATION.into(), memory);
    }
    let mut labels = Map::new();
    if u.arbitrary()? {
        labels.insert("boot".into(), json!(g::pick(u, &["yes", "no"])?));
    }
    if g::rarely(u, 8)? {
        labels.insert(
            names::OS_STREAM_LABEL.into(),
            json!(g::pick(u, &["rhcos-4.21", "rhel-coreos-10"])?),
        );
    }
    let mut meta = json!({
        "name": name, "namespace": namespace, "resourceVersion": "1", "labels": labels,
    });
    if !annotations.is_empty() || u.ratio(1, 8)? {
        meta["annotations"] = Value::Object(annotations);
    }
    if g::rarely(u, 10)? {
        meta["ownerReferences"] = json!([{
            "apiVersion": "pools.example.com/v1", "kind": "WorkerPool", "name": "pool",
            "uid": "0b6f3b4e-7c1d-4c55-9d0e-3a1e5e9f2a10"
        }]);
    }
    Ok(meta)
}

fn template(u: &mut Unstructured<'_>, shape: g::Shape) -> arbitrary::Result<Value> {
    let mut labels = Map::new();
    if g::rarely(u, 10)? {
        labels.insert(
            names::OS_ID_LABEL.into(),
            json!(g::pick(u, &["Windows", "Linux"])?),
        );
    }
    if g::rarely(u, 10)? {
        labels.insert(
            names::OS_STREAM_LABEL.into(),
            json!(g::pick(u, &["rhcos-4.21", "rhel-coreos-10"])?),
        );
    }
    let provider = if g::rarely(u, 16)? {
        json!({})
    } else {
        json!({"value": g::provider_spec(u, shape)?})
    };
    Ok(json!({"metadata": {"labels": labels}, "spec": {"providerSpec": provider}}))
}

fn machine_set_json(
    u: &mut Unstructured<'_>,
    i: usize,
    shape: g::Shape,
) -> arbitrary::Result<Value> {
    let mut ms = json!({
        "apiVersion": "machine.openshift.io/v1beta1", "kind": "MachineSet",
        "metadata": metadata(u, &format!("ms-{i}"), "openshift-machine-api")?,
        "spec": {"replicas": 1, "template": template(u, shape)?},
    });
    maybe_mutate(u, &mut ms, 20)?;
    Ok(ms)
}

fn control_plane_json(
    u: &mut Unstructured<'_>,
    i: usize,
    shape: g::Shape,
) -> arbitrary::Result<Value> {
    let mut cp = json!({
        "apiVersion": "machine.openshift.io/v1", "kind": "ControlPlaneMachineSet",
        "metadata": metadata(u, &format!("cp-{i}"), "openshift-machine-api")?,
        "spec": {"template": {
            "machineType": "machines_v1beta1_machine_openshift_io",
            "machines_v1beta1_machine_openshift_io": template(u, shape)?,
        }},
    });
    maybe_mutate(u, &mut cp, 20)?;
    Ok(cp)
}

/// Control-plane Nodes with any label, an unknown one or none: the planner must never guess.
fn control_plane_nodes(
    u: &mut Unstructured<'_>,
) -> arbitrary::Result<std::collections::BTreeMap<String, Option<String>>> {
    let mut nodes = std::collections::BTreeMap::new();
    for i in 0..u.int_in_range(0..=3)? {
        let label = g::pick(u, &["amd64", "arm64", "ppc64le", "s390x", "x86_64", ""])?;
        let label = u.arbitrary::<bool>()?.then(|| label.to_string());
        nodes.insert(format!("master-{i}"), label);
    }
    Ok(nodes)
}

fn typed<K: serde::de::DeserializeOwned>(v: &Value, name: String) -> Result<K, Malformed> {
    serde_json::from_value(v.clone()).map_err(|e| Malformed {
        namespace: "openshift-machine-api".into(),
        name,
        error: e.to_string(),
    })
}

fn run(u: &mut Unstructured<'_>) -> arbitrary::Result<()> {
    let platform = g::pick(u, &["AWS", "GCP", "Azure", "VSphere", "None", ""])?;
    let shape = match (platform, u.ratio(7, 8)?) {
        ("AWS", true) => g::Shape::Aws,
        ("GCP", true) => g::Shape::Gcp,
        ("Azure", true) => g::Shape::Azure,
        _ => g::Shape::arbitrary(u)?,
    };
    let mut known_images = KnownImages::default();
    for _ in 0..u.int_in_range(0..=3)? {
        known_images.extend([g::pick(u, g::AMIS)?.to_string()]);
    }
    // Every field the generators do not draw (EC2 and vCenter facts, Cluster API templates,
    // boot evidence; new ones too) keeps its default.
    let cluster = Cluster {
        machine_configuration: machine_configuration(u)?,
        infrastructure: infrastructure(u, platform)?,
        cluster_version: cluster_version(u)?,
        cluster_version_served: u.arbitrary()?,
        golden: golden(u)?,
        secrets: secrets(u, "openshift-machine-api")?,
        known_images,
        control_plane_nodes: control_plane_nodes(u)?,
        ..Cluster::default()
    };
    let options = Options {
        control_plane_arch: if u.arbitrary()? {
            Some(*u.choose(&Arch::ALL)?)
        } else {
            None
        },
        now: Timestamp::from_second(NOW).expect("in range"),
        hot_loop_threshold: u.int_in_range(1..=4)?,
        report_only: g::rarely(u, 8)?,
        ..Options::default()
    };
    let mut machines = Vec::new();
    for i in 0..u.int_in_range(0..=5)? {
        machines.push((MachineKind::MachineSet, machine_set_json(u, i, shape)?));
    }
    for i in 0..u.int_in_range(0..=1)? {
        let doc = control_plane_json(u, i, shape)?;
        machines.push((MachineKind::ControlPlaneMachineSet, doc));
    }

    let planner = Planner::new(&cluster, &options);
    let blocked = planner.blocked().is_some();
    for (kind, doc) in &machines {
        let decide = |doc: &Value| planner.decide_all(&[resource(*kind, doc)]).remove(0);
        check(&planner, doc, &decide(doc), blocked, decide);
    }
    // The whole-plan entry point (sorting, gates, stub secrets shared by several objects) on
    // the same snapshot: one decision per object, and a plan that serializes.
    let resources: Vec<_> = (machines.iter())
        .map(|(kind, doc)| resource(*kind, doc))
        .collect();
    let whole = plan::plan(&cluster, &resources, &options);
    assert_eq!(whole.decisions.len(), machines.len());
    for kind in [MachineKind::MachineSet, MachineKind::ControlPlaneMachineSet] {
        let planned = machines.iter().filter(|(k, _)| *k == kind).count();
        assert_eq!(whole.of(kind).len(), planned, "{kind:?} decisions");
    }
    let _ = serde_json::to_string(&whole).expect("a plan serializes");
    Ok(())
}

/// `doc` as the planner receives it: typed as `kind`, or why it could not be read.
fn resource(kind: MachineKind, doc: &Value) -> MachineResource {
    let name = doc["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    match kind {
        MachineKind::ControlPlaneMachineSet => {
            MachineResource::read(kind, typed::<ControlPlaneMachineSet>(doc, name))
        }
        _ => MachineResource::read(kind, typed::<MachineSet>(doc, name)),
    }
}

fn check(
    planner: &Planner<'_>,
    doc: &Value,
    entry: &plan::Decision,
    blocked: bool,
    replan: impl Fn(&Value) -> plan::Decision,
) {
    if entry.action != Action::Update {
        return;
    }
    assert!(!blocked, "an Update while a gate blocks writes: {entry:?}");
    assert!(
        !entry.patch.is_empty(),
        "an Update without a patch: {entry:?}"
    );
    assert!(
        planner.golden().is_some(),
        "an Update implies a golden stream"
    );
    // The planned patch is complete: the history and hot-loop bookkeeping are in it.
    let ops = entry.patch.clone();
    let mut patched = doc.clone();
    if let Err(e) = json_patch::patch(&mut patched, &ops) {
        panic!(
            "the planned patch does not apply to the object it was planned from: {e}\nobject: {doc}\nops: {}",
            serde_json::to_string(&ops).unwrap()
        );
    }
    let again = replan(&patched);
    assert_ne!(
        again.action,
        Action::Update,
        "planning the patched object asks for another Update:\nfirst: {entry:?}\nagain: {again:?}\nobject: {doc}"
    );
}

fuzz_target!(|data: &[u8]| {
    let _ = run(&mut Unstructured::new(data));
});
