//! The rank index on PostgreSQL (`RankIndex`): `comment_ranks` on the post's shard
//! (`migrations/0012_comment_ranks.sql`), read best first through its
//! `(post_id, score DESC, comment_id DESC) WHERE listed` index; unlisted rows by
//! `(post_id, author_id)`.
//!
//! A batch of changes is one transaction per shard it touches, applied in order (upserts and
//! deletes by primary key). Only a post's shard aggregator writes its rows (and an API node
//! its own new comment's).
//!
//! Each transaction first raises its posts' versions (`comment_rank_versions`,
//! `migrations/0021_comment_rank_history.sql`): the row locks order a post's writers, so a
//! version names one committed state, and the entries each one moves are recorded in
//! `comment_rank_history` with where they were before. [`RankIndex::ranked_at`] reads a
//! post's entries as they were at a version in one statement (one snapshot).
//!
//! Unlisted entries are also marked by author in `held_marks` on the author's shard
//! (`migrations/0022_held_marks.sql`), written once the post's transaction has committed:
//! [`RankIndex::held_by_author`] reads the marks (one query on the viewer's shard) and only
//! for marked posts the entries themselves, which decide.

use super::{PgStore, i, pg_err, u};
use async_trait::async_trait;
use futures::future::try_join_all;
use likewise_core::StoreResult;
use likewise_core::ids::{CommentId, PostId, UserId};
use likewise_core::ports::{RANK_HISTORY_MS, RankChange, RankEntry, RankIndex};
use std::collections::{BTreeMap, BTreeSet, HashMap};

/// Most expired history rows one transaction deletes (more than one writes).
const PRUNE_CHUNK: i64 = 512;

