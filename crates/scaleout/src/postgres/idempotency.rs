//! `Idempotency-Key`s of comment creates on PostgreSQL (migration 11, `comment_keys`).
//!
//! A key lives on its post's shard and is written in the same shard transaction as the
//! comment it created, so both commit or neither. A transaction claims its batch's key rows
//! first, in key order (`ON CONFLICT DO NOTHING`): a second transaction with the same key,
//! from any API node, waits on the first one's row and then finds it committed, so one key
//! makes one comment however many nodes its retries reach, and two nodes' batches never
//! deadlock on each other's keys. Expired keys are deleted by the workers.

use super::comments::{LateFingerprint, comment_op};
use super::placement::Placement;
use super::tx::TxError;
use super::{PgStore, i, pg_err};
use async_trait::async_trait;
use likewise_core::comment::appeal::HeldBy;
use likewise_core::comment::idempotency::{IdempotencyKey, KeyRecord, Keyed};
use likewise_core::event::Event;
use likewise_core::ids::{PostId, UserId};
use likewise_core::ports::IdempotencyStore;
use likewise_core::write::{CommentOp, CommentOutcome, CommentRecord};
use likewise_core::{StoreError, StoreResult};
use tokio_postgres::Transaction;

fn decode(v: &[u8]) -> StoreResult<KeyRecord> {
    KeyRecord::decode(v).map_err(|e| StoreError::Corrupt { keyspace: "comment_keys", detail: e.to_string() })
}

/// Apply a keyed create inside a shard's write transaction: the stored key's record, or the
/// create's outcome with the key stored beside the new comment. `claimed`: this transaction
/// already inserted the key's row for this operation (`write.rs` claims a batch's keys first,
/// in key order); otherwise it is claimed here (a repeat later in the same batch finds the
/// earlier one's row).
#[allow(clippy::too_many_arguments)]
pub(super) async fn keyed_comment_op(
    tx: &Transaction<'_>,
    shard: usize,
    ids: &Placement,
    record: &CommentRecord,
    held_by: Option<HeldBy>,
    keyed: &Keyed,
    now: u64,
    claimed: bool,
    late: &mut Vec<LateFingerprint>,
) -> Result<(CommentOutcome, Vec<Event>), TxError> {
    let (caller, key) = (i(keyed.caller.0), keyed.key.as_str());
    let claimed = claimed
        || tx
            .query_opt(
                "INSERT INTO comment_keys (caller, key, created_at_ms, record, post_id) VALUES ($1, $2, $3, '', $4)
                 ON CONFLICT DO NOTHING RETURNING 1",
                &[&caller, &key, &i(now), &i(record.post.0)],
            )
            .await?
            .is_some();
    if !claimed {
        let row = tx
            .query_one("SELECT record FROM comment_keys WHERE caller = $1 AND key = $2", &[&caller, &key])
            .await?;
        let stored = decode(row.get::<_, &[u8]>(0))?;
        return Ok((CommentOutcome::Replayed(Box::new(stored)), Vec::new()));
    }
    let create = CommentOp::Create(record.clone(), held_by);
    let (outcome, events) = comment_op(tx, shard, ids, &create, now, late).await?;
    match &outcome {
        CommentOutcome::Done(Some(created)) => {
            let r = KeyRecord { fingerprint: keyed.fingerprint, created_ms: now, comment: created.clone() };
            tx.execute(
                "UPDATE comment_keys SET record = $3 WHERE caller = $1 AND key = $2",
                &[&caller, &key, &r.encode()],
            )
            .await?;
        }
        // Nothing was created (the parent went away): the key stays free for a retry.
        _ => {
            tx.execute("DELETE FROM comment_keys WHERE caller = $1 AND key = $2", &[&caller, &key]).await?;
        }
    }
    Ok((outcome, events))
}

#[async_trait]
impl IdempotencyStore for PgStore {
    async fn find_key(
        &self,
        caller: UserId,
        key: &IdempotencyKey,
        post: PostId,
    ) -> StoreResult<Option<KeyRecord>> {
        let c = self.conn(self.shard_of_post(post)).await?;
        let row = c
            .query_opt(
                "SELECT record FROM comment_keys WHERE caller = $1 AND key = $2",
                &[&i(caller.0), &key.as_str()],
            )
            .await
            .map_err(pg_err)?;
        row.map(|r| decode(r.get::<_, &[u8]>(0))).transpose()
    }

    async fn purge_keys(&self, created_before_ms: u64) -> StoreResult<u64> {
        let mut removed = 0;
        for shard in 0..self.shard_count() {
            let c = self.conn(shard).await?;
            removed += c
                .execute("DELETE FROM comment_keys WHERE created_at_ms < $1", &[&i(created_before_ms)])
                .await
                .map_err(pg_err)?;
        }
        Ok(removed)
    }

    async fn key_count(&self) -> StoreResult<u64> {
        let mut n = 0u64;
        for shard in 0..self.shard_count() {
            let c = self.conn(shard).await?;
            let v: i64 = c.query_one("SELECT count(*) FROM comment_keys", &[]).await.map_err(pg_err)?.get(0);
            n += v.max(0) as u64;
        }
        Ok(n)
    }
}
