//! What every API node knows of users' held comments (`<prefix>:hm:<user>`, a hash), so a
//! feed page skips the reads of its viewer's own held comments and replies (a lookup of the
//! rank index's marks and of the held-replies index on every shard) for the many viewers
//! who have none.
//!
//! - `v`: the user's version, bumped ([`HeldMarks::changed`]) once a change that may hold or
//!   release a comment of theirs is readable: a comment of theirs created or changed, or an
//!   unlisted rank entry of theirs written (by the aggregator or the write path).
//! - `m`, `mv`: the mark (`1`: something held, `0`: nothing) and the version it was set at.
//!   A mark is believed only while `mv` is the current version.
//!
//! A reader reads the version, then PostgreSQL, then sets the mark with the version it read
//! (a script compares): a hold that lands between the two reads has bumped the version, so
//! the mark is never written over it. A bump that cannot be written (Redis unreachable) is
//! retried until it is; Redis restarting empty forgets marks and versions together. Keys
//! live `ttl` from their last write, which also bounds how long a mark lives.

use super::{Redis, redis_err};
use async_trait::async_trait;
use likewise_core::StoreResult;
use likewise_core::ids::{CommentId, PostId, UserId};
use likewise_core::ports::{HeldMark, HeldMarks, RankChange, RankEntry, RankIndex};
use parking_lot::Mutex;
use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// Set the mark (`ARGV[2]`) only while the version is still `ARGV[1]` (empty: none).
const SET_MARK: &str = r"
if (redis.call('HGET', KEYS[1], 'v') or '') ~= ARGV[1] then return 0 end
redis.call('HSET', KEYS[1], 'm', ARGV[2], 'mv', ARGV[1])
redis.call('EXPIRE', KEYS[1], ARGV[3])
return 1
";

/// How soon bumps that failed are written again.
const RETRY_EVERY: Duration = Duration::from_millis(500);

/// Most users whose failed bumps are kept for another try.
const MAX_PENDING: usize = 100_000;

/// [`HeldMarks`] in Redis (see the module docs).
pub struct RedisHeldMarks {
    redis: Redis,
    ttl: Duration,
    script: redis::Script,
    pending: Arc<Mutex<HashSet<u64>>>,
    retrying: Arc<AtomicBool>,
}

impl RedisHeldMarks {
    /// Marks on `redis`, each kept `ttl` from its last write.
    pub fn new(redis: Redis, ttl: Duration) -> Self {
        RedisHeldMarks {
            redis,
            ttl,
            script: redis::Script::new(SET_MARK),
            pending: Arc::default(),
            retrying: Arc::default(),
        }
    }

    fn key(redis: &Redis, user: UserId) -> String {
        redis.key(&format!("hm:{}", user.0))
    }

    async fn bump(redis: &Redis, ttl: Duration, users: &[u64]) -> StoreResult<()> {
        let mut pipe = redis.servers.pipe();
        for u in users {
            let k = Self::key(redis, UserId(*u));
            pipe.add_ignored(&k, redis::cmd("HINCRBY").arg(&k).arg("v").arg(1).clone());
            pipe.add_ignored(&k, redis::cmd("EXPIRE").arg(&k).arg(ttl.as_secs().max(1)).clone());
        }
        pipe.query().await.map(|_| ()).map_err(redis_err)
    }

    fn retry_later(&self) {
        if self.retrying.swap(true, Ordering::AcqRel) {
            return;
        }
        let (redis, ttl, pending, retrying) =
            (self.redis.clone(), self.ttl, self.pending.clone(), self.retrying.clone());
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(RETRY_EVERY).await;
                let users: Vec<u64> = pending.lock().drain().collect();
                if users.is_empty() {
                    retrying.store(false, Ordering::Release);
                    // A failure that queued users after the drain started its own task or
                    // found this one running: look once more.
                    if pending.lock().is_empty() || retrying.swap(true, Ordering::AcqRel) {
                        return;
                    }
                    continue;
                }
                if Self::bump(&redis, ttl, &users).await.is_err() {
                    pending.lock().extend(users);
                } else {
                    metrics::counter!("likewise_held_marks_resyncs_total").increment(1);
                }
            }
        });
    }
}

#[async_trait]
impl HeldMarks for RedisHeldMarks {
    async fn get(&self, user: UserId) -> StoreResult<HeldMark> {
        let k = Self::key(&self.redis, user);
        let mut pipe = self.redis.servers.pipe();
        pipe.add(&k, redis::cmd("HMGET").arg(&k).arg("v").arg("m").arg("mv").clone());
        let v = pipe.query().await.map_err(redis_err)?;
        let [version, mark, at]: [Option<String>; 3] = match v.first().map(redis::from_redis_value) {
            Some(Ok(x)) => x,
            Some(Err(e)) => return Err(redis_err(e)),
            None => [None, None, None],
        };
        let version = version.unwrap_or_default();
        Ok(match (mark.as_deref(), at) {
            (Some("0"), Some(at)) if at == version => HeldMark::Nothing,
            (Some("1"), Some(at)) if at == version => HeldMark::Some,
            _ => HeldMark::Unknown(version),
        })
    }

    async fn set(&self, user: UserId, version: &str, any: bool) -> StoreResult<()> {
        let k = Self::key(&self.redis, user);
        let mut pipe = self.redis.servers.pipe();
        pipe.add_ignored(
            &k,
            redis::cmd("EVALSHA")
                .arg(self.script.get_hash())
                .arg(1)
                .arg(&k)
                .arg(version)
                .arg(u8::from(any))
                .arg(self.ttl.as_secs().max(1))
                .clone(),
        );
        pipe.query_loading(Some(&self.script)).await.map(|_| ()).map_err(redis_err)
    }

