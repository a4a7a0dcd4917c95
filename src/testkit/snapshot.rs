//! A cluster as the planner is handed it ([`ClusterSnapshot`]), made of the kit's objects so
//! that a planner test starts from the objects the integration tests apply to a real API server.

use std::sync::Arc;

use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use super::{objects, provider_specs};
use crate::facts::vcenter::{TemplateKey, TemplateState};
use crate::machine_kind::{MachineKind, MachineObject};
use crate::names::{
    GOLDEN_CONFIGMAP_NAMESPACE, INFRASTRUCTURE_NAME, MACHINE_CONFIGURATION_NAME, OPT_IN_ANNOTATION,
};
use crate::plan::{ClusterSnapshot, MachineResource, Malformed};

impl MachineResource {
    /// An object of `kind` as read, or why it could not be read.
    pub fn read<M: MachineObject + 'static>(
        kind: MachineKind,
        object: Result<M, Malformed>,
    ) -> Self {
        let object = object.map(|o| Arc::new(o) as Arc<dyn MachineObject>);
        MachineResource { kind, object }
    }
}

impl<M: MachineObject + 'static> From<M> for MachineResource {
    fn from(object: M) -> Self {
        MachineResource::read(object.kind(), Ok(object))
    }
}

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

/// Changes to a cluster, chained after [`cluster_snapshot`] or on a built snapshot, so a test
/// names the one thing its cluster does differently: `cluster.on_platform("GCP")`.
pub trait ClusterChanges: Sized {
    fn with(self, change: impl FnOnce(&mut ClusterSnapshot)) -> Self;

    fn on_platform(self, platform: &str) -> Self {
        let infrastructure = typed(objects::infrastructure(INFRASTRUCTURE_NAME, platform));
        self.with(|c| c.infrastructure = Some(infrastructure))
    }

    /// vSphere with the kit's one failure domain ([`provider_specs::vsphere_platform_spec`]).
    fn on_vsphere(self) -> Self {
        let mut infrastructure = objects::infrastructure(INFRASTRUCTURE_NAME, "VSphere");
        infrastructure["spec"]["platformSpec"] = provider_specs::vsphere_platform_spec();
        let infrastructure = typed(infrastructure);
        self.with(|c| c.infrastructure = Some(infrastructure))
    }

    /// The vCenter of the kit's failure domain was asked, and has `templates` ready to clone.
    fn vcenter_templates(self, templates: &[&str]) -> Self {
        self.with(|c| {
            c.vcenter.consulted = true;
            for name in templates {
                let key = TemplateKey {
                    server: provider_specs::VSPHERE_SERVER.into(),
                    datacenter: "dc1".into(),
                    name: name.to_string(),
                };
                c.vcenter.templates.insert(key, TemplateState::Ready);
            }
        })
    }

    /// The vCenter of the kit's failure domain was asked, and says the template `name` is RHCOS
    /// `release`.
    fn vcenter_template_release(self, name: &str, release: &str) -> Self {
        self.with(|c| {
            c.vcenter.consulted = true;
            let key = TemplateKey {
                server: provider_specs::VSPHERE_SERVER.into(),
                datacenter: "dc1".into(),
                name: name.to_string(),
            };
            let version = crate::facts::vcenter::TemplateVersion::Release(release.into());
            c.vcenter.versions.insert(key, version);
        })
    }

    /// Adds images the lists know besides the golden stream's (earlier releases').
    fn knowing(self, images: &[&str]) -> Self {
        self.with(|c| (c.known_images).extend(images.iter().map(|image| image.to_string())))
    }

    /// The MachineConfiguration's `managedBootImages.machineManagers`, declared in the spec
    /// alone (our opt-in annotation, which the planner reads first, removed).
    fn machine_managers(self, managers: Value) -> Self {
        self.not_opted_in().with(|c| {
            let mc = c
                .machine_configuration
                .as_mut()
                .expect("a MachineConfiguration");
            mc.spec.managed_boot_images = Some(typed(json!({ "machineManagers": managers })));
        })
    }

