//! Leader election with a `coordination.k8s.io/v1` Lease.
//!
//! The decision is a pure function of the Lease, our identity and the time ([`decide`]); the
//! loop around it only reads and writes the Lease with resourceVersion preconditions, so two
//! candidates can never both believe they acquired it. Losing the lease is fatal by design
//! (the caller exits and Kubernetes restarts the pod): a half-leader that keeps writing is worse
//! than a restart.

use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{Api, ObjectMeta};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::api_client;

#[derive(Clone, Debug)]
pub struct LeaseConfig {
    pub namespace: String,
    pub name: String,
    pub identity: String,
    /// How long a lease stays valid without renewal; a standby takes over after this.
    pub lease_duration: Duration,
    /// A leader that could not renew for this long steps down (must be < lease_duration).
    pub renew_deadline: Duration,
    pub retry_period: Duration,
}

impl LeaseConfig {
    pub fn new(namespace: String, name: String, identity: String) -> Self {
        LeaseConfig {
            namespace,
            name,
            identity,
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        }
    }
}

#[derive(Debug, PartialEq, Eq)]
pub enum Decision {
    /// We hold it: renew.
    Renew,
    /// Free or expired: take it.
    Acquire,
    /// Someone else holds a valid lease.
    Follow { holder: String },
}

/// Who should hold the lease, given its current spec.
pub fn decide(spec: Option<&LeaseSpec>, identity: &str, now: Timestamp) -> Decision {
    let holder = spec
        .and_then(|s| s.holder_identity.as_deref())
        .unwrap_or_default();
    if holder == identity {
        return Decision::Renew;
    }
    if holder.is_empty() {
        return Decision::Acquire;
    }
    let spec = spec.expect("a holder implies a spec");
    let duration = i64::from(spec.lease_duration_seconds.unwrap_or(15));
    let last = spec
        .renew_time
        .as_ref()
        .or(spec.acquire_time.as_ref())
        .map(|t| t.0);
    match last {
        Some(last) if now.as_second() - last.as_second() < duration => Decision::Follow {
            holder: holder.to_string(),
        },
        _ => Decision::Acquire,
    }
}

#[derive(Debug, thiserror::Error)]
#[error("lost the leader lease {namespace}/{name}: could not renew it for {seconds}s")]
pub struct LeaseLost {
    pub namespace: String,
    pub name: String,
    pub seconds: u64,
}

/// Campaigns for the lease until `shutdown`, publishing leadership on `leader`.
/// Returns `Err` when a held lease was lost; releases it on shutdown.
pub async fn run(
    api: Api<Lease>,
    config: LeaseConfig,
    leader: watch::Sender<bool>,
    shutdown: CancellationToken,
) -> Result<(), LeaseLost> {
    let mut last_renewal: Option<tokio::time::Instant> = None;
    loop {
        let attempt = try_acquire_or_renew(&api, &config).await;
        let held = match attempt {
            Ok(held) => held,
            Err(e) => {
                warn!(error = %e, lease = %config.name, "cannot read or write the leader lease");
                false
            }
        };
        if held {
            if last_renewal.is_none() {
                info!(identity = %config.identity, lease = %config.name, "became leader");
            }
            last_renewal = Some(tokio::time::Instant::now());
            leader.send_if_modified(|l| !std::mem::replace(l, true));
        } else if let Some(at) = last_renewal
            && at.elapsed() >= config.renew_deadline
        {
            // Stop writing first; then report the loss so the process can exit.
            leader.send_replace(false);
            return Err(LeaseLost {
                namespace: config.namespace.clone(),
                name: config.name.clone(),
                seconds: at.elapsed().as_secs(),
            });
        }
        tokio::select! {
            _ = shutdown.cancelled() => break,
            _ = tokio::time::sleep(config.retry_period) => {}
        }
    }
    if *leader.borrow() {
        leader.send_replace(false);
        if let Err(e) = release(&api, &config).await {
            warn!(error = %e, "could not release the leader lease; the standby waits for it to expire");
        } else {
            info!(lease = %config.name, "released the leader lease");
        }
    }
    Ok(())
}

