//! Step 1 of a pass: the stores become one snapshot, the planner's input.

use std::collections::{BTreeMap, BTreeSet};

use super::boot_watches::BootStores;
use super::secrets::SecretWatches;
use super::watches::Stores;
use crate::known_images::KnownImages;
use crate::machine_kind::MachineKind;
use crate::plan::boot_evidence::Boots;
use crate::plan::selection::{Origin, Selection};
use crate::plan::{self, ClusterSnapshot, MachineResource, stub};

/// What a pass sees: the cluster-wide inputs and every machine resource.
pub(super) struct Observation {
    pub snapshot: ClusterSnapshot,
    pub machines: Vec<MachineResource>,
}

/// Reads the stores, and starts watching every stub secret a selected machine resource names,
/// so that the snapshot holds the secrets the planner checks.
pub(super) async fn observe(
    stores: &Stores,
    boots: &BootStores,
    secrets: &mut SecretWatches,
    cluster_api_secrets: &mut SecretWatches,
    mut known_images: KnownImages,
) -> Observation {
    let machines = stores.machines();
    known_images.extend(stores.remembered_images().iter().cloned());
    let mut snapshot = ClusterSnapshot {
        machine_configuration: stores.machine_configuration(),
        infrastructure: stores.infrastructure(),
        cluster_version: stores.cluster_version(),
        cluster_version_served: stores.cluster_version_served(),
        golden: stores.golden(),
        // Filled in below, once the secrets the selection needs are watched.
        secrets: Default::default(),
        known_images,
        control_plane_nodes: boots.nodes().control_plane(),
        // Filled in by the pass from the EC2 lookups (`controller/ami_lookups.rs`).
        ec2: Default::default(),
        // Filled in by the pass, on the leader, from the template imports
        // (`controller/template_imports.rs`); a follower's vSphere decisions say what they would
        // import.
        vcenter: Default::default(),
        infrastructure_templates: stores.infrastructure_templates(),
        boots: Boots {
            machines: boots.machines(),
            nodes: boots.nodes().readiness(),
            health_checks: boots.health_checks(),
        },
    };
    // Only objects the planner may update need their stub secret checked: watching the others'
    // would cost a watch each (and RBAC for secrets nothing uses).
    let selected = plan::selections(&snapshot);
    let wanted = secrets_to_verify(&machines, &selected, false);
    let cluster_api_wanted = secrets_to_verify(&machines, &selected, true);
    // Both namespaces' first lists are awaited together.
    tokio::join!(
        secrets.ensure(&wanted),
        cluster_api_secrets.ensure(&cluster_api_wanted)
    );
    snapshot.secrets = secrets.snapshot();
    snapshot.secrets.extend(cluster_api_secrets.snapshot());
    Observation { snapshot, machines }
}

/// The stub secrets the readable objects of the Cluster API namespace (`cluster_api`) or of the
/// Machine API's that their kind's selection selects name.
fn secrets_to_verify(
    machines: &[MachineResource],
    selected: &BTreeMap<MachineKind, (Selection, Origin)>,
    cluster_api: bool,
) -> BTreeSet<String> {
    (machines.iter())
        .filter(|m| m.kind.is_cluster_api() == cluster_api)
        .filter_map(|m| Some((m.readable()?, selected.get(&m.kind)?)))
        .filter(|(o, (selection, _))| selection.selects(o.meta().labels.as_ref()) == Ok(true))
        .filter_map(|(o, _)| {
            let in_provider_spec = || stub::kept_name(o.provider_spec()?);
            (o.data_secret_name()).or_else(in_provider_spec)
        })
        .map(str::to_string)
        .collect()
}

#[cfg(test)]
mod tests {
    use serde_json::Value;

    use super::*;
    use crate::api::{ControlPlaneMachineSet, MachineSet};
    use crate::controller::lenient::Lenient;
    use crate::machine_kind::MachineObject;
    use crate::names::MACHINE_API_NAMESPACE;
    use crate::plan::MachineResource;
    use crate::plan::{Decision, Options, Planner};
    use crate::testkit::objects::{self, control_plane_machine_set};
    use crate::testkit::snapshot::{ClusterChanges, cluster_snapshot};
    use crate::testkit::streams::{self, AMI_420_US_EAST_1, AMI_421_US_EAST_1};

