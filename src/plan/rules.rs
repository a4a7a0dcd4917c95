//! The per-object rules, in order (docs/how-it-decides.md, "Gates and rules"): the first that
//! applies decides.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use json_patch::Patch;
use jsonptr::Pointer;
use serde_json::Value;

use super::cluster_api_templates::{self, TemplateView, Unjudgeable};
use super::decision::{Action, Decision, TemplateCopy, Values, Warning, current_message};
use super::gates::Ready;
use super::history::{self, HistoryEntry};
use super::patch::{Guarded, annotation, remove_annotation, under, under_known};
use super::selection::{OPT_IN_COMMAND, Origin, clipped};
use super::stub::StubState;
use super::{Planner, friendly_duration, stub};
use crate::api::{LabelSelector, MachineTemplate, ObjectMeta, ProviderSpec};
use crate::arch::Arch;
use crate::facts::Lookup;
use crate::golden_stream::{DEFAULT_OS_STREAM, GoldenStream};
use crate::machine_kind::{Authority, MachineKind, MachineObject};
use crate::names::{
    AUTOSCALER_LABELS_ANNOTATION, BOOT_FAILURE_HOLD_ANNOTATION, HOT_LOOP_ANNOTATION,
    LEGACY_OPT_OUT_ANNOTATION, OPT_IN_ANNOTATION, OPT_OUT_ANNOTATION, OPT_OUT_VALUE, OS_ID_LABEL,
    OS_STREAM_LABEL,
};
use crate::platform::{ImageOutcome, Input, Platform, PlatformRule, RuleContext, display_image};
use crate::reason::Reason;

/// The parts of a machine resource the rules look at.
pub(super) struct Subject<'a> {
    pub kind: MachineKind,
    pub meta: &'a ObjectMeta,
    pub template: Option<&'a MachineTemplate>,
    pub selector: Option<&'a LabelSelector>,
    authority: Authority,
    /// Of a Cluster API MachineSet: its infrastructure template, or why it cannot be judged.
    infrastructure: Option<&'a Result<TemplateView<'a>, Unjudgeable>>,
}

impl<'a> Subject<'a> {
    pub fn of(object: &'a dyn MachineObject) -> Self {
        Subject {
            kind: object.kind(),
            meta: object.meta(),
            template: object.machine_template(),
            selector: object.selector(),
            authority: object.authority(),
            infrastructure: None,
        }
    }

    /// A Cluster API MachineSet, with the view of its template the rules judge.
    pub fn with_template(
        object: &'a dyn MachineObject,
        view: &'a Result<TemplateView<'a>, Unjudgeable>,
    ) -> Self {
        Subject {
            template: view.as_ref().ok().map(|v| &v.template),
            infrastructure: Some(view),
            ..Subject::of(object)
        }
    }

    pub fn namespace(&self) -> &'a str {
        self.meta.namespace.as_deref().unwrap_or_default()
    }

    pub fn decision(&self, action: Action, reason: Reason, message: String) -> Decision {
        let name = self.meta.name.as_deref().unwrap_or_default();
        Decision::new(self.kind, self.namespace(), name, action, reason, message)
    }

    pub fn annotation(&self, key: &str) -> Option<&'a str> {
        self.meta.annotations.as_ref()?.get(key).map(String::as_str)
    }

    fn label(&self, key: &str) -> Option<&'a str> {
        self.meta.labels.as_ref()?.get(key).map(String::as_str)
    }

    fn template_labels(&self) -> Option<&'a BTreeMap<String, String>> {
        self.template?.metadata.as_ref()?.labels.as_ref()
    }

    pub fn provider_spec(&self) -> Option<&'a ProviderSpec> {
        Some(&self.template?.spec.provider_spec)
    }
}

