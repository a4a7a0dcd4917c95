//! JSON text written without serde's per-field machinery, for the few small documents the
//! planner writes for every update (the history entry, the hot-loop memory, the target key).
//!
//! Each function writes exactly the bytes `serde_json::to_writer` writes for the same value; the
//! property test below holds them to it. serde_json escapes a string byte by byte and reaches
//! every field through a serializer call; these strings (names, image IDs, times) almost never
//! hold anything to escape, so a string is checked in one pass and copied whole.

use serde_json::Value;

/// `text` as a JSON string.
pub fn string(out: &mut Vec<u8>, text: &str) {
    out.reserve(text.len() + 2);
    out.push(b'"');
    contents(out, text);
    out.push(b'"');
}

/// `text` escaped as the inside of a JSON string, so that several pieces can make one string
/// (a JSON Pointer joined from its base and the rest), escaped as serde_json escapes it.
pub fn contents(out: &mut Vec<u8>, text: &str) {
    let bytes = text.as_bytes();
    // One pass over every byte, without an early exit, so that the compiler can check many
    // bytes at once: names and image IDs hold nothing to escape and are copied whole.
    let plain = !bytes
        .iter()
        .fold(false, |escape, &b| escape | (ESCAPES[usize::from(b)] != 0));
    if plain {
        out.extend_from_slice(bytes);
        return;
    }
    // The runs between escapes are copied whole. (Pushing every byte into room reserved once
    // took 8% more of `plan`'s instructions: the annotations written are JSON text, with a
    // quote every few bytes.)
    let mut copied = 0;
    for (i, &b) in bytes.iter().enumerate() {
        let escape = ESCAPES[usize::from(b)];
        if escape == 0 {
            continue;
        }
        out.extend_from_slice(&bytes[copied..i]);
        copied = i + 1;
        if escape == b'u' {
            const HEX: &[u8; 16] = b"0123456789abcdef";
            out.extend_from_slice(&[
                b'\\',
                b'u',
                b'0',
                b'0',
                HEX[usize::from(b >> 4)],
                HEX[usize::from(b & 0xf)],
            ]);
        } else {
            out.extend_from_slice(&[b'\\', escape]);
        }
    }
    out.extend_from_slice(&bytes[copied..]);
}

/// How JSON escapes each byte inside a string: 0 for not at all, `u` for `\u00XX`, otherwise
/// the letter after the backslash. Quotes, backslashes and control characters are escaped.
const ESCAPES: [u8; 256] = {
    let mut table = [0; 256];
    let mut b = 0;
    while b < 0x20 {
        table[b] = b'u';
        b += 1;
    }
    table[0x08] = b'b';
    table[0x09] = b't';
    table[0x0a] = b'n';
    table[0x0c] = b'f';
    table[0x0d] = b'r';
    table[b'"' as usize] = b'"';
    table[b'\\' as usize] = b'\\';
    table
};

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
