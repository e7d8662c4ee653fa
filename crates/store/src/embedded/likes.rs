//! Like rows on the embedded engine: the atomic write batch and the reads of both indexes.

use super::{EmbeddedStore, engine_err};
use crate::keys::{
    be_u64, like_key, liker_key, num_value, parse_num, target_prefix, user_kind_prefix, user_like_key,
};
use async_trait::async_trait;
use likewise_core::event::{Event, EventKind};
use likewise_core::ids::UserId;
use likewise_core::like::{LikeOp, LikeOutcome, Target, TargetKind, transition};
use likewise_core::ports::{LikeReader, LikeWriteEngine, Liker};
use likewise_core::{StoreError, StoreResult};
use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::ops::Bound;
use std::sync::atomic::Ordering;

/// The state of one (target, user) key while a batch is resolved.
struct Touched {
    target: Target,
    user: UserId,
    /// Like timestamp before the batch (None = not liked).
    before: Option<u64>,
    /// Like timestamp after the ops seen so far.
    now: Option<u64>,
}

impl LikeWriteEngine for EmbeddedStore {
    fn apply(&self, ops: &[LikeOp]) -> StoreResult<Vec<LikeOutcome>> {
        let s = &*self.inner;
        let _serial = s.write_lock.lock();
        let mut seq = s.next_seq.load(Ordering::SeqCst);
        let mut batch = s.db.batch().durability(None);
        let mut touched: HashMap<[u8; 17], Touched> = HashMap::with_capacity(ops.len());
        let mut order: Vec<[u8; 17]> = Vec::with_capacity(ops.len());
        let mut outcomes = Vec::with_capacity(ops.len());

        for op in ops {
            let key = like_key(op.target, op.user);
            let entry = match touched.entry(key) {
                Entry::Occupied(e) => e.into_mut(),
                Entry::Vacant(v) => {
                    let before = match s.likes.get(key).map_err(engine_err)? {
                        Some(v) => Some(parse_num("likes", &v)?),
                        None => None,
                    };
                    order.push(key);
                    v.insert(Touched { target: op.target, user: op.user, before, now: before })
                }
            };
            let (liked, changed) = transition(entry.now.is_some(), op.action);
            let mut event_seq = None;
            if changed {
                entry.now = liked.then_some(op.ts_ms);
                let kind = if liked { EventKind::LikeCreated } else { EventKind::LikeRemoved };
                let event = Event {
                    seq,
                    kind,
                    target: op.target,
                    target_author: op.target_author,
                    actor: op.user,
                    ts_ms: op.ts_ms,
                };
                batch.insert(&s.events, seq.to_be_bytes(), event.encode());
                event_seq = Some(seq);
                seq += 1;
            }
            outcomes.push(LikeOutcome { liked, changed, event_seq });
        }

        // Rows are written once per key with the batch's final state: fjall gives every item of
        // a batch the same sequence number, so two writes of one key in a batch would be
        // ambiguous. Per-key arrival order was already resolved above.
        for key in &order {
            let t = &touched[key];
            if t.before == t.now {
                continue;
            }
            let ukey = user_like_key(t.user, t.target.kind, t.target.id);
            if let Some(old_ts) = t.before
                && t.now != Some(old_ts)
            {
                batch.remove(&s.likers, liker_key(t.target, old_ts, t.user));
            }
            match t.now {
                Some(ts) => {
                    batch.insert(&s.likes, *key, num_value(ts));
                    batch.insert(&s.user_likes, ukey, num_value(ts));
                    batch.insert(&s.likers, liker_key(t.target, ts, t.user), []);
                }
                None => {
                    batch.remove(&s.likes, *key);
                    batch.remove(&s.user_likes, ukey);
                }
            }
        }
        batch.commit().map_err(engine_err)?;
        s.next_seq.store(seq, Ordering::SeqCst);
        Ok(outcomes)
    }

    fn sync(&self) -> StoreResult<()> {
        self.persist()
    }
}

#[async_trait]
impl LikeReader for EmbeddedStore {
    async fn liked_among(&self, user: UserId, kind: TargetKind, ids: &[u64]) -> StoreResult<Vec<bool>> {
        // Point reads on one user's partition of the reverse index: memtable and bloom-filter
        // hits measured in microseconds, so they run inline rather than on a blocking thread.
        ids.iter()
            .map(|id| self.inner.user_likes.contains_key(user_like_key(user, kind, *id)).map_err(engine_err))
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
        let prefix = target_prefix(target);
        let start = Bound::Included(prefix.to_vec());
        let end = match after {
            Some(a) => Bound::Excluded(liker_key(target, a.liked_at_ms, a.user).to_vec()),
            None => Bound::Included(liker_key(target, u64::MAX, UserId(u64::MAX)).to_vec()),
        };
        let mut out = Vec::with_capacity(limit);
        for g in self.inner.likers.range::<Vec<u8>, _>((start, end)).rev().take(limit) {
            let k = g.key().map_err(engine_err)?;
            if k.len() != 25 {
                return Err(StoreError::Corrupt { keyspace: "likers", detail: "bad key".into() });
            }
            out.push(Liker { user: UserId(be_u64(&k, 17)), liked_at_ms: be_u64(&k, 9) });
        }
        Ok(out)
    }
}
