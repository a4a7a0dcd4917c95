//! The platform rules against real upstream data: published streams, the installer's Azure
//! marketplace overlay, MachineSets of real clusters and every AMI ever published.
//!
//! The data is read in place from `../shared/fixtures` (or `$BIC_SHARED_DIR/fixtures`) and never
//! copied into the project; without it every test says it was skipped and passes, so a fresh
//! clone still builds and tests green.

use std::path::{Path, PathBuf};

use boot_image_controller::arch::Arch;
use boot_image_controller::golden_stream::GoldenStream;
use boot_image_controller::known_images::{self, KnownImages};
use boot_image_controller::platform::{Changes, ImageOutcome, Platform, RuleContext};
use boot_image_controller::reason::Reason;
use boot_image_controller::testkit::streams::{AMI_421_US_EAST_1, AMI_421_US_EAST_2};
use serde_json::{Value, json};

const STREAM_4_16: &str = "rhcos-4.16-416.94.202405291527-0.json";
const STREAM_4_20: &str = "rhcos-4.20-9.6.20250826-1.json";
const STREAM_4_21: &str = "rhcos-4.21-9.6.20251023-0.json";
const STREAM_RHEL_9: &str = "coreos-rhel-9-9.8.20260403-0.json";
const STREAM_RHEL_10: &str = "coreos-rhel-10-10.2.20260405-0.json";
/// The ARO marketplace overlay the installer merges into the 4.21 golden stream.
const OVERLAY_4_21: &str = "marketplace-rhcos-aro-9.6.20251015.json";
/// The overlay of 4.19, whose images a cluster installed with 4.19 boots.
const OVERLAY_4_19: &str = "marketplace-rhcos-aro-419.6.20250523.json";

const GCP_IMAGE_4_21: &str = "projects/rhcos-cloud/global/images/rhcos-9-6-20251023-0-gcp-x86-64";

