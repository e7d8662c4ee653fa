//! The deployment ports on PostgreSQL (`likewise_core::ports::cluster`): leases are
//! session-scoped advisory locks, the outbox is read and marked by the relay, and the reverse
//! index is written by its stream consumer; `likewise reconcile` repairs likers lists.

use super::{PgStore, i, pg_err, u};
use async_trait::async_trait;
use likewise_core::ids::PostId;
use likewise_core::like::Target;
use likewise_core::ports::CounterStore;
use likewise_core::ports::cluster::{
    Lease, LeaseName, Leases, LikerPageRepair, Outbox, OutboxRow, OutboxWakeups, ReverseChange, ReverseIndex,
};
use likewise_core::{StoreError, StoreResult};

/// Advisory-lock keys: shard workers add the shard number; the deployment-wide ones live on shard 0.
const SHARD_LEASE: i64 = 0x4c57_5348_0000;
const NOTIFIER_LEASE: i64 = 0x4c57_4e4f_0000;
const EXPORT_LEASE: i64 = 0x4c57_4558_0000;
const TRENDING_LEASE: i64 = 0x4c57_5452_0000;

/// How long a holder waits for the answer to its lease check (made every second).
const LEASE_CHECK_LIMIT: std::time::Duration = std::time::Duration::from_secs(3);

/// The server ends a lease's session after this long without a word from its holder (it
/// checks every second), releasing the lock: a holder cut off by a partition loses its lease
/// here, and a standby takes it over, whether or not the holder ever hears of it.
const LEASE_IDLE_LIMIT: &str = "5s";

/// How long taking a lease waits for its connection.
const LEASE_CONNECT_LIMIT: std::time::Duration = std::time::Duration::from_secs(5);

/// An exclusive, session-scoped advisory lock: while a process holds it, it is the only one
/// running what the lease names. Its connection is its own, opened beside the shard's pool
/// (same URL, TLS and options) rather than taken from it: a process holds several leases for
/// as long as it runs, and a pool of 3 would otherwise be left with no connection for the
/// work itself. Dropping the lease closes the connection, which releases the lock (a crashed
/// process releases it the same way).
pub struct PgLease {
    conn: Option<deadpool_postgres::ClientWrapper>,
    pool: deadpool_postgres::Pool,
}

#[async_trait]
impl Lease for PgLease {
    async fn holds(&self) -> bool {
        // A round trip: a dead server is noticed even while the connection idles, and a
        // partitioned one within the bound (an answer that never comes is a lost lease; the
        // server ends the session by itself, see `LEASE_IDLE_LIMIT`).
        match &self.conn {
            Some(c) if !c.is_closed() => {
                matches!(tokio::time::timeout(LEASE_CHECK_LIMIT, c.simple_query("")).await, Ok(Ok(_)))
            }
            _ => false,
        }
    }
}

impl Drop for PgLease {
    fn drop(&mut self) {
        if let Some(mut c) = self.conn.take() {
            // Forget its statement cache; dropping the wrapper ends the connection.
            deadpool::managed::Manager::detach(self.pool.manager(), &mut c);
        }
    }
}

#[async_trait]
impl Leases for PgStore {
    async fn try_take(&self, name: LeaseName) -> StoreResult<Option<Box<dyn Lease>>> {
        let (shard, key) = match name {
            LeaseName::Shard(s) => (s, SHARD_LEASE + s as i64),
            LeaseName::Notifier => (0, NOTIFIER_LEASE),
            LeaseName::Export => (0, EXPORT_LEASE),
            LeaseName::Trending => (0, TRENDING_LEASE),
        };
        let pool = self.pool_of(shard)?;
        let c = match tokio::time::timeout(
            LEASE_CONNECT_LIMIT,
            deadpool::managed::Manager::create(pool.manager()),
        )
        .await
        {
            Ok(Ok(c)) => c,
            Ok(Err(e)) => return Err(pg_err(e)),
            Err(_) => {
                return Err(StoreError::Engine(format!(
                    "shard {shard}: no connection for a lease within {LEASE_CONNECT_LIMIT:?}"
                )));
            }
        };
        // Wrapped first, so an error below drops the lease and its connection (the lock).
        let lease = PgLease { conn: Some(c), pool };
        let c = lease.conn.as_ref().expect("just set");
        let got: bool = c.query_one("SELECT pg_try_advisory_lock($1)", &[&key]).await.map_err(pg_err)?.get(0);
        if !got {
            return Ok(None);
        }
        c.simple_query(&format!("SET idle_session_timeout = '{LEASE_IDLE_LIMIT}'")).await.map_err(pg_err)?;
        Ok(Some(Box::new(lease)))
    }
}

#[async_trait]
impl Outbox for PgStore {
    fn shard_count(&self) -> usize {
        PgStore::shard_count(self)
    }

    fn shard_of_post(&self, post: PostId) -> usize {
        PgStore::shard_of_post(self, post)
    }

    async fn unrelayed(&self, shard: usize, max: usize) -> StoreResult<Vec<OutboxRow>> {
        let c = self.conn(shard).await?;
        let rows = c
            .query(
                "SELECT seq, part, body FROM outbox WHERE stream_seq IS NULL ORDER BY seq LIMIT $1",
                &[&(max as i64)],
            )
            .await
            .map_err(pg_err)?;
        Ok(rows
            .iter()
            .map(|r| OutboxRow { seq: u(r.get(0)), part: r.get::<_, i16>(1) as u16, body: r.get(2) })
            .collect())
    }

    async fn mark_relayed(&self, shard: usize, relayed: &[(u64, u64)]) -> StoreResult<()> {
        let seqs: Vec<i64> = relayed.iter().map(|(s, _)| i(*s)).collect();
        let stream_seqs: Vec<i64> = relayed.iter().map(|(_, s)| i(*s)).collect();
        self.conn(shard)
            .await?
            .execute(
                "UPDATE outbox o SET stream_seq = v.s FROM unnest($1::bigint[], $2::bigint[]) AS v(q, s) \
                 WHERE o.seq = v.q",
                &[&seqs, &stream_seqs],
            )
            .await
            .map_err(pg_err)?;
        Ok(())
    }

    async fn prune(&self, shard: usize, before_ms: u64) -> StoreResult<u64> {
        self.conn(shard)
            .await?
            .execute("DELETE FROM outbox WHERE stream_seq IS NOT NULL AND created_ms < $1", &[&i(before_ms)])
            .await
            .map_err(pg_err)
    }

    async fn wakeups(&self, shard: usize) -> StoreResult<Option<Box<dyn OutboxWakeups>>> {
        Ok(Some(Box::new(self.listen_outbox(shard).await?)))
    }
}

#[async_trait]
impl ReverseIndex for PgStore {
    async fn apply(&self, changes: &[ReverseChange]) -> StoreResult<()> {
        super::outbox::apply_reverse(self, changes).await.map(|_| ())
    }

    async fn offset(&self, consumer: &str) -> StoreResult<u64> {
        CounterStore::offset(self, consumer).await
    }

    async fn set_offset(&self, consumer: &str, upto: u64) -> StoreResult<()> {
        PgStore::set_offset(self, consumer, upto).await
    }
}

#[async_trait]
impl LikerPageRepair for PgStore {
    async fn drifted(&self, shard: usize) -> StoreResult<Vec<Target>> {
        self.liker_page_drift(shard).await
    }

    async fn repair(&self, target: Target) -> StoreResult<Option<(i64, i64)>> {
        self.repair_liker_pages(target).await
    }
}
