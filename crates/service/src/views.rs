//! Unique viewers (docs/architecture.md, "Notifications, views, workers"): a HyperLogLog per post, about 0.8% standard error in 16 KiB
//! (precision 14), whatever the number of viewers. Up to
//! [`likewise_core::exact_viewers::EXACT_MAX`] distinct viewers the sketch also keeps their
//! hashes, and counts and stores them exactly (`likewise_core::post_views`): registers alone
//! read a small count short when two viewers share a register. Views update the in-memory sketch; dirty
//! sketches are written to storage about once a second and on shutdown, so a crash loses at
//! most the last second of views of an approximate count (never a like or a comment).
//!
//! Each view also lands in a small sketch of its post and UTC hour
//! (`likewise_core::hourly_views`, sparse while small), for the analytics export's unique
//! viewers per post-hour. Those are not kept: each flush hands the ones of the last second to
//! the store, which merges them into the stored post-hour (a union), and starts afresh.

use crate::shared::Shared;
use crate::upstream::Upstream;
use crate::{ServiceError, ServiceResult};
use hyperloglockless::DefaultHasher;
use hyperloglockless::HyperLogLog;
use likewise_core::exact_viewers::Exact;
use likewise_core::hourly_views::{HourSketch, hour_of, viewers_from_estimate};
use likewise_core::ids::{PostId, UserId};
use likewise_core::like::Target;
use likewise_core::ports::HourlyViews;
use likewise_core::post_views::{self, Stored};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::Arc;

/// Registers: 2^14 = 16,384 (standard error 1.04 / sqrt(16384) = 0.81%).
const PRECISION: u8 = 14;
/// Fixed hash seed: sketches are stored, so the hash must not change between runs.
const SEED: u128 = 0x6c69_6b65_7769_7365_2d76_6965_7773_0001;
/// Most sketches kept in memory; past it, clean ones are dropped (they reload on demand).
const MAX_IN_MEMORY: usize = 10_000;

/// A post's sketch: the registers, and the viewers' hashes while few.
struct Sketch {
    hll: HyperLogLog,
    exact: Exact,
    dirty: bool,
}

impl Sketch {
    fn empty() -> Sketch {
        Sketch { hll: HyperLogLog::seeded(PRECISION, SEED), exact: Exact::default(), dirty: false }
    }

    /// Count a view by `viewer`.
    fn insert(&mut self, viewer: u64) {
        use std::hash::BuildHasher;
        let hash = self.hll.parts().1.hash_one(viewer);
        self.hll.insert_hash(hash);
        self.exact.insert(hash);
    }

    /// Fold another sketch in (union); `Err` when its registers are of another size.
    fn union(&mut self, other: &Sketch) -> Result<(), hyperloglockless::Error> {
        self.hll.union(&other.hll)?;
        self.exact.merge_from(&other.exact);
        Ok(())
    }

    /// The stored form (`likewise_core::post_views`).
    fn encode(&self) -> Vec<u8> {
        post_views::encode(&self.exact, self.hll.parts().0)
    }

    /// The sketch of a stored form; `None` when unreadable.
    fn restore(stored: &[u8]) -> Option<Sketch> {
        let (registers, exact) = match post_views::decode(stored)? {
            Stored::Registers(regs, floor) => (regs, Exact::lost_at(floor)),
            Stored::Exact(set) => {
                let mut regs = vec![0u8; post_views::REGISTERS];
                post_views::insert_all(&mut regs, &set);
                (regs, Exact::of(set))
            }
        };
        if registers.len() != 1 << PRECISION || registers.iter().any(|r| *r > 64) {
            return None;
        }
        let zeros = registers.iter().filter(|r| **r == 0).count();
        let sum: f64 = registers.iter().map(|r| 2f64.powi(-i32::from(*r))).sum();
        let hll = HyperLogLog::from_parts(
            registers.into_boxed_slice(),
            DefaultHasher::seeded(&SEED.to_be_bytes()),
            zeros,
            sum,
        );
        Some(Sketch { hll, exact, dirty: false })
    }

