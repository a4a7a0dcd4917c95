//! One watch of every Node, kept trimmed to the two things read of it: which Nodes are the
//! control plane and their architecture (the architecture of MachineSets that do not declare
//! theirs), and whether each is Ready (a Ready Node proves the boot image of the Machine it
//! runs on, `plan::boot_evidence`). `plan --live` reads the same from one list of Nodes.
//!
//! Kubelets write their Node every few seconds, and on a large cluster many Nodes a second: an
//! event costs what it changes (the one Node's entry is compared and updated; the whole is
//! rebuilt only when the Nodes are listed again), and the changes of [`COALESCED`] re-plan
//! once.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, NodeStatus};
use kube::Resource;
use kube::api::Api;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use parking_lot::Mutex;
use tokio::sync::mpsc::UnboundedSender;
use tokio::time::Instant;

use super::lenient::retried;
use super::lenient::{Keep, Lenient};
use super::sleep_until;
use super::watches::{Trigger, paged};
use crate::names::{ARCH_LABEL, CONTROL_PLANE_NODE_LABELS};
use crate::plan::nodes::{control_plane_arch, is_ready};

/// Node changes are sent to the planner at most this often. What they feed is slow anyway: a
/// boot is proven within minutes, and the join limit is 20 minutes by default.
const COALESCED: Duration = Duration::from_secs(1);

pub(super) struct Nodes {
    store: Store<Lenient<Node>>,
    /// What is read of the Nodes, kept up to date by the watch, one event at a time.
    read: Arc<Mutex<WhatIsRead>>,
}

impl Nodes {
    pub fn start(client: &kube::Client, tx: UnboundedSender<Trigger>) -> Self {
        let (store, writer) = reflector::store();
        let stream = retried(
            "Nodes",
            watcher(Api::all(client.clone()), paged()).reflect(writer),
        );
        let read = Arc::new(Mutex::new(WhatIsRead::default()));
        let (reader, shared) = (store.clone(), read.clone());
        tokio::spawn(async move {
            futures::pin_mut!(stream);
            // When the changes not sent yet are due.
            let mut due: Option<Instant> = None;
            let mut listed = false;
            loop {
                let event = tokio::select! {
                    event = stream.next() => event,
                    _ = sleep_until(due) => {
                        due = None;
                        if tx.send(Trigger).is_err() {
                            return;
                        }
                        continue;
                    }
                };
                let Some(event) = event else { return };
                let mut read = shared.lock();
                // A (re)list: the whole is read again, and everything re-planned if it changed;
                // at once, the first time (the first pass waits for it).
                let changed = match event {
                    Ok(watcher::Event::InitDone) => {
                        let fresh = WhatIsRead::of(&reader.state());
                        let changed = !listed || *read != fresh;
                        *read = fresh;
                        if !listed {
                            listed = true;
                            due = Some(Instant::now());
                        }
                        changed
                    }
                    Ok(watcher::Event::Apply(node)) => {
                        let name = node.meta().name.clone().unwrap_or_default();
                        read.record(name, node.object().ok())
                    }
                    Ok(watcher::Event::Delete(node)) => {
                        let name = node.meta().name.clone().unwrap_or_default();
                        read.record(name, None)
                    }
                    Ok(_) | Err(_) => false,
                };
                if changed {
                    due = due.or_else(|| Some(Instant::now() + COALESCED));
                }
            }
        });
        Nodes { store, read }
    }

    pub async fn wait_until_ready(&self) {
        let _ = self.store.wait_until_ready().await;
    }

    /// Every control-plane Node and its architecture label.
    pub fn control_plane(&self) -> BTreeMap<String, Option<String>> {
        self.read.lock().control_plane.clone()
    }

    /// Every Node by name, and whether it is Ready.
    pub fn readiness(&self) -> BTreeMap<String, bool> {
        self.read.lock().ready.clone()
    }
}

/// A Node's name, the labels that say control plane and architecture, and its Ready condition;
/// its images, addresses and capacity go.
impl Keep for Node {
    fn keep_only_what_the_planner_reads(&mut self) {
        let meta = &mut self.metadata;
        (meta.managed_fields, meta.annotations) = (None, None);
        if let Some(labels) = &mut meta.labels {
            labels
                .retain(|key, _| key == ARCH_LABEL || CONTROL_PLANE_NODE_LABELS.contains(&&**key));
        }
        self.spec = None;
        let conditions = (self.status.take())
            .and_then(|s| s.conditions)
            .map(|c| c.into_iter().filter(|c| c.type_ == "Ready").collect());
        self.status = Some(NodeStatus {
            conditions,
            ..Default::default()
        });
    }
}

