//! The planner on Cluster API MachineSets and on Machine API MachineSets whose authoritative
//! API is Cluster API.

use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use super::{Action, ClusterSnapshot, Decision, MachineResource, Options, plan};
use crate::api::{ClusterApiMachineDeployment, ClusterApiMachineSet, MachineSet};
use crate::machine_kind::MachineKind;
use crate::names::{CLUSTER_API_NAMESPACE, MACHINE_API_NAMESPACE};
use crate::reason::Reason;
use crate::testkit::cluster_api::{self, template_of};
use crate::testkit::objects;
use crate::testkit::snapshot::{ClusterChanges, ClusterSnapshotBuilder, cluster_snapshot};
use crate::testkit::streams::{AMI_420_US_EAST_1, AMI_421_US_EAST_1, stream_421};

fn typed<T: DeserializeOwned>(value: Value) -> T {
    serde_json::from_value(value).expect("test object deserializes")
}

/// An AWS cluster at 4.21 with the 4.20 template `worker-a` in the Cluster API namespace and
/// an Ignition 3 bootstrap secret there.
fn cluster() -> ClusterSnapshot {
    building_cluster().build()
}

fn building_cluster() -> ClusterSnapshotBuilder {
    let template =
        cluster_api::aws_machine_template(CLUSTER_API_NAMESPACE, "worker-a", AMI_420_US_EAST_1);
    cluster_snapshot("AWS", "4.21.0", &stream_421())
        .stub_secret(CLUSTER_API_NAMESPACE, "worker-user-data", "3.4.0")
        // The 4.20 AMIs, remembered as CoreOS AMIs when that stream was golden.
        .knowing(&objects::AMIS_420)
        .template(template)
}

fn options() -> Options {
    Options {
        now: "2026-03-02T10:00:00Z".parse().unwrap(),
        ..Options::default()
    }
}

fn decide(cluster: &ClusterSnapshot, object: Value) -> Decision {
    let object: ClusterApiMachineSet = typed(object);
    let plan = plan(cluster, &[object.into()], &options());
    plan.decisions.into_iter().next().expect("one decision")
}

fn worker_a() -> Value {
    cluster_api::machine_set(CLUSTER_API_NAMESPACE, "worker-a", "worker-a")
}

#[test]
fn an_outdated_template_is_copied_with_the_golden_ami_and_the_machine_set_repointed() {
    let decided = decide(&cluster(), worker_a());
    assert_eq!(
        (decided.action, decided.reason),
        (Action::Update, Reason::BootImageOutdated),
        "{decided:?}"
    );
    let copy = decided
        .infrastructure_template
        .as_ref()
        .expect("a template to create");
    assert_eq!(copy.from, "worker-a");
    assert_eq!(
        copy.object.pointer("/spec/template/spec/ami/id"),
        Some(&json!(AMI_421_US_EAST_1))
    );
    assert_eq!(copy.object["metadata"]["name"], json!(copy.to));
    // The patch moves the reference only, guarded by the reference and the resourceVersion
    // the planner saw; the stub stays (a Cluster API MachineSet keeps its bootstrap secret).
    let mut after = worker_a();
    after["metadata"]["resourceVersion"] = json!("1");
    let mut seen = worker_a();
    seen["metadata"]["resourceVersion"] = json!("1");
    let decided = decide(&cluster(), seen);
    json_patch::patch(&mut after, &decided.patch.0).expect("the patch applies to what was seen");
    assert_eq!(template_of(&after), copy.to);
    assert_eq!(
        after.pointer("/spec/template/spec/bootstrap/dataSecretName"),
        Some(&json!("worker-user-data"))
    );
    let history = objects::history_of(&after);
    assert_eq!(
        history[0]["infrastructureTemplate"],
        json!({"from": "worker-a", "to": copy.to})
    );
    // Someone else repointing it first makes the patch fail rather than overwrite them.
    let mut moved = worker_a();
    moved["metadata"]["resourceVersion"] = json!("1");
    moved["spec"]["template"]["spec"]["infrastructureRef"]["name"] = json!("theirs");
    assert!(json_patch::patch(&mut moved, &decided.patch.0).is_err());
}

#[test]
fn a_template_on_the_golden_ami_is_up_to_date_and_nothing_is_written() {
    let current =
        cluster_api::aws_machine_template(CLUSTER_API_NAMESPACE, "worker-a", AMI_421_US_EAST_1);
    let cluster = building_cluster().template(current).build();
    let decided = decide(&cluster, worker_a());
    assert_eq!(decided.action, Action::UpToDate, "{decided:?}");
    assert!(decided.patch.is_empty() && decided.infrastructure_template.is_none());
}