    /// The unique viewers: exact while the viewers are known, else the estimate rounded as the
    /// analytics export rounds it (the library's `count()` truncates, which reads one viewer
    /// as 0), never below the viewers the lost exact set held.
    fn unique_viewers(&self) -> u64 {
        self.exact
            .count()
            .unwrap_or_else(|| viewers_from_estimate(self.hll.raw_count()).max(self.exact.floor()))
    }
}

/// Unique viewers per post, and the author's insights.
pub struct Views {
    shared: Arc<Shared>,
    upstream: Arc<Upstream>,
    /// The in-memory sketches.
    sketches: Mutex<HashMap<PostId, Sketch>>,
    /// Views since the last flush per (post, hour start): merged into storage by `flush`.
    hourly: Mutex<HashMap<(PostId, u64), HourSketch>>,
}

impl Views {
    /// The views service.
    pub fn new(shared: Arc<Shared>, upstream: Arc<Upstream>) -> Self {
        Views { shared, upstream, sketches: Mutex::default(), hourly: Mutex::default() }
    }

    /// Entries, capacity and bytes of the sketches held (for `/metrics`).
    pub fn usage(&self) -> crate::cache::Usage {
        let map = self.sketches.lock();
        // Registers and bookkeeping, and about 16 bytes per hash of an exact set (a B-tree's
        // keys and node overhead).
        let bytes =
            map.values().map(|s| (1 << PRECISION) + 64 + 16 * s.exact.count().unwrap_or(0) as usize).sum();
        crate::cache::Usage { cache: "view_sketches", entries: map.len(), capacity: MAX_IN_MEMORY, bytes }
    }
}

/// A post author's insights.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Insights {
    /// Exact like count (also when hidden from others).
    pub like_count: i64,
    /// Visible comments.
    pub comment_count: i64,
    /// Approximate distinct viewers.
    pub unique_viewers: u64,
}

impl Views {
    async fn load_sketch(&self, post: PostId) -> ServiceResult<()> {
        if self.sketches.lock().contains_key(&post) {
            return Ok(());
        }
        let stored = self.shared.stores.views.load_views(post).await?;
        let sketch = match stored {
            Some(bytes) => Sketch::restore(&bytes).unwrap_or_else(|| {
                tracing::warn!(post = post.0, "stored view sketch unreadable; starting a new one");
                Sketch::empty()
            }),
            None => Sketch::empty(),
        };
        let mut map = self.sketches.lock();
        if map.len() >= MAX_IN_MEMORY {
            map.retain(|_, s| s.dirty);
        }
        map.entry(post).or_insert(sketch);
        Ok(())
    }

    /// Count a view of `post` by `viewer`.
    pub async fn record(&self, viewer: UserId, post: PostId) -> ServiceResult<()> {
        self.upstream.require_post(post).await?;
        self.load_sketch(post).await?;
        let mut map = self.sketches.lock();
        let s = map.entry(post).or_insert_with(Sketch::empty);
        s.insert(viewer.0);
        s.dirty = true;
        drop(map);
        self.hourly.lock().entry((post, hour_of(crate::now_ms()))).or_default().insert(viewer.0);
        metrics::counter!("likewise_views_total").increment(1);
        Ok(())
    }

    /// Write dirty sketches to storage (called about once a second and on shutdown).
    pub async fn flush(&self) -> ServiceResult<usize> {
        let hourly = self.flush_hourly().await;
        let dirty: Vec<(PostId, Vec<u8>)> = {
            let mut map = self.sketches.lock();
            map.iter_mut()
                .filter(|(_, s)| s.dirty)
                .map(|(p, s)| {
                    s.dirty = false;
                    (*p, s.encode())
                })
                .collect()
        };
        if !dirty.is_empty()
            && let Err(e) = self.shared.stores.views.save_views(&dirty).await
        {
            // Keep them dirty: the next flush retries.
            let mut map = self.sketches.lock();
            for (p, _) in &dirty {
                if let Some(s) = map.get_mut(p) {
                    s.dirty = true;
                }
            }
            return Err(e.into());
        }
        hourly?;
        Ok(dirty.len())
    }

