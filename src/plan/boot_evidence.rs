//! Whether a moved MachineSet's new boot image boots, judged from the Machines it created since.
//!
//! Nothing else checks this: when a golden image does not boot in a region, on a VM size or with
//! a custom stub, the next scale-up fails and nobody connects the failure with the change. A
//! Machine the MachineSet created after the move, with the new image, is evidence (and only
//! one its controller made, see [`created_by`]):
//! - it **proves** the image once its Node is Ready;
//! - it **fails** the image when the Machine API gives up on it (`Failed`) for a reason that
//!   points at the image (see [`image_failure`]), or when its instance exists but no Node joins
//!   within the limit (`--node-join-timeout`, or a MachineHealthCheck's shorter
//!   `nodeStartupTimeout`): the usual sign of an Ignition failure, but on one Machine no
//!   verdict, since a stalled CSR approver looks the same (see [`judge`]);
//! - anything else (quota, capacity, instance type, credentials, a Machine still provisioning)
//!   is not counted either way.
//!
//! One proving Machine settles the image for good, whatever other Machines do later: a boot that
//! worked once shows the image boots, and one that failed may have been that machine's. The
//! settled result is written into the move's history entry, so that it survives restarts and
//! the deletion of the Machines it came from.

use std::collections::BTreeMap;
use std::sync::Arc;

use jiff::{SignedDuration, Timestamp};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use kube::core::{Selector, SelectorExt};

use super::CLOCK_SKEW;
use crate::api::{LabelSelector, Leaves, Machine, MachineHealthCheck, ObjectMeta, ProviderSpec};
use crate::machine_kind::{CLUSTER_API_PAUSED_ANNOTATION, MachineKind};
use crate::platform::image_locations;
use crate::quoted::{bounded, printable};

/// What the cluster shows of Machines and Nodes, for [`judge`].
#[derive(Clone, Debug, Default)]
pub struct Boots {
    /// The Machines of the machine-API namespace, trimmed to what [`judge`] reads.
    pub machines: Vec<Arc<Machine>>,
    /// Every Node by name, and whether it is Ready.
    pub nodes: BTreeMap<String, bool>,
    /// The MachineHealthChecks of the machine-API namespace.
    pub health_checks: Vec<Arc<MachineHealthCheck>>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum BootState {
    /// No Machine has shown either way yet.
    Unproven,
    Proven,
    Failed,
}

impl BootState {
    pub const ALL: [BootState; 3] = [BootState::Unproven, BootState::Proven, BootState::Failed];

    pub fn as_str(self) -> &'static str {
        match self {
            BootState::Unproven => "Unproven",
            BootState::Proven => "Proven",
            BootState::Failed => "Failed",
        }
    }

    /// Proven and failed are final: no later Machine changes them.
    pub fn settled(self) -> bool {
        self != BootState::Unproven
    }
}

/// What the Machines showed of a moved MachineSet's new image.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BootEvidence {
    pub state: BootState,
    /// The Machine that settled it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub machine: Option<String>,
    /// When the controller saw it settle (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time: Option<String>,
    /// Of a failure: what went wrong, as the Machine API said it; of an unproven image, why a
    /// Machine that did not come up is no verdict yet.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Of an unproven image: when a Machine that waits for its Node passes the join limit, and
    /// so when to look again.
    #[serde(skip)]
    pub look_again_at: Option<Timestamp>,
}

impl BootEvidence {
    pub fn unproven(look_again_at: Option<Timestamp>) -> Self {
        BootEvidence {
            state: BootState::Unproven,
            machine: None,
            time: None,
            reason: None,
            look_again_at,
        }
    }

    /// For people: `proven by Machine m at t`, `failed on Machine m: why`, `unproven`.
    pub fn describe(&self) -> String {
        let machine = self.machine.as_deref().unwrap_or("?");
        match self.state {
            BootState::Unproven => match &self.reason {
                None => "no Machine created since has booted it yet".into(),
                Some(why) => format!("no Machine created since has booted it yet; {why}"),
            },
            BootState::Proven => format!(
                "proven: Machine {machine} booted it and its Node is Ready ({})",
                self.time.as_deref().unwrap_or("?")
            ),
            BootState::Failed => format!(
                "failed on Machine {machine}: {}",
                self.reason.as_deref().unwrap_or("?")
            ),
        }
    }
}

