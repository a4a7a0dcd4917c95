//! The undo of recorded changes: from an object and the history entries to undo, the values to
//! put back, each guarded by what the controller wrote. Pure; shared by the `revert` command
//! (`src/revert.rs`) and the automatic revert of a failed boot image (`boot_follow`).

use jsonptr::Pointer;
use serde::Serialize;
use serde_json::Value;

use super::Patch;
use super::history::HistoryEntry;
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

impl Field {
    pub fn as_str(self) -> &'static str {
        match self {
            Field::BootImage => "bootImage",
            Field::UserDataSecret => "userDataSecret",
            Field::InfrastructureTemplate => "infrastructureTemplate",
        }
    }
}

impl std::fmt::Display for Field {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
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
/// controller's automatic revert of a failed boot image alike; values the changes left as they
/// were are not listed.
pub fn undo(
    kind: MachineKind,
    object: &Value,
    undone: &[HistoryEntry],
    described: &str,
) -> Result<Vec<Restore>, RevertError> {
    let mut changes = restores(kind, object, undone, described)?;
    changes.retain(|c| c.from != c.to);
    Ok(changes)
}

/// Adds to `patch` the replaces that put back `changes`, each tested against what the object
/// must hold now.
pub fn put_back(patch: &mut Patch, changes: &[Restore]) {
    for change in changes {
        let path = Pointer::parse(&change.path).expect("restored paths are built as pointers");
        patch.guarded_replace(path.to_buf(), change.from.clone(), change.to.clone());
    }
}

/// The values to put back: for each field the undone entries recorded, the `from` of the oldest
/// of them, guarded by the `to` of the newest (what the object must hold now).
fn restores(
    kind: MachineKind,
    object: &Value,
    undone: &[HistoryEntry],
    described: &str,
) -> Result<Vec<Restore>, RevertError> {
    if kind.is_cluster_api() {
        return template_restores(object, undone, described);
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
    let mut changes = Vec::new();
    // Newest entry recording a field: what the object must hold now. Oldest: what it held before.
    let newest_image = undone.iter().rev().find_map(|e| e.boot_image.as_ref());
    let oldest_image = undone.iter().find_map(|e| e.boot_image.as_ref());
    if let (Some(newest), Some(oldest)) = (newest_image, oldest_image) {
        let spec = spec()?;
        let places =
            image_locations(spec, &newest.to).ok_or_else(|| RevertError::BootImageNotFound {
                object: described.to_string(),
                image: display(Some(&newest.to)),
            })?;
        for (pointer, current) in places {
            changes.push(restore(
                described,
                Field::BootImage,
                format!("{base}{pointer}"),
                current,
                &newest.to,
                &oldest.from,
            )?);
        }
    }
    let newest_secret = undone
        .iter()
        .rev()
        .find_map(|e| e.user_data_secret.as_ref());
    let oldest_secret = undone.iter().find_map(|e| e.user_data_secret.as_ref());
    if let (Some(newest), Some(oldest)) = (newest_secret, oldest_secret) {
        let current = spec()?
            .pointer(stub::NAME_POINTER)
            .cloned()
            .unwrap_or(Value::Null);
        changes.push(restore(
            described,
            Field::UserDataSecret,
            format!("{base}{}", stub::NAME_POINTER),
            current,
            &Value::String(newest.to.clone()),
            &Value::String(oldest.from.clone()),
        )?);
    }
    Ok(changes)
}

/// A Cluster API MachineSet's boot image is its template's: the revert points it back at the
/// template it used before (which the update left untouched), as the oldest undone entry
/// recorded it, if it still names the one the newest entry moved it to.
fn template_restores(
    object: &Value,
    undone: &[HistoryEntry],
    described: &str,
) -> Result<Vec<Restore>, RevertError> {
    let newest = undone
        .iter()
        .rev()
        .find_map(|e| e.infrastructure_template.as_ref());
    let oldest = undone
        .iter()
        .find_map(|e| e.infrastructure_template.as_ref());
    let (Some(newest), Some(oldest)) = (newest, oldest) else {
        return Ok(Vec::new());
    };
    let pointer = crate::plan::cluster_api_templates::REFERENCE_NAME_POINTER;
    let current = object.pointer(pointer).cloned().unwrap_or(Value::Null);
    let restored = restore(
        described,
        Field::InfrastructureTemplate,
        pointer.to_string(),
        current,
        &Value::String(newest.to.clone()),
        &Value::String(oldest.from.clone()),
    )?;
    Ok(vec![restored])
}

fn restore(
    described: &str,
    field: Field,
    path: String,
    current: Value,
    expected: &Value,
    restored: &Value,
) -> Result<Restore, RevertError> {
    if current != *expected {
        return Err(RevertError::ChangedSince {
            object: described.to_string(),
            field,
            path,
            expected: display(Some(expected)),
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
        to: restored.clone(),
    })
}
