//! Provider specs decoded once per pass.
//!
//! The watch store keeps each provider spec as compact text ([`crate::compact_json`]), and a
//! rule reads a `Value`: decoding it was a third of the allocations of a stored MachineSet's
//! decision (17 on AWS). The trimmed text holds only what the rules read (the image, the region,
//! the stub secret's name), so the MachineSets of one region, role and image hold the same text
//! (the benchmark's 1,000 AWS MachineSets hold 107). Each distinct text is decoded once per
//! [`Planner`](super::Planner) and shared, and so is the platform rule's verdict on it: the
//! Azure rule alone took a quarter of a decision's instructions, copying image objects. Objects
//! handed whole (the `plan` command's) share verdicts too, by the text of the fields the rule
//! reads.

use std::ops::Deref;
use std::sync::{Arc, Mutex, PoisonError};

use serde_json::Value;

use crate::arch::Arch;
use crate::compact_json::CompactJson;
use crate::json_pointer::map_field;
use crate::json_text;
use crate::platform::{ImageOutcome, SharedImage};
use crate::stream::GoldenStream;

/// At most this many decoded specs are kept: a fleet whose MachineSets all differ pays for
/// decoding each, as before, and never holds more than a few megabytes for it.
const KEPT: usize = 512;

/// The longest text kept, of a spec or of the fields a rule reads. What a rule reads takes a
/// few hundred bytes in every real provider spec; an object that makes it larger is decoded and
/// judged on its own instead of holding a copy for the whole pass.
const KEPT_KEY_BYTES: usize = 4096;

/// The decoded provider specs of one planner, by their text.
#[derive(Default)]
pub(super) struct DecodedSpecs {
    // A planner is shared by the pass's tasks (`Planner` is `Sync`); the lock is never
    // contended, as one task decides at a time.
    // foldhash, not SipHash: every stored object's text (a couple of hundred bytes) is hashed
    // once per pass, and SipHash took 2% of the pass's instructions doing it. The map lives
    // for one pass and holds at most `KEPT` texts, so a crafted set of collisions could slow
    // one pass and no more.
    by_text: Mutex<foldhash::HashMap<Box<str>, Arc<DecodedSpec>>>,
    /// The same for the verdicts on provider specs handed whole, which are not decoded.
    by_fields: Mutex<ByFields>,
}

/// A provider spec decoded from its text, with the verdicts the rule gave on it in this pass.
pub(super) struct DecodedSpec {
    value: Value,
    verdicts: Verdicts,
}

impl DecodedSpec {
    /// The rule's verdict for `arch` against `stream`, judged (and its images shared) by
    /// `evaluate` the first time.
    pub fn verdict(
        &self,
        arch: Arch,
        stream: &GoldenStream,
        evaluate: impl FnOnce(&Value) -> ImageOutcome<Arc<SharedImage>>,
    ) -> ImageOutcome<Arc<SharedImage>> {
        (self.verdicts).get_or_judge(arch, stream, || evaluate(&self.value))
    }
}

/// The verdicts a rule gave on one provider spec in this pass, by the architecture and OS
/// stream judged for: the only inputs of a rule that differ between the objects of one planner,
/// whose context (known images, EC2 and vCenter facts, the Infrastructure) is the planner's own.
/// Rarely more than one.
#[derive(Default)]
pub(super) struct Verdicts(Mutex<Vec<Verdict>>);

/// A rule's verdict, with the architecture and stream it was judged for.
type Verdict = (Arch, StreamId, ImageOutcome<Arc<SharedImage>>);

/// Which golden stream a verdict was judged against: its address, which stays the same for the
/// planner's life since the planner's streams live behind an `Arc` it holds.
type StreamId = usize;

impl Verdicts {
    /// The verdict for `arch` against `stream`, judged by `judge` the first time.
    pub fn get_or_judge(
        &self,
        arch: Arch,
        stream: &GoldenStream,
        judge: impl FnOnce() -> ImageOutcome<Arc<SharedImage>>,
    ) -> ImageOutcome<Arc<SharedImage>> {
        let id = std::ptr::from_ref(stream) as StreamId;
        let verdicts = || self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((_, _, known)) = (verdicts().iter()).find(|(a, s, _)| *a == arch && *s == id) {
            return known.clone();
        }
        // Judged without the lock held; one task decides at a time, so nobody waits for it.
        let judged = judge();
        verdicts().push((arch, id, judged.clone()));
        judged
    }
}

/// Verdicts on provider specs handed whole, by the text of the fields the rule reads.
#[derive(Default)]
struct ByFields {
    verdicts: foldhash::HashMap<Box<[u8]>, Arc<Verdicts>>,
    /// The key being looked up, written here to spare an allocation per look-up.
    key: Vec<u8>,
}

impl DecodedSpecs {
    /// The value `kept` holds, decoded now or earlier in this pass. A text that cannot be
    /// decoded is not remembered: each decision reports its error.
    pub fn value(&self, kept: &CompactJson) -> Result<Arc<DecodedSpec>, serde_json::Error> {
        let text = kept.text();
        let mut by_text = self.by_text.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(value) = by_text.get(text) {
            return Ok(Arc::clone(value));
        }
        let value = Arc::new(DecodedSpec {
            value: kept.value()?,
            verdicts: Verdicts::default(),
        });
        if by_text.len() < KEPT && text.len() <= KEPT_KEY_BYTES {
            by_text.insert(text.into(), Arc::clone(&value));
        }
        Ok(value)
    }

