//! The docs stay true: every flag of every command is on docs/configuration.md and nothing
//! else is; every relative link of README.md and docs/ reaches a file and heading that exist;
//! the demo's transcript has the demo's steps; the README stays short; the install
//! overlay the docs show renders with the image it names and absolute runbook links; the
//! install docs' RBAC table is the manifests' rules; and the line budgets of
//! docs/architecture.md are what hack/count-lines.sh counts.
//!
//! Pure file reads, no cluster (the overlay needs `kubectl kustomize`, else it skips).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use boot_image_controller::cli::Cli;
use clap::CommandFactory;

use crate::deploy::{Rendered, kubectl_or_skip, read, repo, str_of};

// ---------------------------------------------------------------------------------------------
// Flags

/// (flag, environment variable) of every visible flag of each visible command, as `--help`
/// prints them.
fn flags_of_the_binary() -> BTreeMap<String, BTreeMap<String, Option<String>>> {
    let mut commands = BTreeMap::new();
    for sub in Cli::command().get_subcommands() {
        if sub.is_hide_set() || sub.get_name() == "help" {
            continue;
        }
        let flags: BTreeMap<String, Option<String>> = sub
            .get_arguments()
            .filter(|a| !a.is_hide_set() && !matches!(a.get_id().as_str(), "help" | "version"))
            .filter_map(|a| {
                let long = a.get_long()?;
                let env = a.get_env().map(|e| e.to_string_lossy().into_owned());
                Some((format!("--{long}"), env))
            })
            .collect();
        commands.insert(sub.get_name().to_string(), flags);
    }
    commands
}

/// (flag, environment variable) of every row of the flag tables of docs/configuration.md, by
/// the command whose `## <command>` section holds the table.
fn flags_of_the_docs() -> BTreeMap<String, BTreeMap<String, Option<String>>> {
    let page = read("docs/configuration.md");
    let mut commands: BTreeMap<String, BTreeMap<String, Option<String>>> = BTreeMap::new();
    let mut command = None;
    for line in page.lines() {
        if let Some(heading) = line.strip_prefix("## ") {
            command = Some(heading.trim().to_string());
            continue;
        }
        let (Some(command), Some(row)) = (&command, line.strip_prefix("| `--")) else {
            continue;
        };
        let cells: Vec<&str> = row.split('|').map(str::trim).collect();
        let flag = format!(
            "--{}",
            cells[0]
                .split(|c: char| c == '`' || c.is_whitespace())
                .next()
                .unwrap_or_default()
        );
        let env = cells
            .get(1)
            .map(|c| c.trim_matches('`'))
            .filter(|c| !c.is_empty())
            .map(str::to_string);
        let previous = commands
            .entry(command.clone())
            .or_default()
            .insert(flag.clone(), env);
        assert!(
            previous.is_none(),
            "docs/configuration.md lists {flag} twice under {command}"
        );
    }
    commands
}

#[test]
fn configuration_lists_every_flag_of_every_command_and_no_other() {
    let binary = flags_of_the_binary();
    let docs = flags_of_the_docs();
    let mut wrong = Vec::new();
    for (command, flags) in &binary {
        let documented = docs.get(command).cloned().unwrap_or_default();
        for (flag, env) in flags {
            match documented.get(flag) {
                None => wrong.push(format!("{command} {flag}: missing from the docs")),
                Some(documented_env) if documented_env != env => wrong.push(format!(
                    "{command} {flag}: environment variable {env:?} in --help, {documented_env:?} in the docs"
                )),
                Some(_) => {}
            }
        }
    }
    for (command, flags) in &docs {
        let known = binary.get(command);
        for flag in flags.keys() {
            if !known.is_some_and(|k| k.contains_key(flag)) {
                wrong.push(format!("{command} {flag}: documented, but not in --help"));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "docs/configuration.md and --help disagree:\n{}",
        wrong.join("\n")
    );
}

// ---------------------------------------------------------------------------------------------
// Links

/// README.md and every Markdown file under docs/.
fn pages() -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).expect("read docs/") {
            let path = entry.expect("dir entry").path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "md") {
                out.push(path);
            }
        }
    }
    let mut pages = vec![
        repo().join("README.md"),
        repo().join("CHANGELOG.md"),
        repo().join("manifests/README.md"),
    ];
    walk(&repo().join("docs"), &mut pages);
    pages.sort();
    pages
}

/// The text outside fenced code blocks and inline code, where Markdown links live.
fn prose(page: &str) -> String {
    let mut out = String::new();
    let mut fenced = false;
    for line in page.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if !fenced {
            // Drop inline code spans: `[x](y)` inside them is not a link.
            out.extend(line.split('`').step_by(2));
            out.push('\n');
        }
    }
    out
}

