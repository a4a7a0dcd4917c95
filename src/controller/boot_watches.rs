//! The watches behind `plan::boot_evidence`: the Machines of the machine-API namespace, kept
//! trimmed to what the evidence reads, and every Node ([`super::nodes`], whose one store also
//! tells the control plane's architecture).
//!
//! A Machine's event re-plans the MachineSet that created it.

use std::sync::Arc;

use futures::StreamExt;
use kube::api::{Api, ListParams};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use tokio::sync::mpsc::UnboundedSender;
use tracing::{info, warn};

use super::nodes::Nodes;
use super::watch_backoff::retried;
use super::watches::{Trigger, paged};
use crate::api::{Machine, ObjectMeta};
use crate::machine_kind::MachineKind;
use crate::plan::ObjectKey;
use crate::plan::boot_evidence::ERROR_MESSAGE_KEPT;
use crate::quoted::bounded;

pub(super) struct BootStores {
    /// `None` where Machines cannot be listed: then no image is proven or failed.
    machines: Option<Store<Machine>>,
    nodes: Nodes,
}

impl BootStores {
    pub async fn start(
        client: &kube::Client,
        namespace: &str,
        tx: &UnboundedSender<Trigger>,
    ) -> Self {
        let api: Api<Machine> = Api::namespaced(client.clone(), namespace);
        let machines = match api.list_metadata(&ListParams::default().limit(1)).await {
            Err(kube::Error::Api(e)) if e.code == 404 => {
                info!("Machines are not served; new boot images are not followed");
                None
            }
            // RBAC of an earlier release of this controller, which did not read Machines.
            Err(kube::Error::Api(e)) if e.code == 403 => {
                warn!(
                    namespace,
                    "not allowed to list Machines; new boot images are not followed (apply this release's RBAC)"
                );
                None
            }
            _ => Some(spawn_machines(api, tx.clone())),
        };
        BootStores {
            machines,
            nodes: Nodes::start(client, tx.clone()),
        }
    }

    pub async fn wait_until_ready(&self) {
        if let Some(machines) = &self.machines {
            let _ = machines.wait_until_ready().await;
        }
        self.nodes.wait_until_ready().await;
    }

    pub fn nodes(&self) -> &Nodes {
        &self.nodes
    }

    pub fn machines(&self) -> Vec<Arc<Machine>> {
        (self.machines.as_ref())
            .map(Store::state)
            .unwrap_or_default()
    }
}

fn spawn_machines(api: Api<Machine>, tx: UnboundedSender<Trigger>) -> Store<Machine> {
    let (store, writer) = reflector::store();
    let stream = watcher(api, paged())
        .modify(keep_only_what_the_evidence_reads)
        .reflect(writer);
    let stream = retried("Machines", stream);
    tokio::spawn(async move {
        futures::pin_mut!(stream);
        while let Some(event) = stream.next().await {
            let triggers: Vec<Trigger> = match event {
                Ok(watcher::Event::Apply(m) | watcher::Event::Delete(m)) => {
                    owners(&m.metadata).map(Trigger::One).collect()
                }
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
