//! The count cache: what every post render reads (like/comment counts and recent likers).
//!
//! - Never invalidated per like. The in-process aggregator writes each new absolute value
//!   into the cache after committing it; otherwise an entry older than `refresh` is served
//!   stale while ONE background task reloads it.
//! - Single-flight: concurrent misses on a key wait for one loader (a per-key async lock), so a
//!   thousand readers of a cold viral post cause one storage read, not a thousand.
//! - Ordering: every write is tagged with the aggregator's log position (the epoch). A loader
//!   remembers the epoch before it reads storage and never overwrites a newer tag, so a slow
//!   load cannot roll a count back.

use super::{SHARDS, shard_of};
use likewise_core::StoreResult;
use likewise_core::counter::{CounterKey, Counts};
use likewise_core::event::{Event, EventKind};
use likewise_core::ids::UserId;
use likewise_core::like::{Target, TargetKind};
use likewise_core::ports::{CounterStore, LikeReader};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::collections::hash_map::RandomState;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// A cached entry.
#[derive(Debug, Clone)]
pub struct Cached {
    /// The counters.
    pub counts: Counts,
    /// Most recent likers, newest first (posts only).
    pub recent_likers: Arc<Vec<UserId>>,
    tag: u64,
    loaded_at: Instant,
}

#[derive(Default)]
struct Slot {
    state: Mutex<Option<Cached>>,
    /// Highest epoch the aggregator published while this slot had no value (a load was in
    /// flight): a loader that started before it must not present its value as fresh.
    missed_epoch: AtomicU64,
    load: tokio::sync::Mutex<()>,
    refreshing: AtomicBool,
}

/// See the module documentation.
pub struct CountCache {
    counters: Arc<dyn CounterStore>,
    likes: Arc<dyn LikeReader>,
    refresh: Duration,
    per_shard: usize,
    recent_n: usize,
    hasher: RandomState,
    shards: Vec<Mutex<HashMap<Target, Arc<Slot>>>>,
    epoch: AtomicU64,
    loads: AtomicU64,
    lookups: super::LookupCounters,
}

impl CountCache {
    /// A cache over the given ports.
    pub fn new(
        counters: Arc<dyn CounterStore>,
        likes: Arc<dyn LikeReader>,
        refresh: Duration,
        capacity: usize,
        recent_n: usize,
    ) -> Arc<Self> {
        Arc::new(CountCache {
            counters,
            likes,
            refresh,
            per_shard: capacity.div_ceil(SHARDS).max(1),
            recent_n,
            hasher: RandomState::new(),
            shards: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
            epoch: AtomicU64::new(0),
            loads: AtomicU64::new(0),
            lookups: super::LookupCounters::new("counts"),
        })
    }

    /// Entries, capacity and estimated bytes (for `/metrics`).
    pub fn usage(&self) -> super::Usage {
        super::sharded_usage("counts", &self.shards, self.per_shard, |slot| {
            let likers = slot.state.lock().as_ref().map_or(0, |c| 16 + c.recent_likers.capacity() * 8);
            16 + std::mem::size_of::<Slot>() + likers
        })
    }

    /// How many storage loads the cache has issued (each covers one or more targets).
    pub fn store_loads(&self) -> u64 {
        self.loads.load(Ordering::Relaxed)
    }

    fn slot(&self, t: Target) -> Arc<Slot> {
        let mut shard = self.shards[shard_of(&self.hasher, &t)].lock();
        if let Some(s) = shard.get(&t) {
            return s.clone();
        }
        if shard.len() >= self.per_shard {
            super::evict_some(&mut shard);
        }
        shard.entry(t).or_default().clone()
    }

    fn existing(&self, t: Target) -> Option<Arc<Slot>> {
        self.shards[shard_of(&self.hasher, &t)].lock().get(&t).cloned()
    }

    /// Counts (and recent likers) of each target, in order.
    pub async fn get_many(self: &Arc<Self>, targets: &[Target]) -> StoreResult<Vec<Cached>> {
        let slots: Vec<Arc<Slot>> = targets.iter().map(|t| self.slot(*t)).collect();
        let mut out: Vec<Option<Cached>> = Vec::with_capacity(targets.len());
        let mut missing: Vec<usize> = Vec::new();
        let mut stale_ones: Vec<(Target, Arc<Slot>)> = Vec::new();
        for (i, slot) in slots.iter().enumerate() {
            let cur = slot.state.lock().clone();
            match cur {
                Some(c) => {
                    let stale = c.loaded_at.elapsed() >= self.refresh;
                    if stale && !slot.refreshing.swap(true, Ordering::AcqRel) {
                        stale_ones.push((targets[i], slot.clone()));
                    }
                    if stale {
                        self.lookups.stale.increment(1)
                    } else {
                        self.lookups.hit.increment(1)
                    }
                    out.push(Some(c));
                }
                None => {
                    self.lookups.miss.increment(1);
                    missing.push(i);
                    out.push(None);
                }
            }
        }
        if !stale_ones.is_empty() {
            // The page's stale entries in ONE background load (one read per shard).
            self.spawn_refresh(stale_ones);
        }
        if !missing.is_empty() {
            // Take the per-key load locks in target order (no deadlock between two pages that
            // share posts), re-check, and load whatever is still missing in one call.
            missing.sort_by_key(|i| targets[*i]);
            missing.dedup_by_key(|i| targets[*i]);
            let mut guards = Vec::with_capacity(missing.len());
            for i in &missing {
                guards.push(slots[*i].load.lock().await);
            }
            let still: Vec<usize> =
                missing.iter().copied().filter(|i| slots[*i].state.lock().is_none()).collect();
            if !still.is_empty() {
                let want: Vec<Target> = still.iter().map(|i| targets[*i]).collect();
                let loaded = self.load(&want).await?;
                for (i, value) in still.iter().zip(loaded) {
                    self.install(&slots[*i], value.0, value.1);
                }
            }
            drop(guards);
            for (i, o) in out.iter_mut().enumerate() {
                if o.is_none() {
                    *o = slots[i].state.lock().clone();
                }
            }
        }
        Ok(out
            .into_iter()
            .map(|o| {
                o.unwrap_or(Cached {
                    counts: Counts::default(),
                    recent_likers: Arc::new(Vec::new()),
                    tag: 0,
                    loaded_at: Instant::now(),
                })
            })
            .collect())
    }

