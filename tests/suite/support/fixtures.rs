//! The test kit's objects and streams (`boot_image_controller::testkit`), plus what needs a
//! running test cluster: reading its objects back as `plan --manifests` input.

use serde_json::{Value, json};

// Each test binary uses its own subset of the kit.
#[allow(unused_imports)]
pub use boot_image_controller::testkit::{objects::*, streams::*};

/// Everything of a test's simulated cluster that `plan` reads, as manifests (see
/// [`as_cluster_manifests`]).
pub async fn cluster_manifests(env: &super::TestEnv) -> Value {
    let mut objects = Vec::new();
    for (api_version, kind, name) in [
        (
            "config.openshift.io/v1",
            "Infrastructure",
            env.singleton.as_str(),
        ),
        (
            "config.openshift.io/v1",
            "ClusterVersion",
            env.singleton.as_str(),
        ),
        (
            "operator.openshift.io/v1",
            "MachineConfiguration",
            env.singleton.as_str(),
        ),
        ("v1", "ConfigMap", "coreos-bootimages"),
        (
            "v1",
            "ConfigMap",
            boot_image_controller::names::KNOWN_IMAGES_CONFIGMAP_NAME,
        ),
        (
            "machine.openshift.io/v1",
            "ControlPlaneMachineSet",
            "cluster",
        ),
    ] {
        if let Some(object) = env.get(api_version, kind, name).await {
            let mut object = serde_json::to_value(object).unwrap();
            object["apiVersion"] = json!(api_version);
            object["kind"] = json!(kind);
            objects.push(object);
        }
    }
    objects.extend(control_plane_nodes());
    let secrets: kube::Api<k8s_openapi::api::core::v1::Secret> =
        kube::Api::namespaced(env.client.clone(), &env.ns);
    for secret in secrets
        .list(&Default::default())
        .await
        .expect("list secrets")
        .items
    {
        let mut object = serde_json::to_value(secret).unwrap();
        object["apiVersion"] = json!("v1");
        object["kind"] = json!("Secret");
        objects.push(object);
    }
    let machine_sets: kube::Api<boot_image_controller::api::MachineSet> =
        kube::Api::namespaced(env.client.clone(), &env.ns);
    // Read as JSON, not through the typed view, so the manifests are what the server holds.
    for ms in machine_sets
        .list_metadata(&Default::default())
        .await
        .expect("list MachineSets")
        .items
    {
        let name = ms.metadata.name.unwrap_or_default();
        let mut object = serde_json::to_value(
            env.get("machine.openshift.io/v1beta1", "MachineSet", &name)
                .await
                .expect("listed MachineSet exists"),
        )
        .unwrap();
        object["apiVersion"] = json!("machine.openshift.io/v1beta1");
        object["kind"] = json!("MachineSet");
        objects.push(object);
    }
    as_cluster_manifests(objects)
}
