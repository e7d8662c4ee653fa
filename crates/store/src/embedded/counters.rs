//! The event log, counters and consumer offsets on the embedded engine.

use super::{EmbeddedStore, engine_err};
use crate::keys::{be_u64, counter_key, num_value, parse_num, target_prefix};
use async_trait::async_trait;
use fjall::{Keyspace, Readable};
use likewise_core::counter::{CounterField, CounterKey, Counts};
use likewise_core::event::Event;
use likewise_core::ids::PostId;
use likewise_core::like::{Target, TargetKind};
use likewise_core::ports::{CounterStore, EventLog, Recount};
use likewise_core::{StoreError, StoreResult};
use std::sync::atomic::Ordering;

/// Highest event sequence in the log (0 when empty).
pub(super) fn last_seq(events: &Keyspace) -> StoreResult<u64> {
    match events.last_key_value() {
        Some(g) => Ok(be_u64(&g.key().map_err(engine_err)?, 0)),
        None => Ok(0),
    }
}

fn decode_event(k: &[u8], v: &[u8]) -> StoreResult<Event> {
    if k.len() != 8 {
        return Err(StoreError::Corrupt { keyspace: "events", detail: "bad key".into() });
    }
    Event::decode(be_u64(k, 0), v)
        .map_err(|e| StoreError::Corrupt { keyspace: "events", detail: e.to_string() })
}

/// Up to `max` events after `after` from the keyspace (when the in-memory tail cannot answer).
pub(super) fn read_events(events: &Keyspace, after: u64, max: usize) -> StoreResult<Vec<Event>> {
    let start = after.saturating_add(1).to_be_bytes();
    let mut out = Vec::new();
    for g in events.range(start..).take(max) {
        let (k, v) = g.into_inner().map_err(engine_err)?;
        out.push(decode_event(&k, &v)?);
    }
    Ok(out)
}

/// Counters are stored as two's-complement i64 inside a versioned u64 record.
fn parse_counter(v: &[u8]) -> StoreResult<i64> {
    Ok(parse_num("counters", v)? as i64)
}

#[async_trait]
impl EventLog for EmbeddedStore {
    async fn read_after(&self, after: u64, max: usize) -> StoreResult<Vec<Event>> {
        if let Some(events) = self.inner.tail.lock().read_after(after, max) {
            return Ok(events);
        }
        read_events(&self.inner.events, after, max)
    }

    async fn head(&self) -> StoreResult<u64> {
        // next_seq is advanced only after a batch is visible, so head never runs ahead.
        Ok(self.inner.next_seq.load(Ordering::SeqCst).saturating_sub(1))
    }

    async fn truncate(&self, upto: u64) -> StoreResult<u64> {
        let s = &*self.inner;
        s.tail.lock().truncate(upto);
        let mut removed = 0u64;
        loop {
            let keys: Vec<_> = s
                .events
                .range(..=upto.to_be_bytes())
                .take(10_000)
                .map(|g| g.key().map_err(engine_err))
                .collect::<StoreResult<_>>()?;
            if keys.is_empty() {
                return Ok(removed);
            }
            let mut batch = s.db.batch();
            for k in &keys {
                batch.remove(&s.events, k.clone());
            }
            batch.commit().map_err(engine_err)?;
            removed += keys.len() as u64;
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
        let s = &*self.inner;
        let counter = match snap.get(&s.counters, counter_key(key)).map_err(engine_err)? {
            Some(v) => parse_counter(&v)?,
            None => 0,
        };
        let offset = match snap.get(&s.offsets, consumer.as_bytes()).map_err(engine_err)? {
            Some(v) => parse_num("offsets", &v)?,
            None => 0,
        };
        let mut pending = 0i64;
        for g in snap.range(&s.events, offset.saturating_add(1).to_be_bytes()..) {
            let (k, v) = g.into_inner().map_err(engine_err)?;
            let e = decode_event(&k, &v)?;
            if concerns(&e) {
                pending += e.delta();
            }
        }
        Ok(Recount { rows, counter, pending })
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
        upto: u64,
        deltas: &[(CounterKey, i64)],
    ) -> StoreResult<Vec<(CounterKey, i64)>> {
        let s = &*self.inner;
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
        for g in snap.prefix(&s.likes, target_prefix(target)) {
            g.key().map_err(engine_err)?;
            rows += 1;
        }
        let key = CounterKey { target, field: CounterField::Likes };
        self.finish_recount(&snap, consumer, key, rows, |e| e.kind.is_like() && e.target == target)
    }

    async fn recount_comments(&self, consumer: &str, post: PostId) -> StoreResult<Recount> {
        let s = &*self.inner;
        let snap = s.db.snapshot();
        let mut rows = 0i64;
        for g in snap.prefix(&s.comments, post.0.to_be_bytes()) {
            let (k, v) = g.into_inner().map_err(engine_err)?;
            let rec =
                likewise_core::write::CommentRecord::decode(likewise_core::ids::CommentId(be_u64(&k, 8)), &v)
                    .map_err(|e| StoreError::Corrupt { keyspace: "comments", detail: e.to_string() })?;
            if rec.status.counts_as_visible() {
                rows += 1;
            }
        }
        let key = CounterKey { target: Target::post(post.0), field: CounterField::Comments };
        self.finish_recount(&snap, consumer, key, rows, |e| !e.kind.is_like() && e.post == post.0)
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
