//! How every command that talks to a cluster finds it: the same flags and the same rules as
//! `kubectl`, so that what works there works here.

use std::path::PathBuf;

use clap::Args;
use kube::config::{KubeConfigOptions, Kubeconfig};

use crate::http_client::proxy::Proxies;

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
        self.read().await.map(honour_no_proxy)
    }

    async fn read(&self) -> Result<kube::Config, String> {
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

/// kube-client takes `HTTPS_PROXY` for a kubeconfig's API server but not `NO_PROXY` (kube-client
/// 5, config/file_loader.rs `proxy_url`), where `oc` honours both (Go's
/// `http.ProxyFromEnvironment`): an API server that `NO_PROXY` names, or a loopback one, is
/// reached directly, by the rules the calls beyond it follow (`http_client::proxy`). A
/// kubeconfig's own `proxy-url` is kept; the in-cluster configuration takes no proxy at all.
fn honour_no_proxy(mut config: kube::Config) -> kube::Config {
    let from_env = ["HTTPS_PROXY", "https_proxy"]
        .iter()
        .find_map(|name| std::env::var(name).ok().filter(|v| !v.trim().is_empty()));
    let same = |url: &hyper::Uri, env: &str| {
        url.to_string().trim_end_matches('/') == env.trim().trim_end_matches('/')
    };
    let taken_from_env =
        matches!((&config.proxy_url, &from_env), (Some(url), Some(env)) if same(url, env));
    if taken_from_env && Proxies::from_env().for_uri(&config.cluster_url).is_none() {
        config.proxy_url = None;
    }
    config
}
