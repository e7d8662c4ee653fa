//! The event log, counters and consumer offsets on the embedded engine.

use super::error::engine_err;
use super::state::EmbeddedStore;
use crate::keys::{be_u64, counter_key, num_value, parse_num, target_prefix};
use async_trait::async_trait;
use fjall::{Keyspace, Readable};
use likewise_core::comment::thread::tally;
use likewise_core::counter::{CounterField, CounterKey, Counts};
use likewise_core::event::Event;
use likewise_core::ids::{CommentId, PostId};
use likewise_core::like::{Target, TargetKind};
use likewise_core::ports::{CounterStore, EventLog, Recount};
use likewise_core::write::CommentRecord;
use likewise_core::{StoreError, StoreResult};
use std::collections::HashMap;
use std::sync::atomic::Ordering;

// The `events` keyspace holds packed rows: each write batch's events back to back under
// the first one's sequence (`write.rs`), so a row covers `key ..= key + len - 1` and rows
// are contiguous. Rows written before packing hold one event and read the same way.

fn corrupt(detail: impl ToString) -> StoreError {
    StoreError::Corrupt { keyspace: "events", detail: detail.to_string() }
}

fn row_first(k: &[u8]) -> StoreResult<u64> {
    if k.len() != 8 {
        return Err(corrupt("bad key"));
    }
    Ok(be_u64(k, 0))
}

/// The last sequence a row covers.
fn row_last(k: &[u8], v: &[u8]) -> StoreResult<u64> {
    let n = likewise_core::event::packed_len(v).map_err(corrupt)?;
    Ok(row_first(k)? + n as u64 - 1)
}

fn row_events(k: &[u8], v: &[u8]) -> StoreResult<Vec<Event>> {
    let first = row_first(k)?;
    likewise_core::event::unpack(v, |i| first + i as u64).map_err(corrupt)
}

/// Highest event sequence in the log (0 when empty).
pub(super) fn last_seq(events: &Keyspace) -> StoreResult<u64> {
    match events.last_key_value() {
        Some(g) => {
            let (k, v) = g.into_inner().map_err(engine_err)?;
            row_last(&k, &v)
        }
        None => Ok(0),
    }
}

/// Key of the row holding event `after + 1` (the row starting at or before it), where a
/// forward scan for the events after `after` begins.
fn scan_start(events: &impl Readable, ks: &Keyspace, after: u64) -> StoreResult<[u8; 8]> {
    let next = after.saturating_add(1).to_be_bytes();
    match events.range(ks, ..=next).next_back() {
        Some(g) => Ok(row_first(&g.key().map_err(engine_err)?)?.to_be_bytes()),
        None => Ok(next),
    }
}

/// The events after `after`, in order, from `events` (a snapshot or the live keyspace),
/// until `visit` returns false.
fn scan_events(
    events: &impl Readable,
    ks: &Keyspace,
    after: u64,
    mut visit: impl FnMut(Event) -> bool,
) -> StoreResult<()> {
    for g in events.range(ks, scan_start(events, ks, after)?..) {
        let (k, v) = g.into_inner().map_err(engine_err)?;
        for e in row_events(&k, &v)? {
            if e.seq > after && !visit(e) {
                return Ok(());
            }
        }
    }
    Ok(())
}

/// Up to `max` events after `after` from the keyspace (when the in-memory tail cannot answer).
pub(super) fn read_events(
    db: &fjall::Database,
    events: &Keyspace,
    after: u64,
    max: usize,
) -> StoreResult<Vec<Event>> {
    let mut out = Vec::new();
    if max == 0 {
        return Ok(out);
    }
    scan_events(&db.snapshot(), events, after, |e| {
        out.push(e);
        out.len() < max
    })?;
    Ok(out)
}

/// Counters are stored as two's-complement i64 inside a versioned u64 record.
fn parse_counter(v: &[u8]) -> StoreResult<i64> {
    Ok(parse_num("counters", v)? as i64)
}

#[async_trait]
impl EventLog for EmbeddedStore {
    async fn read_after(&self, after: u64, max: usize) -> StoreResult<Vec<Event>> {
        // The lock only clones the batches' handles; the copy happens after it is released.
        let window = self.inner.tail.lock().read_after(after, max);
        if let Some(read) = window {
            return Ok(read.events());
        }
        read_events(&self.inner.db, &self.inner.events, after, max)
    }

    async fn head(&self) -> StoreResult<u64> {
        // next_seq is advanced only after a batch is visible, so head never runs ahead.
        Ok(self.inner.next_seq.load(Ordering::SeqCst).saturating_sub(1))
    }

