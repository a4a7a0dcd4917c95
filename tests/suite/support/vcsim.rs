//! vcsim, govmomi's vCenter simulator (built by `hack/ensure-vcsim.sh`), one per test on a
//! loopback port; an OVA made by the test and the HTTP server that serves it.
//!
//! vcsim's inventory (`simulator.VPX()`): datacenter `DC0`, cluster `DC0_C0` with hosts and the
//! resource pool `/DC0/host/DC0_C0/Resources`, datastore `LocalDS_0`, network `VM Network`,
//! VM folder `/DC0/vm`, and a few VMs that are not templates.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, OnceLock};

use boot_image_controller::facts::vcenter::{FailureDomain, TemplateKey, TemplateRequest};
use boot_image_controller::golden_stream::VmwareOva;
use boot_image_controller::vcenter::client::{Limits, VcenterClient, inventory_path, sdk_url};
use boot_image_controller::vcenter::credentials::Credentials;
use boot_image_controller::vcenter::soap::MoRef;
use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;

pub const USERNAME: &str = "machine-api@vsphere.local";
pub const PASSWORD: &str = "s3cret-p4ss";
pub const DATACENTER: &str = "DC0";
pub const DATASTORE: &str = "LocalDS_0";
pub const RESOURCE_POOL: &str = "/DC0/host/DC0_C0/Resources";
pub const FOLDER: &str = "/DC0/vm";
pub const NETWORK: &str = "VM Network";

/// The `vcsim` executable, built on first use; `None` when it cannot be.
fn vcsim_binary() -> Option<String> {
    static PATH: OnceLock<Option<String>> = OnceLock::new();
    PATH.get_or_init(|| super::ensured_tool("hack/ensure-vcsim.sh"))
        .clone()
}

/// A running vcsim, stopped when dropped.
pub struct Vcsim {
    child: Child,
    /// Its SDK URL, e.g. `http://127.0.0.1:41234/sdk`.
    pub sdk: String,
    /// With [`Vcsim::start_tls`]: the PEM file of the CA that signed its certificate, which no
    /// system CA vouches for (a vCenter with a private CA).
    pub ca_file: Option<std::path::PathBuf>,
    _ca_dir: Option<tempfile::TempDir>,
}

impl Vcsim {
    /// The template `name` of this vcsim's one failure domain, from the OVA at `url` with digest
    /// `sha256`: what the planner would ask `vcenter::import` for.
    pub fn template_request(&self, name: &str, url: &str, sha256: &str) -> TemplateRequest {
        let key = TemplateKey {
            server: self.server(),
            datacenter: DATACENTER.into(),
            name: name.into(),
        };
        TemplateRequest {
            current: key.clone(),
            key,
            failure_domain: FailureDomain {
                name: "us-east-1a".into(),
                server: self.server(),
                datacenter: DATACENTER.into(),
                datastore: DATASTORE.into(),
                resource_pool: RESOURCE_POOL.into(),
                folder: FOLDER.into(),
                network: NETWORK.into(),
                vm_group: String::new(),
            },
            folder: FOLDER.into(),
            ova: VmwareOva {
                release: "9.6.20251023-0".into(),
                location: url.into(),
                sha256: sha256.into(),
            },
        }
    }

    /// Starts vcsim on plain HTTP accepting [`USERNAME`] and [`PASSWORD`]; `None` (the test is
    /// then skipped) when it cannot be built.
    pub fn start() -> Option<Vcsim> {
        Vcsim::spawn(false)
    }

    /// Starts vcsim on HTTPS with a certificate signed by a CA of its own ([`Vcsim::ca_file`]).
    pub fn start_tls() -> Option<Vcsim> {
        Vcsim::spawn(true)
    }

