//! What the controller remembers on the objects it patches.
//!
//! Two annotations, both owned by this controller and written in the same JSON Patch as the
//! boot-image change, so they can never disagree with it:
//! - [`HISTORY_ANNOTATION`]: the last [`HISTORY_LIMIT`] changes (what was replaced, by what,
//!   for which release, when). `revert` reads it to restore the previous values.
//! - [`HOT_LOOP_ANNOTATION`]: when we patched the object within the hot-loop window.
//!   Kept on the object rather than in memory so that restarts and leader changes do not reset
//!   the guard (the predecessor's counter was lost on restart).

use jiff::{SignedDuration, Timestamp};
use json_patch::Patch;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use serde_json::value::RawValue;

use super::CLOCK_SKEW;
use super::boot_evidence::BootEvidence;
use super::patch::{Guarded, annotation, set_annotations};
use crate::api::ObjectMeta;
pub use crate::names::{HISTORY_ANNOTATION, HOT_LOOP_ANNOTATION};
use crate::platform::display_image;

/// Entries kept in the history annotation; older ones are dropped.
pub const HISTORY_LIMIT: usize = 5;

/// One recorded change of a machine resource.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HistoryEntry {
    /// RFC 3339 time of the patch.
    pub time: String,
    /// The OpenShift release whose golden images were applied, when the ConfigMap says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub release: Option<String>,
    /// The CoreOS stream the new image came from, e.g. `rhcos-4.21`.
    #[serde(default)]
    pub stream: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub boot_image: Option<Change<Value>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_data_secret: Option<Change<String>>,
    /// The infrastructure template a Cluster API MachineSet was moved between.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub infrastructure_template: Option<Change<String>>,
    /// Of a move to a new boot image: whether Machines showed that it boots, once they did
    /// (see `plan::boot_evidence`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub boot_evidence: Option<BootEvidence>,
    /// Of a change that put back the image a move replaced: the failure it answered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reverted_after: Option<BootEvidence>,
}

impl HistoryEntry {
    /// What the entry changed, as people read it: `boot image A -> B; stub secret C -> D`.
    pub fn describe_changes(&self) -> String {
        let image = (self.boot_image.as_ref()).map(|c| {
            let shown = |image: &Value| display_image(Some(image));
            format!("boot image {} -> {}", shown(&c.from), shown(&c.to))
        });
        let secret =
            (self.user_data_secret.as_ref()).map(|c| format!("stub secret {} -> {}", c.from, c.to));
        let template = (self.infrastructure_template.as_ref())
            .map(|c| format!("infrastructure template {} -> {}", c.from, c.to));
        [image, secret, template]
            .into_iter()
            .flatten()
            .collect::<Vec<_>>()
            .join("; ")
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Change<T> {
    pub from: T,
    pub to: T,
}

/// Our patches to one object within the hot-loop window. Versions before 2026-11-28 also wrote
/// a `target` (the values of the newest patch), which nothing read: it is ignored here, and an
/// older version reads memory without it as none, so a downgrade starts the count again.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct HotLoopMemory {
    /// Times of our patches, to whatever values, oldest first.
    pub patches: Vec<Timestamp>,
}

fn annotation_of<'m>(meta: &'m ObjectMeta, key: &str) -> Option<&'m str> {
    meta.annotations.as_ref()?.get(key).map(String::as_str)
}

/// The history recorded on an object, oldest first, as [`HistoryEntry`]s or as the entries
/// were written, each kept whole: an entry this version cannot read (a newer version's fields, a
/// hand edit) is written back as it was. Read as raw text (`RawValue`) where they are only
/// carried over or one of them is read: a tree of every entry was most of what an update cost
/// the planner (docs/performance.md). An unreadable annotation counts as empty: the history is
/// informational and must never block an update.
pub fn history<T: serde::de::DeserializeOwned>(meta: &ObjectMeta) -> Vec<T> {
    (annotation_of(meta, HISTORY_ANNOTATION))
        .and_then(|text| serde_json::from_str(text).ok())
        .unwrap_or_default()
}

/// The newest change recorded on the object, if it can be read.
pub fn last_change(meta: &ObjectMeta) -> Option<HistoryEntry> {
    let newest: Box<RawValue> = history(meta).pop()?;
    serde_json::from_str(newest.get()).ok()
}

pub fn hot_loop_memory(meta: &ObjectMeta) -> Option<HotLoopMemory> {
    annotation_of(meta, HOT_LOOP_ANNOTATION).and_then(|text| serde_json::from_str(text).ok())
}

/// The entries an update keeps beside the one it adds, within [`HISTORY_LIMIT`]: the first ever
/// recorded, whose `from` is what the object held before this controller changed it and what
/// `revert` must still reach, then the newest.
fn kept_entries<T>(mut earlier: Vec<T>) -> Vec<T> {
    let room = HISTORY_LIMIT - 1;
    if earlier.len() > room {
        earlier.drain(1..earlier.len() - (room - 1));
    }
    earlier
}

