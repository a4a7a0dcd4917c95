//! An object's metadata as the planner reads it.
//!
//! The watch keeps a machine resource's labels and annotations compactly, beside its
//! `ObjectMeta` rather than in it: a B-tree map holds a node with room for eleven entries
//! however few it has (half a kilobyte), and at 10,000 MachineSets the two maps of each were a
//! quarter of the watch store. An object read any other way (the `plan` command, tests) keeps
//! them in its `ObjectMeta`. The planner reads both through [`MetaView`].

use std::collections::BTreeMap;

use crate::api::{ObjectMeta, OwnerReference};

/// String keys and values in key order, in two allocations: their text, end to end, and where
/// each key and each value ends.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CompactMap {
    text: Box<str>,
    ends: Box<[usize]>,
}

impl CompactMap {
    pub fn get(&self, key: &str) -> Option<&str> {
        self.iter().find(|(k, _)| *k == key).map(|(_, v)| v)
    }

    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        let mut start = 0;
        self.ends.chunks_exact(2).map(move |ends| {
            let (key_end, value_end) = (ends[0], ends[1]);
            let pair = (&self.text[start..key_end], &self.text[key_end..value_end]);
            start = value_end;
            pair
        })
    }

    pub fn len(&self) -> usize {
        self.ends.len() / 2
    }

    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }
}

impl From<&BTreeMap<String, String>> for CompactMap {
    fn from(map: &BTreeMap<String, String>) -> Self {
        let size = map.iter().map(|(k, v)| k.len() + v.len()).sum();
        let mut text = String::with_capacity(size);
        let mut ends = Vec::with_capacity(map.len() * 2);
        for (key, value) in map {
            text.push_str(key);
            ends.push(text.len());
            text.push_str(value);
            ends.push(text.len());
        }
        CompactMap {
            text: text.into_boxed_str(),
            ends: ends.into_boxed_slice(),
        }
    }
}

/// Labels or annotations, wherever the object keeps them.
#[derive(Clone, Copy, Debug)]
pub enum Strings<'a> {
    Tree(&'a BTreeMap<String, String>),
    Compact(&'a CompactMap),
}

impl<'a> Strings<'a> {
    pub fn get(self, key: &str) -> Option<&'a str> {
        match self {
            Strings::Tree(map) => map.get(key).map(String::as_str),
            Strings::Compact(map) => map.get(key),
        }
    }
}

/// What the planner reads of an object's metadata. Labels and annotations are `None` when the
/// object has no such map, which is not the same as an empty one: a patch adds keys to a map
/// that exists, and must create one that does not (`plan::patch::set_annotations`).
#[derive(Clone, Copy, Debug)]
pub struct MetaView<'a> {
    meta: &'a ObjectMeta,
    labels: Option<Strings<'a>>,
    annotations: Option<Strings<'a>>,
}

impl<'a> MetaView<'a> {
    /// The metadata of a stored object, whose labels and annotations are kept apart.
    pub fn kept(
        meta: &'a ObjectMeta,
        labels: Option<&'a CompactMap>,
        annotations: Option<&'a CompactMap>,
    ) -> Self {
        MetaView {
            meta,
            labels: labels.map(Strings::Compact),
            annotations: annotations.map(Strings::Compact),
        }
    }

    pub fn name(&self) -> &'a str {
        self.meta.name.as_deref().unwrap_or_default()
    }

    pub fn namespace(&self) -> &'a str {
        self.meta.namespace.as_deref().unwrap_or_default()
    }

    pub fn uid(&self) -> Option<&'a String> {
        self.meta.uid.as_ref()
    }

    pub fn resource_version(&self) -> Option<&'a String> {
        self.meta.resource_version.as_ref()
    }

    pub fn owner_references(&self) -> &'a [OwnerReference] {
        self.meta.owner_references.as_deref().unwrap_or_default()
    }

    pub fn labels(&self) -> Option<Strings<'a>> {
        self.labels
    }

    pub fn label(&self, key: &str) -> Option<&'a str> {
        self.labels?.get(key)
    }

    pub fn annotations(&self) -> Option<Strings<'a>> {
        self.annotations
    }

    pub fn annotation(&self, key: &str) -> Option<&'a str> {
        self.annotations?.get(key)
    }
}

impl<'a> From<&'a ObjectMeta> for MetaView<'a> {
    fn from(meta: &'a ObjectMeta) -> Self {
        MetaView {
            meta,
            labels: meta.labels.as_ref().map(Strings::Tree),
            annotations: meta.annotations.as_ref().map(Strings::Tree),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_compact_map_reads_as_the_map_it_was_made_from() {
        let map: BTreeMap<String, String> = [("a", ""), ("b/c", "x y"), ("é", "ü"), ("", "v")]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let compact = CompactMap::from(&map);
        let pairs: Vec<(&str, &str)> = compact.iter().collect();
        let expected: Vec<(&str, &str)> =
            map.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        assert_eq!(pairs, expected);
        assert_eq!(compact.len(), 4);
        for (key, value) in &map {
            assert_eq!(compact.get(key), Some(value.as_str()), "{key:?}");
        }
        assert_eq!(compact.get("b"), None);
        assert_eq!(compact.get("missing"), None);
        let empty = CompactMap::from(&BTreeMap::new());
        assert!(empty.is_empty());
        assert_eq!(empty.get(""), None);
    }

    #[test]
    fn a_view_of_kept_maps_reads_as_a_view_of_the_object_meta() {
        let labels: BTreeMap<String, String> = [("tier".to_string(), "blue".to_string())].into();
        let meta = ObjectMeta {
            name: Some("w".into()),
            labels: Some(labels.clone()),
            annotations: Some(BTreeMap::new()),
            ..Default::default()
        };
        let (kept_labels, kept_annotations) = (CompactMap::from(&labels), CompactMap::default());
        let stripped = ObjectMeta {
            labels: None,
            annotations: None,
            ..meta.clone()
        };
        let kept = MetaView::kept(&stripped, Some(&kept_labels), Some(&kept_annotations));
        for view in [MetaView::from(&meta), kept] {
            assert_eq!(view.name(), "w");
            assert_eq!(view.label("tier"), Some("blue"));
            assert_eq!(view.label("other"), None);
            assert!(view.annotations().is_some(), "an empty map is still a map");
            assert_eq!(view.annotation("tier"), None);
        }
        let bare = MetaView::kept(&stripped, None, None);
        assert!(bare.labels().is_none() && bare.annotations().is_none());
    }
}
