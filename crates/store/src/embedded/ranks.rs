//! The rank index (`RankIndex`): each post's top-level comments, by score.
//!
//! - `rank_order`: `post (8) | !ordered(score) (8) | !comment (8)` -> empty, for listed
//!   entries. A forward scan of a post's prefix walks them best first (equal scores: the
//!   higher ID first).
//! - `rank_held`: `post (8) | author (8) | comment (8)` -> empty, for unlisted entries (held,
//!   hidden): read by author, or all of a post's for its author and moderators.
//! - `rank_held_by`: `author (8) | post (8) | comment (8)` -> empty: the same entries by
//!   author, so a feed page learns with one seek that its viewer has none.
//! - `rank_of`: `post (8) | comment (8)` -> `score bits (8) | author_replied (1) | listed (1)
//!   | author (8) | factor bits (8) | author_liked (1)`: where a comment's entry is, to move or
//!   remove it, and what rescoring it needs.
//!
//! - `rank_versions`: `post (8)` -> `version (8)`: the post's index version, raised by every
//!   batch that moves one of its entries (score, listed state or presence).
//! - `rank_history`: `post (8) | version (8) | comment (8)` -> `at_ms (8) | present (1) |
//!   listed (1) | score bits (8) | author (8)`: where an entry was before the batch of that
//!   version moved it. The first record of a comment after version V is where it was at V.
//! - `rank_history_times`: `at_ms (8) | post (8) | version (8) | comment (8)` -> empty: the
//!   expiry index; each batch deletes a chunk of records older than `RANK_HISTORY_MS`.
//!
//! Writers (the aggregator, and the comment write path for its own comment) recompute an
//! entry from stored state; a lock serialises the read-modify-write of `change_ranks` so two
//! of them can never leave a stale order key behind, and so versions follow commit order.

use super::error::engine_err;
use super::state::EmbeddedStore;
use crate::keys::{be_u64, pair_key};
use async_trait::async_trait;
use fjall::Readable;
use likewise_core::ids::{CommentId, PostId, UserId};
use likewise_core::ports::{RANK_HISTORY_MS, RankChange, RankEntry, RankIndex};
use likewise_core::{StoreError, StoreResult};
use std::collections::{BTreeMap, HashMap};

/// Most expired history records one batch deletes (more than a batch writes, so the history
/// keeps up).
const PRUNE_CHUNK: usize = 512;

/// Where an entry was at an earlier version: its author, and its (listed, score) if it had an
/// entry then.
#[derive(Debug, Clone, Copy)]
struct Then {
    author: UserId,
    place: Option<(bool, f64)>,
}

/// An entry's place in the order: what history records (flags do not move it).
fn place(e: Option<&RankEntry>) -> Option<(bool, u64)> {
    e.map(|e| (e.listed, e.score.to_bits()))
}

fn history_key(post: PostId, version: u64, comment: CommentId) -> [u8; 24] {
    let mut k = [0u8; 24];
    k[..8].copy_from_slice(&post.0.to_be_bytes());
    k[8..16].copy_from_slice(&version.to_be_bytes());
    k[16..].copy_from_slice(&comment.0.to_be_bytes());
    k
}

fn encode_then(at_ms: u64, t: Then) -> [u8; 26] {
    let mut v = [0u8; 26];
    v[..8].copy_from_slice(&at_ms.to_be_bytes());
    if let Some((listed, score)) = t.place {
        v[8] = 1;
        v[9] = u8::from(listed);
        v[10..18].copy_from_slice(&score.to_bits().to_be_bytes());
    }
    v[18..26].copy_from_slice(&t.author.0.to_be_bytes());
    v
}

fn decode_then(v: &[u8]) -> StoreResult<Then> {
    if v.len() != 26 {
        return Err(corrupt("rank_history", format!("a value of {} bytes", v.len())));
    }
    let place = (v[8] == 1).then(|| (v[9] == 1, f64::from_bits(be_u64(v, 10))));
    Ok(Then { author: UserId(be_u64(v, 18)), place })
}

