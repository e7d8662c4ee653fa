//! Redis, the shared cache of a scaled-out deployment. Nothing in it is the truth: losing all
//! of it (FLUSHALL, a restart) loses no like, and every entry is refilled from PostgreSQL.
//!
//! Wrappers around the PostgreSQL ports, so the service code is the same on every engine:
//! - [`CachedCounters`]: counter reads hit Redis first. The aggregator writes each new absolute
//!   value after its PostgreSQL commit (HSET, overwriting); a reader that misses takes a
//!   short *lease* (SET NX PX) so only one node per key loads PostgreSQL and fills Redis with
//!   HSETNX (never overwriting a newer value the aggregator wrote meanwhile); the others wait
//!   briefly for the fill. A hot post's counters are replicated over `replicas` keys
//!   (`<prefix>:c:1:42#r3`), each read at random, so one viral post does not pin one Redis
//!   shard's CPU.
//! - [`CachedLikes`]: "has this viewer liked these?" reads the viewer's own recent writes
//!   (written synchronously by the API node that took the write, into time-bucketed sorted
//!   sets sharded by viewer), then the viewer's shared liked set, and asks the reverse index
//!   only to build that set (or for a viewer with more likes than it holds).
//! - [`RedisHeldMarks`]: per user, whether they have comments held (a feed page skips the
//!   reads of its viewer's held comments when not).
//! - [`RedisRateLimiter`]: per-user limits shared by every API node (GCRA in a Lua script).
//!
//! `connect` opens the connections: plaintext or TLS (`rediss://`), with an ACL user. With
//! several servers (`cache.redis_urls`) keys are spread over them by hash slot (`servers`).

mod connect;
mod counters;
mod held;
mod liked_filter;
mod likes;
mod rate;
pub mod servers;
#[cfg(test)]
mod test_redis;

pub use counters::CachedCounters;
pub use held::{MarkingRanks, RedisHeldMarks};
pub use likes::CachedLikes;
pub use rate::RedisRateLimiter;

use likewise_core::{StoreError, StoreResult};
use servers::Servers;
use std::path::PathBuf;
use std::time::Duration;

/// Redis settings.
#[derive(Clone)]
pub struct RedisOptions {
    /// `redis://host:port/db`, or `rediss://user:password@host:port/db` for TLS with an ACL user.
    pub url: String,
    /// Further servers (client-side sharding, `servers`): keys are spread over `url` and
    /// these by hash slot. Every node lists the same servers in the same order.
    pub shard_urls: Vec<String>,
    /// The CA (PEM) a `rediss://` server's certificate must chain to; `None`: the system's roots.
    pub ca_file: Option<PathBuf>,
    /// Key prefix (tests isolate runs with it).
    pub prefix: String,
    /// Replicas of each counter key.
    pub replicas: u32,
    /// TTL of counter entries.
    pub counter_ttl: Duration,
    /// How long a viewer's own writes are kept at least (the width of an own-likes bucket).
    pub own_likes_ttl: Duration,
    /// Keys (sorted sets) per own-likes bucket (viewers are spread over them by ID).
    pub own_likes_shards: u64,
    /// The most likes a viewer's shared liked set holds (`liked_filter.rs`); a viewer with
    /// more is looked up in the reverse index. 0: no sets.
    pub liked_filter_max: usize,
}

impl Default for RedisOptions {
    fn default() -> Self {
        RedisOptions {
            url: "redis://127.0.0.1:6379/0".into(),
            shard_urls: Vec::new(),
            ca_file: None,
            prefix: "likewise".into(),
            replicas: 4,
            counter_ttl: Duration::from_secs(3600),
            own_likes_ttl: Duration::from_secs(600),
            own_likes_shards: 16,
            liked_filter_max: 8_192,
        }
    }
}

impl std::fmt::Debug for RedisOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisOptions")
            .field("url", &crate::postgres::tls::redact(&self.url))
            .field(
                "shard_urls",
                &self.shard_urls.iter().map(|u| crate::postgres::tls::redact(u)).collect::<Vec<_>>(),
            )
            .field("ca_file", &self.ca_file)
            .field("prefix", &self.prefix)
            .field("replicas", &self.replicas)
            .field("counter_ttl", &self.counter_ttl)
            .field("own_likes_ttl", &self.own_likes_ttl)
            .field("own_likes_shards", &self.own_likes_shards)
            .field("liked_filter_max", &self.liked_filter_max)
            .finish()
    }
}

/// A connection that broke, timed out or was refused: the server is unreachable (a 503, and
/// a server skipped for a moment: `servers`).
pub(crate) fn unreachable(e: &redis::RedisError) -> bool {
    e.is_io_error() || e.is_connection_dropped() || e.is_connection_refusal() || e.is_timeout()
}

/// Map a Redis error to a store error.
pub(crate) fn redis_err(e: impl Into<Box<dyn std::error::Error + Send + Sync + 'static>>) -> StoreError {
    let e = e.into();
    if e.downcast_ref::<redis::RedisError>().is_some_and(unreachable) {
        StoreError::Unreachable { engine: "redis", source: e }
    } else {
        StoreError::backend("redis", e)
    }
}

/// Managed connections (each reconnects by itself) to the servers, plus the options.
#[derive(Clone)]
pub struct Redis {
    /// The servers, and which holds which key.
    pub servers: Servers,
    /// Options.
    pub opts: RedisOptions,
}

#[async_trait::async_trait]
impl likewise_engine::Probe for Redis {
    fn name(&self) -> &'static str {
        "cache"
    }

    /// Every server answers (each holds a part of the keys).
    async fn probe(&self) -> StoreResult<()> {
        let pings = self.servers.all().into_iter().map(|mut c| async move {
            redis::cmd("PING").query_async::<()>(&mut c).await.map_err(redis_err)
        });
        futures::future::try_join_all(pings).await.map(|_| ())
    }
}

impl Redis {
    /// Connect (fails when Redis is unreachable, refuses the credentials or is not trusted: a
    /// node should not start half-configured).
    pub async fn connect(opts: &RedisOptions) -> StoreResult<Self> {
        let mut conns = vec![connect::open(opts, &opts.url).await?];
        for url in &opts.shard_urls {
            conns.push(connect::open(opts, url).await?);
        }
        Ok(Redis { servers: Servers::new(conns), opts: opts.clone() })
    }

    /// `<prefix>:<rest>`.
    pub fn key(&self, rest: &str) -> String {
        format!("{}:{rest}", self.opts.prefix)
    }
}
