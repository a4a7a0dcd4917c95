//! What reading the newest entry of a history annotation costs, by the number of entries: the
//! planner's way (`Records::into_last`: the entries split as JSON text, the newest parsed) beside
//! parsing the whole history (`record::history`, what `revert` reads). Every decision reads the
//! newest entry, so this is a per-object cost of every pass. Prints figures; asserts nothing.
//!
//! Usage: cargo run --release --example history_read --features testkit

use std::collections::BTreeMap;
use std::hint::black_box;
use std::time::Instant;

use boot_image_controller::api::ObjectMeta;
use boot_image_controller::plan::record::{
    self, Change, HISTORY_ANNOTATION, HISTORY_LIMIT, HistoryEntry, Records,
};

/// Nanoseconds per call of `read`, the second of two rounds (the first warms caches).
fn ns_per_call<T>(read: impl Fn() -> T) -> f64 {
    const CALLS: u32 = 200_000;
    let mut ns = 0.0;
    for _ in 0..2 {
        let started = Instant::now();
        for _ in 0..CALLS {
            black_box(read());
        }
        ns = started.elapsed().as_nanos() as f64 / f64::from(CALLS);
    }
    ns
}

fn main() {
    // An entry as an AWS update records it.
    let entry = HistoryEntry::<String> {
        time: "2026-01-01T00:00:00.123456Z".into(),
        release: Some("4.21.0".into()),
        stream: "rhcos-4.21".into(),
        boot_image: Some(Change {
            from: "ami-0123456789abcdef0".into(),
            to: "ami-0fedcba9876543210".into(),
        }),
        user_data_secret: Some(Change {
            from: "worker-user-data".into(),
            to: "worker-user-data-managed".into(),
        }),
        infrastructure_template: None,
    };
    println!("entries  newest only (planner)  whole history");
    for n in 1..=HISTORY_LIMIT {
        let text = serde_json::to_string(&vec![&entry; n]).expect("serializes");
        let meta = ObjectMeta {
            annotations: Some(BTreeMap::from([(HISTORY_ANNOTATION.to_string(), text)])),
            ..ObjectMeta::default()
        };
        let newest = ns_per_call(|| Records::of(black_box(&meta)).into_last());
        let whole = ns_per_call(|| record::history(black_box(&meta)).pop());
        println!("{n:>7}  {newest:>19.0} ns  {whole:>10.0} ns");
    }
}
