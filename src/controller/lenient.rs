//! A watchable wrapper that never fails to deserialize.
//!
//! kube-runtime decodes a whole list response at once: one MachineSet whose spec does not fit our
//! typed view would fail the list and wedge the watch for every other MachineSet. `Lenient<K>`
//! keeps the metadata (always well-formed from the API server) and the typed object or the reason
//! it could not be read, so the planner reports that one object and plans the rest.
//!
//! The same holds for nesting depth: the API server stores objects nested far deeper than
//! serde_json's recursion limit (128), and that limit counts from the root of the whole list
//! response. Each item is therefore captured as raw text (skipping JSON is not depth-limited) and
//! parsed on its own, so a deeply nested providerSpec makes only that object unreadable.

use std::borrow::Cow;
use std::collections::BTreeMap;

use kube::Resource;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer};
use serde_json::value::RawValue;

use super::skip_field;
use crate::api::{ClusterVersion, Infrastructure, MachineConfiguration, ObjectMeta};
use crate::machine_kind::MachineObject;
use crate::plan::Malformed;

#[derive(Clone, Debug)]
pub struct Lenient<K> {
    pub metadata: ObjectMeta,
    pub parsed: Result<K, String>,
}

impl<K> Lenient<K> {
    /// The typed object, or the planner's description of why it is unreadable.
    pub fn input(&self) -> Result<&K, Malformed> {
        self.parsed.as_ref().map_err(|error| Malformed {
            namespace: self.metadata.namespace.clone().unwrap_or_default(),
            name: self.metadata.name.clone().unwrap_or_default(),
            error: error.clone(),
        })
    }
}

/// What a store keeps of an object of this kind. It is decided as each object is read: a list
/// page is decoded whole, so trimming later would first hold the page's objects at full size
/// (at 1,000 MachineSets, 8 of the 14 MiB at the heap's peak).
pub trait Keep {
    /// Whether the typed copy is trimmed to what the planner reads; the metadata copy then only
    /// names the object (the store's key), since the typed copy's metadata is what is read.
    const TRIMMED: bool = false;
    fn keep_only_what_the_planner_reads(&mut self) {}
}

impl<K: MachineObject> Keep for K {
    const TRIMMED: bool = true;
    fn keep_only_what_the_planner_reads(&mut self) {
        MachineObject::keep_only_what_the_planner_reads(self);
    }
}

impl Keep for MachineConfiguration {}
impl Keep for Infrastructure {}
impl Keep for ClusterVersion {}

impl<'de, K> Deserialize<'de> for Lenient<K>
where
    K: DeserializeOwned + Resource<DynamicType = ()> + Keep,
{
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let raw = Box::<RawValue>::deserialize(deserializer)?;
        // managedFields are never read from the typed copy, and are often most of an object's
        // size: they are skipped, not parsed.
        let parsed = skip_field::without(
            &mut serde_json::Deserializer::from_str(raw.get()),
            skip_field::MANAGED_FIELDS,
        )
        .map(|mut object: K| {
            object.keep_only_what_the_planner_reads();
            object
        })
        .map_err(|e| e.to_string());
        let metadata = match &parsed {
            Ok(object) if K::TRIMMED => {
                let meta = object.meta();
                ObjectMeta {
                    name: meta.name.clone(),
                    namespace: meta.namespace.clone(),
                    uid: meta.uid.clone(),
                    resource_version: meta.resource_version.clone(),
                    ..ObjectMeta::default()
                }
            }
            _ => metadata(raw.get(), reads_managed_fields::<K>())
                .map_err(serde::de::Error::custom)?,
        };
        Ok(Lenient { metadata, parsed })
    }
}

/// Whether the controller reads this kind's `managedFields`: the MachineConfiguration's say
/// whether another boot image manager is active (`plan::manager`). Every other kind's are
/// skipped as they are read.
pub(super) fn reads_managed_fields<K: Resource<DynamicType = ()>>() -> bool {
    K::kind(&()) == "MachineConfiguration"
}

/// The fields of an object, skipped rather than parsed (skipping has no depth limit).
#[derive(Deserialize)]
struct Fields<'a> {
    #[serde(borrow, default)]
    metadata: Option<&'a RawValue>,
}

