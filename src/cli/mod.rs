//! The command line. Each subcommand is one variant of [`Command`] and one arm in [`main`];
//! its arguments and code live in a file of their own.

mod crds;
mod fleet;
mod live;
mod plan;
mod revert;
mod run;
mod table;

use std::io::Write as _;

use anyhow::Context as _;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

pub use plan::{OutputFormat, PlanArgs};

/// `--version`: the release and the commit it was built from, so a bug report pins the code.
const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("BIC_GIT_COMMIT"),
    ")"
);
pub use revert::RevertArgs;

#[derive(Debug, Parser)]
#[command(
    name = "boot-image-controller",
    version = VERSION,
    about = "Keeps the boot images of OpenShift MachineSets current with the cluster's golden \
             CoreOS stream"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

// Parsed once and matched once: the size of the largest arguments costs nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Show what the controller would change, from manifest files or read-only from a cluster.
    ///
    /// Reads `oc get -o yaml` output, must-gather folders or hand-written files (`-f`), or the
    /// objects the controller reads from a cluster (`--live`, `--kubeconfig`, `--context`), and
    /// prints the decision for every MachineSet and ControlPlaneMachineSet.
    Plan(PlanArgs),
    /// Print the CRDs of the OpenShift kinds the controller touches, for local test clusters.
    ///
    /// A multi-document YAML stream for `kubectl apply -f -`. Real clusters ship the upstream
    /// CRDs; these are generated from our own types. Hidden: only the test harness and the demo
    /// need it, and applying it to a real cluster would replace OpenShift's own CRDs.
    #[command(hide = true)]
    Crds,
    /// Run the controller against a cluster (in-cluster config or a kubeconfig).
    Run(crate::controller::RunArgs),
    /// Undo the controller's last change(s) to one MachineSet or ControlPlaneMachineSet.
    ///
    /// Restores the boot image and stub secret recorded in its history annotation with one
    /// guarded JSON Patch, opts it out (annotation
    /// boot-image-controller.io/boot-image-updates=disabled) and drops the undone
    /// entries from the history. Exit codes: 0 reverted, 2 nothing recorded to revert (or not
    /// found), 3 refused because a value changed since the controller wrote it, 1 other errors.
    Revert(RevertArgs),
    /// Print a shell completion script.
    ///
    /// bash: `source <(boot-image-controller completion bash)`; zsh: write it to a file named
    /// `_boot-image-controller` in a folder of `$fpath`; fish: to
    /// `~/.config/fish/completions/boot-image-controller.fish`.
    Completion {
        /// The shell to complete for.
        shell: clap_complete::Shell,
    },
}

/// Parses the arguments, runs the subcommand and turns its outcome into the exit code.
pub fn main() -> ExitCode {
    // clap prints usage errors itself and exits with 2, the code we use for unusable input too.
    let cli = Cli::parse();
    let outcome = match cli.command {
        Command::Plan(args) if args.live.fleet() => fleet::run(&args),
        Command::Plan(args) => plan::run(&args),
        Command::Crds => crds::run().map(|()| 0),
        Command::Run(args) => run::run(args).map(|()| 0),
        Command::Revert(args) => revert::run(&args).map(|()| 0),
        Command::Completion { shell } => completion(shell).map(|()| 0),
    };
    match outcome {
        Ok(code) => ExitCode::from(code),
        Err(failure) => failure.report(),
    }
}

fn completion(shell: clap_complete::Shell) -> Result<(), Failure> {
    use clap::CommandFactory;
    let mut script = Vec::new();
    clap_complete::generate(
        shell,
        &mut Cli::command(),
        "boot-image-controller",
        &mut script,
    );
    write_stdout(&String::from_utf8_lossy(&script))
}

/// Why a command failed, and with which exit code.
#[derive(Debug)]
pub struct Failure {
    code: u8,
    error: anyhow::Error,
}

impl Failure {
    /// Exit code for input we cannot use: a missing path, an unreadable file, a syntax error.
    pub const INPUT_CODE: u8 = 2;

    pub fn input(error: impl Into<anyhow::Error>) -> Self {
        Failure {
            code: Self::INPUT_CODE,
            error: error.into(),
        }
    }

