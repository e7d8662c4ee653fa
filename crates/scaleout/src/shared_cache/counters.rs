//! Counters through Redis (see the module docs of `shared_cache`).

use super::{Redis, redis_err};
use async_trait::async_trait;
use likewise_core::StoreResult;
use likewise_core::counter::{CounterField, CounterKey, Counts};
use likewise_core::event::{Event, EventKind};
use likewise_core::ids::{CommentId, PostId, UserId};
use likewise_core::like::{Target, TargetKind};
use likewise_core::ports::{CounterStore, LikeReader, Recount};
use parking_lot::Mutex;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

/// Hash fields of a counter entry: the counts, then (posts) the newest likers and the
/// likers' version (see [`APPLY_LIKERS`]).
const FIELDS: [&str; 5] = ["l", "c", "r", "k", "kv"];

/// The aggregator's update of a post's newest likers in one replica (`KEYS[1]`), after its
/// commit. `ARGV`: how many are kept, the TTL (s), then the batch's like (`+<user>`) and
/// unlike (`-<user>`) events of the post in commit order. The likers are field `k`, user IDs
/// newest first, comma-separated: either the post's `n` newest or all of them.
///
/// With no `k` (a cold post, Redis lost), nothing is guessed: the version `kv` is bumped so
/// that a reader's fill from a PostgreSQL read that may predate these events is refused
/// ([`FILL_LIKERS`]), and readers load it again. An unlike of one of a full list's likers
/// drops the list (its successor is not known here) the same way. Returns the list's
/// length, or -1 when there is none.
const APPLY_LIKERS: &str = r"
local cur = redis.call('HGET', KEYS[1], 'k')
if not cur then
  redis.call('HINCRBY', KEYS[1], 'kv', 1)
  redis.call('EXPIRE', KEYS[1], ARGV[2])
  return -1
end
local n = tonumber(ARGV[1])
local list = {}
for id in string.gmatch(cur, '[^,]+') do list[#list + 1] = id end
for i = 3, #ARGV do
  local op, id = string.sub(ARGV[i], 1, 1), string.sub(ARGV[i], 2)
  local full, found, kept = #list >= n, false, {}
  for _, u in ipairs(list) do
    if u == id then found = true else kept[#kept + 1] = u end
  end
  if op == '+' then
    table.insert(kept, 1, id)
    while #kept > n do table.remove(kept) end
  elseif found and full then
    redis.call('HDEL', KEYS[1], 'k')
    redis.call('HINCRBY', KEYS[1], 'kv', 1)
    redis.call('EXPIRE', KEYS[1], ARGV[2])
    return -1
  end
  list = kept
end
redis.call('HSET', KEYS[1], 'k', table.concat(list, ','))
redis.call('EXPIRE', KEYS[1], ARGV[2])
return #list
";

/// A reader's fill of a post's newest likers (read from PostgreSQL) into one replica
/// (`KEYS[1]`): only while it has none and its version is still the one the reader saw
/// before reading PostgreSQL (`ARGV[1]`, empty for none), so a fill never replaces or
/// predates what the aggregator applied since. `ARGV[2]`: the likers, `ARGV[3]`: the TTL.
const FILL_LIKERS: &str = r"
if redis.call('HEXISTS', KEYS[1], 'k') == 1 then return 0 end
if (redis.call('HGET', KEYS[1], 'kv') or '') ~= ARGV[1] then return 0 end
redis.call('HSET', KEYS[1], 'k', ARGV[2])
redis.call('EXPIRE', KEYS[1], ARGV[3])
return 1
";

/// What one replica holds for a target.
#[derive(Debug, Clone, Default)]
struct Entry {
    /// The counts, when all three are there.
    counts: Option<Counts>,
    /// The newest likers, when kept.
    likers: Option<Vec<UserId>>,
    /// The likers' version (empty for none).
    version: String,
}

fn encode_likers(likers: &[UserId]) -> String {
    let mut out = String::with_capacity(likers.len() * 12);
    for (i, u) in likers.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str(&u.0.to_string());
    }
    out
}

fn decode_likers(s: &str) -> Option<Vec<UserId>> {
    s.split(',').filter(|p| !p.is_empty()).map(|p| p.parse().ok().map(UserId)).collect()
}

fn field_name(f: CounterField) -> &'static str {
    match f {
        CounterField::Likes => "l",
        CounterField::Comments => "c",
        CounterField::Replies => "r",
    }
}

