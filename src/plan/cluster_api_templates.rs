//! Cluster API MachineSets keep their boot image in the infrastructure machine template they
//! reference (`spec.template.spec.infrastructureRef`), an `AWSMachineTemplate` on AWS whose
//! `spec.template.spec.ami.id` is the AMI.
//!
//! Templates are immutable by Cluster API convention: a machine's infrastructure object is
//! cloned from the template when the machine is made, and providers refuse or ignore edits to a
//! template's spec. So an update never edits one: it creates a copy with the new image (a name
//! derived from the old one and the release, labels, annotations and owner references copied)
//! and repoints the MachineSet at it with a guarded patch. The template the MachineSet used is
//! never touched, whoever else uses it.
//!
//! A copy is ours only when we can prove it: its labels and annotations are copied by anyone's
//! `oc get -o yaml` clone, so the proof is its UID, recorded on the MachineSet we moved to it
//! ([`COPIES_ANNOTATION`], written in the same patch) or, until that patch lands, remembered by
//! the controller that created it. A copy's name is the name of the template it descends from
//! and a digest of its whole spec, so two copies with different specs never share a name, and
//! an existing template under that name is reused only when it is provably ours and its spec is
//! the copy's. Only provably ours and unused copies are ever deleted.
//!
//! The record is an annotation anyone who may patch a MachineSet or MachineDeployment can write
//! too (and so is the history beside it), so it counts only for a template whose name ends in
//! the digest of its own spec ([`is_ours`]): an administrator's template is not named that way,
//! and its name and spec are not the forger's to choose.
//!
//! The AWS rule judges a view of the template shaped like a Machine API provider spec, so that
//! one rule serves both APIs: the template's `ami`, the cluster's region (templates do not name
//! it; the Infrastructure does) and the bootstrap secret as `userDataSecret`.

use std::collections::BTreeMap;

use std::sync::Arc;

use json_patch::{AddOperation, Patch, PatchOperation, ReplaceOperation};
use kube::api::DynamicObject;
use serde::Serialize;
use serde_json::{Map, Value, json};

use super::decision::{Action, TemplateCopy};
use super::patch::{Guarded, annotation};
use crate::api::{InfrastructureRef, MachineTemplate, ObjectMeta, TemplateMetadata};
use crate::reason::Reason;

/// The API group of Cluster API infrastructure providers' templates.
pub const INFRASTRUCTURE_GROUP: &str = "infrastructure.cluster.x-k8s.io";
/// The one template kind we update: Cluster API Provider AWS's.
pub const AWS_MACHINE_TEMPLATE: &str = "AWSMachineTemplate";
/// Where a MachineSet names its template.
pub const REFERENCE_NAME_POINTER: &str = "/spec/template/spec/infrastructureRef/name";
/// Where an `AWSMachineTemplate` keeps what the AWS rule reads as a provider spec.
const MACHINE_SPEC_POINTER: &str = "/spec/template/spec";
/// On every template we create, for people and selectors. Anyone's clone carries it too, so it
/// proves nothing: see [`COPIES_ANNOTATION`].
pub const CREATED_BY_LABEL: &str = "boot-image-controller.io/created-by";
pub const CREATED_BY_VALUE: &str = "boot-image-controller";
/// On every template we create: the template the copies descend from, so that a copy of a
/// copy (one provably ours) is named after the original rather than growing a suffix per
/// release.
pub const COPIED_FROM_ANNOTATION: &str = "boot-image-controller.io/copied-from";
pub use crate::names::COPIES_ANNOTATION;
/// Copies a MachineSet records; older records are dropped (the copy then is never deleted: a
/// leak, never a loss).
pub const COPIES_KEPT: usize = 10;
/// What the patch that moves a MachineSet to a new copy records as its UID until the copy is
/// created: the controller writes the UID the API server gave it there, just before sending.
pub const CREATED_UID_PLACEHOLDER: &str = "(uid of the created template)";
/// Hex digits of the spec digest in a copy's name: 64 bits, so that no one stumbles on a name
/// of ours by chance.
const DIGEST_HEX: usize = 16;