    /// The verdicts on `spec`, a provider spec handed whole (as the `plan` command reads
    /// objects), shared with every spec whose fields `read` are written alike. A rule reads no
    /// other field of the spec (`PlatformRule::provider_spec_fields`, which the watch keeps and
    /// its test holds to the same decisions), so its verdict on one is its verdict on all.
    pub fn verdicts_on_fields(&self, spec: &Value, read: &[&str]) -> Arc<Verdicts> {
        let mut by_fields = self
            .by_fields
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let ByFields { verdicts, key } = &mut *by_fields;
        key.clear();
        for field in read {
            // An absent field and a `null` one can be judged apart: `-` is no JSON text.
            match spec.as_object().and_then(|spec| map_field(spec, field)) {
                Some(value) => json_text::value(key, value),
                None => key.push(b'-'),
            }
            key.push(b',');
        }
        if let Some(known) = verdicts.get(key.as_slice()) {
            return Arc::clone(known);
        }
        let fresh = Arc::<Verdicts>::default();
        if verdicts.len() < KEPT && key.len() <= KEPT_KEY_BYTES {
            verdicts.insert(key.as_slice().into(), Arc::clone(&fresh));
        }
        fresh
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.by_text.lock().unwrap().len()
    }
}

/// A provider spec as a rule reads it: the object's own value, or one decoded from its text.
pub(super) enum SpecView<'a> {
    Borrowed(&'a Value),
    Decoded(Arc<DecodedSpec>),
}

impl Deref for SpecView<'_> {
    type Target = Value;

    fn deref(&self) -> &Value {
        match self {
            SpecView::Borrowed(value) => value,
            SpecView::Decoded(decoded) => &decoded.value,
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn one_text_is_decoded_once_and_each_text_reads_as_its_own_value() {
        let specs = DecodedSpecs::default();
        let east = json!({"ami": {"id": "ami-1"}, "placement": {"region": "us-east-1"}});
        let west = json!({"ami": {"id": "ami-1"}, "placement": {"region": "us-west-2"}});
        let first = specs.value(&CompactJson::new(&east)).unwrap();
        let again = specs.value(&CompactJson::new(&east)).unwrap();
        let other = specs.value(&CompactJson::new(&west)).unwrap();
        assert!(Arc::ptr_eq(&first, &again));
        assert_eq!(first.value, east);
        assert_eq!(other.value, west);
        assert_eq!(specs.len(), 2);
    }

    #[test]
    fn a_verdict_is_judged_once_per_architecture_and_stream() {
        let specs = DecodedSpecs::default();
        let spec = json!({"ami": {"id": "ami-1"}});
        let decoded = specs.value(&CompactJson::new(&spec)).unwrap();
        let parse = |json: String| GoldenStream::parse(&json).unwrap();
        let (default, other) = (
            parse(crate::testkit::streams::stream_421()),
            parse(crate::testkit::streams::stream_420()),
        );
        let judged = std::cell::Cell::new(0);
        let verdict = |arch, stream| {
            decoded.verdict(arch, stream, |value: &Value| {
                judged.set(judged.get() + 1);
                ImageOutcome::UpToDate {
                    current: json!([value["ami"]["id"], judged.get()]),
                }
                .shared()
            })
        };
        let current = |outcome: ImageOutcome<Arc<SharedImage>>| match outcome {
            ImageOutcome::UpToDate { current } => current.value().clone(),
            other => panic!("{other:?}"),
        };
        assert_eq!(current(verdict(Arch::Amd64, &default)), json!(["ami-1", 1]));
        assert_eq!(current(verdict(Arch::Amd64, &default)), json!(["ami-1", 1]));
        assert_eq!(current(verdict(Arch::Arm64, &default)), json!(["ami-1", 2]));
        assert_eq!(current(verdict(Arch::Amd64, &other)), json!(["ami-1", 3]));
        assert_eq!(current(verdict(Arch::Arm64, &default)), json!(["ami-1", 2]));
        // The same text in another object is the same decoded spec, with its verdicts.
        let again = specs.value(&CompactJson::new(&spec)).unwrap();
        let outcome = again.verdict(Arch::Amd64, &default, |_| unreachable!("judged before"));
        assert_eq!(current(outcome), json!(["ami-1", 1]));
    }

    #[test]
    fn verdicts_on_whole_specs_are_shared_by_the_fields_read_unless_those_are_huge() {
        let specs = DecodedSpecs::default();
        let read = ["ami", "placement"];
        let spec = |ami: String, zone: &str| json!({"ami": {"id": ami}, "placement": {"region": "r"}, "zone": zone});
        let verdicts = |spec: &Value| specs.verdicts_on_fields(spec, &read);
        let small = verdicts(&spec("ami-1".into(), "a"));
        // Another field that is not read: the same verdicts.
        assert!(Arc::ptr_eq(&small, &verdicts(&spec("ami-1".into(), "b"))));
        assert!(!Arc::ptr_eq(&small, &verdicts(&spec("ami-2".into(), "a"))));
        let huge = "x".repeat(KEPT_KEY_BYTES);
        let first = verdicts(&spec(huge.clone(), "a"));
        assert!(!Arc::ptr_eq(&first, &verdicts(&spec(huge, "a"))));
    }

    #[test]
    fn beyond_the_bound_specs_are_decoded_without_being_kept() {
        let specs = DecodedSpecs::default();
        for i in 0..KEPT + 10 {
            let spec = json!({"ami": {"id": format!("ami-{i}")}});
            assert_eq!(specs.value(&CompactJson::new(&spec)).unwrap().value, spec);
        }
        assert_eq!(specs.len(), KEPT);
        let specs = DecodedSpecs::default();
        let huge = json!({"ami": {"id": "x".repeat(KEPT_KEY_BYTES)}});
        assert_eq!(specs.value(&CompactJson::new(&huge)).unwrap().value, huge);
        assert_eq!(specs.len(), 0);
    }
}
