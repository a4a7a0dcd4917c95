//! Watches of the stub secrets the machine resources name, one per name.
//!
//! The controller needs a handful of secrets (`worker-user-data`, ...), never all of them: a
//! per-name watch (a `metadata.name` field selector) keeps memory flat, lets RBAC restrict
//! access by `resourceNames`, and re-plans as soon as a missing one appears or one changes.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use kube::Client;
use kube::api::Api;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use tokio::sync::mpsc::UnboundedSender;
use tokio::task::JoinHandle;
use tracing::{info, warn};

use super::lenient::Lenient;
use super::lenient::retried;
use super::watches::{Trigger, re_plan_all_on_change};
use crate::api::Secret;

/// How long a pass waits for a new secret watch to list before treating the secret as absent.
const FIRST_LIST_TIMEOUT: Duration = Duration::from_secs(5);

pub struct SecretWatches {
    api: Api<Lenient<Secret>>,
    namespace: String,
    tx: UnboundedSender<Trigger>,
    watches: BTreeMap<String, SecretWatch>,
}

/// One secret's store and the task that fills it.
struct SecretWatch {
    store: Store<Lenient<Secret>>,
    task: JoinHandle<()>,
}

impl Drop for SecretWatch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl SecretWatches {
    pub fn new(client: Client, namespace: &str, tx: UnboundedSender<Trigger>) -> Self {
        SecretWatches {
            api: Api::namespaced(client, namespace),
            namespace: namespace.to_string(),
            tx,
            watches: BTreeMap::new(),
        }
    }

    /// Watches exactly `names`: stops the watches no longer needed, starts the missing ones
    /// and waits for their first lists together (at most [`FIRST_LIST_TIMEOUT`] in all).
    pub async fn ensure(&mut self, names: &BTreeSet<String>) {
        self.watches.retain(|name, _| {
            let needed = names.contains(name);
            if !needed {
                info!(secret = %name, "no longer watching a stub secret: no selected object points at it");
            }
            needed
        });
        let mut new = Vec::new();
        for name in names {
            if self.watches.contains_key(name) {
                continue;
            }
            info!(secret = %name, "watching a stub secret a selected object points at");
            let watch = self.start(name);
            new.push(watch.store.clone());
            self.watches.insert(name.clone(), watch);
        }
        let first_lists = futures::future::join_all(new.iter().map(|s| s.wait_until_ready()));
        if tokio::time::timeout(FIRST_LIST_TIMEOUT, first_lists)
            .await
            .is_err()
        {
            warn!(
                "a stub secret could not be listed in time (see the secret watch errors); treating it as absent"
            );
        }
    }

    fn start(&self, name: &str) -> SecretWatch {
        let (store, writer) = reflector::store();
        let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
        let stream = watcher(self.api.clone(), config).reflect(writer);
        let stream = retried(format!("Secret {name}"), stream);
        // The first list is awaited by `ensure`; later changes re-plan all.
        let task = tokio::spawn(re_plan_all_on_change(stream, self.tx.clone(), true));
        SecretWatch { store, task }
    }

    /// The secrets seen so far, keyed as the planner expects; an unreadable one is absent (the
    /// planner says the secret does not exist or cannot be read).
    pub fn snapshot(&self) -> BTreeMap<(String, String), Secret> {
        self.watches
            .iter()
            .filter_map(|(name, watch)| {
                let secret = watch.store.state().into_iter().next()?;
                let secret = secret.object().ok()?.clone();
                Some(((self.namespace.clone(), name.clone()), secret))
            })
            .collect()
    }
}
