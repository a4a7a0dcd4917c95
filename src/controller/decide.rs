//! Step 2 of a pass: the planner decides on the objects the pass covers.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use kube::Resource;

use super::lenient::Lenient;
use super::observe::Observation;
use crate::machine_kind::{MachineKind, MachineObject};
use crate::plan::{Blocked, Decision, ObjectKey, Planner};
use crate::stream::GoldenConfig;

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

/// An object as a pass saw it, kept from its decision until its patch is sent. The patch is
/// written then, by the same planner from the same object, rather than held: at 10,000
/// MachineSets a rollout's operations (history annotations, guards, values) were 20 MB held
/// while eight at a time were sent. The pass only counts each patch's operations
/// (`Planner::decide_counted`), so every patch is written once, when it is sent.
pub(super) trait Redecide: Send + Sync {
    /// The decision of a pass, its patch counted.
    fn decide(&self, planner: &Planner<'_>) -> Decision;
    /// The same decision with its patch written, to send.
    fn decide_to_send(&self, planner: &Planner<'_>) -> Decision;
}

impl<M: MachineObject + Send + Sync> Redecide for Lenient<M> {
    fn decide(&self, planner: &Planner<'_>) -> Decision {
        planner.decide_counted(self.kept().as_ref())
    }

    fn decide_to_send(&self, planner: &Planner<'_>) -> Decision {
        planner.decide(self.kept().as_ref())
    }
}

/// The index of a decision with operations to send, and the object it was made for.
pub(super) type Writing = (usize, Arc<dyn Redecide>);

/// A pass's objects taken a few at a time, so that the patches of the first can be sent while
/// the rest are decided. The objects are taken kind by kind, each kind in the order its store
/// lists them.
///
/// A decision equal to the object's previous result is that result, shared: in a settled
/// fleet nearly every decision is, and at 10,000 MachineSets a second copy of each held
/// another 7 MB until the pass was reported.
pub(super) struct Deciding<'a> {
    observed: &'a Observation,
    scope: &'a Scope,
    previous: &'a BTreeMap<ObjectKey, Arc<Decision>>,
    /// The kind being decided (0 to 3, in the order `decide_some` takes them) and its next object.
    kind: usize,
    next: usize,
    live: BTreeSet<ObjectKey>,
    /// Decisions made since the last [`Deciding::writing`] that have operations to send.
    writing: Vec<Writing>,
}

impl<'a> Deciding<'a> {
    pub fn new(
        observed: &'a Observation,
        scope: &'a Scope,
        previous: &'a BTreeMap<ObjectKey, Arc<Decision>>,
    ) -> Self {
        Deciding {
            observed,
            scope,
            previous,
            kind: 0,
            next: 0,
            live: BTreeSet::new(),
            writing: Vec::new(),
        }
    }

    /// How many decisions the pass will make: a vector grown by doubling to 10,000 decisions
    /// holds room for 16,384 at the peak of a wave.
    pub fn expected(&self) -> usize {
        let objects = self.observed.len();
        if self.scope.all {
            objects
        } else {
            self.scope.keys.len().min(objects)
        }
    }

    /// Looks at up to `count` more objects, pushing a decision for each the pass covers.
    /// False once every object has been looked at.
    pub fn decide_some(
        &mut self,
        planner: &Planner<'_>,
        count: usize,
        decisions: &mut Vec<Arc<Decision>>,
    ) -> bool {
        let mut left = count;
        while left > 0 {
            let observed = self.observed;
            let looked = match self.kind {
                0 => self.decide_kind(planner, &observed.machine_sets, left, decisions),
                1 => self.decide_kind(
                    planner,
                    &observed.control_plane_machine_sets,
                    left,
                    decisions,
                ),
                2 => self.decide_kind(planner, &observed.cluster_api_machine_sets, left, decisions),
                3 => self.decide_kind(
                    planner,
                    &observed.cluster_api_machine_deployments,
                    left,
                    decisions,
                ),
                _ => return false,
            };
            left -= looked;
            if left > 0 {
                self.kind += 1;
                self.next = 0;
            }
        }
        true
    }

    /// The decisions with operations to send made since the last call, with their objects.
    pub fn writing(&mut self) -> Vec<Writing> {
        std::mem::take(&mut self.writing)
    }

    /// Decides up to `count` objects of one kind from where the last call stopped; returns how
    /// many it looked at (fewer than `count` when the kind has no more).
    fn decide_kind<M>(
        &mut self,
        planner: &Planner<'_>,
        objects: &[Arc<Lenient<M>>],
        count: usize,
        decisions: &mut Vec<Arc<Decision>>,
    ) -> usize
    where
        M: MachineObject + Resource<DynamicType = ()> + Clone + Send + Sync + 'static,
    {
        let batch = objects.iter().skip(self.next).take(count);
        let mut looked = 0;
        for object in batch {
            let key = ObjectKey {
                kind: M::KIND,
                name: object.meta().name.clone().unwrap_or_default(),
            };
            if self.scope.covers(&key) {
                let decision = object.decide(planner);
                if !decision.patch.is_empty() {
                    let object: Arc<dyn Redecide> = Arc::clone(object) as _;
                    self.writing.push((decisions.len(), object));
                }
                let decision = match self.previous.get(&key) {
                    Some(previous) if **previous == decision => Arc::clone(previous),
                    _ => Arc::new(decision),
                };
                decisions.push(decision);
            }
            self.live.insert(key);
            looked += 1;
        }
        self.next += looked;
        looked
    }