    /// Merge the hourly sketches of the views since the last flush into storage.
    async fn flush_hourly(&self) -> ServiceResult<()> {
        let pending = std::mem::take(&mut *self.hourly.lock());
        if pending.is_empty() {
            return Ok(());
        }
        let rows: Vec<HourlyViews> = pending
            .iter()
            .map(|((post, hour_ms), s)| HourlyViews { post: *post, hour_ms: *hour_ms, sketch: s.encode() })
            .collect();
        if let Err(e) = self.shared.stores.views.merge_hourly_views(&rows).await {
            // Put them back (a union with what came in meanwhile): the next flush retries.
            let mut map = self.hourly.lock();
            for (k, s) in pending {
                map.entry(k).or_default().merge_from(&s);
            }
            return Err(e.into());
        }
        Ok(())
    }

    /// Insights for the post's author only.
    pub async fn insights(&self, viewer: UserId, post: PostId) -> ServiceResult<Insights> {
        let meta = self.upstream.require_post(post).await?;
        if meta.author != viewer {
            return Err(ServiceError::Forbidden("insights are for the post's author only".into()));
        }
        self.load_sketch(post).await?;
        // Other API nodes flush their own sketches of this post, which the store merges: fold
        // the stored union into ours so every node answers with all nodes' viewers (the union
        // is idempotent, so merging our own flushed registers back changes nothing).
        let stored = self.shared.stores.views.load_views(post).await?.and_then(|b| Sketch::restore(&b));
        let unique_viewers = {
            let mut map = self.sketches.lock();
            let s = map.entry(post).or_insert_with(Sketch::empty);
            if let Some(stored) = &stored
                && s.union(stored).is_err()
            {
                tracing::warn!(post = post.0, "stored view sketch of another size; not merged");
            }
            s.unique_viewers()
        };
        // Straight from the counters, not the display cache, plus the likes not aggregated
        // yet: the author gets the exact value of every acknowledged like, less confirmed
        // farms' likes when discounting is on, as every displayed count.
        let counters = &self.shared.stores.counters;
        let (target, posts) = ([Target::post(post.0)], [post]);
        let (c, fresh) = tokio::join!(
            counters.counts(&target),
            counters.fresh_post_likes(likewise_core::counter::COUNTERS_CONSUMER, &posts)
        );
        let (c, likes) = (c?[0], fresh?.first().copied().unwrap_or_default());
        let like_count = self.shared.integrity.discount().await.apply(Target::post(post.0), likes);
        Ok(Insights { like_count, comment_count: c.comments.max(0), unique_viewers })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sketch_survives_a_round_trip_through_its_stored_form() {
        let mut h = Sketch::empty();
        for i in 0..5_000u64 {
            h.insert(i);
        }
        let stored = h.encode();
        assert_eq!(stored.len(), 1 + 8 + (1 << PRECISION), "past the exact bound: the floored registers");
        let back = Sketch::restore(&stored).expect("restore");
        assert_eq!(back.unique_viewers(), h.unique_viewers());
        let err = (h.unique_viewers() as f64 - 5_000.0).abs() / 5_000.0;
        assert!(err < 0.03, "{}", h.unique_viewers());
        assert!(Sketch::restore(&[0; 10]).is_none());
    }

    #[test]
    fn a_few_viewers_are_counted_exactly() {
        let n = likewise_core::exact_viewers::EXACT_MAX as u64;
        let mut h = Sketch::empty();
        for v in 1..=n {
            h.insert(UserId(v).0);
            assert_eq!(h.unique_viewers(), v, "after {v} viewers");
            let back = Sketch::restore(&h.encode()).expect("restore");
            assert_eq!(back.unique_viewers(), v, "stored, after {v} viewers");
        }
        // Users 22 and 101 share a register: still two viewers.
        let mut two = Sketch::empty();
        let register = |v: u64| {
            use std::hash::BuildHasher;
            post_views::register_of(two.hll.parts().1.hash_one(v)).0
        };
        assert_eq!(register(22), register(101));
        two.insert(22);
        two.insert(101);
        assert_eq!(two.unique_viewers(), 2);
        assert_eq!(viewers_from_estimate(two.hll.raw_count()), 1, "what the registers alone read");
    }

    #[test]
    fn the_count_never_goes_down_when_the_exact_set_is_lost() {
        // Past 1,024 viewers the registers estimate, and they read some sets of 1,025 as
        // fewer than 1,024: the count stays at least what the set held, in memory and stored,
        // on one node and merged from two.
        let n = likewise_core::exact_viewers::EXACT_MAX as u64;
        for seed in 0..20u64 {
            let mut h = Sketch::empty();
            let (mut one, mut two) = (Sketch::empty(), Sketch::empty());
            let mut last = 0;
            for v in 1..=n + 60 {
                let viewer = seed * 1_000_003 + v * 7_919;
                h.insert(viewer);
                if v % 2 == 0 { &mut one } else { &mut two }.insert(viewer);
                let now = h.unique_viewers();
                assert!(now >= last, "seed {seed}: {last} then {now} at viewer {v}");
                if v > n {
                    assert!(now > n, "seed {seed}: {now} at viewer {v}");
                    let back = Sketch::restore(&h.encode()).expect("restore");
                    assert_eq!(back.unique_viewers(), now, "stored, seed {seed}, viewer {v}");
                }
                last = now;
            }
            let merged = post_views::merge(&one.encode(), two.encode());
            let read = Sketch::restore(&merged).expect("restore").unique_viewers();
            assert!(read > n, "seed {seed}: two nodes' sets merged past the bound read {read}");
        }
    }

    #[test]
    fn the_core_register_mapping_is_the_sketchs() {
        // An exact set stored by one node becomes, at another, the registers these viewers
        // would have set there: `post_views` must place a hash where the library does.
        let mut h = Sketch::empty();
        for v in 0..3_000u64 {
            h.insert(v * 31);
        }
        let mut hashes = std::collections::BTreeSet::new();
        for v in 0..3_000u64 {
            use std::hash::BuildHasher;
            hashes.insert(h.hll.parts().1.hash_one(v * 31));
        }
        let mut regs = vec![0u8; post_views::REGISTERS];
        post_views::insert_all(&mut regs, &hashes);
        assert_eq!(regs, h.hll.parts().0);
    }

    #[test]
    fn stored_sketches_merge_exactly_while_small_and_old_registers_still_read() {
        let (mut a, mut b) = (Sketch::empty(), Sketch::empty());
        for v in 1..=30u64 {
            a.insert(v);
        }
        for v in 20..=120u64 {
            b.insert(v);
        }
        // Two nodes' saves merged by a store, then read back.
        let merged = post_views::merge(&a.encode(), b.encode());
        assert_eq!(Sketch::restore(&merged).expect("restore").unique_viewers(), 120);
        // A value stored before the exact form (registers only) still reads, and merges.
        let old = a.hll.parts().0.to_vec();
        let read = Sketch::restore(&old).expect("restore");
        assert_eq!(read.unique_viewers(), viewers_from_estimate(a.hll.raw_count()));
        let merged = post_views::merge(&old, b.encode());
        let mut union = Sketch::empty();
        union.union(&a).expect("union");
        union.union(&b).expect("union");
        assert_eq!(
            post_views::decode(&merged),
            Some(Stored::Registers(union.hll.parts().0.to_vec(), 101)),
            "registers of both, at least the set's 101 viewers"
        );
    }
}
