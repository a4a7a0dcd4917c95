//! The watches behind `plan::boot_evidence`: the Machines of the machine-API namespace, kept
//! trimmed to what the evidence reads, the MachineHealthChecks that set how long a new
//! Machine's Node may take, and every Node ([`super::node_watch`], whose one store also tells the
//! control plane's architecture).
//!
//! A Machine's event re-plans everything, and so does a readiness change of a Node (batched:
//! [`super::node_watch`]).
//!
//! Neither watch holds readiness: the controller is ready once its own inputs are listed, and
//! its first pass waits for these lists at most [`FIRST_LIST_WAIT`].

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use kube::Resource;
use kube::api::Api;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use parking_lot::Mutex;
use tokio::sync::mpsc::UnboundedSender;
use tracing::warn;

use super::lenient::retried;
use super::lenient::{Keep, Lenient};
use super::node_watch::Nodes;
use super::watches::{Trigger, paged, re_plan_all_on_change, served, spawn};
use crate::api::{Machine, MachineHealthCheck};
use crate::plan::boot_evidence::ERROR_MESSAGE_KEPT;
use crate::quoted::bounded;

/// How long the first pass waits for the Machines and Nodes to be listed: until then it would
/// see no control-plane Node (the architecture of MachineSets that do not declare theirs). A
/// watch that cannot list (its errors are logged) delays the first pass by this much, and never
/// the controller's readiness.
const FIRST_LIST_WAIT: Duration = Duration::from_secs(30);

pub(super) struct BootStores {
    /// `None` where Machines cannot be listed: then no image is proven or failed.
    machines: Option<Store<Lenient<Machine>>>,
    /// Machines deleted without a Node, as they last were, newest last: a MachineHealthCheck
    /// deletes each Machine whose Node does not come, and the MachineSet makes the next one,
    /// so a join failure is corroborated only by Machines already gone. Lost on restart.
    removed: Arc<Mutex<VecDeque<Arc<Machine>>>>,
    /// `None` where MachineHealthChecks cannot be listed: then only `--node-join-timeout`
    /// applies.
    health_checks: Option<Store<Lenient<MachineHealthCheck>>>,
    nodes: Nodes,
}

/// How many deleted Machines [`BootStores`] remembers.
const REMOVED_KEPT: usize = 64;

impl BootStores {
    pub async fn start(
        client: &kube::Client,
        namespace: &str,
        tx: &UnboundedSender<Trigger>,
    ) -> Self {
        // Forbidden by the RBAC of an earlier release of this controller, which did not read them.
        let rbac = "apply this release's RBAC";
        let api: Api<Lenient<Machine>> = Api::namespaced(client.clone(), namespace);
        let removed = Arc::default();
        let without = "new boot images are not followed";
        let machines = served(client, &api, "Machines", without, rbac)
            .await
            .then(|| spawn_machines(api, tx.clone(), Arc::clone(&removed)));
        let api: Api<Lenient<MachineHealthCheck>> = Api::namespaced(client.clone(), namespace);
        let without = "only --node-join-timeout limits how long a new Machine's Node may take";
        let health_checks = served(client, &api, "MachineHealthChecks", without, rbac)
            .await
            .then(|| spawn(api, (), "MachineHealthChecks", tx));
        let nodes = Nodes::start(client, tx.clone());
        BootStores {
            machines,
            removed,
            health_checks,
            nodes,
        }
    }

    /// Waits for the first lists of the Machines, MachineHealthChecks and Nodes, at most
    /// [`FIRST_LIST_WAIT`].
    pub async fn wait_until_listed(&self) {
        async fn listed<K: Resource + Clone>(store: Option<&Store<K>>)
        where
            K::DynamicType: Eq + std::hash::Hash + Clone,
        {
            if let Some(store) = store {
                let _ = store.wait_until_ready().await;
            }
        }
        let all = futures::future::join3(
            listed(self.machines.as_ref()),
            listed(self.health_checks.as_ref()),
            self.nodes.wait_until_ready(),
        );
        if tokio::time::timeout(FIRST_LIST_WAIT, all).await.is_err() {
            warn!(
                "Machines, MachineHealthChecks or Nodes are not listed yet (see their watch \
                 errors); planning without them until they are"
            );
        }
    }

    pub fn nodes(&self) -> &Nodes {
        &self.nodes
    }

    /// The readable Machines there are, and those deleted without a Node that it remembers;
    /// an unreadable one is evidence of nothing.
    pub fn machines(&self) -> Vec<Arc<Machine>> {
        let mut machines = readable(self.machines.as_ref());
        machines.extend(self.removed.lock().iter().cloned());
        machines
    }

    pub fn health_checks(&self) -> Vec<Arc<MachineHealthCheck>> {
        readable(self.health_checks.as_ref())
    }
}

fn readable<K: Resource + Clone>(store: Option<&Store<Lenient<K>>>) -> Vec<Arc<K>>
where
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    let objects = store.map(Store::state).unwrap_or_default();
    objects.iter().filter_map(|o| o.shared().cloned()).collect()
}

/// Every Machine; any change re-plans everything. A Machine deleted without a Node is
/// remembered.
fn spawn_machines(
    api: Api<Lenient<Machine>>,
    tx: UnboundedSender<Trigger>,
    removed: Arc<Mutex<VecDeque<Arc<Machine>>>>,
) -> Store<Lenient<Machine>> {
    let (store, writer) = reflector::store();
    let stream = retried("Machines", watcher(api, paged()).reflect(writer));
    let stream = stream.inspect(move |event| {
        let Ok(watcher::Event::Delete(m)) = event else {
            return;
        };
        let machine = m.shared();
        let status = machine.and_then(|m| m.status.as_ref());
        if let Some(machine) = machine
            && status.is_some_and(|s| s.node_ref.is_none())
        {
            let mut removed = removed.lock();
            if removed.len() == REMOVED_KEPT {
                removed.pop_front();
            }
            removed.push_back(Arc::clone(machine));
        }
    });
    tokio::spawn(re_plan_all_on_change(stream, tx, false));
    store
}

/// Owner, labels (which MachineSet selects it), creation time, provider spec (as far as a
/// platform rule reads it, and the leaves of the whole, to compare with its MachineSet's
/// template) and the status the evidence reads: a Machine's status carries the provider's
/// whole instance status, and its `errorMessage` is bounded (anyone who can write a Machine's
/// status chooses it).
impl Keep for Machine {
    fn keep_only_what_the_planner_reads(&mut self) {
        let meta = &mut self.metadata;
        (meta.managed_fields, meta.annotations) = (None, None);
        self.spec.keep_only_what_the_rules_read();
        if let Some(status) = &mut self.status {
            status.extra = Default::default();
            if let Some(message) = &mut status.error_message {
                *message = bounded(message, ERROR_MESSAGE_KEPT);
            }
            if let Some(node) = &mut status.node_ref {
                node.extra = Default::default();
            }
        }
    }
}

/// Its selector and `nodeStartupTimeout` (what the evidence reads), no status.
impl Keep for MachineHealthCheck {
    fn keep_only_what_the_planner_reads(&mut self) {
        (self.metadata.managed_fields, self.status) = (None, None);
        self.spec.extra = Default::default();
    }
}
