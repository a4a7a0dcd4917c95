//! `boot-image-controller run`: logging, signals and the runtime around the controller.

use std::io::IsTerminal as _;

use anyhow::Context as _;

use tokio_util::sync::CancellationToken;
use tracing::{error, info};
use tracing_subscriber::EnvFilter;

use super::Failure;
use crate::controller::{self, RunArgs, config::LogFormat};

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
    // A worker per core, or `TOKIO_WORKER_THREADS`, which tokio reads itself. Not one by
    // default: it saves CPU but converges later (docs/performance.md, "Measurements behind the
    // code").
    let mut runtime = tokio::runtime::Builder::new_multi_thread();
    let runtime = (runtime.enable_all().build()).context("cannot start the async runtime")?;
    runtime.block_on(async move {
        let shutdown = CancellationToken::new();
        tokio::spawn(stop_on_signal(shutdown.clone()));
        info!(
            version = env!("CARGO_PKG_VERSION"),
            "starting boot-image-controller"
        );
        controller::run(args, shutdown).await.map_err(|e| {
            error!(error = %e, "controller stopped");
            Failure::from(anyhow::Error::new(e))
        })
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