/// What one Machine shows.
enum Verdict {
    Proves,
    /// An image error the provider names: final on one Machine.
    Fails(String),
    /// The instance exists but no Node joined within the limit: see [`judge`].
    NoNode,
    /// Still on its way, or failed for a reason that is not the image's; with the time at which
    /// it would fail the join limit, if it waits for its Node.
    Open(Option<Timestamp>),
}

/// A moved MachineSet, as far as telling the Machines it made from others goes.
pub struct Owner<'a> {
    pub meta: &'a ObjectMeta,
    pub selector: Option<&'a LabelSelector>,
    /// Its template's provider spec.
    pub template: Option<&'a ProviderSpec>,
}

/// The evidence so far for the move of the MachineSet `owner` to `image` at `moved_at` (its
/// history's newest entry, RFC 3339): from the Machines `owner` created at or after the move
/// that boot that image.
pub fn judge(
    owner: &Owner<'_>,
    moved_at: &str,
    image: &Value,
    boots: &Boots,
    now: Timestamp,
    join_limit: SignedDuration,
) -> BootEvidence {
    let Some(evidence) = machines_since_the_move(owner, moved_at, image, boots, now, join_limit)
    else {
        return BootEvidence::unproven(None);
    };
    let proves = |(_, v): &&(_, Verdict)| matches!(v, Verdict::Proves);
    if let Some((m, _)) = evidence.iter().find(proves) {
        return settled(BootState::Proven, m, None, now);
    }
    for (m, verdict) in &evidence {
        if let Verdict::Fails(why) = verdict {
            return settled(BootState::Failed, m, Some(why), now);
        }
    }
    let next = (evidence.iter())
        .filter_map(|(_, v)| match v {
            Verdict::Open(at) => *at,
            _ => None,
        })
        .min();
    let no_node: Vec<&Machine> = (evidence.iter())
        .filter_map(|(m, v)| matches!(v, Verdict::NoNode).then_some(*m))
        .collect();
    if no_node.is_empty() {
        return BootEvidence::unproven(next);
    }
    without_a_node(&no_node, image, boots, now, join_limit, next)
}

/// The Machines `owner` created at or after the move that boot `image`, each with what it
/// shows, oldest first; none when the move's time does not parse or `owner` makes no Machine.
fn machines_since_the_move<'b>(
    owner: &Owner<'_>,
    moved_at: &str,
    image: &Value,
    boots: &'b Boots,
    now: Timestamp,
    join_limit: SignedDuration,
) -> Option<Vec<(&'b Machine, Verdict)>> {
    let moved_at = moved_at.parse::<Timestamp>().ok()?;
    // creationTimestamp has whole seconds: a Machine created in the second of the move counts,
    // and one created just before it is told apart by its image.
    let since = Timestamp::from_second(moved_at.as_second()).unwrap_or(moved_at);
    // The MachineSet controller makes no Machine for a MachineSet with an empty selector
    // (openshift/machine-api-operator, pkg/controller/machineset/controller.go,
    // `validateMachineset`): nothing counts for one here either.
    let selector = (owner.selector.cloned())
        .and_then(|s| Selector::try_from(s).ok())
        .filter(|s| !s.selects_all())?;
    // The template's leaves only once a Machine needs them: most MachineSets have no Machine
    // on their new image, and the walk was a tenth of what the planner spent on each.
    let template = std::cell::OnceCell::new();
    let template =
        || (template.get_or_init(|| owner.template.map(ProviderSpec::leaves))).as_deref();
    let mut evidence: Vec<(&Machine, Verdict)> = (boots.machines.iter())
        .map(Arc::as_ref)
        .filter(|m| (m.metadata.creation_timestamp.as_ref()).is_some_and(|t| t.0 >= since))
        .filter(|m| created_by(m, owner.meta, &selector, template))
        .filter(|m| holds_image(m.spec.provider_spec.value.as_ref(), image))
        .map(|m| {
            let limit = join_limit_of(m, &boots.health_checks, join_limit);
            (m, verdict(m, &boots.nodes, now, limit.within))
        })
        .collect();
    // Oldest first, so that the Machine named is the same from one pass to the next.
    evidence.sort_by(|(a, _), (b, _)| {
        let (a, b) = (&a.metadata, &b.metadata);
        (a.creation_timestamp.as_ref(), &a.name).cmp(&(b.creation_timestamp.as_ref(), &b.name))
    });
    Some(evidence)
}

