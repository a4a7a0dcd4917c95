//! Deletes the infrastructure templates this controller created once nothing uses them: the
//! ones Cluster API MachineSets moved away from, or were reverted away from. What is unused is
//! decided purely ([`infrastructure::unused_copies`]); this file adds what the watches do not
//! hold (MachineDeployments, listed only when there is something to delete) and deletes with
//! preconditions, so a template changed since it was seen is left alone.

use std::sync::Arc;

use kube::Client;
use kube::api::{Api, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Preconditions};
use kube::core::ApiResource;
use tracing::{info, warn};

use super::lenient::Lenient;
use crate::api::ClusterApiMachineSet;
use crate::machine_kind::MachineObject;
use crate::plan::infrastructure::{self, AWS_MACHINE_TEMPLATE, Collectable, Templates, Unused};

pub(super) struct TemplateCollector {
    templates: Api<DynamicObject>,
    deployments: Api<DynamicObject>,
    grace: jiff::SignedDuration,
}

impl TemplateCollector {
    pub fn new(client: &Client, namespace: &str, grace: std::time::Duration) -> Self {
        let gvk = GroupVersionKind::gvk("cluster.x-k8s.io", "v1beta2", "MachineDeployment");
        let deployments = ApiResource::from_gvk_with_plural(&gvk, "machinedeployments");
        TemplateCollector {
            templates: Api::namespaced_with(
                client.clone(),
                namespace,
                &crate::plan::infrastructure::api_resource(),
            ),
            deployments: Api::namespaced_with(client.clone(), namespace, &deployments),
            grace: jiff::SignedDuration::try_from(grace).unwrap_or(jiff::SignedDuration::ZERO),
        }
    }

    /// Our templates no MachineSet references, judged from one pass's snapshot; none while a
    /// MachineSet cannot be read (what it references is unknown).
    pub fn candidates(
        &self,
        templates: &Templates,
        machine_sets: &[Arc<Lenient<ClusterApiMachineSet>>],
        now: jiff::Timestamp,
    ) -> Collectable {
        let mut references = Vec::new();
        for machine_set in machine_sets {
            let Ok(machine_set) = &machine_set.parsed else {
                return Collectable::default();
            };
            if let Some(reference) = machine_set.infrastructure_ref()
                && reference.kind == AWS_MACHINE_TEMPLATE
            {
                references.push(reference.name.as_str());
            }
        }
        infrastructure::unused_copies(templates, references, now, self.grace)
    }

    /// Deletes `candidates` no MachineDeployment references either.
    pub async fn collect(&self, candidates: Vec<Unused>) {
        if candidates.is_empty() {
            return;
        }
        let used_by_deployments: Vec<String> = match self
            .deployments
            .list(&ListParams::default())
            .await
        {
            Ok(list) => list
                .items
                .iter()
                .filter_map(|d| d.data.pointer(infrastructure::REFERENCE_NAME_POINTER))
                .filter_map(|name| name.as_str().map(String::from))
                .collect(),
            // No MachineDeployment CRD: nothing references templates through one.
            Err(kube::Error::Api(e)) if e.code == 404 => Vec::new(),
            Err(e) => {
                warn!(error = %e, "cannot list MachineDeployments; unused infrastructure templates are kept for now");
                return;
            }
        };
        for unused in candidates {
            if used_by_deployments.contains(&unused.name) {
                continue;
            }
            let params = DeleteParams {
                preconditions: Some(Preconditions {
                    uid: unused.uid.clone(),
                    resource_version: unused.resource_version.clone(),
                }),
                ..DeleteParams::default()
            };
            match self.templates.delete(&unused.name, &params).await {
                Ok(_) => {
                    info!(template = %unused.name, "deleted an infrastructure template this controller created and nothing uses")
                }
                Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => {}
                Err(e) => {
                    warn!(template = %unused.name, error = %e, "cannot delete an unused infrastructure template")
                }
            }
        }
    }
}