/// Lease length: how long one node may take to fill a missing key before others load too.
const LEASE_MS: u64 = 2_000;
/// How long a node that lost the lease waits for the winner's fill before loading itself.
const LEASE_WAIT: Duration = Duration::from_millis(150);

/// Release a lease only if it is still ours.
const RELEASE: &str =
    "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) else return 0 end";

/// A [`CounterStore`] whose reads go through Redis and whose commits write Redis after the
/// inner (PostgreSQL) commit. Posts' newest likers are kept beside their counts (field `k`
/// of the same hash), written by the aggregator ([`CounterStore::likers_committed`]), so an
/// API node refreshes a count and its "liked by" in one Redis read; `likes` (PostgreSQL) is
/// read only for a post Redis has none for, under the same lease as a missing count.
pub struct CachedCounters {
    inner: Arc<dyn CounterStore>,
    likes: Arc<dyn LikeReader>,
    redis: Redis,
    apply_likers: redis::Script,
    fill_likers: redis::Script,
    /// Values committed to PostgreSQL whose Redis write failed, and the order of writes.
    sync: Arc<Sync>,
}

/// Values committed to PostgreSQL whose Redis write failed: retried with the next commit and,
/// while none comes, every [`RETRY_EVERY`] in the background, so a key whose last change
/// was not written to Redis does not serve the value before it until its TTL. Writes of
/// values (a commit's, a retry's) take `order` for their whole round trip, so an older value
/// never lands after a newer one; a newer value for the same key replaces an unsynced one.
#[derive(Default)]
struct Sync {
    unsynced: Mutex<HashMap<CounterKey, i64>>,
    /// Posts whose likers' update failed: their lists are dropped (readers reload them).
    stale_likers: Mutex<HashSet<u64>>,
    order: tokio::sync::Mutex<()>,
    retrying: std::sync::atomic::AtomicBool,
}

impl Sync {
    /// Keep values whose write failed, behind any newer value kept for the same key meanwhile.
    fn keep(&self, values: Vec<(CounterKey, i64)>) {
        let mut un = self.unsynced.lock();
        for (k, v) in values {
            un.entry(k).or_insert(v);
        }
    }
}

/// How often unsynced values are written again while no commit comes.
const RETRY_EVERY: Duration = Duration::from_millis(500);

impl CachedCounters {
    /// Wrap `inner`; `likes` reads the likers of posts Redis has none for.
    pub fn new(inner: Arc<dyn CounterStore>, likes: Arc<dyn LikeReader>, redis: Redis) -> Self {
        CachedCounters {
            inner,
            likes,
            redis,
            apply_likers: redis::Script::new(APPLY_LIKERS),
            fill_likers: redis::Script::new(FILL_LIKERS),
            sync: Arc::default(),
        }
    }

    fn key(&self, t: Target, replica: u32) -> String {
        counter_key(&self.redis, t, replica)
    }

    fn replica(&self) -> u32 {
        rand::random_range(0..self.redis.opts.replicas.max(1))
    }

    /// Read one replica of each target: its counts, likers and likers' version.
    async fn read_entries(&self, targets: &[Target]) -> StoreResult<Vec<Entry>> {
        let r = self.replica();
        let mut pipe = self.redis.servers.pipe();
        for t in targets {
            let k = self.key(*t, r);
            pipe.add(&k, redis::cmd("HMGET").arg(&k).arg(&FIELDS[..]).clone());
        }
        let rows = pipe.query().await.map_err(redis_err)?;
        rows.iter()
            .map(|v| {
                let v: Vec<Option<String>> = redis::from_redis_value(v).map_err(redis_err)?;
                let num = |i: usize| v.get(i).and_then(|x| x.as_deref()).and_then(|x| x.parse::<i64>().ok());
                Ok(Entry {
                    counts: match (num(0), num(1), num(2)) {
                        (Some(l), Some(c), Some(r)) => Some(Counts { likes: l, comments: c, replies: r }),
                        _ => None,
                    },
                    likers: v.get(3).and_then(|x| x.as_deref()).and_then(decode_likers),
                    version: v.get(4).cloned().flatten().unwrap_or_default(),
                })
            })
            .collect()
    }

