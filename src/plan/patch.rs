//! Guarded JSON Patch operations: every value we replace or remove is first tested, so a
//! concurrent edit of the same field makes the API server reject the whole patch (422) instead
//! of us overwriting it.

use json_patch::{
    AddOperation, Patch, PatchOperation, RemoveOperation, ReplaceOperation, TestOperation,
};
use jsonptr::{Pointer, PointerBuf};
use serde_json::Value;

use crate::api::ObjectMeta;

/// The resourceVersion, which guards what JSON Patch cannot: that a field is still absent.
pub const RESOURCE_VERSION: &Pointer = Pointer::from_static("/metadata/resourceVersion");
const ANNOTATIONS: &Pointer = Pointer::from_static("/metadata/annotations");

/// The path of one annotation; its key's `~` and `/` are escaped as RFC 6901 says.
pub fn annotation(key: &str) -> PointerBuf {
    let mut path = ANNOTATIONS.to_buf();
    path.push_back(key);
    path
}

/// `relative` under `base`, or `None` when `relative` is not a JSON Pointer.
pub fn under(base: &Pointer, relative: &str) -> Option<PointerBuf> {
    Pointer::parse(relative).ok().map(|r| base.concat(r))
}

/// `relative`, a pointer the planner builds from constants and indices, under `base`.
pub fn under_known(base: &Pointer, relative: &str) -> PointerBuf {
    under(base, relative).expect("pointers are built from valid constants")
}

/// The operations a plan writes, added to a [`Patch`].
pub trait Guarded {
    fn test(&mut self, path: PointerBuf, value: impl Into<Value>);
    fn add(&mut self, path: PointerBuf, value: impl Into<Value>);
    fn remove(&mut self, path: PointerBuf);
    /// A `test` of the old value, then its `replace`.
    fn guarded_replace(&mut self, path: PointerBuf, from: impl Into<Value>, to: impl Into<Value>);
    /// Puts a `test` of the resourceVersion `seen` first, unless the patch tests it already.
    fn guard_resource_version(&mut self, seen: &str);
}

impl Guarded for Patch {
    fn test(&mut self, path: PointerBuf, value: impl Into<Value>) {
        let value = value.into();
        self.0
            .push(PatchOperation::Test(TestOperation { path, value }));
    }

    fn add(&mut self, path: PointerBuf, value: impl Into<Value>) {
        let value = value.into();
        self.0
            .push(PatchOperation::Add(AddOperation { path, value }));
    }

    fn remove(&mut self, path: PointerBuf) {
        self.0
            .push(PatchOperation::Remove(RemoveOperation { path }));
    }

    fn guarded_replace(&mut self, path: PointerBuf, from: impl Into<Value>, to: impl Into<Value>) {
        self.test(path.clone(), from);
        let value = to.into();
        self.0
            .push(PatchOperation::Replace(ReplaceOperation { path, value }));
    }

    fn guard_resource_version(&mut self, seen: &str) {
        let tested = |op: &PatchOperation| matches!(op, PatchOperation::Test(test) if test.path == *RESOURCE_VERSION);
        if self.0.iter().any(tested) {
            return;
        }
        let path = RESOURCE_VERSION.to_buf();
        let value = Value::from(seen);
        (self.0).insert(0, PatchOperation::Test(TestOperation { path, value }));
    }
}

