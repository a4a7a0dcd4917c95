//! Revert: put back the values the controller replaced, as recorded in the history annotation.
//!
//! Pure: from a MachineSet or ControlPlaneMachineSet (as JSON) and a number of steps to the one
//! guarded JSON Patch that undoes the newest recorded changes. The `revert` command reads the
//! object and sends the patch.
//!
//! Rules:
//! - Only values the history records are touched. Undoing N steps restores, for each field those
//!   N entries recorded, the `from` of the oldest of them (as if each entry were undone newest
//!   first).
//! - Each restored value is guarded: a `test` that it still holds what the controller wrote (the
//!   `to` of the newest entry recording it), then the `replace`. If someone changed it since, we
//!   refuse here with a clear message, and the API server would reject the patch anyway.
//! - The same patch opts the object out (so the controller does not undo the revert at once),
//!   drops the undone entries from the history (so a second revert goes further back) and clears
//!   the hot-loop memory (opting out resets it; the controller would otherwise clear it itself,
//!   writing to an object it no longer manages).

pub mod stub_secret;

use serde::Serialize;
use serde_json::Value;

use crate::api::ObjectMeta;
use crate::machine_kind::MachineKind;
use crate::names::{HISTORY_ANNOTATION, HOT_LOOP_ANNOTATION, OPT_OUT_ANNOTATION, OPT_OUT_VALUE};
use crate::plan::Patch;
use crate::plan::history::HistoryEntry;
use crate::plan::patch::{remove_annotation, set_annotations};
pub use crate::plan::undo::{Field, Restore, RevertError};
use crate::plan::undo::{put_back, undo};

/// The revert of one object, ready to send.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Revert {
    /// The history entries undone, newest first.
    pub reverted: Vec<HistoryEntry>,
    /// The history entries kept, oldest first: what a further revert would undo.
    pub remaining: Vec<HistoryEntry>,
    pub changes: Vec<Restore>,
    /// RFC 6902 operations: guarded replaces of the values, then the annotations.
    pub patch: Patch,
}

/// Plans undoing the newest `steps` recorded changes of `object`, a MachineSet or
/// ControlPlaneMachineSet as the API server serves it.
pub fn revert(kind: MachineKind, object: &Value, steps: usize) -> Result<Revert, RevertError> {
    let meta: ObjectMeta = object
        .get("metadata")
        .and_then(|m| serde_json::from_value(m.clone()).ok())
        .unwrap_or_default();
    let described = format!(
        "{} {}/{}",
        kind,
        meta.namespace.as_deref().unwrap_or_default(),
        meta.name.as_deref().unwrap_or_default()
    );
    if steps == 0 {
        return Err(RevertError::NoSteps);
    }
    let history = read_history(&meta, &described)?;
    if steps > history.len() {
        return Err(RevertError::NotEnoughHistory {
            object: described,
            requested: steps,
            recorded: history.len(),
        });
    }
    let (remaining, undone) = history.split_at(history.len() - steps);

    let changes = undo(kind, object, undone, &described)?;
    let mut patch = Patch::default();
    put_back(&mut patch, &changes);
    bookkeeping(&mut patch, &meta, remaining);

    Ok(Revert {
        reverted: undone.iter().rev().cloned().collect(),
        remaining: remaining.to_vec(),
        changes,
        patch,
    })
}

/// The object as it would be once `planned` is applied: what the controller would then see.
pub fn applied(object: &Value, planned: &Revert) -> Result<Value, String> {
    let mut after = object.clone();
    json_patch::patch(&mut after, &planned.patch).map_err(|e| e.to_string())?;
    Ok(after)
}

/// The field managers that wrote the history annotation (from `metadata.managedFields`).
/// Anyone allowed to edit the object can write it; `revert` names them so that a person can tell
/// a history the controller recorded from one someone else edited.
pub fn history_writers(object: &Value) -> Vec<String> {
    let key = format!("f:{HISTORY_ANNOTATION}");
    let mut writers: Vec<String> = object
        .pointer("/metadata/managedFields")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|entry| {
            entry
                .pointer("/fieldsV1/f:metadata/f:annotations")
                .and_then(|a| a.get(&key))
                .is_some()
        })
        .filter_map(|entry| entry.get("manager").and_then(Value::as_str))
        .map(String::from)
        .collect();
    writers.dedup();
    writers
}

