//! Guarded JSON Patch operations: every value we replace or remove is first tested, so a
//! concurrent edit of the same field makes the API server reject the whole patch (422) instead
//! of us overwriting it.

use json_patch::{AddOperation, PatchOperation, RemoveOperation, ReplaceOperation, TestOperation};
use std::sync::LazyLock;

use jsonptr::{Pointer, PointerBuf};
use serde_json::Value;

use crate::meta_view::MetaView;
use crate::names::{AUTOSCALER_LABELS_ANNOTATION, HISTORY_ANNOTATION, HOT_LOOP_ANNOTATION};

/// The resourceVersion, which guards what JSON Patch cannot: that a field is still absent.
pub const RESOURCE_VERSION: &Pointer = Pointer::from_static("/metadata/resourceVersion");
const ANNOTATIONS: &Pointer = Pointer::from_static("/metadata/annotations");

/// A `test` of the old value, then its `replace`.
pub fn guarded_replace(pointer: &str, from: Value, to: Value) -> [PatchOperation; 2] {
    let path = PointerBuf::parse(pointer).expect("pointers are built from valid constants");
    guarded_replace_at(path, from, to)
}

/// [`guarded_replace`] of a pointer built already.
pub fn guarded_replace_at(path: PointerBuf, from: Value, to: Value) -> [PatchOperation; 2] {
    [
        test_op(path.clone(), from),
        PatchOperation::Replace(ReplaceOperation { path, value: to }),
    ]
}

/// Guarded operations that set annotations to new values, which move into the operations
/// (a history is up to a few kilobytes of text).
pub fn set_annotations_ops<'a>(
    meta: impl Into<MetaView<'a>>,
    values: impl IntoIterator<Item = (&'static str, String)>,
) -> Vec<PatchOperation> {
    let meta = meta.into();
    let Some(existing) = meta.annotations() else {
        let map: serde_json::Map<String, Value> = values
            .into_iter()
            .map(|(k, v)| (k.to_string(), Value::String(v)))
            .collect();
        let mut ops = Vec::new();
        if let Some(rv) = meta.resource_version() {
            ops.push(test_op(RESOURCE_VERSION.to_buf(), rv.clone().into()));
        }
        ops.push(PatchOperation::Add(AddOperation {
            path: ANNOTATIONS.to_buf(),
            value: Value::Object(map),
        }));
        return ops;
    };
    let mut ops = Vec::new();
    for (key, value) in values {
        let path = annotation_path(key);
        match existing.get(key) {
            Some(old) if old == value => {}
            Some(old) => {
                ops.push(test_op(path.clone(), old.into()));
                ops.push(PatchOperation::Replace(ReplaceOperation {
                    path,
                    value: value.into(),
                }));
            }
            None => ops.push(PatchOperation::Add(AddOperation {
                path,
                value: value.into(),
            })),
        }
    }
    ops
}

/// Guarded removal of one of our annotations, if present.
pub fn remove_annotation_ops<'a>(meta: impl Into<MetaView<'a>>, key: &str) -> Vec<PatchOperation> {
    match meta.into().annotation(key) {
        None => Vec::new(),
        Some(old) => {
            let path = annotation_path(key);
            vec![
                test_op(path.clone(), old.into()),
                PatchOperation::Remove(RemoveOperation { path }),
            ]
        }
    }
}

pub fn annotation_path(key: &str) -> PointerBuf {
    // The annotations every update writes or tests, encoded once (`/` becomes `~1`).
    static OURS: LazyLock<[(&str, PointerBuf); 3]> = LazyLock::new(|| {
        [
            HISTORY_ANNOTATION,
            HOT_LOOP_ANNOTATION,
            AUTOSCALER_LABELS_ANNOTATION,
        ]
        .map(|key| (key, encoded_annotation_path(key)))
    });
    match OURS.iter().find(|(ours, _)| *ours == key) {
        Some((_, path)) => path.clone(),
        None => encoded_annotation_path(key),
    }
}

fn encoded_annotation_path(key: &str) -> PointerBuf {
    PointerBuf::from_tokens(["metadata", "annotations", key])
}

/// `relative`, a pointer built by the planner from constants and indices, under `base`.
pub fn pointer_under(base: &Pointer, relative: &str) -> PointerBuf {
    try_pointer_under(base, relative).expect("pointers are built from valid constants")
}

/// `relative` under `base`, or `None` when `relative` is not a JSON Pointer.
///
/// Joined in one buffer of the right size (`Pointer::concat` copies `base` and then grows the
/// copy: two allocations for every guarded value of every update). A pointer is empty or starts
/// with `/`, so the joined text parses exactly when `relative` does.
pub fn try_pointer_under(base: &Pointer, relative: &str) -> Option<PointerBuf> {
    if !(relative.is_empty() || relative.starts_with('/')) {
        return None;
    }
    PointerBuf::parse([base.as_str(), relative].concat()).ok()
}

pub fn test_op(path: PointerBuf, value: Value) -> PatchOperation {
    PatchOperation::Test(TestOperation { path, value })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn annotation_paths_encode_the_slash_of_a_key_whether_or_not_it_is_one_of_ours() {
        for key in [
            HISTORY_ANNOTATION,
            HOT_LOOP_ANNOTATION,
            AUTOSCALER_LABELS_ANNOTATION,
            "example.com/other",
        ] {
            let path = annotation_path(key);
            let expected = format!("/metadata/annotations/{}", key.replace('/', "~1"));
            assert_eq!(path.as_str(), expected);
            assert_eq!(path.tokens().last().unwrap().decoded(), key);
        }
    }

    #[test]
    fn a_pointer_under_a_base_is_the_two_joined() {
        let base = Pointer::from_static("/spec/template/spec/providerSpec/value");
        let joined = pointer_under(base, "/disks/0/image");
        assert_eq!(
            joined.as_str(),
            "/spec/template/spec/providerSpec/value/disks/0/image"
        );
        assert_eq!(
            pointer_under(Pointer::root(), "/ami/id").as_str(),
            "/ami/id"
        );
        assert_eq!(pointer_under(base, "").as_str(), base.as_str());
    }

    /// What is not a JSON Pointer on its own is not one under a base either, although the
    /// joined text of `ami/id` would read as one.
    #[test]
    fn a_relative_that_is_not_a_pointer_is_refused_under_any_base() {
        let base = Pointer::from_static("/spec/template/spec/providerSpec/value");
        for relative in ["ami/id", "/ami~2id", "/a~"] {
            assert!(Pointer::parse(relative).is_err(), "{relative}");
            assert_eq!(try_pointer_under(base, relative), None, "{relative}");
            assert_eq!(
                try_pointer_under(Pointer::root(), relative),
                None,
                "{relative}"
            );
        }
    }
}
