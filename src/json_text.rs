//! JSON text written without serde's per-field machinery, for the few small documents the
//! planner writes for every update (the history entry, the hot-loop memory, the target key).
//!
//! Each function writes exactly the bytes `serde_json::to_writer` writes for the same value; the
//! property test below holds them to it. serde_json escapes a string byte by byte and reaches
//! every field through a serializer call; these strings (names, image IDs, times) almost never
//! hold anything to escape, so a string is checked in one pass and copied whole, and only a
//! string with something to escape is left to serde_json.

use serde_json::Value;

/// `text` as a JSON string.
pub fn string(out: &mut Vec<u8>, text: &str) {
    let bytes = text.as_bytes();
    // One pass over every byte, without an early exit, so that the compiler can check many
    // bytes at once; strings with anything to escape are left to serde_json.
    let plain = !bytes.iter().fold(false, |escape, &b| {
        escape | (b < 0x20) | (b == b'"') | (b == b'\\')
    });
    if plain {
        out.reserve(bytes.len() + 2);
        out.push(b'"');
        out.extend_from_slice(bytes);
        out.push(b'"');
    } else {
        serde_json::to_writer(out, text).expect("writing to a Vec cannot fail");
    }
}

/// `value` as compact JSON text.
pub fn value(out: &mut Vec<u8>, value: &Value) {
    match value {
        Value::String(text) => string(out, text),
        Value::Object(map) => {
            out.push(b'{');
            for (i, (key, field)) in map.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                string(out, key);
                out.push(b':');
                self::value(out, field);
            }
            out.push(b'}');
        }
        Value::Array(items) => {
            out.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                self::value(out, item);
            }
            out.push(b']');
        }
        // Numbers are formatted as serde_json formats them; null and booleans are one word.
        scalar => serde_json::to_writer(out, scalar).expect("writing to a Vec cannot fail"),
    }
}

/// `"key":`, for a key known to need no escaping.
pub fn key(out: &mut Vec<u8>, key: &'static str) {
    debug_assert!(!key.bytes().any(|b| b < 0x20 || b == b'"' || b == b'\\'));
    out.reserve(key.len() + 3);
    out.push(b'"');
    out.extend_from_slice(key.as_bytes());
    out.extend_from_slice(b"\":");
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn written(f: impl FnOnce(&mut Vec<u8>)) -> String {
        let mut out = Vec::new();
        f(&mut out);
        String::from_utf8(out).expect("JSON text is UTF-8")
    }

    /// Any JSON value, its strings drawn from every kind of character: quotes, backslashes,
    /// control characters, the DEL character serde_json leaves alone, and non-ASCII text.
    fn any_value() -> impl Strategy<Value = Value> {
        let text = "[a-z\"\\\\\u{0}-\u{1f}\u{7f}é😀/ ]{0,12}";
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::from),
            any::<i64>().prop_map(Value::from),
            any::<u64>().prop_map(Value::from),
            any::<f64>().prop_map(Value::from),
            text.prop_map(Value::String),
        ];
        leaf.prop_recursive(4, 32, 6, move |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
                prop::collection::vec((text, inner), 0..6)
                    .prop_map(|fields| Value::Object(fields.into_iter().collect())),
            ]
        })
    }

    proptest! {
        #[test]
        fn a_value_is_written_as_serde_json_writes_it(v in any_value()) {
            prop_assert_eq!(written(|out| value(out, &v)), serde_json::to_string(&v).unwrap());
        }
    }

    #[test]
    fn strings_are_escaped_as_serde_json_escapes_them() {
        for text in [
            "",
            "ami-0abc",
            "a\"b",
            "\\",
            "tab\there",
            "\u{1}",
            "\u{7f}",
            "é😀",
            "\"\"",
        ] {
            assert_eq!(
                written(|out| string(out, text)),
                serde_json::to_string(text).unwrap(),
                "{text:?}"
            );
        }
    }

    #[test]
    fn a_key_is_written_with_its_colon() {
        assert_eq!(written(|out| key(out, "bootImage")), r#""bootImage":"#);
    }
}
