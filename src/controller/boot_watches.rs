//! The watches behind `plan::boot_evidence`: the Machines of the machine-API namespace, kept
//! trimmed to what the evidence reads, and every Node ([`super::nodes`], whose one store also
//! tells the control plane's architecture).
//!
//! A Machine's event re-plans the MachineSet that created it.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use kube::api::{Api, ListParams};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use tokio::sync::mpsc::UnboundedSender;
use tracing::{info, warn};

use super::nodes::Nodes;
use super::watch_backoff::retried;
use super::watches::{Trigger, paged};
use crate::api::{Machine, MachineHealthCheck, ObjectMeta};
use crate::machine_kind::MachineKind;
use crate::plan::ObjectKey;
use crate::plan::boot_evidence::ERROR_MESSAGE_KEPT;
use crate::quoted::bounded;

pub(super) struct BootStores {
    /// `None` where Machines cannot be listed: then no image is proven or failed.
    machines: Option<Store<Machine>>,
    /// Machines deleted without a Node, as they last were, newest last: a MachineHealthCheck
    /// deletes each Machine whose Node does not come, and the MachineSet makes the next one,
    /// so a join failure is corroborated only by Machines already gone. Lost on restart.
    removed: Arc<Mutex<VecDeque<Arc<Machine>>>>,
    /// `None` where MachineHealthChecks cannot be listed: then only `--node-join-timeout`
    /// applies.
    health_checks: Option<Store<MachineHealthCheck>>,
    nodes: Nodes,
}

/// How many deleted Machines [`BootStores`] remembers.
const REMOVED_KEPT: usize = 64;

/// Whether `api` can be listed; says why not, once, when it cannot.
async fn served<K>(api: &Api<K>, what: &str, namespace: &str, without: &str) -> bool
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    match api.list_metadata(&ListParams::default().limit(1)).await {
        Err(kube::Error::Api(e)) if e.code == 404 => {
            info!("{what} are not served; {without}");
            false
        }
        // RBAC of an earlier release of this controller, which did not read them.
        Err(kube::Error::Api(e)) if e.code == 403 => {
            warn!(
                namespace,
                "not allowed to list {what}; {without} (apply this release's RBAC)"
            );
            false
        }
        _ => true,
    }
}

impl BootStores {
    pub async fn start(
        client: &kube::Client,
        namespace: &str,
        tx: &UnboundedSender<Trigger>,
    ) -> Self {
        let api: Api<Machine> = Api::namespaced(client.clone(), namespace);
        let removed = Arc::default();
        let without = "new boot images are not followed";
        let machines = served(&api, "Machines", namespace, without)
            .await
            .then(|| spawn_machines(api, tx.clone(), Arc::clone(&removed)));
        let api: Api<MachineHealthCheck> = Api::namespaced(client.clone(), namespace);
        let without = "only --node-join-timeout limits how long a new Machine's Node may take";
        let health_checks = served(&api, "MachineHealthChecks", namespace, without)
            .await
            .then(|| spawn_health_checks(api, tx.clone()));
        BootStores {
            machines,
            removed,
            health_checks,
            nodes: Nodes::start(client, tx.clone()),
        }
    }

    pub async fn wait_until_ready(&self) {
        if let Some(machines) = &self.machines {
            let _ = machines.wait_until_ready().await;
        }
        if let Some(checks) = &self.health_checks {
            let _ = checks.wait_until_ready().await;
        }
        self.nodes.wait_until_ready().await;
    }

    pub fn nodes(&self) -> &Nodes {
        &self.nodes
    }

    /// The Machines there are, and those deleted without a Node that it remembers.
    pub fn machines(&self) -> Vec<Arc<Machine>> {
        let mut machines: Vec<Arc<Machine>> = (self.machines.as_ref())
            .map(Store::state)
            .unwrap_or_default();
        let removed = self.removed.lock().unwrap_or_else(|e| e.into_inner());
        machines.extend(removed.iter().cloned());
        machines
    }

