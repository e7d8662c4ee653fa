//! Moderation state on PostgreSQL (tables in `migrations/0003_*.sql`).
//!
//! - blocks, restricts, hidden words, fingerprints: on the owner's (user's) shard;
//! - pins: on the post's shard, one array per post (array order is pin order);
//! - reports, report counts, the review queue, holds and appeals (`0008_*.sql`): on the
//!   comment's shard (its ID's low bits);
//!   whether a report counts is `likewise_core::comment::report`'s rule.
//!
//! Every write is one autocommit statement, or for a report one short transaction (durable on
//! return). Listings that the embedded engine returns in u64 order use the `*_ord` columns (top
//! bit flipped), so bigint order is u64 order even for IDs >= 2^63.

use super::{PgStore, i, pg_err, u};
use async_trait::async_trait;
use futures::future::try_join_all;
use likewise_core::comment::appeal::{HeldBy, QueueNote};
use likewise_core::comment::pins::{PinChange, change_pins};
use likewise_core::comment::report::{ReportOutcome, report};
use likewise_core::ids::{CommentId, PostId, UserId};
use likewise_core::ports::{ModerationStore, ReportReason};
use likewise_core::{StoreError, StoreResult};
use std::collections::HashMap;

/// A u64 as an order-preserving bigint (top bit flipped): `ord(a) < ord(b)` iff `a < b`.
pub(super) fn ord(v: u64) -> i64 {
    (v ^ (1 << 63)) as i64
}

/// Inverse of [`ord`].
pub(super) fn unord(v: i64) -> u64 {
    (v as u64) ^ (1 << 63)
}

/// A `LIMIT` parameter (usize::MAX means "no limit" and still fits).
pub(super) fn lim(limit: usize) -> i64 {
    i64::try_from(limit).unwrap_or(i64::MAX)
}

/// A stored report count, clamped into the port's `u32`.
fn count32(v: i64) -> u32 {
    u32::try_from(v.max(0)).unwrap_or(u32::MAX)
}

impl PgStore {
    /// Set or clear a directed flag row (`blocks` / `restricts` statements given).
    async fn set_flag(
        &self,
        owner: UserId,
        other: i64,
        on: bool,
        insert: &str,
        delete: &str,
    ) -> StoreResult<()> {
        let c = self.conn(self.shard_of_user(owner)).await?;
        c.execute(if on { insert } else { delete }, &[&i(owner.0), &other]).await.map_err(pg_err)?;
        Ok(())
    }

    /// Does a flag row exist (`sql` selects EXISTS for (owner, other))?
    async fn has_flag(&self, owner: UserId, other: i64, sql: &str) -> StoreResult<bool> {
        let c = self.conn(self.shard_of_user(owner)).await?;
        Ok(c.query_one(sql, &[&i(owner.0), &other]).await.map_err(pg_err)?.get(0))
    }
}

#[async_trait]
impl ModerationStore for PgStore {
    async fn set_block(&self, owner: UserId, other: UserId, on: bool) -> StoreResult<()> {
        self.set_flag(
            owner,
            ord(other.0),
            on,
            "INSERT INTO blocks (owner, other_ord) VALUES ($1, $2) ON CONFLICT DO NOTHING",
            "DELETE FROM blocks WHERE owner = $1 AND other_ord = $2",
        )
        .await
    }

    async fn is_blocked(&self, owner: UserId, other: UserId) -> StoreResult<bool> {
        let sql = "SELECT EXISTS (SELECT 1 FROM blocks WHERE owner = $1 AND other_ord = $2)";
        self.has_flag(owner, ord(other.0), sql).await
    }

    async fn blocked_users(&self, owner: UserId, limit: usize) -> StoreResult<Vec<UserId>> {
        let c = self.conn(self.shard_of_user(owner)).await?;
        let rows = c
            .query(
                "SELECT other_ord FROM blocks WHERE owner = $1 ORDER BY other_ord LIMIT $2",
                &[&i(owner.0), &lim(limit)],
            )
            .await
            .map_err(pg_err)?;
        Ok(rows.iter().map(|r| UserId(unord(r.get(0)))).collect())
    }

    async fn set_restrict(&self, owner: UserId, other: UserId, on: bool) -> StoreResult<()> {
        self.set_flag(
            owner,
            i(other.0),
            on,
            "INSERT INTO restricts (owner, other) VALUES ($1, $2) ON CONFLICT DO NOTHING",
            "DELETE FROM restricts WHERE owner = $1 AND other = $2",
        )
        .await
    }

    async fn is_restricted(&self, owner: UserId, other: UserId) -> StoreResult<bool> {
        let sql = "SELECT EXISTS (SELECT 1 FROM restricts WHERE owner = $1 AND other = $2)";
        self.has_flag(owner, i(other.0), sql).await
    }

