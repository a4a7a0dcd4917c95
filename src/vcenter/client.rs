//! The calls we make to vCenter: log in, find objects by inventory path, read a property, import
//! an OVF through an NFC lease, mark as template, rename, destroy, wait for tasks.

use std::path::PathBuf;
use std::time::Duration;

use hyper::Uri;
use roxmltree::Node;
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject as _;

use super::VcenterError;
use super::credentials::Credentials;
use super::soap::{MoRef, Session, child, escape, text_of};
use crate::http_client::{Connector, Egress};

/// How long calls may take.
#[derive(Clone, Debug)]
pub struct Limits {
    pub connect_timeout: Duration,
    /// One SOAP call, from sending to the last byte of the answer.
    pub call_timeout: Duration,
    /// Between two looks at a task or lease that is not done yet.
    pub poll_interval: Duration,
    /// PEM certificates trusted besides the system's CA roots (`--vcenter-ca-file`): the
    /// private CA that signed the vCenter's certificate.
    pub ca_file: Option<PathBuf>,
    /// The cluster's proxy and trusted CA bundle, for vCenter and the OVA download alike.
    pub egress: Egress,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            connect_timeout: Duration::from_secs(5),
            call_timeout: Duration::from_secs(60),
            poll_interval: Duration::from_millis(500),
            ca_file: None,
            egress: Egress::default(),
        }
    }
}

impl Limits {
    /// A connector to vCenter and its hosts (the SOAP calls, the disk uploads, the OVA
    /// download), connecting within `connect_timeout`: HTTPS trusting the system's CA roots, the
    /// cluster's bundle and the certificates of [`Limits::ca_file`], or plain HTTP (a
    /// simulator); through the cluster's proxy. A CA file that cannot be read or holds none is
    /// an error rather than a silently weaker trust.
    pub fn connector(&self, connect_timeout: Duration) -> Result<Connector, VcenterError> {
        let mut roots = Vec::new();
        if let Some(path) = &self.ca_file {
            let unusable = |why: String| {
                VcenterError::Protocol(format!("the vCenter CA file {}: {why}", path.display()))
            };
            roots = CertificateDer::pem_file_iter(path)
                .map_err(|e| unusable(e.to_string()))?
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| unusable(e.to_string()))?;
            if roots.is_empty() {
                return Err(unusable("no PEM certificate in it".into()));
            }
        }
        crate::http_client::connector(connect_timeout, "vCenter", &roots, &self.egress)
            .map_err(|e| VcenterError::Unreachable(e.to_string()))
    }
}

/// The well-known objects of one vCenter (its `ServiceContent`).
#[derive(Clone, Debug)]
struct ServiceContent {
    property_collector: MoRef,
    session_manager: MoRef,
    search_index: MoRef,
    ovf_manager: MoRef,
}

/// A logged-in vCenter.
pub struct VcenterClient {
    pub session: Session,
    content: ServiceContent,
    pub limits: Limits,
}

/// What `CreateImportSpec` made of an OVF descriptor: the spec to import, as vCenter wrote it
/// (the `spec` argument of `ImportVApp`), and the files the lease expects (device id, file name
/// in the OVA, whether it is created).
pub struct ImportSpec {
    pub spec: String,
    pub files: Vec<FileItem>,
}

#[derive(Clone, Debug)]
pub struct FileItem {
    pub device_id: String,
    pub path: String,
    pub create: bool,
}

/// Where an NFC lease accepts each disk: device key (`importKey`) and URL.
#[derive(Clone, Debug)]
pub struct LeaseInfo {
    pub entity: Option<MoRef>,
    pub device_urls: Vec<(String, String)>,
}

/// The SDK URL of a vCenter server name (`vcenter.example.com` or `host:port`), or the URL
/// given whole (`http://127.0.0.1:8989/sdk`, a simulator).
pub fn sdk_url(server: &str) -> Result<Uri, VcenterError> {
    let url = if server.contains("://") {
        server.to_string()
    } else {
        format!("https://{server}/sdk")
    };
    url.parse::<Uri>()
        .ok()
        .filter(|u| u.host().is_some())
        .ok_or_else(|| VcenterError::Protocol(format!("invalid vCenter server {server:?}")))
}

