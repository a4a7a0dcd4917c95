//! Arbitrary inputs, for the property tests (`tests/suite/plan_properties.rs`, with proptest) and the
//! fuzz targets (`fuzz/`, with `arbitrary`): both draw from the same pools of the values the
//! rules compare against (published AMIs, regions, images, marketplace offers, installer
//! resource ids, stub secret names, keys the rules look up), so that random inputs reach the
//! interesting branches.

use std::collections::BTreeMap;

use proptest::prelude::*;
use serde_json::{Map, Value, json};

use super::provider_specs::INFRASTRUCTURE_NAME;
use super::streams::*;

// ---------------------------------------------------------------------------------------------
// Pools.

pub const AMIS: &[&str] = &[
    AMI_420_US_EAST_1,
    AMI_420_US_EAST_2,
    AMI_420_ARM_US_EAST_1,
    AMI_421_US_EAST_1,
    AMI_421_US_EAST_2,
    AMI_421_ARM_US_EAST_1,
    CUSTOM_AMI,
    "",
];

pub const REGIONS: &[&str] = &["us-east-1", "us-east-2", "eu-west-1", ""];

pub const GCP_IMAGES: &[&str] = &[
    GCP_IMAGE_421,
    GCP_IMAGE_420,
    "projects/rhcos-cloud/global/images/",
    "projects/acme/global/images/golden-rhcos",
    "rhcos-9-6-20251023-0-gcp-x86-64",
];

pub const AZURE_PUBLISHERS: &[&str] = &["azureopenshift", "redhat", "redhat-limited", "acme"];
pub const AZURE_OFFERS: &[&str] = &["aro4", "rh-ocp-worker", "rh-opp-worker", "custom"];
#[rustfmt::skip]
pub const AZURE_SKUS: &[&str] = &["aro_420", "420-v2", "rh-ocp-worker", "rh-ocp-worker-gen1", ""];
pub const AZURE_VERSIONS: &[&str] = &["9.6.20251015", "4.18.2025031114", "latest", ""];
pub const AZURE_RESOURCE_IDS: &[&str] = &[
    "/resourceGroups/demo-x7k2p-rg/providers/Microsoft.Compute/galleries/gallery_demo_x7k2p/images/demo-x7k2p-gen2/versions/latest",
    "/resourceGroups/demo-x7k2p-rg/providers/Microsoft.Compute/galleries/gallery_demo_x7k2p/images/demo-x7k2p/versions/latest",
    "/resourceGroups/demo-x7k2p-rg/providers/Microsoft.Compute/images/demo-x7k2p",
    "/subscriptions/0/resourceGroups/other-rg/providers/Microsoft.Compute/images/golden",
    "",
];

pub const SECRET_NAMES: &[&str] = &[
    "worker-user-data",
    "worker-user-data-managed",
    "infra-user-data",
    "-managed",
    "",
];

pub const STREAM_ARCHES: &[&str] = &["x86_64", "aarch64", "ppc64le", "s390x"];
pub const KUBE_ARCHES: &[&str] = &["amd64", "arm64", "ppc64le", "s390x", "riscv64", ""];

/// Keys the rules and the planner look up, so grafted objects hit real lookups.
pub const KEYS: &[&str] = &[
    "ami",
    "id",
    "arn",
    "filters",
    "placement",
    "region",
    "availabilityZone",
    "userDataSecret",
    "name",
    "disks",
    "boot",
    "image",
    "publisher",
    "offer",
    "sku",
    "version",
    "resourceID",
    "type",
    "securityProfile",
    "settings",
    "securityType",
    "template",
    "release",
    "project",
    "regions",
    "images",
    "aws",
    "gcp",
    "azure",
];

/// Any one string of `pool`.
pub fn from_pool(pool: &'static [&'static str]) -> BoxedStrategy<String> {
    proptest::sample::select(pool)
        .prop_map(str::to_string)
        .boxed()
}

// ---------------------------------------------------------------------------------------------
// proptest strategies: machine resources.

