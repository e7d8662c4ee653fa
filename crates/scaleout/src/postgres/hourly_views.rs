//! Unique-viewer sketches per post and UTC hour on PostgreSQL: `hourly_views` (hour_ms,
//! post_id -> sketch), on the post's shard (migration 14).
//!
//! Several API nodes flush sketches of the same post-hour, so a save MERGES (the union,
//! `likewise_core::hourly_views::merge`), in one transaction per shard with the same locking
//! as the per-post sketches (`views.rs`): insert what is new, lock the rest `FOR UPDATE` in
//! key order, merge here, write back. A read of an hour range asks every shard for its first
//! `limit` rows in (hour, post) order and merges them.

use super::{PgStore, i, pg_err};
use futures::future::try_join_all;
use likewise_core::hourly_views::{HourSketch, merge};
use likewise_core::ids::PostId;
use likewise_core::ports::HourlyViews;
use likewise_core::{StoreError, StoreResult};
use std::collections::{BTreeMap, HashMap};

fn corrupt(e: likewise_core::hourly_views::SketchError) -> StoreError {
    StoreError::Corrupt { keyspace: "hourly_views", detail: e.to_string() }
}

/// The union of a stored sketch and a new one; an unreadable stored one is replaced.
fn union(old: &[u8], new: &[u8]) -> StoreResult<Vec<u8>> {
    merge(old, new).or_else(|_| HourSketch::decode(new).map(|s| s.encode()).map_err(corrupt))
}

impl PgStore {
    /// [`likewise_core::ports::ViewStore::merge_hourly_views`].
    pub(super) async fn merge_hourly(&self, sketches: &[HourlyViews]) -> StoreResult<()> {
        // Per shard, in key order (the lock order); a post-hour given twice is merged first.
        let mut by_shard: BTreeMap<usize, BTreeMap<(i64, i64), Vec<u8>>> = BTreeMap::new();
        for h in sketches {
            let slot = by_shard.entry(self.shard_of_post(h.post)).or_default();
            let key = (i(h.hour_ms), i(h.post.0));
            let v = match slot.remove(&key) {
                Some(old) => union(&old, &h.sketch)?,
                None => HourSketch::decode(&h.sketch).map_err(corrupt)?.encode(),
            };
            slot.insert(key, v);
        }
        try_join_all(by_shard.into_iter().map(|(shard, rows)| self.merge_hourly_shard(shard, rows))).await?;
        Ok(())
    }

    async fn merge_hourly_shard(&self, shard: usize, rows: BTreeMap<(i64, i64), Vec<u8>>) -> StoreResult<()> {
        let mut c = self.conn(shard).await?;
        let tx = c.transaction().await.map_err(pg_err)?;
        let hours: Vec<i64> = rows.keys().map(|k| k.0).collect();
        let posts: Vec<i64> = rows.keys().map(|k| k.1).collect();
        let sketches: Vec<Vec<u8>> = rows.values().cloned().collect();
        let inserted = tx
            .query(
                "INSERT INTO hourly_views (hour_ms, post_id, sketch)
                 SELECT * FROM unnest($1::bigint[], $2::bigint[], $3::bytea[])
                 ON CONFLICT (hour_ms, post_id) DO NOTHING RETURNING hour_ms, post_id",
                &[&hours, &posts, &sketches],
            )
            .await
            .map_err(pg_err)?;
        let mut pending = rows;
        for r in &inserted {
            pending.remove(&(r.get(0), r.get(1)));
        }
        if !pending.is_empty() {
            let hours: Vec<i64> = pending.keys().map(|k| k.0).collect();
            let posts: Vec<i64> = pending.keys().map(|k| k.1).collect();
            let stored = tx
                .query(
                    "SELECT h.hour_ms, h.post_id, h.sketch FROM hourly_views h
                     JOIN unnest($1::bigint[], $2::bigint[]) AS k(hour_ms, post_id)
                       ON h.hour_ms = k.hour_ms AND h.post_id = k.post_id
                     ORDER BY h.hour_ms, h.post_id FOR UPDATE OF h",
                    &[&hours, &posts],
                )
                .await
                .map_err(pg_err)?;
            let stored: HashMap<(i64, i64), Vec<u8>> =
                stored.iter().map(|r| ((r.get(0), r.get(1)), r.get(2))).collect();
            let mut merged = Vec::with_capacity(pending.len());
            for (k, new) in &pending {
                merged.push(match stored.get(k) {
                    Some(old) => union(old, new)?,
                    None => new.clone(),
                });
            }
            // Rows are never deleted, so every pending key has a (now locked) row.
            tx.execute(
                "UPDATE hourly_views SET sketch = v.sketch
                 FROM unnest($1::bigint[], $2::bigint[], $3::bytea[]) AS v(hour_ms, post_id, sketch)
                 WHERE hourly_views.hour_ms = v.hour_ms AND hourly_views.post_id = v.post_id",
                &[&hours, &posts, &merged],
            )
            .await
            .map_err(pg_err)?;
        }
        tx.commit().await.map_err(pg_err)
    }

    /// [`likewise_core::ports::ViewStore::hourly_views`].
    pub(super) async fn read_hourly(
        &self,
        from_ms: u64,
        until_ms: u64,
        after: Option<(u64, PostId)>,
        limit: usize,
    ) -> StoreResult<Vec<HourlyViews>> {
        // (hour, post) > after; without one, every row from `from_ms` on.
        let (ah, ap) = after.map_or((i(from_ms), -1), |(h, p)| (i(h), i(p.0)));
        let (from, until, lim) = (i(from_ms), i(until_ms), limit.min(i64::MAX as usize) as i64);
        let reads = (0..self.shard_count()).map(|shard| async move {
            let c = self.conn(shard).await?;
            let rows = c
                .query(
                    "SELECT hour_ms, post_id, sketch FROM hourly_views
                     WHERE hour_ms >= $1 AND hour_ms < $2 AND (hour_ms, post_id) > ($3, $4)
                     ORDER BY hour_ms, post_id LIMIT $5",
                    &[&from, &until, &ah, &ap, &lim],
                )
                .await
                .map_err(pg_err)?;
            Ok::<_, StoreError>(
                rows.iter()
                    .map(|r| HourlyViews {
                        hour_ms: r.get::<_, i64>(0) as u64,
                        post: PostId(r.get::<_, i64>(1) as u64),
                        sketch: r.get(2),
                    })
                    .collect::<Vec<_>>(),
            )
        });
        let mut all: Vec<HourlyViews> = try_join_all(reads).await?.into_iter().flatten().collect();
        all.sort_by_key(|h| (h.hour_ms, h.post));
        all.truncate(limit);
        Ok(all)
    }
}
