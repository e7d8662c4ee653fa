//! The deployment ports on PostgreSQL (`likewise_core::ports::cluster`): leases are
//! session-scoped advisory locks, the outbox is read and marked by the relay, and the reverse
//! index is written by its stream consumer; `likewise reconcile` repairs likers lists.

use super::{PgStore, i, pg_err, u};
use async_trait::async_trait;
use likewise_core::ids::PostId;
use likewise_core::like::Target;
use likewise_core::ports::CounterStore;
use likewise_core::ports::cluster::{
    Lease, LeaseName, Leases, LikerPageRepair, Outbox, OutboxRow, OutboxWakeups, Partitioned, ReverseChange,
    ReverseIndex,
};
use likewise_core::{StoreError, StoreResult};
use std::sync::Arc;

/// Advisory-lock keys: shard workers add the shard number; the deployment-wide ones live on shard 0.
const SHARD_LEASE: i64 = 0x4c57_5348_0000;
const NOTIFIER_LEASE: i64 = 0x4c57_4e4f_0000;
const EXPORT_LEASE: i64 = 0x4c57_4558_0000;
const TRENDING_LEASE: i64 = 0x4c57_5452_0000;
/// A partitioned consumer's partition leases: this plus `consumer * 0x1_0000 + partition`.
const PART_LEASE: i64 = 0x4c57_5041_0000_0000;
/// Held shared by every worker process that shares the partitioned consumers: how many hold
/// it is how many members there are.
const MEMBER_LOCK: i64 = 0x4c57_4d45_4d42;

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

/// The one session (on shard 0) that holds every partition lease of this process
/// ([`LeaseName::Part`]) and its share of [`MEMBER_LOCK`]: a lease per partition would be a
/// connection per partition, 64 per consumer. Its loss (the server ends it after
/// [`LEASE_IDLE_LIMIT`] without a word, or it breaks) loses every partition lease and the
/// membership together, as a crash does; the next use opens a new one (a new generation:
/// leases of the old one never hold again).
#[derive(Default)]
pub(crate) struct PartSession {
    state: tokio::sync::Mutex<Option<Session>>,
    /// Generations handed out so far.
    generations: std::sync::atomic::AtomicU64,
    /// Whether this process counts itself among the members ([`Leases::join`]).
    joined: std::sync::atomic::AtomicBool,
}

struct Session {
    conn: Option<deadpool_postgres::ClientWrapper>,
    pool: deadpool_postgres::Pool,
    generation: u64,
    /// When the session last answered.
    answered: std::time::Instant,
}

impl Drop for Session {
    fn drop(&mut self) {
        if let Some(mut c) = self.conn.take() {
            deadpool::managed::Manager::detach(self.pool.manager(), &mut c);
        }
    }
}

impl Session {
    fn client(&self) -> &deadpool_postgres::ClientWrapper {
        self.conn.as_ref().expect("set while the session lives")
    }

    /// A round trip within [`LEASE_CHECK_LIMIT`], unless one succeeded in the last 500 ms.
    async fn alive(&mut self) -> bool {
        if self.client().is_closed() {
            return false;
        }
        if self.answered.elapsed() < std::time::Duration::from_millis(500) {
            return true;
        }
        let ok = matches!(
            tokio::time::timeout(LEASE_CHECK_LIMIT, self.client().simple_query("")).await,
            Ok(Ok(_))
        );
        if ok {
            self.answered = std::time::Instant::now();
        }
        ok
    }
}

/// A partition lease: an advisory lock held by the process's [`PartSession`] of one
/// generation.
struct PartLease {
    session: Arc<PartSession>,
    generation: u64,
    key: i64,
}

#[async_trait]
impl Lease for PartLease {
    async fn holds(&self) -> bool {
        let mut st = self.session.state.lock().await;
        match st.as_mut() {
            Some(s) if s.generation == self.generation => {
                if s.alive().await {
                    true
                } else {
                    *st = None;
                    false
                }
            }
            _ => false,
        }
    }
}

impl Drop for PartLease {
    /// Given back in the background on the session that took it (nothing to give back once
    /// that session is gone: its locks went with it).
    fn drop(&mut self) {
        let Ok(rt) = tokio::runtime::Handle::try_current() else { return };
        let (session, generation, key) = (self.session.clone(), self.generation, self.key);
        rt.spawn(async move {
            let st = session.state.lock().await;
            if let Some(s) = st.as_ref().filter(|s| s.generation == generation) {
                let _ = s.client().query_one("SELECT pg_advisory_unlock($1)", &[&key]).await;
            }
        });
    }
}