/// `(score, id)` strictly after `after` in best-first order (the index's key order).
fn after_point(score: f64, id: CommentId, after: Option<(f64, CommentId)>) -> bool {
    after.is_none_or(|(s, c)| score.total_cmp(&s).then(id.cmp(&c)).is_lt())
}

/// Best first, equal scores: the higher ID first.
fn best_first(v: &mut [RankEntry]) {
    v.sort_by(|a, b| b.score.total_cmp(&a.score).then(b.comment.cmp(&a.comment)));
}

/// A u64 whose unsigned order is `x`'s numeric order (`total_cmp`).
fn ordered(x: f64) -> u64 {
    let b = x.to_bits();
    if b >> 63 == 1 { !b } else { b | 1 << 63 }
}

fn unordered(v: u64) -> f64 {
    f64::from_bits(if v >> 63 == 1 { v & !(1 << 63) } else { !v })
}

fn order_key(post: PostId, score: f64, comment: CommentId) -> [u8; 24] {
    let mut k = [0u8; 24];
    k[..8].copy_from_slice(&post.0.to_be_bytes());
    k[8..16].copy_from_slice(&(!ordered(score)).to_be_bytes());
    k[16..].copy_from_slice(&(!comment.0).to_be_bytes());
    k
}

fn held_key(post: PostId, author: UserId, comment: CommentId) -> [u8; 24] {
    let mut k = [0u8; 24];
    k[..8].copy_from_slice(&post.0.to_be_bytes());
    k[8..16].copy_from_slice(&author.0.to_be_bytes());
    k[16..].copy_from_slice(&comment.0.to_be_bytes());
    k
}

fn held_by_key(author: UserId, post: PostId, comment: CommentId) -> [u8; 24] {
    let mut k = [0u8; 24];
    k[..8].copy_from_slice(&author.0.to_be_bytes());
    k[8..16].copy_from_slice(&post.0.to_be_bytes());
    k[16..].copy_from_slice(&comment.0.to_be_bytes());
    k
}

fn corrupt(keyspace: &'static str, detail: String) -> StoreError {
    StoreError::Corrupt { keyspace, detail }
}

fn encode_of(e: &RankEntry) -> [u8; 27] {
    let mut v = [0u8; 27];
    v[..8].copy_from_slice(&e.score.to_bits().to_be_bytes());
    v[8] = u8::from(e.author_replied);
    v[9] = u8::from(e.listed);
    v[10..18].copy_from_slice(&e.author.0.to_be_bytes());
    v[18..26].copy_from_slice(&e.factor.to_bits().to_be_bytes());
    v[26] = u8::from(e.author_liked);
    v
}

fn decode_of(post: PostId, comment: CommentId, v: &[u8]) -> StoreResult<RankEntry> {
    if v.len() != 27 {
        return Err(corrupt("rank_of", format!("a value of {} bytes", v.len())));
    }
    Ok(RankEntry {
        post,
        comment,
        author: UserId(be_u64(v, 10)),
        score: f64::from_bits(be_u64(v, 0)),
        author_replied: v[8] == 1,
        listed: v[9] == 1,
        factor: f64::from_bits(be_u64(v, 18)),
        author_liked: v[26] == 1,
    })
}

/// A comment's entry, read through `r` (the store, or a snapshot of it for a consistent scan).
fn rank_entry(
    r: &impl Readable,
    ks: &fjall::Keyspace,
    post: PostId,
    comment: CommentId,
) -> StoreResult<Option<RankEntry>> {
    match r.get(ks, pair_key(post.0, comment.0)).map_err(engine_err)? {
        Some(v) => decode_of(post, comment, &v).map(Some),
        None => Ok(None),
    }
}

