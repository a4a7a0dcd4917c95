//! Deletes the infrastructure templates this controller created once nothing uses them: the
//! ones Cluster API MachineSets moved away from, or were reverted away from. What is unused is
//! decided purely ([`infrastructure::unused_copies`]) from the watched MachineSets and
//! MachineDeployments; deletes carry uid and resourceVersion preconditions, so a template
//! changed since it was seen is left alone.

use std::sync::Arc;

use kube::Client;
use kube::api::{Api, DeleteParams, DynamicObject, Preconditions};
use tracing::{info, warn};

use super::lenient::Lenient;
use crate::machine_kind::MachineObject;
use crate::plan::infrastructure::{self, AWS_MACHINE_TEMPLATE, Collectable, Templates, Unused};

pub(super) struct TemplateCollector {
    templates: Api<DynamicObject>,
    grace: jiff::SignedDuration,
    /// When an unused template of ours leaves its grace period: a full pass then deletes it.
    pub due: Option<tokio::time::Instant>,
}

impl TemplateCollector {
    pub fn new(client: &Client, namespace: &str, grace: std::time::Duration) -> Self {
        TemplateCollector {
            templates: Api::namespaced_with(
                client.clone(),
                namespace,
                &infrastructure::api_resource(),
            ),
            grace: jiff::SignedDuration::try_from(grace).unwrap_or(jiff::SignedDuration::ZERO),
            due: None,
        }
    }

    /// Our templates that no Cluster API MachineSet or MachineDeployment references, judged
    /// from one pass's snapshot; none while one of them cannot be read (what it references is
    /// unknown).
    pub fn candidates<A: MachineObject, B: MachineObject>(
        &mut self,
        templates: &Templates,
        machine_sets: &[Arc<Lenient<A>>],
        machine_deployments: &[Arc<Lenient<B>>],
        now: jiff::Timestamp,
    ) -> Collectable {
        let (Some(sets), Some(deployments)) =
            (references(machine_sets), references(machine_deployments))
        else {
            return Collectable::default();
        };
        let references = sets.into_iter().chain(deployments);
        let collectable = infrastructure::unused_copies(templates, references, now, self.grace);
        self.due = collectable.next.map(|at| {
            let wait = at.duration_since(now).unsigned_abs();
            tokio::time::Instant::now() + wait
        });
        collectable
    }

    pub async fn collect(&self, unused: Vec<Unused>) {
        for unused in unused {
            let params = DeleteParams {
                preconditions: Some(Preconditions {
                    uid: unused.uid.clone(),
                    resource_version: unused.resource_version.clone(),
                }),
                ..DeleteParams::default()
            };
            match self.templates.delete(&unused.name, &params).await {
                Ok(_) => info!(
                    template = %unused.name,
                    "deleted an infrastructure template this controller created and nothing uses"
                ),
                // Gone already, or changed since it was seen: left for the next pass to judge.
                Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => {}
                Err(e) => warn!(
                    template = %unused.name, error = %e,
                    "cannot delete an unused infrastructure template"
                ),
            }
        }
    }
}

/// The AWS templates `objects` reference; `None` when one of them cannot be read.
fn references<M: MachineObject>(objects: &[Arc<Lenient<M>>]) -> Option<Vec<&str>> {
    let mut names = Vec::new();
    for object in objects {
        let object = object.parsed.as_ref().ok()?;
        if let Some(reference) = object.infrastructure_ref()
            && reference.kind == AWS_MACHINE_TEMPLATE
        {
            names.push(reference.name.as_str());
        }
    }
    Some(names)
}
