//! Step 2 of a pass: the planner decides on the objects the pass covers.

use std::collections::BTreeSet;
use std::sync::Arc;

use kube::Resource;

use super::lenient::Lenient;
use super::observe::Observation;
use crate::machine_kind::{MachineKind, MachineObject};
use crate::plan::{Blocked, Decision, ObjectKey, Options, Planner};
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

/// The planner at work on one pass's objects, a few at a time, so that the patches of the
/// first can be sent while the rest are decided. The objects are taken kind by kind, each kind
/// in the order its store lists them.
pub(super) struct Deciding<'a> {
    planner: Planner<'a>,
    observed: &'a Observation,
    scope: &'a Scope,
    /// The kind being decided (0 to 3, in the order `decide_some` takes them) and its next object.
    kind: usize,
    next: usize,
    live: BTreeSet<ObjectKey>,
}

impl<'a> Deciding<'a> {
    pub fn new(observed: &'a Observation, scope: &'a Scope, options: &'a Options) -> Self {
        Deciding {
            planner: Planner::new(&observed.snapshot, options),
            observed,
            scope,
            kind: 0,
            next: 0,
            live: BTreeSet::new(),
        }
    }

    /// How many decisions the pass will make: a vector grown by doubling to 10,000 decisions
    /// of about 400 bytes holds room for 16,384 at the peak of a wave.
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
    pub fn decide_some(&mut self, count: usize, decisions: &mut Vec<Decision>) -> bool {
        let mut left = count;
        while left > 0 {
            let observed = self.observed;
            let looked = match self.kind {
                0 => self.decide_kind(&observed.machine_sets, left, decisions),
                1 => self.decide_kind(&observed.control_plane_machine_sets, left, decisions),
                2 => self.decide_kind(&observed.cluster_api_machine_sets, left, decisions),
                3 => self.decide_kind(&observed.cluster_api_machine_deployments, left, decisions),
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

    /// Decides up to `count` objects of one kind from where the last call stopped; returns how
    /// many it looked at (fewer than `count` when the kind has no more).
    fn decide_kind<M: MachineObject + Resource<DynamicType = ()> + Clone>(
        &mut self,
        objects: &[Arc<Lenient<M>>],
        count: usize,
        decisions: &mut Vec<Decision>,
    ) -> usize {
        let batch = objects.iter().skip(self.next).take(count);
        let mut looked = 0;
        for object in batch {
            let key = ObjectKey {
                kind: M::KIND,
                name: object.meta().name.clone().unwrap_or_default(),
            };
            if self.scope.covers(&key) {
                let input = object.input();
                decisions.push(self.planner.decide(input.as_ref().copied()));
            }
            self.live.insert(key);
            looked += 1;
        }
        self.next += looked;
        looked
    }

    /// What the pass learned besides its decisions, once every object has been decided.
    pub fn facts(self) -> PassFacts {
        let gone = (self.scope.keys.iter())
            .filter(|key| !self.live.contains(*key))
            .cloned()
            .collect();
        PassFacts {
            gone,
            live: self.scope.all.then_some(self.live),
            blocked: self.planner.blocked().cloned(),
            golden: self.planner.golden().cloned(),
            selections: self.planner.selections(),
        }
    }
}