/// Why an object nobody opted in is left alone, and how to opt it in.
fn not_opted_in_message(kind: MachineKind, ready: &Ready) -> String {
    let kinds = kind.selected_as().plural();
    let release = match ready.release {
        Some((major, minor)) => format!("{major}.{minor}"),
        None => "an unknown release".into(),
    };
    format!(
        "not opted in: on {release} the Machine Config Operator updates no {kinds} on {} unless \
         asked to, and neither does this controller; opt in with the annotation \
         {OPT_IN_ANNOTATION} on MachineConfiguration cluster naming {kinds} (the shape of \
         spec.managedBootImages), e.g. for every MachineSet: {OPT_IN_COMMAND}",
        ready.platform.name(),
    )
}

/// A platform rule's verdict on one boot image, and what it was judged against.
pub(super) struct Evaluated<'a> {
    pub outcome: ImageOutcome,
    /// What the outcome rests on that a cloud answers.
    asks: Option<Lookup>,
    rule: &'static dyn PlatformRule,
    ctx: RuleContext<'a>,
    provider_spec: &'a Value,
}

/// The boot image part of a decision: the compared values and the operations that change them.
struct ImageChange {
    values: Values<Value>,
    /// The patch so far: `test`s of the inputs that chose the image, then the image's changes.
    ops: Patch,
    /// The template a Cluster API MachineSet moves to, created before the patch is sent.
    template: Option<TemplateCopy>,
}

