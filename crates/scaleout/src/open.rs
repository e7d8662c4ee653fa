//! Connects the scale-out engines and bundles their ports: the PostgreSQL shards behind the
//! core ports, Redis in front of the counters, the own-likes record and the comment rate
//! limit, and the NATS event stream.

use crate::postgres::{PgOptions, PgStore};
use crate::shared_cache::{
    CachedCounters, CachedLikes, MarkingRanks, Redis, RedisHeldMarks, RedisOptions, RedisRateLimiter,
};
use crate::stream::bus::NatsBus;
use crate::stream::{JetStream, NoDirectLog, StreamOptions};
use async_trait::async_trait;
use likewise_core::StoreResult;
use likewise_core::ports::EventLog;
use likewise_engine::group_commit::{GroupCommitOptions, MAX_BATCH};
use likewise_engine::{Engine, Stores};
use std::sync::Arc;

const _: () =
    assert!(crate::postgres::outbox::MAX_EVENTS_PER_ROW >= MAX_BATCH, "a batch must fit an outbox row");

/// Everything a scaled-out process connects to.
#[derive(Debug, Clone)]
pub struct ScaleOutOptions {
    /// The shards.
    pub postgres: PgOptions,
    /// Redis.
    pub redis: RedisOptions,
    /// NATS JetStream.
    pub stream: StreamOptions,
    /// Write-path batching (lanes run in parallel here).
    pub group_commit: GroupCommitOptions,
}

/// The connected engines of a scaled-out process.
#[derive(Clone)]
pub struct Deployment {
    /// Every port, with Redis in front of the PostgreSQL ones.
    pub stores: Stores,
    /// The shards.
    pub pg: PgStore,
    /// The event stream.
    pub stream: JetStream,
    /// This process's end of the cluster bus (on the stream's NATS connection).
    pub bus: Arc<NatsBus>,
}

/// Connect PostgreSQL, check its schema, connect Redis and NATS, and bundle the ports.
pub async fn connect(opts: &ScaleOutOptions) -> StoreResult<Deployment> {
    let pg = PgStore::connect(&opts.postgres)?;
    pg.check_schema().await?;
    // Buckets move while nodes run (`reshard`): every node reads a new catalog version
    // within the interval (the task ends with the store).
    pg.watch_placement(crate::postgres::reshard::WATCH_INTERVAL);
    let redis = Redis::connect(&opts.redis).await?;
    let stream = JetStream::connect(&opts.stream).await?;
    // A random node ID: the bus skips a node's own messages by it.
    let bus = Arc::new(NatsBus::new(stream.client.clone(), stream.prefix.clone(), rand::random()));
    let mut stores = with_shared_cache(from_postgres(pg.clone(), opts.group_commit.clone()), redis.clone());
    stores.probes = vec![Arc::new(redis), Arc::new(stream.clone())];
    Ok(Deployment { stores, pg, stream, bus })
}

/// Every port of a PostgreSQL store behind a group committer. Its `events` port reads the
/// outbox directly when there is one shard (tests, tools); with several, events are read
/// from the stream.
pub fn from_postgres(store: PgStore, gc: GroupCommitOptions) -> Stores {
    let events: Arc<dyn EventLog> = if store.shard_count() == 1 {
        Arc::new(crate::postgres::outbox::OutboxLog::new(store.clone(), 0))
    } else {
        Arc::new(NoDirectLog)
    };
    Stores::from_engine(Arc::new(store), events, gc)
}

/// Put Redis in front of the counters and the viewer-likes lookups, keep what is known of
/// users' held comments there, and share the comment rate limit between nodes.
pub fn with_shared_cache(mut stores: Stores, redis: Redis) -> Stores {
    stores.counters =
        Arc::new(CachedCounters::new(stores.counters.clone(), stores.likes.clone(), redis.clone()));
    let likes = Arc::new(CachedLikes::new(stores.likes.clone(), redis.clone()));
    stores.likes = likes.clone();
    stores.own_likes = Some(likes);
    let marks: Arc<dyn likewise_core::ports::HeldMarks> =
        Arc::new(RedisHeldMarks::new(redis.clone(), redis.opts.own_likes_ttl));
    stores.ranks = Arc::new(MarkingRanks::new(stores.ranks.clone(), marks.clone()));
    stores.held_marks = Some(marks);
    stores.rate_limiter = Some(Arc::new(RedisRateLimiter::new(redis)));
    stores
}

#[async_trait]
impl Engine for PgStore {
    fn name(&self) -> &'static str {
        "postgres"
    }

    async fn settle(&self) -> StoreResult<()> {
        PgStore::settle(self).await
    }
}
