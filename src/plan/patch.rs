//! Guarded JSON Patch operations: every value we replace or remove is first tested, so a
//! concurrent edit of the same field makes the API server reject the whole patch (422) instead
//! of us overwriting it.
//!
//! A patch is kept as the text the API server is sent ([`Patch`]), each operation written once
//! from the values the planner compared. As a list of `PatchOperation`s, every operation owned
//! its path and a copy of its value: two allocations an operation, and two more copies of an
//! Azure image object, kept by every decision until its patch was sent, then serialized anyway.

use std::fmt;
use std::ops::Range;

use json_patch::PatchOperation;
use jsonptr::Pointer;
use serde::{Serialize, Serializer};
use serde_json::Value;

use crate::json_text::{self, InString, JsonValue};
use crate::meta_view::MetaView;
use crate::platform::SharedImage;

/// The resourceVersion, which guards what JSON Patch cannot: that a field is still absent.
pub const RESOURCE_VERSION: &Pointer = Pointer::from_static("/metadata/resourceVersion");
const ANNOTATIONS: &Pointer = Pointer::from_static("/metadata/annotations");

/// Where an operation applies.
#[derive(Clone, Copy, Debug)]
pub enum Path<'a> {
    /// A whole pointer.
    At(&'a Pointer),
    /// A pointer under a base: a provider spec's path, then a field of the provider spec.
    Under(&'a Pointer, &'a Pointer),
    /// One annotation of the object, by its key.
    Annotation(&'a str),
}

impl<'a> Path<'a> {
    /// `relative` under `base`, or `None` when `relative` is not a JSON Pointer.
    pub fn under(base: &'a Pointer, relative: &'a str) -> Option<Self> {
        Pointer::parse(relative)
            .ok()
            .map(|relative| Path::Under(base, relative))
    }

    /// `relative`, a pointer the planner builds from constants and indices, under `base`.
    pub fn under_known(base: &'a Pointer, relative: &'a str) -> Self {
        Path::under(base, relative).expect("pointers are built from valid constants")
    }

    fn write(self, out: &mut Vec<u8>) {
        out.push(b'"');
        match self {
            Path::At(pointer) => json_text::contents(out, pointer.as_str()),
            Path::Under(base, relative) => {
                json_text::contents(out, base.as_str());
                json_text::contents(out, relative.as_str());
            }
            Path::Annotation(key) => {
                json_text::contents(out, ANNOTATIONS.as_str());
                out.push(b'/');
                // RFC 6901: a token's `~` is written `~0` and its `/` (in every prefixed
                // annotation key) `~1`.
                let mut rest = key;
                while let Some(at) = rest.find(['~', '/']) {
                    json_text::contents(out, &rest[..at]);
                    let escape: &[u8] = if rest.as_bytes()[at] == b'~' {
                        b"~0"
                    } else {
                        b"~1"
                    };
                    out.extend_from_slice(escape);
                    rest = &rest[at + 1..];
                }
                json_text::contents(out, rest);
            }
        }
        out.push(b'"');
    }
}

/// The value of an operation, borrowed from where the planner read or built it.
#[derive(Clone, Copy)]
pub enum Operand<'a> {
    Json(&'a Value),
    /// An image shared between decisions, whose JSON text is written once and copied.
    Image(&'a SharedImage),
    Text(&'a str),
    /// A string whose contents are JSON text, written straight into the patch by the function
    /// (the history and the hot-loop memory, each written anew by an update).
    JsonText(&'a dyn Fn(&mut InString<'_>)),
}

impl<'a> From<&'a Value> for Operand<'a> {
    fn from(value: &'a Value) -> Self {
        Operand::Json(value)
    }
}

impl<'a> From<&'a SharedImage> for Operand<'a> {
    fn from(image: &'a SharedImage) -> Self {
        Operand::Image(image)
    }
}

impl<'a> From<&'a str> for Operand<'a> {
    fn from(text: &'a str) -> Self {
        Operand::Text(text)
    }
}

impl<'a> From<&'a String> for Operand<'a> {
    fn from(text: &'a String) -> Self {
        Operand::Text(text)
    }
}

impl Operand<'_> {
    fn write(self, out: &mut Vec<u8>) {
        match self {
            Operand::Json(value) => json_text::value(out, value),
            Operand::Image(image) => image.write_json(out),
            Operand::Text(text) => json_text::string(out, text),
            Operand::JsonText(write) => {
                out.push(b'"');
                write(&mut InString(out));
                out.push(b'"');
            }
        }
    }

    /// Whether this is the string `text`. Text written by a function is taken to differ: it
    /// records the time of the update that writes it.
    fn is(self, text: &str) -> bool {
        match self {
            Operand::Json(value) => value.as_str() == Some(text),
            Operand::Image(image) => image.value().as_str() == Some(text),
            Operand::Text(value) => value == text,
            Operand::JsonText(_) => false,
        }
    }
}