impl PgStore {
    /// One shard's changes, in order, in one transaction; then the authors' marks of the
    /// unlisted entries it leaves and of those it lists or removes.
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
        for (&(post, comment), &c) in &last {
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
        // Take the posts' version rows (in post order: two batches never wait on each other
        // crosswise); from here on this batch is the posts' only writer, and the entries read
        // next are the latest committed.
        let touched: Vec<i64> = last.keys().map(|(p, _)| *p).collect::<BTreeSet<_>>().into_iter().collect();
        let versions: HashMap<i64, i64> = tx
            .query(
                "INSERT INTO comment_rank_versions (post_id, version)
                 SELECT p, 1 FROM unnest($1::bigint[]) AS p ORDER BY p
                 ON CONFLICT (post_id) DO UPDATE SET version = comment_rank_versions.version + 1
                 RETURNING post_id, version",
                &[&touched],
            )
            .await
            .map_err(pg_err)?
            .iter()
            .map(|r| (r.get(0), r.get(1)))
            .collect();
        let keys: (Vec<i64>, Vec<i64>) = last.keys().copied().unzip();
        let before: HashMap<(i64, i64), (bool, f64, i64)> = tx
            .query(
                "SELECT r.post_id, r.comment_id, r.listed, r.score, r.author_id
                 FROM comment_ranks r JOIN unnest($1::bigint[], $2::bigint[]) AS k(post_id, comment_id)
                 ON r.post_id = k.post_id AND r.comment_id = k.comment_id",
                &[&keys.0, &keys.1],
            )
            .await
            .map_err(pg_err)?
            .iter()
            .map(|r| ((r.get(0), r.get(1)), (r.get(2), r.get(3), r.get(4))))
            .collect();
        // Where the entries this batch moves were.
        let (mut h_posts, mut h_versions, mut h_comments, mut h_authors) = (vec![], vec![], vec![], vec![]);
        let (mut h_present, mut h_listed, mut h_scores) = (vec![], vec![], vec![]);
        for (key, change) in &last {
            let old = before.get(key);
            let new = match change {
                RankChange::Put(e) => Some((e.listed, e.score, i(e.author.0))),
                RankChange::Remove { .. } => None,
            };
            let place = |p: Option<&(bool, f64, i64)>| p.map(|(l, s, _)| (*l, s.to_bits()));
            if place(old) == place(new.as_ref()) {
                continue;
            }
            let Some(author) = old.or(new.as_ref()).map(|p| p.2) else { continue };
            h_posts.push(key.0);
            h_versions.push(versions.get(&key.0).copied().unwrap_or(1));
            h_comments.push(key.1);
            h_authors.push(author);
            h_present.push(old.is_some());
            h_listed.push(old.is_some_and(|p| p.0));
            h_scores.push(old.map_or(0.0, |p| p.1));
        }
        if !h_posts.is_empty() {
            tx.execute(
                "INSERT INTO comment_rank_history (post_id, version, comment_id, author_id, present, listed, score)
                 SELECT * FROM unnest($1::bigint[], $2::bigint[], $3::bigint[], $4::bigint[], $5::bool[],
                     $6::bool[], $7::float8[])",
                &[&h_posts, &h_versions, &h_comments, &h_authors, &h_present, &h_listed, &h_scores],
            )
            .await
            .map_err(pg_err)?;
        }
        // Rows another batch is deleting are skipped, not waited for.
        tx.execute(
            "DELETE FROM comment_rank_history WHERE ctid = ANY(ARRAY(
                 SELECT ctid FROM comment_rank_history WHERE at < now() - $1 * interval '1 millisecond'
                 LIMIT $2 FOR UPDATE SKIP LOCKED))",
            &[&(RANK_HISTORY_MS as f64), &PRUNE_CHUNK],
        )
        .await
        .map_err(pg_err)?;
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
        tx.commit().await.map_err(pg_err)?;
        // Back to the pool before the marks take connections of their own: writers holding
        // one while waiting for another would exhaust a shard's pool between them.
        drop(c);
        // Marks are set from what the batch left, not from what it moved: a replay of the
        // batch after a failure here sets them again. They are cleared only for entries that
        // were unlisted before it (a like on a listed comment writes nothing more); a clear
        // lost to a failure leaves a mark behind, which costs its author a read, nothing else.
        let mut marks: Vec<Mark> = Vec::new();
        for (key, change) in &last {
            let version = versions.get(&key.0).copied().unwrap_or(1);
            let (post, comment) = *key;
            let was_unlisted = before.get(key).filter(|b| !b.0).map(|b| b.2);
            let left_unlisted = match change {
                RankChange::Put(e) if !e.listed => Some(i(e.author.0)),
                _ => None,
            };
            if let Some(author) = left_unlisted {
                marks.push(Mark { author, post, comment, version, set: true });
            }
            if let Some(author) = was_unlisted.filter(|a| left_unlisted != Some(*a)) {
                marks.push(Mark { author, post, comment, version, set: false });
            }
        }
        if marks.is_empty() {
            return Ok(());
        }
        self.write_marks(marks).await
    }

    /// Set or clear marks on their authors' shards. A clear only deletes a mark no later
    /// version of its post set, so two batches of a post finishing out of order never clear
    /// the mark of an entry the later one left unlisted.
    async fn write_marks(&self, marks: Vec<Mark>) -> StoreResult<()> {
        let mut by_shard: BTreeMap<usize, Vec<Mark>> = BTreeMap::new();
        for m in marks {
            by_shard.entry(self.shard_of_user(UserId(u(m.author)))).or_default().push(m);
        }
        try_join_all(by_shard.into_iter().map(|(shard, marks)| async move {
            let (set, clear): (Vec<Mark>, Vec<Mark>) = marks.into_iter().partition(|m| m.set);
            let cols = |ms: &[Mark]| {
                (
                    ms.iter().map(|m| m.author).collect::<Vec<i64>>(),
                    ms.iter().map(|m| m.post).collect::<Vec<i64>>(),
                    ms.iter().map(|m| m.comment).collect::<Vec<i64>>(),
                    ms.iter().map(|m| m.version).collect::<Vec<i64>>(),
                )
            };
            let c = self.conn(shard).await?;
            if !set.is_empty() {
                let (a, p, cm, v) = cols(&set);
                c.execute(
                    "INSERT INTO held_marks (author_id, post_id, comment_id, version)
                     SELECT * FROM unnest($1::bigint[], $2::bigint[], $3::bigint[], $4::bigint[])
                     ON CONFLICT (author_id, post_id, comment_id)
                     DO UPDATE SET version = GREATEST(held_marks.version, EXCLUDED.version)",
                    &[&a, &p, &cm, &v],
                )
                .await
                .map_err(pg_err)?;
            }
            if !clear.is_empty() {
                let (a, p, cm, v) = cols(&clear);
                c.execute(
                    "DELETE FROM held_marks m
                     USING unnest($1::bigint[], $2::bigint[], $3::bigint[], $4::bigint[])
                         AS g(author_id, post_id, comment_id, version)
                     WHERE m.author_id = g.author_id AND m.post_id = g.post_id
                       AND m.comment_id = g.comment_id AND m.version <= g.version",
                    &[&a, &p, &cm, &v],
                )
                .await
                .map_err(pg_err)?;
            }
            Ok::<_, likewise_core::StoreError>(())
        }))
        .await?;
        Ok(())
    }
}

