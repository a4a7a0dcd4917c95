//! Every alert links a runbook that exists and answers what an on-call engineer asks: what it
//! means, what breaks, how to find the cause, how to fix it; and every reason has its entry in
//! the README's troubleshooting table. (That every alert carries a
//! `namespace` label is checked by hack/check-rules.sh on promtool's evaluation of the rules.)

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
        assert_eq!(url, format!("docs/runbooks/{name}.md"), "{name}");
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

/// The README's troubleshooting table has an entry for every reason the controller reports
/// (conditions, Events, `plan`, metric labels).
#[test]
fn every_reason_has_a_troubleshooting_entry() {
    let readme = std::fs::read_to_string(repo().join("README.md")).expect("README.md");
    let start = readme.find("### Reasons").expect("a Reasons section");
    let section = &readme[start..];
    let section = &section[..section[4..].find("\n## ").map_or(section.len(), |e| e + 4)];
    let missing: Vec<&str> = boot_image_controller::reason::Reason::ALL
        .iter()
        .map(|r| r.as_str())
        .filter(|name| {
            !section
                .lines()
                .any(|l| l.starts_with('|') && l.contains(&format!("`{name}`")))
        })
        .collect();
    assert!(missing.is_empty(), "README has no row for: {missing:?}");
}
