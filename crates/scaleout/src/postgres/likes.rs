//! Like reads. "Has this viewer liked these posts?" and "what has this user liked?" are
//! answered by the user-keyed reverse index (one query on the viewer's shard, whatever the
//! posts' shards); "who liked this?" by the liker pages on the target's shard (migration 5).

use super::{PgStore, i, pg_err, u};
use async_trait::async_trait;
use likewise_core::ids::{CommentId, PostId, UserId};
use likewise_core::like::{Target, TargetKind};
use likewise_core::ports::{LikeReader, Liker};
use likewise_core::{StoreError, StoreResult};
use std::collections::{HashMap, HashSet};
use tokio_postgres::types::ToSql;

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
        metrics::counter!("likewise_shard_reads_total", "op" => "liked_among").increment(1);
        let want: Vec<i64> = ids.iter().map(|v| i(*v)).collect();
        let (uid, kind, want) = (i(user.0), i16::from(kind.code()), &want);
        // The reverse index trails the writes anyway (and sits behind the own-likes records
        // in Redis): a replica within the lag bound may answer.
        let rows = self
            .read(self.shard_of_user(user), None, move |c| async move {
                c.query(
                    "SELECT target FROM user_likes WHERE user_id = $1 AND kind = $2 AND target = ANY($3)",
                    &[&uid, &kind, want],
                )
                .await
                .map_err(pg_err)
            })
            .await?;
        let yes: HashSet<u64> = rows.iter().map(|r| u(r.get(0))).collect();
        Ok(ids.iter().map(|v| yes.contains(v)).collect())
    }

    async fn liked_ids(&self, user: UserId, kind: TargetKind, limit: usize) -> StoreResult<Vec<u64>> {
        metrics::counter!("likewise_shard_reads_total", "op" => "liked_ids").increment(1);
        let (uid, kind, limit) = (i(user.0), i16::from(kind.code()), limit as i64);
        let rows = self
            .read(self.shard_of_user(user), None, move |c| async move {
                c.query(
                    "SELECT target FROM user_likes WHERE user_id = $1 AND kind = $2 ORDER BY target LIMIT $3",
                    &[&uid, &kind, &limit],
                )
                .await
                .map_err(pg_err)
            })
            .await?;
        Ok(rows.iter().map(|r| u(r.get(0))).collect())
    }

    /// Newest first, from the liker pages (`likers_on`); a replica within the lag bound may
    /// answer.
    async fn likers(&self, target: Target, after: Option<Liker>, limit: usize) -> StoreResult<Vec<Liker>> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        self.read(self.shard_of_target(target), None, move |c| async move {
            likers_on(&c, target, after, limit).await
        })
        .await
    }

    /// One round trip per shard for a whole feed page: the newest pages of every target and
    /// the newest unpaged likes of every target, two lateral queries sent together on one
    /// connection, the shards concurrently. Each target is then merged as [`Self::likers`]
    /// merges its first read; a target whose first `PAGES_PER_READ` pages hold too few
    /// likers (pages sparser than any the write path makes) is read again by `likers`.
    async fn recent_likers_many(&self, targets: &[Target], limit: usize) -> StoreResult<Vec<Vec<Liker>>> {
        let mut out = vec![Vec::new(); targets.len()];
        if limit == 0 || targets.is_empty() {
            return Ok(out);
        }
        let reads =
            self.group(targets, |t| self.shard_of_target(*t)).into_iter().map(|(shard, idx)| async move {
                let mut unique: Vec<Target> = idx.iter().map(|k| targets[*k]).collect();
                unique.sort_unstable();
                unique.dedup();
                let kinds: Vec<i16> = unique.iter().map(|t| i16::from(t.kind.code())).collect();
                let ids: Vec<i64> = unique.iter().map(|t| i(t.id)).collect();
                let (kinds, ids) = (&kinds, &ids);
                // A replica within the lag bound may answer.
                self.read(shard, None, move |c| async move { first_reads(&c, kinds, ids, limit).await }).await
            });
        // Each target merged once (a target asked for twice shares its read), then placed.
        let mut merged: HashMap<Target, Vec<Liker>> = HashMap::with_capacity(targets.len());
        for first in futures::future::try_join_all(reads).await? {
            for (t, read) in first {
                let likers = match read.merge(limit) {
                    Some(likers) => likers,
                    None => self.likers(t, None, limit).await?,
                };
                merged.insert(t, likers);
            }
        }
        // A target with neither pages nor unpaged likes has no likers.
        for (slot, t) in out.iter_mut().zip(targets) {
            *slot = merged.get(t).cloned().unwrap_or_default();
        }
        Ok(out)
    }
}

