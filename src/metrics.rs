//! Prometheus metrics. Label values are bounded: kinds, actions, reasons and results come from
//! closed enums, never from error text. The one exception is the MachineSet name on the
//! predecessor-compatible `mcc_bootimage_update_error`, bounded by the number of MachineSets.

use prometheus::{
    Encoder, GaugeVec, HistogramOpts, HistogramVec, IntCounterVec, IntGauge, IntGaugeVec, Opts,
    Registry, TextEncoder,
};

use crate::machine_kind::MachineKind;
use crate::plan::{Action, Blocked, Decision};
use crate::reason::{Category, Reason};

/// What was built, for `build_info` and `--version`.
pub mod build {
    pub const VERSION: &str = env!("CARGO_PKG_VERSION");
    /// The source commit, set by build.rs (`unknown` when built outside a git checkout without
    /// `BIC_GIT_COMMIT`).
    pub const COMMIT: &str = env!("BIC_GIT_COMMIT");
}

/// Metric names, shared with the alert rules and the dashboard (a test checks they match).
pub mod names {
    pub const MACHINE_RESOURCES: &str = "boot_image_controller_machine_resources";
    pub const PATCHES: &str = "boot_image_controller_patches_total";
    pub const ERRORS: &str = "boot_image_controller_errors_total";
    pub const HOT_LOOPS: &str = "boot_image_controller_hot_loops_total";
    pub const BLOCKED: &str = "boot_image_controller_blocked";
    pub const RECONCILE_DURATION: &str = "boot_image_controller_reconcile_duration_seconds";
    pub const LAST_SYNC: &str = "boot_image_controller_last_successful_sync_timestamp_seconds";
    pub const GOLDEN_STREAM: &str = "boot_image_controller_golden_stream_info";
    pub const LEADER: &str = "boot_image_controller_leader";
    pub const WRITES: &str = "boot_image_controller_writes_total";
    pub const WRITE_FAILURES: &str = "boot_image_controller_write_failures_total";
    pub const BUILD_INFO: &str = "boot_image_controller_build_info";
    pub const READY: &str = "boot_image_controller_ready";
    pub const HOLD_EXCEEDED: &str = "boot_image_controller_hold_exceeded";
    pub const EC2_REQUESTS: &str = "boot_image_controller_ec2_requests_total";
    pub const EC2_UNAVAILABLE_REGIONS: &str = "boot_image_controller_ec2_unavailable_regions";
    /// Same name and meaning as the Machine Config Operator's gauge, so existing alerts and
    /// dashboards keep working after the switch.
    pub const MCC_UPDATE_ERROR: &str = "mcc_bootimage_update_error";
}

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
    /// Successful writes to the API, by target (one of [`WRITE_TARGETS`]).
    pub writes: IntCounterVec,
    /// Writes the API refused or that did not reach it, by target. Conflicts we retry by
    /// design are not failures.
    pub write_failures: IntCounterVec,
    build_info: IntGaugeVec,
    pub mcc_update_error: GaugeVec,
    /// 1 while a hold has lasted longer than `--hold-degrade-after`, by its reason.
    pub hold_exceeded: IntGaugeVec,
    /// EC2 DescribeImages calls by what they asked (`images`, `marketplace`) and how they ended
    /// (`ok` or an [`crate::ec2::query::Ec2Error::kind`], `no_credentials`).
    pub ec2_requests: IntCounterVec,
    /// Regions whose AMIs EC2 cannot be asked about now: there only the golden streams and the
    /// known images are recognised.
    pub ec2_unavailable_regions: IntGauge,
}