impl Planner<'_> {
    /// The decision of the rules, before its resourceVersion guard ([`Planner::decide_object`]).
    pub(super) fn decide_readable(&self, subject: &Subject<'_>, ready: &Ready) -> Decision {
        if let Some(decided) = self.screen(subject, ready) {
            return decided;
        }
        let evaluated = match self.evaluate_image(subject, ready) {
            Ok(evaluated) => evaluated,
            Err(decided) => return *decided,
        };
        // Rules 6 and on, once the platform rule has judged the image. Whatever the decision, it
        // names what it waits for (or read) from a cloud.
        let Evaluated {
            outcome,
            asks,
            rule,
            ctx,
            provider_spec,
        } = evaluated;
        let (stream, arch) = (ctx.stream, ctx.arch);
        let release = stream.release(arch, rule.stream_key());
        let mut patch = Patch::default();
        if matches!(outcome, ImageOutcome::Update { .. }) {
            // The guards go first.
            input_guards(subject, rule.decision_inputs(provider_spec), &mut patch);
        }
        // The RHCOS release each image boots, where the image itself says it.
        let release_of = |image: Option<&Value>| {
            image.and_then(|image| rule.rhcos_release(provider_spec, image, &ctx))
        };
        let rhcos_release = Values {
            current: release_of(outcome.current()),
            target: release_of(outcome.target()),
        };
        let image = match image_change(subject, outcome, provider_spec, release, patch) {
            Ok(image) => image,
            Err(mut decided) => {
                decided.rhcos_release = rhcos_release;
                decided.asks = asks;
                return *decided;
            }
        };
        if let Some(mut mismatch) = self.arch_mismatch(subject, ready, arch, &image) {
            mismatch.asks = asks;
            return mismatch;
        }
        let mut decided = self.stub_secret(subject, provider_spec, image);
        decided.rhcos_release = rhcos_release;
        decided.asks = asks;
        if decided.action == Action::UpToDate && !decided.patch.is_empty() {
            decided.message = change_message(&decided, stream, release);
            self.update(subject, ready, stream, &mut decided);
        }
        decided
    }

    /// The platform rule's verdict on the boot image alone, with what it was judged against;
    /// `Err` with the decision when there is nothing to judge (unsupported platform, unknown
    /// architecture, no provider spec).
    pub(super) fn evaluate_image<'s>(
        &'s self,
        subject: &Subject<'s>,
        ready: &'s Ready,
    ) -> Result<Evaluated<'s>, Box<Decision>> {
        // Before the architecture and providerSpec checks: on a platform we never write to, their
        // errors would only raise a false Degraded (e.g. every MachineSet of a multi-arch
        // bare-metal cluster without the autoscaler annotation).
        let Some(rule) = ready.platform.rule() else {
            return Err(Box::new(subject.decision(
                Action::Skip,
                Reason::PlatformNotSupported,
                ready.platform.unsupported_message(),
            )));
        };
        // The MCO updates no ControlPlaneMachineSet on vSphere (`cpmsSupported` of
        // `CheckBootImagePlatform`, pkg/controller/common/featuregates.go at 7ff337a): how the
        // control-plane machine set operator treats a new template there is unknown to us.
        if subject.kind == MachineKind::ControlPlaneMachineSet
            && !ready.platform.control_plane_boot_images_supported()
        {
            return Err(Box::new(subject.decision(
                Action::Skip,
                Reason::PlatformNotSupported,
                format!(
                    "control-plane boot images are not updated on {}",
                    ready.platform.name()
                ),
            )));
        }
        if let Some(refused) = cluster_api_refusal(subject, ready) {
            return Err(Box::new(refused));
        }
        let stream = self.os_stream(subject, ready)?;
        let arch = self.arch(subject, ready)?;
        // Only the entries that objects use are judged (docs/how-it-decides.md, "Gates and rules").
        if let Some(why) = stream.invalid_entry(arch) {
            let message = format!(
                "the golden stream's {arch} entry is malformed ({why}); its boot image is left \
                 as is until the Machine Config Operator publishes it again"
            );
            let failed = subject.decision(Action::Error, Reason::StreamEntryInvalid, message);
            return Err(Box::new(failed));
        }
        let provider_spec = (subject.provider_spec())
            .and_then(|spec| spec.value.as_ref())
            .filter(|value| value.is_object());
        let Some(provider_spec) = provider_spec else {
            return Err(Box::new(subject.decision(
                Action::Error,
                Reason::InvalidProviderSpec,
                "the machine template has no providerSpec.value object".into(),
            )));
        };
        let infrastructure = self.snapshot.infrastructure.as_ref();
        let ctx = RuleContext {
            stream,
            arch,
            known_images: &ready.known_images,
            infrastructure_name: infrastructure
                .and_then(|i| i.status.as_ref())
                .and_then(|s| s.infrastructure_name.as_deref()),
            ec2: &self.snapshot.ec2,
            platform_spec: infrastructure.and_then(|i| i.spec.extra.get("platformSpec")),
            vcenter: &self.snapshot.vcenter,
        };
        let (outcome, asks) = rule.evaluate(provider_spec, &ctx);
        Ok(Evaluated {
            outcome,
            asks,
            rule,
            ctx,
            provider_spec,
        })
    }

    /// Rules 1 to 4: the objects we leave alone whatever their images.
    fn screen(&self, subject: &Subject<'_>, ready: &Ready) -> Option<Decision> {
        if let Some(decided) = opted_out(subject, ready) {
            return Some(decided);
        }
        let (selection, origin) = &ready.selections[&subject.kind];
        match selection.selects(subject.meta.labels.as_ref()) {
            Err(message) => {
                let message = message.to_string();
                return Some(subject.decision(Action::Error, Reason::InvalidSelector, message));
            }
            // Where opting in would change nothing (no platform rule), it is not offered.
            Ok(false) if *origin == Origin::Default && ready.platform.rule().is_some() => {
                let message = not_opted_in_message(subject.kind, ready);
                return Some(subject.decision(Action::Skip, Reason::NotOptedIn, message));
            }
            Ok(false) => {
                let message = format!(
                    "not selected by {} ({} mode {})",
                    origin.describe(),
                    subject.kind.plural(),
                    selection.describe()
                );
                return Some(subject.decision(Action::Skip, Reason::NotSelected, message));
            }
            Ok(true) => {}
        }
        if subject.kind == MachineKind::ClusterApiMachineDeployment
            && !self.options.update_machine_deployments
        {
            let message = "a new infrastructure template replaces every machine of a \
                           MachineDeployment; its boot image is updated only with \
                           --update-machine-deployments"
                .to_string();
            let reason = Reason::MachineDeploymentNotOptedIn;
            return Some(subject.decision(Action::Skip, reason, message));
        }
        if let Authority::Elsewhere(why) = &subject.authority {
            let message = why.clone();
            return Some(subject.decision(Action::Skip, Reason::AuthoritativeElsewhere, message));
        }
        // Any owner reference stops us, as it stops the MCO (`syncMAPIMachineSet`,
        // pkg/controller/bootimage/ms_helpers.go). Hive's MachineSets carry none: its MachinePool
        // lives in the hub cluster and marks what it made in the spoke with labels
        // (`hive.openshift.io/machine-pool`, `hive.openshift.io/managed`; openshift/hive
        // pkg/controller/machinepool/machinepool_controller.go, `generateMachineSets`), and it
        // leaves a providerSpec that drifted from its pool as it is unless the pool is annotated
        // `hive.openshift.io/override-machinepool-platform` (`syncMachineSets`). So they are
        // updated, as upstream updates them.
        let owners = subject.meta.owner_references.as_deref().unwrap_or_default();
        if let Some(owner) =
            (owners.iter()).find(|owner| !subject.kind.is_cluster_api() || !is_cluster(owner))
        {
            let message = format!(
                "owned by {} {}; its owner would revert our changes",
                owner.kind, owner.name
            );
            return Some(subject.decision(Action::Skip, Reason::Owned, message));
        }
        screen_windows(subject)
    }

    /// Rule 4, OS streams: the stream the machines boot, named by the OS stream label (the
    /// Machine Config Operator reads it and updates `rhel-9`, the default, only; here any stream
    /// the golden ConfigMap carries under `streams` is updated from it too).
    fn os_stream<'r>(
        &self,
        subject: &Subject<'_>,
        ready: &'r Ready,
    ) -> Result<&'r GoldenStream, Box<Decision>> {
        let label = (subject.label(OS_STREAM_LABEL)).or_else(|| {
            let template = subject.template_labels()?;
            template.get(OS_STREAM_LABEL).map(String::as_str)
        });
        if let Some(stream) = ready.golden.os_stream(label) {
            return Ok(stream);
        }
        if let Some(why) = label.and_then(|l| ready.golden.invalid_streams.get(l)) {
            let message = format!(
                "the golden ConfigMap's OS stream {:?} is malformed ({why}); its boot image is \
                 left as is until the Machine Config Operator publishes it again",
                clipped(label.unwrap_or_default())
            );
            let failed = subject.decision(Action::Error, Reason::StreamEntryInvalid, message);
            return Err(Box::new(failed));
        }
        // A ConfigMap may carry thousands of keys, and this message is repeated for every
        // MachineSet of the stream: name a few, count the rest.
        let others = &ready.golden.other_streams;
        let mut carried: String = (others.keys().take(OS_STREAMS_NAMED))
            .map(|k| format!(", {:?}", clipped(k)))
            .collect();
        if others.len() > OS_STREAMS_NAMED {
            carried += &format!(" and {} more", others.len() - OS_STREAMS_NAMED);
        }
        let message = format!(
            "uses OS stream {:?}, which the golden ConfigMap does not carry (it has the default \
             {DEFAULT_OS_STREAM:?}{carried}); its boot image is left as is",
            clipped(label.unwrap_or_default())
        );
        let skipped = subject.decision(Action::Skip, Reason::OSStreamNotPublished, message);
        Err(Box::new(skipped))
    }

    /// Rule 5: the architecture whose image applies: the one a MachineSet declares in the
    /// autoscaler's labels annotation (as the Machine Config Operator reads it:
    /// `getArchFromMachineSet`, pkg/controller/bootimage/ms_helpers.go), else the control
    /// plane's, as the cluster's Nodes report it. The MCO uses its own pod's architecture there;
    /// Nodes say it without depending on where this controller runs, and there is never a
    /// built-in default: an arm64 control plane must not get an x86_64 image.
    fn arch(&self, subject: &Subject<'_>, ready: &Ready) -> Result<Arch, Box<Decision>> {
        let refuse = |action, reason, message| Box::new(subject.decision(action, reason, message));
        let control_plane = || {
            ready.control_plane_arch.clone().map_err(|why| {
                let message = format!("the control-plane architecture is unknown: {why}");
                refuse(Action::Error, Reason::ArchitectureUndetermined, message)
            })
        };
        if subject.kind == MachineKind::ControlPlaneMachineSet {
            return control_plane();
        }
        let Some(labels) = subject.annotation(AUTOSCALER_LABELS_ANNOTATION) else {
            if ready.multi_arch {
                // The Machine Config Operator skips these too (`syncMAPIMachineSet` turns its
                // "no architecture annotation found" error into a skip).
                let message = format!(
                    "the cluster is multi-architecture and the MachineSet does not say its \
                     architecture: add kubernetes.io/arch=<arch> to its \
                     {AUTOSCALER_LABELS_ANNOTATION} annotation to have it managed"
                );
                let refused = refuse(Action::Skip, Reason::ArchitectureNotDeclared, message);
                return Err(refused);
            }
            return control_plane();
        };
        let arch = labels
            .split(',')
            .filter_map(|pair| pair.trim().split_once('='))
            .find(|(key, _)| key.trim() == "kubernetes.io/arch")
            .map(|(_, value)| value.trim());
        let Some(arch) = arch else {
            let message = format!(
                "annotation {AUTOSCALER_LABELS_ANNOTATION} has no kubernetes.io/arch entry"
            );
            let refused = refuse(Action::Error, Reason::ArchitectureUndetermined, message);
            return Err(refused);
        };
        arch.parse().map_err(|e: crate::arch::UnknownArch| {
            let message = format!("annotation {AUTOSCALER_LABELS_ANNOTATION}: {e}");
            refuse(Action::Error, Reason::UnknownArchitecture, message)
        })
    }

    /// Rule 5, cross-checked: an image the streams list under another architecture than the
    /// one decided means the decision or the MachineSet is wrong; patching would give its
    /// machines an image they cannot boot.
    fn arch_mismatch(
        &self,
        subject: &Subject<'_>,
        ready: &Ready,
        arch: Arch,
        image: &ImageChange,
    ) -> Option<Decision> {
        image.values.target.as_ref()?;
        let current = display_image(image.values.current.as_ref());
        let listed = ready
            .golden
            .arch_of(&current)
            .filter(|listed| *listed != arch)?;
        let message = format!(
            "the current image {current} is a {listed} image of the golden streams, but this \
             {} was decided to be {arch}; nothing is patched until they agree (check the \
             {AUTOSCALER_LABELS_ANNOTATION} annotation, or --control-plane-arch)",
            subject.kind
        );
        let mut decided = subject.decision(Action::Error, Reason::ArchitectureMismatch, message);
        decided.boot_image.current = image.values.current.clone();
        Some(decided)
    }

    /// Rule 7: the stub secret. Its name never changes; an image moves only with a stub the
    /// image can boot from: spec 3 already, or a spec-2 one upgraded in place first. Checked
    /// only when the image moves, as the MCO checks it only when a patch is required
    /// (platform_helpers.go, each `reconcile*ProviderSpec`). Returns the decision so far:
    /// UpToDate with the operations of every change (none when nothing changes), a Skip or an
    /// Error.
    fn stub_secret(
        &self,
        subject: &Subject<'_>,
        provider_spec: &Value,
        image: ImageChange,
    ) -> Decision {
        let named = stub::name_field(provider_spec);
        if named.is_some_and(|name| !name.is_string()) {
            let mut decided = subject.decision(
                Action::Error,
                Reason::InvalidProviderSpec,
                "providerSpec userDataSecret.name is not a string; set it to the name of the \
                 stub secret"
                    .into(),
            );
            decided.boot_image = image.values;
            return decided;
        }
        let current = named.and_then(Value::as_str);
        let mut decided = subject.decision(Action::UpToDate, Reason::UpToDate, String::new());
        decided.user_data_secret = Values {
            current: current.map(str::to_string),
            target: None,
        };
        decided.boot_image = image.values;
        if let Some(name) = current.filter(|_| decided.boot_image.target.is_some()) {
            // A stub secret the snapshot does not hold is missing.
            let key = (subject.namespace().to_string(), name.to_string());
            let checked = (self.stub_checks.get(&key).cloned())
                .unwrap_or_else(|| stub::check(&key.0, name, None, &self.now_text));
            match checked {
                Ok(StubState::Spec3) => {}
                Ok(StubState::Upgrade(upgrade)) if subject.kind.upgrades_stub_secret() => {
                    decided.stub_upgrade = Some(upgrade);
                }
                Ok(StubState::Upgrade(upgrade)) => {
                    decided.action = Action::Skip;
                    decided.reason = Reason::StubSecretIncompatible;
                    decided.message = format!(
                        "bootstrap secret {}/{name} is Ignition spec {} and new boot images read \
                         spec 3 only; this controller does not rewrite it, since the cluster CAPI \
                         operator copies it from {}/worker-user-data: once that stub is spec 3 \
                         (upgraded when a Machine API MachineSet that uses it is updated, or by \
                         hand), the copy follows and the update goes ahead",
                        subject.namespace(),
                        upgrade.from_version,
                        crate::names::MACHINE_API_NAMESPACE,
                    );
                    return decided;
                }
                Err((reason, message)) => {
                    decided.action = Action::Skip;
                    decided.reason = reason;
                    decided.message = message;
                    return decided;
                }
            }
        }
        decided.patch = image.ops;
        decided.infrastructure_template = image.template.map(Box::new);
        if let Some(name) = current.filter(|_| !decided.patch.is_empty())
            && !subject.kind.is_cluster_api()
        {
            // The stub was checked (and maybe upgraded) by the name read: another name set
            // meanwhile would go unchecked with the new image.
            let path = under_known(subject.kind.provider_spec_path(), stub::NAME_POINTER);
            decided.patch.test(path, name.to_string());
        }
        if decided.patch.is_empty() {
            decided.message = current_message(decided.boot_image.current.as_ref());
        }
        decided
    }

    /// Rules 8 and 9: a change to make, unless someone keeps reverting it or a gate holds
    /// writes. An Update carries the history and hot-loop bookkeeping in the same patch.
    fn update(
        &self,
        subject: &Subject<'_>,
        ready: &Ready,
        stream: &GoldenStream,
        decided: &mut Decision,
    ) {
        decided.reason = Reason::BootImageOutdated;
        if self.held_after_boot_failure(subject, decided) {
            decided.withdraw_writes();
            return;
        }
        let (now, window) = (self.options.now, self.options.hot_loop_window);
        let remembered =
            (subject.meta.uid.as_ref()).and_then(|uid| self.options.remembered_patches.get(uid));
        let recent = history::recent_patches(subject.meta, remembered, now, window);
        if recent >= self.options.hot_loop_threshold {
            decided.action = Action::Error;
            decided.reason = Reason::HotLoop;
            decided.message = format!(
                "patched {recent} times within {} but something keeps reverting its values or \
                 changing the golden images ({}); stopped to avoid fighting. Find the other \
                 writer, then opt this {} out and back in (annotation {OPT_OUT_ANNOTATION}) to \
                 retry",
                friendly_duration(window),
                decided.message,
                subject.kind,
            );
            decided.withdraw_writes();
            return;
        }
        if let Some(hold) = &ready.hold {
            decided.action = Action::Skip;
            decided.reason = hold.reason;
            decided.message = format!("would update: {}; held: {}", decided.message, hold.message);
            decided.withdraw_writes();
            return;
        }
        let mut recorded = HistoryEntry {
            time: self.now_text.clone(),
            release: ready.golden.release_version.clone(),
            stream: stream.stream.clone(),
            boot_image: decided.boot_image.change(),
            user_data_secret: decided.user_data_secret.change(),
            infrastructure_template: (decided.infrastructure_template.as_ref()).map(|t| {
                history::Change {
                    from: t.from.clone(),
                    to: t.to.clone(),
                }
            }),
            ..Default::default()
        };
        let patch = &mut decided.patch;
        history::record_ops(patch, subject.meta, &recorded, now, window);
        // A hold on an earlier golden image ends with the move to a newer one.
        remove_annotation(patch, subject.meta, BOOT_FAILURE_HOLD_ANNOTATION);
        if let Some(copy) = &decided.infrastructure_template {
            cluster_api_templates::record_copy(&mut decided.patch, subject.meta, &copy.to);
        }
        // `boot_image` holds the image change: `Decision::apply` takes it from there.
        recorded.boot_image = None;
        decided.recorded = Some(Box::new(recorded));
        decided.action = Action::Update;
    }
}

