//! How much heap one MachineSet costs in the controller's watch store, and what it is made of.
//!
//! Builds the benchmark clusters' MachineSets (`benches/support`), gives each the fields the API
//! server adds (uid, resourceVersion, generation, creation time, managedFields, status), and
//! counts the bytes the global allocator holds after parsing them as the watch does. Prints
//! figures; asserts nothing.
//!
//! Usage: cargo run --release --example store_footprint [-- COUNT]

#[path = "../benches/support/mod.rs"]
mod support;

use std::sync::Arc;

use boot_image_controller::api::MachineSet;
use boot_image_controller::controller::lenient::Lenient;
use serde_json::{Value, json};

#[global_allocator]
static ALLOCATOR: support::counting::Counting = support::counting::Counting;

/// The object as a watch event carries it: what we created plus what the API server adds.
fn as_served(mut object: Value, i: usize) -> Value {
    let meta = &mut object["metadata"];
    meta["uid"] = json!(format!("6f1c2a0e-3b5d-4c7e-9a1b-{i:012}"));
    meta["resourceVersion"] = json!((100_000 + i).to_string());
    meta["generation"] = json!(3);
    meta["creationTimestamp"] = json!("2026-01-01T00:00:00Z");
    meta["managedFields"] = json!([{
        "apiVersion": "machine.openshift.io/v1beta1", "fieldsType": "FieldsV1",
        "manager": "boot-image-controller", "operation": "Update", "time": "2026-01-01T00:00:00Z",
        "fieldsV1": {"f:metadata": {"f:annotations": {".": {}}},
                     "f:spec": {"f:template": {"f:spec": {"f:providerSpec": {"f:value": {}}}}}}
    }]);
    object["status"] = json!({
        "availableReplicas": 1, "fullyLabeledReplicas": 1, "observedGeneration": 3,
        "readyReplicas": 1, "replicas": 1,
    });
    object
}

/// The object as `kubectl apply` leaves it: its `last-applied-configuration` annotation holds the
/// applied object again, as GitOps tools that apply with kubectl leave every object they manage.
fn as_applied(served: Value, applied: &Value) -> Value {
    let mut object = served;
    object["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"] =
        json!(applied.to_string());
    object
}

/// Heap bytes per object held after parsing each of `served` with `parse`.
fn held_per_object<T>(served: &[String], parse: impl Fn(&str) -> T) -> usize {
    let before = support::counting::held();
    let store: Vec<Arc<T>> = served.iter().map(|s| Arc::new(parse(s))).collect();
    let per_object = (support::counting::held() - before) as usize / store.len().max(1);
    drop(store);
    per_object
}

fn main() {
    support::counting::switch(true);
    let count: usize = std::env::args()
        .nth(1)
        .map(|n| n.parse().expect("COUNT is a number"))
        .unwrap_or(1000);
    let data = support::Data::load();
    println!("heap bytes per MachineSet in the watch store, {count} per platform");
    println!("platform  JSON  whole object  as stored (what the planner reads)");
    for platform in ["AWS", "GCP", "Azure"] {
        let Some(scenario) = support::scenario(&data, platform, count) else {
            println!("{platform:<8}  (no data: the shared fixtures are absent)");
            continue;
        };
        let created: Vec<(usize, Value)> = scenario
            .machine_sets
            .iter()
            .enumerate()
            .filter_map(|(i, ms)| ms.as_ref().ok().map(|ms| (i, ms)))
            .map(|(i, ms)| (i, serde_json::to_value(ms).expect("serialize")))
            .collect();
        let served: Vec<String> = (created.iter())
            .map(|(i, ms)| as_served(ms.clone(), *i).to_string())
            .collect();
        let applied: Vec<String> = (created.iter())
            .map(|(i, ms)| as_applied(as_served(ms.clone(), *i), ms).to_string())
            .collect();
        let json = served.iter().map(String::len).sum::<usize>() / served.len().max(1);
        // The whole object, as a plain typed parse holds it; then as the watch decodes it.
        let whole = held_per_object(&served, |s| {
            serde_json::from_str::<MachineSet>(s).expect("parses")
        });
        let stored = held_per_object(&served, |s| {
            serde_json::from_str::<Lenient<MachineSet>>(s).expect("parses")
        });
        println!(
            "{platform:<8}  {json:>4}  {whole:>12}  {stored:>9} ({:.1}x less)",
            whole as f64 / stored as f64
        );
        let json = applied.iter().map(String::len).sum::<usize>() / applied.len().max(1);
        let stored = held_per_object(&applied, |s| {
            serde_json::from_str::<Lenient<MachineSet>>(s).expect("parses")
        });
        println!("  applied with kubectl: JSON {json}, as stored {stored}");
    }
}
