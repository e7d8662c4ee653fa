//! `likewise serve`.

use likewise_app::config::Config;
use likewise_app::startup::{Application, shutdown_signal};

pub fn run(cfg: Config) -> anyhow::Result<()> {
    likewise_app::runtime::init_logging(&cfg.log.level);
    likewise_app::runtime::runtime()?.block_on(async {
        let app = Application::build(&cfg).await?;
        app.run_until_stopped(shutdown_signal()).await
    })
}
