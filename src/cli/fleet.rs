//! The fleet report: `plan --live` over several kubeconfig contexts (`--context` repeated, or
//! `--all-contexts`), one table and one JSON document for them all.
//!
//! Each cluster goes through exactly the single-cluster path (`live::snapshot`, then
//! `plan::plan_snapshot`); only the reads run side by side, at most `--concurrency` at a time,
//! each within `--cluster-timeout`. A cluster that cannot be read is a row with its error, and the
//! report keeps the order of the contexts whatever order the clusters answer in.

use std::fmt::Write as _;

use anyhow::Context as _;
use futures::StreamExt as _;
use serde::Serialize;

use super::live::{LiveArgs, ReadError};
use super::plan::{self, CHANGES_PENDING_CODE, OutputFormat, PlanArgs};
use super::{Failure, table, write_stdout};
use crate::manifests::Snapshot;
use crate::plan::other_managers::{self, MCO_MANAGERS};
use crate::plan::{Action, ClusterSnapshot, Plan};
use crate::quoted::printable;
use crate::reason::Reason;

/// Exit code of a fleet report in which at least one cluster could not be read (the others are
/// reported all the same); it wins over [`CHANGES_PENDING_CODE`].
pub const SOME_CLUSTER_FAILED_CODE: u8 = 4;

/// Why one cluster is missing from the report, in the few kinds a script tells apart.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Failed {
    Unreachable,
    Forbidden,
    Timeout,
    Other,
}

impl Failed {
    fn of(error: &ReadError) -> Failed {
        let ReadError::Api(error) = error else {
            return Failed::Other;
        };
        let timed_out =
            std::iter::successors(Some(error as &dyn std::error::Error), |e| e.source()).any(|e| {
                (e.downcast_ref::<std::io::Error>())
                    .is_some_and(|io| io.kind() == std::io::ErrorKind::TimedOut)
            });
        match error {
            kube::Error::Api(status) if matches!(status.code, 401 | 403) => Failed::Forbidden,
            _ if timed_out => Failed::Timeout,
            kube::Error::HyperError(_) | kube::Error::Service(_) => Failed::Unreachable,
            _ => Failed::Other,
        }
    }

    fn as_str(self) -> &'static str {
        match self {
            Failed::Unreachable => "unreachable",
            Failed::Forbidden => "forbidden",
            Failed::Timeout => "timeout",
            Failed::Other => "other",
        }
    }
}

/// Who updates boot images on a cluster, as its plan tells.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum ManagedBy {
    ThisController,
    /// The MCO's boot image controller is active: this controller stands down.
    Mco,
    /// Another field manager owns the boot-image status: this controller stands down.
    AnotherManager,
    /// Nothing is opted in (or there is no MachineConfiguration).
    Nobody,
}

impl ManagedBy {
    fn of(plan: &Plan, cluster: &ClusterSnapshot) -> ManagedBy {
        if plan.blocked.as_ref().map(|b| b.reason) == Some(Reason::AnotherManagerActive) {
            let mc = cluster.machine_configuration.as_ref();
            let others = mc.map(other_managers::other_managers);
            let mco = (others.unwrap_or_default().iter())
                .any(|o| MCO_MANAGERS.contains(&o.manager.as_str()));
            return if mco {
                ManagedBy::Mco
            } else {
                ManagedBy::AnotherManager
            };
        }
        if plan.selection.values().all(|s| s.mode == "None") {
            return ManagedBy::Nobody;
        }
        ManagedBy::ThisController
    }

    fn as_str(self) -> &'static str {
        match self {
            ManagedBy::ThisController => "this controller",
            ManagedBy::Mco => "the MCO (stood down)",
            ManagedBy::AnotherManager => "another manager (stood down)",
            ManagedBy::Nobody => "nobody (none opted in)",
        }
    }
}

/// One cluster of the report: `error` set, or the rest.
#[derive(Default, Serialize)]
#[serde(rename_all = "camelCase")]
struct Cluster {
    context: String,
    error: Option<Error>,
    release: Option<String>,
    platform: Option<String>,
    managed_by: Option<ManagedBy>,
    plan: Option<Plan>,
    #[serde(skip)]
    facts: table::ClusterFacts,
}

