//! Old templates of ours: a few are kept (to go back to), older ones are destroyed, and never
//! one that a MachineSet still clones.
//!
//! Ours are `<prefix><release>` in the folder we import into, `<prefix>` being the name of the
//! current template without its release (`<infra>-rhcos-<failure domain>-`), and marked as
//! templates. The rest after the prefix must look like a release (a digit first, a dot in it),
//! so that the installer's `<infra>-rhcos-<region>-<zone>` is never taken for one of ours when a
//! failure domain is named after a region.

use std::collections::BTreeSet;

use super::VcenterError;
use super::client::{VcenterClient, inventory_path};
use crate::facts::vcenter::TemplateRequest;

/// The names of our old templates to destroy: among `candidates` (name, creation time as
/// vCenter writes it, whether it is a template), those of ours other than `current` and the
/// ones in `in_use`, beyond the `keep` newest.
pub fn to_destroy(
    candidates: &[(String, String, bool)],
    prefix: &str,
    current: &str,
    in_use: &BTreeSet<String>,
    keep: usize,
) -> Vec<String> {
    let mut ours: Vec<(&str, jiff::Timestamp)> = candidates
        .iter()
        .filter(|(name, _, template)| *template && is_ours(name, prefix) && name != current)
        .filter_map(|(name, created, _)| Some((name.as_str(), created.parse().ok()?)))
        .collect();
    // Newest first; names break ties so that every replica picks the same ones.
    ours.sort_by(|a, b| b.1.cmp(&a.1).then(b.0.cmp(a.0)));
    ours.into_iter()
        .skip(keep)
        .map(|(name, _)| name)
        .filter(|name| !in_use.contains(*name))
        .map(str::to_string)
        .collect()
}

fn is_ours(name: &str, prefix: &str) -> bool {
    name.strip_prefix(prefix).is_some_and(|release| {
        release.starts_with(|c: char| c.is_ascii_digit()) && release.contains('.')
    })
}

/// Destroys our old templates of `request`'s failure domain beyond the `keep` newest, never one
/// named in `in_use`; returns the names destroyed.
pub async fn prune(
    client: &VcenterClient,
    request: &TemplateRequest,
    in_use: &BTreeSet<String>,
    keep: usize,
) -> Result<Vec<String>, VcenterError> {
    let current = &request.key.name;
    let Some(prefix) = current.strip_suffix(&request.ova.release) else {
        return Ok(Vec::new());
    };
    let folder_path = inventory_path(&request.key.datacenter, "vm", &request.folder);
    let folder = client.require(&folder_path, "folder").await?;
    let vms = client.child_vms(&folder).await?;
    let mut candidates = Vec::new();
    for (name, vm) in &vms {
        if !is_ours(name, prefix) || name == current {
            continue;
        }
        let created = client.property_text(vm, "config.createDate").await?;
        let template = client.is_template(vm).await?;
        candidates.push((name.clone(), created.unwrap_or_default(), template));
    }
    let doomed = to_destroy(&candidates, prefix, current, in_use, keep);
    for (name, vm) in vms.iter().filter(|(name, _)| doomed.contains(name)) {
        tracing::info!(template = %name, "destroying an old template no MachineSet uses");
        client.destroy(vm).await?;
    }
    Ok(doomed)
}

#[cfg(test)]
mod tests {
    use super::*;

    const PREFIX: &str = "demo-rhcos-us-east-1a-";

    fn template(release: &str, created: &str) -> (String, String, bool) {
        (format!("{PREFIX}{release}"), created.to_string(), true)
    }

    #[test]
    fn the_newest_old_templates_are_kept_and_the_rest_destroyed() {
        let candidates = vec![
            template("9.6.20251023-0", "2025-10-24T00:00:00Z"),
            template("9.6.20250826-1", "2025-08-27T00:00:00Z"),
            template("418.94.202410090804-0", "2024-10-10T00:00:00Z"),
            template("417.94.202405291527-0", "2024-05-30T00:00:00Z"),
        ];
        let current = format!("{PREFIX}9.6.20251023-0");
        let none = BTreeSet::new();
        let doomed = to_destroy(&candidates, PREFIX, &current, &none, 1);
        assert_eq!(
            doomed,
            [
                format!("{PREFIX}418.94.202410090804-0"),
                format!("{PREFIX}417.94.202405291527-0")
            ]
        );
        assert!(to_destroy(&candidates, PREFIX, &current, &none, 3).is_empty());
    }

    #[test]
    fn a_template_in_use_or_not_ours_is_never_destroyed() {
        let mut candidates = vec![
            template("418.94.202410090804-0", "2024-10-10T00:00:00Z"),
            template("417.94.202405291527-0", "2024-05-30T00:00:00Z"),
        ];
        // The installer's template of a zone when the failure domain is named after a region,
        // a VM that is not a template, and someone else's.
        candidates.push((
            "demo-rhcos-us-east-1a-1a".into(),
            "2024-01-01T00:00:00Z".into(),
            true,
        ));
        candidates.push((
            format!("{PREFIX}9.4.1-0"),
            "2023-01-01T00:00:00Z".into(),
            false,
        ));
        candidates.push(("golden".into(), "2023-01-01T00:00:00Z".into(), true));
        let in_use = BTreeSet::from([format!("{PREFIX}417.94.202405291527-0")]);
        let doomed = to_destroy(&candidates, PREFIX, "x", &in_use, 0);
        assert_eq!(doomed, [format!("{PREFIX}418.94.202410090804-0")]);
    }
}
