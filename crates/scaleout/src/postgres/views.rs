//! Unique-viewer sketches on PostgreSQL: `views` (post_id -> a sketch in the stored form of
//! `likewise_core::post_views`: the viewers' hashes while few, else HyperLogLog registers), on
//! the post's shard.
//!
//! Unlike the embedded engine (one process, one sketch per post), several API nodes each keep
//! their own in-memory sketch of a post and flush it. Overwriting would keep only the last
//! node's viewers, so a save MERGES (`post_views::merge`): the union of two exact sets while it
//! stays small, else the register-wise maximum. When the stored value cannot be read (another
//! precision, or a corrupt row) there is nothing sound to merge, and the new sketch replaces
//! it.
//!
//! Each shard's part of a save is one transaction: `INSERT ... ON CONFLICT DO NOTHING` stores
//! the posts that have no sketch yet (and locks them), then `SELECT ... FOR UPDATE` locks the
//! others, the merge happens here, and an `UPDATE` writes them back. A concurrent save of the
//! same post waits on the row lock and then merges with the committed value, so no node's
//! registers are lost. Posts are handled in ascending ID order so two saves lock rows in the
//! same order and cannot deadlock.

use super::{PgStore, i, pg_err};
use async_trait::async_trait;
use futures::future::try_join_all;
use likewise_core::StoreResult;
use likewise_core::ids::PostId;
use likewise_core::ports::{HourlyViews, ViewStore};
use likewise_core::post_views::merge;
use std::collections::{BTreeMap, HashMap};

impl PgStore {
    /// One shard's part of [`ViewStore::save_views`]: `sketches` sorted by post, no duplicates.
    async fn save_views_shard(&self, shard: usize, sketches: Vec<(i64, Vec<u8>)>) -> StoreResult<()> {
        let mut c = self.conn(shard).await?;
        let tx = c.transaction().await.map_err(pg_err)?;
        let (ids, regs): (Vec<i64>, Vec<Vec<u8>>) = sketches.into_iter().unzip();
        let inserted = tx
            .query(
                "INSERT INTO views (post_id, registers)
                 SELECT * FROM unnest($1::bigint[], $2::bytea[])
                 ON CONFLICT (post_id) DO NOTHING RETURNING post_id",
                &[&ids, &regs],
            )
            .await
            .map_err(pg_err)?;
        let inserted: Vec<i64> = inserted.iter().map(|r| r.get(0)).collect();
        let mut pending: BTreeMap<i64, Vec<u8>> = ids.into_iter().zip(regs).collect();
        for id in &inserted {
            pending.remove(id);
        }
        if !pending.is_empty() {
            let ids: Vec<i64> = pending.keys().copied().collect();
            let rows = tx
                .query(
                    "SELECT post_id, registers FROM views WHERE post_id = ANY($1)
                     ORDER BY post_id FOR UPDATE",
                    &[&ids],
                )
                .await
                .map_err(pg_err)?;
            let stored: HashMap<i64, Vec<u8>> = rows.iter().map(|r| (r.get(0), r.get(1))).collect();
            let merged: Vec<Vec<u8>> = pending
                .into_iter()
                .map(|(id, new)| match stored.get(&id) {
                    Some(old) => merge(old, new),
                    None => new,
                })
                .collect();
            // Rows are never deleted, so every pending post has a (now locked) row.
            tx.execute(
                "UPDATE views SET registers = v.registers
                 FROM unnest($1::bigint[], $2::bytea[]) AS v(post_id, registers)
                 WHERE views.post_id = v.post_id",
                &[&ids, &merged],
            )
            .await
            .map_err(pg_err)?;
        }
        tx.commit().await.map_err(pg_err)
    }
}

#[async_trait]
impl ViewStore for PgStore {
    async fn load_views(&self, post: PostId) -> StoreResult<Option<Vec<u8>>> {
        let c = self.conn(self.shard_of_post(post)).await?;
        let row = c
            .query_opt("SELECT registers FROM views WHERE post_id = $1", &[&i(post.0)])
            .await
            .map_err(pg_err)?;
        Ok(row.map(|r| r.get(0)))
    }

    async fn save_views(&self, sketches: &[(PostId, Vec<u8>)]) -> StoreResult<()> {
        // Per shard, sorted by post (the lock order); a post given twice is merged first.
        let mut by_shard: BTreeMap<usize, BTreeMap<i64, Vec<u8>>> = BTreeMap::new();
        for (post, regs) in sketches {
            let slot = by_shard.entry(self.shard_of_post(*post)).or_default();
            let v = match slot.remove(&i(post.0)) {
                Some(old) => merge(&old, regs.clone()),
                None => regs.clone(),
            };
            slot.insert(i(post.0), v);
        }
        // Shards commit independently: a failed save leaves the sketches dirty in the caller,
        // which retries them all, and re-merging registers already stored changes nothing.
        try_join_all(
            by_shard
                .into_iter()
                .map(|(shard, posts)| self.save_views_shard(shard, posts.into_iter().collect())),
        )
        .await?;
        Ok(())
    }

