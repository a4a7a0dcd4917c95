//! Benchmark data shared by the planner benchmark (`benches/planner.rs`) and the cluster
//! benchmark (`benches/cluster.rs`): golden streams, MachineSet templates and synthetic
//! clusters of any size.
//!
//! Real upstream data is read in place from `../shared/fixtures` (or `$BIC_SHARED_DIR/fixtures`)
//! and never copied. Without it, the project's own fixtures in `tests/testdata/aws-cluster` are
//! used instead (AWS only), and [`Data::source`] says so.
#![allow(dead_code)]

pub mod counting;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use boot_image_controller::api::{
    ClusterVersion, ConfigMap, Infrastructure, MachineConfiguration, MachineSet, Secret,
};
use boot_image_controller::arch::Arch;
use boot_image_controller::golden_stream::GoldenStream;
use boot_image_controller::known_images::{self, KnownImages};
use boot_image_controller::machine_kind::MachineKind;
use boot_image_controller::names;
use boot_image_controller::plan::{
    self, ClusterSnapshot, MachineResource, Malformed, Options, Planner,
};
use boot_image_controller::testkit::objects::{self, golden_config_map};
use boot_image_controller::testkit::streams::CUSTOM_AMI;
use jiff::Timestamp;
use serde_json::{Value, json};

pub const REPO: &str = env!("CARGO_MANIFEST_DIR");
/// Namespace of the synthetic MachineSets in planner scenarios.
pub const MACHINE_API_NAMESPACE: &str = "openshift-machine-api";
/// Label the planner scenarios' Partial selection matches.
pub const MANAGED_LABEL: &str = "bench.boot-image-controller.io/managed";
const MACHINESET_LABEL: &str = "machine.openshift.io/cluster-api-machineset";
/// AWS regions no golden stream publishes (checked against the stream before use).
const UNPUBLISHED_REGIONS: [&str; 3] = ["us-iso-east-1", "us-isob-east-1", "eu-isoe-west-1"];

/// Where the benchmark data came from.
#[derive(Clone, Debug)]
pub enum Source {
    Shared(PathBuf),
    Own(PathBuf),
}

impl Source {
    pub fn describe(&self) -> String {
        match self {
            Source::Shared(dir) => format!("real upstream fixtures ({})", dir.display()),
            Source::Own(dir) => format!(
                "the project's own fixtures ({}; ../shared/fixtures not found)",
                dir.display()
            ),
        }
    }
}

/// Everything the benchmarks build clusters from.
pub struct Data {
    pub source: Source,
    /// The stream the cluster was installed with, and the one it is updated to.
    pub old_stream: Value,
    pub new_stream: Value,
    pub old_release: String,
    pub new_release: String,
    /// Real AWS MachineSets, metadata cleaned; the first is the template of the cluster benchmark.
    pub aws_templates: Vec<Value>,
    /// Real GCP MachineSets (shared fixtures only): a `rhcos-cloud` image and a custom one.
    pub gcp_templates: Vec<Value>,
    /// Azure marketplace overlays: the one an older install booted, and the golden one.
    pub azure_overlays: Option<(Value, Value)>,
    /// Every RHCOS AMI ever published (`--known-images-file` in production).
    pub allowed_amis: Option<PathBuf>,
}

