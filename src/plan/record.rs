//! What the controller remembers on the objects it patches.
//!
//! Two annotations, both owned by this controller and written in the same JSON Patch as the
//! boot-image change, so they can never disagree with it:
//! - [`HISTORY_ANNOTATION`]: the last [`HISTORY_LIMIT`] changes (what was replaced, by what,
//!   for which release, when). `revert` reads it to restore the previous values.
//! - [`HOT_LOOP_ANNOTATION`]: when we patched to the current target within the hot-loop window.
//!   Kept on the object rather than in memory so that restarts and leader changes do not reset
//!   the guard (the predecessor's counter was lost on restart).

use std::cell::OnceCell;
use std::ops::Range;

use jiff::{SignedDuration, Timestamp};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use serde_json::value::RawValue;

use super::patch::{Operand, Patch, Path, set_annotations};
use crate::json_text::{self, InString, JsonValue, Sink};
use crate::meta_view::MetaView;
pub use crate::names::{HISTORY_ANNOTATION, HOT_LOOP_ANNOTATION};
use crate::platform::display_image;
/// Entries kept in the history annotation; older ones are dropped.
pub const HISTORY_LIMIT: usize = 5;

/// One recorded change of a machine resource, as read from an object. The planner writes a new
/// one from the decision's own values (`HistoryEntry<&String, &Value>`), which serializes to
/// the same text without copying the images.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[serde(bound(deserialize = "S: Deserialize<'de> + Default, V: Deserialize<'de>"))]
pub struct HistoryEntry<S = String, V = Value> {
    /// RFC 3339 time of the patch.
    pub time: S,
    /// The OpenShift release whose golden images were applied, when the ConfigMap says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub release: Option<S>,
    /// The CoreOS stream the new image came from, e.g. `rhcos-4.21`.
    #[serde(default)]
    pub stream: S,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub boot_image: Option<Change<V>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_data_secret: Option<Change<S>>,
    /// The infrastructure template a Cluster API MachineSet was moved between.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub infrastructure_template: Option<Change<S>>,
}

impl<V: JsonValue> HistoryEntry<&String, &V> {
    /// The entry as JSON text, the bytes serde writes for it (`json_text` writes them with less
    /// machinery; an update writes one entry).
    fn write_json(&self, out: &mut impl Sink) {
        out.plain(b"{");
        json_text::key(out, "time");
        json_text::string(out, self.time);
        if let Some(release) = self.release {
            out.plain(b",");
            json_text::key(out, "release");
            json_text::string(out, release);
        }
        out.plain(b",");
        json_text::key(out, "stream");
        json_text::string(out, self.stream);
        if let Some(change) = &self.boot_image {
            out.plain(b",");
            json_text::key(out, "bootImage");
            change.write_json(out, |out, image| image.write_json(out));
        }
        let names = [
            ("userDataSecret", &self.user_data_secret),
            ("infrastructureTemplate", &self.infrastructure_template),
        ];
        for (key, change) in names {
            if let Some(change) = change {
                out.plain(b",");
                json_text::key(out, key);
                change.write_json(out, |out, name| json_text::string(out, name));
            }
        }
        out.plain(b"}");
    }
}

impl HistoryEntry {
    /// The same entry, borrowed: what is serialized when an entry is written out.
    pub fn borrowed(&self) -> HistoryEntry<&String, &Value> {
        self.with_changes(
            self.boot_image.as_ref().map(Change::as_ref),
            self.user_data_secret.as_ref().map(Change::as_ref),
        )
    }

    /// The entry with the images and stub secrets of a decision, which it leaves out until the
    /// change is applied (`Decision::recorded`).
    pub fn with_changes<'a, V>(
        &'a self,
        boot_image: Option<Change<&'a V>>,
        user_data_secret: Option<Change<&'a String>>,
    ) -> HistoryEntry<&'a String, &'a V> {
        HistoryEntry {
            time: &self.time,
            release: self.release.as_ref(),
            stream: &self.stream,
            boot_image,
            user_data_secret,
            infrastructure_template: self.infrastructure_template.as_ref().map(Change::as_ref),
        }
    }

    /// The entry as a decision reports it (see [`LastChange`]).
    pub fn into_last_change(self) -> LastChange {
        LastChange::written(&self.borrowed())
    }
}