/// Opts the object out (so the controller does not undo the revert at once), keeps only the
/// history not undone (so a second revert goes further back) and clears the hot-loop memory.
fn bookkeeping(patch: &mut Patch, meta: &ObjectMeta, remaining: &[HistoryEntry]) {
    let kept = (!remaining.is_empty())
        .then(|| serde_json::to_string(remaining).expect("plain data serializes"));
    let annotations = [
        Some((OPT_OUT_ANNOTATION, OPT_OUT_VALUE)),
        kept.as_deref().map(|kept| (HISTORY_ANNOTATION, kept)),
    ];
    set_annotations(patch, meta, annotations.into_iter().flatten());
    if kept.is_none() {
        remove_annotation(patch, meta, HISTORY_ANNOTATION);
    }
    remove_annotation(patch, meta, HOT_LOOP_ANNOTATION);
}

/// The history, oldest first; unlike the planner, which treats an unreadable annotation as
/// empty, a revert must say why it cannot proceed.
fn read_history(meta: &ObjectMeta, described: &str) -> Result<Vec<HistoryEntry>, RevertError> {
    let text = meta
        .annotations
        .as_ref()
        .and_then(|a| a.get(HISTORY_ANNOTATION));
    let history: Vec<HistoryEntry> = match text {
        None => Vec::new(),
        Some(text) => serde_json::from_str(text).map_err(|e| RevertError::UnreadableHistory {
            object: described.to_string(),
            error: e.to_string(),
        })?,
    };
    if history.is_empty() {
        return Err(RevertError::NoHistory {
            object: described.to_string(),
        });
    }
    Ok(history)
}

#[cfg(test)]
mod tests {
    use jiff::Timestamp;
    use serde_json::json;

    use super::*;
    use crate::api::{ControlPlaneMachineSet, MachineSet};
    use crate::plan::history::Change;
    use crate::plan::{Action, ClusterSnapshot, Options, Planner};
    use crate::testkit::snapshot::{ClusterChanges, cluster_snapshot};
    use crate::testkit::streams::{
        AMI_420_US_EAST_1 as AMI_420, AMI_421_US_EAST_1 as AMI_421, GCP_IMAGE_420 as GCP_420,
        GCP_IMAGE_421 as GCP_421, stream_421_all_platforms as stream_4_21,
    };
    use crate::testkit::{objects, provider_specs};

    const NS: &str = "openshift-machine-api";

    // -----------------------------------------------------------------------------------------
    // Objects in the shapes the API server serves.

    fn aws_spec(ami: &str, secret: &str) -> Value {
        let role = secret.split('-').next().unwrap_or("worker");
        provider_specs::aws(ami, "us-east-1", secret, role)
    }

    /// A scratch data disk first, so the boot disk is not at index 0.
    fn gcp_spec(boot_image: &str) -> Value {
        let scratch = "projects/my-project/global/images/scratch";
        provider_specs::gcp(json!([
            provider_specs::gcp_data_disk(scratch),
            provider_specs::gcp_boot_disk(boot_image)
        ]))
    }

    fn azure_spec(version: &str) -> Value {
        provider_specs::azure(provider_specs::azure_marketplace(
            "azureopenshift",
            "aro4",
            "420-v2",
            version,
        ))
    }

    /// The kit's MachineSet `worker-a` on `spec`, with someone's annotation a revert keeps.
    fn machine_set(spec: Value) -> Value {
        objects::machine_set(NS, "worker-a")
            .annotate("unrelated", "kept")
            .provider_spec(spec)
            .build()
    }

    fn from<T: serde::de::DeserializeOwned>(value: Value) -> T {
        serde_json::from_value(value).expect("test object deserializes")
    }