/// An author's mark of an unlisted entry: set it, or clear it.
#[derive(Debug, Clone, Copy)]
struct Mark {
    author: i64,
    post: i64,
    comment: i64,
    version: i64,
    set: bool,
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

    async fn any_held_by(&self, author: UserId) -> StoreResult<bool> {
        let c = self.conn(self.shard_of_user(author)).await?;
        c.query_one("SELECT EXISTS (SELECT 1 FROM held_marks WHERE author_id = $1)", &[&i(author.0)])
            .await
            .map(|r| r.get::<_, bool>(0))
            .map_err(pg_err)
    }

    async fn held_by_author(
        &self,
        author: UserId,
        posts: &[PostId],
        limit: usize,
    ) -> StoreResult<Vec<RankEntry>> {
        if posts.is_empty() || limit == 0 {
            return Ok(Vec::new());
        }
        let ids: Vec<i64> = posts.iter().map(|p| i(p.0)).collect();
        let c = self.conn(self.shard_of_user(author)).await?;
        let marked = c
            .query(
                "SELECT post_id, comment_id FROM held_marks WHERE author_id = $1 AND post_id = ANY($2)
                 LIMIT $3",
                &[&i(author.0), &ids, &(limit.min(i64::MAX as usize) as i64)],
            )
            .await
            .map_err(pg_err)?;
        drop(c);
        if marked.is_empty() {
            return Ok(Vec::new());
        }
        // The entries decide: a mark may outlive its entry's unlisted state.
        let mut by_shard: BTreeMap<usize, (Vec<i64>, Vec<i64>)> = BTreeMap::new();
        for r in &marked {
            let (post, comment): (i64, i64) = (r.get(0), r.get(1));
            let s = by_shard.entry(self.shard_of_post(PostId(u(post)))).or_default();
            s.0.push(post);
            s.1.push(comment);
        }
        let found = try_join_all(by_shard.into_iter().map(|(shard, (posts, comments))| async move {
            let c = self.conn(shard).await?;
            let rows = c
                .query(
                    "SELECT r.comment_id, r.score, r.author_replied, r.author_id, r.listed,
                         r.author_liked, r.factor, r.post_id
                     FROM comment_ranks r JOIN unnest($1::bigint[], $2::bigint[]) AS k(post_id, comment_id)
                     ON r.post_id = k.post_id AND r.comment_id = k.comment_id
                     WHERE NOT r.listed AND r.author_id = $3",
                    &[&posts, &comments, &i(author.0)],
                )
                .await
                .map_err(pg_err)?;
            Ok::<_, likewise_core::StoreError>(
                // The columns of `entry` (COLUMNS), then the post.
                rows.iter().map(|r| entry(PostId(u(r.get(7))), r)).collect::<Vec<_>>(),
            )
        }))
        .await?;
        let mut out: Vec<RankEntry> = found.into_iter().flatten().collect();
        // In the order asked, then by comment.
        let pos: HashMap<u64, usize> = posts.iter().enumerate().map(|(n, p)| (p.0, n)).collect();
        out.sort_by_key(|e| (pos.get(&e.post.0).copied(), e.comment));
        Ok(out)
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

    async fn rank_version(&self, post: PostId) -> StoreResult<u64> {
        let c = self.conn(self.shard_of_post(post)).await?;
        let row = c
            .query_opt("SELECT version FROM comment_rank_versions WHERE post_id = $1", &[&i(post.0)])
            .await
            .map_err(pg_err)?;
        Ok(row.map_or(0, |r| u(r.get(0))))
    }

    async fn ranked_at(
        &self,
        post: PostId,
        version: u64,
        after: Option<(f64, CommentId)>,
        limit: usize,
    ) -> StoreResult<Vec<RankEntry>> {
        let c = self.conn(self.shard_of_post(post)).await?;
        let limit = limit.min(i64::MAX as usize) as i64;
        let (score, id) = after.map_or((0.0, 0), |(s, c)| (s, i(c.0)));
        let (below_now, below_then) = if after.is_some() {
            ("AND (score, comment_id) < ($4, $5)", "AND (c.score, c.comment_id) < ($4, $5)")
        } else {
            ("AND $4::float8 IS NOT NULL AND $5::bigint IS NOT NULL", "")
        };
        // One statement, one snapshot: a batch's moves and their history are seen together.
        let rows = c
            .query(
                &format!(
                    "{MOVED}, now AS (
                         SELECT {COLUMNS} FROM comment_ranks
                         WHERE post_id = $1 AND listed {below_now}
                           AND comment_id <> ALL (ARRAY(SELECT comment_id FROM moved))
                         ORDER BY score DESC, comment_id DESC LIMIT $3
                     ), back AS ({THEN} AND c.listed {below_then})
                     SELECT * FROM now UNION ALL SELECT * FROM back
                     ORDER BY 2 DESC, 1 DESC LIMIT $3"
                ),
                &[&i(post.0), &i(version), &limit, &score, &id],
            )
            .await
            .map_err(pg_err)?;
        Ok(rows.iter().map(|r| entry(post, r)).collect())
    }

