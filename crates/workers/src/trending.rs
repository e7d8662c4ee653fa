//! The trending consumer: folds like and comment events into per-post one-minute windows
//! (`likewise_core::trending`) and saves them, with both rankings, as one snapshot together
//! with its offset (`SnapshotStore`), every `save_every`.
//!
//! It survives restarts (it resumes from the snapshot and its offset), and it is replayable:
//! delete the `trending` snapshot and it rebuilds from the start of the log's retention.
//! Replaying an event it already folded is impossible: state and offset move in one write.

use likewise_core::StoreResult;
use likewise_core::ports::{EventLog, SnapshotStore};
use likewise_core::trending::Trending;
use likewise_service::trending::TRENDING;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// Trending tuning.
#[derive(Debug, Clone)]
pub struct TrendingOptions {
    /// How often the snapshot is saved.
    pub save_every: Duration,
    /// How often it is saved while no event came: the rankings move with the clock alone
    /// too, but slowly (a scale-out deployment saves less often when idle, a transaction
    /// each time).
    pub idle_save_every: Duration,
    /// How often new events are folded in: often enough that they are read from the log's
    /// in-memory tail rather than from storage.
    pub follow_every: Duration,
    /// Events read per log call.
    pub read_chunk: usize,
}

impl Default for TrendingOptions {
    fn default() -> Self {
        TrendingOptions {
            save_every: Duration::from_secs(1),
            idle_save_every: Duration::from_secs(1),
            follow_every: Duration::from_millis(50),
            read_chunk: 16_384,
        }
    }
}

/// The saved state and its offset (empty at 0 when none was saved, or it cannot be read).
pub async fn load(snapshots: &dyn SnapshotStore) -> StoreResult<(u64, Trending)> {
    Ok(match snapshots.load_snapshot(TRENDING).await? {
        Some((offset, body)) => match Trending::decode(&body) {
            Some(t) => (offset, t),
            None => {
                tracing::warn!("trending snapshot unreadable; rebuilding from the log");
                (0, Trending::default())
            }
        },
        None => (0, Trending::default()),
    })
}

/// Fold in the events after `upto` (until the log is drained, at most 1,000,000), moving
/// `upto` past them. Returns how many were folded.
pub async fn fold(
    log: &dyn EventLog,
    state: &mut Trending,
    upto: &mut u64,
    read_chunk: usize,
) -> StoreResult<usize> {
    let mut n = 0;
    loop {
        let events = log.read_after(*upto, read_chunk).await?;
        let _span = likewise_core::trace::consumer_span("trending", &events);
        for e in &events {
            state.apply(e);
        }
        n += events.len();
        match events.last() {
            Some(last) => *upto = last.seq,
            None => break,
        }
        if events.len() < read_chunk || n >= 1_000_000 {
            break;
        }
    }
    Ok(n)
}

/// Save the state with every event up to `upto` folded in, as the snapshot at `upto`.
async fn checkpoint(
    log: &dyn EventLog,
    snapshots: &dyn SnapshotStore,
    state: &mut Trending,
    offset: &mut u64,
    upto: u64,
) -> StoreResult<()> {
    let now = likewise_service::now_ms();
    state.prune(now);
    snapshots.save_snapshot(TRENDING, upto, &state.encode(now)).await?;
    metrics::counter!("likewise_trending_events_total").increment(upto.saturating_sub(*offset));
    *offset = upto;
    log.committed(upto).await?;
    metrics::gauge!("likewise_trending_posts").set(state.len() as f64);
    Ok(())
}

/// Fold in the new events and save. Returns the events folded in.
pub async fn round(
    log: &dyn EventLog,
    snapshots: &dyn SnapshotStore,
    state: &mut Trending,
    offset: &mut u64,
    read_chunk: usize,
) -> StoreResult<usize> {
    let mut upto = *offset;
    let n = fold(log, state, &mut upto, read_chunk).await?;
    checkpoint(log, snapshots, state, offset, upto).await?;
    Ok(n)
}

/// Run from `(offset, state)` (see [`load`]) until shutdown.
pub async fn run(
    log: Arc<dyn EventLog>,
    snapshots: Arc<dyn SnapshotStore>,
    (mut offset, mut state): (u64, Trending),
    opts: TrendingOptions,
    shutdown: watch::Receiver<bool>,
) {
    let mut ticker = crate::Ticker::new(opts.follow_every.min(opts.save_every), shutdown);
    let mut upto = offset;
    let mut last_save = std::time::Instant::now();
    while ticker.next().await {
        let step = async {
            fold(&*log, &mut state, &mut upto, opts.read_chunk).await?;
            let every =
                if upto == offset { opts.idle_save_every.max(opts.save_every) } else { opts.save_every };
            if last_save.elapsed() >= every {
                last_save = std::time::Instant::now();
                checkpoint(&*log, &*snapshots, &mut state, &mut offset, upto).await?;
            }
            Ok::<_, likewise_core::StoreError>(())
        };
        if let Err(e) = step.await {
            tracing::warn!(error = %e, "trending round failed; retrying");
            match load(&*snapshots).await {
                Ok((o, t)) => (offset, state) = (o, t),
                Err(e) => tracing::warn!(error = %e, "reloading the trending snapshot failed"),
            }
            upto = offset;
        }
    }
}