    /// A cluster on `platform` at 4.21 whose MachineConfiguration manages `resource`, with the
    /// installer's and the managed stub secrets, knowing the 4.20 AMI.
    fn cluster(platform: &str, resource: &str) -> ClusterSnapshot {
        cluster_snapshot(platform, "4.21.0", &stream_4_21().to_string())
            .managed_boot_images(objects::machine_managers(&[(resource, "All")]))
            .stub_secret(NS, "worker-user-data", "3.2.0")
            .stub_secret(NS, "worker-user-data-managed", "3.2.0")
            .stub_secret(NS, "master-user-data-managed", "3.2.0")
            .stub_secret(NS, "master-user-data", "3.2.0")
            .knowing(&[AMI_420])
            .build()
    }

    fn apply(object: &Value, ops: &[json_patch::PatchOperation]) -> Value {
        let mut doc = object.clone();
        json_patch::patch(&mut doc, ops).expect("the patch applies");
        doc
    }

    /// What the controller does: plan the object and apply the planned patch.
    fn controller_update(
        cluster: &ClusterSnapshot,
        kind: MachineKind,
        object: &Value,
        at: &str,
    ) -> Value {
        let options = Options {
            now: at.parse::<Timestamp>().unwrap(),
            ..Options::default()
        };
        let decision = decide(cluster, &options, kind, object);
        assert_eq!(decision.action, Action::Update, "{decision:?}");
        apply(object, &decision.patch.0)
    }

    fn decide(
        cluster: &ClusterSnapshot,
        options: &Options,
        kind: MachineKind,
        object: &Value,
    ) -> crate::plan::Decision {
        let planner = Planner::new(cluster, options);
        match kind {
            MachineKind::MachineSet => planner.decide_object(&from::<MachineSet>(object.clone())),
            MachineKind::ControlPlaneMachineSet => {
                planner.decide_object(&from::<ControlPlaneMachineSet>(object.clone()))
            }
            MachineKind::ClusterApiMachineSet => {
                planner.decide_object(&from::<crate::api::ClusterApiMachineSet>(object.clone()))
            }
            MachineKind::ClusterApiMachineDeployment => {
                planner.decide_object(&from::<crate::api::ClusterApiMachineDeployment>(
                    object.clone(),
                ))
            }
        }
    }

    fn spec_of(kind: MachineKind, object: &Value) -> &Value {
        object.pointer(kind.provider_spec_path().as_str()).unwrap()
    }

    fn annotation(object: &Value, key: &str) -> Option<String> {
        object["metadata"]["annotations"][key]
            .as_str()
            .map(String::from)
    }

    /// Update with the controller, revert one step: the provider spec is the original again.
    fn assert_round_trip(cluster: &ClusterSnapshot, kind: MachineKind, original: &Value) -> Revert {
        let updated = controller_update(cluster, kind, original, "2026-03-02T10:00:00Z");
        assert_ne!(spec_of(kind, &updated), spec_of(kind, original));
        let revert = revert(kind, &updated, 1).expect("revert plans");
        let reverted = apply(&updated, &revert.patch.0);
        assert_eq!(
            spec_of(kind, &reverted).to_string(),
            spec_of(kind, original).to_string()
        );
        assert_eq!(
            annotation(&reverted, OPT_OUT_ANNOTATION).as_deref(),
            Some(OPT_OUT_VALUE)
        );
        assert_eq!(annotation(&reverted, HISTORY_ANNOTATION), None);
        assert_eq!(annotation(&reverted, HOT_LOOP_ANNOTATION), None);
        revert
    }

    /// [`assert_round_trip`] of a MachineSet on `spec`, selected on `platform`.
    fn assert_machine_set_round_trip(platform: &str, spec: Value) -> Revert {
        let cluster = cluster(platform, "machinesets");
        assert_round_trip(&cluster, MachineKind::MachineSet, &machine_set(spec))
    }

    fn paths(revert: &Revert) -> Vec<&str> {
        revert.changes.iter().map(|c| c.path.as_str()).collect()
    }

    // -----------------------------------------------------------------------------------------
    // Platforms and kinds

    #[test]
    fn an_aws_update_is_undone_byte_for_byte() {
        let revert = assert_machine_set_round_trip("AWS", aws_spec(AMI_420, "worker-user-data"));
        // The stub secret's name is never changed, so there is nothing of it to restore.
        assert_eq!(
            paths(&revert),
            ["/spec/template/spec/providerSpec/value/ami/id"]
        );
        assert_eq!(revert.changes[0].from, json!(AMI_421));
        assert_eq!(revert.changes[0].to, json!(AMI_420));
        // Every replace is preceded by a test of the value the controller wrote.
        let ops = serde_json::to_value(&revert.patch).unwrap();
        assert_eq!(
            ops[0],
            json!({"op": "test", "path": "/spec/template/spec/providerSpec/value/ami/id", "value": AMI_421})
        );
        assert_eq!(ops[1]["op"], "replace");
    }