/// The shared fixtures folder, if present.
pub fn shared_fixtures() -> Option<PathBuf> {
    let shared = std::env::var_os("BIC_SHARED_DIR")
        .filter(|s| !s.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(REPO).join("../shared"));
    let dir = shared.join("fixtures");
    dir.is_dir().then(|| dir.canonicalize().unwrap_or(dir))
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn read_json(path: &Path) -> Value {
    serde_json::from_str(&read(path)).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Every MachineSet in a manifest file (YAML or JSON, `List`s opened).
fn machine_sets_in(path: &Path) -> Vec<Value> {
    let text = read(path);
    let documents: Vec<Value> = if path.extension().is_some_and(|e| e == "json") {
        vec![serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))]
    } else {
        serde_saphyr::from_multiple(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    };
    documents
        .into_iter()
        .flat_map(|doc| match doc.get("items").and_then(Value::as_array) {
            Some(items) => items.clone(),
            None => vec![doc],
        })
        .filter(|doc| doc["kind"] == "MachineSet")
        .collect()
}

impl Data {
    pub fn load() -> Data {
        match shared_fixtures() {
            Some(dir) => Data::shared(dir),
            None => Data::own(),
        }
    }

    fn shared(dir: PathBuf) -> Data {
        let streams = dir.join("streams");
        let machinesets = dir.join("machinesets");
        let mut aws_templates = Vec::new();
        for file in [
            "aws-openshift-release-build05-worker-amd64.yaml",
            "aws-openshift-release-build01-worker-us-east-1a.yaml",
        ] {
            aws_templates.extend(machine_sets_in(&machinesets.join(file)).into_iter().take(1));
        }
        let mut gcp_templates = Vec::new();
        for file in [
            "gcp-openshift-release-build02-worker-b.yaml",
            "gcp-insights-archive-sample-worker-b.json",
        ] {
            gcp_templates.extend(machine_sets_in(&machinesets.join(file)));
        }
        Data {
            old_stream: read_json(&streams.join("rhcos-4.20-9.6.20250826-1.json")),
            new_stream: read_json(&streams.join("rhcos-4.21-9.6.20251023-0.json")),
            old_release: "4.20.0".into(),
            new_release: "4.21.0".into(),
            aws_templates: aws_templates.into_iter().map(clean).collect(),
            gcp_templates: gcp_templates.into_iter().map(clean).collect(),
            azure_overlays: Some((
                read_json(&streams.join("marketplace-rhcos-aro-419.6.20250523.json")),
                read_json(&streams.join("marketplace-rhcos-aro-9.6.20251015.json")),
            )),
            allowed_amis: Some(dir.join("aws/mco-allowed-amis.txt")).filter(|p| p.is_file()),
            source: Source::Shared(dir),
        }
    }

    /// The project's fixtures: the 4.21 golden ConfigMap (cut down to three regions), and a 4.20
    /// stream rebuilt from the 4.20 AMIs the known-images ConfigMap lists per region.
    fn own() -> Data {
        let dir = Path::new(REPO).join("tests/testdata/aws-cluster");
        let golden: Value = serde_saphyr::from_str(&read(&dir.join("coreos-bootimages.yaml")))
            .expect("coreos-bootimages.yaml");
        let new_stream: Value = serde_json::from_str(
            golden["data"]["stream"]
                .as_str()
                .expect("coreos-bootimages.yaml has data.stream"),
        )
        .expect("the stream is JSON");
        let known: Value = serde_saphyr::from_str(&read(&dir.join("known-images.yaml")))
            .expect("known-images.yaml");
        let (name, list) = known["data"]
            .as_object()
            .and_then(|d| d.iter().next())
            .expect("known-images.yaml has one data key");
        let old_stream = old_stream_from_list(&new_stream, name, list.as_str().unwrap_or_default());
        Data {
            old_stream,
            new_stream,
            old_release: "4.20.0".into(),
            new_release: golden["data"]["releaseVersion"]
                .as_str()
                .unwrap_or("4.21.0")
                .into(),
            aws_templates: machine_sets_in(&dir.join("machinesets.yaml"))
                .into_iter()
                .map(clean)
                .collect(),
            gcp_templates: Vec::new(),
            azure_overlays: None,
            allowed_amis: None,
            source: Source::Own(dir),
        }
    }

    /// x86_64 regions both streams publish, with the old and the new AMI.
    pub fn aws_common_regions(&self, arch: Arch) -> Vec<(String, String, String)> {
        let old = aws_regions(&self.old_stream, arch);
        let new = aws_regions(&self.new_stream, arch);
        old.into_iter()
            .filter_map(|(region, old_ami)| {
                let new_ami = new.get(&region)?.clone();
                Some((region, old_ami, new_ami))
            })
            .collect()
    }

    pub fn stream_name(stream: &Value) -> String {
        stream["stream"].as_str().unwrap_or_default().to_string()
    }
}

/// `ami-... # region` lines under `# x86_64` / `# aarch64` headings become that stream's AMIs;
/// regions not listed are dropped.
fn old_stream_from_list(new_stream: &Value, name: &str, list: &str) -> Value {
    let mut arch = "x86_64".to_string();
    let mut amis: BTreeMap<(String, String), String> = BTreeMap::new();
    for line in list.lines() {
        let line = line.trim();
        if let Some(heading) = line.strip_prefix('#') {
            let heading = heading.trim();
            if ["x86_64", "aarch64", "ppc64le", "s390x"].contains(&heading) {
                arch = heading.to_string();
            }
            continue;
        }
        if let Some((ami, region)) = line.split_once('#') {
            amis.insert(
                (arch.clone(), region.trim().to_string()),
                ami.trim().to_string(),
            );
        }
    }
    let mut old = new_stream.clone();
    old["stream"] = json!(name);
    if let Some(arches) = old["architectures"].as_object_mut() {
        for (arch, entry) in arches.iter_mut() {
            let Some(regions) = entry
                .pointer_mut("/images/aws/regions")
                .and_then(Value::as_object_mut)
            else {
                continue;
            };
            regions.retain(|region, _| amis.contains_key(&(arch.clone(), region.clone())));
            for (region, image) in regions.iter_mut() {
                image["image"] = json!(amis[&(arch.clone(), region.clone())]);
            }
        }
    }
    old
}

pub fn aws_regions(stream: &Value, arch: Arch) -> BTreeMap<String, String> {
    stream
        .pointer(&format!(
            "/architectures/{}/images/aws/regions",
            arch.stream_key()
        ))
        .and_then(Value::as_object)
        .map(|regions| {
            regions
                .iter()
                .filter_map(|(r, v)| Some((r.clone(), v["image"].as_str()?.to_string())))
                .collect()
        })
        .unwrap_or_default()
}

pub fn gcp_image(stream: &Value, arch: Arch) -> Option<String> {
    let gcp = stream.pointer(&format!("/architectures/{}/images/gcp", arch.stream_key()))?;
    Some(format!(
        "projects/{}/global/images/{}",
        gcp["project"].as_str()?,
        gcp["name"].as_str()?
    ))
}

/// The stream with an installer marketplace overlay merged in, as the golden ConfigMap of an
/// Azure cluster carries it (`rhel-coreos-extensions.marketplace`).
pub fn with_marketplace(stream: &Value, overlay: &Value) -> Value {
    let mut merged = stream.clone();
    if let Some(per_arch) = overlay.as_object() {
        for (arch, platforms) in per_arch {
            merged["architectures"][arch]["rhel-coreos-extensions"]["marketplace"] =
                platforms.clone();
        }
    }
    merged
}

/// A MachineSet as a template: server-set metadata and status removed.
fn clean(mut ms: Value) -> Value {
    if let Some(meta) = ms["metadata"].as_object_mut() {
        meta.retain(|k, _| matches!(k.as_str(), "name" | "namespace" | "labels" | "annotations"));
    }
    if let Some(obj) = ms.as_object_mut() {
        obj.remove("status");
    }
    ms
}

/// A copy of a template named `name` in `namespace`, its selector and template labels following.
pub fn instantiate(template: &Value, namespace: &str, name: &str) -> Value {
    let mut ms = template.clone();
    ms["metadata"]["name"] = json!(name);
    ms["metadata"]["namespace"] = json!(namespace);
    for pointer in [
        "/spec/selector/matchLabels",
        "/spec/template/metadata/labels",
    ] {
        if let Some(labels) = ms.pointer_mut(pointer).and_then(Value::as_object_mut) {
            labels.insert(MACHINESET_LABEL.into(), json!(name));
        }
    }
    ms
}

pub fn provider(ms: &mut Value) -> &mut Value {
    &mut ms["spec"]["template"]["spec"]["providerSpec"]["value"]
}

pub fn annotate(ms: &mut Value, key: &str, value: &str) {
    ms["metadata"]["annotations"][key] = json!(value);
}

pub fn label(ms: &mut Value, key: &str, value: &str) {
    ms["metadata"]["labels"][key] = json!(value);
}

fn set_arch(ms: &mut Value, arch: Arch) {
    annotate(
        ms,
        names::AUTOSCALER_LABELS_ANNOTATION,
        &format!(
            "kubernetes.io/arch={}, kubernetes.io/os=linux",
            arch.kube_name()
        ),
    );
}

/// Controlled by another controller (an in-house operator's pool), which would revert us.
fn owned_by_another_controller(ms: &mut Value) {
    ms["metadata"]["ownerReferences"] = json!([{
        "apiVersion": "pools.example.com/v1", "kind": "WorkerPool", "name": "bench-gpu",
        "uid": "0b6f3b4e-7c1d-4c55-9d0e-3a1e5e9f2a10", "controller": true
    }]);
}

fn windows(ms: &mut Value) {
    ms["spec"]["template"]["metadata"]["labels"][names::OS_ID_LABEL] = json!("Windows");
}

// ---------------------------------------------------------------------------------------------
// Cluster-wide objects, as JSON (applied to an API server) or typed (given to the planner).

pub fn infrastructure(name: &str, platform: &str, infra: &str) -> Value {
    let mut infrastructure = objects::infrastructure(name, platform);
    infrastructure["status"]["infrastructureName"] = json!(infra);
    infrastructure
}

/// A ClusterVersion whose last update to `release` has completed.
pub fn cluster_version(name: &str, release: &str) -> Value {
    objects::cluster_version(name, release, "Completed")
}

/// `selector`: `None` for the platform default (All), else a Partial `matchLabels`.
pub fn machine_configuration(name: &str, selector: Option<(&str, &str)>) -> Value {
    let managed = selector.map(|(key, value)| {
        objects::selection("Partial", Some(json!({"matchLabels": {key: value}})))
    });
    objects::machine_configuration(name, managed)
}

pub use boot_image_controller::testkit::objects::stub_secret;

fn typed<T: serde::de::DeserializeOwned>(value: Value) -> T {
    serde_json::from_value(value).expect("benchmark objects fit their types")
}

// ---------------------------------------------------------------------------------------------
// Planner scenarios: one platform, a mix of every kind of MachineSet.

pub const PLATFORMS: [&str; 3] = ["AWS", "GCP", "Azure"];

pub struct Scenario {
    pub platform: &'static str,
    pub cluster: ClusterSnapshot,
    pub machine_sets: Vec<Result<MachineSet, Malformed>>,
    pub options: Options,
    /// What the golden ConfigMap and known images are.
    pub description: String,
}

/// One MachineSet of a scenario: its JSON, and whether we already updated it (then it is
/// planned and patched once while building, so it carries our real history annotations).
struct Built {
    value: Value,
    updated_by_us: bool,
}

impl Built {
    fn new(value: Value) -> Self {
        Built {
            value,
            updated_by_us: false,
        }
    }

    fn updated(value: Value) -> Self {
        Built {
            value,
            updated_by_us: true,
        }
    }
}

impl Scenario {
    /// The scenario's MachineSets as the planner's list of machine resources.
    pub fn machines(&self) -> Vec<MachineResource> {
        let kind = MachineKind::MachineSet;
        (self.machine_sets.iter().cloned())
            .map(|ms| MachineResource::read(kind, ms))
            .collect()
    }

    /// The same cluster after `earlier` upgrades: every MachineSet that has no history of ours
    /// gets one of `earlier` changes, each shaped as an AWS update records it. Every decision
    /// then reads the newest entry of its MachineSet, and every update writes the older ones
    /// back (up to the history's limit).
    pub fn with_history(mut self, earlier: usize) -> Scenario {
        if earlier == 0 {
            return self;
        }
        let entries: Vec<Value> = (0..earlier)
            .map(|i| {
                json!({
                    "time": format!("2025-0{}-01T00:00:00.123456Z", 1 + i % 9),
                    "release": format!("4.{}.0", 15 + i),
                    "stream": format!("rhcos-4.{}", 15 + i),
                    "bootImage": {"from": format!("ami-0{i:016x}"), "to": format!("ami-1{i:016x}")},
                    "userDataSecret": {"from": "worker-user-data", "to": "worker-user-data-managed"},
                })
            })
            .collect();
        let text = Value::Array(entries).to_string();
        for ms in self.machine_sets.iter_mut().flatten() {
            let annotations = ms.metadata.annotations.get_or_insert_default();
            annotations
                .entry(names::HISTORY_ANNOTATION.to_string())
                .or_insert_with(|| text.clone());
        }
        self
    }
}

/// The mix repeats every 20 MachineSets; see each platform's function for its members.
const PERIOD: usize = 20;

/// A synthetic cluster of `count` MachineSets on `platform`, or `None` when the data for that
/// platform is not available (GCP and Azure need the shared fixtures).
pub fn scenario(data: &Data, platform: &str, count: usize) -> Option<Scenario> {
    let now = Timestamp::now();
    let options = Options {
        now,
        ..Options::default()
    };
    let infra = "bench-x7k2p";
    let (platform, golden_stream, known, description) = match platform {
        "AWS" => {
            let mut known = KnownImages::default();
            known.extend(stream_refs(&data.old_stream));
            let mut description = format!(
                "golden {} + known images of {}",
                Data::stream_name(&data.new_stream),
                Data::stream_name(&data.old_stream)
            );
            if let Some(list) = &data.allowed_amis {
                let allowed = known_images::read(list).expect("allowed AMIs");
                description.push_str(&format!(
                    " + {} AMIs of --known-images-file {}",
                    allowed.len(),
                    list.file_name().unwrap_or_default().to_string_lossy()
                ));
                known.extend(allowed.iter().cloned());
            }
            ("AWS", data.new_stream.clone(), known, description)
        }
        "GCP" if !data.gcp_templates.is_empty() => {
            let mut known = KnownImages::default();
            known.extend(stream_refs(&data.old_stream));
            let description = format!(
                "golden {} + known images of {}",
                Data::stream_name(&data.new_stream),
                Data::stream_name(&data.old_stream)
            );
            ("GCP", data.new_stream.clone(), known, description)
        }
        "Azure" => {
            let (_, new_overlay) = data.azure_overlays.as_ref()?;
            let description = format!(
                "golden {} with the ARO marketplace overlay",
                Data::stream_name(&data.new_stream)
            );
            (
                "Azure",
                with_marketplace(&data.new_stream, new_overlay),
                KnownImages::default(),
                description,
            )
        }
        _ => return None,
    };
    let cluster = ClusterSnapshot {
        infrastructure_templates: Default::default(),
        boots: Default::default(),
        machine_configuration: Some(typed::<MachineConfiguration>(machine_configuration(
            "cluster",
            Some((MANAGED_LABEL, "true")),
        ))),
        infrastructure: Some(typed::<Infrastructure>(infrastructure(
            "cluster", platform, infra,
        ))),
        cluster_version_served: true,
        cluster_version: Some(typed::<ClusterVersion>(cluster_version(
            "version",
            &data.new_release,
        ))),
        golden: Some(typed::<ConfigMap>(golden_config_map(
            "openshift-machine-config-operator",
            &data.new_release,
            &golden_stream.to_string(),
        ))),
        // The stubs the MachineSets name, which keep their names (spec 3: images may move).
        secrets: [
            "worker-user-data",
            "worker-user-data-managed",
            "worker-user-data-ignv3-managed",
        ]
        .into_iter()
        .map(|name| {
            (
                (MACHINE_API_NAMESPACE.to_string(), name.to_string()),
                typed::<Secret>(stub_secret(MACHINE_API_NAMESPACE, name, "3.2.0")),
            )
        })
        .collect(),
        known_images: known,
        control_plane_nodes: (0..3)
            .map(|i| (format!("master-{i}"), Some("amd64".to_string())))
            .collect(),
        ec2: Default::default(),
        vcenter: Default::default(),
    };
    let regions = (
        data.aws_common_regions(Arch::Amd64),
        data.aws_common_regions(Arch::Arm64),
    );
    let built: Vec<Built> = (0..count)
        .map(|i| match platform {
            "AWS" => aws_member(data, &regions, i),
            "GCP" => gcp_member(data, i),
            _ => azure_member(data, infra, i),
        })
        .collect();
    // MachineSets we updated before: plan and patch them once, as the controller did.
    let planner = Planner::new(&cluster, &options);
    let values: Vec<Value> = built
        .into_iter()
        .map(|b| {
            let mut value = b.value;
            if b.updated_by_us {
                let ms: MachineSet = typed(value.clone());
                let entry = planner.decide_object(&ms);
                assert_eq!(
                    entry.action,
                    plan::Action::Update,
                    "{}: {}",
                    entry.name,
                    entry.message
                );
                // The planned patch is complete: history and hot-loop memory included.
                json_patch::patch(&mut value, &entry.patch.0).expect("our patch applies");
            }
            value
        })
        .collect();
    drop(planner);
    let machine_sets = values.into_iter().map(|v| Ok(typed(v))).collect();
    Some(Scenario {
        platform: match platform {
            "AWS" => "AWS",
            "GCP" => "GCP",
            _ => "Azure",
        },
        cluster,
        machine_sets,
        options,
        description,
    })
}

fn stream_refs(stream: &Value) -> Vec<String> {
    GoldenStream::parse(&stream.to_string())
        .map(|s| s.image_references().into_iter().collect())
        .unwrap_or_default()
}

fn name(platform: &str, what: &str, i: usize) -> String {
    format!("bench-{platform}-{what}-{i:05}")
}

/// A selected MachineSet from `template`.
fn selected(template: &Value, name: &str) -> Value {
    let mut ms = instantiate(template, MACHINE_API_NAMESPACE, name);
    label(&mut ms, MANAGED_LABEL, "true");
    ms
}

/// AWS: 40% outdated x86_64, 15% updated by us earlier, one stub-only update, one arm64 update,
/// then one each of: custom AMI, opted out, owned, not selected, region not published, the real
/// MachineSets as they are, Windows or missing managed stub secret, AMI by filters or an arm64
/// MachineSet we updated.
type Regions = Vec<(String, String, String)>;

fn aws_member(data: &Data, (x86, arm): &(Regions, Regions), i: usize) -> Built {
    let template = &data.aws_templates[0];
    let (region, old_ami, new_ami) = &x86[i % x86.len()];
    let block = i / PERIOD;
    let slot = i % PERIOD;
    let outdated = |what: &str| {
        let mut ms = selected(template, &name("aws", what, i));
        let p = provider(&mut ms);
        p["ami"] = json!({"id": old_ami});
        p["placement"] = json!({"availabilityZone": format!("{region}a"), "region": region});
        p["userDataSecret"] = json!({"name": "worker-user-data"});
        ms
    };
    let arm64 = |what: &str| {
        let (region, old_ami, _) = &arm[i % arm.len()];
        let mut ms = outdated(what);
        set_arch(&mut ms, Arch::Arm64);
        let p = provider(&mut ms);
        p["ami"] = json!({"id": old_ami});
        p["placement"] = json!({"availabilityZone": format!("{region}a"), "region": region});
        ms
    };
    if let Some(common) = common_member(slot, block, outdated) {
        return common;
    }
    match slot {
        0..=6 => Built::new(outdated("outdated")),
        7..=9 => Built::updated(outdated("current")),
        10 => {
            let mut ms = outdated("stub");
            provider(&mut ms)["ami"] = json!({"id": new_ami});
            Built::new(ms)
        }
        11 => Built::new(arm64("arm64")),
        12 => {
            let mut ms = outdated("custom");
            provider(&mut ms)["ami"] = json!({"id": CUSTOM_AMI});
            Built::new(ms)
        }
        16 => {
            let published = aws_regions(&data.new_stream, Arch::Amd64);
            let region = UNPUBLISHED_REGIONS
                .iter()
                .find(|r| !published.contains_key(**r))
                .expect("an unpublished region");
            let mut ms = outdated("region");
            provider(&mut ms)["placement"] =
                json!({"availabilityZone": format!("{region}a"), "region": region});
            Built::new(ms)
        }
        17 => {
            let real = &data.aws_templates[block % data.aws_templates.len()];
            Built::new(selected(real, &name("aws", "real", i)))
        }
        _ if block.is_multiple_of(2) => {
            let mut ms = outdated("filters");
            provider(&mut ms)["ami"] =
                json!({"filters": [{"name": "tag:Name", "values": ["rhcos-*"]}]});
            Built::new(ms)
        }
        _ => Built::updated(arm64("arm64current")),
    }
}

/// The members every platform has at the same slots of a period: opted out, owned by another
/// controller, not selected and, at slot 18, Windows in even blocks or a missing managed stub in
/// odd ones.
fn common_member(slot: usize, block: usize, outdated: impl Fn(&str) -> Value) -> Option<Built> {
    let (what, change): (&str, fn(&mut Value)) = match slot {
        13 => ("optout", |ms| {
            annotate(ms, names::OPT_OUT_ANNOTATION, names::OPT_OUT_VALUE)
        }),
        14 => ("owned", owned_by_another_controller),
        15 => ("unselected", |ms| {
            if let Some(labels) = ms["metadata"]["labels"].as_object_mut() {
                labels.remove(MANAGED_LABEL);
            }
        }),
        18 if block.is_multiple_of(2) => ("windows", windows),
        18 => ("nostub", |ms| {
            provider(ms)["userDataSecret"] = json!({"name": "infra-user-data"})
        }),
        _ => return None,
    };
    let mut ms = outdated(what);
    change(&mut ms);
    Some(Built::new(ms))
}

/// GCP: 35% outdated, 15% updated by us earlier, then one each of: the real `rhcos-cloud`
/// MachineSet as it is, arm64 outdated, the real custom-image MachineSet, opted out, owned, not
/// selected, boot disk plus data disk, stub only, Windows or missing managed stub secret, and an
/// image of another project.
fn gcp_member(data: &Data, i: usize) -> Built {
    let template = &data.gcp_templates[0];
    let old_x86 = gcp_image(&data.old_stream, Arch::Amd64).expect("old GCP image");
    let new_x86 = gcp_image(&data.new_stream, Arch::Amd64).expect("new GCP image");
    let old_arm = gcp_image(&data.old_stream, Arch::Arm64).expect("old GCP arm64 image");
    let block = i / PERIOD;
    let outdated = |what: &str| {
        let mut ms = selected(template, &name("gcp", what, i));
        let p = provider(&mut ms);
        p["disks"][0]["image"] = json!(old_x86);
        p["userDataSecret"] = json!({"name": "worker-user-data"});
        ms
    };
    if let Some(common) = common_member(i % PERIOD, block, outdated) {
        return common;
    }
    match i % PERIOD {
        0..=6 => Built::new(outdated("outdated")),
        7..=9 => Built::updated(outdated("current")),
        10 => Built::new(selected(template, &name("gcp", "real", i))),
        11 => {
            let mut ms = outdated("arm64");
            set_arch(&mut ms, Arch::Arm64);
            provider(&mut ms)["disks"][0]["image"] = json!(old_arm);
            Built::new(ms)
        }
        12 => {
            let custom = data.gcp_templates.get(1).unwrap_or(template);
            Built::new(selected(custom, &name("gcp", "custom", i)))
        }
        16 => {
            let mut ms = outdated("datadisk");
            let disks = provider(&mut ms)["disks"].as_array_mut().expect("disks");
            disks.push(json!({"autoDelete": true, "boot": false, "image": "projects/bench/global/images/scratch-disk", "sizeGb": 500, "type": "pd-ssd"}));
            Built::new(ms)
        }
        17 => {
            let mut ms = outdated("stub");
            provider(&mut ms)["disks"][0]["image"] = json!(new_x86);
            Built::new(ms)
        }
        _ => {
            let mut ms = outdated("otherproject");
            provider(&mut ms)["disks"][0]["image"] =
                json!("projects/centos-cloud/global/images/centos-stream-9-v20251014");
            Built::new(ms)
        }
    }
}

/// An Azure MachineSet in the shape the installer writes (4.19+: marketplace image, no plan).
fn azure_template(infra: &str, image: Value) -> Value {
    json!({
        "apiVersion": "machine.openshift.io/v1beta1", "kind": "MachineSet",
        "metadata": {"name": "template", "namespace": MACHINE_API_NAMESPACE,
                     "labels": {"machine.openshift.io/cluster-api-cluster": infra}},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"machine.openshift.io/cluster-api-cluster": infra, MACHINESET_LABEL: "template"}},
            "template": {
                "metadata": {"labels": {
                    "machine.openshift.io/cluster-api-cluster": infra,
                    "machine.openshift.io/cluster-api-machine-role": "worker",
                    "machine.openshift.io/cluster-api-machine-type": "worker",
                    MACHINESET_LABEL: "template"
                }},
                "spec": {"lifecycleHooks": {}, "metadata": {}, "providerSpec": {"value": {
                    "apiVersion": "machine.openshift.io/v1beta1", "kind": "AzureMachineProviderSpec",
                    "acceleratedNetworking": true,
                    "credentialsSecret": {"name": "azure-cloud-credentials", "namespace": MACHINE_API_NAMESPACE},
                    "diagnostics": {},
                    "image": image,
                    "location": "eastus",
                    "metadata": {"creationTimestamp": null},
                    "networkResourceGroup": format!("{infra}-rg"),
                    "osDisk": {"diskSettings": {}, "diskSizeGB": 128, "managedDisk": {"securityProfile": {"diskEncryptionSet": {}}, "storageAccountType": "Premium_LRS"}, "osType": "Linux"},
                    "publicIP": false,
                    "publicLoadBalancer": infra,
                    "resourceGroup": format!("{infra}-rg"),
                    "subnet": format!("{infra}-worker-subnet"),
                    "userDataSecret": {"name": "worker-user-data"},
                    "vmSize": "Standard_D4s_v3",
                    "vnet": format!("{infra}-vnet"),
                    "zone": "1"
                }}}
            }
        }
    })
}

