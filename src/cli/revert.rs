//! `revert`: put back the boot image and stub secret the controller replaced on one MachineSet
//! or ControlPlaneMachineSet, from the history recorded on it, and opt it out.
//!
//! The decision is [`crate::revert::revert`] (pure); this file reads the object, sends the one
//! guarded JSON Patch and says what changed.

use std::fmt::Write as _;

use anyhow::{Context as _, anyhow};
use clap::{ArgGroup, Args};
use kube::api::{Api, DynamicObject, Patch, PatchParams};

use super::{Failure, write_stdout};
use crate::api::Secret;
use crate::api_client;
use crate::machine_kind::MachineKind;
use crate::names::{self, OPT_OUT_ANNOTATION, OPT_OUT_VALUE};
use crate::plan::history::HistoryEntry;
use crate::plan::{ClusterSnapshot, Options, Planner, Recognition};
use crate::platform::display_image as display;
use crate::revert::stub_secret::{self, StubRestore};
use crate::revert::{self, Revert, RevertError};

/// Exit code when the object changed since the controller wrote it: the revert is refused.
pub const REFUSED_CODE: u8 = 3;

#[derive(Debug, Args)]
#[command(group(
    ArgGroup::new("object")
        .required(true)
        .args([
            "machineset",
            "control_plane_machine_set",
            "cluster_api_machineset",
            "cluster_api_machinedeployment",
        ])
))]
pub struct RevertArgs {
    /// Namespace of the object [default: openshift-machine-api, or openshift-cluster-api for
    /// --cluster-api-machineset and --cluster-api-machinedeployment].
    #[arg(long, short = 'n')]
    pub namespace: Option<String>,

    /// The MachineSet to revert.
    #[arg(long, value_name = "NAME")]
    pub machineset: Option<String>,

    /// The ControlPlaneMachineSet to revert (usually `cluster`).
    #[arg(long, value_name = "NAME")]
    pub control_plane_machine_set: Option<String>,

    /// The Cluster API MachineSet (`cluster.x-k8s.io`) to point back at its former
    /// infrastructure template.
    #[arg(long, value_name = "NAME")]
    pub cluster_api_machineset: Option<String>,

    /// The Cluster API MachineDeployment (`cluster.x-k8s.io`) to point back at its former
    /// infrastructure template (which rolls its machines again).
    #[arg(long, value_name = "NAME")]
    pub cluster_api_machinedeployment: Option<String>,

    /// How many recorded changes to undo, newest first.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    pub steps: u32,

    /// Print the patch and the changes and let the API server validate it; write nothing.
    #[arg(long)]
    pub dry_run: bool,

    /// Put back a boot image even when the controller does not recognise it as a CoreOS image
    /// (the history annotation can be edited by anyone who can edit the object).
    #[arg(long)]
    pub allow_unrecognised_image: bool,

    /// Leave the stub secret as the controller upgraded it (Ignition 3) when other objects name
    /// it too; without this, such a revert is refused, since putting spec 2 back would leave
    /// them with a stub their new images cannot read.
    #[arg(long)]
    pub keep_stub_secret: bool,

    #[command(flatten)]
    pub cluster: crate::kubeconfig::ClusterArgs,

    /// Where the golden stream and known images are read, to judge the image put back.
    #[command(flatten)]
    pub objects: super::live::ClusterObjects,
}

impl RevertArgs {
    fn target(&self) -> (MachineKind, &str) {
        let named = [
            (MachineKind::MachineSet, &self.machineset),
            (
                MachineKind::ControlPlaneMachineSet,
                &self.control_plane_machine_set,
            ),
            (
                MachineKind::ClusterApiMachineSet,
                &self.cluster_api_machineset,
            ),
            (
                MachineKind::ClusterApiMachineDeployment,
                &self.cluster_api_machinedeployment,
            ),
        ];
        named
            .into_iter()
            .find_map(|(kind, name)| Some((kind, name.as_deref()?)))
            // clap's required group guarantees one of them.
            .expect("--machineset, --control-plane-machine-set or --cluster-api-machineset")
    }

