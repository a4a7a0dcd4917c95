//! How this program identifies itself to the API server: one way to build a client, with a
//! User-Agent naming the program and its version, and the field manager every write carries,
//! so that audit logs and `managedFields` show which changes are ours.

use std::time::Duration;

use kube::Client;
use kube::api::{PatchParams, PostParams};

use crate::kubeconfig::ClusterArgs;

use crate::names::FIELD_MANAGER;

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("cannot configure the Kubernetes client: {0}")]
    Config(String),
}

/// `boot-image-controller/<version>`.
pub fn user_agent() -> String {
    format!("{FIELD_MANAGER}/{}", env!("CARGO_PKG_VERSION"))
}

/// The bound of one write (a patch, a status update) from request to response.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(30);
/// Reading a credentials Secret (the machine API's, for EC2 or vCenter).
pub const SECRET_TIMEOUT: Duration = Duration::from_secs(10);

/// `call`, or a timeout error once the API server has not answered within [`CALL_TIMEOUT`]: a
/// write must never hold a pass, the status or an Event slot for the idle-read bound.
pub async fn bounded<T>(
    call: impl std::future::Future<Output = Result<T, kube::Error>>,
) -> Result<T, kube::Error> {
    let secs = CALL_TIMEOUT.as_secs();
    tokio::time::timeout(CALL_TIMEOUT, call)
        .await
        .unwrap_or_else(|_| {
            Err(kube::Error::Service(
                format!("no answer within {secs}s").into(),
            ))
        })
}

/// A client for the cluster `cluster` names (as kubectl finds it).
pub async fn connect(cluster: &ClusterArgs) -> Result<Client, ClientError> {
    let mut config = cluster.config().await.map_err(ClientError::Config)?;
    // Without these a call to an API server that stops answering hangs for ever (kube's
    // defaults leave reads unbounded). Reads may idle as long as a watch does: kube-runtime asks
    // for watches of 290 s, and the API server sends bookmarks within them.
    config.connect_timeout = Some(Duration::from_secs(10));
    config.read_timeout = Some(Duration::from_secs(295));
    config.write_timeout = Some(Duration::from_secs(30));
    let agent = user_agent()
        .parse()
        .map_err(|_| ClientError::Config("the User-Agent is not a valid header value".into()))?;
    config.headers.push((hyper::header::USER_AGENT, agent));
    Client::try_from(config).map_err(|e| ClientError::Config(e.to_string()))
}

/// Parameters of a JSON Patch we send.
pub fn patch_params() -> PatchParams {
    PatchParams {
        field_manager: Some(FIELD_MANAGER.to_string()),
        ..PatchParams::default()
    }
}

/// Parameters of a create or replace we send.
pub fn post_params() -> PostParams {
    PostParams {
        field_manager: Some(FIELD_MANAGER.to_string()),
        ..PostParams::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_write_the_api_server_never_answers_fails_after_the_call_timeout() {
        let started = tokio::time::Instant::now();
        let hung = std::future::pending::<Result<(), kube::Error>>();
        let error = bounded(hung).await.unwrap_err();
        assert_eq!(started.elapsed(), CALL_TIMEOUT);
        assert!(
            error.to_string().contains("no answer within 30s"),
            "{error}"
        );
    }
}
