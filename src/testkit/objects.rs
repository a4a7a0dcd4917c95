//! Builders for every object the controller reads or writes, in the real OpenShift formats, as
//! JSON (what `kubectl apply` and the API server see).

use std::marker::PhantomData;

use base64::Engine as _;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use super::provider_specs::{self, INFRASTRUCTURE_NAME};
use super::streams::*;
use crate::api::{ControlPlaneMachineSet, MachineSet};
use crate::names::OPT_IN_ANNOTATION;
use crate::plan::Malformed;

pub fn infrastructure(name: &str, platform: &str) -> Value {
    json!({
        "apiVersion": "config.openshift.io/v1", "kind": "Infrastructure",
        "metadata": {"name": name},
        "spec": {"platformSpec": {"type": platform}},
        "status": {"infrastructureName": "demo-x7k2p", "platform": platform, "platformStatus": platform_status(platform)},
    })
}

/// What the installer records of the platform; on AWS the region, which Cluster API machine
/// templates do not carry.
fn platform_status(platform: &str) -> Value {
    match platform {
        "AWS" => json!({"type": platform, "aws": {"region": "us-east-1"}}),
        _ => json!({"type": platform}),
    }
}

/// The control-plane Nodes every test cluster shares (Nodes are cluster-scoped): x86_64, so the
/// architecture of MachineSets that do not declare theirs.
pub fn control_plane_nodes() -> Vec<Value> {
    (0..3)
        .map(|i| {
            json!({
                "apiVersion": "v1", "kind": "Node",
                "metadata": {"name": format!("bic-test-master-{i}"), "labels": {
                    "kubernetes.io/arch": "amd64",
                    "node-role.kubernetes.io/control-plane": "",
                    "node-role.kubernetes.io/master": ""
                }}
            })
        })
        .collect()
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

/// The ClusterVersion of a cluster installed at `installed` (that update Completed) whose newest
/// update, to `release`, is in `state`. The history lists the newest update first, as the
/// cluster-version operator writes it.
pub fn upgraded_cluster_version(name: &str, installed: &str, release: &str, state: &str) -> Value {
    let mut cv = cluster_version(name, release, state);
    let installed = json!({
        "state": "Completed", "version": installed, "image": "", "verified": true,
        "startedTime": "2025-12-01T00:00:00Z", "completionTime": "2025-12-01T01:10:00Z"
    });
    cv["status"]["history"]
        .as_array_mut()
        .unwrap()
        .push(installed);
    cv
}

/// The MachineConfiguration `name` with `managed_boot_images` as its `spec.managedBootImages`;
/// without one, the administrator opted every MachineSet in with our annotation, as the README
/// tells them to (see [`machine_configuration_not_opted_in`] for the release's default).
pub fn machine_configuration(name: &str, managed_boot_images: Option<Value>) -> Value {
    let mut mc = machine_configuration_not_opted_in(name);
    match managed_boot_images {
        Some(m) => mc["spec"]["managedBootImages"] = m,
        None => {
            let all = selection("All", None).to_string();
            mc["metadata"]["annotations"] = json!({OPT_IN_ANNOTATION: all});
        }
    }
    mc
}

/// The MachineConfiguration `name` as installed: nobody declared a selection.
pub fn machine_configuration_not_opted_in(name: &str) -> Value {
    json!({
        "apiVersion": "operator.openshift.io/v1", "kind": "MachineConfiguration",
        "metadata": {"name": name}, "spec": {"managementState": "Managed"},
    })
}

/// `managedBootImages` selecting MachineSets with `mode` (and `selector` for Partial).
pub fn selection(mode: &str, selector: Option<Value>) -> Value {
    let mut selection = json!({"mode": mode});
    if let Some(s) = selector {
        selection["partial"] = json!({"machineResourceSelector": s});
    }
    json!({"machineManagers": [machine_manager("machinesets", selection)]})
}

/// One `machineManagers` entry: `resource` (`machinesets`, `controlplanemachinesets`) selected
/// by `selection`, written as the MachineConfiguration holds it, valid or not.
pub fn machine_manager(resource: &str, selection: Value) -> Value {
    json!({"resource": resource, "apiGroup": "machine.openshift.io", "selection": selection})
}

pub fn golden_config_map(ns: &str, release: &str, stream: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "coreos-bootimages", "namespace": ns},
        "data": {"stream": stream, "releaseVersion": release, "MCOReleaseImageVersion": release},
    })
}