#[derive(Serialize)]
struct Error {
    kind: Failed,
    message: String,
}

/// Reads every cluster, plans each as `plan --live` plans one, prints the report; `Ok` holds
/// the exit code (0, [`CHANGES_PENDING_CODE`] or [`SOME_CLUSTER_FAILED_CODE`]).
pub fn run(args: &PlanArgs) -> Result<u8, Failure> {
    let contexts = contexts(&args.live).map_err(Failure::input)?;
    let read = super::runtime()?.block_on(read_all(&args.live, &contexts));
    let mut clusters = Vec::new();
    for (context, read) in contexts.into_iter().zip(read) {
        clusters.push(match read {
            Ok(mut snapshot) => {
                let plan = plan::plan_snapshot(args, &mut snapshot, &format!("{context}: "))?;
                planned(context, plan, &snapshot.cluster)
            }
            Err((kind, message)) => failed(context, kind, message),
        });
    }
    let output = match args.output {
        OutputFormat::Table => render(&clusters, false)?,
        OutputFormat::Wide => render(&clusters, true)?,
        format => plan::serialized(
            &Report {
                clusters: &clusters,
            },
            format,
        )?,
    };
    write_stdout(&output)?;
    let pending = (clusters.iter()).any(|c| c.plan.as_ref().is_some_and(plan::pending));
    Ok(if clusters.iter().any(|c| c.error.is_some()) {
        SOME_CLUSTER_FAILED_CODE
    } else if args.detailed_exitcode && pending {
        CHANGES_PENDING_CODE
    } else {
        0
    })
}

/// The contexts named, or every context of the kubeconfig in its order.
fn contexts(live: &LiveArgs) -> anyhow::Result<Vec<String>> {
    if !live.fleet.all {
        return Ok(live.contexts.clone());
    }
    let kubeconfig = match &live.kubeconfig {
        Some(path) => kube::config::Kubeconfig::read_from(path)
            .with_context(|| format!("cannot read {}", path.display()))?,
        None => kube::config::Kubeconfig::read().context("cannot read the kubeconfig")?,
    };
    let names: Vec<String> = kubeconfig.contexts.into_iter().map(|c| c.name).collect();
    anyhow::ensure!(
        !names.is_empty(),
        "--all-contexts: the kubeconfig has no context"
    );
    Ok(names)
}

/// Each context's snapshot or why there is none, in the order of `contexts`.
async fn read_all(live: &LiveArgs, contexts: &[String]) -> Vec<Result<Snapshot, (Failed, String)>> {
    let timeout = live.fleet.cluster_timeout;
    let read = |context: &String| {
        let cluster = live.cluster(Some(context));
        async move {
            let read = super::live::snapshot(&cluster, &live.machine_api_namespace, &live.objects);
            match tokio::time::timeout(timeout, read).await {
                Ok(Ok(snapshot)) => Ok(snapshot),
                Ok(Err(e)) => Err((
                    Failed::of(&e),
                    Failure::from(anyhow::Error::new(e)).message(),
                )),
                Err(_) => Err((Failed::Timeout, format!("no answer within {timeout:?}"))),
            }
        }
    };
    in_order(contexts, live.fleet.concurrency.into(), read).await
}

/// `task` of each item, at most `bound` at a time, the outcomes in the order of `items`
/// whatever order they end in (`buffered` keeps the order of its input).
async fn in_order<I: IntoIterator, T, F: Future<Output = T>>(
    items: I,
    bound: usize,
    task: impl FnMut(I::Item) -> F,
) -> Vec<T> {
    futures::stream::iter(items)
        .map(task)
        .buffered(bound)
        .collect()
        .await
}

fn planned(context: String, plan: Plan, cluster: &ClusterSnapshot) -> Cluster {
    let facts = table::ClusterFacts::of(cluster);
    Cluster {
        context,
        error: None,
        release: facts.cluster_release.as_ref().map(|(v, _)| v.clone()),
        platform: facts.platform.clone(),
        managed_by: Some(ManagedBy::of(&plan, cluster)),
        plan: Some(plan),
        facts,
    }
}

