//! The service a soak drives: started in this process (a fresh temporary embedded store
//! unless `--data-dir`, HTTP on a random local port, wired exactly as `serve` wires it), or a
//! running server (`--url`), and the process whose memory is watched.

use super::args::SoakArgs;
use crate::proc::RssSource;

/// The service under load, and the process whose memory is watched.
pub(super) struct Target {
    /// The service: its base URL and token keys, and the service itself when in process.
    pub(super) service: crate::served::Target,
    /// The process whose RSS and CPU are sampled.
    pub(super) rss: RssSource,
}

impl Target {
    /// The running server `--url` names, or the service started in this process.
    pub(super) async fn start(a: &SoakArgs) -> anyhow::Result<Target> {
        let service = a.server.target(|_| {}).await?;
        let rss = match &service.served {
            Some(_) => RssSource::This,
            None => a.pid.map(RssSource::Pid).unwrap_or(RssSource::None),
        };
        Ok(Target { service, rss })
    }

    /// Whether the service runs in this process.
    pub(super) fn in_process(&self) -> bool {
        self.service.served.is_some()
    }

    /// The run's first lines: how long, how many loops, against what.
    pub(super) fn announce(&self, a: &SoakArgs) {
        let base = &self.service.base;
        let where_ = if self.in_process() {
            format!("in process ({base}, embedded store, fresh temporary directory unless --data-dir)")
        } else {
            format!("against {base}")
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
        self.service.stop().await
    }
}
