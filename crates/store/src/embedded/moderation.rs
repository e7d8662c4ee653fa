//! Moderation state on the embedded engine: blocks, restricts, hidden words, pins, reports,
//! the review queue and the text fingerprints used for near-duplicate detection.
//!
//! | keyspace        | key                    | value                   | why                               |
//! |-----------------|------------------------|-------------------------|-----------------------------------|
//! | `blocks`        | owner(8) other(8)      | (empty)                 | point lookup of one pair          |
//! | `restricts`     | owner(8) other(8)      | (empty)                 | point lookup of one pair          |
//! | `hidden_words`  | owner(8)               | v1 words joined by `\n` | one small list per owner          |
//! | `pins`          | post(8)                | v1 comment(8)*          | pin order is the stored order     |
//! | `reports`       | comment(8) reporter(8) | v1 reason(1)            | one report per reporter           |
//! | `report_counts` | comment(8)             | v1 count(8) [reviewed(8)] | O(1) count, no scan of `reports` |
//! | `mod_queue`     | comment(8)             | (empty)                 | IDs are time-sortable: FIFO pages |
//! | `holds`         | comment(8)             | v1 held_by code(1)      | why the queue holds it            |
//! | `appeals`       | comment(8)             | v1 message (UTF-8)      | one appeal per comment, ever      |
//! | `fingerprints`  | user(8) comment(8)     | simhash(8)              | newest-first reverse prefix scan  |
//!
//! Every write is made durable before it returns (`persist`): these are rare, user-facing
//! changes (a block, a report) that must not silently vanish in a crash. A write touching two
//! keyspaces (a report row and its count) is one atomic batch, so the count always equals the
//! number of report rows; whether a report counts is `likewise_core::comment::report`'s rule.
//! `reviewed` is the count when the comment was last approved (absent: never, 0): the
//! approval removes the hold and records it in one batch.

use super::error::engine_err;
use super::state::EmbeddedStore;
use crate::keys::{V1, be_u64, pair_key};
use async_trait::async_trait;
use fjall::Keyspace;
use likewise_core::comment::appeal::{HeldBy, QueueNote};
use likewise_core::comment::pins::{PinChange, change_pins};
use likewise_core::comment::report::{ReportOutcome, report};
use likewise_core::ids::{CommentId, PostId, UserId};
use likewise_core::ports::{ModerationStore, ReportReason};
use likewise_core::{StoreError, StoreResult};
use std::ops::Bound;

/// Set or clear a flag row keyed by `owner(8) other(8)` (blocks and restricts).
fn set_pair_flag(ks: &Keyspace, owner: UserId, other: UserId, on: bool) -> StoreResult<()> {
    let key = pair_key(owner.0, other.0);
    if on { ks.insert(key, []) } else { ks.remove(key) }.map_err(engine_err)
}

/// Encode a hidden-words list: the version byte, then the words joined by `\n`.
///
/// Words never contain `\n` (the service validates them), so the join is unambiguous. An
/// empty list is not encoded at all: the row is removed instead.
fn encode_words(words: &[String]) -> Vec<u8> {
    let len = words.iter().map(|w| w.len() + 1).sum::<usize>();
    let mut v = Vec::with_capacity(1 + len);
    v.push(V1);
    for (i, w) in words.iter().enumerate() {
        if i > 0 {
            v.push(b'\n');
        }
        v.extend_from_slice(w.as_bytes());
    }
    v
}

/// Decode an [`encode_words`] record.
fn decode_words(v: &[u8]) -> StoreResult<Vec<String>> {
    let corrupt = |detail: String| StoreError::Corrupt { keyspace: "hidden_words", detail };
    match v.split_first() {
        Some((&V1, [])) => Ok(Vec::new()),
        Some((&V1, body)) => {
            let text = std::str::from_utf8(body).map_err(|e| corrupt(e.to_string()))?;
            Ok(text.split('\n').map(str::to_owned).collect())
        }
        Some((ver, _)) => Err(corrupt(format!("unknown format version {ver}"))),
        None => Err(corrupt("empty record".into())),
    }
}

/// Encode a pin list: the version byte, then each comment ID as 8 big-endian bytes.
fn encode_pins(pins: &[CommentId]) -> Vec<u8> {
    let mut v = Vec::with_capacity(1 + 8 * pins.len());
    v.push(V1);
    for p in pins {
        v.extend_from_slice(&p.0.to_be_bytes());
    }
    v
}

