//! JSON text written without serde's per-field machinery, for the few small documents the
//! planner writes for every update (the history entry, the hot-loop memory, the target key).
//!
//! Each function writes exactly the bytes `serde_json::to_writer` writes for the same value; the
//! property tests below hold them to it. serde_json escapes a string byte by byte and reaches
//! every field through a serializer call; these strings (names, image IDs, times) almost never
//! hold anything to escape, so a string is checked in one pass and copied whole.
//!
//! A [`Sink`] is where the text goes: a buffer, or ([`InString`]) the inside of a JSON string in
//! a buffer, which is how a patch carries the annotations that hold JSON. Written there
//! directly, our own JSON needs no second pass to escape it: escaping the finished text copied
//! it in runs of a few bytes between its quotes, a `memcpy` call each, and took about a sixth
//! of `plan`'s instructions.

use std::fmt;
use std::io::Write as _;
use std::sync::OnceLock;

use serde_json::Value;

/// Where JSON text is written.
pub trait Sink {
    /// Bytes that read the same inside a JSON string as outside: punctuation other than
    /// quotes, numbers, `true`, keys known to be plain.
    fn plain(&mut self, bytes: &[u8]);
    /// A quote that opens or closes a string.
    fn quote(&mut self);
    /// The contents of a string, escaped as JSON needs.
    fn text(&mut self, text: &str);
    /// A whole JSON text taken as it is (an entry of a history already written).
    fn json(&mut self, json: &str);
    /// `value` as it displays, which holds nothing to escape (a timestamp).
    fn display(&mut self, value: impl fmt::Display);
    /// `kept`'s value, copied from its text in the form this sink needs.
    fn kept(&mut self, kept: &KeptJson);
}

/// A value written many times, with its JSON text in both forms a patch needs it: as it is, and
/// escaped as the contents of a string (the history an annotation holds). Each form is written
/// the first time it is needed.
pub struct KeptJson {
    value: Value,
    text: OnceLock<Box<str>>,
    in_string: OnceLock<Box<str>>,
}

impl KeptJson {
    pub fn new(value: Value) -> Self {
        KeptJson {
            value,
            text: OnceLock::new(),
            in_string: OnceLock::new(),
        }
    }

    pub fn value(&self) -> &Value {
        &self.value
    }

    /// The value's JSON text.
    fn text(&self) -> &str {
        (self.text).get_or_init(|| written_text(|out| value(out, &self.value)))
    }

    /// The value's JSON text escaped as the contents of a string.
    fn in_string(&self) -> &str {
        (self.in_string).get_or_init(|| written_text(|out| contents(out, self.text())))
    }
}

impl JsonValue for KeptJson {
    fn write_json(&self, out: &mut impl Sink) {
        out.kept(self);
    }
}

/// Text written by `write`, which writes JSON (UTF-8, as every string it copies is).
fn written_text(write: impl FnOnce(&mut Vec<u8>)) -> Box<str> {
    let mut out = Vec::new();
    write(&mut out);
    // Never lossy: JSON text written from strings is UTF-8.
    String::from_utf8_lossy(&out).into()
}

impl Sink for Vec<u8> {
    fn plain(&mut self, bytes: &[u8]) {
        self.extend_from_slice(bytes);
    }

    fn quote(&mut self) {
        self.push(b'"');
    }

    fn text(&mut self, text: &str) {
        contents(self, text);
    }

    fn json(&mut self, json: &str) {
        self.extend_from_slice(json.as_bytes());
    }

    fn display(&mut self, value: impl fmt::Display) {
        write!(self, "{value}").expect("writing to a Vec cannot fail");
    }

    fn kept(&mut self, kept: &KeptJson) {
        self.extend_from_slice(kept.text().as_bytes());
    }
}

/// JSON text written as the contents of a JSON string in the buffer: every byte of it escaped
/// once more, so its quotes are `\"` and the quotes of its strings' contents `\\\"`.
pub struct InString<'a>(pub &'a mut Vec<u8>);

impl Sink for InString<'_> {
    fn plain(&mut self, bytes: &[u8]) {
        self.0.extend_from_slice(bytes);
    }

    fn quote(&mut self) {
        self.0.extend_from_slice(b"\\\"");
    }

    fn text(&mut self, text: &str) {
        contents_twice(self.0, text);
    }

    fn json(&mut self, json: &str) {
        contents(self.0, json);
    }

    fn display(&mut self, value: impl fmt::Display) {
        self.0.display(value);
    }

    fn kept(&mut self, kept: &KeptJson) {
        self.0.extend_from_slice(kept.in_string().as_bytes());
    }
}

