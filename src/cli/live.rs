//! `plan --live`: the planner's input read from a cluster, read-only.
//!
//! It reads what the controller reads, with GETs and LISTs only: the three singletons, the
//! golden ConfigMap, the MachineSets and ControlPlaneMachineSets of the machine-API namespace,
//! the stub secrets they name (by name, as the controller's RBAC allows),
//! the known-images ConfigMap, every Node and the Machines (for the boot evidence, and the
//! control plane's architecture). The objects go through the same loader as manifest files, so
//! a live plan and a plan of `oc get -o yaml` output of the same objects agree. Secret contents
//! are checked by the planner and printed only in the in-place upgrade of a spec-2 stub, whose
//! patch holds the pointer config it replaces and the one it writes (a URL and a CA bundle).

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use k8s_openapi::api::core::v1::Node;
use kube::Client;
use kube::api::{ApiResource, DynamicObject, GetParams, ListParams};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::{Value, json};

use crate::controller::lenient;

use crate::api::{ClusterVersion, ConfigMap, Infrastructure, MachineConfiguration, Secret};
use crate::kubeconfig::ClusterArgs;
use crate::machine_kind::MachineKind;
use crate::manifests::{self, Snapshot};
use crate::names;
use crate::plan::{MachineResource, Malformed};

#[derive(Args, Clone, Debug)]
pub struct LiveArgs {
    /// Read the objects from the cluster (read-only) instead of manifest files; implied by
    /// --kubeconfig and --context.
    #[arg(long, conflicts_with = "manifests")]
    pub live: bool,

    /// Kubeconfig file [default: the files listed in KUBECONFIG, merged as kubectl merges them,
    /// else ~/.kube/config, else the in-cluster service account].
    #[arg(long, value_name = "FILE")]
    pub kubeconfig: Option<PathBuf>,

    /// Kubeconfig context to use instead of the current context. Repeated: one fleet report
    /// over those clusters (docs/fleet.md, "The fleet report").
    #[arg(id = "context", long = "context", value_name = "NAME")]
    pub contexts: Vec<String>,

    #[command(flatten)]
    pub fleet: FleetArgs,

    /// With --live: the namespace of the MachineSets.
    #[arg(long, value_name = "NS", default_value = names::MACHINE_API_NAMESPACE)]
    pub machine_api_namespace: String,

    #[command(flatten)]
    pub objects: ClusterObjects,
}

/// How a fleet report (several contexts) reads its clusters.
#[derive(Args, Clone, Debug)]
pub struct FleetArgs {
    /// Every context of the kubeconfig, in its order: one fleet report over those clusters.
    #[arg(id = "all_contexts", long = "all-contexts", conflicts_with = "context")]
    pub all: bool,

    /// Fleet report: how many clusters are read at the same time.
    #[arg(
        long,
        value_name = "N",
        default_value_t = 8,
        value_parser = clap::value_parser!(u16).range(1..)
    )]
    pub concurrency: u16,

    /// Fleet report: how long reading one cluster may take before it is reported as timed out.
    #[arg(
        long,
        value_name = "PERIOD",
        default_value = "30s",
        value_parser = crate::controller::config::parse_period
    )]
    pub cluster_timeout: Duration,
}

/// Where the controller's inputs live in a cluster: the names `plan --live` and `revert` read.
#[derive(Args, Clone, Debug)]
pub struct ClusterObjects {
    /// The namespace of the Cluster API MachineSets and their templates.
    #[arg(long, value_name = "NS", default_value = names::CLUSTER_API_NAMESPACE)]
    pub cluster_api_namespace: String,

    /// The namespace of the golden boot image ConfigMap.
    #[arg(long, value_name = "NS", default_value = names::GOLDEN_CONFIGMAP_NAMESPACE)]
    pub golden_configmap_namespace: String,

    /// The name of the MachineConfiguration.
    #[arg(long, value_name = "NAME", default_value = names::MACHINE_CONFIGURATION_NAME)]
    pub machine_configuration_name: String,

    /// The name of the Infrastructure.
    #[arg(long, value_name = "NAME", default_value = names::INFRASTRUCTURE_NAME)]
    pub infrastructure_name: String,

    /// The name of the ClusterVersion.
    #[arg(long, value_name = "NAME", default_value = names::CLUSTER_VERSION_NAME)]
    pub cluster_version_name: String,

