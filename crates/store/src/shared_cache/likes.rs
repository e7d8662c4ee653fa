//! Viewer likes through Redis (see the module docs of `shared_cache`).
//!
//! A viewer's own writes are kept for read-your-writes until the reverse index has them. They
//! are stored in **time buckets**, not one hash per viewer: the bucket of width `own_likes_ttl`
//! that the write falls in, split into `own_likes_shards` hashes by viewer
//! (`<prefix>:ol:<bucket>:<shard>`, field `<user>:<kind>:<id>`, value `1` or `0`).
//!
//! Why: a hash per viewer costs every like a new key, an `HSET` and an `EXPIRE` of its own; in
//! a like storm that was 7 us of the machine's CPU per like, a third of the whole hot path on
//! this machine (`docs/benchmarks.md`, session 15). Buckets turn a pipeline of thousands of
//! records into one `HSET` and one `PEXPIREAT` per shard. A viewer's fields stay on one key
//! per bucket, so a read is one `HMGET` per bucket looked at.
//!
//! Rules (the clocks of API nodes may differ by up to `skew`, an eighth of the bucket width
//! and at most 5 s):
//! - a read looks at its bucket and the one before, newest first, and also at the next one in
//!   the last `skew` of its bucket (a node whose clock runs ahead may have written there);
//!   the newest bucket that has the field wins. A write stays visible for at least one bucket
//!   width;
//! - a write in the last `skew` of its bucket also deletes its fields from the next bucket,
//!   so an older write made there by a node whose clock runs ahead cannot shadow it;
//! - bucket `b`'s keys expire at `(b + 2) * width + 3 * skew`; a node that writes between
//!   `2 * skew` and `3 * skew` into bucket `b + 2` first `UNLINK`s them, so Redis frees a big
//!   hash in the background instead of blocking on its expiry. No reader needs them then.

use super::Redis;
use async_trait::async_trait;
use likewise_core::ids::UserId;
use likewise_core::like::{Target, TargetKind};
use likewise_core::ports::{LikeReader, Liker, OwnLikes};
use likewise_core::{StoreError, StoreResult};
use std::collections::HashMap;
use std::sync::Arc;
use tokio::sync::{mpsc, oneshot};

/// Milliseconds since the Unix epoch (a field so tests can run several clocks).
type Clock = Arc<dyn Fn() -> u64 + Send + Sync>;

/// A [`LikeReader`] that answers from the viewer's own recent writes first, and records them.
pub struct CachedLikes {
    inner: Arc<dyn LikeReader>,
    redis: Redis,
    layout: Layout,
    clock: Clock,
    writes: mpsc::UnboundedSender<OwnWrite>,
}

impl CachedLikes {
    /// Wrap `inner` (starts the own-likes writer task: call inside a Tokio runtime).
    pub fn new(inner: Arc<dyn LikeReader>, redis: Redis) -> Self {
        Self::with_clock(inner, redis, Arc::new(crate::now_ms))
    }

    fn with_clock(inner: Arc<dyn LikeReader>, redis: Redis, clock: Clock) -> Self {
        let layout = Layout::new(&redis);
        let (writes, rx) = mpsc::unbounded_channel();
        tokio::spawn(write_loop(redis.clone(), layout.clone(), clock.clone(), rx));
        CachedLikes { inner, redis, layout, clock, writes }
    }
}

/// Where own writes live: bucket and shard keys, and the clock rules of the module docs.
#[derive(Clone)]
struct Layout {
    prefix: String,
    width: u64,
    skew: u64,
    shards: u64,
}

impl Layout {
    fn new(redis: &Redis) -> Self {
        let width = (redis.opts.own_likes_ttl.as_millis() as u64).max(8);
        Layout {
            prefix: redis.key("ol"),
            width,
            skew: (width / 8).min(5_000),
            shards: redis.opts.own_likes_shards.max(1),
        }
    }

    fn bucket(&self, now: u64) -> u64 {
        now / self.width
    }

    /// Near the end of its bucket: a clock up to `skew` ahead is already in the next one.
    fn near_end(&self, now: u64) -> bool {
        now + self.skew >= (self.bucket(now) + 1) * self.width
    }

    fn shard(&self, user: UserId) -> u64 {
        // Multiplicative hash: IDs that share their low bits still spread.
        (user.0.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32) % self.shards
    }

    fn key(&self, bucket: u64, shard: u64) -> String {
        format!("{}:{bucket}:{shard}", self.prefix)
    }

    fn expires_at(&self, bucket: u64) -> u64 {
        (bucket + 2) * self.width + 3 * self.skew
    }