impl VcenterClient {
    /// Connects to `sdk` and logs in.
    pub async fn login(
        sdk: Uri,
        credentials: &Credentials,
        limits: Limits,
    ) -> Result<Self, VcenterError> {
        let connector = limits.connector(limits.connect_timeout)?;
        let session = Session::new(sdk, connector, limits.call_timeout);
        let instance = MoRef {
            kind: "ServiceInstance".into(),
            value: "ServiceInstance".into(),
        };
        let content = session
            .call("RetrieveServiceContent", &instance, "", service_content)
            .await?;
        let arguments = format!(
            "<userName>{}</userName><password>{}</password>",
            escape(&credentials.username),
            escape(&credentials.password)
        );
        let manager = &content.session_manager;
        session
            .call("Login", manager, &arguments, |_| Ok(()))
            .await?;
        Ok(VcenterClient {
            session,
            content,
            limits,
        })
    }

    /// Ends the session (best effort: vCenter expires idle sessions anyway).
    pub async fn logout(&self) {
        let _ = self
            .invoke("Logout", &self.content.session_manager, "")
            .await;
    }

    /// The object at an inventory path (`dc1/vm/folder/name`), if any.
    pub async fn find(&self, inventory_path: &str) -> Result<Option<MoRef>, VcenterError> {
        let path = format!("<inventoryPath>{}</inventoryPath>", escape(inventory_path));
        let index = &self.content.search_index;
        let found = |root: Node<'_, '_>| Ok(child(root, "returnval").and_then(MoRef::from_node));
        self.session
            .call("FindByInventoryPath", index, &path, found)
            .await
    }

    /// [`find`](Self::find), or [`VcenterError::NotFound`] naming `what`.
    pub async fn require(&self, inventory_path: &str, what: &str) -> Result<MoRef, VcenterError> {
        self.find(inventory_path)
            .await?
            .ok_or_else(|| VcenterError::NotFound(format!("{what} {inventory_path}")))
    }

    /// One property of `object`, as `read` makes it of its `val` element (`None` when unset).
    async fn property<T>(
        &self,
        object: &MoRef,
        path: &str,
        read: impl FnOnce(Option<Node<'_, '_>>) -> T,
    ) -> Result<T, VcenterError> {
        let spec = format!(
            concat!(
                "<specSet><propSet><type>{kind}</type><pathSet>{path}</pathSet></propSet>",
                "<objectSet>{obj}</objectSet></specSet><options/>"
            ),
            kind = escape(&object.kind),
            path = escape(path),
            obj = object.xml("obj"),
        );
        let collector = &self.content.property_collector;
        let value = |root: Node<'_, '_>| Ok(read(child(root, "val")));
        self.session
            .call("RetrievePropertiesEx", collector, &spec, value)
            .await
    }

    /// The text of a simple property (a name, a state, a flag), trimmed; `None` when unset.
    pub async fn property_text(
        &self,
        object: &MoRef,
        path: &str,
    ) -> Result<Option<String>, VcenterError> {
        let text = |val: Option<Node<'_, '_>>| Some(val?.text().unwrap_or("").trim().to_string());
        self.property(object, path, text).await
    }

    /// Whether the VM `vm` is marked as a template.
    pub async fn is_template(&self, vm: &MoRef) -> Result<bool, VcenterError> {
        let value = self.property_text(vm, "config.template").await?;
        Ok(value.as_deref() == Some("true"))
    }

    /// The version of `vm`'s vApp product: what an RHCOS OVA's product section says, its
    /// release. vCenter shows it as `summary.config.product`, which the MCO reads
    /// (`createNewVMTemplate`, vsphere_helpers.go at 7ff337a); vcsim keeps it only in
    /// `config.vAppConfig.product`, so that is read when the summary has none.
    pub async fn product_version(&self, vm: &MoRef) -> Result<Option<String>, VcenterError> {
        let summary = self.property(vm, "summary.config", product_version).await?;
        if summary.is_some() {
            return Ok(summary);
        }
        self.property(vm, "config.vAppConfig", product_version)
            .await
    }

