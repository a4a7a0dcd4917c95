//! Step 2 of a pass: the planner decides on the objects the pass covers.

use std::collections::BTreeSet;
use std::sync::Arc;

use kube::Resource;

use super::lenient::Lenient;
use super::observe::Observation;
use crate::golden_stream::GoldenConfig;
use crate::machine_kind::{MachineKind, MachineObject};
use crate::plan::selection::Selected;
use crate::plan::shared_stubs::{hold_shared_upgrades, users_of};
use crate::plan::{Blocked, Decision, ObjectKey, Planner};

/// What a pass covers: everything, or the objects whose watch events arrived.
#[derive(Default)]
pub(super) struct Scope {
    pub all: bool,
    pub keys: BTreeSet<ObjectKey>,
}

impl Scope {
    pub fn everything() -> Self {
        Scope {
            all: true,
            keys: BTreeSet::new(),
        }
    }

    pub fn is_empty(&self) -> bool {
        !self.all && self.keys.is_empty()
    }

    fn covers(&self, key: &ObjectKey) -> bool {
        self.all || self.keys.contains(key)
    }
}

/// What reporting needs to know of a pass besides its decisions.
pub(super) struct PassFacts {
    /// Objects the pass covered that no longer exist: their results are dropped.
    pub gone: Vec<ObjectKey>,
    /// Every object that exists, when the pass covered everything: results of others go.
    pub live: Option<BTreeSet<ObjectKey>>,
    pub blocked: Option<Blocked>,
    pub golden: Option<Arc<GoldenConfig>>,
    /// The effective selection mode of each kind.
    pub selections: Vec<(MachineKind, Selected)>,
}

/// Decides every object the pass covers, kind by kind, each kind in the order its store lists
/// them; and what reporting needs to know besides.
pub(super) fn decide(
    observed: &Observation,
    scope: &Scope,
    planner: &Planner<'_>,
) -> (Vec<Decision>, PassFacts) {
    let (mut decisions, mut live) = decide_scope(observed, scope, planner);
    // A stub upgrade waits on every object that names the stub (`shared_stubs::hold_shared_upgrades`):
    // a pass that covers only some of them decides them all. Only clusters installed before 4.6
    // have spec-2 stubs, and only until they are upgraded.
    let everything = Scope::everything();
    let scope = if !scope.all && decisions.iter().any(|d| d.stub_upgrade.is_some()) {
        (decisions, live) = decide_scope(observed, &everything, planner);
        &everything
    } else {
        scope
    };
    let users = users_of(
        observed.machine_sets.iter().filter_map(|o| o.kept().ok()),
        observed
            .control_plane_machine_sets
            .iter()
            .filter_map(|o| o.kept().ok()),
    );
    hold_shared_upgrades(&mut decisions, &users);
    let gone = (scope.keys.iter())
        .filter(|key| !live.contains(*key))
        .cloned()
        .collect();
    let facts = PassFacts {
        gone,
        live: scope.all.then_some(live),
        blocked: planner.blocked().cloned(),
        golden: planner.golden().cloned(),
        selections: planner.selections(),
    };
    (decisions, facts)
}

/// The decisions on the objects `scope` covers, and every object that exists.
fn decide_scope(
    observed: &Observation,
    scope: &Scope,
    planner: &Planner<'_>,
) -> (Vec<Decision>, BTreeSet<ObjectKey>) {
    let mut decisions = Vec::new();
    let mut live = BTreeSet::new();
    decide_kind(
        planner,
        scope,
        &observed.machine_sets,
        &mut decisions,
        &mut live,
    );
    decide_kind(
        planner,
        scope,
        &observed.control_plane_machine_sets,
        &mut decisions,
        &mut live,
    );
    decide_kind(
        planner,
        scope,
        &observed.cluster_api_machine_sets,
        &mut decisions,
        &mut live,
    );
    decide_kind(
        planner,
        scope,
        &observed.cluster_api_machine_deployments,
        &mut decisions,
        &mut live,
    );
    (decisions, live)
}

fn decide_kind<M>(
    planner: &Planner<'_>,
    scope: &Scope,
    objects: &[Arc<Lenient<M>>],
    decisions: &mut Vec<Decision>,
    live: &mut BTreeSet<ObjectKey>,
) where
    M: MachineObject + Resource<DynamicType = ()> + Clone,
{
    for object in objects {
        let key = ObjectKey {
            kind: M::KIND,
            name: object.meta().name.clone().unwrap_or_default(),
        };
        if scope.covers(&key) {
            decisions.push(planner.decide(object.kept()));
        }
        live.insert(key);
    }
}

#[cfg(test)]
mod tests {
    use serde_json::Value;