    /// Fill every replica of each post with its likers read from PostgreSQL, unless the
    /// aggregator wrote or moved them since `version` was read ([`FILL_LIKERS`]).
    async fn fill_likers(&self, values: &[(Target, &str, Vec<UserId>)]) -> StoreResult<()> {
        let mut pipe = self.redis.servers.pipe();
        let ttl = self.redis.opts.counter_ttl.as_secs().max(1) as i64;
        for (t, version, likers) in values {
            let list = encode_likers(likers);
            for r in 0..self.redis.opts.replicas.max(1) {
                let k = self.key(*t, r);
                pipe.add_ignored(
                    &k,
                    redis::cmd("EVALSHA")
                        .arg(self.fill_likers.get_hash())
                        .arg(1)
                        .arg(&k)
                        .arg(*version)
                        .arg(&list)
                        .arg(ttl)
                        .clone(),
                );
            }
        }
        pipe.query_loading(Some(&self.fill_likers)).await.map(|_| ()).map_err(redis_err)
    }

    /// Fill every replica of each target with HSETNX (never overwriting a fresher value).
    async fn fill(&self, values: &[(Target, Counts)]) -> StoreResult<()> {
        let mut pipe = self.redis.servers.pipe();
        let ttl = self.redis.opts.counter_ttl.as_secs().max(1) as i64;
        for (t, c) in values {
            for r in 0..self.redis.opts.replicas.max(1) {
                let k = self.key(*t, r);
                pipe.add_ignored(&k, redis::cmd("HSETNX").arg(&k).arg("l").arg(c.likes).clone());
                pipe.add_ignored(&k, redis::cmd("HSETNX").arg(&k).arg("c").arg(c.comments).clone());
                pipe.add_ignored(&k, redis::cmd("HSETNX").arg(&k).arg("r").arg(c.replies).clone());
                pipe.add_ignored(&k, redis::cmd("EXPIRE").arg(&k).arg(ttl).clone());
            }
        }
        pipe.query().await.map(|_| ()).map_err(redis_err)
    }

    /// Whether `e` lacks what a read of `n` likers needs: its counts, or a post's likers.
    fn lacks(t: &Target, e: &Entry, n: usize) -> bool {
        e.counts.is_none() || (n > 0 && t.kind == TargetKind::Post && e.likers.is_none())
    }

