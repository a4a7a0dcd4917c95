//! Which RHCOS release a template that MachineSets clone now is: read from vCenter, so that a
//! template already at the golden release is kept whatever its name (a fresh cluster's
//! installer templates), as the MCO keeps it (`createNewVMTemplate`, vsphere_helpers.go at
//! 7ff337a).

use super::VcenterError;
use super::client::{VcenterClient, inventory_path};
use crate::facts::vcenter::TemplateRequest;
use crate::facts::vcenter::TemplateVersion;

/// The release of the template `request.current` names. A bare name is looked for where the
/// MachineSet's workspace folder is, then in the datacenter's VM folder, the order the MCO
/// looks in (`resolveExistingTemplateVM`, vsphere_helpers.go at 7ff337a); an inventory path
/// is taken as it is.
pub async fn template_version(
    client: &VcenterClient,
    request: &TemplateRequest,
) -> Result<TemplateVersion, VcenterError> {
    let datacenter = &request.current.datacenter;
    let template = &request.current.name;
    let mut paths = Vec::new();
    if !template.starts_with('/') {
        let folder = inventory_path(datacenter, "vm", &request.folder);
        paths.push(format!("{folder}/{template}"));
    }
    let anywhere = inventory_path(datacenter, "vm", template);
    if !paths.contains(&anywhere) {
        paths.push(anywhere);
    }
    for path in &paths {
        let Some(vm) = client.find(path).await? else {
            continue;
        };
        return Ok(match client.product_version(&vm).await? {
            Some(release) => TemplateVersion::Release(release),
            None => TemplateVersion::Unknown(format!(
                "template {path} says no RHCOS release (no vApp product version)"
            )),
        });
    }
    Ok(TemplateVersion::Unknown(format!(
        "vCenter has no template {template} (looked at {})",
        paths.join(" and ")
    )))
}
