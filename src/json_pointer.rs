//! JSON Pointer look-ups without allocating or hashing.
//!
//! `serde_json::Value::pointer` unescapes every token into a new `String`, two allocations per
//! token, and `jsonptr`'s resolver parses the pointer and walks it at about a thousand
//! instructions a look-up. The planner looks up a handful of pointers in every provider spec of
//! every pass, so both walk here: a token is decoded only when it is escaped, and object fields
//! are found by [`field`].

use std::borrow::Cow;

use serde_json::{Map, Value};

/// The value `pointer` (RFC 6901) names in `value`, as `Value::pointer` finds it.
pub fn get<'v>(value: &'v Value, pointer: &str) -> Option<&'v Value> {
    if pointer.is_empty() {
        return Some(value);
    }
    let rest = pointer.strip_prefix('/')?;
    rest.split('/').try_fold(value, |at, token| {
        let token = decoded(token);
        match at {
            Value::Object(_) => field(at, &token),
            Value::Array(items) => items.get(index(&token)?),
            _ => None,
        }
    })
}

/// The field `key` of a JSON object.
///
/// serde_json's maps are `IndexMap`s here (`preserve_order`), which hash every key looked up
/// with SipHash: about 200 instructions, against a few for comparing the handful of keys a
/// provider spec's objects hold. Keys are unique in a map, so the scan finds what `get` would.
pub fn field<'v>(value: &'v Value, key: &str) -> Option<&'v Value> {
    map_field(value.as_object()?, key)
}

/// [`field`] of an object already known to be one.
pub fn map_field<'v>(map: &'v Map<String, Value>, key: &str) -> Option<&'v Value> {
    /// Past this many fields, hashing the key wins over comparing it with each.
    const SCANNED: usize = 16;
    if map.len() > SCANNED {
        return map.get(key);
    }
    map.iter().find(|(k, _)| k.as_str() == key).map(|(_, v)| v)
}

/// A token with `~1` and `~0` unescaped (in that order, as RFC 6901 says).
pub(crate) fn decoded(token: &str) -> Cow<'_, str> {
    if token.contains('~') {
        Cow::Owned(token.replace("~1", "/").replace("~0", "~"))
    } else {
        Cow::Borrowed(token)
    }
}

/// An array index as RFC 6901 spells it: digits without a leading zero (`0` itself aside).
pub(crate) fn index(token: &str) -> Option<usize> {
    let digits = token.bytes().all(|b| b.is_ascii_digit());
    if token.is_empty() || !digits || (token.len() > 1 && token.starts_with('0')) {
        return None;
    }
    token.parse().ok()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn finds_what_serde_json_finds_for_every_kind_of_pointer() {
        let doc = json!({
            "ami": {"id": "ami-1"},
            "disks": [{"image": "a"}, {"image": "b"}],
            "a/b": {"m~n": 1},
            "": {"": 2},
            "01": 3,
        });
        for pointer in [
            "",
            "/",
            "/ami",
            "/ami/id",
            "/ami/id/x",
            "/disks/0/image",
            "/disks/1/image",
            "/disks/2/image",
            "/disks/01/image",
            "/disks/+1/image",
            "/disks/-/image",
            "/disks/-1",
            "/disks/",
            "/a~1b/m~0n",
            "/a~1b",
            "/a/b",
            "//",
            "/01",
            "ami",
            "/missing/deeper",
            "/disks/99999999999999999999999",
            "/a~1b/m~0n/",
            "/~01",
            "/~",
            "/ami/id/",
        ] {
            assert_eq!(get(&doc, pointer), doc.pointer(pointer), "{pointer:?}");
        }
    }

    #[test]
    fn a_field_is_found_in_small_and_large_objects_alike() {
        let large: serde_json::Map<String, Value> =
            (0..40).map(|i| (format!("k{i}"), json!(i))).collect();
        let large = Value::Object(large);
        let small = json!({"a": 1, "b": {"c": 2}});
        for (doc, key) in [
            (&large, "k0"),
            (&large, "k39"),
            (&large, "k40"),
            (&small, "b"),
        ] {
            assert_eq!(field(doc, key), doc.get(key), "{key}");
        }
        assert_eq!(field(&small, "z"), None);
        assert_eq!(field(&json!([1, 2]), "0"), None);
    }
}