    /// Load what Redis lacks of `entries` (counts, posts' likers) from PostgreSQL, one node
    /// per key at a time (lease), and fill Redis.
    async fn load_missing(&self, targets: &[Target], entries: &mut [Entry], n: usize) -> StoreResult<()> {
        let missing: Vec<usize> =
            (0..targets.len()).filter(|i| Self::lacks(&targets[*i], &entries[*i], n)).collect();
        if missing.is_empty() {
            return Ok(());
        }
        let token: u64 = rand::random();
        let mut pipe = self.redis.servers.pipe();
        for i in &missing {
            let k = self.key(targets[*i], 0) + ":lease";
            pipe.add(&k, redis::cmd("SET").arg(&k).arg(token).arg("NX").arg("PX").arg(LEASE_MS).clone());
        }
        let won: Vec<Option<String>> = pipe
            .query()
            .await
            .map_err(redis_err)?
            .iter()
            .map(|v| redis::from_redis_value(v).map_err(redis_err))
            .collect::<StoreResult<_>>()?;
        let (mut mine, mut waiting) = (Vec::new(), Vec::new());
        for (i, w) in missing.iter().zip(&won) {
            if w.is_some() { mine.push(*i) } else { waiting.push(*i) }
        }
        if !mine.is_empty() {
            let loaded = self.load_from_store(targets, entries, &mine, n, true).await;
            let mut release = self.redis.servers.pipe();
            for i in &mine {
                let k = self.key(targets[*i], 0) + ":lease";
                release.add_ignored(&k, redis::cmd("EVAL").arg(RELEASE).arg(1).arg(&k).arg(token).clone());
            }
            let _ = release.query().await;
            loaded?;
        }
        // Others: wait for the lease holder's fill, then load directly (correctness first).
        let deadline = tokio::time::Instant::now() + LEASE_WAIT;
        while !waiting.is_empty() && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(10)).await;
            let want: Vec<Target> = waiting.iter().map(|i| targets[*i]).collect();
            for (i, e) in waiting.iter().zip(self.read_entries(&want).await?) {
                if !Self::lacks(&targets[*i], &e, n) {
                    entries[*i] = e;
                }
            }
            waiting.retain(|i| Self::lacks(&targets[*i], &entries[*i], n));
        }
        if !waiting.is_empty() {
            self.load_from_store(targets, entries, &waiting, n, false).await?;
        }
        Ok(())
    }

    /// Read the counts and posts' likers `entries[which]` lack from PostgreSQL; with `fill`,
    /// write them to Redis too (never over anything newer: [`CachedCounters::fill`],
    /// [`FILL_LIKERS`]). A failed fill only costs the next reader a load.
    async fn load_from_store(
        &self,
        targets: &[Target],
        entries: &mut [Entry],
        which: &[usize],
        n: usize,
        fill: bool,
    ) -> StoreResult<()> {
        let counts: Vec<usize> = which.iter().copied().filter(|i| entries[*i].counts.is_none()).collect();
        let likers: Vec<usize> = which
            .iter()
            .copied()
            .filter(|i| n > 0 && targets[*i].kind == TargetKind::Post && entries[*i].likers.is_none())
            .collect();
        let want: Vec<Target> = counts.iter().map(|i| targets[*i]).collect();
        let posts: Vec<Target> = likers.iter().map(|i| targets[*i]).collect();
        let (c, l) = tokio::join!(
            async { if want.is_empty() { Ok(Vec::new()) } else { self.inner.counts(&want).await } },
            async {
                if posts.is_empty() { Ok(Vec::new()) } else { self.likes.recent_likers_many(&posts, n).await }
            },
        );
        let (c, l) = (c?, l?);
        metrics::counter!("likewise_shared_cache_fills_total").increment(want.len() as u64);
        likers_source().store.increment(posts.len() as u64);
        for (i, c) in counts.iter().zip(c) {
            entries[*i].counts = Some(c);
        }
        for (i, l) in likers.iter().zip(l) {
            entries[*i].likers = Some(l.into_iter().map(|l| l.user).collect());
        }
        if fill {
            let values: Vec<(Target, Counts)> =
                counts.iter().map(|i| (targets[*i], entries[*i].counts.unwrap_or_default())).collect();
            let lists: Vec<(Target, &str, Vec<UserId>)> = likers
                .iter()
                .map(|i| {
                    let e = &entries[*i];
                    (targets[*i], e.version.as_str(), e.likers.clone().unwrap_or_default())
                })
                .collect();
            let (a, b) = tokio::join!(
                async { if values.is_empty() { Ok(()) } else { self.fill(&values).await } },
                async { if lists.is_empty() { Ok(()) } else { self.fill_likers(&lists).await } },
            );
            if let Err(e) = a.and(b) {
                tracing::debug!(error = %e, "filling the shared cache failed");
                metrics::counter!("likewise_shared_cache_errors_total").increment(1);
            }
        }
        Ok(())
    }

    /// Counts and (with `n` > 0) posts' `n` newest likers: Redis first, PostgreSQL for what
    /// it lacks (lease), PostgreSQL alone when Redis cannot be read.
    async fn read_through(&self, targets: &[Target], n: usize) -> StoreResult<Vec<Entry>> {
        let mut entries = match self.read_entries(targets).await {
            Ok(e) => e,
            Err(e) => {
                // Redis down: serve from PostgreSQL (slower, still right).
                tracing::warn!(error = %e, "shared cache read failed; reading the store");
                metrics::counter!("likewise_shared_cache_errors_total").increment(1);
                let mut entries = vec![Entry::default(); targets.len()];
                let all: Vec<usize> = (0..targets.len()).collect();
                self.load_from_store(targets, &mut entries, &all, n, false).await?;
                return Ok(entries);
            }
        };
        let missing = entries.iter().filter(|e| e.counts.is_none()).count();
        metrics::counter!("likewise_shared_cache_lookups_total", "result" => "hit")
            .increment((targets.len() - missing) as u64);
        metrics::counter!("likewise_shared_cache_lookups_total", "result" => "miss")
            .increment(missing as u64);
        if n > 0 {
            let kept = targets
                .iter()
                .zip(&entries)
                .filter(|(t, e)| t.kind == TargetKind::Post && e.likers.is_some())
                .count();
            likers_source().redis.increment(kept as u64);
        }
        if let Err(e) = self.load_missing(targets, &mut entries, n).await {
            tracing::warn!(error = %e, "shared cache fill failed; reading the store");
            let lacking: Vec<usize> =
                (0..targets.len()).filter(|i| Self::lacks(&targets[*i], &entries[*i], n)).collect();
            self.load_from_store(targets, &mut entries, &lacking, n, false).await?;
        }
        Ok(entries)
    }

    /// Write `values` and whatever is unsynced, in commit order; what fails stays unsynced
    /// and is retried in the background until it is written.
    async fn sync(&self, values: &[(CounterKey, i64)]) {
        let _order = self.sync.order.lock().await;
        let mut all: HashMap<CounterKey, i64> = std::mem::take(&mut *self.sync.unsynced.lock());
        all.extend(values.iter().copied());
        if all.is_empty() {
            return;
        }
        let all: Vec<(CounterKey, i64)> = all.into_iter().collect();
        if let Err(e) = publish(&self.redis, &all).await {
            tracing::warn!(error = %e, counters = all.len(), "writing counters to Redis failed; retrying");
            metrics::counter!("likewise_shared_cache_errors_total").increment(1);
            self.sync.keep(all);
            self.retry_later();
        }
    }

    /// Start the background retry unless it runs.
    fn retry_later(&self) {
        use std::sync::atomic::Ordering;
        if self.sync.retrying.swap(true, Ordering::AcqRel) {
            return;
        }
        let (sync, redis) = (self.sync.clone(), self.redis.clone());
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(RETRY_EVERY).await;
                let _order = sync.order.lock().await;
                let all: Vec<(CounterKey, i64)> =
                    std::mem::take(&mut *sync.unsynced.lock()).into_iter().collect();
                let stale: Vec<u64> = sync.stale_likers.lock().drain().collect();
                if all.is_empty() && stale.is_empty() {
                    sync.retrying.store(false, Ordering::Release);
                    return;
                }
                if !all.is_empty() {
                    if publish(&redis, &all).await.is_ok() {
                        metrics::counter!("likewise_shared_cache_resyncs_total").increment(all.len() as u64);
                    } else {
                        sync.keep(all);
                    }
                }
                if !stale.is_empty() {
                    let mut pipe = redis.servers.pipe();
                    add_likers_drops(&redis, &mut pipe, &stale);
                    if pipe.query().await.is_err() {
                        sync.stale_likers.lock().extend(stale);
                    }
                }
                // Another round ends the task, or writes what failed (meanwhile).
            }
        });
    }
}

