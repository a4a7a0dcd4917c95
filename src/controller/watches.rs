//! The watches: one reflector store per kind, each feeding the trigger channel.
//!
//! Every change re-plans everything: a pass plans every machine resource. Singletons are
//! watched by name (a `metadata.name` field selector), which is also what lets RBAC restrict the
//! controller to those names. A watch error is logged and retried with backoff; it never ends the
//! watch, and `Lenient` keeps one malformed object from failing a whole list (every kind is
//! decoded item by item, and trimmed as it is read: [`Keep`]).

use std::fmt::Debug;
use std::sync::Arc;

use futures::StreamExt;
use kube::api::{Api, DynamicObject, ListParams};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, Resource};
use serde::de::DeserializeOwned;
use tokio::sync::mpsc::UnboundedSender;
use tracing::{info, warn};

use super::config::RunArgs;
use super::lenient::retried;
use super::lenient::{Keep, Lenient};

use crate::api::{
    ClusterApiMachineDeployment, ClusterApiMachineSet, ClusterVersion, ConfigMap,
    ControlPlaneMachineSet, Infrastructure, MachineConfiguration, MachineSet,
};
use crate::known_images::{self, KnownImages};
use crate::machine_kind::{MachineKind, MachineObject};
use crate::plan::{self, MachineResource, other_managers};

/// Something changed: plan everything again. A pass costs about 15 us per MachineSet
/// (docs/performance.md), so no watch says what changed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Trigger;

pub struct Stores {
    machine_sets: Store<Lenient<MachineSet>>,
    control_plane: Option<Store<Lenient<ControlPlaneMachineSet>>>,
    configurations: Store<Lenient<MachineConfiguration>>,
    golden: Store<Lenient<ConfigMap>>,
    infrastructure: Store<Lenient<Infrastructure>>,
    cluster_version: Option<Store<Lenient<ClusterVersion>>>,
    known_images: Store<Lenient<ConfigMap>>,
    /// Where the cluster serves Cluster API MachineSets and AWS machine templates.
    cluster_api: Option<ClusterApiStores>,
}

struct ClusterApiStores {
    machine_sets: Store<Lenient<ClusterApiMachineSet>>,
    machine_deployments: Store<Lenient<ClusterApiMachineDeployment>>,
    templates: Store<Lenient<DynamicObject>>,
}

/// Objects per page of a first list (and of every relist) of machine resources and templates.
/// A page is decoded whole, at about three times its objects' size, before they are trimmed
/// (see [`Lenient`]): small pages bound start-up memory whatever the objects (figures in
/// docs/performance.md).
const LIST_PAGE_SIZE: u32 = 10;

/// How the machine resources and templates are watched: a small first page.
pub(super) fn paged() -> watcher::Config {
    watcher::Config::default().page_size(LIST_PAGE_SIZE)
}

/// Starts every watch; returns at once with stores that fill in the background.
pub async fn start(
    client: &Client,
    args: &RunArgs,
    own_namespace: &str,
    tx: UnboundedSender<Trigger>,
) -> Stores {
    let ns = &args.machine_api_namespace;
    let machine_sets = spawn(
        Api::namespaced(client.clone(), ns),
        (),
        MachineKind::MachineSet.label(),
        &tx,
    );
    // Clusters without these CRDs (ControlPlaneMachineSets on some platforms, ClusterVersion
    // outside OpenShift) work without them.
    let control_plane_api = Api::namespaced(client.clone(), ns);
    let control_plane =
        (installed(client, &control_plane_api, ListParams::default()).await).then(|| {
            let kind = MachineKind::ControlPlaneMachineSet;
            spawn(control_plane_api, (), kind.label(), &tx)
        });
    // Asked by name: RBAC grants this controller the ClusterVersion `version` only.
    let by_version_name =
        ListParams::default().fields(&format!("metadata.name={}", args.cluster_version_name));
    let cluster_version_api = Api::<Lenient<ClusterVersion>>::all(client.clone());
    let cluster_version =
        (installed(client, &cluster_version_api, by_version_name).await).then(|| {
            let name = &args.cluster_version_name;
            spawn_singleton(cluster_version_api, name, &tx, resource_version)
        });
    let cluster_api = cluster_api(client, &args.cluster_api_namespace, &tx).await;
    Stores {
        cluster_api,
        machine_sets,
        control_plane,
        cluster_version,
        configurations: spawn_singleton(
            Api::all(client.clone()),
            &args.machine_configuration_name,
            &tx,
            configuration_fingerprint,
        ),
        golden: {
            let api = Api::namespaced(client.clone(), &args.golden_configmap_namespace);
            spawn_singleton(api, &args.golden_configmap_name, &tx, resource_version)
        },
        infrastructure: {
            let api = Api::all(client.clone());
            spawn_singleton(api, &args.infrastructure_name, &tx, resource_version)
        },
        known_images: {
            let api = Api::namespaced(client.clone(), own_namespace);
            let name = crate::names::KNOWN_IMAGES_CONFIGMAP_NAME;
            spawn_singleton(api, name, &tx, resource_version)
        },
    }
}

