//! The MachineConfiguration's status: our conditions ([`conditions`]) and, while we manage boot
//! images, the boot-image fields ([`boot_image_fields`]) that the served schema declares
//! ([`served_schema`]). A pass writes them from its own snapshot ([`StatusSources`]):
//! `Progressing=True` before its patches when they change it, the result after them; each only
//! when it differs from what the object (or our last write, until the watch catches up) already
//! says.
//!
//! Writes are server-side applies with our own field manager listing only our fields; the
//! conditions list is a map keyed by `type`, so the Machine Config Operator's own conditions are
//! untouched.

mod boot_image_fields;
pub mod conditions;
pub(crate) mod served_schema;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use jiff::{SignedDuration, Timestamp};
use kube::api::{Patch, PatchParams};
use serde_json::json;
use tokio::time::Instant;
use tracing::{info, warn};

use super::retry::doubling;
use super::{Controller, MAX_BACKOFF, MIN_BACKOFF};
use crate::api::{ClusterVersion, Condition, Infrastructure, MachineConfiguration};
use crate::api_client;
use crate::arch::Arch;
use crate::golden_stream::GoldenConfig;
use crate::names::FIELD_MANAGER;
use crate::plan::other_managers;
use crate::plan::{self, Blocked, ClusterSnapshot, Decision, ObjectKey};
use crate::platform::Platform;
use boot_image_fields::Fields as BootImageFields;
use conditions::HeldFor;
use served_schema::StatusSchema;

/// Boot-image status fields by name, as applied.
type StatusFields = serde_json::Map<String, serde_json::Value>;

/// What a pass's status is computed from: the objects of its own snapshot, and the golden
/// ConfigMap as its planner parsed it. The status never goes back to the stores: written after
/// the patches, it says what the pass saw and did.
pub(super) struct StatusSources {
    pub mc: Option<MachineConfiguration>,
    infrastructure: Option<Infrastructure>,
    cluster_version: Option<ClusterVersion>,
    golden: Option<Arc<GoldenConfig>>,
}

impl StatusSources {
    /// Takes them out of the snapshot a pass has planned with.
    pub fn take(snapshot: &mut ClusterSnapshot, golden: Option<Arc<GoldenConfig>>) -> Self {
        StatusSources {
            mc: snapshot.machine_configuration.take(),
            infrastructure: snapshot.infrastructure.take(),
            cluster_version: snapshot.cluster_version.take(),
            golden,
        }
    }
}

/// The object as our last status write left it, while the watch has not delivered it.
pub(super) struct Written {
    /// The resourceVersions of the copies it is newer than: the one our first write in a row was
    /// computed against, and those our own writes made since, before this one. A pass writes
    /// twice (`Progressing=True`, then its result) on one snapshot, and the next pass may see
    /// either version while the watch catches up.
    older: Vec<String>,
    object: MachineConfiguration,
}

/// A status write decided on, which [`Controller::write_status`] sends and records.
pub(super) struct StatusWrite {
    conditions: Vec<Condition>,
    fields: StatusFields,
    /// The resourceVersions older than the object the write makes (see [`Written`]).
    older: Vec<String>,
    /// Whether the apply may take fields over: only while we manage boot images. Standing down,
    /// what another manager owns is never forced (docs/how-it-decides.md, "Beside the Machine
    /// Config Operator"): a value of its that changed since we read it makes our write a conflict,
    /// retried on a fresh copy.
    force: bool,
    /// The resourceVersion the apply requires, when it is forced and carries values another
    /// manager owns ([`fields_shared_with_others`]): should it have changed them since we read
    /// them, the write is a conflict rather than their old values forced back.
    precondition: Option<String>,
}

/// The API server refused our boot-image fields `times` in a row, the last at `at`, against
/// `schema`. Until its backoff ends, or the served schema changes, the conditions go alone:
/// every pass would otherwise cost a refused write and a conditions-only write.
pub(super) struct FieldsRefusal {
    times: u32,
    at: Instant,
    schema: StatusSchema,
}

