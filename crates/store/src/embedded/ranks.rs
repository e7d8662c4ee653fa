//! The rank index (`RankIndex`): each post's top-level comments, by score.
//!
//! - `rank_order`: `post (8) | !ordered(score) (8) | !comment (8)` -> empty, for listed
//!   entries. A forward scan of a post's prefix walks them best first (equal scores: the
//!   higher ID first).
//! - `rank_held`: `post (8) | author (8) | comment (8)` -> empty, for unlisted entries (held,
//!   hidden): read by author, or all of a post's for its author and moderators.
//! - `rank_of`: `post (8) | comment (8)` -> `score bits (8) | author_replied (1) | listed (1)
//!   | author (8) | factor bits (8) | author_liked (1)`: where a comment's entry is, to move or
//!   remove it, and what rescoring it needs.
//!
//! Writers (the aggregator, and the comment write path for its own comment) recompute an
//! entry from stored state; a lock serialises the read-modify-write of `change_ranks` so two
//! of them can never leave a stale order key behind.

use super::{EmbeddedStore, engine_err};
use crate::keys::{be_u64, pair_key};
use async_trait::async_trait;
use fjall::Readable;
use likewise_core::ids::{CommentId, PostId, UserId};
use likewise_core::ports::{RankChange, RankEntry, RankIndex};
use likewise_core::{StoreError, StoreResult};

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
        let mut now: std::collections::HashMap<(u64, u64), Option<RankEntry>> = Default::default();
        for change in changes {
            let (post, comment) = match change {
                RankChange::Put(e) => (e.post, e.comment),
                RankChange::Remove { post, comment } => (*post, *comment),
            };
            let old = match now.get(&(post.0, comment.0)) {
                Some(e) => *e,
                // Under the lock, so the latest committed entry.
                None => match s.rank_of.get(pair_key(post.0, comment.0)).map_err(engine_err)? {
                    Some(v) => Some(decode_of(post, comment, &v)?),
                    None => None,
                },
            };
            if let Some(old) = old {
                if old.listed {
                    batch.remove(&s.rank_order, order_key(post, old.score, comment));
                } else {
                    batch.remove(&s.rank_held, held_key(post, old.author, comment));
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
                    }
                    now.insert((post.0, comment.0), Some(*e));
                }
                RankChange::Remove { .. } => {
                    batch.remove(&s.rank_of, of);
                    now.insert((post.0, comment.0), None);
                }
            }
        }
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
