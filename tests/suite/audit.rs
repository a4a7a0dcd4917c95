//! What the API server's own audit log says of the controller's writes (the local control plane
//! logs every patch of a machine resource): the bodies are exactly what `plan -o json` printed,
//! and every write names the controller, as a User-Agent and as a field manager.

use crate::support;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};
use support::fixtures::*;
use support::{TestEnv, audit_log, eventually, run_binary, stderr_of};

const CONVERGE: Duration = Duration::from_secs(60);
const HISTORY: &str = "boot-image-controller.io/history";
const HOT_LOOP: &str = "boot-image-controller.io/hot-loop";

/// The audit events of the successful MachineSet patches of `namespace`, by object name.
fn patch_events(log: &Path, namespace: &str) -> BTreeMap<String, Vec<Value>> {
    patch_events_of(log, namespace, "machinesets")
}

/// The audit events of the successful patches of `resource` in `namespace`, by object name;
/// dry runs (`dryRun=All`, which store nothing) are not writes.
fn patch_events_of(log: &Path, namespace: &str, resource: &str) -> BTreeMap<String, Vec<Value>> {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let mut received: BTreeMap<String, Vec<Value>> = BTreeMap::new();
    for event in text
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
    {
        let target = &event["objectRef"];
        if event["verb"] == "patch"
            && event["stage"] == "ResponseComplete"
            && event["responseStatus"]["code"] == 200
            && target["resource"] == resource
            && target["namespace"] == namespace
            && !(event["requestURI"].as_str()).is_some_and(|uri| uri.contains("dryRun="))
        {
            let name = target["name"].as_str().unwrap_or_default().to_string();
            received.entry(name).or_default().push(event);
        }
    }
    received
}

/// The bodies of the successful patches of `resource` in `namespace`, by object name, in order.
fn patches_received(log: &Path, namespace: &str, resource: &str) -> BTreeMap<String, Vec<Value>> {
    patch_events_of(log, namespace, resource)
        .into_iter()
        .map(|(name, events)| {
            let bodies = events.iter().map(|e| e["requestObject"].clone()).collect();
            (name, bodies)
        })
        .collect()
}

/// `plan -o json --now <now>` on the given manifests.
fn plan_at(manifests: &Value, now: &str) -> Value {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("cluster.json");
    std::fs::write(&file, manifests.to_string()).unwrap();
    let file = file.display().to_string();
    let out = run_binary(&["plan", "-o", "json", "--now", now, "--manifests", &file]);
    assert!(out.status.success(), "plan failed: {}", stderr_of(&out));
    serde_json::from_slice(&out.stdout).expect("plan prints JSON")
}

#[tokio::test]
async fn the_planned_patches_are_the_request_bodies_the_controller_sends() {
    let Some(log) = audit_log() else { return };
    let env = TestEnv::new("plan-is-exact").await;
    env.aws_cluster("4.21.0", &stream_421(), None).await;
    env.remember_images(&AMIS_420).await;
    // An update (image, stub secret, history, hot-loop memory) and an opted-out object whose
    // hot-loop memory is cleared: both kinds of write the controller makes.
    env.apply(machine_set(&env.ns, "worker-a").build()).await;
    let memory = json!({"target": "x", "patches": ["2026-01-01T00:00:00Z"]}).to_string();
    // On a stub of its own: a spec-2 stub that an object keeping its image names is never
    // upgraded (`StubSecretShared`).
    let opted_out = machine_set(&env.ns, "worker-b")
        .user_data("worker-user-data-managed")
        .opted_out()
        .annotate(HOT_LOOP, &memory)
        .build();
    env.apply(opted_out).await;
    let before = cluster_manifests(&env).await;

    let controller = env.controller(&[]);
    let settled = eventually(CONVERGE, || async {
        let a = env.machine_set("worker-a").await;
        let b = env.machine_set("worker-b").await;
        let done = annotation_of(&a, HISTORY).is_some() && annotation_of(&b, HOT_LOOP).is_none();
        done.then_some(a)
    })
    .await;
    let updated = settled.unwrap_or_else(|| panic!("never converged:\n{}", controller.logs()));
    // The time the controller recorded is the one input `plan` cannot know.
    let history: Value = serde_json::from_str(annotation_of(&updated, HISTORY).unwrap()).unwrap();
    let now = history[0]["time"]
        .as_str()
        .expect("the history records a time");

    let plan = plan_at(&before, now);
    let planned: BTreeMap<String, Value> = plan["machineSets"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|d| d["patch"].as_array().is_some_and(|p| !p.is_empty()))
        .map(|d| (d["name"].as_str().unwrap().to_string(), d["patch"].clone()))
        .collect();
    let received = patches_received(&log, &env.ns, "machinesets");
    assert_eq!(
        planned.keys().collect::<Vec<_>>(),
        ["worker-a", "worker-b"],
        "the plan writes both"
    );
    for (name, patch) in &planned {
        let bodies = received.get(name).map(Vec::as_slice).unwrap_or_default();
        assert_eq!(
            bodies,
            std::slice::from_ref(patch),
            "{name}: what run sent vs what plan printed"
        );
    }
    // The fixture's installer stub is Ignition 2.2.0: upgraded in place, once, as planned.
    let upgrade = &plan["machineSets"][0]["stubSecretUpgrade"];
    assert_eq!(upgrade["name"], "worker-user-data", "{plan:#}");
    let secrets = patches_received(&log, &env.ns, "secrets");
    assert_eq!(
        secrets
            .get("worker-user-data")
            .map(Vec::as_slice)
            .unwrap_or_default(),
        std::slice::from_ref(&upgrade["patch"]),
        "the stub secret: what run sent vs what plan printed"
    );
}

