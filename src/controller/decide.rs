//! Step 2 of a pass: the planner decides on the objects the pass covers.

use std::collections::BTreeSet;
use std::sync::Arc;

use kube::Resource;

use super::lenient::Lenient;
use super::observe::Observation;
use crate::golden_stream::GoldenConfig;
use crate::machine_kind::{MachineKind, MachineObject};
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
    pub selections: Vec<(MachineKind, &'static str)>,
}

/// Decides every object the pass covers, kind by kind, each kind in the order its store lists
/// them; and what reporting needs to know besides.
pub(super) fn decide(
    observed: &Observation,
    scope: &Scope,
    planner: &Planner<'_>,
) -> (Vec<Decision>, PassFacts) {
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
}
