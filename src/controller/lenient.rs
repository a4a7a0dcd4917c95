//! A watchable wrapper that never fails to deserialize, for every kind the controller watches.
//!
//! kube-runtime decodes a whole list response at once: one object that does not fit our typed
//! view would fail the list and wedge the watch for every other object of its kind (and, until
//! the watch lists, the controller's readiness). `Lenient<K>` keeps the typed object, or the
//! identity (always well-formed from the API server) and the reason it could not be read, so the
//! planner reports that one object and plans the rest, and the watch reports it alone
//! ([`retried`]).
//!
//! kube's own `DeserializeGuard` does this too, but buffers each item as a value under the
//! recursion limit of the whole list (kube-core 5, `error_boundary.rs`): the API server stores
//! objects nested far deeper than serde_json's limit (128), and one of them failed the list.
//! Each item is therefore captured as raw text (skipping JSON is not depth-limited) and parsed
//! on its own ([`read`], which `plan --live` uses too).

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::Arc;

use futures::{Stream, StreamExt, future};
use kube::Resource;
use kube::api::DynamicObject;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{Error, Event};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer};
use serde_json::value::RawValue;
use tracing::{debug, info, warn};

use crate::api::{
    ClusterVersion, ConfigMap, Infrastructure, MachineConfiguration, ObjectMeta, OwnerReference,
    Secret,
};
use crate::machine_kind::{MachineKind, MachineObject};
use crate::plan::{MachineResource, Malformed};

/// The typed object is shared: a store's readers (the boot evidence's Machines, the templates)
/// take it without a copy.
#[derive(Debug)]
pub struct Lenient<K>(Result<Arc<K>, Box<Unreadable>>);

impl<K> Clone for Lenient<K> {
    fn clone(&self) -> Self {
        Lenient(self.0.clone())
    }
}

/// An object that does not fit its typed view.
#[derive(Clone, Debug)]
pub struct Unreadable {
    /// Its identity, labels, annotations and owners; without managedFields.
    pub metadata: ObjectMeta,
    pub malformed: Malformed,
}

impl<K> Lenient<K> {
    /// The typed object, or what is known of an unreadable one.
    pub fn object(&self) -> Result<&K, &Unreadable> {
        self.0.as_deref().map_err(|unreadable| &**unreadable)
    }

    /// The typed object as the store holds it; `None` when it is unreadable.
    pub fn shared(&self) -> Option<&Arc<K>> {
        self.0.as_ref().ok()
    }

    /// A stored machine resource of `kind`, as the list a pass plans holds it: the typed object
    /// shared with the store, not copied.
    pub fn listed(&self, kind: MachineKind) -> MachineResource
    where
        K: MachineObject + 'static,
    {
        let object = match &self.0 {
            Ok(object) => Ok(Arc::clone(object) as Arc<dyn MachineObject>),
            Err(unreadable) => Err(unreadable.malformed.clone()),
        };
        MachineResource { kind, object }
    }
}

/// What a store keeps of an object of this kind, decided as each object is read: a list page is
/// decoded whole, so trimming later would first hold the page's objects at full size.
pub trait Keep: Resource {
    /// Whether the planner reads this kind's managedFields; every other kind's are dropped, and
    /// an object is read without them when it cannot be read with them (see [`read`]).
    const READS_MANAGED_FIELDS: bool = false;

    fn keep_only_what_the_planner_reads(&mut self) {
        self.meta_mut().managed_fields = None;
    }
}

impl<K: MachineObject + Resource> Keep for K {
    fn keep_only_what_the_planner_reads(&mut self) {
        MachineObject::keep_only_what_the_planner_reads(self);
    }
}

/// `plan::other_managers` reads who else writes the MachineConfiguration from its managedFields;
/// a singleton is kept whole.
impl Keep for MachineConfiguration {
    const READS_MANAGED_FIELDS: bool = true;
    fn keep_only_what_the_planner_reads(&mut self) {}
}

impl Keep for Infrastructure {}
impl Keep for ClusterVersion {}
impl Keep for ConfigMap {}
impl Keep for Secret {}
/// The infrastructure templates of Cluster API MachineSets.
impl Keep for DynamicObject {}

