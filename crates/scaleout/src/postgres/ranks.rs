//! The rank index on PostgreSQL (`RankIndex`): `comment_ranks` on the post's shard
//! (`migrations/0012_comment_ranks.sql`), read best first through its
//! `(post_id, score DESC, comment_id DESC) WHERE listed` index; unlisted rows by
//! `(post_id, author_id)`.
//!
//! A batch of changes is one transaction per shard it touches, applied in order (upserts and
//! deletes by primary key). Only a post's shard aggregator writes its rows.

use super::{PgStore, i, pg_err, u};
use async_trait::async_trait;
use futures::future::try_join_all;
use likewise_core::StoreResult;
use likewise_core::ids::{CommentId, PostId, UserId};
use likewise_core::ports::{RankChange, RankEntry, RankIndex};
use std::collections::BTreeMap;

impl PgStore {
    /// One shard's changes, in order, in one transaction.
    async fn change_ranks_shard(&self, shard: usize, changes: Vec<RankChange>) -> StoreResult<()> {
        // The last change of each comment is what the batch leaves (changes compose in order).
        let mut last: BTreeMap<(i64, i64), RankChange> = BTreeMap::new();
        for c in changes {
            let key = match c {
                RankChange::Put(e) => (i(e.post.0), i(e.comment.0)),
                RankChange::Remove { post, comment } => (i(post.0), i(comment.0)),
            };
            last.insert(key, c);
        }
        let (mut posts, mut comments, mut scores, mut replied) = (vec![], vec![], vec![], vec![]);
        let (mut authors, mut listed, mut liked, mut factors) = (vec![], vec![], vec![], vec![]);
        let (mut gone_posts, mut gone) = (vec![], vec![]);
        for ((post, comment), c) in last {
            match c {
                RankChange::Put(e) => {
                    posts.push(post);
                    comments.push(comment);
                    scores.push(e.score);
                    replied.push(e.author_replied);
                    authors.push(i(e.author.0));
                    listed.push(e.listed);
                    liked.push(e.author_liked);
                    factors.push(e.factor);
                }
                RankChange::Remove { .. } => {
                    gone_posts.push(post);
                    gone.push(comment);
                }
            }
        }
        let mut c = self.conn(shard).await?;
        let tx = c.transaction().await.map_err(pg_err)?;
        if !posts.is_empty() {
            tx.execute(
                "INSERT INTO comment_ranks
                     (post_id, comment_id, score, author_replied, author_id, listed, author_liked, factor)
                 SELECT * FROM unnest($1::bigint[], $2::bigint[], $3::float8[], $4::bool[], $5::bigint[],
                     $6::bool[], $7::bool[], $8::float8[])
                 ON CONFLICT (post_id, comment_id)
                 DO UPDATE SET score = EXCLUDED.score, author_replied = EXCLUDED.author_replied,
                     author_id = EXCLUDED.author_id, listed = EXCLUDED.listed,
                     author_liked = EXCLUDED.author_liked, factor = EXCLUDED.factor",
                &[&posts, &comments, &scores, &replied, &authors, &listed, &liked, &factors],
            )
            .await
            .map_err(pg_err)?;
        }
        if !gone.is_empty() {
            tx.execute(
                "DELETE FROM comment_ranks r USING unnest($1::bigint[], $2::bigint[]) AS g(post_id, comment_id)
                 WHERE r.post_id = g.post_id AND r.comment_id = g.comment_id",
                &[&gone_posts, &gone],
            )
            .await
            .map_err(pg_err)?;
        }
        tx.commit().await.map_err(pg_err)
    }
}

/// Columns every read selects, in [`entry`]'s order.
const COLUMNS: &str = "comment_id, score, author_replied, author_id, listed, author_liked, factor";

fn entry(post: PostId, row: &tokio_postgres::Row) -> RankEntry {
    RankEntry {
        post,
        comment: CommentId(u(row.get(0))),
        score: row.get(1),
        author_replied: row.get(2),
        author: UserId(u(row.get(3))),
        listed: row.get(4),
        author_liked: row.get(5),
        factor: row.get(6),
    }
}

#[async_trait]
impl RankIndex for PgStore {
    async fn change_ranks(&self, changes: &[RankChange]) -> StoreResult<()> {
        let mut by_shard: BTreeMap<usize, Vec<RankChange>> = BTreeMap::new();
        for c in changes {
            let post = match c {
                RankChange::Put(e) => e.post,
                RankChange::Remove { post, .. } => *post,
            };
            by_shard.entry(self.shard_of_post(post)).or_default().push(*c);
        }
        try_join_all(by_shard.into_iter().map(|(shard, cs)| self.change_ranks_shard(shard, cs))).await?;
        Ok(())
    }

    async fn ranks_of(&self, post: PostId, comments: &[CommentId]) -> StoreResult<Vec<Option<RankEntry>>> {
        if comments.is_empty() {
            return Ok(Vec::new());
        }
        let c = self.conn(self.shard_of_post(post)).await?;
        let ids: Vec<i64> = comments.iter().map(|c| i(c.0)).collect();
        let rows = c
            .query(
                &format!("SELECT {COLUMNS} FROM comment_ranks WHERE post_id = $1 AND comment_id = ANY($2)"),
                &[&i(post.0), &ids],
            )
            .await
            .map_err(pg_err)?;
        let found: std::collections::HashMap<u64, RankEntry> =
            rows.iter().map(|r| entry(post, r)).map(|e| (e.comment.0, e)).collect();
        Ok(comments.iter().map(|c| found.get(&c.0).copied()).collect())
    }

    async fn held_ranks(
        &self,
        post: PostId,
        author: Option<UserId>,
        limit: usize,
    ) -> StoreResult<Vec<RankEntry>> {
        let c = self.conn(self.shard_of_post(post)).await?;
        let limit = limit.min(i64::MAX as usize) as i64;
        let rows = match author {
            Some(a) => c
                .query(
                    &format!(
                        "SELECT {COLUMNS} FROM comment_ranks WHERE post_id = $1 AND NOT listed AND author_id = $2
                         LIMIT $3"
                    ),
                    &[&i(post.0), &i(a.0), &limit],
                )
                .await,
            None => c
                .query(
                    &format!("SELECT {COLUMNS} FROM comment_ranks WHERE post_id = $1 AND NOT listed LIMIT $2"),
                    &[&i(post.0), &limit],
                )
                .await,
        }
        .map_err(pg_err)?;
        Ok(rows.iter().map(|r| entry(post, r)).collect())
    }

    async fn ranked(
        &self,
        post: PostId,
        after: Option<(f64, CommentId)>,
        limit: usize,
    ) -> StoreResult<Vec<RankEntry>> {
        let c = self.conn(self.shard_of_post(post)).await?;
        let limit = limit.min(i64::MAX as usize) as i64;
        let rows = match after {
            None => {
                c.query(
                    &format!(
                        "SELECT {COLUMNS} FROM comment_ranks WHERE post_id = $1 AND listed
                         ORDER BY score DESC, comment_id DESC LIMIT $2"
                    ),
                    &[&i(post.0), &limit],
                )
                .await
            }
            Some((score, id)) => {
                c.query(
                    &format!(
                        "SELECT {COLUMNS} FROM comment_ranks
                         WHERE post_id = $1 AND listed AND (score, comment_id) < ($2, $3)
                         ORDER BY score DESC, comment_id DESC LIMIT $4"
                    ),
                    &[&i(post.0), &score, &i(id.0), &limit],
                )
                .await
            }
        }
        .map_err(pg_err)?;
        Ok(rows.iter().map(|r| entry(post, r)).collect())
    }
}