/// The Cluster API watches, on clusters that serve both Cluster API MachineSets and AWS machine
/// templates.
async fn cluster_api(
    client: &Client,
    namespace: &str,
    tx: &UnboundedSender<Trigger>,
) -> Option<ClusterApiStores> {
    let machine_sets = Api::<Lenient<ClusterApiMachineSet>>::namespaced(client.clone(), namespace);
    let template_resource = plan::cluster_api_templates::api_resource();
    let templates: Api<Lenient<DynamicObject>> =
        Api::namespaced_with(client.clone(), namespace, &template_resource);
    let machine_deployments =
        Api::<Lenient<ClusterApiMachineDeployment>>::namespaced(client.clone(), namespace);
    let without = "Cluster API MachineSets are not managed";
    // The RBAC for Cluster API ships as an opt-in component (manifests/cluster-api).
    let rbac = "apply the manifests/cluster-api component";
    let (sets, deployments) = ("Cluster API MachineSets", "Cluster API MachineDeployments");
    let all_served = served(client, &machine_sets, sets, without, rbac).await
        && served(client, &machine_deployments, deployments, without, rbac).await
        && served(client, &templates, "AWSMachineTemplates", without, rbac).await;
    if !all_served {
        return None;
    }
    let (machine_set, machine_deployment) = (
        MachineKind::ClusterApiMachineSet.label(),
        MachineKind::ClusterApiMachineDeployment.label(),
    );
    let template = plan::cluster_api_templates::AWS_MACHINE_TEMPLATE;
    Some(ClusterApiStores {
        machine_sets: spawn(machine_sets, (), machine_set, tx),
        machine_deployments: spawn(machine_deployments, (), machine_deployment, tx),
        templates: spawn(templates, template_resource, template, tx),
    })
}

/// Drives a watch any change of which re-plans everything. A (re)list changes the store only
/// once it is done, so only its end triggers; with `quiet_first_list`, not even the first one:
/// the caller awaits it itself.
pub(super) async fn re_plan_all_on_change<K>(
    stream: impl futures::Stream<Item = Result<watcher::Event<K>, watcher::Error>>,
    tx: UnboundedSender<Trigger>,
    mut quiet_first_list: bool,
) {
    futures::pin_mut!(stream);
    while let Some(event) = stream.next().await {
        match event {
            Ok(watcher::Event::InitDone) if quiet_first_list => quiet_first_list = false,
            Ok(watcher::Event::Init | watcher::Event::InitApply(_)) => {}
            Ok(_) => {
                if tx.send(Trigger).is_err() {
                    return;
                }
            }
            Err(_) => {}
        }
    }
}

/// Asks for one object of `api` (matching `params`), and reads only whether the API server
/// answered: the object may be one nobody can decode (see [`Lenient`]), which failed the probe
/// and logged the whole answer.
pub(super) async fn probe<K: Resource>(
    client: &Client,
    api: &Api<K>,
    params: &ListParams,
) -> Result<(), kube::Error> {
    let request = kube::core::Request::new(api.resource_url())
        .list_metadata(&params.clone().limit(1))
        .map_err(kube::Error::BuildRequest)?;
    client.request_text(request).await.map(drop)
}

