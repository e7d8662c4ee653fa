//! The one place an engine is chosen. `store.backend` names it: `embedded` (always built) or
//! `postgres` (the scale-out engines, built with the `scaleout` feature). A build without the
//! feature refuses `postgres` at start-up with a message naming the feature.
//!
//! What comes out is engine-neutral: the storage ports ([`Stores`]) and, for a scaled-out
//! deployment, the coordination ports its workers need ([`ClusterPorts`]), plus the
//! maintenance `likewise reconcile` uses.

use crate::config::Config;
use anyhow::Context;
use likewise_core::ports::cluster::LikerPageRepair;
use likewise_store::Stores;
use likewise_workers::cluster::ClusterPorts;
use std::sync::Arc;

/// The opened engines of a process.
pub struct Engines {
    /// Every storage port, behind the group-commit write path.
    pub stores: Stores,
    /// A scaled-out deployment's coordination ports; `None` on the embedded engine.
    pub cluster: Option<ClusterPorts>,
    /// Likers-list repairs (`likewise reconcile`), where the engine keeps them apart from the
    /// like rows.
    pub liker_pages: Option<Arc<dyn LikerPageRepair>>,
}

/// Open the engine `cfg.store.backend` names.
pub async fn open(cfg: &Config) -> anyhow::Result<Engines> {
    match cfg.store.backend.as_str() {
        "embedded" => {
            let stores = likewise_store::open(&cfg.store_config())
                .with_context(|| format!("opening the embedded store in {}", cfg.store.data_dir.display()))?;
            Ok(Engines { stores, cluster: None, liker_pages: None })
        }
        #[cfg(feature = "scaleout")]
        "postgres" => scaleout::open(cfg).await,
        #[cfg(not(feature = "scaleout"))]
        "postgres" => Err(not_built()),
        other => anyhow::bail!("unknown storage backend {other:?} (available: \"embedded\", \"postgres\")"),
    }
}

/// Create missing shard databases and apply the schema migrations (`likewise migrate`).
/// Returns each shard's newly applied migrations.
pub async fn migrate(cfg: &Config) -> anyhow::Result<Vec<(usize, Vec<i32>)>> {
    anyhow::ensure!(
        cfg.store.backend == "postgres",
        "likewise migrate applies to store.backend = \"postgres\" (the embedded store needs no migrations)"
    );
    #[cfg(feature = "scaleout")]
    return scaleout::migrate(cfg).await;
    #[cfg(not(feature = "scaleout"))]
    Err(not_built())
}

/// The error of a build without the scale-out engines.
#[cfg(not(feature = "scaleout"))]
fn not_built() -> anyhow::Error {
    anyhow::anyhow!(
        "store.backend = \"postgres\" needs the scale-out engines, which this build of likewise does not \
         include: build it with the `scaleout` cargo feature (it is on by default; this binary was built \
         with --no-default-features)"
    )
}

/// The scale-out arm: PostgreSQL shards, Redis, NATS JetStream.
#[cfg(feature = "scaleout")]
mod scaleout {
    use super::Engines;
    use crate::config::Config;
    use anyhow::Context;
    use likewise_scaleout::postgres::{PgOptions, PgStore};
    use likewise_scaleout::shared_cache::RedisOptions;
    use likewise_scaleout::stream::StreamOptions;
    use likewise_scaleout::{ScaleOutOptions, connect};
    use likewise_workers::cluster::ClusterPorts;
    use std::sync::Arc;
    use std::time::Duration;

    fn pg_options(cfg: &Config, pool_size: usize) -> PgOptions {
        PgOptions { shards: cfg.store.postgres_shards.clone(), pool_size, stream_positions: true }
    }

    pub(super) async fn open(cfg: &Config) -> anyhow::Result<Engines> {
        let opts = ScaleOutOptions {
            postgres: pg_options(cfg, cfg.store.postgres_pool_size),
            redis: RedisOptions {
                url: cfg.cache.redis_url.clone().unwrap_or_default(),
                ca_file: cfg.cache.redis_ca_file.clone(),
                prefix: cfg.cache.redis_prefix.clone(),
                replicas: cfg.cache.hot_replicas,
                own_likes_shards: cfg.cache.own_likes_shards,
                ..Default::default()
            },
            stream: StreamOptions {
                url: cfg.stream.nats_url.clone().unwrap_or_default(),
                ca_file: cfg.stream.nats_ca_file.clone(),
                creds_file: cfg.stream.nats_creds_file.clone(),
                prefix: cfg.stream.prefix.clone(),
                max_age: Duration::from_secs(cfg.stream.max_age_hours.max(1) * 3600),
                ..Default::default()
            },
            group_commit: cfg.store_config().group_commit,
        };
        let d = connect(&opts).await.context("connecting the scale-out engines")?;
        let pg = Arc::new(d.pg.clone());
        let cluster = ClusterPorts {
            leases: pg.clone(),
            outbox: pg.clone(),
            stream: Arc::new(d.stream.clone()),
            reverse: pg.clone(),
            bus: d.bus.clone(),
        };
        Ok(Engines { stores: d.stores, cluster: Some(cluster), liker_pages: Some(pg) })
    }

    pub(super) async fn migrate(cfg: &Config) -> anyhow::Result<Vec<(usize, Vec<i32>)>> {
        for url in &cfg.store.postgres_shards {
            likewise_scaleout::postgres::migrate::create_database_if_missing(url)
                .await
                .with_context(|| format!("preparing {}", likewise_scaleout::postgres::tls::redact(url)))?;
        }
        let pg = PgStore::connect(&pg_options(cfg, 2))?;
        pg.migrate().await.context("migrating")
    }
}