/// Newest first: the liker pages (migration 5), windows in descending order, each window's
/// entries sorted, until `limit` (at least 1) likers older than the cursor are collected
/// from whole windows; then the unpaged likes of the same span (or older, when the pages ran
/// out), merged in.
async fn likers_on(
    c: &deadpool_postgres::Client,
    target: Target,
    after: Option<Liker>,
    limit: usize,
) -> StoreResult<Vec<Liker>> {
    let cursor = after.map_or((i64::MAX, i64::MAX), |a| (i(a.liked_at_ms), i(a.user.0)));
    let scan = c
        .prepare_cached(
            "SELECT win, page, users, times FROM liker_pages
             WHERE kind = $1 AND target = $2 AND (win, page) < ($3, $4)
             ORDER BY win DESC, page DESC LIMIT $5",
        )
        .await
        .map_err(pg_err)?;
    let (kind, id) = (i16::from(target.kind.code()), i(target.id));
    // Pages after (win, page) in the scan order; the cursor's own window comes first.
    let mut next = (cursor.0 / WINDOW_MS, i64::MAX);
    let mut out: Vec<(i64, i64)> = Vec::with_capacity(limit);
    let mut window: Vec<(i64, i64)> = Vec::new();
    let mut current = None;
    'pages: loop {
        metrics::counter!("likewise_shard_reads_total", "op" => "likers").increment(1);
        let rows = c.query(&scan, &[&kind, &id, &next.0, &next.1, &PAGES_PER_READ]).await.map_err(pg_err)?;
        let last_read = rows.len() < PAGES_PER_READ as usize;
        for r in &rows {
            let win: i64 = r.get(0);
            if current != Some(win) {
                flush(&mut window, &mut out);
                if out.len() >= limit {
                    break 'pages;
                }
                current = Some(win);
            }
            next = (win, r.get(1));
            let users: Vec<i64> = r.get(2);
            let times: Vec<i64> = r.get(3);
            window.extend(times.into_iter().zip(users).filter(|e| *e < cursor));
        }
        if last_read {
            flush(&mut window, &mut out);
            break;
        }
    }
    // With `limit` collected, every paged like from the last window read on (and older than
    // the cursor) is in `out`, so older unpaged likes cannot make the page; otherwise the
    // pages ran out and any unpaged like may.
    let floor = if out.len() >= limit { current.map_or(0, |w| w * WINDOW_MS) } else { 0 };
    let unpaged = c
        .prepare_cached(
            "SELECT liked_at, user_id FROM likes
             WHERE kind = $1 AND target = $2 AND NOT paged AND (liked_at, user_id) < ($3, $4)
               AND liked_at >= $5
             ORDER BY liked_at DESC, user_id DESC LIMIT $6",
        )
        .await
        .map_err(pg_err)?;
    metrics::counter!("likewise_shard_reads_total", "op" => "likers").increment(1);
    let rows = c
        .query(&unpaged, &[&kind, &id, &cursor.0, &cursor.1, &floor, &(limit as i64)])
        .await
        .map_err(pg_err)?;
    out.extend(rows.iter().map(|r| (r.get::<_, i64>(0), r.get::<_, i64>(1))));
    out.sort_unstable_by(|a, b| b.cmp(a));
    Ok(likers_of(out, limit))
}