/// A JSON Patch (RFC 6902), kept as the text of its operations, in the order the API server
/// applies them. Written exactly as serde_json writes the same `PatchOperation`s.
///
/// A patch can also be only counted ([`Patch::counted`]): its operations are numbered and none
/// is written. A controller pass needs no more, since it decides each object again when it
/// sends its patch; writing it twice wrote every history twice, escaped.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Patch {
    /// The operations, each a JSON object, separated by commas; the array's brackets are
    /// added when the patch is sent ([`Patch::body`]).
    text: Vec<u8>,
    /// How many operations `text` holds.
    len: usize,
    /// Whether one of them tests the resourceVersion.
    tests_resource_version: bool,
    /// Whether the operations are only counted, their text never written.
    counted: bool,
}

impl Patch {
    /// An empty patch with room for `bytes` of operations.
    pub fn with_capacity(bytes: usize) -> Self {
        Patch {
            text: Vec::with_capacity(bytes),
            ..Patch::default()
        }
    }

    /// A patch whose operations are counted and not written: it says whether there is
    /// something to send (and how much), and holds no text to send.
    pub fn counted() -> Self {
        Patch {
            counted: true,
            ..Patch::default()
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The number of operations.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Adds a `test` that the value at `path` is `value`.
    pub fn test<'v>(&mut self, path: Path<'_>, value: impl Into<Operand<'v>>) {
        if matches!(path, Path::At(pointer) if pointer == RESOURCE_VERSION) {
            self.tests_resource_version = true;
        }
        self.push_value("test", path, value.into());
    }

    pub fn replace<'v>(&mut self, path: Path<'_>, value: impl Into<Operand<'v>>) {
        self.push_value("replace", path, value.into());
    }

    pub fn add<'v>(&mut self, path: Path<'_>, value: impl Into<Operand<'v>>) {
        self.push_value("add", path, value.into());
    }

    pub fn remove(&mut self, path: Path<'_>) {
        self.push("remove", path, None::<fn(&mut Vec<u8>)>);
    }

    /// A `test` of the old value, then its `replace`.
    pub fn guarded_replace<'v>(
        &mut self,
        path: Path<'_>,
        from: impl Into<Operand<'v>>,
        to: impl Into<Operand<'v>>,
    ) {
        self.test(path, from);
        self.replace(path, to);
    }

    /// A `test` that the string at `path` is the text `old` writes, then a `replace` by the
    /// text `new` writes, each written as a string's contents, escaped. `old` returns where a
    /// part of its escaped text lies in the buffer, and `new` may copy that part: a new history
    /// keeps most of the old one, and escaping it once is enough.
    pub(super) fn guarded_replace_sharing(
        &mut self,
        path: Path<'_>,
        old: impl FnOnce(&mut Vec<u8>) -> Range<usize>,
        new: impl FnOnce(&mut Vec<u8>, Range<usize>),
    ) {
        let mut shared = 0..0;
        self.push(
            "test",
            path,
            Some(|out: &mut Vec<u8>| {
                out.push(b'"');
                shared = old(out);
                out.push(b'"');
            }),
        );
        self.push(
            "replace",
            path,
            Some(|out: &mut Vec<u8>| {
                out.push(b'"');
                new(out, shared);
                out.push(b'"');
            }),
        );
    }

    /// Adds the operations of `other` after these.
    fn append(&mut self, other: &Patch) {
        if other.is_empty() {
            return;
        }
        if !self.counted {
            if !self.is_empty() {
                self.text.push(b',');
            }
            self.text.extend_from_slice(&other.text);
        }
        self.len += other.len;
        self.tests_resource_version |= other.tests_resource_version;
    }

    /// Puts a `test` of the resourceVersion `seen` first, unless the patch tests it already.
    pub fn guard_resource_version(&mut self, seen: &str) {
        if self.tests_resource_version {
            return;
        }
        if self.counted {
            self.len += 1;
            self.tests_resource_version = true;
            return;
        }
        let mut guarded = Patch::with_capacity(self.text.len() + 80);
        guarded.test(Path::At(RESOURCE_VERSION), seen);
        guarded.append(self);
        *self = guarded;
    }

    /// The JSON array the API server is sent.
    pub fn body(&self) -> Vec<u8> {
        let mut body = Vec::with_capacity(self.text.len() + 2);
        body.push(b'[');
        body.extend_from_slice(&self.text);
        body.push(b']');
        body
    }

    /// The operations, read back from the text: for printing them one by one, and for
    /// applying them to a document (a revert's check, tests).
    pub fn ops(&self) -> Vec<PatchOperation> {
        serde_json::from_slice(&self.body()).expect("a patch is written as JSON Patch")
    }

    /// Adds one operation with `value`.
    fn push_value(&mut self, op: &str, path: Path<'_>, value: Operand<'_>) {
        self.push(op, path, Some(|out: &mut Vec<u8>| value.write(out)));
    }

    /// Adds one operation; `value` writes its value, if it has one.
    fn push(&mut self, op: &str, path: Path<'_>, value: Option<impl FnOnce(&mut Vec<u8>)>) {
        if self.counted {
            self.len += 1;
            return;
        }
        let text = &mut self.text;
        if self.len > 0 {
            text.push(b',');
        }
        text.extend_from_slice(b"{\"op\":\"");
        text.extend_from_slice(op.as_bytes());
        text.extend_from_slice(b"\",\"path\":");
        path.write(text);
        if let Some(value) = value {
            text.extend_from_slice(b",\"value\":");
            value(text);
        }
        text.push(b'}');
        self.len += 1;
    }

    fn as_str(&self) -> &str {
        std::str::from_utf8(&self.text).expect("JSON text is UTF-8")
    }
}

