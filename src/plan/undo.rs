//! The undo of recorded changes: from an object and the history entries to undo, the values to
//! put back, each guarded by what the controller wrote. Pure; shared by the `revert` command
//! (`src/revert.rs`) and the automatic revert of a failed boot image (`boot_follow`).

use jsonptr::Pointer;
use serde::Serialize;
use serde_json::Value;

use super::Patch;
use super::history::{Change, HistoryEntry};
use super::patch::Guarded;
use super::stub;
use crate::machine_kind::MachineKind;
use crate::names::HISTORY_ANNOTATION;
use crate::platform::{display_image as display, image_locations};

#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum RevertError {
    #[error(
        "{object} has no boot-image history (annotation {HISTORY_ANNOTATION}): the controller \
         never changed it, or earlier reverts undid every recorded change; nothing to revert"
    )]
    NoHistory { object: String },
    #[error(
        "{object} has an unreadable history annotation {HISTORY_ANNOTATION} ({error}); \
         nothing can be reverted from it"
    )]
    UnreadableHistory { object: String, error: String },
    #[error(
        "cannot revert {requested} step(s): {object} has only {recorded} recorded change(s); \
         use --steps {recorded} or less"
    )]
    NotEnoughHistory {
        object: String,
        requested: usize,
        recorded: usize,
    },
    #[error("--steps must be at least 1")]
    NoSteps,
    #[error("{object} has no providerSpec.value object at {path}")]
    NoProviderSpec { object: String, path: String },
    #[error(
        "{object}: cannot tell where the recorded boot image {image} lives in the providerSpec \
         (no ami, GCP boot disk or Azure image); nothing was changed"
    )]
    BootImageNotFound { object: String, image: String },
    #[error(
        "{object}: {field} at {path} is {current}, but the controller last set it to {expected}; \
         someone changed it since, so the revert is refused rather than overwriting that change \
         (edit it by hand, or remove the newer value first)"
    )]
    ChangedSince {
        object: String,
        field: Field,
        path: String,
        expected: String,
        current: String,
    },
}

/// A value the history records.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Field {
    BootImage,
    UserDataSecret,
    InfrastructureTemplate,
}

impl std::fmt::Display for Field {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Field::BootImage => "bootImage",
            Field::UserDataSecret => "userDataSecret",
            Field::InfrastructureTemplate => "infrastructureTemplate",
        })
    }
}

/// One value put back.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Restore {
    pub field: Field,
    /// JSON Pointer into the object.
    pub path: String,
    /// What the object holds now (what the controller wrote).
    pub from: Value,
    /// What it holds after the revert (what the controller had replaced).
    pub to: Value,
}

/// The values that undo the changes `undone` recorded on `object`, for `revert` and for the
/// controller's automatic revert of a failed boot image alike: for each field the undone entries
/// recorded, the `from` of the oldest of them, guarded by the `to` of the newest (what the object
/// must hold now). Values the changes left as they were are not listed.
pub fn undo(
    kind: MachineKind,
    object: &Value,
    undone: &[HistoryEntry],
    described: &str,
) -> Result<Vec<Restore>, RevertError> {
    let mut changes = Vec::new();
    if kind.is_cluster_api() {
        // A Cluster API MachineSet's boot image is its template's: the revert points it back at
        // the template it used before (which the update left untouched), if it still names the
        // one the newest entry moved it to.
        if let Some(values) = span(undone, |e| e.infrastructure_template.as_ref()) {
            let pointer = crate::plan::cluster_api_templates::REFERENCE_NAME_POINTER;
            let current = object.pointer(pointer).cloned().unwrap_or(Value::Null);
            let field = Field::InfrastructureTemplate;
            let restored = restore(described, field, pointer.to_string(), current, values)?;
            changes.push(restored);
        }
        changes.retain(|c| c.from != c.to);
        return Ok(changes);
    }
    let base = kind.provider_spec_path().as_str();
    let spec = || {
        object
            .pointer(base)
            .filter(|v| v.is_object())
            .ok_or_else(|| RevertError::NoProviderSpec {
                object: described.to_string(),
                path: base.to_string(),
            })
    };
    if let Some(values) = span(undone, |e| e.boot_image.as_ref()) {
        let places =
            image_locations(spec()?, &values.0).ok_or_else(|| RevertError::BootImageNotFound {
                object: described.to_string(),
                image: display(Some(&values.0)),
            })?;
        for (pointer, current) in places {
            let path = format!("{base}{pointer}");
            let restored = restore(described, Field::BootImage, path, current, values.clone())?;
            changes.push(restored);
        }
    }
    if let Some(values) = span(undone, |e| e.user_data_secret.as_ref()) {
        let current = spec()?.pointer(stub::NAME_POINTER).cloned();
        let current = current.unwrap_or(Value::Null);
        let path = format!("{base}{}", stub::NAME_POINTER);
        let restored = restore(described, Field::UserDataSecret, path, current, values)?;
        changes.push(restored);
    }
    changes.retain(|c| c.from != c.to);
    Ok(changes)
}

/// Of one field among the `undone` entries: the `to` of its newest change (what the object must
/// hold now) and the `from` of its oldest (what it held before).
fn span<'a, T: Clone + Into<Value> + 'a>(
    undone: &'a [HistoryEntry],
    field: impl Fn(&'a HistoryEntry) -> Option<&'a Change<T>>,
) -> Option<(Value, Value)> {
    let newest = undone.iter().rev().find_map(&field)?;
    let oldest = undone.iter().find_map(&field)?;
    Some((newest.to.clone().into(), oldest.from.clone().into()))
}

/// `restored` put back at `path`, if the object still holds there what the controller wrote
/// (`expected`).
fn restore(
    described: &str,
    field: Field,
    path: String,
    current: Value,
    (expected, restored): (Value, Value),
) -> Result<Restore, RevertError> {
    if current != expected {
        return Err(RevertError::ChangedSince {
            object: described.to_string(),
            field,
            path,
            expected: display(Some(&expected)),
            current: if current.is_null() {
                "absent".into()
            } else {
                display(Some(&current))
            },
        });
    }
    Ok(Restore {
        field,
        path,
        from: current,
        to: restored,
    })
}

/// Adds to `patch` the replaces that put back `changes`, each tested against what the object
/// must hold now.
pub fn put_back(patch: &mut Patch, changes: &[Restore]) {
    for change in changes {
        let path = Pointer::parse(&change.path).expect("restored paths are built as pointers");
        patch.guarded_replace(path.to_buf(), change.from.clone(), change.to.clone());
    }
}
