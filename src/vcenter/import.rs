//! Makes sure the template of a [`TemplateRequest`] exists: all or nothing.
//!
//! The OVA is imported under a temporary name derived from the final one, marked as template,
//! and only then renamed to the final name. So the final name exists only for a complete
//! template, and whoever finds it (a restart, another replica) never imports again. vCenter
//! refuses a second VM of the same name in a folder, so the temporary name is also a lock: while
//! it is younger than the import timeout, another import is under way and nobody else starts
//! one; older, it was left by a crash and is destroyed before the next attempt. A failed import
//! destroys the VM it created (by reference, never another importer's) at once.
//! The Machine Config Operator imports under temporary names for the same reason
//! (`atomicTempName`, pkg/controller/bootimage/vsphere_helpers.go at 7ff337a).

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, StreamBody};
use hyper::body::Frame;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use tokio::io::{AsyncReadExt, AsyncSeekExt};
use tokio_util::io::ReaderStream;

use super::VcenterError;
use super::client::{FileItem, LeaseInfo, VcenterClient, inventory_path};
use super::ova::{self, Entry, OvaMirror, VerifiedOva};
use super::soap::{MoRef, Session};
use crate::facts::vcenter::TemplateRequest;
use crate::http_client::error_chain;

/// Connecting for the OVA's download and the disks' upload (a mirror, an ESXi host).
const TRANSFER_CONNECT: Duration = Duration::from_secs(10);

/// Bounds of one import.
#[derive(Clone, Debug)]
pub struct ImportLimits {
    /// Downloading the OVA, start to end.
    pub download_timeout: Duration,
    /// Everything after the download: import spec, lease, upload, template, rename.
    pub import_timeout: Duration,
    /// Where the OVA is downloaded (it is removed afterwards).
    pub download_dir: PathBuf,
    /// Where the OVA is downloaded from, when not from the stream's location.
    pub mirror: OvaMirror,
    /// Between two progress reports to vCenter's lease (which otherwise expires) and to us.
    pub progress_interval: Duration,
}

impl Default for ImportLimits {
    fn default() -> Self {
        ImportLimits {
            download_timeout: Duration::from_secs(30 * 60),
            import_timeout: Duration::from_secs(60 * 60),
            download_dir: std::env::temp_dir(),
            mirror: OvaMirror::default(),
            progress_interval: Duration::from_secs(5),
        }
    }
}

/// What [`ensure_template`] found or did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Ensured {
    /// The template was already there.
    Found,
    /// We imported it.
    Imported,
}

/// The temporary name the template of `name` is imported under: fixed length, so it fits
/// vCenter's 80 characters whatever `name` is, and the same for every replica.
pub fn temporary_name(name: &str) -> String {
    let digest = ring::digest::digest(&ring::digest::SHA256, name.as_bytes());
    format!("bic-importing-{}", hex::encode(&digest.as_ref()[..6]))
}

/// The template of `request`, imported from its OVA when vCenter does not have it yet.
/// `progress` hears the percentage done (download then upload).
pub async fn ensure_template(
    client: &VcenterClient,
    request: &TemplateRequest,
    limits: &ImportLimits,
    progress: &(dyn Fn(u8) + Sync),
) -> Result<Ensured, VcenterError> {
    let datacenter = &request.key.datacenter;
    let folder_path = inventory_path(datacenter, "vm", &request.folder);
    let final_path = format!("{folder_path}/{}", request.key.name);
    if let Some(vm) = client.find(&final_path).await? {
        if client.is_template(&vm).await? {
            return Ok(Ensured::Found);
        }
        return Err(VcenterError::Import(format!(
            "{final_path} exists but is not a template; it is not ours to change, rename or \
             remove it"
        )));
    }
    let temporary = format!("{folder_path}/{}", temporary_name(&request.key.name));
    if let Some(vm) = client.find(&temporary).await? {
        let age = age_of(client, &vm).await?;
        if age.is_some_and(|age| age < limits.import_timeout) {
            return Err(VcenterError::ImportInProgress(temporary));
        }
        // Left by a crash (or an import that outlived its timeout): never built upon.
        tracing::info!(vm = %temporary, "removing a half-imported VM");
        client.destroy(&vm).await?;
    }

    let http =
        Client::builder(TokioExecutor::new()).build(client.limits.connector(TRANSFER_CONNECT)?);
    progress(0);
    let source = limits.mirror.source(&request.ova.location);
    if source != request.ova.location {
        tracing::info!(ova = %request.ova.location, mirror = %source, "downloading the OVA from the mirror");
    }
    let ova = ova::download(
        &http,
        &request.ova,
        &source,
        &limits.download_dir,
        limits.download_timeout,
    )
    .await?;
    progress(50);

    // Filled as the import goes; once a timeout has dropped it, what it holds is undone.
    let mut started = Started::default();
    let work = import(
        client,
        request,
        &ova,
        &folder_path,
        &mut started,
        limits,
        progress,
    );
    let outcome = match tokio::time::timeout(limits.import_timeout, work).await {
        Ok(outcome) => outcome,
        Err(_) => Err(VcenterError::Import(format!(
            "not complete within {:?}",
            limits.import_timeout
        ))),
    };
    if let Err(e) = outcome {
        started.undo(client, &temporary).await;
        return Err(e);
    }
    let key = &request.key;
    tracing::info!(template = %key.name, server = %key.server, "imported the golden template");
    Ok(Ensured::Imported)
}