/// A history entry read into its fields, its images kept as the JSON text they were written as
/// (an Azure image is an object of five fields, and only the few changes a status message names
/// are ever shown).
pub type EntryFields = HistoryEntry<String, RawJson>;

/// The newest change recorded on an object, as every decision reports it: the entry's JSON text
/// as it was read or written, behind its time. Reading the entry into its fields took eight
/// allocations (time, release, stream, two images, two names, the box), about a sixth of
/// deciding an object with a history, for every object in every pass; only the few changes a
/// status message names are read into fields, when it names them. Compared as its text, as the
/// controller compares a decision with the one it kept.
#[derive(Clone, Debug, PartialEq)]
pub struct LastChange {
    /// The time, unescaped, then the entry.
    text: Box<str>,
    time_len: usize,
}

impl LastChange {
    /// `entry`, the JSON text of one history entry, when it reads as one.
    pub fn read(entry: &str) -> Option<LastChange> {
        // Borrowed first, which allocates nothing; a string with an escape in it cannot be
        // borrowed (this controller writes none), and only then is the entry read into fields.
        let owned;
        let time = match serde_json::from_str::<HistoryEntry<&str, &RawValue>>(entry) {
            Ok(borrowed) => borrowed.time,
            Err(_) => {
                owned = serde_json::from_str::<EntryFields>(entry).ok()?.time;
                owned.as_str()
            }
        };
        let mut text = String::with_capacity(time.len() + entry.len());
        text.push_str(time);
        text.push_str(entry);
        Some(LastChange {
            text: text.into_boxed_str(),
            time_len: time.len(),
        })
    }

    /// The change an update records, as the history annotation holds it once it is applied.
    pub fn written(entry: &HistoryEntry<&String, &impl JsonValue>) -> LastChange {
        let mut text = Vec::with_capacity(512);
        text.extend_from_slice(entry.time.as_bytes());
        entry.write_json(&mut text);
        LastChange {
            text: std::str::from_utf8(&text)
                .expect("JSON text is UTF-8")
                .into(),
            time_len: entry.time.len(),
        }
    }

    /// When the change was made (RFC 3339, as recorded).
    pub fn time(&self) -> &str {
        &self.text[..self.time_len]
    }

    /// The entry's JSON text.
    pub fn entry(&self) -> &str {
        &self.text[self.time_len..]
    }

    /// The entry read into its fields; `None` only if the text was not read as an entry, which
    /// [`LastChange::read`] does not let happen.
    pub fn fields(&self) -> Option<EntryFields> {
        serde_json::from_str(self.entry()).ok()
    }

    /// See [`HistoryEntry::describe_changes`].
    pub fn describe_changes(&self) -> String {
        self.fields()
            .map(|fields| fields.describe_changes())
            .unwrap_or_default()
    }
}

/// Serialized as its fields: what `plan -o json` printed when a decision kept them.
impl Serialize for LastChange {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self.fields() {
            Some(fields) => fields.serialize(serializer),
            None => serializer.serialize_none(),
        }
    }
}

