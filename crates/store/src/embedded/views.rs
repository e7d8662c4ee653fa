//! Unique-viewer sketches: `views` keyspace, post(8) -> version byte + the sketch's stored form
//! (`likewise_core::post_views`: viewer hashes while few, else HyperLogLog registers);
//! `hourly_views` keyspace, hour_ms(8) post(8) -> a `likewise_core::hourly_views` stored
//! sketch (keys in (hour, post) order, so an hour range is one scan).

use super::error::engine_err;
use super::state::EmbeddedStore;
use async_trait::async_trait;
use likewise_core::hourly_views;
use likewise_core::ids::PostId;
use likewise_core::ports::{HourlyViews, ViewStore};
use likewise_core::{StoreError, StoreResult};

const VIEWS_V1: u8 = 1;

fn hour_key(hour_ms: u64, post: PostId) -> [u8; 16] {
    let mut k = [0u8; 16];
    k[..8].copy_from_slice(&hour_ms.to_be_bytes());
    k[8..].copy_from_slice(&post.0.to_be_bytes());
    k
}

fn corrupt(e: hourly_views::SketchError) -> StoreError {
    StoreError::Corrupt { keyspace: "hourly_views", detail: e.to_string() }
}

#[async_trait]
impl ViewStore for EmbeddedStore {
    async fn load_views(&self, post: PostId) -> StoreResult<Option<Vec<u8>>> {
        match self.inner.views.get(post.0.to_be_bytes()).map_err(engine_err)? {
            None => Ok(None),
            Some(v) if v.first() == Some(&VIEWS_V1) => Ok(Some(v[1..].to_vec())),
            Some(_) => {
                Err(StoreError::Corrupt { keyspace: "views", detail: "unknown format version".into() })
            }
        }
    }

    async fn save_views(&self, sketches: &[(PostId, Vec<u8>)]) -> StoreResult<()> {
        let s = &*self.inner;
        let mut batch = s.db.batch();
        for (post, regs) in sketches {
            let mut v = Vec::with_capacity(1 + regs.len());
            v.push(VIEWS_V1);
            v.extend_from_slice(regs);
            batch.insert(&s.views, post.0.to_be_bytes(), v);
        }
        batch.commit().map_err(engine_err)?;
        self.persist_async().await
    }

    async fn merge_hourly_views(&self, sketches: &[HourlyViews]) -> StoreResult<()> {
        if sketches.is_empty() {
            return Ok(());
        }
        {
            let s = &*self.inner;
            // Read, merge and write back under one lock, so two savers never lose each other's
            // registers. A post-hour given twice merges with the first within the batch.
            let _merging = s.hourly_lock.lock();
            let mut merged: std::collections::BTreeMap<[u8; 16], Vec<u8>> = Default::default();
            for h in sketches {
                let key = hour_key(h.hour_ms, h.post);
                let old = match merged.remove(&key) {
                    Some(v) => Some(v),
                    None => s.hourly_views.get(key).map_err(engine_err)?.map(|v| v.to_vec()),
                };
                let new = match old {
                    // An unreadable stored sketch is replaced rather than blocking every save.
                    Some(old) => hourly_views::merge(&old, &h.sketch).or_else(|_| {
                        hourly_views::HourSketch::decode(&h.sketch).map(|s| s.encode()).map_err(corrupt)
                    })?,
                    None => hourly_views::HourSketch::decode(&h.sketch).map_err(corrupt)?.encode(),
                };
                merged.insert(key, new);
            }
            let mut batch = s.db.batch();
            for (k, v) in merged {
                batch.insert(&s.hourly_views, k, v);
            }
            batch.commit().map_err(engine_err)?;
        }
        self.persist_async().await
    }

    async fn hourly_views(
        &self,
        from_ms: u64,
        until_ms: u64,
        after: Option<(u64, PostId)>,
        limit: usize,
    ) -> StoreResult<Vec<HourlyViews>> {
        let start = match after {
            Some((h, p)) if h >= from_ms => match p.0.checked_add(1) {
                Some(next) => hour_key(h, PostId(next)),
                None => hour_key(h.saturating_add(1), PostId(0)),
            },
            _ => hour_key(from_ms, PostId(0)),
        };
        let end = hour_key(until_ms, PostId(0));
        if start >= end {
            return Ok(Vec::new());
        }
        let mut out = Vec::new();
        for g in self.inner.hourly_views.range(start..end).take(limit) {
            let (k, v) = g.into_inner().map_err(engine_err)?;
            if k.len() != 16 {
                return Err(StoreError::Corrupt { keyspace: "hourly_views", detail: "bad key".into() });
            }
            let be = |at: usize| {
                let mut b = [0u8; 8];
                b.copy_from_slice(&k[at..at + 8]);
                u64::from_be_bytes(b)
            };
            out.push(HourlyViews { post: PostId(be(8)), hour_ms: be(0), sketch: v.to_vec() });
        }
        Ok(out)
    }
}
