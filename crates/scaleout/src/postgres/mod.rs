//! The PostgreSQL engine: every port on N PostgreSQL databases (shards), for when one machine
//! is not enough.
//!
//! Routing (see `migrations/`): post-keyed rows (likes, comments, counters, outbox, post
//! metadata, pins, reports, views) live on `shard_of_post`; user-keyed rows (the reverse index,
//! profiles, follows, settings, blocks, restricts, hidden words, fingerprints, inboxes, held marks) on
//! `shard_of_user`. Both go through `placement`: IDs map to logical buckets, and the catalog
//! on shard 0 maps buckets to shards. A comment's ID carries its post's bucket.
//!
//! Writes go through the same group committer as the embedded engine: each batch is split by
//! shard and each shard's part is ONE transaction of multi-row statements (`write.rs`), so a
//! hot post costs one round trip per batch, not one per like. The like row and its outbox row
//! commit together; `INSERT ... ON CONFLICT DO NOTHING RETURNING` makes the state transition,
//! not the request, produce the event. The outbox relay (`likewise-workers`) publishes events to NATS
//! JetStream; consumers (counters, reverse index, notifications, ranker) read them there.
//!
//! Modules:
//! - `migrate`: versioned SQL migrations applied to every shard; `placement`: buckets, the
//!   catalog that places them, and how IDs (new and legacy) are routed; `reshard`: moving
//!   buckets between shards while the service runs.
//! - `write`: the write engine: each shard's part of a batch as one transaction (likes, and
//!   the comment operations `comments` applies, creates together in `creates`, their keys in
//!   `idempotency`); `tx`: that transaction's retry-or-fail errors; `writes`: the write
//!   path's own connections and the thread that drives them.
//! - `likes`, `counters`, `comments`: the hot read ports.
//! - `replicas`: read replicas: which reads may use a shard's streaming replica, its lag
//!   measured against the primary, and the fall back to the primary.
//! - `meta`, `moderation`, `views` (and `hourly_views`), `notifications`: the remaining ports.
//! - `status`: what each shard holds and how its replica keeps up (`likewise shards status`).
//! - `outbox`: the outbox as an event log (one shard; tests and `settle`) and the reverse-index
//!   writes.
//! - `cluster`: the deployment ports on PostgreSQL: leases (advisory locks), the outbox as the
//!   relay reads it, the reverse index as its writer fills it.
//! - `outbox_wakeups`: `NOTIFY` from the write transactions that add outbox rows, and the
//!   relay's `LISTEN`, so an idle relay waits instead of polling.
//! - `tls`: TLS to the shards (libpq's `sslmode` and `sslrootcert`, with rustls).
//! - `testing`: throwaway databases for tests.

/// `INSERT INTO liker_pages` of one page per (target, window) group of the like rows in `$src`
/// (a table or CTE name and an optional filter): the like insert's pages and the repair's
/// rebuild must group the same way. The window, `liked_at / 16`, is `likes::WINDOW_MS`.
macro_rules! insert_liker_pages_from {
    ($src:literal) => {
        concat!(
            "INSERT INTO liker_pages (kind, target, win, page, users, times)
             SELECT kind, target, liked_at / 16, nextval('liker_page_seq'),
                    array_agg(user_id ORDER BY liked_at, user_id),
                    array_agg(liked_at ORDER BY liked_at, user_id)
             FROM ",
            $src,
            " GROUP BY kind, target, liked_at / 16"
        )
    };
}

mod cluster;
mod comments;
mod counters;
mod creates;
mod hourly_views;
mod idempotency;
mod integrity;
mod likes;
mod meta;
pub mod migrate;
mod moderation;
mod notifications;
pub mod outbox;
mod outbox_wakeups;
pub mod placement;
mod ranks;
mod replicas;
pub mod reshard;
pub mod rewrite;
mod snapshots;
mod status;
#[cfg(test)]
mod test_ops;
pub mod testing;
pub mod tls;
mod tx;
mod views;
mod write;
mod writes;