impl<V: ShownAs> HistoryEntry<String, V> {
    /// What the entry changed, as people read it: `boot image A -> B; stub secret C -> D`.
    pub fn describe_changes(&self) -> String {
        let image = self
            .boot_image
            .as_ref()
            .map(|c| format!("boot image {} -> {}", c.from.shown(), c.to.shown()));
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

/// A recorded boot image, as people read it.
pub trait ShownAs {
    fn shown(&self) -> String;
}

impl ShownAs for Value {
    fn shown(&self) -> String {
        display_image(Some(self))
    }
}

impl ShownAs for RawJson {
    fn shown(&self) -> String {
        match serde_json::from_str::<Value>(self.0.get()) {
            Ok(image) => image.shown(),
            Err(_) => self.0.get().to_string(),
        }
    }
}

/// JSON text kept as it was read, and compared as that text.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(transparent)]
pub struct RawJson(Box<RawValue>);

impl RawJson {
    pub fn get(&self) -> &str {
        self.0.get()
    }
}

impl PartialEq for RawJson {
    fn eq(&self, other: &Self) -> bool {
        self.get() == other.get()
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Change<T> {
    pub from: T,
    pub to: T,
}

impl<T> Change<T> {
    pub fn as_ref(&self) -> Change<&T> {
        Change {
            from: &self.from,
            to: &self.to,
        }
    }
}

impl<T> Change<&T> {
    /// `{"from":...,"to":...}`, each side written by `write`.
    fn write_json<S: Sink>(&self, out: &mut S, write: impl Fn(&mut S, &T)) {
        out.plain(b"{");
        json_text::key(out, "from");
        write(out, self.from);
        out.plain(b",");
        json_text::key(out, "to");
        write(out, self.to);
        out.plain(b"}");
    }
}

/// Our patches to one object within the hot-loop window.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct HotLoopMemory {
    /// Identifies the values we wrote last (see [`target_key`]).
    pub target: String,
    /// Times of our patches, to whatever values, oldest first.
    pub patches: Vec<Timestamp>,
}

impl HotLoopMemory {
    /// The memory as JSON text, the bytes serde writes for it.
    fn write_json(&self, out: &mut impl Sink) {
        out.plain(b"{");
        json_text::key(out, "target");
        json_text::string(out, &self.target);
        out.plain(b",");
        json_text::key(out, "patches");
        out.plain(b"[");
        for (i, time) in self.patches.iter().enumerate() {
            if i > 0 {
                out.plain(b",");
            }
            out.quote();
            out.display(time);
            out.quote();
        }
        out.plain(b"]}");
    }
}

/// The history recorded on an object, oldest first. An unreadable annotation counts as empty:
/// the history is informational and must never block an update.
pub fn history<'a>(meta: impl Into<MetaView<'a>>) -> Vec<HistoryEntry> {
    (meta.into().annotation(HISTORY_ANNOTATION))
        .and_then(|text| serde_json::from_str(text).ok())
        .unwrap_or_default()
}

pub fn hot_loop_memory<'a>(meta: impl Into<MetaView<'a>>) -> Option<HotLoopMemory> {
    (meta.into().annotation(HOT_LOOP_ANNOTATION)).and_then(|text| serde_json::from_str(text).ok())
}

/// What an object records of our earlier patches. The hot-loop memory is parsed at most once
/// however often a decision consults it (an update counts and then extends it).
///
/// The history is only split into its entries' JSON text, once: the newest entry alone is read
/// (every decision reports it, see [`LastChange`]), and an update writes the older ones back as
/// they were, so an entry this version cannot read (a newer version's fields, a hand edit) is
/// kept rather than costing the whole history.
pub struct Records<'a> {
    meta: MetaView<'a>,
    hot_loop: OnceCell<Option<HotLoopMemory>>,
    /// Where each entry's text lies in the history annotation, split once: an update writes
    /// the older entries back, and then its decision reports the newest, and each split scans
    /// the whole history, up to a few kilobytes. Kept as ranges, not borrowed text: a cell of
    /// borrows would tie every `Records` to exactly the lifetime it was made with.
    entries: OnceCell<Vec<Range<usize>>>,
}

impl<'a> Records<'a> {
    pub fn of(meta: impl Into<MetaView<'a>>) -> Self {
        Records {
            meta: meta.into(),
            hot_loop: OnceCell::new(),
            entries: OnceCell::new(),
        }
    }