// Machines, MachineHealthChecks and Nodes are trimmed where they are watched
// (`super::boot_watches`, `super::node_watch`).

impl<'de, K: DeserializeOwned + Keep> Deserialize<'de> for Lenient<K> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let raw = Box::<RawValue>::deserialize(deserializer)?;
        let read = read(raw.get()).map_err(serde::de::Error::custom)?;
        Ok(Lenient(read.map(Arc::new).map_err(Box::new)))
    }
}

/// Reads one object (an item of a list or of a watch event): typed and trimmed, or, when it does
/// not fit its typed view, what is known of it and why. Fails only when the text is not an
/// object with well-formed metadata, which the API server never sends.
///
/// A client may nest an object's managedFields deeper than serde_json's limit (kube-apiserver
/// 1.34 accepts and stores a 140-deep `fieldsV1`): an object that cannot be read whole is read
/// again without them, as every kind but the MachineConfiguration drops them anyway.
pub fn read<K: DeserializeOwned + Keep>(
    text: &str,
) -> Result<Result<K, Unreadable>, serde_json::Error> {
    let typed = serde_json::from_str::<K>(text).or_else(|error| match K::READS_MANAGED_FIELDS {
        true => Err(error),
        false => serde_json::from_str::<K>(&without_managed_fields(text)?),
    });
    match typed {
        Ok(mut object) => {
            object.keep_only_what_the_planner_reads();
            Ok(Ok(object))
        }
        Err(error) => {
            let metadata = metadata(text)?;
            let malformed = Malformed {
                namespace: metadata.namespace.clone().unwrap_or_default(),
                name: metadata.name.clone().unwrap_or_default(),
                // The error quotes the value it could not read (a string of any length): what
                // is logged and reported of it is bounded.
                error: crate::quoted::bounded(&error.to_string(), 500),
            };
            Ok(Err(Unreadable {
                metadata,
                malformed,
            }))
        }
    }
}

/// `object` without `metadata.managedFields`, every other field as written. Fields are taken
/// as raw text, which has no depth limit.
fn without_managed_fields(object: &str) -> Result<String, serde_json::Error> {
    let mut fields: BTreeMap<String, &RawValue> = serde_json::from_str(object)?;
    let Some(metadata) = fields.get("metadata").copied() else {
        return Ok(object.to_string());
    };
    let mut metadata: BTreeMap<String, &RawValue> = serde_json::from_str(metadata.get())?;
    metadata.remove("managedFields");
    let metadata = serde_json::value::to_raw_value(&metadata)?;
    fields.insert("metadata".to_string(), &metadata);
    serde_json::to_string(&fields)
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
fn metadata(object: &str) -> Result<ObjectMeta, serde_json::Error> {
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

impl<K: Resource + Clone> Resource for Lenient<K> {
    type DynamicType = K::DynamicType;
    type Scope = K::Scope;

    fn kind(dt: &Self::DynamicType) -> Cow<'_, str> {
        K::kind(dt)
    }
    fn group(dt: &Self::DynamicType) -> Cow<'_, str> {
        K::group(dt)
    }
    fn version(dt: &Self::DynamicType) -> Cow<'_, str> {
        K::version(dt)
    }
    fn plural(dt: &Self::DynamicType) -> Cow<'_, str> {
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
            Ok(object) => Arc::make_mut(object).meta_mut(),
            Err(unreadable) => &mut unreadable.metadata,
        }
    }
}