/// The first read of [`LikeReader::recent_likers_many`] for one shard's targets (`kinds[k]`,
/// `ids[k]`): each one's newest liker pages and newest unpaged likes.
async fn first_reads(
    c: &deadpool_postgres::Client,
    kinds: &[i16],
    ids: &[i64],
    limit: usize,
) -> StoreResult<HashMap<Target, FirstRead>> {
    let pages = c
        .prepare_cached(
            "SELECT t.kind, t.target, p.win, p.page, p.users, p.times
             FROM unnest($1::smallint[], $2::bigint[]) AS t(kind, target)
             CROSS JOIN LATERAL (
               SELECT win, page, users, times FROM liker_pages
               WHERE kind = t.kind AND target = t.target
               ORDER BY win DESC, page DESC LIMIT $3) p",
        )
        .await
        .map_err(pg_err)?;
    let unpaged = c
        .prepare_cached(
            "SELECT t.kind, t.target, l.liked_at, l.user_id
             FROM unnest($1::smallint[], $2::bigint[]) AS t(kind, target)
             CROSS JOIN LATERAL (
               SELECT liked_at, user_id FROM likes
               WHERE kind = t.kind AND target = t.target AND NOT paged
               ORDER BY liked_at DESC, user_id DESC LIMIT $3) l",
        )
        .await
        .map_err(pg_err)?;
    // Two statements, one round trip: tokio-postgres pipelines them on the connection.
    metrics::counter!("likewise_shard_reads_total", "op" => "recent_likers").increment(1);
    let n = limit as i64;
    let (page_args, unpaged_args): ([&(dyn ToSql + Sync); 3], [&(dyn ToSql + Sync); 3]) =
        ([&kinds, &ids, &PAGES_PER_READ], [&kinds, &ids, &n]);
    let (pages, unpaged) =
        tokio::try_join!(c.query(&pages, &page_args), c.query(&unpaged, &unpaged_args)).map_err(pg_err)?;
    let mut first: HashMap<Target, FirstRead> = HashMap::with_capacity(ids.len());
    for r in &pages {
        let t = target_of(r.get(0), r.get(1))?;
        first.entry(t).or_default().pages.push((r.get(2), r.get(3), r.get(4), r.get(5)));
    }
    for r in &unpaged {
        let t = target_of(r.get(0), r.get(1))?;
        first.entry(t).or_default().unpaged.push((r.get(2), r.get(3)));
    }
    Ok(first)
}

/// What the first batched read found for one target: its newest liker pages
/// `(win, page, users, times)` and its newest unpaged likes `(liked_at, user)`.
#[derive(Default)]
struct FirstRead {
    pages: Vec<(i64, i64, Vec<i64>, Vec<i64>)>,
    unpaged: Vec<(i64, i64)>,
}

impl FirstRead {
    /// The newest `limit` likers, merged as [`LikeReader::likers`] merges them without a
    /// cursor; `None` when the pages read may not reach far enough back.
    fn merge(self, limit: usize) -> Option<Vec<Liker>> {
        let FirstRead { mut pages, unpaged } = self;
        pages.sort_unstable_by_key(|p| std::cmp::Reverse((p.0, p.1)));
        // Fewer pages than asked for: the target has no more.
        let all_read = pages.len() < PAGES_PER_READ as usize;
        let mut out: Vec<(i64, i64)> = Vec::with_capacity(limit);
        let mut window: Vec<(i64, i64)> = Vec::new();
        let mut current = None;
        let mut enough = false;
        for (win, _, users, times) in pages {
            if current != Some(win) {
                flush(&mut window, &mut out);
                if out.len() >= limit {
                    enough = true;
                    break;
                }
                current = Some(win);
            }
            window.extend(times.into_iter().zip(users));
        }
        if !enough {
            if !all_read {
                return None; // more pages may follow: only a full scan knows
            }
            flush(&mut window, &mut out);
        }
        let floor = if out.len() >= limit { current.map_or(0, |w| w * WINDOW_MS) } else { 0 };
        out.extend(unpaged.into_iter().filter(|(t, _)| *t >= floor));
        out.sort_unstable_by(|a, b| b.cmp(a));
        Some(likers_of(out, limit))
    }
}

