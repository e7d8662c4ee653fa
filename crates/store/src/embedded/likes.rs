//! Like rows on the embedded engine: the atomic write batch and the reads of both indexes.
//!
//! A like is a row and an entry, written in one batch with its event:
//! - `user_likes` (user, kind, target) -> ts: the one row per (target, user) that says
//!   whether the user likes the target. The write path reads it to decide whether a request
//!   changes anything; "has this viewer liked these posts" reads it too.
//! - an entry (ts, user) in one of the target's likers pages (`liker_pages.rs`): the same
//!   like keyed by its target, newest first; the likers list and recounts read it. A batch
//!   writes one page per target (per 16 ms of like times), not a row per like.
//!
//! Earlier versions wrote a third row, `likes` (kind, target, user) -> ts, which duplicated
//! the first for the existence check. It was dropped because each row costs the single
//! writer thread about a quarter of its likes per second (docs/benchmarks.md); stores written
//! before that hold the same likes in the two remaining rows, and `open` removes the old
//! keyspace.

use super::batch::Batch;
use super::error::engine_err;
use super::liker_pages;
use super::state::EmbeddedStore;
use crate::keys::{be_u64, num_value, parse_num, target_prefix, user_kind_prefix, user_like_key};
use async_trait::async_trait;
use likewise_core::StoreResult;
use likewise_core::event::Event;
use likewise_core::ids::UserId;
use likewise_core::like::{LikeAction, LikeOp, LikeOutcome, Target, TargetKind, transition};
use likewise_core::ports::{LikeReader, Liker};
use std::collections::HashMap;
use std::collections::hash_map::Entry;

/// The state of one (target, user) key while a batch is resolved.
struct Touched {
    target: Target,
    user: UserId,
    /// Like timestamp before the batch (None = not liked).
    before: Option<u64>,
    /// Like timestamp after the ops seen so far.
    now: Option<u64>,
    /// The key went into the like filter when it was first probed (a like).
    in_filter: bool,
}

/// Like keys (`user_likes` keys) touched by the current batch, in first-touch order until
/// `flush` sorts them.
#[derive(Default)]
pub(super) struct LikeOverlay {
    touched: HashMap<[u8; 17], Touched, foldhash::fast::RandomState>,
    order: Vec<[u8; 17]>,
    /// Existence reads the like filter made unnecessary (for the metric).
    pub(super) reads_skipped: u64,
}

impl LikeOverlay {
    /// Resolve one like/unlike against the stored row (or this batch's earlier state of it).
    pub(super) fn like(&mut self, b: &mut Batch<'_>, op: &LikeOp) -> StoreResult<LikeOutcome> {
        let key = user_like_key(op.user, op.target.kind, op.target.id);
        let entry = match self.touched.entry(key) {
            Entry::Occupied(e) => e.into_mut(),
            Entry::Vacant(v) => {
                // The user-keyed row is the one row per (target, user) that says whether and
                // since when the user likes the target (module docs). Most likes are first
                // likes: the filter answers those without a read.
                // A like stores the key unless it exists: into the filter now, in the same
                // atomic operation as the probe (`like_filter.rs`).
                let filtered = match op.action {
                    LikeAction::Like => b.s.like_filter.check_and_insert(&key),
                    LikeAction::Unlike => b.s.like_filter.may_contain(&key),
                };
                let before = if !filtered {
                    self.reads_skipped += 1;
                    None
                } else {
                    match b.s.user_likes.get(key).map_err(engine_err)? {
                        Some(v) => Some(parse_num("user_likes", &v)?),
                        None => None,
                    }
                };
                self.order.push(key);
                let in_filter = op.action == LikeAction::Like;
                v.insert(Touched { target: op.target, user: op.user, before, now: before, in_filter })
            }
        };
        let (liked, changed) = transition(entry.now.is_some(), op.action);
        let mut event_seq = None;
        if changed {
            entry.now = liked.then_some(op.ts_ms);
            let e = Event::like(0, liked, op.target, op.target_author, op.user, op.ts_ms, op.post)
                .traced(op.trace);
            event_seq = Some(b.event(e));
        }
        Ok(LikeOutcome { liked, changed, event_seq })
    }