fn part_key(consumer: Partitioned, part: u16) -> i64 {
    let c: i64 = match consumer {
        Partitioned::Notifier => 0,
        Partitioned::Trending => 1,
    };
    PART_LEASE + c * 0x1_0000 + i64::from(part)
}

impl PgStore {
    /// The live partition session, opened (and joined, when this process joined) if there
    /// is none or the last one died.
    async fn part_session<'a>(
        &self,
        st: &'a mut tokio::sync::MutexGuard<'_, Option<Session>>,
    ) -> StoreResult<&'a mut Session> {
        let alive = match st.as_mut() {
            Some(s) => s.alive().await,
            None => false,
        };
        if !alive {
            **st = None;
            let pool = self.pool_of(0)?;
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
                        "shard 0: no connection for the partition leases within {LEASE_CONNECT_LIMIT:?}"
                    )));
                }
            };
            let parts = &self.inner.parts;
            let generation = parts.generations.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
            let s = Session { conn: Some(c), pool, generation, answered: std::time::Instant::now() };
            s.client()
                .simple_query(&format!("SET idle_session_timeout = '{LEASE_IDLE_LIMIT}'"))
                .await
                .map_err(pg_err)?;
            if parts.joined.load(std::sync::atomic::Ordering::SeqCst) {
                s.client()
                    .query_one("SELECT pg_advisory_lock_shared($1)", &[&MEMBER_LOCK])
                    .await
                    .map_err(pg_err)?;
            }
            **st = Some(s);
        }
        Ok(st.as_mut().expect("just set"))
    }
}

#[async_trait]
impl Leases for PgStore {
    async fn members(&self) -> StoreResult<usize> {
        let session = self.inner.parts.clone();
        let mut st = session.state.lock().await;
        let s = self.part_session(&mut st).await?;
        // The holders of MEMBER_LOCK in this database: the key's high and low halves.
        let row = s
            .client()
            .query_one(
                "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted
                   AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
                   AND classid::bigint = $1 AND objid::bigint = $2 AND objsubid = 1",
                &[&(MEMBER_LOCK >> 32), &(MEMBER_LOCK & 0xffff_ffff)],
            )
            .await
            .map_err(pg_err)?;
        s.answered = std::time::Instant::now();
        Ok((row.get::<_, i64>(0).max(1)) as usize)
    }

    async fn taken_parts(&self, consumer: Partitioned) -> StoreResult<Option<Vec<u16>>> {
        let lo = part_key(consumer, 0);
        let c = self.conn(0).await?;
        let rows = c
            .query(
                "SELECT objid::bigint FROM pg_locks WHERE locktype = 'advisory' AND granted
                   AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
                   AND classid::bigint = $1 AND objid::bigint >= $2 AND objid::bigint < $3 AND objsubid = 1",
                &[&(lo >> 32), &(lo & 0xffff_ffff), &((lo & 0xffff_ffff) + 0x1_0000)],
            )
            .await
            .map_err(pg_err)?;
        Ok(Some(rows.iter().map(|r| (r.get::<_, i64>(0) - (lo & 0xffff_ffff)) as u16).collect()))
    }

    async fn join(&self) -> StoreResult<()> {
        let session = self.inner.parts.clone();
        let mut st = session.state.lock().await;
        let s = self.part_session(&mut st).await?;
        if !session.joined.swap(true, std::sync::atomic::Ordering::SeqCst) {
            s.client()
                .query_one("SELECT pg_advisory_lock_shared($1)", &[&MEMBER_LOCK])
                .await
                .map_err(pg_err)?;
        }
        Ok(())
    }

