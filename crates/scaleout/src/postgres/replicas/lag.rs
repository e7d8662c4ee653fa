//! A replica's lag, measured rather than assumed.
//!
//! Every `every` (a fifth of the bound, at most 200 ms) a tracker takes the time t, reads the
//! primary's WAL write position (`pg_current_wal_lsn()`), then the replica's replay position
//! (`pg_last_wal_replay_lsn()`). A transaction that had committed before t has its commit
//! record at or below the position read after t (commits wait for their WAL flush), so once
//! the replay has reached that position the replica shows every commit made before t: it is
//! fresh as of t. Positions not reached yet wait for a later probe.
//!
//! Why not `now() - pg_last_xact_replay_timestamp()`: on an idle primary that grows without
//! bound although the replica lacks nothing, and a replica that stopped replaying looks
//! fresh until the primary's next commit. Positions have neither fault.
//!
//! Each tracker has its own two connections (not the pools): a pool busy with requests must
//! not delay the measure, and the replica's connection is also its liveness probe.

use super::{Clock, State};
use crate::postgres::tls;
use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;
use tokio_postgres::Client;
use tokio_postgres_rustls::MakeRustlsConnect;

/// The primary's WAL write position, in bytes from 0/0.
const PRIMARY_LSN: &str = "SELECT (pg_current_wal_lsn() - '0/0'::pg_lsn)::bigint";
/// The replica's replay position, in bytes from 0/0 (NULL on a server that is not a standby).
const REPLAY_LSN: &str = "SELECT (pg_last_wal_replay_lsn() - '0/0'::pg_lsn)::bigint";
/// Time allowed for one probe of one server, connecting included.
const PROBE_TIMEOUT: Duration = Duration::from_secs(1);
/// Samples kept waiting for the replay (a minute at 200 ms); the oldest go first, which only
/// delays the moment a far-behind replica counts as fresh.
const MAX_SAMPLES: usize = 300;

/// How often a tracker probes for a lag bound of `max_lag`.
pub(super) fn every(max_lag: Duration) -> Duration {
    (max_lag / 5).clamp(Duration::from_millis(10), Duration::from_millis(200))
}

/// The primary's positions `(time read, lsn)` the replay has not reached yet, oldest first.
#[derive(Debug, Default)]
pub(super) struct Samples(VecDeque<(u64, i64)>);

impl Samples {
    /// The primary's WAL position `lsn`, read after the time `at`.
    pub(super) fn push(&mut self, at: u64, lsn: i64) {
        if self.0.len() == MAX_SAMPLES {
            self.0.pop_front();
        }
        self.0.push_back((at, lsn));
    }

    /// The replica has replayed up to `replay`: the time of the newest sample reached (the
    /// replica holds every commit made before it), if any; the samples reached are dropped.
    pub(super) fn reached(&mut self, replay: i64) -> Option<u64> {
        let mut at = None;
        while let Some(&(t, lsn)) = self.0.front()
            && lsn <= replay
        {
            at = Some(t);
            self.0.pop_front();
        }
        at
    }
}

/// One connection of a tracker: opened when needed, dropped after an error.
struct Link {
    config: tokio_postgres::Config,
    tls: MakeRustlsConnect,
    client: Option<Client>,
}

impl Link {
    /// A link to `url` (parsed with its TLS parameters, as the pools parse theirs).
    fn new(url: &str) -> Result<Link, String> {
        let tls::Connect { mut config, tls, .. } = tls::connect(url)?;
        config.connect_timeout(PROBE_TIMEOUT);
        Ok(Link { config, tls, client: None })
    }

    /// The one `bigint` (or NULL) `sql` selects.
    async fn lsn(&mut self, sql: &str) -> Result<Option<i64>, String> {
        let (slot, config, tls) = (&mut self.client, &self.config, &self.tls);
        let probe = async move {
            let client = match slot {
                Some(c) if !c.is_closed() => c,
                slot => {
                    let (client, conn) = config.connect(tls.clone()).await.map_err(describe)?;
                    tokio::spawn(conn);
                    slot.insert(client)
                }
            };
            client.query_one(sql, &[]).await.map(|r| r.get::<_, Option<i64>>(0)).map_err(describe)
        };
        let out = tokio::time::timeout(PROBE_TIMEOUT, probe)
            .await
            .unwrap_or_else(|_| Err(format!("no answer within {PROBE_TIMEOUT:?}")));
        if out.is_err() {
            self.client = None;
        }
        out
    }
}

/// A driver error in one line, with its cause (`postgres::pg_cause`).
fn describe(e: tokio_postgres::Error) -> String {
    crate::postgres::pg_cause(&e)
}

/// Measures one replica against its primary; its task is aborted with the store.
pub(super) struct Tracker {
    shard: usize,
    primary: Link,
    replica: Link,
    clock: Clock,
    state: Arc<State>,
    every: Duration,
    samples: Samples,
    /// The replica was found not to be a standby (warned once per finding).
    not_standby: bool,
    /// The replica's URL without its password, for the warning.
    shown: String,
    /// The last probe of the replica failed (warned once per outage, also one from the start).
    failing: bool,
}

