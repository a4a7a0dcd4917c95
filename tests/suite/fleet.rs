//! A fleet seen from the hub (docs/fleet.md): three clusters, each with its own controller in
//! another state (acting, stood down, a failed boot), each scraped by its own Prometheus that
//! evaluates the controller's per-cluster recording rules
//! (manifests/monitoring/prometheusrule-fleet.yaml), as user-workload monitoring does; a hub
//! Prometheus takes from each exactly the series the allow-list names
//! (deploy/acm/observability/allowlist.yaml), through `/federate` with a `cluster` label per
//! cluster, as ACM's metrics collector does; then the hub dashboard's queries, read through the
//! query API, give the rows a person reads, and the hub's rules fire for the right clusters.
//!
//! The clusters are three control planes: the harness's and two private ones
//! (`PrivateCluster`, hack/local-cluster.sh with a directory of their own), each with its
//! MachineSets, MachineConfiguration, Infrastructure and ClusterVersion and its own controller
//! process. The hub's store is Prometheus, not Thanos: docs/fleet.md says why. Without a
//! Prometheus server the test prints `SKIPPED`, as tests/suite/prometheus.rs.

use crate::boot_evidence::{AMI_NOT_FOUND, create_machine, fail, upgraded_cluster, wait_moved};
use crate::prometheus::{Prometheus, prometheus_binary};
use crate::support;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};
use support::fixtures::*;
use support::private_cluster::PrivateCluster;
use support::{ControllerProcess, REPO, TestEnv, eventually};

const CONVERGE: Duration = Duration::from_secs(120);
/// ACM's default allow-list collects the platform (cluster_infrastructure_provider, from the
/// cluster version operator); a recording rule stands in for it on each cluster's Prometheus.
const DEFAULT_ALLOWLIST: [&str; 1] = ["cluster_infrastructure_provider"];

fn read(relative: &str) -> String {
    std::fs::read_to_string(Path::new(REPO).join(relative))
        .unwrap_or_else(|e| panic!("read {relative}: {e}"))
}

/// `data.<key>` of the ConfigMap in `file`, parsed as YAML.
fn config_map_data(file: &str, key: &str) -> Value {
    let map: Value = serde_saphyr::from_str(&read(file)).expect("YAML");
    let text = map["data"][key]
        .as_str()
        .unwrap_or_else(|| panic!("{file}: no {key}"));
    if key.ends_with(".json") {
        serde_json::from_str(text).expect("JSON")
    } else {
        serde_saphyr::from_str(text).expect("YAML")
    }
}

/// The metric names the allow-list sends from each cluster.
fn allowlist() -> Vec<String> {
    let list = config_map_data(
        "deploy/acm/observability/allowlist.yaml",
        "uwl_metrics_list.yaml",
    );
    let names = list["names"].as_array().expect("names");
    names
        .iter()
        .map(|n| n.as_str().unwrap().to_string())
        .collect()
}

/// (column, expr) of every query of the hub dashboard's table: the column a person reads, as the
/// panel's `organize` transformation names it (`Value #<refId>`, or the label the query keeps:
/// `release`, `type`).
fn dashboard_queries() -> Vec<(String, String)> {
    let dashboard = config_map_data(
        "deploy/acm/observability/dashboard.yaml",
        "boot-image-controller-fleet.json",
    );
    let mut queries = vec![];
    for panel in dashboard["panels"].as_array().expect("panels") {
        let organize = (panel["transformations"].as_array().into_iter().flatten())
            .find(|t| t["id"] == "organize")
            .map(|t| t["options"]["renameByName"].clone())
            .unwrap_or_default();
        for target in panel["targets"].as_array().into_iter().flatten() {
            let ref_id = target["refId"].as_str().unwrap();
            let key = match ref_id {
                "A" => "release".to_string(),
                "B" => "type".to_string(),
                _ => format!("Value #{ref_id}"),
            };
            let column = organize[&key]
                .as_str()
                .unwrap_or_else(|| panic!("no column {key}"));
            queries.push((
                column.to_string(),
                target["expr"].as_str().unwrap().to_string(),
            ));
        }
    }
    queries
}

