//! Watches with the API server unreachable: retries back off (kube-runtime's default backoff,
//! 0.8 s doubling to 30 s, reset only by real progress) and each failure spell is logged once, where watches used to log a warning
//! per retry, and those whose lists failed retried about once a second for as long as it lasted
//! (measured with the code before this change: 914 attempts, none more than 1.6 s apart, and
//! 914 warnings in two minutes; after it, 37 attempts and 9 warnings until a wait of 8 s).

use crate::support;

use std::time::Duration;

use support::fixtures::*;
use support::proxy::{Faults, Proxy};
use support::{ControllerProcess, TestEnv, eventually};

fn warnings(logs: &str) -> usize {
    support::strip_ansi(logs)
        .lines()
        .filter(|l| l.contains(" WARN ") && l.contains("watch failed"))
        .count()
}

/// What was logged after the first `offset` bytes.
fn since(logs: &str, offset: usize) -> &str {
    let start = (offset..=logs.len())
        .find(|i| logs.is_char_boundary(*i))
        .unwrap_or(logs.len());
    &logs[start..]
}

/// A wait between two attempts that only a backoff reset by progress reaches.
const LONG_WAIT: Duration = Duration::from_secs(8);

/// The waits kube-runtime's stream backoff took, as it logs them at debug level
/// (`Error received, backing off deadline=... duration=1.5s`).
fn backoff_waits(logs: &str) -> Vec<Duration> {
    support::strip_ansi(logs)
        .lines()
        .filter(|l| l.contains("backing off"))
        .filter_map(|l| {
            l.rsplit_once("duration=")?
                .1
                .split_whitespace()
                .next()
                .map(String::from)
        })
        .filter_map(|d| parse_debug_duration(&d))
        .collect()
}

/// Parses `Duration`'s `Debug` form (`753ms`, `1.5s`, `16.384s`, `900µs`).
fn parse_debug_duration(text: &str) -> Option<Duration> {
    let split = text.find(|c: char| !(c.is_ascii_digit() || c == '.'))?;
    let (number, unit) = text.split_at(split);
    let number: f64 = number.parse().ok()?;
    let seconds = match unit {
        "s" => number,
        "ms" => number / 1e3,
        "µs" | "us" => number / 1e6,
        "ns" => number / 1e9,
        _ => return None,
    };
    Some(Duration::from_secs_f64(seconds))
}

#[test]
fn debug_durations_parse() {
    assert_eq!(
        parse_debug_duration("753ms"),
        Some(Duration::from_millis(753))
    );
    assert_eq!(
        parse_debug_duration("16.5s"),
        Some(Duration::from_millis(16_500))
    );
    assert_eq!(parse_debug_duration("soon"), None);
}

/// An AWS cluster with one outdated MachineSet, a proxy in front of its API server, and the
/// flags of a controller that talks through that proxy.
async fn behind_a_proxy(name: &str) -> (TestEnv, Proxy, Vec<String>) {
    let env = TestEnv::new(name).await;
    env.aws_cluster("4.21.0", &stream_421(), None).await;
    env.apply(
        machine_set(&env.ns, "worker-a")
            .user_data("worker-user-data-managed")
            .build(),
    )
    .await;
    let proxy = Proxy::in_front_of(&support::kubeconfig(), Faults::default()).await;
    let flags = env.controller_flags_through(&proxy);
    (env, proxy, flags)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_api_server_is_retried_with_backoff_and_logged_once() {
    let (env, proxy, flags) = behind_a_proxy("watch-backoff").await;
    let mut controller = ControllerProcess::spawn("watch-backoff", &flags);
    controller.wait_ready().await;

    // The outage: every connection is reset, new ones as soon as they are accepted.
    let before = proxy.stats();
    let logged_before = controller.logs().len();
    proxy.block();
    let started = tokio::time::Instant::now();
    // kube-runtime logs each wait it takes between attempts. A backoff that only progress
    // resets waits 0.8, 1.6, 3.2, 6.4, 12.8 s (more up to double, jitter), so by the fifth
    // failure in a row one wait is 8 s or more. (Watches that had listed grew their waits before too; the ones
    // whose lists fail did not: see the next test.)
    let grown = eventually(Duration::from_secs(120), || async {
        let waits = backoff_waits(since(&controller.logs(), logged_before));
        waits.iter().any(|w| *w >= LONG_WAIT).then_some(waits.len())
    })
    .await;
    assert!(
        grown.is_some(),
        "no watch ever waited {LONG_WAIT:?} between attempts; the longest: {:?}\n{}",
        backoff_waits(since(&controller.logs(), logged_before))
            .iter()
            .max(),
        controller.log_tail(30)
    );
    let outage = started.elapsed();
    let during = proxy.stats() - before;
    let warned = warnings(since(&controller.logs(), logged_before));
    eprintln!(
        "MEASURED: {} connection attempts, {} backoff waits and {warned} watch warnings in the first {outage:?} of an outage",
        during.connections,
        grown.unwrap_or_default()
    );
    // About thirteen watches (Machine API and Cluster API machine resources and templates,
    // singletons, Nodes, the stub secret), each saying so when it starts failing and when its
    // error changes (refused, then reset), not per retry.
    assert!(
        warned <= 2 * 13,
        "{warned} warnings:\n{}",
        controller.log_tail(40)
    );

    // The API server comes back: the watches reconnect within one backoff step, and the first
    // event they deliver (a new MachineSet) says so.
    proxy.unblock();
    env.apply(
        machine_set(&env.ns, "worker-b")
            .user_data("worker-user-data-managed")
            .build(),
    )
    .await;
    let recovered = eventually(Duration::from_secs(5 * 60 + 30), || async {
        support::strip_ansi(&controller.logs())
            .contains("watch recovered")
            .then_some(())
    })
    .await;
    assert!(recovered.is_some(), "{}", controller.log_tail(30));
    assert!(controller.running());
}

/// The controller starts while the API server is unreachable, so every watch's first list
/// fails. kube-runtime's watcher emits `Init` before each list attempt, which reset the old
/// backoff: those watches retried about once a second for as long as the outage lasted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watches_whose_lists_fail_back_off_instead_of_retrying_every_second() {
    let (_env, proxy, flags) = behind_a_proxy("list-backoff").await;
    proxy.block();
    let mut controller = ControllerProcess::spawn("list-backoff", &flags);

    let grown = eventually(Duration::from_secs(120), || async {
        backoff_waits(&controller.logs())
            .iter()
            .any(|w| *w >= LONG_WAIT)
            .then_some(())
    })
    .await;
    let waits = backoff_waits(&controller.logs());
    assert!(
        grown.is_some(),
        "no watch ever waited {LONG_WAIT:?} between failed lists: {} waits, the longest {:?}\n{}",
        waits.len(),
        waits.iter().max(),
        controller.log_tail(30)
    );
    let warned = warnings(&controller.logs());
    eprintln!(
        "MEASURED: {} failed attempts and {warned} watch warnings before a wait of {LONG_WAIT:?}",
        waits.len()
    );
    assert!(
        warned <= 2 * 10,
        "{warned} warnings:\n{}",
        controller.log_tail(40)
    );

    // Once the API server answers, the controller lists everything and becomes ready.
    proxy.unblock();
    controller.wait_ready().await;
    assert!(controller.running());
}
