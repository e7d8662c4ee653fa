//! Moderators' integrity verdicts on the embedded engine (`IntegrityStore`).
//!
//! | keyspace              | key               | value                    | why                         |
//! |-----------------------|-------------------|--------------------------|-----------------------------|
//! | `integrity_decisions` | user(8)           | v1 verdict(1) at_ms(8)   | the latest verdict per user |
//! | `integrity_times`     | at_ms(8) user(8)  | (empty)                  | pages in the order given    |
//!
//! Both rows change in one atomic batch under a lock (the old time row goes with the old
//! verdict), made durable before the call returns: a moderator's decision must not vanish.

use super::error::engine_err;
use super::state::EmbeddedStore;
use crate::keys::{V1, be_u64, pair_key};
use async_trait::async_trait;
use fjall::Readable;
use likewise_core::ids::UserId;
use likewise_core::integrity::{Decision, Verdict};
use likewise_core::ports::IntegrityStore;
use likewise_core::{StoreError, StoreResult};
use std::ops::Bound;

fn encode(d: &Decision) -> [u8; 10] {
    let mut v = [0u8; 10];
    v[0] = V1;
    v[1] = d.verdict.code();
    v[2..].copy_from_slice(&d.at_ms.to_be_bytes());
    v
}

fn decode(user: UserId, v: &[u8]) -> StoreResult<Decision> {
    match v {
        [V1, code, at @ ..] if at.len() == 8 => {
            Verdict::from_code(*code).map(|verdict| Decision { user, verdict, at_ms: be_u64(at, 0) })
        }
        _ => None,
    }
    .ok_or_else(|| StoreError::Corrupt {
        keyspace: "integrity_decisions",
        detail: format!("bad verdict record of {} bytes", v.len()),
    })
}

#[async_trait]
impl IntegrityStore for EmbeddedStore {
    async fn put_decision(&self, d: Decision) -> StoreResult<()> {
        {
            let s = &*self.inner;
            let _guard = s.integrity_lock.lock();
            let key = d.user.0.to_be_bytes();
            let mut batch = s.db.batch();
            if let Some(old) = s.integrity_decisions.get(key).map_err(engine_err)? {
                let old = decode(d.user, &old)?;
                batch.remove(&s.integrity_times, pair_key(old.at_ms, d.user.0));
            }
            batch.insert(&s.integrity_decisions, key, encode(&d));
            batch.insert(&s.integrity_times, pair_key(d.at_ms, d.user.0), []);
            batch.commit().map_err(engine_err)?;
        }
        self.persist_async().await
    }

    async fn decisions(&self, users: &[UserId]) -> StoreResult<Vec<Option<Decision>>> {
        let s = &*self.inner;
        let snap = s.db.snapshot();
        users
            .iter()
            .map(|u| match snap.get(&s.integrity_decisions, u.0.to_be_bytes()).map_err(engine_err)? {
                Some(v) => decode(*u, &v).map(Some),
                None => Ok(None),
            })
            .collect()
    }

    async fn decisions_after(&self, after: (u64, UserId), limit: usize) -> StoreResult<Vec<Decision>> {
        let s = &*self.inner;
        let snap = s.db.snapshot();
        let lo = Bound::Excluded(pair_key(after.0, after.1.0));
        let mut out = Vec::new();
        for g in snap.range::<[u8; 16], _>(&s.integrity_times, (lo, Bound::Unbounded)).take(limit) {
            let k = g.key().map_err(engine_err)?;
            let user = UserId(be_u64(&k, 8));
            // The verdict row is written in the same batch as its time row.
            if let Some(v) = snap.get(&s.integrity_decisions, user.0.to_be_bytes()).map_err(engine_err)? {
                out.push(decode(user, &v)?);
            }
        }
        Ok(out)
    }
}
