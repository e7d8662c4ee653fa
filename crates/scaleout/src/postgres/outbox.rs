//! The outbox, read directly, and the reverse-index projection.
//!
//! In production the relay (`crate::stream::relay`) publishes outbox rows to JetStream and
//! consumers read them there. Reading a shard's outbox directly ([`OutboxLog`]) is what a
//! single-shard store offers the conformance suite and tools; with one shard its order is a
//! total order. Each row packs the events of one transaction for one subject partition, so
//! a direct reader's position is the row's `seq` and the event's index in it ([`position`]).
//!
//! [`apply_reverse`] writes a round of the reverse index (each key's final state, computed by
//! `likewise_core::reverse`): one delete and one insert per user shard, shared by the stream
//! consumer (through the `ReverseIndex` port) and by [`PgStore::settle`]. Replaying a round is
//! harmless.

use super::{PgStore, i, pg_err, u};
use async_trait::async_trait;
use likewise_core::event::Event;
use likewise_core::ports::EventLog;
use likewise_core::reverse::{ReverseChange, reverse_changes};
use likewise_core::{StoreError, StoreResult};

/// Bits of a direct-read position that index an event inside its outbox row.
pub const INDEX_BITS: u32 = 16;

/// Most events one outbox row may hold (the write path's batches are capped below this).
pub const MAX_EVENTS_PER_ROW: usize = (1 << INDEX_BITS) - 1;

/// Unpack a row's events; `seq(i)` gives the i-th event its position.
pub fn unpack(body: &[u8], seq: impl Fn(usize) -> u64) -> StoreResult<Vec<Event>> {
    likewise_core::event::unpack(body, seq)
        .map_err(|e| StoreError::Corrupt { keyspace: "outbox", detail: e.to_string() })
}

/// The position of event `i` of outbox row `seq`, when the outbox is read directly.
pub fn position(seq: u64, i: usize) -> u64 {
    (seq << INDEX_BITS) | i as u64
}

/// One shard's outbox as an event log (positions from [`position`]).
pub struct OutboxLog {
    store: PgStore,
    shard: usize,
}

impl OutboxLog {
    /// The outbox of `shard`.
    pub fn new(store: PgStore, shard: usize) -> Self {
        OutboxLog { store, shard }
    }
}

#[async_trait]
impl EventLog for OutboxLog {
    async fn read_after(&self, after: u64, max: usize) -> StoreResult<Vec<Event>> {
        let c = self.store.conn(self.shard).await?;
        let rows = c
            .query(
                "SELECT seq, body FROM outbox WHERE seq >= $1 ORDER BY seq LIMIT $2",
                &[&i(after >> INDEX_BITS), &(max as i64 + 1)],
            )
            .await
            .map_err(pg_err)?;
        let mut out = Vec::new();
        for r in &rows {
            let seq = u(r.get(0));
            out.extend(
                unpack(r.get::<_, &[u8]>(1), |k| position(seq, k))?.into_iter().filter(|e| e.seq > after),
            );
            if out.len() >= max {
                break;
            }
        }
        out.truncate(max);
        Ok(out)
    }

    async fn head(&self) -> StoreResult<u64> {
        let c = self.store.conn(self.shard).await?;
        let r = c
            .query_opt("SELECT seq, events FROM outbox ORDER BY seq DESC LIMIT 1", &[])
            .await
            .map_err(pg_err)?;
        Ok(r.map_or(0, |r| position(u(r.get(0)), (r.get::<_, i32>(1) as usize).saturating_sub(1))))
    }

    async fn truncate(&self, upto: u64) -> StoreResult<u64> {
        let c = self.store.conn(self.shard).await?;
        let rows = c
            .query("DELETE FROM outbox WHERE (seq << 16) + events - 1 <= $1 RETURNING events", &[&i(upto)])
            .await
            .map_err(pg_err)?;
        Ok(rows.iter().map(|r| r.get::<_, i32>(0) as u64).sum())
    }
}

/// New reverse-index rows, as plain rows: a created-like event is a transition, so its key
/// has no row unless the round is a replay (or another writer races it, only during a lease
/// handover or beside `settle`): then the statement fails on the primary key and
/// [`REVERSE_INSERT`] takes over. Relikes whose unlike is in the same round are deleted first.
/// A plain row costs 1.6 us of PostgreSQL CPU against 2.3 behind the probe and 2.8 with `ON
/// CONFLICT DO NOTHING` (`docs/benchmarks.md`). A row holds the key alone: nothing reads a
/// time from the reverse index (migration 26 made `liked_at` nullable, 8 bytes less a row).
const REVERSE_APPEND: &str = "INSERT INTO user_likes (user_id, kind, target)
     SELECT * FROM unnest($1::bigint[], $2::smallint[], $3::bigint[])";
