//! A JSON value kept as its compact text.
//!
//! A decoded `serde_json::Value` costs about ten times its text: every object is an `IndexMap`
//! (a hash table and an entry vector of 112 bytes an entry), and every key and string its own
//! allocation. The provider spec a watch store keeps of each MachineSet, already trimmed to the
//! fields the rules read, is ~150-200 bytes of text and was ~1.7 KB of heap, most of what a
//! stored MachineSet costs (`examples/store_footprint.rs`). Kept as text, it is read back whole
//! when a rule judges it, and single fields are found in the text without building the rest.

use std::borrow::Cow;
use std::fmt;

use serde::Serialize;
use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::Value;
use serde_json::value::RawValue;

use crate::json_pointer;

/// A JSON value as compact text, written by serde_json from a `Value`; it serializes as that
/// value.
#[derive(Clone, Serialize)]
#[serde(transparent)]
pub struct CompactJson(Box<RawValue>);

impl CompactJson {
    pub fn new(value: &Value) -> Self {
        // Writing a `Value` cannot fail (its keys are strings); the fallback (`null`) is only
        // there so that nothing here can panic.
        CompactJson(serde_json::value::to_raw_value(value).unwrap_or_default())
    }

    /// The value again. Text written from a `Value` reads back equal to it: numbers are written
    /// in a form that reads back exactly (with serde_json's `float_roundtrip`), and object
    /// fields keep their order. It can fail only where any JSON does, at serde_json's nesting
    /// limit of 128.
    pub fn value(&self) -> Result<Value, serde_json::Error> {
        serde_json::from_str(self.0.get())
    }

    /// The text itself.
    pub fn text(&self) -> &str {
        self.0.get()
    }

    /// The value at the JSON Pointer `pointer` (RFC 6901), as `Value::pointer` finds it in the
    /// whole value, reading only that value: the rest of the text is skipped, not decoded.
    /// `None` when nothing is there, or the text cannot be read.
    pub fn pointer(&self, pointer: &str) -> Option<Value> {
        if pointer.is_empty() {
            return self.value().ok();
        }
        let tokens = pointer.strip_prefix('/')?;
        let mut reader = serde_json::Deserializer::from_str(self.0.get());
        let found = Seek { tokens }.deserialize(&mut reader).ok()?;
        reader.end().ok()?;
        found
    }
}

impl fmt::Debug for CompactJson {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0.get())
    }
}

/// Finds the value at the reference tokens `tokens` (a JSON Pointer without its leading `/`)
/// in the value being read, skipping everything else.
#[derive(Clone, Copy)]
struct Seek<'p> {
    tokens: &'p str,
}

/// What is read of a value found at a token: all of it at the pointer's last token, else the
/// value at the tokens after it.
#[derive(Clone, Copy)]
enum Next<'p> {
    Whole,
    Seek(Seek<'p>),
}

impl<'de> DeserializeSeed<'de> for Seek<'_> {
    type Value = Option<Value>;

    fn deserialize<D: Deserializer<'de>>(self, reader: D) -> Result<Option<Value>, D::Error> {
        reader.deserialize_any(self)
    }
}

impl<'de> DeserializeSeed<'de> for Next<'_> {
    type Value = Option<Value>;

    fn deserialize<D: Deserializer<'de>>(self, reader: D) -> Result<Option<Value>, D::Error> {
        match self {
            Next::Whole => serde::Deserialize::deserialize(reader).map(Some),
            Next::Seek(seek) => seek.deserialize(reader),
        }
    }
}

impl<'p> Seek<'p> {
    /// The first reference token, unescaped as [`crate::json_pointer`] unescapes it, and what
    /// to read of the value it finds.
    fn split(self) -> (Cow<'p, str>, Next<'p>) {
        let (first, next) = match self.tokens.split_once('/') {
            Some((first, tokens)) => (first, Next::Seek(Seek { tokens })),
            None => (self.tokens, Next::Whole),
        };
        (json_pointer::decoded(first), next)
    }
}