    async fn put_hidden_words(&self, owner: UserId, words: &[String]) -> StoreResult<()> {
        let c = self.conn(self.shard_of_user(owner)).await?;
        // An empty list is the same as never set: no row.
        if words.is_empty() {
            c.execute("DELETE FROM hidden_words WHERE owner = $1", &[&i(owner.0)]).await
        } else {
            c.execute(
                "INSERT INTO hidden_words (owner, words) VALUES ($1, $2)
                 ON CONFLICT (owner) DO UPDATE SET words = EXCLUDED.words",
                &[&i(owner.0), &words],
            )
            .await
        }
        .map_err(pg_err)?;
        Ok(())
    }

    async fn hidden_words(&self, owner: UserId) -> StoreResult<Vec<String>> {
        let c = self.conn(self.shard_of_user(owner)).await?;
        let row = c
            .query_opt("SELECT words FROM hidden_words WHERE owner = $1", &[&i(owner.0)])
            .await
            .map_err(pg_err)?;
        Ok(row.map(|r| r.get(0)).unwrap_or_default())
    }

    async fn set_pins(&self, post: PostId, pins: &[CommentId]) -> StoreResult<()> {
        let c = self.conn(self.shard_of_post(post)).await?;
        // The service enforces the pin cap; the store keeps exactly what it is given, in order.
        if pins.is_empty() {
            c.execute("DELETE FROM pins WHERE post_id = $1", &[&i(post.0)]).await
        } else {
            let ids: Vec<i64> = pins.iter().map(|p| i(p.0)).collect();
            c.execute(
                "INSERT INTO pins (post_id, comments) VALUES ($1, $2)
                 ON CONFLICT (post_id) DO UPDATE SET comments = EXCLUDED.comments",
                &[&i(post.0), &ids],
            )
            .await
        }
        .map_err(pg_err)?;
        Ok(())
    }

    async fn pins(&self, post: PostId) -> StoreResult<Vec<CommentId>> {
        let c = self.conn(self.shard_of_post(post)).await?;
        let row = c
            .query_opt("SELECT comments FROM pins WHERE post_id = $1", &[&i(post.0)])
            .await
            .map_err(pg_err)?;
        let ids: Vec<i64> = row.map(|r| r.get(0)).unwrap_or_default();
        Ok(ids.into_iter().map(|v| CommentId(u(v))).collect())
    }

    async fn pins_of(&self, posts: &[PostId]) -> StoreResult<Vec<Vec<CommentId>>> {
        // One query per shard that holds any of the posts, all shards at once.
        let mut by_shard: HashMap<usize, Vec<i64>> = HashMap::new();
        for post in posts {
            by_shard.entry(self.shard_of_post(*post)).or_default().push(i(post.0));
        }
        let found = try_join_all(by_shard.into_iter().map(|(shard, ids)| async move {
            let c = self.conn(shard).await?;
            let rows = c
                .query("SELECT post_id, comments FROM pins WHERE post_id = ANY($1)", &[&ids])
                .await
                .map_err(pg_err)?;
            Ok::<_, StoreError>(rows.into_iter().map(|r| (u(r.get(0)), r.get::<_, Vec<i64>>(1))))
        }))
        .await?;
        let pins: HashMap<u64, Vec<i64>> = found.into_iter().flatten().collect();
        Ok(posts
            .iter()
            .map(|p| {
                pins.get(&p.0).map(|ids| ids.iter().map(|v| CommentId(u(*v))).collect()).unwrap_or_default()
            })
            .collect())
    }

    async fn change_pin(&self, post: PostId, comment: CommentId, pin: bool) -> StoreResult<PinChange> {
        let mut c = self.conn(self.shard_of_post(post)).await?;
        let tx = c.transaction().await.map_err(pg_err)?;
        // The post's row, created empty on its first pin, is held to the end of the
        // transaction: pin changes of one post apply one after the other, each reading the
        // list the previous one wrote.
        tx.execute(
            "INSERT INTO pins (post_id, comments) VALUES ($1, '{}') ON CONFLICT (post_id) DO NOTHING",
            &[&i(post.0)],
        )
        .await
        .map_err(pg_err)?;
        let ids: Vec<i64> = tx
            .query_one("SELECT comments FROM pins WHERE post_id = $1 FOR UPDATE", &[&i(post.0)])
            .await
            .map_err(pg_err)?
            .get(0);
        let current: Vec<CommentId> = ids.into_iter().map(|v| CommentId(u(v))).collect();
        let change = change_pins(&current, comment, pin);
        if let PinChange::Changed(pins) = &change {
            let ids: Vec<i64> = pins.iter().map(|p| i(p.0)).collect();
            tx.execute("UPDATE pins SET comments = $2 WHERE post_id = $1", &[&i(post.0), &ids])
                .await
                .map_err(pg_err)?;
        }
        tx.commit().await.map_err(pg_err)?;
        Ok(change)
    }

