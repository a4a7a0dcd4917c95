//! Step 1 of a pass: the stores become one snapshot, the planner's input.

use std::collections::{BTreeMap, BTreeSet};

use super::boot_watches::BootStores;
use super::secrets::SecretWatches;
use super::watches::Stores;
use crate::api::{Infrastructure, MachineConfiguration};
use crate::known_images::KnownImages;
use crate::machine_kind::MachineKind;
use crate::plan::boot_evidence::Boots;
use crate::plan::selection::{Declared, Selection, release_of};
use crate::plan::{ClusterSnapshot, MachineResource, stub};
use crate::platform::Platform;

/// What a pass sees: the cluster-wide inputs and every machine resource.
pub(super) struct Observation {
    pub snapshot: ClusterSnapshot,
    pub machines: Vec<MachineResource>,
}

/// Reads the stores, and first starts watching every stub secret a selected machine resource
/// names, so that the snapshot holds the secrets the planner checks.
pub(super) async fn observe(
    stores: &Stores,
    boots: &BootStores,
    secrets: &mut SecretWatches,
    cluster_api_secrets: &mut SecretWatches,
    machine_configuration_name: &str,
    mut known_images: KnownImages,
) -> Observation {
    let machines = stores.machines();
    let machine_configuration = stores.machine_configuration(machine_configuration_name);
    let infrastructure = stores.infrastructure();
    // Only objects the planner may update need their stub secret checked: watching the others'
    // would cost a watch each (and RBAC for secrets nothing uses).
    let selected = selections(
        stores,
        machine_configuration.as_ref(),
        infrastructure.as_ref(),
    );
    let wanted = secrets_to_verify(&machines, &selected, false);
    let cluster_api_wanted = secrets_to_verify(&machines, &selected, true);
    // Both namespaces' first lists are awaited together.
    tokio::join!(
        secrets.ensure(&wanted),
        cluster_api_secrets.ensure(&cluster_api_wanted)
    );
    let mut all_secrets = secrets.snapshot();
    all_secrets.extend(cluster_api_secrets.snapshot());

    known_images.merge(&stores.remembered_images());
    let snapshot = ClusterSnapshot {
        machine_configuration,
        infrastructure,
        cluster_version: stores.cluster_version(),
        cluster_version_served: stores.cluster_version_served(),
        golden: stores.golden(),
        secrets: all_secrets,
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
    Observation { snapshot, machines }
}

/// How the MachineConfiguration selects each kind on the cluster's platform and release, as the
/// planner reads it; nothing without a MachineConfiguration or a platform.
fn selections(
    stores: &Stores,
    machine_configuration: Option<&MachineConfiguration>,
    infrastructure: Option<&Infrastructure>,
) -> BTreeMap<MachineKind, Selection> {
    let platform = infrastructure
        .and_then(|i| i.status.as_ref()?.platform_status.as_ref())
        .map(Platform::from_status);
    let declared = machine_configuration.map(Declared::read);
    let release = (stores.cluster_version().as_ref())
        .and_then(|cv| cv.status.as_ref())
        .and_then(release_of);
    let selection = |kind| match (&declared, &platform) {
        (Some(declared), Some(platform)) => {
            Selection::for_kind(declared, kind, platform, release).0
        }
        _ => Selection::None,
    };
    (MachineKind::ALL.into_iter())
        .map(|kind| (kind, selection(kind)))
        .collect()
}

/// The stub secrets the readable objects of the Cluster API namespace (`cluster_api`) or of the
/// Machine API's that their kind's selection selects name.
fn secrets_to_verify(
    machines: &[MachineResource],
    selected: &BTreeMap<MachineKind, Selection>,
    cluster_api: bool,
) -> BTreeSet<String> {
    (machines.iter())
        .filter(|m| m.kind.is_cluster_api() == cluster_api)
        .filter_map(|m| Some((m.readable()?, selected.get(&m.kind)?)))
        .filter(|(o, selection)| selection.selects(o.meta().labels.as_ref()) == Ok(true))
        .filter_map(|(o, _)| {
            let in_provider_spec = || stub::kept_name(o.provider_spec()?);
            (o.data_secret_name()).or_else(in_provider_spec)
        })
        .map(str::to_string)
        .collect()
}
