//! Comment reads: keyset pages on the post's shard, so page 5,000 costs what page 1 costs.

use super::write::{comment_cols, comment_row};
use super::{PgStore, i, pg_err};
use async_trait::async_trait;
use likewise_core::StoreResult;
use likewise_core::ids::{CommentId, PostId};
use likewise_core::ports::CommentReader;
use likewise_core::write::CommentRecord;
use std::collections::HashMap;

#[async_trait]
impl CommentReader for PgStore {
    async fn comments(&self, ids: &[CommentId]) -> StoreResult<Vec<Option<CommentRecord>>> {
        let mut found: HashMap<u64, CommentRecord> = HashMap::new();
        for (shard, idx) in self.group(ids, |id| self.shard_of_comment(*id)) {
            let c = self.conn(shard).await?;
            let want: Vec<i64> = idx.iter().map(|k| i(ids[*k].0)).collect();
            let q = format!("SELECT {} FROM comments WHERE id = ANY($1)", comment_cols());
            for r in c.query(&q, &[&want]).await.map_err(pg_err)? {
                let rec = comment_row(&r)?;
                found.insert(rec.id.0, rec);
            }
        }
        Ok(ids.iter().map(|id| found.get(&id.0).cloned()).collect())
    }

    async fn top_level(
        &self,
        post: PostId,
        newest_first: bool,
        after: Option<CommentId>,
        limit: usize,
    ) -> StoreResult<Vec<CommentRecord>> {
        let c = self.conn(self.shard_of_post(post)).await?;
        let q = if newest_first {
            format!(
                "SELECT {} FROM comments WHERE post_id = $1 AND parent IS NULL AND id < $2
                 ORDER BY id DESC LIMIT $3",
                comment_cols()
            )
        } else {
            format!(
                "SELECT {} FROM comments WHERE post_id = $1 AND parent IS NULL AND id > $2
                 ORDER BY id ASC LIMIT $3",
                comment_cols()
            )
        };
        let bound = match (after, newest_first) {
            (Some(a), _) => i(a.0),
            (None, true) => i64::MAX,
            (None, false) => i64::MIN,
        };
        let rows = c.query(&q, &[&i(post.0), &bound, &(limit as i64)]).await.map_err(pg_err)?;
        rows.iter().map(comment_row).collect()
    }

    async fn replies(
        &self,
        parent: CommentId,
        after: Option<CommentId>,
        limit: usize,
    ) -> StoreResult<Vec<CommentRecord>> {
        let c = self.conn(self.shard_of_comment(parent)).await?;
        let q = format!(
            "SELECT {} FROM comments WHERE parent = $1 AND id > $2 ORDER BY id ASC LIMIT $3",
            comment_cols()
        );
        let rows = c
            .query(&q, &[&i(parent.0), &after.map_or(i64::MIN, |a| i(a.0)), &(limit as i64)])
            .await
            .map_err(pg_err)?;
        rows.iter().map(comment_row).collect()
    }
}
