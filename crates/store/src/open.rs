//! Picks the storage engine named by the configuration and opens it: the one place that knows
//! which engines exist. An engine that is not compiled in fails loudly here.

use crate::embedded::{EmbeddedOptions, EmbeddedStore};
use crate::group_commit::{GroupCommitOptions, GroupCommitter};
use crate::postgres::{PgOptions, PgStore};
use likewise_core::ports::{
    CommentReader, CounterStore, EventLog, LikeReader, MetaStore, ModerationStore, NotificationStore,
    OwnLikes, SharedRateLimiter, ViewStore, WriteEngine,
};
use likewise_core::{StoreError, StoreResult};
use std::path::PathBuf;
use std::sync::Arc;

/// Which engine, and how to open it.
#[derive(Debug, Clone)]
pub struct StoreConfig {
    /// Engine name: `embedded` (the default).
    pub backend: String,
    /// Where the embedded engine keeps its files.
    pub data_dir: PathBuf,
    /// Embedded engine tuning.
    pub embedded: EmbeddedOptions,
    /// Write-path batching.
    pub group_commit: GroupCommitOptions,
    /// The PostgreSQL shards (backend `postgres`).
    pub postgres: PgOptions,
}

/// Every port of an opened engine, plus its write path.
#[derive(Clone)]
pub struct Stores {
    /// The group-commit write path for likes.
    pub writer: Arc<GroupCommitter>,
    /// The engine under the write path (conformance tests drive it directly).
    pub write_engine: Arc<dyn WriteEngine>,
    /// Comments.
    pub comments: Arc<dyn CommentReader>,
    /// Unique-viewer sketches.
    pub views: Arc<dyn ViewStore>,
    /// Notification inboxes.
    pub notifications: Arc<dyn NotificationStore>,
    /// Like rows and the reverse index.
    pub likes: Arc<dyn LikeReader>,
    /// The event log.
    pub events: Arc<dyn EventLog>,
    /// Counters and consumer offsets.
    pub counters: Arc<dyn CounterStore>,
    /// Posts, users, follows, settings.
    pub meta: Arc<dyn MetaStore>,
    /// Blocks, restricts, hidden words, pins, reports, the review queue and text fingerprints.
    pub moderation: Arc<dyn ModerationStore>,
    /// The embedded engine, when that is the one in use (for shutdown and disk metrics).
    pub embedded: Option<EmbeddedStore>,
    /// The PostgreSQL engine, when that is the one in use (relay, stream consumers, migrations).
    pub postgres: Option<PgStore>,
    /// Where API nodes record each viewer's own like writes for the other nodes (Redis).
    pub own_likes: Option<Arc<dyn OwnLikes>>,
    /// Rate limits shared by every API node (Redis); `None`: each process limits alone.
    pub rate_limiter: Option<Arc<dyn SharedRateLimiter>>,
}

impl Stores {
    /// Put Redis in front of the counters and the viewer-likes lookups.
    pub fn with_shared_cache(mut self, redis: crate::shared_cache::Redis) -> Self {
        use crate::shared_cache::{CachedCounters, CachedLikes};
        self.counters = Arc::new(CachedCounters::new(self.counters.clone(), redis.clone()));
        let likes = Arc::new(CachedLikes::new(self.likes.clone(), redis.clone()));
        self.likes = likes.clone();
        self.own_likes = Some(likes);
        self.rate_limiter = Some(Arc::new(crate::shared_cache::RedisRateLimiter::new(redis)));
        self
    }

    /// Make derived indexes that an engine maintains asynchronously (the PostgreSQL reverse
    /// index) reflect every write so far. Tests and tools only; a no-op for the embedded engine.
    pub async fn settle(&self) -> StoreResult<()> {
        match &self.postgres {
            Some(pg) => pg.settle().await,
            None => Ok(()),
        }
    }

    /// Stop the write path (draining and syncing queued writes) and make everything durable.
    pub fn close(&self) -> StoreResult<()> {
        self.writer.close();
        if let Some(e) = &self.embedded {
            e.persist()?;
        }
        Ok(())
    }
}

/// Open the configured engine.
pub fn open(cfg: &StoreConfig) -> StoreResult<Stores> {
    match cfg.backend.as_str() {
        "embedded" => {
            std::fs::create_dir_all(&cfg.data_dir)
                .map_err(|e| StoreError::Engine(format!("cannot create {}: {e}", cfg.data_dir.display())))?;
            let store = EmbeddedStore::open(&cfg.data_dir.join("store"), &cfg.embedded)?;
            Ok(from_embedded(store, cfg.group_commit.clone()))
        }
        "postgres" => Ok(from_postgres(PgStore::connect(&cfg.postgres)?, cfg.group_commit.clone())),
        other => Err(StoreError::Engine(format!(
            "unknown storage backend {other:?} (available: \"embedded\", \"postgres\")"
        ))),
    }
}

/// Every port served by one engine value, behind the group committer.
fn bundle<E>(engine: Arc<E>, events: Arc<dyn EventLog>, gc: GroupCommitOptions) -> Stores
where
    E: WriteEngine
        + CommentReader
        + ViewStore
        + NotificationStore
        + LikeReader
        + CounterStore
        + MetaStore
        + ModerationStore
        + 'static,
{
    Stores {
        writer: GroupCommitter::start(engine.clone(), gc),
        write_engine: engine.clone(),
        comments: engine.clone(),
        views: engine.clone(),
        notifications: engine.clone(),
        likes: engine.clone(),
        events,
        counters: engine.clone(),
        meta: engine.clone(),
        moderation: engine,
        embedded: None,
        postgres: None,
        own_likes: None,
        rate_limiter: None,
    }
}

/// Wrap an already opened embedded store.
pub fn from_embedded(store: EmbeddedStore, gc: GroupCommitOptions) -> Stores {
    let arc = Arc::new(store.clone());
    Stores { embedded: Some(store), ..bundle(arc.clone(), arc, gc) }
}

/// Wrap a connected PostgreSQL store. Its `events` port reads the outbox directly when there
/// is one shard; with several, events are read from the stream (`crate::stream`).
pub fn from_postgres(store: PgStore, gc: GroupCommitOptions) -> Stores {
    let events: Arc<dyn EventLog> = if store.shard_count() == 1 {
        Arc::new(crate::postgres::outbox::OutboxLog::new(store.clone(), 0))
    } else {
        Arc::new(crate::stream::NoDirectLog)
    };
    Stores { postgres: Some(store.clone()), ..bundle(Arc::new(store), events, gc) }
}
