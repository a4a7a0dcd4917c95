//! Skipped tests that say so where a person looks.
//!
//! libtest reports a test that returned early as `ok`, and swallows what a passing test printed
//! with `eprintln!`. A skip therefore goes straight to the process's stderr and, when
//! `BIC_SKIP_LOG` names a file, into that file too: `hack/test.sh` prints the file as the last
//! lines of its summary and, with `BIC_FAIL_ON_SKIP=1` (set by CI, where everything a test may
//! need exists), fails the run.

use std::fmt::Display;
use std::io::Write;
use std::path::{Path, PathBuf};

/// Environment variable naming the file every skip is appended to.
pub const SKIP_LOG_ENV: &str = "BIC_SKIP_LOG";

/// Records that the calling test is skipped and why. The caller returns right after.
pub fn skip(reason: impl Display) {
    let log = std::env::var_os(SKIP_LOG_ENV).filter(|p| !p.is_empty());
    skip_to(log.as_deref().map(Path::new), reason);
}

fn skip_to(log: Option<&Path>, reason: impl Display) {
    let test = std::thread::current()
        .name()
        .unwrap_or("an unnamed test")
        .to_string();
    let line = format!("SKIPPED: {test}: {reason}\n");
    let _ = std::io::stderr().write_all(line.as_bytes());
    let Some(log) = log else { return };
    // One write of one short line to an O_APPEND file: lines of parallel tests never mix.
    let appended = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .and_then(|mut f| f.write_all(line.as_bytes()));
    if let Err(e) = appended {
        let _ = writeln!(
            std::io::stderr(),
            "cannot record the skip in {}: {e}",
            log.display()
        );
    }
}

/// The shared folder of upstream fixtures (`BIC_SHARED_DIR`, else `../shared` beside the
/// repository) when it holds `fixtures/`; otherwise the calling test is skipped.
pub fn shared_dir() -> Option<PathBuf> {
    let dir = std::env::var_os("BIC_SHARED_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared"));
    if dir.join("fixtures").is_dir() {
        Some(dir)
    } else {
        skip(format_args!(
            "no shared fixtures at {} (set BIC_SHARED_DIR)",
            dir.display()
        ));
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_skip_is_appended_to_the_skip_log() {
        let scratch = crate::testkit::scratch::Scratch::new();
        let log = scratch.path("skips");
        skip_to(Some(&log), "the reason");
        skip_to(Some(&log), "another");
        let text = std::fs::read_to_string(&log).expect("skip log");
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 2, "{text}");
        assert!(lines[0].starts_with("SKIPPED: "), "{text}");
        assert!(lines[0].ends_with(": the reason"), "{text}");
        assert!(
            lines[0].contains("a_skip_is_appended_to_the_skip_log"),
            "{text}"
        );
    }
}
