//! `likewise serve`.

use crate::app::{Application, shutdown_signal};
use crate::config::Config;

pub fn run(cfg: Config) -> anyhow::Result<()> {
    super::init_logging(&cfg.log.level);
    super::runtime()?.block_on(async {
        let app = Application::build(&cfg).await?;
        app.run_until_stopped(shutdown_signal()).await
    })
}