    #[test]
    fn only_the_gcp_boot_disk_is_restored() {
        let revert = assert_machine_set_round_trip("GCP", gcp_spec(GCP_420));
        assert_eq!(
            revert.changes[0].path,
            "/spec/template/spec/providerSpec/value/disks/1/image"
        );
        assert_eq!(revert.changes[0].to, json!(GCP_420));
        assert_eq!(revert.changes.len(), 1, "the boot disk only");
    }

    #[test]
    fn the_azure_image_object_is_restored_whole() {
        let revert = assert_machine_set_round_trip("Azure", azure_spec("9.6.20250101"));
        assert_eq!(
            revert.changes[0].path,
            "/spec/template/spec/providerSpec/value/image"
        );
        assert_eq!(
            revert.changes[0].to,
            azure_spec("9.6.20250101")["image"].clone()
        );
    }

    #[test]
    fn a_control_plane_machine_set_is_restored_under_its_own_template() {
        let cluster = cluster("AWS", "controlplanemachinesets");
        let original = objects::control_plane_machine_set(NS, AMI_420);
        let revert = assert_round_trip(&cluster, MachineKind::ControlPlaneMachineSet, &original);
        // The controller changed the image only (a ControlPlaneMachineSet keeps its stub).
        assert_eq!(
            paths(&revert),
            ["/spec/template/machines_v1beta1_machine_openshift_io/spec/providerSpec/value/ami/id"]
        );
    }

    #[test]
    fn the_paths_are_the_ones_the_planner_writes() {
        for (kind, object, resource) in [
            (
                MachineKind::MachineSet,
                machine_set(aws_spec(AMI_420, "worker-user-data")),
                "machinesets",
            ),
            (
                MachineKind::ControlPlaneMachineSet,
                objects::control_plane_machine_set(NS, AMI_420),
                "controlplanemachinesets",
            ),
        ] {
            let cluster = cluster("AWS", resource);
            let updated = controller_update(&cluster, kind, &object, "2026-03-02T10:00:00Z");
            let revert = revert(kind, &updated, 1).unwrap();
            // The values the planner replaces; its bookkeeping annotations are not reverted.
            let decision = decide(&cluster, &Options::default(), kind, &object);
            let written: Vec<String> = serde_json::to_value(&decision.patch)
                .unwrap()
                .as_array()
                .unwrap()
                .iter()
                .filter(|op| op["op"] == "replace")
                .map(|op| op["path"].as_str().unwrap().to_string())
                .filter(|path| path.starts_with(kind.provider_spec_path().as_str()))
                .collect();
            assert_eq!(paths(&revert), written);
        }
    }

    // -----------------------------------------------------------------------------------------
    // Steps and history

    fn entry(time: &str, image: Option<(&str, &str)>, secret: Option<(&str, &str)>) -> Value {
        serde_json::to_value(HistoryEntry {
            infrastructure_template: None,
            time: time.into(),
            release: Some("4.21.0".into()),
            stream: "rhcos-4.21".into(),
            boot_image: image.map(|(from, to)| Change {
                from: json!(from),
                to: json!(to),
            }),
            user_data_secret: secret.map(|(from, to)| Change {
                from: from.into(),
                to: to.into(),
            }),
            ..Default::default()
        })
        .unwrap()
    }

    /// A MachineSet on `ami` and `secret` with this history (oldest first).
    /// The controller's latest update, from ami-420 to ami-421 and from `secret`'s first name to
    /// its second.
    fn last_update(secret: Option<(&str, &str)>) -> Value {
        entry("2026-03-01T00:00:00Z", Some(("ami-420", "ami-421")), secret)
    }

    fn with_history(ami: &str, secret: &str, history: &[Value]) -> Value {
        let mut ms = machine_set(aws_spec(ami, secret));
        ms["metadata"]["annotations"][HISTORY_ANNOTATION] =
            json!(serde_json::to_string(history).unwrap());
        ms
    }