/// What the planner reads of the Nodes.
#[derive(Debug, Default, PartialEq)]
struct WhatIsRead {
    control_plane: BTreeMap<String, Option<String>>,
    ready: BTreeMap<String, bool>,
}

impl WhatIsRead {
    fn of(nodes: &[Arc<Lenient<Node>>]) -> Self {
        let mut read = WhatIsRead::default();
        for node in nodes {
            let name = node.meta().name.clone().unwrap_or_default();
            read.record(name, node.object().ok());
        }
        read
    }

    /// Records the Node `name` as it is now (`None`: deleted, or unreadable, which is evidence of
    /// nothing), and says whether what is read of it changed.
    fn record(&mut self, name: String, node: Option<&Node>) -> bool {
        let arch = node.and_then(control_plane_arch);
        let was_arch = match arch.clone() {
            Some(arch) => self.control_plane.insert(name.clone(), arch),
            None => self.control_plane.remove(&name),
        };
        let ready = node.map(is_ready);
        let was = match ready {
            Some(ready) => self.ready.insert(name, ready),
            None => self.ready.remove(&name),
        };
        was_arch != arch || was != ready
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::NodeCondition;

    fn node(name: &str, labels: &[(&str, &str)], ready: &str) -> Node {
        let mut node = Node::default();
        node.metadata.name = Some(name.into());
        node.metadata.labels = Some(
            labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        );
        node.metadata.annotations = Some([("a".to_string(), "b".to_string())].into());
        let condition = |type_: &str, status: &str| NodeCondition {
            type_: type_.into(),
            status: status.into(),
            ..Default::default()
        };
        node.status = Some(NodeStatus {
            conditions: Some(vec![
                condition("MemoryPressure", "False"),
                condition("Ready", ready),
            ]),
            images: Some(vec![Default::default()]),
            ..Default::default()
        });
        node
    }

    #[test]
    fn a_trimmed_node_still_tells_its_role_architecture_and_readiness() {
        let mut master = node(
            "master-0",
            &[
                (CONTROL_PLANE_NODE_LABELS[0], ""),
                (ARCH_LABEL, "arm64"),
                ("zone", "a"),
            ],
            "True",
        );
        let mut worker = node("worker-0", &[(ARCH_LABEL, "amd64")], "False");
        master.keep_only_what_the_planner_reads();
        worker.keep_only_what_the_planner_reads();
        assert_eq!(
            master.metadata.labels.as_ref().unwrap().len(),
            2,
            "zone goes"
        );
        assert_eq!(master.metadata.annotations, None);
        let status = master.status.as_ref().unwrap();
        assert_eq!(
            (
                status.images.as_ref(),
                status.conditions.as_ref().unwrap().len()
            ),
            (None, 1)
        );

        let mut read = WhatIsRead::default();
        read.record("master-0".into(), Some(&master));
        read.record("worker-0".into(), Some(&worker));
        assert_eq!(
            read.control_plane,
            [("master-0".to_string(), Some("arm64".to_string()))].into()
        );
        assert_eq!(
            read.ready,
            [
                ("master-0".to_string(), true),
                ("worker-0".to_string(), false)
            ]
            .into()
        );
    }

    #[test]
    fn the_newer_control_plane_label_alone_is_enough() {
        let mut read = WhatIsRead::default();
        let cp = node("cp-0", &[(CONTROL_PLANE_NODE_LABELS[1], "")], "True");
        read.record("cp-0".into(), Some(&cp));
        assert_eq!(read.control_plane, [("cp-0".to_string(), None)].into());
    }

    /// A kubelet's status update changes nothing read; a readiness flip, a control-plane Node's
    /// architecture and its deletion do.
    #[test]
    fn each_node_event_says_what_it_changed() {
        let mut read = WhatIsRead::default();
        let worker = |ready| node("worker-0", &[(ARCH_LABEL, "amd64")], ready);
        assert!(read.record("worker-0".into(), Some(&worker("False"))));
        assert!(!read.record("worker-0".into(), Some(&worker("False"))));
        assert!(read.record("worker-0".into(), Some(&worker("True"))));
        assert!(read.record("worker-0".into(), None), "deleted");
        assert!(read.ready.is_empty());

        let master = |arch| {
            node(
                "master-0",
                &[(CONTROL_PLANE_NODE_LABELS[0], ""), (ARCH_LABEL, arch)],
                "True",
            )
        };
        assert!(read.record("master-0".into(), Some(&master("amd64"))));
        assert!(!read.record("master-0".into(), Some(&master("amd64"))));
        assert!(read.record("master-0".into(), Some(&master("arm64"))));
        assert!(read.record("master-0".into(), None));
        assert_eq!(read, WhatIsRead::default());
    }
}
