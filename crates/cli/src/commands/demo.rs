//! `likewise demo`: `serve` on the embedded store, a seeded world, and the web demo's
//! demo-only routes (sign in as a seeded user, a viral storm).

use likewise_app::config::Config;
use likewise_app::startup::{Application, shutdown_signal};

pub fn run(cfg: Config) -> anyhow::Result<()> {
    likewise_app::runtime::init_logging(&cfg.log.level);
    likewise_app::runtime::runtime()?.block_on(async {
        let app = Application::build(&cfg).await?;
        let world = likewise_app::demo::seed(&app.service()).await?;
        let addr = app.local_addr();
        let app = app.with_routes(likewise_http::web::demo_routes(world));
        tracing::info!("demo ready: open http://{addr}/ (or /?as=<user_id> to sign in as someone else)");
        app.run_until_stopped(shutdown_signal()).await
    })
}