pub use placement::{MAX_SHARDS, Placement};
pub use replicas::ReplicaStatus;
pub use status::{ReplicaReport, ShardReport, TableSize};

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod};
use likewise_core::ids::{CommentId, PostId, UserId};
use likewise_core::{StoreError, StoreResult};
use std::sync::Arc;
use std::time::Duration;

/// How to reach the shards.
#[derive(Debug, Clone)]
pub struct PgOptions {
    /// One connection URL per shard, in shard order (the order is part of the data layout).
    pub shards: Vec<String>,
    /// Connections per shard pool.
    pub pool_size: usize,
    /// Consumers' offsets count JetStream stream sequences (the production setup, where the
    /// relay records each outbox row's stream sequence) rather than outbox sequences (one
    /// shard read directly: tests and tools).
    pub stream_positions: bool,
    /// A streaming replica's URL per shard, aligned with `shards`: `""` (or a list shorter
    /// than `shards`) means that shard has none. Only reads that may lag use it (`replicas`).
    pub replicas: Vec<String>,
    /// How far behind its primary a replica may be, as measured, and still serve reads.
    pub replica_max_lag: Duration,
}

impl Default for PgOptions {
    fn default() -> Self {
        PgOptions {
            shards: Vec::new(),
            pool_size: 16,
            stream_positions: false,
            replicas: Vec::new(),
            replica_max_lag: Duration::from_millis(1000),
        }
    }
}

/// The PostgreSQL store. Cheap to clone.
#[derive(Clone)]
pub struct PgStore {
    inner: Arc<Inner>,
}

struct Inner {
    /// Each shard's primary pool: the configured shards, then those registered in the
    /// catalog since (`load_placement` opens them; a list only ever grows).
    pools: parking_lot::RwLock<Arc<Vec<Pool>>>,
    /// Each shard's URL without its password, as `pools`, and whether it was configured
    /// (`store.postgres_shards`) rather than registered in the catalog: for messages.
    shown: parking_lot::RwLock<Vec<(String, bool)>>,
    /// Each shard's URL as given, as `pools`: for connections outside the pool (the relay's
    /// wake-up listener).
    urls: parking_lot::RwLock<Vec<String>>,
    /// When this process last announced new outbox rows on each shard (`outbox_wakeups`).
    announced: outbox_wakeups::Announced,
    /// The buckets a move was last seen fencing (`write.rs`): their writes are handed back
    /// to the group committer without a transaction tried on the source.
    fenced: write::FencedBuckets,
    /// The size of a pool opened for a registered shard.
    pool_size: usize,
    /// Where posts and users live (the catalog as last read; see `placement`).
    placement: parking_lot::RwLock<Arc<Placement>>,
    /// Each shard's read replica, if it has one.
    replicas: replicas::Replicas,
    /// The write path's own connections and the runtime that drives them (`writes`).
    writes: writes::Writes,
    stream_positions: bool,
    /// Connections checked out of the primaries' pools (each serves one transaction or a
    /// few pipelined statements): what a read path's PostgreSQL cost is measured in.
    checkouts: std::sync::atomic::AtomicU64,
    /// The session holding this process's partition leases and its membership (`cluster`).
    parts: Arc<cluster::PartSession>,
}

/// Map a driver or pool error to a store error.
pub(crate) fn pg_err(e: impl Into<Box<dyn std::error::Error + Send + Sync + 'static>>) -> StoreError {
    let e = e.into();
    if e.downcast_ref::<tokio_postgres::Error>()
        .and_then(|p| p.code())
        .is_some_and(|c| c.code() == reshard::MOVED)
    {
        // A write to a bucket that moved (`reshard`): retryable once the catalog is read again,
        // which every node does within a second.
        return StoreError::Overloaded { engine: "postgres", source: e };
    }
    if unreachable(&*e) {
        StoreError::Unreachable { engine: "postgres", source: e }
    } else {
        StoreError::backend("postgres", e)
    }
}