    async fn try_take(&self, name: LeaseName) -> StoreResult<Option<Box<dyn Lease>>> {
        let (shard, key) = match name {
            LeaseName::Shard(s) => (s, SHARD_LEASE + s as i64),
            LeaseName::Notifier => (0, NOTIFIER_LEASE),
            LeaseName::Export => (0, EXPORT_LEASE),
            LeaseName::Trending => (0, TRENDING_LEASE),
            LeaseName::Part(consumer, part) => {
                let key = part_key(consumer, part);
                let session = self.inner.parts.clone();
                let mut st = session.state.lock().await;
                let s = self.part_session(&mut st).await?;
                let got: bool = s
                    .client()
                    .query_one("SELECT pg_try_advisory_lock($1)", &[&key])
                    .await
                    .map_err(pg_err)?
                    .get(0);
                if !got {
                    return Ok(None);
                }
                let generation = s.generation;
                drop(st);
                return Ok(Some(Box::new(PartLease { session, generation, key })));
            }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::postgres::testing::TestShards;
    use likewise_core::ids::UserId;
    use likewise_core::notify::{Change, NotifKey, NotifKind};
    use likewise_core::ports::NotificationStore;
    use likewise_core::ports::cluster::part_consumer;
    use std::time::Duration;

    /// Wait until `f` holds (a background unlock, a session the server ends).
    async fn eventually<F: std::future::Future<Output = bool>>(what: &str, mut f: impl FnMut() -> F) {
        for _ in 0..100 {
            if f().await {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("{what}");
    }

    /// Two worker processes (two stores on the same shards) share the partitions: both count
    /// as members, a partition one holds is refused to the other and listed as taken, and
    /// once the holder's session ends (a crash) the other takes it over, its membership gone
    /// until it comes back. A partition given back is free at once. A stale holder's commit
    /// is refused by its partition's fence, and only that partition's.
    #[tokio::test]
    async fn processes_share_partition_leases_and_a_stale_holder_is_fenced_off() {
        let t = TestShards::create(2).await;
        let (a, b) = (t.store().await, t.store().await);
        let part = |p| LeaseName::Part(Partitioned::Notifier, p);
        a.join().await.expect("join a");
        assert_eq!(a.members().await.expect("members"), 1);
        b.join().await.expect("join b");
        assert_eq!(a.members().await.expect("members"), 2);
        assert_eq!(b.members().await.expect("members"), 2);

        let held = a.try_take(part(3)).await.expect("take").expect("free");
        assert!(b.try_take(part(3)).await.expect("take").is_none(), "held by a");
        let b4 = b.try_take(part(4)).await.expect("take").expect("free");
        let mut taken = b.taken_parts(Partitioned::Notifier).await.expect("taken").expect("listed");
        taken.sort();
        assert_eq!(taken, [3, 4]);
        assert!(held.holds().await && b4.holds().await);

        // a's writer of partition 3 and b's of partition 4.
        let name3 = part_consumer("notifications", 3);
        let name4 = part_consumer("notifications", 4);
        let add = |post: u64, actor: u64| Change::Add {
            key: NotifKey { recipient: UserId(1), post: PostId(post), kind: NotifKind::PostLiked },
            actor: UserId(actor),
            comment: None,
            ts_ms: 1_000 + actor,
        };
        let old = a.fence_notifications(&name3).await.expect("fence");
        let fence4 = b.fence_notifications(&name4).await.expect("fence");
        a.apply_notifications(&name3, old, 10, &[add(3, 10)]).await.expect("holder of 3");

        // a's session ends (the server ends a crashed process's session the same way).
        let admin = t.client(0).await;
        admin
            .execute(
                "SELECT pg_terminate_backend(pid) FROM pg_locks WHERE locktype = 'advisory'
                   AND objid::bigint = $1 AND objsubid = 1",
                &[&(part_key(Partitioned::Notifier, 3) & 0xffff_ffff)],
            )
            .await
            .expect("terminate");
        let h = &held;
        eventually("a's lease of 3 is lost", || async move { !h.holds().await }).await;
        let bb = &b;
        eventually("b counts one member", || async move { bb.members().await.expect("members") == 1 }).await;
        let took = b.try_take(part(3)).await.expect("take").expect("free once a's session ended");
        let new = b.fence_notifications(&name3).await.expect("fence");
        assert!(new > old);
        // a, not knowing yet, commits: refused, nothing changed.
        let stale = a.apply_notifications(&name3, old, 20, &[add(3, 11)]).await;
        assert!(matches!(stale, Err(StoreError::Superseded(_))), "{stale:?}");
        assert_eq!(CounterStore::offset(&a, &name3).await.expect("offset"), 10, "the refused offset");
        // The other partition's writer is not fenced off by it.
        b.apply_notifications(&name4, fence4, 12, &[add(4, 12)]).await.expect("holder of 4");
        b.apply_notifications(&name3, new, 21, &[add(3, 13)]).await.expect("successor of 3");
        assert_eq!(CounterStore::offset(&b, &name3).await.expect("offset"), 21);

        // a comes back: a new session, counted again.
        assert_eq!(a.members().await.expect("members"), 2);
        // b gives partition 4 back: a can take it.
        drop(b4);
        let mut again = None;
        for _ in 0..100 {
            again = a.try_take(part(4)).await.expect("take");
            if again.is_some() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert!(again.is_some(), "4 is free once given back");
        drop(took);
    }
}