/// Settled by Machine `m`, now.
fn settled(state: BootState, m: &Machine, reason: Option<&String>, now: Timestamp) -> BootEvidence {
    BootEvidence {
        state,
        machine: m.metadata.name.clone(),
        time: Some(now.to_string()),
        reason: reason.cloned(),
        look_again_at: None,
    }
}

/// The evidence of Machines (`no_node`, oldest first, at least one) whose Node never joined.
/// A Node that never joins is not the image's fault on one Machine: a stalled CSR approver,
/// an unreachable machine-config server or a slow first pull keep a kubelet out as surely.
/// It settles only on more than one Machine, and while no Machine of the image anywhere in
/// the cluster has a Ready Node.
fn without_a_node(
    no_node: &[&Machine],
    image: &Value,
    boots: &Boots,
    now: Timestamp,
    join_limit: SignedDuration,
    next: Option<Timestamp>,
) -> BootEvidence {
    let first = no_node[0];
    let within = join_limit_of(first, &boots.health_checks, join_limit).describe();
    let names = named(no_node);
    let proven_elsewhere = (boots.machines.iter()).find(|m| {
        holds_image(m.spec.provider_spec.value.as_ref(), image)
            && matches!(verdict(m, &boots.nodes, now, join_limit), Verdict::Proves)
    });
    let why = match proven_elsewhere {
        None if no_node.len() > 1 => {
            let why = format!(
                "no Node joined within {within} on {} Machines ({names}), and no Machine of this \
                 image has a Ready Node anywhere in the cluster: the usual sign of an Ignition \
                 failure",
                no_node.len()
            );
            return settled(BootState::Failed, first, Some(&why), now);
        }
        None => format!(
            "no Node joined within {within} on Machine {names}, which alone is no verdict (a \
             stalled CSR approver, an unreachable machine-config server or a slow first pull \
             look the same): the image fails when a second Machine does the same"
        ),
        Some(proven) => format!(
            "no Node joined within {within} on {names}, but Machine {} of this image has a Ready \
             Node: not the image's fault",
            proven.metadata.name.as_deref().unwrap_or_default()
        ),
    };
    BootEvidence {
        reason: Some(why),
        ..BootEvidence::unproven(next)
    }
}

/// A few Machines' names, and how many more.
fn named(machines: &[&Machine]) -> String {
    const NAMED: usize = 3;
    let mut names: Vec<&str> = (machines.iter().take(NAMED))
        .map(|m| m.metadata.name.as_deref().unwrap_or_default())
        .collect();
    let more = format!("{} more", machines.len().saturating_sub(NAMED));
    if machines.len() > NAMED {
        names.push(&more);
    }
    names.join(", ")
}

