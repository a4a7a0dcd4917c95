//! Leader election when the API server stops answering: every call is time-bounded, so a leader
//! whose renewals hang steps down by its renew deadline (and exits, to be restarted) instead of
//! going on believing it leads while a standby takes over.

use crate::support;

use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{Api, PostParams};
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
    let hung = tokio::time::Instant::now();

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
    // A figure, not a limit (hack/bench.sh --only takeover prints it).
    eprintln!(
        "MEASURED: stepped down {:?} after its renewals started hanging (renew deadline 4s)",
        hung.elapsed()
    );
    let logs = support::strip_ansi(&controller.logs());
    assert!(
        logs.contains("lost the leader lease"),
        "{}",
        controller.log_tail(30)
    );
}

/// A leader that reads another holder in the Lease stops at once: it does not wait for its
/// renew deadline (here 50 minutes), during which both would write.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_that_sees_another_holder_steps_down_at_once() {
    let env = TestEnv::new("lease-intruder").await;
    env.aws_cluster("4.21.0", &stream_421(), None).await;
    let lease_name = format!("bic-{}", env.ns);
    let id_flag = format!("--leader-election-id={lease_name}");
    let mut controller = env.controller(&[
        "--leader-elect",
        &id_flag,
        "--leader-elect-lease-duration=1h",
        "--leader-elect-renew-deadline=50m",
        "--leader-elect-retry-period=1s",
    ]);
    controller.wait_ready().await;
    let leading = eventually(Duration::from_secs(30), || async {
        (controller.metric(LEADER).await == Some(1.0)).then_some(())
    })
    .await;
    assert!(leading.is_some(), "never led:\n{}", controller.log_tail(30));

    // Another candidate takes the Lease (as one whose clock ran ahead would): a replace guarded
    // by the resourceVersion we read.
    let leases: Api<Lease> = Api::namespaced(env.client.clone(), &env.ns);
    let mut lease = leases.get(&lease_name).await.expect("the Lease");
    let spec = lease.spec.as_mut().expect("a held Lease has a spec");
    spec.holder_identity = Some("intruder".into());
    spec.renew_time = Some(MicroTime(jiff::Timestamp::now()));
    leases
        .replace(&lease_name, &PostParams::default(), &lease)
        .await
        .expect("take the Lease");

    let exited = eventually(Duration::from_secs(60), || {
        let running = controller.running();
        async move { (!running).then_some(()) }
    })
    .await;
    assert!(
        exited.is_some(),
        "still running beside another holder:\n{}",
        controller.log_tail(30)
    );
    let logs = support::strip_ansi(&controller.logs());
    assert!(
        logs.contains("lost the leader lease") && logs.contains("intruder holds it now"),
        "{}",
        controller.log_tail(30)
    );
}

/// Another holder whose clock runs an hour slow writes renewTimes an hour old: as long as it
/// keeps renewing, the Lease is its own. Expiry is judged by when we saw the renewTime change
/// (as client-go does), so a standby takes over only once the renewals stop.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_with_a_slow_clock_keeps_the_lease_while_it_renews() {
    let env = TestEnv::new("lease-skew").await;
    env.aws_cluster("4.21.0", &stream_421(), None).await;
    let lease_name = format!("bic-{}", env.ns);
    let leases: Api<Lease> = Api::namespaced(env.client.clone(), &env.ns);
    let an_hour_ago = || MicroTime(jiff::Timestamp::now() - jiff::SignedDuration::from_hours(1));
    let lease = Lease {
        metadata: kube::api::ObjectMeta {
            name: Some(lease_name.clone()),
            ..Default::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: Some("slow-clock".into()),
            lease_duration_seconds: Some(3),
            acquire_time: Some(an_hour_ago()),
            renew_time: Some(an_hour_ago()),
            ..LeaseSpec::default()
        }),
    };
    leases
        .create(&PostParams::default(), &lease)
        .await
        .expect("create the Lease");
    let id_flag = format!("--leader-election-id={lease_name}");
    let controller = env.controller(&[
        "--leader-elect",
        &id_flag,
        "--leader-elect-lease-duration=4s",
        "--leader-elect-renew-deadline=3s",
        "--leader-elect-retry-period=1s",
    ]);
    controller.wait_ready().await;
    // It has read the Lease and, its renewTime an hour old notwithstanding, judged it held.
    let standing_by = eventually(Duration::from_secs(30), || async {
        support::strip_ansi(&controller.logs())
            .lines()
            .any(|l| l.contains("standing by") && l.contains("slow-clock"))
            .then_some(())
    })
    .await;
    assert!(standing_by.is_some(), "{}", controller.log_tail(30));

    // Ten renewals a second apart: more than three of its 3 s lease durations, each renewTime
    // an hour in our past. Every renewal is guarded by the resourceVersion it read, so a
    // controller that took the Lease in between makes it fail.
    for renewal in 0..10 {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let mut lease = leases.get(&lease_name).await.expect("the Lease");
        let spec = lease.spec.as_mut().expect("a spec");
        assert_eq!(
            spec.holder_identity.as_deref(),
            Some("slow-clock"),
            "taken from a holder that renews (renewal {renewal}):\n{}",
            controller.log_tail(30)
        );
        spec.renew_time = Some(an_hour_ago());
        leases
            .replace(&lease_name, &PostParams::default(), &lease)
            .await
            .unwrap_or_else(|e| panic!("renewal {renewal} failed: {e}"));
    }
    assert_eq!(controller.metric(LEADER).await, Some(0.0));

    // The renewals stop: a lease duration after it last saw one, the controller takes over.
    let leading = eventually(Duration::from_secs(60), || async {
        (controller.metric(LEADER).await == Some(1.0)).then_some(())
    })
    .await;
    assert!(
        leading.is_some(),
        "never took over an abandoned Lease:\n{}",
        controller.log_tail(30)
    );
}