    /// A machine resource as a watch stores it.
    fn stored<K: MachineObject + 'static>(kind: MachineKind, object: Value) -> MachineResource
    where
        Lenient<K>: serde::de::DeserializeOwned,
    {
        let stored: Lenient<K> = serde_json::from_str(&object.to_string()).unwrap();
        stored.listed(kind)
    }

    /// Seven outdated, current and unreadable MachineSets and a ControlPlaneMachineSet.
    fn observation() -> Observation {
        let ns = MACHINE_API_NAMESPACE;
        let snapshot = cluster_snapshot(
            "AWS",
            "4.21.0",
            &streams::stream_421_all_platforms().to_string(),
        )
        .stub_secret(ns, "worker-user-data", "3.2.0")
        .stub_secret(ns, "worker-user-data-managed", "3.2.0")
        .stub_secret(ns, "master-user-data-managed", "3.2.0")
        .knowing(&[AMI_420_US_EAST_1])
        .build();
        let machine_set = |i: usize| {
            let name = format!("worker-{i}");
            let ms = objects::machine_set(ns, &name);
            let ms = if i.is_multiple_of(3) {
                ms.ami(AMI_421_US_EAST_1)
                    .user_data("worker-user-data-managed")
            } else {
                ms.ami(AMI_420_US_EAST_1)
            };
            let mut object = ms.build();
            if i == 4 {
                object["spec"]["template"]["spec"]["providerSpec"] = "not an object".into();
            }
            stored::<MachineSet>(MachineKind::MachineSet, object)
        };
        let control_plane = control_plane_machine_set(ns, AMI_420_US_EAST_1);
        let control_plane =
            stored::<ControlPlaneMachineSet>(MachineKind::ControlPlaneMachineSet, control_plane);
        Observation {
            snapshot,
            machines: (0..7).map(machine_set).chain([control_plane]).collect(),
        }
    }

    /// The decisions of one pass.
    fn decide_all(observed: &Observation, options: &Options) -> Vec<Decision> {
        let planner = Planner::new(&observed.snapshot, options);
        planner.decide_all(&observed.machines)
    }

    #[test]
    fn a_pass_decides_every_object() {
        let observed = observation();
        let decisions = decide_all(&observed, &Options::default());
        let names: Vec<_> = decisions.iter().map(|d| d.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "worker-0", "worker-1", "worker-2", "worker-3", "worker-4", "worker-5", "worker-6",
                "cluster"
            ]
        );
        let actions: std::collections::BTreeSet<_> = decisions.iter().map(|d| d.action).collect();
        assert!(actions.len() > 1, "a mix of actions: {actions:?}");
    }

    /// A stub upgrade waits on every object that names the stub, and is held while one keeps
    /// its image.
    #[test]
    fn a_stub_upgrade_is_held_while_an_object_naming_the_stub_keeps_its_image() {
        let mut observed = observation();
        let ns = MACHINE_API_NAMESPACE;
        let spec2 = cluster_snapshot("AWS", "4.21.0", "{}")
            .stub_secret(ns, "worker-user-data", "2.2.0")
            .build();
        let key = (ns.to_string(), "worker-user-data".to_string());
        let secret = spec2.secrets[&key].clone();
        observed.snapshot.secrets.insert(key, secret);
        let decisions = decide_all(&observed, &Options::default());
        let moving: Vec<_> = (decisions.iter())
            .filter(|d| d.stub_upgrade.is_some())
            .map(|d| d.name.as_str())
            .collect();
        assert_eq!(moving, ["worker-1", "worker-2", "worker-5"]);

        // An opted-out one on the same stub holds them all.
        let pinned = objects::machine_set(ns, "pinned").opted_out().build();
        (observed.machines).insert(0, stored::<MachineSet>(MachineKind::MachineSet, pinned));
        let decisions = decide_all(&observed, &Options::default());
        let held = |d: &&Decision| d.reason == crate::reason::Reason::StubSecretShared;
        assert_eq!(decisions.iter().filter(held).count(), 3);
        assert!(decisions.iter().all(|d| d.stub_upgrade.is_none()));
    }
}