#[tokio::test]
async fn every_write_names_the_controller_as_user_agent_and_field_manager() {
    let Some(log) = audit_log() else { return };
    let env = TestEnv::new("audit-trail").await;
    env.aws_cluster("4.21.0", &stream_421(), None).await;
    env.remember_images(&AMIS_420).await;
    env.apply(machine_set(&env.ns, "worker-a").build()).await;
    let controller = env.controller(&[]);
    let updated = eventually(CONVERGE, || async {
        let ms = env.machine_set("worker-a").await;
        annotation_of(&ms, HISTORY).is_some().then_some(ms)
    })
    .await
    .unwrap_or_else(|| panic!("never updated:\n{}", controller.logs()));

    // The hot-loop runbook sends people to managedFields to find who else writes.
    let managers: Vec<&str> = updated["metadata"]["managedFields"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|f| f["manager"].as_str())
        .collect();
    assert!(managers.contains(&"boot-image-controller"), "{managers:?}");
    let patches = &patch_events(&log, &env.ns)["worker-a"];
    let agents: Vec<&str> = patches
        .iter()
        .filter_map(|e| e["userAgent"].as_str())
        .collect();
    let ours = format!("boot-image-controller/{}", env!("CARGO_PKG_VERSION"));
    assert!(
        !agents.is_empty() && agents.iter().all(|a| *a == ours),
        "{agents:?}"
    );

    let event = eventually(CONVERGE, || async {
        env.events_for("worker-a").await.pop()
    })
    .await
    .expect("the patch is announced");
    let event_managers = event["metadata"]["managedFields"].to_string();
    assert!(event_managers.contains("boot-image-controller"), "{event}");
}

/// When the API server received each of this controller's successful status writes to `name`
/// (the audit log has them at the Metadata level), oldest first.
fn status_writes_completed(log: &Path, name: &str) -> Vec<jiff::Timestamp> {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    (text.lines())
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|e| {
            e["verb"] == "patch"
                && e["stage"] == "ResponseComplete"
                && e["responseStatus"]["code"] == 200
                && e["objectRef"]["resource"] == "machineconfigurations"
                && e["objectRef"]["subresource"] == "status"
                && e["objectRef"]["name"] == name
        })
        .filter_map(|e| e["stageTimestamp"].as_str()?.parse().ok())
        .collect()
}

/// A rollout says `Progressing=True` before its first patch goes out, not beside its patches
/// (issue 49): by the API server's clock, a status write has completed when the patch arrives.
#[tokio::test]
async fn a_rollouts_progressing_is_written_before_its_first_patch() {
    let Some(log) = audit_log() else { return };
    let env = TestEnv::new("announce-first").await;
    env.aws_cluster("4.21.0", &stream_421(), None).await;
    env.remember_images(&AMIS_420).await;
    // On a spec-3 stub: no stub upgrade goes before the patch.
    let outdated = machine_set(&env.ns, "worker-a").user_data("worker-user-data-managed");
    env.apply(outdated.build()).await;
    let controller = env.controller(&[]);
    let patched = eventually(CONVERGE, || async {
        patch_events(&log, &env.ns)
            .remove("worker-a")?
            .into_iter()
            .next()
    })
    .await
    .unwrap_or_else(|| panic!("never patched:\n{}", controller.logs()));
    let received: jiff::Timestamp = patched["requestReceivedTimestamp"]
        .as_str()
        .and_then(|t| t.parse().ok())
        .expect("the audit event says when the patch arrived");
    let written = status_writes_completed(&log, &env.singleton);
    assert!(
        written.first().is_some_and(|first| *first <= received),
        "no status write completed before the first patch arrived at {received}: {written:?}\n{}",
        controller.log_tail(20)
    );
}
