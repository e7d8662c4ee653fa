//! Like reads. "Has this viewer liked these posts?" and "what has this user liked?" are
//! answered by the user-keyed reverse index (one query on the viewer's shard, whatever the
//! posts' shards); "who liked this?" by the like rows on the target's shard.

use super::{PgStore, i, pg_err, u};
use async_trait::async_trait;
use likewise_core::StoreResult;
use likewise_core::ids::{CommentId, PostId, UserId};
use likewise_core::like::{Target, TargetKind};
use likewise_core::ports::{LikeReader, Liker};
use std::collections::HashSet;

impl PgStore {
    /// The shard holding a target's like rows (a comment lives on its post's shard).
    pub fn shard_of_target(&self, t: Target) -> usize {
        match t.kind {
            TargetKind::Post => self.shard_of_post(PostId(t.id)),
            TargetKind::Comment => self.shard_of_comment(CommentId(t.id)),
        }
    }
}

#[async_trait]
impl LikeReader for PgStore {
    async fn liked_among(&self, user: UserId, kind: TargetKind, ids: &[u64]) -> StoreResult<Vec<bool>> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let c = self.conn(self.shard_of_user(user)).await?;
        let want: Vec<i64> = ids.iter().map(|v| i(*v)).collect();
        let rows = c
            .query(
                "SELECT target FROM user_likes WHERE user_id = $1 AND kind = $2 AND target = ANY($3)",
                &[&i(user.0), &i16::from(kind.code()), &want],
            )
            .await
            .map_err(pg_err)?;
        let yes: HashSet<u64> = rows.iter().map(|r| u(r.get(0))).collect();
        Ok(ids.iter().map(|v| yes.contains(v)).collect())
    }

    async fn liked_ids(&self, user: UserId, kind: TargetKind, limit: usize) -> StoreResult<Vec<u64>> {
        let c = self.conn(self.shard_of_user(user)).await?;
        let rows = c
            .query(
                "SELECT target FROM user_likes WHERE user_id = $1 AND kind = $2 ORDER BY target LIMIT $3",
                &[&i(user.0), &i16::from(kind.code()), &(limit as i64)],
            )
            .await
            .map_err(pg_err)?;
        Ok(rows.iter().map(|r| u(r.get(0))).collect())
    }

    async fn likers(&self, target: Target, after: Option<Liker>, limit: usize) -> StoreResult<Vec<Liker>> {
        let c = self.conn(self.shard_of_target(target)).await?;
        let (at, user) = after.map_or((i64::MAX, i64::MAX), |a| (i(a.liked_at_ms), i(a.user.0)));
        let rows = c
            .query(
                "SELECT user_id, liked_at FROM likes
                 WHERE kind = $1 AND target = $2 AND (liked_at, user_id) < ($3, $4)
                 ORDER BY liked_at DESC, user_id DESC LIMIT $5",
                &[&i16::from(target.kind.code()), &i(target.id), &at, &user, &(limit as i64)],
            )
            .await
            .map_err(pg_err)?;
        Ok(rows.iter().map(|r| Liker { user: UserId(u(r.get(0))), liked_at_ms: u(r.get(1)) }).collect())
    }
}