/// Whether `e` says the server could not be reached or the connection broke (as opposed to
/// a statement the server refused): a closed connection, an I/O error, a connection or
/// shutdown SQLSTATE (classes 08 and 57P), or a pool that could not open a connection.
fn unreachable(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut next = Some(e);
    while let Some(e) = next {
        if let Some(pg) = e.downcast_ref::<tokio_postgres::Error>() {
            let code = pg.code().map(|c| c.code()).unwrap_or("");
            if pg.is_closed() || code.starts_with("08") || code.starts_with("57P") {
                return true;
            }
        }
        if e.is::<std::io::Error>() {
            return true;
        }
        if let Some(p) = e.downcast_ref::<deadpool_postgres::PoolError>()
            && matches!(p, deadpool_postgres::PoolError::Backend(_) | deadpool_postgres::PoolError::Closed)
        {
            return true;
        }
        next = e.source();
    }
    false
}

/// Why a connection could not be had, in one line: the server's own words (`FATAL: password
/// authentication failed for user "x"`), the system's (`Connection refused`), or a timeout
/// (`waited` seconds). Each cause once: the driver's and the pool's messages each repeat
/// their source ("db error: db error: FATAL ...").
pub(crate) fn cause(e: &deadpool_postgres::PoolError, waited: u64) -> String {
    use deadpool_postgres::PoolError;
    match e {
        PoolError::Timeout(_) => {
            format!("no answer within {waited} s (is a PostgreSQL server listening there, and reachable?)")
        }
        PoolError::Backend(pg) => pg_cause(pg),
        other => other.to_string(),
    }
}

/// A driver error in one line: the server's words (`FATAL: ...`), else the driver's with
/// each source once (`error connecting to server: Connection refused (os error 111)`).
pub(crate) fn pg_cause(pg: &tokio_postgres::Error) -> String {
    if let Some(db) = pg.as_db_error() {
        return format!("{}: {}", db.severity(), db.message());
    }
    let mut text = pg.to_string();
    let mut next = std::error::Error::source(pg);
    while let Some(s) = next {
        let more = s.to_string();
        if !text.contains(&more) {
            text = format!("{text}: {more}");
        }
        next = s.source();
    }
    text
}

/// A connection of `pool`: every connection busy for the pool's whole wait is overload (a
/// 503), not a fault.
async fn checkout(pool: &Pool) -> StoreResult<deadpool_postgres::Object> {
    pool.get().await.map_err(|e| match e {
        deadpool_postgres::PoolError::Timeout(_) => {
            metrics::counter!("likewise_pg_pool_timeouts_total").increment(1);
            StoreError::Overloaded { engine: "postgres", source: e.into() }
        }
        e => pg_err(e),
    })
}

/// How long a pool waits for a free connection and for a new one to open.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PoolWaits {
    wait: Duration,
    create: Duration,
}

impl PoolWaits {
    /// A primary: every connection busy for 10 s is overload.
    const PRIMARY: PoolWaits = PoolWaits { wait: Duration::from_secs(10), create: Duration::from_secs(5) };
    /// A replica: a read does not wait long for it, the primary can answer instead.
    const REPLICA: PoolWaits = PoolWaits { wait: Duration::from_secs(1), create: Duration::from_secs(2) };
}

/// A pool of connections to one database (a shard's primary or its replica), opened lazily.
pub(crate) fn pool(url: &str, size: usize, waits: PoolWaits) -> StoreResult<Pool> {
    // TLS as the URL's `sslmode` and `sslrootcert` say (`tls.rs`); errors never show the
    // password.
    let tls::Connect { config: mut cfg, tls, .. } = tls::connect(url).map_err(StoreError::Engine)?;
    // Hot statements are prepared once per connection (`prepare_cached`: no parse and no
    // extra round trip per batch), but still planned per execution: a generic plan made while
    // a table is small (a new shard) would keep a hash join over the whole table as the table
    // grows.
    //
    // A transaction left open by a node that was cut off mid-way (its commit never arrived)
    // would hold its row locks, such as a consumer's offset row, until the server noticed: the
    // server ends it after 30 s idle.
    const OURS: &str = "-c plan_cache_mode=force_custom_plan -c idle_in_transaction_session_timeout=30000";
    let options = match cfg.get_options() {
        Some(o) if !o.is_empty() => format!("{o} {OURS}"),
        _ => OURS.to_string(),
    };
    cfg.options(&options);
    let mgr = Manager::from_config(cfg, tls, ManagerConfig { recycling_method: RecyclingMethod::Fast });
    Pool::builder(mgr)
        .max_size(size.max(2))
        .runtime(deadpool_postgres::Runtime::Tokio1)
        .wait_timeout(Some(waits.wait))
        .create_timeout(Some(waits.create))
        .build()
        .map_err(pg_err)
}