    /// The MachineConfiguration as installed: nobody declared a selection, so the release's
    /// default applies.
    fn not_opted_in(self) -> Self {
        self.with(|c| {
            let mc = c
                .machine_configuration
                .as_mut()
                .expect("a MachineConfiguration");
            if let Some(annotations) = mc.metadata.annotations.as_mut() {
                annotations.remove(OPT_IN_ANNOTATION);
            }
            mc.spec.managed_boot_images = None;
        })
    }

    fn annotate_machine_configuration(self, key: &str, value: &str) -> Self {
        self.with(|c| {
            let mc = c
                .machine_configuration
                .as_mut()
                .expect("a MachineConfiguration");
            let annotations = mc.metadata.annotations.get_or_insert_with(Default::default);
            annotations.insert(key.into(), value.into());
        })
    }

    /// The ClusterVersion of [`objects::upgraded_cluster_version`].
    fn upgraded(self, installed: &str, release: &str, state: &str) -> Self {
        let cv = objects::upgraded_cluster_version("version", installed, release, state);
        self.with(|c| c.cluster_version = Some(typed(cv)))
    }

    /// A cluster whose release payload runs every architecture (`desired.architecture: Multi`).
    fn multi_arch(self) -> Self {
        self.with(|c| {
            let status = c.cluster_version.as_mut().unwrap().status.as_mut().unwrap();
            status.desired.as_mut().unwrap().architecture = Some("Multi".into());
        })
    }

    /// Control-plane Nodes reporting `arch` in their `kubernetes.io/arch` label.
    fn control_plane_arch(self, arch: &str) -> Self {
        self.with(|c| {
            for node_arch in c.control_plane_nodes.values_mut() {
                *node_arch = Some(arch.to_string());
            }
        })
    }

    /// The golden ConfigMap carrying `stream`, for `release` (none: without `releaseVersion`).
    fn golden(self, stream: &str, release: Option<&str>) -> Self {
        let ns = GOLDEN_CONFIGMAP_NAMESPACE;
        let cm = match release {
            Some(release) => objects::golden_config_map(ns, release, stream),
            None => objects::golden_config_map_without_release(ns, stream),
        };
        self.with(|c| c.golden = Some(typed(cm)))
    }

    /// Adds to the golden ConfigMap the OS streams other than the default, under `streams`.
    fn other_os_streams(self, streams: Value) -> Self {
        self.with(|c| {
            let golden = c.golden.as_mut().expect("a golden ConfigMap");
            let data = golden.data.get_or_insert_with(Default::default);
            data.insert("streams".into(), streams.to_string());
        })
    }

    /// An [`objects::stub_secret`] the planner may verify.
    fn stub_secret(self, ns: &str, name: &str, ignition_version: &str) -> Self {
        let secret = typed(objects::stub_secret(ns, name, ignition_version));
        self.with(|c| _ = c.secrets.insert((ns.to_string(), name.to_string()), secret))
    }

    /// An [`objects::stub_secret_with_user_data`].
    fn stub_secret_with_user_data(self, ns: &str, name: &str, user_data: &str) -> Self {
        let secret = typed(objects::stub_secret_with_user_data(ns, name, user_data));
        self.with(|c| _ = c.secrets.insert((ns.to_string(), name.to_string()), secret))
    }

    fn without_secret(self, ns: &str, name: &str) -> Self {
        self.with(|c| _ = c.secrets.remove(&(ns.to_string(), name.to_string())))
    }
}

impl ClusterChanges for ClusterSnapshot {
    fn with(mut self, change: impl FnOnce(&mut ClusterSnapshot)) -> Self {
        change(&mut self);
        self
    }
}

impl ClusterChanges for ClusterSnapshotBuilder {
    fn with(mut self, change: impl FnOnce(&mut ClusterSnapshot)) -> Self {
        change(&mut self.snapshot);
        self
    }
}

fn typed<T: DeserializeOwned>(value: Value) -> T {
    serde_json::from_value(value).expect("test object deserializes")
}