/// The hub's rule groups (`custom_rules.yaml` of thanos-ruler-custom-rules).
fn hub_rules() -> Value {
    config_map_data(
        "deploy/acm/observability/thanos-ruler-custom-rules.yaml",
        "custom_rules.yaml",
    )
}

/// Metric names in a PromQL expression: the identifiers left once label matchers (`{...}`)
/// and grouping clauses (`by (...)`) are taken out, that are neither a function (followed by
/// `(`) nor an operator keyword. Good enough for the hub's queries, which a test below reads.
fn metric_names(expr: &str) -> BTreeSet<String> {
    const KEYWORDS: [&str; 6] = ["by", "without", "on", "or", "and", "unless"];
    let mut text = String::new();
    let mut rest = expr;
    while let Some(at) = rest.find(['{', '(']) {
        let (head, tail) = rest.split_at(at);
        let keyword = ["by", "without", "on"]
            .into_iter()
            .find(|k| head.trim_end().ends_with(k));
        let grouping = keyword.is_some();
        // The aggregation before `by (...)` then reads as a call.
        text.push_str(
            head.trim_end()
                .trim_end_matches(keyword.unwrap_or_default()),
        );
        let close = if tail.starts_with('{') { '}' } else { ')' };
        if tail.starts_with('{') || grouping {
            rest = &tail[tail.find(close).expect("closed") + 1..];
        } else {
            text.push('(');
            rest = &tail[1..];
        }
    }
    text.push_str(rest);
    let mut names = BTreeSet::new();
    let mut rest = text.as_str();
    while let Some(at) = rest.find(|c: char| c.is_ascii_alphabetic()) {
        let tail = &rest[at..];
        let len = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
            .unwrap_or(tail.len());
        let (name, after) = tail.split_at(len);
        let is_call = after.trim_start().starts_with('(');
        let in_number = rest[..at].ends_with(|c: char| c.is_ascii_digit() || c == '.');
        if !is_call && !in_number && !KEYWORDS.contains(&name) {
            names.insert(name.to_string());
        }
        rest = after;
    }
    names
}

#[test]
fn metric_names_are_read_from_the_hubs_queries() {
    assert_eq!(
        metric_names("max by (cluster, release) (boot_image_controller:info:max) * 1000"),
        BTreeSet::from(["boot_image_controller:info:max".to_string()])
    );
    assert_eq!(
        metric_names("max by (cluster, type) (cluster_infrastructure_provider{type=\"AWS\"}) > 0"),
        BTreeSet::from(["cluster_infrastructure_provider".to_string()])
    );
}

/// The allow-list names every series the hub's dashboard and rules read (or ACM's default list
/// does), and nothing else: each name is read by a query or a rule.
#[test]
fn the_allowlist_names_exactly_what_the_hub_reads() {
    let mut used = BTreeSet::new();
    for (_, expr) in dashboard_queries() {
        used.extend(metric_names(&expr));
    }
    for group in hub_rules()["groups"].as_array().expect("groups") {
        for rule in group["rules"].as_array().expect("rules") {
            used.extend(metric_names(rule["expr"].as_str().unwrap()));
        }
    }
    let mut sent: BTreeSet<String> = allowlist().into_iter().collect();
    sent.extend(DEFAULT_ALLOWLIST.map(String::from));
    assert_eq!(used, sent, "read by the hub vs. sent to it");
    // ... and every name sent is one the clusters record.
    let recorded = read("manifests/monitoring/prometheusrule-fleet.yaml");
    for name in allowlist() {
        assert!(
            recorded.contains(&format!("record: {name}\n")),
            "{name} is not recorded"
        );
    }
}

