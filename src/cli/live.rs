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
use crate::names::{
    self, CLUSTER_VERSION_NAME, GOLDEN_CONFIGMAP_NAME, GOLDEN_CONFIGMAP_NAMESPACE,
    INFRASTRUCTURE_NAME, KNOWN_IMAGES_CONFIGMAP_NAME, MACHINE_CONFIGURATION_NAME,
};
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
    #[error("{0}")]
    Api(#[from] kube::Error),
    /// No client configuration (no such context, an unreadable kubeconfig), or a cluster-wide
    /// object the loader refuses.
    #[error("{0}")]
    Other(String),
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
    let ar = ApiResource::erase::<K>(&());
    match lenient::read::<K>(&text).map_err(kube::Error::SerdeError)? {
        Ok(object) => Ok(Some(typed(&ar, object))),
        Err(cannot) => {
            unreadable.note(&ar.kind, None, cannot.malformed);
            Ok(None)
        }
    }
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

/// The objects of `ar` in `namespace` (`None`: a cluster-scoped kind) that can be read, as
/// JSON; the others noted in `unreadable`, as machine resources of `machine_kind` if it is one.
async fn list(
    client: &Client,
    ar: &ApiResource,
    namespace: Option<&str>,
    machine_kind: Option<MachineKind>,
    unreadable: &mut Unreadable,
) -> Result<Vec<Value>, kube::Error> {
    let url = <DynamicObject as kube::Resource>::url_path(ar, namespace);
    let request = kube::core::Request::new(url)
        .list(&ListParams::default())
        .map_err(kube::Error::BuildRequest)?;
    let text = match client.request_text(request).await {
        Ok(text) => text,
        // A kind the cluster does not serve: no ControlPlaneMachineSets (the CRD is absent on
        // some platforms), no Machines or MachineHealthChecks.
        Err(kube::Error::Api(e)) if e.code == 404 => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let listed: RawList = serde_json::from_str(&text).map_err(kube::Error::SerdeError)?;
    let mut readable = Vec::new();
    for item in listed.items {
        match lenient::read::<DynamicObject>(item.get()).map_err(kube::Error::SerdeError)? {
            Ok(object) => readable.push(typed(ar, object)),
            Err(cannot) => unreadable.note(&ar.kind, machine_kind, cannot.malformed),
        }
    }
    Ok(readable)
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
    let config = cluster.config().await.map_err(ReadError::Other)?;
    let client = Client::try_from(config)?;
    let mut unreadable = Unreadable::default();
    let items = read_inputs(&client, machine_api_namespace, objects, &mut unreadable).await?;
    let source = match &cluster.context {
        Some(context) => format!("cluster (context {context})"),
        None => "cluster".to_string(),
    };
    let mut snapshot =
        manifests::from_values(&source, items).map_err(|e| ReadError::Other(e.to_string()))?;
    snapshot.machines.extend(unreadable.machines);
    snapshot.warnings.extend(unreadable.warnings);
    Ok(snapshot)
}

/// The objects that could not be read: the machine resources are planned as malformed, as the
/// controller plans them; any other object (a template, a Node, a Machine) is left out with a
/// warning, as the controller leaves it out (the MachineSets naming a template are told it
/// cannot be read).
#[derive(Default)]
struct Unreadable {
    machines: Vec<MachineResource>,
    warnings: Vec<String>,
}

impl Unreadable {
    /// An object of `kind` that cannot be read; `machine_kind` when it is a machine resource.
    fn note(&mut self, kind: &str, machine_kind: Option<MachineKind>, malformed: Malformed) {
        let error = format!("{kind} cannot be read: {}", malformed.error);
        let Some(kind) = machine_kind else {
            let name = match malformed.namespace.as_str() {
                "" => malformed.name,
                namespace => format!("{namespace}/{}", malformed.name),
            };
            (self.warnings).push(format!("{name}: {error}; left out of the plan"));
            return;
        };
        let object = Err(Malformed { error, ..malformed });
        self.machines.push(MachineResource { kind, object });
    }
}

/// Where a Cluster API machine resource names its bootstrap (stub) secret.
const BOOTSTRAP_SECRET: &str = "/spec/template/spec/bootstrap/dataSecretName";

/// Every object the planner reads, as JSON; those that cannot be read noted in `unreadable`.
async fn read_inputs(
    client: &Client,
    ns: &str,
    objects: &ClusterObjects,
    unreadable: &mut Unreadable,
) -> Result<Vec<Value>, kube::Error> {
    let mut items = read_named(client, objects, unreadable).await?;
    let cluster_api = objects.cluster_api_namespace.as_str();
    let mut secrets = BTreeSet::new();
    for kind in MachineKind::ALL {
        // Where the objects of `kind` are, and where they name their stub secret.
        let spec = kind.provider_spec_path();
        let (namespace, secret) = match kind.is_cluster_api() {
            true => (cluster_api, BOOTSTRAP_SECRET.to_string()),
            false => (ns, format!("{spec}/userDataSecret/name")),
        };
        let resource = kind.api_resource();
        let listed = list(client, &resource, Some(namespace), Some(kind), unreadable).await?;
        let named = listed.iter().filter_map(|o| o.pointer(&secret)?.as_str());
        secrets.extend(named.map(|name| (namespace, name.to_string())));
        items.extend(listed);
    }
    // The stub secrets the machine resources name, read by name like the controller.
    for (namespace, name) in secrets {
        items.extend(get::<Secret>(client, Some(namespace), &name, unreadable).await?);
    }
    let templates = crate::plan::cluster_api_templates::api_resource();
    items.extend(list(client, &templates, Some(cluster_api), None, unreadable).await?);
    let nodes = ApiResource::erase::<Node>(&());
    items.extend(list(client, &nodes, None, None, unreadable).await?);
    // The Machines, whose boots show whether new images work, and the MachineHealthChecks,
    // which set the join limit of the Machines they select.
    for resource in [
        ApiResource::erase::<crate::api::Machine>(&()),
        ApiResource::erase::<crate::api::MachineHealthCheck>(&()),
    ] {
        items.extend(list(client, &resource, Some(ns), None, unreadable).await?);
    }
    Ok(items)
}

/// The objects read by name: MachineConfiguration, Infrastructure, ClusterVersion and the golden
/// ConfigMap, presented under their canonical names, and our known images.
async fn read_named(
    client: &Client,
    objects: &ClusterObjects,
    unreadable: &mut Unreadable,
) -> Result<Vec<Value>, kube::Error> {
    let mut items = Vec::new();
    let name = &objects.machine_configuration_name;
    let found = get::<MachineConfiguration>(client, None, name, unreadable).await?;
    items.extend(found.map(|o| rename(o, None, MACHINE_CONFIGURATION_NAME)));
    let name = &objects.infrastructure_name;
    let found = get::<Infrastructure>(client, None, name, unreadable).await?;
    items.extend(found.map(|o| rename(o, None, INFRASTRUCTURE_NAME)));
    let name = &objects.cluster_version_name;
    let found = get::<ClusterVersion>(client, None, name, unreadable).await?;
    items.extend(found.map(|o| rename(o, None, CLUSTER_VERSION_NAME)));
    let golden = Some(objects.golden_configmap_namespace.as_str());
    let found = get::<ConfigMap>(client, golden, GOLDEN_CONFIGMAP_NAME, unreadable).await?;
    let canonical = Some(GOLDEN_CONFIGMAP_NAMESPACE);
    items.extend(found.map(|o| rename(o, canonical, GOLDEN_CONFIGMAP_NAME)));
    let ours = Some(objects.controller_namespace.as_str());
    items.extend(get::<ConfigMap>(client, ours, KNOWN_IMAGES_CONFIGMAP_NAME, unreadable).await?);
    Ok(items)
}
