//! The known-images memory: every golden image we have seen, kept in a ConfigMap we own.
//!
//! After an upgrade the golden ConfigMap lists only the new release's images, so without memory
//! a MachineSet still on the previous release's image would look custom and be left behind.
//! Writes are best effort: a failure is logged and counted, and never blocks an update.

use std::collections::{BTreeSet, HashSet};

use kube::api::{Api, ObjectMeta, Patch, PatchParams};
use tracing::{info, warn};

use crate::api::ConfigMap;
use crate::api_client;
use crate::metrics::Metrics;

pub use crate::names::KNOWN_IMAGES_CONFIGMAP_NAME as CONFIG_MAP_NAME;
pub const IMAGES_KEY: &str = "images";
/// About 40 releases of every AWS region and architecture; the oldest entries go first.
pub const LIMIT: usize = 20_000;

/// The new content of the images key, or `None` when every reference is already remembered.
/// Order is oldest first so that bounding drops the oldest releases.
pub fn merged(existing: Option<&str>, refs: &BTreeSet<String>) -> Option<String> {
    let mut lines: Vec<&str> = existing
        .map(|t| t.lines().filter(|l| !l.trim().is_empty()).collect())
        .unwrap_or_default();
    let present: HashSet<&str> = lines.iter().copied().collect();
    let remembered = lines.len();
    let refs = refs.iter().map(String::as_str);
    lines.extend(refs.filter(|r| !present.contains(r)));
    if lines.len() == remembered {
        return None;
    }
    let excess = lines.len().saturating_sub(LIMIT);
    let mut text = lines[excess..].join("\n");
    text.push('\n');
    Some(text)
}

/// Adds the `refs` not in `current` yet (the ConfigMap as the watch has it) to it; no write
/// when there are none.
pub async fn remember(
    api: &Api<ConfigMap>,
    current: Option<std::sync::Arc<ConfigMap>>,
    refs: &BTreeSet<String>,
    metrics: &Metrics,
) {
    let existing = current
        .as_ref()
        .and_then(|cm| cm.data.as_ref())
        .and_then(|d| d.get(IMAGES_KEY));
    let Some(text) = merged(existing.map(String::as_str), refs) else {
        return;
    };
    let read_at = current
        .as_ref()
        .and_then(|cm| cm.metadata.resource_version.clone());
    let body = new_config_map(text, read_at);
    let write = async {
        match &current {
            None => api.create(&api_client::post_params(), &body).await,
            // Applied over the resourceVersion `existing` was read at: a ConfigMap changed since
            // is a conflict (409), never overwritten. Forced, since the key may be owned by our
            // own create or by an older version's JSON Patch (other managers in `managedFields`).
            Some(_) => {
                let mut params = PatchParams::apply(crate::names::FIELD_MANAGER);
                params.force = true;
                api.patch(CONFIG_MAP_NAME, &params, &Patch::Apply(body))
                    .await
            }
        }
    };
    match api_client::bounded(write).await {
        Ok(_) => {
            metrics.writes.with_label_values(&["ConfigMap"]).inc();
            info!(
                configmap = CONFIG_MAP_NAME,
                "remembered the golden stream's images"
            );
        }
        // Someone (another replica, a previous pass) wrote first; the next pass merges again.
        Err(kube::Error::Api(e)) if e.code == 409 => {}
        Err(e) => {
            metrics
                .write_failures
                .with_label_values(&["ConfigMap"])
                .inc();
            warn!(error = %e, configmap = CONFIG_MAP_NAME, "could not remember known images (bookkeeping only)");
        }
    }
}

/// The ConfigMap of remembered images, holding `text`, as read at `resource_version` (none to
/// create it).
fn new_config_map(text: String, resource_version: Option<String>) -> ConfigMap {
    let managed_by = (
        "app.kubernetes.io/managed-by".into(),
        "boot-image-controller".into(),
    );
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(CONFIG_MAP_NAME.into()),
            labels: Some([managed_by].into()),
            resource_version,
            ..ObjectMeta::default()
        },
        data: Some([(IMAGES_KEY.to_string(), text)].into()),
        ..ConfigMap::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(items: &[&str]) -> BTreeSet<String> {
        items.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn appends_only_new_references() {
        assert_eq!(merged(None, &set(&["ami-1"])).as_deref(), Some("ami-1\n"));
        assert_eq!(merged(Some("ami-1\n"), &set(&["ami-1"])), None);
        assert_eq!(
            merged(Some("ami-2\n"), &set(&["ami-1", "ami-2"])).as_deref(),
            Some("ami-2\nami-1\n")
        );
    }

    #[test]
    fn bounded_by_dropping_the_oldest() {
        let old: String = (0..LIMIT).map(|i| format!("ami-{i}\n")).collect();
        let text = merged(Some(&old), &set(&["ami-new"])).unwrap();
        assert_eq!(text.lines().count(), LIMIT);
        assert_eq!(text.lines().next(), Some("ami-1"));
        assert_eq!(text.lines().last(), Some("ami-new"));
    }
}
