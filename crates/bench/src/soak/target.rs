//! The service a soak drives: started in this process (a fresh temporary embedded store
//! unless `--data-dir`, HTTP on a random local port, wired exactly as `serve` wires it), or a
//! running server (`--url`).

use super::args::SoakArgs;
use crate::client::server_keys;
use crate::proc::RssSource;
use anyhow::Context;
use likewise_app::config::{Config, Overrides};
use likewise_app::startup::Application;
use likewise_http::auth::TokenKeys;

/// The service under load.
pub(super) struct Target {
    /// Its base URL.
    pub(super) base: String,
    /// The keys its tokens are signed with.
    pub(super) keys: TokenKeys,
    /// The process whose RSS and CPU are sampled.
    pub(super) rss: RssSource,
    server: Option<InProcess>,
}

/// The in-process service: its shutdown trigger, its task and the temporary store it uses.
struct InProcess {
    stop: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<anyhow::Result<()>>,
    _tmp: tempfile::TempDir,
}

impl Target {
    /// The running server `--url` names, or the service started in this process.
    pub(super) async fn start(a: &SoakArgs) -> anyhow::Result<Target> {
        if let Some(url) = &a.url {
            let keys = server_keys(a.secret.as_deref(), a.config.as_deref(), a.data_dir.as_deref())?;
            let rss = a.pid.map(RssSource::Pid).unwrap_or(RssSource::None);
            return Ok(Target { base: url.trim_end_matches('/').to_string(), keys, rss, server: None });
        }
        let tmp = tempfile::tempdir()?;
        let data_dir = a.data_dir.clone().unwrap_or_else(|| tmp.path().to_path_buf());
        let cfg = Config::load(
            a.config.as_deref(),
            &Overrides { listen: Some("127.0.0.1:0".into()), role: None, data_dir: Some(data_dir) },
        )?;
        let app = Application::build(&cfg).await?;
        let addr = app.local_addr();
        let keys = app.keys();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(app.run_until_stopped(async move {
            let _ = stopped.await;
        }));
        let server = Some(InProcess { stop, task, _tmp: tmp });
        Ok(Target { base: format!("http://{addr}"), keys, rss: RssSource::This, server })
    }

    /// Whether the service runs in this process.
    pub(super) fn in_process(&self) -> bool {
        self.server.is_some()
    }

    /// The run's first lines: how long, how many loops, against what.
    pub(super) fn announce(&self, a: &SoakArgs) {
        let base = &self.base;
        let where_ = match &self.server {
            Some(_) => {
                format!("in process ({base}, embedded store, fresh temporary directory unless --data-dir)")
            }
            None => format!("against {base}"),
        };
        println!(
            "soak: {} s, concurrency {}, {}, target rate {}",
            a.duration.as_secs(),
            a.concurrency,
            where_,
            a.rate.map(|r| format!("{r:.0} req/s")).unwrap_or_else(|| "unthrottled".into())
        );
        if matches!(self.rss, RssSource::None) {
            println!("no --pid: the server's RSS is not sampled and the memory rule is not applied");
        }
    }

    /// Stop the in-process service, if any, and wait for it.
    pub(super) async fn stop(self) -> anyhow::Result<()> {
        if let Some(s) = self.server {
            let _ = s.stop.send(());
            s.task.await?.context("the in-process service failed")?;
        }
        Ok(())
    }
}