    fn namespace(&self) -> &str {
        match (&self.namespace, self.target().0.is_cluster_api()) {
            (Some(namespace), _) => namespace,
            (None, true) => names::CLUSTER_API_NAMESPACE,
            (None, false) => names::MACHINE_API_NAMESPACE,
        }
    }
}

pub fn run(args: &RevertArgs) -> Result<(), Failure> {
    super::runtime()?.block_on(revert_object(args))
}

async fn revert_object(args: &RevertArgs) -> Result<(), Failure> {
    let (kind, name) = args.target();
    let described = format!("{kind} {}/{name}", args.namespace());
    let client = api_client::connect(&args.cluster)
        .await
        .map_err(anyhow::Error::new)?;
    let api: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), args.namespace(), &kind.api_resource());
    let read = api.get_opt(name).await;
    let Some(object) = read.with_context(|| format!("cannot read {described}"))? else {
        return Err(Failure::input(anyhow!("{described} not found")));
    };
    let value = serde_json::to_value(&object).context("cannot read the object as JSON")?;
    let planned = revert::revert(kind, &value, args.steps as usize).map_err(refusal)?;
    let refused = |why: String| {
        Failure::runtime(
            REFUSED_CODE,
            anyhow!("{described}: {why}; nothing was written"),
        )
    };
    if let Some(why) = missing_template(&client, args.namespace(), &planned).await {
        return Err(refused(why));
    }
    let provenance = provenance(args, kind, &value, &planned).await;
    if let Some(why) = provenance.refusal(args.allow_unrecognised_image) {
        return Err(refused(why));
    }
    let stub = (stub_to_restore(&client, args, kind, &value, &planned).await).map_err(refused)?;

    let patch = Patch::Json::<()>(planned.patch.clone());
    let params = PatchParams {
        dry_run: args.dry_run,
        // Its own manager: managedFields tell a person's revert from the controller's writes.
        field_manager: Some(format!("{}-revert", crate::names::FIELD_MANAGER)),
        ..PatchParams::default()
    };
    let mut out = report(&described, &planned, args.dry_run);
    out.push_str(&provenance.describe());
    let secrets: Api<Secret> = Api::namespaced(client.clone(), args.namespace());
    out.push_str(&stub.describe());
    if let StubToRestore::Restore(restore) = &stub {
        send_stub_patch(&secrets, restore, &restore.patch, &params)
            .await
            .map_err(|e| {
                let stub = &restore.name;
                let failed = format!("cannot put back the stub secret {stub} of {described}");
                write_failure(&format!("{described}: its stub secret {stub}"), failed, e)
            })?;
    }
    if args.dry_run {
        let _ = writeln!(
            out,
            "\nPatch (RFC 6902):\n{}",
            serde_json::to_string_pretty(&planned.patch).context("cannot print the patch")?
        );
    }
    let sent = api.patch(name, &params, &patch).await;
    if let (Err(_), StubToRestore::Restore(restore), false) = (&sent, &stub, args.dry_run) {
        // The stub went back first: it must not stay spec 2 under a MachineSet on a new image.
        if let Err(e) = send_stub_patch(&secrets, restore, &restore.undo, &params).await {
            return Err(stub_not_upgraded_again(&described, &restore.name, e));
        }
    }
    sent.map_err(|e| write_failure(&described, format!("cannot patch {described}"), e))?;
    out.push('\n');
    out.push_str(&if args.dry_run {
        "Dry run: the API server accepted the patch; nothing was written.\n".to_string()
    } else {
        opt_back_in(kind, args.namespace(), name)
    });
    write_stdout(&out)
}