    /// The buckets a read at `now` looks in, newest first.
    fn read_buckets(&self, now: u64) -> Vec<u64> {
        let b = self.bucket(now);
        let mut out = Vec::with_capacity(3);
        if self.near_end(now) {
            out.push(b + 1);
        }
        out.push(b);
        if b > 0 {
            out.push(b - 1);
        }
        out
    }

    /// The bucket whose keys a write at `now` unlinks, if any.
    fn unlinkable(&self, now: u64) -> Option<u64> {
        let b = self.bucket(now);
        let into = now - b * self.width;
        (b >= 2 && into >= 2 * self.skew && into < 3 * self.skew).then(|| b - 2)
    }
}

fn field(user: UserId, target: Target) -> String {
    format!("{}:{}:{}", user.0, target.kind.code(), target.id)
}

#[async_trait]
impl LikeReader for CachedLikes {
    async fn liked_among(&self, user: UserId, kind: TargetKind, ids: &[u64]) -> StoreResult<Vec<bool>> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let fields: Vec<String> = ids.iter().map(|id| field(user, Target { kind, id: *id })).collect();
        let shard = self.layout.shard(user);
        let mut pipe = redis::pipe();
        for b in self.layout.read_buckets((self.clock)()) {
            pipe.cmd("HMGET").arg(self.layout.key(b, shard)).arg(&fields);
        }
        let mut conn = self.redis.conn.clone();
        let per_bucket: Vec<Vec<Option<String>>> = match pipe.query_async(&mut conn).await {
            Ok(v) => v,
            Err(e) => {
                tracing::warn!(error = %e, "own-likes read failed; asking the reverse index");
                metrics::counter!("likewise_shared_cache_errors_total").increment(1);
                Vec::new()
            }
        };
        // The newest bucket holding the field has the viewer's last write.
        let own: Vec<Option<bool>> = (0..ids.len())
            .map(|i| per_bucket.iter().find_map(|b| b.get(i).cloned().flatten()).map(|v| v == "1"))
            .collect();
        let ask: Vec<u64> = ids.iter().zip(&own).filter(|(_, o)| o.is_none()).map(|(id, _)| *id).collect();
        let looked =
            if ask.is_empty() { Vec::new() } else { self.inner.liked_among(user, kind, &ask).await? };
        let mut looked = looked.into_iter();
        Ok(own.into_iter().map(|o| o.unwrap_or_else(|| looked.next().unwrap_or(false))).collect())
    }

    async fn liked_ids(&self, user: UserId, kind: TargetKind, limit: usize) -> StoreResult<Vec<u64>> {
        self.inner.liked_ids(user, kind, limit).await
    }

    async fn likers(&self, target: Target, after: Option<Liker>, limit: usize) -> StoreResult<Vec<Liker>> {
        self.inner.likers(target, after, limit).await
    }
}

#[async_trait]
impl OwnLikes for CachedLikes {
    async fn record(&self, user: UserId, target: Target, liked: bool) -> StoreResult<()> {
        let (reply, done) = oneshot::channel();
        self.writes.send(OwnWrite { user, target, liked, reply }).map_err(|_| StoreError::Closed)?;
        done.await.map_err(|_| StoreError::Closed)?
    }
}

/// One viewer's write waiting for the next pipeline.
struct OwnWrite {
    user: UserId,
    target: Target,
    liked: bool,
    reply: oneshot::Sender<StoreResult<()>>,
}

/// Most writes per pipeline.
const MAX_PIPELINE: usize = 4_096;

/// Write every queued own-like record in ONE pipeline (per shard of the current bucket: one
/// `HSET` of all its fields and one `PEXPIREAT`), then answer each caller.
async fn write_loop(redis: Redis, layout: Layout, clock: Clock, mut rx: mpsc::UnboundedReceiver<OwnWrite>) {
    let mut unlinked = None;
    while let Some(first) = rx.recv().await {
        let mut batch = vec![first];
        while batch.len() < MAX_PIPELINE {
            match rx.try_recv() {
                Ok(w) => batch.push(w),
                Err(_) => break,
            }
        }
        let now = clock();
        let bucket = layout.bucket(now);
        let mut by_shard: HashMap<u64, Vec<&OwnWrite>> = HashMap::new();
        for w in &batch {
            by_shard.entry(layout.shard(w.user)).or_default().push(w);
        }
        let near_end = layout.near_end(now);
        let mut pipe = redis::pipe();
        for (shard, writes) in &by_shard {
            let key = layout.key(bucket, *shard);
            let fields: Vec<String> = writes.iter().map(|w| field(w.user, w.target)).collect();
            let mut hset = redis::cmd("HSET");
            hset.arg(&key);
            for (f, w) in fields.iter().zip(writes) {
                hset.arg(f).arg(if w.liked { "1" } else { "0" });
            }
            pipe.add_command(hset).ignore();
            pipe.cmd("PEXPIREAT").arg(&key).arg(layout.expires_at(bucket)).ignore();
            if near_end {
                pipe.cmd("HDEL").arg(layout.key(bucket + 1, *shard)).arg(&fields).ignore();
            }
        }
        if let Some(old) = layout.unlinkable(now).filter(|old| unlinked != Some(*old)) {
            // One key per command: keys of one bucket live on different cluster slots.
            for shard in 0..layout.shards {
                pipe.cmd("UNLINK").arg(layout.key(old, shard)).ignore();
            }
            unlinked = Some(old);
        }
        let mut conn = redis.conn.clone();
        let result = pipe.query_async::<()>(&mut conn).await.map_err(|e| e.to_string());
        metrics::histogram!("likewise_own_likes_pipeline_size").record(batch.len() as f64);
        for w in batch {
            let _ = w.reply.send(result.clone().map_err(|e| StoreError::Engine(format!("redis: {e}"))));
        }
    }
}