    /// Write each touched key once, with its final state: fjall gives every item of a batch
    /// the same sequence number, so two writes of one key in a batch would be ambiguous.
    /// Per-key arrival order was already resolved by [`LikeOverlay::like`].
    ///
    /// In key order: real likers of a hot post have scattered user IDs, and each insert is a
    /// descent through a large memtable skiplist; sorted, consecutive descents share most of
    /// their path in the CPU cache (2-11% more likes/s with `--scattered-users`, within
    /// noise with consecutive IDs; docs/benchmarks.md).
    pub(super) fn flush(&mut self, b: &mut Batch<'_>) -> StoreResult<()> {
        let s = b.s;
        self.order.sort_unstable();
        let mut added: Vec<([u8; 9], u64, u64)> = Vec::new();
        let mut removed: Vec<(Target, u64, UserId)> = Vec::new();
        for key in &self.order {
            let t = &self.touched[key];
            if t.before == t.now {
                continue;
            }
            if let Some(old_ts) = t.before
                && t.now != Some(old_ts)
            {
                removed.push((t.target, old_ts, t.user));
            }
            match t.now {
                Some(ts) => {
                    // Into the filter before the row is committed (`like_filter.rs`), if the
                    // probe did not already put it there.
                    if !t.in_filter {
                        s.like_filter.insert(key);
                    }
                    b.batch.insert(&s.user_likes, *key, num_value(ts));
                    added.push((target_prefix(t.target), ts, t.user.0));
                }
                None => {
                    b.batch.remove(&s.user_likes, *key);
                }
            }
        }
        write_liker_pages(b, added, removed)
    }
}

/// The batch's changes to likers pages (`liker_pages.rs`): removed likers leave the page
/// that holds them (each page read and rewritten once), added likers go into new pages
/// of this batch, one per target and 16 ms window.
fn write_liker_pages(
    b: &mut Batch<'_>,
    mut added: Vec<([u8; 9], u64, u64)>,
    removed: Vec<(Target, u64, UserId)>,
) -> StoreResult<()> {
    let s = b.s;
    let mut changed: HashMap<[u8; 25], liker_pages::Entries> = HashMap::new();
    for (target, ts, user) in removed {
        let prefix = target_prefix(target);
        let entry = (ts, user.0);
        let held = changed
            .iter_mut()
            .find(|(k, e)| k[0..9] == prefix && e.binary_search(&entry).is_ok())
            .map(|(_, e)| e);
        let entries = match held {
            Some(e) => e,
            None => match liker_pages::find(&s.likers, target, ts, user)? {
                Some((k, e)) if !changed.contains_key(&k) => changed.entry(k).or_insert(e),
                _ => {
                    // `user_likes` said liked, yet no page holds the liker: nothing to
                    // remove. Counted, since it means the two disagreed.
                    tracing::warn!(user = user.0, ts, "an unliked liker was in no likers page");
                    metrics::counter!("likewise_store_liker_page_misses_total").increment(1);
                    continue;
                }
            },
        };
        if let Ok(i) = entries.binary_search(&entry) {
            entries.remove(i);
        }
    }
    for (key, entries) in changed {
        if entries.is_empty() {
            b.batch.remove(&s.likers, key);
        } else {
            b.batch.insert(&s.likers, key, liker_pages::encode(be_u64(&key, 9), &entries));
        }
    }
    added.sort_unstable();
    for group in added.chunk_by(|a, b| a.0 == b.0) {
        let prefix = group[0].0;
        let entries: liker_pages::Entries = group.iter().map(|(_, ts, user)| (*ts, *user)).collect();
        for run in liker_pages::split(&entries) {
            let Some(newest) = run.last() else { continue };
            let key = liker_pages::page_key_at(prefix, newest.0, b.first_seq);
            b.batch.insert(&s.likers, key, liker_pages::encode(newest.0, run));
        }
    }
    Ok(())
}

#[async_trait]
impl LikeReader for EmbeddedStore {
    async fn liked_among(&self, user: UserId, kind: TargetKind, ids: &[u64]) -> StoreResult<Vec<bool>> {
        // Point reads on one user's partition of the reverse index: memtable and bloom-filter
        // hits measured in microseconds, so they run inline rather than on a blocking thread.
        // Most posts of a feed page are not liked: the like filter answers those first.
        ids.iter()
            .map(|id| {
                let key = user_like_key(user, kind, *id);
                if !self.inner.like_filter.may_contain(&key) {
                    return Ok(false);
                }
                self.inner.user_likes.contains_key(key).map_err(engine_err)
            })
            .collect()
    }

    async fn liked_ids(&self, user: UserId, kind: TargetKind, limit: usize) -> StoreResult<Vec<u64>> {
        let mut out = Vec::new();
        for g in self.inner.user_likes.prefix(user_kind_prefix(user, kind)).take(limit) {
            let k = g.key().map_err(engine_err)?;
            out.push(be_u64(&k, 9));
        }
        Ok(out)
    }

    async fn likers(&self, target: Target, after: Option<Liker>, limit: usize) -> StoreResult<Vec<Liker>> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        liker_pages::list(&self.inner.likers, target, after, limit)
    }
}
