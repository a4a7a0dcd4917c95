//! The watches behind `plan::boot_evidence`: the Machines of the machine-API namespace, kept
//! trimmed to what the evidence reads, and every Node ([`super::nodes`], whose one store also
//! tells the control plane's architecture).
//!
//! A Machine's event re-plans the MachineSet that created it, and so does a readiness change of
//! the Node it runs on.
//!
//! Neither watch holds readiness: the controller is ready once its own inputs are listed, and
//! its first pass waits for these lists at most [`FIRST_LIST_WAIT`].

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use kube::Resource;
use kube::api::{Api, ListParams};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use tokio::sync::mpsc::UnboundedSender;
use tracing::{info, warn};

use super::lenient::Lenient;
use super::nodes::Nodes;
use super::watch_backoff::retried;
use super::watches::{Trigger, paged, probe};
use crate::api::{Machine, ObjectMeta};
use crate::machine_kind::MachineKind;
use crate::plan::ObjectKey;

/// How long the first pass waits for the Machines and Nodes to be listed: until then it would
/// see no control-plane Node (the architecture of MachineSets that do not declare theirs). A
/// watch that cannot list (its errors are logged) delays the first pass by this much, and never
/// the controller's readiness.
const FIRST_LIST_WAIT: Duration = Duration::from_secs(30);

pub(super) struct BootStores {
    /// `None` where Machines cannot be listed: then no image is proven or failed.
    machines: Option<Store<Lenient<Machine>>>,
    nodes: Nodes,
}

impl BootStores {
    pub async fn start(
        client: &kube::Client,
        namespace: &str,
        tx: &UnboundedSender<Trigger>,
    ) -> Self {
        let api: Api<Lenient<Machine>> = Api::namespaced(client.clone(), namespace);
        let machines = match probe(client, &api, &ListParams::default()).await {
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
        let running_on = machines.clone();
        let nodes = Nodes::start(client, tx.clone(), move |nodes| {
            machine_sets_running_on(running_on.as_ref(), nodes)
        });
        BootStores { machines, nodes }
    }

    /// Waits for the first lists of the Machines and Nodes, at most [`FIRST_LIST_WAIT`].
    pub async fn wait_until_listed(&self) {
        let machines = async {
            if let Some(machines) = &self.machines {
                let _ = machines.wait_until_ready().await;
            }
        };
        let listed = futures::future::join(machines, self.nodes.wait_until_ready());
        if tokio::time::timeout(FIRST_LIST_WAIT, listed).await.is_err() {
            warn!(
                "Machines or Nodes are not listed yet (see their watch errors); planning without \
                 them until they are"
            );
        }
    }

    pub fn nodes(&self) -> &Nodes {
        &self.nodes
    }

    /// The readable Machines; an unreadable one is evidence of nothing.
    pub fn machines(&self) -> Vec<Arc<Machine>> {
        let Some(machines) = &self.machines else {
            return Vec::new();
        };
        (machines.state().iter())
            .filter_map(|m| m.shared().cloned())
            .collect()
    }
}

/// The MachineSets that created the Machines running on `nodes`.
fn machine_sets_running_on(
    machines: Option<&Store<Lenient<Machine>>>,
    nodes: &BTreeSet<String>,
) -> BTreeSet<ObjectKey> {
    let machines = machines.map(Store::state).unwrap_or_default();
    (machines.iter())
        .filter_map(|m| m.kept().ok())
        .filter(|m| {
            let node = m
                .status
                .as_ref()
                .and_then(|s| s.node_ref.as_ref()?.name.as_ref());
            node.is_some_and(|n| nodes.contains(n))
        })
        .flat_map(|m| owners(&m.metadata))
        .collect()
}

fn spawn_machines(
    api: Api<Lenient<Machine>>,
    tx: UnboundedSender<Trigger>,
) -> Store<Lenient<Machine>> {
    let (store, writer) = reflector::store();
    let stream = retried("Machines", watcher(api, paged()).reflect(writer));
    tokio::spawn(async move {
        futures::pin_mut!(stream);
        while let Some(event) = stream.next().await {
            let triggers: Vec<Trigger> = match event {
                Ok(watcher::Event::Apply(m) | watcher::Event::Delete(m)) => {
                    owners(m.meta()).map(Trigger::One).collect()
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

/// Owner, creation time, provider spec (as far as a platform rule reads it) and the status
/// the evidence reads: a Machine's status carries the provider's whole instance status.
pub(super) fn keep_only_what_the_evidence_reads(machine: &mut Machine) {
    let meta = &mut machine.metadata;
    (meta.managed_fields, meta.annotations, meta.labels) = (None, None, None);
    machine.spec.keep_only_what_the_rules_read();
    if let Some(status) = &mut machine.status {
        status.extra = Default::default();
        if let Some(node) = &mut status.node_ref {
            node.extra = Default::default();
        }
    }
}