impl fmt::Debug for Patch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.counted {
            return write!(f, "[{} operations, counted]", self.len);
        }
        write!(f, "[{}]", self.as_str())
    }
}

/// As the list of operations it holds, in any format (`plan -o json` and `-o yaml` alike).
impl Serialize for Patch {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.ops().serialize(serializer)
    }
}

/// Guarded operations that set annotations to new values.
pub fn set_annotations<'a, 'v, V: Into<Operand<'v>>>(
    patch: &mut Patch,
    meta: impl Into<MetaView<'a>>,
    values: impl IntoIterator<Item = (&'static str, V)>,
) {
    let meta = meta.into();
    let Some(existing) = meta.annotations() else {
        // No annotations at all: the map must be created, and JSON Patch cannot test that it is
        // still absent, so the resourceVersion guards it (at worst one retry).
        if let Some(rv) = meta.resource_version() {
            patch.test(Path::At(RESOURCE_VERSION), rv);
        }
        let map = |out: &mut Vec<u8>| {
            out.push(b'{');
            for (i, (key, value)) in values.into_iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                json_text::string(out, key);
                out.push(b':');
                value.into().write(out);
            }
            out.push(b'}');
        };
        patch.push("add", Path::At(ANNOTATIONS), Some(map));
        return;
    };
    for (key, value) in values {
        let (path, value) = (Path::Annotation(key), value.into());
        match existing.get(key) {
            Some(old) if value.is(old) => {}
            Some(old) => patch.guarded_replace(path, old, value),
            None => patch.add(path, value),
        }
    }
}

/// Guarded removal of one of our annotations, if present.
pub fn remove_annotation<'a>(patch: &mut Patch, meta: impl Into<MetaView<'a>>, key: &str) {
    if let Some(old) = meta.into().annotation(key) {
        let path = Path::Annotation(key);
        patch.test(path, old);
        patch.remove(path);
    }
}

#[cfg(test)]
mod tests {
    use json_patch::{AddOperation, RemoveOperation, ReplaceOperation, TestOperation};
    use jsonptr::PointerBuf;
    use proptest::prelude::*;

    use super::*;
    use crate::names::{AUTOSCALER_LABELS_ANNOTATION, HISTORY_ANNOTATION, HOT_LOOP_ANNOTATION};