/// How long ago `vm` was created (`config.createDate`), when vCenter says.
async fn age_of(client: &VcenterClient, vm: &MoRef) -> Result<Option<Duration>, VcenterError> {
    let created = client.property_text(vm, "config.createDate").await?;
    let Some(created) = created.and_then(|c| c.parse::<jiff::Timestamp>().ok()) else {
        return Ok(None);
    };
    let age = jiff::Timestamp::now().duration_since(created);
    Ok(Some(Duration::try_from(age).unwrap_or_default()))
}

/// What an import has created so far: what a failure must undo.
#[derive(Default)]
struct Started {
    lease: Option<MoRef>,
    vm: Option<MoRef>,
}

impl Started {
    /// Aborts the lease and destroys the VM this import created; failures are logged (the next
    /// attempt finds the VM once it is older than the timeout).
    async fn undo(self, client: &VcenterClient, name: &str) {
        // Aborting the lease makes vCenter remove the VM it was creating.
        if let Some(lease) = self.lease {
            let _ = client.invoke("HttpNfcLeaseAbort", &lease, "").await;
        }
        if let Some(vm) = self.vm {
            match client.destroy(&vm).await {
                Ok(()) => tracing::info!(vm = name, "removed the half-imported VM"),
                // Aborting the lease may have removed it already.
                Err(VcenterError::Fault { kind, .. }) if kind == "ManagedObjectNotFound" => {}
                Err(e) => {
                    tracing::warn!(error = %e, vm = name, "could not remove a half-imported VM")
                }
            }
        }
    }
}

async fn import(
    client: &VcenterClient,
    request: &TemplateRequest,
    ova: &VerifiedOva,
    folder_path: &str,
    started: &mut Started,
    limits: &ImportLimits,
    progress: &(dyn Fn(u8) + Sync),
) -> Result<(), VcenterError> {
    let dc = &request.key.datacenter;
    let domain = &request.failure_domain;
    let (entries, descriptor) = ova::contents(&ova.path)?;
    // The failure domain's objects, under the datacenter's folder of their `kind`.
    let find = async |kind: &str, path: &str, what: &str| {
        client.require(&inventory_path(dc, kind, path), what).await
    };
    let pool = find("host", &domain.resource_pool, "resource pool").await?;
    let datastore = find("datastore", &domain.datastore, "datastore").await?;
    let folder = client.require(folder_path, "folder").await?;
    // The RHCOS OVA has one network; it is mapped to the failure domain's, as the installer
    // and the MCO map it (getCISP, vsphere_helpers.go at 7ff337a).
    let mut networks = Vec::new();
    for ovf_network in ova::networks(&descriptor) {
        let network = find("network", &domain.network, "network").await?;
        networks.push((ovf_network, network));
    }
    let name = temporary_name(&request.key.name);
    let spec = client
        .create_import_spec(&descriptor, &pool, &datastore, &name, &networks)
        .await?;
    let lease = client.import_vapp(&pool, &spec, &folder).await?;
    started.lease = Some(lease.clone());
    let info = client.wait_lease_ready(&lease).await?;
    let vm = info
        .entity
        .clone()
        .ok_or_else(|| VcenterError::Protocol("the import lease names no VM".into()))?;
    started.vm = Some(vm.clone());
    upload_disks(
        client,
        &lease,
        &info,
        &spec.files,
        &entries,
        ova,
        limits,
        progress,
    )
    .await?;
    client.invoke("HttpNfcLeaseComplete", &lease, "").await?;
    started.lease = None;
    client.invoke("MarkAsTemplate", &vm, "").await?;
    client.rename(&vm, &request.key.name).await?;
    progress(100);
    Ok(())
}