    /// The history annotation's text, and where its entries lie in it, oldest first; no
    /// entries when it is not a JSON array.
    fn entries(&self) -> (&'a str, &[Range<usize>]) {
        let text = self.meta.annotation(HISTORY_ANNOTATION);
        let ranges = self.entries.get_or_init(|| {
            let Some(text) = text else {
                return Vec::new();
            };
            let entries: Vec<&RawValue> = serde_json::from_str(text).unwrap_or_default();
            let start = |raw: &RawValue| raw.get().as_ptr() as usize - text.as_ptr() as usize;
            (entries.into_iter())
                .map(|raw| start(raw)..start(raw) + raw.get().len())
                .collect()
        });
        (text.unwrap_or_default(), ranges)
    }

    fn hot_loop(&self) -> Option<&HotLoopMemory> {
        (self.hot_loop.get_or_init(|| hot_loop_memory(self.meta))).as_ref()
    }

    /// The newest recorded change, if any and if it can be read.
    pub fn into_last(self) -> Option<LastChange> {
        let (text, entries) = self.entries();
        LastChange::read(&text[entries.last()?.clone()])
    }

    /// See [`recent_patches`].
    pub fn recent_patches(
        &self,
        remembered: Option<&HotLoopMemory>,
        now: Timestamp,
        window: SignedDuration,
    ) -> usize {
        // Whatever the target: a golden ConfigMap flipping between two images makes every
        // patch's target new, and a count per target then never reached the threshold (133
        // patches per MachineSet in 30 s, issue 38).
        let count = |memory: &HotLoopMemory| {
            memory
                .patches
                .iter()
                .filter_map(|t| clamped(*t, now))
                .filter(|t| now.duration_since(*t) < window)
                .count()
        };
        let annotated = self.hot_loop().map_or(0, count);
        annotated.max(remembered.map_or(0, count))
    }

    /// Adds to `patch` the operations of [`record_ops`].
    pub fn record_ops(
        &self,
        patch: &mut Patch,
        entry: &HistoryEntry<&String, &impl JsonValue>,
        target: &str,
        now: Timestamp,
        window: SignedDuration,
    ) {
        let (text, earlier) = self.entries();
        let kept = kept_entries(earlier);
        let kept = kept.as_slice();
        let memory = remember_patch(self.hot_loop().cloned(), target, now, window);
        // Both annotations are JSON text, written straight into the patch's strings.
        let memory = |out: &mut InString<'_>| memory.write_json(out);
        let memory = (HOT_LOOP_ANNOTATION, Operand::JsonText(&memory));
        let kept_text = kept.iter().map(|range| &text[range.clone()]);
        let history = |out: &mut InString<'_>| write_history(out, kept_text.clone(), entry);
        // The kept entries as this controller writes them, one after the other with a comma
        // between: the old history's `test` escapes them, and the new history copies them.
        let together = kept
            .first()
            .zip(kept.last())
            .map(|(first, last)| first.start..last.end);
        let together = together.filter(|_| {
            (kept.windows(2))
                .all(|w| w[1].start == w[0].end + 1 && text.as_bytes()[w[0].end] == b',')
        });
        match self.meta.annotation(HISTORY_ANNOTATION) {
            Some(old) => {
                let path = Path::Annotation(HISTORY_ANNOTATION);
                let shared = together.clone().unwrap_or(0..0);
                let old_text = |out: &mut Vec<u8>| {
                    json_text::contents(out, &old[..shared.start]);
                    let start = out.len();
                    json_text::contents(out, &old[shared.clone()]);
                    let end = out.len();
                    json_text::contents(out, &old[shared.end..]);
                    start..end
                };
                let new_text = |out: &mut Vec<u8>, escaped: Range<usize>| {
                    let out = &mut InString(out);
                    if together.is_none() {
                        return history(out);
                    }
                    out.plain(b"[");
                    out.0.extend_from_within(escaped);
                    out.plain(b",");
                    entry.write_json(out);
                    out.plain(b"]");
                };
                patch.guarded_replace_sharing(path, old_text, new_text);
                set_annotations(patch, self.meta, [memory]);
            }
            None => {
                let history = (HISTORY_ANNOTATION, Operand::JsonText(&history));
                set_annotations(patch, self.meta, [history, memory]);
            }
        }
    }
}