/// The golden ConfigMap without `releaseVersion`: nothing tells which release its stream is for.
pub fn golden_config_map_without_release(ns: &str, stream: &str) -> Value {
    let mut cm = golden_config_map(ns, "", stream);
    let data = cm["data"].as_object_mut().unwrap();
    data.remove("releaseVersion");
    data.remove("MCOReleaseImageVersion");
    cm
}

/// The controller's own memory of CoreOS images (see `src/controller/remembered_images.rs`), one per line.
pub fn known_images(ns: &str, images: &[&str]) -> Value {
    let mut text: String = images.iter().map(|i| format!("{i}\n")).collect();
    if text.is_empty() {
        text.push('\n');
    }
    json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": crate::names::KNOWN_IMAGES_CONFIGMAP_NAME, "namespace": ns},
        "data": {"images": text},
    })
}

/// The AMIs of [`stream_420`], as the controller remembers them after seeing that stream.
pub const AMIS_420: [&str; 3] = RHCOS_420.amis;

/// A stub secret holding a pointer Ignition config of the given spec version.
pub fn stub_secret(ns: &str, name: &str, ignition_version: &str) -> Value {
    let role = name.split('-').next().unwrap_or("worker");
    stub_secret_with_user_data(ns, name, &pointer_ignition_config(role, ignition_version))
}

/// The Ignition config of a stub secret: a pointer to the Machine Config Server's config of
/// `role`, in the given spec version.
pub fn pointer_ignition_config(role: &str, ignition_version: &str) -> String {
    let source = format!("https://api-int.demo.example.com:22623/config/{role}");
    // Ignition spec 3 renamed `config.append` to `config.merge`.
    let key = if ignition_version.starts_with('2') {
        "append"
    } else {
        "merge"
    };
    json!({"ignition": {"version": ignition_version, "config": {key: [{"source": source}]}}})
        .to_string()
}

/// A stub secret whose `userData` is `user_data` verbatim: a script, a broken config.
pub fn stub_secret_with_user_data(ns: &str, name: &str, user_data: &str) -> Value {
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    json!({
        "apiVersion": "v1", "kind": "Secret", "type": "Opaque",
        "metadata": {"name": name, "namespace": ns},
        // `data`, as the API server serves it, so the object is the same applied or typed.
        "data": {"userData": b64(user_data), "disableTemplating": b64("true")},
    })
}

/// A machine resource under construction, as JSON: a MachineSet, or a ControlPlaneMachineSet
/// whose machine template lies one level deeper (`template`). `K` is the type the planner reads
/// it as (see [`MachineResourceBuilder::served`]).
pub struct MachineResourceBuilder<K> {
    value: Value,
    template: &'static [&'static str],
    kind: PhantomData<K>,
}

impl<K> Clone for MachineResourceBuilder<K> {
    fn clone(&self) -> Self {
        MachineResourceBuilder {
            value: self.value.clone(),
            template: self.template,
            kind: PhantomData,
        }
    }
}

pub type MachineSetBuilder = MachineResourceBuilder<MachineSet>;
pub type ControlPlaneMachineSetBuilder = MachineResourceBuilder<ControlPlaneMachineSet>;

const MACHINE_SET_TEMPLATE: &[&str] = &["spec", "template"];
const CONTROL_PLANE_TEMPLATE: &[&str] =
    &["spec", "template", "machines_v1beta1_machine_openshift_io"];

