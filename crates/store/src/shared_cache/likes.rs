//! Viewer likes through Redis (see the module docs of `shared_cache`).

use super::Redis;
use async_trait::async_trait;
use likewise_core::ids::UserId;
use likewise_core::like::{Target, TargetKind};
use likewise_core::ports::{LikeReader, Liker, OwnLikes};
use likewise_core::{StoreError, StoreResult};
use std::sync::Arc;
use tokio::sync::{mpsc, oneshot};

/// A [`LikeReader`] that answers from the viewer's own recent writes first, and records them.
pub struct CachedLikes {
    inner: Arc<dyn LikeReader>,
    redis: Redis,
    writes: mpsc::UnboundedSender<OwnWrite>,
}

impl CachedLikes {
    /// Wrap `inner` (starts the own-likes writer task: call inside a Tokio runtime).
    pub fn new(inner: Arc<dyn LikeReader>, redis: Redis) -> Self {
        let (writes, rx) = mpsc::unbounded_channel();
        tokio::spawn(write_loop(redis.clone(), rx));
        CachedLikes { inner, redis, writes }
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
        let (reply, done) = oneshot::channel();
        self.writes
            .send(OwnWrite { key: self.user_key(user), field: field(target.kind, target.id), liked, reply })
            .map_err(|_| StoreError::Closed)?;
        done.await.map_err(|_| StoreError::Closed)?
    }
}

/// One viewer's write waiting for the next pipeline.
struct OwnWrite {
    key: String,
    field: String,
    liked: bool,
    reply: oneshot::Sender<StoreResult<()>>,
}

/// Most writes per pipeline.
const MAX_PIPELINE: usize = 4_096;

/// Write every queued own-like record in ONE pipeline (an `HSET` and an `EXPIRE` per viewer
/// key), then answer each caller: under a like storm, one round trip and one read/write
/// system call pair on Redis carry thousands of records instead of one each.
async fn write_loop(redis: Redis, mut rx: mpsc::UnboundedReceiver<OwnWrite>) {
    let ttl = redis.opts.own_likes_ttl.as_secs().max(1) as i64;
    while let Some(first) = rx.recv().await {
        let mut batch = vec![first];
        while batch.len() < MAX_PIPELINE {
            match rx.try_recv() {
                Ok(w) => batch.push(w),
                Err(_) => break,
            }
        }
        let mut by_key: std::collections::HashMap<&str, Vec<&OwnWrite>> = std::collections::HashMap::new();
        for w in &batch {
            by_key.entry(w.key.as_str()).or_default().push(w);
        }
        let mut pipe = redis::pipe();
        for (key, writes) in &by_key {
            let mut hset = redis::cmd("HSET");
            hset.arg(*key);
            for w in writes {
                hset.arg(&w.field).arg(if w.liked { "1" } else { "0" });
            }
            pipe.add_command(hset).ignore();
            pipe.cmd("EXPIRE").arg(*key).arg(ttl).ignore();
        }
        let mut conn = redis.conn.clone();
        let result = pipe.query_async::<()>(&mut conn).await.map_err(|e| e.to_string());
        metrics::histogram!("likewise_own_likes_pipeline_size").record(batch.len() as f64);
        for w in batch {
            let _ = w.reply.send(result.clone().map_err(|e| StoreError::Engine(format!("redis: {e}"))));
        }
    }
}