/// The revert's patch was refused after its stub secret went back, and upgrading the stub
/// again failed too: what the administrator must do by hand.
fn stub_not_upgraded_again(described: &str, stub: &str, e: impl std::fmt::Display) -> Failure {
    Failure::from(anyhow!(
        "{described} could not be reverted, and its stub secret {stub}, already put back to \
         its earlier content, could not be upgraded again ({e}): restore its userData from \
         the key {} by hand, or re-run the revert",
        names::PREVIOUS_USER_DATA_KEY
    ))
}

/// Why a write of the revert (to `written`) was not applied; `failed` says what could not be done.
fn write_failure(written: &str, failed: String, error: kube::Error) -> Failure {
    match error {
        // 422: a `test` op failed; someone wrote between our read and our patch.
        kube::Error::Api(e) if e.code == 422 || e.code == 409 => Failure::runtime(
            REFUSED_CODE,
            anyhow!(
                "{written} changed while reverting ({}); nothing was written, run the revert \
                 again to re-check",
                e.message
            ),
        ),
        e => anyhow!(e).context(failed).into(),
    }
}

/// What becomes of the stub secret of a reverted object.
enum StubToRestore {
    Nothing,
    /// Left upgraded, as `--keep-stub-secret` asked: the note says so.
    Kept(String),
    Restore(Box<StubRestore>),
}

impl StubToRestore {
    /// What the revert says of the stub secret, a line or nothing.
    fn describe(&self) -> String {
        match self {
            StubToRestore::Nothing => String::new(),
            StubToRestore::Kept(note) => format!("{note}\n"),
            StubToRestore::Restore(restore) => format!(
                "Stub secret {}: Ignition {} -> the content it had before the controller \
                 upgraded it\n",
                restore.name,
                restore.upgraded_to.as_deref().unwrap_or("3")
            ),
        }
    }
}

/// The stub secret to put back with the revert: when the boot image goes back and the
/// controller upgraded the stub the object names in place (see [`crate::revert::stub_secret`]).
/// `Err` says why the revert must not go ahead.
async fn stub_to_restore(
    client: &kube::Client,
    args: &RevertArgs,
    kind: MachineKind,
    object: &serde_json::Value,
    planned: &Revert,
) -> Result<StubToRestore, String> {
    let restores_image = (planned.changes.iter()).any(|c| c.field == revert::Field::BootImage);
    let named = object
        .pointer(kind.provider_spec_path().as_str())
        .and_then(crate::plan::stub::current_name);
    let (false, true, Some(stub_name)) = (kind.is_cluster_api(), restores_image, named) else {
        return Ok(StubToRestore::Nothing);
    };
    let secrets: Api<Secret> = Api::namespaced(client.clone(), args.namespace());
    let secret = match api_client::bounded(secrets.get_opt(stub_name)).await {
        Ok(Some(secret)) => secret,
        Ok(None) => return Ok(StubToRestore::Nothing),
        Err(e) => return Err(format!("cannot read its stub secret {stub_name}: {e}")),
    };
    let Some(restore) = stub_secret::restore(&secret) else {
        return Ok(StubToRestore::Nothing);
    };
    let mut objects = Vec::new();
    for other in [MachineKind::MachineSet, MachineKind::ControlPlaneMachineSet] {
        let api: Api<DynamicObject> =
            Api::namespaced_with(client.clone(), args.namespace(), &other.api_resource());
        match api_client::bounded(api.list(&Default::default())).await {
            Ok(list) => {
                for listed in list.items {
                    let Ok(mut value) = serde_json::to_value(&listed) else {
                        continue;
                    };
                    // Named with their kind, so that a ControlPlaneMachineSet is never taken for
                    // a MachineSet of the same name.
                    let named = format!("{other} {}", listed.metadata.name.unwrap_or_default());
                    value["metadata"]["name"] = named.into();
                    objects.push(value);
                }
            }
            // A cluster without ControlPlaneMachineSets does not serve them.
            Err(kube::Error::Api(status)) if status.code == 404 => {}
            Err(e) => {
                return Err(format!(
                    "cannot list the {} that may share its stub: {e}",
                    other.plural_title()
                ));
            }
        }
    }
    let name = object
        .pointer("/metadata/name")
        .and_then(serde_json::Value::as_str);
    let itself = format!("{kind} {}", name.unwrap_or_default());
    let others = stub_secret::other_users(&objects, &itself, stub_name);
    if others.is_empty() {
        return Ok(StubToRestore::Restore(Box::new(restore)));
    }
    if args.keep_stub_secret {
        return Ok(StubToRestore::Kept(format!(
            "Stub secret {stub_name}: kept at Ignition 3 (--keep-stub-secret); its earlier \
             content is under the key {} of the secret",
            names::PREVIOUS_USER_DATA_KEY
        )));
    }
    Err(format!(
        "the controller upgraded its stub secret {stub_name} to Ignition 3 in place, and the \
         boot image put back may read only the spec-2 content it had; but {} name it too, and \
         would be left with a stub their images cannot read. Point this object at a stub of its \
         own holding the earlier content (the key {} of {stub_name}), or re-run with \
         --keep-stub-secret to revert the image alone",
        others.join(", "),
        names::PREVIOUS_USER_DATA_KEY
    ))
}