/// An AWS worker MachineSet in the shape the installer writes, in us-east-1 on 4.20's AMI with
/// the installer's stub secret `worker-user-data`.
pub fn machine_set(ns: &str, name: &str) -> MachineSetBuilder {
    let cluster = json!(INFRASTRUCTURE_NAME);
    let spec = provider_specs::aws(AMI_420_US_EAST_1, "us-east-1", "worker-user-data", "worker");
    MachineResourceBuilder {
        value: json!({
            "apiVersion": "machine.openshift.io/v1beta1", "kind": "MachineSet",
            "metadata": {"name": name, "namespace": ns, "labels": {"machine.openshift.io/cluster-api-cluster": cluster}},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": {
                    "machine.openshift.io/cluster-api-cluster": cluster,
                    "machine.openshift.io/cluster-api-machineset": name
                }},
                "template": {
                    "metadata": {"labels": {
                        "machine.openshift.io/cluster-api-cluster": cluster,
                        "machine.openshift.io/cluster-api-machine-role": "worker",
                        "machine.openshift.io/cluster-api-machine-type": "worker",
                        "machine.openshift.io/cluster-api-machineset": name
                    }},
                    "spec": {"lifecycleHooks": {}, "metadata": {}, "providerSpec": {"value": spec}}
                }
            }
        }),
        template: MACHINE_SET_TEMPLATE,
        kind: PhantomData,
    }
}

impl<K: DeserializeOwned> MachineResourceBuilder<K> {
    pub fn namespace(mut self, ns: &str) -> Self {
        self.value["metadata"]["namespace"] = json!(ns);
        self
    }

    pub fn ami(self, ami: &str) -> Self {
        self.spec_field(&["ami"], json!({ "id": ami }))
    }

    /// On 4.21's golden AMI with the managed stub secret: nothing left to update on 4.21.
    pub fn current(self) -> Self {
        self.ami(AMI_421_US_EAST_1)
            .user_data("worker-user-data-managed")
    }

    pub fn region(self, region: &str) -> Self {
        let placement = json!({"availabilityZone": format!("{region}a"), "region": region});
        self.spec_field(&["placement"], placement)
    }

    pub fn label(mut self, key: &str, value: &str) -> Self {
        set(&mut self.value, &["metadata", "labels", key], json!(value));
        self
    }

    pub fn annotate(mut self, key: &str, value: &str) -> Self {
        set(
            &mut self.value,
            &["metadata", "annotations", key],
            json!(value),
        );
        self
    }

    /// A label of the machines it creates (the OS labels are read there).
    pub fn template_label(mut self, key: &str, value: &str) -> Self {
        let path = [self.template, &["metadata", "labels", key]].concat();
        set(&mut self.value, &path, json!(value));
        self
    }

    /// The autoscaler's scale-from-zero labels, where a MachineSet names its architecture.
    pub fn capacity_labels(self, labels: &str) -> Self {
        self.annotate("capacity.cluster-autoscaler.kubernetes.io/labels", labels)
    }

    pub fn arch(self, arch: &str) -> Self {
        self.capacity_labels(&format!("kubernetes.io/arch={arch}"))
    }

    pub fn opted_out(self) -> Self {
        self.annotate("boot-image-controller.io/boot-image-updates", "disabled")
    }

    /// Controlled by an object of `kind` of another controller (an in-house operator's
    /// `pools.example.com` API), which reconciles the MachineSet back.
    pub fn owned_by(mut self, kind: &str, name: &str) -> Self {
        self.value["metadata"]["ownerReferences"] = json!([{
            "apiVersion": "pools.example.com/v1", "kind": kind, "name": name,
            "uid": "0b6f3b4e-7c1d-4c55-9d0e-3a1e5e9f2a10", "controller": true
        }]);
        self
    }

    pub fn owned_by_another_controller(self) -> Self {
        self.owned_by("WorkerPool", "demo-gpu")
    }

    /// Made by Hive's MachinePool controller for the pool `pool`: labelled, with no owner
    /// reference (the MachinePool lives in the hub cluster; openshift/hive
    /// pkg/controller/machinepool/machinepool_controller.go, `generateMachineSets`).
    pub fn managed_by_hive(self, pool: &str) -> Self {
        self.label("hive.openshift.io/machine-pool", pool)
            .label("hive.openshift.io/managed", "true")
    }

    pub fn windows(self) -> Self {
        self.template_label("machine.openshift.io/os-id", "Windows")
    }

    pub fn replicas(mut self, replicas: i64) -> Self {
        self.value["spec"]["replicas"] = json!(replicas);
        self
    }

    pub fn user_data(self, secret: &str) -> Self {
        self.spec_field(&["userDataSecret"], json!({ "name": secret }))
    }