    async fn durable_head(&self) -> StoreResult<Option<u64>> {
        Ok(Some(self.inner.durable_seq.load(Ordering::SeqCst)))
    }

    async fn truncate(&self, upto: u64) -> StoreResult<u64> {
        let s = &*self.inner;
        s.tail.lock().truncate(upto);
        let mut removed = 0u64;
        loop {
            // Whole rows only: a row that also holds events after `upto` stays until a later
            // truncation passes its end (rows are contiguous, so only the last one can).
            let mut rows = Vec::new();
            for g in s.events.range(..=upto.to_be_bytes()).take(10_000) {
                let (k, v) = g.into_inner().map_err(engine_err)?;
                let (first, last) = (row_first(&k)?, row_last(&k, &v)?);
                if last > upto {
                    break;
                }
                removed += last - first + 1;
                rows.push(k);
            }
            if rows.is_empty() {
                return Ok(removed);
            }
            let mut batch = s.db.batch();
            for k in rows {
                batch.remove(&s.events, k);
            }
            batch.commit().map_err(engine_err)?;
        }
    }
}

impl EmbeddedStore {
    /// The rest of a recount, in the same snapshot as the rows: the stored counter and the
    /// sum of deltas of the events (selected by `concerns`) that `consumer` has not applied.
    fn finish_recount(
        &self,
        snap: &fjall::Snapshot,
        consumer: &str,
        key: CounterKey,
        rows: i64,
        concerns: impl Fn(&Event) -> bool,
    ) -> StoreResult<Recount> {
        let mut out = self.finish_recounts(snap, consumer, &[(key, rows)], |e| concerns(e).then_some(key))?;
        Ok(out.pop().unwrap_or(Recount { rows, counter: 0, pending: 0 }))
    }

    /// [`EmbeddedStore::finish_recount`] for several counters at once, in order: each
    /// pending event counts for the counter `key_of` names (if it is one of `rows`).
    fn finish_recounts(
        &self,
        snap: &fjall::Snapshot,
        consumer: &str,
        rows: &[(CounterKey, i64)],
        key_of: impl Fn(&Event) -> Option<CounterKey>,
    ) -> StoreResult<Vec<Recount>> {
        let s = &*self.inner;
        let offset = match snap.get(&s.offsets, consumer.as_bytes()).map_err(engine_err)? {
            Some(v) => parse_num("offsets", &v)?,
            None => 0,
        };
        let mut pending: HashMap<CounterKey, i64> = rows.iter().map(|(k, _)| (*k, 0)).collect();
        scan_events(snap, &s.events, offset, |e| {
            if let Some(p) = key_of(&e).and_then(|k| pending.get_mut(&k)) {
                *p += e.delta();
            }
            true
        })?;
        rows.iter()
            .map(|(key, rows)| {
                let counter = match snap.get(&s.counters, counter_key(*key)).map_err(engine_err)? {
                    Some(v) => parse_counter(&v)?,
                    None => 0,
                };
                Ok(Recount { rows: *rows, counter, pending: pending[key] })
            })
            .collect()
    }

    /// A post's stored comments, read in `snap`.
    fn post_comments(&self, snap: &fjall::Snapshot, post: PostId) -> StoreResult<Vec<CommentRecord>> {
        let s = &*self.inner;
        snap.prefix(&s.comments, post.0.to_be_bytes())
            .map(|g| {
                let (k, v) = g.into_inner().map_err(engine_err)?;
                CommentRecord::decode(CommentId(be_u64(&k, 8)), &v)
                    .map_err(|e| StoreError::Corrupt { keyspace: "comments", detail: e.to_string() })
            })
            .collect()
    }
}

#[async_trait]
impl CounterStore for EmbeddedStore {
    async fn counts(&self, targets: &[Target]) -> StoreResult<Vec<Counts>> {
        let s = &*self.inner;
        let snap = s.db.snapshot();
        targets
            .iter()
            .map(|t| {
                let mut c = Counts::default();
                for field in [CounterField::Likes, CounterField::Comments, CounterField::Replies] {
                    let key = counter_key(CounterKey { target: *t, field });
                    if let Some(v) = snap.get(&s.counters, key).map_err(engine_err)? {
                        c.add(field, parse_counter(&v)?);
                    }
                }
                Ok(c)
            })
            .collect()
    }