/// How many times we already patched this object, to any values, within `window` before
/// `now`: the larger of what the object's annotation and the controller's own memory
/// (`remembered`, lost on restart, kept when a whole-object writer erases the annotation) say.
pub fn recent_patches(
    meta: &ObjectMeta,
    remembered: Option<&HotLoopMemory>,
    now: Timestamp,
    window: SignedDuration,
) -> usize {
    // Whatever the target: a golden ConfigMap flipping between two images makes every
    // patch's target new, and a count per target then never reached the threshold (133
    // patches per MachineSet in 30 s, issue 38).
    let count = |memory: &HotLoopMemory| {
        (memory.patches.iter())
            .filter_map(|t| clamped(*t, now))
            .filter(|t| now.duration_since(*t) < window)
            .count()
    };
    let annotated = hot_loop_memory(meta).as_ref().map_or(0, count);
    annotated.max(remembered.map_or(0, count))
}

/// `time` as the guard counts it: an entry dated up to [`CLOCK_SKEW`] after `now` (clocks of
/// replicas differ a little) counts as made now. One dated later was not written by a working
/// clock (or was edited by hand) and is ignored: it would otherwise count for as long as it is
/// in the future.
fn clamped(time: Timestamp, now: Timestamp) -> Option<Timestamp> {
    let ahead = time.duration_since(now);
    if ahead <= SignedDuration::ZERO {
        Some(time)
    } else if ahead <= CLOCK_SKEW {
        Some(now)
    } else {
        None
    }
}

/// The controller's memory after patching an object at `now`: entries outside the window are
/// forgotten (the guard counts every patch of an object, whatever its values, see
/// [`recent_patches`]).
pub fn remember_patch(
    memory: Option<HotLoopMemory>,
    now: Timestamp,
    window: SignedDuration,
) -> HotLoopMemory {
    let mut memory = memory.unwrap_or_default();
    memory
        .patches
        .retain(|t| clamped(*t, now).is_some_and(|t| now.duration_since(t) < window));
    memory.patches.push(now);
    memory
}

/// Adds to `patch` the operations that record `entry` (and the hot-loop memory) on an object.
///
/// Existing annotation values are guarded with `test` ops. When the object has no annotations
/// at all we must create the map, and JSON Patch cannot test for absence; we then guard on the
/// resourceVersion instead, which costs at worst one retry.
pub fn record_ops(
    patch: &mut Patch,
    meta: &ObjectMeta,
    entry: &HistoryEntry,
    now: Timestamp,
    window: SignedDuration,
) {
    let mut entries: Vec<Box<RawValue>> = kept_entries(history(meta));
    entries.extend(serde_json::value::to_raw_value(entry));
    let history = serde_json::to_string(&entries).unwrap_or_default();
    let memory = remember_patch(hot_loop_memory(meta), now, window);
    let memory = serde_json::to_string(&memory).unwrap_or_default();
    // The history's `test` holds the text as it was, even when it is not JSON this version reads.
    let values = [(HISTORY_ANNOTATION, history), (HOT_LOOP_ANNOTATION, memory)];
    set_annotations(patch, meta, values);
}