/// The same behind a per-row probe, for a round that may hold existing keys: almost every key
/// is new, and an upsert's speculative insertion costs about twice a plain row. The probe is a
/// LATERAL ... LIMIT 1 (one lookup per row, never a hash join over the table), and the primary
/// key is the table's only index: with a second one the planner may probe through it on a
/// young, unanalyzed table, as it did on `likes` (see `write.rs`).
const REVERSE_INSERT: &str = "INSERT INTO user_likes (user_id, kind, target)
     SELECT n.* FROM unnest($1::bigint[], $2::smallint[], $3::bigint[]) AS n(user_id, kind, target)
     LEFT JOIN LATERAL (SELECT true AS hit FROM user_likes r
                        WHERE r.user_id = n.user_id AND r.kind = n.kind AND r.target = n.target
                        LIMIT 1) x ON true
     WHERE x.hit IS NULL";
/// Every key that has no row yet, whoever inserts meanwhile.
const REVERSE_UPSERT: &str = "INSERT INTO user_likes (user_id, kind, target)
     SELECT * FROM unnest($1::bigint[], $2::smallint[], $3::bigint[])
     ON CONFLICT (user_id, kind, target) DO NOTHING";
const REVERSE_DELETE: &str = "DELETE FROM user_likes r
     USING unnest($1::bigint[], $2::smallint[], $3::bigint[]) AS d(u, k, t)
     WHERE r.user_id = d.u AND r.kind = d.k AND r.target = d.t";

/// Run `sql` as the connection's prepared statement (prepared on first use).
async fn execute_cached(
    c: &deadpool_postgres::Object,
    sql: &str,
    params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
) -> Result<u64, tokio_postgres::Error> {
    c.execute(&c.prepare_cached(sql).await?, params).await
}

/// Apply like events to the user-keyed reverse index (each key's final state).
pub async fn project_reverse(store: &PgStore, events: &[Event]) -> StoreResult<usize> {
    let changes = reverse_changes(events);
    apply_reverse(store, &changes).await?;
    Ok(changes.len())
}

/// What one round did.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct ReverseRound {
    /// Shards where the plain insert met an existing row and the probing insert redid it.
    pub fallbacks: usize,
}

/// Write a round's final states, one delete and one insert per user shard.
pub(super) async fn apply_reverse(store: &PgStore, changes: &[ReverseChange]) -> StoreResult<ReverseRound> {
    let mut round = ReverseRound::default();
    for (shard, idx) in store.group(changes, |c| store.shard_of_user(c.user)) {
        let pick = |keep: &dyn Fn(&ReverseChange) -> bool| -> Vec<&ReverseChange> {
            idx.iter().map(|k| &changes[*k]).filter(|c| keep(c)).collect()
        };
        let add = pick(&|c| c.liked_at.is_some());
        // Every key unliked in this round: the unlikes, and the relikes whose old row goes
        // first, so that the plain insert below meets no row outside a replay.
        let del = pick(&|c| c.unliked);
        let c = store.conn(shard).await?;
        if !del.is_empty() {
            let (users, kinds, targets) = key_arrays(&del);
            execute_cached(&c, REVERSE_DELETE, &[&users, &kinds, &targets]).await.map_err(pg_err)?;
        }
        if !add.is_empty() {
            let (users, kinds, targets) = key_arrays(&add);
            let params: [&(dyn tokio_postgres::types::ToSql + Sync); 3] = [&users, &kinds, &targets];
            match execute_cached(&c, REVERSE_APPEND, &params).await {
                Ok(_) => {}
                Err(e) if e.code() == Some(&tokio_postgres::error::SqlState::UNIQUE_VIOLATION) => {
                    round.fallbacks += 1;
                    metrics::counter!("likewise_reverse_index_fallbacks_total").increment(1);
                    insert_existing(&c, &params).await?;
                }
                Err(e) => return Err(pg_err(e)),
            }
        }
    }
    Ok(round)
}

/// The (user, kind, target) columns of `changes`, as statement arrays.
fn key_arrays(changes: &[&ReverseChange]) -> (Vec<i64>, Vec<i16>, Vec<i64>) {
    (
        changes.iter().map(|c| i(c.user.0)).collect(),
        changes.iter().map(|c| i16::from(c.target.kind.code())).collect(),
        changes.iter().map(|c| i(c.target.id)).collect(),
    )
}

/// Insert a round some of whose keys already have rows (a replay, or a racing writer).
async fn insert_existing(
    c: &deadpool_postgres::Object,
    params: &[&(dyn tokio_postgres::types::ToSql + Sync); 3],
) -> StoreResult<()> {
    match execute_cached(c, REVERSE_INSERT, params).await {
        Ok(_) => Ok(()),
        // Another writer inserted one of the keys meanwhile (only during a lease handover, or
        // beside `settle`): nothing was inserted; insert the keys still missing.
        Err(e) if e.code() == Some(&tokio_postgres::error::SqlState::UNIQUE_VIOLATION) => {
            execute_cached(c, REVERSE_UPSERT, params).await.map(|_| ()).map_err(pg_err)
        }
        Err(e) => Err(pg_err(e)),
    }
}