    /// Three releases: the secret moved at 4.19, the AMI at 4.20 and at 4.21.
    /// What the controller would make of the image a revert puts back.
    fn recognised_after(cluster: &ClusterSnapshot, object: &Value) -> crate::plan::Recognition {
        let planned = revert(MachineKind::MachineSet, object, 1).expect("revert plans");
        let after = applied(object, &planned).expect("the revert applies");
        let options = Options::default();
        Planner::new(cluster, &options).recognise(&from::<MachineSet>(after))
    }

    #[test]
    fn a_recorded_coreos_image_is_recognised_and_a_planted_one_is_not() {
        let cluster = cluster("AWS", "machinesets");
        let original = machine_set(aws_spec(AMI_420, "worker-user-data"));
        let updated = controller_update(
            &cluster,
            MachineKind::MachineSet,
            &original,
            "2026-03-02T10:00:00Z",
        );
        assert_eq!(
            recognised_after(&cluster, &updated),
            crate::plan::Recognition::CoreOs
        );

        // Someone edits the history so that a revert would "restore" an image of their own.
        let mut planted = updated.clone();
        let history = annotation(&updated, HISTORY_ANNOTATION).expect("history");
        planted["metadata"]["annotations"][HISTORY_ANNOTATION] =
            json!(history.replace(AMI_420, "ami-0123456789abcdef0"));
        match recognised_after(&cluster, &planted) {
            crate::plan::Recognition::NotCoreOs(message) => {
                assert!(message.contains("ami-0123456789abcdef0"), "{message}")
            }
            other => panic!("a planted image was {other:?}"),
        }

        // Without the golden stream nothing can be judged, and the caller is told why.
        let mut unknown = cluster.clone();
        unknown.golden = None;
        assert!(matches!(
            recognised_after(&unknown, &updated),
            crate::plan::Recognition::Unknown(_)
        ));
    }

    /// Seven updates flipping between two images (a golden ConfigMap flipping between two
    /// streams): the bounded history keeps the first, so reverting every recorded step puts
    /// back the image from before the controller (issue 38: it held only the flips).
    #[test]
    fn a_bounded_history_still_reaches_the_image_from_before_the_controller() {
        use crate::plan::history::{HISTORY_LIMIT, record_ops};
        let now: Timestamp = "2026-03-01T00:00:00Z".parse().unwrap();
        let ami = "/spec/template/spec/providerSpec/value/ami/id";
        let mut object = machine_set(aws_spec("ami-original", "worker-user-data"));
        for i in 0..7 {
            let current = object.pointer(ami).unwrap().clone();
            let next = json!(if i % 2 == 0 { "ami-a" } else { "ami-b" });
            let entry = HistoryEntry {
                time: format!("2026-03-01T00:00:0{i}Z"),
                release: Some("4.21.0".into()),
                stream: "rhcos-4.21".into(),
                boot_image: Some(Change {
                    from: current,
                    to: next.clone(),
                }),
                user_data_secret: None,
                infrastructure_template: None,
                ..Default::default()
            };
            let meta: ObjectMeta = serde_json::from_value(object["metadata"].clone()).unwrap();
            let window = jiff::SignedDuration::from_hours(1);
            let mut patch = Patch::default();
            record_ops(&mut patch, &meta, &entry, now, window);
            json_patch::patch(&mut object, &patch.0).unwrap();
            *object.pointer_mut(ami).unwrap() = next;
        }
        let planned = revert(MachineKind::MachineSet, &object, HISTORY_LIMIT).unwrap();
        let after = applied(&object, &planned).unwrap();
        assert_eq!(after.pointer(ami), Some(&json!("ami-original")));
    }