async fn send_stub_patch(
    secrets: &Api<Secret>,
    restore: &StubRestore,
    ops: &crate::plan::Patch,
    params: &PatchParams,
) -> Result<(), kube::Error> {
    let patch = Patch::Json::<()>(ops.clone());
    api_client::bounded(secrets.patch(&restore.name, params, &patch))
        .await
        .map(|_| ())
}

/// Why a revert that points a Cluster API MachineSet back at an earlier template must not go
/// ahead: that template is gone (the controller deletes its unused copies), and a MachineSet
/// naming a missing template cannot create machines.
async fn missing_template(
    client: &kube::Client,
    namespace: &str,
    planned: &Revert,
) -> Option<String> {
    let restored = planned
        .changes
        .iter()
        .find(|c| c.field == revert::Field::InfrastructureTemplate)?;
    let name = restored.to.as_str()?;
    let templates: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        namespace,
        &crate::plan::cluster_api_templates::api_resource(),
    );
    match api_client::bounded(templates.get_opt(name)).await {
        Ok(Some(_)) => None,
        Ok(None) => Some(format!(
            "the template it would point back at, {name}, no longer exists (revert fewer steps, \
             or recreate it first)"
        )),
        Err(e) => Some(format!(
            "cannot tell whether the template {name} exists: {e}"
        )),
    }
}

/// Where the values a revert puts back came from, and what the controller makes of them.
struct Provenance {
    /// Field managers that wrote the history annotation.
    writers: Vec<String>,
    /// `None` when the revert puts back no boot image.
    image: Option<Recognition>,
}

impl Provenance {
    /// Why the revert must not go ahead without `--allow-unrecognised-image`.
    fn refusal(&self, allowed: bool) -> Option<String> {
        let why = match &self.image {
            None | Some(Recognition::CoreOs) => return None,
            Some(Recognition::NotCoreOs(why)) => {
                format!("the boot image it would put back is not a CoreOS image: {why}")
            }
            Some(Recognition::Unknown(why)) => {
                format!(
                    "cannot tell whether the boot image it would put back is a CoreOS image: {why}"
                )
            }
        };
        (!allowed).then(|| {
            format!(
                "{why}. The history annotation can be written by anyone who can edit the object \
                 (written by: {}); check the value, then re-run with --allow-unrecognised-image to \
                 put it back anyway",
                self.writers_text()
            )
        })
    }

    fn writers_text(&self) -> String {
        if self.writers.is_empty() {
            "unknown".into()
        } else {
            self.writers.join(", ")
        }
    }

