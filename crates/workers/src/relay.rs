//! The outbox relay: moves each shard's committed outbox rows to the event stream, in order.
//!
//! Each outbox row (one transaction's events for one subject partition) becomes one message.
//! One relay per shard runs, under the worker's lease on that shard (a second worker process
//! stands by instead of interleaving). Each round publishes up to `batch` unrelayed rows in
//! `seq` order, and only once the stream has acknowledged them records each row's stream
//! sequence. A crash between the publish and the bookkeeping publishes the rows again on
//! restart; the stream recognises them inside its duplicate window and answers with the
//! original sequences.
//!
//! Rows are relayed in `seq` order. Two transactions that touch the same like or comment row
//! are serialized by that row's lock and take their outbox `seq` after it, so the events of
//! one key reach the stream in commit order even when unrelated transactions commit out of
//! `seq` order. Relayed rows are deleted once older than `retain`.

use likewise_core::StoreResult;
use likewise_core::ports::cluster::{EventStream, Outbox};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// Relay tuning.
#[derive(Debug, Clone)]
pub struct RelayOptions {
    /// Most rows per round.
    pub batch: usize,
    /// Pause between rounds that found nothing.
    pub idle: Duration,
    /// How long relayed rows stay in the outbox (reconciliation reads recent ones).
    pub retain: Duration,
}

impl Default for RelayOptions {
    fn default() -> Self {
        RelayOptions { batch: 5_000, idle: Duration::from_millis(5), retain: Duration::from_secs(600) }
    }
}

/// One round: relay up to `batch` rows of `shard`. Returns how many were relayed.
pub async fn relay_once(
    outbox: &dyn Outbox,
    stream: &dyn EventStream,
    shard: usize,
    batch: usize,
) -> StoreResult<usize> {
    let rows = outbox.unrelayed(shard, batch).await?;
    if rows.is_empty() {
        return Ok(0);
    }
    let stream_seqs = stream.publish(shard, &rows).await?;
    let relayed: Vec<(u64, u64)> = rows.iter().map(|r| r.seq).zip(stream_seqs).collect();
    outbox.mark_relayed(shard, &relayed).await?;
    metrics::counter!("likewise_relay_events_total").increment(relayed.len() as u64);
    Ok(relayed.len())
}

/// Relay `shard` until shutdown, then make one last pass. Run it under the shard's lease
/// (one relay per shard: two would interleave publishes).
pub async fn run(
    outbox: Arc<dyn Outbox>,
    stream: Arc<dyn EventStream>,
    shard: usize,
    opts: RelayOptions,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut last_prune = std::time::Instant::now();
    loop {
        match relay_once(&*outbox, &*stream, shard, opts.batch).await {
            Ok(n) if n > 0 && !*shutdown.borrow() => continue,
            Ok(_) => {
                if wait(&mut shutdown, opts.idle).await {
                    // One last pass so nothing committed before shutdown waits for a restart.
                    while let Ok(n) = relay_once(&*outbox, &*stream, shard, opts.batch).await {
                        if n == 0 {
                            break;
                        }
                    }
                    return;
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, shard, "relay round failed; retrying");
                metrics::counter!("likewise_relay_failures_total").increment(1);
                if wait(&mut shutdown, Duration::from_millis(200)).await {
                    return;
                }
            }
        }
        if last_prune.elapsed() > Duration::from_secs(60) {
            last_prune = std::time::Instant::now();
            let before = likewise_service::now_ms().saturating_sub(opts.retain.as_millis() as u64);
            match outbox.prune(shard, before).await {
                Ok(n) if n > 0 => tracing::debug!(shard, removed = n, "outbox pruned"),
                Ok(_) => {}
                Err(e) => tracing::warn!(error = %e, shard, "outbox prune failed"),
            }
        }
    }
}

/// Sleep `d` or until shutdown; true when shutting down.
async fn wait(shutdown: &mut watch::Receiver<bool>, d: Duration) -> bool {
    tokio::select! {
        _ = tokio::time::sleep(d) => *shutdown.borrow(),
        _ = shutdown.changed() => true,
    }
}