impl Controller {
    /// The status write that `sources`, the gate of the pass and every object's latest
    /// decision (with the `pending` ones in place of the same objects', a rollout's
    /// announcement) call for, if any: none when nothing changed, when not leading,
    /// or while a failed write backs off.
    fn status_to_write(
        &self,
        sources: &StatusSources,
        pending: &BTreeMap<ObjectKey, &Decision>,
    ) -> Option<StatusWrite> {
        // After a failure, whatever changed waits for its backoff: an API server that refuses
        // this status (a webhook, a quota, RBAC) is not asked again on every pass. The loop
        // wakes for a pass when the backoff ends. Checked first, so that a follower or a
        // backoff costs no merging of conditions.
        let backing_off = (self.memory.status_retry_at).is_some_and(|at| at > Instant::now());
        if backing_off || !*self.leader.borrow() {
            return None;
        }
        let mc = sources.mc.as_ref()?;
        let decisions = self.decisions_with(pending);
        let mut desired = conditions::desired(&conditions::StatusInput {
            blocked: self.memory.last_blocked.as_ref(),
            decisions: &decisions,
            selections: &self.memory.last_selections,
            held: self.held(),
            paused: plan::pause_key(&mc.metadata).is_some(),
        });
        // The status the rest of OpenShift reads, only while we are the manager.
        let standing_down =
            (self.memory.last_blocked.as_ref()).is_some_and(|b| b.reason.stands_down());
        let fields = (!standing_down)
            .then(|| self.boot_image_fields(sources, mc, &decisions))
            .flatten();
        desired.extend(fields.as_ref().and_then(|f| f.manual_met.clone()));
        let (entries, shared) = self.field_entries(mc, fields.as_ref());
        let (known, older) = self.current_status(mc);
        let status = known.status.as_ref();
        let current = (status.and_then(|s| s.conditions.as_deref())).unwrap_or_default();
        let fields_changed = (entries.iter())
            .any(|(key, value)| status.and_then(|s| s.extra.get(key)) != Some(value));
        // Unchanged conditions still go with changed fields, as they are: an apply drops what
        // it omits.
        let mut conditions =
            conditions::merge(current, &desired, mc.metadata.generation, Timestamp::now());
        if !fields_changed && conditions.iter().all(|c| current.contains(c)) {
            return None;
        }
        if standing_down {
            conditions.extend(shared_conditions_taken_over(mc));
        }
        Some(StatusWrite {
            conditions,
            fields: entries,
            older,
            force: !standing_down,
            precondition: (!standing_down && !shared.is_empty())
                .then(|| known.metadata.resource_version.clone())
                .flatten(),
        })
    }