#[test]
fn the_mirror_of_a_machine_api_machine_set_is_left_to_it() {
    let mut paused = worker_a();
    paused["metadata"]["annotations"] = json!({"cluster.x-k8s.io/paused": ""});
    let decided = decide(&cluster(), paused);
    assert_eq!(
        (decided.action, decided.reason),
        (Action::Skip, Reason::AuthoritativeElsewhere)
    );
    assert!(decided.message.contains("paused"), "{}", decided.message);
    assert!(decided.patch.is_empty() && decided.infrastructure_template.is_none());
}

#[test]
fn a_machine_deployment_owner_would_revert_us_but_the_cluster_owner_would_not() {
    let mut owned = worker_a();
    owned["metadata"]["ownerReferences"]
        .as_array_mut()
        .unwrap()
        .push(
            json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "MachineDeployment",
                     "name": "worker", "uid": "md-1", "controller": true}),
        );
    let decided = decide(&cluster(), owned);
    assert_eq!(
        (decided.action, decided.reason),
        (Action::Skip, Reason::Owned)
    );
    assert!(
        decided.message.contains("MachineDeployment worker"),
        "{}",
        decided.message
    );
}

#[test]
fn a_missing_template_is_an_error_and_another_providers_is_skipped() {
    let mut cluster = cluster();
    cluster.infrastructure_templates.clear();
    let decided = decide(&cluster, worker_a());
    assert_eq!(
        (decided.action, decided.reason),
        (Action::Error, Reason::InfrastructureTemplateMissing)
    );
    let mut gcp = worker_a();
    gcp["spec"]["template"]["spec"]["infrastructureRef"]["kind"] = json!("GCPMachineTemplate");
    let decided = decide(&cluster, gcp);
    assert_eq!(
        (decided.action, decided.reason),
        (Action::Skip, Reason::InfrastructureTemplateNotSupported)
    );
}

#[test]
fn a_spec_2_bootstrap_secret_blocks_the_new_image() {
    let cluster = building_cluster()
        .stub_secret(CLUSTER_API_NAMESPACE, "worker-user-data", "2.2.0")
        .build();
    let decided = decide(&cluster, worker_a());
    assert_eq!(
        (decided.action, decided.reason),
        (Action::Skip, Reason::StubSecretIncompatible),
        "{decided:?}"
    );
    assert!(decided.patch.is_empty() && decided.infrastructure_template.is_none());
    // Its copy is the cluster CAPI operator's to write: never upgraded here.
    assert!(decided.stub_upgrade.is_none());
    assert!(
        decided
            .message
            .contains("openshift-machine-api/worker-user-data"),
        "{}",
        decided.message
    );
}

#[test]
fn a_machine_api_machine_set_whose_authority_is_elsewhere_is_skipped() {
    let cluster = cluster();
    let cases = [
        (
            json!({"authoritativeAPI": "ClusterAPI"}),
            json!({"authoritativeAPI": "ClusterAPI"}),
            "mirrors",
        ),
        (
            json!({"authoritativeAPI": "ClusterAPI"}),
            json!({"authoritativeAPI": "Migrating"}),
            "Migrating",
        ),
        (
            json!({"authoritativeAPI": "ClusterAPI"}),
            json!({"authoritativeAPI": "MachineAPI"}),
            "about to start",
        ),
    ];
    for (spec, status, says) in cases {
        let mut ms = objects::machine_set(MACHINE_API_NAMESPACE, "worker-a").build();
        ms["spec"]["authoritativeAPI"] = spec["authoritativeAPI"].clone();
        ms["status"] = status.clone();
        let ms: MachineSet = typed(ms);
        let plan = plan(&cluster, &[ms.into()], &options());
        let decided = &plan.of(MachineKind::MachineSet)[0];
        assert_eq!(
            (decided.action, decided.reason),
            (Action::Skip, Reason::AuthoritativeElsewhere),
            "{status}"
        );
        assert!(
            decided.message.contains(says),
            "{status}: {}",
            decided.message
        );
        assert!(decided.patch.is_empty());
    }
    // Machine API authoritative: managed as ever.
    let mut ms = objects::machine_set(MACHINE_API_NAMESPACE, "worker-a").build();
    ms["status"] = json!({"authoritativeAPI": "MachineAPI"});
    let ms: MachineSet = typed(ms);
    let plan = plan(&cluster, &[ms.into()], &options());
    assert_ne!(
        plan.of(MachineKind::MachineSet)[0].reason,
        Reason::AuthoritativeElsewhere
    );
}