    #[test]
    fn the_writers_of_the_history_come_from_managed_fields() {
        let mut object = machine_set(aws_spec(AMI_421, "worker-user-data"));
        let fields = |key: &str| json!({"f:metadata": {"f:annotations": {format!("f:{key}"): {}}}});
        object["metadata"]["managedFields"] = json!([
            {"manager": "boot-image-controller", "operation": "Update", "fieldsV1": fields(HISTORY_ANNOTATION)},
            {"manager": "kubectl-edit", "operation": "Update", "fieldsV1": fields(HISTORY_ANNOTATION)},
            {"manager": "argocd", "operation": "Apply", "fieldsV1": fields("unrelated")},
        ]);
        assert_eq!(
            history_writers(&object),
            vec![
                "boot-image-controller".to_string(),
                "kubectl-edit".to_string()
            ]
        );
        assert!(history_writers(&machine_set(aws_spec(AMI_421, "x"))).is_empty());
    }

    fn three_changes() -> Value {
        with_history(
            "ami-421",
            "worker-user-data-managed",
            &[
                entry(
                    "2025-06-01T00:00:00Z",
                    None,
                    Some(("worker-user-data", "worker-user-data-managed")),
                ),
                entry("2025-10-01T00:00:00Z", Some(("ami-419", "ami-420")), None),
                last_update(None),
            ],
        )
    }

    #[test]
    fn one_step_undoes_only_the_newest_change_and_keeps_the_rest_of_the_history() {
        let ms = three_changes();
        let revert = revert(MachineKind::MachineSet, &ms, 1).unwrap();
        assert_eq!(revert.changes.len(), 1);
        assert_eq!(revert.changes[0].to, json!("ami-420"));
        assert_eq!(revert.reverted.len(), 1);
        assert_eq!(revert.remaining.len(), 2);
        let after = apply(&ms, &revert.patch.0);
        let history: Vec<HistoryEntry> =
            serde_json::from_str(&annotation(&after, HISTORY_ANNOTATION).unwrap()).unwrap();
        assert_eq!(history, revert.remaining);
        assert_eq!(annotation(&after, "unrelated").as_deref(), Some("kept"));

        // A second revert goes further back.
        let again = revert_of(&after, 1);
        assert_eq!(again.changes[0].to, json!("ami-419"));
    }

    fn revert_of(object: &Value, steps: usize) -> Revert {
        revert(MachineKind::MachineSet, object, steps).unwrap()
    }

    #[test]
    fn n_steps_restore_what_the_oldest_undone_entry_replaced_for_each_field() {
        let ms = three_changes();
        let two = revert_of(&ms, 2);
        assert_eq!(
            two.changes.len(),
            1,
            "the secret was recorded by the third entry"
        );
        assert_eq!(two.changes[0].from, json!("ami-421"));
        assert_eq!(two.changes[0].to, json!("ami-419"));

        let three = revert_of(&ms, 3);
        let after = apply(&ms, &three.patch.0);
        let spec = spec_of(MachineKind::MachineSet, &after);
        assert_eq!(spec["ami"]["id"], "ami-419");
        assert_eq!(spec["userDataSecret"]["name"], "worker-user-data");
        assert_eq!(annotation(&after, HISTORY_ANNOTATION), None);
        assert_eq!(
            three.reverted[0].time, "2026-03-01T00:00:00Z",
            "newest first"
        );
    }

    #[test]
    fn more_steps_than_recorded_is_refused_naming_how_many_exist() {
        let err = revert(MachineKind::MachineSet, &three_changes(), 4).unwrap_err();
        assert!(matches!(err, RevertError::NotEnoughHistory { .. }), "{err}");
        assert!(err.to_string().contains("only 3 recorded"), "{err}");
        assert_eq!(
            revert(MachineKind::MachineSet, &three_changes(), 0).unwrap_err(),
            RevertError::NoSteps
        );
    }

    #[test]
    fn without_history_nothing_is_reverted() {
        let ms = machine_set(aws_spec(AMI_420, "worker-user-data"));
        let err = revert(MachineKind::MachineSet, &ms, 1).unwrap_err();
        assert!(matches!(err, RevertError::NoHistory { .. }), "{err}");
        assert!(
            err.to_string()
                .starts_with("MachineSet openshift-machine-api/worker-a has no boot-image history"),
            "{err}"
        );
        let empty = with_history(AMI_420, "worker-user-data", &[]);
        assert!(matches!(
            revert(MachineKind::MachineSet, &empty, 1),
            Err(RevertError::NoHistory { .. })
        ));
        let mut garbled = ms.clone();
        garbled["metadata"]["annotations"][HISTORY_ANNOTATION] = json!("not json");
        assert!(matches!(
            revert(MachineKind::MachineSet, &garbled, 1),
            Err(RevertError::UnreadableHistory { .. })
        ));
    }

