//! Records the source commit for `--version` and the `build_info` metric.
//!
//! `BIC_GIT_COMMIT` wins when set: container builds copy the sources without `.git`, so the
//! commit has to be passed in (`--build-arg BIC_GIT_COMMIT=$(git rev-parse HEAD)`).

use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    let text = String::from_utf8(out.stdout).ok()?.trim().to_string();
    (out.status.success() && !text.is_empty()).then_some(text)
}

fn main() {
    println!("cargo:rerun-if-env-changed=BIC_GIT_COMMIT");
    let commit = std::env::var("BIC_GIT_COMMIT")
        .ok()
        .filter(|c| !c.is_empty())
        .or_else(|| {
            // Rebuild when HEAD moves: HEAD itself (checkouts), the branch it points to
            // (commits) and packed-refs (after `git gc`). Only files that exist are named:
            // cargo counts a missing one as changed on every build, which rebuilt the library
            // at every cargo command in a repository without packed-refs.
            let watch = |path: Option<String>| {
                if let Some(path) = path.filter(|p| std::path::Path::new(p).exists()) {
                    println!("cargo:rerun-if-changed={path}");
                }
            };
            watch(git(&["rev-parse", "--git-path", "HEAD"]));
            if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"])
                && let Some(path) = git(&["rev-parse", "--git-path", &branch])
            {
                // A branch only in packed-refs gets its own file at its next commit: watch the
                // folder that file will appear in.
                let parent = std::path::Path::new(&path)
                    .parent()
                    .map(|p| p.display().to_string());
                let exists = std::path::Path::new(&path).exists();
                watch(if exists { Some(path) } else { parent });
            }
            watch(git(&["rev-parse", "--git-path", "packed-refs"]));
            git(&["rev-parse", "--short=12", "HEAD"])
        })
        .unwrap_or_else(|| "unknown".to_string());
    println!("cargo:rustc-env=BIC_GIT_COMMIT={commit}");
}
