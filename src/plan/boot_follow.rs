//! What the planner does with the evidence of [`boot_evidence`]: it reports it on the decision,
//! settles it in the move's history entry once Machines showed either way, and, where the
//! administrator opted in, puts back the image a failed move replaced and holds the MachineSet
//! off the failed image.
//!
//! The hold is an annotation on the MachineSet ([`BOOT_FAILURE_HOLD_ANNOTATION`]) naming the
//! image that failed. The move to a newer golden image removes it; so can an administrator, to
//! try the same image again. A failed image is reverted at most once: a second failure of an
//! image the history says was reverted before is reported, not reverted.

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::boot_evidence::{self, BootEvidence, BootState};
use super::decision::{Action, Decision, Values, held_message};
use super::gates::Ready;
use super::history::{self, Change, HistoryEntry};
use super::patch::{Guarded, set_annotations};
use super::rules::Subject;
use super::undo::{self, Restore};
use super::{Planner, stub};
use crate::machine_kind::MachineKind;
use crate::names::{
    BOOT_FAILURE_HOLD_ANNOTATION, REVERT_FAILED_BOOT_IMAGES_ANNOTATION,
    STUB_IGNITION_UPGRADED_AT_ANNOTATION,
};
use crate::platform::display_image;
use crate::reason::Reason;

/// The hold annotation's value.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BootHold {
    /// The image that failed, which the MachineSet is not moved to again.
    pub image: Value,
    pub failure: BootEvidence,
}

/// The hold an object carries; an annotation that cannot be read holds everything, since it
/// was meant to hold something.
fn hold_of(subject: &Subject<'_>) -> Option<Result<BootHold, String>> {
    let text = subject.annotation(BOOT_FAILURE_HOLD_ANNOTATION)?;
    Some(serde_json::from_str(text).map_err(|e| e.to_string()))
}

impl Planner<'_> {
    /// Whether `decided`, an update, is held because its target image failed to boot here
    /// before; if so, it now says so.
    pub(super) fn held_after_boot_failure(
        &self,
        subject: &Subject<'_>,
        decided: &mut Decision,
    ) -> bool {
        let target = decided.boot_image.target.as_ref();
        let (why, failure) = match hold_of(subject) {
            None => return false,
            Some(Ok(hold)) if Some(&hold.image) != target => return false,
            Some(Ok(hold)) => (hold.failure.describe(), Some(hold.failure)),
            Some(Err(e)) => (format!("its hold annotation cannot be read ({e})"), None),
        };
        decided.action = Action::Skip;
        decided.reason = Reason::BootImageHeld;
        decided.message = held_message(&decided.boot_image, Some(&why));
        decided.boot_evidence = failure;
        true
    }

    /// Follows the newest move of a MachineSet that is on its new image: reports what its
    /// Machines showed, and settles it (and reverts a failure, where asked) when it may write.
    pub(super) fn follow_boot(&self, subject: &Subject<'_>, ready: &Ready, decided: &mut Decision) {
        if subject.kind != MachineKind::MachineSet || decided.reason == Reason::BootImageHeld {
            return;
        }
        // Held, and planned as something else (opted out, say): the failure is still reported.
        if let Some(Ok(hold)) = hold_of(subject) {
            decided.boot_evidence = Some(hold.failure);
            return;
        }
        // Read from the history annotation with the rest of the decision.
        let Some(moved) = decided.last_change.clone() else {
            return;
        };
        let (Some(change), None) = (&moved.boot_image, &moved.reverted_after) else {
            return;
        };
        let provider_spec = subject.provider_spec().and_then(|p| p.value.as_ref());
        if !boot_evidence::holds_image(provider_spec, &change.to) {
            return;
        }
        let recorded = moved.boot_evidence.clone().filter(|e| e.state.settled());
        let evidence = recorded.clone().unwrap_or_else(|| {
            let (now, limit) = (self.options.now, self.options.node_join_limit);
            let boots = &self.snapshot.boots;
            let owner = boot_evidence::Owner {
                meta: subject.meta,
                selector: subject.selector,
                template: subject.provider_spec(),
            };
            boot_evidence::judge(&owner, &moved.time, &change.to, boots, now, limit)
        });
        decided.boot_evidence = Some(evidence.clone());
        // Only an object the planner leaves as it is gets these writes: anything else (an
        // opt-out, a newer golden image, an error, a cluster-wide hold) decided otherwise.
        let may_write =
            decided.action == Action::UpToDate && decided.patch.is_empty() && ready.hold.is_none();
        let newly_settled = recorded.is_none() && evidence.state.settled();
        if evidence.state != BootState::Failed {
            if newly_settled && may_write {
                settle(subject, decided, &evidence, None);
            }
            return;
        }
        let revert = match self.revert_refusal(subject, &moved) {
            None => self.revert_move(subject, &moved, &evidence),
            Some(why) => Err(why),
        };
        let why = match revert {
            Ok((entry, restores)) if may_write => {
                reverting(decided, subject, change, &entry, &restores, &evidence);
                settle(subject, decided, &evidence, Some(&entry));
                decided.recorded = Some(Box::new(entry));
                return;
            }
            Ok(_) => format!("nothing may be written to it now ({})", decided.reason),
            Err(why) => why,
        };
        decided.message = format!(
            "{}; the new image failed to boot: {}; not reverted: {why}",
            decided.message,
            evidence.describe()
        );
        if newly_settled && may_write {
            settle(subject, decided, &evidence, None);
        }
    }

    /// Why a failed move is not reverted, if it is not.
    fn revert_refusal(&self, subject: &Subject<'_>, moved: &HistoryEntry) -> Option<String> {
        if !self.reverts_failed_images() {
            return Some(format!(
                "automatic revert is off (--revert-failed-boot-images, or the annotation \
                 {REVERT_FAILED_BOOT_IMAGES_ANNOTATION}: \"true\" on the MachineConfiguration)"
            ));
        }
        let failed = &moved.boot_image.as_ref()?.to;
        let reverted_before = (history::history::<HistoryEntry>(subject.meta).iter()).any(|e| {
            e.reverted_after.is_some() && e.boot_image.as_ref().is_some_and(|c| c.from == *failed)
        });
        if reverted_before {
            return Some("it was reverted from this image once already".into());
        }
        // A stub upgraded in place to Ignition spec 3 stays so: the image put back may read only
        // spec 2, and the stub is shared by other MachineSets (`revert` says how to undo both).
        let stub = subject.provider_spec().and_then(stub::kept_name)?;
        let secret = self
            .snapshot
            .secrets
            .get(&(subject.namespace().into(), stub.into()));
        let upgraded = secret
            .and_then(|s| s.metadata.annotations.as_ref())
            .is_some_and(|a| a.contains_key(STUB_IGNITION_UPGRADED_AT_ANNOTATION));
        upgraded.then(|| {
            format!(
                "its stub secret {stub} was upgraded in place to Ignition spec 3, which the \
                 previous image may not read; use `boot-image-controller revert`, which restores both"
            )
        })
    }

    /// `--revert-failed-boot-images`, unless the MachineConfiguration's annotation says
    /// otherwise.
    fn reverts_failed_images(&self) -> bool {
        let annotated = (self.snapshot.machine_configuration.as_ref())
            .and_then(|mc| {
                mc.metadata
                    .annotations
                    .as_ref()?
                    .get(REVERT_FAILED_BOOT_IMAGES_ANNOTATION)
            })
            .and_then(|value| value.parse::<bool>().ok());
        annotated.unwrap_or(self.options.revert_failed_boot_images)
    }

    /// The history entry that records putting back what `moved` replaced, and the values to
    /// put back.
    fn revert_move(
        &self,
        subject: &Subject<'_>,
        moved: &HistoryEntry,
        evidence: &BootEvidence,
    ) -> Result<(HistoryEntry, Vec<Restore>), String> {
        let object = json!({
            "metadata": subject.meta,
            "spec": { "template": subject.template },
        });
        let described = format!(
            "MachineSet {}",
            subject.meta.name.as_deref().unwrap_or_default()
        );
        let restores = undo::undo(
            subject.kind,
            &object,
            std::slice::from_ref(moved),
            &described,
        )
        .map_err(|e| e.to_string())?;
        fn back<T: Clone>(c: &Change<T>) -> Change<T> {
            Change {
                from: c.to.clone(),
                to: c.from.clone(),
            }
        }
        let entry = HistoryEntry {
            time: self.now_text.clone(),
            release: moved.release.clone(),
            stream: moved.stream.clone(),
            boot_image: moved.boot_image.as_ref().map(back),
            user_data_secret: moved.user_data_secret.as_ref().map(back),
            reverted_after: Some(evidence.clone()),
            ..Default::default()
        };
        Ok((entry, restores))
    }
}