/// Whether `api` can be listed; says why not, once, when it cannot: what goes `without` it,
/// and, when it is forbidden, what grants the `rbac`.
pub(super) async fn served<K: Resource>(
    client: &Client,
    api: &Api<K>,
    what: &str,
    without: &str,
    rbac: &str,
) -> bool {
    match probe(client, api, &ListParams::default()).await {
        Err(kube::Error::Api(e)) if e.code == 404 => {
            info!("{what} are not served; {without}");
            false
        }
        Err(kube::Error::Api(e)) if e.code == 403 => {
            let url = api.resource_url();
            warn!(url, "not allowed to list {what}; {without} ({rbac})");
            false
        }
        _ => true,
    }
}

async fn installed<K>(client: &Client, api: &Api<K>, params: ListParams) -> bool
where
    K: Resource<DynamicType = ()>,
{
    match probe(client, api, &params).await {
        Err(kube::Error::Api(e)) if e.code == 404 => {
            info!(kind = %K::kind(&()), "CRD not installed; not watching it");
            false
        }
        _ => true,
    }
}

/// Watches a collection (machine resources of one kind, the AWS machine templates of the
/// Cluster API namespace, which are few and change when MachineSets move, or the
/// MachineHealthChecks, a handful per cluster), re-planning everything on each event.
pub(super) fn spawn<K>(
    api: Api<Lenient<K>>,
    dynamic_type: K::DynamicType,
    name: &'static str,
    tx: &UnboundedSender<Trigger>,
) -> Store<Lenient<K>>
where
    K: Keep + Clone + Debug + DeserializeOwned + Send + Sync + 'static,
    K::DynamicType: Clone + Eq + std::hash::Hash,
{
    let writer = reflector::store::Writer::new(dynamic_type);
    let store = writer.as_reader();
    let stream = retried(name, watcher(api, paged()).reflect(writer));
    tokio::spawn(re_plan_all_on_change(stream, tx.clone(), false));
    store
}

/// Watches one object; a relevant change re-plans everything.
///
/// `fingerprint` says what counts as a change: our own status writes to the MachineConfiguration
/// must not trigger a full pass each (its fingerprint ignores status), while any change to the
/// golden ConfigMap does.
fn spawn_singleton<K>(
    api: Api<Lenient<K>>,
    name: &str,
    tx: &UnboundedSender<Trigger>,
    fingerprint: fn(&Lenient<K>) -> String,
) -> Store<Lenient<K>>
where
    K: Keep<DynamicType = ()> + Clone + Debug + DeserializeOwned + Send + Sync + 'static,
{
    let (store, writer) = reflector::store();
    // By name: also what lets RBAC restrict the controller to this one object.
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let stream = watcher(api, config).reflect(writer);
    let stream = retried(format!("{} {name}", K::kind(&())), stream);
    let tx = tx.clone();
    tokio::spawn(async move {
        futures::pin_mut!(stream);
        let mut last: Option<String> = None;
        while let Some(event) = stream.next().await {
            let relevant = match event {
                Ok(watcher::Event::Apply(object)) => {
                    let current = fingerprint(&object);
                    let changed = last.as_ref() != Some(&current);
                    last = Some(current);
                    changed
                }
                Ok(watcher::Event::Delete(_)) => {
                    last = None;
                    true
                }
                Ok(watcher::Event::InitDone) => true,
                Ok(_) | Err(_) => false,
            };
            if relevant && tx.send(Trigger).is_err() {
                return;
            }
        }
    });
    store
}

/// Any change at all.
fn resource_version<K: Resource>(object: &K) -> String {
    object.meta().resource_version.clone().unwrap_or_default()
}

/// Spec changes (generation) and annotations (the pause), not status: the controller writes
/// the status itself and would otherwise re-plan everything after each of its own writes.
///
/// Another manager's status writes count when they change who manages boot images: we stand
/// down, or take over, at once rather than at the next resync.
fn configuration_fingerprint(mc: &Lenient<MachineConfiguration>) -> String {
    let managers = match mc.object() {
        Ok(parsed) => other_managers::other_managers(parsed),
        Err(_) => Vec::new(),
    };
    let meta = mc.meta();
    format!("{:?}/{:?}/{managers:?}", meta.generation, meta.annotations)
}

fn first<K>(store: &Store<K>) -> Option<Arc<K>>
where
    K: Resource<DynamicType = ()> + Clone + 'static,
{
    store.state().into_iter().next()
}