    pub fn health_checks(&self) -> Vec<Arc<MachineHealthCheck>> {
        (self.health_checks.as_ref())
            .map(Store::state)
            .unwrap_or_default()
    }
}

/// Every MachineHealthCheck (a handful per cluster); any change re-plans everything.
fn spawn_health_checks(
    api: Api<MachineHealthCheck>,
    tx: UnboundedSender<Trigger>,
) -> Store<MachineHealthCheck> {
    let (store, writer) = reflector::store();
    let stream = watcher(api, paged())
        .modify(|c: &mut MachineHealthCheck| {
            (c.metadata.managed_fields, c.status) = (None, None);
            c.spec.extra = Default::default();
        })
        .reflect(writer);
    let stream = retried("MachineHealthChecks", stream);
    tokio::spawn(async move {
        futures::pin_mut!(stream);
        while let Some(event) = stream.next().await {
            if matches!(
                event,
                Ok(watcher::Event::InitApply(_) | watcher::Event::Init)
            ) {
                continue;
            }
            if event.is_ok() && tx.send(Trigger::All).is_err() {
                return;
            }
        }
    });
    store
}

fn spawn_machines(
    api: Api<Machine>,
    tx: UnboundedSender<Trigger>,
    removed: Arc<Mutex<VecDeque<Arc<Machine>>>>,
) -> Store<Machine> {
    let (store, writer) = reflector::store();
    let stream = watcher(api, paged())
        .modify(keep_only_what_the_evidence_reads)
        .reflect(writer);
    let stream = retried("Machines", stream);
    tokio::spawn(async move {
        futures::pin_mut!(stream);
        while let Some(event) = stream.next().await {
            let triggers: Vec<Trigger> = match event {
                Ok(watcher::Event::Delete(m)) => {
                    let status = m.status.as_ref();
                    if status.is_some_and(|s| s.node_ref.is_none()) {
                        let mut removed = removed.lock().unwrap_or_else(|e| e.into_inner());
                        if removed.len() == REMOVED_KEPT {
                            removed.pop_front();
                        }
                        removed.push_back(Arc::new(m.clone()));
                    }
                    owners(&m.metadata).map(Trigger::One).collect()
                }
                Ok(watcher::Event::Apply(m)) => owners(&m.metadata).map(Trigger::One).collect(),
                Ok(watcher::Event::InitDone) => vec![Trigger::All],
                Ok(_) | Err(_) => continue,
            };
            for trigger in triggers {
                if tx.send(trigger).is_err() {
                    return;
                }
            }
        }
    });
    store
}

/// The MachineSets a Machine names as its owner.
fn owners(meta: &ObjectMeta) -> impl Iterator<Item = ObjectKey> + '_ {
    let owners = meta.owner_references.as_deref().unwrap_or_default();
    (owners.iter())
        .filter(|o| o.kind == MachineKind::MachineSet.kind())
        .map(|o| ObjectKey {
            kind: MachineKind::MachineSet,
            name: o.name.clone(),
        })
}

/// Owner, labels (which MachineSet selects it), creation time, provider spec (as far as a
/// platform rule reads it, and the leaves of the whole, to compare with its MachineSet's
/// template) and the status the evidence reads: a Machine's status carries the provider's
/// whole instance status, and its `errorMessage` is bounded (anyone who can write a Machine's
/// status chooses it).
fn keep_only_what_the_evidence_reads(machine: &mut Machine) {
    let meta = &mut machine.metadata;
    (meta.managed_fields, meta.annotations) = (None, None);
    machine.spec.keep_only_what_the_rules_read();
    if let Some(status) = &mut machine.status {
        status.extra = Default::default();
        if let Some(message) = &mut status.error_message {
            *message = bounded(message, ERROR_MESSAGE_KEPT);
        }
        if let Some(node) = &mut status.node_ref {
            node.extra = Default::default();
        }
    }
}