    /// What the pass learned besides its decisions, once every object has been decided.
    pub fn facts(self, planner: &Planner<'_>) -> PassFacts {
        let gone = (self.scope.keys.iter())
            .filter(|key| !self.live.contains(*key))
            .cloned()
            .collect();
        PassFacts {
            gone,
            live: self.scope.all.then_some(self.live),
            blocked: planner.blocked().cloned(),
            golden: planner.golden().cloned(),
            selections: planner.selections(),
        }
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

    /// The decisions and what reporting learns, deciding `at_once` objects at a time, with the
    /// previous pass's results `previous`.
    fn decide_after(
        observed: &Observation,
        scope: &Scope,
        at_once: usize,
        previous: &BTreeMap<ObjectKey, Arc<Decision>>,
        options: &Options,
    ) -> (
        Vec<Arc<Decision>>,
        Vec<ObjectKey>,
        Option<BTreeSet<ObjectKey>>,
    ) {
        let planner = Planner::new(&observed.snapshot, options);
        let mut deciding = Deciding::new(observed, scope, previous);
        let mut decisions = Vec::with_capacity(deciding.expected());
        let mut calls = 0;
        while deciding.decide_some(&planner, at_once, &mut decisions) {
            calls += 1;
            assert!(calls <= observed.len() + 1, "deciding never ends");
        }
        let facts = deciding.facts(&planner);
        (decisions, facts.gone, facts.live)
    }

    /// The same, in a first pass.
    fn decide(
        observed: &Observation,
        scope: &Scope,
        at_once: usize,
        options: &Options,
    ) -> (Vec<Decision>, Vec<ObjectKey>, Option<BTreeSet<ObjectKey>>) {
        let (decisions, gone, live) =
            decide_after(observed, scope, at_once, &BTreeMap::new(), options);
        let decisions = decisions.into_iter().map(Arc::unwrap_or_clone).collect();
        (decisions, gone, live)
    }

    /// A settled fleet's pass holds one copy of each decision, not two; and what it decides
    /// does not depend on what the last pass decided.
    #[test]
    fn a_decision_equal_to_the_last_result_is_that_result() {
        let observed = observation();
        let everything = Scope::everything();
        // One pass's options: the history entries an update writes carry their time.
        let options = Options::default();
        let (first, _, _) = decide_after(&observed, &everything, 3, &BTreeMap::new(), &options);
        let mut results: BTreeMap<ObjectKey, Arc<Decision>> =
            first.iter().map(|d| (d.key(), Arc::clone(d))).collect();
        let changed = first[1].key();
        Arc::make_mut(results.get_mut(&changed).unwrap()).message = "since changed".into();
        let (second, _, _) = decide_after(&observed, &everything, 3, &results, &options);
        assert_eq!(second, first, "the same decisions");
        for decision in &second {
            let previous = &results[&decision.key()];
            let shared = Arc::ptr_eq(decision, previous);
            assert_eq!(shared, decision.key() != changed, "{}", decision.name);
        }
    }

    /// A patch is built when it is sent, by deciding its object again: that must give the
    /// decision the pass made, operations and all; and every decision with operations, and
    /// only those, is handed over for sending.
    #[test]
    fn deciding_an_object_again_gives_the_same_decision_and_patch() {
        let observed = observation();
        let everything = Scope::everything();
        let options = Options::default();
        let planner = Planner::new(&observed.snapshot, &options);
        let previous = BTreeMap::new();
        let mut deciding = Deciding::new(&observed, &everything, &previous);
        let mut decisions = Vec::new();
        let mut writing = Vec::new();
        while deciding.decide_some(&planner, 2, &mut decisions) {
            writing.extend(deciding.writing());
        }
        writing.extend(deciding.writing());
        let with_ops: Vec<usize> = (decisions.iter().enumerate())
            .filter(|(_, d)| !d.patch.is_empty())
            .map(|(i, _)| i)
            .collect();
        assert!(!with_ops.is_empty() && with_ops.len() < decisions.len());
        assert_eq!(
            writing.iter().map(|(i, _)| *i).collect::<Vec<_>>(),
            with_ops
        );
        for (i, object) in &writing {
            assert_eq!(
                object.decide(&planner),
                *decisions[*i],
                "{}",
                decisions[*i].name
            );
        }
    }

    #[test]
    fn deciding_a_few_at_a_time_decides_what_deciding_all_at_once_does() {
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
            let (decisions, gone, live) = decide(&observed, &scope, usize::MAX, &options);
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
            for at_once in [1, 2, 3, 7, 8, 64] {
                let few = decide(&observed, &scope, at_once, &options);
                assert_eq!(few.0, decisions, "{at_once} at a time");
                assert_eq!((few.1, few.2), (gone.clone(), live.clone()));
            }
        }
    }
}