/// The Cluster API Provider AWS machine template, at the version its CRD stores
/// (sigs.k8s.io/cluster-api-provider-aws/v2, config/crd/bases).
pub fn api_resource() -> kube::core::ApiResource {
    let gvk =
        kube::core::GroupVersionKind::gvk(INFRASTRUCTURE_GROUP, "v1beta2", AWS_MACHINE_TEMPLATE);
    kube::core::ApiResource::from_gvk_with_plural(&gvk, "awsmachinetemplates")
}

/// The infrastructure templates of the Cluster API namespace, by kind and name, as served and
/// shared with the watch store (never copied per pass).
pub type Templates = BTreeMap<(String, String), Arc<DynamicObject>>;

/// The cluster's AWS region (`status.platformStatus.aws.region` of the Infrastructure), which
/// Cluster API templates do not name.
pub fn region(infrastructure: Option<&crate::api::Infrastructure>) -> Option<&str> {
    let status = infrastructure?.status.as_ref()?.platform_status.as_ref()?;
    status.aws.as_ref()?.region.as_deref()
}

/// A Cluster API MachineSet's template, seen as the AWS rule reads a provider spec.
#[derive(Clone, Debug)]
pub struct TemplateView<'a> {
    pub template: MachineTemplate,
    pub source: &'a DynamicObject,
    pub source_name: &'a str,
}

/// Why a Cluster API MachineSet's template cannot be judged: a Skip or an Error.
#[derive(Clone, Debug, PartialEq)]
pub struct Unjudgeable {
    pub action: Action,
    pub reason: Reason,
    pub message: String,
}

/// The view of the template `reference` names, or why there is none.
pub fn view<'a>(
    reference: Option<&InfrastructureRef>,
    templates: &'a Templates,
    region: Option<&str>,
    data_secret_name: Option<&str>,
    labels: Option<&BTreeMap<String, String>>,
) -> Result<TemplateView<'a>, Unjudgeable> {
    let refuse = |action, reason, message: String| Unjudgeable {
        action,
        reason,
        message,
    };
    let Some(reference) = reference.filter(|r| !r.name.is_empty()) else {
        return Err(refuse(
            Action::Error,
            Reason::InfrastructureTemplateMissing,
            "spec.template.spec.infrastructureRef names no template".into(),
        ));
    };
    if reference.kind != AWS_MACHINE_TEMPLATE || reference.group() != INFRASTRUCTURE_GROUP {
        return Err(refuse(
            Action::Skip,
            Reason::InfrastructureTemplateNotSupported,
            format!(
                "its infrastructure template is a {} ({}); only {AWS_MACHINE_TEMPLATE}s \
                 ({INFRASTRUCTURE_GROUP}) are updated",
                reference.kind,
                reference.group()
            ),
        ));
    }
    let key = (reference.kind.clone(), reference.name.clone());
    let Some(((_, source_name), source)) = templates.get_key_value(&key) else {
        return Err(refuse(
            Action::Error,
            Reason::InfrastructureTemplateMissing,
            format!(
                "its {AWS_MACHINE_TEMPLATE} {} does not exist or cannot be read",
                reference.name
            ),
        ));
    };
    let machine = &source.data.pointer(MACHINE_SPEC_POINTER);
    let mut spec = Map::new();
    if let Some(ami) = machine.and_then(|m| m.get("ami")) {
        spec.insert("ami".into(), ami.clone());
    }
    if let Some(region) = region {
        spec.insert("placement".into(), json!({"region": region}));
    }
    if let Some(name) = data_secret_name {
        spec.insert("userDataSecret".into(), json!({"name": name}));
    }
    let mut template = MachineTemplate::default();
    template.spec.provider_spec.value = Some(Value::Object(spec));
    template.metadata = Some(TemplateMetadata {
        labels: labels.cloned(),
        ..Default::default()
    });
    Ok(TemplateView {
        template,
        source,
        source_name,
    })
}