/// Whether the MachineSet `owner` made `machine`, as its controller does
/// (openshift/machine-api-operator, pkg/controller/machineset/controller.go, `createMachine`):
/// - the Machine names it as its controller (`metav1.NewControllerRef(machineSet, ...)`, which
///   sets `controller: true`); a reference without it is anyone's to write, on any Machine;
/// - the MachineSet's selector matches the Machine's labels (copied from the template; the
///   controller adopts only Machines it selects, `shouldExcludeMachine`);
/// - every value the template's provider spec sets is the Machine's (`Spec:
///   machineSet.Spec.Template.Spec`). The Machine may hold more: the Machine API's defaulting
///   webhook fills in what is left empty (pkg/webhooks/machine_webhook.go, `defaultAWS` and
///   its siblings), as it did to the template.
///
/// Anyone who may create Machines can write the first two; a Machine that passes all three
/// asked the cloud for what the MachineSet would have asked, so its failure is the image's.
fn created_by<'a>(
    machine: &Machine,
    owner: &ObjectMeta,
    selector: &Selector,
    template: impl FnOnce() -> Option<&'a Leaves>,
) -> bool {
    let meta = &machine.metadata;
    let owners = meta.owner_references.as_deref().unwrap_or_default();
    let controlled = owners.iter().any(|o| {
        o.controller == Some(true)
            && o.kind == MachineKind::MachineSet.kind()
            && o.api_version == MachineKind::MachineSet.api_version()
            && Some(&o.name) == owner.name.as_ref()
            && owner.uid.as_ref().is_none_or(|uid| *uid == o.uid)
    });
    controlled
        && meta.labels.as_ref().is_some_and(|l| selector.matches(l))
        && template().is_some_and(|t| t.within(&machine.spec.provider_spec.leaves()))
}

/// Whether a provider spec (a MachineSet's or a Machine's) holds `image` where its platform
/// keeps it.
pub fn holds_image(provider_spec: Option<&Value>, image: &Value) -> bool {
    provider_spec
        .and_then(|spec| image_locations(spec, image))
        .is_some_and(|places| places.iter().any(|(_, held)| held == image))
}

fn verdict(
    machine: &Machine,
    nodes: &BTreeMap<String, bool>,
    now: Timestamp,
    join_limit: SignedDuration,
) -> Verdict {
    let Some(status) = &machine.status else {
        return Verdict::Open(None);
    };
    let node = (status.node_ref.as_ref()).and_then(|n| n.name.as_ref());
    if node.and_then(|n| nodes.get(n)) == Some(&true) {
        return Verdict::Proves;
    }
    match status.phase.as_deref() {
        Some("Failed") => {
            let (reason, message) = (
                status.error_reason.as_deref().unwrap_or_default(),
                status.error_message.as_deref().unwrap_or_default(),
            );
            match image_failure(reason, message) {
                Some(cause) => {
                    Verdict::Fails(format!("{cause} ({}: {})", quoted(reason), quoted(message)))
                }
                None => Verdict::Open(None),
            }
        }
        // The instance exists (the Machine API sets `Provisioned` once the cloud reports it,
        // and `Running` once the node link controller set the nodeRef): a Node that never
        // joins means the instance never got as far as the kubelet.
        _ if node.is_none() && instance_exists(machine) => {
            let Some(created) = machine.metadata.creation_timestamp.as_ref() else {
                return Verdict::Open(None);
            };
            let deadline = created.0 + join_limit;
            // Both times of a deleted Machine are the API server's.
            if let Some(deleted) = &machine.metadata.deletion_timestamp {
                return if deleted.0 >= deadline {
                    Verdict::NoNode
                } else {
                    Verdict::Open(None)
                };
            }
            // `now` is the controller's clock and the creation time the API server's: a
            // controller clock ahead by minutes failed a good image before its Node could
            // join. The limit allows for the skew the hot-loop guard allows
            // ([`CLOCK_SKEW`]): a verdict may come that much late, never early.
            if now - CLOCK_SKEW >= deadline {
                Verdict::NoNode
            } else {
                Verdict::Open(Some(deadline + CLOCK_SKEW))
            }
        }
        _ => Verdict::Open(None),
    }
}

/// The join limit that applies to a Machine, and the MachineHealthCheck it comes from.
struct JoinLimit<'a> {
    within: SignedDuration,
    health_check: Option<&'a str>,
}

impl JoinLimit<'_> {
    fn describe(&self) -> String {
        let within = super::friendly_duration(self.within);
        match self.health_check {
            None => within,
            Some(name) => format!(
                "{within} (the nodeStartupTimeout of MachineHealthCheck {name}, which deletes \
                 such Machines)"
            ),
        }
    }
}