impl Tracker {
    /// A tracker of `shard`'s replica at `replica` against its primary at `primary`.
    pub(super) fn new(
        shard: usize,
        primary: &str,
        replica: &str,
        clock: Clock,
        state: Arc<State>,
        every: Duration,
    ) -> Result<Tracker, String> {
        Ok(Tracker {
            shard,
            primary: Link::new(primary)?,
            replica: Link::new(replica)?,
            clock,
            state,
            every,
            samples: Samples::default(),
            not_standby: false,
            shown: tls::redact(replica),
            failing: false,
        })
    }

    /// Probe every `every`, until aborted.
    pub(super) async fn run(mut self) {
        let mut tick = tokio::time::interval(self.every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            self.probe().await;
        }
    }

    async fn probe(&mut self) {
        let (shard, state) = (self.shard, self.state.clone());
        // The time first: every commit before it is at or below the position read after it.
        let at = self.clock.now();
        match self.primary.lsn(PRIMARY_LSN).await {
            Ok(Some(lsn)) => self.samples.push(at, lsn),
            Ok(None) => {}
            // Nothing to compare with: the replica's freshness stops advancing, so reads
            // leave it once the bound passes.
            Err(e) => tracing::debug!(shard, error = %e, "replica lag: the primary's position is unknown"),
        }
        match self.replica.lsn(REPLAY_LSN).await {
            Ok(Some(replay)) => {
                if let Some(t) = self.samples.reached(replay) {
                    state.fresh_as_of.fetch_max(t, Ordering::AcqRel);
                }
                if !state.up.swap(true, Ordering::AcqRel) {
                    tracing::info!(shard, "replica answers; it serves reads while fresh");
                }
                self.not_standby = false;
                self.failing = false;
            }
            Ok(None) => {
                state.up.store(false, Ordering::Release);
                if !std::mem::replace(&mut self.not_standby, true) {
                    tracing::warn!(
                        shard,
                        "store.postgres_replicas: the server is not a standby (no replay position); \
                         reads stay on the primary"
                    );
                }
            }
            Err(e) => {
                state.up.store(false, Ordering::Release);
                // Once per outage, also when the replica never answered (a wrong password, a
                // dead port): else a misconfigured replica went unnoticed, reads quietly on the
                // primary.
                if !std::mem::replace(&mut self.failing, true) {
                    tracing::warn!(
                        "store.postgres_replicas: shard {shard}'s replica ({}) is unusable: {e}; reads go to \
                         the primary",
                        self.shown
                    );
                }
            }
        }
        let fresh = state.fresh_as_of.load(Ordering::Acquire);
        if fresh != 0 {
            let lag_ms = self.clock.now().saturating_sub(fresh) as f64 / 1000.0;
            metrics::gauge!("likewise_pg_replica_lag_ms", "shard" => shard.to_string()).set(lag_ms);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_replay_short_of_every_sample_proves_nothing() {
        let mut s = Samples::default();
        s.push(10, 100);
        s.push(20, 200);
        assert_eq!(s.reached(99), None);
        assert_eq!(s.0.len(), 2);
    }

    #[test]
    fn the_newest_sample_reached_gives_the_freshness_and_later_ones_wait() {
        let mut s = Samples::default();
        s.push(10, 100);
        s.push(20, 200);
        s.push(30, 300);
        assert_eq!(s.reached(250), Some(20));
        assert_eq!(s.reached(250), None, "samples reached are used once");
        assert_eq!(s.reached(300), Some(30));
    }

    #[test]
    fn an_idle_primary_keeps_a_caught_up_replica_fresh() {
        // No new WAL: the same position sampled again is reached again, at a later time.
        let mut s = Samples::default();
        s.push(10, 500);
        assert_eq!(s.reached(500), Some(10));
        s.push(20, 500);
        assert_eq!(s.reached(500), Some(20));
    }

    #[test]
    fn a_full_queue_drops_its_oldest_samples() {
        let mut s = Samples::default();
        for k in 0..MAX_SAMPLES as u64 + 5 {
            s.push(k, k as i64);
        }
        assert_eq!(s.0.len(), MAX_SAMPLES);
        assert_eq!(s.0.front(), Some(&(5, 5)));
        assert_eq!(s.reached(i64::MAX), Some(MAX_SAMPLES as u64 + 4));
    }

    #[test]
    fn probes_run_at_a_fifth_of_the_bound_within_limits() {
        assert_eq!(every(Duration::from_millis(1000)), Duration::from_millis(200));
        assert_eq!(every(Duration::from_millis(250)), Duration::from_millis(50));
        assert_eq!(every(Duration::from_millis(10)), Duration::from_millis(10));
        assert_eq!(every(Duration::from_secs(60)), Duration::from_millis(200));
    }
}
