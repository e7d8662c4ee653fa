//! `likewise migrate`: create missing shard databases and apply the schema migrations to
//! every shard (idempotent; safe to run on every deploy, before the new nodes start).

use likewise_app::config::Config;

pub fn run(cfg: Config) -> anyhow::Result<()> {
    likewise_app::runtime::init_logging(&cfg.log.level);
    likewise_app::runtime::runtime()?.block_on(async {
        for (shard, applied) in likewise_app::engines::migrate(&cfg).await? {
            if applied.is_empty() {
                println!("shard {shard}: up to date");
            } else {
                println!("shard {shard}: applied {applied:?}");
            }
        }
        Ok(())
    })
}
