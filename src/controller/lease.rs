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
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::sleep_until;
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
    /// Time between attempts; also the bound of each call to the API server.
    pub retry_period: Duration,
}

/// Why lease timings cannot work together.
#[derive(Debug, PartialEq, thiserror::Error)]
pub enum TimingError {
    #[error(
        "the renew deadline ({renew:?}) must be shorter than the lease duration ({lease:?}): otherwise a standby can take over while the leader still writes"
    )]
    RenewNotBeforeExpiry { renew: Duration, lease: Duration },
    #[error(
        "the retry period ({retry:?}) must be shorter than the renew deadline ({renew:?}): otherwise a leader steps down before its first retry"
    )]
    RetryNotBeforeDeadline { retry: Duration, renew: Duration },
}

/// Checks the timings as client-go's leader election does.
pub fn check_timings(lease: Duration, renew: Duration, retry: Duration) -> Result<(), TimingError> {
    if renew >= lease {
        return Err(TimingError::RenewNotBeforeExpiry { renew, lease });
    }
    if retry >= renew {
        return Err(TimingError::RetryNotBeforeDeadline { retry, renew });
    }
    Ok(())
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

/// Another holder's record as we last saw it, and when we first saw it so (our monotonic
/// clock). Expiry is judged from here, as client-go does: the holder's `renewTime` comes from
/// its clock, which need not agree with ours.
#[derive(Clone, Debug, PartialEq)]
pub struct Observed {
    holder: String,
    renew_time: Option<Timestamp>,
    since: Instant,
}

impl Observed {
    /// What we know after reading `spec` at `now`: the same record keeps its first sighting.
    pub fn update(
        previous: Option<Observed>,
        spec: Option<&LeaseSpec>,
        now: Instant,
    ) -> Option<Observed> {
        let spec = spec?;
        let holder = spec.holder_identity.clone().filter(|h| !h.is_empty())?;
        let renew_time = spec
            .renew_time
            .as_ref()
            .or(spec.acquire_time.as_ref())
            .map(|t| t.0);
        match previous {
            Some(seen) if seen.holder == holder && seen.renew_time == renew_time => Some(seen),
            _ => Some(Observed {
                holder,
                renew_time,
                since: now,
            }),
        }
    }
}

/// Who should hold the lease, given its current spec and what we observed of it.
pub fn decide(
    spec: Option<&LeaseSpec>,
    identity: &str,
    observed: Option<&Observed>,
    now: Instant,
) -> Decision {
    let holder = spec
        .and_then(|s| s.holder_identity.as_deref())
        .unwrap_or_default();
    if holder == identity {
        return Decision::Renew;
    }
    let Some(spec) = spec.filter(|_| !holder.is_empty()) else {
        // Free, or given up by its holder on shutdown.
        return Decision::Acquire;
    };
    let follow = Decision::Follow {
        holder: holder.to_string(),
    };
    // A holder not observed before counts from now: a whole lease duration must pass unrenewed.
    let Some(seen) = observed.filter(|o| o.holder == holder) else {
        return follow;
    };
    let duration = Duration::from_secs(spec.lease_duration_seconds.unwrap_or(15).max(1) as u64);
    if now.duration_since(seen.since) < duration {
        follow
    } else {
        Decision::Acquire
    }
}

#[derive(Debug, thiserror::Error)]
#[error("lost the leader lease {namespace}/{name}: {why}")]
pub struct LeaseLost {
    pub namespace: String,
    pub name: String,
    pub why: String,
}

/// The result of one attempt.
enum Attempt {
    Held,
    /// Another candidate holds it (named when we know who).
    Taken(Option<String>),
    Failed(String),
}

/// Campaigns for the lease until `shutdown`, publishing leadership on `leader`.
/// Returns `Err` when a held lease was lost; releases it on shutdown.
///
/// Every call to the API server is bounded by the retry period, and a leader steps down the
/// moment its renew deadline passes or another holder shows up, whatever a call is doing.
pub async fn run(
    api: Api<Lease>,
    config: LeaseConfig,
    leader: watch::Sender<bool>,
    shutdown: CancellationToken,
) -> Result<(), LeaseLost> {
    let mut last_renewal: Option<Instant> = None;
    let mut observed: Option<Observed> = None;
    // Who we last saw holding the lease, so that each new holder is logged once.
    let mut following: Option<String> = None;
    loop {
        let deadline = last_renewal.map(|at| at + config.renew_deadline);
        // A renewal counts from when it was sent, not from when its answer came: a standby
        // starts its count when it sees the new renewTime, which can be before a slow answer
        // reaches us, so the leader's deadline must not start later than that.
        let sent = Instant::now();
        let attempt = tokio::select! {
            attempt = tokio::time::timeout(
                config.retry_period,
                try_acquire_or_renew(&api, &config, &mut observed),
            ) => attempt.unwrap_or_else(|_| {
                Attempt::Failed(format!("no answer within {:?}", config.retry_period))
            }),
            _ = sleep_until(deadline) => Attempt::Failed("the renew deadline passed during a call".into()),
            _ = shutdown.cancelled() => break,
        };
        let lost = |why: String| LeaseLost {
            namespace: config.namespace.clone(),
            name: config.name.clone(),
            why,
        };
        match attempt {
            Attempt::Held => {
                if last_renewal.is_none() {
                    info!(identity = %config.identity, lease = %config.name, "became leader");
                }
                last_renewal = Some(sent);
                leader.send_if_modified(|l| !std::mem::replace(l, true));
            }
            Attempt::Taken(holder) if last_renewal.is_some() => {
                // Stop writing first; then report the loss so the process can exit.
                leader.send_replace(false);
                return Err(lost(format!(
                    "{} holds it now",
                    holder.as_deref().unwrap_or("another candidate")
                )));
            }
            Attempt::Taken(holder) => {
                if holder.is_some() && holder != following {
                    info!(holder = holder.as_deref().unwrap_or_default(), lease = %config.name, "another candidate holds the leader lease; standing by");
                    following = holder;
                }
            }
            Attempt::Failed(why) => {
                warn!(error = %why, lease = %config.name, "cannot read or write the leader lease");
                if let Some(at) = last_renewal
                    && at.elapsed() >= config.renew_deadline
                {
                    leader.send_replace(false);
                    return Err(lost(format!(
                        "could not renew it for {}s ({why})",
                        at.elapsed().as_secs()
                    )));
                }
            }
        }
        let next = Instant::now() + config.retry_period;
        let deadline = last_renewal.map(|at| at + config.renew_deadline);
        tokio::select! {
            _ = shutdown.cancelled() => break,
            _ = tokio::time::sleep_until(deadline.map_or(next, |d| d.min(next))) => {}
        }
    }
    if *leader.borrow() {
        leader.send_replace(false);
        release_on_shutdown(&api, &config).await;
    }
    Ok(())
}

/// Gives the lease up at shutdown so the standby need not wait for it to expire; bounded like
/// every other lease call.
async fn release_on_shutdown(api: &Api<Lease>, config: &LeaseConfig) {
    let release = async {
        let mut lease = api.get(&config.name).await?;
        let Some(spec) = lease.spec.as_mut() else {
            return Ok(());
        };
        if spec.holder_identity.as_deref() != Some(config.identity.as_str()) {
            return Ok(());
        }
        spec.holder_identity = None;
        spec.lease_duration_seconds = Some(1);
        let params = api_client::post_params();
        api.replace(&config.name, &params, &lease).await.map(|_| ())
    };
    match tokio::time::timeout(config.retry_period, release).await {
        Ok(Ok(())) => info!(lease = %config.name, "released the leader lease"),
        Ok(Err(e)) => {
            warn!(error = %e, "could not release the leader lease; the standby waits for it to expire")
        }
        Err(_) => {
            warn!("releasing the leader lease timed out; the standby waits for it to expire")
        }
    }
}

/// One attempt, read again at once when our renewal lost a race: a conflict on our own Lease
/// is not proof that someone else holds it (any write to the object causes one), and the
/// fresh read says whether someone does.
async fn try_acquire_or_renew(
    api: &Api<Lease>,
    config: &LeaseConfig,
    observed: &mut Option<Observed>,
) -> Attempt {
    for _ in 0..2 {
        match acquire_or_renew(api, config, observed).await {
            Ok(None) => continue,
            Ok(Some(attempt)) => return attempt,
            Err(e) => return Attempt::Failed(e.to_string()),
        }
    }
    Attempt::Failed("the Lease kept changing between our reads and our renewals".into())
}

/// One read and, unless another holder's lease is valid, one write. `None`: our renewal lost a
/// race with another write to our own Lease.
async fn acquire_or_renew(
    api: &Api<Lease>,
    config: &LeaseConfig,
    observed: &mut Option<Observed>,
) -> Result<Option<Attempt>, kube::Error> {
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
            Ok(_) => Ok(Some(Attempt::Held)),
            Err(kube::Error::Api(e)) if e.code == 409 => Ok(Some(Attempt::Taken(None))),
            Err(e) => Err(e),
        };
    };
    let (read, read_at) = (lease.spec.as_ref(), Instant::now());
    *observed = Observed::update(observed.take(), read, read_at);
    match decide(read, &config.identity, observed.as_ref(), read_at) {
        Decision::Follow { holder } => Ok(Some(Attempt::Taken(Some(holder)))),
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
            let params = api_client::post_params();
            match api.replace(&config.name, &params, &lease).await {
                Ok(_) => Ok(Some(Attempt::Held)),
                Err(kube::Error::Api(e)) if e.code == 409 && decision == Decision::Renew => {
                    Ok(None)
                }
                Err(kube::Error::Api(e)) if e.code == 409 => Ok(Some(Attempt::Taken(None))),
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
    fn a_free_lease_is_taken_and_our_own_renewed() {
        let now = Instant::now();
        assert_eq!(decide(None, "me", None, now), Decision::Acquire);
        assert_eq!(
            decide(Some(&LeaseSpec::default()), "me", None, now),
            Decision::Acquire
        );
        let mine = spec("me", "2026-01-01T00:00:00Z", 15);
        assert_eq!(decide(Some(&mine), "me", None, now), Decision::Renew);
    }

    #[test]
    fn another_holder_expires_by_our_clock_not_by_its_timestamps() {
        let start = Instant::now();
        let secs = |s: u64| start + Duration::from_secs(s);
        let follow_other = || Decision::Follow {
            holder: "other".into(),
        };
        // Its renewTime is an hour behind our clock (its clock is wrong): still valid while we
        // see it being renewed.
        let stale_clock = spec("other", "2000-01-01T00:00:00Z", 15);
        let seen = Observed::update(None, Some(&stale_clock), secs(0));
        assert_eq!(
            decide(Some(&stale_clock), "me", seen.as_ref(), secs(10)),
            follow_other()
        );
        // A renewal (a new renewTime) restarts our count.
        let renewed = spec("other", "2000-01-01T00:00:12Z", 15);
        let seen = Observed::update(seen, Some(&renewed), secs(12));
        assert_eq!(
            decide(Some(&renewed), "me", seen.as_ref(), secs(26)),
            follow_other()
        );
        // No renewal seen for the lease duration: expired.
        let seen = Observed::update(seen, Some(&renewed), secs(27));
        assert_eq!(
            decide(Some(&renewed), "me", seen.as_ref(), secs(27)),
            Decision::Acquire
        );
        // A renewTime far in the future does not make it valid for ever either.
        let future = spec("other", "2999-01-01T00:00:00Z", 15);
        let seen = Observed::update(None, Some(&future), secs(0));
        assert_eq!(
            decide(Some(&future), "me", seen.as_ref(), secs(16)),
            Decision::Acquire
        );
    }

    #[test]
    fn timings_must_leave_room_for_a_retry_and_for_expiry() {
        let s = Duration::from_secs;
        assert_eq!(
            // The defaults of `run` (controller/config.rs).
            check_timings(s(137), s(107), s(26)),
            Ok(())
        );
        assert!(matches!(
            check_timings(s(10), s(10), s(2)),
            Err(TimingError::RenewNotBeforeExpiry { .. })
        ));
        assert!(matches!(
            check_timings(s(15), s(10), s(10)),
            Err(TimingError::RetryNotBeforeDeadline { .. })
        ));
    }
}