/// OS streams an `OSStreamNotPublished` message names at most.
const OS_STREAMS_NAMED: usize = 5;

/// Why a Cluster API MachineSet's template is not judged: off AWS, or a template that cannot be.
fn cluster_api_refusal(subject: &Subject<'_>, ready: &Ready) -> Option<Decision> {
    let infrastructure = subject.infrastructure?;
    if ready.platform != Platform::Aws {
        return Some(subject.decision(
            Action::Skip,
            Reason::PlatformNotSupported,
            format!(
                "Cluster API MachineSets are updated on AWS only, not on {}",
                ready.platform.name()
            ),
        ));
    }
    let refused = infrastructure.as_ref().err()?;
    Some(subject.decision(refused.action, refused.reason, refused.message.clone()))
}

/// Rule 1: an object opted out by annotation.
fn opted_out(subject: &Subject<'_>, ready: &Ready) -> Option<Decision> {
    // The deprecated key is named when both are set, so that its Warning is not lost.
    let key = [LEGACY_OPT_OUT_ANNOTATION, OPT_OUT_ANNOTATION]
        .into_iter()
        .find(|key| subject.annotation(key) == Some(OPT_OUT_VALUE))?;
    let legacy = key == LEGACY_OPT_OUT_ANNOTATION;
    let mut decided = subject.decision(
        Action::Skip,
        Reason::OptedOut,
        format!("opted out by annotation {key}={OPT_OUT_VALUE}"),
    );
    if legacy {
        decided.message = format!(
            "{}; that key is deprecated and will be ignored in the next release: \
             annotate {OPT_OUT_ANNOTATION}={OPT_OUT_VALUE} instead",
            decided.message
        );
        decided.warning = Some(Warning {
            reason: Reason::DeprecatedAnnotation,
            message: decided.message.clone(),
        });
    }
    // Opting out and back in is the documented way to reset the hot-loop guard. Like every
    // write, the reset waits while a gate holds writes.
    if ready.hold.is_none() {
        remove_annotation(&mut decided.patch, subject.meta, HOT_LOOP_ANNOTATION);
    }
    Some(decided)
}