    fn spawn(tls: bool) -> Option<Vcsim> {
        let Some(binary) = vcsim_binary() else {
            boot_image_controller::testkit::skips::skip(
                "vcsim cannot be built by hack/ensure-vcsim.sh (Go toolchain and module proxy)",
            );
            return None;
        };
        let ca_dir = tls.then(|| tempfile::tempdir().unwrap());
        let ca_file = ca_dir.as_ref().map(|d| d.path().join("vcenter-ca.pem"));
        let mut command = Command::new(binary);
        command.args([
            "-l",
            "127.0.0.1:0",
            "-username",
            USERNAME,
            "-password",
            PASSWORD,
        ]);
        if let Some(file) = &ca_file {
            command.arg("-tls-ca-out").arg(file);
        }
        let mut child = command
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("start vcsim");
        // It prints its URL once it serves (and has written its certificate).
        let stdout = child.stdout.take().expect("vcsim's stdout");
        let mut line = String::new();
        BufReader::new(stdout)
            .read_line(&mut line)
            .expect("read vcsim's URL");
        let sdk = line.trim().to_string();
        assert!(sdk.starts_with("http"), "vcsim printed {sdk:?}");
        Some(Vcsim {
            child,
            sdk,
            ca_file,
            _ca_dir: ca_dir,
        })
    }

    /// The server name as it appears in an Infrastructure and the credentials Secret.
    pub fn server(&self) -> String {
        self.sdk.clone()
    }
}

