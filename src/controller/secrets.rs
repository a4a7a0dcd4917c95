//! Watches of the managed stub secrets, one per name.
//!
//! The controller needs a handful of secrets (`worker-user-data-managed`, ...), never all of
//! them: a per-name watch (a `metadata.name` field selector) keeps memory flat, lets RBAC
//! restrict access by `resourceNames`, and re-plans as soon as the MCO creates a missing one.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use futures::StreamExt;
use kube::Client;
use kube::api::Api;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use tokio::sync::mpsc::UnboundedSender;
use tracing::warn;

use super::watches::{Trigger, drop_managed_fields};
use crate::api::Secret;

/// How long a pass waits for a new secret watch to list before treating the secret as absent.
const FIRST_LIST_TIMEOUT: Duration = Duration::from_secs(5);

pub struct SecretWatches {
    api: Api<Secret>,
    namespace: String,
    tx: UnboundedSender<Trigger>,
    stores: BTreeMap<String, Store<Secret>>,
}

impl SecretWatches {
    pub fn new(client: Client, namespace: &str, tx: UnboundedSender<Trigger>) -> Self {
        SecretWatches {
            api: Api::namespaced(client, namespace),
            namespace: namespace.to_string(),
            tx,
            stores: BTreeMap::new(),
        }
    }

    /// Starts watches for names not watched yet and waits for their first list.
    pub async fn ensure(&mut self, names: &BTreeSet<String>) {
        let mut new = Vec::new();
        let missing: Vec<String> = names
            .iter()
            .filter(|n| !self.stores.contains_key(*n))
            .cloned()
            .collect();
        for name in &missing {
            let (store, writer) = reflector::store();
            let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
            let stream = watcher(self.api.clone(), config)
                .default_backoff()
                .modify(drop_managed_fields)
                .reflect(writer);
            let tx = self.tx.clone();
            let label = name.clone();
            tokio::spawn(async move {
                futures::pin_mut!(stream);
                let mut listed = false;
                while let Some(event) = stream.next().await {
                    match event {
                        // The first list is awaited by `ensure`; later changes re-plan all.
                        Ok(watcher::Event::InitDone) if !listed => listed = true,
                        Ok(
                            watcher::Event::Apply(_)
                            | watcher::Event::Delete(_)
                            | watcher::Event::InitDone,
                        ) => {
                            if tx.send(Trigger::All).is_err() {
                                return;
                            }
                        }
                        Ok(_) => {}
                        Err(e) => {
                            warn!(secret = %label, error = %e, "secret watch failed; retrying")
                        }
                    }
                }
            });
            new.push(store.clone());
            self.stores.insert(name.clone(), store);
        }
        for store in new {
            if tokio::time::timeout(FIRST_LIST_TIMEOUT, store.wait_until_ready())
                .await
                .is_err()
            {
                warn!(
                    "a stub secret could not be listed in time (see the secret watch errors); treating it as absent"
                );
            }
        }
    }

    /// The secrets seen so far, keyed as the planner expects.
    pub fn snapshot(&self) -> BTreeMap<(String, String), Secret> {
        self.stores
            .iter()
            .filter_map(|(name, store)| {
                let secret = store.state().into_iter().next()?;
                Some(((self.namespace.clone(), name.clone()), (*secret).clone()))
            })
            .collect()
    }
}