/// The typed object of a lenient singleton; a malformed one counts as absent, loudly.
fn parsed<K: Clone>(object: Option<Arc<Lenient<K>>>) -> Option<K> {
    let object = object?;
    match object.object() {
        Ok(k) => Some(k.clone()),
        Err(unreadable) => {
            let (name, error) = (&unreadable.metadata.name, &unreadable.malformed.error);
            warn!(?name, %error, "ignoring an object that cannot be read");
            None
        }
    }
}

impl Stores {
    pub async fn wait_until_ready(&self) {
        let _ = self.machine_sets.wait_until_ready().await;
        if let Some(s) = &self.control_plane {
            let _ = s.wait_until_ready().await;
        }
        if let Some(s) = &self.cluster_version {
            let _ = s.wait_until_ready().await;
        }
        let _ = self.configurations.wait_until_ready().await;
        let _ = self.golden.wait_until_ready().await;
        let _ = self.infrastructure.wait_until_ready().await;
        let _ = self.known_images.wait_until_ready().await;
        if let Some(cluster_api) = &self.cluster_api {
            let _ = cluster_api.machine_sets.wait_until_ready().await;
            let _ = cluster_api.machine_deployments.wait_until_ready().await;
            let _ = cluster_api.templates.wait_until_ready().await;
        }
    }

    /// The AWS machine templates of the Cluster API namespace, as the planner reads them; an
    /// unreadable one is absent (the MachineSets naming it are told it cannot be read).
    pub fn infrastructure_templates(&self) -> plan::cluster_api_templates::Templates {
        let Some(cluster_api) = &self.cluster_api else {
            return Default::default();
        };
        cluster_api
            .templates
            .state()
            .into_iter()
            .filter_map(|t| {
                let t = t.shared()?.clone();
                let name = t.metadata.name.clone()?;
                let kind = plan::cluster_api_templates::AWS_MACHINE_TEMPLATE.to_string();
                Some(((kind, name), t))
            })
            .collect()
    }

    /// Every machine resource, kind by kind, each kind in the order its store lists them: the
    /// one list a pass plans.
    pub fn machines(&self) -> Vec<MachineResource> {
        fn listed<K: MachineObject + Resource<DynamicType = ()> + Clone + 'static>(
            kind: MachineKind,
            store: Option<&Store<Lenient<K>>>,
        ) -> impl Iterator<Item = MachineResource> {
            let objects = store.map(Store::state).unwrap_or_default();
            objects.into_iter().map(move |o| o.listed(kind))
        }
        let cluster_api = self.cluster_api.as_ref();
        listed(MachineKind::MachineSet, Some(&self.machine_sets))
            .chain(listed(
                MachineKind::ControlPlaneMachineSet,
                self.control_plane.as_ref(),
            ))
            .chain(listed(
                MachineKind::ClusterApiMachineSet,
                cluster_api.map(|c| &c.machine_sets),
            ))
            .chain(listed(
                MachineKind::ClusterApiMachineDeployment,
                cluster_api.map(|c| &c.machine_deployments),
            ))
            .collect()
    }

    /// The MachineConfiguration (its store holds the one watched by name), with its
    /// `managedFields`.
    pub fn machine_configuration(&self) -> Option<MachineConfiguration> {
        parsed(first(&self.configurations))
    }

    /// Read straight from the store before each write, so a pause takes effect mid-pass.
    pub fn paused(&self) -> bool {
        first(&self.configurations).is_some_and(|m| plan::pause_key(m.meta()).is_some())
    }

    pub fn golden(&self) -> Option<ConfigMap> {
        parsed(first(&self.golden))
    }

    pub fn infrastructure(&self) -> Option<Infrastructure> {
        parsed(first(&self.infrastructure))
    }

    /// Whether the ClusterVersion CRD is installed (checked when the watches start).
    pub fn cluster_version_served(&self) -> bool {
        self.cluster_version.is_some()
    }

    pub fn cluster_version(&self) -> Option<ClusterVersion> {
        parsed(self.cluster_version.as_ref().and_then(first))
    }

    pub fn known_images_config_map(&self) -> Option<Arc<ConfigMap>> {
        first(&self.known_images)?.shared().cloned()
    }

    /// Images of earlier golden streams, remembered in our ConfigMap.
    pub fn remembered_images(&self) -> KnownImages {
        (self.known_images_config_map())
            .map_or_else(KnownImages::default, |cm| known_images::in_config_map(&cm))
    }
}