    /// The controller's namespace, where its known-images ConfigMap lives.
    #[arg(
        long = "controller-namespace",
        value_name = "NS",
        default_value = "boot-image-controller"
    )]
    pub controller_namespace: String,
}

impl LiveArgs {
    pub fn requested(&self) -> bool {
        self.live || self.kubeconfig.is_some() || !self.contexts.is_empty() || self.fleet.all
    }

    /// Several clusters: `--context` repeated, or `--all-contexts`.
    pub fn fleet(&self) -> bool {
        self.contexts.len() > 1 || self.fleet.all
    }

    /// The cluster of one context (`None`: the current one) of the kubeconfig.
    pub fn cluster(&self, context: Option<&str>) -> ClusterArgs {
        ClusterArgs {
            kubeconfig: self.kubeconfig.clone(),
            context: context.map(str::to_string),
        }
    }
}

/// Why a cluster could not be read: the message `plan --live` prints, and for a fleet report
/// the kind of failure.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// No client configuration (no such context, an unreadable kubeconfig).
    #[error("{0}")]
    Config(String),
    #[error("{0}")]
    Api(#[from] kube::Error),
    #[error("{0}")]
    Load(String),
}

/// One object of kind `K` as JSON with its apiVersion and kind, read as the controller's watch
/// of it reads it ([`lenient::read`]), or `None` when it does not exist or may not be read (the
/// planner reports a missing input itself), or cannot be read (noted in `unreadable` too).
async fn get<K>(
    client: &Client,
    namespace: Option<&str>,
    name: &str,
    unreadable: &mut Unreadable,
) -> Result<Option<Value>, kube::Error>
where
    K: kube::Resource<DynamicType = ()> + lenient::Keep + DeserializeOwned + Serialize,
{
    let request = kube::core::Request::new(K::url_path(&(), namespace))
        .get(name, &GetParams::default())
        .map_err(kube::Error::BuildRequest)?;
    let text = match client.request_text(request).await {
        Ok(text) => text,
        Err(kube::Error::Api(e)) if e.code == 403 || e.code == 404 => return Ok(None),
        Err(e) => return Err(e),
    };
    let kind = K::kind(&());
    match lenient::read::<K>(&text).map_err(kube::Error::SerdeError)? {
        Ok(object) => Ok(Some(typed(&ApiResource::erase::<K>(&()), object))),
        Err(cannot) => {
            let malformed = cannot.malformed;
            let error = format!("{kind} cannot be read: {}", malformed.error);
            unreadable.left_out.push(Malformed { error, ..malformed });
            Ok(None)
        }
    }
}

/// The objects of a list: those read as JSON, and those that cannot be (as the controller's
/// watches report them, see [`crate::controller::lenient`]).
#[derive(Default)]
struct Listed {
    readable: Vec<Value>,
    unreadable: Vec<Malformed>,
}

/// A list response, its items kept as text: serde_json's recursion limit (128) counts from the
/// root of what it parses, and skipping a value is not depth-limited, so each item is read on
/// its own, as the controller's watches read them ([`lenient::read`]), and one nested too deep
/// (a providerSpec nested 140 deep is stored by the API server) fails only itself, not the list.
#[derive(Deserialize)]
struct RawList<'a> {
    #[serde(borrow, default)]
    items: Vec<&'a RawValue>,
}

/// The objects of `ar` in `namespace` (`None`: a cluster-scoped kind).
async fn list(
    client: &Client,
    ar: &ApiResource,
    namespace: Option<&str>,
) -> Result<Listed, kube::Error> {
    let url = <DynamicObject as kube::Resource>::url_path(ar, namespace);
    let request = kube::core::Request::new(url)
        .list(&ListParams::default())
        .map_err(kube::Error::BuildRequest)?;
    let text = match client.request_text(request).await {
        Ok(text) => text,
        // A kind the cluster does not serve: no ControlPlaneMachineSets (the CRD is absent on
        // some platforms), no Machines or MachineHealthChecks.
        Err(kube::Error::Api(e)) if e.code == 404 => return Ok(Listed::default()),
        Err(e) => return Err(e),
    };
    let listed: RawList = serde_json::from_str(&text).map_err(kube::Error::SerdeError)?;
    let mut out = Listed::default();
    for item in listed.items {
        match lenient::read::<DynamicObject>(item.get()).map_err(kube::Error::SerdeError)? {
            Ok(object) => out.readable.push(typed(ar, object)),
            Err(unreadable) => {
                let malformed = unreadable.malformed;
                out.unreadable.push(Malformed {
                    error: format!("{} cannot be read: {}", ar.kind, malformed.error),
                    ..malformed
                });
            }
        }
    }
    Ok(out)
}

