//! `boot-image-controller run`: logging, signals and the runtime around the controller.

use std::io::IsTerminal as _;

use tokio_util::sync::CancellationToken;
use tracing::{error, info};
use tracing_subscriber::EnvFilter;

use super::Failure;
use crate::controller::{self, RunArgs, config::LogFormat};

/// Exit code when the controller stops on an error (e.g. a lost leader lease).
const RUNTIME_FAILURE: u8 = 1;

pub fn run(args: RunArgs) -> Result<(), Failure> {
    let filter = EnvFilter::try_new(&args.log_level)
        .map_err(|e| Failure::input(anyhow::anyhow!("--log-level {:?}: {e}", args.log_level)))?;
    // Colours only on a terminal: log files and collectors get plain text.
    let subscriber = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr);
    match args.log_format {
        LogFormat::Json => subscriber.json().flatten_event(true).init(),
        LogFormat::Text => subscriber.init(),
    }
    let workers = worker_threads(std::env::var_os(WORKER_THREADS_VARIABLE).as_deref())
        .map_err(|e| Failure::input(anyhow::anyhow!(e)))?;
    let mut runtime = tokio::runtime::Builder::new_multi_thread();
    if let Some(workers) = workers {
        runtime.worker_threads(workers);
    }
    let runtime = runtime.enable_all().build().map_err(|e| {
        Failure::runtime(
            RUNTIME_FAILURE,
            anyhow::anyhow!("cannot start the async runtime: {e}"),
        )
    })?;
    runtime.block_on(async move {
        let shutdown = CancellationToken::new();
        tokio::spawn(stop_on_signal(shutdown.clone()));
        info!(
            version = env!("CARGO_PKG_VERSION"),
            "starting boot-image-controller"
        );
        controller::run(args, shutdown).await.map_err(|e| {
            error!(error = %e, "controller stopped");
            Failure::runtime(RUNTIME_FAILURE, e)
        })
    })
}

/// tokio's own name for the number of its worker threads, read here so that a bad value is
/// refused with a message: tokio panics on a value that is not a number or is 0 (tokio 1.54,
/// `src/loom/std/mod.rs`, `num_cpus`, which the builder calls when no count is set).
const WORKER_THREADS_VARIABLE: &str = "TOKIO_WORKER_THREADS";

/// Worker threads of the runtime as `TOKIO_WORKER_THREADS` sets them; `None` (tokio's default,
/// a worker per core) when it is not set. Not one by default: it saves CPU but converges later
/// (docs/performance.md, "Measurements behind the code").
fn worker_threads(value: Option<&std::ffi::OsStr>) -> Result<Option<usize>, String> {
    let Some(value) = value else {
        return Ok(None);
    };
    (value.to_str())
        .and_then(|text| text.trim().parse::<usize>().ok())
        .filter(|workers| *workers > 0)
        .map(Some)
        .ok_or_else(|| {
            format!(
                "{WORKER_THREADS_VARIABLE}={} is not a positive number of worker threads",
                value.to_string_lossy()
            )
        })
}

/// SIGTERM (Kubernetes) or SIGINT (a terminal) start a graceful shutdown.
async fn stop_on_signal(shutdown: CancellationToken) {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        error!("cannot install signal handlers; stop with SIGKILL");
        return;
    };
    tokio::select! {
        _ = term.recv() => info!("SIGTERM: shutting down"),
        _ = int.recv() => info!("SIGINT: shutting down"),
    }
    shutdown.cancel();
}

#[cfg(test)]
mod tests {
    use std::ffi::OsStr;

    use super::*;

    #[test]
    fn the_worker_threads_variable_is_a_positive_number_or_refused() {
        assert_eq!(worker_threads(None), Ok(None));
        assert_eq!(worker_threads(Some(OsStr::new("4"))), Ok(Some(4)));
        assert_eq!(worker_threads(Some(OsStr::new(" 2 "))), Ok(Some(2)));
        for bad in ["0", "-1", "two", ""] {
            let refused = worker_threads(Some(OsStr::new(bad))).unwrap_err();
            assert!(refused.contains("TOKIO_WORKER_THREADS"), "{refused}");
        }
    }
}
