//! `likewise serve`.

use likewise_app::config::Config;
use likewise_app::startup::{Application, shutdown_signal};

pub fn run(cfg: Config) -> anyhow::Result<()> {
    let rt = likewise_app::runtime::runtime()?;
    let traces = likewise_app::runtime::init_observability(&cfg, rt.handle())?;
    rt.block_on(async {
        let app = Application::build(&cfg).await;
        let stopped = match app {
            Ok(app) => app.run_until_stopped(shutdown_signal()).await,
            Err(e) => Err(e),
        };
        // Traces of the last requests and of the drain leave before the process does.
        traces.shutdown().await;
        stopped
    })
}