/// An object as JSON with its apiVersion and kind.
fn typed(ar: &ApiResource, object: impl Serialize) -> Value {
    let mut value = serde_json::to_value(object).unwrap_or(Value::Null);
    value["apiVersion"] = json!(ar.api_version);
    value["kind"] = json!(ar.kind);
    value
}

/// The loader knows the singletons and the golden ConfigMap by their names in a real cluster;
/// objects read under other names (test clusters) are presented under those.
fn rename(mut value: Value, namespace: Option<&str>, name: &str) -> Value {
    value["metadata"]["name"] = json!(name);
    if let Some(ns) = namespace {
        value["metadata"]["namespace"] = json!(ns);
    }
    value
}

/// The planner's input read from the cluster `cluster` names; MachineSets from
/// `machine_api_namespace`.
pub async fn snapshot(
    cluster: &ClusterArgs,
    machine_api_namespace: &str,
    objects: &ClusterObjects,
) -> Result<Snapshot, ReadError> {
    let config = cluster.config().await.map_err(ReadError::Config)?;
    let client = Client::try_from(config)?;
    let mut unreadable = Unreadable::default();
    let items = read_inputs(&client, machine_api_namespace, objects, &mut unreadable).await?;
    let source = match &cluster.context {
        Some(context) => format!("cluster (context {context})"),
        None => "cluster".to_string(),
    };
    let mut snapshot =
        manifests::from_values(&source, items).map_err(|e| ReadError::Load(e.to_string()))?;
    unreadable.add_to(&mut snapshot);
    Ok(snapshot)
}

/// The objects that could not be read, by kind: the machine resources are planned as
/// malformed, as the controller plans them; any other object (a template, a Node, a Machine) is
/// left out with a warning, as the controller leaves it out (the MachineSets naming a template
/// are told it cannot be read).
#[derive(Default)]
struct Unreadable {
    machine_resources: Vec<(MachineKind, Malformed)>,
    left_out: Vec<Malformed>,
}

impl Unreadable {
    /// The readable objects of `listed`; the others noted as `kind`s.
    fn note(&mut self, kind: MachineKind, listed: Listed) -> Vec<Value> {
        let unreadable = listed.unreadable.into_iter().map(|m| (kind, m));
        self.machine_resources.extend(unreadable);
        listed.readable
    }

    /// The readable objects of `listed`; the others left out.
    fn leave_out(&mut self, listed: Listed) -> Vec<Value> {
        self.left_out.extend(listed.unreadable);
        listed.readable
    }

    fn add_to(self, snapshot: &mut Snapshot) {
        for (kind, malformed) in self.machine_resources {
            let object = Err(malformed);
            snapshot.machines.push(MachineResource { kind, object });
        }
        for object in self.left_out {
            let name = match object.namespace.as_str() {
                "" => object.name,
                namespace => format!("{namespace}/{}", object.name),
            };
            let error = object.error;
            (snapshot.warnings).push(format!("{name}: {error}; left out of the plan"));
        }
    }
}

/// Every object the planner reads, as JSON; those that cannot be read noted in `unreadable`.
async fn read_inputs(
    client: &Client,
    ns: &str,
    objects: &ClusterObjects,
    unreadable: &mut Unreadable,
) -> Result<Vec<Value>, kube::Error> {
    let mut items = read_singletons(client, objects, unreadable).await?;
    items.extend(read_config_maps(client, objects, unreadable).await?);
    let mut machine_resources = Vec::new();
    for kind in [MachineKind::MachineSet, MachineKind::ControlPlaneMachineSet] {
        let listed = list(client, &kind.api_resource(), Some(ns)).await?;
        machine_resources.extend(unreadable.note(kind, listed));
    }
    let stubs = stub_names(&machine_resources);
    items.extend(read_secrets(client, ns, stubs, unreadable).await?);
    items.extend(machine_resources);
    let cluster_api = &objects.cluster_api_namespace;
    items.extend(read_cluster_api(client, cluster_api, unreadable).await?);
    let nodes = list(client, &ApiResource::erase::<Node>(&()), None).await?;
    items.extend(unreadable.leave_out(nodes));
    // The Machines, whose boots show whether new images work, and the MachineHealthChecks,
    // which set the join limit of the Machines they select.
    for resource in [
        ApiResource::erase::<crate::api::Machine>(&()),
        ApiResource::erase::<crate::api::MachineHealthCheck>(&()),
    ] {
        items.extend(unreadable.leave_out(list(client, &resource, Some(ns)).await?));
    }
    Ok(items)
}

