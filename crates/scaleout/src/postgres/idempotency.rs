//! `Idempotency-Key`s of comment creates on PostgreSQL (migration 11, `comment_keys`).
//!
//! A key lives on its post's shard and is written in the same shard transaction as the
//! comment it created, so both commit or neither. A transaction claims its batch's key rows
//! first, all in one statement and in key order (`ON CONFLICT DO NOTHING`), and reads the
//! records of the keys it could not claim in one more: a second transaction with the same
//! key, from any API node, waits on the first one's row and then finds it committed, so one
//! key makes one comment however many nodes its retries reach, and two nodes' batches never
//! deadlock on each other's keys. The batch's creates then store their keys' records in one
//! statement (`creates.rs`); a create that made nothing frees its key for a retry. Expired
//! keys are deleted by the workers.

use super::tx::TxError;
use super::{PgStore, i, pg_err};
use async_trait::async_trait;
use deadpool_postgres::Transaction;
use likewise_core::comment::idempotency::{IdempotencyKey, KeyRecord, Keyed};
use likewise_core::ids::{PostId, UserId};
use likewise_core::ports::IdempotencyStore;
use likewise_core::write::WriteOp;
use likewise_core::{StoreError, StoreResult};
use std::collections::HashMap;

fn decode(v: &[u8]) -> StoreResult<KeyRecord> {
    KeyRecord::decode(v).map_err(|e| StoreError::Corrupt { keyspace: "comment_keys", detail: e.to_string() })
}

/// A key as its row says: (caller, key).
pub(super) type KeyId = (i64, String);

/// The key of a keyed create.
pub(super) fn key_id(keyed: &Keyed) -> KeyId {
    (i(keyed.caller.0), keyed.key.as_str().to_string())
}

/// A key of the batch as this transaction sees it.
#[derive(Debug, Clone)]
pub(super) enum KeyState {
    /// Claimed by this transaction (its row holds no record yet): the next create under it
    /// creates.
    Mine,
    /// Stored, by an earlier transaction or by an earlier create of this one: a create under
    /// it is a repeat.
    Stored(KeyRecord),
    /// A create under it made nothing and gave it back: the next create claims it again.
    Free,
}

/// Claim the keys of the batch's keyed creates (`ops`) and read the records of the others.
pub(super) async fn claim_batch_keys(
    tx: &Transaction<'_>,
    ops: &[&WriteOp],
    now: u64,
) -> Result<HashMap<KeyId, KeyState>, TxError> {
    let keys: Vec<(KeyId, i64)> = ops
        .iter()
        .filter_map(|op| match op {
            WriteOp::KeyedComment(r, _, k) => Some((key_id(k), i(r.post.0))),
            _ => None,
        })
        .collect();
    claim(tx, keys, now).await
}

/// Claim `keys` (each with the post of the first create that uses it) in one statement, in
/// key order, before anything else touches them: transactions of two API nodes holding the
/// same keys then wait for each other in one order instead of deadlocking (each claiming its
/// first key, then waiting on the other's). The keys already stored are read in one more
/// statement. Every key comes back [`KeyState::Mine`] or [`KeyState::Stored`].
pub(super) async fn claim(
    tx: &Transaction<'_>,
    mut keys: Vec<(KeyId, i64)>,
    now: u64,
) -> Result<HashMap<KeyId, KeyState>, TxError> {
    if keys.is_empty() {
        return Ok(HashMap::new());
    }
    // One row per key: the first create that uses it names the post (a stable sort).
    keys.sort_by(|a, b| a.0.cmp(&b.0));
    keys.dedup_by(|a, b| a.0 == b.0);
    let callers: Vec<i64> = keys.iter().map(|((c, _), _)| *c).collect();
    let names: Vec<&str> = keys.iter().map(|((_, k), _)| k.as_str()).collect();
    let posts: Vec<i64> = keys.iter().map(|(_, p)| *p).collect();
    let insert = tx
        .prepare_cached(
            "INSERT INTO comment_keys (caller, key, created_at_ms, record, post_id)
             SELECT c, k, $3, '', p FROM unnest($1::bigint[], $2::text[], $4::bigint[]) AS t(c, k, p) ORDER BY c, k
             ON CONFLICT DO NOTHING RETURNING caller, key",
        )
        .await?;
    let rows = tx.query(&insert, &[&callers, &names, &i(now), &posts]).await?;
    let mut out: HashMap<KeyId, KeyState> =
        rows.iter().map(|r| ((r.get(0), r.get(1)), KeyState::Mine)).collect();
    let (others_c, others_k): (Vec<i64>, Vec<&str>) =
        keys.iter().filter(|(id, _)| !out.contains_key(id)).map(|((c, k), _)| (*c, k.as_str())).unzip();
    if others_c.is_empty() {
        return Ok(out);
    }
    let select = tx
        .prepare_cached(
            "SELECT s.caller, s.key, s.record FROM comment_keys s
             JOIN unnest($1::bigint[], $2::text[]) AS t(c, k) ON s.caller = t.c AND s.key = t.k",
        )
        .await?;
    for r in tx.query(&select, &[&others_c, &others_k]).await? {
        out.insert((r.get(0), r.get(1)), KeyState::Stored(decode(r.get::<_, &[u8]>(2))?));
    }
    if out.len() < keys.len() {
        // Stored a moment ago, gone now: removed by the expiry between the two statements.
        // The part fails and commits nothing; a retry claims the key.
        return Err(TxError::Fail(StoreError::Engine(
            "an idempotency key vanished while it was read".into(),
        )));
    }
    Ok(out)
}

/// Store the records of keys whose creates made their comments (one statement).
pub(super) async fn store_records(tx: &Transaction<'_>, stored: &[(KeyId, Vec<u8>)]) -> Result<(), TxError> {
    if stored.is_empty() {
        return Ok(());
    }
    let callers: Vec<i64> = stored.iter().map(|((c, _), _)| *c).collect();
    let names: Vec<&str> = stored.iter().map(|((_, k), _)| k.as_str()).collect();
    let records: Vec<&[u8]> = stored.iter().map(|(_, r)| r.as_slice()).collect();
    let update = tx
        .prepare_cached(
            "UPDATE comment_keys s SET record = t.r
             FROM unnest($1::bigint[], $2::text[], $3::bytea[]) AS t(c, k, r)
             WHERE s.caller = t.c AND s.key = t.k",
        )
        .await?;
    tx.execute(&update, &[&callers, &names, &records]).await?;
    Ok(())
}

/// Give back the keys whose creates made nothing (the parent went away): a retry may create
/// (one statement).
pub(super) async fn free_keys(tx: &Transaction<'_>, freed: &[KeyId]) -> Result<(), TxError> {
    if freed.is_empty() {
        return Ok(());
    }
    let callers: Vec<i64> = freed.iter().map(|(c, _)| *c).collect();
    let names: Vec<&str> = freed.iter().map(|(_, k)| k.as_str()).collect();
    let delete = tx
        .prepare_cached(
            "DELETE FROM comment_keys s USING unnest($1::bigint[], $2::text[]) AS t(c, k)
             WHERE s.caller = t.c AND s.key = t.k",
        )
        .await?;
    tx.execute(&delete, &[&callers, &names]).await?;
    Ok(())
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