impl Drop for Vcsim {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The object of vcsim's datacenter at `path` under its `kind` folder (`vm`, `host`, ...).
pub async fn object(client: &VcenterClient, kind: &str, path: &str) -> MoRef {
    let path = inventory_path(DATACENTER, kind, path);
    client.require(&path, kind).await.unwrap()
}

/// What an import of `template` that crashed leaves: its temporary VM, created by ImportVApp
/// in vcsim's VM folder, never completed.
pub async fn crash_mid_import(client: &VcenterClient, ova: &[u8], template: &str) {
    let descriptor = {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.ova");
        std::fs::write(&path, ova).unwrap();
        boot_image_controller::vcenter::ova::contents(&path)
            .unwrap()
            .1
    };
    let pool = object(client, "host", RESOURCE_POOL).await;
    let datastore = object(client, "datastore", DATASTORE).await;
    let folder = object(client, "vm", FOLDER).await;
    let network = object(client, "network", NETWORK).await;
    let name = boot_image_controller::vcenter::import::temporary_name(template);
    let networks = [(NETWORK.to_string(), network)];
    let spec = client
        .create_import_spec(&descriptor, &pool, &datastore, &name, &networks)
        .await
        .unwrap();
    let lease = client.import_vapp(&pool, &spec, &folder).await.unwrap();
    client.wait_lease_ready(&lease).await.unwrap();
}

/// What the installer leaves in vCenter: `ova` imported as the template `name` in vcsim's VM
/// folder (served from loopback for the import, then no more).
pub async fn install_template(client: &VcenterClient, name: &str, ova: &[u8]) {
    use boot_image_controller::facts::vcenter::{FailureDomain, TemplateKey, TemplateRequest};
    use boot_image_controller::vcenter::import::{ImportLimits, ensure_template};

    let server = FileServer::start(ova.to_vec()).await;
    let key = TemplateKey {
        server: "vcsim".into(),
        datacenter: DATACENTER.into(),
        name: name.into(),
    };
    let request = TemplateRequest {
        current: key.clone(),
        key,
        failure_domain: FailureDomain {
            datacenter: DATACENTER.into(),
            datastore: DATASTORE.into(),
            resource_pool: RESOURCE_POOL.into(),
            network: NETWORK.into(),
            ..FailureDomain::default()
        },
        folder: FOLDER.into(),
        ova: boot_image_controller::golden_stream::VmwareOva {
            release: String::new(),
            location: server.url.clone(),
            sha256: sha256(ova),
        },
    };
    let downloads = tempfile::tempdir().unwrap();
    let limits = ImportLimits {
        download_dir: downloads.path().to_path_buf(),
        ..ImportLimits::default()
    };
    ensure_template(client, &request, &limits, &|_| {})
        .await
        .unwrap_or_else(|e| panic!("install template {name}: {e}"));
}

/// Logs in to `vcsim` with [`USERNAME`] and [`PASSWORD`].
pub async fn login(vcsim: &Vcsim, limits: Limits) -> VcenterClient {
    let credentials = Credentials {
        username: USERNAME.into(),
        password: PASSWORD.into(),
    };
    VcenterClient::login(sdk_url(&vcsim.sdk).unwrap(), &credentials, limits)
        .await
        .expect("log in to vcsim")
}

/// The names of the VMs in vcsim's VM folder, sorted.
pub async fn vm_names(client: &VcenterClient) -> Vec<String> {
    let folder = object(client, "vm", FOLDER).await;
    let mut names: Vec<String> = client
        .child_vms(&folder)
        .await
        .unwrap()
        .into_iter()
        .map(|(name, _)| name)
        .collect();
    names.sort();
    names
}

/// A small OVA: an OVF descriptor of one VM with one disk and one network, and the disk.
pub fn ova() -> Vec<u8> {
    ova_of(None)
}

/// [`ova`] with a product section saying it is RHCOS `release`, as RHCOS OVAs say theirs: the
/// imported template's vApp product version.
pub fn ova_of_release(release: &str) -> Vec<u8> {
    ova_of(Some(release))
}

fn ova_of(release: Option<&str>) -> Vec<u8> {
    let product = release
        .map(|release| {
            format!(
                "<ProductSection><Info>Information about the installed software</Info>\
                 <Product>Red Hat Enterprise Linux CoreOS</Product><Vendor>Red Hat</Vendor>\
                 <Version>{release}</Version></ProductSection>"
            )
        })
        .unwrap_or_default();
    let disk = vec![0x4bu8; 64 * 1024];
    let descriptor = format!(
        r#"<?xml version="1.0" encoding="UTF-8"?>
<Envelope xmlns="http://schemas.dmtf.org/ovf/envelope/1" xmlns:ovf="http://schemas.dmtf.org/ovf/envelope/1" xmlns:rasd="http://schemas.dmtf.org/wbem/wscim/1/cim-schema/2/CIM_ResourceAllocationSettingData" xmlns:vssd="http://schemas.dmtf.org/wbem/wscim/1/cim-schema/2/CIM_VirtualSystemSettingData">
  <References><File ovf:href="disk.vmdk" ovf:id="file1" ovf:size="{size}"/></References>
  <DiskSection><Info>Virtual disks</Info><Disk ovf:capacity="1" ovf:capacityAllocationUnits="byte * 2^30" ovf:diskId="vmdisk1" ovf:fileRef="file1" ovf:format="http://www.vmware.com/interfaces/specifications/vmdk.html#streamOptimized"/></DiskSection>
  <NetworkSection><Info>Networks</Info><Network ovf:name="VM Network"><Description>The VM Network</Description></Network></NetworkSection>
  <VirtualSystem ovf:id="rhcos">
    <Info>A CoreOS machine</Info>
    <Name>rhcos</Name>
    {product}
    <OperatingSystemSection ovf:id="80"><Info>Guest OS</Info></OperatingSystemSection>
    <VirtualHardwareSection>
      <Info>Virtual hardware</Info>
      <System><vssd:ElementName>Virtual Hardware Family</vssd:ElementName><vssd:InstanceID>0</vssd:InstanceID><vssd:VirtualSystemIdentifier>rhcos</vssd:VirtualSystemIdentifier><vssd:VirtualSystemType>vmx-13</vssd:VirtualSystemType></System>
      <Item><rasd:AllocationUnits>hertz * 10^6</rasd:AllocationUnits><rasd:ElementName>2 virtual CPUs</rasd:ElementName><rasd:InstanceID>1</rasd:InstanceID><rasd:ResourceType>3</rasd:ResourceType><rasd:VirtualQuantity>2</rasd:VirtualQuantity></Item>
      <Item><rasd:AllocationUnits>byte * 2^20</rasd:AllocationUnits><rasd:ElementName>4096 MB of memory</rasd:ElementName><rasd:InstanceID>2</rasd:InstanceID><rasd:ResourceType>4</rasd:ResourceType><rasd:VirtualQuantity>4096</rasd:VirtualQuantity></Item>
      <Item><rasd:Address>0</rasd:Address><rasd:ElementName>SCSI Controller 0</rasd:ElementName><rasd:InstanceID>3</rasd:InstanceID><rasd:ResourceSubType>VirtualSCSI</rasd:ResourceSubType><rasd:ResourceType>6</rasd:ResourceType></Item>
      <Item><rasd:AddressOnParent>0</rasd:AddressOnParent><rasd:ElementName>Hard Disk 1</rasd:ElementName><rasd:HostResource>ovf:/disk/vmdisk1</rasd:HostResource><rasd:InstanceID>4</rasd:InstanceID><rasd:Parent>3</rasd:Parent><rasd:ResourceType>17</rasd:ResourceType></Item>
      <Item><rasd:AddressOnParent>7</rasd:AddressOnParent><rasd:AutomaticAllocation>true</rasd:AutomaticAllocation><rasd:Connection>VM Network</rasd:Connection><rasd:ElementName>Ethernet 1</rasd:ElementName><rasd:InstanceID>5</rasd:InstanceID><rasd:ResourceSubType>VmxNet3</rasd:ResourceSubType><rasd:ResourceType>10</rasd:ResourceType></Item>
    </VirtualHardwareSection>
  </VirtualSystem>
</Envelope>
"#,
        size = disk.len()
    );
    let mut tar = Vec::new();
    append(&mut tar, "rhcos.ovf", descriptor.as_bytes());
    append(&mut tar, "disk.vmdk", &disk);
    tar.extend_from_slice(&[0u8; 1024]);
    tar
}

/// Appends one regular file to a ustar archive.
fn append(tar: &mut Vec<u8>, name: &str, content: &[u8]) {
    let mut header = [0u8; 512];
    header[..name.len()].copy_from_slice(name.as_bytes());
    header[100..107].copy_from_slice(b"0000644");
    header[108..115].copy_from_slice(b"0000000");
    header[116..123].copy_from_slice(b"0000000");
    header[124..135].copy_from_slice(format!("{:011o}", content.len()).as_bytes());
    header[136..147].copy_from_slice(b"00000000000");
    header[156] = b'0';
    header[257..263].copy_from_slice(b"ustar\0");
    header[263..265].copy_from_slice(b"00");
    header[148..156].copy_from_slice(b"        ");
    let sum: u32 = header.iter().map(|b| u32::from(*b)).sum();
    header[148..155].copy_from_slice(format!("{sum:06o}\0").as_bytes());
    tar.extend_from_slice(&header);
    tar.extend_from_slice(content);
    tar.resize(tar.len().div_ceil(512) * 512, 0);
}

/// The lowercase hexadecimal SHA-256 of `bytes`.
pub fn sha256(bytes: &[u8]) -> String {
    ring::digest::digest(&ring::digest::SHA256, bytes)
        .as_ref()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// An HTTP server on loopback answering every GET with one file, whatever its path, and
/// keeping the paths asked.
pub struct FileServer {
    pub url: String,
    paths: Arc<Mutex<Vec<String>>>,
    task: tokio::task::JoinHandle<()>,
}

impl FileServer {
    pub async fn start(content: Vec<u8>) -> FileServer {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!(
            "http://{}/rhcos-vmware.x86_64.ova",
            listener.local_addr().unwrap()
        );
        let content = Bytes::from(content);
        let paths = Arc::new(Mutex::new(Vec::new()));
        let counted = paths.clone();
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let (content, counted) = (content.clone(), counted.clone());
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |r: Request<Incoming>| {
                        counted.lock().unwrap().push(r.uri().path().to_string());
                        let body = Full::new(content.clone());
                        async move { Ok::<_, hyper::Error>(Response::new(body)) }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        FileServer { url, paths, task }
    }

    pub fn downloads(&self) -> usize {
        self.paths.lock().unwrap().len()
    }

    /// The paths of the downloads so far, in order.
    pub fn paths(&self) -> Vec<String> {
        self.paths.lock().unwrap().clone()
    }
}

impl Drop for FileServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}