/// The Cluster API `Cluster` a stand-alone Cluster API MachineSet is given as owner (not as
/// controller) by Cluster API's MachineSet reconciler (sigs.k8s.io/cluster-api,
/// core/reconcilers/machineset/machineset_controller.go, `shouldAdopt`): it never reverts a
/// MachineSet's template, unlike a MachineDeployment owner, which does.
fn is_cluster(owner: &crate::api::OwnerReference) -> bool {
    owner.kind == "Cluster" && owner.api_version.starts_with("cluster.x-k8s.io/")
}

/// Rule 4: Windows machines boot Windows images (the Windows Machine Config Operator's label).
fn screen_windows(subject: &Subject<'_>) -> Option<Decision> {
    let os_id = subject.template_labels().and_then(|l| l.get(OS_ID_LABEL));
    (os_id.map(String::as_str) == Some("Windows")).then(|| {
        subject.decision(
            Action::Skip,
            Reason::WindowsMachine,
            "Windows machines boot Windows images, not CoreOS".into(),
        )
    })
}

/// Rule 6: what the platform rule says of the boot image, with the operations that change it
/// added to `ops`, or the final decision when it skips or fails.
fn image_change(
    subject: &Subject<'_>,
    outcome: ImageOutcome,
    provider_spec: &Value,
    release: Option<&str>,
    mut ops: Patch,
) -> Result<ImageChange, Box<Decision>> {
    let with_current = |action, reason, message, current| {
        let mut decided = subject.decision(action, reason, message);
        decided.boot_image.current = current;
        Box::new(decided)
    };
    match outcome {
        ImageOutcome::Skip {
            reason,
            message,
            current,
        } => Err(with_current(Action::Skip, reason, message, current)),
        ImageOutcome::Error {
            reason,
            message,
            current,
        } => Err(with_current(Action::Error, reason, message, current)),
        ImageOutcome::UpToDate { current } => Ok(ImageChange {
            values: Values {
                current: Some(current),
                target: None,
            },
            ops,
            template: None,
        }),
        ImageOutcome::Update {
            current,
            target,
            changes,
        } => {
            let each = || changes.iter(provider_spec, &current, &target);
            let template = match subject.infrastructure {
                // A new template, and the MachineSet repointed from the one it was judged on.
                Some(Ok(view)) => {
                    let changes: Vec<_> = each().map(|(pointer, _, to)| (pointer, to)).collect();
                    let recorded = cluster_api_templates::recorded_copies(subject.meta);
                    let copy = cluster_api_templates::copy(view, &changes, release, &recorded);
                    let path = Pointer::from_static(cluster_api_templates::REFERENCE_NAME_POINTER);
                    ops.guarded_replace(path.to_buf(), copy.from.as_str(), copy.to.as_str());
                    Some(copy)
                }
                _ => {
                    let base = subject.kind.provider_spec_path();
                    for (pointer, from, to) in each() {
                        ops.guarded_replace(under_known(base, pointer), from.clone(), to.clone());
                    }
                    None
                }
            };
            let values = Values {
                current: Some(current),
                target: Some(target),
            };
            Ok(ImageChange {
                values,
                ops,
                template,
            })
        }
    }
}