    async fn held_ranks_at(
        &self,
        post: PostId,
        version: u64,
        author: Option<UserId>,
        limit: usize,
    ) -> StoreResult<Vec<RankEntry>> {
        let c = self.conn(self.shard_of_post(post)).await?;
        let limit = limit.min(i64::MAX as usize) as i64;
        let (by_now, by_then) = match author {
            Some(_) => ("AND author_id = $4", "AND c.author_id = $4"),
            None => ("AND $4::bigint IS NOT NULL", ""),
        };
        let rows = c
            .query(
                &format!(
                    "{MOVED}, now AS (
                         SELECT {COLUMNS} FROM comment_ranks
                         WHERE post_id = $1 AND NOT listed {by_now}
                           AND comment_id <> ALL (ARRAY(SELECT comment_id FROM moved))
                         LIMIT $3
                     ), back AS ({THEN} AND NOT c.listed {by_then})
                     SELECT * FROM now UNION ALL SELECT * FROM back LIMIT $3"
                ),
                &[&i(post.0), &i(version), &limit, &i(author.map_or(0, |a| a.0))],
            )
            .await
            .map_err(pg_err)?;
        Ok(rows.iter().map(|r| entry(post, r)).collect())
    }
}

/// `moved`: where each of post `$1`'s entries that moved after version `$2` was at `$2` (the
/// first record of each comment after it).
const MOVED: &str = "WITH moved AS (
    SELECT DISTINCT ON (comment_id) comment_id, author_id, present, listed, score
    FROM comment_rank_history WHERE post_id = $1 AND version > $2
    ORDER BY comment_id, version
)";

/// The entries of `moved` that existed then, as they were, with today's flags (in
/// [`COLUMNS`]' order); callers add conditions on `c`.
const THEN: &str = "SELECT c.comment_id, c.score, coalesce(r.author_replied, false), c.author_id, c.listed,
        coalesce(r.author_liked, false), coalesce(r.factor, 1::float8)
    FROM moved c LEFT JOIN comment_ranks r ON r.post_id = $1 AND r.comment_id = c.comment_id
    WHERE c.present";