/// `--node-join-timeout`, or the `nodeStartupTimeout` of a MachineHealthCheck that selects the
/// Machine when that is shorter: such a check deletes a Machine that has no Node after it
/// (default 10 minutes, `0` never), counted from the Machine's `status.lastUpdated`, which is
/// no earlier than its creation; with external remediation (`remediationTemplate`) or paused,
/// it deletes nothing (openshift/machine-api-operator,
/// pkg/controller/machinehealthcheck/machinehealthcheck_controller.go, `Reconcile`,
/// `needsRemediation`, `internalRemediation`). A Machine it deletes after that long without a
/// Node is one whose Node never joined.
fn join_limit_of<'a>(
    machine: &Machine,
    checks: &'a [Arc<MachineHealthCheck>],
    limit: SignedDuration,
) -> JoinLimit<'a> {
    let labels = machine.metadata.labels.clone().unwrap_or_default();
    let shorter = (checks.iter())
        .filter(|c| c.metadata.namespace == machine.metadata.namespace)
        .filter(|c| c.spec.remediation_template.is_none())
        .filter(|c| {
            let annotations = c.metadata.annotations.as_ref();
            !annotations.is_some_and(|a| a.contains_key(CLUSTER_API_PAUSED_ANNOTATION))
        })
        .filter(|c| {
            let selector = c.spec.selector.clone().unwrap_or_default();
            Selector::try_from(selector).is_ok_and(|s| s.matches(&labels))
        })
        .filter_map(|c| Some((node_startup_timeout(c)?, c.metadata.name.as_deref()?)))
        .filter(|(within, _)| *within < limit)
        .min();
    let (within, health_check) =
        shorter.map_or((limit, None), |(within, name)| (within, Some(name)));
    JoinLimit {
        within,
        health_check,
    }
}

/// A MachineHealthCheck's `nodeStartupTimeout`; `None` when it never deletes a Machine for
/// want of a Node, or the duration cannot be read.
fn node_startup_timeout(check: &MachineHealthCheck) -> Option<SignedDuration> {
    let Some(text) = check.spec.node_startup_timeout.as_deref() else {
        return Some(SignedDuration::from_mins(10));
    };
    let within = match text.trim() {
        "0" => SignedDuration::ZERO,
        text => text.parse::<SignedDuration>().ok()?,
    };
    within.is_positive().then_some(within)
}

/// Whether a Machine's instance was created: the machine controller counts a Machine with a
/// `providerID` as provisioned (openshift/machine-api-operator,
/// pkg/controller/machine/controller.go, `machineIsProvisioned`), which stays while it is
/// `Deleting`.
fn instance_exists(machine: &Machine) -> bool {
    let phase = machine.status.as_ref().and_then(|s| s.phase.as_deref());
    phase == Some("Provisioned") || machine.spec.provider_id.is_some()
}

/// How much of a Machine's `errorMessage` is kept as it is read: enough for every provider's
/// words that [`image_failure`] looks for, which come first.
pub const ERROR_MESSAGE_KEPT: usize = 4_096;

/// How much of it a verdict quotes (as a condition quotes an object's message): the verdict is
/// kept in memory, in the history and in the hold annotation, and a message of 140 kB made the
/// revert patch too large for the API server.
const ERROR_MESSAGE_QUOTED: usize = 1_000;

/// A Machine's words as a verdict keeps them: escaped (they reach the text log, Events and
/// annotations) and bounded.
fn quoted(text: &str) -> String {
    bounded(&printable(text), ERROR_MESSAGE_QUOTED)
}

/// Why a `Failed` Machine's error points at its boot image, or `None` when it does not (quota,
/// capacity, instance type, credentials, networking: those say nothing of the image).
///
/// Only a `Failed` Machine carries `errorReason` and `errorMessage`: the Machine API's machine
/// controller clears both on every other status write, and fails a Machine when its provider's
/// create returns an `InvalidConfiguration` error (openshift/machine-api-operator,
/// pkg/controller/machine/controller.go, `updateStatus` and `isInvalidMachineConfigurationError`).
/// Every rule below therefore asks for that reason, and for pieces of message the providers
/// write only for a missing or unusable image. A permission or throttling error that happens to
/// name an image is not the image's fault.
pub fn image_failure(reason: &str, message: &str) -> Option<&'static str> {
    if reason != "InvalidConfiguration" || NOT_THE_IMAGE.iter().any(|p| message.contains(p)) {
        return None;
    }
    IMAGE_FAILURES
        .iter()
        .find(|f| f.all.iter().all(|piece| message.contains(piece)))
        .map(|f| f.meaning)
}