/// Arbitrary JSON: nulls, numbers, strings, and nested arrays and objects whose keys are often
/// the ones the rules look for.
pub fn arb_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<f64>().prop_map(Value::from),
        prop_oneof![
            from_pool(AMIS),
            from_pool(GCP_IMAGES),
            from_pool(SECRET_NAMES),
            from_pool(REGIONS),
            ".{0,12}".boxed(),
        ]
        .prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 48, 5, |inner| {
        let key = prop_oneof![3 => from_pool(KEYS), 1 => "[a-zA-Z/~]{0,6}".boxed()];
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
            prop::collection::btree_map(key, inner, 0..6)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// Fields no rule reads, including `null`s and nested objects, that every patch must preserve.
pub fn arb_unrelated_fields() -> impl Strategy<Value = Map<String, Value>> {
    prop::collection::btree_map("x[a-zA-Z0-9]{0,8}", arb_json(), 0..4)
        .prop_map(|m| m.into_iter().collect())
}

pub fn arb_aws_spec() -> impl Strategy<Value = Map<String, Value>> {
    let ami = prop_oneof![
        3 => Just(json!({"id": AMI_420_US_EAST_1})),
        2 => Just(json!({"id": AMI_421_US_EAST_1})),
        1 => Just(json!({"id": AMI_421_US_EAST_2})),
        1 => Just(json!({"id": AMI_421_ARM_US_EAST_1})),
        1 => Just(json!({"id": AMI_420_ARM_US_EAST_1})),
        1 => Just(json!({"id": CUSTOM_AMI})),
        1 => Just(json!({"filters": [{"name": "tag:Name", "values": ["rhcos-*"]}]})),
        1 => Just(json!({"id": null})),
    ];
    let region = prop_oneof![
        4 => Just(Some("us-east-1")),
        2 => Just(Some("us-east-2")),
        1 => Just(Some("eu-west-3")),
        1 => Just(None),
    ];
    (ami, region).prop_map(|(ami, region)| {
        let mut spec = Map::new();
        spec.insert("kind".into(), json!("AWSMachineProviderConfig"));
        spec.insert("ami".into(), ami);
        spec.insert("instanceType".into(), json!("m6i.xlarge"));
        spec.insert("metadata".into(), json!({"creationTimestamp": null}));
        spec.insert(
            "blockDevices".into(),
            json!([{"ebs": {"encrypted": true, "iops": 0, "kmsKey": {"arn": ""}, "volumeSize": 120}}]),
        );
        if let Some(region) = region {
            spec.insert(
                "placement".into(),
                json!({"availabilityZone": format!("{region}a"), "region": region}),
            );
        }
        spec
    })
}

pub fn arb_gcp_spec() -> impl Strategy<Value = Map<String, Value>> {
    let image = prop_oneof![
        3 => Just(json!(GCP_IMAGE_420)),
        2 => Just(json!(GCP_IMAGE_421)),
        1 => Just(json!("projects/my-project/global/images/golden")),
        1 => Just(Value::Null),
    ];
    let disk = (prop::bool::weighted(0.7), image, any::<bool>()).prop_map(|(boot, image, labels)| {
        let mut disk = json!({"autoDelete": true, "boot": boot, "image": image, "sizeGb": 128, "type": "pd-ssd"});
        if labels {
            disk["labels"] = Value::Null;
        }
        disk
    });
    prop::collection::vec(disk, 0..3).prop_map(|disks| {
        let mut spec = Map::new();
        spec.insert("kind".into(), json!("GCPMachineProviderSpec"));
        spec.insert("disks".into(), Value::Array(disks));
        spec.insert("machineType".into(), json!("n2-standard-4"));
        spec.insert("zone".into(), json!("us-east1-b"));
        spec
    })
}

pub fn arb_azure_spec() -> impl Strategy<Value = Map<String, Value>> {
    let marketplace = |publisher: &str, offer: &str, sku: &str, version: &str| {
        json!({"publisher": publisher, "offer": offer, "sku": sku, "version": version,
               "resourceID": "", "type": "MarketplaceNoPlan"})
    };
    let upload = |resource_id: String| json!({"publisher": "", "offer": "", "sku": "", "version": "", "resourceID": resource_id});
    let image = prop_oneof![
        Just(marketplace(
            "azureopenshift",
            "aro4",
            "aro_419",
            "419.6.20250523"
        )),
        Just(marketplace(
            "azureopenshift",
            "aro4",
            "419-v2",
            "419.6.20250523"
        )),
        Just(marketplace(
            "azureopenshift",
            "aro4",
            "420-v2",
            "9.6.20251015"
        )),
        Just(marketplace(
            "redhat",
            "rh-ocp-worker",
            "rh-ocp-worker",
            "4.17.2024100419"
        )),
        Just(marketplace("mycompany", "golden", "v1", "1.0.0")),
        Just(upload(format!(
            "/resourceGroups/{INFRASTRUCTURE_NAME}-rg/providers/Microsoft.Compute/galleries/gallery_{}/images/{INFRASTRUCTURE_NAME}-gen2/versions/latest",
            INFRASTRUCTURE_NAME.replace('-', "_")
        ))),
        Just(upload(format!(
            "/resourceGroups/{INFRASTRUCTURE_NAME}-rg/providers/Microsoft.Compute/images/{INFRASTRUCTURE_NAME}"
        ))),
        Just(upload(
            "/resourceGroups/other-rg/providers/Microsoft.Compute/images/mine".into()
        )),
        Just(json!("not an object")),
    ];
    let security = prop_oneof![
        3 => Just(None),
        1 => Just(Some(Value::Null)),
        1 => Just(Some(json!({"settings": {"securityType": "TrustedLaunch"}}))),
    ];
    (image, security).prop_map(|(image, security)| {
        let mut spec = Map::new();
        spec.insert("kind".into(), json!("AzureMachineProviderSpec"));
        spec.insert("image".into(), image);
        spec.insert("location".into(), json!("eastus"));
        spec.insert(
            "osDisk".into(),
            json!({"diskSizeGB": 128, "managedDisk": {"storageAccountType": "Premium_LRS"}, "osType": "Linux"}),
        );
        if let Some(security) = security {
            spec.insert("securityProfile".into(), security);
        }
        spec
    })
}

/// A provider spec mostly of the cluster's platform, sometimes of another one (an error there),
/// now and then arbitrary JSON.
pub fn arb_provider_spec(platform: &str) -> impl Strategy<Value = Value> {
    let (aws, gcp, azure) = match platform {
        "AWS" => (6, 1, 1),
        "GCP" => (1, 6, 1),
        "Azure" => (1, 1, 6),
        _ => (1, 1, 1),
    };
    let shaped =
        prop_oneof![aws => arb_aws_spec(), gcp => arb_gcp_spec(), azure => arb_azure_spec()];
    let secret = prop_oneof![
        4 => Just(Some(json!({"name": "worker-user-data"}))),
        2 => Just(Some(json!({"name": "worker-user-data-managed"}))),
        1 => Just(Some(json!({"name": "infra-user-data"}))),
        1 => Just(Some(json!({"name": 7}))),
        1 => Just(None),
    ];
    let shaped = (shaped, secret, arb_unrelated_fields()).prop_map(|(mut spec, secret, extra)| {
        spec.insert("apiVersion".into(), json!("machine.openshift.io/v1beta1"));
        if let Some(secret) = secret {
            spec.insert("userDataSecret".into(), secret);
        }
        spec.extend(extra);
        Value::Object(spec)
    });
    prop_oneof![8 => shaped, 1 => arb_json()]
}

pub fn arb_labels() -> impl Strategy<Value = BTreeMap<String, String>> {
    let pair = prop_oneof![
        3 => Just(("boot-images".to_string(), "managed".to_string())),
        2 => Just(("team".to_string(), "a".to_string())),
        1 => Just((
            "machineconfiguration.openshift.io/osstream".to_string(),
            "rhel-10".to_string()
        )),
        2 => ("[a-z]{1,5}", "[a-z0-9]{0,5}"),
    ];
    prop::collection::vec(pair, 0..3).prop_map(|pairs| pairs.into_iter().collect())
}

pub fn arb_annotations() -> impl Strategy<Value = BTreeMap<String, String>> {
    let arch = prop_oneof![
        3 => Just("kubernetes.io/arch=amd64".to_string()),
        2 => Just("foo=bar, kubernetes.io/arch=arm64".to_string()),
        1 => Just("kubernetes.io/arch=riscv64".to_string()),
        1 => Just("foo=bar".to_string()),
        1 => ".{0,20}",
    ];
    let entry = prop_oneof![
        2 => arch.prop_map(|v| ("capacity.cluster-autoscaler.kubernetes.io/labels".to_string(), v)),
        1 => Just((
            "boot-image-controller.io/boot-image-updates".to_string(),
            "disabled".to_string()
        )),
        1 => prop_oneof![
            Just(r#"{"target":"x","patches":["2026-03-02T09:59:00Z"]}"#.to_string()),
            Just(r#"{"target":"x","patches":["-009999-01-01T00:00:00Z","9999-12-31T23:59:59Z"]}"#.to_string()),
            arb_json().prop_map(|v| v.to_string()),
        ]
        .prop_map(|v| ("boot-image-controller.io/hot-loop".to_string(), v)),
        1 => arb_json().prop_map(|v| ("boot-image-controller.io/history".to_string(), v.to_string())),
        1 => ("[a-z./]{1,12}", ".{0,8}"),
    ];
    let some = prop::collection::vec(entry, 1..3).prop_map(|e| e.into_iter().collect());
    prop_oneof![2 => Just(BTreeMap::new()), 1 => some]
}