/// Adds the write of the settled `evidence` (and the `revert` entry) into the history, guarded
/// by the resourceVersion read.
fn settle(
    subject: &Subject<'_>,
    decided: &mut Decision,
    evidence: &BootEvidence,
    revert: Option<&HistoryEntry>,
) {
    history::record_boot_ops(&mut decided.patch, subject.meta, evidence, revert);
    if let Some(rv) = &subject.meta.resource_version {
        decided.patch.guard_resource_version(rv);
    }
}

/// Turns `decided` into the revert of `change`: the values put back and the hold (the history
/// is [`settle`]d after them).
fn reverting(
    decided: &mut Decision,
    subject: &Subject<'_>,
    change: &Change<Value>,
    entry: &HistoryEntry,
    restores: &[Restore],
    evidence: &BootEvidence,
) {
    undo::put_back(&mut decided.patch, restores);
    let hold = BootHold {
        image: change.to.clone(),
        failure: evidence.clone(),
    };
    let hold = serde_json::to_string(&hold).unwrap_or_default();
    let hold = [(BOOT_FAILURE_HOLD_ANNOTATION, hold)];
    set_annotations(&mut decided.patch, subject.meta, hold);
    decided.action = Action::Update;
    decided.reason = Reason::BootImageReverted;
    decided.boot_image = Values {
        current: Some(change.to.clone()),
        target: Some(change.from.clone()),
    };
    if let Some(secret) = &entry.user_data_secret {
        decided.user_data_secret = Values {
            current: Some(secret.from.clone()),
            target: Some(secret.to.clone()),
        };
    }
    decided.message = format!(
        "reverting boot image {} -> {}: the new image failed to boot ({}); held off it until the \
         golden image changes or the annotation {BOOT_FAILURE_HOLD_ANNOTATION} is removed",
        display_image(Some(&change.to)),
        display_image(Some(&change.from)),
        evidence.describe(),
    );
}