    async fn add_report(
        &self,
        comment: CommentId,
        reporter: UserId,
        reason: ReportReason,
    ) -> StoreResult<ReportOutcome> {
        let mut c = self.conn(self.shard_of_comment(comment)).await?;
        let tx = c.transaction().await.map_err(pg_err)?;
        // Hold the comment's count row (created at 0 by its first report) to the end of the
        // transaction: reports of one comment then apply one at a time, so none is lost, and
        // the next statement sees every report committed before this one.
        let row = tx
            .query_one(
                "INSERT INTO report_counts (comment_id, reports) VALUES ($1, 0)
                 ON CONFLICT (comment_id) DO UPDATE SET reports = report_counts.reports
                 RETURNING reports, reviewed",
                &[&i(comment.0)],
            )
            .await
            .map_err(pg_err)?;
        let (count, reviewed): (i64, i64) = (row.get(0), row.get(1));
        let reported: bool = tx
            .query_one(
                "SELECT EXISTS (SELECT 1 FROM reports WHERE comment_id = $1 AND reporter = $2)",
                &[&i(comment.0), &i(reporter.0)],
            )
            .await
            .map_err(pg_err)?
            .get(0);
        let outcome = report(reported, count32(count), count32(reviewed));
        if outcome.counted {
            // The report row and its count move together.
            tx.execute(
                "WITH ins AS (INSERT INTO reports (comment_id, reporter, reason) VALUES ($1, $2, $3))
                 UPDATE report_counts SET reports = $4 WHERE comment_id = $1",
                &[&i(comment.0), &i(reporter.0), &i16::from(reason.code()), &i64::from(outcome.count)],
            )
            .await
            .map_err(pg_err)?;
        }
        tx.commit().await.map_err(pg_err)?;
        Ok(outcome)
    }

    async fn report_counts(&self, comments: &[CommentId]) -> StoreResult<Vec<u32>> {
        let groups = self.group(comments, |c| self.shard_of_comment(*c));
        let parts = try_join_all(groups.iter().map(|(shard, idx)| async move {
            let ids: Vec<i64> = idx.iter().map(|k| i(comments[*k].0)).collect();
            let c = self.conn(*shard).await?;
            let rows = c
                .query("SELECT comment_id, reports FROM report_counts WHERE comment_id = ANY($1)", &[&ids])
                .await
                .map_err(pg_err)?;
            Ok::<_, StoreError>(rows.iter().map(|r| (u(r.get(0)), count32(r.get(1)))).collect::<Vec<_>>())
        }))
        .await?;
        let found: HashMap<u64, u32> = parts.into_iter().flatten().collect();
        Ok(comments.iter().map(|c| found.get(&c.0).copied().unwrap_or(0)).collect())
    }

    async fn set_queued(&self, comment: CommentId, queued: bool) -> StoreResult<()> {
        let c = self.conn(self.shard_of_comment(comment)).await?;
        let sql = if queued {
            "INSERT INTO mod_queue (comment_ord) VALUES ($1) ON CONFLICT DO NOTHING"
        } else {
            "DELETE FROM mod_queue WHERE comment_ord = $1"
        };
        c.execute(sql, &[&ord(comment.0)]).await.map_err(pg_err)?;
        Ok(())
    }