    /// Read targets from storage; returns (epoch before the read, value) per target.
    async fn load(&self, targets: &[Target]) -> StoreResult<Vec<(u64, Cached)>> {
        let epoch = self.epoch.load(Ordering::Acquire);
        self.loads.fetch_add(1, Ordering::Relaxed);
        // Counts, and the recent likers where the counter store keeps them (a shared cache
        // the aggregator writes them into): one read for the page's targets.
        let mut rows = self.counters.counts_and_likers(targets, self.recent_n).await?;
        // The other posts' recent likers in one call (one round trip per shard on remote
        // engines).
        let ask: Vec<usize> = if self.recent_n > 0 {
            (0..targets.len())
                .filter(|i| targets[*i].kind == TargetKind::Post && rows[*i].1.is_none())
                .collect()
        } else {
            Vec::new()
        };
        if !ask.is_empty() {
            let posts: Vec<Target> = ask.iter().map(|i| targets[*i]).collect();
            let likers = self.likes.recent_likers_many(&posts, self.recent_n).await?;
            for (i, l) in ask.into_iter().zip(likers) {
                rows[i].1 = Some(l.into_iter().map(|l| l.user).collect());
            }
        }
        let mut out = Vec::with_capacity(targets.len());
        for (t, (c, likers)) in targets.iter().zip(rows) {
            let recent = if t.kind == TargetKind::Post && self.recent_n > 0 {
                let mut l = likers.unwrap_or_default();
                l.truncate(self.recent_n);
                l
            } else {
                Vec::new()
            };
            out.push((
                epoch,
                Cached { counts: c, recent_likers: Arc::new(recent), tag: epoch, loaded_at: Instant::now() },
            ));
        }
        Ok(out)
    }

    fn install(&self, slot: &Slot, load_epoch: u64, mut value: Cached) {
        let mut state = slot.state.lock();
        if state.as_ref().is_some_and(|cur| cur.tag > load_epoch) {
            return; // the aggregator wrote something newer while we were reading
        }
        if slot.missed_epoch.load(Ordering::Acquire) > load_epoch {
            // The aggregator moved on while we loaded and could not update us: serve this
            // value but refresh it on the next read.
            value.loaded_at = Instant::now() - self.refresh;
        }
        *state = Some(value);
    }

    /// Reload stale entries in the background, all in one load; readers keep the stale values
    /// meanwhile. Load locks are taken in target order, as [`CountCache::get_many`] takes them.
    fn spawn_refresh(self: &Arc<Self>, mut stale: Vec<(Target, Arc<Slot>)>) {
        let this = self.clone();
        stale.sort_by_key(|(t, _)| *t);
        stale.dedup_by_key(|(t, _)| *t);
        tokio::spawn(async move {
            let mut guards = Vec::with_capacity(stale.len());
            for (_, slot) in &stale {
                guards.push(slot.load.lock().await);
            }
            let want: Vec<Target> = stale.iter().map(|(t, _)| *t).collect();
            match this.load(&want).await {
                Ok(values) => {
                    for ((_, slot), (e, value)) in stale.iter().zip(values) {
                        this.install(slot, e, value);
                    }
                }
                Err(e) => tracing::warn!(error = %e, "count refresh failed"),
            }
            drop(guards);
            for (_, slot) in &stale {
                slot.refreshing.store(false, Ordering::Release);
            }
        });
    }

    /// Called by the aggregator after it committed counters up to log position `epoch`:
    /// write the new absolute values and the likers of `events` into cached entries.
    pub fn publish(&self, epoch: u64, values: &[(CounterKey, i64)], events: &[Event]) {
        for (key, value) in values {
            if let Some(slot) = self.existing(key.target) {
                let mut state = slot.state.lock();
                match state.as_mut() {
                    Some(c) => {
                        let cur = match key.field {
                            likewise_core::counter::CounterField::Likes => c.counts.likes,
                            likewise_core::counter::CounterField::Comments => c.counts.comments,
                            likewise_core::counter::CounterField::Replies => c.counts.replies,
                        };
                        c.counts.add(key.field, value - cur);
                        c.tag = c.tag.max(epoch);
                    }
                    None => {
                        slot.missed_epoch.fetch_max(epoch, Ordering::AcqRel);
                    }
                }
            }
        }
        for e in events {
            if e.target.kind != TargetKind::Post {
                continue;
            }
            if let Some(slot) = self.existing(e.target) {
                let mut state = slot.state.lock();
                match state.as_mut() {
                    Some(c) => {
                        let mut list: Vec<UserId> =
                            c.recent_likers.iter().copied().filter(|u| *u != e.actor).collect();
                        if e.kind == EventKind::LikeCreated {
                            list.insert(0, e.actor);
                            list.truncate(self.recent_n);
                        }
                        c.recent_likers = Arc::new(list);
                        c.tag = c.tag.max(epoch);
                    }
                    None => {
                        slot.missed_epoch.fetch_max(epoch, Ordering::AcqRel);
                    }
                }
            }
        }
        self.epoch.fetch_max(epoch, Ordering::AcqRel);
    }
}
