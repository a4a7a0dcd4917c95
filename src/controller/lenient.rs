//! A watchable wrapper that never fails to deserialize.
//!
//! kube-runtime decodes a whole list response at once: one MachineSet whose spec does not fit our
//! typed view would fail the list and wedge the watch for every other MachineSet. `Lenient<K>`
//! keeps the metadata (always well-formed from the API server) and the typed object or the reason
//! it could not be read, so the planner reports that one object and plans the rest.

use std::borrow::Cow;

use kube::Resource;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer};
use serde_json::Value;

use crate::api::ObjectMeta;
use crate::plan::Malformed;

#[derive(Clone, Debug)]
pub struct Lenient<K> {
    pub metadata: ObjectMeta,
    pub parsed: Result<K, String>,
}

impl<K> Lenient<K> {
    /// The typed object, or the planner's description of why it is unreadable.
    pub fn to_input(&self) -> Result<K, Malformed>
    where
        K: Clone,
    {
        self.parsed.clone().map_err(|error| Malformed {
            namespace: self.metadata.namespace.clone().unwrap_or_default(),
            name: self.metadata.name.clone().unwrap_or_default(),
            error,
        })
    }
}

impl<'de, K: DeserializeOwned> Deserialize<'de> for Lenient<K> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let value = Value::deserialize(deserializer)?;
        let metadata = value
            .get("metadata")
            .cloned()
            .map(serde_json::from_value)
            .transpose()
            .map_err(serde::de::Error::custom)?
            .unwrap_or_default();
        let parsed = serde_json::from_value(value).map_err(|e| e.to_string());
        Ok(Lenient { metadata, parsed })
    }
}

impl<K> Resource for Lenient<K>
where
    K: Resource<DynamicType = ()>,
{
    type DynamicType = ();
    type Scope = K::Scope;

    fn kind(dt: &()) -> Cow<'_, str> {
        K::kind(dt)
    }
    fn group(dt: &()) -> Cow<'_, str> {
        K::group(dt)
    }
    fn version(dt: &()) -> Cow<'_, str> {
        K::version(dt)
    }
    fn plural(dt: &()) -> Cow<'_, str> {
        K::plural(dt)
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::MachineSet;

    #[test]
    fn a_malformed_object_keeps_its_identity() {
        let list = serde_json::json!([
            {"metadata": {"name": "good", "namespace": "ns"}, "spec": {"replicas": 1}},
            {"metadata": {"name": "bad", "namespace": "ns"}, "spec": {"replicas": "three"}}
        ]);
        let items: Vec<Lenient<MachineSet>> = serde_json::from_value(list).unwrap();
        assert!(items[0].parsed.is_ok());
        let bad = items[1].to_input().unwrap_err();
        assert_eq!((bad.namespace.as_str(), bad.name.as_str()), ("ns", "bad"));
        assert!(bad.error.contains("three"), "{}", bad.error);
    }
}