    async fn queue(&self, after: Option<CommentId>, limit: usize) -> StoreResult<Vec<CommentId>> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        // The queue is spread over the comments' shards: take up to `limit` from each, then
        // the `limit` smallest of the union (a comment lives on one shard only, so the union
        // has no duplicates). `after` is an excluded bound, never `after + 1` (which wraps).
        let parts = try_join_all((0..self.shard_count()).map(|shard| async move {
            let c = self.conn(shard).await?;
            let rows = match after {
                Some(a) => {
                    c.query(
                        "SELECT comment_ord FROM mod_queue WHERE comment_ord > $1
                         ORDER BY comment_ord LIMIT $2",
                        &[&ord(a.0), &lim(limit)],
                    )
                    .await
                }
                None => {
                    c.query("SELECT comment_ord FROM mod_queue ORDER BY comment_ord LIMIT $1", &[&lim(limit)])
                        .await
                }
            }
            .map_err(pg_err)?;
            Ok::<_, StoreError>(rows.iter().map(|r| unord(r.get(0))).collect::<Vec<u64>>())
        }))
        .await?;
        // Each part is sorted; at most shards * limit IDs, so a sort is as good as a heap merge.
        let mut all: Vec<u64> = parts.into_iter().flatten().collect();
        all.sort_unstable();
        all.truncate(limit);
        Ok(all.into_iter().map(CommentId).collect())
    }

    async fn set_held_by(&self, comment: CommentId, held_by: Option<HeldBy>) -> StoreResult<()> {
        let c = self.conn(self.shard_of_comment(comment)).await?;
        match held_by {
            Some(h) => {
                c.execute(
                    "INSERT INTO comment_holds (comment_id, held_by) VALUES ($1, $2)
                     ON CONFLICT (comment_id) DO UPDATE SET held_by = EXCLUDED.held_by",
                    &[&i(comment.0), &i16::from(h.code())],
                )
                .await
            }
            // Approved: the hold goes and the reports so far are weighed, in one statement
            // (atomic); the count row's lock orders it with concurrent reports.
            None => {
                c.execute(
                    "WITH del AS (DELETE FROM comment_holds WHERE comment_id = $1)
                     UPDATE report_counts SET reviewed = reports WHERE comment_id = $1",
                    &[&i(comment.0)],
                )
                .await
            }
        }
        .map_err(pg_err)?;
        Ok(())
    }

    async fn add_appeal(&self, comment: CommentId, message: &str) -> StoreResult<bool> {
        let c = self.conn(self.shard_of_comment(comment)).await?;
        // The primary key decides between concurrent appeals: one insert wins.
        let n = c
            .execute(
                "INSERT INTO appeals (comment_id, message) VALUES ($1, $2) ON CONFLICT DO NOTHING",
                &[&i(comment.0), &message],
            )
            .await
            .map_err(pg_err)?;
        Ok(n == 1)
    }

    async fn queue_notes(&self, comments: &[CommentId]) -> StoreResult<Vec<QueueNote>> {
        let groups = self.group(comments, |c| self.shard_of_comment(*c));
        let parts = try_join_all(groups.iter().map(|(shard, idx)| async move {
            let ids: Vec<i64> = idx.iter().map(|k| i(comments[*k].0)).collect();
            let c = self.conn(*shard).await?;
            let rows = c
                .query(
                    "SELECT x.id, h.held_by, a.message
                     FROM unnest($1::bigint[]) AS x(id)
                     LEFT JOIN comment_holds h ON h.comment_id = x.id
                     LEFT JOIN appeals a ON a.comment_id = x.id",
                    &[&ids],
                )
                .await
                .map_err(pg_err)?;
            rows.iter()
                .map(|r| {
                    let code: Option<i16> = r.get(1);
                    let held_by = match code {
                        Some(code) => {
                            Some(u8::try_from(code).ok().and_then(HeldBy::from_code).ok_or_else(|| {
                                StoreError::Corrupt {
                                    keyspace: "comment_holds",
                                    detail: format!("code {code}"),
                                }
                            })?)
                        }
                        None => None,
                    };
                    Ok((u(r.get(0)), QueueNote { held_by, appeal: r.get(2) }))
                })
                .collect::<StoreResult<Vec<_>>>()
        }))
        .await?;
        let found: HashMap<u64, QueueNote> = parts.into_iter().flatten().collect();
        Ok(comments.iter().map(|c| found.get(&c.0).cloned().unwrap_or_default()).collect())
    }

    async fn add_fingerprint(&self, user: UserId, comment: CommentId, simhash: u64) -> StoreResult<()> {
        let c = self.conn(self.shard_of_user(user)).await?;
        c.execute(
            "INSERT INTO fingerprints (user_id, comment_ord, simhash) VALUES ($1, $2, $3)
             ON CONFLICT (user_id, comment_ord) DO UPDATE SET simhash = EXCLUDED.simhash",
            &[&i(user.0), &ord(comment.0), &i(simhash)],
        )
        .await
        .map_err(pg_err)?;
        Ok(())
    }

    async fn fingerprints(
        &self,
        user: UserId,
        since_comment: CommentId,
        limit: usize,
    ) -> StoreResult<Vec<(CommentId, u64)>> {
        let c = self.conn(self.shard_of_user(user)).await?;
        // A backward scan of the primary key from the newest, stopped by the inclusive bound.
        let rows = c
            .query(
                "SELECT comment_ord, simhash FROM fingerprints
                 WHERE user_id = $1 AND comment_ord >= $2
                 ORDER BY comment_ord DESC LIMIT $3",
                &[&i(user.0), &ord(since_comment.0), &lim(limit)],
            )
            .await
            .map_err(pg_err)?;
        Ok(rows.iter().map(|r| (CommentId(unord(r.get(0))), u(r.get(1)))).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ord_preserves_u64_order() {
        let vals = [0u64, 1, 10, i64::MAX as u64, (i64::MAX as u64) + 1, u64::MAX - 1, u64::MAX];
        for w in vals.windows(2) {
            assert!(ord(w[0]) < ord(w[1]), "{w:?}");
        }
        for v in vals {
            assert_eq!(unord(ord(v)), v);
        }
    }
}