/// `watch` (a reflector's stream) with kube-runtime's default backoff after each error, each
/// failure spell logged once: a warning when it starts, an info when the watch makes progress.
/// Yields errors and progress only (`InitDone`, `Apply`, `Delete`).
///
/// kube-runtime's default backoff (client-go's reflector parameters: 0.8 s doubling to 30 s,
/// with jitter, forgotten after two quiet minutes) is reset by its stream on every `Ok` item,
/// and a watcher yields `Init` before each list attempt: with the API server down or a 403, a
/// watch whose list fails would retry at the first step for ever (kube-runtime 5,
/// `utils/stream_backoff.rs` `StreamBackoff::poll_next`, `watcher.rs` `step_trampolined`). So the
/// backoff goes after the reflector, which has used `Init` and the listed objects, and sees
/// only progress (a whole list, an object event) and errors.
pub fn retried<K: Send + Sync>(
    name: impl Into<String>,
    watch: impl Stream<Item = Result<Event<Lenient<K>>, Error>> + Send,
) -> impl Stream<Item = Result<Event<Lenient<K>>, Error>> + Send {
    let (name, mut failing) = (name.into(), false);
    let unreadable_in = name.clone();
    watch
        .inspect(move |event| {
            if let Ok(Event::Apply(object) | Event::InitApply(object)) = event
                && let Err(unreadable) = object.object()
            {
                let meta = &unreadable.metadata;
                warn!(
                    watch = unreadable_in,
                    namespace = meta.namespace.as_deref().unwrap_or_default(),
                    name = meta.name.as_deref().unwrap_or_default(),
                    error = unreadable.malformed.error,
                    "an object cannot be read; it alone is left out"
                );
            }
        })
        .filter(|event| {
            let progress = !matches!(event, Ok(Event::Init | Event::InitApply(_)));
            future::ready(progress)
        })
        .default_backoff()
        .inspect(move |event| match event {
            Err(error) if failing => debug!(watch = name, %error, "watch still failing"),
            Err(error) => {
                warn!(watch = name, %error, "watch failed; retrying with backoff");
                failing = true;
            }
            Ok(_) if failing => {
                info!(watch = name, "watch recovered");
                failing = false;
            }
            Ok(_) => {}
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    impl<K> Lenient<K> {
        /// The object, or the planner's description of why it is unreadable.
        fn kept(&self) -> Result<&K, &Malformed> {
            self.object().map_err(|unreadable| &unreadable.malformed)
        }
    }
    use crate::api::{Machine, MachineSet};
    use k8s_openapi::api::core::v1::Node;

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

    /// A list page of one kind as the API server sends it, `items` given as JSON text.
    fn page<K: DeserializeOwned + Keep>(items: &[serde_json::Value]) -> Vec<Lenient<K>> {
        let list = serde_json::json!({"items": items}).to_string();
        let list: kube::core::ObjectList<Lenient<K>> =
            serde_json::from_str(&list).expect("the page decodes");
        list.items
    }

    fn nested(depth: usize, leaf: serde_json::Value, key: &str) -> serde_json::Value {
        (0..depth).fold(leaf, |inner, _| serde_json::json!({ key: inner }))
    }

    /// managedFields nested 140 deep, which any client may write (kube-apiserver 1.34 stores them).
    fn deep_managed_fields() -> serde_json::Value {
        serde_json::json!([{"manager": "m", "operation": "Update", "fieldsType": "FieldsV1",
                            "fieldsV1": nested(140, serde_json::json!({}), "f:n")}])
    }

    /// Regression (issue 46): a Node, ConfigMap, Secret or template whose managedFields a client
    /// nested 140 deep failed its whole page, and its watch never listed. Those fields are
    /// dropped anyway: the object is read without them.
    #[test]
    fn objects_deep_only_in_their_managed_fields_are_read_without_them() {
        let node = |name: &str, managed: serde_json::Value| {
            serde_json::json!({"metadata": {"name": name, "managedFields": managed},
                "status": {"conditions": [{"type": "Ready", "status": "True"}]}})
        };
        let nodes: Vec<Lenient<Node>> = page(&[
            node("deep", deep_managed_fields()),
            node("plain", serde_json::json!([])),
        ]);
        let deep = nodes[0].kept().expect("read without its managedFields");
        assert!(crate::plan::nodes::is_ready(deep));
        assert_eq!(deep.metadata.managed_fields, None);
        assert!(nodes[1].kept().is_ok());

        let config_map = serde_json::json!({"metadata": {"name": "golden", "namespace": "ns",
            "managedFields": deep_managed_fields()}, "data": {"stream": "{}"}});
        let read: Vec<Lenient<ConfigMap>> = page(std::slice::from_ref(&config_map));
        assert_eq!(
            read[0].kept().unwrap().data.as_ref().unwrap()["stream"],
            "{}"
        );
        let secret = serde_json::json!({"metadata": {"name": "worker-user-data", "namespace": "ns",
            "managedFields": deep_managed_fields()}, "data": {"userData": "e30="}});
        let secret: Vec<Lenient<Secret>> = page(&[secret]);
        assert!(secret[0].kept().is_ok());
        let template: Vec<Lenient<DynamicObject>> = page(&[config_map]);
        assert!(template[0].kept().is_ok());
    }

    /// ...but the MachineConfiguration's managedFields say who else manages boot images: one
    /// that cannot be read with them is not read at all.
    #[test]
    fn a_machine_configuration_is_never_read_without_its_managed_fields() {
        let mc = serde_json::json!({"metadata": {"name": "cluster",
            "managedFields": deep_managed_fields()}, "spec": {}});
        let read: Vec<Lenient<MachineConfiguration>> = page(&[mc]);
        let unreadable = read[0].kept().expect_err("unreadable");
        assert!(
            unreadable.error.contains("recursion limit"),
            "{}",
            unreadable.error
        );
    }

    /// Regression (issue 46): a Machine whose providerSpec nests 140 deep failed the page of
    /// Machines; now it alone is unreadable, with its identity.
    #[test]
    fn a_deep_machine_is_unreadable_alone() {
        let machine = |name: &str, value: serde_json::Value| {
            serde_json::json!({"metadata": {"name": name, "namespace": "ns"},
                "spec": {"providerSpec": {"value": value}}})
        };
        let deep = machine("deep", nested(140, serde_json::json!("leaf"), "n"));
        let machines: Vec<Lenient<Machine>> =
            page(&[deep, machine("plain", serde_json::json!({}))]);
        let unreadable = machines[0].object().expect_err("unreadable");
        assert_eq!(unreadable.malformed.name, "deep");
        assert!(unreadable.malformed.error.contains("recursion limit"));
        assert_eq!(
            machines[1].shared().unwrap().metadata.name.as_deref(),
            Some("plain")
        );
    }

    #[test]
    fn a_long_error_is_bounded() {
        let long = "x".repeat(10_000);
        let object = serde_json::json!({"metadata": {"name": "bad"}, "spec": {"replicas": long}});
        let read: Lenient<MachineSet> = serde_json::from_value(object).unwrap();
        let error = &read.kept().expect_err("unreadable").error;
        assert!(
            error.len() < 600 && error.contains("xxx"),
            "{}",
            error.len()
        );
    }
}

#[cfg(test)]
mod retried_tests {
    use super::*;
    use std::time::Duration;
    use tokio::time::Instant;

    /// Every attempt of a watch whose list fails starts with `Init`, which must not reset the
    /// backoff: by the fifth failure in a row the wait is 12.8 s or more.
    #[tokio::test(start_paused = true)]
    async fn failed_lists_back_off_though_each_attempt_starts_with_init() {
        let attempts = futures::stream::iter((0..6).flat_map(|_| {
            [
                Ok(Event::<Lenient<()>>::Init),
                Err(Error::NoResourceVersion),
            ]
        }));
        let started = Instant::now();
        let failures: Vec<Duration> = retried("test", attempts)
            .map(|event| {
                assert!(event.is_err(), "only the errors are yielded");
                started.elapsed()
            })
            .collect()
            .await;
        let waits: Vec<Duration> = failures.windows(2).map(|w| w[1] - w[0]).collect();
        assert_eq!(waits.len(), 5);
        assert!(waits[4] >= Duration::from_millis(12_800), "{waits:?}");
    }

    /// A listed state is progress: the next failure waits the first step again.
    #[tokio::test(start_paused = true)]
    async fn progress_resets_the_backoff() {
        let failure = || Err(Error::NoResourceVersion);
        let mut events: Vec<Result<Event<Lenient<()>>, Error>> =
            (0..5).map(|_| failure()).collect();
        events.extend([Ok(Event::InitDone), failure(), failure()]);
        let started = Instant::now();
        let at: Vec<Duration> = retried("test", futures::stream::iter(events))
            .map(|_| started.elapsed())
            .collect()
            .await;
        let last_wait = at[7] - at[6];
        assert!(last_wait <= Duration::from_millis(1600), "{at:?}");
    }
}