/// A counter's Redis key: `<prefix>:c:<kind>:<id>#r<replica>`.
fn counter_key(redis: &Redis, t: Target, replica: u32) -> String {
    redis.key(&format!("c:{}:{}#r{replica}", t.kind.code(), t.id))
}

/// Drop the likers of `posts` from every replica, bumping their version so that no fill
/// read before it lands ([`FILL_LIKERS`]): readers load them again.
fn add_likers_drops(redis: &Redis, pipe: &mut super::servers::RoutedPipe, posts: &[u64]) {
    let ttl = redis.opts.counter_ttl.as_secs().max(1) as i64;
    for post in posts {
        for r in 0..redis.opts.replicas.max(1) {
            let key = counter_key(redis, Target::post(*post), r);
            pipe.add_ignored(&key, redis::cmd("HDEL").arg(&key).arg("k").clone());
            pipe.add_ignored(&key, redis::cmd("HINCRBY").arg(&key).arg("kv").arg(1).clone());
            pipe.add_ignored(&key, redis::cmd("EXPIRE").arg(&key).arg(ttl).clone());
        }
    }
}

/// `likewise_recent_likers_reads_total{source}`: posts' recent likers a count refresh took
/// from Redis, or read from PostgreSQL (cold posts, Redis lost).
struct LikersSource {
    redis: metrics::Counter,
    store: metrics::Counter,
}

fn likers_source() -> &'static LikersSource {
    static C: std::sync::OnceLock<LikersSource> = std::sync::OnceLock::new();
    C.get_or_init(|| LikersSource {
        redis: metrics::counter!("likewise_recent_likers_reads_total", "source" => "redis"),
        store: metrics::counter!("likewise_recent_likers_reads_total", "source" => "store"),
    })
}