impl PgStore {
    /// Connect to every shard (lazily: connections open on first use). Must be called inside
    /// a Tokio runtime.
    pub fn connect(opts: &PgOptions) -> StoreResult<Self> {
        if opts.shards.is_empty() || opts.shards.len() > MAX_SHARDS {
            return Err(StoreError::Engine(format!(
                "store.postgres_shards must list 1 to {MAX_SHARDS} databases (got {})",
                opts.shards.len()
            )));
        }
        tokio::runtime::Handle::try_current()
            .map_err(|_| StoreError::Engine("the PostgreSQL store needs a Tokio runtime".into()))?;
        let mut pools = Vec::with_capacity(opts.shards.len());
        for url in &opts.shards {
            pools.push(pool(url, opts.pool_size, PoolWaits::PRIMARY)?);
        }
        // Each replica's lag tracker starts here and ends once the store is dropped.
        let replicas = replicas::Replicas::connect(opts)?;
        Ok(PgStore {
            inner: Arc::new(Inner {
                placement: parking_lot::RwLock::new(Arc::new(Placement::before_catalog(pools.len()))),
                pools: parking_lot::RwLock::new(Arc::new(pools)),
                shown: parking_lot::RwLock::new(opts.shards.iter().map(|u| (tls::redact(u), true)).collect()),
                urls: parking_lot::RwLock::new(opts.shards.clone()),
                announced: Default::default(),
                fenced: Default::default(),
                pool_size: opts.pool_size,
                replicas,
                writes: writes::Writes::new(opts.pool_size),
                stream_positions: opts.stream_positions,
                checkouts: std::sync::atomic::AtomicU64::new(0),
                parts: Default::default(),
            }),
        })
    }

    /// Whether consumer offsets are stream sequences (see [`PgOptions::stream_positions`]).
    pub fn stream_positions(&self) -> bool {
        self.inner.stream_positions
    }

    /// Number of shards.
    pub fn shard_count(&self) -> usize {
        self.inner.pools.read().len()
    }

    /// Connect (as [`PgStore::connect`]) and read the placement catalog.
    pub async fn open(opts: &PgOptions) -> StoreResult<Self> {
        let pg = Self::connect(opts)?;
        pg.load_placement().await?;
        Ok(pg)
    }

    /// The placement in use.
    pub fn placement(&self) -> Arc<Placement> {
        self.inner.placement.read().clone()
    }

    /// Read the placement catalog from shard 0 and use it. Before migration 15 (no catalog
    /// yet) the store keeps routing the way the schema's data was written: `id % shards`.
    pub async fn load_placement(&self) -> StoreResult<Arc<Placement>> {
        let c = self.conn(0).await?;
        self.open_registered(&c).await?;
        let loaded = placement::load(&c, self.shard_count()).await?;
        let p = Arc::new(loaded.unwrap_or_else(|| Placement::before_catalog(self.shard_count())));
        let before = std::mem::replace(&mut *self.inner.placement.write(), p.clone());
        if before.version != p.version {
            tracing::info!(version = p.version, was = before.version, "placement catalog read");
        }
        Ok(p)
    }

