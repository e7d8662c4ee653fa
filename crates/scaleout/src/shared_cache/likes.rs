//! Viewer likes through Redis (see the module docs of `shared_cache`).
//!
//! A viewer's own changes are kept for read-your-writes until the reverse index has them. They
//! are stored in **time buckets**, not one key per viewer: the bucket of width `own_likes_ttl`
//! that the write falls in, split into `own_likes_shards` sorted sets by viewer
//! (`<prefix>:olz:{<shard>}:<bucket>`, member `<user>:<kind>:<id>`).
//!
//! Why: a hash per viewer costs every like a new key, an `HSET` and an `EXPIRE` of its own; in
//! a like storm that was 7 us of the machine's CPU per like, a third of the whole hot path on
//! this machine (`docs/benchmarks.md`). Buckets turn a pipeline of thousands of records into
//! one command per shard. A viewer's members stay on one key per bucket, so a read is one
//! `ZMSCORE` per bucket looked at; a shard's buckets share a cluster slot (the `{<shard>}`
//! hash tag), so one server holds them all.
//!
//! **Commit order, not arrival order.** Two API nodes can commit a user's like and unlike in
//! one order and write their records in the other. So a bucket is a sorted set, not a hash:
//! a record is a member (the field) whose score is the commit's outbox row on its shard (the
//! position without its event index; a key has at most one recorded change per row) times
//! two, plus 1 when liked. `ZADD GT` keeps, natively and per member, the record of the later
//! commit, so the common write is one command with no script. A reader takes the highest
//! score among the buckets it reads; with none, it asks the reverse index.
//!
//! Across buckets, `GT` cannot help: a later commit's record may land in an older bucket (a
//! node whose clock is behind, or a write just before the bucket turned) and an earlier one
//! in the newer bucket, which outlives it. So a write also reads the field's score in the other buckets readers look at (`ZMSCORE`,
//! in the same pipeline, after its `ZADD`), and where one holds a record, writes the higher
//! of the two into both. Of two racing writers the later `ZADD` is followed by a read that
//! sees the earlier one, so every bucket holding a record of a key ends up holding its
//! latest; the second round trip happens only for keys recorded in two buckets.
//!
//! Rules (the clocks of API nodes may differ by up to `skew`, an eighth of the bucket width
//! and at most 5 s):
//! - a read looks at its bucket and the one before, and also at the next one in the last
//!   `skew` of its bucket (a node whose clock runs ahead may have written there). A write
//!   compares with the same buckets, and stays visible for at least one bucket width (less
//!   the skew);
//! - bucket `b`'s keys expire at `(b + 2) * width + 3 * skew`; a node that writes between
//!   `2 * skew` and `3 * skew` into bucket `b + 2` first `UNLINK`s them, so Redis frees a big
//!   hash in the background instead of blocking on its expiry. No reader needs them then.

use super::servers::RoutedPipe;
use super::{Redis, liked_filter};
use crate::postgres::outbox::INDEX_BITS;
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
        Self::with_clock(inner, redis, Arc::new(likewise_engine::now_ms))
    }

    fn with_clock(inner: Arc<dyn LikeReader>, redis: Redis, clock: Clock) -> Self {
        let layout = Layout::new(&redis);
        let (writes, rx) = mpsc::unbounded_channel();
        tokio::spawn(write_loop(redis.clone(), layout.clone(), clock.clone(), rx));
        CachedLikes { inner, redis, layout, clock, writes }
    }
}

impl CachedLikes {
    /// Answer `ask` from the viewer's whole liked set, read once, and store it as the shared
    /// filter (`liked_filter`); a viewer with more than `max` likes is stored as "too many"
    /// and `ask` read as before.
    #[allow(clippy::too_many_arguments)]
    async fn read_and_build(
        &self,
        user: UserId,
        kind: TargetKind,
        ask: &[u64],
        key: &str,
        max: usize,
        now: u64,
        trust_ms: u64,
    ) -> StoreResult<Vec<bool>> {
        let all = self.inner.liked_ids(user, kind, max + 1).await?;
        let (stored, answers) = if all.len() > max {
            metrics::counter!("likewise_liked_filter_builds_total", "outcome" => "too_many").increment(1);
            (liked_filter::store(key, None, now, trust_ms), self.inner.liked_among(user, kind, ask).await?)
        } else {
            metrics::counter!("likewise_liked_filter_builds_total", "outcome" => "built").increment(1);
            let set: std::collections::HashSet<u64> = all.iter().copied().collect();
            (
                liked_filter::store(key, Some(&all), now, trust_ms),
                ask.iter().map(|id| set.contains(id)).collect(),
            )
        };
        // Stored in the background: the page does not wait for it, and a failure only
        // means the next page reads again.
        let mut pipe = self.redis.servers.pipe();
        for cmd in stored {
            pipe.add_ignored(key, cmd);
        }
        tokio::spawn(async move {
            let set = pipe.query().await;
            if let Err(e) = set {
                tracing::debug!(error = %e, "storing a liked-set filter failed");
                metrics::counter!("likewise_shared_cache_errors_total").increment(1);
            }
        });
        Ok(answers)
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
            // Sorted sets since commit-ordered records: a new name, so a rolling upgrade never
            // meets a hash of the older layout under it.
            prefix: redis.key("olz"),
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
        format!("{}:{{{shard}}}:{bucket}", self.prefix)
    }

    /// The key saying since when (ms) shard `shard`'s server has kept records: on the
    /// shard's hash tag, so it lives and dies with them.
    fn since_key(&self, shard: u64) -> String {
        format!("{}:since:{{{shard}}}", self.prefix)
    }