impl Metrics {
    pub fn new() -> Self {
        let registry = Registry::new();
        let m = Metrics {
            machine_resources: vec_of(
                IntGaugeVec::new,
                names::MACHINE_RESOURCES,
                "Machine resources by kind, planned action and reason",
                &["kind", "action", "reason"],
            ),
            patches: vec_of(
                IntCounterVec::new,
                names::PATCHES,
                "Boot image patches sent, by kind and result",
                &["kind", "result"],
            ),
            errors: vec_of(
                IntCounterVec::new,
                names::ERRORS,
                "Machine resources that entered an error, by kind and reason",
                &["kind", "reason"],
            ),
            hot_loops: vec_of(
                IntCounterVec::new,
                names::HOT_LOOPS,
                "Hot loops detected: another writer kept reverting our patch",
                &["kind"],
            ),
            blocked: vec_of(
                IntGaugeVec::new,
                names::BLOCKED,
                "1 while a global gate blocks all boot image writes",
                &["reason"],
            ),
            reconcile_duration: HistogramVec::new(
                HistogramOpts::new(names::RECONCILE_DURATION, "Duration of a reconcile pass")
                    .buckets(vec![
                        0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 15.0, 60.0,
                    ]),
                &["scope"],
            )
            .unwrap(),
            last_sync: LastSync(vec_of(
                IntGaugeVec::new,
                names::LAST_SYNC,
                "Unix time of the last reconcile pass that ended with every write done",
                &[],
            )),
            golden_stream: vec_of(
                IntGaugeVec::new,
                names::GOLDEN_STREAM,
                "The golden CoreOS stream in use (value 1)",
                &["stream", "release"],
            ),
            leader: IntGauge::new(names::LEADER, "1 while this replica holds the leader lease")
                .unwrap(),
            ready: IntGauge::new(names::READY, "1 once every watch has synced").unwrap(),
            writes: vec_of(
                IntCounterVec::new,
                names::WRITES,
                "Successful writes to the Kubernetes API, by object (and subresource) written",
                &["target"],
            ),
            write_failures: vec_of(
                IntCounterVec::new,
                names::WRITE_FAILURES,
                "Writes to the Kubernetes API that failed, by object (and subresource)",
                &["target"],
            ),
            build_info: vec_of(
                IntGaugeVec::new,
                names::BUILD_INFO,
                "The controller's version and source commit (value 1)",
                &["version", "commit"],
            ),
            mcc_update_error: vec_of(
                GaugeVec::new,
                names::MCC_UPDATE_ERROR,
                "1 while the boot image of a MachineSet cannot be updated",
                &["machineset"],
            ),
            hold_exceeded: vec_of(
                IntGaugeVec::new,
                names::HOLD_EXCEEDED,
                "1 while a gate has held boot image writes longer than the configured limit",
                &["reason"],
            ),
            ec2_requests: vec_of(
                IntCounterVec::new,
                names::EC2_REQUESTS,
                "EC2 DescribeImages calls, by what they asked and how they ended",
                &["call", "result"],
            ),
            ec2_unavailable_regions: IntGauge::new(
                names::EC2_UNAVAILABLE_REGIONS,
                "Regions where EC2 cannot be asked about AMIs now (stream and known images only)",
            )
            .expect("metric names are valid"),
            registry,
        };
        for c in m.collectors() {
            m.registry.register(c).expect("metric names are unique");
        }
        // Process metrics (CPU, memory, file descriptors, start time) under the usual
        // `process_` names, so the cluster's standard queries and alerts apply. They read
        // /proc, hence Linux only.
        #[cfg(target_os = "linux")]
        m.registry
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
        for kind in MachineKind::ALL.map(MachineKind::kind) {
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
        for scope in ["all", "some"] {
            self.reconcile_duration.with_label_values(&[scope]);
        }
        for target in WRITE_TARGETS {
            self.writes.with_label_values(&[target]);
            self.write_failures.with_label_values(&[target]);
        }
        // Zero series, so that rates and alerts on them work before the first EC2 call.
        for call in ["images", "marketplace"] {
            self.ec2_requests.with_label_values(&[call, "ok"]);
        }
        self.build_info
            .with_label_values(&[build::VERSION, build::COMMIT])
            .set(1);
    }

    fn collectors(&self) -> Vec<Box<dyn prometheus::core::Collector>> {
        vec![
            Box::new(self.machine_resources.clone()),
            Box::new(self.patches.clone()),
            Box::new(self.errors.clone()),
            Box::new(self.hot_loops.clone()),
            Box::new(self.blocked.clone()),
            Box::new(self.reconcile_duration.clone()),
            Box::new(self.last_sync.0.clone()),
            Box::new(self.golden_stream.clone()),
            Box::new(self.leader.clone()),
            Box::new(self.ready.clone()),
            Box::new(self.writes.clone()),
            Box::new(self.write_failures.clone()),
            Box::new(self.build_info.clone()),
            Box::new(self.mcc_update_error.clone()),
            Box::new(self.hold_exceeded.clone()),
            Box::new(self.ec2_requests.clone()),
            Box::new(self.ec2_unavailable_regions.clone()),
        ]
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
        for d in decisions {
            self.machine_resources
                .with_label_values(&[d.kind.kind(), d.action.as_str(), d.reason.as_str()])
                .inc();
            if d.kind == MachineKind::MachineSet && d.action == Action::Error {
                self.mcc_update_error
                    .with_label_values(&[d.name.as_str()])
                    .set(1.0);
            }
        }
        for reason in Reason::of(Category::Hold) {
            let active = blocked.is_some_and(|b| b.reason == reason);
            self.blocked
                .with_label_values(&[reason.as_str()])
                .set(i64::from(active));
        }
        self.golden_stream.reset();
        if let Some((stream, release)) = golden {
            self.golden_stream
                .with_label_values(&[stream, release])
                .set(1);
        }
    }

    /// Which hold, if any, has lasted longer than the limit.
    pub fn observe_hold(&self, exceeded: Option<Reason>) {
        for reason in Reason::ALL.iter().filter(|r| r.degrades_when_lasting()) {
            let active = exceeded == Some(*reason);
            self.hold_exceeded
                .with_label_values(&[reason.as_str()])
                .set(i64::from(active));
        }
    }

    pub fn error_entered(&self, kind: MachineKind, reason: Reason) {
        let kind = kind.kind();
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

/// A labelled metric family. Names and labels are constants, so construction cannot fail.
fn vec_of<M>(
    new: fn(Opts, &[&str]) -> prometheus::Result<M>,
    name: &str,
    help: &str,
    labels: &[&str],
) -> M {
    new(Opts::new(name, help), labels).expect("metric names and labels are valid")
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

#[cfg(test)]
mod tests {
    use super::*;

    fn decision(name: &str, action: Action, reason: Reason) -> Decision {
        Decision::new(
            MachineKind::MachineSet,
            "openshift-machine-api",
            name,
            action,
            reason,
            String::new(),
        )
    }

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
    fn plan_gauges_follow_the_latest_plan() {
        let m = Metrics::new();
        let paused = Blocked {
            reason: Reason::Paused,
            message: String::new(),
        };
        let mut decisions = vec![
            decision("a", Action::Error, Reason::ManagedSecretMissing),
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