/// Write new absolute values to every replica of their keys.
async fn publish(redis: &Redis, values: &[(CounterKey, i64)]) -> StoreResult<()> {
    let mut pipe = redis.servers.pipe();
    let ttl = redis.opts.counter_ttl.as_secs().max(1) as i64;
    for (k, v) in values {
        for r in 0..redis.opts.replicas.max(1) {
            let key = counter_key(redis, k.target, r);
            pipe.add_ignored(&key, redis::cmd("HSET").arg(&key).arg(field_name(k.field)).arg(*v).clone());
            pipe.add_ignored(&key, redis::cmd("EXPIRE").arg(&key).arg(ttl).clone());
        }
    }
    pipe.query().await.map(|_| ()).map_err(redis_err)
}

#[async_trait]
impl CounterStore for CachedCounters {
    async fn counts(&self, targets: &[Target]) -> StoreResult<Vec<Counts>> {
        Ok(self.read_through(targets, 0).await?.into_iter().map(|e| e.counts.unwrap_or_default()).collect())
    }

    async fn counts_and_likers(
        &self,
        targets: &[Target],
        n: usize,
    ) -> StoreResult<Vec<(Counts, Option<Vec<UserId>>)>> {
        let entries = self.read_through(targets, n).await?;
        Ok(targets
            .iter()
            .zip(entries)
            .map(|(t, e)| {
                let likers = (n > 0 && t.kind == TargetKind::Post).then(|| {
                    let mut l = e.likers.unwrap_or_default();
                    l.truncate(n);
                    l
                });
                (e.counts.unwrap_or_default(), likers)
            })
            .collect())
    }

    async fn likers_committed(&self, events: &[Event], n: usize) {
        if n == 0 {
            return;
        }
        // Each post's likes and unlikes, in commit order.
        let mut ops: BTreeMap<u64, Vec<String>> = BTreeMap::new();
        for e in events.iter().filter(|e| e.target.kind == TargetKind::Post) {
            let op = match e.kind {
                EventKind::LikeCreated => format!("+{}", e.actor.0),
                EventKind::LikeRemoved => format!("-{}", e.actor.0),
                _ => continue,
            };
            ops.entry(e.target.id).or_default().push(op);
        }
        let _order = self.sync.order.lock().await;
        // Lists whose earlier update failed go first: they are dropped before anything is
        // applied on top of them.
        let stale: Vec<u64> = self.sync.stale_likers.lock().drain().collect();
        if ops.is_empty() && stale.is_empty() {
            return;
        }
        let ttl = self.redis.opts.counter_ttl.as_secs().max(1) as i64;
        let mut pipe = self.redis.servers.pipe();
        add_likers_drops(&self.redis, &mut pipe, &stale);
        for (post, ops) in &ops {
            for r in 0..self.redis.opts.replicas.max(1) {
                let k = self.key(Target::post(*post), r);
                pipe.add_ignored(
                    &k,
                    redis::cmd("EVALSHA")
                        .arg(self.apply_likers.get_hash())
                        .arg(1)
                        .arg(&k)
                        .arg(n)
                        .arg(ttl)
                        .arg(ops)
                        .clone(),
                );
            }
        }
        if let Err(e) = pipe.query_loading(Some(&self.apply_likers)).await {
            tracing::warn!(error = %e, posts = ops.len(), "writing recent likers to Redis failed; dropping them");
            metrics::counter!("likewise_shared_cache_errors_total").increment(1);
            let mut s = self.sync.stale_likers.lock();
            s.extend(stale);
            s.extend(ops.keys().copied());
            drop(s);
            self.retry_later();
        }
    }

    async fn apply_deltas(
        &self,
        consumer: &str,
        from: u64,
        upto: u64,
        deltas: &[(CounterKey, i64)],
    ) -> StoreResult<Vec<(CounterKey, i64)>> {
        let values = self.inner.apply_deltas(consumer, from, upto, deltas).await?;
        self.sync(&values).await;
        Ok(values)
    }

    async fn offset(&self, consumer: &str) -> StoreResult<u64> {
        self.inner.offset(consumer).await
    }

    async fn recount_likes(&self, consumer: &str, target: Target) -> StoreResult<Recount> {
        self.inner.recount_likes(consumer, target).await
    }

    async fn fresh_post_likes(&self, consumer: &str, posts: &[PostId]) -> StoreResult<Vec<i64>> {
        self.inner.fresh_post_likes(consumer, posts).await
    }