    #[test]
    fn a_value_changed_since_is_never_overwritten() {
        // Someone moved the AMI after the controller did.
        let ms = with_history(
            "ami-someone-else",
            "worker-user-data-managed",
            &[last_update(None)],
        );
        let err = revert(MachineKind::MachineSet, &ms, 1).unwrap_err();
        assert!(matches!(err, RevertError::ChangedSince { .. }), "{err}");
        let text = err.to_string();
        assert!(text.contains("bootImage"), "{text}");
        assert!(
            text.contains("is ami-someone-else, but the controller last set it to ami-421"),
            "{text}"
        );

        // The stub secret too.
        let ms = with_history(
            "ami-421",
            "my-own-secret",
            &[last_update(Some((
                "worker-user-data",
                "worker-user-data-managed",
            )))],
        );
        let err = revert(MachineKind::MachineSet, &ms, 1).unwrap_err();
        assert!(
            matches!(&err, RevertError::ChangedSince { field: Field::UserDataSecret, current, .. } if current == "my-own-secret"),
            "{err:?}"
        );
    }

    #[test]
    fn a_gcp_boot_disk_changed_since_is_reported() {
        let mut ms = machine_set(gcp_spec("projects/mine/global/images/custom"));
        ms["metadata"]["annotations"][HISTORY_ANNOTATION] = json!(
            serde_json::to_string(&[entry(
                "2026-03-01T00:00:00Z",
                Some((GCP_420, GCP_421)),
                None
            )])
            .unwrap()
        );
        let err = revert(MachineKind::MachineSet, &ms, 1).unwrap_err();
        assert!(
            matches!(&err, RevertError::ChangedSince { path, .. } if path.ends_with("/disks/1/image")),
            "{err:?}"
        );
    }

    #[test]
    fn the_server_enforces_the_guards_too() {
        // Planned against one state, applied to another: the test ops fail the whole patch.
        let ms = three_changes();
        let revert = revert_of(&ms, 1);
        let mut changed = ms.clone();
        changed["spec"]["template"]["spec"]["providerSpec"]["value"]["ami"]["id"] =
            json!("ami-someone-else");
        let mut doc = changed.clone();
        assert!(json_patch::patch(&mut doc, &revert.patch.0).is_err());
        // The history annotation is guarded as well: a concurrent controller write conflicts.
        let mut recorded = ms.clone();
        recorded["metadata"]["annotations"][HISTORY_ANNOTATION] = json!("[]");
        let mut doc = recorded.clone();
        assert!(json_patch::patch(&mut doc, &revert.patch.0).is_err());
    }

    #[test]
    fn an_already_opted_out_object_keeps_its_annotation_unchanged() {
        let mut ms = three_changes();
        ms["metadata"]["annotations"][OPT_OUT_ANNOTATION] = json!(OPT_OUT_VALUE);
        let revert = revert_of(&ms, 1);
        let ops = serde_json::to_value(&revert.patch).unwrap();
        let touches_opt_out = ops
            .as_array()
            .unwrap()
            .iter()
            .any(|op| op["path"].as_str().unwrap().contains("boot-image-updates"));
        assert!(!touches_opt_out, "{ops:#}");
    }

    #[test]
    fn an_unknown_provider_spec_shape_is_refused() {
        let mut ms = three_changes();
        ms["spec"]["template"]["spec"]["providerSpec"]["value"] =
            json!({"kind": "VSphereMachineProviderSpec", "template": "rhcos"});
        let err = revert_of_err(&ms);
        assert!(
            matches!(err, RevertError::BootImageNotFound { .. }),
            "{err}"
        );
        ms["spec"]["template"]["spec"]["providerSpec"] = json!({});
        assert!(matches!(
            revert_of_err(&ms),
            RevertError::NoProviderSpec { .. }
        ));
    }

    fn revert_of_err(object: &Value) -> RevertError {
        revert(MachineKind::MachineSet, object, 1).unwrap_err()
    }
}