fn marketplace_image(overlay: &Value, arch: &str, variant: &str, generation: &str) -> Value {
    let image = &overlay[arch]["azure"][variant][generation];
    json!({
        "offer": image["offer"], "publisher": image["publisher"], "resourceID": "",
        "sku": image["sku"], "version": image["version"], "type": "MarketplaceNoPlan",
    })
}

/// Azure: 35% on the previous ARO image (Gen2), 15% updated by us earlier, then one each of:
/// Gen1, arm64, an installer upload to migrate, opted out, owned, not selected, a custom
/// marketplace image, trusted launch, Windows or missing managed stub secret, and a paid offer.
fn azure_member(data: &Data, infra: &str, i: usize) -> Built {
    let (old_overlay, _) = data.azure_overlays.as_ref().expect("overlays");
    let block = i / PERIOD;
    let gen2 = marketplace_image(old_overlay, "x86_64", "no-purchase-plan", "hyperVGen2");
    let template = azure_template(infra, gen2);
    let outdated = |what: &str| selected(&template, &name("azure", what, i));
    if let Some(common) = common_member(i % PERIOD, block, outdated) {
        return common;
    }
    match i % PERIOD {
        0..=6 => Built::new(outdated("outdated")),
        7..=9 => Built::updated(outdated("current")),
        10 => {
            let mut ms = outdated("gen1");
            provider(&mut ms)["image"] =
                marketplace_image(old_overlay, "x86_64", "no-purchase-plan", "hyperVGen1");
            Built::new(ms)
        }
        11 => {
            let mut ms = outdated("arm64");
            set_arch(&mut ms, Arch::Arm64);
            provider(&mut ms)["image"] =
                marketplace_image(old_overlay, "aarch64", "no-purchase-plan", "hyperVGen2");
            provider(&mut ms)["vmSize"] = json!("Standard_D4ps_v5");
            Built::new(ms)
        }
        12 => {
            let mut ms = outdated("upload");
            let gallery = infra.replace('-', "_");
            provider(&mut ms)["image"] = json!({
                "offer": "", "publisher": "", "sku": "", "version": "", "type": "",
                "resourceID": format!("/resourceGroups/{infra}-rg/providers/Microsoft.Compute/galleries/gallery_{gallery}/images/{infra}-gen2/versions/latest"),
            });
            Built::new(ms)
        }
        16 => {
            let mut ms = outdated("custom");
            provider(&mut ms)["image"] = json!({"offer": "hardened-rhcos", "publisher": "example-corp", "resourceID": "", "sku": "gen2", "version": "1.2.3", "type": "MarketplaceWithPlan"});
            Built::new(ms)
        }
        17 => {
            let mut ms = outdated("trustedlaunch");
            provider(&mut ms)["securityProfile"] = json!({"settings": {"securityType": "TrustedLaunch", "trustedLaunch": {"uefiSettings": {"secureBoot": "Enabled", "virtualizedTrustedPlatformModule": "Enabled"}}}});
            Built::new(ms)
        }
        _ => {
            let mut ms = outdated("paid");
            provider(&mut ms)["image"] =
                marketplace_image(old_overlay, "x86_64", "ocp", "hyperVGen2");
            provider(&mut ms)["image"]["type"] = json!("MarketplaceWithPlan");
            Built::new(ms)
        }
    }
}
