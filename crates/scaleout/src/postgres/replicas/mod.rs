//! Read replicas: a shard's streaming replica (`store.postgres_replicas`) answers the reads
//! that may trail the primary a little, while it is measured fresh enough.
//!
//! - **Which reads.** Viewer-liked lookups (`liked_among`, `liked_ids`: the reverse index,
//!   which trails the writes anyway and sits behind the own-likes records in Redis), likers
//!   pages (`likers`, `recent_likers_many`) and comment pages (`top_level`, `replies`). They
//!   go through [`PgStore::read`]; everything else (writes, counters, offsets, leases, the
//!   records a write is decided on) takes `conn`, the primary.
//! - **Freshness is measured** (`lag`): a tracker per replica reads the primary's WAL position
//!   at time t, then the replica's replay position; once the replay has reached it, the
//!   replica holds every commit made before t ("fresh as of t"). A read goes to the replica
//!   only while now - t <= `replica_max_lag`.
//! - **Read-your-writes** (`fence`): a comment write made through this process keeps its
//!   post's page (and its thread's replies) on the primary until the replica has replayed it.
//! - **Fallback.** A read the replica fails (unreachable, a closed connection, a query that
//!   recovery cancelled) or does not answer within [`READ_TIMEOUT`] (a host that hangs: a
//!   partition that drops packets keeps a TCP connection open for minutes) marks it down and
//!   runs again on the primary: the caller sees no error. The tracker brings it back once it
//!   answers and is fresh again.

mod fence;
mod lag;

pub(crate) use fence::Fence;

use super::{PgOptions, PgStore, PoolWaits, pg_err, pool};
use deadpool_postgres::{Object, Pool};
use likewise_core::{StoreError, StoreResult};
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// How long a read waits for a replica, connection included, before the primary answers it
/// instead. The reads routed here are keyset pages and point lookups that take milliseconds;
/// a replica this slow is better left alone until its tracker finds it answering again.
pub const READ_TIMEOUT: Duration = Duration::from_secs(1);

/// What a shard's replica is doing (for operators and tests).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReplicaStatus {
    /// Reads go to it now: it answered its last probe and is fresh within the bound.
    pub serving: bool,
    /// How long ago it was last known to hold every commit of its primary (`None`: never).
    pub lag: Option<Duration>,
    /// Reads it answered.
    pub reads: u64,
    /// Reads it failed, answered by the primary instead.
    pub fallbacks: u64,
}

/// Microseconds on this process's monotonic clock, from 1 (0 stands for "never").
#[derive(Debug, Clone, Copy)]
pub(crate) struct Clock(Instant);

impl Clock {
    fn now(&self) -> u64 {
        self.0.elapsed().as_micros() as u64 + 1
    }
}

/// What a replica's tracker and its readers share.
#[derive(Debug, Default)]
struct State {
    /// When (on the [`Clock`]) the replica was last known to hold every commit of its
    /// primary; 0: never.
    fresh_as_of: AtomicU64,
    /// It answered its tracker's last probe, and no read has failed on it since.
    up: AtomicBool,
    reads: AtomicU64,
    fallbacks: AtomicU64,
}

/// One shard's replica.
struct Replica {
    shard: usize,
    pool: Pool,
    /// Shared with its tracker.
    state: Arc<State>,
    /// The tracker's task, ended with the store.
    tracker: tokio::task::AbortHandle,
}

impl Drop for Replica {
    fn drop(&mut self) {
        self.tracker.abort();
    }
}

/// Every shard's replica, if it has one, and when a read may use it.
pub(crate) struct Replicas {
    by_shard: Vec<Option<Replica>>,
    /// `replica_max_lag` in microseconds.
    max_lag: u64,
    clock: Clock,
    fences: fence::Fences,
}

impl Replicas {
    /// A pool and a lag tracker (started here: call inside a Tokio runtime) for each shard
    /// that has a replica.
    pub(crate) fn connect(opts: &PgOptions) -> StoreResult<Replicas> {
        if opts.replicas.len() > opts.shards.len() {
            return Err(StoreError::Engine(format!(
                "store.postgres_replicas lists {} URLs for {} shards: at most one per shard, in shard \
                 order (\"\" for a shard without one)",
                opts.replicas.len(),
                opts.shards.len()
            )));
        }
        let clock = Clock(Instant::now());
        let every = lag::every(opts.replica_max_lag);
        let mut by_shard = Vec::with_capacity(opts.shards.len());
        for (shard, primary) in opts.shards.iter().enumerate() {
            let url = opts.replicas.get(shard).map_or("", |u| u.trim());
            if url.is_empty() {
                by_shard.push(None);
                continue;
            }
            let named = |e: String| StoreError::Engine(format!("store.postgres_replicas[{shard}]: {e}"));
            let pool = pool(url, opts.pool_size, PoolWaits::REPLICA).map_err(|e| match e {
                StoreError::Engine(m) => named(m),
                e => named(e.to_string()),
            })?;
            let state = Arc::new(State::default());
            let tracker =
                lag::Tracker::new(shard, primary, url, clock, state.clone(), every).map_err(named)?;
            let tracker = tokio::spawn(tracker.run()).abort_handle();
            by_shard.push(Some(Replica { shard, pool, state, tracker }));
        }
        let max_lag = opts.replica_max_lag.as_micros() as u64;
        Ok(Replicas { by_shard, max_lag, clock, fences: fence::Fences::new(max_lag) })
    }