#[async_trait]
impl RankIndex for EmbeddedStore {
    async fn change_ranks(&self, changes: &[RankChange]) -> StoreResult<()> {
        if changes.is_empty() {
            return Ok(());
        }
        let s = &*self.inner;
        let _guard = s.rank_lock.lock();
        let mut batch = s.db.batch();
        // Entries as this batch leaves them, so two changes of one comment compose.
        let mut now: HashMap<(u64, u64), Option<RankEntry>> = Default::default();
        // Entries as they were before this batch.
        let mut before: BTreeMap<(u64, u64), Option<RankEntry>> = BTreeMap::new();
        for change in changes {
            let (post, comment) = match change {
                RankChange::Put(e) => (e.post, e.comment),
                RankChange::Remove { post, comment } => (*post, *comment),
            };
            let old = match now.get(&(post.0, comment.0)) {
                Some(e) => *e,
                // Under the lock, so the latest committed entry.
                None => {
                    let stored = match s.rank_of.get(pair_key(post.0, comment.0)).map_err(engine_err)? {
                        Some(v) => Some(decode_of(post, comment, &v)?),
                        None => None,
                    };
                    before.insert((post.0, comment.0), stored);
                    stored
                }
            };
            if let Some(old) = old {
                if old.listed {
                    batch.remove(&s.rank_order, order_key(post, old.score, comment));
                } else {
                    batch.remove(&s.rank_held, held_key(post, old.author, comment));
                    batch.remove(&s.rank_held_by, held_by_key(old.author, post, comment));
                }
            }
            let of = pair_key(post.0, comment.0);
            match change {
                RankChange::Put(e) => {
                    batch.insert(&s.rank_of, of, encode_of(e));
                    if e.listed {
                        batch.insert(&s.rank_order, order_key(post, e.score, comment), []);
                    } else {
                        batch.insert(&s.rank_held, held_key(post, e.author, comment), []);
                        batch.insert(&s.rank_held_by, held_by_key(e.author, post, comment), []);
                    }
                    now.insert((post.0, comment.0), Some(*e));
                }
                RankChange::Remove { .. } => {
                    batch.remove(&s.rank_of, of);
                    now.insert((post.0, comment.0), None);
                }
            }
        }
        self.record_moves(&mut batch, &before, &now)?;
        batch.commit().map_err(engine_err)
    }

    async fn ranks_of(&self, post: PostId, comments: &[CommentId]) -> StoreResult<Vec<Option<RankEntry>>> {
        let s = &*self.inner;
        let snap = s.db.snapshot();
        comments.iter().map(|c| rank_entry(&snap, &s.rank_of, post, *c)).collect()
    }

    async fn held_ranks(
        &self,
        post: PostId,
        author: Option<UserId>,
        limit: usize,
    ) -> StoreResult<Vec<RankEntry>> {
        let s = &*self.inner;
        let mut lo = post.0.to_be_bytes().to_vec();
        let mut hi = [0xffu8; 24].to_vec();
        hi[..8].copy_from_slice(&post.0.to_be_bytes());
        if let Some(a) = author {
            lo.extend_from_slice(&a.0.to_be_bytes());
            hi[8..16].copy_from_slice(&a.0.to_be_bytes());
        }
        let mut out = Vec::new();
        // One snapshot: an entry that a concurrent change moves is read as it was or as it is.
        let snap = s.db.snapshot();
        for kv in snap.range(&s.rank_held, lo..=hi).take(limit) {
            let k = kv.key().map_err(engine_err)?;
            if k.len() != 24 {
                return Err(corrupt("rank_held", format!("a key of {} bytes", k.len())));
            }
            if let Some(e) = rank_entry(&snap, &s.rank_of, post, CommentId(be_u64(&k, 16)))? {
                out.push(e);
            }
        }
        Ok(out)
    }