    fn describe(&self) -> String {
        let mut out = format!("\nHistory written by: {}\n", self.writers_text());
        let foreign: Vec<&str> = (self.writers.iter().map(String::as_str))
            .filter(|w| !w.starts_with(crate::names::FIELD_MANAGER))
            .collect();
        if !foreign.is_empty() {
            let _ = writeln!(
                out,
                "  warning: not only the controller wrote it ({}): check the values above",
                foreign.join(", ")
            );
        }
        match &self.image {
            None => {}
            Some(Recognition::CoreOs) => {
                out.push_str("Boot image put back: a CoreOS image the controller recognises\n");
            }
            Some(Recognition::NotCoreOs(why) | Recognition::Unknown(why)) => {
                let _ = writeln!(
                    out,
                    "Boot image put back: NOT recognised as a CoreOS image ({why}); allowed by \
                     --allow-unrecognised-image"
                );
            }
        }
        out
    }
}

/// Judges the boot image the revert would put back the way the controller judges images: with
/// the cluster's golden stream, known images and platform, read as `plan --live` reads them.
async fn provenance(
    args: &RevertArgs,
    kind: MachineKind,
    object: &serde_json::Value,
    planned: &Revert,
) -> Provenance {
    let writers = revert::history_writers(object);
    if !(planned.changes.iter()).any(|c| c.field == revert::Field::BootImage) {
        return Provenance {
            writers,
            image: None,
        };
    }
    let image = match super::live::snapshot(&args.cluster, args.namespace(), &args.objects).await {
        Err(e) => Recognition::Unknown(format!("cannot read the cluster: {e}")),
        Ok(snapshot) => match revert::applied(object, planned) {
            Err(e) => Recognition::Unknown(format!("the revert does not apply: {e}")),
            Ok(after) => recognise(&snapshot.cluster, kind, after),
        },
    };
    Provenance {
        writers,
        image: Some(image),
    }
}

/// The controller's judgement of the boot image of `after`. A Cluster API object is never
/// asked: its revert restores a template reference, never an image.
fn recognise(
    cluster: &ClusterSnapshot,
    kind: MachineKind,
    after: serde_json::Value,
) -> Recognition {
    match crate::manifests::machine_object(kind, after) {
        Err(e) => Recognition::Unknown(format!("cannot read it as a {kind}: {e}")),
        Ok(object) => Planner::new(cluster, &Options::default()).recognise(object.as_ref()),
    }
}

fn refusal(error: RevertError) -> Failure {
    match error {
        RevertError::ChangedSince { .. } => Failure::runtime(REFUSED_CODE, error),
        _ => Failure::input(error),
    }
}

/// What the revert undoes and changes, for people.
fn report(described: &str, planned: &Revert, dry_run: bool) -> String {
    let mut out = String::new();
    let verb = if dry_run { "Would revert" } else { "Reverted" };
    let _ = writeln!(
        out,
        "{verb} {described}: {} recorded change(s) undone, newest first:",
        planned.reverted.len()
    );
    for entry in &planned.reverted {
        let _ = writeln!(out, "  {}", describe_entry(entry));
    }
    out.push_str("\nChanges:\n");
    let rows: Vec<Vec<String>> = planned
        .changes
        .iter()
        .map(|c| {
            vec![
                c.field.to_string(),
                format!("{} -> {}", display(Some(&c.from)), display(Some(&c.to))),
                format!("({})", c.path),
            ]
        })
        .collect();
    for line in super::table::aligned(&rows).lines() {
        let _ = writeln!(out, "  {line}");
    }
    if rows.is_empty() {
        out.push_str(
            "  none: the undone entries hold no value that differs from the current one\n",
        );
    }
    let _ = writeln!(
        out,
        "  annotation {OPT_OUT_ANNOTATION}={OPT_OUT_VALUE}: the controller leaves it alone"
    );
    let _ = writeln!(
        out,
        "\nHistory: {} recorded change(s) left{}",
        planned.remaining.len(),
        match planned.remaining.last() {
            Some(entry) => format!("; a further revert would undo: {}", describe_entry(entry)),
            None => String::new(),
        }
    );
    out
}

