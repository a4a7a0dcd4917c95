//! A documented run of kube-lease-manager 0.13.1 in the two situations our lease module is built
//! for: the API server stops answering the leader, and another holder's clock disagrees with
//! ours. Usage: klm-probe <kubeconfig> <namespace>
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::{Api, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};
use kube_lease_manager::LeaseManagerBuilder;
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;

async fn config(path: &str) -> Config {
    let kc = Kubeconfig::read_from(path).expect("kubeconfig");
    Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .expect("config")
}

/// A TCP forwarder to the API server that can be cut: its listener and every connection close.
async fn forwarder(upstream: String) -> (u16, JoinSet<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let mut set = JoinSet::new();
    set.spawn(async move {
        let mut conns = JoinSet::new();
        loop {
            let (mut inbound, _) = listener.accept().await.unwrap();
            let upstream = upstream.clone();
            conns.spawn(async move {
                if let Ok(mut out) = TcpStream::connect(upstream).await {
                    let _ = tokio::io::copy_bidirectional(&mut inbound, &mut out).await;
                }
            });
        }
    });
    (port, set)
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let (path, ns) = (&args[1], &args[2]);
    let direct_config = config(path).await;
    let direct = Client::try_from(direct_config.clone()).unwrap();
    let leases: Api<Lease> = Api::namespaced(direct.clone(), ns);

    // A: the leader loses the API server (connections refused from then on).
    let upstream = direct_config.cluster_url.authority().unwrap().to_string();
    let (port, mut cut) = forwarder(upstream).await;
    let mut proxied_config = direct_config.clone();
    proxied_config.cluster_url = format!("https://127.0.0.1:{port}").parse().unwrap();
    let proxied = Client::try_from(proxied_config).unwrap();
    let manager = LeaseManagerBuilder::new(proxied, "klm-a")
        .with_namespace(ns)
        .with_identity("probe-a")
        .with_duration(6)
        .with_grace(2)
        .build()
        .await
        .expect("manager");
    let (mut leader, _task) = manager.watch().await;
    while !*leader.borrow_and_update() {
        leader.changed().await.unwrap();
    }
    cut.abort_all();
    let cut_at = Instant::now();
    let mut stepped_down = None;
    while cut_at.elapsed() < Duration::from_secs(30) {
        if !*leader.borrow() {
            stepped_down = Some(cut_at.elapsed());
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    match stepped_down {
        Some(after) => {
            println!("A: lease 6 s, grace 2 s; API unreachable: leader=false after {after:.1?}")
        }
        None => println!(
            "A: lease 6 s, grace 2 s; API unreachable: still leader=true after 30 s (the Lease expired for everyone else 6 s after its last renewal)"
        ),
    }

    // B: another holder renews every second, but its clock is an hour behind ours.
    let skewed = || MicroTime(jiff::Timestamp::now() - jiff::SignedDuration::from_hours(1));
    let lease = Lease {
        metadata: ObjectMeta {
            name: Some("klm-b".into()),
            ..ObjectMeta::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: Some("other".into()),
            lease_duration_seconds: Some(15),
            acquire_time: Some(skewed()),
            renew_time: Some(skewed()),
            ..LeaseSpec::default()
        }),
    };
    leases
        .create(&PostParams::default(), &lease)
        .await
        .expect("create klm-b");
    let renewer = {
        let leases = leases.clone();
        tokio::spawn(async move {
            let mut taken_from_other = 0;
            loop {
                tokio::time::sleep(Duration::from_secs(1)).await;
                let Ok(mut l) = leases.get("klm-b").await else {
                    continue;
                };
                let spec = l.spec.get_or_insert_with(LeaseSpec::default);
                if spec.holder_identity.as_deref() != Some("other") {
                    taken_from_other += 1;
                    if taken_from_other == 1 {
                        println!("B: the lease now names {:?}", spec.holder_identity);
                    }
                    continue;
                }
                spec.renew_time = Some(skewed());
                let _ = leases.replace("klm-b", &PostParams::default(), &l).await;
            }
        })
    };
    let manager = LeaseManagerBuilder::new(direct, "klm-b")
        .with_namespace(ns)
        .with_identity("probe-b")
        .with_duration(15)
        .with_grace(5)
        .build()
        .await
        .expect("manager");
    let started = Instant::now();
    let (mut leader, _task) = manager.watch().await;
    let took = tokio::time::timeout(Duration::from_secs(30), async {
        while !*leader.borrow_and_update() {
            leader.changed().await.unwrap();
        }
    })
    .await;
    match took {
        Ok(()) => println!(
            "B: holder 'other' renewing every 1 s with a clock 1 h slow: kube-lease-manager took the lease after {:.1?}",
            started.elapsed()
        ),
        Err(_) => println!("B: holder renewing with a slow clock: not taken in 30 s"),
    }
    renewer.abort();
}
