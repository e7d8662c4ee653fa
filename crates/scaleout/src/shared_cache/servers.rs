//! Client-side sharding over several Redis servers (`cache.redis_urls`).
//!
//! A key goes to a server by its Redis Cluster hash slot: CRC16 of the key, or of its hash
//! tag (the part between the first `{` and the next `}`), modulo 16,384. The keys that one
//! command or script touches together share a hash tag, so they are always on one server,
//! and the same key layout would run unchanged on a Redis Cluster.
//!
//! Slots are assigned to servers by rendezvous hashing of (slot, position in the list):
//! appending a server to the list moves only the slots it wins, about 1/(n+1) of them, and
//! no slot moves between the servers already listed. Every node must list the same servers
//! in the same order. Nothing in Redis is the truth, so a slot that moves only costs misses:
//! its counters refill from PostgreSQL, and a viewer's own recent likes are answered by the
//! reverse index.
//!
//! A pipeline is split per server and the parts run concurrently, so one feed page still
//! costs one round trip per server it touches. With one server (the default) everything
//! goes to it in one pipeline, as before.
//!
//! A server that could not be reached is skipped for [`DOWN_FOR`]: its parts fail at once
//! (callers fall back to PostgreSQL, as when the only Redis is down) instead of each waiting
//! out the connection's reconnect attempts. The first part after that tries it again.

use redis::aio::ConnectionManager;
use redis::{Pipeline, RedisResult, Value};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// How long a server that could not be reached is skipped.
pub const DOWN_FOR: Duration = Duration::from_secs(1);

/// Hash slots, as in Redis Cluster.
pub const SLOTS: usize = 16_384;

/// The hash slot of `key` (Redis Cluster's rule, hash tags included).
pub fn slot(key: &str) -> u16 {
    let b = key.as_bytes();
    let tagged = b.iter().position(|c| *c == b'{').and_then(|open| {
        let close = b[open + 1..].iter().position(|c| *c == b'}')?;
        // An empty tag (`{}`) does not count: the whole key is hashed.
        (close > 0).then(|| &b[open + 1..open + 1 + close])
    });
    (crc16::State::<crc16::XMODEM>::calculate(tagged.unwrap_or(b)) as usize % SLOTS) as u16
}