/// The shared fixtures folder, or `None` after saying that the calling test is skipped.
fn fixtures() -> Option<PathBuf> {
    boot_image_controller::testkit::skips::shared_dir().map(|dir| dir.join("fixtures"))
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn stream(fixtures: &Path, name: &str) -> GoldenStream {
    let path = fixtures.join("streams").join(name);
    GoldenStream::parse(&read(&path)).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The 4.21 golden stream as the installer renders it for Azure: with the marketplace overlay.
/// The overlay (`marketplace-rhcos.json`: arch -> `azure` -> variant -> generation -> image)
/// goes into each architecture's `rhel-coreos-extensions.marketplace`, as the installer merges
/// it when it renders the golden ConfigMap.
fn stream_4_21_with_marketplace(fixtures: &Path) -> GoldenStream {
    let json = |name| -> Value {
        serde_json::from_str(&read(&fixtures.join("streams").join(name))).unwrap()
    };
    let mut stream = json(STREAM_4_21);
    let overlay = json(OVERLAY_4_21);
    for (arch, platforms) in overlay.as_object().unwrap() {
        let extensions = &mut stream["architectures"][arch]["rhel-coreos-extensions"];
        let azure = &mut extensions["marketplace"]["azure"];
        if azure.is_null() {
            *azure = Value::Object(Default::default());
        }
        let variants = platforms["azure"].as_object().unwrap().clone();
        azure.as_object_mut().unwrap().extend(variants);
    }
    GoldenStream::parse(&stream.to_string()).unwrap()
}

/// Known images as the planner builds them: the given list plus the golden stream's own images.
fn known_images(golden: &GoldenStream, list: Option<&Path>) -> KnownImages {
    let mut known = list.map_or_else(KnownImages::default, |path| {
        known_images::read(path).unwrap()
    });
    known.extend(golden.image_references());
    known
}

/// Every MachineSet in a manifest file: YAML or JSON, one or several documents, `List`s opened.
fn machine_sets(path: &Path) -> Vec<Value> {
    let text = read(path);
    let documents: Vec<Value> = if path.extension().is_some_and(|e| e == "json") {
        vec![serde_json::from_str(&text).unwrap()]
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

fn provider_spec(machine_set: &Value) -> &Value {
    machine_set
        .pointer("/spec/template/spec/providerSpec/value")
        .expect("MachineSet has a providerSpec value")
}

fn evaluate(
    platform: Platform,
    spec: &Value,
    golden: &GoldenStream,
    known: &KnownImages,
    infrastructure_name: Option<&str>,
) -> ImageOutcome {
    // No capacity annotation on these MachineSets: they follow the x86_64 control plane.
    evaluate_on(
        Arch::Amd64,
        platform,
        spec,
        golden,
        known,
        infrastructure_name,
    )
}

fn evaluate_on(
    arch: Arch,
    platform: Platform,
    spec: &Value,
    golden: &GoldenStream,
    known: &KnownImages,
    infrastructure_name: Option<&str>,
) -> ImageOutcome {
    let ctx = RuleContext {
        stream: golden,
        arch,
        known_images: known,
        infrastructure_name,
        // EC2 not consulted: the rules as they judge from the lists alone.
        ec2: &Default::default(),
        platform_spec: None,
        vcenter: &Default::default(),
    };
    platform
        .rule()
        .expect("platform has a rule")
        .evaluate(spec, &ctx)
        .0
}

fn skip_reason(outcome: &ImageOutcome) -> Option<Reason> {
    match outcome {
        ImageOutcome::Skip { reason, .. } => Some(*reason),
        _ => None,
    }
}

fn update_target(outcome: &ImageOutcome) -> &Value {
    match outcome {
        ImageOutcome::Update { target, .. } => target,
        other => panic!("expected an update, got {other:?}"),
    }
}

#[test]
fn every_published_stream_parses() {
    let Some(fixtures) = fixtures() else { return };
    for name in [
        STREAM_4_16,
        STREAM_4_20,
        STREAM_4_21,
        STREAM_RHEL_9,
        STREAM_RHEL_10,
    ] {
        let golden = stream(&fixtures, name);
        assert!(golden.has_arch(Arch::Amd64), "{name}");
        assert!(
            golden.aws_image(Arch::Amd64, "us-east-1").is_some(),
            "{name}"
        );
        assert!(golden.gcp_image(Arch::Amd64).is_some(), "{name}");
    }
    let ami = |name, region| {
        stream(&fixtures, name)
            .aws_image(Arch::Amd64, region)
            .map(|image| image.image.clone())
    };
    assert_eq!(
        ami(STREAM_4_21, "us-east-1").as_deref(),
        Some(AMI_421_US_EAST_1)
    );
    assert_eq!(
        ami(STREAM_4_21, "us-east-2").as_deref(),
        Some(AMI_421_US_EAST_2)
    );
    assert_eq!(
        ami(STREAM_4_20, "us-east-1").as_deref(),
        Some("ami-09d23adad19cdb25c")
    );
}

#[test]
fn build01_aws_machine_set_moves_to_the_4_21_ami_when_its_ami_is_known() {
    let Some(fixtures) = fixtures() else { return };
    let golden = stream(&fixtures, STREAM_4_21);
    let [machine_set] = &machine_sets(
        &fixtures.join("machinesets/aws-openshift-release-build01-worker-us-east-1a.yaml"),
    )[..] else {
        panic!("expected one MachineSet");
    };
    let spec = provider_spec(machine_set);
    let original = "ami-06f85a7940faa3217";
    assert_eq!(spec["ami"]["id"], original);

    let published = known_images(&golden, Some(&fixtures.join("aws/mco-allowed-amis.txt")));
    assert_eq!(
        evaluate(Platform::Aws, spec, &golden, &published, None),
        ImageOutcome::Update {
            current: json!(original),
            target: json!(AMI_421_US_EAST_1),
            changes: Changes::Whole("/ami/id".into()),
        }
    );

    // Without the list of published AMIs, nothing says the old AMI is ours.
    let stream_only = known_images(&golden, None);
    let outcome = evaluate(Platform::Aws, spec, &golden, &stream_only, None);
    assert_eq!(
        skip_reason(&outcome),
        Some(Reason::CustomImage),
        "{outcome:?}"
    );
}

#[test]
fn build05_aws_machine_sets_move_to_the_4_21_ami_of_their_region() {
    let Some(fixtures) = fixtures() else { return };
    let golden = stream(&fixtures, STREAM_4_21);
    let published = known_images(&golden, Some(&fixtures.join("aws/mco-allowed-amis.txt")));
    // The file interleaves MachineSets with MachineAutoscalers.
    let machine_sets =
        machine_sets(&fixtures.join("machinesets/aws-openshift-release-build05-worker-amd64.yaml"));
    assert_eq!(machine_sets.len(), 3);
    for machine_set in &machine_sets {
        let spec = provider_spec(machine_set);
        assert_eq!(spec["placement"]["region"], "us-east-2");
        let outcome = evaluate(Platform::Aws, spec, &golden, &published, None);
        assert_eq!(
            *update_target(&outcome),
            AMI_421_US_EAST_2,
            "{}",
            machine_set["metadata"]["name"]
        );
    }
}

#[test]
fn build02_gcp_machine_set_moves_to_the_4_21_image() {
    let Some(fixtures) = fixtures() else { return };
    let golden = stream(&fixtures, STREAM_4_21);
    let known = known_images(&golden, None);
    let [machine_set] = &machine_sets(
        &fixtures.join("machinesets/gcp-openshift-release-build02-worker-b.yaml"),
    )[..] else {
        panic!("expected one MachineSet");
    };
    let outcome = evaluate(
        Platform::Gcp,
        provider_spec(machine_set),
        &golden,
        &known,
        None,
    );
    let old = "projects/rhcos-cloud/global/images/rhcos-46-82-202011260640-0-gcp-x86-64";
    assert_eq!(
        outcome,
        ImageOutcome::Update {
            current: json!(old),
            target: json!(GCP_IMAGE_4_21),
            changes: Changes::Whole("/disks/0/image".into()),
        }
    );
}

#[test]
fn gcp_installer_uploaded_image_is_a_custom_image() {
    let Some(fixtures) = fixtures() else { return };
    let golden = stream(&fixtures, STREAM_4_21);
    let known = known_images(&golden, None);
    let [machine_set] =
        &machine_sets(&fixtures.join("machinesets/gcp-insights-archive-sample-worker-b.json"))[..]
    else {
        panic!("expected one MachineSet");
    };
    let outcome = evaluate(
        Platform::Gcp,
        provider_spec(machine_set),
        &golden,
        &known,
        None,
    );
    assert_eq!(
        skip_reason(&outcome),
        Some(Reason::CustomImage),
        "{outcome:?}"
    );
}

/// An Azure worker providerSpec of a cluster installed with 4.19 (images from the 4.19 ARO
/// overlay), in the shape the installer writes.
fn azure_spec(image: Value) -> Value {
    json!({
        "apiVersion": "machine.openshift.io/v1beta1",
        "kind": "AzureMachineProviderSpec",
        "credentialsSecret": {"name": "azure-cloud-credentials", "namespace": "openshift-machine-api"},
        "image": image,
        "location": "eastus",
        "managedIdentity": "mycluster-x7k2p-identity",
        "metadata": {"creationTimestamp": null},
        "networkResourceGroup": "mycluster-x7k2p-rg",
        "osDisk": {"diskSizeGB": 128, "managedDisk": {"storageAccountType": "Premium_LRS"}, "osType": "Linux"},
        "publicIP": false,
        "resourceGroup": "mycluster-x7k2p-rg",
        "subnet": "mycluster-x7k2p-worker-subnet",
        "userDataSecret": {"name": "worker-user-data"},
        "vmSize": "Standard_D4s_v3",
        "vnet": "mycluster-x7k2p-vnet",
        "zone": "1"
    })
}

fn azure_image(publisher: &str, offer: &str, sku: &str, version: &str, type_: &str) -> Value {
    json!({
        "offer": offer,
        "publisher": publisher,
        "resourceID": "",
        "sku": sku,
        "type": type_,
        "version": version
    })
}

#[test]
fn azure_free_marketplace_images_move_to_the_4_21_image_of_their_generation() {
    let Some(fixtures) = fixtures() else { return };
    let golden = stream_4_21_with_marketplace(&fixtures);
    let known = known_images(&golden, None);
    let free = "MarketplaceNoPlan";
    let cases = [
        (
            azure_image("azureopenshift", "aro4", "aro_419", "419.6.20250523", free),
            azure_image("azureopenshift", "aro4", "aro_420", "9.6.20251015", free),
        ),
        (
            azure_image("azureopenshift", "aro4", "419-v2", "419.6.20250523", free),
            azure_image("azureopenshift", "aro4", "420-v2", "9.6.20251015", free),
        ),
    ];
    for (current, expected) in cases {
        let spec = azure_spec(current.clone());
        let outcome = evaluate(
            Platform::Azure,
            &spec,
            &golden,
            &known,
            Some("mycluster-x7k2p"),
        );
        assert_eq!(
            outcome,
            ImageOutcome::Update {
                current: current.clone(),
                target: expected.clone(),
                changes: Changes::Whole("/image".into()),
            }
        );
    }
}

#[test]
fn azure_every_4_19_marketplace_image_moves_to_its_4_21_counterpart() {
    let Some(fixtures) = fixtures() else { return };
    let golden = stream_4_21_with_marketplace(&fixtures);
    let known = known_images(&golden, None);
    // A cluster installed with 4.19 boots the images of the 4.19 overlay, in every variant,
    // generation and arch; each must stay in its variant and generation.
    let overlay: Value =
        serde_json::from_str(&read(&fixtures.join("streams").join(OVERLAY_4_19))).unwrap();
    let mut seen = 0;
    for (arch_key, per_arch) in overlay.as_object().unwrap() {
        let arch = match arch_key.as_str() {
            "x86_64" => Arch::Amd64,
            "aarch64" => Arch::Arm64,
            other => panic!("unexpected arch {other} in {OVERLAY_4_19}"),
        };
        let golden_variants = golden.azure_marketplace(arch).unwrap();
        for (variant, generations) in per_arch["azure"].as_object().unwrap() {
            let type_ = if variant == "no-purchase-plan" {
                "MarketplaceNoPlan"
            } else {
                "MarketplaceWithPlan"
            };
            for (generation, old) in generations.as_object().unwrap() {
                let field = |key: &str| old[key].as_str().unwrap();
                let current = azure_image(
                    field("publisher"),
                    field("offer"),
                    field("sku"),
                    field("version"),
                    type_,
                );
                let new = &golden_variants[variant][generation];
                let expected =
                    azure_image(&new.publisher, &new.offer, &new.sku, &new.version, type_);
                let outcome = evaluate_on(
                    arch,
                    Platform::Azure,
                    &azure_spec(current.clone()),
                    &golden,
                    &known,
                    None,
                );
                let context = format!("{arch} {variant} {generation}");
                match &outcome {
                    ImageOutcome::UpToDate { current: unchanged } => {
                        assert_eq!(*unchanged, expected, "{context}");
                    }
                    ImageOutcome::Update { target, .. } => {
                        assert_eq!(*target, expected, "{context}")
                    }
                    other => panic!("{context}: {other:?}"),
                }
                seen += 1;
            }
        }
    }
    // 7 x86_64 variants with two generations each, and the Gen2-only aarch64 image.
    assert_eq!(seen, 15);
}

#[test]
fn azure_legacy_installer_uploads_move_to_the_free_marketplace_image() {
    let Some(fixtures) = fixtures() else { return };
    let golden = stream_4_21_with_marketplace(&fixtures);
    let known = known_images(&golden, None);
    let infra = Some("mycluster-x7k2p");
    let upload = |resource_id: &str| {
        azure_spec(
            json!({"offer": "", "publisher": "", "resourceID": resource_id, "sku": "", "version": ""}),
        )
    };
    let cases = [
        (
            "/resourceGroups/mycluster-x7k2p-rg/providers/Microsoft.Compute/galleries/gallery_mycluster_x7k2p/images/mycluster-x7k2p-gen2/versions/latest",
            "420-v2",
        ),
        (
            "/resourceGroups/mycluster-x7k2p-rg/providers/Microsoft.Compute/images/mycluster-x7k2p",
            "aro_420",
        ),
    ];
    for (resource_id, sku) in cases {
        let outcome = evaluate(
            Platform::Azure,
            &upload(resource_id),
            &golden,
            &known,
            infra,
        );
        assert_eq!(
            *update_target(&outcome),
            azure_image(
                "azureopenshift",
                "aro4",
                sku,
                "9.6.20251015",
                "MarketplaceNoPlan"
            ),
            "{resource_id}"
        );
    }

    let elsewhere = "/resourceGroups/images-rg/providers/Microsoft.Compute/images/rhcos-custom";
    let outcome = evaluate(Platform::Azure, &upload(elsewhere), &golden, &known, infra);
    assert_eq!(
        skip_reason(&outcome),
        Some(Reason::CustomImage),
        "{outcome:?}"
    );
}

#[test]
fn azure_needs_the_marketplace_overlay_in_the_stream() {
    let Some(fixtures) = fixtures() else { return };
    // The published 4.21 stream alone carries no marketplace images; only the installer's
    // overlay provides them. Without it the stream is like OKD's, which publishes none: Azure
    // MachineSets are left alone (a skip, not an error that would degrade the cluster).
    let golden = stream(&fixtures, STREAM_4_21);
    let known = known_images(&golden, None);
    let spec = azure_spec(azure_image(
        "azureopenshift",
        "aro4",
        "419-v2",
        "419.6.20250523",
        "MarketplaceNoPlan",
    ));
    let outcome = evaluate(Platform::Azure, &spec, &golden, &known, None);
    assert!(
        matches!(
            outcome,
            ImageOutcome::Skip {
                reason: Reason::MarketplaceImagesNotPublished,
                ..
            }
        ),
        "{outcome:?}"
    );
}

/// A dual-stream golden ConfigMap as the real streams make it: rhel-9 under `stream`, rhel-10
/// under `streams`. A MachineSet labelled with an OS stream boots that stream's image.
#[test]
fn a_dual_stream_config_map_updates_each_machine_set_from_its_own_os_stream() {
    use boot_image_controller::api::ConfigMap;
    use boot_image_controller::golden_stream::GoldenConfig;

    let Some(fixtures) = fixtures() else { return };
    let rhel_9 = read(&fixtures.join("streams").join(STREAM_RHEL_9));
    let rhel_10: Value =
        serde_json::from_str(&read(&fixtures.join("streams").join(STREAM_RHEL_10)))
            .expect("the rhel-10 stream is JSON");
    let cm: ConfigMap = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "coreos-bootimages", "namespace": "openshift-machine-config-operator"},
        "data": {
            "stream": rhel_9,
            "streams": json!({"rhel-10": rhel_10}).to_string(),
            "releaseVersion": "4.22.0"
        }
    }))
    .unwrap();
    let golden = GoldenConfig::from_config_map(&cm).expect("the dual-stream ConfigMap parses");
    let image = |label: Option<&str>| {
        let stream = golden.os_stream(label).expect("the stream is carried");
        stream
            .aws_image(Arch::Amd64, "us-east-1")
            .map(|i| i.image.clone())
            .expect("us-east-1 is published")
    };
    assert_eq!(image(None), "ami-06a6b025350ff1e23");
    assert_eq!(image(Some("rhel-9")), "ami-06a6b025350ff1e23");
    assert_eq!(image(Some("rhel-10")), "ami-04b3d999e39d62c5b");
    assert!(golden.os_stream(Some("centos-10")).is_none());
    // Both streams' images count as ours, with their architectures.
    assert_eq!(golden.arch_of("ami-04b3d999e39d62c5b"), Some(Arch::Amd64));
}