impl PgStore {
    /// Every target on `shard` (posts and comments) whose liker pages disagree with its paged
    /// like rows. One pass over the shard's paged likes: for `reconcile --all`.
    pub async fn liker_page_drift(&self, shard: usize) -> StoreResult<Vec<Target>> {
        let c = self.conn(shard).await?;
        let rows = c
            .query(
                "SELECT coalesce(l.kind, p.kind), coalesce(l.target, p.target)
                 FROM (SELECT kind, target, count(*) AS n FROM likes WHERE paged GROUP BY kind, target) l
                 FULL JOIN (SELECT kind, target, sum(cardinality(users))::bigint AS n FROM liker_pages
                            GROUP BY kind, target) p ON l.kind = p.kind AND l.target = p.target
                 WHERE l.n IS DISTINCT FROM p.n",
                &[],
            )
            .await
            .map_err(pg_err)?;
        rows.iter().map(|r| target_of(r.get(0), r.get(1))).collect()
    }

    /// Rebuild a target's liker pages from its paged like rows when the two disagree (a lost
    /// or damaged page). Returns `(paged like rows, page entries before)` when it rebuilt,
    /// `None` when they agreed.
    ///
    /// The rebuild holds `liker_pages` in EXCLUSIVE mode for its transaction: a concurrent
    /// like statement waits at its page insert, so its rows (invisible to the rebuild's
    /// snapshot) get their own page after it; a concurrent unlike waits at its page lock and
    /// then finds its entry in the rebuilt page. Like writes on the shard pause meanwhile (a
    /// second or two for a million likes), so this runs only on a disagreement.
    pub async fn repair_liker_pages(&self, target: Target) -> StoreResult<Option<(i64, i64)>> {
        let (kind, id) = (i16::from(target.kind.code()), i(target.id));
        let mut c = self.conn(self.shard_of_target(target)).await?;
        let count = "SELECT (SELECT count(*) FROM likes WHERE kind = $1 AND target = $2 AND paged),
                            (SELECT coalesce(sum(cardinality(users)), 0)::bigint FROM liker_pages
                             WHERE kind = $1 AND target = $2)";
        let r = c.query_one(count, &[&kind, &id]).await.map_err(pg_err)?;
        if r.get::<_, i64>(0) == r.get::<_, i64>(1) {
            return Ok(None);
        }
        let tx = c.transaction().await.map_err(pg_err)?;
        tx.batch_execute("LOCK TABLE liker_pages IN EXCLUSIVE MODE").await.map_err(pg_err)?;
        let r = tx.query_one(count, &[&kind, &id]).await.map_err(pg_err)?;
        let (rows, entries): (i64, i64) = (r.get(0), r.get(1));
        if rows == entries {
            return Ok(None);
        }
        tx.execute("DELETE FROM liker_pages WHERE kind = $1 AND target = $2", &[&kind, &id])
            .await
            .map_err(pg_err)?;
        tx.execute(
            insert_liker_pages_from!("likes WHERE kind = $1 AND target = $2 AND paged"),
            &[&kind, &id],
        )
        .await
        .map_err(pg_err)?;
        tx.commit().await.map_err(pg_err)?;
        metrics::counter!("likewise_liker_page_repairs_total").increment(1);
        Ok(Some((rows, entries)))
    }
}

/// A like row's (kind, target) columns as a target.
pub(super) fn target_of(kind: i16, id: i64) -> StoreResult<Target> {
    let code = u8::try_from(kind)
        .ok()
        .and_then(TargetKind::from_code)
        .ok_or_else(|| StoreError::Corrupt { keyspace: "likes", detail: format!("target kind {kind}") })?;
    Ok(Target { kind: code, id: u(id) })
}

/// Width of a liker page's window (migration 5 and the like insert: `win = liked_at / 16`).
pub(super) const WINDOW_MS: i64 = 16;
/// Pages fetched per query of a likers scan.
const PAGES_PER_READ: i64 = 16;

/// Append one window's (time, user) entries, newest first.
fn flush(window: &mut Vec<(i64, i64)>, out: &mut Vec<(i64, i64)>) {
    window.sort_unstable_by(|a, b| b.cmp(a));
    out.append(window);
}

