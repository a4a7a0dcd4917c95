//! `plan`: what the controller would do to the MachineSets described by manifest files.
//!
//! The JSON output is a contract (other tools parse it): exactly the planner's [`Plan`]. The
//! table is for people and may change.

use std::path::PathBuf;

use anyhow::Context as _;
use clap::builder::{PossibleValuesParser, TypedValueParser as _};
use clap::{Args, ValueEnum};

use super::{Failure, table, write_stdout};
use crate::arch::Arch;
use crate::known_images::KnownImages;
use crate::manifests;
use crate::plan::{self, Options, Plan};

#[derive(Debug, Args)]
pub struct PlanArgs {
    /// A manifest file, or a folder read recursively (*.yaml, *.yml, *.json). Multi-document
    /// YAML and `kind: List` are read, so `oc get -o yaml` output and must-gathers work.
    #[arg(long = "manifests", short = 'f', value_name = "PATH", required = true)]
    pub manifests: Vec<PathBuf>,

    /// Output format: a table for people, the complete plan as JSON for tools.
    #[arg(long, short = 'o', value_enum, default_value_t = OutputFormat::Table)]
    pub output: OutputFormat,

    /// Architecture of the control plane, and of MachineSets that do not name theirs; by default
    /// the `kubernetes.io/arch` of the control-plane Nodes in the manifests.
    #[arg(long, value_name = "ARCH", value_parser = arch_parser())]
    pub control_plane_arch: Option<Arch>,

    /// Plan as of this time (RFC 3339) instead of now: the time recorded in the history and
    /// hot-loop annotations of each patch, e.g. to reproduce exactly what `run` sent at a time
    /// found in a MachineSet's history.
    #[arg(long, value_name = "TIME")]
    pub now: Option<jiff::Timestamp>,

    /// Whether the RHCOS AMIs this program ships (every AMI published for OpenShift 4.12 and
    /// later) count as CoreOS images.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub published_images: bool,

    /// Image references known to be published CoreOS images, one per line (`#` comments).
    /// Images in neither this list nor the golden stream are custom and never replaced.
    #[arg(long, value_name = "FILE")]
    pub known_images_file: Option<PathBuf>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum OutputFormat {
    /// A table for people.
    Table,
    /// The plan as JSON, for tools.
    Json,
}

fn arch_parser() -> impl clap::builder::TypedValueParser<Value = Arch> {
    PossibleValuesParser::new(Arch::ALL.map(Arch::kube_name)).try_map(|s| s.parse::<Arch>())
}

pub fn run(args: &PlanArgs) -> Result<(), Failure> {
    let mut snapshot = manifests::load(&args.manifests).map_err(Failure::input)?;
    for warning in &snapshot.warnings {
        eprintln!("warning: {warning}");
    }
    if args.published_images {
        snapshot
            .cluster
            .known_images
            .merge(&KnownImages::published());
    }
    if let Some(file) = &args.known_images_file {
        let known = KnownImages::read(file).map_err(Failure::input)?;
        snapshot.cluster.known_images.extend(known.iter().cloned());
    }
    if snapshot.machine_sets.is_empty() && snapshot.control_plane_machine_sets.is_empty() {
        eprintln!(
            "warning: no MachineSets (machine.openshift.io/v1beta1) or ControlPlaneMachineSets \
             (machine.openshift.io/v1) found in the manifests"
        );
    }
    let options = Options {
        control_plane_arch: args.control_plane_arch,
        now: args.now.unwrap_or_else(jiff::Timestamp::now),
        ..Options::default()
    };
    let plan = plan::plan(
        &snapshot.cluster,
        &snapshot.machine_sets,
        &snapshot.control_plane_machine_sets,
        &options,
    );
    let output = match args.output {
        OutputFormat::Json => json(&plan)?,
        OutputFormat::Table => table::render(&plan, &table::ClusterFacts::of(&snapshot.cluster)),
    };
    write_stdout(&output)
}

fn json(plan: &Plan) -> Result<String, Failure> {
    let mut text = serde_json::to_string_pretty(plan).context("cannot serialize the plan")?;
    text.push('\n');
    Ok(text)
}