    /// Every object's latest decision, with the `pending` ones in place of the same objects'.
    fn decisions_with<'a>(
        &'a self,
        pending: &BTreeMap<ObjectKey, &'a Decision>,
    ) -> Vec<&'a Decision> {
        (self.memory.decisions())
            .filter(|(key, _)| !pending.contains_key(*key))
            .map(|(_, decision)| &**decision)
            .chain(pending.values().copied())
            .collect()
    }

    /// The boot-image fields to apply, as the served schema declares them, and (second) the
    /// fields other managers share with us, which go along as they are.
    fn field_entries(
        &self,
        mc: &MachineConfiguration,
        fields: Option<&BootImageFields>,
    ) -> (StatusFields, StatusFields) {
        let schema = &self.schema.current;
        // Fields the API server refused wait for their backoff; the conditions never do.
        let refused = (self.memory.fields_refused.as_ref()).is_some_and(|r| {
            r.schema == *schema && Instant::now() < r.at + status_retry_delay(r.times)
        });
        let fields = fields.filter(|_| !refused);
        // Never a field another manager owns, even an MCO that enrolls nothing: forced, our
        // apply would take it over, and the MCO's controller enrolls what
        // `managedBootImagesStatus` says (`syncMAPIMachineSets`, pkg/controller/bootimage/
        // ms_helpers.go, release-4.21): our selection there would make it a second manager.
        let owned_elsewhere = other_managers::status_fields_owned_by_others(mc);
        let shared = fields_shared_with_others(mc, &owned_elsewhere);
        let mut entries = fields.map(|f| f.status_entries(schema)).unwrap_or_default();
        entries.retain(|key, _| !owned_elsewhere.contains(key));
        entries.extend(shared.clone());
        (entries, shared)
    }

    /// `mc` as far as we know, and the resourceVersions of the copies older than it: until the
    /// watch delivers our own write, the object our write answered rather than the stale copy
    /// (the pass's own snapshot is one once it announced its rollout).
    fn current_status<'a>(
        &'a self,
        mc: &'a MachineConfiguration,
    ) -> (&'a MachineConfiguration, Vec<String>) {
        let version = mc.metadata.resource_version.as_ref();
        match &self.memory.status_written {
            Some(written) if version.is_some_and(|v| written.older.contains(v)) => {
                let newest = written.object.metadata.resource_version.iter();
                let older = written.older.iter().chain(newest).cloned().collect();
                (&written.object, older)
            }
            _ => (mc, Vec::from_iter(version.cloned())),
        }
    }

    /// Sends the status write [`Controller::status_to_write`] calls for, if any, and records how
    /// it went: what the next write compares with, or its backoff.
    ///
    /// The leader reads the served schema first, when that is due (5 minutes after the last read).
    /// Should the API server refuse the boot-image fields as invalid (a schema that changed
    /// since we read it, an admission policy), the refusal is remembered (the fields back off)
    /// and the schema's index is read again, to see whether the schema changed; then the status
    /// is decided again without them (or with the fields a changed schema declares), so that
    /// changed conditions go at once: they must never wait for an optional field.
    pub(super) async fn write_status(
        &mut self,
        sources: &StatusSources,
        pending: &BTreeMap<ObjectKey, &Decision>,
    ) {
        if *self.leader.borrow() {
            self.schema.read_if_due().await;
        }
        let Some(mut write) = self.status_to_write(sources, pending) else {
            return;
        };
        let target = ["MachineConfiguration/status"];
        let mut result = self.apply(&write).await;
        if let Err(kube::Error::Api(refused)) = &result
            && refused.code == 422
            && !write.fields.is_empty()
        {
            warn!(error = %refused, "the API server refused the boot-image status fields; writing the conditions alone, if they changed, and the fields again after a backoff (1 s doubling to 5 min)");
            self.metrics.write_failures.with_label_values(&target).inc();
            let before = self.memory.fields_refused.take();
            // The schema the write was decided on: it is read again only below.
            let schema = self.schema.current.clone();
            let times =
                (before.filter(|r| r.schema == schema)).map_or(1, |r| r.times.saturating_add(1));
            let at = Instant::now();
            self.memory.fields_refused = Some(FieldsRefusal { times, at, schema });
            self.schema.read().await;
            let Some(again) = self.status_to_write(sources, pending) else {
                return;
            };
            write = again;
            result = self.apply(&write).await;
        } else if !write.fields.is_empty() && result.is_ok() {
            self.memory.fields_refused = None;
        }
        match result {
            Ok(object) => {
                self.metrics.writes.with_label_values(&target).inc();
                self.memory.status_failures = 0;
                self.memory.status_retry_at = None;
                let older = write.older;
                self.memory.status_written = Some(Written { older, object });
            }
            Err(e) => {
                self.memory.status_failures = self.memory.status_failures.saturating_add(1);
                let retry_in = status_retry_delay(self.memory.status_failures);
                // A write guarded by the resourceVersion it read loses to a concurrent writer
                // (the MCO's operator, an administrator) by design: not a failure to warn of.
                if matches!(&e, kube::Error::Api(status) if status.code == 409) {
                    info!(failures = self.memory.status_failures, retry_in = ?retry_in, "MachineConfiguration changed while its status was written; writing again from its new version");
                } else {
                    warn!(error = %e, failures = self.memory.status_failures, retry_in = ?retry_in, "could not write MachineConfiguration status");
                }
                self.metrics.write_failures.with_label_values(&target).inc();
                self.memory.status_retry_at = Some(Instant::now() + retry_in);
            }
        }
    }

    /// Applies `write` to the MachineConfiguration's status subresource; forced only when
    /// `write.force` (we manage boot images), and only onto the resourceVersion
    /// `write.precondition` names when it names one. Answers the object it made.
    async fn apply(&self, write: &StatusWrite) -> Result<MachineConfiguration, kube::Error> {
        let name = &self.args.machine_configuration_name;
        let mut fields = write.fields.clone();
        fields.insert("conditions".into(), json!(write.conditions));
        let mut body = json!({
            "apiVersion": "operator.openshift.io/v1",
            "kind": "MachineConfiguration",
            "metadata": {"name": name},
            "status": fields,
        });
        if let Some(resource_version) = &write.precondition {
            body["metadata"]["resourceVersion"] = json!(resource_version);
        }
        // Forcing takes over only the fields listed here, should a previous controller or an
        // MCO that enrolls nothing have written them. Unforced, a field another manager changed
        // since we read it is a conflict, never overwritten.
        let params = PatchParams {
            force: write.force,
            ..PatchParams::apply(FIELD_MANAGER)
        };
        let sent = Patch::Apply(body);
        api_client::bounded(self.configurations.patch_status(name, &params, &sent)).await
    }

    /// `managedBootImagesStatus` and `bootImageSkewEnforcementStatus` as we would publish them,
    /// once the platform is known (see [`boot_image_fields::compute`]).
    fn boot_image_fields(
        &self,
        sources: &StatusSources,
        mc: &MachineConfiguration,
        decisions: &[&Decision],
    ) -> Option<BootImageFields> {
        let infrastructure = sources.infrastructure.as_ref()?;
        let status = infrastructure.status.as_ref()?;
        let platform = Platform::from_status(status.platform_status.as_ref()?);
        let golden = sources.golden.as_deref();
        let golden_rhcos = golden.and_then(|g| {
            let key = platform.rule()?.stream_key();
            Arch::ALL
                .iter()
                .filter_map(|arch| g.stream.release(*arch, key))
                // By RHEL release, not as text: "10.1.." sorts before "9.6.." as text.
                .min_by(|a, b| boot_image_fields::rhcos_order(a, b))
                .map(str::to_string)
        });
        let cluster_version = sources.cluster_version.as_ref();
        let single_replica = status
            .extra
            .get("controlPlaneTopology")
            .is_some_and(|t| t == "SingleReplica");
        boot_image_fields::compute(&boot_image_fields::FieldsInput {
            mc,
            platform: &platform,
            decisions,
            golden_release: golden.and_then(|g| g.release_version.as_deref()),
            golden_rhcos: golden_rhcos.as_deref(),
            cluster_version: cluster_version.and_then(|cv| cv.status.as_ref()),
            single_replica,
        })
    }

    /// How long the current hold that is reported when lasting has held, against its limit.
    pub(super) fn held(&self) -> Option<HeldFor> {
        let since = self.memory.hold_since?;
        Some(HeldFor {
            duration: Timestamp::now().duration_since(since),
            limit: SignedDuration::try_from(self.args.hold_limit).unwrap_or(SignedDuration::MAX),
        })
    }

    /// Tracks since when writes are held, across passes and restarts. After a restart, a hold
    /// `mc` already reports as too long began its limit before that report did; any other hold
    /// is timed from now. Progressing cannot date it: its `lastTransitionTime` moves only when its
    /// status flips, and a hold usually begins while it is already False (an upgrade starting on
    /// a cluster whose boot images are current), so a restart during that upgrade would date the
    /// hold from the older flip and report it too long at once.
    pub(super) fn track_hold(
        &mut self,
        blocked: Option<&Blocked>,
        mc: Option<&MachineConfiguration>,
    ) {
        let Some(blocked) = blocked.filter(|b| b.reason.reported_when_lasting()) else {
            self.memory.hold_since = None;
            self.metrics.observe_hold(None);
            return;
        };
        if self.memory.hold_since.is_none() {
            let limit = SignedDuration::try_from(self.args.hold_limit).ok();
            let reported = mc.and_then(|mc| {
                let conditions = mc.status.as_ref()?.conditions.as_ref()?;
                let too_long = (conditions.iter())
                    .find(|c| c.type_ == conditions::HELD_TOO_LONG && c.status == "True")?;
                too_long.last_transition_time.0.checked_sub(limit?).ok()
            });
            self.memory.hold_since = Some(reported.unwrap_or_else(Timestamp::now));
        }
        let exceeded = self.held().is_some_and(|h| h.exceeded());
        self.metrics
            .observe_hold(exceeded.then_some(blocked.reason));
    }
}