/// Guarded operations that set annotations to new values.
pub fn set_annotations(
    patch: &mut Patch,
    meta: &ObjectMeta,
    values: impl IntoIterator<Item = (&'static str, impl Into<String>)>,
) {
    let values = values.into_iter().map(|(key, value)| (key, value.into()));
    let Some(existing) = &meta.annotations else {
        // No annotations at all: the map must be created, and JSON Patch cannot test that it is
        // still absent, so the resourceVersion guards it (at worst one retry).
        if let Some(rv) = &meta.resource_version {
            patch.test(RESOURCE_VERSION.to_buf(), rv.as_str());
        }
        let map = values.map(|(k, v): (_, String)| (k.to_string(), v.into()));
        patch.add(ANNOTATIONS.to_buf(), Value::Object(map.collect()));
        return;
    };
    for (key, value) in values {
        match existing.get(key) {
            Some(old) if *old == value => {}
            Some(old) => patch.guarded_replace(annotation(key), old.as_str(), value),
            None => patch.add(annotation(key), value),
        }
    }
}

/// Guarded removal of one of our annotations, if present.
pub fn remove_annotation(patch: &mut Patch, meta: &ObjectMeta, key: &str) {
    if let Some(old) = meta.annotations.as_ref().and_then(|a| a.get(key)) {
        patch.test(annotation(key), old.as_str());
        patch.remove(annotation(key));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::names::{AUTOSCALER_LABELS_ANNOTATION, HISTORY_ANNOTATION, HOT_LOOP_ANNOTATION};

    #[test]
    fn annotation_paths_encode_the_slash_and_tilde_of_a_key() {
        for key in [
            HISTORY_ANNOTATION,
            HOT_LOOP_ANNOTATION,
            AUTOSCALER_LABELS_ANNOTATION,
            "example.com/other",
            "a~b/c~1",
            "plain",
        ] {
            let path = annotation(key);
            let expected = format!(
                "/metadata/annotations/{}",
                key.replace('~', "~0").replace('/', "~1")
            );
            assert_eq!(path.as_str(), expected);
            assert_eq!(path.tokens().last().unwrap().decoded(), key);
        }
    }

    /// What is not a JSON Pointer on its own is not one under a base either, although the
    /// joined text of `ami/id` would read as one.
    #[test]
    fn a_relative_that_is_not_a_pointer_is_refused_under_any_base() {
        let base = Pointer::from_static("/spec/template/spec/providerSpec/value");
        assert_eq!(
            under(base, "/disks/0/image").unwrap().as_str(),
            "/spec/template/spec/providerSpec/value/disks/0/image"
        );
        assert_eq!(
            under(Pointer::root(), "/ami/id").unwrap().as_str(),
            "/ami/id"
        );
        for relative in ["ami/id", "/ami~2id", "/a~"] {
            assert!(under(base, relative).is_none(), "{relative}");
            assert!(under(Pointer::root(), relative).is_none(), "{relative}");
        }
    }

    #[test]
    fn the_resource_version_guard_goes_first_once() {
        let mut patch = Patch::default();
        patch.guarded_replace(PointerBuf::parse("/spec/x").unwrap(), "a", "b");
        patch.guard_resource_version("41");
        patch.guard_resource_version("42");
        assert_eq!(
            serde_json::to_value(&patch).unwrap(),
            serde_json::json!([
                {"op": "test", "path": "/metadata/resourceVersion", "value": "41"},
                {"op": "test", "path": "/spec/x", "value": "a"},
                {"op": "replace", "path": "/spec/x", "value": "b"},
            ])
        );
    }

    /// Where the map of annotations is missing, it is created whole under the guard of the
    /// resourceVersion; where it exists, each value is tested before it is replaced.
    #[test]
    fn annotations_are_created_or_replaced_under_guards() {
        let absent = ObjectMeta {
            resource_version: Some("7".into()),
            ..Default::default()
        };
        let mut patch = Patch::default();
        set_annotations(&mut patch, &absent, [("a/b", "1"), ("c", "2")]);
        assert_eq!(
            serde_json::to_value(&patch).unwrap(),
            serde_json::json!([
                {"op": "test", "path": "/metadata/resourceVersion", "value": "7"},
                {"op": "add", "path": "/metadata/annotations", "value": {"a/b": "1", "c": "2"}},
            ])
        );
        let present = ObjectMeta {
            annotations: Some([("a/b".into(), "0".into()), ("c".into(), "2".into())].into()),
            ..Default::default()
        };
        let mut patch = Patch::default();
        let wanted = [("a/b", "1"), ("c", "2"), ("d", "3")];
        set_annotations(&mut patch, &present, wanted);
        remove_annotation(&mut patch, &present, "c");
        remove_annotation(&mut patch, &present, "missing");
        assert_eq!(
            serde_json::to_value(&patch).unwrap(),
            serde_json::json!([
                {"op": "test", "path": "/metadata/annotations/a~1b", "value": "0"},
                {"op": "replace", "path": "/metadata/annotations/a~1b", "value": "1"},
                {"op": "add", "path": "/metadata/annotations/d", "value": "3"},
                {"op": "test", "path": "/metadata/annotations/c", "value": "2"},
                {"op": "remove", "path": "/metadata/annotations/c"},
            ])
        );
    }
}