/// Where the entries an update keeps lie (beside the one it adds, within [`HISTORY_LIMIT`]):
/// the first ever recorded, whose `from` is what the object held before this controller
/// changed it and what `revert` must still reach, then the newest.
fn kept_entries(earlier: &[Range<usize>]) -> Vec<Range<usize>> {
    let room = HISTORY_LIMIT.saturating_sub(1);
    if earlier.len() <= room {
        return earlier.to_vec();
    }
    let newest = &earlier[earlier.len() - room.saturating_sub(1)..];
    (earlier.first().into_iter().chain(newest))
        .take(room)
        .cloned()
        .collect()
}

/// The history annotation's text: the kept entries as they were written, then `newest`.
fn write_history<'e>(
    out: &mut impl Sink,
    kept: impl Iterator<Item = &'e str>,
    newest: &HistoryEntry<&String, &impl JsonValue>,
) {
    out.plain(b"[");
    for entry in kept {
        out.json(entry);
        out.plain(b",");
    }
    newest.write_json(out);
    out.plain(b"]");
}

/// A stable identity for "these are the values we would write": the JSON array
/// `[boot image, stub secret]`, serialized from the borrowed values rather than a copy of them.
pub fn target_key(boot_image: Option<&impl JsonValue>, user_data_secret: Option<&str>) -> String {
    // Room for two GCP image names or an Azure image object: a GCP image alone is 70 bytes.
    let mut out = Vec::with_capacity(128);
    out.push(b'[');
    match boot_image {
        Some(image) => image.write_json(&mut out),
        None => out.extend_from_slice(b"null"),
    }
    out.push(b',');
    match user_data_secret {
        Some(name) => json_text::string(&mut out, name),
        None => out.extend_from_slice(b"null"),
    }
    out.push(b']');
    String::from_utf8(out).expect("JSON text is UTF-8")
}

/// A hot-loop entry may be dated this far after `now` (clocks of replicas differ a little) and
/// still count, as if made now. One dated later was not written by a working clock (or was
/// edited by hand) and is ignored: it would otherwise count for as long as it is in the future.
const CLOCK_SKEW: SignedDuration = SignedDuration::from_mins(5);

/// How many times we already patched this object, to any values, within `window` before
/// `now`: the larger of what the object's annotation and the controller's own memory
/// (`remembered`, lost on restart, kept when a whole-object writer erases the annotation) say.
pub fn recent_patches<'a>(
    meta: impl Into<MetaView<'a>>,
    remembered: Option<&HotLoopMemory>,
    now: Timestamp,
    window: SignedDuration,
) -> usize {
    Records::of(meta).recent_patches(remembered, now, window)
}

/// `time` as the guard counts it: clamped to `now` within [`CLOCK_SKEW`], `None` beyond.
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

/// The controller's memory after patching an object to `target` at `now`: entries outside the
/// window are forgotten, and those of other targets kept (the guard counts every patch of an
/// object, see [`Records::recent_patches`]); `target` names the newest.
pub fn remember_patch(
    memory: Option<HotLoopMemory>,
    target: &str,
    now: Timestamp,
    window: SignedDuration,
) -> HotLoopMemory {
    let mut memory = memory.unwrap_or_default();
    if memory.target != target {
        memory.target = target.to_string();
    }
    memory
        .patches
        .retain(|t| clamped(*t, now).is_some_and(|t| now.duration_since(t) < window));
    memory.patches.push(now);
    memory
}

