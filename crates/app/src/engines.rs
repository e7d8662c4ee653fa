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
use likewise_engine::Stores;
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

/// What each shard holds, how its replica keeps up, and the placement's limits (`likewise
/// shards status`), as text for operators.
pub async fn shards_status(cfg: &Config) -> anyhow::Result<String> {
    anyhow::ensure!(
        cfg.store.backend == "postgres",
        "likewise shards applies to store.backend = \"postgres\" (the embedded store has no shards)"
    );
    #[cfg(feature = "scaleout")]
    return scaleout::shards_status(cfg).await;
    #[cfg(not(feature = "scaleout"))]
    Err(not_built())
}

/// What a rebalance tells as it goes (`likewise shards rebalance` shows it as progress).
pub trait RebalanceProgress {
    /// The moves to make: `moves` of them, `buckets` buckets in all.
    fn planned(&mut self, moves: usize, buckets: usize);
    /// A move finished (its `buckets` are on their new shard) or was resumed or retried:
    /// `line` says which.
    fn moved(&mut self, buckets: usize, line: String);
}

/// Move buckets so that every shard `store.postgres_shards` lists holds its share (`likewise
/// shards rebalance`), in moves of at most `per_move` buckets, after finishing any move a
/// crash interrupted; `plan_only`: say what would move. `progress` hears of the plan and of
/// each move.
pub async fn shards_rebalance(
    cfg: &Config,
    per_move: usize,
    plan_only: bool,
    progress: &mut dyn RebalanceProgress,
) -> anyhow::Result<String> {
    anyhow::ensure!(
        cfg.store.backend == "postgres",
        "likewise shards applies to store.backend = \"postgres\" (the embedded store has no shards)"
    );
    #[cfg(feature = "scaleout")]
    return scaleout::shards_rebalance(cfg, per_move, plan_only, progress).await;
    #[cfg(not(feature = "scaleout"))]
    {
        let _ = (per_move, plan_only, progress);
        Err(not_built())
    }
}

