//! A watchable wrapper that never fails to deserialize.
//!
//! kube-runtime decodes a whole list response at once: one MachineSet whose spec does not fit our
//! typed view would fail the list and wedge the watch for every other MachineSet. `Lenient<K>`
//! keeps the typed object, or the identity (always well-formed from the API server) and the
//! reason it could not be read, so the planner reports that one object and plans the rest.
//!
//! kube's own `DeserializeGuard` does this too, but buffers each item as a value under the
//! recursion limit of the whole list (kube-core 5, `error_boundary.rs`): the API server stores
//! objects nested far deeper than serde_json's limit (128), and one of them failed the list.
//! Each item is therefore captured as raw text (skipping JSON is not depth-limited) and parsed
//! on its own.

use std::borrow::Cow;
use std::collections::BTreeMap;

use kube::Resource;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer};
use serde_json::value::RawValue;

use crate::api::{
    ClusterVersion, Infrastructure, MachineConfiguration, ObjectMeta, OwnerReference,
};
use crate::machine_kind::MachineObject;
use crate::plan::Malformed;

#[derive(Clone, Debug)]
pub struct Lenient<K>(Result<K, Box<Unreadable>>);

/// An object that does not fit its typed view.
#[derive(Clone, Debug)]
pub struct Unreadable {
    /// Its identity, labels, annotations and owners; without managedFields.
    pub metadata: ObjectMeta,
    pub malformed: Malformed,
}

impl<K> Lenient<K> {
    /// The object, or the planner's description of why it is unreadable.
    pub fn kept(&self) -> Result<&K, &Malformed> {
        self.0.as_ref().map_err(|unreadable| &unreadable.malformed)
    }

    /// The typed object, or what is known of an unreadable one.
    pub fn object(&self) -> Result<&K, &Unreadable> {
        self.0.as_ref().map_err(|unreadable| &**unreadable)
    }
}

/// What a store keeps of an object of this kind, decided as each object is read: a list page is
/// decoded whole, so trimming later would first hold the page's objects at full size.
pub trait Keep {
    fn keep_only_what_the_planner_reads(&mut self) {}
}

impl<K: MachineObject> Keep for K {
    fn keep_only_what_the_planner_reads(&mut self) {
        MachineObject::keep_only_what_the_planner_reads(self);
    }
}

/// The singletons are kept whole.
impl Keep for MachineConfiguration {}
impl Keep for Infrastructure {}
impl Keep for ClusterVersion {}

impl<'de, K> Deserialize<'de> for Lenient<K>
where
    K: DeserializeOwned + Resource<DynamicType = ()> + Keep,
{
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let raw = Box::<RawValue>::deserialize(deserializer)?;
        match serde_json::from_str::<K>(raw.get()) {
            Ok(mut object) => {
                object.keep_only_what_the_planner_reads();
                Ok(Lenient(Ok(object)))
            }
            Err(error) => {
                let metadata = metadata(raw.get()).map_err(serde::de::Error::custom)?;
                let malformed = Malformed {
                    namespace: metadata.namespace.clone().unwrap_or_default(),
                    name: metadata.name.clone().unwrap_or_default(),
                    error: error.to_string(),
                };
                Ok(Lenient(Err(Box::new(Unreadable {
                    metadata,
                    malformed,
                }))))
            }
        }
    }
}

/// What is read of an unreadable object: its metadata's identity and the maps rules read. Every
/// other field (managedFields, which mirror the object's depth, and the rest of the object) is
/// skipped, which has no depth limit.
#[derive(Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
struct Identity {
    name: Option<String>,
    namespace: Option<String>,
    uid: Option<String>,
    resource_version: Option<String>,
    labels: Option<BTreeMap<String, String>>,
    annotations: Option<BTreeMap<String, String>>,
    owner_references: Option<Vec<OwnerReference>>,
}

#[derive(Deserialize)]
struct Item {
    #[serde(default)]
    metadata: Identity,
}