    async fn recount_comments(&self, consumer: &str, post: PostId) -> StoreResult<Recount> {
        self.inner.recount_comments(consumer, post).await
    }

    async fn recount_replies(&self, consumer: &str, post: PostId) -> StoreResult<Vec<(CommentId, Recount)>> {
        self.inner.recount_replies(consumer, post).await
    }

    async fn counted_posts(&self, after: Option<PostId>, limit: usize) -> StoreResult<Vec<PostId>> {
        self.inner.counted_posts(after, limit).await
    }
}

#[cfg(test)]
mod tests {
    //! Against a `redis-server` of the test's own (killed and started again on its port), so
    //! other tests' Redis is never disturbed; the counters' truth is an embedded store.
    use super::*;
    use crate::shared_cache::{RedisOptions, test_redis};
    use likewise_core::counter::CounterField;
    use likewise_store::embedded::{EmbeddedOptions, EmbeddedStore};

    async fn hget(port: u16, key: &str) -> Option<i64> {
        let client = redis::Client::open(format!("redis://127.0.0.1:{port}/0")).expect("url");
        let mut c = client.get_multiplexed_async_connection().await.ok()?;
        redis::cmd("HGET").arg(key).arg("l").query_async(&mut c).await.ok()?
    }

    /// A commit whose Redis write failed, with no commit after it: the value is written by the
    /// background retry once Redis is back, not left to the value before it for the TTL.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_value_redis_missed_is_written_once_it_is_back_without_another_commit() {
        let port = test_redis::free_port();
        let mut server = test_redis::start(port);
        let opts = RedisOptions {
            url: format!("redis://127.0.0.1:{port}/0"),
            prefix: format!("lwtest:resync:{}", rand::random::<u64>()),
            replicas: 2,
            ..RedisOptions::default()
        };
        let redis = test_redis::connect(&opts).await;
        let dir = tempfile::tempdir().expect("tempdir");
        let emb = EmbeddedStore::open(dir.path(), &EmbeddedOptions::default()).expect("embedded");
        let emb = Arc::new(emb);
        let counters = CachedCounters::new(emb.clone(), emb, redis.clone());
        let key = CounterKey { target: Target::post(42), field: CounterField::Likes };
        let redis_key = |r| counter_key(&redis, Target::post(42), r);

        counters.apply_deltas("agg", 0, 1, &[(key, 5)]).await.expect("commit");
        assert_eq!(hget(port, &redis_key(0)).await, Some(5));
        // Redis goes away; the next commit reaches the store but not Redis.
        let _ = server.kill();
        let _ = server.wait();
        counters.apply_deltas("agg", 1, 2, &[(key, 3)]).await.expect("commit without Redis");
        // Back, empty, and no further commit comes.
        let mut server = test_redis::start(port);
        let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
        loop {
            let (a, b) = (hget(port, &redis_key(0)).await, hget(port, &redis_key(1)).await);
            if (a, b) == (Some(8), Some(8)) {
                break;
            }
            assert!(tokio::time::Instant::now() < deadline, "replicas hold {a:?} and {b:?}, not 8");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert!(counters.sync.unsynced.lock().is_empty());
        let _ = server.kill();
        let _ = server.wait();
    }

    /// PostgreSQL's likers of posts, as a fake that counts the reads.
    struct Likers(parking_lot::Mutex<HashMap<u64, Vec<u64>>>, std::sync::atomic::AtomicU64);

    #[async_trait]
    impl LikeReader for Likers {
        async fn liked_among(&self, _: UserId, _: TargetKind, ids: &[u64]) -> StoreResult<Vec<bool>> {
            Ok(vec![false; ids.len()])
        }
        async fn liked_ids(&self, _: UserId, _: TargetKind, _: usize) -> StoreResult<Vec<u64>> {
            Ok(Vec::new())
        }
        async fn likers(
            &self,
            t: Target,
            _: Option<likewise_core::ports::Liker>,
            limit: usize,
        ) -> StoreResult<Vec<likewise_core::ports::Liker>> {
            self.1.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let all = self.0.lock().get(&t.id).cloned().unwrap_or_default();
            Ok(all
                .into_iter()
                .take(limit)
                .map(|u| likewise_core::ports::Liker { user: UserId(u), liked_at_ms: 0 })
                .collect())
        }
    }