/// The copy of `view`'s template with `changes` (pointers into the provider-spec view, and the
/// values they take) applied, named after the template it descends from, the release and a
/// digest of its whole new spec. `recorded` are the copies the MachineSet records as ours: only
/// a source among them is named after its own original (its `copied-from` annotation), since
/// anyone's clone of our copy carries that annotation too.
pub fn copy(
    view: &TemplateView<'_>,
    changes: &[(&str, &Value)],
    release: Option<&str>,
    recorded: &[RecordedCopy],
) -> TemplateCopy {
    let source = view.source;
    let original = (source.metadata.annotations.as_ref())
        .and_then(|a| a.get(COPIED_FROM_ANNOTATION))
        .filter(|_| is_ours(source, recorded))
        .map_or(view.source_name, String::as_str);
    let mut spec = source
        .data
        .get("spec")
        .cloned()
        .unwrap_or_else(|| json!({}));
    for (pointer, to) in changes {
        if let Some(slot) = spec.pointer_mut(&format!("/template/spec{pointer}")) {
            *slot = (*to).clone();
        }
    }
    let name = copy_name(original, release, &spec_digest(&spec));
    let types = source.types.as_ref();
    let object = json!({
        "apiVersion": types.map(|t| t.api_version.as_str()),
        "kind": types.map(|t| t.kind.as_str()),
        "metadata": copied_metadata(&source.metadata, &name, original),
        "spec": spec,
    });
    TemplateCopy {
        kind: AWS_MACHINE_TEMPLATE.into(),
        from: view.source_name.to_string(),
        to: name,
        object,
    }
}

/// A copy a MachineSet records as ours ([`COPIES_ANNOTATION`]).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, serde::Deserialize)]
pub struct RecordedCopy {
    pub name: String,
    pub uid: String,
}

/// The copies `meta` records as ours; none when the annotation is absent or unreadable (an
/// unreadable record proves nothing).
pub fn recorded_copies(meta: &ObjectMeta) -> Vec<RecordedCopy> {
    let text = (meta.annotations.as_ref()).and_then(|a| a.get(COPIES_ANNOTATION));
    (text.and_then(|text| serde_json::from_str(text).ok())).unwrap_or_default()
}

/// Whether `template` is one of our copies: its name and UID among `ours`, and its name ending
/// in the digest of its own spec, as the name of every copy does ([`copy_name`]). Not whether
/// the object recording it shows a move to it in its history: that annotation is as easily
/// written as the record, and a revert drops the entries it undoes, whose copies must still go.
pub fn is_ours(template: &DynamicObject, ours: &[RecordedCopy]) -> bool {
    let meta = &template.metadata;
    let (Some(name), Some(uid)) = (meta.name.as_deref(), meta.uid.as_deref()) else {
        return false;
    };
    let recorded = ours.iter().any(|r| r.name == name && r.uid == uid);
    // A copy's spec is never absent: `copy` writes `{}` for a source without one.
    let spec = template.data.get("spec").unwrap_or(&Value::Null);
    recorded && name.ends_with(&format!("-{}", spec_digest(spec)))
}

/// Adds to `patch` the record of `copy` as the newest of the copies `meta` records, its UID
/// written as [`CREATED_UID_PLACEHOLDER`] (see [`fill_created_uid`]). After the history's
/// operations: the annotations exist by then, and an absent record is guarded by the
/// resourceVersion every patch tests.
pub fn record_copy(patch: &mut Patch, meta: &ObjectMeta, copy: &str) {
    let old = (meta.annotations.as_ref()).and_then(|a| a.get(COPIES_ANNOTATION));
    let mut copies = recorded_copies(meta);
    copies.retain(|c| c.name != copy);
    copies.push(RecordedCopy {
        name: copy.to_string(),
        uid: CREATED_UID_PLACEHOLDER.to_string(),
    });
    let dropped = copies.len().saturating_sub(COPIES_KEPT);
    copies.drain(..dropped);
    let new = serde_json::to_string(&copies).unwrap_or_default();
    let path = annotation(COPIES_ANNOTATION);
    match old {
        Some(old) => patch.guarded_replace(path, old.as_str(), new),
        None => patch.add(path, new),
    }
}

