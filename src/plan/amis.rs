//! What EC2 is asked about: the AMIs of the machine resources the planner would judge that no
//! list of known images names.

use std::collections::BTreeSet;

use super::{Planner, cluster_api_templates};
use crate::api::ProviderSpec;
use crate::known_images::KnownImages;
use crate::machine_kind::MachineObject;

/// The (region, AMI) pairs of the machine resources whose AMI the lists do not already know:
/// what EC2 is asked about, by the controller and by `plan --ec2-lookup` alike. Only objects the
/// planner would judge (selected, not opted out nor owned) and regions of AWS's own form count.
/// Cluster API objects' AMIs are read from their templates, as the AWS rule reads them.
pub fn amis_to_ask<'a>(
    planner: &Planner<'a>,
    machines: impl IntoIterator<Item = &'a dyn MachineObject>,
) -> BTreeSet<(String, String)> {
    let cluster = planner.snapshot;
    let known = &cluster.known_images;
    let region = cluster_api_templates::region(cluster.infrastructure.as_ref());
    let templates = &cluster.infrastructure_templates;
    let judged: Vec<&dyn MachineObject> = (machines.into_iter())
        .filter(|o| planner.judges_image(*o))
        .collect();
    let (cluster_api, openshift): (Vec<_>, Vec<_>) =
        (judged.into_iter()).partition(|o| o.kind().is_cluster_api());
    let openshift = (openshift.into_iter())
        .filter_map(|o| o.provider_spec())
        .filter_map(|spec| unknown_ami(spec, known));
    let cluster_api = cluster_api_templates::provider_spec_views(cluster_api, templates, region)
        .filter_map(|spec| unknown_ami(&spec, known));
    openshift.chain(cluster_api).collect()
}

fn unknown_ami(spec: &ProviderSpec, known: &KnownImages) -> Option<(String, String)> {
    let spec = spec.value.as_ref()?;
    let (id, region) = (spec.pointer("/ami/id")?, spec.pointer("/placement/region")?);
    let (id, region) = (id.as_str()?, region.as_str()?);
    let plausible = id.starts_with("ami-") && crate::facts::region::is_region(region);
    (plausible && !known.contains(id)).then(|| (region.to_string(), id.to_string()))
}

#[cfg(test)]
mod tests {
    use serde::de::DeserializeOwned;
    use serde_json::Value;

    use super::*;
    use crate::api::{
        ClusterApiMachineDeployment, ClusterApiMachineSet, ControlPlaneMachineSet, MachineSet,
    };
    use crate::names::{CLUSTER_API_NAMESPACE, MACHINE_API_NAMESPACE};
    use crate::testkit::snapshot::{ClusterChanges, cluster_snapshot};
    use crate::testkit::streams::stream_421;
    use crate::testkit::{cluster_api, objects};

    fn typed<T: DeserializeOwned>(value: Value) -> T {
        serde_json::from_value(value).expect("test object deserializes")
    }

    #[test]
    fn asks_about_the_unknown_amis_of_every_machine_kind_in_the_clusters_region() {
        let template = cluster_api::aws_machine_template(CLUSTER_API_NAMESPACE, "t", "ami-capi");
        let cluster = cluster_snapshot("AWS", "4.21.0", &stream_421())
            .knowing(&["ami-known"])
            .template(template)
            .machine_managers(serde_json::json!([objects::machine_manager(
                "controlplanemachinesets",
                serde_json::json!({"mode": "All"})
            )]))
            .build();
        let options = crate::plan::Options::default();
        let planner = Planner::new(&cluster, &options);
        let machine_set = |name, ami| -> MachineSet {
            typed(
                objects::machine_set(MACHINE_API_NAMESPACE, name)
                    .ami(ami)
                    .build(),
            )
        };
        let (unknown, known) = (
            machine_set("a", "ami-unknown"),
            machine_set("b", "ami-known"),
        );
        // Never asked: an object that is never updated, and a region that is no AWS region.
        let opted_out: MachineSet = typed(
            objects::machine_set(MACHINE_API_NAMESPACE, "c")
                .ami("ami-opted-out")
                .opted_out()
                .build(),
        );
        let elsewhere: MachineSet = typed(
            objects::machine_set(MACHINE_API_NAMESPACE, "d")
                .ami("ami-elsewhere")
                .region("x@127.0.0.1:8443/")
                .build(),
        );
        let control_plane: ControlPlaneMachineSet = typed(objects::control_plane_machine_set(
            MACHINE_API_NAMESPACE,
            "ami-cp",
        ));
        let capi_set: ClusterApiMachineSet =
            typed(cluster_api::machine_set(CLUSTER_API_NAMESPACE, "s", "t"));
        let capi_deployment: ClusterApiMachineDeployment = typed(cluster_api::machine_deployment(
            CLUSTER_API_NAMESPACE,
            "d",
            "t",
        ));

        let machines: [&dyn MachineObject; 7] = [
            &unknown,
            &known,
            &opted_out,
            &elsewhere,
            &control_plane,
            &capi_set,
            &capi_deployment,
        ];
        let wanted = amis_to_ask(&planner, machines);

        let pair = |ami: &str| ("us-east-1".to_string(), ami.to_string());
        assert_eq!(
            wanted,
            [pair("ami-unknown"), pair("ami-cp"), pair("ami-capi")].into()
        );
    }
}
