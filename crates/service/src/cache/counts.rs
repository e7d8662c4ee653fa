//! The count cache: what every post render reads (like/comment counts and recent likers).
//!
//! - Never invalidated per like. The in-process aggregator writes each new absolute value
//!   into the cache after committing it; otherwise an entry older than `refresh` is served
//!   stale while ONE background task reloads it.
//! - Single-flight: concurrent misses on a key wait for one loader (a per-key async lock), so a
//!   thousand readers of a cold viral post cause one storage read, not a thousand.
//! - Ordering: every write is tagged with the aggregator's log position (the epoch). A loader
//!   remembers the epoch before it reads storage and never overwrites a newer tag, so a slow
//!   load cannot roll a count back; nor a value the aggregator wrote into the entry while it
//!   loaded (each entry counts those writes: epochs of different shards' aggregators do not
//!   compare).
//! - Status changes not counted yet: the moves approvals and holds make to comment counts
//!   before the aggregator commits them are kept here ([`Uncounted`]), and settled by the
//!   commit that writes the counter values including them, in the same step: a post's count
//!   and its moves read together ([`CountCache::own_comment_counts`]) always agree.

use super::{SHARDS, shard_of};
use likewise_core::StoreResult;
use likewise_core::comment::uncounted::{Move, Uncounted};
use likewise_core::counter::{CounterKey, Counts};
use likewise_core::event::{Event, EventKind};
use likewise_core::ids::{PostId, UserId};
use likewise_core::like::{Target, TargetKind};
use likewise_core::ports::{CounterStore, LikeReader};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::collections::hash_map::RandomState;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
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
    /// How many aggregator commits wrote into this entry (or found it loading): a load during
    /// which this moved installs nothing over the values they wrote.
    published: AtomicU64,
    load: tokio::sync::Mutex<()>,
    refreshing: AtomicBool,
}

