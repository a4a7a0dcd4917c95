//! One hostile object among the rest: `plan --live` and `revert` read the whole namespace, and
//! an object they cannot read (a providerSpec nested deeper than a JSON parser's recursion
//! limit, which the API server stores) is reported as malformed, as the controller reports it,
//! while everything else is planned and reverted as usual.

use crate::support;

use serde_json::{Value, json};
use support::fixtures::*;
use support::{TestEnv, run_binary, stderr_of};

const HISTORY: &str = "boot-image-controller.io/history";

/// A MachineSet whose providerSpec nests 140 objects deep: more than serde_json's 128.
async fn create_too_deep(env: &TestEnv, name: &str) {
    let mut deep = json!("bottom");
    for _ in 0..140 {
        deep = json!({ "n": deep });
    }
    let ms = machine_set(&env.ns, name)
        .provider_spec(json!({"ami": {"id": AMI_420_US_EAST_1},
                              "placement": {"region": "us-east-1"}, "garbage": deep}))
        .build();
    let gvk = kube::api::GroupVersionKind::gvk("machine.openshift.io", "v1beta1", "MachineSet");
    let resource = kube::api::ApiResource::from_gvk_with_plural(&gvk, "machinesets");
    let api: kube::Api<kube::api::DynamicObject> =
        kube::Api::namespaced_with(env.client.clone(), &env.ns, &resource);
    let object: kube::api::DynamicObject = serde_json::from_value(ms).unwrap();
    // A plain POST (server-side apply would track 140 levels of managed fields); only our own
    // client cannot read the answer back.
    match api.create(&Default::default(), &object).await {
        Ok(_) | Err(kube::Error::SerdeError(_)) => {}
        Err(e) => panic!("the API server rejects {name}: {e}"),
    }
}

fn cluster_flags(env: &TestEnv) -> Vec<String> {
    let mut flags = vec![format!("--kubeconfig={}", support::kubeconfig().display())];
    flags.extend(env.cluster_object_flags());
    flags
}

fn run(args: Vec<String>) -> std::process::Output {
    run_binary(&args.iter().map(String::as_str).collect::<Vec<_>>())
}

#[tokio::test]
async fn a_live_plan_reports_a_too_deep_machine_set_and_plans_the_rest() {
    let env = TestEnv::new("hostile-plan").await;
    env.aws_cluster("4.21.0", &stream_421(), None).await;
    env.remember_images(&[AMI_420_US_EAST_1]).await;
    env.apply(
        machine_set(&env.ns, "worker-old")
            .ami(AMI_420_US_EAST_1)
            .build(),
    )
    .await;
    create_too_deep(&env, "too-deep").await;

    let mut args = vec![
        "plan".to_string(),
        "-o".into(),
        "json".into(),
        format!("--machine-api-namespace={}", env.ns),
    ];
    args.extend(cluster_flags(&env));
    let out = run(args);
    assert!(
        out.status.success(),
        "plan --live failed whole: {}",
        stderr_of(&out)
    );
    let plan: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let entry = |name: &str| {
        (plan["machineSets"].as_array().unwrap().iter())
            .find(|e| e["name"] == name)
            .unwrap_or_else(|| panic!("no {name} in {plan:#}"))
            .clone()
    };
    let bad = entry("too-deep");
    assert_eq!(
        (&bad["action"], &bad["reason"]),
        (&json!("Error"), &json!("MalformedObject")),
        "{bad:#}"
    );
    assert!(
        bad["message"].as_str().unwrap().contains("recursion limit"),
        "{bad:#}"
    );
    let good = entry("worker-old");
    assert_eq!(good["action"], "Update", "{good:#}");
}

#[tokio::test]
async fn revert_goes_ahead_beside_a_too_deep_machine_set() {
    let env = TestEnv::new("hostile-revert").await;
    env.aws_cluster("4.21.0", &stream_421(), None).await;
    env.remember_images(&AMIS_420).await;
    // As the controller left it: on 4.21's AMI, with the change recorded.
    let history = json!([{
        "time": "2026-03-01T00:00:00Z", "release": "4.21.0", "stream": "rhcos-4.21",
        "bootImage": {"from": AMI_420_US_EAST_1, "to": AMI_421_US_EAST_1}
    }]);
    env.apply(
        machine_set(&env.ns, "worker-a")
            .ami(AMI_421_US_EAST_1)
            .annotate(HISTORY, &history.to_string())
            .build(),
    )
    .await;
    create_too_deep(&env, "too-deep").await;

    let mut args = vec![
        "revert".to_string(),
        format!("--namespace={}", env.ns),
        "--machineset=worker-a".into(),
    ];
    args.extend(cluster_flags(&env));
    let out = run(args);
    assert!(
        out.status.success(),
        "revert failed: {}\n{}",
        stderr_of(&out),
        String::from_utf8_lossy(&out.stdout)
    );
    let ms = env.machine_set("worker-a").await;
    assert_eq!(ami_of(&ms), AMI_420_US_EAST_1);
}