/// Decode an [`encode_pins`] record.
fn decode_pins(v: &[u8]) -> StoreResult<Vec<CommentId>> {
    match v.split_first() {
        Some((&V1, ids)) if ids.len() % 8 == 0 => {
            Ok((0..ids.len() / 8).map(|i| CommentId(be_u64(ids, i * 8))).collect())
        }
        _ => Err(StoreError::Corrupt {
            keyspace: "pins",
            detail: format!("bad pin record of {} bytes", v.len()),
        }),
    }
}

/// A stored report count and how many of those reports the last approval weighed, each
/// clamped into the port's `u32`. Records written before approvals were recorded have no
/// `reviewed` part: none was.
fn parse_count(v: &[u8]) -> StoreResult<(u32, u32)> {
    let num = |i: usize| u32::try_from(be_u64(v, i)).unwrap_or(u32::MAX);
    match v.len() {
        9 if v[0] == V1 => Ok((num(1), 0)),
        17 if v[0] == V1 => Ok((num(1), num(9))),
        n => Err(StoreError::Corrupt {
            keyspace: "report_counts",
            detail: format!("bad count record of {n} bytes"),
        }),
    }
}

/// Encode a [`parse_count`] record.
fn count_value(count: u32, reviewed: u32) -> [u8; 17] {
    let mut b = [0u8; 17];
    b[0] = V1;
    b[1..9].copy_from_slice(&u64::from(count).to_be_bytes());
    b[9..17].copy_from_slice(&u64::from(reviewed).to_be_bytes());
    b
}

/// Decode a `holds` value: the version byte, then a [`HeldBy`] code.
fn decode_hold(v: &[u8]) -> StoreResult<HeldBy> {
    match v {
        [V1, code] => HeldBy::from_code(*code),
        _ => None,
    }
    .ok_or_else(|| StoreError::Corrupt { keyspace: "holds", detail: format!("bad hold record {v:?}") })
}

/// Decode an `appeals` value: the version byte, then the message.
fn decode_appeal(v: &[u8]) -> StoreResult<String> {
    let corrupt = |detail: String| StoreError::Corrupt { keyspace: "appeals", detail };
    match v.split_first() {
        Some((&V1, body)) => std::str::from_utf8(body).map(str::to_owned).map_err(|e| corrupt(e.to_string())),
        _ => Err(corrupt(format!("bad appeal record of {} bytes", v.len()))),
    }
}

#[async_trait]
impl ModerationStore for EmbeddedStore {
    async fn set_block(&self, owner: UserId, other: UserId, on: bool) -> StoreResult<()> {
        set_pair_flag(&self.inner.blocks, owner, other, on)?;
        self.persist_async().await
    }

    async fn is_blocked(&self, owner: UserId, other: UserId) -> StoreResult<bool> {
        self.inner.blocks.contains_key(pair_key(owner.0, other.0)).map_err(engine_err)
    }

    async fn blocked_users(&self, owner: UserId, limit: usize) -> StoreResult<Vec<UserId>> {
        let mut out = Vec::new();
        for g in self.inner.blocks.prefix(owner.0.to_be_bytes()).take(limit) {
            let k = g.key().map_err(engine_err)?;
            out.push(UserId(be_u64(&k, 8)));
        }
        Ok(out)
    }

    async fn set_restrict(&self, owner: UserId, other: UserId, on: bool) -> StoreResult<()> {
        set_pair_flag(&self.inner.restricts, owner, other, on)?;
        self.persist_async().await
    }

    async fn is_restricted(&self, owner: UserId, other: UserId) -> StoreResult<bool> {
        self.inner.restricts.contains_key(pair_key(owner.0, other.0)).map_err(engine_err)
    }

    async fn put_hidden_words(&self, owner: UserId, words: &[String]) -> StoreResult<()> {
        let ks = &self.inner.hidden_words;
        let key = owner.0.to_be_bytes();
        // An empty list is the same as never set; removing the row keeps the keyspace small.
        if words.is_empty() { ks.remove(key) } else { ks.insert(key, encode_words(words)) }
            .map_err(engine_err)?;
        self.persist_async().await
    }

    async fn hidden_words(&self, owner: UserId) -> StoreResult<Vec<String>> {
        match self.inner.hidden_words.get(owner.0.to_be_bytes()).map_err(engine_err)? {
            Some(v) => decode_words(&v),
            None => Ok(Vec::new()),
        }
    }

    async fn set_pins(&self, post: PostId, pins: &[CommentId]) -> StoreResult<()> {
        let ks = &self.inner.pins;
        let key = post.0.to_be_bytes();
        // The service enforces the pin cap; the store keeps exactly what it is given, in order.
        if pins.is_empty() { ks.remove(key) } else { ks.insert(key, encode_pins(pins)) }
            .map_err(engine_err)?;
        self.persist_async().await
    }

