//! One watch of every Node, kept trimmed to the two things read of it: which Nodes are the
//! control plane and their architecture (the architecture of MachineSets that do not declare
//! theirs), and whether each is Ready (a Ready Node proves the boot image of the Machine it
//! runs on, `plan::boot_evidence`). `plan --live` reads the same from one list of Nodes.
//!
//! Kubelets write their Node every few seconds; only a change of what is read re-plans.

use std::collections::BTreeMap;
use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, NodeStatus};
use kube::api::Api;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use tokio::sync::mpsc::UnboundedSender;

use super::lenient::Lenient;
use super::watch_backoff::retried;
use super::watches::{Trigger, paged};
use crate::names::{ARCH_LABEL, CONTROL_PLANE_NODE_LABELS};
use crate::plan::nodes::{control_plane_arch, is_ready};

pub(super) struct Nodes(Store<Lenient<Node>>);

impl Nodes {
    pub fn start(client: &kube::Client, tx: UnboundedSender<Trigger>) -> Self {
        let (store, writer) = reflector::store();
        let stream = watcher(Api::all(client.clone()), paged()).reflect(writer);
        let stream = retried("Nodes", stream);
        let reader = store.clone();
        tokio::spawn(async move {
            futures::pin_mut!(stream);
            let mut last = None;
            while let Some(event) = stream.next().await {
                if event.is_err() {
                    continue;
                }
                let current = what_is_read(&reader.state());
                if last.as_ref() != Some(&current) {
                    last = Some(current);
                    if tx.send(Trigger::All).is_err() {
                        return;
                    }
                }
            }
        });
        Nodes(store)
    }

    pub async fn wait_until_ready(&self) {
        let _ = self.0.wait_until_ready().await;
    }

    /// Every control-plane Node and its architecture label.
    pub fn control_plane(&self) -> BTreeMap<String, Option<String>> {
        control_plane(&self.0.state())
    }

    /// Every Node by name, and whether it is Ready.
    pub fn readiness(&self) -> BTreeMap<String, bool> {
        readiness(&self.0.state())
    }
}

/// A Node's name, the labels that say control plane and architecture, and its Ready condition;
/// its images, addresses and capacity go.
pub(super) fn keep_only_what_is_read(node: &mut Node) {
    let meta = &mut node.metadata;
    (meta.managed_fields, meta.annotations) = (None, None);
    if let Some(labels) = &mut meta.labels {
        labels.retain(|key, _| key == ARCH_LABEL || CONTROL_PLANE_NODE_LABELS.contains(&&**key));
    }
    node.spec = None;
    let conditions = (node.status.take())
        .and_then(|s| s.conditions)
        .map(|c| c.into_iter().filter(|c| c.type_ == "Ready").collect());
    node.status = Some(NodeStatus {
        conditions,
        ..Default::default()
    });
}

type WhatIsRead = (BTreeMap<String, Option<String>>, BTreeMap<String, bool>);

fn what_is_read(nodes: &[Arc<Lenient<Node>>]) -> WhatIsRead {
    (control_plane(nodes), readiness(nodes))
}

/// The readable Nodes: an unreadable one is evidence of nothing.
fn readable(nodes: &[Arc<Lenient<Node>>]) -> impl Iterator<Item = &Node> {
    nodes.iter().filter_map(|n| n.kept().ok())
}

fn control_plane(nodes: &[Arc<Lenient<Node>>]) -> BTreeMap<String, Option<String>> {
    readable(nodes)
        .filter_map(|n| Some((n.metadata.name.clone()?, control_plane_arch(n)?)))
        .collect()
}

fn readiness(nodes: &[Arc<Lenient<Node>>]) -> BTreeMap<String, bool> {
    readable(nodes)
        .map(|n| (n.metadata.name.clone().unwrap_or_default(), is_ready(n)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::NodeCondition;

    /// As the watch stores it.
    fn stored(node: Node) -> Arc<Lenient<Node>> {
        Arc::new(serde_json::from_value(serde_json::to_value(node).unwrap()).unwrap())
    }

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
        keep_only_what_is_read(&mut master);
        keep_only_what_is_read(&mut worker);
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

        let (control_plane, ready) = what_is_read(&[stored(master), stored(worker)]);
        assert_eq!(
            control_plane,
            [("master-0".to_string(), Some("arm64".to_string()))].into()
        );
        assert_eq!(
            ready,
            [
                ("master-0".to_string(), true),
                ("worker-0".to_string(), false)
            ]
            .into()
        );
    }

    #[test]
    fn the_newer_control_plane_label_alone_is_enough() {
        let nodes = [stored(node(
            "cp-0",
            &[(CONTROL_PLANE_NODE_LABELS[1], "")],
            "True",
        ))];
        assert_eq!(control_plane(&nodes), [("cp-0".to_string(), None)].into());
    }
}
