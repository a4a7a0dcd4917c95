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

/// The planner's answer for one pass.
pub(super) struct Decided {
    pub decisions: Vec<Decision>,
    pub facts: PassFacts,
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

pub(super) fn decide(observed: &Observation, scope: &Scope, options: &Options) -> Decided {
    let planner = Planner::new(&observed.snapshot, options);
    // Sized once: a vector grown by doubling to 10,000 decisions of about 400 bytes holds room
    // for 16,384 at the peak of a wave.
    let objects = observed.machine_sets.len()
        + observed.control_plane_machine_sets.len()
        + observed.cluster_api_machine_sets.len()
        + observed.cluster_api_machine_deployments.len();
    let covered = if scope.all {
        objects
    } else {
        scope.keys.len().min(objects)
    };
    let mut decisions = Vec::with_capacity(covered);
    let mut live = BTreeSet::new();
    decide_kind(
        &planner,
        &observed.machine_sets,
        scope,
        &mut decisions,
        &mut live,
    );
    decide_kind(
        &planner,
        &observed.control_plane_machine_sets,
        scope,
        &mut decisions,
        &mut live,
    );
    decide_kind(
        &planner,
        &observed.cluster_api_machine_sets,
        scope,
        &mut decisions,
        &mut live,
    );
    decide_kind(
        &planner,
        &observed.cluster_api_machine_deployments,
        scope,
        &mut decisions,
        &mut live,
    );
    let gone = scope
        .keys
        .iter()
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
    Decided { decisions, facts }
}

fn decide_kind<M: MachineObject + Resource<DynamicType = ()> + Clone>(
    planner: &Planner<'_>,
    objects: &[Arc<Lenient<M>>],
    scope: &Scope,
    decisions: &mut Vec<Decision>,
    live: &mut BTreeSet<ObjectKey>,
) {
    for object in objects {
        let key = ObjectKey {
            kind: M::KIND,
            name: object.meta().name.clone().unwrap_or_default(),
        };
        if scope.covers(&key) {
            let input = object.input();
            decisions.push(planner.decide(input.as_ref().copied()));
        }
        live.insert(key);
    }
}
