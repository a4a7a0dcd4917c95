//! Deletes the infrastructure templates this controller created once nothing uses them: the
//! ones Cluster API MachineSets moved away from, or were reverted away from. What is unused is
//! decided purely ([`cluster_api_templates::unused_copies`]) from the watched MachineSets and
//! MachineDeployments; deletes carry uid and resourceVersion preconditions, so a template
//! changed since it was seen is left alone.

use std::sync::Arc;

use kube::Client;
use kube::api::{Api, DeleteParams, DynamicObject, Preconditions};
use tracing::{info, warn};

use crate::api_client;
use crate::plan::MachineResource;
use crate::plan::cluster_api_templates::{
    self, AWS_MACHINE_TEMPLATE, Collectable, RecordedCopy, Templates,
};

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
                &cluster_api_templates::api_resource(),
            ),
            grace: jiff::SignedDuration::try_from(grace).unwrap_or(jiff::SignedDuration::ZERO),
            due: None,
        }
    }

    /// Our templates that no Cluster API MachineSet or MachineDeployment references (as an AWS
    /// template), judged from one pass's snapshot; none while one of them cannot be read (what it
    /// references is unknown). The templates this pass points MachineSets at (`planned`) count
    /// as referenced: a copy left over from an earlier attempt is reused by the create that
    /// precedes the patch, and the snapshot does not show the MachineSet on it yet.
    pub fn candidates<'a>(
        &mut self,
        templates: &'a Templates,
        machines: &'a [MachineResource],
        planned: impl IntoIterator<Item = &'a str>,
        ours: &[RecordedCopy],
        now: jiff::Timestamp,
    ) -> Collectable {
        let mut references: Vec<&str> = planned.into_iter().collect();
        for machine in machines.iter().filter(|m| m.kind.is_cluster_api()) {
            let Some(object) = machine.readable() else {
                return Collectable::default();
            };
            if let Some(reference) = object.infrastructure_ref()
                && reference.kind == AWS_MACHINE_TEMPLATE
            {
                references.push(reference.name.as_str());
            }
        }
        let collectable =
            cluster_api_templates::unused_copies(templates, references, ours, now, self.grace);
        self.due = collectable.next.map(|at| {
            let wait = at.duration_since(now).unsigned_abs();
            tokio::time::Instant::now() + wait
        });
        collectable
    }

    pub async fn collect(&self, unused: Vec<Arc<DynamicObject>>) {
        for unused in unused {
            let meta = &unused.metadata;
            let name = meta.name.as_deref().unwrap_or_default();
            let params = DeleteParams {
                preconditions: Some(Preconditions {
                    uid: meta.uid.clone(),
                    resource_version: meta.resource_version.clone(),
                }),
                ..DeleteParams::default()
            };
            match api_client::bounded(self.templates.delete(name, &params)).await {
                Ok(_) => info!(
                    template = %name,
                    "deleted an infrastructure template this controller created and nothing uses"
                ),
                // Gone already, or changed since it was seen: left for the next pass to judge.
                Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => {}
                Err(e) => warn!(
                    template = %name, error = %e,
                    "cannot delete an unused infrastructure template"
                ),
            }
        }
    }
}

/// The copies the readable Cluster API MachineSets and MachineDeployments record as ours
/// ([`cluster_api_templates::COPIES_ANNOTATION`]).
pub(super) fn recorded(machines: &[MachineResource]) -> Vec<RecordedCopy> {
    (machines.iter().filter(|m| m.kind.is_cluster_api()))
        .filter_map(MachineResource::readable)
        .flat_map(|kept| cluster_api_templates::recorded_copies(kept.meta()))
        .collect()
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::plan::TemplateCopy;
    use crate::plan::{Action, Decision};
    use crate::reason::Reason;
    use crate::testkit::cluster_api::aws_machine_template;
    use crate::testkit::decisions::decision;

    fn moving_to(template: &str) -> Decision {
        let mut d = decision("worker-a", Action::Update, Reason::BootImageOutdated);
        d.infrastructure_template = Some(Box::new(TemplateCopy {
            kind: AWS_MACHINE_TEMPLATE.to_string(),
            from: "worker-a".to_string(),
            to: template.to_string(),
            object: serde_json::Value::Null,
        }));
        d
    }

    #[tokio::test]
    async fn a_copy_this_pass_moves_a_machine_set_to_is_not_collected() {
        // A copy made long ago whose patch never went through: unreferenced, past its grace.
        let source = aws_machine_template("openshift-cluster-api", "worker-a", "ami-old");
        let key = |name: &str| (AWS_MACHINE_TEMPLATE.to_string(), name.to_string());
        let source: Templates = [(
            key("worker-a"),
            Arc::new(serde_json::from_value(source).unwrap()),
        )]
        .into();
        let reference = crate::api::InfrastructureRef {
            api_group: Some(cluster_api_templates::INFRASTRUCTURE_GROUP.into()),
            kind: AWS_MACHINE_TEMPLATE.into(),
            name: "worker-a".into(),
            ..Default::default()
        };
        let view =
            cluster_api_templates::view(Some(&reference), &source, None, None, None).unwrap();
        let new_ami = serde_json::json!("ami-new");
        let made = cluster_api_templates::copy(&view, &[("/ami/id", &new_ami)], Some("4.21"), &[]);
        let name = made.to.as_str();
        let mut copy = made.object.clone();
        copy["metadata"]["creationTimestamp"] = "2026-01-01T00:00:00Z".into();
        copy["metadata"]["uid"] = "u-1".into();
        let ours = [RecordedCopy {
            name: name.into(),
            uid: "u-1".into(),
        }];
        let object: DynamicObject = serde_json::from_value(copy).unwrap();
        let templates: Templates = [(key(name), Arc::new(object))].into();
        let now = "2026-02-01T00:00:00Z".parse().unwrap();
        // Never contacted: judging candidates reads only the snapshot.
        let config = kube::Config::new("http://127.0.0.1:9".parse().unwrap());
        let client = Client::try_from(config).unwrap();
        let grace = std::time::Duration::from_secs(600);
        let mut collector = TemplateCollector::new(&client, "openshift-cluster-api", grace);
        let mut unused = |decisions: &[Decision]| {
            let planned = (decisions.iter())
                .filter_map(|d| d.infrastructure_template.as_ref())
                .map(|copy| copy.to.as_str());
            let found = collector.candidates(&templates, &[], planned, &ours, now);
            let names = found.unused.iter().filter_map(|u| u.metadata.name.clone());
            names.collect::<Vec<_>>()
        };

        assert_eq!(unused(&[moving_to("worker-b-4-21")]), [name]);
        assert!(unused(&[moving_to(name)]).is_empty());
    }
}