/// The patch with the UID of the copy it records in place of the placeholder that
/// [`record_copy`] wrote: in the last operation that writes the record.
pub fn fill_created_uid(patch: &Patch, uid: &str) -> Patch {
    let mut filled = patch.clone();
    // A UID from the API server is plain text; anything else is not written into the patch.
    let safe = uid.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-');
    let uid = if safe { uid } else { "" };
    let record = annotation(COPIES_ANNOTATION);
    let written = filled.0.iter_mut().rev().find_map(|op| match op {
        PatchOperation::Add(AddOperation { path, value })
        | PatchOperation::Replace(ReplaceOperation { path, value })
            if *path == record =>
        {
            Some(value)
        }
        _ => None,
    });
    if let Some(Value::String(text)) = written
        && let Some(at) = text.rfind(CREATED_UID_PLACEHOLDER)
    {
        text.replace_range(at..at + CREATED_UID_PLACEHOLDER.len(), uid);
    }
    filled
}

/// Whether `existing`, found under the name of `copy`, is the copy itself: provably ours
/// ([`is_ours`]) and with the copy's whole spec, not merely its image.
pub fn is_the_copy(existing: &DynamicObject, copy: &TemplateCopy, ours: &[RecordedCopy]) -> bool {
    is_ours(existing, ours) && existing.data.get("spec") == copy.object.get("spec")
}

/// The copied metadata: the identity and bookkeeping of the source dropped, its labels,
/// annotations and owner references kept, and ours added.
fn copied_metadata(source: &ObjectMeta, name: &str, original: &str) -> Value {
    let mut labels = source.labels.clone().unwrap_or_default();
    labels.insert(CREATED_BY_LABEL.into(), CREATED_BY_VALUE.into());
    let mut annotations = source.annotations.clone().unwrap_or_default();
    // What `kubectl apply` remembers of the source is not true of the copy.
    annotations.remove("kubectl.kubernetes.io/last-applied-configuration");
    annotations.insert(COPIED_FROM_ANNOTATION.into(), original.into());
    let copied = ObjectMeta {
        name: Some(name.to_string()),
        namespace: source.namespace.clone(),
        labels: Some(labels),
        annotations: Some(annotations),
        owner_references: source.owner_references.clone(),
        ..ObjectMeta::default()
    };
    serde_json::to_value(copied).unwrap_or_else(|_| json!({"name": name}))
}

/// The first [`DIGEST_HEX`] hex digits of the SHA-256 of `spec` as JSON text.
fn spec_digest(spec: &Value) -> String {
    let text = serde_json::to_string(spec).unwrap_or_default();
    let digest = ring::digest::digest(&ring::digest::SHA256, text.as_bytes());
    hex::encode(&digest.as_ref()[..DIGEST_HEX / 2])
}

/// `<original>-<release>-<digest of the spec>`, within the 253 characters of a DNS subdomain
/// name: the original is cut, never the digest.
fn copy_name(original: &str, release: Option<&str>, digest: &str) -> String {
    let release: String = release
        .unwrap_or("rhcos")
        .to_ascii_lowercase()
        .chars()
        .map(|c| match c {
            'a'..='z' | '0'..='9' | '-' | '.' => c,
            _ => '-',
        })
        .collect();
    let suffix = format!(
        "-{}-{digest}",
        release.trim_matches(|c| c == '-' || c == '.')
    );
    // A release too long leaves room for neither: it is cut after the digest is kept.
    let suffix = if suffix.len() > 200 {
        format!("-{digest}")
    } else {
        suffix
    };
    let room = 253usize.saturating_sub(suffix.len());
    let base: String = original.chars().take(room).collect();
    format!("{}{suffix}", base.trim_end_matches(['-', '.']))
}

/// What garbage collection may delete now, and when the next unused copy becomes deletable.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Collectable {
    /// Templates this controller created that nothing uses any more, as served.
    pub unused: Vec<Arc<DynamicObject>>,
    /// The earliest moment an unused copy still in its grace period leaves it.
    pub next: Option<jiff::Timestamp>,
}

