//! The alerts, the Grafana dashboard and the console dashboard use only metrics, reasons and
//! actions the controller really exports (checked statically and against a running
//! controller), and the dashboards have what Grafana and the console need.

use crate::deploy;
use crate::support;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use boot_image_controller::metrics::names;
use boot_image_controller::plan::Action;
use boot_image_controller::reason::Reason;
use deploy::*;
use serde_json::Value;

/// Every metric the controller exports: the set the alerts and the dashboard may use.
const EXPORTED_METRICS: &[&str] = &[
    "boot_image_controller_machine_resources",
    "boot_image_controller_patches_total",
    "boot_image_controller_errors_total",
    "boot_image_controller_hot_loops_total",
    "boot_image_controller_blocked",
    "boot_image_controller_reconcile_duration_seconds",
    "boot_image_controller_last_successful_sync_timestamp_seconds",
    "boot_image_controller_golden_stream_info",
    "boot_image_controller_leader",
    "boot_image_controller_ready",
    "boot_image_controller_writes_total",
    "boot_image_controller_hold_exceeded",
    "boot_image_controller_write_failures_total",
    "boot_image_controller_build_info",
    "boot_image_controller_stood_down",
    "mcc_bootimage_update_error",
    "boot_image_controller_ec2_requests_total",
    "boot_image_controller_ec2_unavailable_regions",
    "boot_image_controller_vsphere_template_imports_total",
    "boot_image_controller_vsphere_template_import_progress",
    "boot_image_controller_boot_evidence_machinesets",
];

const DASHBOARD: &str = "dashboards/boot-image-controller.json";
/// The per-cluster recording rules a fleet's hub collects (docs/fleet.md).
const FLEET_RULES: &str = "manifests/monitoring/prometheusrule-fleet.yaml";
/// The same dashboard, where the console's ConfigMap is generated from.
const CONSOLE_DASHBOARD: &str = "manifests/console-dashboard/boot-image-controller.json";

// ---------------------------------------------------------------------------------------------
// Metrics, alerts and dashboard

