//! Upstream data on PostgreSQL: posts (on the post's shard), users, follows and settings (on
//! the user's shard). Records are stored in their versioned binary form, the same bytes the
//! embedded engine keeps, so decoding and its corruption checks are shared.

use super::moderation::{lim, ord, unord};
use super::{PgStore, i, pg_err, u};
use async_trait::async_trait;
use futures::future::try_join_all;
use likewise_core::ids::{PostId, UserId};
use likewise_core::model::{BadRecord, PostMeta, UserProfile, ViewerSettings};
use likewise_core::ports::MetaStore;
use likewise_core::{StoreError, StoreResult};
use std::collections::HashMap;

fn corrupt(keyspace: &'static str) -> impl Fn(BadRecord) -> StoreError {
    move |e| StoreError::Corrupt { keyspace, detail: e.to_string() }
}

/// The blob stored under each key, in the order of `keys` (`None` when absent): one
/// `= ANY($1)` query per shard, the shards queried concurrently. `sql` selects (key, blob).
async fn fetch_blobs(
    s: &PgStore,
    sql: &str,
    keys: &[u64],
    shard: impl Fn(&u64) -> usize,
) -> StoreResult<Vec<Option<Vec<u8>>>> {
    let groups = s.group(keys, shard);
    let parts = try_join_all(groups.iter().map(|(sh, idx)| async move {
        let ids: Vec<i64> = idx.iter().map(|k| i(keys[*k])).collect();
        let c = s.conn(*sh).await?;
        let rows = c.query(sql, &[&ids]).await.map_err(pg_err)?;
        Ok::<_, StoreError>(
            rows.into_iter().map(|r| (u(r.get(0)), r.get::<_, Vec<u8>>(1))).collect::<Vec<_>>(),
        )
    }))
    .await?;
    let found: HashMap<u64, Vec<u8>> = parts.into_iter().flatten().collect();
    Ok(keys.iter().map(|k| found.get(k).cloned()).collect())
}

#[async_trait]
impl MetaStore for PgStore {
    async fn put_post(&self, id: PostId, meta: PostMeta) -> StoreResult<()> {
        let c = self.conn(self.shard_of_post(id)).await?;
        c.execute(
            "INSERT INTO posts (post_id, meta) VALUES ($1, $2)
             ON CONFLICT (post_id) DO UPDATE SET meta = EXCLUDED.meta",
            &[&i(id.0), &meta.encode()],
        )
        .await
        .map_err(pg_err)?;
        Ok(())
    }

    async fn posts(&self, ids: &[PostId]) -> StoreResult<Vec<Option<PostMeta>>> {
        let keys: Vec<u64> = ids.iter().map(|p| p.0).collect();
        let sql = "SELECT post_id, meta FROM posts WHERE post_id = ANY($1)";
        fetch_blobs(self, sql, &keys, |k| self.shard_of_post(PostId(*k)))
            .await?
            .into_iter()
            .map(|b| b.map(|b| PostMeta::decode(&b).map_err(corrupt("posts"))).transpose())
            .collect()
    }

    async fn put_user(&self, id: UserId, profile: UserProfile) -> StoreResult<()> {
        let c = self.conn(self.shard_of_user(id)).await?;
        c.execute(
            "INSERT INTO users (user_id, profile) VALUES ($1, $2)
             ON CONFLICT (user_id) DO UPDATE SET profile = EXCLUDED.profile",
            &[&i(id.0), &profile.encode()],
        )
        .await
        .map_err(pg_err)?;
        Ok(())
    }

    async fn users(&self, ids: &[UserId]) -> StoreResult<Vec<Option<UserProfile>>> {
        let keys: Vec<u64> = ids.iter().map(|p| p.0).collect();
        let sql = "SELECT user_id, profile FROM users WHERE user_id = ANY($1)";
        fetch_blobs(self, sql, &keys, |k| self.shard_of_user(UserId(*k)))
            .await?
            .into_iter()
            .map(|b| b.map(|b| UserProfile::decode(&b).map_err(corrupt("users"))).transpose())
            .collect()
    }

    async fn set_follow(&self, follower: UserId, followee: UserId, follows: bool) -> StoreResult<()> {
        // Only the follower-keyed direction: no port reads "who follows me".
        let c = self.conn(self.shard_of_user(follower)).await?;
        let sql = if follows {
            "INSERT INTO follows (follower, followee_ord) VALUES ($1, $2) ON CONFLICT DO NOTHING"
        } else {
            "DELETE FROM follows WHERE follower = $1 AND followee_ord = $2"
        };
        c.execute(sql, &[&i(follower.0), &ord(followee.0)]).await.map_err(pg_err)?;
        Ok(())
    }

    async fn followees(&self, follower: UserId, limit: usize) -> StoreResult<Vec<UserId>> {
        let c = self.conn(self.shard_of_user(follower)).await?;
        let rows = c
            .query(
                "SELECT followee_ord FROM follows WHERE follower = $1 ORDER BY followee_ord LIMIT $2",
                &[&i(follower.0), &lim(limit)],
            )
            .await
            .map_err(pg_err)?;
        Ok(rows.iter().map(|r| UserId(unord(r.get(0)))).collect())
    }

    async fn put_settings(&self, user: UserId, settings: ViewerSettings) -> StoreResult<()> {
        let c = self.conn(self.shard_of_user(user)).await?;
        c.execute(
            "INSERT INTO settings (user_id, settings) VALUES ($1, $2)
             ON CONFLICT (user_id) DO UPDATE SET settings = EXCLUDED.settings",
            &[&i(user.0), &settings.encode()],
        )
        .await
        .map_err(pg_err)?;
        Ok(())
    }

    async fn settings(&self, user: UserId) -> StoreResult<ViewerSettings> {
        let c = self.conn(self.shard_of_user(user)).await?;
        let row = c
            .query_opt("SELECT settings FROM settings WHERE user_id = $1", &[&i(user.0)])
            .await
            .map_err(pg_err)?;
        match row {
            Some(r) => ViewerSettings::decode(r.get(0)).map_err(corrupt("settings")),
            None => Ok(ViewerSettings::default()),
        }
    }

    async fn ping(&self) -> StoreResult<()> {
        // Every shard must answer: a request may need any of them.
        try_join_all((0..self.shard_count()).map(|shard| async move {
            let c = self.conn(shard).await?;
            c.simple_query("SELECT 1").await.map_err(|e| pg_err(format!("shard {shard}: {e}")))?;
            Ok::<_, StoreError>(())
        }))
        .await?;
        Ok(())
    }
}
