//! Prometheus metrics. Label values are bounded: kinds, actions, reasons and results come from
//! closed enums, never from error text. The one exception is the MachineSet name on the
//! predecessor-compatible `mcc_bootimage_update_error`, bounded by the number of MachineSets.

use prometheus::core::Collector;
use prometheus::{
    Encoder, GaugeVec, HistogramOpts, HistogramVec, IntCounterVec, IntGauge, IntGaugeVec, Opts,
    Registry, TextEncoder,
};

use crate::machine_kind::MachineKind;
use crate::plan::boot_evidence::BootState;
use crate::plan::{Action, Blocked, Decision};
use crate::reason::{Category, Reason};

/// What was built, for `build_info` and `--version`.
pub mod build {
    pub const VERSION: &str = env!("CARGO_PKG_VERSION");
    /// The source commit, set by build.rs (`unknown` when built outside a git checkout without
    /// `BIC_GIT_COMMIT`).
    pub const COMMIT: &str = env!("BIC_GIT_COMMIT");
}

/// Declares each metric once: the field of [`Metrics`] holding it, its type and labels, its
/// name (in [`names`]) and its help text. `Metrics::new` makes and registers every one.
macro_rules! metrics {
    ($(
        $(#[$doc:meta])*
        $vis:vis $field:ident: $type:ty [$($label:literal),*] = $id:ident $name:literal, $help:literal;
    )*) => {
        /// Metric names, shared with the alert rules and the dashboard (a test checks they
        /// match).
        pub mod names {
            $($(#[$doc])* pub const $id: &str = $name;)*
        }

        #[derive(Clone)]
        pub struct Metrics {
            registry: Registry,
            $($(#[$doc])* $vis $field: $type,)*
        }

        impl Metrics {
            /// Every metric of the table, registered in `registry`.
            fn registered(registry: Registry) -> Self {
                Metrics {
                    $($field: Family::make(&registry, Opts::new($name, $help), &[$($label),*]),)*
                    registry,
                }
            }
        }
    };
}

metrics! {
    pub machine_resources: IntGaugeVec ["kind", "action", "reason"] = MACHINE_RESOURCES
        "boot_image_controller_machine_resources",
        "Machine resources by kind, planned action and reason";
    /// Results: `updated`, `conflict`, `failed`.
    pub patches: IntCounterVec ["kind", "result"] = PATCHES
        "boot_image_controller_patches_total", "Boot image patches sent, by kind and result";
    pub errors: IntCounterVec ["kind", "reason"] = ERRORS
        "boot_image_controller_errors_total",
        "Machine resources that entered an error, by kind and reason";
    pub hot_loops: IntCounterVec ["kind"] = HOT_LOOPS
        "boot_image_controller_hot_loops_total",
        "Hot loops detected: another writer kept reverting our patch";
    pub blocked: IntGaugeVec ["reason"] = BLOCKED
        "boot_image_controller_blocked", "1 while a global gate blocks all boot image writes";
    pub reconcile_duration: HistogramVec ["scope"] = RECONCILE_DURATION
        "boot_image_controller_reconcile_duration_seconds", "Duration of a reconcile pass";
    /// Labelled by nothing, so that its series does not exist until the first complete sync: a
    /// zero would read as "last synced in 1970", and `time() - last_sync` as 56 years of
    /// staleness for a controller that simply has not finished its first pass (alerts use
    /// `absent()` for that).
    pub last_sync: IntGaugeVec [] = LAST_SYNC
        "boot_image_controller_last_successful_sync_timestamp_seconds",
        "Unix time of the last reconcile pass that ended with every write done";
    pub golden_stream: IntGaugeVec ["stream", "release"] = GOLDEN_STREAM
        "boot_image_controller_golden_stream_info", "The golden CoreOS stream in use (value 1)";
    pub leader: IntGauge [] = LEADER
        "boot_image_controller_leader", "1 while this replica holds the leader lease";
    /// Targets: one of [`WRITE_TARGETS`].
    pub writes: IntCounterVec ["target"] = WRITES
        "boot_image_controller_writes_total",
        "Successful writes to the Kubernetes API, by object (and subresource) written";
    /// Conflicts we retry by design are not failures.
    pub write_failures: IntCounterVec ["target"] = WRITE_FAILURES
        "boot_image_controller_write_failures_total",
        "Writes to the Kubernetes API that failed, by object (and subresource)";
    build_info: IntGaugeVec ["version", "commit"] = BUILD_INFO
        "boot_image_controller_build_info",
        "The controller's version and source commit (value 1)";
    pub ready: IntGauge [] = READY
        "boot_image_controller_ready", "1 once every watch has synced";
    /// By the reason of the hold, while it has lasted longer than `--hold-limit`.
    pub hold_exceeded: IntGaugeVec ["reason"] = HOLD_EXCEEDED
        "boot_image_controller_hold_exceeded",
        "1 while a gate has held boot image writes longer than the configured limit";
    pub stood_down: IntGauge [] = STOOD_DOWN
        "boot_image_controller_stood_down",
        "1 while this controller only reports because another boot image manager is active or \
         --report-only is set";
    /// Calls: `images`, `marketplace`; results: `ok` or an `Ec2Error::kind` of
    /// `src/ec2/query.rs`, `no_credentials`.
    pub ec2_requests: IntCounterVec ["call", "result"] = EC2_REQUESTS
        "boot_image_controller_ec2_requests_total",
        "EC2 DescribeImages calls, by what they asked and how they ended";
    pub ec2_unavailable_regions: IntGauge [] = EC2_UNAVAILABLE_REGIONS
        "boot_image_controller_ec2_unavailable_regions",
        "Regions where EC2 cannot be asked about AMIs now (stream and known images only)";
    pub vsphere_imports: IntCounterVec ["result"] = VSPHERE_IMPORTS
        "boot_image_controller_vsphere_template_imports_total",
        "vSphere template imports, by how they ended (imported, found, in_progress, failed, \
         digest_mismatch, ova_unreachable, unavailable; unavailable also counts the look-ups of a template's \
         release that found vCenter unreachable)";
    pub vsphere_import_progress: IntGauge [] = VSPHERE_IMPORT_PROGRESS
        "boot_image_controller_vsphere_template_import_progress",
        "Percent done of the vSphere template import under way (imports run one at a time; 0 \
         when none)";
    /// Moved MachineSets by the state of their new image (`plan::boot_evidence`).
    pub boot_evidence: IntGaugeVec ["state"] = BOOT_EVIDENCE
        "boot_image_controller_boot_evidence_machinesets",
        "MachineSets on a boot image this controller moved them to, by what their Machines showed \
         of it since (Unproven, Proven, Failed)";
    /// Same name and meaning as the Machine Config Operator's gauge, so existing alerts and
    /// dashboards keep working after the switch.
    pub mcc_update_error: GaugeVec ["machineset"] = MCC_UPDATE_ERROR
        "mcc_bootimage_update_error", "1 while the boot image of a MachineSet cannot be updated";
}

/// How a vSphere template import ends (`result` of the imports counter).
pub const VSPHERE_IMPORT_RESULTS: [&str; 7] = [
    "imported",
    "found",
    "in_progress",
    "failed",
    "digest_mismatch",
    "ova_unreachable",
    "unavailable",
];

/// What a write changed: the kind of object, or the object and subresource. Never an outcome:
/// failures are counted apart, so that `sum(rate(writes_total))` is the rate of changes made.
pub const WRITE_TARGETS: [&str; 5] = [
    "MachineSet",
    "ControlPlaneMachineSet",
    "MachineConfiguration/status",
    "Event",
    "ConfigMap",
];

/// A metric made from its options and labels (none for a plain gauge) and registered as it is
/// made. Names and labels are constants, so neither step can fail.
trait Family: Collector + Clone + 'static {
    fn new_family(opts: Opts, labels: &[&str]) -> prometheus::Result<Self>;

    fn make(registry: &Registry, opts: Opts, labels: &[&str]) -> Self {
        let made = Self::new_family(opts, labels).expect("metric names and labels are valid");
        (registry.register(Box::new(made.clone()))).expect("metric names are unique");
        made
    }
}

macro_rules! labelled_families {
    ($($type:ty),*) => {$(
        impl Family for $type {
            fn new_family(opts: Opts, labels: &[&str]) -> prometheus::Result<Self> {
                Self::new(opts, labels)
            }
        }
    )*};
}

labelled_families!(IntGaugeVec, IntCounterVec, GaugeVec);

impl Family for IntGauge {
    fn new_family(opts: Opts, _: &[&str]) -> prometheus::Result<Self> {
        Self::with_opts(opts)
    }
}

/// The one histogram: reconcile durations.
impl Family for HistogramVec {
    fn new_family(opts: Opts, labels: &[&str]) -> prometheus::Result<Self> {
        let buckets = vec![0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 15.0, 60.0];
        Self::new(HistogramOpts::from(opts).buckets(buckets), labels)
    }
}

impl Metrics {
    pub fn new() -> Self {
        let registry = Registry::new();
        // Process metrics (CPU, memory, file descriptors, start time) under the usual
        // `process_` names, so the cluster's standard queries and alerts apply. They read
        // /proc, hence Linux only.
        #[cfg(target_os = "linux")]
        registry
            .register(Box::new(
                prometheus::process_collector::ProcessCollector::for_self(),
            ))
            .expect("process metric names are unique");
        let m = Metrics::registered(registry);
        m.initialize_series();
        // The gauges of a plan and of a hold, at zero for every bounded label.
        m.observe_plan([], None, None);
        m.observe_hold(None);
        m
    }

    /// Creates the bounded series at zero, so that every family is exported from the start and
    /// `rate()`/`increase()` see the first event instead of a series appearing at 1.
    fn initialize_series(&self) {
        for kind in MachineKind::ALL.map(MachineKind::label) {
            for result in ["updated", "conflict", "failed"] {
                self.patches.with_label_values(&[kind, result]);
            }
            self.hot_loops.with_label_values(&[kind]);
            for reason in Reason::of(Category::Error) {
                self.errors.with_label_values(&[kind, reason.as_str()]);
            }
        }
        self.reconcile_duration.with_label_values(&["all"]);
        for target in WRITE_TARGETS {
            self.writes.with_label_values(&[target]);
            self.write_failures.with_label_values(&[target]);
        }
        // Zero series, so that rates and alerts on them work before the first EC2 call.
        for call in ["images", "marketplace"] {
            self.ec2_requests.with_label_values(&[call, "ok"]);
        }
        for result in VSPHERE_IMPORT_RESULTS {
            self.vsphere_imports.with_label_values(&[result]);
        }
        self.build_info
            .with_label_values(&[build::VERSION, build::COMMIT])
            .set(1);
    }

    /// Replaces the per-plan gauges with the latest decisions and gate.
    pub fn observe_plan<'a>(
        &self,
        decisions: impl IntoIterator<Item = &'a Decision>,
        blocked: Option<&Blocked>,
        golden: Option<(&str, &str)>,
    ) {
        self.machine_resources.reset();
        self.mcc_update_error.reset();
        let mut boots = [0; BootState::ALL.len()];
        // Beside another manager the errors are its to report (the MCO exports this gauge
        // itself); ours would raise a second alert for MachineSets we do not update.
        let standing_down = blocked.is_some_and(|b| b.reason.stands_down());
        for d in decisions {
            self.machine_resources
                .with_label_values(&[d.kind.label(), d.action.as_str(), d.reason.as_str()])
                .inc();
            if d.kind == MachineKind::MachineSet && d.action == Action::Error && !standing_down {
                self.mcc_update_error
                    .with_label_values(&[d.name.as_str()])
                    .set(1.0);
            }
            if let Some(evidence) = &d.boot_evidence {
                boots[evidence.state as usize] += 1;
            }
        }
        for (state, count) in BootState::ALL.into_iter().zip(boots) {
            (self.boot_evidence.with_label_values(&[state.as_str()])).set(count);
        }
        for reason in Reason::of(Category::Hold) {
            let active = blocked.is_some_and(|b| b.reason == reason);
            self.blocked
                .with_label_values(&[reason.as_str()])
                .set(i64::from(active));
        }
        self.stood_down.set(i64::from(standing_down));
        self.golden_stream.reset();
        if let Some((stream, release)) = golden {
            self.golden_stream
                .with_label_values(&[info_label(stream), info_label(release)])
                .set(1);
        }
    }

    /// Which hold, if any, has lasted longer than the limit.
    pub fn observe_hold(&self, exceeded: Option<Reason>) {
        for reason in Reason::ALL.iter().filter(|r| r.reported_when_lasting()) {
            let active = exceeded == Some(*reason);
            self.hold_exceeded
                .with_label_values(&[reason.as_str()])
                .set(i64::from(active));
        }
    }

    pub fn error_entered(&self, kind: MachineKind, reason: Reason) {
        let kind = kind.label();
        self.errors
            .with_label_values(&[kind, reason.as_str()])
            .inc();
        if reason == Reason::HotLoop {
            self.hot_loops.with_label_values(&[kind]).inc();
        }
    }

    /// The text exposition format served on `/metrics`.
    pub fn render(&self) -> String {
        let mut buf = Vec::new();
        TextEncoder::new()
            .encode(&self.registry.gather(), &mut buf)
            .expect("encoding to memory cannot fail");
        String::from_utf8(buf).expect("the text format is UTF-8")
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

/// Longest golden stream name or release a label carries.
const MAX_INFO_LABEL: usize = 64;

/// A golden stream name or release as a label value: whoever may edit the golden ConfigMap
/// chooses them, and every scrape carries them. A value longer than [`MAX_INFO_LABEL`], or with
/// other characters than a stream name or a semantic version uses, is shown as `invalid`.
fn info_label(value: &str) -> &str {
    let fits = value.len() <= MAX_INFO_LABEL
        && (value.bytes()).all(|b| b.is_ascii_alphanumeric() || b"._+-".contains(&b));
    if fits { value } else { "invalid" }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testkit::decisions::decision;

    fn has_sample(text: &str, name: &str) -> bool {
        text.lines()
            .any(|l| !l.starts_with('#') && l.split(['{', ' ']).next() == Some(name))
    }

    #[test]
    fn the_last_sync_time_is_absent_until_the_first_sync() {
        let m = Metrics::new();
        assert!(!has_sample(&m.render(), names::LAST_SYNC), "{}", m.render());
        m.last_sync
            .with_label_values::<&str>(&[])
            .set(1_700_000_000);
        assert!(
            m.render()
                .contains(&format!("{} 1700000000", names::LAST_SYNC)),
            "{}",
            m.render()
        );
    }

    #[test]
    fn build_info_names_the_version_and_commit() {
        let text = Metrics::new().render();
        let expected = format!(
            r#"{}{{commit="{}",version="{}"}} 1"#,
            names::BUILD_INFO,
            build::COMMIT,
            env!("CARGO_PKG_VERSION")
        );
        assert!(text.contains(&expected), "{text}");
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn process_metrics_are_exported() {
        let text = Metrics::new().render();
        for name in ["process_cpu_seconds_total", "process_resident_memory_bytes"] {
            assert!(has_sample(&text, name), "no {name} in {text}");
        }
    }

    #[test]
    fn writes_are_labelled_by_target_only() {
        let text = Metrics::new().render();
        for target in WRITE_TARGETS {
            assert!(
                text.contains(&format!(r#"{}{{target="{target}"}} 0"#, names::WRITES)),
                "{text}"
            );
        }
    }

    #[test]
    fn golden_stream_labels_are_bounded_in_length_and_characters() {
        let m = Metrics::new();
        let huge = "4.21.0-".to_string() + &"x".repeat(900 * 1024);
        m.observe_plan(&[], None, Some(("rhcos-4.21", &huge)));
        let text = m.render();
        assert!(text.len() < 64 * 1024, "a scrape of {} bytes", text.len());
        assert!(text.contains(
            r#"boot_image_controller_golden_stream_info{release="invalid",stream="rhcos-4.21"} 1"#
        ));
        m.observe_plan(
            &[],
            None,
            Some(("rhcos\"4.21\n", "4.22.0-0.nightly-2026-01-01-123456")),
        );
        assert!(m.render().contains(
            r#"boot_image_controller_golden_stream_info{release="4.22.0-0.nightly-2026-01-01-123456",stream="invalid"} 1"#
        ));
    }

    #[test]
    fn plan_gauges_follow_the_latest_plan() {
        let m = Metrics::new();
        let paused = Blocked {
            reason: Reason::Paused,
            message: String::new(),
        };
        let mut decisions = vec![
            decision("a", Action::Error, Reason::ImageNotInStream),
            decision("b", Action::UpToDate, Reason::UpToDate),
        ];
        m.observe_plan(&decisions, Some(&paused), Some(("rhcos-4.21", "4.21.0")));
        let text = m.render();
        assert!(
            text.contains(r#"mcc_bootimage_update_error{machineset="a"} 1"#),
            "{text}"
        );
        assert!(text.contains(r#"boot_image_controller_blocked{reason="Paused"} 1"#));
        assert!(text.contains(
            r#"boot_image_controller_golden_stream_info{release="4.21.0",stream="rhcos-4.21"} 1"#
        ));

        decisions[0] = decision("a", Action::UpToDate, Reason::UpToDate);
        m.observe_plan(&decisions, None, None);
        let text = m.render();
        assert!(!text.contains("mcc_bootimage_update_error{"), "{text}");
        assert!(text.contains(r#"boot_image_controller_blocked{reason="Paused"} 0"#));
        assert!(text.contains(
            r#"boot_image_controller_machine_resources{action="UpToDate",kind="MachineSet",reason="UpToDate"} 2"#
        ));
    }

    #[test]
    fn standing_down_is_exported_and_leaves_error_alerts_to_the_other_manager() {
        let m = Metrics::new();
        let stood_down = Blocked {
            reason: Reason::AnotherManagerActive,
            message: "another manager".into(),
        };
        let decisions = [decision("a", Action::Error, Reason::ImageNotInStream)];
        m.observe_plan(&decisions, Some(&stood_down), None);
        let text = m.render();
        assert!(
            text.contains("boot_image_controller_stood_down 1"),
            "{text}"
        );
        assert!(!text.contains("mcc_bootimage_update_error{"), "{text}");
        m.observe_plan(&decisions, None, None);
        let text = m.render();
        assert!(
            text.contains("boot_image_controller_stood_down 0"),
            "{text}"
        );
        assert!(text.contains(r#"mcc_bootimage_update_error{machineset="a"} 1"#));
    }

    #[test]
    fn every_error_and_hold_reason_is_exported_from_the_start() {
        let text = Metrics::new().render();
        for reason in Reason::of(Category::Error) {
            let series = format!(r#"kind="MachineSet",reason="{reason}"}} 0"#);
            assert!(text.contains(&series), "{reason}");
        }
        for reason in Reason::of(Category::Hold) {
            let series = format!(r#"boot_image_controller_blocked{{reason="{reason}"}} 0"#);
            assert!(text.contains(&series), "{reason}");
        }
    }
}
