//! Viewer likes through Redis (see the module docs of `shared_cache`).

use super::{Redis, redis_err};
use async_trait::async_trait;
use likewise_core::StoreResult;
use likewise_core::ids::UserId;
use likewise_core::like::{Target, TargetKind};
use likewise_core::ports::{LikeReader, Liker, OwnLikes};
use std::sync::Arc;

/// A [`LikeReader`] that answers from the viewer's own recent writes first, and records them.
pub struct CachedLikes {
    inner: Arc<dyn LikeReader>,
    redis: Redis,
}

impl CachedLikes {
    /// Wrap `inner`.
    pub fn new(inner: Arc<dyn LikeReader>, redis: Redis) -> Self {
        CachedLikes { inner, redis }
    }

    fn user_key(&self, user: UserId) -> String {
        self.redis.key(&format!("lk:{}", user.0))
    }
}

fn field(kind: TargetKind, id: u64) -> String {
    format!("{}:{id}", kind.code())
}

#[async_trait]
impl LikeReader for CachedLikes {
    async fn liked_among(&self, user: UserId, kind: TargetKind, ids: &[u64]) -> StoreResult<Vec<bool>> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let fields: Vec<String> = ids.iter().map(|id| field(kind, *id)).collect();
        let mut conn = self.redis.conn.clone();
        let own: Vec<Option<String>> =
            match redis::cmd("HMGET").arg(self.user_key(user)).arg(&fields).query_async(&mut conn).await {
                Ok(v) => v,
                Err(e) => {
                    tracing::warn!(error = %e, "own-likes read failed; asking the reverse index");
                    metrics::counter!("likewise_shared_cache_errors_total").increment(1);
                    vec![None; ids.len()]
                }
            };
        let ask: Vec<u64> = ids.iter().zip(&own).filter(|(_, o)| o.is_none()).map(|(id, _)| *id).collect();
        let looked =
            if ask.is_empty() { Vec::new() } else { self.inner.liked_among(user, kind, &ask).await? };
        let mut looked = looked.into_iter();
        Ok(own
            .into_iter()
            .map(|o| match o.as_deref() {
                Some("1") => true,
                Some(_) => false,
                None => looked.next().unwrap_or(false),
            })
            .collect())
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
        let key = self.user_key(user);
        let ttl = self.redis.opts.own_likes_ttl.as_secs().max(1) as i64;
        let mut conn = self.redis.conn.clone();
        redis::pipe()
            .cmd("HSET")
            .arg(&key)
            .arg(field(target.kind, target.id))
            .arg(if liked { "1" } else { "0" })
            .ignore()
            .cmd("EXPIRE")
            .arg(&key)
            .arg(ttl)
            .ignore()
            .query_async::<()>(&mut conn)
            .await
            .map_err(redis_err)
    }
}