    async fn apply_deltas(
        &self,
        consumer: &str,
        from: u64,
        upto: u64,
        deltas: &[(CounterKey, i64)],
    ) -> StoreResult<Vec<(CounterKey, i64)>> {
        let s = &*self.inner;
        // One process holds the store and each consumer name has one writer in it, so the
        // check and the commit below need no lock.
        let cur = match s.offsets.get(consumer.as_bytes()).map_err(engine_err)? {
            Some(v) => parse_num("offsets", &v)?,
            None => 0,
        };
        if cur != from {
            return Err(StoreError::Engine(format!(
                "consumer {consumer:?} is at {cur}, not {from}: its offset moved; re-read it"
            )));
        }
        // The aggregator is the only writer of counters, so read-modify-write needs no lock.
        // Not fsynced here: if this batch is lost in a crash its offset is lost with it and the
        // events are applied again. The next like batch's fsync makes it durable anyway.
        let mut batch = s.db.batch();
        let mut new_values = Vec::with_capacity(deltas.len());
        for (key, delta) in deltas {
            let k = counter_key(*key);
            let cur = match s.counters.get(k).map_err(engine_err)? {
                Some(v) => parse_counter(&v)?,
                None => 0,
            };
            let new = cur.wrapping_add(*delta);
            batch.insert(&s.counters, k, num_value(new as u64));
            new_values.push((*key, new));
        }
        batch.insert(&s.offsets, consumer.as_bytes(), num_value(upto));
        batch.commit().map_err(engine_err)?;
        Ok(new_values)
    }

    async fn offset(&self, consumer: &str) -> StoreResult<u64> {
        match self.inner.offsets.get(consumer.as_bytes()).map_err(engine_err)? {
            Some(v) => parse_num("offsets", &v),
            None => Ok(0),
        }
    }

    async fn recount_likes(&self, consumer: &str, target: Target) -> StoreResult<Recount> {
        let s = &*self.inner;
        let snap = s.db.snapshot();
        let mut rows = 0i64;
        // One page holds many likers (`liker_pages.rs`).
        for g in snap.prefix(&s.likers, target_prefix(target)) {
            let v = g.value().map_err(engine_err)?;
            rows += super::liker_pages::count(&v)? as i64;
        }
        let key = CounterKey { target, field: CounterField::Likes };
        self.finish_recount(&snap, consumer, key, rows, |e| e.kind.is_like() && e.target == target)
    }

    async fn recount_comments(&self, consumer: &str, post: PostId) -> StoreResult<Recount> {
        let snap = self.inner.db.snapshot();
        let rows = tally(&self.post_comments(&snap, post)?).comments;
        let key = CounterKey { target: Target::post(post.0), field: CounterField::Comments };
        self.finish_recount(&snap, consumer, key, rows, |e| !e.kind.is_like() && e.post == post.0)
    }

    async fn recount_replies(&self, consumer: &str, post: PostId) -> StoreResult<Vec<(CommentId, Recount)>> {
        let snap = self.inner.db.snapshot();
        let key = |parent: u64| CounterKey { target: Target::comment(parent), field: CounterField::Replies };
        let rows: Vec<(CounterKey, i64)> = tally(&self.post_comments(&snap, post)?)
            .replies
            .into_iter()
            .map(|(p, n)| (key(p.0), n))
            .collect();
        let recounts = self.finish_recounts(&snap, consumer, &rows, |e| {
            (!e.kind.is_like() && e.post == post.0 && e.parent != 0).then(|| key(e.parent))
        })?;
        Ok(rows.iter().map(|(k, _)| CommentId(k.target.id)).zip(recounts).collect())
    }

    async fn fresh_post_likes(&self, consumer: &str, posts: &[PostId]) -> StoreResult<Vec<i64>> {
        let snap = self.inner.db.snapshot();
        let key = |id: u64| CounterKey { target: Target::post(id), field: CounterField::Likes };
        let rows: Vec<(CounterKey, i64)> = posts.iter().map(|p| (key(p.0), 0)).collect();
        let recounts = self.finish_recounts(&snap, consumer, &rows, |e| {
            (e.kind.is_like() && e.target.kind == TargetKind::Post).then(|| key(e.target.id))
        })?;
        Ok(recounts.iter().map(|r| r.counter + r.pending).collect())
    }