    async fn held_by_author(
        &self,
        author: UserId,
        posts: &[PostId],
        limit: usize,
    ) -> StoreResult<Vec<RankEntry>> {
        let s = &*self.inner;
        let snap = s.db.snapshot();
        let mut out = Vec::new();
        // The usual answer: no unlisted entry by this author anywhere, one seek.
        if snap.prefix(&s.rank_held_by, author.0.to_be_bytes()).next().is_none() {
            return Ok(out);
        }
        for post in posts {
            let mut prefix = author.0.to_be_bytes().to_vec();
            prefix.extend_from_slice(&post.0.to_be_bytes());
            for kv in snap.prefix(&s.rank_held_by, prefix) {
                if out.len() >= limit {
                    return Ok(out);
                }
                let k = kv.key().map_err(engine_err)?;
                if k.len() != 24 {
                    return Err(corrupt("rank_held_by", format!("a key of {} bytes", k.len())));
                }
                // Written in one batch with the entry: never apart.
                match rank_entry(&snap, &s.rank_of, *post, CommentId(be_u64(&k, 16)))? {
                    Some(e) => out.push(e),
                    None => {
                        return Err(corrupt("rank_of", format!("no entry for comment {}", be_u64(&k, 16))));
                    }
                }
            }
        }
        Ok(out)
    }

    async fn ranked(
        &self,
        post: PostId,
        after: Option<(f64, CommentId)>,
        limit: usize,
    ) -> StoreResult<Vec<RankEntry>> {
        let s = &*self.inner;
        let start: Vec<u8> = match after {
            // Strictly after: the key of `after` itself, then one more byte.
            Some((score, id)) => {
                let mut k = order_key(post, score, id).to_vec();
                k.push(0);
                k
            }
            None => post.0.to_be_bytes().to_vec(),
        };
        let mut end = [0xffu8; 24];
        end[..8].copy_from_slice(&post.0.to_be_bytes());
        let mut out = Vec::with_capacity(limit.min(1024));
        let snap = s.db.snapshot();
        for kv in snap.range(&s.rank_order, start..=end.to_vec()).take(limit) {
            let k = kv.key().map_err(engine_err)?;
            if k.len() != 24 {
                return Err(corrupt("rank_order", format!("a key of {} bytes", k.len())));
            }
            let comment = CommentId(!be_u64(&k, 16));
            match rank_entry(&snap, &s.rank_of, post, comment)? {
                Some(e) => out.push(e),
                // Written in one batch with its order key: never apart.
                None => return Err(corrupt("rank_of", format!("no entry for comment {}", comment.0))),
            }
            debug_assert_eq!(
                out.last().map(|e| e.score.to_bits()),
                Some(unordered(!be_u64(&k, 8)).to_bits())
            );
        }
        Ok(out)
    }

    async fn rank_version(&self, post: PostId) -> StoreResult<u64> {
        let s = &*self.inner;
        version_of(&s.db.snapshot(), &s.rank_versions, post)
    }

    async fn ranked_at(
        &self,
        post: PostId,
        version: u64,
        after: Option<(f64, CommentId)>,
        limit: usize,
    ) -> StoreResult<Vec<RankEntry>> {
        let s = &*self.inner;
        // One snapshot: a batch's moves and their history are seen together or not at all.
        let snap = s.db.snapshot();
        let moved = moved_since(&snap, &s.rank_history, post, version)?;
        let start: Vec<u8> = match after {
            Some((score, id)) => {
                let mut k = order_key(post, score, id).to_vec();
                k.push(0);
                k
            }
            None => post.0.to_be_bytes().to_vec(),
        };
        let mut end = [0xffu8; 24];
        end[..8].copy_from_slice(&post.0.to_be_bytes());
        // Today's entries that have not moved since, in order...
        let mut out = Vec::with_capacity(limit.min(1024));
        for kv in snap.range(&s.rank_order, start..=end.to_vec()) {
            if out.len() >= limit {
                break;
            }
            let k = kv.key().map_err(engine_err)?;
            if k.len() != 24 {
                return Err(corrupt("rank_order", format!("a key of {} bytes", k.len())));
            }
            let comment = CommentId(!be_u64(&k, 16));
            if moved.contains_key(&comment) {
                continue;
            }
            match rank_entry(&snap, &s.rank_of, post, comment)? {
                Some(e) => out.push(e),
                None => return Err(corrupt("rank_of", format!("no entry for comment {}", comment.0))),
            }
        }
        // ...and those that moved, where they were.
        for (comment, then) in &moved {
            if let Some((true, score)) = then.place
                && after_point(score, *comment, after)
            {
                out.push(as_then(&snap, &s.rank_of, post, *comment, *then, score)?);
            }
        }
        best_first(&mut out);
        out.truncate(limit);
        Ok(out)
    }