    /// Open the shards registered in the catalog (`likewise shards add`) beyond those open.
    async fn open_registered(&self, c0: &tokio_postgres::Client) -> StoreResult<()> {
        let rows = match c0.query("SELECT shard, url FROM placement_shards ORDER BY shard", &[]).await {
            Ok(rows) => rows,
            // Before migration 17: no shard is registered.
            Err(e) if e.code() == Some(&tokio_postgres::error::SqlState::UNDEFINED_TABLE) => return Ok(()),
            Err(e) => return Err(pg_err(e)),
        };
        for r in rows {
            let (shard, url): (i32, String) = (r.get(0), r.get(1));
            let known = self.shard_count();
            if (shard as usize) < known {
                continue;
            }
            if shard as usize != known || known >= MAX_SHARDS {
                return Err(StoreError::Corrupt {
                    keyspace: "placement_shards",
                    detail: format!("shard {shard} is registered, but only {known} shards come before it"),
                });
            }
            let added = pool(&url, self.inner.pool_size, PoolWaits::PRIMARY)?;
            let mut pools = self.inner.pools.write();
            if pools.len() == known {
                let mut grown = Vec::clone(&pools);
                grown.push(added);
                *pools = Arc::new(grown);
                self.inner.shown.write().push((tls::redact(&url), false));
                self.inner.urls.write().push(url.clone());
                tracing::info!(shard, url = %tls::redact(&url), "opened a shard registered in the catalog");
            }
        }
        Ok(())
    }

    /// Read the catalog again only if its version moved on (one row, not the 4,096 of the
    /// map): what the write path does after a write was refused as moved, and the watcher.
    pub async fn refresh_placement(&self) -> StoreResult<Arc<Placement>> {
        let seen = self.placement();
        let c = self.conn(0).await?;
        let now: Option<i64> = match c.query_opt("SELECT version FROM placement_catalog", &[]).await {
            Ok(row) => row.map(|r| r.get(0)),
            // Before migration 15: nothing to refresh.
            Err(e) if e.code() == Some(&tokio_postgres::error::SqlState::UNDEFINED_TABLE) => None,
            Err(e) => return Err(pg_err(e)),
        };
        drop(c);
        if now.is_some_and(|v| v != seen.version) { self.load_placement().await } else { Ok(seen) }
    }

    /// The shard holding a post's rows.
    pub fn shard_of_post(&self, post: PostId) -> usize {
        self.inner.placement.read().shard_of_post(post)
    }

    /// The shard holding a user's rows.
    pub fn shard_of_user(&self, user: UserId) -> usize {
        self.inner.placement.read().shard_of_user(user)
    }

    /// The shard holding a comment (its post's shard; the ID carries the post's bucket).
    pub fn shard_of_comment(&self, id: CommentId) -> usize {
        self.inner.placement.read().shard_of_comment(id)
    }

    /// A shard's primary pool (for a connection of its own kind, such as a lease's).
    pub(crate) fn pool_of(&self, shard: usize) -> StoreResult<Pool> {
        self.inner.pools.read().get(shard).cloned().ok_or_else(|| {
            StoreError::Engine(format!("shard {shard} is neither configured nor registered in the catalog"))
        })
    }