    /// Replaces the whole `providerSpec.value`.
    pub fn provider_spec(mut self, value: Value) -> Self {
        let path = [self.template, &["spec", "providerSpec", "value"]].concat();
        set(&mut self.value, &path, value);
        self
    }

    /// Sets a field inside `providerSpec.value`.
    pub fn spec_field(mut self, path: &[&str], value: Value) -> Self {
        let path = [self.template, &["spec", "providerSpec", "value"], path].concat();
        set(&mut self.value, &path, value);
        self
    }

    pub fn remove_spec_field(self, key: &str) -> Self {
        let template = self.template;
        self.edit(|value| {
            let mut at = value;
            for token in [template, &["spec", "providerSpec", "value"]].concat() {
                at = &mut at[token];
            }
            at.as_object_mut().expect("an object").remove(key);
        })
    }

    /// Any other change, for shapes no installer writes.
    pub fn edit(mut self, change: impl FnOnce(&mut Value)) -> Self {
        change(&mut self.value);
        self
    }

    pub fn build(self) -> Value {
        self.value
    }

    /// The object as the planner receives it from the API server (with a `resourceVersion` and
    /// a `generation`): typed, or the reason it could not be read.
    pub fn served(mut self) -> Result<K, Malformed> {
        self.value["metadata"]["resourceVersion"] = json!("73519");
        self.value["metadata"]["generation"] = json!(2);
        let meta = |key: &str| {
            self.value["metadata"][key]
                .as_str()
                .unwrap_or_default()
                .into()
        };
        serde_json::from_value(self.value.clone()).map_err(|e| Malformed {
            namespace: meta("namespace"),
            name: meta("name"),
            error: e.to_string(),
        })
    }
}

/// Sets `doc[path]`, creating objects along the way (keys may contain `/`, unlike pointers).
fn set(doc: &mut Value, path: &[&str], value: Value) {
    let (last, parents) = path.split_last().expect("a non-empty path");
    let mut at = doc;
    for token in parents {
        if !at.get(*token).is_some_and(Value::is_object) {
            at[*token] = json!({});
        }
        at = &mut at[*token];
    }
    at[*last] = value;
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

/// The changes the controller recorded on a MachineSet (its history annotation), oldest first.
pub fn history_of(ms: &Value) -> Vec<Value> {
    ms.pointer("/metadata/annotations/boot-image-controller.io~1history")
        .and_then(Value::as_str)
        .map(|text| serde_json::from_str(text).expect("the history annotation is JSON"))
        .unwrap_or_default()
}

pub fn annotation_of<'a>(ms: &'a Value, key: &str) -> Option<&'a str> {
    ms["metadata"]["annotations"][key].as_str()
}

pub fn replicas_of(ms: &Value) -> i64 {
    ms["spec"]["replicas"].as_i64().unwrap_or_default()
}

// ---------------------------------------------------------------------------------------------
// ControlPlaneMachineSets, selection of several kinds, and manifests for `plan`.

/// Where a MachineSet and a ControlPlaneMachineSet keep their provider spec.
pub const MACHINE_SET_PROVIDER_SPEC: &str = "/spec/template/spec/providerSpec/value";
pub const CONTROL_PLANE_PROVIDER_SPEC: &str =
    "/spec/template/machines_v1beta1_machine_openshift_io/spec/providerSpec/value";

/// `managedBootImages` with one `machineManagers` entry per `(resource, mode)`, e.g.
/// `[("machinesets", "All"), ("controlplanemachinesets", "All")]`.
pub fn machine_managers(entries: &[(&str, &str)]) -> Value {
    let managers: Vec<Value> = entries
        .iter()
        .map(|(resource, mode)| machine_manager(resource, json!({ "mode": mode })))
        .collect();
    json!({ "machineManagers": managers })
}

/// The AWS ControlPlaneMachineSet `cluster` in the shape the installer writes (Active, three
/// replicas, one failure domain per zone), on `ami` with the installer's `master-user-data`.
/// It passes the validation of the real upstream CRD.
pub fn control_plane_machine_set(ns: &str, ami: &str) -> Value {
    control_plane_machine_set_builder(ns, ami).build()
}