/// An object's metadata, whatever the depth of the rest of it; its `managedFields` only when
/// asked for.
fn metadata(object: &str, managed_fields: bool) -> Result<ObjectMeta, serde_json::Error> {
    let Some(raw) = serde_json::from_str::<Fields>(object)?.metadata else {
        return Ok(ObjectMeta::default());
    };
    if !managed_fields {
        return skip_field::without(
            &mut serde_json::Deserializer::from_str(raw.get()),
            &["managedFields"],
        );
    }
    serde_json::from_str(raw.get()).or_else(|error| {
        // managedFields mirror the object's field tree, so they are as deep as the deepest
        // field; an object too deep for them keeps the rest of its metadata.
        let mut fields: BTreeMap<String, &RawValue> = serde_json::from_str(raw.get())?;
        if fields.remove("managedFields").is_none() {
            return Err(error);
        }
        serde_json::from_str(&serde_json::to_string(&fields)?)
    })
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
        let bad = items[1].input().unwrap_err();
        assert_eq!((bad.namespace.as_str(), bad.name.as_str()), ("ns", "bad"));
        assert!(bad.error.contains("three"), "{}", bad.error);
    }

    /// Regression: one MachineSet nested deeper than serde_json's recursion limit failed the
    /// whole list response, so the MachineSet watch never synced and the controller never
    /// became ready (found by the malformed-objects fault test).
    #[test]
    fn a_deeply_nested_object_fails_alone_not_the_list() {
        let mut garbage = serde_json::json!("leaf");
        for _ in 0..300 {
            garbage = serde_json::json!({ "n": garbage });
        }
        // The API server's managedFields mirror the deep field tree.
        let mut fields = serde_json::json!({});
        for _ in 0..300 {
            fields = serde_json::json!({ ".": {}, "f:n": fields });
        }
        let managed =
            serde_json::json!([{"manager": "m", "fieldsType": "FieldsV1", "fieldsV1": fields}]);
        let list = serde_json::json!({"items": [
            {"metadata": {"name": "deep", "namespace": "ns", "managedFields": managed},
             "spec": {"template": {"spec": {"providerSpec": {"value": {"garbage": garbage}}}}}},
            {"metadata": {"name": "good", "namespace": "ns"}, "spec": {"replicas": 1}}
        ]})
        .to_string();
        // from_str into kube's ObjectList, as kube-client decodes responses.
        let list: kube::core::ObjectList<Lenient<MachineSet>> =
            serde_json::from_str(&list).expect("the list decodes");
        let bad = list.items[0].input().unwrap_err();
        assert_eq!(bad.name, "deep");
        assert!(bad.error.contains("recursion limit"), "{}", bad.error);
        assert!(list.items[1].parsed.is_ok());
    }

    /// What the watch stores of a MachineSet: its identity, labels, annotations and owners; of
    /// the provider spec only what a rule reads; of the status only the authoritative API; no
    /// unknown fields or managedFields.
    #[test]
    fn the_watch_keeps_what_the_planner_reads_and_drops_the_rest() {
        let managed =
            serde_json::json!([{"manager": "m", "fieldsType": "FieldsV1", "fieldsV1": {}}]);
        let object = serde_json::json!({
            "metadata": {"name": "worker-a", "namespace": "ns", "uid": "u1", "resourceVersion": "7",
                         "labels": {"tier": "blue"}, "annotations": {"note": "kept"},
                         "ownerReferences": [{"apiVersion": "v1", "kind": "X", "name": "o", "uid": "u0"}],
                         "managedFields": managed},
            "spec": {"replicas": 2, "selector": {"matchLabels": {"a": "b"}},
                     "template": {"metadata": {"labels": {"machine.openshift.io/os-id": "Windows"}},
                                  "spec": {"lifecycleHooks": {}, "providerSpec": {"value": {
                                      "ami": {"id": "ami-1"}, "placement": {"region": "us-east-1"},
                                      "userDataSecret": {"name": "worker-user-data"},
                                      "tags": [{"name": "big", "value": "list"}], "instanceType": "m6i.xlarge"}}}}},
            "status": {"replicas": 2, "authoritativeAPI": "ClusterAPI"}
        });
        let stored: Lenient<MachineSet> = serde_json::from_value(object).unwrap();
        assert_eq!(stored.metadata.name.as_deref(), Some("worker-a"));
        assert_eq!(stored.metadata.namespace.as_deref(), Some("ns"));
        assert_eq!(
            stored.metadata.labels, None,
            "the typed copy holds the labels"
        );
        let ms = stored.parsed.unwrap();
        assert_eq!(ms.metadata.labels.unwrap()["tier"], "blue");
        assert_eq!(ms.metadata.annotations.unwrap()["note"], "kept");
        assert_eq!(ms.metadata.owner_references.unwrap().len(), 1);
        assert_eq!(ms.metadata.managed_fields, None);
        assert_eq!(ms.spec.replicas, Some(2));
        let status = ms.status.unwrap();
        assert_eq!(status.authoritative_api.as_deref(), Some("ClusterAPI"));
        assert!(ms.spec.extra.is_empty() && status.extra.is_empty());
        let template = ms.spec.template;
        assert_eq!(template.metadata.unwrap().labels.unwrap().len(), 1);
        assert_eq!(
            template.spec.provider_spec.value.unwrap(),
            serde_json::json!({"ami": {"id": "ami-1"}, "placement": {"region": "us-east-1"},
                               "userDataSecret": {"name": "worker-user-data"}})
        );
    }

    #[test]
    fn an_unreadable_object_keeps_its_metadata_but_not_its_managed_fields() {
        let managed =
            serde_json::json!([{"manager": "m", "fieldsType": "FieldsV1", "fieldsV1": {}}]);
        let object = serde_json::json!({
            "metadata": {"name": "bad", "namespace": "ns", "labels": {"tier": "blue"}, "managedFields": managed},
            "spec": {"replicas": "three"}
        });
        let stored: Lenient<MachineSet> = serde_json::from_value(object).unwrap();
        assert_eq!(stored.metadata.managed_fields, None);
        assert_eq!(stored.metadata.labels.as_ref().unwrap()["tier"], "blue");
        assert_eq!(stored.input().unwrap_err().name, "bad");
    }
}