    /// How many connections have been checked out of the primaries' pools ([`PgStore::conn`]):
    /// tests measure a read path's PostgreSQL round trips with it.
    pub fn checkouts(&self) -> u64 {
        self.inner.checkouts.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// A pooled connection to a shard.
    pub(crate) async fn conn(&self, shard: usize) -> StoreResult<deadpool_postgres::Object> {
        self.inner.checkouts.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        checkout(&self.pool_of(shard)?).await
    }

    /// A connection of the write path to a shard (`writes`): a group-commit lane's
    /// transaction, and what it writes after its commit.
    pub(crate) async fn write_conn(&self, shard: usize) -> StoreResult<deadpool_postgres::Object> {
        let pool = {
            let urls = self.inner.urls.read();
            self.inner.writes.pool(shard, &urls)?
        };
        checkout(&pool).await
    }

    /// Run `f` from a group-commit lane, its connections driven by the write path's own
    /// runtime (`writes`).
    pub(crate) fn block_on_writes<F: std::future::Future>(&self, f: F) -> StoreResult<F::Output> {
        self.inner.writes.block_on(f)
    }

    /// Group `items` by shard: (shard, indices into `items`), shards ascending.
    pub(crate) fn group<T>(&self, items: &[T], shard: impl Fn(&T) -> usize) -> Vec<(usize, Vec<usize>)> {
        let mut by: Vec<Vec<usize>> = vec![Vec::new(); self.shard_count()];
        for (i, it) in items.iter().enumerate() {
            by[shard(it)].push(i);
        }
        by.into_iter().enumerate().filter(|(_, v)| !v.is_empty()).collect()
    }

    /// Apply the migrations `shard` is missing (a shard joining a deployment: the catalog
    /// stays on shard 0); returns the versions applied.
    pub async fn migrate_shard(&self, shard: usize) -> StoreResult<Vec<i32>> {
        let mut c = self.conn(shard).await?;
        migrate::apply(&mut c).await
    }

    /// Apply the migrations every shard is missing, then create the placement catalog if
    /// there is none yet (it needs every shard migrated: it records their highest IDs).
    pub async fn migrate(&self) -> StoreResult<Vec<(usize, Vec<i32>)>> {
        let mut out = Vec::new();
        for shard in 0..self.shard_count() {
            let mut c = self.conn(shard).await?;
            out.push((shard, migrate::apply(&mut c).await?));
        }
        // Migration 26's layouts for the tables of populated shards, online.
        for shard in 0..self.shard_count() {
            let mut c = self.conn(shard).await?;
            for r in rewrite::rewrite(&mut c, rewrite::BATCH).await? {
                tracing::info!(shard, table = r.table, rows = r.copied, "table rewritten in its new layout");
            }
        }
        placement::create_catalog(self).await?;
        self.load_placement().await?;
        Ok(out)
    }

    /// A connection to `shard` at start-up: a failure says, in one line, which shard (its URL
    /// without the password), which setting names it, and why.
    async fn startup_conn(&self, shard: usize) -> StoreResult<deadpool_postgres::Object> {
        self.conn_or_cause(shard).await.map_err(|why| {
            let (url, configured) = self.inner.shown.read().get(shard).cloned().unwrap_or_default();
            let setting = if configured {
                "store.postgres_shards"
            } else {
                "the placement catalog (`likewise shards add`)"
            };
            StoreError::Engine(format!("{setting}: shard {shard} ({url}): {why}"))
        })
    }

    /// A connection to `shard`'s primary, or why there is none, in one line ([`cause`]).
    pub(crate) async fn conn_or_cause(&self, shard: usize) -> Result<deadpool_postgres::Object, String> {
        let pool = self.pool_of(shard).map_err(|e| e.to_string())?;
        pool.get().await.map_err(|e| cause(&e, pool.timeouts().create.map_or(0, |d| d.as_secs())))
    }

    /// Fail unless every shard has every migration (a node never runs on an old schema).
    pub async fn check_schema(&self) -> StoreResult<()> {
        for shard in 0..self.shard_count() {
            let c = self.startup_conn(shard).await?;
            let missing = migrate::missing(&c).await?;
            if !missing.is_empty() {
                return Err(StoreError::Engine(format!(
                    "shard {shard} lacks migrations {missing:?}: run `likewise migrate`"
                )));
            }
        }
        let p = self.load_placement().await?;
        if !p.has_catalog() {
            return Err(StoreError::Engine(
                "shard 0 has no placement catalog yet: run `likewise migrate`".into(),
            ));
        }
        Ok(())
    }
}

/// Decode an i64 column into a u64 ID.
pub(crate) fn u(v: i64) -> u64 {
    v as u64
}

/// Encode a u64 ID as an i64 column (IDs are stored bit-for-bit).
pub(crate) fn i(v: u64) -> i64 {
    v as i64
}

#[cfg(test)]
mod tests {
    use super::testing::TestShards;

    // One shard: the suite reads the event log, and only one shard's outbox is a total order
    // (multi-shard routing is covered by the scale-out tests).
    async fn open() -> (likewise_engine::Stores, TestShards) {
        let t = TestShards::create(1).await;
        let stores = t.stores().await;
        (stores, t)
    }

    likewise_engine::conformance_suite!(open().await);

    /// Statements are prepared once per connection; their plans must still follow the tables'
    /// sizes (see `connect`).
    #[tokio::test]
    async fn connections_plan_every_execution() {
        let t = TestShards::create(1).await;
        let c = t.store().await.conn(0).await.expect("conn");
        let mode: String = c.query_one("SHOW plan_cache_mode", &[]).await.expect("show").get(0);
        assert_eq!(mode, "force_custom_plan");
    }
}
