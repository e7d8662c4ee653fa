//! `Idempotency-Key`s of comment creates on the embedded engine.
//!
//! | keyspace            | key                          | value          | why                       |
//! |---------------------|------------------------------|----------------|---------------------------|
//! | `comment_keys`      | caller(8) key                | KeyRecord v1   | a repeat finds its answer |
//! | `comment_key_times` | created_ms(8) caller(8) key  | (empty)        | expiry: oldest first      |
//!
//! A keyed create is resolved in the write batch (`write.rs`): the key as this batch left it,
//! or as stored, decides; a new key is written into the same batch as its comment, so one
//! commit (and one fsync) makes both durable or neither. Expired keys are removed with their
//! time entries under the write lock, so no keyed create interleaves with a removal.

use super::batch::Batch;
use super::comments::CommentOverlay;
use super::error::engine_err;
use super::state::EmbeddedStore;
use async_trait::async_trait;
use fjall::Keyspace;
use likewise_core::comment::appeal::HeldBy;
use likewise_core::comment::idempotency::{IdempotencyKey, KeyRecord, Keyed};
use likewise_core::ids::{PostId, UserId};
use likewise_core::ports::IdempotencyStore;
use likewise_core::write::{CommentOp, CommentOutcome, CommentRecord};
use likewise_core::{StoreError, StoreResult};
use std::collections::HashMap;
use std::sync::atomic::Ordering;

/// Keys removed per expiry batch (the write lock is released between batches).
const PURGE_CHUNK: usize = 1_000;

fn key_of(caller: UserId, key: &str) -> Vec<u8> {
    let mut k = Vec::with_capacity(8 + key.len());
    k.extend_from_slice(&caller.0.to_be_bytes());
    k.extend_from_slice(key.as_bytes());
    k
}

fn time_key_of(created_ms: u64, key: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(8 + key.len());
    k.extend_from_slice(&created_ms.to_be_bytes());
    k.extend_from_slice(key);
    k
}

fn decode(v: &[u8]) -> StoreResult<KeyRecord> {
    KeyRecord::decode(v).map_err(|e| StoreError::Corrupt { keyspace: "comment_keys", detail: e.to_string() })
}

fn load(comment_keys: &Keyspace, key: &[u8]) -> StoreResult<Option<KeyRecord>> {
    match comment_keys.get(key).map_err(engine_err)? {
        Some(v) => decode(&v).map(Some),
        None => Ok(None),
    }
}

/// Keys stored by the current batch.
#[derive(Default)]
pub(super) struct KeyOverlay {
    stored: HashMap<Vec<u8>, KeyRecord>,
}

impl KeyOverlay {
    /// Apply a keyed create: answer the key already stored (by this batch or before), or
    /// create the comment through `comments` and store the key with it.
    pub(super) fn apply(
        &mut self,
        b: &mut Batch<'_>,
        comments: &mut CommentOverlay,
        record: &CommentRecord,
        held_by: Option<HeldBy>,
        keyed: &Keyed,
        now_ms: u64,
    ) -> StoreResult<CommentOutcome> {
        let key = key_of(keyed.caller, keyed.key.as_str());
        let existing = match self.stored.get(&key) {
            Some(r) => Some(r.clone()),
            None => load(&b.s.comment_keys, &key)?,
        };
        if let Some(r) = existing {
            return Ok(CommentOutcome::Replayed(Box::new(r)));
        }
        let outcome = comments.apply(b, &CommentOp::Create(record.clone(), held_by), now_ms)?;
        if let CommentOutcome::Done(Some(created)) = &outcome {
            let r =
                KeyRecord { fingerprint: keyed.fingerprint, created_ms: now_ms, comment: created.clone() };
            b.batch.insert(&b.s.comment_keys, key.clone(), r.encode());
            b.batch.insert(&b.s.comment_key_times, time_key_of(now_ms, &key), []);
            self.stored.insert(key, r);
        }
        Ok(outcome)
    }

    /// Keys this batch stores (counted once the batch is committed).
    pub(super) fn len(&self) -> usize {
        self.stored.len()
    }
}

/// How many keys are stored (counted once at open; then kept by the write path and expiry).
pub(super) fn count_keys(times: &Keyspace) -> StoreResult<u64> {
    let mut n = 0u64;
    for g in times.iter() {
        g.key().map_err(engine_err)?;
        n += 1;
    }
    Ok(n)
}

#[async_trait]
impl IdempotencyStore for EmbeddedStore {
    async fn find_key(
        &self,
        caller: UserId,
        key: &IdempotencyKey,
        _post: PostId,
    ) -> StoreResult<Option<KeyRecord>> {
        load(&self.inner.comment_keys, &key_of(caller, key.as_str()))
    }

    async fn purge_keys(&self, created_before_ms: u64) -> StoreResult<u64> {
        let s = &*self.inner;
        let end = created_before_ms.to_be_bytes();
        let mut removed = 0u64;
        loop {
            let _serial = s.write_lock.lock();
            let mut expired = Vec::new();
            for g in s.comment_key_times.range(..end.to_vec()).take(PURGE_CHUNK) {
                expired.push(g.key().map_err(engine_err)?.to_vec());
            }
            if expired.is_empty() {
                return Ok(removed);
            }
            let mut batch = s.db.batch();
            // A key and its time entry are written and removed together, and nothing writes
            // while the lock is held: each expired entry's key is the record it was made with.
            for t in &expired {
                batch.remove(&s.comment_key_times, t.clone());
                batch.remove(&s.comment_keys, t[8..].to_vec());
            }
            batch.commit().map_err(engine_err)?;
            let n = expired.len() as u64;
            let _ =
                s.key_count.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |c| Some(c.saturating_sub(n)));
            removed += n;
        }
    }

    async fn key_count(&self) -> StoreResult<u64> {
        Ok(self.inner.key_count.load(Ordering::SeqCst))
    }
}
