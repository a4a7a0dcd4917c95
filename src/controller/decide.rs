//! Step 2 of a pass: the planner decides on every machine resource.

use std::sync::Arc;

use super::observe::Observation;
use crate::golden_stream::GoldenConfig;
use crate::machine_kind::MachineKind;
use crate::plan::selection::Selected;
use crate::plan::{Blocked, Decision, Planner};

/// What reporting needs to know of a pass besides its decisions.
pub(super) struct PassFacts {
    pub blocked: Option<Blocked>,
    pub golden: Option<Arc<GoldenConfig>>,
    /// The effective selection mode of each kind.
    pub selections: Vec<(MachineKind, Selected)>,
}

/// Decides every object, in the order of the observed list; and what reporting needs to know
/// besides.
pub(super) fn decide(observed: &Observation, planner: &Planner<'_>) -> (Vec<Decision>, PassFacts) {
    let decisions = planner.decide_all(&observed.machines);
    let facts = PassFacts {
        blocked: planner.blocked().cloned(),
        golden: planner.golden().cloned(),
        selections: planner.selections(),
    };
    (decisions, facts)
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
    use crate::plan::Options;
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
        decide(observed, &planner).0
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