/// The targets of the inline links `[text](target)` of a page.
fn links(page: &str) -> Vec<String> {
    let text = prose(page);
    let mut out = Vec::new();
    let mut rest = text.as_str();
    while let Some(i) = rest.find("](") {
        rest = &rest[i + 2..];
        if let Some(end) = rest.find(')') {
            out.push(rest[..end].to_string());
            rest = &rest[end..];
        }
    }
    out
}

/// The anchors GitHub gives a page's headings: lower case, punctuation dropped, spaces as
/// hyphens, a repeated heading numbered `-1`, `-2`, ...
fn anchors(page: &str) -> BTreeSet<String> {
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut out = BTreeSet::new();
    let mut fenced = false;
    for line in page.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
        }
        if fenced || !line.starts_with('#') {
            continue;
        }
        let heading = line.trim_start_matches('#').trim();
        let slug: String = heading
            .chars()
            .filter_map(|c| match c {
                ' ' => Some('-'),
                c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c.to_ascii_lowercase()),
                _ => None,
            })
            .collect();
        let n = seen.entry(slug.clone()).or_default();
        out.insert(if *n == 0 {
            slug.clone()
        } else {
            format!("{slug}-{n}")
        });
        *n += 1;
    }
    out
}

#[test]
fn every_relative_link_of_the_docs_reaches_a_file_and_heading_that_exist() {
    let mut broken = Vec::new();
    for page in pages() {
        let text = std::fs::read_to_string(&page).expect("read page");
        let name = page
            .strip_prefix(repo())
            .unwrap_or(&page)
            .display()
            .to_string();
        for link in links(&text) {
            if link.contains("://") || link.starts_with("mailto:") {
                continue;
            }
            let (path, anchor) = link.split_once('#').unwrap_or((&link, ""));
            let target = if path.is_empty() {
                page.clone()
            } else {
                page.parent().expect("a folder").join(path)
            };
            if !target.exists() {
                broken.push(format!("{name}: {link}: no such file"));
                continue;
            }
            if !anchor.is_empty() {
                let target_text = std::fs::read_to_string(&target).unwrap_or_default();
                if !anchors(&target_text).contains(anchor) {
                    broken.push(format!("{name}: {link}: no such heading"));
                }
            }
        }
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

/// The source files a page names in code spans (`controller/act.rs`, `src/plan/mod.rs`), as
/// written: paths under `src/` may leave `src/` out. Decision records and the changelog are
/// left out: they name files as they were when written.
fn source_files_named(page: &str) -> Vec<String> {
    let mut named = Vec::new();
    for span in page.split('`').skip(1).step_by(2) {
        let is_path = !span.is_empty()
            && (span.chars()).all(|c| c.is_ascii_alphanumeric() || "_./-".contains(c));
        if is_path && span.ends_with(".rs") {
            named.push(span.to_string());
        }
    }
    named
}

#[test]
fn every_source_file_the_docs_name_exists() {
    let mut missing = Vec::new();
    for page in pages() {
        let name = page
            .strip_prefix(repo())
            .unwrap_or(&page)
            .display()
            .to_string();
        if name.starts_with("docs/decisions/") || name == "CHANGELOG.md" {
            continue;
        }
        let text = std::fs::read_to_string(&page).expect("read page");
        for file in source_files_named(&text) {
            let found = ["", "src", "tests/suite"]
                .iter()
                .any(|base| repo().join(base).join(&file).exists());
            if !found {
                missing.push(format!("{name}: {file}"));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "the docs name files that do not exist:\n{}",
        missing.join("\n")
    );
}

/// Every `.rs` file under `dir`, recursively.
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read a source folder") {
        let path = entry.expect("dir entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The files of this repository a comment names: paths in code spans that start with one of
/// its folders (or, for `src/...` and paths inside `src/`, one of the folders of `src/`), and
/// `docs/*.md` anywhere. Paths in other repositories (tokio's `src/loom/...`) start elsewhere.
fn files_named_in(comment: &str) -> Vec<String> {
    let ours = |path: &str| {
        let path = path.strip_prefix("src/").unwrap_or(path);
        let first = path.split('/').next().unwrap_or("");
        let folder = !first.is_empty() && !first.contains('.');
        folder && ["docs", "tests", "benches", "examples", "hack", "manifests"].contains(&first)
            || (folder && path.contains('/') && repo().join("src").join(first).is_dir())
    };
    let mut named = Vec::new();
    for span in comment.split('`').skip(1).step_by(2) {
        let is_path = (span.chars()).all(|c| c.is_ascii_alphanumeric() || "_./-".contains(c));
        if is_path && span.contains('/') && span.contains('.') && ours(span) {
            named.push(span.to_string());
        }
    }
    for (at, _) in comment.match_indices("docs/") {
        let rest = &comment[at..];
        let end = rest.find(".md").map(|e| e + 3);
        let path = end.map(|e| &rest[..e]);
        let plain = |p: &&str| (p.chars()).all(|c| c.is_ascii_alphanumeric() || "_./-".contains(c));
        if let Some(path) = path.filter(plain) {
            named.push(path.to_string());
        }
    }
    named
}

#[test]
fn every_file_a_source_comment_names_exists() {
    let mut files = Vec::new();
    for dir in ["src", "benches", "tests"] {
        rust_files(&repo().join(dir), &mut files);
    }
    let mut missing = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).expect("read a source file");
        let name = file
            .strip_prefix(repo())
            .unwrap_or(&file)
            .display()
            .to_string();
        let comments = text.lines().filter(|l| l.trim_start().starts_with("//"));
        for path in comments.flat_map(files_named_in) {
            let found = ["", "src"]
                .iter()
                .any(|base| repo().join(base).join(&path).exists());
            if !found {
                missing.push(format!("{name}: {path}"));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "comments name files that do not exist:\n{}",
        missing.join("\n")
    );
}

#[test]
fn the_link_check_sees_a_missing_file_and_a_missing_heading() {
    let page = "# Title\n## Two words: `code`\n[a](#two-words-code) [b](#nowhere) `[c](#in-code)`\n\
                ```\n[d](#in-a-block)\n```\n";
    assert_eq!(links(page), ["#two-words-code", "#nowhere"]);
    let anchors = anchors(page);
    assert!(anchors.contains("two-words-code") && anchors.contains("title"));
    assert!(!anchors.contains("nowhere"));
}

// ---------------------------------------------------------------------------------------------
// The README

#[test]
fn the_readme_is_read_in_ten_minutes() {
    let readme = read("README.md");
    let lines = readme.lines().count();
    assert!(lines <= 300, "README.md has {lines} lines; at most 300");
    assert!(
        readme.len() <= 25 * 1024,
        "README.md has {} bytes; at most 25 KiB",
        readme.len()
    );
    for diary in ["this machine", "today"] {
        assert!(
            !readme.to_lowercase().contains(diary),
            "README.md says {diary:?}: say what was measured where (docs/performance.md)"
        );
    }
}

/// The CHANGELOG has a section for the crate's version and names every old name this release
/// still accepts: the legacy annotations (honoured for this release only) and each flag alias
/// (a renamed flag), so that an upgrade note exists before the old name goes.
#[test]
fn the_changelog_names_this_release_and_every_old_name_it_still_accepts() {
    use boot_image_controller::names::{LEGACY_OPT_OUT_ANNOTATION, LEGACY_PAUSE_ANNOTATION};
    let changelog = read("CHANGELOG.md");
    let version = env!("CARGO_PKG_VERSION");
    assert!(
        changelog.contains(&format!("\n## [{version}]")),
        "CHANGELOG.md has no section for {version}, the version in Cargo.toml"
    );
    let mut old_names = vec![
        LEGACY_OPT_OUT_ANNOTATION.to_string(),
        LEGACY_PAUSE_ANNOTATION.to_string(),
    ];
    for command in Cli::command().get_subcommands() {
        for arg in command.get_arguments() {
            for alias in arg.get_all_aliases().into_iter().flatten() {
                old_names.push(format!("--{alias}"));
            }
        }
    }
    let missing: Vec<&String> = old_names
        .iter()
        .filter(|name| !changelog.contains(&format!("`{name}`")))
        .collect();
    assert!(
        missing.is_empty(),
        "CHANGELOG.md does not name {missing:?}, which this release still accepts"
    );
}

// ---------------------------------------------------------------------------------------------
// The demo's transcript

/// The steps of hack/demo.sh: its `section "N/M title"` lines, in order.
fn demo_steps() -> Vec<String> {
    read("hack/demo.sh")
        .lines()
        .filter_map(|l| l.trim().strip_prefix("section \""))
        .map(|l| l.trim_end_matches('"').to_string())
        .collect()
}

/// The transcript of docs/demo.md, between its markers.
fn demo_transcript() -> String {
    let page = read("docs/demo.md");
    let begin = page
        .find("<!-- transcript: begin")
        .expect("docs/demo.md has a transcript");
    let end = page[begin..]
        .find("<!-- transcript: end")
        .map(|e| begin + e)
        .expect("the transcript ends");
    page[begin..end].to_string()
}

#[test]
fn the_demo_transcript_is_the_demos_own_output() {
    let steps = demo_steps();
    assert!(steps.len() >= 5, "hack/demo.sh has steps: {steps:?}");
    let page = read("docs/demo.md");
    let transcript = demo_transcript();
    let shown: Vec<String> = transcript
        .lines()
        .filter_map(|l| l.strip_prefix("== "))
        .map(|l| {
            l.rsplit_once("  (")
                .map_or(l, |(title, _)| title)
                .to_string()
        })
        .collect();
    assert_eq!(
        shown, steps,
        "the transcript of docs/demo.md is not the demo's: run `hack/demo.sh --transcript docs/demo.md`"
    );
    assert!(
        transcript.contains("Demo finished in"),
        "the transcript is of a demo that finished"
    );
    let count = steps.len();
    assert!(
        page.contains(&format!("in {} steps", number_word(count))),
        "docs/demo.md says how many steps the demo has ({count})"
    );
}

/// The commands the demo shows (`shown "..."` in hack/demo.sh), as patterns: the literal text
/// between the script's expansions (`$var`, `${...}`, `$(...)`), which may print anything.
fn demo_commands() -> Vec<Vec<String>> {
    read("hack/demo.sh")
        .lines()
        .filter_map(|l| l.trim().strip_prefix("shown \""))
        .map(|l| {
            let template = l.trim_end_matches('"').replace("\\\\", "\\");
            let mut pieces = vec![String::new()];
            let mut chars = template.chars().peekable();
            while let Some(c) = chars.next() {
                if c != '$' {
                    pieces.last_mut().expect("a piece").push(c);
                    continue;
                }
                match chars.peek() {
                    Some(&open @ ('(' | '{')) => {
                        let close = if open == '(' { ')' } else { '}' };
                        let mut depth = 0;
                        for c in chars.by_ref() {
                            depth += i32::from(c == open) - i32::from(c == close);
                            if depth == 0 {
                                break;
                            }
                        }
                    }
                    _ => {
                        while chars
                            .next_if(|c| c.is_alphanumeric() || *c == '_')
                            .is_some()
                        {}
                    }
                }
                pieces.push(String::new());
            }
            pieces
        })
        .collect()
}

/// Whether `line` is the pattern's literal pieces with anything in the expansions' places.
fn matches_pattern(line: &str, pieces: &[String]) -> bool {
    let (first, rest) = pieces.split_first().expect("a piece");
    let Some(mut tail) = line.strip_prefix(first.as_str()) else {
        return false;
    };
    for (i, piece) in rest.iter().enumerate() {
        if i + 1 == rest.len() {
            return tail.ends_with(piece.as_str());
        }
        match tail.find(piece.as_str()) {
            Some(at) => tail = &tail[at + piece.len()..],
            None => return false,
        }
    }
    tail.is_empty()
}

/// The commands of the transcript (its `$ ` lines) are the ones hack/demo.sh shows, in order:
/// a step added, dropped or changed in the script is seen here, with no cluster to run it on.
#[test]
fn the_demo_transcript_shows_the_commands_the_demo_runs() {
    let commands = demo_commands();
    assert!(commands.len() >= 5, "{commands:?}");
    let transcript = demo_transcript();
    let shown: Vec<&str> = transcript
        .lines()
        .filter_map(|l| l.trim_start().strip_prefix("$ "))
        .collect();
    assert_eq!(
        shown.len(),
        commands.len(),
        "the transcript shows {shown:#?}; hack/demo.sh shows {commands:?}: run `hack/demo.sh --transcript docs/demo.md`"
    );
    for (line, pieces) in shown.iter().zip(&commands) {
        assert!(
            matches_pattern(line, pieces),
            "the transcript shows `{line}` where hack/demo.sh shows {pieces:?}: run `hack/demo.sh --transcript docs/demo.md`"
        );
    }
}

/// The transcript shows no path of the machine that wrote it (a checkout, a home folder, a
/// temporary folder): hack/demo.sh writes them as `<checkout>` and `~`.
#[test]
fn the_demo_transcript_shows_no_path_of_the_machine_that_wrote_it() {
    let transcript = demo_transcript();
    let host_paths = [
        "/work/",
        "/root/",
        "/home/",
        "/tmp/",
        "/Users/",
        "/var/",
        "/opt/",
        "/private/",
        "/srv/",
    ];
    let mut found = Vec::new();
    for line in transcript.lines() {
        for path in host_paths {
            let starts_a_path = line.match_indices(path).any(|(at, _)| {
                let before = line[..at].chars().next_back();
                before.is_none_or(|c| c.is_whitespace() || "(=\"'`".contains(c))
            });
            if starts_a_path {
                found.push(line.trim().to_string());
            }
        }
    }
    assert!(
        found.is_empty(),
        "docs/demo.md's transcript shows host paths: {found:#?}"
    );
}

/// What of a demo's output every run shows alike: step titles, commands (ports masked), plan
/// rows (object, action, reason) and summaries, condition lines (type, status, reason), and,
/// as sets since their order is the API server's, the MachineSets seen changing and the Events.
fn demo_skeleton(output: &str) -> Vec<String> {
    let mut skeleton = Vec::new();
    let mut unordered: Vec<String> = Vec::new();
    for line in output.lines() {
        let t = line.trim();
        let words: Vec<&str> = t.split_whitespace().collect();
        let ordered = if let Some(title) = t.strip_prefix("== ") {
            Some(
                title
                    .rsplit_once("  (")
                    .map_or(title, |(title, _)| title)
                    .to_string(),
            )
        } else if t.starts_with("$ ") {
            Some(
                t.chars()
                    .map(|c| if c.is_ascii_digit() { '#' } else { c })
                    .collect(),
            )
        } else if t.starts_with("Summary:") {
            Some(t.to_string())
        } else if words.len() >= 3
            && (t.starts_with("openshift-machine-api/")
                || (words[0].starts_with("BootImage")
                    && ["True", "False", "Unknown"].contains(&words[1])))
        {
            // A plan row (object, action, reason) or a condition (type, status, reason).
            Some(words[..3].join(" "))
        } else {
            if t.starts_with("seen at +") && words.len() > 4 {
                unordered.push(format!("seen {}", words[4..].join(" ")));
            } else if words.len() == 2
                && (words[1].starts_with("Normal/") || words[1].starts_with("Warning/"))
            {
                unordered.push(format!("event {}", words.join(" ")));
            }
            None
        };
        if let Some(kept) = ordered {
            unordered.sort();
            skeleton.append(&mut unordered);
            skeleton.push(kept);
        }
    }
    unordered.sort();
    skeleton.append(&mut unordered);
    skeleton
}

/// The transcript is what a fresh run of the demo shows, times, ports and orders of arrival
/// aside. Needs that run's output: hack/test.sh runs the demo, then this test with
/// BIC_DEMO_OUTPUT naming the output (`cargo test` alone leaves it out).
#[test]
#[ignore = "needs a fresh run of hack/demo.sh: hack/test.sh sets BIC_DEMO_OUTPUT and runs it"]
fn the_demo_transcript_is_what_a_fresh_run_shows() {
    let path = std::env::var("BIC_DEMO_OUTPUT").expect("BIC_DEMO_OUTPUT names a demo's output");
    let fresh = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {path}: {e}"));
    let fresh = demo_skeleton(&fresh);
    let transcript = demo_skeleton(&demo_transcript());
    assert!(transcript.len() > 40, "{transcript:#?}");
    let first_difference = (fresh.iter().zip(&transcript)).position(|(f, t)| f != t);
    assert!(
        fresh == transcript,
        "docs/demo.md's transcript is not what the demo shows now (first difference at line \
         {first_difference:?} of the skeleton: fresh {:?}, transcript {:?}): run \
         `hack/demo.sh --transcript docs/demo.md`",
        first_difference.and_then(|i| fresh.get(i)),
        first_difference.and_then(|i| transcript.get(i)),
    );
}

fn number_word(n: usize) -> String {
    let words = [
        "zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten",
        "eleven", "twelve",
    ];
    words
        .get(n)
        .map_or_else(|| n.to_string(), |w| w.to_string())
}

// ---------------------------------------------------------------------------------------------
// The install overlay of docs/install.md

/// The `runbook_url` of every alert of a render.
fn runbook_urls(rendered: &Rendered) -> Vec<(String, String)> {
    let rule = rendered.get("PrometheusRule", "boot-image-controller");
    rule["spec"]["groups"]
        .as_array()
        .expect("groups")
        .iter()
        .flat_map(|g| g["rules"].as_array().cloned().unwrap_or_default())
        .filter(|r| r["alert"].is_string())
        .map(|r| {
            (
                str_of(&r["alert"]),
                str_of(&r["annotations"]["runbook_url"]),
            )
        })
        .collect()
}

/// The base URL set in manifests/monitoring/runbook-links.yaml.
fn docs_base_url() -> String {
    let links: serde_json::Value =
        serde_saphyr::from_str(&read("manifests/monitoring/runbook-links.yaml")).expect("YAML");
    str_of(&links["data"]["docsBaseURL"])
}

#[test]
fn every_alert_of_the_manifests_links_its_runbook_by_an_absolute_url() {
    let Some(kubectl) = kubectl_or_skip() else {
        return;
    };
    let base = docs_base_url();
    assert!(base.starts_with("https://"), "{base}");
    let urls = runbook_urls(&Rendered::manifests(&kubectl));
    assert!(!urls.is_empty());
    for (alert, url) in urls {
        assert_eq!(url, format!("{base}/docs/runbooks/{alert}.md"), "{alert}");
    }
}

/// The manifests' runbook base is a placeholder on a branch: every page that describes the
/// runbook links says so, and install.md shows a base pinned to a tag.
#[test]
fn the_docs_say_the_manifests_runbook_base_is_a_placeholder() {
    let base = docs_base_url();
    if !base.ends_with("/blob/main") {
        return; // a real, pinned base: nothing to warn of
    }
    let install = read("docs/install.md");
    let section = install
        .split("### Runbook links")
        .nth(1)
        .and_then(|s| s.split("\n## ").next())
        .expect("docs/install.md has a section Runbook links");
    assert!(
        section.contains(&base) && section.contains("placeholder"),
        "docs/install.md#runbook-links names {base} as a placeholder"
    );
    assert!(
        section.contains("/blob/v0.1.0"),
        "and shows a base pinned to a tag"
    );
    let observability = read("docs/observability.md");
    assert!(
        observability.contains("placeholder"),
        "docs/observability.md says the runbook base is a placeholder"
    );
    assert!(read("manifests/monitoring/runbook-links.yaml").contains("PLACEHOLDER"));
}

/// The overlay of docs/install.md: the image it names, its own runbook base URL, and the Role
/// patch for a custom role's stub secret.
#[test]
fn the_install_overlay_names_the_image_and_can_move_the_runbook_links() {
    let Some(kubectl) = kubectl_or_skip() else {
        return;
    };
    // kustomize refuses an absolute path to a base, so the overlay sits beside the checkout's
    // target/ and reaches the manifests by a relative one, as an administrator's would.
    let scratch = repo().join("target");
    std::fs::create_dir_all(&scratch).expect("target/");
    let dir = tempfile::tempdir_in(&scratch).expect("overlay folder");
    let overlay = dir.path();
    std::fs::write(
        overlay.join("kustomization.yaml"),
        "resources:\n\
         \x20 - ../../manifests\n\
         \x20 - runbook-links.yaml\n\
         images:\n\
         \x20 - {name: boot-image-controller, newName: quay.io/you/boot-image-controller, newTag: v0.1.0}\n\
         replacements:\n\
         \x20 - source: {kind: ConfigMap, name: my-runbook-links, fieldPath: data.docsBaseURL}\n\
         \x20   targets:\n\
         \x20     - select: {kind: PrometheusRule, name: boot-image-controller}\n\
         \x20       fieldPaths: [spec.groups.*.rules.*.annotations.runbook_url]\n\
         \x20       options: {delimiter: /docs/runbooks/, index: 0}\n\
         patches:\n\
         \x20 - target: {kind: Role, name: boot-image-controller-machine-api}\n\
         \x20   patch: |\n\
         \x20     - op: test\n\
         \x20       path: /rules/1/resourceNames/0\n\
         \x20       value: worker-user-data\n\
         \x20     - op: add\n\
         \x20       path: /rules/1/resourceNames/-\n\
         \x20       value: infra-user-data\n\
         \x20     - op: test\n\
         \x20       path: /rules/2/verbs/0\n\
         \x20       value: patch\n\
         \x20     - op: add\n\
         \x20       path: /rules/2/resourceNames/-\n\
         \x20       value: infra-user-data\n",
    )
    .expect("write the overlay");
    let mirror = "https://git.example.com/mirrors/boot-image-controller/-/blob/v0.1.0";
    std::fs::write(
        overlay.join("runbook-links.yaml"),
        format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: my-runbook-links\n  \
             annotations:\n    config.kubernetes.io/local-config: \"true\"\n\
             data:\n  docsBaseURL: {mirror}\n"
        ),
    )
    .expect("write runbook-links.yaml");

    let rendered = Rendered::build(&kubectl, overlay);
    let deployment = rendered.get("Deployment", "boot-image-controller");
    assert_eq!(
        deployment["spec"]["template"]["spec"]["containers"][0]["image"],
        "quay.io/you/boot-image-controller:v0.1.0"
    );
    for (alert, url) in runbook_urls(&rendered) {
        assert_eq!(url, format!("{mirror}/docs/runbooks/{alert}.md"), "{alert}");
    }
    assert!(
        rendered.of_kind("ConfigMap").all(|c| {
            c["metadata"]["name"] != "my-runbook-links"
                && c["metadata"]["name"] != "boot-image-controller-runbook-links"
        }),
        "the runbook-links ConfigMaps are kustomize inputs, never applied"
    );
    let role = rendered.get("Role", "boot-image-controller-machine-api");
    for rule in [1, 2] {
        let stubs = &role["rules"][rule]["resourceNames"];
        assert!(
            stubs
                .as_array()
                .is_some_and(|names| names.iter().any(|n| n == "infra-user-data")),
            "rule {rule}: {stubs}"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Uninstall

/// Every key of ours the controller may leave on other objects (`src/names.rs`, and the
/// Cluster API record of template copies) is named on the uninstall page, which says how to
/// remove it.
#[test]
fn uninstall_names_every_key_the_controller_leaves_behind() {
    let page = read("docs/uninstall.md");
    let mut missing = Vec::new();
    for file in ["src/names.rs", "src/plan/cluster_api_templates.rs"] {
        let text = read(file);
        let production = text.split("#[cfg(test)]").next().unwrap_or_default();
        let keys = production
            .match_indices("\"boot-image-controller.io")
            .filter_map(|(at, _)| production[at + 1..].split('"').next());
        for key in keys {
            // The copies themselves carry `copied-from`; deleting a copy removes it.
            if key != "boot-image-controller.io/copied-from" && !page.contains(key) {
                missing.push(format!("{key} ({file})"));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "docs/uninstall.md does not name: {missing:?}"
    );
}

// ---------------------------------------------------------------------------------------------
// Conditions

/// The condition types the controller writes, read from `src/controller/status/conditions.rs`: every
/// `pub const NAME: &str = "..."` there whose value starts with `BootImage`.
fn condition_types_of_the_code() -> BTreeSet<String> {
    let text = read("src/controller/status/conditions.rs");
    let production = text.split("#[cfg(test)]").next().unwrap_or_default();
    production
        .lines()
        .filter(|l| l.starts_with("pub const ") && l.contains(": &str = \"BootImage"))
        .filter_map(|l| l.split('"').nth(1))
        .map(str::to_string)
        .collect()
}

/// The README's sample of the conditions, the observability page's sample status and the
/// demo's transcript show every condition a managing controller writes, and the page explains each (the Manual skew
/// condition, `status/boot_image_fields.rs`, is explained there and in no sample).
#[test]
fn the_condition_samples_show_every_condition_the_controller_writes() {
    let types = condition_types_of_the_code();
    assert!(types.len() >= 6, "{types:?}");
    let readme = read("README.md");
    let observability = read("docs/observability.md");
    let sample = |page: &str, marker: &str| -> BTreeSet<String> {
        let at = page.find(marker).unwrap_or_else(|| panic!("no {marker}"));
        let block = page[at..].split("```").next().unwrap_or_default();
        types
            .iter()
            .filter(|t| block.contains(t.as_str()))
            .cloned()
            .collect()
    };
    assert_eq!(
        sample(&readme, "{range .status.conditions[*]}"),
        types,
        "README"
    );
    assert_eq!(
        sample(
            &observability,
            "$ oc get machineconfiguration cluster -o yaml"
        ),
        types,
        "docs/observability.md"
    );
    let transcript = demo_transcript();
    let after_rollout = transcript
        .split("Conditions on MachineConfiguration/cluster")
        .nth(1)
        .and_then(|s| s.split("Events (").next())
        .expect("the transcript shows the conditions after the rollout");
    let shown: BTreeSet<String> = after_rollout
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|w| types.contains(*w))
        .map(str::to_string)
        .collect();
    assert_eq!(shown, types, "docs/demo.md's transcript");
    for t in &types {
        assert!(
            observability
                .split("## Events")
                .next()
                .unwrap()
                .contains(t.as_str()),
            "docs/observability.md's Conditions section does not explain {t}"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// RBAC

/// One rule of a Role or ClusterRole: (role, API groups, resources or non-resource URLs,
/// resource names, verbs), the sets sorted.
type Grant = (String, Vec<String>, Vec<String>, Vec<String>, Vec<String>);

/// Every Role and ClusterRole under manifests/ (components included), by file.
fn roles_of_the_manifests() -> Vec<(String, serde_json::Value)> {
    let mut files = Vec::new();
    let mut dirs = vec![repo().join("manifests")];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).expect("manifests/") {
            let path = entry.expect("entry").path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "yaml") {
                files.push(path);
            }
        }
    }
    files.sort();
    let mut roles = Vec::new();
    for path in files {
        let text = std::fs::read_to_string(&path).expect("read");
        let documents: Vec<serde_json::Value> = serde_saphyr::from_multiple(&text)
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let file = path
            .strip_prefix(repo().join("manifests"))
            .expect("under manifests/");
        for doc in documents {
            if doc["kind"] == "Role" || doc["kind"] == "ClusterRole" {
                roles.push((file.display().to_string(), doc));
            }
        }
    }
    roles
}

fn sorted_strings(value: &serde_json::Value) -> Vec<String> {
    let mut strings: Vec<String> = (value.as_array().into_iter().flatten())
        .map(|v| v.as_str().unwrap_or_default().to_string())
        .collect();
    strings.sort();
    strings
}

/// The grants of the manifests' Roles and ClusterRoles.
fn grants_of_the_manifests() -> Vec<Grant> {
    let mut grants = Vec::new();
    for (_, role) in roles_of_the_manifests() {
        let name = format!(
            "{} {}",
            str_of(&role["kind"]),
            str_of(&role["metadata"]["name"])
        );
        for rule in role["rules"].as_array().expect("rules") {
            let mut resources = sorted_strings(&rule["resources"]);
            resources.extend(sorted_strings(&rule["nonResourceURLs"]));
            grants.push((
                name.clone(),
                sorted_strings(&rule["apiGroups"]),
                resources,
                sorted_strings(&rule["resourceNames"]),
                sorted_strings(&rule["verbs"]),
            ));
        }
    }
    grants.sort();
    grants
}

/// The rows of the table under `## RBAC, rule by rule` of docs/install.md: in each cell, the
/// words in backticks (`""`, the core group, is the empty string).
fn grants_of_the_install_docs() -> Vec<Grant> {
    let page = read("docs/install.md");
    let section = page
        .split("## RBAC, rule by rule")
        .nth(1)
        .expect("docs/install.md has a section RBAC, rule by rule");
    let section = section.split("\n## ").next().unwrap_or_default();
    let ticked = |cell: &str| -> Vec<String> {
        let mut words: Vec<String> = (cell.split('`').skip(1).step_by(2))
            .map(|w| {
                if w == "\"\"" {
                    String::new()
                } else {
                    w.to_string()
                }
            })
            .collect();
        words.sort();
        words
    };
    let mut grants: Vec<Grant> = section
        .lines()
        .filter(|l| l.starts_with("| ") && !l.starts_with("| role ") && !l.starts_with("|---"))
        .map(|l| {
            let cells: Vec<&str> = l.split('|').map(str::trim).collect();
            let (kind, rest) = cells[1].split_once(' ').expect("kind then name");
            let name = rest.split('`').nth(1).expect("a role name in backticks");
            (
                format!("{kind} {name}"),
                ticked(cells[2]),
                ticked(cells[3]),
                ticked(cells[4]),
                ticked(cells[5]),
            )
        })
        .collect();
    grants.sort();
    grants
}

/// docs/install.md's table of RBAC rules is the manifests' rules, no more and no fewer: a rule
/// added to a Role (the Machines, the MachineHealthChecks) shows up there.
#[test]
fn the_install_docs_list_every_rbac_rule_of_the_manifests_and_no_other() {
    let manifests = grants_of_the_manifests();
    assert!(manifests.len() >= 20, "{manifests:#?}");
    let docs = grants_of_the_install_docs();
    let undocumented: Vec<_> = manifests.iter().filter(|g| !docs.contains(g)).collect();
    let not_granted: Vec<_> = docs.iter().filter(|g| !manifests.contains(g)).collect();
    assert!(
        undocumented.is_empty() && not_granted.is_empty(),
        "docs/install.md#rbac-rule-by-rule differs from manifests/:\n\
         granted, not in the table: {undocumented:#?}\nin the table, not granted: {not_granted:#?}"
    );
}

/// manifests/README.md names, in the row of each RBAC file (or of its component's folder),
/// every resource that file grants.
#[test]
fn the_manifests_readme_names_every_resource_each_rbac_file_grants() {
    let readme = read("manifests/README.md");
    let mut missing = Vec::new();
    for (file, role) in roles_of_the_manifests() {
        let (folder, base) = file.rsplit_once('/').unwrap_or(("", &file));
        let row = readme
            .lines()
            .find(|l| {
                l.starts_with(&format!("| `{file}`")) || l.starts_with(&format!("| `{folder}/`"))
            })
            .unwrap_or_else(|| panic!("manifests/README.md has no row for {file}"))
            .to_lowercase();
        for rule in role["rules"].as_array().expect("rules") {
            let resources = sorted_strings(&rule["resources"]);
            let urls = sorted_strings(&rule["nonResourceURLs"]);
            for resource in resources.iter().chain(&urls) {
                // `machineconfigurations/status` is "the status of MachineConfiguration".
                let object = resource.split('/').next().unwrap_or_default();
                let singular = object.strip_suffix('s').unwrap_or(object);
                if !row.contains(singular) || (folder.is_empty() && !row.contains(base)) {
                    missing.push(format!("{file}: {resource}"));
                }
            }
        }
    }
    assert!(
        missing.is_empty(),
        "manifests/README.md does not name what these files grant: {missing:?}"
    );
}

// ---------------------------------------------------------------------------------------------
// Line budgets

/// docs/architecture.md's budget table is what `hack/count-lines.sh --markdown` prints today,
/// and the script counts every file of src/ in an area (it fails on a file in none).
#[test]
fn the_line_budget_table_is_what_hack_count_lines_prints() {
    let out = std::process::Command::new("bash")
        .arg(repo().join("hack/count-lines.sh"))
        .arg("--markdown")
        .output()
        .expect("bash runs hack/count-lines.sh");
    assert!(
        out.status.success(),
        "hack/count-lines.sh failed (a file of src/ in no area?): {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let counted = String::from_utf8(out.stdout).expect("UTF-8 table");
    let page = read("docs/architecture.md");
    let section = page
        .split("\n## Line budgets\n")
        .nth(1)
        .expect("docs/architecture.md has a \"Line budgets\" section");
    let section = section.split("\n## ").next().unwrap_or_default();
    let shown: Vec<&str> = section.lines().filter(|l| l.starts_with('|')).collect();
    let counted: Vec<&str> = counted.lines().collect();
    let stale: Vec<String> = counted
        .iter()
        .filter(|row| !shown.contains(row))
        .map(|row| format!("  {row}"))
        .collect();
    assert!(
        shown == counted,
        "docs/architecture.md's line budgets are not what `hack/count-lines.sh --markdown` \
         prints (paste its output there); rows the docs lack:\n{}",
        stale.join("\n")
    );
}