    /// Asks vCenter to turn an OVF descriptor into an import spec for `name`.
    pub async fn create_import_spec(
        &self,
        ovf_descriptor: &str,
        pool: &MoRef,
        datastore: &MoRef,
        name: &str,
        networks: &[(String, MoRef)],
    ) -> Result<ImportSpec, VcenterError> {
        let mappings: String = networks
            .iter()
            .map(|(ovf_name, net)| {
                format!(
                    "<networkMapping><name>{}</name>{}</networkMapping>",
                    escape(ovf_name),
                    net.xml("network")
                )
            })
            .collect();
        // OvfCreateImportSpecParams in schema order: vCenter validates the order, vcsim not.
        let arguments = format!(
            concat!(
                "<ovfDescriptor>{ovf}</ovfDescriptor>",
                "{pool}{datastore}<cisp><locale></locale><deploymentOption></deploymentOption>",
                "<entityName>{name}</entityName>{mappings}<diskProvisioning>thin</diskProvisioning>",
                "</cisp>"
            ),
            ovf = escape(ovf_descriptor),
            pool = pool.xml("resourcePool"),
            datastore = datastore.xml("datastore"),
            name = escape(name),
            mappings = mappings,
        );
        let manager = &self.content.ovf_manager;
        (self.session)
            .call("CreateImportSpec", manager, &arguments, import_spec)
            .await
    }

    /// Starts importing `spec` into `pool` and `folder`; the lease accepts the disks.
    pub async fn import_vapp(
        &self,
        pool: &MoRef,
        spec: &ImportSpec,
        folder: &MoRef,
    ) -> Result<MoRef, VcenterError> {
        let arguments = format!("{}{}", spec.spec, folder.xml("folder"));
        self.returned("ImportVApp", pool, &arguments).await
    }

    /// Waits until the lease is ready for uploads, and says where each disk goes.
    pub async fn wait_lease_ready(&self, lease: &MoRef) -> Result<LeaseInfo, VcenterError> {
        self.wait_for(lease, "state", "ready", "error").await?;
        let info = |val: Option<Node<'_, '_>>| {
            let val = val?;
            let entity = (val.children())
                .find(|n| n.tag_name().name() == "entity")
                .and_then(MoRef::from_node);
            let device_urls = (val.children())
                .filter(|n| n.tag_name().name() == "deviceUrl")
                .filter_map(|n| {
                    Some((
                        text_of(n, "importKey")?.to_string(),
                        text_of(n, "url")?.to_string(),
                    ))
                })
                .collect();
            Some(LeaseInfo {
                entity,
                device_urls,
            })
        };
        (self.property(lease, "info", info).await?)
            .ok_or_else(|| VcenterError::Protocol("the import lease has no info".into()))
    }

    pub async fn rename(&self, entity: &MoRef, name: &str) -> Result<(), VcenterError> {
        let new_name = format!("<newName>{}</newName>", escape(name));
        let task = self.returned("Rename_Task", entity, &new_name).await?;
        self.wait_for(&task, "info.state", "success", "info.error")
            .await
    }

    pub async fn destroy(&self, entity: &MoRef) -> Result<(), VcenterError> {
        let task = self.returned("Destroy_Task", entity, "").await?;
        self.wait_for(&task, "info.state", "success", "info.error")
            .await
    }

    /// The VMs directly in `folder`, by name.
    pub async fn child_vms(&self, folder: &MoRef) -> Result<Vec<(String, MoRef)>, VcenterError> {
        let vms = |val: Option<Node<'_, '_>>| -> Vec<MoRef> {
            (val.into_iter().flat_map(|val| val.children()))
                .filter_map(MoRef::from_node)
                .filter(|r| r.kind == "VirtualMachine")
                .collect()
        };
        let mut named = Vec::new();
        for vm in self.property(folder, "childEntity", vms).await? {
            if let Some(name) = self.property_text(&vm, "name").await? {
                named.push((name, vm));
            }
        }
        Ok(named)
    }

    /// Waits until the property `state` of `object` (a task's `info.state`, a lease's `state`)
    /// is `done`; `error` becomes [`VcenterError::Import`] with the `localizedMessage` of the
    /// fault at `fault`. A lease is `done` before `ready` only when it ended early.
    async fn wait_for(
        &self,
        object: &MoRef,
        state: &str,
        done: &str,
        fault: &str,
    ) -> Result<(), VcenterError> {
        let message = |val: Option<Node<'_, '_>>| {
            (val.and_then(|val| text_of(val, "localizedMessage")))
                .unwrap_or("unknown error")
                .to_string()
        };
        loop {
            match self.property_text(object, state).await?.as_deref() {
                Some(now) if now == done => return Ok(()),
                Some("error") => {
                    let message = self.property(object, fault, message).await?;
                    return Err(VcenterError::Import(message));
                }
                Some("done") => {
                    return Err(VcenterError::Import("the import lease ended early".into()));
                }
                _ => tokio::time::sleep(self.limits.poll_interval).await,
            }
        }
    }

