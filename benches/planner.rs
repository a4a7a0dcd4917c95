//! Planner throughput on synthetic clusters: `cargo bench --bench planner -- [options]`.
//!
//! For each platform (AWS, GCP, Azure: the platform is cluster-wide, so each is its own cluster)
//! and size, builds a cluster whose MachineSets mix every outcome (outdated, up to date with our
//! history annotations, custom images, opted out, owned, not selected, arm64, region not
//! published, Windows, missing managed stub secret, ...), then times on one thread:
//! - `plan`: `plan::plan(&Cluster, &machines, &Options)`, the whole decision;
//! - `pass`: what a controller pass decides: the planner's gates once (`Planner::new`), then
//!   `Planner::decide_object` for every MachineSet, without gathering the decisions into a `Plan`;
//! - `fixed`: `plan` of zero MachineSets (gates, golden stream parsing, known-images set);
//! - `status`: the conditions a pass reports once the plan's updates are applied, when every
//!   updated MachineSet names its newest change (`controller::status::conditions::desired`).
//!
//! Besides times, it counts heap allocations per MachineSet (of one `plan` and one `pass`):
//! unlike wall-clock time on a shared machine, that figure is the same on every run, and each
//! allocation is a malloc and a free the planner pays for every MachineSet. The counter runs only
//! while allocations are counted, never while a case is timed.
//!
//! Options: `--sizes 100,1000,10000`, `--platforms AWS,GCP,Azure`, `--time SECONDS` (measuring
//! time per case, default 2), `--history N` (every MachineSet without our history gets one of N
//! earlier changes, as after N upgrades; default 0), `--json FILE`. Prints a table; never
//! asserts on timings.

#[path = "support/mod.rs"]
mod support;

use std::collections::BTreeMap;
use std::hint::black_box;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use boot_image_controller::controller::status::conditions as status;
use boot_image_controller::plan::{self, Decision, MachineResource, Planner};
use serde_json::{Value, json};
use support::{Data, PLATFORMS, Scenario};

#[global_allocator]
static ALLOCATOR: support::counting::Counting = support::counting::Counting;

/// Heap allocations made by one run of `f`, per MachineSet of a cluster of `count`.
fn allocations_per(count: usize, f: impl FnOnce()) -> f64 {
    support::counting::switch(true);
    let before = support::counting::allocations();
    f();
    let made = support::counting::allocations() - before;
    support::counting::switch(false);
    made as f64 / count.max(1) as f64
}

struct Args {
    sizes: Vec<usize>,
    platforms: Vec<String>,
    time: Duration,
    history: usize,
    json: Option<String>,
}

fn parse_args() -> Args {
    let mut args = Args {
        sizes: vec![100, 1_000, 10_000],
        platforms: PLATFORMS.iter().map(|p| p.to_string()).collect(),
        time: Duration::from_secs(2),
        history: 0,
        json: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let (key, inline) = match arg.split_once('=') {
            Some((k, v)) => (k.to_string(), Some(v.to_string())),
            None => (arg.clone(), None),
        };
        let mut value = || {
            inline
                .clone()
                .or_else(|| it.next())
                .unwrap_or_else(|| panic!("{key} needs a value"))
        };
        match key.as_str() {
            "--sizes" => {
                args.sizes = value()
                    .split(',')
                    .map(|s| s.trim().replace('_', "").parse().expect("--sizes N,N,..."))
                    .collect()
            }
            "--platforms" => {
                args.platforms = value().split(',').map(|s| s.trim().to_string()).collect()
            }
            "--time" => args.time = Duration::from_secs_f64(value().parse().expect("--time SECS")),
            "--history" => args.history = value().parse().expect("--history N"),
            "--json" => args.json = Some(value()),
            // Passed by `cargo bench`; filters are not supported.
            "--bench" => {}
            other if other.starts_with("--") => panic!("unknown option {other}"),
            _ => {}
        }
    }
    args
}

/// Runs `f` until `budget` has passed (at least 3 times) and returns the median duration.
fn measure(budget: Duration, mut f: impl FnMut()) -> (Duration, usize) {
    f(); // warm-up: caches, allocator
    let mut samples = Vec::new();
    let started = Instant::now();
    while samples.len() < 3 || (started.elapsed() < budget && samples.len() < 10_000) {
        let t = Instant::now();
        f();
        samples.push(t.elapsed());
    }
    samples.sort();
    (samples[samples.len() / 2], samples.len())
}

/// Actions and reasons of the plan `p`, e.g. `Update 45%, UpToDate 20%, Skip 30%, Error 5%`.
fn mix(p: &plan::Plan) -> (String, BTreeMap<String, usize>) {
    assert!(p.blocked.is_none(), "scenario blocked: {:?}", p.blocked);
    let mut by_action: BTreeMap<plan::Action, usize> = BTreeMap::new();
    let mut by_reason: BTreeMap<String, usize> = BTreeMap::new();
    for e in &p.decisions {
        *by_action.entry(e.action).or_default() += 1;
        *by_reason
            .entry(format!("{}/{}", e.action.as_str(), e.reason))
            .or_default() += 1;
    }
    let total = p.decisions.len().max(1);
    let text = by_action
        .iter()
        .map(|(a, n)| format!("{} {}%", a.as_str(), n * 100 / total))
        .collect::<Vec<_>>()
        .join(", ");
    (text, by_reason)
}

/// How often each timed case ran, so that a profiler's cost of [`plan_case`] or [`pass_case`]
/// (`hack/bench.sh` counts their instructions under callgrind) can be divided per call.
static PLAN_CALLS: AtomicUsize = AtomicUsize::new(0);
static PASS_CALLS: AtomicUsize = AtomicUsize::new(0);