/// The Cluster API MachineSets, their AWS machine templates and the bootstrap secrets they
/// name, where the cluster serves them.
async fn read_cluster_api(
    client: &Client,
    ns: &str,
    unreadable: &mut Unreadable,
) -> Result<Vec<Value>, kube::Error> {
    let mut machine_resources = Vec::new();
    for kind in [
        MachineKind::ClusterApiMachineSet,
        MachineKind::ClusterApiMachineDeployment,
    ] {
        let listed = list(client, &kind.api_resource(), Some(ns)).await?;
        machine_resources.extend(unreadable.note(kind, listed));
    }
    let templates = crate::plan::cluster_api_templates::api_resource();
    let templates = unreadable.leave_out(list(client, &templates, Some(ns)).await?);
    let wanted: BTreeSet<&str> = (machine_resources.iter())
        .filter_map(|o| {
            o.pointer("/spec/template/spec/bootstrap/dataSecretName")?
                .as_str()
        })
        .collect();
    let mut items = read_secrets(client, ns, wanted, unreadable).await?;
    items.extend(machine_resources);
    items.extend(templates);
    Ok(items)
}

/// MachineConfiguration, Infrastructure and ClusterVersion, under their canonical names.
async fn read_singletons(
    client: &Client,
    objects: &ClusterObjects,
    unreadable: &mut Unreadable,
) -> Result<Vec<Value>, kube::Error> {
    let found = [
        (
            get::<MachineConfiguration>(
                client,
                None,
                &objects.machine_configuration_name,
                unreadable,
            )
            .await?,
            names::MACHINE_CONFIGURATION_NAME,
        ),
        (
            get::<Infrastructure>(client, None, &objects.infrastructure_name, unreadable).await?,
            names::INFRASTRUCTURE_NAME,
        ),
        (
            get::<ClusterVersion>(client, None, &objects.cluster_version_name, unreadable).await?,
            names::CLUSTER_VERSION_NAME,
        ),
    ];
    let renamed = found.into_iter();
    Ok(renamed
        .filter_map(|(found, canonical)| Some(rename(found?, None, canonical)))
        .collect())
}

/// The golden ConfigMap (presented in its canonical namespace) and our known images.
async fn read_config_maps(
    client: &Client,
    objects: &ClusterObjects,
    unreadable: &mut Unreadable,
) -> Result<Vec<Value>, kube::Error> {
    let wanted = [
        (
            &objects.golden_configmap_namespace,
            names::GOLDEN_CONFIGMAP_NAME,
            Some(names::GOLDEN_CONFIGMAP_NAMESPACE),
        ),
        (
            &objects.controller_namespace,
            names::KNOWN_IMAGES_CONFIGMAP_NAME,
            None,
        ),
    ];
    let mut items = Vec::new();
    for (namespace, name, canonical_namespace) in wanted {
        if let Some(found) = get::<ConfigMap>(client, Some(namespace), name, unreadable).await? {
            items.push(match canonical_namespace {
                Some(canonical) => rename(found, Some(canonical), name),
                None => found,
            });
        }
    }
    Ok(items)
}

/// The stub secrets the machine resources name.
fn stub_names(machine_objects: &[Value]) -> BTreeSet<&str> {
    (machine_objects.iter())
        .flat_map(|o| {
            let spec = &o["spec"]["template"];
            [
                &spec["spec"]["providerSpec"]["value"]["userDataSecret"]["name"],
                &spec["machines_v1beta1_machine_openshift_io"]["spec"]["providerSpec"]["value"]
                    ["userDataSecret"]["name"],
            ]
        })
        .filter_map(Value::as_str)
        .collect()
}

/// The secrets of `ns` named `wanted`, read by name like the controller.
async fn read_secrets(
    client: &Client,
    ns: &str,
    wanted: BTreeSet<&str>,
    unreadable: &mut Unreadable,
) -> Result<Vec<Value>, kube::Error> {
    let mut items = Vec::new();
    for name in wanted {
        if let Some(secret) = get::<Secret>(client, Some(ns), name, unreadable).await? {
            items.push(secret);
        }
    }
    Ok(items)
}
