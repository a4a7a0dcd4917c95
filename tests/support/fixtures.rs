//! The project's own test objects, in the real OpenShift formats. Image ids are the real ones
//! published for OpenShift 4.20 (RHCOS 9.6.20250826-1) and 4.21 (9.6.20251023-0).

use serde_json::{Value, json};

pub const AMI_420_US_EAST_1: &str = "ami-09d23adad19cdb25c";
pub const AMI_420_US_EAST_2: &str = "ami-082a55a580d5538ed";
pub const AMI_420_ARM_US_EAST_1: &str = "ami-05834415546b16278";
pub const AMI_421_US_EAST_1: &str = "ami-01095d1967818437c";
pub const AMI_421_US_EAST_2: &str = "ami-0bc8dda494f111572";
pub const AMI_421_ARM_US_EAST_1: &str = "ami-08e3890b24e081680";
pub const CUSTOM_AMI: &str = "ami-0123456789abcdef0";

/// A compact CoreOS stream: two regions, two architectures.
fn stream(name: &str, release: &str, amis: [(&str, &str, &str); 3]) -> String {
    let mut arches = serde_json::Map::new();
    for (arch, region, ami) in amis {
        let entry = arches.entry(arch.to_string()).or_insert_with(|| {
            json!({
                "artifacts": {"aws": {"release": release, "formats": {"vmdk.gz": {"disk": {"location": "", "sha256": ""}}}}},
                "images": {"aws": {"regions": {}}}
            })
        });
        entry["images"]["aws"]["regions"][region] = json!({"release": release, "image": ami});
    }
    json!({"stream": name, "metadata": {"last-modified": "2025-10-28T23:18:17Z"}, "architectures": arches}).to_string()
}

pub fn stream_420() -> String {
    stream(
        "rhcos-4.20",
        "9.6.20250826-1",
        [
            ("x86_64", "us-east-1", AMI_420_US_EAST_1),
            ("x86_64", "us-east-2", AMI_420_US_EAST_2),
            ("aarch64", "us-east-1", AMI_420_ARM_US_EAST_1),
        ],
    )
}

pub fn stream_421() -> String {
    stream(
        "rhcos-4.21",
        "9.6.20251023-0",
        [
            ("x86_64", "us-east-1", AMI_421_US_EAST_1),
            ("x86_64", "us-east-2", AMI_421_US_EAST_2),
            ("aarch64", "us-east-1", AMI_421_ARM_US_EAST_1),
        ],
    )
}

pub fn infrastructure(name: &str, platform: &str) -> Value {
    json!({
        "apiVersion": "config.openshift.io/v1", "kind": "Infrastructure",
        "metadata": {"name": name},
        "spec": {"platformSpec": {"type": platform}},
        "status": {"infrastructureName": "demo-x7k2p", "platform": platform, "platformStatus": {"type": platform}},
    })
}

pub fn cluster_version(name: &str, release: &str, state: &str) -> Value {
    json!({
        "apiVersion": "config.openshift.io/v1", "kind": "ClusterVersion",
        "metadata": {"name": name},
        "spec": {"clusterID": "6d1f1b8e-1c3a-4f6e-9d2a-0c8b7a5e4f31"},
        "status": cluster_version_status(release, state),
    })
}

pub fn cluster_version_status(release: &str, state: &str) -> Value {
    json!({
        "desired": {"version": release, "image": format!("quay.io/openshift-release-dev/ocp-release:{release}-x86_64")},
        "history": [{"state": state, "version": release, "image": "", "verified": false, "startedTime": "2026-01-01T00:00:00Z", "completionTime": null}],
        "observedGeneration": 1, "versionHash": "x", "availableUpdates": null
    })
}

pub fn machine_configuration(name: &str, managed_boot_images: Option<Value>) -> Value {
    let mut spec = json!({"managementState": "Managed"});
    if let Some(m) = managed_boot_images {
        spec["managedBootImages"] = m;
    }
    json!({
        "apiVersion": "operator.openshift.io/v1", "kind": "MachineConfiguration",
        "metadata": {"name": name}, "spec": spec,
    })
}

/// `managedBootImages` selecting MachineSets with `mode` (and `selector` for Partial).
pub fn selection(mode: &str, selector: Option<Value>) -> Value {
    let mut selection = json!({"mode": mode});
    if let Some(s) = selector {
        selection["partial"] = json!({"machineResourceSelector": s});
    }
    json!({"machineManagers": [{"resource": "machinesets", "apiGroup": "machine.openshift.io", "selection": selection}]})
}

pub fn golden_config_map(ns: &str, release: &str, stream: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "coreos-bootimages", "namespace": ns},
        "data": {"stream": stream, "releaseVersion": release, "MCOReleaseImageVersion": release},
    })
}