/// A post's comment count as cached now, with the moves of one viewer's comments on it
/// ([`CountCache::own_comment_counts`]).
#[derive(Debug, Clone, Default)]
pub struct OwnCommentCount {
    /// The count; `None` when not cached, or not read (nothing kept: the caller's stands).
    pub cached: Option<i64>,
    /// The viewer's comments with moves, each with whether it counts for them on top of the
    /// count ([`Uncounted::own_view`]).
    pub moves: Vec<(Move, bool)>,
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
    /// Moves of comment counts not committed yet. Taken before any entry's lock, by the
    /// commits that settle them and by the reads that take them with a post's count.
    uncounted: Mutex<Uncounted>,
    /// How many moves `uncounted` keeps, updated under its lock: reads skip the lock while
    /// none is kept (nearly always).
    moves_kept: AtomicUsize,
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
            uncounted: Mutex::new(Uncounted::default()),
            moves_kept: AtomicUsize::new(0),
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
                let seen: Vec<u64> =
                    still.iter().map(|i| slots[*i].published.load(Ordering::Acquire)).collect();
                let loaded = self.load(&want).await?;
                for ((i, value), seen) in still.iter().zip(loaded).zip(seen) {
                    self.install(&slots[*i], value.0, seen, value.1);
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

    /// Install `value`, loaded from storage by a load that began at `load_epoch`, when the
    /// entry's commit count was `seen`.
    fn install(&self, slot: &Slot, load_epoch: u64, seen: u64, mut value: Cached) {
        let mut state = slot.state.lock();
        if state.as_ref().is_some_and(|cur| cur.tag > load_epoch) {
            return; // the aggregator wrote something newer while we were reading
        }
        if state.is_some() && slot.published.load(Ordering::Acquire) != seen {
            // A commit wrote into the entry while we were reading: what it wrote may be newer
            // than what we read (the settled moves count on it), and the next read refreshes.
            return;
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
            let seen: Vec<u64> = stale.iter().map(|(_, s)| s.published.load(Ordering::Acquire)).collect();
            match this.load(&want).await {
                Ok(values) => {
                    for (((_, slot), (e, value)), seen) in stale.iter().zip(values).zip(seen) {
                        this.install(slot, e, seen, value);
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
    /// write the new absolute values and the likers of `events` into cached entries, and
    /// settle the moves of comment counts the commit took in.
    pub fn publish(&self, epoch: u64, values: &[(CounterKey, i64)], events: &[Event]) {
        // Held while the values are written when moves are kept: a read of a post's count and
        // its moves sees the commit's values and settled moves together, or neither. (A move
        // registered meanwhile is for a write this commit cannot hold.)
        let mut uncounted = (self.moves_kept.load(Ordering::Acquire) > 0).then(|| self.uncounted.lock());
        for (key, value) in values {
            if let Some(slot) = self.existing(key.target) {
                let mut state = slot.state.lock();
                slot.published.fetch_add(1, Ordering::AcqRel);
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
                slot.published.fetch_add(1, Ordering::AcqRel);
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
        if let Some(u) = uncounted.as_mut() {
            u.settle(events, crate::now_ms());
            self.moves_kept.store(u.len(), Ordering::Release);
        }
    }

    /// Register a comment's move of its post's count, about to be written and not counted
    /// yet. `false` when the same move is registered already (see [`Uncounted::register`]).
    pub fn register_move(&self, m: Move) -> bool {
        let mut u = self.uncounted.lock();
        let made = u.register(m, crate::now_ms());
        self.moves_kept.store(u.len(), Ordering::Release);
        made
    }

    /// Take back a registered move whose write changed nothing.
    pub fn withdraw_move(&self, m: Move) {
        let mut u = self.uncounted.lock();
        u.withdraw(m);
        self.moves_kept.store(u.len(), Ordering::Release);
    }

    /// For each of `posts`: its comment count as cached now and the moves of `viewer`'s
    /// comments on it. Read together, under the lock commits settle moves with. With no move
    /// kept (nearly always) nothing is read: no move was registered or settled for seconds,
    /// so the counts read before stand, and a move registered meanwhile is for a write the
    /// caller's earlier reads did not see either.
    pub fn own_comment_counts(&self, viewer: UserId, posts: &[PostId]) -> Vec<OwnCommentCount> {
        if self.moves_kept.load(Ordering::Acquire) == 0 {
            return vec![OwnCommentCount::default(); posts.len()];
        }
        let uncounted = self.uncounted.lock();
        let now = crate::now_ms();
        posts
            .iter()
            .map(|p| {
                let cached = self
                    .existing(Target::post(p.0))
                    .and_then(|s| s.state.lock().as_ref().map(|c| c.counts.comments));
                let moves = uncounted.own_view(*p, viewer, now);
                OwnCommentCount { cached, moves }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use likewise_core::counter::CounterField;
    use likewise_core::ids::CommentId;

    fn cache(dir: &std::path::Path) -> (Arc<CountCache>, likewise_engine::Stores) {
        let stores = likewise_store::testing::open_small(dir);
        let c =
            CountCache::new(stores.counters.clone(), stores.likes.clone(), Duration::from_secs(5), 1_000, 3);
        (c, stores)
    }

    fn comments(post: u64, n: i64) -> (CounterKey, i64) {
        (CounterKey { target: Target::post(post), field: CounterField::Comments }, n)
    }

    fn approved(seq: u64, post: u64, comment: u64) -> Event {
        Event {
            seq,
            kind: EventKind::CommentStatusChanged,
            target: Target::comment(comment),
            target_author: UserId(7),
            actor: UserId(11),
            ts_ms: 0,
            post,
            parent: 0,
            delta: 1,
            mention: None,
            trace: None,
        }
    }

    /// A move counts on top of the cached count for its author until the commit holding its
    /// event writes the count that includes it; then the count has it, and the move says so.
    #[tokio::test]
    async fn a_move_is_settled_with_the_count_that_includes_it() {
        let dir = likewise_store::testing::scratch_dir();
        let (c, stores) = cache(dir.path());
        c.get_many(&[Target::post(1)]).await.expect("load");
        let m = Move { post: PostId(1), comment: CommentId(5), parent: None, author: UserId(11), delta: 1 };
        assert!(c.register_move(m));
        let mine = c.own_comment_counts(UserId(11), &[PostId(1), PostId(2)]);
        assert_eq!((mine[0].cached, mine[0].moves.clone()), (Some(0), vec![(m, true)]));
        assert_eq!((mine[1].cached, mine[1].moves.clone()), (None, vec![]));
        assert!(c.own_comment_counts(UserId(12), &[PostId(1)])[0].moves.is_empty(), "the author's only");
        // Another comment's commit settles nothing.
        c.publish(3, &[comments(1, 1)], &[approved(3, 1, 6)]);
        assert_eq!(c.own_comment_counts(UserId(11), &[PostId(1)])[0].moves, [(m, true)]);
        c.publish(4, &[comments(1, 2)], &[approved(4, 1, 5)]);
        let mine = c.own_comment_counts(UserId(11), &[PostId(1)]);
        assert_eq!((mine[0].cached, mine[0].moves.clone()), (Some(2), vec![(m, false)]));
        stores.close().expect("close");
    }

    /// A load that read storage before a commit wrote into the entry does not put its older
    /// value back, whatever the epochs say (aggregators of different shards publish
    /// positions that do not compare).
    #[tokio::test]
    async fn a_load_that_raced_a_commit_installs_nothing_over_it() {
        let dir = likewise_store::testing::scratch_dir();
        let (c, stores) = cache(dir.path());
        c.get_many(&[Target::post(1)]).await.expect("load");
        let slot = c.slot(Target::post(1));
        let seen = slot.published.load(Ordering::Acquire);
        // Another shard's aggregator is ahead: the load begins at a higher epoch.
        c.publish(100, &[comments(9, 4)], &[]);
        let load_epoch = c.epoch.load(Ordering::Acquire);
        c.publish(50, &[comments(1, 1)], &[]);
        let old = Cached {
            counts: Counts::default(),
            recent_likers: Arc::new(Vec::new()),
            tag: load_epoch,
            loaded_at: Instant::now(),
        };
        c.install(&slot, load_epoch, seen, old);
        assert_eq!(c.get_many(&[Target::post(1)]).await.expect("read")[0].counts.comments, 1);
        stores.close().expect("close");
    }
}