/// An unreadable object's metadata, whatever the depth of the rest of it, without managedFields.
pub(crate) fn metadata(object: &str) -> Result<ObjectMeta, serde_json::Error> {
    let id = serde_json::from_str::<Item>(object)?.metadata;
    Ok(ObjectMeta {
        name: id.name,
        namespace: id.namespace,
        uid: id.uid,
        resource_version: id.resource_version,
        labels: id.labels,
        annotations: id.annotations,
        owner_references: id.owner_references,
        ..ObjectMeta::default()
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
        match &self.0 {
            Ok(object) => object.meta(),
            Err(unreadable) => &unreadable.metadata,
        }
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        match &mut self.0 {
            Ok(object) => object.meta_mut(),
            Err(unreadable) => &mut unreadable.metadata,
        }
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
        assert!(items[0].kept().is_ok());
        let bad = items[1].kept().expect_err("unreadable");
        assert_eq!((bad.namespace.as_str(), bad.name.as_str()), ("ns", "bad"));
        assert!(bad.error.contains("three"), "{}", bad.error);
    }

    /// An object whose annotations the planner reads none of keeps an empty map rather than
    /// none: our first bookkeeping patch then adds its keys to the map the object has, instead
    /// of creating a map and replacing the one the object has.
    #[test]
    fn unread_annotations_leave_an_empty_map() {
        let object = serde_json::json!({
            "metadata": {"name": "worker-a", "namespace": "ns",
                         "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{}"}},
            "spec": {}
        });
        let stored: Lenient<MachineSet> = serde_json::from_value(object).unwrap();
        let annotations = stored.kept().unwrap().metadata.annotations.as_ref();
        assert_eq!(annotations, Some(&BTreeMap::new()));
        let without: Lenient<MachineSet> =
            serde_json::from_value(serde_json::json!({"metadata": {"name": "w"}, "spec": {}}))
                .unwrap();
        assert!(without.kept().unwrap().metadata.annotations.is_none());
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
        let bad = list.items[0].kept().expect_err("unreadable");
        assert_eq!(bad.name, "deep");
        assert!(bad.error.contains("recursion limit"), "{}", bad.error);
        assert!(list.items[1].kept().is_ok());
    }

    /// What the watch stores of a MachineSet: its identity, labels, the annotations the planner
    /// reads and owners; of the provider spec only what a rule reads; of the status only the
    /// authoritative API; no unknown fields or managedFields.
    #[test]
    fn the_watch_keeps_what_the_planner_reads_and_drops_the_rest() {
        let managed =
            serde_json::json!([{"manager": "m", "fieldsType": "FieldsV1", "fieldsV1": {}}]);
        let object = serde_json::json!({
            "metadata": {"name": "worker-a", "namespace": "ns", "uid": "u1", "resourceVersion": "7",
                         "labels": {"tier": "blue"}, "annotations": {"note": "dropped", "boot-image-controller.io/history": "[]"},
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
        assert_eq!(stored.meta().name.as_deref(), Some("worker-a"));
        assert_eq!(stored.meta().namespace.as_deref(), Some("ns"));
        let ms = stored.kept().unwrap().clone();
        assert_eq!(ms.metadata.labels.unwrap()["tier"], "blue");
        let annotations = ms.metadata.annotations.unwrap();
        assert_eq!(
            annotations.keys().collect::<Vec<_>>(),
            ["boot-image-controller.io/history"]
        );
        assert_eq!(ms.metadata.owner_references.unwrap().len(), 1);
        assert_eq!(ms.metadata.managed_fields, None);
        assert_eq!(ms.spec.replicas, Some(2));
        let status = ms.status.unwrap();
        assert_eq!(status.authoritative_api.as_deref(), Some("ClusterAPI"));
        assert!(ms.spec.extra.is_empty() && status.extra.is_empty());
        let template = ms.spec.template;
        assert_eq!(template.metadata.unwrap().labels.unwrap().len(), 1);
        assert_eq!(
            template.spec.provider_spec.value,
            Some(
                serde_json::json!({"ami": {"id": "ami-1"}, "placement": {"region": "us-east-1"},
                                    "userDataSecret": {"name": "worker-user-data"}})
            )
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
        assert_eq!(stored.meta().managed_fields, None);
        assert_eq!(stored.meta().labels.as_ref().unwrap()["tier"], "blue");
        assert_eq!(stored.kept().expect_err("unreadable").name, "bad");
    }

    /// `plan::other_managers` reads who else writes the MachineConfiguration from its managedFields.
    #[test]
    fn a_machine_configuration_keeps_its_managed_fields() {
        let managed = serde_json::json!([{"manager": "machine-config-operator",
            "operation": "Update", "fieldsType": "FieldsV1", "fieldsV1": {"f:status": {}}}]);
        let object = serde_json::json!({
            "apiVersion": "operator.openshift.io/v1", "kind": "MachineConfiguration",
            "metadata": {"name": "cluster", "managedFields": managed},
            "spec": {}
        });
        let stored: Lenient<MachineConfiguration> = serde_json::from_value(object).unwrap();
        let fields = stored.meta().managed_fields.as_ref().expect("kept");
        assert_eq!(
            fields[0].manager.as_deref(),
            Some("machine-config-operator")
        );
        assert!(stored.kept().is_ok());
    }
}