    async fn pins(&self, post: PostId) -> StoreResult<Vec<CommentId>> {
        match self.inner.pins.get(post.0.to_be_bytes()).map_err(engine_err)? {
            Some(v) => decode_pins(&v),
            None => Ok(Vec::new()),
        }
    }

    async fn pins_of(&self, posts: &[PostId]) -> StoreResult<Vec<Vec<CommentId>>> {
        let mut out = Vec::with_capacity(posts.len());
        for post in posts {
            out.push(match self.inner.pins.get(post.0.to_be_bytes()).map_err(engine_err)? {
                Some(v) => decode_pins(&v)?,
                None => Vec::new(),
            });
        }
        Ok(out)
    }

    async fn change_pin(&self, post: PostId, comment: CommentId, pin: bool) -> StoreResult<PinChange> {
        let change = {
            // Read-modify-write of the post's list: without the lock two concurrent pins would
            // both read the same list and the second write would drop the first's pin. No
            // `.await` while it is held.
            let _guard = self.inner.pin_lock.lock();
            let ks = &self.inner.pins;
            let key = post.0.to_be_bytes();
            let current = match ks.get(key).map_err(engine_err)? {
                Some(v) => decode_pins(&v)?,
                None => Vec::new(),
            };
            let change = change_pins(&current, comment, pin);
            if let PinChange::Changed(pins) = &change {
                if pins.is_empty() { ks.remove(key) } else { ks.insert(key, encode_pins(pins)) }
                    .map_err(engine_err)?;
            }
            change
        };
        // Also when unchanged: the list read may be a concurrent caller's write not yet synced.
        self.persist_async().await?;
        Ok(change)
    }

    async fn add_report(
        &self,
        comment: CommentId,
        reporter: UserId,
        reason: ReportReason,
    ) -> StoreResult<ReportOutcome> {
        let s = &*self.inner;
        let row = pair_key(comment.0, reporter.0);
        let count_key = comment.0.to_be_bytes();
        let outcome = {
            // Read-modify-write of the count: without the lock two concurrent first reports of
            // one comment would both read n and both write n + 1. No `.await` while it is held.
            let _guard = s.report_lock.lock();
            let (current, reviewed) = match s.report_counts.get(count_key).map_err(engine_err)? {
                Some(v) => parse_count(&v)?,
                None => (0, 0),
            };
            let outcome = report(s.reports.contains_key(row).map_err(engine_err)?, current, reviewed);
            if outcome.counted {
                let mut batch = s.db.batch();
                batch.insert(&s.reports, row, [V1, reason.code()]);
                batch.insert(&s.report_counts, count_key, count_value(outcome.count, reviewed));
                batch.commit().map_err(engine_err)?;
            }
            outcome
        };
        // Outside the lock: one fsync covers every batch committed before it, so concurrent
        // reporters need not queue behind each other's fsync. Also on the repeat path, since
        // the count read may come from a concurrent caller's batch not yet synced.
        self.persist_async().await?;
        Ok(outcome)
    }

    async fn report_counts(&self, comments: &[CommentId]) -> StoreResult<Vec<u32>> {
        comments
            .iter()
            .map(|c| match self.inner.report_counts.get(c.0.to_be_bytes()).map_err(engine_err)? {
                Some(v) => parse_count(&v).map(|(count, _)| count),
                None => Ok(0),
            })
            .collect()
    }

    async fn set_queued(&self, comment: CommentId, queued: bool) -> StoreResult<()> {
        let ks = &self.inner.mod_queue;
        let key = comment.0.to_be_bytes();
        if queued { ks.insert(key, []) } else { ks.remove(key) }.map_err(engine_err)?;
        self.persist_async().await
    }

    async fn queue(&self, after: Option<CommentId>, limit: usize) -> StoreResult<Vec<CommentId>> {
        // An excluded lower bound rather than `after + 1`, which would wrap at u64::MAX.
        let lo = match after {
            Some(a) => Bound::Excluded(a.0.to_be_bytes()),
            None => Bound::Unbounded,
        };
        self.inner
            .mod_queue
            .range::<[u8; 8], _>((lo, Bound::Unbounded))
            .take(limit)
            .map(|g| g.key().map(|k| CommentId(be_u64(&k, 0))).map_err(engine_err))
            .collect()
    }