fn describe_entry(entry: &HistoryEntry) -> String {
    let mut text = entry.time.clone();
    if let Some(release) = &entry.release {
        let _ = write!(text, " release {release}");
    }
    if !entry.stream.is_empty() {
        let _ = write!(text, " ({})", entry.stream);
    }
    let changes = entry.describe_changes();
    if !changes.is_empty() {
        let _ = write!(text, ": {changes}");
    }
    text
}

fn opt_back_in(kind: MachineKind, namespace: &str, name: &str) -> String {
    let (resource, group) = (kind.plural(), kind.api_group());
    format!(
        "To let the controller manage it again (it will move it to the golden boot image):\n  \
         oc annotate {resource}.{group}/{name} -n {namespace} {OPT_OUT_ANNOTATION}-\n"
    )
}

#[cfg(test)]
mod tests {
    use clap::Parser as _;
    use serde_json::json;

    use super::*;
    use crate::cli::{Cli, Command};
    use crate::plan::history::Change;
    use crate::revert::{Field, Restore};

    fn parse(args: &[&str]) -> Result<RevertArgs, clap::Error> {
        let mut all = vec!["boot-image-controller", "revert"];
        all.extend_from_slice(args);
        Cli::try_parse_from(all).map(|cli| match cli.command {
            Command::Revert(args) => args,
            other => panic!("parsed as {other:?}"),
        })
    }

    #[test]
    fn exactly_one_object_is_named_and_steps_start_at_one() {
        let args = parse(&["--machineset", "worker-a"]).unwrap();
        assert_eq!(args.target(), (MachineKind::MachineSet, "worker-a"));
        assert_eq!(args.namespace(), "openshift-machine-api");
        assert_eq!(args.steps, 1);
        let args = parse(&["--control-plane-machine-set", "cluster", "-n", "x"]).unwrap();
        assert_eq!(
            args.target(),
            (MachineKind::ControlPlaneMachineSet, "cluster")
        );
        assert!(parse(&[]).is_err());
        assert!(parse(&["--machineset", "a", "--control-plane-machine-set", "b"]).is_err());
        assert!(parse(&["--machineset", "a", "--steps", "0"]).is_err());
    }

    #[test]
    fn the_report_names_each_field_its_values_and_what_is_left() {
        let entry = |time: &str| HistoryEntry {
            infrastructure_template: None,
            time: time.into(),
            release: Some("4.21.0".into()),
            stream: "rhcos-4.21".into(),
            boot_image: Some(Change {
                from: json!("ami-old"),
                to: json!("ami-new"),
            }),
            user_data_secret: None,
            ..Default::default()
        };
        let planned = Revert {
            reverted: vec![entry("2026-03-02T10:00:00Z")],
            remaining: vec![entry("2025-10-01T00:00:00Z")],
            changes: vec![Restore {
                field: Field::BootImage,
                path: "/spec/template/spec/providerSpec/value/ami/id".into(),
                from: json!("ami-new"),
                to: json!("ami-old"),
            }],
            patch: Default::default(),
        };
        let text = report("MachineSet ns/worker-a", &planned, false);
        assert!(text.starts_with("Reverted MachineSet ns/worker-a: 1 recorded change(s)"));
        assert!(text.contains(
            "  2026-03-02T10:00:00Z release 4.21.0 (rhcos-4.21): boot image ami-old -> ami-new\n"
        ));
        assert!(text.contains(
            "  bootImage  ami-new -> ami-old  (/spec/template/spec/providerSpec/value/ami/id)\n"
        ));
        assert!(text.contains("History: 1 recorded change(s) left; a further revert"));
        assert!(report("x", &planned, true).starts_with("Would revert x"));
        assert!(
            opt_back_in(MachineKind::ControlPlaneMachineSet, "ns", "cluster").contains(
                "oc annotate controlplanemachinesets.machine.openshift.io/cluster -n ns \
                 boot-image-controller.io/boot-image-updates-"
            )
        );
    }
}