/// [`control_plane_machine_set`] under construction.
pub fn control_plane_machine_set_builder(ns: &str, ami: &str) -> ControlPlaneMachineSetBuilder {
    let labels = json!({
        "machine.openshift.io/cluster-api-cluster": "demo-x7k2p",
        "machine.openshift.io/cluster-api-machine-role": "master",
        "machine.openshift.io/cluster-api-machine-type": "master"
    });
    let value = json!({
        "apiVersion": "machine.openshift.io/v1", "kind": "ControlPlaneMachineSet",
        "metadata": {"name": "cluster", "namespace": ns},
        "spec": {
            "replicas": 3,
            "state": "Active",
            "strategy": {"type": "RollingUpdate"},
            "selector": {"matchLabels": labels},
            "template": {
                "machineType": "machines_v1beta1_machine_openshift_io",
                "machines_v1beta1_machine_openshift_io": {
                    "failureDomains": {"platform": "AWS", "aws": [
                        {"placement": {"availabilityZone": "us-east-1a"}, "subnet": {"type": "Filters", "filters": [{"name": "tag:Name", "values": ["demo-x7k2p-subnet-private-us-east-1a"]}]}},
                        {"placement": {"availabilityZone": "us-east-1b"}, "subnet": {"type": "Filters", "filters": [{"name": "tag:Name", "values": ["demo-x7k2p-subnet-private-us-east-1b"]}]}}
                    ]},
                    "metadata": {"labels": labels},
                    "spec": {
                        "lifecycleHooks": {},
                        "metadata": {},
                        "providerSpec": {"value": {
                            "apiVersion": "machine.openshift.io/v1beta1", "kind": "AWSMachineProviderConfig",
                            "ami": {"id": ami},
                            "blockDevices": [{"ebs": {"encrypted": true, "iops": 0, "kmsKey": {"arn": ""}, "volumeSize": 120, "volumeType": "gp3"}}],
                            "credentialsSecret": {"name": "aws-cloud-credentials"},
                            "deviceIndex": 0,
                            "iamInstanceProfile": {"id": "demo-x7k2p-master-profile"},
                            "instanceType": "m6i.xlarge",
                            "loadBalancers": [{"name": "demo-x7k2p-int", "type": "network"}, {"name": "demo-x7k2p-ext", "type": "network"}],
                            "metadata": {"creationTimestamp": null},
                            "placement": {"region": "us-east-1"},
                            "securityGroups": [{"filters": [{"name": "tag:Name", "values": ["demo-x7k2p-master-sg"]}]}],
                            "tags": [{"name": "kubernetes.io/cluster/demo-x7k2p", "value": "owned"}],
                            "userDataSecret": {"name": "master-user-data"}
                        }}
                    }
                }
            }
        }
    });
    MachineResourceBuilder {
        value,
        template: CONTROL_PLANE_TEMPLATE,
        kind: PhantomData,
    }
}

/// The provider spec of a MachineSet or ControlPlaneMachineSet.
pub fn provider_spec_of(object: &Value) -> &Value {
    let base = match object["kind"].as_str() {
        Some("ControlPlaneMachineSet") => CONTROL_PLANE_PROVIDER_SPEC,
        _ => MACHINE_SET_PROVIDER_SPEC,
    };
    object.pointer(base).unwrap_or(&Value::Null)
}

/// Objects read from a test's simulated cluster, as `plan --manifests` expects them: the
/// singletons under their real names (`cluster`, `version`) and the golden ConfigMap in
/// `openshift-machine-config-operator`. Returns a `kind: List`.
pub fn as_cluster_manifests(objects: Vec<Value>) -> Value {
    let items: Vec<Value> = objects
        .into_iter()
        .map(|mut object| {
            let kind = object["kind"].as_str().unwrap_or_default().to_string();
            let name = &mut object["metadata"]["name"];
            match kind.as_str() {
                "MachineConfiguration" | "Infrastructure" => *name = json!("cluster"),
                "ClusterVersion" => *name = json!("version"),
                "ConfigMap" if *name == "coreos-bootimages" => {
                    object["metadata"]["namespace"] = json!("openshift-machine-config-operator")
                }
                _ => {}
            }
            object
        })
        .collect();
    json!({"apiVersion": "v1", "kind": "List", "items": items})
}