/// Every hub alert names its cluster and links the runbook of the alert the cluster raises.
#[test]
fn every_hub_alert_names_its_cluster_and_links_a_runbook() {
    let links = read("manifests/monitoring/runbook-links.yaml");
    let base = links
        .lines()
        .find_map(|l| l.trim().strip_prefix("docsBaseURL: "))
        .expect("docsBaseURL");
    let mut alerts = 0;
    for group in hub_rules()["groups"].as_array().expect("groups") {
        for rule in group["rules"].as_array().expect("rules") {
            let name = rule["alert"].as_str().expect("only alerts on the hub");
            alerts += 1;
            let url = rule["annotations"]["runbook_url"].as_str().unwrap();
            let runbook = url
                .strip_prefix(&format!("{base}/"))
                .unwrap_or_else(|| panic!("{name}: {url} is not under {base}"));
            assert!(
                Path::new(REPO).join(runbook).is_file(),
                "{name}: no {runbook}"
            );
            assert!(
                rule["expr"].as_str().unwrap().contains("by (cluster)"),
                "{name}"
            );
            for text in ["summary", "description"] {
                let text = rule["annotations"][text].as_str().unwrap();
                assert!(text.contains("{{ $labels.cluster }}"), "{name}: {text}");
            }
        }
    }
    assert!(alerts >= 3);
}

/// A rules file with every `for` shortened, as JSON (which Prometheus reads as YAML).
fn shortened(mut groups: Value) -> String {
    for group in groups["groups"].as_array_mut().expect("groups") {
        for rule in group["rules"].as_array_mut().expect("rules") {
            if rule.get("for").is_some() {
                rule["for"] = json!("1s");
            }
        }
    }
    groups.to_string()
}

/// One cluster's user-workload Prometheus: scrapes its controller and records the aggregates.
fn cluster_prometheus(
    binary: &Path,
    name: &str,
    env: &TestEnv,
    c: &ControllerProcess,
) -> Prometheus {
    let out = std::process::Command::new(Path::new(REPO).join("hack/promtool/extract-rules.sh"))
        .arg(Path::new(REPO).join("manifests/monitoring/prometheusrule-fleet.yaml"))
        .output()
        .expect("run extract-rules.sh");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut rules: Value = serde_saphyr::from_str(&String::from_utf8(out.stdout).unwrap()).unwrap();
    rules["groups"].as_array_mut().unwrap().push(json!({
        "name": "stand-in-for-the-platform-prometheus",
        "rules": [{"record": "cluster_infrastructure_provider",
                   "expr": "label_replace(vector(1), \"type\", \"AWS\", \"\", \"\")"}]
    }));
    let scrape = format!(
        "  - job_name: boot-image-controller\n    static_configs:\n      \
         - targets: ['127.0.0.1:{}']\n        labels:\n          namespace: {}\n",
        c.port, env.ns
    );
    Prometheus::start_with(binary, &scrape, name, &rules.to_string(), |_| {})
}

/// The hub: federates the allow-listed series of every cluster, adding its `cluster` label.
fn hub_prometheus(binary: &Path, clusters: &[(&str, &Prometheus)]) -> Prometheus {
    let mut matches: Vec<String> = allowlist();
    matches.extend(DEFAULT_ALLOWLIST.map(String::from));
    let params: String = matches
        .iter()
        .map(|m| format!("        - '{{__name__=\"{m}\"}}'\n"))
        .collect();
    let targets: String = clusters
        .iter()
        .map(|(name, p)| {
            format!(
                "      - targets: ['127.0.0.1:{}']\n        labels:\n          cluster: {name}\n",
                p.port
            )
        })
        .collect();
    let scrape = format!(
        "  - job_name: federate\n    honor_labels: true\n    metrics_path: /federate\n    \
         params:\n      'match[]':\n{params}    static_configs:\n{targets}"
    );
    Prometheus::start_with(binary, &scrape, "hub", &shortened(hub_rules()), |_| {})
}