/// `text` as a JSON string.
pub fn string(out: &mut impl Sink, text: &str) {
    out.quote();
    out.text(text);
    out.quote();
}

/// `text` escaped as the inside of a JSON string, so that several pieces can make one string
/// (a JSON Pointer joined from its base and the rest), escaped as serde_json escapes it.
pub fn contents(out: &mut Vec<u8>, text: &str) {
    escaped(out, text, |out, escape| out.extend_from_slice(escape));
}

/// `text` escaped twice, as the contents of a string inside a string. Of the strings a patch's
/// annotations hold, only the hot-loop memory's target (JSON text itself) has anything to
/// escape; one pass, where escaping it once and then its escaped text took twice the copies.
fn contents_twice(out: &mut Vec<u8>, text: &str) {
    escaped(out, text, |out, escape| {
        for &b in escape {
            match b {
                b'\\' => out.extend_from_slice(b"\\\\"),
                b'"' => out.extend_from_slice(b"\\\""),
                b => out.push(b),
            }
        }
    });
}

/// `text` with each byte JSON escapes replaced by what `write` makes of its escape (`\"`,
/// `\n`, `\u001f`).
fn escaped(out: &mut Vec<u8>, text: &str, write: impl Fn(&mut Vec<u8>, &[u8])) {
    let bytes = text.as_bytes();
    if is_plain(text) {
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
            let (high, low) = (HEX[usize::from(b >> 4)], HEX[usize::from(b & 0xf)]);
            write(out, &[b'\\', b'u', b'0', b'0', high, low]);
        } else {
            write(out, &[b'\\', escape]);
        }
    }
    out.extend_from_slice(&bytes[copied..]);
}

/// Whether `text` holds nothing JSON escapes. One pass over every byte, without an early exit,
/// so that the compiler can check many bytes at once: names and image IDs are copied whole.
fn is_plain(text: &str) -> bool {
    !(text.bytes()).fold(false, |escape, b| escape | (ESCAPES[usize::from(b)] != 0))
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

/// A value that writes itself as compact JSON text: a `Value`, or a [`KeptJson`] (an image
/// shared between decisions), whose text was written once and is copied.
pub trait JsonValue {
    fn write_json(&self, out: &mut impl Sink);
}

impl JsonValue for Value {
    fn write_json(&self, out: &mut impl Sink) {
        value(out, self);
    }
}

/// `value` as compact JSON text.
pub fn value(out: &mut impl Sink, value: &Value) {
    match value {
        Value::String(text) => string(out, text),
        Value::Object(map) => {
            out.plain(b"{");
            for (i, (key, field)) in map.iter().enumerate() {
                if i > 0 {
                    out.plain(b",");
                }
                string(out, key);
                out.plain(b":");
                self::value(out, field);
            }
            out.plain(b"}");
        }
        Value::Array(items) => {
            out.plain(b"[");
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.plain(b",");
                }
                self::value(out, item);
            }
            out.plain(b"]");
        }
        // A number displays as serde_json writes it; none holds a quote or a backslash.
        Value::Number(number) => out.display(number),
        Value::Bool(true) => out.plain(b"true"),
        Value::Bool(false) => out.plain(b"false"),
        Value::Null => out.plain(b"null"),
    }
}

/// `"key":`, for a key known to need no escaping.
pub fn key(out: &mut impl Sink, key: &'static str) {
    debug_assert!(is_plain(key));
    out.quote();
    out.plain(key.as_bytes());
    out.quote();
    out.plain(b":");
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

        /// Written inside a string, a value is what serde_json writes for the string of its
        /// text, quotes aside.
        #[test]
        fn a_value_in_a_string_is_its_text_escaped(v in any_value()) {
            let text = serde_json::to_string(&v).unwrap();
            let quoted = serde_json::to_string(&text).unwrap();
            let inside = written(|out| value(&mut InString(out), &v));
            prop_assert_eq!(inside.clone(), &quoted[1..quoted.len() - 1]);
            let whole = written(|out| InString(out).json(&text));
            prop_assert_eq!(whole, inside.clone());
            // An image shared between decisions writes the same bytes from its text.
            let shared = crate::platform::SharedImage::new(v.clone());
            prop_assert_eq!(written(|out| shared.write_json(&mut InString(out))), inside);
            prop_assert_eq!(written(|out| shared.write_json(out)), text);
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