    async fn held_ranks_at(
        &self,
        post: PostId,
        version: u64,
        author: Option<UserId>,
        limit: usize,
    ) -> StoreResult<Vec<RankEntry>> {
        let s = &*self.inner;
        let snap = s.db.snapshot();
        let moved = moved_since(&snap, &s.rank_history, post, version)?;
        let mut lo = post.0.to_be_bytes().to_vec();
        let mut hi = [0xffu8; 24].to_vec();
        hi[..8].copy_from_slice(&post.0.to_be_bytes());
        if let Some(a) = author {
            lo.extend_from_slice(&a.0.to_be_bytes());
            hi[8..16].copy_from_slice(&a.0.to_be_bytes());
        }
        let mut out = Vec::new();
        for kv in snap.range(&s.rank_held, lo..=hi) {
            if out.len() >= limit {
                break;
            }
            let k = kv.key().map_err(engine_err)?;
            if k.len() != 24 {
                return Err(corrupt("rank_held", format!("a key of {} bytes", k.len())));
            }
            let comment = CommentId(be_u64(&k, 16));
            if moved.contains_key(&comment) {
                continue;
            }
            if let Some(e) = rank_entry(&snap, &s.rank_of, post, comment)? {
                out.push(e);
            }
        }
        for (comment, then) in &moved {
            if out.len() >= limit {
                break;
            }
            if let Some((false, score)) = then.place
                && author.is_none_or(|a| a == then.author)
            {
                out.push(as_then(&snap, &s.rank_of, post, *comment, *then, score)?);
            }
        }
        Ok(out)
    }
}

/// Fill `rank_held_by` from `rank_held` when it is empty and `rank_held` is not: a store
/// written before the by-author index existed (at open, before any writer runs).
pub(super) fn index_held_by_author(s: &super::state::Inner) -> StoreResult<()> {
    // One batch: a crash part way leaves the index empty, to be built at the next open.
    if s.rank_held_by.iter().next().is_some() || s.rank_held.iter().next().is_none() {
        return Ok(());
    }
    let mut batch = s.db.batch();
    let mut n = 0usize;
    for kv in s.rank_held.iter() {
        let k = kv.key().map_err(engine_err)?;
        if k.len() != 24 {
            return Err(corrupt("rank_held", format!("a key of {} bytes", k.len())));
        }
        let (post, author, comment) = (be_u64(&k, 0), be_u64(&k, 8), be_u64(&k, 16));
        batch.insert(&s.rank_held_by, held_by_key(UserId(author), PostId(post), CommentId(comment)), []);
        n += 1;
    }
    batch.commit().map_err(engine_err)?;
    tracing::info!(entries = n, "indexed the unlisted rank entries by author");
    Ok(())
}

/// A post's index version, read through `r`.
fn version_of(r: &impl Readable, ks: &fjall::Keyspace, post: PostId) -> StoreResult<u64> {
    match r.get(ks, post.0.to_be_bytes()).map_err(engine_err)? {
        Some(v) if v.len() == 8 => Ok(be_u64(&v, 0)),
        Some(v) => Err(corrupt("rank_versions", format!("a value of {} bytes", v.len()))),
        None => Ok(0),
    }
}

