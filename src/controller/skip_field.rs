//! Deserializing an object as if one of its nested fields were absent.
//!
//! `managedFields` are often the largest part of an object's JSON, and the controller reads them
//! on one object only (the MachineConfiguration's, `plan::manager`). Setting them to `None` after
//! parsing still builds them first: at 1,000 MachineSets, the managed-field trees of one list page
//! were 9 of the 21 MiB at the controller's heap peak (heaptrack; docs/performance.md, "Memory"). Skipping
//! their text instead builds nothing, and is faster too.
//!
//! [`without`] wraps a deserializer. Along the given path of object keys, it hides the last key
//! and its value from the target type; every value off that path is handed to the target's own
//! deserializer untouched, so the rest of the object costs nothing extra. The path is followed
//! where the target asks for a struct or a map, which is what every typed Kubernetes object and
//! its `ObjectMeta` do.

use std::fmt;

use serde::Deserialize;
use serde::de::{
    DeserializeSeed, Deserializer, IgnoredAny, IntoDeserializer, MapAccess, SeqAccess, Visitor,
};

/// The object `managedFields` sit in: metadata.
pub const MANAGED_FIELDS: &[&str] = &["metadata", "managedFields"];

/// `T` read from `deserializer` as if the field at `path` (keys of nested objects, outermost
/// first; never empty) were absent.
pub fn without<'de, T, D>(deserializer: D, path: &'static [&'static str]) -> Result<T, D::Error>
where
    T: Deserialize<'de>,
    D: Deserializer<'de>,
{
    T::deserialize(Without {
        inner: deserializer,
        path,
    })
}

struct Without<D> {
    inner: D,
    path: &'static [&'static str],
}

/// Every request but a map or a struct goes straight to the wrapped deserializer.
macro_rules! pass_through {
    ($($method:ident)*) => {$(
        fn $method<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, D::Error> {
            self.inner.$method(visitor)
        }
    )*};
}

impl<'de, D: Deserializer<'de>> Deserializer<'de> for Without<D> {
    type Error = D::Error;

    fn deserialize_map<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, D::Error> {
        let path = self.path;
        self.inner.deserialize_map(Filter {
            inner: visitor,
            path,
        })
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        let path = self.path;
        self.inner.deserialize_struct(
            name,
            fields,
            Filter {
                inner: visitor,
                path,
            },
        )
    }

    pass_through! {
        deserialize_any deserialize_bool deserialize_i8 deserialize_i16 deserialize_i32
        deserialize_i64 deserialize_i128 deserialize_u8 deserialize_u16 deserialize_u32
        deserialize_u64 deserialize_u128 deserialize_f32 deserialize_f64 deserialize_char
        deserialize_str deserialize_string deserialize_bytes deserialize_byte_buf
        deserialize_option deserialize_unit deserialize_seq deserialize_identifier
        deserialize_ignored_any
    }

    fn deserialize_unit_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        self.inner.deserialize_unit_struct(name, visitor)
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        self.inner.deserialize_newtype_struct(name, visitor)
    }

    fn deserialize_tuple<V: Visitor<'de>>(
        self,
        len: usize,
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        self.inner.deserialize_tuple(len, visitor)
    }

    fn deserialize_tuple_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        len: usize,
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        self.inner.deserialize_tuple_struct(name, len, visitor)
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        name: &'static str,
        variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        self.inner.deserialize_enum(name, variants, visitor)
    }

    fn is_human_readable(&self) -> bool {
        self.inner.is_human_readable()
    }
}

/// The target's visitor, handed the object's entries through [`Entries`].
struct Filter<V> {
    inner: V,
    path: &'static [&'static str],
}

impl<'de, V: Visitor<'de>> Visitor<'de> for Filter<V> {
    type Value = V::Value;

    fn expecting(&self, formatter: &mut fmt::Formatter) -> fmt::Result {
        self.inner.expecting(formatter)
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<V::Value, A::Error> {
        self.inner.visit_map(Entries {
            inner: map,
            path: self.path,
            descend: false,
        })
    }

    /// serde_json hands a struct written as an array here; it has no keys to follow.
    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<V::Value, A::Error> {
        self.inner.visit_seq(seq)
    }
}