fn failed(context: String, kind: Failed, message: String) -> Cluster {
    Cluster {
        context,
        error: Some(Error { kind, message }),
        ..Cluster::default()
    }
}

#[derive(Serialize)]
struct Report<'a> {
    clusters: &'a [Cluster],
}

/// One row per cluster, then each cluster's plan as `plan` prints it (with `wide`, its patches
/// too), or its error.
fn render(clusters: &[Cluster], wide: bool) -> Result<String, Failure> {
    let header = [
        "CLUSTER",
        "RELEASE",
        "PLATFORM",
        "MANAGED BY",
        "UPDATE",
        "SKIP",
        "ERROR",
    ];
    let mut rows = vec![header.map(String::from).to_vec()];
    for cluster in clusters {
        let text = |value: &Option<String>| value.clone().unwrap_or_else(|| "-".into());
        let mut row = vec![
            cluster.context.clone(),
            text(&cluster.release),
            text(&cluster.platform),
        ];
        match (&cluster.error, &cluster.plan, cluster.managed_by) {
            (Some(error), ..) => row.push(format!("error ({})", error.kind.as_str())),
            (None, Some(plan), Some(manager)) => {
                row.push(manager.as_str().into());
                for action in [Action::Update, Action::Skip, Action::Error] {
                    let n = plan.decisions.iter().filter(|d| d.action == action).count();
                    row.push(n.to_string());
                }
            }
            _ => {}
        }
        rows.push(row.iter().map(|c| printable(c).into_owned()).collect());
    }
    let mut out = table::aligned(&rows);
    for cluster in clusters {
        let _ = writeln!(out, "\n=== {} ===", printable(&cluster.context));
        if let Some(error) = &cluster.error {
            let message = printable(&error.message);
            let _ = writeln!(out, "error ({}): {message}", error.kind.as_str());
        }
        if let Some(plan) = &cluster.plan {
            out.push_str(&table::render(plan, &cluster.facts));
            if wide {
                out.push_str(&plan::patches(plan)?);
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use serde_json::json;

    use super::*;
    use crate::machine_kind::MachineKind;
    use crate::plan::Decision;
    use crate::plan::selection::{Origin, Selected};

    #[tokio::test]
    async fn the_report_keeps_the_order_of_the_contexts_and_the_bound() {
        let (running, most) = (AtomicUsize::new(0), AtomicUsize::new(0));
        // The first items take the longest: they end last.
        let task = |i: usize| {
            let (running, most) = (&running, &most);
            async move {
                most.fetch_max(running.fetch_add(1, Ordering::SeqCst) + 1, Ordering::SeqCst);
                for _ in 0..(10 - i) * 3 {
                    tokio::task::yield_now().await;
                }
                running.fetch_sub(1, Ordering::SeqCst);
                i
            }
        };
        let out = in_order(0..10, 3, task).await;
        assert_eq!(out, (0..10).collect::<Vec<_>>());
        assert_eq!(most.load(Ordering::SeqCst), 3);
    }

    #[test]
    fn failures_are_told_apart() {
        let api = |code| {
            ReadError::Api(kube::Error::Api(
                kube::core::Status::failure("no", "x")
                    .with_code(code)
                    .boxed(),
            ))
        };
        let io = |kind| {
            let error = std::io::Error::new(kind, "connect");
            ReadError::Api(kube::Error::Service(Box::new(error)))
        };
        assert_eq!(Failed::of(&api(403)), Failed::Forbidden);
        assert_eq!(Failed::of(&api(401)), Failed::Forbidden);
        assert_eq!(Failed::of(&api(500)), Failed::Other);
        assert_eq!(
            Failed::of(&io(std::io::ErrorKind::ConnectionRefused)),
            Failed::Unreachable
        );
        assert_eq!(
            Failed::of(&io(std::io::ErrorKind::TimedOut)),
            Failed::Timeout
        );
        let no_context = ReadError::Other("context \"x\" not found".into());
        assert_eq!(Failed::of(&no_context), Failed::Other);
    }

    fn mc_managed_by(manager: &str) -> ClusterSnapshot {
        let fields = json!({"f:status": {"f:conditions": {
            "k:{\"type\":\"BootImageUpdateDegraded\"}": {".": {}, "f:status": {}}}}});
        let mc = json!({"apiVersion": "operator.openshift.io/v1", "kind": "MachineConfiguration",
            "metadata": {"name": "cluster", "managedFields": [{"manager": manager,
                "operation": "Update", "subresource": "status", "fieldsType": "FieldsV1",
                "fieldsV1": fields}]},
            "spec": {}});
        ClusterSnapshot {
            machine_configuration: Some(serde_json::from_value(mc).expect("an MC")),
            ..ClusterSnapshot::default()
        }
    }

    #[test]
    fn who_manages_is_read_from_the_plan() {
        let stood_down = Plan::new(
            Some(crate::plan::Blocked {
                reason: Reason::AnotherManagerActive,
                message: String::new(),
            }),
            vec![],
        );
        let mco = mc_managed_by("machine-config-controller");
        assert_eq!(ManagedBy::of(&stood_down, &mco), ManagedBy::Mco);
        let person = mc_managed_by("kubectl-edit");
        assert_eq!(
            ManagedBy::of(&stood_down, &person),
            ManagedBy::AnotherManager
        );
        let mut plan = Plan::new(None, vec![]);
        let selected = |mode| Selected {
            mode,
            origin: Origin::Annotation,
        };
        plan.selection
            .insert("machinesets".into(), selected("None"));
        assert_eq!(ManagedBy::of(&plan, &mco), ManagedBy::Nobody);
        plan.selection.insert("machinesets".into(), selected("All"));
        assert_eq!(ManagedBy::of(&plan, &mco), ManagedBy::ThisController);
    }

    #[test]
    fn one_row_per_cluster_then_each_plan_in_context_order() {
        let update = Decision::new(
            MachineKind::MachineSet,
            "openshift-machine-api",
            "worker-a",
            Action::Update,
            Reason::BootImageOutdated,
            String::new(),
        );
        let mut plan = Plan::new(None, vec![update]);
        let all = Selected {
            mode: "All",
            origin: Origin::Annotation,
        };
        plan.selection.insert("machinesets".into(), all);
        let clusters = [
            failed(
                "zeta-stopped".into(),
                Failed::Unreachable,
                "connection refused".into(),
            ),
            planned("alpha".into(), plan, &ClusterSnapshot::default()),
        ];
        let text = render(&clusters, false).expect("a table");
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines[0],
            "CLUSTER       RELEASE  PLATFORM  MANAGED BY           UPDATE  SKIP  ERROR"
        );
        assert_eq!(
            lines[1],
            "zeta-stopped  -        -         error (unreachable)"
        );
        assert_eq!(
            lines[2],
            "alpha         -        -         this controller      1       0     0"
        );
        let stopped = text.find("=== zeta-stopped ===\nerror (unreachable): connection refused\n");
        let alpha = text.find("=== alpha ===\nPlatform: unknown");
        assert!(
            stopped.is_some() && alpha.is_some() && stopped < alpha,
            "{text}"
        );
        assert!(
            text.contains("openshift-machine-api/worker-a  Update"),
            "{text}"
        );

        let json: serde_json::Value = serde_json::from_str(
            &plan::serialized(
                &Report {
                    clusters: &clusters,
                },
                OutputFormat::Json,
            )
            .unwrap(),
        )
        .unwrap();
        let contexts: Vec<&str> = (json["clusters"].as_array().unwrap().iter())
            .map(|c| c["context"].as_str().unwrap())
            .collect();
        assert_eq!(contexts, ["zeta-stopped", "alpha"]);
        assert_eq!(json["clusters"][0]["error"]["kind"], "unreachable");
        assert_eq!(json["clusters"][1]["error"], serde_json::Value::Null);
        assert_eq!(json["clusters"][1]["managedBy"], "thisController");
        assert_eq!(
            json["clusters"][1]["plan"]["machineSets"][0]["name"],
            "worker-a"
        );
    }
}