/// The templates this controller provably created ([`is_ours`]) that no
/// MachineSet or MachineDeployment of `references` names and that are older than `grace` (a new
/// template is unused until the patch that moves its MachineSet lands). Templates anyone else
/// created are never returned, whatever labels they carry.
pub fn unused_copies<'a>(
    templates: &Templates,
    references: impl IntoIterator<Item = &'a str>,
    ours: &[RecordedCopy],
    now: jiff::Timestamp,
    grace: jiff::SignedDuration,
) -> Collectable {
    let referenced: std::collections::BTreeSet<&str> = references.into_iter().collect();
    let mut collectable = Collectable::default();
    for template in templates.values() {
        let meta = &template.metadata;
        let Some(name) = meta.name.as_deref() else {
            continue;
        };
        if !is_ours(template, ours) || referenced.contains(name) {
            continue;
        }
        // Without a creation time the grace cannot be told: kept.
        let Some(created) = meta.creation_timestamp.as_ref().map(|t| t.0) else {
            continue;
        };
        let deletable_at = created + grace;
        if deletable_at > now {
            let earliest = collectable
                .next
                .map_or(deletable_at, |n| n.min(deletable_at));
            collectable.next = Some(earliest);
            continue;
        }
        collectable.unused.push(Arc::clone(template));
    }
    collectable
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::names::CLUSTER_API_NAMESPACE;
    use crate::testkit::cluster_api::{CLUSTER, aws_machine_template};

    /// The kit's template as the API server serves it, with what a copy must drop (its
    /// identity, `kubectl apply`'s annotation) and what it must keep (the Cluster owning it,
    /// someone's annotation).
    fn template(name: &str, ami: &str) -> Value {
        let mut template = aws_machine_template(CLUSTER_API_NAMESPACE, name, ami);
        let metadata = template["metadata"].as_object_mut().unwrap();
        let served = json!({
            "uid": "u-1", "resourceVersion": "7", "creationTimestamp": "2026-01-01T00:00:00Z",
            "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{}", "team": "x"},
            "ownerReferences": [{"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
                                 "name": CLUSTER, "uid": "c-1"}]
        });
        metadata.extend(served.as_object().unwrap().clone());
        template
    }

    fn templates(objects: &[Value]) -> Templates {
        objects
            .iter()
            .map(|o| {
                let key = (
                    o["kind"].as_str().unwrap().into(),
                    o["metadata"]["name"].as_str().unwrap().into(),
                );
                (key, Arc::new(serde_json::from_value(o.clone()).unwrap()))
            })
            .collect()
    }

    fn reference(kind: &str, name: &str) -> InfrastructureRef {
        InfrastructureRef {
            api_group: Some(INFRASTRUCTURE_GROUP.into()),
            kind: kind.into(),
            name: name.into(),
            ..Default::default()
        }
    }

    /// The view of the AWS template `name` among `all`, with no region or secret.
    fn aws_view<'a>(all: &'a Templates, name: &str) -> TemplateView<'a> {
        let reference = reference("AWSMachineTemplate", name);
        view(Some(&reference), all, None, None, None).expect("a view")
    }

    /// The change of a template's AMI to `to`, as the rules give it.
    fn ami_change(to: &Value) -> [(&'static str, &Value); 1] {
        [("/ami/id", to)]
    }

    #[test]
    fn the_view_reads_the_template_as_the_aws_rule_reads_a_provider_spec() {
        let all = templates(&[template("worker-a", "ami-old")]);
        let view = view(
            Some(&reference("AWSMachineTemplate", "worker-a")),
            &all,
            Some("us-east-1"),
            Some("worker-user-data"),
            None,
        )
        .unwrap();
        assert_eq!(
            view.template.spec.provider_spec.value,
            Some(
                json!({"ami": {"id": "ami-old"}, "placement": {"region": "us-east-1"},
                        "userDataSecret": {"name": "worker-user-data"}})
            )
        );
        assert_eq!(view.source_name, "worker-a");
    }

    #[test]
    fn a_v1beta1_reference_names_its_group_in_the_api_version() {
        let all = templates(&[template("worker-a", "ami-old")]);
        let v1beta1 = InfrastructureRef {
            api_version: Some("infrastructure.cluster.x-k8s.io/v1beta1".into()),
            kind: "AWSMachineTemplate".into(),
            name: "worker-a".into(),
            ..Default::default()
        };
        assert!(view(Some(&v1beta1), &all, None, None, None).is_ok());
    }

    #[test]
    fn other_kinds_are_skipped_and_missing_templates_are_errors() {
        let all = templates(&[template("worker-a", "ami-old")]);
        let refused = |kind, name| view(Some(&reference(kind, name)), &all, None, None, None);
        let gcp = refused("GCPMachineTemplate", "worker-a").unwrap_err();
        assert_eq!(
            (gcp.action, gcp.reason),
            (Action::Skip, Reason::InfrastructureTemplateNotSupported)
        );
        let missing = refused("AWSMachineTemplate", "gone").unwrap_err();
        assert_eq!(
            (missing.action, missing.reason),
            (Action::Error, Reason::InfrastructureTemplateMissing)
        );
        assert!(missing.message.contains("gone"), "{}", missing.message);
        let none = view(None, &all, None, None, None).unwrap_err();
        assert_eq!(none.reason, Reason::InfrastructureTemplateMissing);
    }

    #[test]
    fn a_copy_carries_the_new_image_and_the_sources_labels_but_not_its_identity() {
        let all = templates(&[template("worker-a", "ami-old")]);
        let copy = copy(
            &aws_view(&all, "worker-a"),
            &ami_change(&json!("ami-new")),
            Some("9.6.20251023-0"),
            &[],
        );
        assert_eq!(copy.from, "worker-a");
        assert!(
            copy.to.starts_with("worker-a-9.6.20251023-0-"),
            "{}",
            copy.to
        );
        let object = &copy.object;
        assert_eq!(object["metadata"]["name"], json!(copy.to));
        assert_eq!(
            object.pointer("/spec/template/spec/ami/id"),
            Some(&json!("ami-new"))
        );
        assert_eq!(
            object.pointer("/spec/template/spec/instanceType"),
            Some(&json!("m6i.xlarge"))
        );
        let metadata = object["metadata"].as_object().unwrap();
        for gone in ["uid", "resourceVersion", "creationTimestamp"] {
            assert!(!metadata.contains_key(gone), "{gone}");
        }
        assert_eq!(
            metadata["labels"][CREATED_BY_LABEL],
            json!(CREATED_BY_VALUE)
        );
        assert_eq!(
            metadata["labels"]["machine.openshift.io/cluster-api-machineset"],
            json!("worker-a")
        );
        assert_eq!(metadata["annotations"]["team"], json!("x"));
        assert_eq!(
            metadata["annotations"][COPIED_FROM_ANNOTATION],
            json!("worker-a")
        );
        assert!(
            metadata["annotations"]
                .get("kubectl.kubernetes.io/last-applied-configuration")
                .is_none()
        );
        assert_eq!(metadata["ownerReferences"][0]["kind"], json!("Cluster"));
        assert_eq!(metadata["namespace"], json!("openshift-cluster-api"));
    }

    /// The copy's record as the MachineSet moved to it holds it, once created with `uid`.
    fn recorded(name: &str, uid: &str) -> RecordedCopy {
        RecordedCopy {
            name: name.into(),
            uid: uid.into(),
        }
    }

    /// `copy` as the API server serves it once created, with `uid`.
    fn created(copy: &TemplateCopy, uid: &str) -> Value {
        let mut served = copy.object.clone();
        served["metadata"]["uid"] = json!(uid);
        served
    }

    #[test]
    fn a_copy_of_our_copy_is_named_after_the_original_and_names_are_deterministic() {
        let all = templates(&[template("worker-a", "ami-old")]);
        let copy_to = |ami: &str| {
            copy(
                &aws_view(&all, "worker-a"),
                &ami_change(&json!(ami)),
                Some("9.6.1"),
                &[],
            )
        };
        let first = copy_to("ami-new");
        assert_eq!(first, copy_to("ami-new"));
        assert_ne!(first.to, copy_to("ami-other").to);
        let all = templates(&[created(&first, "u-first")]);
        let second = copy(
            &aws_view(&all, &first.to),
            &ami_change(&json!("ami-next")),
            Some("9.8.2"),
            &[recorded(&first.to, "u-first")],
        );
        assert!(second.to.starts_with("worker-a-9.8.2-"), "{}", second.to);
        assert_eq!(second.from, first.to);
    }

    /// An administrator's clone of one of our copies carries our label and `copied-from`
    /// annotation, and another instance type: its copy is named after the clone itself, and
    /// after its whole spec, so it never shares a name with a copy of ours (issue 38: a
    /// MachineSet on m6i.xlarge was moved to a p4d.24xlarge copy).
    #[test]
    fn a_clone_of_our_copy_gets_a_name_of_its_own() {
        let all = templates(&[template("worker-a", "ami-old")]);
        let ours = copy(
            &aws_view(&all, "worker-a"),
            &ami_change(&json!("ami-new")),
            Some("9.6.1"),
            &[],
        );
        let mut clone = created(&ours, "u-clone");
        clone["metadata"]["name"] = json!("gpu-workers");
        clone["spec"]["template"]["spec"]["instanceType"] = json!("p4d.24xlarge");
        let all = templates(&[clone]);
        let of_clone = copy(
            &aws_view(&all, "gpu-workers"),
            &ami_change(&json!("ami-next")),
            Some("9.6.1"),
            &[],
        );
        assert!(
            of_clone.to.starts_with("gpu-workers-9.6.1-"),
            "{}",
            of_clone.to
        );
        // The same image on the same source with another instance type: another name.
        let mut bigger = template("worker-a", "ami-old");
        bigger["spec"]["template"]["spec"]["instanceType"] = json!("p4d.24xlarge");
        let all = templates(&[bigger]);
        let of_bigger = copy(
            &aws_view(&all, "worker-a"),
            &ami_change(&json!("ami-new")),
            Some("9.6.1"),
            &[],
        );
        assert_ne!(of_bigger.to, ours.to);
    }

    #[test]
    fn only_a_provably_ours_template_with_the_whole_spec_is_the_copy() {
        let all = templates(&[template("worker-a", "ami-old")]);
        let copy = copy(
            &aws_view(&all, "worker-a"),
            &ami_change(&json!("ami-new")),
            Some("9.6.1"),
            &[],
        );
        let existing = |spec_change: Option<(&str, Value)>| {
            let mut served = created(&copy, "u-1");
            if let Some((pointer, value)) = spec_change {
                *served.pointer_mut(pointer).unwrap() = value;
            }
            serde_json::from_value::<DynamicObject>(served).unwrap()
        };
        let ours = [recorded(&copy.to, "u-1")];
        assert!(is_the_copy(&existing(None), &copy, &ours));
        // Same name, not recorded as ours: someone else's.
        assert!(!is_the_copy(
            &existing(None),
            &copy,
            &[recorded(&copy.to, "u-2")]
        ));
        assert!(!is_the_copy(&existing(None), &copy, &[]));
        // Ours, but the same image with another instance type is not the copy.
        let other = Some(("/spec/template/spec/instanceType", json!("p4d.24xlarge")));
        assert!(!is_the_copy(&existing(other), &copy, &ours));
    }

    #[test]
    fn the_uid_of_the_created_copy_fills_the_record_written_last_only() {
        let meta = ObjectMeta::default();
        let mut patch = Patch::default();
        record_copy(&mut patch, &meta, "copy-1");
        // An earlier operation holding the placeholder (an old value someone wrote) is kept.
        (patch.0).insert(0, patch.0[0].clone());
        let filled = serde_json::to_value(fill_created_uid(&patch, "1f2e-3d")).unwrap();
        let record = |i: usize| filled[i]["value"].as_str().unwrap().to_string();
        assert!(record(0).contains(CREATED_UID_PLACEHOLDER), "{}", record(0));
        assert_eq!(record(1), r#"[{"name":"copy-1","uid":"1f2e-3d"}]"#);
        let odd = serde_json::to_string(&fill_created_uid(&patch, "a\"b")).unwrap();
        assert!(!odd.contains("a\\\"b"), "{odd}");
    }

    /// A copy of worker-a on `ami`, as served once created at `at` with uid `u-1`.
    fn served_copy(ami: &str, at: &str) -> Value {
        let all = templates(&[template("worker-a", "ami-old")]);
        let made = copy(
            &aws_view(&all, "worker-a"),
            &ami_change(&json!(ami)),
            Some("9.6.1"),
            &[],
        );
        let mut served = created(&made, "u-1");
        served["metadata"]["creationTimestamp"] = json!(at);
        served["metadata"]["resourceVersion"] = json!("7");
        served
    }

    fn name_of(template: &Value) -> &str {
        template["metadata"]["name"].as_str().unwrap()
    }

    #[test]
    fn only_our_copies_unused_for_longer_than_the_grace_are_collected() {
        let old_unused = served_copy("ami-1", "2026-01-01T00:00:00Z");
        let old_used = served_copy("ami-2", "2026-01-01T00:00:00Z");
        let new_unused = served_copy("ami-3", "2026-01-01T00:59:00Z");
        // Our label and annotation, copied by someone: not recorded as ours.
        let mut clone = old_unused.clone();
        clone["metadata"]["name"] = json!("spare-clone");
        let all = templates(&[
            old_unused.clone(),
            old_used.clone(),
            new_unused.clone(),
            clone,
            template("someone-elses", "ami-y"),
        ]);
        let now: jiff::Timestamp = "2026-01-01T01:00:00Z".parse().unwrap();
        let grace = jiff::SignedDuration::from_mins(10);
        let proven = [&old_unused, &old_used, &new_unused].map(|t| recorded(name_of(t), "u-1"));
        let collectable = unused_copies(&all, [name_of(&old_used)], &proven, now, grace);
        let unused = &collectable.unused;
        let names: Vec<&str> = (unused.iter())
            .filter_map(|u| u.metadata.name.as_deref())
            .collect();
        assert_eq!(names, [name_of(&old_unused)]);
        // The young one is collected once its grace is over.
        assert_eq!(
            collectable.next,
            Some("2026-01-01T01:09:00Z".parse().unwrap())
        );
        assert_eq!(unused[0].metadata.uid.as_deref(), Some("u-1"));
        assert_eq!(unused[0].metadata.resource_version.as_deref(), Some("7"));
    }

    /// Record and history are annotations anyone who may patch a MachineSet or
    /// MachineDeployment can write: an administrator's template they name, with its UID, is
    /// still not ours, since its name is not the digest of its spec; it is neither collected nor
    /// taken as the source of a copy of ours.
    #[test]
    fn a_forged_record_never_makes_an_administrators_template_ours() {
        let mut theirs = template("gpu-workers", "ami-old");
        theirs["metadata"]["annotations"][COPIED_FROM_ANNOTATION] = json!("worker-a");
        let all = templates(&[theirs]);
        let forged = [recorded("gpu-workers", "u-1")];
        let now: jiff::Timestamp = "2026-02-01T00:00:00Z".parse().unwrap();
        let grace = jiff::SignedDuration::from_mins(10);
        let collectable = unused_copies(&all, [], &forged, now, grace);
        assert_eq!(collectable, Collectable::default());
        let of_theirs = copy(
            &aws_view(&all, "gpu-workers"),
            &ami_change(&json!("ami-new")),
            Some("9.6.1"),
            &forged,
        );
        assert!(of_theirs.to.starts_with("gpu-workers-"), "{}", of_theirs.to);
    }

    #[test]
    fn names_stay_within_the_limit_of_a_dns_subdomain() {
        let long = "w".repeat(300);
        let name = copy_name(&long, Some("9.6.20251023-0"), &spec_digest(&json!({})));
        assert!(name.len() <= 253, "{}", name.len());
        assert!(name.ends_with(char::is_alphanumeric));
    }
}