    /// How long after a records' server started keeping records (a restart empties it) no
    /// shared filter is trusted: the records it lost were of commits the reverse index may
    /// not have had yet, and of writes still to be written again. Two skews: one for the
    /// clocks of the nodes that set the key and built a filter, one for the reverse index's
    /// lag behind the commits.
    fn restart_guard(&self) -> u64 {
        2 * self.skew
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

/// A record's score: the commit's outbox row on its shard, times two, plus 1 when liked.
/// Rows are below 2^48 (a position is the row shifted by `INDEX_BITS` in a `u64`), so a
/// score is below 2^49: exact in the double Redis keeps.
fn score(liked: bool, position: u64) -> u64 {
    ((position >> INDEX_BITS) << 1) | u64::from(liked)
}

/// The state the highest of `scores` says, if there is one.
fn newest(scores: impl Iterator<Item = f64>) -> Option<bool> {
    scores.map(|s| s as u64).max().map(|s| s & 1 == 1)
}

#[async_trait]
impl LikeReader for CachedLikes {
    async fn liked_among(&self, user: UserId, kind: TargetKind, ids: &[u64]) -> StoreResult<Vec<bool>> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let fields: Vec<String> = ids.iter().map(|id| field(user, Target { kind, id: *id })).collect();
        let shard = self.layout.shard(user);
        let now = (self.clock)();
        let buckets = self.layout.read_buckets(now);
        let filter_max = self.redis.opts.liked_filter_max;
        let filter_key = (filter_max > 0).then(|| liked_filter::key(&self.redis.opts.prefix, user, kind));
        let mut pipe = self.redis.servers.pipe();
        for b in &buckets {
            let k = self.layout.key(*b, shard);
            pipe.add(&k, redis::cmd("ZMSCORE").arg(&k).arg(&fields).clone());
        }
        if let Some(k) = &filter_key {
            // The set's header and the page's posts in it.
            pipe.add(k, redis::cmd("HMGET").arg(k).arg(liked_filter::HEADER_FIELD).arg(ids).clone());
            // Since when the records' server has kept records (set by the first read that
            // finds it missing: after a restart, that is soon after it).
            let since = self.layout.since_key(shard);
            pipe.add_ignored(&since, redis::cmd("SET").arg(&since).arg(now).arg("NX").clone());
            pipe.add(&since, redis::cmd("GET").arg(&since).clone());
        }
        let replies: Vec<redis::Value> = match pipe.query().await {
            Ok(v) => v,
            Err(e) => {
                tracing::warn!(error = %e, "own-likes read failed; asking the reverse index");
                metrics::counter!("likewise_shared_cache_errors_total").increment(1);
                Vec::new()
            }
        };
        // A filter is trusted, and built, only once the records' server has kept records for
        // `restart_guard` (module docs): unknown (the read failed) counts as just restarted.
        let kept_from = replies
            .get(buckets.len() + 1)
            .and_then(|v| redis::from_redis_value::<Option<u64>>(v).ok().flatten())
            .map_or(u64::MAX, |since| since.saturating_add(self.layout.restart_guard()));
        let per_bucket: Vec<Vec<Option<f64>>> =
            replies.iter().take(buckets.len()).filter_map(|v| redis::from_redis_value(v).ok()).collect();
        // The record of the latest commit, whichever bucket holds it.
        let own: Vec<Option<bool>> =
            (0..ids.len()).map(|i| newest(per_bucket.iter().filter_map(|b| *b.get(i)?))).collect();
        let ask: Vec<u64> = ids.iter().zip(&own).filter(|(_, o)| o.is_none()).map(|(id, _)| *id).collect();
        let trust_ms = self.layout.width / 2;
        let stored: Vec<Option<Vec<u8>>> =
            replies.get(buckets.len()).and_then(|v| redis::from_redis_value(v).ok()).unwrap_or_default();
        let shared =
            stored.first().cloned().flatten().and_then(|b| liked_filter::decode(&b)).filter(|f| {
                f.fresh(now, trust_ms) && f.built_at() >= kept_from && stored.len() == ids.len() + 1
            });
        let looked: Vec<bool> = if ask.is_empty() {
            Vec::new()
        } else {
            match (&filter_key, shared) {
                // The shared set answers exactly: no read.
                (Some(_), Some(liked_filter::Shared::Set { .. })) => {
                    let liked: std::collections::HashSet<u64> = ids
                        .iter()
                        .zip(stored.iter().skip(1))
                        .filter(|(_, v)| v.is_some())
                        .map(|(id, _)| *id)
                        .collect();
                    metrics::counter!("likewise_liked_filter_answers_total", "answer" => "set")
                        .increment(ask.len() as u64);
                    ask.iter().map(|id| liked.contains(id)).collect()
                }
                // More likes than a set holds: the reverse index, for this page.
                (Some(_), Some(liked_filter::Shared::TooMany { .. })) => {
                    metrics::counter!("likewise_liked_filter_answers_total", "answer" => "too_many")
                        .increment(ask.len() as u64);
                    self.inner.liked_among(user, kind, &ask).await?
                }
                // None fresh: the one read this page needs reads the whole set and stores it.
                (Some(k), None) if now >= kept_from => {
                    self.read_and_build(user, kind, &ask, k, filter_max, now, trust_ms).await?
                }
                // No sets, or records may be missing (a restarted or unreachable server):
                // the reverse index, read for this page only.
                (_, _) => {
                    if filter_key.is_some() {
                        metrics::counter!("likewise_liked_filter_answers_total", "answer" => "guarded")
                            .increment(ask.len() as u64);
                    }
                    self.inner.liked_among(user, kind, &ask).await?
                }
            }
        };
        let mut looked = looked.into_iter();
        Ok(own.into_iter().map(|o| o.unwrap_or_else(|| looked.next().unwrap_or(false))).collect())
    }

    async fn liked_ids(&self, user: UserId, kind: TargetKind, limit: usize) -> StoreResult<Vec<u64>> {
        self.inner.liked_ids(user, kind, limit).await
    }

    async fn likers(&self, target: Target, after: Option<Liker>, limit: usize) -> StoreResult<Vec<Liker>> {
        self.inner.likers(target, after, limit).await
    }

    async fn recent_likers_many(&self, targets: &[Target], limit: usize) -> StoreResult<Vec<Vec<Liker>>> {
        self.inner.recent_likers_many(targets, limit).await
    }
}

#[async_trait]
impl OwnLikes for CachedLikes {
    async fn record(&self, user: UserId, target: Target, liked: bool, position: u64) -> StoreResult<()> {
        let (reply, done) = oneshot::channel();
        self.writes
            .send(OwnWrite { user, target, liked, position, reply })
            .map_err(|_| StoreError::Closed)?;
        done.await.map_err(|_| StoreError::Closed)?
    }
}

/// One viewer's change waiting for the next pipeline.
struct OwnWrite {
    user: UserId,
    target: Target,
    liked: bool,
    /// Of the commit that made the change.
    position: u64,
    reply: oneshot::Sender<StoreResult<()>>,
}

/// Most writes per pipeline.
const MAX_PIPELINE: usize = 4_096;

/// How soon records whose write failed are written again when no new write comes first.
const RETRY_EVERY: std::time::Duration = std::time::Duration::from_millis(500);

/// Most records kept for another try (about 100 B each); past it, new failures are counted
/// and left to the reverse index.
const MAX_PENDING: usize = 100_000;

/// Write every queued own-like record in ONE pipeline (per shard of the current bucket: one
/// `ZADD GT`, and one `ZMSCORE` per other bucket readers look at), then repair the keys found
/// in another bucket (module docs), then answer each caller.
///
/// A pipeline that fails (a Redis server down, restarting empty, or skipped for a moment)
/// keeps its records and writes them again with the next pipeline or within
/// [`RETRY_EVERY`]: left unwritten, a viewer's newer record would be missing while an older
/// one of theirs may still stand, and their heart would show that older state until it
/// expired. `ZADD GT` makes a late write harmless: a record never replaces a newer one.
async fn write_loop(redis: Redis, layout: Layout, clock: Clock, mut rx: mpsc::UnboundedReceiver<OwnWrite>) {
    let mut unlinked = None;
    let mut pending: HashMap<String, (u64, u64)> = HashMap::new();
    loop {
        // A closed channel (shutdown) ends the loop; records still pending are left to the
        // reverse index, as any record the process did not live to write.
        let first = if pending.is_empty() {
            match rx.recv().await {
                Some(w) => Some(w),
                None => return,
            }
        } else {
            tokio::select! {
                w = rx.recv() => match w {
                    Some(w) => Some(w),
                    None => return,
                },
                () = tokio::time::sleep(RETRY_EVERY) => None,
            }
        };
        let mut batch: Vec<OwnWrite> = first.into_iter().collect();
        while batch.len() < MAX_PIPELINE {
            match rx.try_recv() {
                Ok(w) => batch.push(w),
                Err(_) => break,
            }
        }
        let now = clock();
        let bucket = layout.bucket(now);
        let others: Vec<u64> = layout.read_buckets(now).into_iter().filter(|b| *b != bucket).collect();
        let retried = pending.len();
        let shards = by_shard(&layout, &batch, std::mem::take(&mut pending));
        let mut pipe = redis.servers.pipe();
        for (shard, records) in &shards {
            add_records(&mut pipe, &layout, bucket, *shard, records.iter().map(|(f, s)| (f.as_str(), *s)));
            // After the ZADD on the same connection (one hash tag, one server): of two racing
            // writers, the later one's read sees the earlier one's record.
            for o in &others {
                let k = layout.key(*o, *shard);
                let mut read = redis::cmd("ZMSCORE");
                read.arg(&k);
                for (f, _) in records {
                    read.arg(f);
                }
                pipe.add(&k, read);
            }
        }
        if let Some(old) = layout.unlinkable(now).filter(|old| unlinked != Some(*old)) {
            // One key per command: keys of one bucket live on different cluster slots.
            for shard in 0..layout.shards {
                let k = layout.key(old, shard);
                pipe.add_ignored(&k, redis::cmd("UNLINK").arg(&k).clone());
            }
            unlinked = Some(old);
        }
        let result = write(&redis, &layout, pipe, bucket, &others, &shards).await.map_err(|e| e.to_string());
        match &result {
            Ok(()) if retried > 0 => {
                metrics::counter!("likewise_own_likes_rewritten_total").increment(retried as u64);
            }
            Ok(()) => {}
            Err(_) => {
                for (shard, records) in shards {
                    for (field, score) in records {
                        if pending.len() < MAX_PENDING || pending.contains_key(&field) {
                            let e = pending.entry(field).or_insert((shard, score));
                            e.1 = e.1.max(score);
                        } else {
                            metrics::counter!("likewise_own_likes_unwritten_total").increment(1);
                        }
                    }
                }
            }
        }
        metrics::gauge!("likewise_own_likes_pending").set(pending.len() as f64);
        metrics::histogram!("likewise_own_likes_pipeline_size").record(batch.len() as f64);
        for w in batch {
            let _ = w.reply.send(result.clone().map_err(|e| StoreError::Engine(format!("redis: {e}"))));
        }
    }
}

/// `ZADD GT` `records` into bucket `bucket` of shard `shard` (a record never goes down), and
/// give the key its expiry.
fn add_records<'a>(
    pipe: &mut RoutedPipe,
    layout: &Layout,
    bucket: u64,
    shard: u64,
    records: impl Iterator<Item = (&'a str, u64)>,
) {
    let key = layout.key(bucket, shard);
    let mut zadd = redis::cmd("ZADD");
    zadd.arg(&key).arg("GT");
    for (f, s) in records {
        zadd.arg(s).arg(f);
    }
    pipe.add_ignored(&key, zadd);
    pipe.add_ignored(&key, redis::cmd("PEXPIREAT").arg(&key).arg(layout.expires_at(bucket)).clone());
}

/// Run the records' pipeline, then repair the keys it found in another bucket (a second round
/// trip, only when there are any).
async fn write(
    redis: &Redis,
    layout: &Layout,
    pipe: RoutedPipe,
    bucket: u64,
    others: &[u64],
    shards: &[(u64, Vec<(String, u64)>)],
) -> redis::RedisResult<()> {
    let found = pipe.query().await?;
    let repairs = repairs(bucket, others, shards, &found);
    if repairs.is_empty() {
        return Ok(());
    }
    let raised: usize = repairs.values().map(Vec::len).sum();
    metrics::counter!("likewise_own_likes_repairs_total").increment(raised as u64);
    let mut pipe = redis.servers.pipe();
    for ((b, shard), records) in repairs {
        add_records(&mut pipe, layout, b, shard, records.into_iter());
    }
    pipe.query().await.map(|_| ())
}

/// For every field some other bucket holds, the higher of its records into each bucket that
/// holds one (ours included), by (bucket, shard): `found` are the `ZMSCORE` answers, per shard
/// in `shards`' order, then per bucket of `others`.
fn repairs<'a>(
    bucket: u64,
    others: &[u64],
    shards: &'a [(u64, Vec<(String, u64)>)],
    found: &[redis::Value],
) -> HashMap<(u64, u64), Vec<(&'a str, u64)>> {
    let mut out: HashMap<(u64, u64), Vec<(&'a str, u64)>> = HashMap::new();
    let mut answers = found.iter();
    for (shard, records) in shards {
        let per_bucket: Vec<Vec<Option<f64>>> = others
            .iter()
            .map(|_| answers.next().and_then(|v| redis::from_redis_value(v).ok()).unwrap_or_default())
            .collect();
        for (i, (field, ours)) in records.iter().enumerate() {
            let held: Vec<(u64, u64)> = others
                .iter()
                .zip(&per_bucket)
                .filter_map(|(b, scores)| Some((*b, (*scores.get(i)?)? as u64)))
                .collect();
            let Some(top) = held.iter().map(|(_, s)| *s).max().map(|t| t.max(*ours)) else {
                continue;
            };
            for (b, s) in std::iter::once((bucket, *ours)).chain(held) {
                if s < top {
                    out.entry((b, *shard)).or_default().push((field, top));
                }
            }
        }
    }
    out
}

/// The batch's records and the `pending` ones (field -> (shard, score)) by shard, as (field,
/// score) pairs: one per field, the latest commit's.
fn by_shard(
    layout: &Layout,
    batch: &[OwnWrite],
    pending: HashMap<String, (u64, u64)>,
) -> Vec<(u64, Vec<(String, u64)>)> {
    let mut latest: HashMap<(UserId, Target), &OwnWrite> = HashMap::with_capacity(batch.len());
    for w in batch {
        let e = latest.entry((w.user, w.target)).or_insert(w);
        if w.position > e.position {
            *e = w;
        }
    }
    let mut fields = pending;
    for w in latest.into_values() {
        let (f, s) = (field(w.user, w.target), score(w.liked, w.position));
        let e = fields.entry(f).or_insert((layout.shard(w.user), s));
        e.1 = e.1.max(s);
    }
    let mut out: HashMap<u64, Vec<(String, u64)>> = HashMap::new();
    for (f, (shard, s)) in fields {
        out.entry(shard).or_default().push((f, s));
    }
    out.into_iter().collect()
}

#[cfg(test)]
mod tests {
    //! Against the Redis at 127.0.0.1:6379 (fails, never skips, when it is down); each test
    //! has its own key prefix and deletes its keys. Clocks run a few buckets in the future, so
    //! Redis never expires a key during a test.
    use super::*;
    use crate::shared_cache::{RedisOptions, test_redis};
    use std::collections::HashSet;
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::time::Duration;

    const WIDTH: u64 = 8_000;
    const SKEW: u64 = 1_000;

    /// The reverse index: a fixed set of (user, post) likes, and the reads it answered.
    struct Index(Mutex<HashSet<(u64, u64)>>, AtomicU64);

    #[async_trait]
    impl LikeReader for Index {
        async fn liked_among(&self, user: UserId, _: TargetKind, ids: &[u64]) -> StoreResult<Vec<bool>> {
            self.1.fetch_add(1, Ordering::SeqCst);
            let set = self.0.lock().expect("lock");
            Ok(ids.iter().map(|id| set.contains(&(user.0, *id))).collect())
        }
        async fn liked_ids(&self, user: UserId, _: TargetKind, limit: usize) -> StoreResult<Vec<u64>> {
            self.1.fetch_add(1, Ordering::SeqCst);
            let set = self.0.lock().expect("lock");
            let mut ids: Vec<u64> = set.iter().filter(|(u, _)| *u == user.0).map(|(_, p)| *p).collect();
            ids.sort_unstable();
            ids.truncate(limit);
            Ok(ids)
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
        /// Own-likes records only (no shared filters).
        async fn new(shards: u64) -> Self {
            Self::with_filters(shards, 0).await
        }

        async fn with_filters(shards: u64, liked_filter_max: usize) -> Self {
            let opts = RedisOptions {
                prefix: format!("lwtest:own:{}", rand::random::<u64>()),
                own_likes_ttl: Duration::from_millis(WIDTH),
                own_likes_shards: shards,
                liked_filter_max,
                ..Default::default()
            };
            let redis = Redis::connect(&opts).await.expect("Redis must be up at 127.0.0.1:6379");
            let b0 = likewise_engine::now_ms() / WIDTH + 4;
            if liked_filter_max > 0 {
                // The server has kept records since long before the test.
                let layout = Layout::new(&redis);
                let mut conn = redis.servers.conn_for("");
                for s in 0..shards {
                    let _: () = redis::cmd("SET")
                        .arg(layout.since_key(s))
                        .arg(0)
                        .query_async(&mut conn)
                        .await
                        .expect("redis");
                }
            }
            Fixture { redis, index: Arc::new(Index(Mutex::new(HashSet::new()), AtomicU64::new(0))), b0 }
        }

        /// Reads the reverse index answered so far.
        fn reads(&self) -> u64 {
            self.index.1.load(Ordering::SeqCst)
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
            let mut conn = self.redis.servers.conn_for("");
            redis::cmd("KEYS")
                .arg(format!("{}*", self.redis.opts.prefix))
                .query_async(&mut conn)
                .await
                .expect("redis")
        }

        async fn cleanup(self) {
            let keys = self.keys().await;
            if !keys.is_empty() {
                let mut conn = self.redis.servers.conn_for("");
                let _: () = redis::cmd("DEL").arg(&keys).query_async(&mut conn).await.expect("redis");
            }
        }
    }

    async fn liked(node: &CachedLikes, user: u64, ids: &[u64]) -> Vec<bool> {
        node.liked_among(UserId(user), TargetKind::Post, ids).await.expect("own likes")
    }

    /// Record a change committed in outbox row `row` (at an event index that orders nothing).
    async fn set(node: &CachedLikes, user: u64, post: u64, on: bool, row: u64) {
        let position = row << INDEX_BITS | (user % 7);
        node.record(UserId(user), Target::post(post), on, position).await.expect("own likes");
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
        assert_eq!(l.key(3, 2), "p:ol:{2}:3");
        let spread: HashSet<u64> = (0..64).map(|u| l.shard(UserId(u << 8))).collect();
        assert_eq!(spread.len(), 4, "IDs with equal low bits still spread over the shards");
    }

    #[test]
    fn the_record_of_the_latest_row_wins_and_is_exact_as_a_double() {
        assert_eq!(score(true, 42 << INDEX_BITS | 9), 85);
        assert_eq!(score(false, 42 << INDEX_BITS), 84);
        assert_eq!(newest([71.0, 120.0, 90.0].into_iter()), Some(false));
        assert_eq!(newest([71.0, 9.0].into_iter()), Some(true));
        assert_eq!(newest([].into_iter()), None);
        // The highest rows a position can carry still compare exactly after Redis's double.
        let (top, below) = (score(false, u64::MAX), score(true, u64::MAX - (1 << INDEX_BITS)));
        assert!(top > below);
        assert_eq!(top as f64 as u64, top);
        assert_eq!(below as f64 as u64, below);
        assert_eq!(newest([below as f64, top as f64].into_iter()), Some(false));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn own_writes_answer_first_and_the_latest_commit_wins() {
        let f = Fixture::new(8).await;
        f.index.0.lock().expect("lock").extend([(1, 20), (1, 30)]);
        let (node, clock) = f.node();
        clock.store(f.at(0, 100), Ordering::SeqCst);
        set(&node, 1, 10, true, 5).await;
        set(&node, 1, 30, false, 6).await;
        // Own writes first; the index for the rest.
        assert_eq!(liked(&node, 1, &[10, 20, 30, 40]).await, [true, true, false, false]);
        assert_eq!(liked(&node, 2, &[10]).await, [false], "another viewer's writes are not mine");
        clock.store(f.at(1, 100), Ordering::SeqCst);
        assert_eq!(liked(&node, 1, &[10, 30]).await, [true, false], "the previous bucket is read");
        set(&node, 1, 10, false, 9).await;
        assert_eq!(liked(&node, 1, &[10]).await, [false], "the later commit wins");
        clock.store(f.at(2, 100), Ordering::SeqCst);
        assert_eq!(liked(&node, 1, &[10, 30]).await, [false, true], "bucket 1 read; bucket 0 not");
        clock.store(f.at(3, 100), Ordering::SeqCst);
        assert_eq!(liked(&node, 1, &[10, 20, 30]).await, [false, true, true], "all from the index");
        f.cleanup().await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn clocks_apart_by_less_than_the_skew_keep_the_last_commit() {
        let f = Fixture::new(8).await;
        let ((ahead, ahead_at), (behind, behind_at)) = (f.node(), f.node());
        // The like lands on a node already in bucket 1; the unlike, committed later, on one
        // still in 0.
        ahead_at.store(f.at(1, 200), Ordering::SeqCst);
        behind_at.store(f.at(1, 0) - 300, Ordering::SeqCst);
        set(&ahead, 5, 77, true, 100).await;
        assert_eq!(liked(&behind, 5, &[77]).await, [true], "a reader behind sees the next bucket");
        set(&behind, 5, 77, false, 101).await;
        assert_eq!(liked(&behind, 5, &[77]).await, [false]);
        assert_eq!(liked(&ahead, 5, &[77]).await, [false], "the older record in bucket 1 was raised");
        // Later, when bucket 0 is no longer read, nothing older shadows the index.
        ahead_at.store(f.at(2, 100), Ordering::SeqCst);
        assert_eq!(liked(&ahead, 5, &[77]).await, [false]);
        f.cleanup().await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_record_never_replaces_one_from_a_later_commit() {
        let f = Fixture::new(8).await;
        let ((a, a_at), (b, b_at)) = (f.node(), f.node());
        a_at.store(f.at(0, 100), Ordering::SeqCst);
        b_at.store(f.at(0, 100), Ordering::SeqCst);
        // Node B committed the unlike after node A's like, but its record lands first.
        set(&b, 3, 42, false, 7).await;
        set(&a, 3, 42, true, 6).await;
        assert_eq!(liked(&a, 3, &[42]).await, [false]);
        assert_eq!(liked(&b, 3, &[42]).await, [false]);
        // A stale record a bucket later still loses to the later one in the bucket before...
        a_at.store(f.at(1, 100), Ordering::SeqCst);
        set(&a, 3, 42, true, 6).await;
        assert_eq!(liked(&a, 3, &[42]).await, [false]);
        // ...and bucket 1 was given the later record: once bucket 0 is no longer read, it
        // still says so, without asking the index (which has not caught up).
        f.index.0.lock().expect("lock").insert((3, 42));
        a_at.store(f.at(2, 100), Ordering::SeqCst);
        let reads = f.reads();
        assert_eq!(liked(&a, 3, &[42]).await, [false]);
        assert_eq!(f.reads(), reads, "answered by the record");
        // Once no bucket read holds a record, the index answers.
        f.index.0.lock().expect("lock").remove(&(3, 42));
        a_at.store(f.at(4, 100), Ordering::SeqCst);
        assert_eq!(liked(&a, 3, &[42]).await, [false]);
        assert_eq!(f.reads(), reads + 1, "no record: the index answered");
        // The highest rows compare exactly (a score is a double in Redis).
        set(&a, 3, 43, true, (1 << 48) - 1).await;
        set(&a, 3, 43, false, (1 << 48) - 2).await;
        assert_eq!(liked(&a, 3, &[43]).await, [true]);
        f.cleanup().await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn records_racing_from_two_nodes_keep_each_keys_latest_commit() {
        let f = Fixture::new(4).await;
        let ((a, a_at), (b, b_at)) = (f.node(), f.node());
        a_at.store(f.at(0, 100), Ordering::SeqCst);
        b_at.store(f.at(0, 100), Ordering::SeqCst);
        let (a, b) = (Arc::new(a), Arc::new(b));
        // 300 users, 8 changes each, alternately liked and unliked, all sent at once to the
        // two nodes in an order unrelated to their positions.
        let mut writes = Vec::new();
        for u in 0..300u64 {
            for k in 0..8u64 {
                let position = (u * 8 + (k * 5) % 8) + 1;
                let node = if (u + k) % 2 == 0 { a.clone() } else { b.clone() };
                writes.push(async move { set(&node, u, 1, position % 2 == 0, position).await });
            }
        }
        futures::future::join_all(writes).await;
        for u in 0..300u64 {
            // The highest position of user u is u * 8 + 8: even, so liked.
            assert_eq!(liked(&a, u, &[1]).await, [true], "user {u} on a");
            assert_eq!(liked(&b, u, &[1]).await, [true], "user {u} on b");
        }
        f.cleanup().await;
    }

    /// The race across a bucket's turn: one node still in bucket 0, the other already in 1,
    /// both writing changes of the same 300 viewers in an order unrelated to their commits.
    /// Every answer is the latest commit's, also once bucket 0 is no longer read (the index
    /// knows nothing, so any stale record left in bucket 1 would show).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn records_racing_across_a_buckets_turn_keep_each_keys_latest_commit() {
        let f = Fixture::new(4).await;
        let ((a, a_at), (b, b_at)) = (f.node(), f.node());
        a_at.store(f.at(1, 0) - 300, Ordering::SeqCst);
        b_at.store(f.at(1, 200), Ordering::SeqCst);
        let (a, b) = (Arc::new(a), Arc::new(b));
        let state = |row: u64| row.is_multiple_of(3);
        let mut writes = Vec::new();
        for u in 0..300u64 {
            for k in 0..8u64 {
                let row = u * 8 + (k * 3 + u) % 8 + 1;
                let node = if (u * 7 + k) % 3 == 0 { a.clone() } else { b.clone() };
                writes.push(async move { set(&node, u, 1, state(row), row).await });
            }
        }
        futures::future::join_all(writes).await;
        let check = |when: &'static str| {
            let (a, b) = (a.clone(), b.clone());
            async move {
                for u in 0..300u64 {
                    let want = [state(u * 8 + 8)];
                    assert_eq!(liked(&a, u, &[1]).await, want, "user {u} on a, {when}");
                    assert_eq!(liked(&b, u, &[1]).await, want, "user {u} on b, {when}");
                }
            }
        };
        check("at the turn").await;
        a_at.store(f.at(2, 100), Ordering::SeqCst);
        b_at.store(f.at(2, 100), Ordering::SeqCst);
        check("bucket 0 no longer read").await;
        assert_eq!(f.reads(), 0, "every answer came from a record");
        f.cleanup().await;
    }

    /// Calls of thousands of fields: 3,000 viewers on one key, then the same fields again
    /// from the next bucket, first with older commits (nothing changes) and then with newer
    /// ones (they win, and the older bucket is raised to them).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn calls_of_thousands_of_fields_keep_the_latest_commits() {
        let f = Fixture::new(1).await;
        let (node, clock) = f.node();
        let node = Arc::new(node);
        let storm = |on: bool, base: u64| {
            let node = node.clone();
            futures::future::join_all((0..3_000u64).map(move |u| {
                let node = node.clone();
                async move { set(&node, 10_000 + u, 9, on, base + u).await }
            }))
        };
        clock.store(f.at(0, 10), Ordering::SeqCst);
        storm(true, 1_000_000).await;
        clock.store(f.at(1, 10), Ordering::SeqCst);
        storm(false, 1).await;
        for u in [10_000, 11_234, 12_999] {
            assert_eq!(liked(&node, u, &[9]).await, [true], "viewer {u}: an older commit replaced a newer");
        }
        storm(false, 2_000_000).await;
        for u in [10_000, 11_234, 12_999] {
            assert_eq!(liked(&node, u, &[9]).await, [false], "viewer {u}");
        }
        let mut conn = f.redis.servers.conn_for("");
        let old = node.layout.key(f.b0, 0);
        for u in [10_000u64, 11_234, 12_999] {
            let member = field(UserId(u), Target::post(9));
            let got: f64 =
                redis::cmd("ZSCORE").arg(&old).arg(&member).query_async(&mut conn).await.expect("redis");
            let want = score(false, (2_000_000 + u - 10_000) << INDEX_BITS);
            assert_eq!(got as u64, want, "viewer {u}: the older bucket holds the latest record too");
        }
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
            async move { set(&node, 1_000 + u, 9, true, u + 1).await }
        });
        futures::future::join_all(writes).await;
        let keys = f.keys().await;
        assert_eq!(keys.len(), 8, "2,000 viewers, one key per shard: {keys:?}");
        let mut conn = f.redis.servers.conn_for("");
        for k in &keys {
            let ttl: i64 = redis::cmd("PTTL").arg(k).query_async(&mut conn).await.expect("redis");
            assert!(ttl > 0, "{k} has no expiry");
        }
        assert_eq!(liked(&node, 1_500, &[9, 8]).await, [true, false]);
        // Into bucket 2, past 2 * skew: the first write unlinks bucket 0.
        clock.store(f.at(2, 2 * SKEW + 5), Ordering::SeqCst);
        set(&node, 1, 9, true, 5_000).await;
        let keys = f.keys().await;
        assert_eq!(keys.len(), 1, "only bucket 2's one key is left: {keys:?}");
        assert!(keys[0].ends_with(&format!(":{{{}}}:{}", node.layout.shard(UserId(1)), f.b0 + 2)));
        f.cleanup().await;
    }

    /// Wait until the filter a read stored in the background is in Redis.
    async fn filter_stored(f: &Fixture, user: u64) {
        let key = liked_filter::key(&f.redis.opts.prefix, UserId(user), TargetKind::Post);
        for _ in 0..200 {
            let mut conn = f.redis.servers.conn_for("");
            let there: bool = redis::cmd("EXISTS").arg(&key).query_async(&mut conn).await.expect("redis");
            if there {
                return;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        panic!("no filter stored for {user}");
    }

    /// The first page that must ask the reverse index reads the viewer's liked set once and
    /// shares it as a filter: the next pages, on this node or another, read nothing for the
    /// posts it rules out, and only its "maybe" for the rest. Answers stay exact throughout:
    /// own-likes records (a like and an unlike after the build) come first.
    #[tokio::test]
    async fn a_shared_set_saves_the_reads_of_later_pages_on_every_node() {
        let f = Fixture::with_filters(4, 1_000).await;
        for p in [3, 50, 700] {
            f.index.0.lock().expect("lock").insert((9, p));
        }
        let ((a, _), (b, _)) = (f.node(), f.node());
        let page1: Vec<u64> = (1..=20).collect();
        let want1: Vec<bool> = page1.iter().map(|p| *p == 3).collect();
        assert_eq!(liked(&a, 9, &page1).await, want1);
        assert_eq!(f.reads(), 1, "one read: the whole liked set, not a lookup and a build");
        filter_stored(&f, 9).await;
        // Node b, a page none of whose posts were liked: no read at all.
        let page2: Vec<u64> = (100..120).collect();
        assert_eq!(liked(&b, 9, &page2).await, vec![false; 20]);
        assert_eq!(f.reads(), 1, "the filter ruled every post out");
        // A page holding a liked post: the set answers it too, with no read.
        let page3: Vec<u64> = (690..710).collect();
        let want3: Vec<bool> = page3.iter().map(|p| *p == 700).collect();
        assert_eq!(liked(&b, 9, &page3).await, want3);
        assert_eq!(f.reads(), 1, "a warm viewer's page reads no reverse index");
        // Changes after the build answer from their records, on either node.
        set(&a, 9, 101, true, 10).await;
        set(&a, 9, 700, false, 11).await;
        let got = liked(&b, 9, &[101, 700, 102]).await;
        assert_eq!(got, vec![true, false, false]);
        assert_eq!(f.reads(), 1, "records and the set answered");
        f.cleanup().await;
    }

    /// A filter is trusted for half a bucket width after its build (by the reading node's
    /// clock), then read again; a viewer with more likes than the cap is marked, and read per
    /// page as without filters.
    #[tokio::test]
    async fn a_filter_is_rebuilt_when_old_and_never_built_past_the_cap() {
        let f = Fixture::with_filters(2, 4).await;
        f.index.0.lock().expect("lock").insert((5, 1));
        let (a, clock) = f.node();
        assert_eq!(liked(&a, 5, &[1, 2]).await, vec![true, false]);
        filter_stored(&f, 5).await;
        clock.fetch_add(WIDTH / 2, Ordering::SeqCst);
        assert_eq!(liked(&a, 5, &[2, 3]).await, vec![false, false]);
        assert_eq!(f.reads(), 1, "still fresh at half the width");
        // A like that reached the reverse index with no record (its record expired) is seen
        // once the filter is old.
        f.index.0.lock().expect("lock").insert((5, 3));
        clock.fetch_add(1, Ordering::SeqCst);
        assert_eq!(liked(&a, 5, &[2, 3]).await, vec![false, true]);
        assert_eq!(f.reads(), 2, "rebuilt");
        // Over the cap: marked, and every later page is read.
        for p in 10..20 {
            f.index.0.lock().expect("lock").insert((6, p));
        }
        assert_eq!(liked(&a, 6, &[10, 30]).await, vec![true, false]);
        assert_eq!(f.reads(), 4, "the set, found too large, then the page");
        filter_stored(&f, 6).await;
        assert_eq!(liked(&a, 6, &[11, 31]).await, vec![true, false]);
        assert_eq!(f.reads(), 5, "one lookup per page");
        f.cleanup().await;
    }

    /// A record whose write failed while its Redis server was down is written again once the
    /// server is back (empty, as a restarted cache is), with no other write after it: the
    /// viewer's heart follows their last commit, not the reverse index's lag or an expiry.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_record_redis_missed_is_written_once_the_server_is_back() {
        let port = test_redis::free_port();
        let mut server = test_redis::start(port);
        let opts = RedisOptions {
            url: format!("redis://127.0.0.1:{port}/0"),
            prefix: format!("lwtest:ownretry:{}", rand::random::<u64>()),
            own_likes_ttl: Duration::from_millis(WIDTH),
            own_likes_shards: 4,
            ..Default::default()
        };
        let redis = test_redis::connect(&opts).await;
        let index = Arc::new(Index(Mutex::new(HashSet::new()), AtomicU64::new(0)));
        let at = (likewise_engine::now_ms() / WIDTH + 4) * WIDTH + 100;
        let node = CachedLikes::with_clock(index, redis.clone(), Arc::new(move || at));
        set(&node, 9, 42, true, 7).await;
        let _ = server.kill();
        let _ = server.wait();
        // The unlike commits while the server is gone: its record cannot be written now.
        let position = 8 << INDEX_BITS;
        assert!(node.record(UserId(9), Target::post(42), false, position).await.is_err());
        let mut server = test_redis::start(port);
        let layout = Layout::new(&redis);
        let key = layout.key(layout.bucket(at), layout.shard(UserId(9)));
        let client = redis::Client::open(opts.url.clone()).expect("url");
        let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
        let stored = loop {
            let got: Option<f64> = match client.get_multiplexed_async_connection().await {
                Ok(mut c) => redis::cmd("ZSCORE")
                    .arg(&key)
                    .arg(field(UserId(9), Target::post(42)))
                    .query_async(&mut c)
                    .await
                    .unwrap_or(None),
                Err(_) => None,
            };
            if got.is_some() || tokio::time::Instant::now() > deadline {
                break got;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        let _ = server.kill();
        let _ = server.wait();
        assert_eq!(stored, Some(score(false, position) as f64), "the missed unlike was never written again");
    }

    /// A viewer's shared filter, built before their like, is on one Redis server and the
    /// like's record on another, which restarts empty: the record is gone while the filter
    /// still says "not liked". Until the records' server has kept records long enough for the
    /// reverse index to hold what it lost, no filter answers, so the heart follows the
    /// reverse index as soon as it has the like, on every node.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_filter_never_hides_a_like_whose_record_a_restart_lost() {
        let ports = [test_redis::free_port(), test_redis::free_port()];
        let mut servers = Servers(ports.iter().map(|p| test_redis::start(*p)).collect());
        let opts = RedisOptions {
            url: format!("redis://127.0.0.1:{}/0", ports[0]),
            shard_urls: vec![format!("redis://127.0.0.1:{}/0", ports[1])],
            prefix: format!("lwtest:ownrestart:{}", rand::random::<u64>()),
            own_likes_ttl: Duration::from_millis(WIDTH),
            own_likes_shards: 4,
            liked_filter_max: 1_000,
            ..Default::default()
        };
        let redis = test_redis::connect(&opts).await;
        let layout = Layout::new(&redis);
        let at = (likewise_engine::now_ms() / WIDTH + 4) * WIDTH + 100;
        // A viewer whose filter and records are on different servers.
        let records_of =
            |u: u64| redis.servers.server_of(&layout.key(layout.bucket(at), layout.shard(UserId(u))));
        let filter_of =
            |u: u64| redis.servers.server_of(&liked_filter::key(&opts.prefix, UserId(u), TargetKind::Post));
        let user =
            (1..10_000u64).find(|u| records_of(*u) != filter_of(*u)).expect("a viewer split over both");
        let restarted = records_of(user);
        let index = Arc::new(Index(Mutex::new(HashSet::new()), AtomicU64::new(0)));
        index.0.lock().expect("lock").insert((user, 1));
        let clock = Arc::new(AtomicU64::new(at));
        let node = |clock: Arc<AtomicU64>| {
            CachedLikes::with_clock(
                index.clone(),
                redis.clone(),
                Arc::new(move || clock.load(Ordering::SeqCst)),
            )
        };
        let (a, b) = (node(clock.clone()), node(clock.clone()));
        // The servers have kept records for long: the first read builds and stores a filter.
        for s in 0..layout.shards {
            let key = layout.since_key(s);
            let mut conn = redis.servers.conn_for(&key);
            let _: () = redis::cmd("SET").arg(&key).arg(0).query_async(&mut conn).await.expect("redis");
        }
        assert_eq!(liked(&a, user, &[1, 42]).await, [true, false]);
        let key = liked_filter::key(&opts.prefix, UserId(user), TargetKind::Post);
        let mut conn = redis.servers.conn_for(&key);
        let mut stored = false;
        for _ in 0..200 {
            stored = redis::cmd("EXISTS").arg(&key).query_async(&mut conn).await.expect("redis");
            if stored {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert!(stored, "no filter stored");
        // The like of post 42 commits and is recorded; the reverse index does not have it yet.
        set(&a, user, 42, true, 9).await;
        assert_eq!(liked(&b, user, &[42]).await, [true], "answered by the record");
        let _ = servers.0[restarted].kill();
        let _ = servers.0[restarted].wait();
        servers.0[restarted] = test_redis::start(ports[restarted]);
        // Back, empty. Until the reverse index has the like, it answers "not liked"...
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while liked_among_ok(&b, user).await.is_none() {
            assert!(tokio::time::Instant::now() < deadline, "the restarted server never answered");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        // ...and once it has, every node says "liked", the filter notwithstanding.
        index.0.lock().expect("lock").insert((user, 42));
        let got = (liked(&a, user, &[42, 43]).await, liked(&b, user, &[42, 43]).await);
        assert_eq!(got, (vec![true, false], vec![true, false]), "a filter built before the like hid it");
    }

    /// A test's own `redis-server`s, stopped however the test ends.
    struct Servers(Vec<std::process::Child>);

    impl Drop for Servers {
        fn drop(&mut self) {
            for s in &mut self.0 {
                let _ = s.kill();
                let _ = s.wait();
            }
        }
    }

    /// The answer of a read of post 42, once a read reaches the restarted server again (the
    /// read leaves the key saying since when it keeps records there).
    async fn liked_among_ok(node: &CachedLikes, user: u64) -> Option<bool> {
        let key = node.layout.since_key(node.layout.shard(UserId(user)));
        let got = liked(node, user, &[42]).await[0];
        let mut conn = node.redis.servers.conn_for(&key);
        let there: bool = redis::cmd("EXISTS").arg(&key).query_async(&mut conn).await.ok()?;
        there.then_some(got)
    }
}
