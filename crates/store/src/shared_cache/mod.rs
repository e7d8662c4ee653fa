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
//!   (written synchronously by the API node that took the write, into time-bucketed hashes
//!   sharded by viewer) and asks the reverse index only for the rest.
//! - [`RedisRateLimiter`]: per-user limits shared by every API node (GCRA in a Lua script).

mod counters;
mod likes;
mod rate;

pub use counters::CachedCounters;
pub use likes::CachedLikes;
pub use rate::RedisRateLimiter;

use likewise_core::{StoreError, StoreResult};
use redis::aio::ConnectionManager;
use std::time::Duration;

/// Redis settings.
#[derive(Debug, Clone)]
pub struct RedisOptions {
    /// `redis://host:port/db`.
    pub url: String,
    /// Key prefix (tests isolate runs with it).
    pub prefix: String,
    /// Replicas of each counter key.
    pub replicas: u32,
    /// TTL of counter entries.
    pub counter_ttl: Duration,
    /// How long a viewer's own writes are kept at least (the width of an own-likes bucket).
    pub own_likes_ttl: Duration,
    /// Hashes per own-likes bucket (viewers are spread over them by ID).
    pub own_likes_shards: u64,
}

impl Default for RedisOptions {
    fn default() -> Self {
        RedisOptions {
            url: "redis://127.0.0.1:6379/0".into(),
            prefix: "likewise".into(),
            replicas: 4,
            counter_ttl: Duration::from_secs(3600),
            own_likes_ttl: Duration::from_secs(600),
            own_likes_shards: 64,
        }
    }
}

/// Map a Redis error to a store error.
pub(crate) fn redis_err(e: impl std::fmt::Display) -> StoreError {
    StoreError::Engine(format!("redis: {e}"))
}

/// A managed connection (reconnects by itself) plus the options.
#[derive(Clone)]
pub struct Redis {
    /// The connection.
    pub conn: ConnectionManager,
    /// Options.
    pub opts: RedisOptions,
}

impl Redis {
    /// Connect (fails when Redis is unreachable: a node should not start half-configured).
    pub async fn connect(opts: &RedisOptions) -> StoreResult<Self> {
        let client = redis::Client::open(opts.url.as_str()).map_err(redis_err)?;
        let cfg = redis::aio::ConnectionManagerConfig::new()
            .set_connection_timeout(Duration::from_secs(3))
            .set_response_timeout(Duration::from_secs(2))
            .set_number_of_retries(3);
        let conn = ConnectionManager::new_with_config(client, cfg)
            .await
            .map_err(|e| StoreError::Engine(format!("cannot reach Redis at {}: {e}", opts.url)))?;
        Ok(Redis { conn, opts: opts.clone() })
    }

    /// `<prefix>:<rest>`.
    pub fn key(&self, rest: &str) -> String {
        format!("{}:{rest}", self.opts.prefix)
    }
}
