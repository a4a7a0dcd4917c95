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

/// Declares each metric family once: its name (in [`names`]) and its help text (in [`families`]).
macro_rules! metric_families {
    ($($(#[$doc:meta])* $id:ident = $name:literal, $help:literal;)*) => {
        /// Metric names, shared with the alert rules and the dashboard (a test checks they
        /// match).
        pub mod names {
            $($(#[$doc])* pub const $id: &str = $name;)*
        }

        /// Name and help text of each family.
        mod families {
            $(pub const $id: super::Family = super::Family { name: $name, help: $help };)*
        }
    };
}

metric_families! {
    MACHINE_RESOURCES = "boot_image_controller_machine_resources",
        "Machine resources by kind, planned action and reason";
    PATCHES = "boot_image_controller_patches_total", "Boot image patches sent, by kind and result";
    ERRORS = "boot_image_controller_errors_total",
        "Machine resources that entered an error, by kind and reason";
    HOT_LOOPS = "boot_image_controller_hot_loops_total",
        "Hot loops detected: another writer kept reverting our patch";
    BLOCKED = "boot_image_controller_blocked", "1 while a global gate blocks all boot image writes";
    RECONCILE_DURATION = "boot_image_controller_reconcile_duration_seconds",
        "Duration of a reconcile pass";
    LAST_SYNC = "boot_image_controller_last_successful_sync_timestamp_seconds",
        "Unix time of the last reconcile pass that ended with every write done";
    GOLDEN_STREAM = "boot_image_controller_golden_stream_info",
        "The golden CoreOS stream in use (value 1)";
    LEADER = "boot_image_controller_leader", "1 while this replica holds the leader lease";
    WRITES = "boot_image_controller_writes_total",
        "Successful writes to the Kubernetes API, by object (and subresource) written";
    WRITE_FAILURES = "boot_image_controller_write_failures_total",
        "Writes to the Kubernetes API that failed, by object (and subresource)";
    BUILD_INFO = "boot_image_controller_build_info",
        "The controller's version and source commit (value 1)";
    READY = "boot_image_controller_ready", "1 once every watch has synced";
    HOLD_EXCEEDED = "boot_image_controller_hold_exceeded",
        "1 while a gate has held boot image writes longer than the configured limit";
    STOOD_DOWN = "boot_image_controller_stood_down",
        "1 while this controller only reports because another boot image manager is active or \
         --report-only is set";
    EC2_REQUESTS = "boot_image_controller_ec2_requests_total",
        "EC2 DescribeImages calls, by what they asked and how they ended";
    EC2_UNAVAILABLE_REGIONS = "boot_image_controller_ec2_unavailable_regions",
        "Regions where EC2 cannot be asked about AMIs now (stream and known images only)";
    VSPHERE_IMPORTS = "boot_image_controller_vsphere_template_imports_total",
        "vSphere template imports, by how they ended (imported, found, in_progress, failed, \
         digest_mismatch, ova_unreachable, unavailable; unavailable also counts the look-ups of a template's \
         release that found vCenter unreachable)";
    VSPHERE_IMPORT_PROGRESS = "boot_image_controller_vsphere_template_import_progress",
        "Percent done of the vSphere template import under way (imports run one at a time; 0 \
         when none)";
    BOOT_EVIDENCE = "boot_image_controller_boot_evidence_machinesets",
        "MachineSets on a boot image this controller moved them to, by what their Machines showed \
         of it since (Unproven, Proven, Failed)";
    /// Same name and meaning as the Machine Config Operator's gauge, so existing alerts and
    /// dashboards keep working after the switch.
    MCC_UPDATE_ERROR = "mcc_bootimage_update_error",
        "1 while the boot image of a MachineSet cannot be updated";
}

/// A metric family's name and help text.
struct Family {
    name: &'static str,
    help: &'static str,
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
#[derive(Clone)]
pub struct Metrics {
    registry: Registry,
    /// Machine resources by kind, action and reason, as of the last plan.
    pub machine_resources: IntGaugeVec,
    /// Successful patches by kind and result (`updated`, `conflict`, `failed`).
    pub patches: IntCounterVec,
    /// Resources entering an error, by kind and reason.
    pub errors: IntCounterVec,
    pub hot_loops: IntCounterVec,
    /// 1 for the gate currently blocking all writes.
    pub blocked: IntGaugeVec,
    pub reconcile_duration: HistogramVec,
    pub last_sync: LastSync,
    pub golden_stream: IntGaugeVec,
    pub leader: IntGauge,
    pub ready: IntGauge,
    /// 1 while another boot image manager is active (or `--report-only`): we only report.
    pub stood_down: IntGauge,
    /// Successful writes to the API, by target (one of [`WRITE_TARGETS`]).
    pub writes: IntCounterVec,
    /// Writes the API refused or that did not reach it, by target. Conflicts we retry by
    /// design are not failures.
    pub write_failures: IntCounterVec,
    build_info: IntGaugeVec,
    pub mcc_update_error: GaugeVec,
    /// 1 while a hold has lasted longer than `--hold-limit`, by its reason.
    pub hold_exceeded: IntGaugeVec,
    /// EC2 DescribeImages calls by what they asked (`images`, `marketplace`) and how they ended
    /// (`ok` or an `Ec2Error::kind` of `src/ec2/query.rs`, `no_credentials`).
    pub ec2_requests: IntCounterVec,
    /// Regions whose AMIs EC2 cannot be asked about now: there only the golden streams and the
    /// known images are recognised.
    pub ec2_unavailable_regions: IntGauge,
    pub vsphere_imports: IntCounterVec,
    pub vsphere_import_progress: IntGauge,
    /// Moved MachineSets by the state of their new image (`plan::boot_evidence`).
    pub boot_evidence: IntGaugeVec,
}

impl Metrics {
    pub fn new() -> Self {
        use families::*;
        let registry = Registry::new();
        let r = Registrar(&registry);
        let m = Metrics {
            machine_resources: r.family(
                IntGaugeVec::new,
                MACHINE_RESOURCES,
                &["kind", "action", "reason"],
            ),
            patches: r.family(IntCounterVec::new, PATCHES, &["kind", "result"]),
            errors: r.family(IntCounterVec::new, ERRORS, &["kind", "reason"]),
            hot_loops: r.family(IntCounterVec::new, HOT_LOOPS, &["kind"]),
            blocked: r.family(IntGaugeVec::new, BLOCKED, &["reason"]),
            reconcile_duration: r.register(
                HistogramVec::new(
                    HistogramOpts::new(RECONCILE_DURATION.name, RECONCILE_DURATION.help).buckets(
                        vec![0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 15.0, 60.0],
                    ),
                    &["scope"],
                )
                .expect("metric names and labels are valid"),
            ),
            last_sync: LastSync(r.family(IntGaugeVec::new, LAST_SYNC, &[])),
            golden_stream: r.family(IntGaugeVec::new, GOLDEN_STREAM, &["stream", "release"]),
            leader: r.register(IntGauge::new(LEADER.name, LEADER.help).unwrap()),
            ready: r.register(IntGauge::new(READY.name, READY.help).unwrap()),
            stood_down: r.register(IntGauge::new(STOOD_DOWN.name, STOOD_DOWN.help).unwrap()),
            writes: r.family(IntCounterVec::new, WRITES, &["target"]),
            write_failures: r.family(IntCounterVec::new, WRITE_FAILURES, &["target"]),
            build_info: r.family(IntGaugeVec::new, BUILD_INFO, &["version", "commit"]),
            mcc_update_error: r.family(GaugeVec::new, MCC_UPDATE_ERROR, &["machineset"]),
            hold_exceeded: r.family(IntGaugeVec::new, HOLD_EXCEEDED, &["reason"]),
            ec2_requests: r.family(IntCounterVec::new, EC2_REQUESTS, &["call", "result"]),
            ec2_unavailable_regions: r.register(
                IntGauge::new(EC2_UNAVAILABLE_REGIONS.name, EC2_UNAVAILABLE_REGIONS.help).unwrap(),
            ),
            vsphere_imports: r.family(IntCounterVec::new, VSPHERE_IMPORTS, &["result"]),
            vsphere_import_progress: r.register(
                IntGauge::new(VSPHERE_IMPORT_PROGRESS.name, VSPHERE_IMPORT_PROGRESS.help).unwrap(),
            ),
            boot_evidence: r.family(IntGaugeVec::new, BOOT_EVIDENCE, &["state"]),
            registry: registry.clone(),
        };
        // Process metrics (CPU, memory, file descriptors, start time) under the usual
        // `process_` names, so the cluster's standard queries and alerts apply. They read
        // /proc, hence Linux only.
        #[cfg(target_os = "linux")]
        registry
            .register(Box::new(
                prometheus::process_collector::ProcessCollector::for_self(),
            ))
            .expect("process metric names are unique");
        m.initialize_series();
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
        for reason in Reason::of(Category::Hold) {
            self.blocked.with_label_values(&[reason.as_str()]).set(0);
        }
        for state in BootState::ALL {
            self.boot_evidence
                .with_label_values(&[state.as_str()])
                .set(0);
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

/// Registers each family as it is made. Names and labels are constants, so neither step can
/// fail.
struct Registrar<'a>(&'a Registry);

impl Registrar<'_> {
    fn register<C: Collector + Clone + 'static>(&self, collector: C) -> C {
        self.0
            .register(Box::new(collector.clone()))
            .expect("metric names are unique");
        collector
    }

    /// A labelled family made by `new` (e.g. `IntGaugeVec::new`).
    fn family<M: Collector + Clone + 'static>(
        &self,
        new: fn(Opts, &[&str]) -> prometheus::Result<M>,
        family: Family,
        labels: &[&str],
    ) -> M {
        let made = new(Opts::new(family.name, family.help), labels)
            .expect("metric names and labels are valid");
        self.register(made)
    }
}

/// The time of the last complete sync. Its series does not exist until the first one: a zero
/// would read as "last synced in 1970", and `time() - last_sync` as 56 years of staleness for a
/// controller that simply has not finished its first pass (alerts use `absent()` for that).
#[derive(Clone)]
pub struct LastSync(IntGaugeVec);

impl LastSync {
    pub fn set(&self, unix_seconds: i64) {
        self.0.with_label_values::<&str>(&[]).set(unix_seconds);
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
        m.last_sync.set(1_700_000_000);
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
