//! The command line. Each subcommand is one variant of [`Command`] and one arm in [`main`];
//! its arguments and code live in a file of their own.

mod crds;
mod plan;
mod revert;
mod run;
mod table;

use std::io::Write as _;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

pub use plan::{OutputFormat, PlanArgs};
pub use revert::RevertArgs;

#[derive(Debug, Parser)]
#[command(
    name = "boot-image-controller",
    version,
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
    /// Show what the controller would change, from manifest files (no cluster access needed).
    ///
    /// Reads `oc get -o yaml` output, must-gather folders or hand-written files, and prints the
    /// decision for every MachineSet and ControlPlaneMachineSet.
    Plan(PlanArgs),
    /// Print the CRDs of the OpenShift kinds the controller touches, for local test clusters.
    ///
    /// A multi-document YAML stream for `kubectl apply -f -`. Real clusters ship the upstream
    /// CRDs; these are generated from our own types.
    Crds,
    /// Run the controller against a cluster (in-cluster config or a kubeconfig).
    Run(crate::controller::RunArgs),
    /// Undo the controller's last change(s) to one MachineSet or ControlPlaneMachineSet.
    ///
    /// Restores the boot image and stub secret recorded in its history annotation with one
    /// guarded JSON Patch, opts it out (annotation
    /// machineconfiguration.openshift.io/boot-image-updates=disabled) and drops the undone
    /// entries from the history. Exit codes: 0 reverted, 2 nothing recorded to revert (or not
    /// found), 3 refused because a value changed since the controller wrote it, 1 other errors.
    Revert(RevertArgs),
}

/// Parses the arguments, runs the subcommand and turns its outcome into the exit code.
pub fn main() -> ExitCode {
    // clap prints usage errors itself and exits with 2, the code we use for unusable input too.
    let cli = Cli::parse();
    let outcome = match cli.command {
        Command::Plan(args) => plan::run(&args),
        Command::Crds => crds::run(),
        Command::Run(args) => run::run(args),
        Command::Revert(args) => revert::run(&args),
    };
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(failure) => failure.report(),
    }
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

    pub fn code(&self) -> u8 {
        self.code
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

impl From<anyhow::Error> for Failure {
    fn from(error: anyhow::Error) -> Self {
        Failure { code: 1, error }
    }
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

    #[test]
    fn causes_already_quoted_by_the_message_are_not_repeated() {
        let io = || std::io::Error::new(std::io::ErrorKind::NotFound, "gone");
        let quoting = crate::known_images::KnownImagesError {
            path: "known.txt".into(),
            source: io(),
        };
        let failure = Failure::input(quoting);
        assert_eq!(failure.code(), Failure::INPUT_CODE);
        assert_eq!(
            failure.message(),
            "cannot read known images from known.txt: gone"
        );
        let wrapped = Failure::from(anyhow::Error::new(io()).context("cannot write to stdout"));
        assert_eq!(wrapped.message(), "cannot write to stdout: gone");
        assert_eq!(wrapped.code(), 1);
    }
}
