//! The human rendering of a plan: what the cluster is, whether anything is blocked, one row per
//! machine resource, and the counts.

use std::fmt::Write as _;

use crate::golden_stream::GoldenConfig;
use crate::machine_kind::MachineKind;
use crate::plan::{Action, ClusterSnapshot, Decision, Plan};
use crate::platform::display_image as display;
use crate::quoted::printable;

/// Messages are wrapped to the table's width, within these bounds, so they read as part of it.
const MESSAGE_WIDTH: std::ops::RangeInclusive<usize> = 80..=120;
const MESSAGE_INDENT: &str = "    ";
const GAP: &str = "  ";

/// What the header says about the cluster, read from the snapshot rather than the planner so
/// that it is shown even when a gate blocks the plan.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ClusterFacts {
    pub platform: Option<String>,
    /// `history[0]` of the ClusterVersion: version and state.
    pub cluster_release: Option<(String, String)>,
    /// The golden stream's name and release, or why there is none; `None`: missing.
    pub golden: Option<String>,
}

impl ClusterFacts {
    pub fn of(cluster: &ClusterSnapshot) -> Self {
        let platform = cluster
            .infrastructure
            .as_ref()
            .and_then(|i| i.status.as_ref())
            .and_then(|s| s.platform_status.as_ref())
            .map(|p| p.type_.clone())
            .filter(|t| !t.is_empty());
        let cluster_release = cluster
            .cluster_version
            .as_ref()
            .and_then(|cv| cv.status.as_ref())
            .and_then(|s| s.history.first())
            .map(|h| (h.version.clone(), h.state.clone()));
        let golden =
            (cluster.golden.as_ref().map(GoldenConfig::from_config_map)).map(|read| match read {
                Err(_) => "unreadable".into(),
                Ok(golden) => match golden.release_version {
                    Some(release) => format!("{} (release {release})", golden.stream.stream),
                    None => golden.stream.stream,
                },
            });
        ClusterFacts {
            platform,
            cluster_release,
            golden,
        }
    }

    fn header(&self) -> String {
        let platform = self.platform.as_deref().unwrap_or("unknown");
        let mut line = format!("Platform: {platform}");
        if let Some((version, state)) = &self.cluster_release {
            let _ = write!(line, "   Cluster: {version} ({state})");
        }
        let golden = self.golden.as_deref().unwrap_or("missing");
        let _ = write!(line, "   Golden stream: {golden}");
        line
    }
}

pub fn render(plan: &Plan, facts: &ClusterFacts) -> String {
    let mut out = printable(&facts.header()).into_owned();
    out.push('\n');
    if let Some(blocked) = &plan.blocked {
        let _ = writeln!(
            out,
            "BLOCKED: {}: {}",
            blocked.reason,
            printable(&blocked.message)
        );
    }
    if !plan.selection.is_empty() {
        let modes: Vec<String> = plan
            .selection
            .iter()
            .map(|(resource, mode)| format!("{resource} {mode}"))
            .collect();
        let _ = writeln!(out, "Selection: {}", modes.join(", "));
    }
    for kind in MachineKind::ALL {
        let (title, entries) = (kind.plural_title(), plan.of(kind));
        // MachineSets always get a section; other kinds only where the manifests have them.
        if entries.is_empty() && kind != MachineKind::MachineSet {
            continue;
        }
        let _ = writeln!(out, "\n{title}:");
        if entries.is_empty() {
            out.push_str("  none found in the manifests\n");
            continue;
        }
        render_rows(&mut out, entries, plan);
    }
    out.push('\n');
    out.push_str(&summary(plan));
    out.push('\n');
    out
}

fn render_rows(out: &mut String, entries: &[Decision], plan: &Plan) {
    let header = [
        "NAMESPACE/NAME",
        "ACTION",
        "REASON",
        "BOOT IMAGE",
        "STUB SECRET",
    ]
    .map(String::from);
    let rows = entries.iter().map(|e| {
        [
            format!("{}/{}", e.namespace, e.name),
            e.action.as_str().to_string(),
            e.reason.to_string(),
            boot_image(e),
            stub_secret(e),
        ]
        .map(|cell| printable(&cell).into_owned())
    });
    let rows: Vec<Vec<String>> = std::iter::once(header).chain(rows).map(Vec::from).collect();
    let table = aligned(&rows);
    // The row with the widest last cell is as wide as the table.
    let table_width = table.lines().map(|l| l.chars().count()).max().unwrap_or(0);
    let message_width = table_width.clamp(*MESSAGE_WIDTH.start(), *MESSAGE_WIDTH.end());
    let mut lines = table.lines();
    let _ = writeln!(out, "{}", lines.next().unwrap_or_default());
    for (entry, row) in entries.iter().zip(lines) {
        let _ = writeln!(out, "{row}");
        if let Some(message) = message(entry, plan) {
            for line in wrap(&printable(message), message_width - MESSAGE_INDENT.len()) {
                let _ = writeln!(out, "{MESSAGE_INDENT}{line}");
            }
        }
    }
}