fn likers_of(mut out: Vec<(i64, i64)>, limit: usize) -> Vec<Liker> {
    out.truncate(limit);
    out.into_iter().map(|(t, u_)| Liker { user: UserId(u(u_)), liked_at_ms: u(t) }).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::postgres::testing::TestShards;
    use likewise_core::like::{LikeAction, LikeOp};
    use likewise_core::write::WriteOp;
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};
    use std::collections::HashMap;
    use std::time::Duration;

    const T0: u64 = 1_700_000_000_000;

    fn op(post: u64, user: u64, like: bool, ts_ms: u64) -> WriteOp {
        WriteOp::Like(LikeOp {
            target: Target::post(post),
            user: UserId(user),
            action: if like { LikeAction::Like } else { LikeAction::Unlike },
            target_author: UserId(1),
            post,
            ts_ms,
            trace: None,
        })
    }

    /// Every liker of `post`, newest first, read in pages of `size`.
    async fn paged(s: &PgStore, post: u64, size: usize) -> Vec<Liker> {
        let mut all = Vec::new();
        let mut after = None;
        loop {
            let page = s.likers(Target::post(post), after, size).await.expect("likers");
            assert!(page.len() <= size);
            if page.is_empty() {
                return all;
            }
            after = page.last().copied();
            all.extend(page);
        }
    }

    /// The pages hold exactly the paged like rows: no entry left behind by an unlike, no empty
    /// page, no entry in another window's page.
    async fn pages_match_rows(s: &PgStore) {
        let c = s.conn(0).await.expect("conn");
        let r = c
            .query_one(
                "SELECT (SELECT count(*) FROM likes WHERE paged),
                        (SELECT coalesce(sum(cardinality(users)), 0) FROM liker_pages),
                        (SELECT count(*) FROM liker_pages WHERE cardinality(users) = 0),
                        (SELECT count(*) FROM liker_pages p
                         WHERE EXISTS (SELECT 1 FROM unnest(p.times) t WHERE t / 16 <> p.win))",
                &[],
            )
            .await
            .expect("counts");
        let (rows, entries, empty, misplaced): (i64, i64, i64, i64) =
            (r.get(0), r.get(1), r.get(2), r.get(3));
        assert_eq!((entries, empty, misplaced), (rows, 0, 0), "pages against {rows} paged like rows");
    }

    /// Random batches of likes, unlikes and re-likes on two posts, their times spread over
    /// several 16 ms windows per batch and several batches per window: after every batch the
    /// likers, whole and in keyset pages of several sizes, equal the model's.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn likers_pages_follow_a_model_of_random_batches() {
        let t = TestShards::create(1).await;
        let s = t.store().await;
        let mut rng = StdRng::seed_from_u64(7);
        let mut model: HashMap<(u64, u64), u64> = HashMap::new();
        for batch in 0..40u64 {
            let ops: Vec<WriteOp> = (0..rng.random_range(1..60))
                .map(|_| {
                    let (post, user) = (42 + rng.random_range(0..2), rng.random_range(1..30));
                    op(post, user, rng.random_bool(0.6), T0 + batch * 9 + rng.random_range(0..40))
                })
                .collect();
            s.apply_async(&ops).await.expect("apply");
            for o in &ops {
                let WriteOp::Like(l) = o else { unreachable!() };
                let key = (l.post, l.user.0);
                match l.action {
                    LikeAction::Like => {
                        model.entry(key).or_insert(l.ts_ms);
                    }
                    LikeAction::Unlike => {
                        model.remove(&key);
                    }
                }
            }
            for post in [42, 43] {
                let mut want: Vec<Liker> = model
                    .iter()
                    .filter(|((p, _), _)| *p == post)
                    .map(|((_, u), at)| Liker { user: UserId(*u), liked_at_ms: *at })
                    .collect();
                want.sort_by_key(|l| std::cmp::Reverse((l.liked_at_ms, l.user)));
                for size in [1, 3, 7, 1000] {
                    assert_eq!(
                        paged(&s, post, size).await,
                        want,
                        "post {post}, batch {batch}, pages of {size}"
                    );
                }
            }
            pages_match_rows(&s).await;
        }
        // Both kinds of like were listed: groups of 4 or more likes paged, the rest not.
        let c = s.conn(0).await.expect("conn");
        let r = c
            .query_one(
                "SELECT count(*) FILTER (WHERE paged), count(*) FILTER (WHERE NOT paged) FROM likes",
                &[],
            )
            .await
            .expect("kinds");
        let (paged, unpaged): (i64, i64) = (r.get(0), r.get(1));
        assert!(paged > 0 && unpaged > 0, "paged {paged}, unpaged {unpaged}");
    }

    /// Another transaction takes a liker out of a page and holds it while a batch unlikes a
    /// second liker of the same page: the batch waits and rewrites the page as committed,
    /// so neither removal is lost.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn two_removals_from_one_page_both_hold() {
        let t = TestShards::create(1).await;
        let s = t.store().await;
        s.apply_async(&(1..=5).map(|u| op(42, u, true, T0 + u)).collect::<Vec<_>>()).await.expect("likes");
        let mut other = t.client(0).await;
        let tx = other.transaction().await.expect("begin");
        tx.execute("DELETE FROM likes WHERE user_id = 2", &[]).await.expect("delete row");
        tx.execute(
            "UPDATE liker_pages SET users = array_remove(users, 2::bigint),
                                    times = array_remove(times, $1::bigint)",
            &[&i(T0 + 2)],
        )
        .await
        .expect("take 2 out");
        let batch = {
            let s = s.clone();
            tokio::spawn(async move { s.apply_async(&[op(42, 4, false, T0 + 10)]).await })
        };
        tokio::time::sleep(Duration::from_millis(300)).await;
        tx.commit().await.expect("commit");
        batch.await.expect("join").expect("unlike");
        let users: Vec<u64> = paged(&s, 42, 10).await.iter().map(|l| l.user.0).collect();
        assert_eq!(users, vec![5, 3, 1]);
        pages_match_rows(&s).await;
    }

    /// Damaged pages (paged rows whose page is gone, and a page entry whose row is gone): the
    /// repair rebuilds the target's pages from its paged rows, and a second repair finds
    /// nothing to do.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_repair_rebuilds_pages_that_disagree_with_the_rows() {
        let t = TestShards::create(1).await;
        let s = t.store().await;
        s.apply_async(&(1..=50).map(|u| op(42, u, true, T0 + u)).collect::<Vec<_>>()).await.expect("likes");
        let c = t.client(0).await;
        c.batch_execute(
            "INSERT INTO likes (kind, target, user_id, liked_at, paged)
             SELECT 1, 42, g, 1700000000000 + g, true FROM generate_series(51, 80) g;
             DELETE FROM likes WHERE user_id = 7;",
        )
        .await
        .expect("writes that bypass the pages");
        let listed = paged(&s, 42, 1000).await;
        assert!(listed.iter().any(|l| l.user.0 == 7) && !listed.iter().any(|l| l.user.0 == 60));
        let r = c
            .query_one(
                "SELECT (SELECT count(*) FROM likes WHERE paged),
                        (SELECT sum(cardinality(users))::bigint FROM liker_pages)",
                &[],
            )
            .await
            .expect("counts");
        let target = Target::post(42);
        assert_eq!(s.repair_liker_pages(target).await.expect("repair"), Some((r.get(0), r.get(1))));
        let want: Vec<u64> = (1..=80).rev().filter(|u| *u != 7).collect();
        let got: Vec<u64> = paged(&s, 42, 9).await.iter().map(|l| l.user.0).collect();
        assert_eq!(got, want);
        pages_match_rows(&s).await;
        assert_eq!(s.repair_liker_pages(target).await.expect("again"), None);
        assert_eq!(s.repair_liker_pages(Target::post(43)).await.expect("no likes"), None);
    }

    /// The shard-wide check finds every target whose pages disagree with its rows, comments
    /// included, and nothing once they are repaired.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_shard_check_finds_drifted_posts_and_comments() {
        let t = TestShards::create(1).await;
        let s = t.store().await;
        let comment = |id: u64, user: u64| {
            WriteOp::Like(LikeOp {
                target: Target::comment(id),
                user: UserId(user),
                action: LikeAction::Like,
                target_author: UserId(1),
                post: 42,
                ts_ms: T0 + user,
                trace: None,
            })
        };
        let mut ops: Vec<WriteOp> = (1..=8).map(|u| op(42, u, true, T0 + u)).collect();
        ops.extend((1..=8).map(|u| op(44, u, true, T0 + u)));
        ops.extend((1..=8).map(|u| comment(77, u)));
        s.apply_async(&ops).await.expect("likes");
        assert_eq!(s.liker_page_drift(0).await.expect("check"), vec![]);
        let c = t.client(0).await;
        c.batch_execute(
            "DELETE FROM liker_pages WHERE kind = 2 AND target = 77;
             DELETE FROM likes WHERE kind = 1 AND target = 42 AND user_id = 3;",
        )
        .await
        .expect("damage");
        let mut drift = s.liker_page_drift(0).await.expect("check");
        drift.sort_by_key(|t| (t.kind.code(), t.id));
        assert_eq!(drift, vec![Target::post(42), Target::comment(77)]);
        for t in drift {
            assert!(s.repair_liker_pages(t).await.expect("repair").is_some());
        }
        assert_eq!(s.liker_page_drift(0).await.expect("check"), vec![]);
        pages_match_rows(&s).await;
    }

    /// Migration 5 on a store written before it: its likes become unpaged rows in the partial
    /// index, the full likers-by-time index goes, and the likers list is the same as before;
    /// new likes of the same post are paged beside them.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn migration_5_pages_the_likes_written_before_it() {
        let t = TestShards::create(1).await;
        let s = t.store().await;
        let mut c = t.client(0).await;
        // Back to the schema of migration 4, then likes written as a build of that time did.
        c.batch_execute(
            "DROP TABLE liker_pages; DROP SEQUENCE liker_page_seq;
             DROP INDEX likes_unpaged_by_time; ALTER TABLE likes DROP COLUMN paged;
             CREATE INDEX likes_by_time ON likes (kind, target, liked_at DESC, user_id DESC);
             DELETE FROM schema_migrations WHERE version = 5;
             INSERT INTO likes (kind, target, user_id, post_id, liked_at)
             SELECT 1, 42 + g % 2, g, 42 + g % 2, 1700000000000 + g * 5 % 97
             FROM generate_series(1, 500) g;",
        )
        .await
        .expect("schema of migration 4");
        let want: Vec<(i64, i64)> = c
            .query(
                "SELECT liked_at, user_id FROM likes WHERE target = 43 ORDER BY liked_at DESC, user_id DESC",
                &[],
            )
            .await
            .expect("old order")
            .iter()
            .map(|r| (r.get(0), r.get(1)))
            .collect();
        assert_eq!(crate::postgres::migrate::apply(&mut c).await.expect("migrate"), vec![5]);
        let got: Vec<(i64, i64)> =
            paged(&s, 43, 9).await.iter().map(|l| (i(l.liked_at_ms), i(l.user.0))).collect();
        assert_eq!(got, want);
        assert_eq!(paged(&s, 42, 1000).await.len(), 250);
        pages_match_rows(&s).await;
        let index: bool =
            c.query_one("SELECT to_regclass('likes_by_time') IS NULL", &[]).await.expect("index").get(0);
        assert!(index, "the likers-by-time index is gone");
        s.apply_async(&[op(43, 1, false, T0)]).await.expect("unlike");
        s.apply_async(&(1001..=1010).map(|u| op(43, u, true, T0 + 1_000)).collect::<Vec<_>>())
            .await
            .expect("new");
        let listed = paged(&s, 43, 7).await;
        assert_eq!(listed.len(), 259);
        assert!(listed[..10].iter().all(|l| l.user.0 > 1000), "the new likes are the newest");
        pages_match_rows(&s).await;
        let n: i64 = c.query_one("SELECT count(*) FROM likes WHERE paged", &[]).await.expect("paged").get(0);
        assert_eq!(n, 10);
    }
}
