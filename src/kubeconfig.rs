//! How every command that talks to a cluster finds it: the same flags and the same rules as
//! `kubectl`, so that what works there works here.

use std::path::PathBuf;

use clap::Args;
use kube::config::{KubeConfigOptions, Kubeconfig};

#[derive(Args, Clone, Debug, Default)]
pub struct ClusterArgs {
    /// Kubeconfig file [default: the files listed in KUBECONFIG, merged as kubectl merges them,
    /// else ~/.kube/config, else the in-cluster service account].
    // No `env = "KUBECONFIG"` here: KUBECONFIG may be a list of files, which is not a path.
    #[arg(long, value_name = "FILE")]
    pub kubeconfig: Option<PathBuf>,

    /// Kubeconfig context to use instead of the current context.
    #[arg(long, value_name = "NAME")]
    pub context: Option<String>,
}

impl ClusterArgs {
    /// The client configuration, or a message saying why there is none.
    pub async fn config(&self) -> Result<kube::Config, String> {
        let options = KubeConfigOptions {
            context: self.context.clone(),
            ..Default::default()
        };
        match (&self.kubeconfig, &self.context) {
            (Some(path), _) => {
                let kubeconfig = Kubeconfig::read_from(path)
                    .map_err(|e| format!("reading {}: {e}", path.display()))?;
                kube::Config::from_custom_kubeconfig(kubeconfig, &options)
                    .await
                    .map_err(|e| e.to_string())
            }
            // A context only exists in a kubeconfig: never fall back to in-cluster config then.
            (None, Some(_)) => kube::Config::from_kubeconfig(&options)
                .await
                .map_err(|e| e.to_string()),
            (None, None) => kube::Config::infer().await.map_err(|e| e.to_string()),
        }
    }
}