    async fn counted_posts(&self, after: Option<PostId>, limit: usize) -> StoreResult<Vec<PostId>> {
        let s = &*self.inner;
        let start = match after {
            Some(p) => {
                let mut k = target_prefix(Target::post(p.0)).to_vec();
                k.push(u8::MAX);
                k
            }
            None => vec![TargetKind::Post.code()],
        };
        let end = vec![TargetKind::Post.code() + 1];
        let mut out: Vec<PostId> = Vec::with_capacity(limit);
        for g in s.counters.range(start..end) {
            let k = g.key().map_err(engine_err)?;
            let id = PostId(be_u64(&k, 1));
            if k.get(9) == Some(&CounterField::Likes.code()) && out.last() != Some(&id) {
                out.push(id);
                if out.len() == limit {
                    break;
                }
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::embedded::tail::EventTail;
    use crate::embedded::{EmbeddedOptions, EmbeddedStore};
    use likewise_core::ids::UserId;
    use likewise_core::like::{LikeAction, LikeOp};
    use likewise_core::ports::WriteEngine;
    use likewise_core::write::WriteOp;

    fn like(user: u64, action: LikeAction) -> WriteOp {
        WriteOp::Like(LikeOp {
            target: Target::post(user % 3 + 1),
            user: UserId(user),
            action,
            target_author: UserId(9),
            post: user % 3 + 1,
            ts_ms: user,
            trace: None,
        })
    }

    /// The packed log, read back from disk, against the events as the writer produced them
    /// (the in-memory tail, which never reads the keyspace): rows written before packing
    /// (one event each, either format), batches of 1 to 40 events, reads starting inside
    /// rows, truncation that keeps a row straddling its bound, and a reopen.
    #[tokio::test]
    async fn packed_rows_read_truncate_and_reopen_exactly() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut model: Vec<Event> = Vec::new();
        {
            let store = EmbeddedStore::open(dir.path(), &EmbeddedOptions::default()).expect("open");
            let mut batch = store.inner.db.batch();
            for seq in 1..=3u64 {
                let e = Event::like(seq, true, Target::post(1), UserId(9), UserId(1000 + seq), seq, 1);
                let v = if seq == 2 {
                    // Format version 1: likes of posts, no post/parent/delta fields.
                    let mut v = e.encode()[..likewise_core::event::EVENT_V1_LEN].to_vec();
                    v[0] = likewise_core::event::EVENT_FORMAT_V1;
                    v
                } else {
                    e.encode().to_vec()
                };
                batch.insert(&store.inner.events, seq.to_be_bytes(), v);
                model.push(e);
            }
            batch.commit().expect("commit");
        }
        let store = EmbeddedStore::open(dir.path(), &EmbeddedOptions::default()).expect("reopen");
        assert_eq!(store.head().await.expect("head"), 3);
        *store.inner.tail.lock() = EventTail::new(1 << 20);
        let mut user = 0u64;
        for size in [1usize, 2, 7, 40, 1, 13, 3] {
            let ops: Vec<WriteOp> = (0..size)
                .map(|i| {
                    user += 1;
                    // Every fifth op unlikes an earlier user: a change whenever that one is liked.
                    if i % 5 == 4 { like(user - 3, LikeAction::Unlike) } else { like(user, LikeAction::Like) }
                })
                .collect();
            store.apply(&ops).expect("apply");
        }
        model.extend(
            store.inner.tail.lock().read_after(3, usize::MAX).expect("tail holds every new event").events(),
        );
        let head = model.len() as u64;
        assert_eq!(store.head().await.expect("head"), head);
        assert!(store.inner.events.len().expect("len") < model.len(), "events are packed into rows");
        let read = |after: u64, max: usize| read_events(&store.inner.db, &store.inner.events, after, max);
        for after in 0..=head + 1 {
            for max in [0, 1, 5, 1_000] {
                let want: Vec<Event> = model.iter().filter(|e| e.seq > after).take(max).copied().collect();
                assert_eq!(read(after, max).expect("read"), want, "after {after}, max {max}");
            }
        }
        // Truncate inside a row: the rows wholly at or below the bound go, the rest reads on.
        let mut truncated = 0;
        for upto in [2, 5, 9, head - 1] {
            truncated += store.truncate(upto).await.expect("truncate");
            let left: Vec<Event> = model.iter().filter(|e| e.seq > upto).copied().collect();
            assert_eq!(read(upto, usize::MAX).expect("read"), left, "after truncating to {upto}");
            let oldest = read(0, 1).expect("read")[0].seq;
            assert!(oldest <= upto + 1, "an event after {upto} was removed");
        }
        assert!(truncated >= 9 && truncated < head, "removed {truncated} of {head}");
        // The last row straddles `head - 1`: it stays, and a reopen finds the head in it.
        drop(store);
        let store = EmbeddedStore::open(dir.path(), &EmbeddedOptions::default()).expect("reopen");
        assert_eq!(store.head().await.expect("head"), head);
        assert_eq!(store.truncate(head).await.expect("truncate"), head - truncated);
        assert!(read_events(&store.inner.db, &store.inner.events, 0, 10).expect("read").is_empty());
    }
}
