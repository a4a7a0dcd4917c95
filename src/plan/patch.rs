//! Guarded JSON Patch operations: every value we replace or remove is first tested, so a
//! concurrent edit of the same field makes the API server reject the whole patch (422) instead
//! of us overwriting it.

use json_patch::{AddOperation, PatchOperation, RemoveOperation, ReplaceOperation, TestOperation};
use jsonptr::PointerBuf;
use serde_json::Value;

use super::record::annotation;
use crate::api::ObjectMeta;

/// A `test` of the old value, then its `replace`.
pub fn guarded_replace(pointer: &str, from: Value, to: Value) -> [PatchOperation; 2] {
    let path = PointerBuf::parse(pointer).expect("pointers are built from valid constants");
    [
        test_op(path.clone(), from),
        PatchOperation::Replace(ReplaceOperation { path, value: to }),
    ]
}

/// Guarded operations that set annotations to new values.
pub fn set_annotations_ops(meta: &ObjectMeta, values: &[(&str, String)]) -> Vec<PatchOperation> {
    let Some(existing) = meta.annotations.as_ref() else {
        let map: serde_json::Map<String, Value> = values
            .iter()
            .map(|(k, v)| (k.to_string(), Value::String(v.clone())))
            .collect();
        let mut ops = Vec::new();
        if let Some(rv) = &meta.resource_version {
            ops.push(test_op(
                PointerBuf::from_tokens(["metadata", "resourceVersion"]),
                rv.clone().into(),
            ));
        }
        ops.push(PatchOperation::Add(AddOperation {
            path: PointerBuf::from_tokens(["metadata", "annotations"]),
            value: Value::Object(map),
        }));
        return ops;
    };
    let mut ops = Vec::new();
    for (key, value) in values {
        let path = annotation_path(key);
        match existing.get(*key) {
            Some(old) if old == value => {}
            Some(old) => {
                ops.push(test_op(path.clone(), old.clone().into()));
                ops.push(PatchOperation::Replace(ReplaceOperation {
                    path,
                    value: value.clone().into(),
                }));
            }
            None => ops.push(PatchOperation::Add(AddOperation {
                path,
                value: value.clone().into(),
            })),
        }
    }
    ops
}

/// Guarded removal of one of our annotations, if present.
pub fn remove_annotation_ops(meta: &ObjectMeta, key: &str) -> Vec<PatchOperation> {
    match annotation(meta, key) {
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
    PointerBuf::from_tokens(["metadata", "annotations", key])
}

pub fn test_op(path: PointerBuf, value: Value) -> PatchOperation {
    PatchOperation::Test(TestOperation { path, value })
}