impl<'de> Visitor<'de> for Seek<'_> {
    type Value = Option<Value>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    /// serde_json reads a map to its end, so every other entry is skipped, not left unread. A
    /// key given twice is found at its last entry, as a decoded map keeps it.
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Option<Value>, A::Error> {
        let (token, next) = self.split();
        let mut found = None;
        while let Some(matches) = map.next_key_seed(KeyIs(&token))? {
            if matches {
                found = map.next_value_seed(next)?;
            } else {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(found)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Option<Value>, A::Error> {
        let (token, next) = self.split();
        let index = json_pointer::index(&token);
        let mut found = None;
        let mut at = 0;
        loop {
            if Some(at) == index {
                match seq.next_element_seed(next)? {
                    Some(value) => found = value,
                    None => break,
                }
            } else if seq.next_element::<IgnoredAny>()?.is_none() {
                break;
            }
            at += 1;
        }
        Ok(found)
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Option<Value>, E> {
        Ok(None)
    }
    fn visit_i64<E: de::Error>(self, _: i64) -> Result<Option<Value>, E> {
        Ok(None)
    }
    fn visit_u64<E: de::Error>(self, _: u64) -> Result<Option<Value>, E> {
        Ok(None)
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Option<Value>, E> {
        Ok(None)
    }
    fn visit_str<E: de::Error>(self, _: &str) -> Result<Option<Value>, E> {
        Ok(None)
    }
    fn visit_unit<E: de::Error>(self) -> Result<Option<Value>, E> {
        Ok(None)
    }
}

/// Whether a map key, as read (escapes resolved), is the token sought; the key is never copied.
struct KeyIs<'t>(&'t str);

impl<'de> DeserializeSeed<'de> for KeyIs<'_> {
    type Value = bool;

    fn deserialize<D: Deserializer<'de>>(self, reader: D) -> Result<bool, D::Error> {
        reader.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for KeyIs<'_> {
    type Value = bool;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a map key")
    }

    fn visit_str<E: de::Error>(self, key: &str) -> Result<bool, E> {
        Ok(key == self.0)
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use serde_json::json;

    use super::*;
    use crate::testkit::generators::arb_json;

    /// Every pointer to a value inside `value`, and for each object and array one that finds
    /// nothing.
    fn pointers(value: &Value, at: &str, into: &mut Vec<String>) {
        into.push(at.to_string());
        match value {
            Value::Object(map) => {
                into.push(format!("{at}/absent"));
                for (key, inner) in map {
                    let token = key.replace('~', "~0").replace('/', "~1");
                    pointers(inner, &format!("{at}/{token}"), into);
                }
            }
            Value::Array(items) => {
                into.push(format!("{at}/{}", items.len()));
                into.push(format!("{at}/-"));
                for (i, inner) in items.iter().enumerate() {
                    pointers(inner, &format!("{at}/{i}"), into);
                }
            }
            _ => into.push(format!("{at}/0")),
        }
    }

    #[test]
    fn a_field_is_found_in_the_text_as_in_the_value() {
        let value = json!({
            "ami": {"id": "ami-1"},
            "a/b": {"c~d": [10, {"e": null}]},
            "disks": [{"image": "first"}, {"image": "second"}],
            "esc\"aped\u{e9}": "yes",
        });
        let kept = CompactJson::new(&value);
        for (pointer, expected) in [
            ("/ami/id", Some(json!("ami-1"))),
            ("/ami", Some(json!({"id": "ami-1"}))),
            ("/a~1b/c~0d/1/e", Some(Value::Null)),
            ("/disks/1/image", Some(json!("second"))),
            ("/esc\"aped\u{e9}", Some(json!("yes"))),
            ("", Some(value.clone())),
            ("/ami/id/more", None),
            ("/disks/01/image", None),
            ("/disks/+1/image", None),
            ("/disks/2", None),
            ("/absent", None),
            ("ami", None),
        ] {
            assert_eq!(kept.pointer(pointer), expected, "{pointer}");
        }
    }

    /// The float the property test once found coming back one unit in the last place off,
    /// before serde_json's `float_roundtrip` was on.
    #[test]
    fn a_float_reads_back_exactly() {
        let value = json!({"size": 4.840262777339113e58});
        assert_eq!(CompactJson::new(&value).value().unwrap(), value);
    }

    proptest! {
        #[test]
        fn the_text_reads_back_as_the_value_it_was_written_from(value in arb_json()) {
            let kept = CompactJson::new(&value);
            prop_assert_eq!(kept.value().unwrap(), value.clone());
            let mut all = Vec::new();
            pointers(&value, "", &mut all);
            for pointer in all {
                prop_assert_eq!(kept.pointer(&pointer), value.pointer(&pointer).cloned(), "{}", pointer);
            }
        }
    }
}