/// Metric names in `text`: `\b(boot_image_controller_[a-z0-9_]+|mcc_bootimage_update_error)\b`,
/// with the `_bucket`, `_sum` and `_count` series of histograms folded into their family.
fn metric_names(text: &str) -> BTreeSet<String> {
    let word = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let mut found = BTreeSet::new();
    for (start, _) in text.char_indices() {
        if text[..start].chars().next_back().is_some_and(word) {
            continue;
        }
        let rest = &text[start..];
        let name = if let Some(tail) = rest.strip_prefix("boot_image_controller_") {
            let len = tail
                .find(|c: char| !(c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_'))
                .unwrap_or(tail.len());
            if len == 0 || tail[len..].chars().next().is_some_and(word) {
                continue;
            }
            &rest[.."boot_image_controller_".len() + len]
        } else if rest.starts_with(names::MCC_UPDATE_ERROR)
            && !rest[names::MCC_UPDATE_ERROR.len()..]
                .chars()
                .next()
                .is_some_and(word)
        {
            names::MCC_UPDATE_ERROR
        } else {
            continue;
        };
        let family = ["_bucket", "_sum", "_count"]
            .iter()
            .find_map(|suffix| name.strip_suffix(suffix))
            .unwrap_or(name);
        found.insert(family.to_string());
    }
    found
}

fn used_metrics() -> BTreeMap<&'static str, BTreeSet<String>> {
    BTreeMap::from([
        (PROMETHEUS_RULE, metric_names(&read(PROMETHEUS_RULE))),
        (FLEET_RULES, metric_names(&read(FLEET_RULES))),
        (DASHBOARD, metric_names(&read(DASHBOARD))),
        (CONSOLE_DASHBOARD, metric_names(&read(CONSOLE_DASHBOARD))),
    ])
}

#[test]
fn metric_names_are_found_as_whole_words() {
    let text = "rate(boot_image_controller_reconcile_duration_seconds_bucket[5m]) \
                boot_image_controller_leader{pod=\"a\"} xboot_image_controller_ready \
                mcc_bootimage_update_error_total mcc_bootimage_update_error==1 \
                boot_image_controller_Oops boot_image_controller_";
    assert_eq!(
        metric_names(text),
        BTreeSet::from([
            "boot_image_controller_reconcile_duration_seconds".to_string(),
            "boot_image_controller_leader".to_string(),
            "mcc_bootimage_update_error".to_string(),
        ])
    );
}

#[test]
fn the_expected_metrics_are_the_ones_the_controller_defines() {
    let defined = BTreeSet::from([
        names::MACHINE_RESOURCES,
        names::PATCHES,
        names::ERRORS,
        names::HOT_LOOPS,
        names::BLOCKED,
        names::RECONCILE_DURATION,
        names::LAST_SYNC,
        names::GOLDEN_STREAM,
        names::LEADER,
        names::WRITES,
        names::WRITE_FAILURES,
        names::BUILD_INFO,
        names::READY,
        names::MCC_UPDATE_ERROR,
        names::HOLD_EXCEEDED,
        names::STOOD_DOWN,
        names::EC2_REQUESTS,
        names::EC2_UNAVAILABLE_REGIONS,
        names::VSPHERE_IMPORTS,
        names::VSPHERE_IMPORT_PROGRESS,
        names::BOOT_EVIDENCE,
    ]);
    let expected: BTreeSet<&str> = EXPORTED_METRICS.iter().copied().collect();
    assert_eq!(expected, defined);
}

#[test]
fn alerts_and_dashboard_use_only_exported_metrics() {
    let exported: BTreeSet<String> = EXPORTED_METRICS.iter().map(|s| s.to_string()).collect();
    for (file, used) in used_metrics() {
        assert!(!used.is_empty(), "{file} uses no metric at all?");
        let unknown: Vec<&String> = used.difference(&exported).collect();
        assert!(
            unknown.is_empty(),
            "{file} uses metrics the controller does not export: {unknown:?}"
        );
    }
    // The alerts cover the compatibility gauge, hot loops, the gates, planned updates and leader.
    let rules = &used_metrics()[PROMETHEUS_RULE];
    for name in [
        names::MCC_UPDATE_ERROR,
        names::HOT_LOOPS,
        names::BLOCKED,
        names::MACHINE_RESOURCES,
        names::LEADER,
        names::BOOT_EVIDENCE,
    ] {
        assert!(rules.contains(name), "no alert uses {name}");
    }
}

/// Values of `label="..."` and `label=~"a|b"` matchers in `text`.
fn label_values(text: &str, label: &str) -> BTreeSet<String> {
    let mut values = BTreeSet::new();
    for op in ["=\"", "=~\"", "!=\""] {
        let needle = format!("{label}{op}");
        for (at, _) in text.match_indices(&needle) {
            if text[..at]
                .chars()
                .next_back()
                .is_some_and(|c| c.is_ascii_alphanumeric() || c == '_')
            {
                continue;
            }
            let rest = &text[at + needle.len()..];
            let value = &rest[..rest.find('"').expect("closing quote")];
            values.extend(
                value
                    .split('|')
                    .filter(|v| !v.is_empty())
                    .map(str::to_string),
            );
        }
    }
    values
}

#[test]
fn alerts_and_dashboard_match_on_real_reasons_and_actions() {
    let reasons: BTreeSet<&str> = Reason::ALL.iter().map(|r| r.as_str()).collect();
    let actions: BTreeSet<&str> = Action::ALL.iter().map(|a| a.as_str()).collect();
    for file in [PROMETHEUS_RULE, FLEET_RULES, DASHBOARD, CONSOLE_DASHBOARD] {
        // The dashboard is JSON: its quotes are escaped.
        let text = read(file).replace("\\\"", "\"");
        for reason in label_values(&text, "reason") {
            assert!(
                reasons.contains(reason.as_str()),
                "{file}: reason {reason:?} is not a Reason"
            );
        }
        for action in label_values(&text, "action") {
            assert!(
                actions.contains(action.as_str()),
                "{file}: action {action:?} is not an Action"
            );
        }
    }
}

/// Metric families in the text exposition format: `# TYPE` lines and sample names.
fn exposed_families(body: &str) -> BTreeSet<String> {
    body.lines()
        .filter_map(|line| match line.strip_prefix("# TYPE ") {
            Some(typed) => typed.split_whitespace().next(),
            None if !line.starts_with('#') => line.split(['{', ' ']).next(),
            None => None,
        })
        .filter(|name| !name.is_empty())
        .flat_map(metric_names)
        .collect()
}

/// Fails the test when the alerts or the dashboard use a family `exposed` lacks.
fn assert_exports_used_metrics(exposed: &BTreeSet<String>, source: &str) {
    for (file, used) in used_metrics() {
        let missing: Vec<&String> = used.difference(exposed).collect();
        assert!(
            missing.is_empty(),
            "{file} uses metrics {source} does not export: {missing:?} \
             (a labelled family appears only once it has a series)"
        );
    }
}

/// The controller on a simulated cluster, with one MachineSet current and one that cannot be
/// updated (its architecture is unknown), so that the conditional families
/// have series too: `golden_stream_info` once the stream is read, `mcc_bootimage_update_error`
/// while a MachineSet fails.
#[tokio::test]
async fn a_running_controller_exports_every_metric_the_alerts_and_dashboard_use() {
    use support::fixtures::*;
    let env = support::TestEnv::new("metrics").await;
    env.aws_cluster("4.21.0", &stream_421(), None).await;
    env.apply(machine_set(&env.ns, "worker-current").current().build())
        .await;
    env.apply(
        machine_set(&env.ns, "infra-broken")
            .ami(AMI_421_US_EAST_1)
            .arch("sparc64")
            .build(),
    )
    .await;
    let controller = env.controller(&["--leader-elect"]);
    controller.wait_ready().await;

    let failing = format!("{}{{machineset=\"infra-broken\"}}", names::MCC_UPDATE_ERROR);
    let exported = support::eventually(Duration::from_secs(60), || async {
        let metrics = controller.metrics().await;
        (support::sample(&metrics, &failing) == Some(1.0)
            && metrics.contains(&format!("{}{{", names::GOLDEN_STREAM))
            && support::sample(&metrics, names::LEADER) == Some(1.0))
        .then_some(metrics)
    })
    .await;
    let Some(metrics) = exported else {
        let samples = controller.metrics().await;
        let samples: Vec<&str> = samples.lines().filter(|l| !l.starts_with('#')).collect();
        panic!(
            "never exported {failing} 1, the golden stream and leadership:\n{}\n{}",
            samples.join("\n"),
            controller.log_tail(40)
        );
    };
    let exposed = exposed_families(&metrics);
    assert_exports_used_metrics(&exposed, "the running controller");
    // And the list the static checks above rely on is what the controller really exports.
    let expected: BTreeSet<String> = EXPORTED_METRICS.iter().map(|s| s.to_string()).collect();
    assert_eq!(exposed, expected, "exported metric families");
}

/// The console shows exactly the Grafana dashboard: same file, in a ConfigMap where and how the
/// console looks for dashboards.
#[test]
fn the_console_dashboard_is_the_grafana_dashboard() {
    assert!(
        read(CONSOLE_DASHBOARD) == read(DASHBOARD),
        "{CONSOLE_DASHBOARD} differs from {DASHBOARD}: run hack/sync-console-dashboard.sh"
    );
    let Some(kubectl) = kubectl_or_skip() else {
        return;
    };
    let rendered = Rendered::manifests(&kubectl);
    let config_map = rendered.get("ConfigMap", "boot-image-controller-dashboard");
    // The console's server lists exactly these: ConfigMaps in openshift-config-managed with the
    // label console.openshift.io/dashboard=true (openshift/console, cmd/bridge:
    // `MonitoringDashboardConfigMapLister`).
    assert_eq!(
        config_map["metadata"]["namespace"], "openshift-config-managed",
        "{config_map}"
    );
    assert_eq!(
        config_map["metadata"]["labels"]["console.openshift.io/dashboard"], "true",
        "{config_map}"
    );
    let data = config_map["data"].as_object().expect("data");
    assert_eq!(data.len(), 1, "one dashboard per ConfigMap");
    let json = data
        .values()
        .next()
        .and_then(Value::as_str)
        .unwrap_or_default();
    assert_eq!(json, read(DASHBOARD), "the ConfigMap holds the dashboard");
}

#[test]
fn the_dashboard_has_what_grafana_needs() {
    let dashboard: Value = serde_json::from_str(&read(DASHBOARD)).expect("the dashboard is JSON");
    let uid = dashboard["uid"].as_str().expect("uid");
    assert!(
        !uid.is_empty() && uid.len() <= 40,
        "a stable uid of at most 40 characters"
    );
    assert!(
        dashboard["title"].as_str().is_some_and(|t| !t.is_empty()),
        "title"
    );
    assert!(
        dashboard["schemaVersion"].as_i64().is_some_and(|v| v >= 36),
        "schemaVersion"
    );

    let variables = dashboard["templating"]["list"]
        .as_array()
        .expect("templating.list");
    let datasource = variables
        .iter()
        .find(|v| v["type"] == "datasource")
        .expect("a datasource variable");
    assert_eq!(datasource["query"], "prometheus");
    let reference = format!("${{{}}}", str_of(&datasource["name"]));
    let uses_variable = |ds: &Value| ds["type"] == "prometheus" && ds["uid"] == reference.as_str();
    for v in variables.iter().filter(|v| v["type"] == "query") {
        assert!(
            uses_variable(&v["datasource"]),
            "variable {} uses {reference}",
            v["name"]
        );
    }

    let panels = dashboard["panels"].as_array().expect("panels");
    assert!(!panels.is_empty());
    let mut ids = BTreeSet::new();
    for panel in panels {
        let title = str_of(&panel["title"]);
        assert!(
            ids.insert(panel["id"].as_i64().expect("panel id")),
            "duplicate id on {title}"
        );
        assert!(panel["type"].is_string(), "{title}: type");
        for key in ["x", "y", "w", "h"] {
            assert!(panel["gridPos"][key].is_i64(), "{title}: gridPos.{key}");
        }
        assert!(
            uses_variable(&panel["datasource"]),
            "{title}: datasource {reference}"
        );
        let targets = panel["targets"].as_array().expect("targets");
        assert!(!targets.is_empty(), "{title}: no targets");
        for target in targets {
            assert!(target["refId"].is_string(), "{title}: refId");
            assert!(
                target["expr"].as_str().is_some_and(|e| !e.is_empty()),
                "{title}: expr"
            );
            assert!(
                uses_variable(&target["datasource"]),
                "{title}: target datasource"
            );
        }
    }

    // The panels the issue asks for.
    let text = read(DASHBOARD);
    for (what, needle) in [
        ("MachineSets by state", names::MACHINE_RESOURCES),
        ("patches", names::PATCHES),
        ("errors", names::ERRORS),
        ("hot loops", names::HOT_LOOPS),
        ("reconcile latency", "histogram_quantile"),
        ("time since last sync", names::LAST_SYNC),
        ("golden stream release", names::GOLDEN_STREAM),
        ("leader", names::LEADER),
        // What an SRE asks next: is it acting at all, is a hold past its limit, can it reach
        // EC2, are vSphere imports going through.
        ("stood down", names::STOOD_DOWN),
        ("holds past the limit", names::HOLD_EXCEEDED),
        ("EC2 availability", names::EC2_UNAVAILABLE_REGIONS),
        ("EC2 requests", names::EC2_REQUESTS),
        ("vSphere imports", names::VSPHERE_IMPORTS),
        ("vSphere import progress", names::VSPHERE_IMPORT_PROGRESS),
    ] {
        assert!(text.contains(needle), "no panel for {what} ({needle})");
    }
}

/// "Ready replicas" is green only when every desired replica is ready: its value is the share
/// of the Deployment's desired replicas that are ready, and green starts at all of them.
#[test]
fn ready_replicas_are_green_only_when_all_are_ready() {
    let dashboard: Value = serde_json::from_str(&read(DASHBOARD)).expect("the dashboard is JSON");
    let panel = dashboard["panels"]
        .as_array()
        .expect("panels")
        .iter()
        .find(|p| str_of(&p["title"]).starts_with("Ready replicas"))
        .expect("a Ready replicas panel");
    let expr = str_of(&panel["targets"][0]["expr"]);
    assert!(
        expr.contains(names::READY)
            && expr.contains("/ (sum(kube_deployment_spec_replicas{")
            && expr.contains("deployment=\"boot-image-controller\""),
        "ready replicas over the Deployment's desired replicas: {expr}"
    );
    let defaults = &panel["fieldConfig"]["defaults"];
    assert_eq!(defaults["unit"], "percentunit");
    let steps = defaults["thresholds"]["steps"].as_array().expect("steps");
    let green: Vec<&Value> = steps.iter().filter(|s| s["color"] == "green").collect();
    assert_eq!(green.len(), 1, "{steps:?}");
    assert_eq!(green[0]["value"], 1, "green from 100% only: {steps:?}");
    assert!(
        steps
            .iter()
            .all(|s| s["value"].as_f64().is_none_or(|v| v <= 1.0)),
        "{steps:?}"
    );
    assert_eq!(
        steps[0]["color"], "red",
        "no replica ready is red: {steps:?}"
    );
}