#[cfg(test)]
mod tests {
    //! Against the Redis at 127.0.0.1:6379 (fails, never skips, when it is down); each test
    //! has its own key prefix and deletes its keys. Clocks run a few buckets in the future, so
    //! Redis never expires a key during a test.
    use super::*;
    use crate::shared_cache::RedisOptions;
    use std::collections::HashSet;
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::time::Duration;

    const WIDTH: u64 = 8_000;
    const SKEW: u64 = 1_000;

    /// The reverse index: a fixed set of (user, post) likes.
    struct Index(Mutex<HashSet<(u64, u64)>>);

    #[async_trait]
    impl LikeReader for Index {
        async fn liked_among(&self, user: UserId, _: TargetKind, ids: &[u64]) -> StoreResult<Vec<bool>> {
            let set = self.0.lock().expect("lock");
            Ok(ids.iter().map(|id| set.contains(&(user.0, *id))).collect())
        }
        async fn liked_ids(&self, _: UserId, _: TargetKind, _: usize) -> StoreResult<Vec<u64>> {
            Ok(Vec::new())
        }
        async fn likers(&self, _: Target, _: Option<Liker>, _: usize) -> StoreResult<Vec<Liker>> {
            Ok(Vec::new())
        }
    }

    struct Fixture {
        redis: Redis,
        index: Arc<Index>,
        /// First bucket of the test, a few buckets after the real time.
        b0: u64,
    }

    impl Fixture {
        async fn new(shards: u64) -> Self {
            let opts = RedisOptions {
                prefix: format!("lwtest:own:{}", rand::random::<u64>()),
                own_likes_ttl: Duration::from_millis(WIDTH),
                own_likes_shards: shards,
                ..Default::default()
            };
            let redis = Redis::connect(&opts).await.expect("Redis must be up at 127.0.0.1:6379");
            let b0 = crate::now_ms() / WIDTH + 4;
            Fixture { redis, index: Arc::new(Index(Mutex::new(HashSet::new()))), b0 }
        }

        /// A node whose clock reads what the returned cell holds.
        fn node(&self) -> (CachedLikes, Arc<AtomicU64>) {
            let now = Arc::new(AtomicU64::new(self.at(0, 0)));
            let n = now.clone();
            let node = CachedLikes::with_clock(
                self.index.clone(),
                self.redis.clone(),
                Arc::new(move || n.load(Ordering::SeqCst)),
            );
            (node, now)
        }

        /// `offset` ms into the test's bucket `i`.
        fn at(&self, i: u64, offset: u64) -> u64 {
            (self.b0 + i) * WIDTH + offset
        }

        async fn keys(&self) -> Vec<String> {
            let mut conn = self.redis.conn.clone();
            redis::cmd("KEYS")
                .arg(format!("{}*", self.redis.opts.prefix))
                .query_async(&mut conn)
                .await
                .expect("redis")
        }

        async fn cleanup(self) {
            let keys = self.keys().await;
            if !keys.is_empty() {
                let mut conn = self.redis.conn.clone();
                let _: () = redis::cmd("DEL").arg(&keys).query_async(&mut conn).await.expect("redis");
            }
        }
    }

    async fn liked(node: &CachedLikes, user: u64, ids: &[u64]) -> Vec<bool> {
        node.liked_among(UserId(user), TargetKind::Post, ids).await.expect("own likes")
    }

    async fn set(node: &CachedLikes, user: u64, post: u64, on: bool) {
        node.record(UserId(user), Target::post(post), on).await.expect("own likes");
    }