    async fn merge_hourly_views(&self, sketches: &[HourlyViews]) -> StoreResult<()> {
        self.merge_hourly(sketches).await
    }

    async fn hourly_views(
        &self,
        from_ms: u64,
        until_ms: u64,
        after: Option<(u64, PostId)>,
        limit: usize,
    ) -> StoreResult<Vec<HourlyViews>> {
        self.read_hourly(from_ms, until_ms, after, limit).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::postgres::testing::TestShards;
    use likewise_core::exact_viewers::{EXACT_MAX, Exact};
    use likewise_core::post_views::{REGISTERS, Stored, decode, encode};

    /// Registers with `set` at the given places.
    fn regs(set: &[(usize, u8)]) -> Vec<u8> {
        let mut r = vec![0u8; REGISTERS];
        for (i, v) in set {
            r[*i] = *v;
        }
        r
    }

    /// The exact form of viewer hashes `hashes`.
    fn exact(hashes: impl Iterator<Item = u64>) -> Vec<u8> {
        encode(&Exact::of(hashes.collect()), &[])
    }

    #[tokio::test]
    async fn saves_of_one_post_merge_by_register_max() {
        let t = TestShards::create(2).await;
        let s = t.store().await;
        s.save_views(&[(PostId(1), regs(&[(1, 3), (2, 1)])), (PostId(2), regs(&[(0, 7)]))])
            .await
            .expect("save");
        // Another node's sketch of post 1: the union keeps each register's maximum.
        s.save_views(&[(PostId(1), regs(&[(0, 2), (1, 1), (2, 1)]))]).await.expect("save");
        assert_eq!(s.load_views(PostId(1)).await.expect("load"), Some(regs(&[(0, 2), (1, 3), (2, 1)])));
        // A stored value that cannot be read is replaced; other posts are untouched.
        s.save_views(&[(PostId(4), vec![9])]).await.expect("save");
        s.save_views(&[(PostId(4), regs(&[(5, 5)]))]).await.expect("save");
        assert_eq!(s.load_views(PostId(4)).await.expect("load"), Some(regs(&[(5, 5)])));
        assert_eq!(s.load_views(PostId(2)).await.expect("load"), Some(regs(&[(0, 7)])));
        // Concurrent saves from several "nodes" of a new post: no node's registers are lost.
        let saves = (0..8u8).map(|n| {
            let s = s.clone();
            tokio::spawn(async move { s.save_views(&[(PostId(3), regs(&[(n as usize, n + 1)]))]).await })
        });
        for h in saves.collect::<Vec<_>>() {
            h.await.expect("join").expect("save");
        }
        let all: Vec<(usize, u8)> = (0..8u8).map(|n| (n as usize, n + 1)).collect();
        assert_eq!(s.load_views(PostId(3)).await.expect("load"), Some(regs(&all)));
    }

    #[tokio::test]
    async fn saves_of_few_viewers_merge_to_the_exact_union() {
        let t = TestShards::create(2).await;
        let s = t.store().await;
        // Two nodes saw overlapping viewers of post 1, each node saving more than once.
        s.save_views(&[(PostId(1), exact(1..=15))]).await.expect("save");
        s.save_views(&[(PostId(1), exact(10..=30))]).await.expect("save");
        s.save_views(&[(PostId(1), exact(1..=15))]).await.expect("a retried save");
        let stored = s.load_views(PostId(1)).await.expect("load").expect("stored");
        assert_eq!(decode(&stored), Some(Stored::Exact((1..=30).collect())));
        // Concurrent saves of one post by eight nodes: the union of every node's viewers.
        let saves = (0..8u64).map(|n| {
            let s = s.clone();
            tokio::spawn(async move { s.save_views(&[(PostId(2), exact(n * 10..n * 10 + 15))]).await })
        });
        for h in saves.collect::<Vec<_>>() {
            h.await.expect("join").expect("save");
        }
        let stored = s.load_views(PostId(2)).await.expect("load").expect("stored");
        assert_eq!(decode(&stored), Some(Stored::Exact((0..85).collect())));
        // Past the bound the union turns to registers; an old register-only value merges too.
        let big = EXACT_MAX as u64;
        s.save_views(&[(PostId(2), exact(100..100 + big))]).await.expect("save");
        let stored = s.load_views(PostId(2)).await.expect("load").expect("stored");
        assert!(
            matches!(decode(&stored), Some(Stored::Registers(_, n)) if n == 85 + big),
            "registers, never read below the union's {} viewers",
            85 + big
        );
        s.save_views(&[(PostId(5), regs(&[(0, 1)]))]).await.expect("an old value");
        s.save_views(&[(PostId(5), exact([1u64 << 63].into_iter()))]).await.expect("save");
        let stored = s.load_views(PostId(5)).await.expect("load").expect("stored");
        assert_eq!(decode(&stored), Some(Stored::Registers(regs(&[(0, 1), (1 << 13, 64)]), 1)));
    }
}
