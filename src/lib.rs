//! boot-image-controller: keeps the boot images of OpenShift MachineSets current.
//!
//! Data flows one way: observe -> decide ([`plan`]) -> act -> report, the last three carried
//! out by the controller. `docs/architecture.md` follows one MachineSet through the code.
#![forbid(unsafe_code)]

pub mod api;
mod api_client;
pub mod arch;
mod bounded_read;
pub mod cli;
pub mod controller;
mod ec2;
pub mod facts;
pub mod golden_stream;
pub mod http_client;
pub mod known_images;
mod kubeconfig;
pub mod machine_kind;
pub mod manifests;
pub mod metrics;
pub mod names;
pub mod plan;
pub mod platform;
mod quoted;
pub mod reason;
mod revert;
mod server;
#[cfg(any(test, feature = "testkit"))]
pub mod testkit;
pub mod vcenter;

#[cfg(test)]
mod layers {
    //! The layers import one way (docs/architecture.md): the planner and the platform rules know
    //! neither the cloud clients nor the commands that use the planner, and the clients know
    //! neither the planner nor the rules; the facts the clients answer sit below all of them.

    /// The production code (before the first `#[cfg(test)]`) of every file under `dir`.
    fn production_code(dir: &str) -> Vec<(String, String)> {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let mut files = Vec::new();
        let mut dirs = vec![root.join(dir)];
        while let Some(dir) = dirs.pop() {
            for entry in std::fs::read_dir(&dir).expect("read src/") {
                let path = entry.expect("read src/").path();
                let name = path.file_name().unwrap().to_string_lossy().into_owned();
                if path.is_dir() {
                    dirs.push(path);
                } else if name.ends_with(".rs") && !name.starts_with("tests") {
                    let text = std::fs::read_to_string(&path).expect("read a source file");
                    let code = text.split("#[cfg(test)]").next().unwrap_or("").to_string();
                    files.push((path.display().to_string(), code));
                }
            }
        }
        files
    }

    fn imports_of(dirs: &[&str], forbidden: &[&str]) -> Vec<String> {
        let mut found = Vec::new();
        for (path, code) in dirs.iter().flat_map(|d| production_code(d)) {
            for line in code.lines().filter(|l| !l.trim_start().starts_with("//")) {
                for module in forbidden {
                    if line.contains(&format!("crate::{module}::"))
                        || line.contains(&format!("crate::{module};"))
                    {
                        found.push(format!("{path}: {}", line.trim()));
                    }
                }
            }
        }
        found
    }

    #[test]
    fn the_planner_and_the_platform_rules_import_no_client_and_no_command() {
        let forbidden = [
            "ec2",
            "vcenter",
            "revert",
            "api_client",
            "controller",
            "cli",
        ];
        assert_eq!(
            imports_of(&["plan", "platform"], &forbidden),
            Vec::<String>::new()
        );
    }

    #[test]
    fn the_clients_import_neither_the_planner_nor_the_platform_rules() {
        let forbidden = ["plan", "platform", "controller", "cli"];
        assert_eq!(
            imports_of(&["ec2", "vcenter"], &forbidden),
            Vec::<String>::new()
        );
    }

    #[test]
    fn the_facts_import_only_the_model() {
        let forbidden = ["plan", "platform", "ec2", "vcenter", "controller", "cli"];
        assert_eq!(imports_of(&["facts"], &forbidden), Vec::<String>::new());
    }
}