/// The patch operations that record `entry` (and the hot-loop memory) on an object.
///
/// Existing annotation values are guarded with `test` ops. When the object has no annotations
/// at all we must create the map, and JSON Patch cannot test for absence; we then guard on the
/// resourceVersion instead, which costs at worst one retry.
pub fn record_ops<'a>(
    meta: impl Into<MetaView<'a>>,
    entry: &HistoryEntry<&String, &impl JsonValue>,
    target: &str,
    now: Timestamp,
    window: SignedDuration,
) -> Patch {
    let mut patch = Patch::default();
    Records::of(meta).record_ops(&mut patch, entry, target, now, window);
    patch
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
        }
    }

    /// Applies the patch to an object holding `meta` and returns the resulting metadata.
    fn apply(meta: &ObjectMeta, patch: Patch) -> ObjectMeta {
        let mut doc = serde_json::json!({ "metadata": meta });
        json_patch::patch(&mut doc, &patch.ops()).expect("ops apply");
        serde_json::from_value(doc["metadata"].clone()).unwrap()
    }

    /// A decision's last change keeps its images as text, and reads, compares, prints and
    /// serializes as the entry it was read from.
    #[test]
    fn a_last_change_reads_as_the_entry_it_was_read_from() {
        let azure = serde_json::json!({
            "publisher": "azureopenshift", "offer": "aro4", "sku": "aro_419",
            "version": "419.6.20250101", "type": "MarketplaceWithPlan", "resourceID": ""
        });
        let written = HistoryEntry {
            boot_image: Some(Change {
                from: azure,
                to: "ami-new".into(),
            }),
            ..entry(1)
        };
        let text = serde_json::to_string(&written).unwrap();
        let read = LastChange::read(&text).unwrap();
        assert_eq!(read, written.clone().into_last_change());
        assert_eq!(read.time(), written.time);
        assert_eq!(read.describe_changes(), written.describe_changes());
        assert!(
            (read.describe_changes()).contains("azureopenshift:aro4:aro_419:419.6.20250101"),
            "{}",
            read.describe_changes()
        );
        assert_eq!(serde_json::to_string(&read).unwrap(), text);
    }

    /// An entry whose strings hold escapes cannot be borrowed and is read into fields instead:
    /// its time is the unescaped one. What is not an entry is no last change.
    #[test]
    fn a_last_change_is_read_whether_or_not_its_strings_hold_escapes() {
        let escaped = r#"{"time":"2026\u002d01-01T00:00:00Z","stream":"rhcos-\"4\"","userDataSecret":{"from":"a","to":"b"}}"#;
        let read = LastChange::read(escaped).expect("an entry");
        assert_eq!(read.time(), "2026-01-01T00:00:00Z");
        assert_eq!(read.entry(), escaped);
        assert_eq!(read.fields().unwrap().stream, "rhcos-\"4\"");
        assert_eq!(read.describe_changes(), "stub secret a -> b");
        for unreadable in [r#"{"time":7}"#, r#"{"stream":"s"}"#, "[]", "{"] {
            assert_eq!(LastChange::read(unreadable), None, "{unreadable}");
        }
    }

    /// The history and hot-loop annotations are written without serde, and must read exactly
    /// as serde would write them: the history's entries, every optional field present or not and
    /// any text in them, and the memory, whose target is itself JSON text full of quotes.
    /// What `$write` writes into a buffer is what serde writes for `$value`; written inside a
    /// string (as a patch carries the annotations), what serde writes for the string of that
    /// text, quotes aside.
    macro_rules! assert_written_as_serde_writes {
        ($value:expr, |$out:ident| $write:expr) => {{
            let text = serde_json::to_string($value).unwrap();
            let mut plain = Vec::new();
            {
                let $out = &mut plain;
                $write;
            }
            assert_eq!(String::from_utf8(plain).unwrap(), text);
            let quoted = serde_json::to_string(&text).unwrap();
            let mut inside = Vec::new();
            {
                let $out = &mut InString(&mut inside);
                $write;
            }
            assert_eq!(
                String::from_utf8(inside).unwrap(),
                quoted[1..quoted.len() - 1]
            );
        }};
    }

    #[test]
    fn entries_and_memories_are_written_as_serde_writes_them() {
        let azure = serde_json::json!({"publisher": "p\"q", "offer": "o", "version": 1.5});
        let texts = ["", "a\"b\\c", "tab\tand\u{1}", "é😀"];
        for (i, text) in texts.into_iter().enumerate() {
            let full = HistoryEntry {
                time: text.to_string(),
                release: Some(format!("4.21.{i}")),
                stream: text.to_string(),
                boot_image: Some(Change {
                    from: azure.clone(),
                    to: Value::String(text.into()),
                }),
                user_data_secret: Some(Change {
                    from: text.into(),
                    to: "worker-user-data-managed".into(),
                }),
                infrastructure_template: Some(Change {
                    from: "t-1".into(),
                    to: text.into(),
                }),
            };
            let sparse = HistoryEntry {
                release: None,
                boot_image: None,
                user_data_secret: None,
                infrastructure_template: None,
                ..full.clone()
            };
            for entry in [&full, &sparse] {
                assert_written_as_serde_writes!(entry, |out| entry.borrowed().write_json(out));
            }
            let memory = HotLoopMemory {
                target: target_key(Some(&azure), Some(text)),
                patches: vec!["2026-01-01T00:00:00Z".parse().unwrap(); i],
            };
            assert_written_as_serde_writes!(&memory, |out| memory.write_json(out));
        }
    }

    #[test]
    fn history_is_bounded_and_ordered() {
        let now: Timestamp = "2026-01-01T00:00:00Z".parse().unwrap();
        let mut meta = ObjectMeta {
            resource_version: Some("7".into()),
            ..ObjectMeta::default()
        };
        for n in 0..7 {
            meta = apply(
                &meta,
                record_ops(&meta, &entry(n).borrowed(), "t", now, HOUR),
            );
            // Byte for byte what serde writes for the kept entries and the new one, whether the
            // kept text was copied from the old history's escaped text or written anew.
            let newest = (n + 1).saturating_sub(HISTORY_LIMIT - 1).max(1);
            let kept: Vec<HistoryEntry> = (0..=n)
                .filter(|i| *i == 0 || *i >= newest)
                .map(entry)
                .collect();
            let written = MetaView::from(&meta).annotation(HISTORY_ANNOTATION);
            assert_eq!(
                written,
                Some(serde_json::to_string(&kept).unwrap().as_str())
            );
        }
        let h = history(&meta);
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
        assert_eq!(
            Records::of(&meta).into_last(),
            Some(entry(1).into_last_change())
        );

        let after = apply(
            &meta,
            record_ops(&meta, &entry(2).borrowed(), "t", now, HOUR),
        );
        let written = MetaView::from(&after)
            .annotation(HISTORY_ANNOTATION)
            .unwrap();
        let newest = serde_json::to_string(&entry(2)).unwrap();
        assert_eq!(
            written,
            format!("[{newer_version},{unreadable},{readable},{newest}]")
        );
        assert_eq!(
            Records::of(&after).into_last(),
            Some(entry(2).into_last_change())
        );
    }

    /// One `Records` splits its history once, for an update's operations and for the newest
    /// entry its decision reports: both read each entry exactly where it lies in the text,
    /// however the text is spaced.
    #[test]
    fn one_split_serves_the_update_and_the_newest_entry() {
        let now: Timestamp = "2026-01-01T00:00:00Z".parse().unwrap();
        let older = serde_json::to_string(&entry(1)).unwrap();
        let newer = serde_json::to_string(&entry(2)).unwrap();
        let meta = ObjectMeta {
            annotations: Some(BTreeMap::from([(
                HISTORY_ANNOTATION.into(),
                format!("[ {older} ,\n\t{newer}\n]"),
            )])),
            ..ObjectMeta::default()
        };
        let records = Records::of(&meta);
        let after = apply(&meta, {
            let mut patch = Patch::default();
            records.record_ops(&mut patch, &entry(3).borrowed(), "t", now, HOUR);
            patch
        });
        let newest = serde_json::to_string(&entry(3)).unwrap();
        assert_eq!(
            MetaView::from(&after).annotation(HISTORY_ANNOTATION),
            Some(format!("[{older},{newer},{newest}]").as_str())
        );
        assert_eq!(records.into_last(), Some(entry(2).into_last_change()));
    }

    #[test]
    fn hot_loop_counts_every_patch_within_window_whatever_its_target() {
        let t0: Timestamp = "2026-01-01T00:00:00Z".parse().unwrap();
        let mut meta = ObjectMeta {
            annotations: Some(BTreeMap::from([("other".into(), "x".into())])),
            ..ObjectMeta::default()
        };
        for minutes in [0, 10, 20] {
            let now = t0 + SignedDuration::from_mins(minutes);
            meta = apply(
                &meta,
                record_ops(&meta, &entry(1).borrowed(), "t", now, HOUR),
            );
        }
        let at = |m: i64| t0 + SignedDuration::from_mins(m);
        assert_eq!(recent_patches(&meta, None, at(30), HOUR), 3);
        // The first patch leaves the window after an hour.
        assert_eq!(recent_patches(&meta, None, at(65), HOUR), 2);
        // A patch to other values counts with the rest.
        meta = apply(
            &meta,
            record_ops(&meta, &entry(2).borrowed(), "u", at(31), HOUR),
        );
        assert_eq!(recent_patches(&meta, None, at(32), HOUR), 4);
        assert_eq!(hot_loop_memory(&meta).unwrap().target, "u");
        assert_eq!(meta.annotations.unwrap()["other"], "x");
    }

    /// A golden ConfigMap flipping between two images every 100 ms: each patch's target is
    /// the other one, and the count still reaches the threshold (it stayed at one, issue 38).
    #[test]
    fn a_target_flipping_back_and_forth_is_counted() {
        let t0: Timestamp = "2026-01-01T00:00:00Z".parse().unwrap();
        let mut meta = ObjectMeta::default();
        let mut remembered = None;
        for i in 0..6 {
            let now = t0 + SignedDuration::from_millis(100 * i);
            let target = if i % 2 == 0 { "a" } else { "b" };
            meta = apply(
                &meta,
                record_ops(&meta, &entry(1).borrowed(), target, now, HOUR),
            );
            remembered = Some(remember_patch(remembered, target, now, HOUR));
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
            remembered = Some(remember_patch(remembered, "t", at(minutes), HOUR));
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
        let other = remember_patch(remembered, "u", at(71), HOUR);
        assert_eq!(other.patches, vec![at(20), at(71)]);
        assert_eq!(other.target, "u");
    }

    #[test]
    fn future_dated_entries_count_only_within_clock_skew() {
        let now: Timestamp = "2026-01-01T00:00:00Z".parse().unwrap();
        let memory = |times: &[i64]| HotLoopMemory {
            target: "t".into(),
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
        let rewritten = remember_patch(Some(edited), "t", now, HOUR);
        assert_eq!(rewritten.patches, vec![now]);
    }

    /// The key is compared with the one the annotation holds, which an earlier version of the
    /// controller may have written: its text must not change, or an upgrade resets the guard.
    #[test]
    fn the_target_key_is_the_json_array_of_image_and_secret_in_the_images_own_order() {
        let image = serde_json::json!({"publisher": "p", "offer": "o", "sku": "s", "version": "1"});
        assert_eq!(
            target_key(Some(&image), Some("worker-user-data-managed")),
            r#"[{"publisher":"p","offer":"o","sku":"s","version":"1"},"worker-user-data-managed"]"#
        );
        assert_eq!(target_key(None::<&Value>, Some("a\"b")), r#"[null,"a\"b"]"#);
        assert_eq!(
            target_key(Some(&Value::from("ami-1")), None),
            r#"["ami-1",null]"#
        );
        // A shared image writes the same key from its text.
        let shared = crate::platform::SharedImage::new(image.clone());
        assert_eq!(
            target_key(Some(&shared), None),
            target_key(Some(&image), None)
        );
    }

    #[test]
    fn existing_values_are_guarded_by_test_ops() {
        let meta = ObjectMeta {
            annotations: Some(BTreeMap::from([(HISTORY_ANNOTATION.into(), "[]".into())])),
            ..ObjectMeta::default()
        };
        let mut patch = Patch::default();
        set_annotations(&mut patch, &meta, [(HISTORY_ANNOTATION, "[1]")]);
        let ops = patch.ops();
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
        assert!(nothing.is_empty());
    }
}