/// One `plan` of the scenario's MachineSets. Never inlined: profilers find it by name.
#[inline(never)]
fn plan_case(scenario: &Scenario, machines: &[MachineResource]) {
    PLAN_CALLS.fetch_add(1, Ordering::Relaxed);
    black_box(plan::plan(
        black_box(&scenario.cluster),
        black_box(machines),
        &scenario.options,
    ));
}

/// One controller-style pass over the scenario's MachineSets. Never inlined, as above.
#[inline(never)]
fn pass_case(scenario: &Scenario, machines: &[MachineResource]) {
    PASS_CALLS.fetch_add(1, Ordering::Relaxed);
    let planner = Planner::new(black_box(&scenario.cluster), &scenario.options);
    for ms in black_box(machines)
        .iter()
        .filter_map(MachineResource::readable)
    {
        black_box(planner.decide_object(ms));
    }
}

/// The conditions a pass reports for `decisions`. Never inlined, as above.
#[inline(never)]
fn status_case(decisions: &[&Decision]) {
    black_box(status::desired(&status::StatusInput {
        blocked: None,
        decisions: black_box(decisions),
        selections: &[],
        held: None,
        paused: false,
    }));
}

fn main() {
    let args = parse_args();
    let data = Data::load();
    println!("planner benchmark: {}", data.source.describe());
    println!(
        "single thread, {} profile, {:.1}s per case",
        if cfg!(debug_assertions) {
            "debug"
        } else {
            "release"
        },
        args.time.as_secs_f64()
    );
    let mut rows = Vec::new();
    for platform in &args.platforms {
        let mut fixed: Option<Duration> = None;
        for &count in &args.sizes {
            let Some(scenario) = support::scenario(&data, platform, count) else {
                println!("{platform}: skipped (needs ../shared/fixtures)");
                break;
            };
            let scenario = scenario.with_history(args.history);
            if fixed.is_none() {
                let empty = Vec::new();
                let (d, _) = measure(args.time / 4, || {
                    black_box(plan::plan(
                        black_box(&scenario.cluster),
                        black_box(&empty),
                        &scenario.options,
                    ));
                });
                fixed = Some(d);
                println!(
                    "{platform}: {}; fixed cost per plan (gates, golden stream, known images): {:.0} µs",
                    scenario.description,
                    d.as_secs_f64() * 1e6
                );
            }
            let machines = scenario.machines();
            let planned = plan::plan(&scenario.cluster, &machines, &scenario.options);
            let (mix_text, reasons) = mix(&planned);
            // What the controller reports after a rollout: the decisions with their updates
            // applied, each updated MachineSet with the change it recorded.
            let mut reported: Vec<Decision> = planned.decisions;
            reported.iter_mut().for_each(Decision::apply);
            let calls = || {
                let load = |calls: &AtomicUsize| calls.load(Ordering::Relaxed);
                (load(&PLAN_CALLS), load(&PASS_CALLS))
            };
            let calls_before = calls();
            let plan_once = || plan_case(&scenario, &machines);
            let (plan_time, iterations) = measure(args.time, plan_once);
            let pass = || pass_case(&scenario, &machines);
            let (pass_time, _) = measure(args.time / 2, pass);
            let reported: Vec<&Decision> = reported.iter().collect();
            let (status_time, _) = measure(args.time / 4, || status_case(&reported));
            let plan_allocations = allocations_per(count, plan_once);
            let pass_allocations = allocations_per(count, pass);
            let (plan_calls, pass_calls) = (calls().0 - calls_before.0, calls().1 - calls_before.1);
            let ns = plan_time.as_nanos() as f64 / count as f64;
            let pass_ns = pass_time.as_nanos() as f64 / count as f64;
            let per_second = count as f64 / plan_time.as_secs_f64();
            println!(
                "{platform:>5} {count:>6} MachineSets: {ns:>8.0} ns/MachineSet  {per_second:>10.0} MachineSets/s  \
                 (plan {:.2} ms, median of {iterations}; controller-style pass {pass_ns:.0} ns/MachineSet; \
                 allocations per MachineSet: plan {plan_allocations:.1}, pass {pass_allocations:.1}; \
                 status after the rollout {:.0} µs)  [{mix_text}]",
                plan_time.as_secs_f64() * 1e3,
                status_time.as_secs_f64() * 1e6
            );
            rows.push(json!({
                "platform": platform,
                "count": count,
                "ns_per_machineset": ns.round() as u64,
                "machinesets_per_second": per_second.round() as u64,
                "plan_ms": plan_time.as_secs_f64() * 1e3,
                "iterations": iterations,
                "pass_ns_per_machineset": pass_ns.round() as u64,
                "status_us": (status_time.as_secs_f64() * 1e6).round() as u64,
                "history": args.history,
                "plan_allocations_per_machineset": plan_allocations,
                "pass_allocations_per_machineset": pass_allocations,
                "plan_calls": plan_calls,
                "pass_calls": pass_calls,
                "fixed_us": fixed.map(|d| (d.as_secs_f64() * 1e6).round() as u64),
                "mix": mix_text,
                "reasons": reasons,
                "command": format!("cargo bench --bench planner -- --platforms {platform} --sizes {count}"),
            }));
        }
    }
    if let Some(path) = &args.json {
        let report = json!({
            "source": data.source.describe(),
            "results": Value::Array(rows),
        });
        std::fs::write(path, serde_json::to_string_pretty(&report).unwrap())
            .unwrap_or_else(|e| panic!("{path}: {e}"));
    }
}