    async fn set_held_by(&self, comment: CommentId, held_by: Option<HeldBy>) -> StoreResult<()> {
        let s = &*self.inner;
        let key = comment.0.to_be_bytes();
        match held_by {
            Some(h) => s.holds.insert(key, [V1, h.code()]).map_err(engine_err)?,
            None => {
                // Approved: the reports so far are weighed. Under the reports' lock, so a
                // report counted concurrently is either weighed or counts as new.
                let _guard = s.report_lock.lock();
                let mut batch = s.db.batch();
                batch.remove(&s.holds, key);
                if let Some(v) = s.report_counts.get(key).map_err(engine_err)? {
                    let (count, _) = parse_count(&v)?;
                    batch.insert(&s.report_counts, key, count_value(count, count));
                }
                batch.commit().map_err(engine_err)?;
            }
        }
        self.persist_async().await
    }

    async fn add_appeal(&self, comment: CommentId, message: &str) -> StoreResult<bool> {
        let s = &*self.inner;
        let key = comment.0.to_be_bytes();
        let added = {
            // Check-then-insert: without the lock two concurrent appeals would both be first.
            let _guard = s.report_lock.lock();
            if s.appeals.contains_key(key).map_err(engine_err)? {
                false
            } else {
                let mut v = Vec::with_capacity(1 + message.len());
                v.push(V1);
                v.extend_from_slice(message.as_bytes());
                s.appeals.insert(key, v).map_err(engine_err)?;
                true
            }
        };
        self.persist_async().await?;
        Ok(added)
    }

    async fn queue_notes(&self, comments: &[CommentId]) -> StoreResult<Vec<QueueNote>> {
        let s = &*self.inner;
        comments
            .iter()
            .map(|c| {
                let key = c.0.to_be_bytes();
                let held_by = match s.holds.get(key).map_err(engine_err)? {
                    Some(v) => Some(decode_hold(&v)?),
                    None => None,
                };
                let appeal = match s.appeals.get(key).map_err(engine_err)? {
                    Some(v) => Some(decode_appeal(&v)?),
                    None => None,
                };
                Ok(QueueNote { held_by, appeal })
            })
            .collect()
    }

    async fn add_fingerprint(&self, user: UserId, comment: CommentId, simhash: u64) -> StoreResult<()> {
        self.inner
            .fingerprints
            .insert(pair_key(user.0, comment.0), simhash.to_be_bytes())
            .map_err(engine_err)?;
        self.persist_async().await
    }

    async fn fingerprints(
        &self,
        user: UserId,
        since_comment: CommentId,
        limit: usize,
    ) -> StoreResult<Vec<(CommentId, u64)>> {
        // Keys sort by comment ID within the user, so a reverse scan starts at the newest and
        // the range's lower end stops it at `since_comment` without reading older rows.
        let lo = pair_key(user.0, since_comment.0);
        let hi = pair_key(user.0, u64::MAX);
        let mut out = Vec::with_capacity(limit.min(64));
        for g in self.inner.fingerprints.range(lo..=hi).rev().take(limit) {
            let (k, v) = g.into_inner().map_err(engine_err)?;
            if k.len() != 16 || v.len() != 8 {
                return Err(StoreError::Corrupt { keyspace: "fingerprints", detail: "bad row".into() });
            }
            out.push((CommentId(be_u64(&k, 8)), be_u64(&v, 0)));
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_round_trip_and_reject_garbage() {
        let words = vec!["spoiler".to_owned(), "ü-word".to_owned()];
        assert_eq!(decode_words(&encode_words(&words)).ok(), Some(words));
        assert_eq!(decode_words(&[V1]).ok(), Some(Vec::new()));
        assert!(decode_words(&[]).is_err());
        assert!(decode_words(&[9, b'a']).is_err());
        assert!(decode_words(&[V1, 0xff]).is_err());
    }

    #[test]
    fn holds_and_appeals_decode_and_reject_garbage() {
        assert_eq!(decode_hold(&[V1, HeldBy::Reports.code()]).ok(), Some(HeldBy::Reports));
        assert!(decode_hold(&[V1, 0]).is_err());
        assert!(decode_hold(&[2, 1]).is_err());
        assert!(decode_hold(&[V1]).is_err());
        assert_eq!(decode_appeal(&[V1, b'h', b'i']).ok().as_deref(), Some("hi"));
        assert_eq!(decode_appeal(&[V1]).ok().as_deref(), Some(""));
        assert!(decode_appeal(&[]).is_err());
        assert!(decode_appeal(&[V1, 0xff]).is_err());
    }

    #[test]
    fn pins_round_trip_and_reject_garbage() {
        let pins = vec![CommentId(9), CommentId(1), CommentId(u64::MAX)];
        assert_eq!(decode_pins(&encode_pins(&pins)).ok(), Some(pins));
        assert!(decode_pins(&[]).is_err());
        assert!(decode_pins(&[V1, 1, 2]).is_err());
        assert!(decode_pins(&[2; 9]).is_err());
    }
}