    async fn changed(&self, users: &[UserId]) {
        if users.is_empty() {
            return;
        }
        let ids: Vec<u64> = users.iter().map(|u| u.0).collect();
        if let Err(e) = Self::bump(&self.redis, self.ttl, &ids).await {
            tracing::warn!(error = %e, users = ids.len(), "forgetting held marks failed; retrying");
            metrics::counter!("likewise_shared_cache_errors_total").increment(1);
            let mut p = self.pending.lock();
            if p.len() + ids.len() <= MAX_PENDING {
                p.extend(ids);
            } else {
                metrics::counter!("likewise_held_marks_dropped_total").increment(ids.len() as u64);
            }
            drop(p);
            self.retry_later();
        }
    }
}

/// The rank index, telling the held marks about every unlisted entry it writes (held or
/// hidden top-level comments), once written.
pub struct MarkingRanks {
    inner: Arc<dyn RankIndex>,
    marks: Arc<dyn HeldMarks>,
}

impl MarkingRanks {
    /// Wrap `inner`.
    pub fn new(inner: Arc<dyn RankIndex>, marks: Arc<dyn HeldMarks>) -> Self {
        MarkingRanks { inner, marks }
    }
}

#[async_trait]
impl RankIndex for MarkingRanks {
    async fn change_ranks(&self, changes: &[RankChange]) -> StoreResult<()> {
        self.inner.change_ranks(changes).await?;
        let mut authors: Vec<UserId> = changes
            .iter()
            .filter_map(|c| match c {
                RankChange::Put(e) if !e.listed => Some(e.author),
                _ => None,
            })
            .collect();
        authors.sort_unstable();
        authors.dedup();
        self.marks.changed(&authors).await;
        Ok(())
    }

    async fn ranks_of(&self, post: PostId, comments: &[CommentId]) -> StoreResult<Vec<Option<RankEntry>>> {
        self.inner.ranks_of(post, comments).await
    }

    async fn held_ranks(
        &self,
        post: PostId,
        author: Option<UserId>,
        limit: usize,
    ) -> StoreResult<Vec<RankEntry>> {
        self.inner.held_ranks(post, author, limit).await
    }

    async fn held_by_author(
        &self,
        author: UserId,
        posts: &[PostId],
        limit: usize,
    ) -> StoreResult<Vec<RankEntry>> {
        self.inner.held_by_author(author, posts, limit).await
    }

    async fn any_held_by(&self, author: UserId) -> StoreResult<bool> {
        self.inner.any_held_by(author).await
    }

    async fn ranked(
        &self,
        post: PostId,
        after: Option<(f64, CommentId)>,
        limit: usize,
    ) -> StoreResult<Vec<RankEntry>> {
        self.inner.ranked(post, after, limit).await
    }

    async fn rank_version(&self, post: PostId) -> StoreResult<u64> {
        self.inner.rank_version(post).await
    }

    async fn ranked_at(
        &self,
        post: PostId,
        version: u64,
        after: Option<(f64, CommentId)>,
        limit: usize,
    ) -> StoreResult<Vec<RankEntry>> {
        self.inner.ranked_at(post, version, after, limit).await
    }

    async fn held_ranks_at(
        &self,
        post: PostId,
        version: u64,
        author: Option<UserId>,
        limit: usize,
    ) -> StoreResult<Vec<RankEntry>> {
        self.inner.held_ranks_at(post, version, author, limit).await
    }
}

#[cfg(test)]
mod tests {
    //! Against the Redis at 127.0.0.1:6379, under a key prefix of the test's own.
    use super::*;
    use crate::shared_cache::RedisOptions;

    #[tokio::test]
    async fn a_mark_read_before_a_change_is_never_believed_after_it() {
        let opts = RedisOptions {
            prefix: format!("lwtest:held:{}", rand::random::<u64>()),
            ..RedisOptions::default()
        };
        let redis = Redis::connect(&opts).await.expect("Redis must be up at 127.0.0.1:6379");
        let marks = RedisHeldMarks::new(redis.clone(), Duration::from_secs(60));
        let (a, b) = (UserId(1), UserId(2));

        // Unknown, then known once set with the version read.
        let HeldMark::Unknown(v) = marks.get(a).await.expect("get") else { panic!("unknown at first") };
        marks.set(a, &v, false).await.expect("set");
        assert_eq!(marks.get(a).await.expect("get"), HeldMark::Nothing);

        // A change between the read of the version and the mark: the mark is not written.
        marks.changed(&[a]).await;
        let HeldMark::Unknown(v) = marks.get(a).await.expect("get") else { panic!("forgotten") };
        marks.changed(&[a, b]).await;
        marks.set(a, &v, false).await.expect("set");
        assert!(matches!(marks.get(a).await.expect("get"), HeldMark::Unknown(_)), "stale mark refused");

        // Set with the current version: believed until the next change.
        let HeldMark::Unknown(v) = marks.get(a).await.expect("get") else { panic!("unknown") };
        marks.set(a, &v, true).await.expect("set");
        assert_eq!(marks.get(a).await.expect("get"), HeldMark::Some);
        let HeldMark::Unknown(v) = marks.get(b).await.expect("get") else { panic!("b unknown") };
        marks.set(b, &v, false).await.expect("set");
        assert_eq!(marks.get(b).await.expect("get"), HeldMark::Nothing);
        marks.changed(&[b]).await;
        assert!(matches!(marks.get(b).await.expect("get"), HeldMark::Unknown(_)));

        let mut c = redis.servers.conn_for("");
        let keys: Vec<String> =
            redis::cmd("KEYS").arg(format!("{}:*", opts.prefix)).query_async(&mut c).await.expect("keys");
        let _: () = redis::cmd("DEL").arg(&keys).query_async(&mut c).await.expect("del");
    }
}