/// A fixed 64-bit mix (splitmix64's finaliser): the same on every node and every build.
fn mix(mut x: u64) -> u64 {
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// Which of `servers` serves each slot (rendezvous hashing; see the module docs).
pub fn assign(servers: usize) -> Vec<u8> {
    assert!((1..=u8::MAX as usize).contains(&servers), "1 to 255 Redis servers");
    (0..SLOTS as u64)
        .map(|s| {
            (0..servers as u64)
                .max_by_key(|n| mix(s.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ mix(n + 1)))
                .unwrap_or(0) as u8
        })
        .collect()
}

/// The connections to the servers and the slot table.
#[derive(Clone)]
pub struct Servers {
    conns: Arc<Vec<ConnectionManager>>,
    owner: Arc<Vec<u8>>,
    /// Per server: until when (ms on `clock`) it is skipped.
    down_until: Arc<Vec<AtomicU64>>,
    clock: Arc<std::time::Instant>,
    /// Pipelines sent (one per server a call touches): round trips.
    round_trips: Arc<AtomicU64>,
}

impl Servers {
    /// `conns` in the order of the configuration.
    pub fn new(conns: Vec<ConnectionManager>) -> Self {
        let owner = assign(conns.len());
        let down_until = Arc::new((0..conns.len()).map(|_| AtomicU64::new(0)).collect());
        Servers {
            conns: Arc::new(conns),
            owner: Arc::new(owner),
            down_until,
            clock: Arc::new(std::time::Instant::now()),
            round_trips: Arc::default(),
        }
    }

    /// Pipelines sent so far, one per server a call touched: the round trips tests measure.
    pub fn round_trips(&self) -> u64 {
        self.round_trips.load(Ordering::Relaxed)
    }

    fn now_ms(&self) -> u64 {
        self.clock.elapsed().as_millis() as u64
    }

    /// Whether server `n` is being skipped (see the module docs).
    fn skipped(&self, n: usize) -> bool {
        self.now_ms() < self.down_until[n].load(Ordering::Relaxed)
    }

    /// Note how a call to server `n` went: one that could not reach it starts a skip.
    fn outcome<T>(&self, n: usize, r: &RedisResult<T>) {
        if let Err(e) = r
            && super::unreachable(e)
        {
            self.down_until[n].store(self.now_ms() + DOWN_FOR.as_millis() as u64, Ordering::Relaxed);
            metrics::counter!("likewise_redis_server_skips_total").increment(1);
        }
    }

    /// How many servers.
    pub fn len(&self) -> usize {
        self.conns.len()
    }

    /// Always false: a deployment has at least one server.
    pub fn is_empty(&self) -> bool {
        self.conns.is_empty()
    }

    /// The position of the server holding `key`.
    pub fn server_of(&self, key: &str) -> usize {
        if self.conns.len() == 1 { 0 } else { self.owner[slot(key) as usize] as usize }
    }

    /// The connection to the server holding `key` (tests; the service goes through
    /// [`Servers::pipe`], which skips a server that is down).
    pub fn conn_for(&self, key: &str) -> ConnectionManager {
        self.conns[self.server_of(key)].clone()
    }

    /// Every server's connection (a health check pings each).
    pub fn all(&self) -> Vec<ConnectionManager> {
        self.conns.as_ref().clone()
    }

    /// A pipeline whose commands go to their keys' servers.
    pub fn pipe(&self) -> RoutedPipe {
        RoutedPipe { servers: self.clone(), pipes: vec![None; self.conns.len()], order: Vec::new() }
    }
}

/// Commands grouped into one pipeline per server; [`RoutedPipe::query`] answers the
/// non-ignored ones in the order they were added.
pub struct RoutedPipe {
    servers: Servers,
    pipes: Vec<Option<(Pipeline, usize)>>,
    /// Per answered command: its server and its place among that server's answers.
    order: Vec<(usize, usize)>,
}

impl RoutedPipe {
    fn part(&mut self, key: &str) -> (usize, &mut (Pipeline, usize)) {
        let n = self.servers.server_of(key);
        (n, self.pipes[n].get_or_insert_with(|| (redis::pipe(), 0)))
    }

    /// Add `cmd`, routed by `key` (the key it touches; several keys must share a hash tag).
    pub fn add(&mut self, key: &str, cmd: redis::Cmd) -> &mut Self {
        let (n, (pipe, answered)) = self.part(key);
        pipe.add_command(cmd);
        let at = *answered;
        *answered += 1;
        self.order.push((n, at));
        self
    }

    /// Add `cmd` whose answer nobody reads.
    pub fn add_ignored(&mut self, key: &str, cmd: redis::Cmd) -> &mut Self {
        let (_, (pipe, _)) = self.part(key);
        pipe.add_command(cmd).ignore();
        self
    }

    /// Run every server's part concurrently; the answers in the order added. Any part's
    /// error is the whole call's.
    pub async fn query(&self) -> RedisResult<Vec<Value>> {
        self.query_loading(None).await
    }

    /// As [`RoutedPipe::query`], for parts that call `script` by its hash (`EVALSHA`): a
    /// server that does not know it (restarted, flushed) is sent it, and its part again.
    pub async fn query_loading(&self, script: Option<&redis::Script>) -> RedisResult<Vec<Value>> {
        let parts = futures::future::join_all(self.pipes.iter().enumerate().filter_map(|(n, p)| {
            let (pipe, _) = p.as_ref()?;
            let mut conn = self.servers.conns[n].clone();
            self.servers.round_trips.fetch_add(1, Ordering::Relaxed);
            Some(async move {
                if self.servers.skipped(n) {
                    return Err(redis::RedisError::from((
                        redis::ErrorKind::IoError,
                        "Redis server skipped: unreachable a moment ago",
                    )));
                }
                let mut r = pipe.query_async::<Vec<Value>>(&mut conn).await;
                if let (Some(s), true) =
                    (script, r.as_ref().is_err_and(|e| e.kind() == redis::ErrorKind::NoScriptError))
                {
                    r = match s.prepare_invoke().load_async(&mut conn).await {
                        Ok(_) => pipe.query_async::<Vec<Value>>(&mut conn).await,
                        Err(e) => Err(e),
                    };
                }
                self.servers.outcome(n, &r);
                r.map(|v| (n, v))
            })
        }))
        .await;
        let mut by_server: Vec<Vec<Value>> = vec![Vec::new(); self.pipes.len()];
        for p in parts {
            let (n, v) = p?;
            by_server[n] = v;
        }
        self.order
            .iter()
            .map(|(n, at)| {
                by_server[*n].get(*at).cloned().ok_or_else(|| {
                    redis::RedisError::from((
                        redis::ErrorKind::ResponseError,
                        "a pipeline answered too few replies",
                    ))
                })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_redis_clusters() {
        // Values Redis Cluster's CLUSTER KEYSLOT gives (its documentation's examples and
        // redis-cli against a cluster).
        assert_eq!(slot("foo"), 12182);
        assert_eq!(slot("somekey"), 11058);
        // CRC16/XMODEM's check value.
        assert_eq!(slot("123456789"), 0x31C3);
        // Hash tags: only the tag is hashed; an empty tag hashes the whole key.
        assert_eq!(slot("{user1000}.following"), slot("{user1000}.followers"));
        assert_eq!(slot("{user1000}.following"), slot("user1000"));
        assert_eq!(slot("foo{}{bar}"), slot("foo{}{bar}"));
        assert_ne!(slot("foo{}{bar}"), slot("bar"));
        assert_eq!(slot("foo{{bar}}zap"), slot("{bar"));
    }

    #[test]
    fn slots_spread_evenly_and_an_appended_server_takes_only_its_share() {
        let three = assign(3);
        let mut per = [0usize; 3];
        for s in &three {
            per[*s as usize] += 1;
        }
        for n in per {
            assert!((SLOTS / 3 * 9 / 10..=SLOTS / 3 * 11 / 10).contains(&n), "uneven: {per:?}");
        }
        let four = assign(4);
        let moved: Vec<usize> = (0..SLOTS).filter(|s| three[*s] != four[*s]).collect();
        // Every moved slot went to the new server; about a quarter moved.
        assert!(moved.iter().all(|s| four[*s] == 3));
        assert!((SLOTS / 4 * 8 / 10..=SLOTS / 4 * 12 / 10).contains(&moved.len()), "{}", moved.len());
        // Deterministic: every node computes the same table.
        assert_eq!(assign(3), three);
        assert!(assign(1).iter().all(|s| *s == 0));
    }
}