    fn path_of(op: &PatchOperation) -> String {
        match op {
            PatchOperation::Test(op) => op.path.to_string(),
            PatchOperation::Replace(op) => op.path.to_string(),
            PatchOperation::Add(op) => op.path.to_string(),
            PatchOperation::Remove(op) => op.path.to_string(),
            other => panic!("not written by the planner: {other:?}"),
        }
    }

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
            let mut patch = Patch::default();
            patch.remove(Path::Annotation(key));
            let ops = patch.ops();
            let path = path_of(&ops[0]);
            let expected = format!(
                "/metadata/annotations/{}",
                key.replace('~', "~0").replace('/', "~1")
            );
            assert_eq!(path, expected);
            let token = PointerBuf::parse(path).unwrap();
            assert_eq!(token.tokens().last().unwrap().decoded(), key);
        }
    }

    #[test]
    fn a_path_under_a_base_is_the_two_joined() {
        let base = Pointer::from_static("/spec/template/spec/providerSpec/value");
        let mut patch = Patch::default();
        patch.remove(Path::under_known(base, "/disks/0/image"));
        patch.remove(Path::under_known(Pointer::root(), "/ami/id"));
        patch.remove(Path::under_known(base, ""));
        let paths: Vec<String> = patch.ops().iter().map(path_of).collect();
        assert_eq!(
            paths,
            [
                "/spec/template/spec/providerSpec/value/disks/0/image",
                "/ami/id",
                base.as_str()
            ]
        );
    }

    /// What is not a JSON Pointer on its own is not one under a base either, although the
    /// joined text of `ami/id` would read as one.
    #[test]
    fn a_relative_that_is_not_a_pointer_is_refused_under_any_base() {
        let base = Pointer::from_static("/spec/template/spec/providerSpec/value");
        for relative in ["ami/id", "/ami~2id", "/a~"] {
            assert!(Pointer::parse(relative).is_err(), "{relative}");
            assert!(Path::under(base, relative).is_none(), "{relative}");
            assert!(
                Path::under(Pointer::root(), relative).is_none(),
                "{relative}"
            );
        }
    }

    #[test]
    fn the_resource_version_guard_goes_first_once() {
        let mut patch = Patch::default();
        patch.guarded_replace(Path::At(Pointer::from_static("/spec/x")), "a", "b");
        patch.guard_resource_version("41");
        patch.guard_resource_version("42");
        let ops = serde_json::to_value(&patch).unwrap();
        assert_eq!(
            ops,
            serde_json::json!([
                {"op": "test", "path": "/metadata/resourceVersion", "value": "41"},
                {"op": "test", "path": "/spec/x", "value": "a"},
                {"op": "replace", "path": "/spec/x", "value": "b"},
            ])
        );
        assert_eq!(patch.len(), 3);
    }

    /// Where the map of annotations is missing, it is created whole under the guard of the
    /// resourceVersion; where it exists, each value is tested before it is replaced.
    #[test]
    fn annotations_are_created_or_replaced_under_guards() {
        let absent = crate::api::ObjectMeta {
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
        let present = crate::api::ObjectMeta {
            annotations: Some([("a/b".into(), "0".into()), ("c".into(), "2".into())].into()),
            ..Default::default()
        };
        let mut patch = Patch::default();
        set_annotations(&mut patch, &present, [("a/b", "1"), ("c", "2"), ("d", "3")]);
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

    /// A pointer's tokens and a value's strings drawn from every kind of character that needs
    /// escaping in JSON or in a pointer.
    fn any_op() -> impl Strategy<Value = PatchOperation> {
        let text = "[a-z~/\"\\\\\u{0}-\u{1f}é😀 ]{0,8}";
        let path = prop::collection::vec(text, 0..4).prop_map(PointerBuf::from_tokens);
        let value = prop_oneof![
            text.prop_map(Value::String),
            any::<i64>().prop_map(Value::from),
            prop::collection::vec((text, text), 0..4).prop_map(|fields| {
                Value::Object(fields.into_iter().map(|(k, v)| (k, v.into())).collect())
            }),
        ];
        (0..4u8, path, value).prop_map(|(kind, path, value)| match kind {
            0 => PatchOperation::Test(TestOperation { path, value }),
            1 => PatchOperation::Replace(ReplaceOperation { path, value }),
            2 => PatchOperation::Add(AddOperation { path, value }),
            _ => PatchOperation::Remove(RemoveOperation { path }),
        })
    }

    proptest! {
        /// Each operation is written byte for byte as serde_json writes it, and reads back as
        /// itself.
        #[test]
        fn operations_are_written_as_serde_json_writes_them(
            ops in prop::collection::vec(any_op(), 0..5)
        ) {
            let mut patch = Patch::default();
            for op in &ops {
                match op {
                    PatchOperation::Test(op) => patch.test(Path::At(&op.path), &op.value),
                    PatchOperation::Replace(op) => patch.replace(Path::At(&op.path), &op.value),
                    PatchOperation::Add(op) => patch.add(Path::At(&op.path), &op.value),
                    PatchOperation::Remove(op) => patch.remove(Path::At(&op.path)),
                    _ => unreachable!(),
                }
            }
            prop_assert_eq!(
                String::from_utf8(patch.body()).unwrap(),
                serde_json::to_string(&ops).unwrap()
            );
            prop_assert_eq!(patch.len(), ops.len());
            prop_assert_eq!(patch.ops(), ops);
        }
    }
}
