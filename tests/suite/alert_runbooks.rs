//! Every alert links a runbook that exists and answers what an on-call engineer asks: what it
//! means, what breaks, how to find the cause, how to fix it; the troubleshooting page lists
//! every alert with its runbook and every reason the controller reports, and nothing else.
//! (That every alert carries a `namespace` label is checked by hack/check-rules.sh on promtool's
//! evaluation of the rules; that the rendered `runbook_url`s are absolute, by `docs::`.)

use std::path::Path;

use serde_json::Value;

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn alerts() -> Vec<Value> {
    let text = std::fs::read_to_string(repo().join("manifests/monitoring/prometheusrule.yaml"))
        .expect("the PrometheusRule");
    let rule: Value = serde_saphyr::from_str(&text).expect("YAML");
    let alerts: Vec<Value> = rule["spec"]["groups"]
        .as_array()
        .expect("groups")
        .iter()
        .flat_map(|g| g["rules"].as_array().cloned().unwrap_or_default())
        .filter(|r| r["alert"].is_string())
        .collect();
    assert!(!alerts.is_empty(), "no alerts found");
    alerts
}

#[test]
fn every_alert_links_its_own_runbook() {
    for alert in alerts() {
        let name = alert["alert"].as_str().unwrap();
        let url = alert["annotations"]["runbook_url"]
            .as_str()
            .unwrap_or_else(|| panic!("{name} has no runbook_url"));
        // The base URL is set in one place of the kustomization (manifests/monitoring,
        // runbook-links.yaml), which replaces the part before "/docs/runbooks/".
        let path = format!("docs/runbooks/{name}.md");
        assert_eq!(url, format!("DOCS_BASE_URL/{path}"), "{name}");
        let url = path.as_str();
        let page = std::fs::read_to_string(repo().join(url))
            .unwrap_or_else(|e| panic!("{name}: {url}: {e}"));
        assert!(page.starts_with(&format!("# {name}\n")), "{url}: title");
        for section in ["## Meaning", "## Impact", "## Diagnosis", "## Mitigation"] {
            assert!(page.contains(section), "{url} has no {section}");
        }
        assert!(page.contains("```console"), "{url}: no diagnosis commands");
    }
}

#[test]
fn every_runbook_belongs_to_an_alert() {
    let names: Vec<String> = alerts()
        .iter()
        .map(|a| a["alert"].as_str().unwrap().to_string())
        .collect();
    for entry in std::fs::read_dir(repo().join("docs/runbooks")).expect("docs/runbooks") {
        let file = entry.unwrap().file_name().to_string_lossy().into_owned();
        let alert = file.strip_suffix(".md").unwrap_or(&file);
        assert!(
            names.iter().any(|n| n == alert),
            "docs/runbooks/{file} is for no alert"
        );
    }
}

/// The rows of a table in a section of docs/troubleshooting.md: the names in backquotes of each
/// row's first cell.
fn troubleshooting_rows(heading: &str) -> Vec<String> {
    let page = std::fs::read_to_string(repo().join("docs/troubleshooting.md"))
        .expect("docs/troubleshooting.md");
    let start = page
        .find(&format!("\n{heading}\n"))
        .unwrap_or_else(|| panic!("docs/troubleshooting.md has no {heading}"));
    let section = &page[start + heading.len() + 2..];
    let section = &section[..section.find("\n## ").unwrap_or(section.len())];
    section
        .lines()
        .filter(|l| l.starts_with("| ") && !l.starts_with("|---"))
        .skip(1) // the header
        .flat_map(|row| {
            let first = row.trim_start_matches('|').split('|').next().unwrap_or("");
            first
                .split('`')
                .skip(1)
                .step_by(2)
                .map(str::to_string)
                .collect::<Vec<_>>()
        })
        .collect()
}

/// docs/troubleshooting.md has an entry for every reason the controller reports (conditions,
/// Events, `plan`, metric labels), and lists no reason that does not exist.
#[test]
fn every_reason_has_a_troubleshooting_entry_and_every_entry_is_a_reason() {
    let listed = troubleshooting_rows("## Reasons");
    let reasons: Vec<&str> = boot_image_controller::reason::Reason::ALL
        .iter()
        .map(|r| r.as_str())
        .collect();
    let missing: Vec<&&str> = reasons
        .iter()
        .filter(|r| !listed.iter().any(|l| l == *r))
        .collect();
    assert!(
        missing.is_empty(),
        "docs/troubleshooting.md has no row for: {missing:?}"
    );
    let unknown: Vec<&String> = listed
        .iter()
        .filter(|l| !reasons.contains(&l.as_str()))
        .collect();
    assert!(
        unknown.is_empty(),
        "docs/troubleshooting.md lists reasons the controller does not have: {unknown:?}"
    );
}

/// docs/troubleshooting.md lists every alert, linked to its runbook, and no other.
#[test]
fn troubleshooting_lists_every_alert_and_no_other() {
    let mut alerts: Vec<String> = alerts()
        .iter()
        .map(|a| a["alert"].as_str().unwrap().to_string())
        .collect();
    alerts.sort();
    let mut listed = troubleshooting_rows("## Alerts");
    listed.sort();
    assert_eq!(listed, alerts, "the alerts of docs/troubleshooting.md");
    let page = std::fs::read_to_string(repo().join("docs/troubleshooting.md")).unwrap();
    for alert in &alerts {
        assert!(
            page.contains(&format!("](runbooks/{alert}.md)")),
            "docs/troubleshooting.md does not link the runbook of {alert}"
        );
    }
}
