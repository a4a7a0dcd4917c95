//! Watches with the API server unreachable: retries back off (1 s doubling to 5 min, reset only
//! by real progress) and each failure spell is logged once, where every watch used to retry
//! about once a second and log a warning each time.

mod support;

use std::time::Duration;

use support::fixtures::*;
use support::proxy::{Faults, Proxy};
use support::{ControllerProcess, TestEnv, eventually};

/// How long the API server stays unreachable: enough for five doublings of the backoff.
const OUTAGE: Duration = Duration::from_secs(30);

fn warnings(controller: &ControllerProcess) -> usize {
    support::strip_ansi(&controller.logs())
        .lines()
        .filter(|l| l.contains(" WARN ") && l.contains("watch failed"))
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_api_server_is_retried_with_backoff_and_logged_once() {
    let env = TestEnv::new("watch-backoff").await;
    env.aws_cluster("4.21.0", &stream_421(), None).await;
    env.apply(
        machine_set(&env.ns, "worker-a")
            .user_data("worker-user-data-managed")
            .build(),
    )
    .await;
    let proxy = Proxy::in_front_of(&support::kubeconfig(), Faults::default()).await;
    let flags = env.controller_flags_through(&proxy);
    let mut controller = ControllerProcess::spawn("watch-backoff", &flags);
    controller.wait_ready().await;

    // The outage: every connection is reset, new ones as soon as they are accepted.
    let before = proxy.stats();
    proxy.block();
    let started = tokio::time::Instant::now();
    // Every watch has noticed (each says so once).
    let noticed = eventually(OUTAGE, || async {
        (warnings(&controller) >= 1).then_some(())
    })
    .await;
    assert!(noticed.is_some(), "{}", controller.log_tail(30));
    tokio::time::sleep_until(started + OUTAGE).await;
    let during = proxy.stats() - before;
    let warned = warnings(&controller);
    eprintln!(
        "MEASURED: {} connection attempts and {warned} watch warnings in a {OUTAGE:?} outage",
        during.connections
    );
    // About ten watches (machine resources, singletons, Nodes, the stub secret), each retrying
    // after 1, 2, 4, 8 and 16 s (less jitter): six attempts each at most. Retrying every 1.2 s
    // they made 25 each.
    assert!(
        during.connections <= 10 * 8,
        "{} connection attempts in {OUTAGE:?}",
        during.connections
    );
    assert!(
        warned <= 2 * 10,
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