    use super::*;
    use crate::names::MACHINE_API_NAMESPACE;
    use crate::plan::Options;
    use crate::testkit::objects::{self, control_plane_machine_set};
    use crate::testkit::snapshot::{ClusterChanges, cluster_snapshot};
    use crate::testkit::streams::{self, AMI_420_US_EAST_1, AMI_421_US_EAST_1};

    fn stored<K>(object: Value) -> Arc<Lenient<K>>
    where
        Lenient<K>: serde::de::DeserializeOwned,
    {
        Arc::new(serde_json::from_str(&object.to_string()).unwrap())
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
            stored(object)
        };
        Observation {
            snapshot,
            machine_sets: (0..7).map(machine_set).collect(),
            control_plane_machine_sets: vec![stored(control_plane_machine_set(
                ns,
                AMI_420_US_EAST_1,
            ))],
            cluster_api_machine_sets: Vec::new(),
            cluster_api_machine_deployments: Vec::new(),
        }
    }

    /// The decisions of one pass, and what reporting learns of the objects.
    fn decide_all(
        observed: &Observation,
        scope: &Scope,
        options: &Options,
    ) -> (Vec<Decision>, Vec<ObjectKey>, Option<BTreeSet<ObjectKey>>) {
        let planner = Planner::new(&observed.snapshot, options);
        let (decisions, facts) = decide(observed, scope, &planner);
        (decisions, facts.gone, facts.live)
    }

    #[test]
    fn a_pass_decides_what_its_scope_covers_and_finds_what_is_gone() {
        let observed = observation();
        let key = |kind, name: &str| ObjectKey {
            kind,
            name: name.to_string(),
        };
        let some = Scope {
            all: false,
            keys: [
                key(MachineKind::MachineSet, "worker-1"),
                key(MachineKind::MachineSet, "worker-4"),
                key(MachineKind::MachineSet, "deleted-meanwhile"),
                key(MachineKind::ControlPlaneMachineSet, "cluster"),
            ]
            .into(),
        };
        let options = Options::default();
        for scope in [Scope::everything(), some] {
            let (decisions, gone, live) = decide_all(&observed, &scope, &options);
            let expected = if scope.all { 8 } else { 3 };
            assert_eq!(decisions.len(), expected);
            let actions: BTreeSet<_> = decisions.iter().map(|d| d.action).collect();
            assert!(actions.len() > 1, "a mix of actions: {actions:?}");
            let all_keys: BTreeSet<_> = (observed
                .machine_sets
                .iter()
                .map(|ms| key(MachineKind::MachineSet, ms.meta().name.as_deref().unwrap())))
            .chain([key(MachineKind::ControlPlaneMachineSet, "cluster")])
            .collect();
            assert_eq!(live, scope.all.then_some(all_keys));
            let deleted = key(MachineKind::MachineSet, "deleted-meanwhile");
            assert_eq!(
                gone,
                (!scope.all)
                    .then_some(deleted)
                    .into_iter()
                    .collect::<Vec<_>>()
            );
        }
    }

    /// A stub upgrade waits on every object that names the stub: a pass covering one of them
    /// decides them all, and holds the upgrade while one keeps its image.
    #[test]
    fn a_pass_with_a_stub_upgrade_decides_every_object_naming_the_stub() {
        let mut observed = observation();
        let ns = MACHINE_API_NAMESPACE;
        let spec2 = cluster_snapshot("AWS", "4.21.0", "{}")
            .stub_secret(ns, "worker-user-data", "2.2.0")
            .build();
        let key = (ns.to_string(), "worker-user-data".to_string());
        let secret = spec2.secrets[&key].clone();
        observed.snapshot.secrets.insert(key, secret);
        let one = Scope {
            all: false,
            keys: [ObjectKey {
                kind: MachineKind::MachineSet,
                name: "worker-1".into(),
            }]
            .into(),
        };
        let (decisions, _, live) = decide_all(&observed, &one, &Options::default());
        assert_eq!(decisions.len(), 8, "widened to every object");
        assert!(live.is_some());
        let moving: Vec<_> = (decisions.iter())
            .filter(|d| d.stub_upgrade.is_some())
            .map(|d| d.name.as_str())
            .collect();
        assert_eq!(moving, ["worker-1", "worker-2", "worker-5"]);

        // An opted-out one on the same stub holds them all.
        let pinned = objects::machine_set(ns, "pinned").opted_out().build();
        observed.machine_sets.push(stored(pinned));
        let (decisions, _, _) = decide_all(&observed, &one, &Options::default());
        let held = |d: &&Decision| d.reason == crate::reason::Reason::StubSecretShared;
        assert_eq!(decisions.iter().filter(held).count(), 3);
        assert!(decisions.iter().all(|d| d.stub_upgrade.is_none()));
    }
}