/// The shared conditions another manager has taken over from an apply of ours, as the object
/// has them. While we stand down they go into our applies unchanged: an apply that omits an
/// entry it once wrote deletes the entry, the other manager's values with it, since an update
/// (the MCO writes with `UpdateStatus`) owns only the fields it changed, never the entry itself.
/// We would then see no other manager, take over, and flap on its every sync. Entries still
/// wholly ours are left out, and so removed (a stale `BootImageUpdateDegraded` of ours must not
/// linger), and entries we never applied stay the other manager's alone.
fn shared_conditions_taken_over(mc: &MachineConfiguration) -> Vec<Condition> {
    let others = other_managers::other_managers(mc);
    // Other managers own only the shared types (`other_managers`), so these are all shared.
    let keep = |type_: &str| {
        let owned = format!("condition {type_}");
        let entry = format!("/f:conditions/k:{}", json!({ "type": type_ }));
        others.iter().any(|m| m.owns.contains(&owned)) && applied_by_us(mc, &entry)
    };
    let conditions = mc.status.as_ref().and_then(|s| s.conditions.as_ref());
    (conditions.into_iter().flatten())
        .filter(|c| keep(&c.type_))
        .cloned()
        .collect()
}

/// Whether one of our server-side applies holds `pointer` (a JSON pointer into `f:status`), as
/// `managedFields` records them.
fn applied_by_us(mc: &MachineConfiguration, pointer: &str) -> bool {
    (mc.metadata.managed_fields.iter().flatten())
        .filter(|e| {
            e.manager.as_deref() == Some(FIELD_MANAGER) && e.operation.as_deref() == Some("Apply")
        })
        .filter_map(|e| e.fields_v1.as_ref()?.0.get("f:status"))
        .any(|status| status.pointer(pointer).is_some())
}

/// The boot-image status fields another manager changed after we applied them (on 4.21, the
/// MCO's operator publishing `machinesets: None` over the selection we published on 4.20), with
/// the values the object holds. They go into our applies as they are: an apply that omits a
/// field it once wrote drops our part of it, and the API server then refuses what remains (an
/// entry of `machineManagers` left without its keys); the same values change nothing and take
/// nothing over. Fields we never applied stay the other manager's alone.
fn fields_shared_with_others(
    mc: &MachineConfiguration,
    owned_elsewhere: &BTreeSet<String>,
) -> serde_json::Map<String, serde_json::Value> {
    let held = mc.status.as_ref().map(|s| &s.extra);
    (owned_elsewhere.iter())
        .filter(|key| applied_by_us(mc, &format!("/f:{key}")))
        .filter_map(|key| Some((key.clone(), held?.get(key)?.clone())))
        .collect()
}

/// How long a status write waits after `failures` in a row: the backoff of a failing resource.
fn status_retry_delay(failures: u32) -> std::time::Duration {
    doubling(MIN_BACKOFF, MAX_BACKOFF, failures)
}
