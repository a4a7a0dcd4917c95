//! A watchable wrapper that never fails to deserialize.
//!
//! kube-runtime decodes a whole list response at once: one MachineSet whose spec does not fit our
//! typed view would fail the list and wedge the watch for every other MachineSet. `Lenient<K>`
//! keeps the typed object, or the metadata (always well-formed from the API server) and the
//! reason it could not be read, so the planner reports that one object and plans the rest.
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
use crate::api::{
    ClusterVersion, Infrastructure, InfrastructureRef, MachineConfiguration, MachineTemplate,
    ObjectMeta,
};
use crate::machine_kind::{Authority, MachineKind, MachineObject};
use crate::meta_view::{CompactMap, MetaView};
use crate::plan::Malformed;

#[derive(Clone, Debug)]
pub struct Lenient<K> {
    /// The typed object, which holds its own metadata, or what is known of an unreadable one.
    /// A store holds one metadata per object either way. Private: a machine resource is read
    /// through [`Lenient::kept`] (its typed object lacks the labels and annotations kept
    /// beside it), a kind kept whole through [`Lenient::object`].
    parsed: Result<K, Box<Unreadable>>,
    /// A readable machine resource's labels and annotations, moved out of its metadata (see
    /// [`crate::meta_view`]); read them through [`Lenient::kept`].
    maps: KeptMaps,
}

/// Labels and annotations kept compactly; each `None` when the object has no such map.
#[derive(Clone, Debug, Default)]
struct KeptMaps {
    labels: Option<CompactMap>,
    annotations: Option<CompactMap>,
}

/// An object that does not fit its typed view.
#[derive(Clone, Debug)]
pub struct Unreadable {
    /// Always well-formed from the API server; without managedFields.
    pub metadata: ObjectMeta,
    pub error: String,
}

impl<K> Lenient<K> {
    /// The object as the planner reads it, its labels and annotations included, or the
    /// planner's description of why it is unreadable.
    pub fn kept(&self) -> Result<Kept<'_, K>, Malformed> {
        match &self.parsed {
            Ok(object) => Ok(Kept {
                object,
                maps: &self.maps,
            }),
            Err(unreadable) => Err(Malformed {
                namespace: unreadable.metadata.namespace.clone().unwrap_or_default(),
                name: unreadable.metadata.name.clone().unwrap_or_default(),
                error: unreadable.error.clone(),
            }),
        }
    }
}

impl<K: KeptWhole> Lenient<K> {
    /// The typed object, or what is known of an unreadable one.
    pub fn object(&self) -> Result<&K, &Unreadable> {
        self.parsed.as_ref().map_err(|unreadable| &**unreadable)
    }
}

/// A stored machine resource with its labels and annotations, as the planner reads it.
pub struct Kept<'a, K> {
    object: &'a K,
    maps: &'a KeptMaps,
}

impl<'a, K> Kept<'a, K> {
    /// The typed object, for readers of what `Kept` does not move (its provider spec, its
    /// template).
    pub fn object(&self) -> &'a K {
        self.object
    }
}

impl<K: MachineObject> MachineObject for Kept<'_, K> {
    const KIND: MachineKind = K::KIND;
    fn meta(&self) -> &ObjectMeta {
        self.object.meta()
    }
    fn meta_view(&self) -> MetaView<'_> {
        let maps = self.maps;
        MetaView::kept(
            self.object.meta(),
            maps.labels.as_ref(),
            maps.annotations.as_ref(),
        )
    }
    fn machine_template(&self) -> Option<&MachineTemplate> {
        self.object.machine_template()
    }
    fn provider_spec(&self) -> Option<&crate::api::ProviderSpec> {
        self.object.provider_spec()
    }
    fn infrastructure_ref(&self) -> Option<&InfrastructureRef> {
        self.object.infrastructure_ref()
    }
    fn data_secret_name(&self) -> Option<&str> {
        self.object.data_secret_name()
    }
    fn template_labels(&self) -> Option<&std::collections::BTreeMap<String, String>> {
        self.object.template_labels()
    }
    fn authority(&self, meta: MetaView<'_>) -> Authority {
        self.object.authority(meta)
    }
    /// A stored object was trimmed as it was read.
    fn keep_only_what_the_planner_reads(&mut self) {}
}

/// What a store keeps of an object of this kind. It is decided as each object is read: a list
/// page is decoded whole, so trimming later would first hold the page's objects at full size
/// (at 1,000 MachineSets, 8 of the 14 MiB at the heap's peak).
pub trait Keep {
    /// Whether the labels and annotations are kept apart, compactly: the planner reads a
    /// machine resource's through [`Lenient::kept`]; other kinds' are read where they are.
    const MAPS_APART: bool = false;
    fn keep_only_what_the_planner_reads(&mut self) {}
}

impl<K: MachineObject> Keep for K {
    const MAPS_APART: bool = true;
    fn keep_only_what_the_planner_reads(&mut self) {
        MachineObject::keep_only_what_the_planner_reads(self);
    }
}

/// Kinds a store keeps whole, their labels and annotations where the API server put them: the
/// singletons. Only these are read as their typed object alone ([`Lenient::object`]).
pub trait KeptWhole: Keep {}

/// The singletons, named once: kept whole ([`Keep`]'s defaults), and so read whole.
macro_rules! kept_whole {
    ($($kind:ty),*) => {
        $(
            impl Keep for $kind {}
            impl KeptWhole for $kind {}
        )*
    };
}

