//! Provider specs decoded once per pass.
//!
//! The watch store keeps each provider spec as compact text ([`crate::compact_json`]), and a
//! rule reads a `Value`: decoding it was a third of the allocations of a stored MachineSet's
//! decision (17 on AWS). The trimmed text holds only what the rules read (the image, the region,
//! the stub secret's name), so the MachineSets of one region, role and image hold the same text
//! (the benchmark's 1,000 AWS MachineSets hold 107). Each distinct text is decoded once per
//! [`Planner`](super::Planner) and shared.

use std::ops::Deref;
use std::sync::{Arc, Mutex, PoisonError};

use serde_json::Value;

use crate::compact_json::CompactJson;

/// At most this many decoded specs are kept: a fleet whose MachineSets all differ pays for
/// decoding each, as before, and never holds more than about a megabyte for it.
const KEPT: usize = 512;

/// The decoded provider specs of one planner, by their text.
#[derive(Default)]
pub(super) struct DecodedSpecs {
    // A planner is shared by the pass's tasks (`Planner` is `Sync`); the lock is never
    // contended, as one task decides at a time.
    // foldhash, not SipHash: every stored object's text (a couple of hundred bytes) is hashed
    // once per pass, and SipHash took 2% of the pass's instructions doing it. The map lives
    // for one pass and holds at most `KEPT` texts, so a crafted set of collisions could slow
    // one pass and no more.
    by_text: Mutex<foldhash::HashMap<Box<str>, Arc<Value>>>,
}

impl DecodedSpecs {
    /// The value `kept` holds, decoded now or earlier in this pass. A text that cannot be
    /// decoded is not remembered: each decision reports its error.
    pub fn value(&self, kept: &CompactJson) -> Result<Arc<Value>, serde_json::Error> {
        let text = kept.text();
        let mut by_text = self.by_text.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(value) = by_text.get(text) {
            return Ok(Arc::clone(value));
        }
        let value = Arc::new(kept.value()?);
        if by_text.len() < KEPT {
            by_text.insert(text.into(), Arc::clone(&value));
        }
        Ok(value)
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.by_text.lock().unwrap().len()
    }
}

/// A provider spec as a rule reads it: the object's own value, or one decoded from its text.
pub(super) enum SpecView<'a> {
    Borrowed(&'a Value),
    Decoded(Arc<Value>),
}

impl Deref for SpecView<'_> {
    type Target = Value;

    fn deref(&self) -> &Value {
        match self {
            SpecView::Borrowed(value) => value,
            SpecView::Decoded(value) => value,
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
        assert_eq!((*first).clone(), east);
        assert_eq!((*other).clone(), west);
        assert_eq!(specs.len(), 2);
    }

    #[test]
    fn beyond_the_bound_specs_are_decoded_without_being_kept() {
        let specs = DecodedSpecs::default();
        for i in 0..KEPT + 10 {
            let spec = json!({"ami": {"id": format!("ami-{i}")}});
            assert_eq!(*specs.value(&CompactJson::new(&spec)).unwrap(), spec);
        }
        assert_eq!(specs.len(), KEPT);
    }
}