/// A stub secret holding a pointer Ignition config of the given spec version.
pub fn stub_secret(ns: &str, name: &str, ignition_version: &str) -> Value {
    let role = name.split('-').next().unwrap_or("worker");
    let config = if ignition_version.starts_with('2') {
        json!({"ignition": {"version": ignition_version, "config": {"append": [{"source": format!("https://api-int.demo.example.com:22623/config/{role}")}]}}})
    } else {
        json!({"ignition": {"version": ignition_version, "config": {"merge": [{"source": format!("https://api-int.demo.example.com:22623/config/{role}")}]}}})
    };
    json!({
        "apiVersion": "v1", "kind": "Secret", "type": "Opaque",
        "metadata": {"name": name, "namespace": ns},
        "stringData": {"userData": config.to_string(), "disableTemplating": "true"},
    })
}

/// An AWS MachineSet in the shape the installer writes.
pub struct MachineSetBuilder {
    value: Value,
}

pub fn machine_set(ns: &str, name: &str) -> MachineSetBuilder {
    MachineSetBuilder {
        value: json!({
            "apiVersion": "machine.openshift.io/v1beta1", "kind": "MachineSet",
            "metadata": {"name": name, "namespace": ns, "labels": {"machine.openshift.io/cluster-api-cluster": "demo-x7k2p"}},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": {"machine.openshift.io/cluster-api-machineset": name}},
                "template": {
                    "metadata": {"labels": {
                        "machine.openshift.io/cluster-api-machineset": name,
                        "machine.openshift.io/cluster-api-machine-role": "worker"
                    }},
                    "spec": {"metadata": {}, "providerSpec": {"value": {
                        "apiVersion": "machine.openshift.io/v1beta1", "kind": "AWSMachineProviderConfig",
                        "ami": {"id": AMI_420_US_EAST_1},
                        "instanceType": "m6i.xlarge",
                        "placement": {"availabilityZone": "us-east-1a", "region": "us-east-1"},
                        "blockDevices": [{"ebs": {"encrypted": true, "volumeSize": 120, "volumeType": "gp3", "kmsKey": {"arn": ""}}}],
                        "credentialsSecret": {"name": "aws-cloud-credentials"},
                        "iamInstanceProfile": {"id": "demo-x7k2p-worker-profile"},
                        "metadata": {"creationTimestamp": null},
                        "securityGroups": [{"filters": [{"name": "tag:Name", "values": ["demo-x7k2p-node"]}]}],
                        "subnet": {"filters": [{"name": "tag:Name", "values": ["demo-x7k2p-subnet-private-us-east-1a"]}]},
                        "tags": [{"name": "kubernetes.io/cluster/demo-x7k2p", "value": "owned"}],
                        "userDataSecret": {"name": "worker-user-data"}
                    }}}
                }
            }
        }),
    }
}

impl MachineSetBuilder {
    pub fn ami(mut self, ami: &str) -> Self {
        self.provider()["ami"] = json!({"id": ami});
        self
    }

    pub fn region(mut self, region: &str) -> Self {
        self.provider()["placement"] =
            json!({"availabilityZone": format!("{region}a"), "region": region});
        self
    }

    pub fn label(mut self, key: &str, value: &str) -> Self {
        self.value["metadata"]["labels"][key] = json!(value);
        self
    }

    pub fn annotate(mut self, key: &str, value: &str) -> Self {
        self.value["metadata"]["annotations"][key] = json!(value);
        self
    }

    pub fn arch(self, arch: &str) -> Self {
        self.annotate(
            "capacity.cluster-autoscaler.kubernetes.io/labels",
            &format!("kubernetes.io/arch={arch}"),
        )
    }

    pub fn opted_out(self) -> Self {
        self.annotate(
            "machineconfiguration.openshift.io/boot-image-updates",
            "disabled",
        )
    }

    pub fn owned_by_hive(mut self) -> Self {
        self.value["metadata"]["ownerReferences"] = json!([{
            "apiVersion": "hive.openshift.io/v1", "kind": "MachinePool", "name": "demo-worker",
            "uid": "0b6f3b4e-7c1d-4c55-9d0e-3a1e5e9f2a10", "controller": true
        }]);
        self
    }

    pub fn windows(mut self) -> Self {
        self.value["spec"]["template"]["metadata"]["labels"]["machine.openshift.io/os-id"] =
            json!("Windows");
        self
    }

    pub fn user_data(mut self, secret: &str) -> Self {
        self.provider()["userDataSecret"] = json!({"name": secret});
        self
    }

    pub fn provider_spec(mut self, value: Value) -> Self {
        self.value["spec"]["template"]["spec"]["providerSpec"]["value"] = value;
        self
    }

    fn provider(&mut self) -> &mut Value {
        &mut self.value["spec"]["template"]["spec"]["providerSpec"]["value"]
    }

    pub fn build(self) -> Value {
        self.value
    }
}

/// Reads a MachineSet's AMI and stub secret name.
pub fn ami_of(ms: &Value) -> &str {
    ms.pointer("/spec/template/spec/providerSpec/value/ami/id")
        .and_then(Value::as_str)
        .unwrap_or_default()
}

pub fn secret_of(ms: &Value) -> &str {
    ms.pointer("/spec/template/spec/providerSpec/value/userDataSecret/name")
        .and_then(Value::as_str)
        .unwrap_or_default()
}