/// Adds to `patch` a `test` for each input that chose an image and is present: the
/// platform's, and the architecture annotation of a MachineSet. They say, in the patch `plan`
/// prints, what the decision rests on; the resourceVersion guards the rest (absent fields).
fn input_guards(subject: &Subject<'_>, platform: Vec<Input>, patch: &mut Patch) {
    // A Cluster API MachineSet's inputs are in its template (which the patch names) and in the
    // Infrastructure: its resourceVersion guards the rest.
    if subject.kind.is_cluster_api() {
        return;
    }
    let base = subject.kind.provider_spec_path();
    for input in platform {
        if let (Some(path), Some(value)) = (under(base, &input.pointer), input.value) {
            patch.test(path, value);
        }
    }
    if subject.kind == MachineKind::MachineSet
        && let Some(value) = subject.annotation(AUTOSCALER_LABELS_ANNOTATION)
    {
        patch.test(annotation(AUTOSCALER_LABELS_ANNOTATION), value.to_string());
    }
}

fn change_message(decided: &Decision, stream: &GoldenStream, release: Option<&str>) -> String {
    let mut message = String::new();
    if let Some(target) = &decided.boot_image.target {
        let release = release.map(|r| format!(" {r}")).unwrap_or_default();
        let _ = write!(
            message,
            "boot image {} -> {} ({}{release})",
            display_image(decided.boot_image.current.as_ref()),
            display_image(Some(target)),
            stream.stream
        );
    }
    if let Some(upgrade) = &decided.stub_upgrade {
        let _ = write!(
            message,
            "; stub secret {} upgraded in place from Ignition {} to {} first",
            upgrade.name, upgrade.from_version, upgrade.to_version
        );
    }
    message
}