    /// The replica a read of `shard` may use now: up, fresh within the bound and, for a read
    /// under `fence`, holding this process's last write under it.
    fn route(&self, shard: usize, fence: Option<Fence>) -> Option<&Replica> {
        let r = self.by_shard.get(shard)?.as_ref()?;
        let fresh = r.state.fresh_as_of.load(Ordering::Acquire);
        let ok = r.state.up.load(Ordering::Acquire)
            && fresh != 0
            && self.clock.now().saturating_sub(fresh) <= self.max_lag
            && fence.is_none_or(|f| self.fences.covered(f, fresh));
        ok.then_some(r)
    }

    /// Comment writes under `fences` have just committed on `shard`'s primary.
    pub(crate) fn wrote(&self, shard: usize, fences: &[Fence]) {
        if !fences.is_empty() && self.by_shard.get(shard).is_some_and(Option::is_some) {
            self.fences.record(fences, &self.clock);
        }
    }
}

impl Replica {
    async fn conn(&self) -> StoreResult<Object> {
        self.pool.get().await.map_err(pg_err)
    }

    fn answered(&self) {
        self.state.reads.fetch_add(1, Ordering::Relaxed);
        metrics::counter!("likewise_pg_replica_reads_total", "shard" => self.shard.to_string()).increment(1);
    }

    /// A read failed here: no more reads until the tracker finds the replica answering (and
    /// fresh) again. Idle connections go too when it was unreachable: they may all be dead.
    fn failed(&self, e: &StoreError) {
        self.state.up.store(false, Ordering::Release);
        self.state.fallbacks.fetch_add(1, Ordering::Relaxed);
        metrics::counter!("likewise_pg_replica_fallbacks_total", "shard" => self.shard.to_string())
            .increment(1);
        tracing::warn!(shard = self.shard, error = %e, "replica read failed; reading the primary");
        if matches!(e, StoreError::Unreachable { .. }) {
            self.pool.retain(|_, _| false);
        }
    }
}

impl PgStore {
    /// Run the read `f` on a connection to `shard`'s replica when it may serve it (see the
    /// module docs; `fence`: the comment page it reads), else on the primary. A read the
    /// replica fails runs again on the primary.
    pub(crate) async fn read<T, F, Fut>(&self, shard: usize, fence: Option<Fence>, f: F) -> StoreResult<T>
    where
        F: Fn(Object) -> Fut,
        Fut: Future<Output = StoreResult<T>>,
    {
        if let Some(r) = self.inner.replicas.route(shard, fence) {
            let attempt = async {
                match r.conn().await {
                    Ok(c) => f(c).await,
                    Err(e) => Err(e),
                }
            };
            let timed = tokio::time::timeout(READ_TIMEOUT, attempt).await;
            let answer = timed.unwrap_or_else(|_| {
                // The connection stuck in that read is back in the pool by now (the read
                // was dropped with the statement above): it must not be handed out again.
                r.pool.retain(|_, _| false);
                Err(StoreError::Engine(format!("the replica did not answer within {READ_TIMEOUT:?}")))
            });
            match answer {
                Ok(v) => {
                    r.answered();
                    return Ok(v);
                }
                Err(e) => r.failed(&e),
            }
        }
        f(self.conn(shard).await?).await
    }

    /// A connection to `shard`'s replica whatever its state (`shards status`); `None` when it
    /// has none.
    pub(crate) async fn replica_conn(&self, shard: usize) -> Option<Result<Object, String>> {
        let r = self.inner.replicas.by_shard.get(shard)?.as_ref()?;
        let waited = r.pool.timeouts().create.map_or(0, |d| d.as_secs());
        Some(r.pool.get().await.map_err(|e| super::cause(&e, waited)))
    }

    /// What `shard`'s replica is doing; `None` when it has none.
    pub fn replica_status(&self, shard: usize) -> Option<ReplicaStatus> {
        let replicas = &self.inner.replicas;
        let r = replicas.by_shard.get(shard)?.as_ref()?;
        let fresh = r.state.fresh_as_of.load(Ordering::Acquire);
        Some(ReplicaStatus {
            serving: replicas.route(shard, None).is_some(),
            lag: (fresh != 0).then(|| Duration::from_micros(replicas.clock.now().saturating_sub(fresh))),
            reads: r.state.reads.load(Ordering::Relaxed),
            fallbacks: r.state.fallbacks.load(Ordering::Relaxed),
        })
    }
}

#[cfg(test)]
mod tests;