/// Consumer name under which [`PgStore::settle`] tracks each shard's outbox.
const SETTLE: &str = "reverse-index-direct";

impl PgStore {
    /// Bring the reverse index up to date by reading every shard's outbox directly (tests and
    /// tools; in production the stream consumer does this continuously).
    pub async fn settle(&self) -> StoreResult<()> {
        for shard in 0..self.shard_count() {
            let consumer = format!("{SETTLE}@{shard}");
            let log = OutboxLog::new(self.clone(), shard);
            let mut at = likewise_core::ports::CounterStore::offset(self, &consumer).await?;
            loop {
                let events = log.read_after(at, 10_000).await?;
                let Some(last) = events.last() else { break };
                at = last.seq;
                project_reverse(self, &events).await?;
                self.set_offset(&consumer, at).await?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::postgres::testing::TestShards;
    use likewise_core::ids::UserId;
    use likewise_core::like::Target;
    use std::time::Duration;

    fn ev(seq: u64, created: bool, user: u64, post: u64, ts: u64) -> Event {
        Event::like(seq, created, Target::post(post), UserId(1), UserId(user), ts, post)
    }

    /// (user, target) of every reverse-index row, in key order.
    async fn rows(s: &PgStore) -> Vec<(i64, i64)> {
        let c = s.conn(0).await.expect("conn");
        c.query("SELECT user_id, target FROM user_likes ORDER BY user_id, target", &[])
            .await
            .expect("rows")
            .iter()
            .map(|r| (r.get(0), r.get(1)))
            .collect()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn new_likes_replays_relikes_and_unlikes_land_as_final_states() {
        let t = TestShards::create(1).await;
        let s = t.store().await;
        let round = [ev(1, true, 7, 42, 100), ev(2, true, 8, 42, 101), ev(3, true, 7, 43, 102)];
        assert_eq!(
            apply_reverse(&s, &reverse_changes(&round)).await.expect("apply"),
            ReverseRound { fallbacks: 0 }
        );
        let want = vec![(7, 42), (7, 43), (8, 42)];
        assert_eq!(rows(&s).await, want);
        // A replayed round writes the same final states again, through the probing insert.
        assert_eq!(apply_reverse(&s, &reverse_changes(&round)).await.expect("replay").fallbacks, 1);
        assert_eq!(rows(&s).await, want);
        // Unlike then relike of (7, 42) in one round: the row stays, beside a key that is new in the same round; its old row is deleted first, so the
        // plain insert meets no row.
        let relike = [ev(4, false, 7, 42, 200), ev(5, true, 7, 42, 201), ev(6, true, 9, 42, 202)];
        assert_eq!(apply_reverse(&s, &reverse_changes(&relike)).await.expect("relike").fallbacks, 0);
        assert_eq!(rows(&s).await, vec![(7, 42), (7, 43), (8, 42), (9, 42)]);
        assert_eq!(
            apply_reverse(&s, &reverse_changes(&[ev(7, false, 8, 42, 300)])).await.expect("unlike").fallbacks,
            0
        );
        assert_eq!(rows(&s).await, vec![(7, 42), (7, 43), (9, 42)]);
        // Relike of a key unliked in an earlier round: no row, no fallback.
        assert_eq!(
            apply_reverse(&s, &reverse_changes(&[ev(8, true, 8, 42, 400)])).await.expect("relike").fallbacks,
            0
        );
        assert_eq!(rows(&s).await, vec![(7, 42), (7, 43), (8, 42), (9, 42)]);
    }

    /// Another writer (a lease handover) inserts one of the round's keys while the round runs.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_key_inserted_by_another_writer_meanwhile_is_upserted() {
        let t = TestShards::create(1).await;
        let s = t.store().await;
        let mut other = t.client(0).await;
        let tx = other.transaction().await.expect("begin");
        tx.execute("INSERT INTO user_likes (user_id, kind, target) VALUES (7, 1, 42)", &[])
            .await
            .expect("insert");
        let round = {
            let s = s.clone();
            tokio::spawn(async move {
                project_reverse(&s, &[ev(1, true, 7, 42, 100), ev(2, true, 8, 42, 101)]).await
            })
        };
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(!round.is_finished(), "the round did not wait for the other writer's row");
        tx.commit().await.expect("commit");
        round.await.expect("join").expect("the round succeeds");
        assert_eq!(rows(&s).await, vec![(7, 42), (8, 42)]);
    }
}