/// An object's entries, without the one at the end of the path; the entry on the way to it is
/// read through another [`Without`].
struct Entries<A> {
    inner: A,
    path: &'static [&'static str],
    /// Whether the key just read is the next one on the path.
    descend: bool,
}

impl<'de, A: MapAccess<'de>> MapAccess<'de> for Entries<A> {
    type Error = A::Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, A::Error> {
        let [next, rest @ ..] = self.path else {
            return self.inner.next_key_seed(seed);
        };
        loop {
            let Some(key) = self.inner.next_key::<String>()? else {
                return Ok(None);
            };
            self.descend = key == *next;
            if self.descend && rest.is_empty() {
                self.inner.next_value::<IgnoredAny>()?;
                continue;
            }
            return seed.deserialize(key.into_deserializer()).map(Some);
        }
    }

    fn next_value_seed<S: DeserializeSeed<'de>>(&mut self, seed: S) -> Result<S::Value, A::Error> {
        if !self.descend {
            return self.inner.next_value_seed(seed);
        }
        self.inner.next_value_seed(Descend {
            seed,
            path: &self.path[1..],
        })
    }

    fn size_hint(&self) -> Option<usize> {
        self.inner.size_hint()
    }
}

/// The value on the path, read by the target's seed through the rest of the path.
struct Descend<S> {
    seed: S,
    path: &'static [&'static str],
}

impl<'de, S: DeserializeSeed<'de>> DeserializeSeed<'de> for Descend<S> {
    type Value = S::Value;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<S::Value, D::Error> {
        self.seed.deserialize(Without {
            inner: deserializer,
            path: self.path,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{MachineSet, ObjectMeta};
    use serde_json::json;

    fn parse<T: serde::de::DeserializeOwned>(
        value: &serde_json::Value,
        path: &'static [&'static str],
    ) -> T {
        let text = value.to_string();
        without(&mut serde_json::Deserializer::from_str(&text), path).unwrap()
    }

    #[test]
    fn managed_fields_are_skipped_and_everything_else_is_read() {
        let object = json!({
            "apiVersion": "machine.openshift.io/v1beta1",
            "kind": "MachineSet",
            "metadata": {
                "name": "worker",
                "namespace": "openshift-machine-api",
                "managedFields": [{"manager": "m", "fieldsV1": {"f:spec": {}}}],
                "labels": {"a": "b"},
                "annotations": {"managedFields": "an annotation of that name stays"}
            },
            "spec": {"replicas": 2, "template": {"spec": {"providerSpec": {"value": {
                "managedFields": "a provider field of that name stays"
            }}}}}
        });
        let read: MachineSet = parse(&object, MANAGED_FIELDS);
        let mut expected: MachineSet = serde_json::from_value(object).unwrap();
        assert!(expected.metadata.managed_fields.take().is_some());
        assert_eq!(
            serde_json::to_value(read).unwrap(),
            serde_json::to_value(expected).unwrap()
        );
    }

    #[test]
    fn the_metadata_alone_loses_only_its_managed_fields() {
        let metadata = json!({
            "name": "cluster",
            "resourceVersion": "7",
            "managedFields": [{"manager": "m", "operation": "Update"}],
            "uid": "u"
        });
        let read: ObjectMeta = parse(&metadata, &["managedFields"]);
        let mut expected: ObjectMeta = serde_json::from_value(metadata).unwrap();
        expected.managed_fields = None;
        assert_eq!(read, expected);
    }

    #[test]
    fn skipped_text_is_still_checked_for_syntax() {
        let text = r#"{"metadata": {"name": "x", "managedFields": [{"manager": }]}}"#;
        let read: Result<MachineSet, _> = without(
            &mut serde_json::Deserializer::from_str(text),
            MANAGED_FIELDS,
        );
        assert!(read.is_err());
    }

    #[test]
    fn errors_in_the_kept_fields_still_say_where() {
        let text = r#"{"metadata": {"name": 3, "managedFields": []}}"#;
        let error = without::<MachineSet, _>(
            &mut serde_json::Deserializer::from_str(text),
            MANAGED_FIELDS,
        )
        .unwrap_err();
        assert!(error.to_string().contains("line 1 column"), "{error}");
    }
}