async fn try_acquire_or_renew(api: &Api<Lease>, config: &LeaseConfig) -> Result<bool, kube::Error> {
    let now = Timestamp::now();
    let Some(mut lease) = api.get_opt(&config.name).await? else {
        let lease = Lease {
            metadata: ObjectMeta {
                name: Some(config.name.clone()),
                namespace: Some(config.namespace.clone()),
                ..ObjectMeta::default()
            },
            spec: Some(held_spec(config, now, None)),
        };
        return match api.create(&api_client::post_params(), &lease).await {
            Ok(_) => Ok(true),
            Err(kube::Error::Api(e)) if e.code == 409 => Ok(false),
            Err(e) => Err(e),
        };
    };
    match decide(lease.spec.as_ref(), &config.identity, now) {
        Decision::Follow { .. } => Ok(false),
        decision => {
            let previous = lease.spec.take();
            let mut spec = held_spec(config, now, previous.as_ref());
            if decision == Decision::Renew {
                spec.acquire_time = previous.as_ref().and_then(|p| p.acquire_time.clone());
                spec.lease_transitions = previous.as_ref().and_then(|p| p.lease_transitions);
            }
            lease.spec = Some(spec);
            // `replace` carries the resourceVersion we read: a concurrent candidate's write makes
            // ours fail with 409 instead of both succeeding.
            match api
                .replace(&config.name, &api_client::post_params(), &lease)
                .await
            {
                Ok(_) => Ok(true),
                Err(kube::Error::Api(e)) if e.code == 409 => Ok(false),
                Err(e) => Err(e),
            }
        }
    }
}

fn held_spec(config: &LeaseConfig, now: Timestamp, previous: Option<&LeaseSpec>) -> LeaseSpec {
    LeaseSpec {
        holder_identity: Some(config.identity.clone()),
        lease_duration_seconds: Some(config.lease_duration.as_secs() as i32),
        acquire_time: Some(MicroTime(now)),
        renew_time: Some(MicroTime(now)),
        lease_transitions: Some(previous.and_then(|p| p.lease_transitions).unwrap_or(0) + 1),
        ..LeaseSpec::default()
    }
}

/// Gives the lease up so a standby does not have to wait for it to expire.
async fn release(api: &Api<Lease>, config: &LeaseConfig) -> Result<(), kube::Error> {
    let mut lease = api.get(&config.name).await?;
    let Some(spec) = lease.spec.as_mut() else {
        return Ok(());
    };
    if spec.holder_identity.as_deref() != Some(config.identity.as_str()) {
        return Ok(());
    }
    spec.holder_identity = None;
    spec.lease_duration_seconds = Some(1);
    api.replace(&config.name, &api_client::post_params(), &lease)
        .await
        .map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(holder: &str, renewed: &str, duration: i32) -> LeaseSpec {
        LeaseSpec {
            holder_identity: Some(holder.into()),
            renew_time: Some(MicroTime(renewed.parse().unwrap())),
            lease_duration_seconds: Some(duration),
            ..LeaseSpec::default()
        }
    }

    #[test]
    fn decisions() {
        let now: Timestamp = "2026-01-01T00:00:20Z".parse().unwrap();
        assert_eq!(decide(None, "me", now), Decision::Acquire);
        assert_eq!(
            decide(Some(&LeaseSpec::default()), "me", now),
            Decision::Acquire
        );
        let mine = spec("me", "2026-01-01T00:00:00Z", 15);
        assert_eq!(decide(Some(&mine), "me", now), Decision::Renew);
        let fresh = spec("other", "2026-01-01T00:00:10Z", 15);
        assert_eq!(
            decide(Some(&fresh), "me", now),
            Decision::Follow {
                holder: "other".into()
            }
        );
        let expired = spec("other", "2026-01-01T00:00:04Z", 15);
        assert_eq!(decide(Some(&expired), "me", now), Decision::Acquire);
    }
}