/// The dashboard's table as a person reads it: cluster -> column -> cell, with the value
/// mappings of the panel (Managing) and the last change as its age.
async fn rows(hub: &Prometheus) -> BTreeMap<String, BTreeMap<String, String>> {
    let mut rows: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    for (column, expr) in dashboard_queries() {
        for sample in hub.query(&expr).await {
            let labels = &sample["metric"];
            let cluster = labels["cluster"].as_str().unwrap_or("?").to_string();
            let value = sample["value"][1].as_str().unwrap_or_default().to_string();
            let cell = match column.as_str() {
                "Release" => labels["release"].as_str().unwrap_or_default().to_string(),
                "Platform" => labels["type"].as_str().unwrap_or_default().to_string(),
                "Managing" if value == "1" => "stood down".to_string(),
                "Managing" => "managing".to_string(),
                "Last change" => {
                    let millis: f64 = value.parse().unwrap_or_default();
                    let age = now - millis / 1000.0;
                    (if (0.0..600.0).contains(&age) {
                        "minutes ago"
                    } else {
                        "long ago"
                    })
                    .into()
                }
                _ => value,
            };
            rows.entry(cluster)
                .or_default()
                .insert(column.clone(), cell);
        }
    }
    rows
}

fn row(cells: &[(&str, &str)]) -> BTreeMap<String, String> {
    cells
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[tokio::test]
async fn the_hub_dashboard_and_rules_read_three_clusters_in_three_states() {
    let Some(binary) = prometheus_binary() else {
        return;
    };

    // Acting: three MachineSets on 4.20's AMI, moved to 4.21's; a fourth names an architecture
    // that does not exist and stays in error. More MachineSets than the others: the hub must get
    // as many series from it all the same.
    let acting = TestEnv::new("fleet-acting").await;
    upgraded_cluster(&acting).await;
    for name in ["worker-b", "worker-c"] {
        acting.apply(machine_set(&acting.ns, name).build()).await;
    }
    let broken = machine_set(&acting.ns, "infra-a").arch("sparc64").build();
    acting.apply(broken).await;
    // Stood down, on a control plane of its own: --report-only, beside two outdated MachineSets
    // it leaves as they are.
    let (plane_b, plane_c) = (
        PrivateCluster::up("fleet-b").await,
        PrivateCluster::up("fleet-c").await,
    );
    let stood_down = plane_b.env("fleet-stood-down").await;
    upgraded_cluster(&stood_down).await;
    (stood_down.apply(machine_set(&stood_down.ns, "worker-b").build())).await;
    // A failed boot, on a third control plane: worker-a moved, then a Machine from it failed on
    // the new image.
    let failed = plane_c.env("fleet-failed-boot").await;
    upgraded_cluster(&failed).await;
    tokio::time::sleep(Duration::from_millis(1100)).await;

    let acting_controller = acting.controller(&["--leader-elect"]);
    let on = |env: &TestEnv, plane: &PrivateCluster, extra: &[&str]| {
        let mut flags = env.controller_flags_with(&plane.kubeconfig);
        flags.extend(extra.iter().map(|f| f.to_string()));
        ControllerProcess::spawn(&env.ns, &flags)
    };
    let stood_down_controller = on(&stood_down, &plane_b, &["--leader-elect", "--report-only"]);
    let failed_controller = on(&failed, &plane_c, &["--leader-elect"]);
    for c in [
        &acting_controller,
        &stood_down_controller,
        &failed_controller,
    ] {
        c.wait_ready().await;
    }
    wait_moved(&failed).await;
    create_machine(&failed, "worker-a-x1").await;
    fail(&failed, "worker-a-x1", AMI_NOT_FOUND).await;

    let prometheus_a = cluster_prometheus(&binary, "fleet-a", &acting, &acting_controller);
    let prometheus_b = cluster_prometheus(&binary, "fleet-b", &stood_down, &stood_down_controller);
    let prometheus_c = cluster_prometheus(&binary, "fleet-c", &failed, &failed_controller);
    let hub = hub_prometheus(
        &binary,
        &[
            ("cluster-a", &prometheus_a),
            ("cluster-b", &prometheus_b),
            ("cluster-c", &prometheus_c),
        ],
    );
    for p in [&prometheus_a, &prometheus_b, &prometheus_c, &hub] {
        p.wait_ready().await;
    }

    let expected = BTreeMap::from([
        (
            "cluster-a".to_string(),
            row(&[
                ("Release", "4.21.0"),
                ("Platform", "AWS"),
                ("Managing", "managing"),
                ("Outdated", "0"),
                ("Up to date", "3"),
                ("Skipped", "0"),
                ("In error", "1"),
                ("Boot proven", "0"),
                ("Boot failed", "0"),
                ("Last change", "minutes ago"),
            ]),
        ),
        (
            "cluster-b".to_string(),
            row(&[
                ("Release", "4.21.0"),
                ("Platform", "AWS"),
                ("Managing", "stood down"),
                ("Outdated", "0"),
                ("Up to date", "0"),
                ("Skipped", "2"),
                ("In error", "0"),
                ("Boot proven", "0"),
                ("Boot failed", "0"),
            ]),
        ),
        (
            "cluster-c".to_string(),
            row(&[
                ("Release", "4.21.0"),
                ("Platform", "AWS"),
                ("Managing", "managing"),
                ("Outdated", "0"),
                ("Up to date", "1"),
                ("Skipped", "0"),
                ("In error", "0"),
                ("Boot proven", "0"),
                ("Boot failed", "1"),
                ("Last change", "minutes ago"),
            ]),
        ),
    ]);
    let read = eventually(CONVERGE, || async {
        let rows = rows(&hub).await;
        (rows == expected).then_some(())
    })
    .await;
    assert!(
        read.is_some(),
        "the hub's table reads\n{:#?}\nnot\n{expected:#?}\nhub targets: {:?}\nhub log:\n{}",
        rows(&hub).await,
        hub.api("/api/v1/targets").await,
        hub.logs()
    );

    // The hub's alerts: the failed boot on cluster-c, the error on cluster-a, nothing else.
    let firing = eventually(CONVERGE, || async {
        let alerts: BTreeSet<(String, String)> = (hub.alerts().await.iter())
            .filter(|a| a["state"] == "firing")
            .map(|a| {
                let label = |k: &str| a["labels"][k].as_str().unwrap_or_default().to_string();
                (label("alertname"), label("cluster"))
            })
            .collect();
        let expected = BTreeSet::from([
            ("BootImageFleetFailedToBoot".into(), "cluster-c".into()),
            ("BootImageFleetUpdateError".into(), "cluster-a".into()),
        ]);
        (alerts == expected).then_some(())
    })
    .await;
    assert!(firing.is_some(), "hub alerts: {:?}", hub.alerts().await);

    // What each cluster sends: the same series whatever its MachineSet count (cluster-a has
    // four, cluster-c one), none per MachineSet, under 50 (docs/fleet.md, "Series per
    // cluster"). cluster-b has changed nothing yet, so it has no last-change series.
    let sent = |cluster: &str| {
        let hub = &hub;
        let query = format!(
            "count({{__name__=~\"boot_image_controller:.*|cluster_infrastructure_provider\",cluster=\"{cluster}\"}})"
        );
        async move {
            let result = hub.query(&query).await;
            let value = result
                .first()
                .map(|r| r["value"][1].as_str().unwrap_or("0").to_string());
            value.unwrap_or_default().parse::<u32>().unwrap_or(0)
        }
    };
    let per_cluster = [
        sent("cluster-a").await,
        sent("cluster-b").await,
        sent("cluster-c").await,
    ];
    eprintln!("series per cluster on the hub (cluster-a, -b, -c): {per_cluster:?}");
    assert_eq!(per_cluster[0], per_cluster[2], "{per_cluster:?}");
    assert_eq!(per_cluster[1], per_cluster[0] - 1, "{per_cluster:?}");
    assert!(per_cluster[0] < 50, "{per_cluster:?}");
    let per_machine_set = hub.query("count({machineset!=\"\"})").await;
    assert!(per_machine_set.is_empty(), "{per_machine_set:?}");
}