/// Adds to `patch` the operations that settle the newest entry's `bootEvidence` and, for a
/// revert, append `revert` after it, in one guarded replace of the annotation as it was read.
pub fn record_boot_ops(
    patch: &mut Patch,
    meta: &ObjectMeta,
    evidence: &BootEvidence,
    revert: Option<&HistoryEntry>,
) {
    let Some(old) = annotation_of(meta, HISTORY_ANNOTATION) else {
        return;
    };
    let mut entries: Vec<Value> = history(meta);
    let Some(Value::Object(newest)) = entries.last_mut() else {
        return;
    };
    let settled = serde_json::to_value(evidence).unwrap_or_default();
    newest.insert("bootEvidence".into(), settled);
    if let Some(revert) = revert {
        entries = kept_entries(entries);
        entries.push(serde_json::to_value(revert).unwrap_or_default());
    }
    let history = Value::Array(entries).to_string();
    patch.guarded_replace(annotation(HISTORY_ANNOTATION), old, history);
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::api::ObjectMeta;
    use crate::plan::patch::remove_annotation;

    const HOUR: SignedDuration = SignedDuration::from_hours(1);

    fn entry(n: usize) -> HistoryEntry {
        HistoryEntry {
            infrastructure_template: None,
            time: format!("2026-01-01T00:00:0{n}Z"),
            release: Some("4.21.0".into()),
            stream: "rhcos-4.21".into(),
            boot_image: Some(Change {
                from: Value::String(format!("ami-{n}")),
                to: "ami-new".into(),
            }),
            user_data_secret: None,
            ..Default::default()
        }
    }

    /// Applies the patch to an object holding `meta` and returns the resulting metadata.
    fn apply(meta: &ObjectMeta, patch: Patch) -> ObjectMeta {
        let mut doc = serde_json::json!({ "metadata": meta });
        json_patch::patch(&mut doc, &patch).expect("ops apply");
        serde_json::from_value(doc["metadata"].clone()).unwrap()
    }

    /// The operations that record `entry` on an object with `meta`.
    fn recorded(meta: &ObjectMeta, entry: &HistoryEntry, now: Timestamp) -> Patch {
        let mut patch = Patch::default();
        record_ops(&mut patch, meta, entry, now, HOUR);
        patch
    }

    fn written(meta: &ObjectMeta) -> Option<&str> {
        annotation_of(meta, HISTORY_ANNOTATION)
    }

    #[test]
    fn history_is_bounded_and_ordered() {
        let now: Timestamp = "2026-01-01T00:00:00Z".parse().unwrap();
        let mut meta = ObjectMeta {
            resource_version: Some("7".into()),
            ..ObjectMeta::default()
        };
        for n in 0..7 {
            meta = apply(&meta, recorded(&meta, &entry(n), now));
            // Byte for byte what serde writes for the kept entries and the new one, whether the
            // kept text was copied from the old history's escaped text or written anew.
            let newest = (n + 1).saturating_sub(HISTORY_LIMIT - 1).max(1);
            let kept: Vec<HistoryEntry> = (0..=n)
                .filter(|i| *i == 0 || *i >= newest)
                .map(entry)
                .collect();
            assert_eq!(
                written(&meta),
                Some(serde_json::to_string(&kept).unwrap().as_str())
            );
        }
        let h: Vec<HistoryEntry> = history(&meta);
        assert_eq!(h.len(), HISTORY_LIMIT);
        // The first change stays: its `from` is what the object held before the controller.
        assert_eq!(h.first().unwrap(), &entry(0));
        assert_eq!(h[1], entry(3));
        assert_eq!(h.last().unwrap(), &entry(6));
    }

    /// Older entries go back as they were written: one with fields a newer version records, or
    /// one this version cannot read at all, is neither dropped nor rewritten, and the newest
    /// entry is reported whatever the older ones are.
    #[test]
    fn older_entries_are_kept_as_written() {
        let now: Timestamp = "2026-01-01T00:00:00Z".parse().unwrap();
        let newer_version = r#"{"time":"2025-01-01T00:00:00Z","stream":"s","future":{"a":1}}"#;
        let unreadable = r#"{"time":7}"#;
        let readable = serde_json::to_string(&entry(1)).unwrap();
        let text = format!("[{newer_version}, {unreadable},{readable}]");
        let meta = ObjectMeta {
            annotations: Some(BTreeMap::from([(HISTORY_ANNOTATION.into(), text)])),
            ..ObjectMeta::default()
        };
        assert_eq!(last_change(&meta), Some(entry(1)));

        let after = apply(&meta, recorded(&meta, &entry(2), now));
        let newest = serde_json::to_string(&entry(2)).unwrap();
        assert_eq!(
            written(&after).unwrap(),
            format!("[{newer_version},{unreadable},{readable},{newest}]")
        );
        assert_eq!(last_change(&after), Some(entry(2)));
    }

    #[test]
    fn hot_loop_counts_every_patch_within_window_whatever_its_values() {
        let t0: Timestamp = "2026-01-01T00:00:00Z".parse().unwrap();
        let mut meta = ObjectMeta {
            annotations: Some(BTreeMap::from([("other".into(), "x".into())])),
            ..ObjectMeta::default()
        };
        for minutes in [0, 10, 20] {
            let now = t0 + SignedDuration::from_mins(minutes);
            meta = apply(&meta, recorded(&meta, &entry(1), now));
        }
        let at = |m: i64| t0 + SignedDuration::from_mins(m);
        assert_eq!(recent_patches(&meta, None, at(30), HOUR), 3);
        // The first patch leaves the window after an hour.
        assert_eq!(recent_patches(&meta, None, at(65), HOUR), 2);
        // A patch to other values counts with the rest.
        meta = apply(&meta, recorded(&meta, &entry(2), at(31)));
        assert_eq!(recent_patches(&meta, None, at(32), HOUR), 4);
        assert_eq!(meta.annotations.unwrap()["other"], "x");
    }

    /// A golden ConfigMap flipping between two images every 100 ms: each patch's values are
    /// the other ones, and the count still reaches the threshold (it stayed at one, issue 38).
    #[test]
    fn values_flipping_back_and_forth_are_counted() {
        let t0: Timestamp = "2026-01-01T00:00:00Z".parse().unwrap();
        let mut meta = ObjectMeta::default();
        let mut remembered = None;
        for i in 0..6 {
            let now = t0 + SignedDuration::from_millis(100 * i);
            meta = apply(&meta, recorded(&meta, &entry(1 + i as usize % 2), now));
            remembered = Some(remember_patch(remembered, now, HOUR));
        }
        let now = t0 + SignedDuration::from_secs(1);
        assert_eq!(recent_patches(&meta, None, now, HOUR), 6);
        let erased = ObjectMeta::default();
        assert_eq!(recent_patches(&erased, remembered.as_ref(), now, HOUR), 6);
    }

    #[test]
    fn the_controllers_memory_counts_when_a_whole_object_writer_erased_the_annotation() {
        let t0: Timestamp = "2026-01-01T00:00:00Z".parse().unwrap();
        let at = |m: i64| t0 + SignedDuration::from_mins(m);
        let mut remembered = None;
        for minutes in [0, 10, 20] {
            remembered = Some(remember_patch(remembered, at(minutes), HOUR));
        }
        // The object as another writer put it back: no annotation of ours left.
        let erased = ObjectMeta::default();
        assert_eq!(recent_patches(&erased, None, at(30), HOUR), 0);
        assert_eq!(
            recent_patches(&erased, remembered.as_ref(), at(30), HOUR),
            3
        );
        // The memory forgets like the annotation does: by window.
        assert_eq!(
            recent_patches(&erased, remembered.as_ref(), at(65), HOUR),
            2
        );
        let other = remember_patch(remembered, at(71), HOUR);
        assert_eq!(other.patches, vec![at(20), at(71)]);
    }

    #[test]
    fn future_dated_entries_count_only_within_clock_skew() {
        let now: Timestamp = "2026-01-01T00:00:00Z".parse().unwrap();
        let memory = |times: &[i64]| HotLoopMemory {
            patches: times
                .iter()
                .map(|m| now + SignedDuration::from_mins(*m))
                .collect(),
        };
        let meta = ObjectMeta::default();
        // Two minutes ahead (another replica's clock): counts, as if made now.
        let skewed = memory(&[-10, 2]);
        assert_eq!(recent_patches(&meta, Some(&skewed), now, HOUR), 2);
        // A year ahead (a hand edit): never counts, so it cannot stop updates forever.
        let edited = memory(&[525_600, 525_600, 525_600]);
        assert_eq!(recent_patches(&meta, Some(&edited), now, HOUR), 0);
        // Writing the memory again drops it.
        let rewritten = remember_patch(Some(edited), now, HOUR);
        assert_eq!(rewritten.patches, vec![now]);
    }

    /// Memory an older version wrote, with the `target` it kept beside the times, still counts.
    #[test]
    fn memory_with_an_older_versions_target_is_read() {
        let old = r#"{"target":"[\"ami-1\",null]","patches":["2026-01-01T00:00:00Z"]}"#;
        let meta = ObjectMeta {
            annotations: Some(BTreeMap::from([(HOT_LOOP_ANNOTATION.into(), old.into())])),
            ..ObjectMeta::default()
        };
        let now: Timestamp = "2026-01-01T00:10:00Z".parse().unwrap();
        assert_eq!(recent_patches(&meta, None, now, HOUR), 1);
    }

    #[test]
    fn existing_values_are_guarded_by_test_ops() {
        let meta = ObjectMeta {
            annotations: Some(BTreeMap::from([(HISTORY_ANNOTATION.into(), "[]".into())])),
            ..ObjectMeta::default()
        };
        let mut patch = Patch::default();
        set_annotations(&mut patch, &meta, [(HISTORY_ANNOTATION, "[1]")]);
        let ops = patch.0;
        assert!(matches!(&ops[0], json_patch::PatchOperation::Test(t) if t.value == "[]"));
        // Someone else changed the annotation meanwhile: the patch must fail.
        let mut doc = serde_json::json!({"metadata": {"annotations": {HISTORY_ANNOTATION: "[9]"}}});
        assert!(json_patch::patch(&mut doc, &ops).is_err());
    }

    #[test]
    fn removal_is_guarded_and_noop_when_absent() {
        let meta = ObjectMeta {
            annotations: Some(BTreeMap::from([(HOT_LOOP_ANNOTATION.into(), "{}".into())])),
            ..ObjectMeta::default()
        };
        let mut patch = Patch::default();
        remove_annotation(&mut patch, &meta, HOT_LOOP_ANNOTATION);
        let after = apply(&meta, patch);
        assert!(after.annotations.unwrap().is_empty());
        let mut nothing = Patch::default();
        remove_annotation(&mut nothing, &ObjectMeta::default(), HOT_LOOP_ANNOTATION);
        assert!(nothing.0.is_empty());
    }
}