kept_whole!(MachineConfiguration, Infrastructure, ClusterVersion);

impl<'de, K> Deserialize<'de> for Lenient<K>
where
    K: DeserializeOwned + Resource<DynamicType = ()> + Keep,
{
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let raw = Box::<RawValue>::deserialize(deserializer)?;
        let mut maps = KeptMaps::default();
        let parsed = match typed::<K>(raw.get()) {
            Ok(mut object) => {
                if K::MAPS_APART {
                    let meta = object.meta_mut();
                    let compact =
                        |map: Option<BTreeMap<String, String>>| map.as_ref().map(CompactMap::from);
                    maps.labels = compact(meta.labels.take());
                    maps.annotations = compact(meta.annotations.take());
                }
                Ok(object)
            }
            Err(error) => {
                let metadata = metadata(raw.get()).map_err(serde::de::Error::custom)?;
                Err(Box::new(Unreadable { metadata, error }))
            }
        };
        Ok(Lenient { parsed, maps })
    }
}

/// The typed object, trimmed to what the planner reads. managedFields are skipped as they are
/// read, not parsed: they are often most of an object's size, and only the
/// MachineConfiguration's are read.
fn typed<K>(object: &str) -> Result<K, String>
where
    K: DeserializeOwned + Resource<DynamicType = ()> + Keep,
{
    let without_managed_fields = || {
        skip_field::without(
            &mut serde_json::Deserializer::from_str(object),
            skip_field::MANAGED_FIELDS,
        )
    };
    let read: Result<K, _> = if reads_managed_fields::<K>() {
        // managedFields mirror the object's field tree, so they are as deep as its deepest
        // field: an object too deep for them is read without them.
        serde_json::from_str(object).or_else(|_| without_managed_fields())
    } else {
        without_managed_fields()
    };
    let mut object = read.map_err(|e| e.to_string())?;
    object.keep_only_what_the_planner_reads();
    Ok(object)
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

/// An unreadable object's metadata, whatever the depth of the rest of it, without managedFields.
pub(crate) fn metadata(object: &str) -> Result<ObjectMeta, serde_json::Error> {
    let Some(raw) = serde_json::from_str::<Fields>(object)?.metadata else {
        return Ok(ObjectMeta::default());
    };
    skip_field::without(
        &mut serde_json::Deserializer::from_str(raw.get()),
        &["managedFields"],
    )
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
        match &self.parsed {
            Ok(object) => object.meta(),
            Err(unreadable) => &unreadable.metadata,
        }
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        match &mut self.parsed {
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
        assert!(items[0].parsed.is_ok());
        let bad = items[1].kept().err().expect("unreadable");
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
        let kept = stored.kept().unwrap();
        let meta = kept.meta_view();
        assert!(meta.annotations().is_some());
        let last_applied = "kubectl.kubernetes.io/last-applied-configuration";
        assert_eq!(meta.annotation(last_applied), None);
        let without: Lenient<MachineSet> =
            serde_json::from_value(serde_json::json!({"metadata": {"name": "w"}, "spec": {}}))
                .unwrap();
        assert!(without.kept().unwrap().meta_view().annotations().is_none());
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
        let bad = list.items[0].kept().err().expect("unreadable");
        assert_eq!(bad.name, "deep");
        assert!(bad.error.contains("recursion limit"), "{}", bad.error);
        assert!(list.items[1].parsed.is_ok());
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
        let kept = stored.kept().unwrap();
        let meta = kept.meta_view();
        assert_eq!(meta.label("tier"), Some("blue"));
        assert_eq!(
            meta.annotation("boot-image-controller.io/history"),
            Some("[]")
        );
        assert_eq!(meta.annotation("note"), None);
        assert_eq!(meta.owner_references().len(), 1);
        let ms = stored.parsed.unwrap();
        // Kept apart, compactly: the metadata holds no maps of its own.
        assert_eq!(
            (&ms.metadata.labels, &ms.metadata.annotations),
            (&None, &None)
        );
        assert_eq!(ms.metadata.managed_fields, None);
        assert_eq!(ms.spec.replicas, Some(2));
        let status = ms.status.unwrap();
        assert_eq!(status.authoritative_api.as_deref(), Some("ClusterAPI"));
        assert!(ms.spec.extra.is_empty() && status.extra.is_empty());
        let template = ms.spec.template;
        assert_eq!(template.metadata.unwrap().labels.unwrap().len(), 1);
        // Kept as text, not as a decoded value; it reads back as the fields the rules read.
        let provider_spec = template.spec.provider_spec;
        assert_eq!(provider_spec.value, None);
        assert_eq!(
            provider_spec.read().unwrap().unwrap().into_owned(),
            serde_json::json!({"ami": {"id": "ami-1"}, "placement": {"region": "us-east-1"},
                               "userDataSecret": {"name": "worker-user-data"}})
        );
        assert_eq!(
            provider_spec.at("/userDataSecret/name").as_deref(),
            Some(&serde_json::json!("worker-user-data"))
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
        assert_eq!(stored.kept().err().expect("unreadable").name, "bad");
    }

    /// `plan::manager` reads who else writes the MachineConfiguration from its managedFields.
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
        assert!(stored.parsed.is_ok());
    }
}