/// Where each of `post`'s entries that moved after `version` was at `version`: the first
/// record of each comment after it.
fn moved_since(
    r: &impl Readable,
    ks: &fjall::Keyspace,
    post: PostId,
    version: u64,
) -> StoreResult<BTreeMap<CommentId, Then>> {
    let mut out = BTreeMap::new();
    let Some(from) = version.checked_add(1) else { return Ok(out) };
    let lo = history_key(post, from, CommentId(0));
    let hi = history_key(post, u64::MAX, CommentId(u64::MAX));
    for kv in r.range(ks, lo.to_vec()..=hi.to_vec()) {
        let (k, v) = kv.into_inner().map_err(engine_err)?;
        if k.len() != 24 {
            return Err(corrupt("rank_history", format!("a key of {} bytes", k.len())));
        }
        let then = decode_then(&v)?;
        out.entry(CommentId(be_u64(&k, 16))).or_insert(then);
    }
    Ok(out)
}

/// An entry as it was (score, listed state, author), with today's flags where it still has an
/// entry.
fn as_then(
    r: &impl Readable,
    ks: &fjall::Keyspace,
    post: PostId,
    comment: CommentId,
    then: Then,
    score: f64,
) -> StoreResult<RankEntry> {
    let listed = then.place.is_some_and(|(l, _)| l);
    Ok(match rank_entry(r, ks, post, comment)? {
        Some(e) => RankEntry { score, listed, author: then.author, ..e },
        None => RankEntry {
            post,
            comment,
            author: then.author,
            score,
            author_replied: false,
            author_liked: false,
            factor: 1.0,
            listed,
        },
    })
}

impl EmbeddedStore {
    /// Add to `batch` where the entries this batch moves were (under a new version of their
    /// post), and delete a chunk of expired history. Called under the rank lock.
    fn record_moves(
        &self,
        batch: &mut fjall::OwnedWriteBatch,
        before: &BTreeMap<(u64, u64), Option<RankEntry>>,
        now: &HashMap<(u64, u64), Option<RankEntry>>,
    ) -> StoreResult<()> {
        let s = &*self.inner;
        let at_ms = likewise_engine::now_ms();
        let mut moved: BTreeMap<u64, Vec<(u64, Then)>> = BTreeMap::new();
        for (&(post, comment), old) in before {
            let new = now.get(&(post, comment)).copied().flatten();
            if place(old.as_ref()) == place(new.as_ref()) {
                continue;
            }
            let Some(author) = old.or(new).map(|e| e.author) else { continue };
            let then = Then { author, place: old.map(|e| (e.listed, e.score)) };
            moved.entry(post).or_default().push((comment, then));
        }
        for (post, entries) in moved {
            let post = PostId(post);
            // Under the lock, so the latest committed version.
            let version = version_of(&s.db.snapshot(), &s.rank_versions, post)? + 1;
            batch.insert(&s.rank_versions, post.0.to_be_bytes(), version.to_be_bytes());
            for (comment, then) in entries {
                let key = history_key(post, version, CommentId(comment));
                batch.insert(&s.rank_history, key, encode_then(at_ms, then));
                let mut t = at_ms.to_be_bytes().to_vec();
                t.extend_from_slice(&key);
                batch.insert(&s.rank_history_times, t, []);
            }
        }
        let expired = at_ms.saturating_sub(RANK_HISTORY_MS).to_be_bytes();
        for kv in s.rank_history_times.range(..expired.to_vec()).take(PRUNE_CHUNK) {
            let k = kv.key().map_err(engine_err)?;
            if k.len() != 32 {
                return Err(corrupt("rank_history_times", format!("a key of {} bytes", k.len())));
            }
            batch.remove(&s.rank_history, k[8..].to_vec());
            batch.remove(&s.rank_history_times, k.to_vec());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ordered_encoding_keeps_numeric_order_and_round_trips() {
        let xs = [f64::NEG_INFINITY, -1e300, -2.5, -0.0, 0.0, 1e-300, 0.5, 40_000.25, f64::INFINITY];
        for w in xs.windows(2) {
            assert!(ordered(w[0]) <= ordered(w[1]), "{} {}", w[0], w[1]);
        }
        for x in xs {
            assert_eq!(unordered(ordered(x)).to_bits(), x.to_bits());
        }
    }
}