/// Rows (of any length) as columns padded to their widest cell, two spaces apart.
pub(super) fn aligned(rows: &[Vec<String>]) -> String {
    let mut widths = Vec::new();
    for row in rows {
        widths.resize(widths.len().max(row.len()), 0);
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    for row in rows {
        let mut line = String::new();
        for (cell, width) in row.iter().zip(&widths) {
            let _ = write!(line, "{cell:<width$}{GAP}");
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

fn boot_image(e: &Decision) -> String {
    let current = display(e.boot_image.current.as_ref());
    match &e.boot_image.target {
        Some(target) => format!("{current} -> {}", display(Some(target))),
        None => current,
    }
}

fn stub_secret(e: &Decision) -> String {
    let name = match (&e.user_data_secret.current, &e.user_data_secret.target) {
        (Some(current), Some(target)) => format!("{current} -> {target}"),
        (Some(current), None) => current.clone(),
        (None, _) => "-".into(),
    };
    match &e.stub_upgrade {
        Some(upgrade) => format!(
            "{name} (Ignition {} -> {})",
            upgrade.from_version, upgrade.to_version
        ),
        None => name,
    }
}

/// The message worth a line of its own: why something is skipped or wrong. Update and UpToDate
/// messages only repeat the columns, and a blocked plan's message is already in its header
/// (`-o json` has every message).
fn message<'a>(e: &'a Decision, plan: &Plan) -> Option<&'a str> {
    if matches!(e.action, Action::Update | Action::UpToDate) || e.message.is_empty() {
        return None;
    }
    let repeats_blocked = plan
        .blocked
        .as_ref()
        .is_some_and(|b| b.reason == e.reason && b.message == e.message);
    (!repeats_blocked).then_some(e.message.as_str())
}

/// Greedy word wrap; a word longer than the width (a resource ID) keeps a line of its own.
fn wrap(text: &str, width: usize) -> Vec<String> {
    let mut lines = Vec::new();
    let mut line = String::new();
    for word in text.split_whitespace() {
        if !line.is_empty() && line.chars().count() + 1 + word.chars().count() > width {
            lines.push(std::mem::take(&mut line));
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(word);
    }
    if !line.is_empty() {
        lines.push(line);
    }
    lines
}

fn summary(plan: &Plan) -> String {
    let counts: Vec<String> = Action::ALL
        .iter()
        .map(|action| {
            let n = plan
                .decisions
                .iter()
                .filter(|e| e.action == *action)
                .count();
            format!("{n} {}", action.as_str())
        })
        .collect();
    let per_kind: Vec<String> = MachineKind::ALL
        .into_iter()
        .filter(|kind| *kind == MachineKind::MachineSet || !plan.of(*kind).is_empty())
        .map(|kind| format!("{} {}", plan.of(kind).len(), kind.plural_title()))
        .collect();
    let mut line = format!("Summary: {} ({})", counts.join(", "), per_kind.join(", "));
    if plan.blocked.is_some() {
        line.push_str("; blocked: nothing would be written");
    }
    line
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::plan::{Blocked, Values};
    use crate::reason::Reason;

    fn entry(name: &str, action: Action, reason: Reason, message: &str) -> Decision {
        let mut decision = Decision::new(
            MachineKind::MachineSet,
            "openshift-machine-api",
            name,
            action,
            reason,
            message.into(),
        );
        decision.boot_image = Values {
            current: Some(json!("ami-09d23adad19cdb25c")),
            target: None,
        };
        decision.user_data_secret = Values {
            current: Some("worker-user-data".into()),
            target: None,
        };
        decision
    }

    fn facts() -> ClusterFacts {
        ClusterFacts {
            platform: Some("AWS".into()),
            cluster_release: Some(("4.21.0".into(), "Completed".into())),
            golden: Some("rhcos-4.21 (release 4.21.0)".into()),
        }
    }

    #[test]
    fn control_characters_from_the_cluster_reach_the_terminal_escaped() {
        let mut hostile = entry(
            "x\u{1b}]0;owned\u{7}",
            Action::Skip,
            Reason::CustomImage,
            "custom image\r\nopenshift-machine-api/fake  Update  BootImageOutdated",
        );
        hostile.boot_image.current = Some(json!("ami-1\u{1b}[2J\u{202e}"));
        let plan = Plan {
            decisions: vec![hostile],
            ..Plan::default()
        };
        let text = render(&plan, &facts());
        assert!(
            !text.chars().any(|c| c != '\n' && c.is_control()),
            "{text:?}"
        );
        assert!(!text.contains('\u{202e}'), "{text:?}");
        assert!(text.contains("x\\u{1b}]0;owned\\u{7}"), "{text}");
        assert!(text.contains("ami-1\\u{1b}[2J\\u{202e}"), "{text}");
        assert!(
            !text
                .lines()
                .any(|l| l.starts_with("openshift-machine-api/fake")),
            "a message forged a row:\n{text}"
        );
    }

    #[test]
    fn rows_are_aligned_and_show_changes_as_arrows() {
        let mut update = entry("a", Action::Update, Reason::BootImageOutdated, "repeats");
        update.boot_image.target = Some(json!("ami-01095d1967818437c"));
        update.user_data_secret.target = Some("worker-user-data-managed".into());
        let plan = Plan {
            decisions: vec![
                update,
                entry("longer-name", Action::UpToDate, Reason::UpToDate, "current"),
            ],
            ..Plan::default()
        };
        let text = render(&plan, &facts());
        assert!(
            text.starts_with(
                "Platform: AWS   Cluster: 4.21.0 (Completed)   Golden stream: rhcos-4.21 \
                 (release 4.21.0)\n"
            ),
            "{text}"
        );
        assert!(text.contains(
            "ami-09d23adad19cdb25c -> ami-01095d1967818437c  worker-user-data -> \
             worker-user-data-managed"
        ));
        let column = |line_start: &str| {
            let line = text.lines().find(|l| l.starts_with(line_start)).unwrap();
            line.find("Up").or_else(|| line.find("ACTION")).unwrap()
        };
        assert_eq!(
            column("NAMESPACE/NAME"),
            column("openshift-machine-api/longer")
        );
        assert!(
            !text.contains("repeats"),
            "Update messages repeat the columns"
        );
        assert!(text.ends_with("Summary: 1 Update, 1 UpToDate, 0 Skip, 0 Error (2 MachineSets)\n"));
    }

    #[test]
    fn skip_messages_are_wrapped_under_their_row_and_blocks_are_stated_once() {
        let long = "word ".repeat(60);
        let blocked = Blocked {
            reason: Reason::ClusterUpgrading,
            message: "the cluster is updating to 4.21.1 (Partial)".into(),
        };
        let plan = Plan {
            blocked: Some(blocked.clone()),
            decisions: vec![
                entry("custom", Action::Skip, Reason::CustomImage, &long),
                entry("held", Action::Skip, blocked.reason, &blocked.message),
            ],
            ..Plan::default()
        };
        let text = render(&plan, &ClusterFacts::default());
        assert!(text.starts_with("Platform: unknown   Golden stream: missing\n"));
        assert_eq!(text.matches("the cluster is updating").count(), 1, "{text}");
        assert!(text.contains("BLOCKED: ClusterUpgrading: the cluster is updating"));
        let wrapped: Vec<_> = text.lines().filter(|l| l.starts_with("    word")).collect();
        assert!(wrapped.len() >= 3, "{text}");
        assert!(wrapped.iter().all(|l| l.len() <= *MESSAGE_WIDTH.end()));
        assert!(text.contains("; blocked: nothing would be written"));
    }

    #[test]
    fn control_plane_machine_sets_get_their_own_section_only_when_present() {
        let mut plan = Plan::default();
        let text = render(&plan, &facts());
        assert!(text.contains("MachineSets:\n  none found in the manifests\n"));
        assert!(!text.contains("ControlPlaneMachineSets:"));
        let mut control_plane = entry("cluster", Action::UpToDate, Reason::UpToDate, "");
        control_plane.kind = MachineKind::ControlPlaneMachineSet;
        plan.decisions = vec![control_plane];
        let text = render(&plan, &facts());
        assert!(text.contains("\nControlPlaneMachineSets:\nNAMESPACE/NAME"));
        assert!(text.contains("(0 MachineSets, 1 ControlPlaneMachineSets)"));
    }
}