#[allow(clippy::too_many_arguments)]
async fn upload_disks(
    client: &VcenterClient,
    lease: &MoRef,
    info: &LeaseInfo,
    files: &[FileItem],
    entries: &[Entry],
    ova: &VerifiedOva,
    limits: &ImportLimits,
    progress: &(dyn Fn(u8) + Sync),
) -> Result<(), VcenterError> {
    let total: u64 = files
        .iter()
        .filter_map(|f| entries.iter().find(|e| e.name == f.path))
        .map(|e| e.size)
        .sum::<u64>()
        .max(1);
    let sent = Arc::new(AtomicU64::new(0));
    let https = client.limits.connector(TRANSFER_CONNECT)?;
    let http: Client<_, UnsyncBoxBody<Bytes, std::io::Error>> =
        Client::builder(TokioExecutor::new()).build(https);
    // The lease's URLs may name the host `*`: vCenter's own.
    let host = client.session.sdk.authority().map_or("", |a| a.as_str());
    for file in files {
        let entry = entries
            .iter()
            .find(|e| e.name == file.path)
            .ok_or_else(|| VcenterError::InvalidOva(format!("{} is not in the OVA", file.path)))?;
        let url = info
            .device_urls
            .iter()
            .find(|(key, _)| *key == file.device_id)
            .map(|(_, url)| url.replace("://*/", &format!("://{host}/")))
            .ok_or_else(|| {
                let offered: Vec<&str> = info.device_urls.iter().map(|(k, _)| k.as_str()).collect();
                VcenterError::Protocol(format!(
                    "the lease has no URL for {} (it offers {offered:?})",
                    file.device_id
                ))
            })?;
        let upload = send_file(
            &http,
            &client.session,
            &url,
            file.create,
            ova,
            entry,
            sent.clone(),
        );
        tokio::pin!(upload);
        let mut ticks = tokio::time::interval(limits.progress_interval);
        loop {
            tokio::select! {
                done = &mut upload => { done?; break; }
                _ = ticks.tick() => {
                    let percent = (sent.load(Ordering::Relaxed) * 100 / total).min(99) as u8;
                    // The lease expires without progress reports; a failed report is not fatal.
                    let percent_done = format!("<percent>{percent}</percent>");
                    let _ = client.invoke("HttpNfcLeaseProgress", lease, &percent_done).await;
                    progress(50 + percent / 2);
                }
            }
        }
    }
    Ok(())
}

async fn send_file(
    http: &Client<crate::http_client::Connector, UnsyncBoxBody<Bytes, std::io::Error>>,
    session: &Session,
    url: &str,
    create: bool,
    ova: &VerifiedOva,
    entry: &Entry,
    sent: Arc<AtomicU64>,
) -> Result<(), VcenterError> {
    let mut file = tokio::fs::File::open(&ova.path).await?;
    file.seek(std::io::SeekFrom::Start(entry.offset)).await?;
    let chunks = ReaderStream::with_capacity(file.take(entry.size), 1 << 20).map(move |chunk| {
        let chunk = chunk?;
        sent.fetch_add(chunk.len() as u64, Ordering::Relaxed);
        Ok(Frame::data(chunk))
    });
    let body = StreamBody::new(chunks).boxed_unsync();
    let request = (session.request(if create { "PUT" } else { "POST" }, url))
        .header("content-type", "application/x-vnd.vmware-streamVmdk")
        .header("content-length", entry.size)
        .body(body)
        .map_err(|e| VcenterError::Protocol(e.to_string()))?;
    let response = http.request(request).await.map_err(|e| {
        VcenterError::Import(format!("uploading {}: {}", entry.name, error_chain(&e)))
    })?;
    if !response.status().is_success() {
        return Err(VcenterError::Import(format!(
            "uploading {} answered HTTP {}",
            entry.name,
            response.status()
        )));
    }
    Ok(())
}
