//! Provider specs (`providerSpec.value`) of each platform in the shape the installer writes
//! them, with fields the controller never reads (a `null` among them) that every patch must
//! leave alone.

use serde_json::{Value, json};

/// The installer's infrastructure name of every kit cluster; cloud resources are named after it.
pub const INFRASTRUCTURE_NAME: &str = "demo-x7k2p";

/// An AWS provider spec of a `role` (`worker`, `master`) machine on `ami` in `region`, booting
/// from the stub secret `secret`.
pub fn aws(ami: &str, region: &str, secret: &str, role: &str) -> Value {
    let infra = INFRASTRUCTURE_NAME;
    json!({
        "ami": {"id": ami},
        "apiVersion": "machine.openshift.io/v1beta1",
        "blockDevices": [{"ebs": {
            "encrypted": true, "iops": 0, "kmsKey": {"arn": ""}, "volumeSize": 120, "volumeType": "gp3"
        }}],
        "credentialsSecret": {"name": "aws-cloud-credentials"},
        "deviceIndex": 0,
        "iamInstanceProfile": {"id": format!("{infra}-{role}-profile")},
        "instanceType": "m6i.xlarge",
        "kind": "AWSMachineProviderConfig",
        "metadata": {"creationTimestamp": null},
        "placement": {"availabilityZone": format!("{region}a"), "region": region},
        "securityGroups": [{"filters": [{"name": "tag:Name", "values": [format!("{infra}-node")]}]}],
        "subnet": {"filters": [{"name": "tag:Name", "values": [format!("{infra}-subnet-private-{region}a")]}]},
        "tags": [{"name": format!("kubernetes.io/cluster/{infra}"), "value": "owned"}],
        "userDataSecret": {"name": secret}
    })
}

/// A GCP worker provider spec with `disks` (see [`gcp_boot_disk`] and [`gcp_data_disk`]).
pub fn gcp(disks: Value) -> Value {
    let infra = INFRASTRUCTURE_NAME;
    json!({
        "apiVersion": "machine.openshift.io/v1beta1",
        "kind": "GCPMachineProviderSpec",
        "canIPForward": false,
        "credentialsSecret": {"name": "gcp-cloud-credentials"},
        "deletionProtection": false,
        "disks": disks,
        "machineType": "n2-standard-4",
        "networkInterfaces": [{"network": format!("{infra}-network"), "subnetwork": format!("{infra}-worker-subnet")}],
        "projectID": "openshift-gce-devel",
        "region": "us-east1",
        "serviceAccounts": [{"email": format!("{infra}-w@openshift-gce-devel.iam.gserviceaccount.com"), "scopes": ["https://www.googleapis.com/auth/cloud-platform"]}],
        "tags": [format!("{infra}-worker")],
        "userDataSecret": {"name": "worker-user-data"},
        "zone": "us-east1-b"
    })
}

pub fn gcp_boot_disk(image: &str) -> Value {
    json!({"autoDelete": true, "boot": true, "image": image, "labels": null, "sizeGb": 128, "type": "pd-ssd"})
}

/// A disk that is not booted from: the controller never touches it, whatever its image.
pub fn gcp_data_disk(image: &str) -> Value {
    json!({"autoDelete": true, "boot": false, "image": image, "sizeGb": 500, "type": "pd-standard"})
}

/// An Azure worker provider spec booting `image` (see [`azure_marketplace`]).
pub fn azure(image: Value) -> Value {
    json!({
        "apiVersion": "machine.openshift.io/v1beta1",
        "kind": "AzureMachineProviderSpec",
        "image": image,
        "location": "eastus",
        "managedIdentity": format!("{INFRASTRUCTURE_NAME}-identity"),
        "osDisk": {"diskSizeGB": 128, "managedDisk": {"storageAccountType": "Premium_LRS"}, "osType": "Linux"},
        "securityProfile": null,
        "userDataSecret": {"name": "worker-user-data"},
        "vmSize": "Standard_D4s_v3"
    })
}

/// An Azure marketplace image reference without a purchase plan.
pub fn azure_marketplace(publisher: &str, offer: &str, sku: &str, version: &str) -> Value {
    json!({
        "offer": offer,
        "publisher": publisher,
        "resourceID": "",
        "sku": sku,
        "version": version,
        "type": "MarketplaceNoPlan"
    })
}

/// An image the installer uploaded (a resource id, no marketplace fields).
pub fn azure_upload(resource_id: &str) -> Value {
    json!({"offer": "", "publisher": "", "resourceID": resource_id, "sku": "", "version": ""})
}

/// The vCenter, datacenter, datastore, resource pool and folder of the kit's one vSphere failure
/// domain (`us-east-1a`).
pub const VSPHERE_SERVER: &str = "vcenter.example.com";
pub const VSPHERE_FAILURE_DOMAIN: &str = "us-east-1a";

/// A vSphere worker provider spec cloning `template`, placed in the kit's failure domain.
pub fn vsphere(template: &str) -> Value {
    json!({
        "apiVersion": "machine.openshift.io/v1beta1",
        "credentialsSecret": {"name": "vsphere-cloud-credentials"},
        "diskGiB": 120,
        "kind": "VSphereMachineProviderSpec",
        "memoryMiB": 16384,
        "metadata": {"creationTimestamp": null},
        "network": {"devices": [{"networkName": "VM Network"}]},
        "numCPUs": 4,
        "numCoresPerSocket": 4,
        "snapshot": "",
        "template": template,
        "userDataSecret": {"name": "worker-user-data"},
        "workspace": {
            "datacenter": "dc1",
            "datastore": "datastore1",
            "folder": format!("/dc1/vm/{INFRASTRUCTURE_NAME}"),
            "resourcePool": "/dc1/host/cluster1/Resources",
            "server": VSPHERE_SERVER
        }
    })
}

/// `Infrastructure.spec.platformSpec` of a vSphere cluster with the kit's one failure domain.
pub fn vsphere_platform_spec() -> Value {
    json!({
        "type": "VSphere",
        "vsphere": {
            "vcenters": [{"server": VSPHERE_SERVER, "port": 443, "datacenters": ["dc1"]}],
            "failureDomains": [{
                "name": VSPHERE_FAILURE_DOMAIN,
                "region": "us-east",
                "zone": "us-east-1a",
                "server": VSPHERE_SERVER,
                "topology": {
                    "datacenter": "dc1",
                    "computeCluster": "/dc1/host/cluster1",
                    "networks": ["VM Network"],
                    "datastore": "datastore1",
                    "resourcePool": "/dc1/host/cluster1/Resources/",
                    "folder": format!("/dc1/vm/{INFRASTRUCTURE_NAME}")
                }
            }]
        }
    })
}
