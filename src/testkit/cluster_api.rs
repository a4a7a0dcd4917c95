//! Cluster API objects in the shapes OpenShift's cluster CAPI operator writes them
//! (`openshift-cluster-api`, one AWS machine template per MachineSet), valid against the
//! upstream v1beta2 CRDs.

use serde_json::{Value, json};

/// The Cluster API `Cluster` OpenShift creates, named after the infrastructure name.
pub const CLUSTER: &str = "demo-x7k2p";

/// An `AWSMachineTemplate` on `ami`.
pub fn aws_machine_template(ns: &str, name: &str, ami: &str) -> Value {
    json!({
        "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta2", "kind": "AWSMachineTemplate",
        "metadata": {"name": name, "namespace": ns,
                     "labels": {"machine.openshift.io/cluster-api-machineset": name}},
        "spec": {"template": {"spec": {
            "ami": {"id": ami},
            "instanceType": "m6i.xlarge",
            "iamInstanceProfile": "demo-x7k2p-worker-profile",
            "ignition": {"storageType": "UnencryptedUserData", "version": "3.4"}
        }}}
    })
}

/// A stand-alone Cluster API MachineSet booting from `template` with the bootstrap secret
/// `worker-user-data`, owned (not controlled) by the Cluster as Cluster API makes it.
pub fn machine_set(ns: &str, name: &str, template: &str) -> Value {
    let labels =
        json!({"cluster.x-k8s.io/set-name": name, "cluster.x-k8s.io/cluster-name": CLUSTER});
    json!({
        "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "MachineSet",
        "metadata": {"name": name, "namespace": ns, "labels": {"cluster.x-k8s.io/cluster-name": CLUSTER},
                     "ownerReferences": [{"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
                                          "name": CLUSTER, "uid": "0b6a3c1e-3d4f-4a43-9a51-5f7c8d9e0a1b"}]},
        "spec": {
            "clusterName": CLUSTER,
            "replicas": 1,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "clusterName": CLUSTER,
                    "bootstrap": {"dataSecretName": "worker-user-data"},
                    "infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io",
                                          "kind": "AWSMachineTemplate", "name": template}
                }
            }
        }
    })
}

/// The template name a Cluster API MachineSet points at.
pub fn template_of(machine_set: &Value) -> &str {
    machine_set
        .pointer("/spec/template/spec/infrastructureRef/name")
        .and_then(Value::as_str)
        .unwrap_or_default()
}

/// A Cluster API MachineDeployment booting from `template` (its spec has the MachineSet's
/// shape; the Cluster owns it).
pub fn machine_deployment(ns: &str, name: &str, template: &str) -> Value {
    let mut deployment = machine_set(ns, name, template);
    deployment["kind"] = json!("MachineDeployment");
    deployment
}
