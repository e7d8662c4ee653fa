//! Counters through Redis (see the module docs of `shared_cache`).

use super::{Redis, redis_err};
use async_trait::async_trait;
use likewise_core::StoreResult;
use likewise_core::counter::{CounterField, CounterKey, Counts};
use likewise_core::ids::{CommentId, PostId};
use likewise_core::like::Target;
use likewise_core::ports::{CounterStore, Recount};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

/// Hash fields of a counter entry.
const FIELDS: [&str; 3] = ["l", "c", "r"];

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
/// inner (PostgreSQL) commit.
pub struct CachedCounters {
    inner: Arc<dyn CounterStore>,
    redis: Redis,
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
    /// Wrap `inner`.
    pub fn new(inner: Arc<dyn CounterStore>, redis: Redis) -> Self {
        CachedCounters { inner, redis, sync: Arc::default() }
    }

    fn key(&self, t: Target, replica: u32) -> String {
        counter_key(&self.redis, t, replica)
    }

    fn replica(&self) -> u32 {
        rand::random_range(0..self.redis.opts.replicas.max(1))
    }

    /// Read one replica of each target; `None` where any field is missing.
    async fn read(&self, targets: &[Target]) -> StoreResult<Vec<Option<Counts>>> {
        let r = self.replica();
        let mut pipe = self.redis.servers.pipe();
        for t in targets {
            let k = self.key(*t, r);
            pipe.add(&k, redis::cmd("HMGET").arg(&k).arg(&FIELDS[..]).clone());
        }
        let rows = pipe.query().await.map_err(redis_err)?;
        rows.iter()
            .map(|v| {
                let v: Vec<Option<i64>> = redis::from_redis_value(v).map_err(redis_err)?;
                Ok(match v.as_slice() {
                    [Some(l), Some(c), Some(r)] => Some(Counts { likes: *l, comments: *c, replies: *r }),
                    _ => None,
                })
            })
            .collect()
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

    /// Load misses from the inner store, one node per key at a time (lease), and fill Redis.
    async fn load_misses(&self, targets: &[Target]) -> StoreResult<Vec<Counts>> {
        let token: u64 = rand::random();
        let mut pipe = self.redis.servers.pipe();
        for t in targets {
            let k = self.key(*t, 0) + ":lease";
            pipe.add(&k, redis::cmd("SET").arg(&k).arg(token).arg("NX").arg("PX").arg(LEASE_MS).clone());
        }
        let won: Vec<Option<String>> = pipe
            .query()
            .await
            .map_err(redis_err)?
            .iter()
            .map(|v| redis::from_redis_value(v).map_err(redis_err))
            .collect::<StoreResult<_>>()?;
        let mut out: Vec<Option<Counts>> = vec![None; targets.len()];
        let mine: Vec<usize> =
            (0..targets.len()).filter(|i| won.get(*i).is_some_and(Option::is_some)).collect();
        if !mine.is_empty() {
            let want: Vec<Target> = mine.iter().map(|i| targets[*i]).collect();
            let loaded = self.inner.counts(&want).await?;
            metrics::counter!("likewise_shared_cache_fills_total").increment(want.len() as u64);
            let values: Vec<(Target, Counts)> = want.iter().copied().zip(loaded.iter().copied()).collect();
            self.fill(&values).await?;
            let mut release = self.redis.servers.pipe();
            for t in &want {
                let k = self.key(*t, 0) + ":lease";
                release.add_ignored(&k, redis::cmd("EVAL").arg(RELEASE).arg(1).arg(&k).arg(token).clone());
            }
            let _ = release.query().await;
            for (i, c) in mine.iter().zip(loaded) {
                out[*i] = Some(c);
            }
        }
        // Others: wait for the lease holder's fill, then load directly (correctness first).
        let mut waiting: Vec<usize> = (0..targets.len()).filter(|i| out[*i].is_none()).collect();
        let deadline = tokio::time::Instant::now() + LEASE_WAIT;
        while !waiting.is_empty() && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(10)).await;
            let want: Vec<Target> = waiting.iter().map(|i| targets[*i]).collect();
            for (i, c) in waiting.iter().zip(self.read(&want).await?) {
                out[*i] = c;
            }
            waiting.retain(|i| out[*i].is_none());
        }
        if !waiting.is_empty() {
            let want: Vec<Target> = waiting.iter().map(|i| targets[*i]).collect();
            for (i, c) in waiting.iter().zip(self.inner.counts(&want).await?) {
                out[*i] = Some(c);
            }
        }
        Ok(out.into_iter().map(Option::unwrap_or_default).collect())
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
                if all.is_empty() {
                    sync.retrying.store(false, Ordering::Release);
                    return;
                }
                if publish(&redis, &all).await.is_ok() {
                    metrics::counter!("likewise_shared_cache_resyncs_total").increment(all.len() as u64);
                    continue; // one more round ends the task, or writes what failed meanwhile
                }
                sync.keep(all);
            }
        });
    }
}

/// A counter's Redis key: `<prefix>:c:<kind>:<id>#r<replica>`.
fn counter_key(redis: &Redis, t: Target, replica: u32) -> String {
    redis.key(&format!("c:{}:{}#r{replica}", t.kind.code(), t.id))
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
        let cached = match self.read(targets).await {
            Ok(c) => c,
            Err(e) => {
                // Redis down: serve from PostgreSQL (slower, still right).
                tracing::warn!(error = %e, "shared cache read failed; reading the store");
                metrics::counter!("likewise_shared_cache_errors_total").increment(1);
                return self.inner.counts(targets).await;
            }
        };
        let missing: Vec<usize> = (0..targets.len()).filter(|i| cached[*i].is_none()).collect();
        metrics::counter!("likewise_shared_cache_lookups_total", "result" => "hit")
            .increment((targets.len() - missing.len()) as u64);
        if missing.is_empty() {
            return Ok(cached.into_iter().map(Option::unwrap_or_default).collect());
        }
        metrics::counter!("likewise_shared_cache_lookups_total", "result" => "miss")
            .increment(missing.len() as u64);
        let want: Vec<Target> = missing.iter().map(|i| targets[*i]).collect();
        let loaded = match self.load_misses(&want).await {
            Ok(l) => l,
            Err(e) => {
                tracing::warn!(error = %e, "shared cache fill failed; reading the store");
                self.inner.counts(&want).await?
            }
        };
        let mut out: Vec<Counts> = cached.into_iter().map(Option::unwrap_or_default).collect();
        for (i, c) in missing.into_iter().zip(loaded) {
            out[i] = c;
        }
        Ok(out)
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
        let counters = CachedCounters::new(Arc::new(emb), redis.clone());
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
}
