//! `likewise migrate`: create missing shard databases and apply the schema migrations to
//! every shard (idempotent; safe to run on every deploy, before the new nodes start).

use crate::config::Config;
use anyhow::Context;
use likewise_store::postgres::{PgOptions, PgStore};

pub fn run(cfg: Config) -> anyhow::Result<()> {
    super::init_logging(&cfg.log.level);
    anyhow::ensure!(
        cfg.store.backend == "postgres",
        "likewise migrate applies to store.backend = \"postgres\" (the embedded store needs no migrations)"
    );
    super::runtime()?.block_on(async {
        for url in &cfg.store.postgres_shards {
            likewise_store::postgres::migrate::create_database_if_missing(url)
                .await
                .with_context(|| format!("preparing {url}"))?;
        }
        let pg = PgStore::connect(&PgOptions {
            shards: cfg.store.postgres_shards.clone(),
            pool_size: 2,
            stream_positions: true,
        })?;
        for (shard, applied) in pg.migrate().await.context("migrating")? {
            if applied.is_empty() {
                println!("shard {shard}: up to date");
            } else {
                println!("shard {shard}: applied {applied:?}");
            }
        }
        Ok(())
    })
}