#[test]
fn reverting_points_the_machine_set_back_at_its_former_template() {
    let mut object = worker_a();
    object["metadata"]["resourceVersion"] = json!("1");
    let decided = decide(&cluster(), object.clone());
    json_patch::patch(&mut object, &decided.patch.0).unwrap();
    let planned = crate::revert::revert(
        crate::machine_kind::MachineKind::ClusterApiMachineSet,
        &object,
        1,
    )
    .unwrap();
    let after = crate::revert::applied(&object, &planned).unwrap();
    assert_eq!(template_of(&after), "worker-a");
    // Opted out, so the controller does not move it again at once.
    assert_eq!(
        objects::annotation_of(&after, crate::names::OPT_OUT_ANNOTATION),
        Some(crate::names::OPT_OUT_VALUE)
    );
    let _: ClusterApiMachineSet = typed(after);
}

#[test]
fn a_machine_deployment_is_updated_only_when_the_administrator_opted_in() {
    let mut deployment = worker_a();
    deployment["kind"] = json!("MachineDeployment");
    let deployment: ClusterApiMachineDeployment = typed(deployment);
    let objects: [MachineResource; 1] = [deployment.into()];
    let planned = plan(&cluster(), &objects, &options());
    let decided = &planned.of(MachineKind::ClusterApiMachineDeployment)[0];
    assert_eq!(
        (decided.action, decided.reason),
        (Action::Skip, Reason::MachineDeploymentNotOptedIn)
    );
    assert!(
        decided.message.contains("replaces every machine"),
        "{}",
        decided.message
    );
    assert!(decided.patch.is_empty());

    let opted_in = Options {
        update_machine_deployments: true,
        ..options()
    };
    let planned = plan(&cluster(), &objects, &opted_in);
    let decided = &planned.of(MachineKind::ClusterApiMachineDeployment)[0];
    assert_eq!(decided.action, Action::Update, "{decided:?}");
    assert_eq!(
        decided.infrastructure_template.as_ref().unwrap().from,
        "worker-a"
    );
}

/// Two moves with the MachineSet read in between as the controller's watch keeps it, as a
/// restarted controller (which remembers no copy it made) sees it: the copy of our copy is
/// named after the original template, and the record keeps the first copy, still to be
/// collected, beside the new one (issue 46: the watch dropped the record, so the second copy was
/// named after the first, which was never collected, and the record was written over).
#[test]
fn after_a_restart_a_copy_of_our_copy_is_named_after_the_original_and_the_record_kept() {
    use super::cluster_api_templates::{COPIES_ANNOTATION, fill_created_uid};
    use crate::machine_kind::MachineObject;
    let mut object = worker_a();
    object["metadata"]["resourceVersion"] = json!("1");
    let first = decide(&cluster(), object.clone());
    let copy = first
        .infrastructure_template
        .as_ref()
        .expect("a first copy");
    json_patch::patch(&mut object, &fill_created_uid(&first.patch, "u-1").0).unwrap();
    let mut created = copy.object.clone();
    created["metadata"]["uid"] = json!("u-1");
    // The golden image changes again (here to 4.20's, which the 4.21 copy does not hold).
    let later = cluster_snapshot("AWS", "4.20.0", &crate::testkit::streams::stream_420())
        .stub_secret(CLUSTER_API_NAMESPACE, "worker-user-data", "3.4.0")
        .knowing(&crate::testkit::streams::RHCOS_421.amis)
        .template(created)
        .build();
    let mut stored: ClusterApiMachineSet = typed(object.clone());
    stored.keep_only_what_the_planner_reads();
    let second = decide(&later, serde_json::to_value(&stored).unwrap());
    let second_copy = second
        .infrastructure_template
        .as_ref()
        .expect("a second copy");
    assert_eq!(second_copy.from, copy.to);
    let release = crate::testkit::streams::RHCOS_420.release;
    assert!(
        second_copy.to.starts_with(&format!("worker-a-{release}-")),
        "{} is named after {}",
        second_copy.to,
        copy.to
    );
    json_patch::patch(&mut object, &fill_created_uid(&second.patch, "u-2").0).unwrap();
    let record: Value =
        serde_json::from_str(objects::annotation_of(&object, COPIES_ANNOTATION).unwrap()).unwrap();
    assert_eq!(
        record,
        json!([{"name": copy.to, "uid": "u-1"}, {"name": second_copy.to, "uid": "u-2"}])
    );
}