/// Register a new, empty shard (`likewise shards add`): create its database if missing,
/// apply the schema, check it holds no rows, and append its URL to `store.postgres_shards` in
/// `config_file`. Returns what the operator does next.
pub async fn shards_add(cfg: &Config, config_file: &std::path::Path, url: &str) -> anyhow::Result<String> {
    anyhow::ensure!(
        cfg.store.backend == "postgres",
        "likewise shards applies to store.backend = \"postgres\" (the embedded store has no shards)"
    );
    #[cfg(feature = "scaleout")]
    return scaleout::shards_add(cfg, config_file, url).await;
    #[cfg(not(feature = "scaleout"))]
    {
        let _ = (config_file, url);
        Err(not_built())
    }
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

    /// The shards (no replicas: `migrate` writes).
    fn pg_options(cfg: &Config, pool_size: usize) -> PgOptions {
        PgOptions {
            shards: cfg.store.postgres_shards.clone(),
            pool_size,
            stream_positions: true,
            ..PgOptions::default()
        }
    }

    pub(super) async fn open(cfg: &Config) -> anyhow::Result<Engines> {
        let opts = ScaleOutOptions {
            postgres: PgOptions {
                replicas: cfg.store.postgres_replicas.clone(),
                replica_max_lag: Duration::from_millis(cfg.store.postgres_replica_max_lag_ms),
                ..pg_options(cfg, cfg.store.postgres_pool_size)
            },
            redis: RedisOptions {
                url: cfg
                    .cache
                    .redis_url
                    .clone()
                    .or_else(|| cfg.cache.redis_urls.first().cloned())
                    .unwrap_or_default(),
                shard_urls: cfg.cache.redis_urls.iter().skip(1).cloned().collect(),
                ca_file: cfg.cache.redis_ca_file.clone(),
                prefix: cfg.cache.redis_prefix.clone(),
                replicas: cfg.cache.hot_replicas,
                own_likes_shards: cfg.cache.own_likes_shards,
                liked_filter_max: cfg.cache.liked_filter_max_items,
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

    pub(super) async fn shards_status(cfg: &Config) -> anyhow::Result<String> {
        use std::fmt::Write;
        let pg = PgStore::open(&PgOptions {
            replicas: cfg.store.postgres_replicas.clone(),
            replica_max_lag: Duration::from_millis(cfg.store.postgres_replica_max_lag_ms),
            ..pg_options(cfg, 2)
        })
        .await?;
        // Time for the replicas' lag trackers to take a first measurement.
        if cfg.store.postgres_replicas.iter().any(|u| !u.trim().is_empty()) {
            tokio::time::sleep(Duration::from_millis(700)).await;
        }
        let mib = |b: i64| b as f64 / (1024.0 * 1024.0);
        let mut out = String::new();
        writeln!(out, "{}", pg.placement_summary())?;
        // Only the buckets in a move now: a run's switched ones are done, their old rows
        // waiting for the drop at its end.
        let journal = pg.journaled_moves().await?;
        if journal.moving > 0 {
            writeln!(
                out,
                "moves in progress: {} buckets (`likewise shards rebalance` finishes them)",
                journal.moving
            )?;
        }
        if journal.switched > 0 {
            writeln!(
                out,
                "moved: {} buckets switched to their new shards, their rows on the old shards not dropped yet \
                 (the rebalance drops them at its end; an interrupted one, on its next run)",
                journal.switched
            )?;
        }
        let mut failed = 0;
        for shard in 0..pg.shard_count() {
            let url = match cfg.store.postgres_shards.get(shard) {
                Some(url) => likewise_core::redact::redact(url),
                None => "(registered in the catalog, not listed in this configuration: add it)".to_string(),
            };
            let r = match pg.shard_report(shard).await {
                Ok(r) => r,
                Err(e) => {
                    failed += 1;
                    writeln!(out, "shard {shard}: {url}: UNREACHABLE: {e}")?;
                    continue;
                }
            };
            writeln!(
                out,
                "shard {shard}: {url}: PostgreSQL {}, {} buckets, {:.1} MiB",
                r.version,
                r.buckets,
                mib(r.database_bytes)
            )?;
            if !r.missing_migrations.is_empty() {
                writeln!(
                    out,
                    "  schema: missing migrations {:?} (run `likewise migrate`)",
                    r.missing_migrations
                )?;
            }
            for t in &r.tables {
                let rows = if t.rows < 0 { "not analysed".to_string() } else { format!("~{} rows", t.rows) };
                writeln!(out, "  {:<13} {rows:>18}  {:>10.1} MiB", t.table, mib(t.bytes))?;
            }
            match &r.replica {
                None => writeln!(out, "  replica: none")?,
                Some(Err(e)) => writeln!(out, "  replica: UNREACHABLE: {e} (reads go to the primary)")?,
                Some(Ok(rep)) if !rep.in_recovery => {
                    writeln!(out, "  replica: NOT A REPLICA (not in recovery; never used for reads)")?
                }
                Some(Ok(rep)) => writeln!(
                    out,
                    "  replica: {}, replay {} bytes behind",
                    if rep.serving { "serving reads" } else { "not serving (lag over the bound)" },
                    rep.lag_bytes.map_or("unknown".to_string(), |b| b.to_string())
                )?,
            }
        }
        // The cache tier's shape (not contacted: it holds nothing that must be checked here).
        let servers: Vec<String> = cfg
            .cache
            .redis_url
            .iter()
            .chain(&cfg.cache.redis_urls)
            .map(|u| likewise_core::redact::redact(u))
            .collect();
        writeln!(
            out,
            "redis: {} server(s), keys spread by hash slot (client-side sharding; every node must list the \
             same servers in the same order; at most 255): {}",
            servers.len(),
            servers.join(", ")
        )?;
        anyhow::ensure!(failed == 0, "{out}{failed} shard(s) unreachable");
        Ok(out)
    }

    pub(super) async fn shards_add(
        cfg: &Config,
        config_file: &std::path::Path,
        url: &str,
    ) -> anyhow::Result<String> {
        use likewise_scaleout::postgres::{migrate, tls};
        let shown = tls::redact(url);
        anyhow::ensure!(
            !cfg.store.postgres_shards.iter().any(|u| u == url),
            "{shown} is listed in store.postgres_shards already"
        );
        // The deployment's catalog must be there: the new shard joins it.
        let pg = PgStore::connect(&pg_options(cfg, 2))?;
        pg.check_schema().await?;
        pg.load_placement().await?;
        anyhow::ensure!(
            pg.shard_count() == cfg.store.postgres_shards.len(),
            "the placement catalog registers {} shards, but store.postgres_shards lists {}: \
             list every shard, in the order they were added (`likewise shards status` shows them)",
            pg.shard_count(),
            cfg.store.postgres_shards.len()
        );
        migrate::create_database_if_missing(url).await.with_context(|| format!("preparing {shown}"))?;
        let new = PgStore::connect(&PgOptions {
            shards: vec![url.to_string()],
            pool_size: 2,
            ..PgOptions::default()
        })?;
        let applied = new.migrate_shard(0).await.with_context(|| format!("migrating {shown}"))?;
        let held = new.bucketed_rows(0).await?;
        anyhow::ensure!(
            held == 0,
            "{shown} holds {held} rows of posts or users: a new shard must be empty (is it a shard already?)"
        );
        // Registered first: running nodes open it within a second; the configuration file is
        // what a node restarted later starts from.
        let index = pg.register_shard(url).await.with_context(|| format!("registering {shown}"))?;
        let text = std::fs::read_to_string(config_file)
            .with_context(|| format!("reading {}", config_file.display()))?;
        let mut doc: toml_edit::DocumentMut =
            text.parse().with_context(|| format!("parsing {}", config_file.display()))?;
        let store = doc.entry("store").or_insert(toml_edit::table());
        let list = store
            .as_table_like_mut()
            .context("[store] is not a table")?
            .entry("postgres_shards")
            .or_insert(toml_edit::value(toml_edit::Array::new()));
        list.as_array_mut().context("store.postgres_shards is not an array")?.push(url);
        let tmp = config_file.with_extension("toml.tmp");
        std::fs::write(&tmp, doc.to_string()).with_context(|| format!("writing {}", tmp.display()))?;
        std::fs::rename(&tmp, config_file).with_context(|| format!("replacing {}", config_file.display()))?;
        Ok(format!(
            "shard {index} added: {shown} ({} migrations applied, empty), registered in the placement catalog \
             (running nodes open it within a second) and appended to store.postgres_shards in {}.\n\
             Next: list it in the same position in every other node's configuration file (for their next \
             start), then run `likewise shards rebalance` to move buckets onto it.\n",
            applied.len(),
            config_file.display()
        ))
    }

    pub(super) async fn shards_rebalance(
        cfg: &Config,
        per_move: usize,
        plan_only: bool,
        progress: &mut dyn super::RebalanceProgress,
    ) -> anyhow::Result<String> {
        use likewise_scaleout::postgres::reshard::{MOVE_RETRIES, MoveOptions, plan};
        let pg = PgStore::connect(&pg_options(cfg, 4))?;
        pg.check_schema().await?;
        let opts = MoveOptions { defer_drop: true, ..MoveOptions::default() };
        if !plan_only {
            for r in pg.resume_moves(&opts).await.context("resuming interrupted moves")? {
                progress.moved(
                    0,
                    format!(
                        "resumed: {} buckets from shard {} to shard {}",
                        r.buckets.len(),
                        r.source,
                        r.target
                    ),
                );
            }
        }
        let p = pg.load_placement().await?;
        let moves = plan(&p, pg.shard_count(), per_move);
        let buckets: usize = moves.iter().map(|(g, _)| g.len()).sum();
        if plan_only {
            let mut out = format!(
                "{} moves of {buckets} buckets would even out {} shards\n",
                moves.len(),
                pg.shard_count()
            );
            for (group, to) in &moves {
                let from = p.shards_of_buckets()[group[0] as usize];
                out.push_str(&format!("  {} buckets from shard {from} to shard {to}\n", group.len()));
            }
            return Ok(out);
        }
        let (mut rows, mut longest) = (0u64, Duration::ZERO);
        progress.planned(moves.len(), buckets);
        for (k, (group, to)) in moves.iter().enumerate() {
            // A move that fails (a session lost, a drain that timed out) is resumed here, a few
            // times, before the run gives up.
            let mut retrying =
                |line: String| progress.moved(0, format!("move {}/{}: {line}", k + 1, moves.len()));
            let r = pg.move_buckets_resuming(group, *to, &opts, MOVE_RETRIES, &mut retrying).await.with_context(
                || {
                    format!(
                        "moving {} buckets to shard {to}, tried {} times (run `likewise shards rebalance` again \
                         to resume)",
                        group.len(),
                        MOVE_RETRIES + 1
                    )
                },
            )?;
            rows += r.rows;
            longest = longest.max(r.fenced_for);
            progress.moved(
                group.len(),
                format!(
                    "move {}/{}: {} buckets from shard {} to shard {}, {} rows ({} of them under the fence), \
                 writes to them waited {} ms",
                    k + 1,
                    moves.len(),
                    group.len(),
                    r.source,
                    r.target,
                    r.rows,
                    r.under_fence,
                    r.fenced_for.as_millis()
                ),
            );
        }
        // Every move switched; their rows leave the old shards once nodes read the catalog.
        pg.resume_moves(&opts).await.context("dropping moved rows from their old shards")?;
        let p = pg.load_placement().await?;
        let held: Vec<String> =
            (0..pg.shard_count()).map(|s| format!("shard {s}: {} buckets", p.buckets_on(s))).collect();
        Ok(format!(
            "rebalanced: {buckets} buckets in {} moves, {rows} rows copied, longest write fence {} ms; {}\n",
            moves.len(),
            longest.as_millis(),
            held.join(", ")
        ))
    }

    pub(super) async fn migrate(cfg: &Config) -> anyhow::Result<Vec<(usize, Vec<i32>)>> {
        for url in &cfg.store.postgres_shards {
            likewise_scaleout::postgres::migrate::create_database_if_missing(url)
                .await
                .with_context(|| format!("preparing {}", likewise_core::redact::redact(url)))?;
        }
        let pg = PgStore::connect(&pg_options(cfg, 2))?;
        pg.migrate().await.context("migrating")
    }
}
