//! The compact CoreOS streams of OpenShift 4.20 (RHCOS 9.6.20250826-1) and 4.21
//! (9.6.20251023-0): two regions, two architectures, with the real published AMI ids, so a
//! test's expectations can be checked against the release's own stream.

use serde_json::{Value, json};

pub const AMI_420_US_EAST_1: &str = "ami-09d23adad19cdb25c";
pub const AMI_420_US_EAST_2: &str = "ami-082a55a580d5538ed";
pub const AMI_420_ARM_US_EAST_1: &str = "ami-05834415546b16278";
pub const AMI_421_US_EAST_1: &str = "ami-01095d1967818437c";
pub const AMI_421_US_EAST_2: &str = "ami-0bc8dda494f111572";
pub const AMI_421_ARM_US_EAST_1: &str = "ami-08e3890b24e081680";
/// The 4.21 vSphere OVA as rhcos-4.21 9.6.20251023-0 publishes it.
pub const VMWARE_RELEASE_421: &str = "9.6.20251023-0";
pub const VMWARE_OVA_421: &str = "https://rhcos.mirror.openshift.com/art/storage/prod/streams/rhel-9.6/builds/9.6.20251023-0/x86_64/rhcos-9.6.20251023-0-vmware.x86_64.ova";
pub const VMWARE_OVA_421_SHA256: &str =
    "14fa549bb83b2e730de22312419b503bc1ce85adf72269582f0af60e366d87ff";
pub const CUSTOM_AMI: &str = "ami-0123456789abcdef0";
pub const GCP_IMAGE_420: &str =
    "projects/rhcos-cloud/global/images/rhcos-9-6-20250826-1-gcp-x86-64";
pub const GCP_IMAGE_421: &str =
    "projects/rhcos-cloud/global/images/rhcos-9-6-20251023-0-gcp-x86-64";

/// Where a compact stream has images: `(architecture, region)`, in the order of
/// [`CompactStream::amis`].
pub const COMPACT_PLACES: [(&str, &str); 3] = [
    ("x86_64", "us-east-1"),
    ("x86_64", "us-east-2"),
    ("aarch64", "us-east-1"),
];

/// One release's compact stream: its name, its RHCOS build and its AMIs at [`COMPACT_PLACES`].
pub struct CompactStream {
    pub name: &'static str,
    pub release: &'static str,
    pub amis: [&'static str; 3],
}

/// OpenShift 4.20 (RHCOS 9.6.20250826-1) and 4.21 (9.6.20251023-0).
pub const RHCOS_420: CompactStream = CompactStream {
    name: "rhcos-4.20",
    release: "9.6.20250826-1",
    amis: [AMI_420_US_EAST_1, AMI_420_US_EAST_2, AMI_420_ARM_US_EAST_1],
};
pub const RHCOS_421: CompactStream = CompactStream {
    name: "rhcos-4.21",
    release: "9.6.20251023-0",
    amis: [AMI_421_US_EAST_1, AMI_421_US_EAST_2, AMI_421_ARM_US_EAST_1],
};

impl CompactStream {
    /// The stream as the golden ConfigMap carries it (a JSON document in a string).
    pub fn to_json(&self) -> String {
        let mut arches = serde_json::Map::new();
        for ((arch, region), ami) in COMPACT_PLACES.into_iter().zip(self.amis) {
            let entry = arches.entry(arch.to_string()).or_insert_with(|| {
                json!({
                    "artifacts": {"aws": {"release": self.release, "formats": {"vmdk.gz": {"disk": {"location": "", "sha256": ""}}}}},
                    "images": {"aws": {"regions": {}}}
                })
            });
            entry["images"]["aws"]["regions"][region] =
                json!({"release": self.release, "image": ami});
        }
        json!({"stream": self.name, "metadata": {"last-modified": "2025-10-28T23:18:17Z"}, "architectures": arches}).to_string()
    }
}

pub fn stream_420() -> String {
    RHCOS_420.to_json()
}

pub fn stream_421() -> String {
    RHCOS_421.to_json()
}

/// An Azure marketplace entry of a stream: the Hyper-V generation 1 and 2 images of one offer.
pub fn marketplace(publisher: &str, offer: &str, gen1: &str, gen2: &str, version: &str) -> Value {
    json!({
        "hyperVGen1": {"publisher": publisher, "offer": offer, "sku": gen1, "version": version},
        "hyperVGen2": {"publisher": publisher, "offer": offer, "sku": gen2, "version": version}
    })
}

/// The 4.21 stream for every platform the rules read: AWS, GCP, Azure marketplace and the vSphere
/// OVA for x86_64, AWS only for
/// aarch64, nothing for ppc64le and s390x.
pub fn stream_421_all_platforms() -> Value {
    json!({
        "stream": "rhcos-4.21",
        "architectures": {
            "x86_64": {
                "artifacts": {
                    "aws": {"release": "9.6.20251023-0"},
                    "gcp": {"release": "9.6.20251023-0"},
                    "azure": {"release": "9.6.20251023-0"},
                    "vmware": {"release": VMWARE_RELEASE_421, "formats": {"ova": {"disk": {
                        "location": VMWARE_OVA_421, "sha256": VMWARE_OVA_421_SHA256
                    }}}}
                },
                "images": {
                    "aws": {"regions": {
                        "us-east-1": {"release": "9.6.20251023-0", "image": AMI_421_US_EAST_1},
                        "us-east-2": {"release": "9.6.20251023-0", "image": AMI_421_US_EAST_2}
                    }},
                    "gcp": {"release": "9.6.20251023-0", "project": "rhcos-cloud", "name": "rhcos-9-6-20251023-0-gcp-x86-64"}
                },
                "rhel-coreos-extensions": {"marketplace": {"azure": {
                    "no-purchase-plan": marketplace("azureopenshift", "aro4", "aro_420", "420-v2", "9.6.20251015"),
                    "ocp": marketplace("redhat", "rh-ocp-worker", "rh-ocp-worker-gen1", "rh-ocp-worker", "4.18.2025031114"),
                    "ocp-emea": marketplace("redhat-limited", "rh-ocp-worker", "rh-ocp-worker-gen1", "rh-ocp-worker", "4.18.2025031114")
                }}}
            },
            "aarch64": {
                "artifacts": {"aws": {"release": "9.6.20251023-0"}},
                "images": {"aws": {"regions": {
                    "us-east-1": {"release": "9.6.20251023-0", "image": AMI_421_ARM_US_EAST_1}
                }}}
            }
        }
    })
}

/// The rhel-10 AMI of [`stream_rhel_10`].
pub const AMI_RHEL_10_US_EAST_1: &str = "ami-0e5ae1fd8c4a3b2f1";

/// The rhel-10 CoreOS stream of a dual-stream release (4.22): x86_64 in us-east-1 only. The golden
/// ConfigMap carries it under `streams`, beside the default rhel-9 stream.
pub fn stream_rhel_10() -> Value {
    json!({
        "stream": "rhcos-4.22",
        "architectures": {"x86_64": {
            "artifacts": {"aws": {"release": "10.2.20260405-0"}},
            "images": {"aws": {"regions": {
                "us-east-1": {"release": "10.2.20260405-0", "image": AMI_RHEL_10_US_EAST_1}
            }}}
        }}
    })
}