/// Errors of access, not of the image, whatever else their message says.
const NOT_THE_IMAGE: &[&str] = &[
    "UnauthorizedOperation",
    "AuthFailure",
    "not authorized",
    "AuthorizationFailed",
    "permission",
    "forbidden",
    "RequestLimitExceeded",
    "credentials",
    "failure sending request",
];

/// An error of a Machine API provider that names the boot image: every piece in `all` is in
/// its message.
struct ImageFailure {
    all: &'static [&'static str],
    meaning: &'static str,
}

const IMAGE_FAILURES: &[ImageFailure] = &[
    // AWS (openshift/machine-api-provider-aws, pkg/actuators/machine/instances.go): the AMI is
    // described before launch whenever block devices are set, as the installer always sets
    // them (`getBlockDeviceMappings`: "error describing AMI: InvalidAMIID.NotFound: ...").
    ImageFailure {
        all: &["InvalidAMIID."],
        meaning: "EC2 does not know the AMI",
    },
    ImageFailure {
        all: &["no image for given AMI not found"],
        meaning: "EC2 does not know the AMI",
    },
    ImageFailure {
        all: &["error getting AMI: "],
        meaning: "the AMI cannot be found",
    },
    // A launch refused with a 4xx keeps only EC2's sentence, not its code (`launchInstance`).
    ImageFailure {
        all: &["error launching instance: ", "The image id '"],
        meaning: "EC2 refused the AMI",
    },
    ImageFailure {
        all: &["error launching instance: ", "Invalid id: \"ami-"],
        meaning: "EC2 refused the AMI",
    },
    // GCP (openshift/machine-api-provider-gcp, pkg/cloud/gcp/actuators/machine/reconciler.go,
    // `create`): an insert refused with a 4xx fails the Machine with Google's error. With the
    // installer's defaults the image is fetched before the insert and a 404 there is retried,
    // so the Machine stays Provisioning and is not counted (docs/how-it-decides.md).
    ImageFailure {
        all: &["googleapi: Error 4", "/global/images/", "was not found"],
        meaning: "GCP does not know the image",
    },
    ImageFailure {
        all: &["initializeParams.sourceImage"],
        meaning: "GCP refused the image",
    },
    ImageFailure {
        all: &["boot disk must specify an image"],
        meaning: "the boot disk names no image",
    },
    // Azure (openshift/machine-api-provider-azure, pkg/cloud/azure/actuators/machine/
    // actuator.go, `Create`): a 4xx other than 401 fails the Machine with the whole response,
    // whose "ERROR CODE:" line names Azure's code.
    ImageFailure {
        all: &["ERROR CODE: ImageNotFound"],
        meaning: "Azure does not know the image",
    },
    ImageFailure {
        all: &["ERROR CODE: PlatformImageNotFound"],
        meaning: "the marketplace image is not available",
    },
    ImageFailure {
        all: &["ERROR CODE: GalleryImageNotFound"],
        meaning: "the gallery image is not available",
    },
    ImageFailure {
        all: &[
            "ERROR CODE: InvalidParameter",
            "\"target\": \"imageReference\"",
        ],
        meaning: "Azure refused the image reference",
    },
    // vSphere (openshift/machine-api-operator, pkg/controller/vsphere/reconciler.go, `clone`
    // and `handleVSphereError`): the template is the boot image.
    ImageFailure {
        all: &["template not found, specify valid value"],
        meaning: "vCenter has no such template",
    },
    // A template name vCenter finds more than once cannot be cloned either (the same `clone`:
    // `handleVSphereError` turns govmomi's `MultipleFoundError` into this message).
    ImageFailure {
        all: &["multiple templates found, specify one in config"],
        meaning: "vCenter has more than one template of that name",
    },
    ImageFailure {
        all: &["Hardware lower than", "machine template"],
        meaning: "the template's virtual hardware is too old",
    },
];