    /// Calls `method` for its effect alone (a lease's progress, completion or abort, marking a
    /// VM as template).
    pub async fn invoke(
        &self,
        method: &str,
        this: &MoRef,
        arguments: &str,
    ) -> Result<(), VcenterError> {
        self.session.call(method, this, arguments, |_| Ok(())).await
    }

    /// Calls `method`, which returns an object (a lease, a task).
    async fn returned(
        &self,
        method: &str,
        this: &MoRef,
        arguments: &str,
    ) -> Result<MoRef, VcenterError> {
        let object = |root: Node<'_, '_>| {
            child(root, "returnval")
                .and_then(MoRef::from_node)
                .ok_or_else(|| VcenterError::Protocol(format!("{method} returned no object")))
        };
        self.session.call(method, this, arguments, object).await
    }
}

/// What `CreateImportSpec` answered (its `returnval`), or the errors it found in the OVF.
fn import_spec(root: Node<'_, '_>) -> Result<ImportSpec, VcenterError> {
    let returnval = child(root, "returnval")
        .ok_or_else(|| VcenterError::Protocol("CreateImportSpec returned nothing".into()))?;
    let errors: Vec<&str> = returnval
        .children()
        .filter(|n| n.tag_name().name() == "error")
        .filter_map(|n| text_of(n, "localizedMessage"))
        .collect();
    if !errors.is_empty() {
        return Err(VcenterError::Import(format!(
            "vCenter cannot import the OVF: {}",
            errors.join("; ")
        )));
    }
    let spec = returnval
        .children()
        .find(|n| n.tag_name().name() == "importSpec")
        .ok_or_else(|| VcenterError::Protocol("CreateImportSpec gave no importSpec".into()))?;
    let spec_type = spec
        .attribute(("http://www.w3.org/2001/XMLSchema-instance", "type"))
        .unwrap_or("VirtualMachineImportSpec");
    let files = returnval
        .children()
        .filter(|n| n.tag_name().name() == "fileItem")
        .map(|n| FileItem {
            device_id: text_of(n, "deviceId").unwrap_or_default().to_string(),
            path: text_of(n, "path").unwrap_or_default().to_string(),
            create: text_of(n, "create") == Some("true"),
        })
        .collect();
    // The namespace prefixes in scope where vCenter wrote the spec (`xmlns:p="uri"` each): its
    // content may use any of them (vcsim declares its own `xsi` on the spec element).
    let namespaces: String = spec
        .namespaces()
        .filter_map(|ns| Some((ns.name()?, ns.uri())))
        .filter(|(prefix, _)| *prefix != "xml")
        .map(|(prefix, uri)| format!(r#" xmlns:{prefix}="{}""#, escape(uri)))
        .collect();
    let (spec_type, content) = (escape(spec_type), inner_xml(spec));
    let spec = format!(r#"<spec{namespaces} xsi:type="{spec_type}">{content}</spec>"#);
    Ok(ImportSpec { spec, files })
}

/// The XML between an element's tags, verbatim (to send an import spec back as vCenter wrote
/// it). Our envelope declares the same `xsi` and `xsd` prefixes vCenter and vcsim use.
fn inner_xml(node: Node<'_, '_>) -> String {
    let outer = &node.document().input_text()[node.range()];
    let start = outer.find('>').map_or(outer.len(), |i| i + 1);
    let end = outer.rfind("</").unwrap_or(outer.len()).max(start);
    outer[start..end].to_string()
}

/// The first non-empty `version` of the `product` elements right under a property's `val` (a
/// `VirtualMachineConfigSummary` has one, a `VmConfigInfo` a list).
fn product_version(val: Option<Node<'_, '_>>) -> Option<String> {
    let element =
        |node: &Node<'_, '_>, name: &str| node.is_element() && node.tag_name().name() == name;
    (val?.children())
        .filter(|n| element(n, "product"))
        .filter_map(|product| {
            let version = product.children().find(|n| element(n, "version"))?;
            Some(version.text()?.trim().to_string())
        })
        .find(|version| !version.is_empty())
}

fn service_content(root: Node<'_, '_>) -> Result<ServiceContent, VcenterError> {
    let returnval = child(root, "returnval")
        .ok_or_else(|| VcenterError::Protocol("no ServiceContent".into()))?;
    let get = |name: &str| {
        child(returnval, name)
            .and_then(MoRef::from_node)
            .ok_or_else(|| VcenterError::Protocol(format!("ServiceContent has no {name}")))
    };
    Ok(ServiceContent {
        property_collector: get("propertyCollector")?,
        session_manager: get("sessionManager")?,
        search_index: get("searchIndex")?,
        ovf_manager: get("ovfManager")?,
    })
}

/// An inventory path for FindByInventoryPath from what a providerSpec or failure domain says:
/// absolute paths (`/dc1/datastore/ds1`) lose their leading slash, bare names (`ds1`) are put
/// under the datacenter's `kind` folder (`datastore`, `network`, `vm`).
pub fn inventory_path(datacenter: &str, kind: &str, given: &str) -> String {
    match given.strip_prefix('/') {
        Some(absolute) => absolute.trim_end_matches('/').to_string(),
        None => format!("{datacenter}/{kind}/{}", given.trim_end_matches('/')),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_import_spec_is_sent_back_as_vcenter_wrote_it_with_the_prefixes_in_scope() {
        let answer = concat!(
            r#"<soapenv:Envelope xmlns:soapenv="http://schemas.xmlsoap.org/soap/envelope/" "#,
            r#"xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance"><soapenv:Body>"#,
            r#"<CreateImportSpecResponse xmlns="urn:vim25"><returnval>"#,
            r#"<importSpec xsi:type="VirtualMachineImportSpec"><configSpec><name>t</name>"#,
            r#"</configSpec></importSpec><fileItem><deviceId>/t/disk0</deviceId>"#,
            r#"<path>disk.vmdk</path><create>true</create></fileItem></returnval>"#,
            r#"</CreateImportSpecResponse></soapenv:Body></soapenv:Envelope>"#
        );
        let doc = roxmltree::Document::parse(answer).unwrap();
        let spec = import_spec(doc.root()).unwrap();
        assert_eq!(
            spec.spec,
            concat!(
                r#"<spec xmlns:soapenv="http://schemas.xmlsoap.org/soap/envelope/" "#,
                r#"xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance" "#,
                r#"xsi:type="VirtualMachineImportSpec"><configSpec><name>t</name></configSpec>"#,
                "</spec>"
            )
        );
        let file = &spec.files[0];
        assert_eq!(
            (file.device_id.as_str(), file.path.as_str()),
            ("/t/disk0", "disk.vmdk")
        );
        assert!(file.create);
    }

    #[test]
    fn inventory_paths_from_absolute_paths_and_names() {
        assert_eq!(
            inventory_path("dc1", "datastore", "/dc1/datastore/ds1"),
            "dc1/datastore/ds1"
        );
        assert_eq!(
            inventory_path("dc1", "datastore", "ds1"),
            "dc1/datastore/ds1"
        );
        assert_eq!(
            inventory_path("dc1", "vm", "/dc1/vm/infra/"),
            "dc1/vm/infra"
        );
    }

    #[test]
    fn product_versions_are_read_from_a_summary_or_a_vapp_config() {
        let version = |val: &str| {
            let answer = format!(
                r#"<RetrievePropertiesExResponse xmlns="urn:vim25"><returnval><objects><propSet><name>p</name>{val}</propSet></objects></returnval></RetrievePropertiesExResponse>"#
            );
            let doc = roxmltree::Document::parse(&answer).unwrap();
            product_version(child(doc.root(), "val"))
        };
        assert_eq!(
            version("<val><name>t</name><product><name>RHCOS</name><version>9.6.20251023-0</version></product></val>").as_deref(),
            Some("9.6.20251023-0")
        );
        assert_eq!(
            version("<val><product><key>0</key><version></version></product><product><key>1</key><version> 9.6.1 </version></product></val>").as_deref(),
            Some("9.6.1")
        );
        assert_eq!(version("<val><name>t</name></val>"), None);
        assert_eq!(version(""), None, "unset");
    }

    #[test]
    fn servers_become_sdk_urls() {
        assert_eq!(
            sdk_url("vc.example.com").unwrap().to_string(),
            "https://vc.example.com/sdk"
        );
        assert_eq!(
            sdk_url("http://127.0.0.1:8989/sdk").unwrap().to_string(),
            "http://127.0.0.1:8989/sdk"
        );
        assert!(sdk_url("").is_err());
    }
}
