//! The service a benchmark drives: the options that say where it is (`ServerArgs`: a running
//! server at `--url`, else the service in this process), the configuration of a service in
//! this process (`config`), and that service started as `likewise serve` starts it, serving
//! HTTP on a random local port until it is stopped (`Served`).

use crate::client::server_keys;
use anyhow::Context;
use clap::Args;
use likewise_app::config::{Config, Overrides};
use likewise_app::startup::Application;
use likewise_http::auth::TokenKeys;
use likewise_service::Engagement;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tempfile::TempDir;

/// The options of every benchmark that drives a running server or the service in this
/// process: where the server is, or how to configure the service here.
#[derive(Debug, Args)]
pub struct ServerArgs {
    /// Base URL of a running server, e.g. http://127.0.0.1:8080 (default: start the service in
    /// this process, on the engines --config names, in a fresh temporary store unless
    /// --data-dir).
    #[arg(long)]
    pub url: Option<String>,
    /// With --url: the server's token secret (default: read from --data-dir or the config).
    #[arg(long, env = "LIKEWISE__AUTH__SECRET")]
    pub secret: Option<String>,
    /// TOML configuration: in process, the service's (engines, store tuning); with --url,
    /// where the server's secret is.
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Data directory: in process, keep the store there instead of a fresh temporary one;
    /// with --url, where the server's secret is.
    #[arg(long)]
    pub data_dir: Option<PathBuf>,
}

impl ServerArgs {
    /// The token keys of the running server (`--secret`, else the secret its config or data
    /// directory holds).
    pub(crate) fn keys(&self) -> anyhow::Result<TokenKeys> {
        server_keys(self.secret.as_deref(), self.config.as_deref(), self.data_dir.as_deref())
    }

    /// The service under load over HTTP: the running server `--url` names, or the service
    /// started in this process on `--config` and `--data-dir`, after `adjust` (what the
    /// benchmark needs of it) has changed its configuration.
    pub(crate) async fn target(&self, adjust: impl FnOnce(&mut Config)) -> anyhow::Result<Target> {
        if let Some(url) = &self.url {
            let base = url.trim_end_matches('/').to_string();
            return Ok(Target { base, keys: self.keys()?, served: None });
        }
        let (mut cfg, tmp) = config(self.config.as_deref(), self.data_dir.as_deref(), Some("127.0.0.1:0"))?;
        adjust(&mut cfg);
        let served = Served::start(&cfg, tmp).await?;
        Ok(Target { base: served.base.clone(), keys: served.keys.clone(), served: Some(served) })
    }
}

/// The service a benchmark drives over HTTP.
pub(crate) struct Target {
    /// Its base URL, without a trailing `/`.
    pub(crate) base: String,
    /// The keys its tokens are signed with.
    pub(crate) keys: TokenKeys,
    /// The service, when it runs in this process.
    pub(crate) served: Option<Served>,
}

impl Target {
    /// Stop the service if it runs in this process, and wait for it.
    pub(crate) async fn stop(self) -> anyhow::Result<()> {
        match self.served {
            Some(s) => s.stop().await,
            None => Ok(()),
        }
    }
}

/// The configuration `file` names (the defaults without one), listening on `listen` (when
/// given), its store in `data_dir` or else in a new temporary directory. The directory is
/// returned in both cases: the caller keeps it for as long as the store is open.
pub(crate) fn config(
    file: Option<&Path>,
    data_dir: Option<&Path>,
    listen: Option<&str>,
) -> anyhow::Result<(Config, TempDir)> {
    let tmp = tempfile::tempdir()?;
    let data_dir = data_dir.unwrap_or(tmp.path()).to_path_buf();
    let overrides = Overrides { listen: listen.map(Into::into), role: None, data_dir: Some(data_dir) };
    Ok((Config::load(file, &overrides)?, tmp))
}

/// The whole service in this process, serving HTTP until [`Served::stop`].
pub(crate) struct Served {
    /// Its base URL.
    pub(crate) base: String,
    /// The keys its tokens are signed with.
    pub(crate) keys: TokenKeys,
    /// The service behind its HTTP API.
    pub(crate) service: Arc<Engagement>,
    /// Its store engine (`store.backend`).
    pub(crate) backend: String,
    stop: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<anyhow::Result<()>>,
    /// Last: fields drop in order, and the directory must outlive the store.
    _tmp: TempDir,
}

impl Served {
    /// Build the service `cfg` configures and run it until stopped, keeping `tmp` until then.
    pub(crate) async fn start(cfg: &Config, tmp: TempDir) -> anyhow::Result<Served> {
        let app = Application::build(cfg).await?;
        let (base, keys, service) = (format!("http://{}", app.local_addr()), app.keys(), app.service());
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(app.run_until_stopped(async move {
            let _ = stopped.await;
        }));
        let backend = cfg.store.backend.clone();
        Ok(Served { base, keys, service, backend, stop, task, _tmp: tmp })
    }

    /// Stop serving, and wait until the service has drained and closed its store.
    pub(crate) async fn stop(self) -> anyhow::Result<()> {
        let _ = self.stop.send(());
        self.task.await?.context("the in-process service failed")
    }
}
