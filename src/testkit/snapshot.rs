//! A cluster as the planner is handed it ([`ClusterSnapshot`]), made of the kit's objects so
//! that a planner test starts from the objects the integration tests apply to a real API server.

use std::sync::Arc;

use serde::de::DeserializeOwned;
use serde_json::Value;

use super::objects;
use crate::names::{GOLDEN_CONFIGMAP_NAMESPACE, INFRASTRUCTURE_NAME, MACHINE_CONFIGURATION_NAME};
use crate::plan::ClusterSnapshot;

pub struct ClusterSnapshotBuilder {
    snapshot: ClusterSnapshot,
}

/// A cluster on `platform` whose update to `release` is complete, with `stream` golden for it,
/// the MachineConfiguration `cluster` without `managedBootImages` (the platform default), the
/// kit's amd64 control-plane Nodes, and no stub secrets, known images or templates yet.
pub fn cluster_snapshot(platform: &str, release: &str, stream: &str) -> ClusterSnapshotBuilder {
    let nodes = objects::control_plane_nodes().into_iter().map(|node| {
        let name = node["metadata"]["name"].as_str().unwrap().to_string();
        let arch = node["metadata"]["labels"]["kubernetes.io/arch"].as_str();
        (name, arch.map(String::from))
    });
    let golden = objects::golden_config_map(GOLDEN_CONFIGMAP_NAMESPACE, release, stream);
    ClusterSnapshotBuilder {
        snapshot: ClusterSnapshot {
            machine_configuration: Some(typed(objects::machine_configuration(
                MACHINE_CONFIGURATION_NAME,
                None,
            ))),
            infrastructure: Some(typed(objects::infrastructure(
                INFRASTRUCTURE_NAME,
                platform,
            ))),
            cluster_version: Some(typed(objects::cluster_version(
                "version",
                release,
                "Completed",
            ))),
            cluster_version_served: true,
            golden: Some(typed(golden)),
            control_plane_nodes: nodes.collect(),
            ..Default::default()
        },
    }
}

impl ClusterSnapshotBuilder {
    /// The MachineConfiguration's `managedBootImages`, e.g. [`objects::machine_managers`].
    pub fn managed_boot_images(mut self, managed_boot_images: Value) -> Self {
        let configuration =
            objects::machine_configuration(MACHINE_CONFIGURATION_NAME, Some(managed_boot_images));
        self.snapshot.machine_configuration = Some(typed(configuration));
        self
    }

    /// An [`objects::stub_secret`] the planner may verify.
    pub fn stub_secret(mut self, ns: &str, name: &str, ignition_version: &str) -> Self {
        let secret = typed(objects::stub_secret(ns, name, ignition_version));
        (self.snapshot.secrets).insert((ns.to_string(), name.to_string()), secret);
        self
    }

    /// Adds images the lists know besides the golden stream's (earlier releases').
    pub fn knowing(mut self, images: &[&str]) -> Self {
        (self.snapshot.known_images).extend(images.iter().map(|image| image.to_string()));
        self
    }

    /// An infrastructure machine template in the Cluster API namespace.
    pub fn template(mut self, template: Value) -> Self {
        let kind = template["kind"].as_str().expect("a kind").to_string();
        let name = template["metadata"]["name"].as_str().expect("a name");
        let key = (kind, name.to_string());
        (self.snapshot.infrastructure_templates).insert(key, Arc::new(typed(template)));
        self
    }

    pub fn build(self) -> ClusterSnapshot {
        self.snapshot
    }
}

fn typed<T: DeserializeOwned>(value: Value) -> T {
    serde_json::from_value(value).expect("test object deserializes")
}
