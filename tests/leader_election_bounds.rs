//! Leader election when the API server stops answering: every call is time-bounded, so a leader
//! whose renewals hang steps down by its renew deadline (and exits, to be restarted) instead of
//! going on believing it leads while a standby takes over.

mod support;

use std::time::Duration;

use support::fixtures::*;
use support::proxy::{Faults, Proxy};
use support::{ControllerProcess, TestEnv, eventually};

const LEADER: &str = "boot_image_controller_leader";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_whose_renewals_hang_steps_down_by_its_renew_deadline() {
    let env = TestEnv::new("lease-hung").await;
    env.aws_cluster("4.21.0", &stream_421(), None).await;
    let proxy = Proxy::in_front_of(&support::kubeconfig(), Faults::default()).await;
    let mut flags = env.controller_flags_through(&proxy);
    flags.extend([
        "--leader-elect".into(),
        format!("--leader-election-id=bic-{}", env.ns),
        "--leader-elect-lease-duration=6s".into(),
        "--leader-elect-renew-deadline=4s".into(),
        "--leader-elect-retry-period=1s".into(),
    ]);
    let mut controller = ControllerProcess::spawn("lease-hung", &flags);
    controller.wait_ready().await;
    let leading = eventually(Duration::from_secs(30), || async {
        (controller.metric(LEADER).await == Some(1.0)).then_some(())
    })
    .await;
    assert!(leading.is_some(), "never led:\n{}", controller.log_tail(30));

    // From now on the API server accepts connections and never answers: every request hangs.
    proxy.set_faults(Faults {
        request_delay: Duration::from_secs(3600),
        ..Faults::default()
    });
    proxy.cut();

    // The leader gives up within its renew deadline plus one bounded call, and exits.
    let exited = eventually(Duration::from_secs(60), || {
        let running = controller.running();
        async move { (!running).then_some(()) }
    })
    .await;
    assert!(
        exited.is_some(),
        "still running (and leading?) with hung renewals:\n{}",
        controller.log_tail(30)
    );
    let logs = support::strip_ansi(&controller.logs());
    assert!(
        logs.contains("lost the leader lease"),
        "{}",
        controller.log_tail(30)
    );
}