    /// A failure while running (not the user's input), with its own exit code.
    pub fn runtime(code: u8, error: impl Into<anyhow::Error>) -> Self {
        Failure {
            code,
            error: error.into(),
        }
    }

    /// Prints `error: <message>` with every cause, never a backtrace.
    pub fn report(self) -> ExitCode {
        eprintln!("error: {}", self.message());
        ExitCode::from(self.code)
    }

    /// The message and its causes, each once: our errors often quote their source already.
    pub fn message(&self) -> String {
        let mut message = self.error.to_string();
        for cause in self.error.chain().skip(1).map(|c| c.to_string()) {
            if !message.contains(&cause) {
                message.push_str(": ");
                message.push_str(&cause);
            }
        }
        message
    }
}

/// Any other failure (a cluster that cannot be read, a lost leader lease): exit code 1.
impl From<anyhow::Error> for Failure {
    fn from(error: anyhow::Error) -> Self {
        Failure { code: 1, error }
    }
}

/// The single-threaded runtime of a command's requests to a cluster or a cloud.
fn runtime() -> Result<tokio::runtime::Runtime, Failure> {
    let built = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build();
    Ok(built.context("cannot start the runtime")?)
}

/// Writes a command's output. A closed pipe (`... | head`) ends the output quietly: the reader
/// has what it wanted, and `println!` would panic there.
fn write_stdout(text: &str) -> Result<(), Failure> {
    let mut stdout = std::io::stdout().lock();
    match stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
    {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(anyhow::Error::new(e)
            .context("cannot write to stdout")
            .into()),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::*;

    #[test]
    fn the_command_line_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    /// Every flag and argument a user can see says what it does in `--help`.
    #[test]
    fn every_visible_argument_has_help() {
        fn visit(command: &clap::Command, path: &str, missing: &mut Vec<String>) {
            for arg in command.get_arguments() {
                let id = arg.get_id().as_str();
                if arg.is_hide_set() || id == "help" || id == "version" {
                    continue;
                }
                if arg.get_help().is_none() && arg.get_long_help().is_none() {
                    missing.push(format!("{path} {id}"));
                }
            }
            for sub in command.get_subcommands() {
                if sub.get_name() != "help" {
                    visit(sub, &format!("{path} {}", sub.get_name()), missing);
                }
            }
        }
        let mut missing = Vec::new();
        visit(&Cli::command(), "boot-image-controller", &mut missing);
        assert!(missing.is_empty(), "no help text: {missing:?}");
    }

    #[test]
    fn every_command_that_talks_to_a_cluster_takes_a_context() {
        for name in ["run", "revert"] {
            let command = Cli::command();
            let sub = command.find_subcommand(name).expect(name);
            for flag in ["kubeconfig", "context"] {
                assert!(
                    sub.get_arguments()
                        .any(|a| a.get_long() == Some(flag) && !a.is_hide_set()),
                    "{name} has no --{flag}"
                );
            }
        }
    }

    #[test]
    fn the_test_only_crds_command_is_hidden_but_works() {
        let command = Cli::command();
        assert!(command.find_subcommand("crds").expect("crds").is_hide_set());
        assert!(Cli::try_parse_from(["boot-image-controller", "crds"]).is_ok());
    }

    #[test]
    fn the_version_names_the_commit() {
        let version = Cli::command().render_version();
        assert!(
            version.contains(env!("CARGO_PKG_VERSION"))
                && version.contains(&format!("commit {}", env!("BIC_GIT_COMMIT"))),
            "{version}"
        );
    }

    #[test]
    fn causes_already_quoted_by_the_message_are_not_repeated() {
        let io = || std::io::Error::new(std::io::ErrorKind::NotFound, "gone");
        let quoting = crate::known_images::KnownImagesError {
            path: "known.txt".into(),
            source: io(),
        };
        let failure = Failure::input(quoting);
        assert_eq!(failure.code, Failure::INPUT_CODE);
        assert_eq!(
            failure.message(),
            "cannot read known images from known.txt: gone"
        );
        let wrapped = Failure::from(anyhow::Error::new(io()).context("cannot write to stdout"));
        assert_eq!(wrapped.message(), "cannot write to stdout: gone");
        assert_eq!(wrapped.code, 1);
    }
}