    #[test]
    fn the_layout_follows_the_clock_rules() {
        let l = Layout { prefix: "p:ol".into(), width: WIDTH, skew: SKEW, shards: 4 };
        assert_eq!(l.read_buckets(10 * WIDTH + 10), vec![10, 9]);
        assert_eq!(l.read_buckets(11 * WIDTH - SKEW), vec![11, 10, 9]);
        assert_eq!(l.read_buckets(11 * WIDTH - SKEW - 1), vec![10, 9]);
        assert_eq!(l.unlinkable(10 * WIDTH + 2 * SKEW - 1), None);
        assert_eq!(l.unlinkable(10 * WIDTH + 2 * SKEW), Some(8));
        assert_eq!(l.unlinkable(10 * WIDTH + 3 * SKEW), None);
        // Bucket 8 is read until 10 * WIDTH (by clocks up to SKEW behind: + SKEW), unlinked from
        // + 2 * SKEW (by clocks up to SKEW ahead: + SKEW), and expires after both.
        assert!(l.expires_at(8) >= 10 * WIDTH + 3 * SKEW);
        assert_eq!(l.key(3, 2), "p:ol:3:2");
        let spread: HashSet<u64> = (0..64).map(|u| l.shard(UserId(u << 8))).collect();
        assert_eq!(spread.len(), 4, "IDs with equal low bits still spread over the shards");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn own_writes_answer_first_and_the_newest_bucket_wins() {
        let f = Fixture::new(8).await;
        f.index.0.lock().expect("lock").extend([(1, 20), (1, 30)]);
        let (node, clock) = f.node();
        clock.store(f.at(0, 100), Ordering::SeqCst);
        set(&node, 1, 10, true).await;
        set(&node, 1, 30, false).await;
        // Own writes first; the index for the rest.
        assert_eq!(liked(&node, 1, &[10, 20, 30, 40]).await, [true, true, false, false]);
        assert_eq!(liked(&node, 2, &[10]).await, [false], "another viewer's writes are not mine");
        clock.store(f.at(1, 100), Ordering::SeqCst);
        assert_eq!(liked(&node, 1, &[10, 30]).await, [true, false], "the previous bucket is read");
        set(&node, 1, 10, false).await;
        assert_eq!(liked(&node, 1, &[10]).await, [false], "the newer bucket wins");
        clock.store(f.at(2, 100), Ordering::SeqCst);
        assert_eq!(liked(&node, 1, &[10, 30]).await, [false, true], "bucket 1 read; bucket 0 not");
        clock.store(f.at(3, 100), Ordering::SeqCst);
        assert_eq!(liked(&node, 1, &[10, 20, 30]).await, [false, true, true], "all from the index");
        f.cleanup().await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn clocks_apart_by_less_than_the_skew_keep_the_last_write() {
        let f = Fixture::new(8).await;
        let ((ahead, ahead_at), (behind, behind_at)) = (f.node(), f.node());
        // The like lands on a node already in bucket 1; the unlike, later, on one still in 0.
        ahead_at.store(f.at(1, 200), Ordering::SeqCst);
        behind_at.store(f.at(1, 0) - 300, Ordering::SeqCst);
        set(&ahead, 5, 77, true).await;
        assert_eq!(liked(&behind, 5, &[77]).await, [true], "a reader behind sees the next bucket");
        set(&behind, 5, 77, false).await;
        assert_eq!(liked(&behind, 5, &[77]).await, [false]);
        assert_eq!(liked(&ahead, 5, &[77]).await, [false], "the older write in bucket 1 was cleared");
        f.cleanup().await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_storm_takes_one_key_per_shard_and_old_buckets_are_unlinked() {
        let f = Fixture::new(8).await;
        let (node, clock) = f.node();
        let node = Arc::new(node);
        clock.store(f.at(0, 10), Ordering::SeqCst);
        let writes = (0..2_000u64).map(|u| {
            let node = node.clone();
            async move { set(&node, 1_000 + u, 9, true).await }
        });
        futures::future::join_all(writes).await;
        let keys = f.keys().await;
        assert_eq!(keys.len(), 8, "2,000 viewers, one key per shard: {keys:?}");
        let mut conn = f.redis.conn.clone();
        for k in &keys {
            let ttl: i64 = redis::cmd("PTTL").arg(k).query_async(&mut conn).await.expect("redis");
            assert!(ttl > 0, "{k} has no expiry");
        }
        assert_eq!(liked(&node, 1_500, &[9, 8]).await, [true, false]);
        // Into bucket 2, past 2 * skew: the first write unlinks bucket 0.
        clock.store(f.at(2, 2 * SKEW + 5), Ordering::SeqCst);
        set(&node, 1, 9, true).await;
        let keys = f.keys().await;
        assert_eq!(keys.len(), 1, "only bucket 2's one key is left: {keys:?}");
        assert!(keys[0].ends_with(&format!(":{}:{}", f.b0 + 2, node.layout.shard(UserId(1)))));
        f.cleanup().await;
    }
}