    fn like(post: u64, user: u64, created: bool) -> Event {
        Event::like(0, created, Target::post(post), UserId(0), UserId(user), 0, post)
    }

    /// Posts' newest likers come from Redis once there: the aggregator's commits keep them
    /// (likes first, an unlike of a listed liker out), PostgreSQL is read only for a post
    /// Redis has none for, and a fill read before an aggregator's commit never lands over it.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn recent_likers_are_kept_by_the_aggregator_and_read_from_redis() {
        let opts = RedisOptions {
            prefix: format!("lwtest:likers:{}", rand::random::<u64>()),
            replicas: 2,
            ..RedisOptions::default()
        };
        let redis = Redis::connect(&opts).await.expect("Redis must be up at 127.0.0.1:6379");
        let dir = tempfile::tempdir().expect("tempdir");
        let emb = Arc::new(EmbeddedStore::open(dir.path(), &EmbeddedOptions::default()).expect("embedded"));
        let pg = Arc::new(Likers(parking_lot::Mutex::new(HashMap::new()), Default::default()));
        pg.0.lock().insert(1, vec![13, 12, 11]);
        let counters = CachedCounters::new(emb, pg.clone(), redis.clone());
        let reads = || pg.1.load(std::sync::atomic::Ordering::SeqCst);
        let likers = |rows: Vec<(Counts, Option<Vec<UserId>>)>| -> Vec<u64> {
            rows[0].1.clone().expect("a post's likers").iter().map(|u| u.0).collect()
        };

        // Cold: read once from PostgreSQL, then from Redis (whichever replica).
        assert_eq!(
            likers(counters.counts_and_likers(&[Target::post(1)], 3).await.expect("read")),
            [13, 12, 11]
        );
        assert_eq!(reads(), 1);
        for _ in 0..6 {
            assert_eq!(
                likers(counters.counts_and_likers(&[Target::post(1)], 3).await.expect("read")),
                [13, 12, 11]
            );
        }
        assert_eq!(reads(), 1, "a kept list is never read again");

        // The aggregator's commits: a like goes first (the list stays the newest three), an
        // unlike of someone not listed changes nothing.
        counters.likers_committed(&[like(1, 14, true), like(1, 11, true), like(1, 99, false)], 3).await;
        for _ in 0..4 {
            assert_eq!(
                likers(counters.counts_and_likers(&[Target::post(1)], 3).await.expect("read")),
                [11, 14, 13]
            );
        }
        assert_eq!(reads(), 1);

        // An unlike of a full list's liker: its successor is unknown, so the list is read again.
        pg.0.lock().insert(1, vec![11, 13, 12]);
        counters.likers_committed(&[like(1, 14, false)], 3).await;
        assert_eq!(
            likers(counters.counts_and_likers(&[Target::post(1)], 3).await.expect("read")),
            [11, 13, 12]
        );
        assert_eq!(reads(), 2);

        // A fill read before an aggregator commit on a post Redis had nothing for is refused:
        // the commit moved the version the reader saw.
        let before = counters.read_entries(&[Target::post(2)]).await.expect("read");
        assert!(before[0].likers.is_none());
        counters.likers_committed(&[like(2, 21, true)], 3).await;
        counters.fill_likers(&[(Target::post(2), before[0].version.as_str(), vec![])]).await.expect("fill");
        for r in 0..2 {
            let k = counter_key(&redis, Target::post(2), r);
            let mut c = redis.servers.conn_for(&k);
            let kept: Option<String> =
                redis::cmd("HGET").arg(&k).arg("k").query_async(&mut c).await.expect("hget");
            assert_eq!(kept, None, "replica {r}");
        }
        pg.0.lock().insert(2, vec![21]);
        assert_eq!(likers(counters.counts_and_likers(&[Target::post(2)], 3).await.expect("read")), [21]);

        // Non-post targets carry no likers; n = 0 asks for none.
        let rows = counters.counts_and_likers(&[Target::comment(5)], 3).await.expect("read");
        assert!(rows[0].1.is_none());
        let mut c = redis.servers.conn_for("");
        let keys: Vec<String> =
            redis::cmd("KEYS").arg(format!("{}:*", opts.prefix)).query_async(&mut c).await.expect("keys");
        let _: () = redis::cmd("DEL").arg(&keys).query_async(&mut c).await.expect("del");
    }
}
