//! `plan`: what the controller would do to the MachineSets described by manifest files.
//!
//! The JSON output is a contract (other tools parse it): exactly the planner's [`Plan`]. The
//! table is for people and may change.

use std::path::{Path, PathBuf};

use anyhow::Context as _;
use clap::builder::{PossibleValuesParser, TypedValueParser as _};
use clap::{Args, ValueEnum};

use super::{Failure, table, write_stdout};
use crate::api::{MachineConfiguration, MachineManager, MachineManagerSelector, ManagedBootImages};
use crate::arch::Arch;
use crate::bounded_read::MAX_INPUT_BYTES;
use crate::ec2::client::Ec2Client;
use crate::ec2::sigv4::Credentials;
use crate::facts::Lookup;
use crate::facts::ec2::Ec2Facts;
use crate::known_images;
use crate::manifests;
use crate::names::{MACHINE_CONFIGURATION_NAME, OPT_IN_ANNOTATION};
use crate::plan::{self, Action, ClusterSnapshot, Options, Plan};

#[derive(Debug, Args)]
pub struct PlanArgs {
    /// A manifest file, or a folder read recursively (*.yaml, *.yml, *.json), or `-` for
    /// standard input. Multi-document YAML and `kind: List` are read, so `oc get -o yaml` output
    /// and must-gathers work.
    #[arg(
        long = "manifests",
        short = 'f',
        value_name = "PATH",
        required_unless_present_any = ["live", "kubeconfig", "context", "all_contexts"],
        conflicts_with_all = ["kubeconfig", "context", "all_contexts"]
    )]
    pub manifests: Vec<PathBuf>,

    #[command(flatten)]
    pub live: super::live::LiveArgs,

    /// Output format: a table for people, the complete plan as JSON or YAML for tools.
    #[arg(long, short = 'o', value_enum, default_value_t = OutputFormat::Table)]
    pub output: OutputFormat,

    /// What if the administrator opted MachineSets in this way, whatever the MachineConfiguration
    /// says (or without one): `All` shows what opting every MachineSet in would change.
    #[arg(long, value_enum, value_name = "MODE")]
    pub assume_selection: Option<AssumedSelection>,

    /// Exit with 3 instead of 0 when the plan updates something (a pending change, for CI),
    /// like `terraform plan -detailed-exitcode`. Unusable input stays 2, other failures 1.
    #[arg(long)]
    pub detailed_exitcode: bool,

    /// Architecture of the control plane, and of MachineSets that do not name theirs; by default
    /// the `kubernetes.io/arch` of the control-plane Nodes in the manifests.
    #[arg(long, value_name = "ARCH", value_parser = arch_parser())]
    pub control_plane_arch: Option<Arch>,

    /// Update Cluster API MachineDeployments too. A MachineDeployment replaces every one of its
    /// machines when its template changes, so they are skipped (MachineDeploymentNotOptedIn)
    /// unless this is set. Plan as the controller runs.
    #[arg(long)]
    pub update_machine_deployments: bool,

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

    /// What EC2 says about the AMIs (owner, name, architecture) and the marketplace AMIs that
    /// could replace them, as JSON (what `--save-ec2-facts` writes). Without it or
    /// `--ec2-lookup`, AMIs are recognised by the golden streams and known images only.
    #[arg(long, value_name = "FILE", conflicts_with = "ec2_lookup")]
    pub ec2_facts: Option<PathBuf>,

    /// Ask EC2 (DescribeImages) about the AMIs, with the credentials in AWS_ACCESS_KEY_ID,
    /// AWS_SECRET_ACCESS_KEY and AWS_SESSION_TOKEN.
    #[arg(long)]
    pub ec2_lookup: bool,

    /// The EC2 endpoint of every region for `--ec2-lookup`, instead of
    /// `https://ec2.<region>.amazonaws.com`.
    #[arg(long, value_name = "URL", requires = "ec2_lookup")]
    pub ec2_endpoint: Option<String>,

    /// Writes what `--ec2-lookup` learned to FILE, to plan again without EC2 (`--ec2-facts`).
    #[arg(long, value_name = "FILE", requires = "ec2_lookup")]
    pub save_ec2_facts: Option<PathBuf>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum OutputFormat {
    /// A table for people.
    Table,
    /// The table, then every patch the controller would send, operation by operation.
    Wide,
    /// The plan as JSON, for tools.
    Json,
    /// The plan as YAML: the same content as JSON.
    Yaml,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum AssumedSelection {
    /// Every MachineSet selected.
    #[value(name = "All")]
    All,
    /// No MachineSet selected.
    #[value(name = "None")]
    None,
}

/// `--detailed-exitcode`: the plan has at least one update.
pub const CHANGES_PENDING_CODE: u8 = 3;

fn arch_parser() -> impl clap::builder::TypedValueParser<Value = Arch> {
    PossibleValuesParser::new(Arch::ALL.map(Arch::kube_name)).try_map(|s| s.parse::<Arch>())
}

/// Runs the command; `Ok` holds the exit code (0, or [`CHANGES_PENDING_CODE`]).
pub fn run(args: &PlanArgs) -> Result<u8, Failure> {
    let mut snapshot = if args.live.requested() {
        read_cluster(&args.live)?
    } else {
        load(&args.manifests)?
    };
    let plan = plan_snapshot(args, &mut snapshot, "")?;
    let output = match args.output {
        OutputFormat::Table => table::render(&plan, &table::ClusterFacts::of(&snapshot.cluster)),
        OutputFormat::Wide => {
            let mut text = table::render(&plan, &table::ClusterFacts::of(&snapshot.cluster));
            text.push_str(&patches(&plan)?);
            text
        }
        format => serialized(&plan, format)?,
    };
    write_stdout(&output)?;
    Ok(if args.detailed_exitcode && pending(&plan) {
        CHANGES_PENDING_CODE
    } else {
        0
    })
}

/// Whether the plan updates something.
pub(super) fn pending(plan: &Plan) -> bool {
    plan.decisions.iter().any(|e| e.action == Action::Update)
}

/// The plan of one snapshot, as the flags ask for it; warnings to standard error, after
/// `prefix` (the cluster's context in a fleet report).
pub(super) fn plan_snapshot(
    args: &PlanArgs,
    snapshot: &mut manifests::Snapshot,
    prefix: &str,
) -> Result<Plan, Failure> {
    if let Some(mode) = args.assume_selection {
        assume_selection(&mut snapshot.cluster, mode);
    }
    for warning in &snapshot.warnings {
        eprintln!("warning: {prefix}{warning}");
    }
    if args.published_images {
        snapshot
            .cluster
            .known_images
            .extend(known_images::published());
    }
    if let Some(file) = &args.known_images_file {
        let known = known_images::read(file).map_err(Failure::input)?;
        snapshot.cluster.known_images.extend(known);
    }
    if snapshot.machines.is_empty() {
        eprintln!(
            "warning: {prefix}no MachineSets (machine.openshift.io/v1beta1 or \
             cluster.x-k8s.io) or ControlPlaneMachineSets (machine.openshift.io/v1) found in the \
             manifests"
        );
    }
    let options = Options {
        control_plane_arch: args.control_plane_arch,
        update_machine_deployments: args.update_machine_deployments,
        now: args.now.unwrap_or_else(jiff::Timestamp::now),
        ..Options::default()
    };
    snapshot.cluster.ec2 = ec2_facts(args, snapshot, &options)?;
    let plan = plan::plan(&snapshot.cluster, &snapshot.machines, &options);
    Ok(plan)
}

/// What EC2 says, from `--ec2-facts` or asked with `--ec2-lookup`; nothing otherwise.
fn ec2_facts(
    args: &PlanArgs,
    snapshot: &manifests::Snapshot,
    options: &Options,
) -> Result<Ec2Facts, Failure> {
    if let Some(path) = &args.ec2_facts {
        let text = crate::bounded_read::read_regular_file(path, MAX_INPUT_BYTES)
            .with_context(|| format!("cannot read {}", path.display()))
            .map_err(Failure::input)?;
        return serde_json::from_str(&text)
            .with_context(|| format!("{} is not an EC2 facts file", path.display()))
            .map_err(Failure::input);
    }
    if !args.ec2_lookup {
        return Ok(Ec2Facts::default());
    }
    let var = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
    let (Some(access_key_id), Some(secret_access_key)) =
        (var("AWS_ACCESS_KEY_ID"), var("AWS_SECRET_ACCESS_KEY"))
    else {
        return Err(Failure::input(anyhow::anyhow!(
            "--ec2-lookup needs AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (credentials allowed \
             ec2:DescribeImages)"
        )));
    };
    let credentials = Credentials {
        access_key_id,
        secret_access_key,
        session_token: var("AWS_SESSION_TOKEN"),
    };
    // A plan without EC2 names the AMIs its decisions would ask about; the plan printed is
    // made again with the answers.
    let unasked = plan::plan(&snapshot.cluster, &snapshot.machines, options);
    let wanted = (unasked.decisions.iter())
        .filter_map(|d| match d.asks.as_ref()? {
            Lookup::Ami { region, image_id } => Some((region.clone(), image_id.clone())),
            Lookup::Template(_) => None,
        })
        .collect();
    // The proxy of the environment, as the controller reads it; the system's CA roots only.
    let egress = crate::http_client::Egress::from_env(None);
    let client =
        Ec2Client::new(args.ec2_endpoint.as_deref(), None, &egress).map_err(Failure::input)?;
    let facts = super::runtime()?.block_on(crate::ec2::gather(&client, &credentials, &wanted));
    for (region, message) in facts.unavailable() {
        eprintln!("warning: EC2 in {region} could not be asked: {message}");
    }
    if let Some(path) = &args.save_ec2_facts {
        let text = serde_json::to_string_pretty(&facts).context("cannot serialize EC2 facts")?;
        std::fs::write(path, text + "\n")
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    Ok(facts)
}

fn read_cluster(args: &super::live::LiveArgs) -> Result<manifests::Snapshot, Failure> {
    let cluster = args.cluster(args.contexts.first().map(String::as_str));
    let read = super::live::snapshot(&cluster, &args.machine_api_namespace, &args.objects);
    let read = super::runtime()?.block_on(read);
    Ok(read.map_err(|e| anyhow::anyhow!("cannot read the cluster: {e}"))?)
}

/// The manifests, `-` being standard input (on its own: a snapshot is read from one source
/// or from paths, and piping is for the one-source case: `oc get ... -o yaml | plan -f -`).
fn load(paths: &[PathBuf]) -> Result<manifests::Snapshot, Failure> {
    let stdin = Path::new("-");
    if !paths.iter().any(|p| p == stdin) {
        return manifests::load(paths).map_err(Failure::input);
    }
    if paths.len() > 1 {
        return Err(Failure::input(anyhow::anyhow!(
            "-f - reads everything from standard input: give no other -f"
        )));
    }
    let text = crate::bounded_read::read_bounded(std::io::stdin(), MAX_INPUT_BYTES)
        .context("cannot read standard input")
        .map_err(Failure::input)?;
    manifests::from_str("<stdin>", &text).map_err(Failure::input)
}

/// Replaces (or adds) the Machine API `machinesets` entry of what the administrator declared,
/// as our opt-in annotation (which the planner reads first), creating the MachineConfiguration
/// when the manifests have none. Other entries stay, a Cluster API `machinesets` one too:
/// entries are keyed by resource and apiGroup.
fn assume_selection(cluster: &mut ClusterSnapshot, mode: AssumedSelection) {
    let machine_sets = crate::machine_kind::MachineKind::MachineSet;
    let configuration = cluster.machine_configuration.get_or_insert_with(|| {
        MachineConfiguration::new(MACHINE_CONFIGURATION_NAME, Default::default())
    });
    let annotations = configuration
        .metadata
        .annotations
        .get_or_insert_with(Default::default);
    let declared = match annotations.get(OPT_IN_ANNOTATION) {
        Some(text) => serde_json::from_str::<ManagedBootImages>(text).ok(),
        None => configuration.spec.managed_boot_images.clone(),
    };
    let mut managers = declared
        .and_then(|d| d.machine_managers)
        .unwrap_or_default();
    let replaced = |m: &MachineManager| {
        m.resource == machine_sets.plural() && m.api_group == machine_sets.api_group()
    };
    managers.retain(|m| !replaced(m));
    managers.push(MachineManager {
        resource: machine_sets.plural().into(),
        api_group: machine_sets.api_group().into(),
        selection: MachineManagerSelector {
            mode: match mode {
                AssumedSelection::All => "All",
                AssumedSelection::None => "None",
            }
            .into(),
            partial: None,
        },
    });
    let declared = ManagedBootImages {
        machine_managers: Some(managers),
    };
    let text = serde_json::to_string(&declared).unwrap_or_default();
    annotations.insert(OPT_IN_ANNOTATION.into(), text);
}

/// The patches of a plan as `-o wide` lists them: one line per operation, each object's
/// operations in the order the API server applies them.
pub(super) fn patches(plan: &Plan) -> Result<String, Failure> {
    let mut out = String::from("\nPatches (RFC 6902 JSON Patch, as `run` sends them):\n");
    let entries: Vec<_> = plan
        .decisions
        .iter()
        .filter(|e| !e.patch.is_empty())
        .collect();
    if entries.is_empty() {
        out.push_str("  none\n");
    }
    for entry in entries {
        out.push_str(&format!("  {}/{}:\n", entry.namespace, entry.name));
        if let Some(copy) = &entry.infrastructure_template {
            out.push_str(&format!(
                "    (first creates {} {}, a copy of {} on the new image)\n",
                copy.kind, copy.to, copy.from
            ));
        }
        for op in &entry.patch.0 {
            let op = serde_json::to_string(op).context("cannot serialize a patch")?;
            out.push_str(&format!("    {op}\n"));
        }
    }
    Ok(out)
}

/// `value` as `-o json` or `-o yaml` prints it (the same content).
pub(super) fn serialized(
    value: &impl serde::Serialize,
    format: OutputFormat,
) -> Result<String, Failure> {
    let text = match format {
        OutputFormat::Yaml => serde_saphyr::to_string(value).context("cannot serialize as YAML")?,
        _ => serde_json::to_string_pretty(value).context("cannot serialize as JSON")? + "\n",
    };
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_assumed_selection_replaces_the_machine_api_entry_only() {
        let mut cluster = ClusterSnapshot::default();
        let mc: MachineConfiguration = serde_json::from_value(serde_json::json!({
            "apiVersion": "operator.openshift.io/v1", "kind": "MachineConfiguration",
            "metadata": {"name": MACHINE_CONFIGURATION_NAME},
            "spec": {"managedBootImages": {"machineManagers": [
                {"resource": "machinesets", "apiGroup": "cluster.x-k8s.io", "selection": {"mode": "All"}},
                {"resource": "machinesets", "apiGroup": "machine.openshift.io", "selection": {"mode": "All"}},
            ]}},
        }))
        .expect("a MachineConfiguration");
        cluster.machine_configuration = Some(mc);
        assume_selection(&mut cluster, AssumedSelection::None);
        let assumed = cluster
            .machine_configuration
            .expect("a MachineConfiguration");
        // Declared as our annotation, which the planner reads before the spec.
        let annotation = &assumed.metadata.annotations.as_ref().unwrap()[OPT_IN_ANNOTATION];
        let declared: ManagedBootImages = serde_json::from_str(annotation).unwrap();
        let managers = declared.machine_managers.unwrap_or_default();
        let modes: Vec<(&str, &str)> = (managers.iter())
            .map(|m| (m.api_group.as_str(), m.selection.mode.as_str()))
            .collect();
        assert_eq!(
            modes,
            [
                ("cluster.x-k8s.io", "All"),
                ("machine.openshift.io", "None")
            ]
        );
    }
}
